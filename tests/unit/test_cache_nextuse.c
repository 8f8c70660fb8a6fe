/*
 * test_cache_nextuse.c - eviction by next use (cache_plans.c,
 * cache_nextuse.c).  Every expected value comes from
 * tests/tools/nextuse_reference.py, which walks the readers' future reads
 * from docs/plan.md's own code: the next use of every block under several
 * plans (a reader moving on, a new epoch, a resume on another world size,
 * two readers), exactly which blocks an eviction takes, that admission
 * reads through a block no reader needs, and that dead readers' plans are
 * dropped.  The races (readers against eviction by next use, in threads
 * and processes) are test_cache_nextuse_race.c.
 */
#include "nextuse_fixture.h"

#include <sys/wait.h>
#include <unistd.h>

TEST(nextuse_matches_reference_as_plans_change)
{
    setup();
    /* a reader (rank 0 of 2, worker 1 of 2) two of its steps in, then four */
    struct reader a[] = {{.params = plan(3, 2, 0, 2, 1, 0), .consumed = 2}};
    check_next_uses(a, 1);
    a[0].consumed = 4;
    check_next_uses(a, 1);
    /* near the end of the epoch the next epoch's order counts */
    a[0].consumed = 5;
    check_next_uses(a, 1);
    /* a new epoch */
    struct reader b[] = {{.params = plan(4, 2, 0, 2, 1, 0), .consumed = 0}};
    check_next_uses(b, 1);
    /* a resume at step 5 on another world size, one worker */
    struct reader c[] = {{.params = plan(4, 4, 3, 1, 0, 5), .consumed = 1}};
    check_next_uses(c, 1);
    /* two readers of the node: ranks 0 and 1 of 2 */
    struct reader d[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 3},
                         {.params = plan(3, 2, 1, 1, 0, 0), .consumed = 2}};
    check_next_uses(d, 2);
    larder_close(dataset);
}

TEST(nextuse_evicts_exactly_the_farthest_blocks)
{
    setup();
    struct reader r[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 3},
                         {.params = plan(3, 2, 1, 1, 0, 0), .consumed = 2}};
    register_all(r, 2);
    uint64_t before = 0;
    bool was[1024];
    for (uint64_t b = 0; b < total_blocks(); b++)
        before += was[b] = resident(b);
    long long use[1024], evict[1024];
    for (int round = 0; round < 2; round++) {
        uint64_t limit = before * (round ? 1 : 2) / 4; /* to a half, then a quarter */
        int count = reference(r, 2, limit, use, evict);
        CHECK(count > 0);
        /* the node's capacity, set by another opener as a daemon would */
        struct larder__cache *other;
        CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset),
                                    BLOCK, limit * BLOCK, 0),
                 0);
        larder__cache_trim(cache);
        larder__cache_close(other);
        int evicted = 0;
        for (uint64_t b = 0; b < total_blocks(); b++)
            if (was[b] && !resident(b)) {
                bool expected = false;
                for (int i = 0; i < count; i++)
                    expected = expected || evict[i] == (long long)b;
                if (!expected)
                    fprintf(stderr, "    round %d: block %llu (next use %lld) went\n", round,
                            (unsigned long long)b, use[b]);
                CHECK(expected);
                evicted++;
                was[b] = false;
            }
        CHECK_EQ(evicted, count);
        before -= (uint64_t)count;
        /* the readers move on before the second round */
        r[0].consumed = 6;
        r[1].consumed = 5;
        larder__cache_plan_advance(cache, r[0].slot, 6);
        larder__cache_plan_advance(cache, r[1].slot, 5);
    }
    unregister_all(r, 2);
    larder_close(dataset);
}

TEST(nextuse_admission_reads_through_what_no_reader_needs)
{
    setup();
    /* one reader, rank 0 of 2: the other rank's samples are another node's */
    struct reader r[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 1}};
    register_all(r, 1);
    long long use[1024], evict[1024];
    reference(r, 1, 0, use, evict);
    uint64_t total = total_blocks(), present = 0;
    for (uint64_t b = 0; b < total; b++)
        present += resident(b);
    /* a full cache: capacity at what is resident less the blocks no one needs */
    uint64_t never = 0;
    for (uint64_t b = 0; b < total; b++)
        never += resident(b) && use[b] < 0;
    CHECK(never > 0);
    struct larder__cache *other;
    uint64_t limit = present - never;
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                limit * BLOCK, 0),
             0);
    larder__cache_trim(cache);
    for (uint64_t b = 0; b < total; b++)
        CHECK(!resident(b) || use[b] >= 0); /* exactly the unneeded ones went */
    /* reading a sample whose blocks no reader needs serves it, keeps nothing */
    static uint8_t buf[10000];
    int tried = 0;
    for (uint64_t id = 0; id < SAMPLES && tried < 3; id++) {
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(dataset, id, &s), 0);
        uint64_t first = s.offset / BLOCK, last = (s.offset + s.length - 1) / BLOCK, base = 0;
        for (uint32_t k = 0; k < s.shard; k++)
            base += (larder__dataset_shard_size(dataset, k) + BLOCK - 1) / BLOCK;
        bool unneeded = true, absent = true;
        for (uint64_t b = first; b <= last; b++) {
            unneeded = unneeded && use[base + b] < 0;
            absent = absent && !resident(base + b);
        }
        if (!unneeded || !absent) continue;
        tried++;
        larder_stats st;
        larder_stats_get(dataset, &st);
        uint64_t resident_before = st.resident_bytes;
        CHECK_EQ(larder_read_sample(dataset, id, buf, sizeof buf), (int64_t)s.length);
        for (uint64_t b = first; b <= last; b++)
            CHECK(!resident(base + b));
        larder_stats_get(dataset, &st);
        CHECK(st.resident_bytes <= resident_before);
    }
    CHECK(tried > 0);
    larder__cache_close(other);
    unregister_all(r, 1);
    larder_close(dataset);
}

TEST(nextuse_dead_readers_plans_are_dropped)
{
    setup();
    uint64_t generation = larder__cache_plans_generation(cache);
    pid_t child = fork();
    if (child == 0) {
        struct larder__plan_params p = plan(3, 1, 0, 1, 0, 0);
        p.num_samples = SAMPLES;
        _exit(larder__cache_plan_register(cache, &p) >= 0 ? 0 : 1);
    }
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(larder__cache_plans_generation(cache) != generation);
    struct larder__cache_plan live[LARDER__CACHE_PLAN_SLOTS];
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 0);
    /* and a live one is listed, with what it registered */
    struct reader r[] = {{.params = plan(3, 2, 1, 1, 0, 0), .consumed = 0}};
    register_all(r, 1);
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 1);
    CHECK_EQ(live[0].params.rank, 1);
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES + 1, live, LARDER__CACHE_PLAN_SLOTS), 0);
    unregister_all(r, 1);
    larder_close(dataset);
}

TEST(nextuse_hostile_registry_is_ignored)
{
    setup();
    /* a live slot of ours, then its fields overwritten with nonsense, as a
     * damaged (or written by someone else) file would hold */
    struct reader r[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 1}};
    register_all(r, 1);
    struct larder__cache_plan live[LARDER__CACHE_PLAN_SLOTS];
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 1);
    char path[4096];
    larder_dataset_info info;
    larder_dataset_info_get(dataset, &info);
    snprintf(path, sizeof path, "%s/%s/plans", test_path("cache"), info.dataset_id);
    size_t length;
    uint8_t *bytes = test_read_file(path, &length);
    CHECK(length >= 64 + 128);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    /* slot 0's world (offset 64 + 64 in the file) set to 0, then rank past world */
    uint32_t bad[4] = {0, 5, 1, 0};
    fseek(f, 64 + 8 * 8, SEEK_SET); /* world, rank, workers, worker follow 8 words */
    CHECK_EQ(fwrite(bad, sizeof bad, 1, f), 1);
    fflush(f);
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 0);
    uint32_t big[4] = {1u << 31, 3, 0, 0}; /* a world that does not divide G, no workers */
    fseek(f, 64 + 8 * 8, SEEK_SET);
    CHECK_EQ(fwrite(big, sizeof big, 1, f), 1);
    fflush(f);
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 0);
    /* random bytes over every slot: nothing sane is listed, nothing breaks */
    static uint8_t noise[64 * 128];
    test_fill_random(noise, sizeof noise, 77);
    fseek(f, 64, SEEK_SET);
    CHECK_EQ(fwrite(noise, sizeof noise, 1, f), 1);
    fclose(f);
    int n = larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS);
    CHECK(n >= 0 && n <= LARDER__CACHE_PLAN_SLOTS);
    for (uint64_t b = 0; b < 4; b++)
        larder__cache_next_use(cache, 0, b);
    larder__cache_trim(cache);
    free(bytes);
    larder_close(dataset);
}

TEST(nextuse_prefers_dropping_borrowed_blocks)
{
    setup();
    /* one reader of the whole order: every block has a next use */
    struct reader r[] = {{.params = plan(3, 1, 0, 1, 0, 0), .consumed = 2}};
    register_all(r, 1);
    long long use[1024], evict[1024];
    reference(r, 1, 0, use, evict);
    uint64_t total = total_blocks(), present = 0, farthest = 0;
    for (uint64_t b = 0; b < total; b++)
        if (resident(b)) {
            present++;
            CHECK(use[b] >= 0);
            if (use[b] > use[farthest] || !resident(farthest)) farthest = b;
        }
    /* a block nearer than the farthest, but farther than a quarter of it,
     * kept again as borrowed from a peer */
    uint64_t borrowed = UINT64_MAX;
    for (uint64_t b = 0; b < total && borrowed == UINT64_MAX; b++)
        if (resident(b) && use[b] < use[farthest] && 4 * use[b] > use[farthest]) borrowed = b;
    CHECK(borrowed != UINT64_MAX);
    uint32_t shard;
    uint64_t block;
    locate(borrowed, &shard, &block);
    static uint8_t bytes[BLOCK];
    uint64_t length = larder__cache_span(cache, shard, block, block);
    CHECK_EQ(larder__cache_pread(cache, shard, bytes, (size_t)length, block * BLOCK), 0);
    int lock = larder__cache_lock(cache, shard, block, block);
    CHECK(lock >= 0);
    CHECK_EQ(larder__cache_store(cache, shard, block, block, bytes, true, true), 0);
    larder__cache_unlock(cache, lock);
    /* room for one block less: the borrowed one goes, not the farthest */
    struct larder__cache *other;
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                (present - 1) * BLOCK, 0),
             0);
    larder__cache_trim(cache);
    CHECK(!resident(borrowed));
    CHECK(resident(farthest));
    larder__cache_close(other);
    unregister_all(r, 1);
    larder_close(dataset);
}

TEST(nextuse_registry_never_follows_a_symlink)
{
    setup();
    /* someone who may write the cache directory puts a link where the
     * plans file goes, to a file of the reader's: registering must not
     * grow, zero or write that file (it did before O_NOFOLLOW) */
    char path[4096];
    larder_dataset_info info;
    larder_dataset_info_get(dataset, &info);
    snprintf(path, sizeof path, "%s/%s/plans", test_path("cache"), info.dataset_id);
    unlink(path);
    static const char victim_text[] = "the reader's own file, not the cache's";
    test_write_file(test_path("victim"), victim_text, sizeof victim_text);
    CHECK_EQ(symlink(test_path("victim"), path), 0);
    struct larder__plan_params p = plan(0, 1, 0, 1, 0, 0);
    p.num_samples = SAMPLES;
    int slot = larder__cache_plan_register(cache, &p);
    if (slot >= 0) larder__cache_plan_unregister(cache, slot);
    size_t length;
    uint8_t *bytes = test_read_file(test_path("victim"), &length);
    CHECK_EQ(length, sizeof victim_text);
    CHECK(memcmp(bytes, victim_text, sizeof victim_text) == 0);
    free(bytes);
    larder_close(dataset);
}
