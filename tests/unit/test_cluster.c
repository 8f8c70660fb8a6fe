/*
 * test_cluster.c - membership lists, hostfiles, Slurm hostlists, and
 * rendezvous ownership (of shards, and of the chunks of shards).
 */
#include "cluster.h"
#include "test.h"

#include "owner_chunk_vectors.h"

static void check_names(const struct larder__members *m, const char *const *want, size_t n)
{
    if (m->count != n) {
        for (size_t i = 0; i < m->count; i++)
            fprintf(stderr, "    %s\n", m->names[i]);
    }
    CHECK_EQ(m->count, n);
    for (size_t i = 0; i < n; i++)
        CHECK(strcmp(m->names[i], want[i]) == 0);
}

TEST(cluster_parse_members)
{
    struct larder__members m = {0};
    CHECK_EQ(larder__members_parse_list(&m, "a:1, b,c:3 a:1", 7461), 0);
    const char *want[] = {"a:1", "b:7461", "c:3"};
    check_names(&m, want, 3);
    larder__members_clear(&m);

    const char file[] = "# nodes\nn1 slots=4\n\n  n2:9000  # fast one\nn1\n";
    CHECK_EQ(larder__members_parse_hostfile(&m, file, sizeof file - 1, 5000), 0);
    const char *want2[] = {"n1:5000", "n2:9000"};
    check_names(&m, want2, 2);
    larder__members_clear(&m);

    CHECK_EQ(larder__members_parse_slurm(&m, "gpu[01-03,07]-ib,login1,x[8-10]", 1), 0);
    const char *want3[] = {"gpu01-ib:1", "gpu02-ib:1", "gpu03-ib:1", "gpu07-ib:1",
                           "login1:1",   "x8:1",       "x9:1",       "x10:1"};
    check_names(&m, want3, 8);
    larder__members_clear(&m);

    /* bad input names what is wrong */
    CHECK_EQ(larder__members_parse_list(&m, "a:0", 1), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "'a:0'") != NULL);
    CHECK_EQ(larder__members_parse_list(&m, "a:x", 1), LARDER_EUSAGE);
    CHECK_EQ(larder__members_parse_list(&m, "bad/name", 1), LARDER_EUSAGE);
    CHECK_EQ(larder__members_parse_slurm(&m, "n[3-1]", 1), LARDER_EUSAGE);
    CHECK_EQ(larder__members_parse_slurm(&m, "n[1-2", 1), LARDER_EUSAGE);
    CHECK_EQ(larder__members_parse_slurm(&m, "n[a]", 1), LARDER_EUSAGE);
    const char bad[] = "ok\nbad/name\n";
    CHECK_EQ(larder__members_parse_hostfile(&m, bad, sizeof bad - 1, 1), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "line 2") != NULL);
    larder__members_clear(&m);
}

TEST(cluster_rendezvous_moves_only_the_changed_share)
{
    struct larder__members four = {0}, three = {0}, five = {0};
    CHECK_EQ(larder__members_parse_list(&four, "n1,n2,n3,n4", 7461), 0);
    CHECK_EQ(larder__members_parse_list(&three, "n1,n2,n4", 7461), 0);      /* n3 left */
    CHECK_EQ(larder__members_parse_list(&five, "n5,n1,n2,n3,n4", 7461), 0); /* n5 joined */
    enum { SHARDS = 20000 };
    size_t per[4] = {0};
    size_t moved_out = 0, moved_in = 0;
    for (uint32_t s = 0; s < SHARDS; s++) {
        size_t o4 = larder__owner(&four, 11, 22, s);
        per[o4]++;
        const char *name4 = four.names[o4];
        const char *name3 = three.names[larder__owner(&three, 11, 22, s)];
        const char *name5 = five.names[larder__owner(&five, 11, 22, s)];
        /* removing n3 moves exactly n3's shards */
        if (strcmp(name4, "n3:7461") == 0) {
            moved_out++;
            CHECK(strcmp(name3, "n3:7461") != 0);
        } else {
            CHECK(strcmp(name3, name4) == 0);
        }
        /* adding n5 moves shards only to n5 */
        if (strcmp(name5, name4) != 0) {
            moved_in++;
            CHECK(strcmp(name5, "n5:7461") == 0);
        }
    }
    /* balanced: each of 4 owns about a quarter */
    for (int i = 0; i < 4; i++)
        CHECK(per[i] > SHARDS / 4 * 9 / 10 && per[i] < SHARDS / 4 * 11 / 10);
    CHECK(moved_out > SHARDS / 4 * 9 / 10 && moved_out < SHARDS / 4 * 11 / 10);
    CHECK(moved_in > SHARDS / 5 * 9 / 10 && moved_in < SHARDS / 5 * 11 / 10);
    /* the owner does not depend on the order the members were listed in */
    struct larder__members shuffled = {0};
    CHECK_EQ(larder__members_parse_list(&shuffled, "n4,n2,n1,n3", 7461), 0);
    for (uint32_t s = 0; s < 1000; s++)
        CHECK(strcmp(four.names[larder__owner(&four, 1, 2, s)],
                     shuffled.names[larder__owner(&shuffled, 1, 2, s)]) == 0);
    larder__members_clear(&four);
    larder__members_clear(&three);
    larder__members_clear(&five);
    larder__members_clear(&shuffled);
}

/* The owners of owner_chunk_vectors.h, computed by owner_chunk_reference.py
 * from the formula in docs/protocol.md with the system's libxxhash. */
TEST(cluster_chunk_owner_matches_the_reference)
{
    size_t clusters = sizeof owner_chunk_clusters / sizeof *owner_chunk_clusters;
    struct larder__members m[8] = {{0}};
    CHECK(clusters <= 8);
    for (size_t c = 0; c < clusters; c++)
        for (size_t i = 0; owner_chunk_clusters[c][i]; i++) {
            const char *name = owner_chunk_clusters[c][i];
            CHECK_EQ(larder__members_add(&m[c], name, strlen(name), 7461), 0);
        }
    size_t n = sizeof owner_chunk_vectors / sizeof *owner_chunk_vectors;
    CHECK(n > 100);
    for (size_t v = 0; v < n; v++) {
        size_t got =
            larder__owner_chunk(&m[owner_chunk_vectors[v].cluster], owner_chunk_vectors[v].id_low,
                                owner_chunk_vectors[v].id_high, owner_chunk_vectors[v].shard,
                                owner_chunk_vectors[v].chunk);
        if (got != owner_chunk_vectors[v].owner)
            fprintf(stderr, "    vector %zu: owner %zu, the reference says %zu\n", v, got,
                    owner_chunk_vectors[v].owner);
        CHECK_EQ(got, owner_chunk_vectors[v].owner);
    }
    /* no members: 0, as larder__owner says */
    struct larder__members none = {0};
    CHECK_EQ(larder__owner_chunk(&none, 1, 2, 3, 4), 0);
    for (size_t c = 0; c < clusters; c++)
        larder__members_clear(&m[c]);
}

/* Over 4 members, 1000 chunks of one shard spread 20-30% each; a member
 * leaving moves only its chunks, one joining takes chunks only to itself. */
TEST(cluster_chunk_owner_spreads_and_moves_only_the_changed_share)
{
    struct larder__members four = {0}, three = {0}, five = {0};
    CHECK_EQ(larder__members_parse_list(&four, "n1,n2,n3,n4", 7461), 0);
    CHECK_EQ(larder__members_parse_list(&three, "n1,n2,n4", 7461), 0);
    CHECK_EQ(larder__members_parse_list(&five, "n1,n2,n3,n4,n5", 7461), 0);
    enum { CHUNKS = 1000 };
    size_t per[4] = {0}, moved_out = 0, moved_in = 0;
    for (uint64_t chunk = 0; chunk < CHUNKS; chunk++) {
        size_t o4 = larder__owner_chunk(&four, 0xabc, 0xdef, 5, chunk);
        per[o4]++;
        const char *name4 = four.names[o4];
        const char *name3 = three.names[larder__owner_chunk(&three, 0xabc, 0xdef, 5, chunk)];
        const char *name5 = five.names[larder__owner_chunk(&five, 0xabc, 0xdef, 5, chunk)];
        if (strcmp(name4, "n3:7461") == 0) {
            moved_out++;
            CHECK(strcmp(name3, "n3:7461") != 0);
        } else {
            CHECK(strcmp(name3, name4) == 0);
        }
        if (strcmp(name5, name4) != 0) {
            moved_in++;
            CHECK(strcmp(name5, "n5:7461") == 0);
        }
    }
    for (int i = 0; i < 4; i++) {
        if (per[i] < CHUNKS / 5 || per[i] > CHUNKS * 3 / 10)
            fprintf(stderr, "    member %d owns %zu of %d chunks\n", i, per[i], CHUNKS);
        CHECK(per[i] >= CHUNKS / 5 && per[i] <= CHUNKS * 3 / 10);
    }
    CHECK_EQ(moved_out, per[2]);
    CHECK(moved_in > CHUNKS / 10 && moved_in < CHUNKS * 3 / 10);
    /* the chunks of one shard do not all follow the shard's owner */
    size_t other = 0;
    for (uint64_t chunk = 0; chunk < 64; chunk++)
        other +=
            larder__owner_chunk(&four, 1, 2, 9, chunk) != larder__owner_chunk(&four, 1, 2, 9, 0);
    CHECK(other > 16);
    larder__members_clear(&four);
    larder__members_clear(&three);
    larder__members_clear(&five);
}
