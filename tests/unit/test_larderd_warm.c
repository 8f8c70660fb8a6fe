/*
 * test_larderd_warm.c - warm staging (src/larderd/warm.c): the pace of
 * --warm-rate, every chunk of every shard staged on a node alone, and in
 * a cluster only the chunks this node owns.
 */
#include "daemon_fixture.h"
#include "larder_pack.h"
#include "test.h"

#include <stdio.h>
#include <time.h>

TEST(larderd_warm_pace)
{
    struct larderd d;
    larderd_init(&d);
    CHECK(warm_pace(&d, 100.0, WARM_CHUNK) == 0); /* unpaced */
    d.config.warm_rate = 4;                       /* MB/s: a 4 MB chunk a second */
    CHECK(warm_pace(&d, 100.0, 4000000) == 0);    /* the first starts at once */
    double wait = warm_pace(&d, 100.0, 4000000);  /* the next a second later */
    CHECK(wait > 0.999 && wait < 1.001);
    wait = warm_pace(&d, 100.5, 2000000); /* after both: 2 s from the first, 1.5 s from now */
    CHECK(wait > 1.499 && wait < 1.501);
    CHECK(warm_pace(&d, 200.0, 4000000) == 0); /* idle meanwhile: no debt carried */
    larderd_free(&d);
}

/* Wait until the dataset is all in the cache. */
static void wait_resident(larder_dataset *dataset)
{
    for (int i = 0; i < 20000; i++) {
        larder_stats s;
        CHECK_EQ(larder_stats_get(dataset, &s), 0);
        if (s.resident_bytes == s.total_bytes) return;
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    CHECK(!"the dataset was not staged in 20 s");
}

TEST(larderd_warm_alone)
{
    const char *index = fixture_dataset("ds", 40, 16 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    uint32_t shards = larder__dataset_num_shards(e->dataset);
    CHECK(shards >= 3);
    CHECK_EQ(warm_owned(&d, e), shards); /* shards under WARM_CHUNK: one job each */
    wait_resident(e->dataset);
    larderd_free(&d);
}

TEST(larderd_warm_owned_chunks_only)
{
    const char *index = fixture_dataset("ds", 60, 8 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct dataset_entry *e;
    int slot;
    /* opened alone (no endpoints to other members: no socket), then as member 1 of 3 */
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    CHECK_EQ(larder__members_parse_list(&d.members, "n0:7461,n1:7461,n2:7461", 7461), 0);
    d.self = 1;
    uint32_t shards = larder__dataset_num_shards(e->dataset), owned = 0;
    CHECK(shards >= 6);
    for (uint32_t s = 0; s < shards; s++) /* shards under a chunk: chunk 0 each */
        owned += larder__owner_chunk(&d.members, e->id_low, e->id_high, s, 0) == 1;
    CHECK(owned > 0 && owned < shards);
    CHECK_EQ(warm_owned(&d, e), owned);
    larderd_free(&d); /* the jobs finish first */
}

/* A shard of several chunks: a member stages only the chunks it owns
 * (samples of 1 MiB, so 4 of them fill a chunk exactly and no fill reaches
 * into a chunk of another owner). */
TEST(larderd_warm_owned_chunks_of_a_large_shard)
{
    enum { SAMPLES = 14, MIB = 1 << 20 };
    static uint8_t data[MIB];
    char path[4096];
    for (int i = 0; i < SAMPLES; i++) {
        test_fill_random(data, sizeof data, (uint64_t)i + 101);
        snprintf(path, sizeof path, "%s/big-src/s%04d.bin", test_dir(), i);
        test_write_file(path, data, sizeof data);
    }
    snprintf(path, sizeof path, "%s/big-src", test_dir());
    const char *sources[] = {path};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = UINT64_C(1) << 30,
                             .jobs = 1};
    char out[4096], index[4200];
    snprintf(out, sizeof out, "%s/big", test_dir());
    CHECK_EQ(larder_pack(sources, 1, out, &o, NULL), 0);
    snprintf(index, sizeof index, "%s/index.larder", out);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    CHECK_EQ(larder__dataset_num_shards(e->dataset), 1);
    CHECK_EQ(larder__dataset_shard_size(e->dataset, 0), (uint64_t)SAMPLES * MIB);
    /* member lists until member 1 owns some of the 4 chunks and not all */
    uint64_t owned_bytes = 0;
    size_t owned = 0;
    for (int k = 0; owned == 0 || owned == 4; k++) {
        CHECK(k < 100);
        char list[128];
        snprintf(list, sizeof list, "a%d,b%d,c%d", k, k, k);
        larder__members_clear(&d.members);
        CHECK_EQ(larder__members_parse_list(&d.members, list, 7461), 0);
        owned = 0, owned_bytes = 0;
        for (uint64_t c = 0; c < 4; c++)
            if (larder__owner_chunk(&d.members, e->id_low, e->id_high, 0, c) == 1) {
                owned++;
                owned_bytes += c == 3 ? 2 * MIB : 4 * MIB;
            }
    }
    d.self = 1;
    CHECK_EQ(warm_owned(&d, e), owned); /* a job per owned chunk */
    for (int i = 0; i < 20000; i++) {
        larder_stats s;
        CHECK_EQ(larder_stats_get(e->dataset, &s), 0);
        if (s.resident_bytes >= owned_bytes) break;
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    larder_stats s;
    CHECK_EQ(larder_stats_get(e->dataset, &s), 0);
    CHECK_EQ(s.resident_bytes, owned_bytes); /* the owned chunks, nothing else */
    larderd_free(&d);
}
