/*
 * test_cache_nextuse_next.c - eviction by next use, continued
 * (test_cache_nextuse.c has the rest): where the next epoch's reads count
 * (a fixed step per sample past its first eighth), a fill's blocks
 * admitted in one decision, and readers that left at their epoch's end
 * still counting their next epoch until their successor comes.  Expected
 * values from tests/tools/nextuse_reference.py and splitmix64's published
 * outputs.
 */
#include "nextuse_fixture.h"

/* Past its first eighth, the next epoch counts at each sample's fixed
 * step (docs/cache.md): the key is splitmix64's output function, so its
 * published outputs for seed 0 (states 0x9e37...7c15 times 1 and 2) are
 * what it gives; and a reader done with epoch 3 and one done with epoch 4
 * (two other orders) rank every block not read in the next epoch's first
 * step alike, so the cache keeps the same blocks pass after pass and each
 * pass's fetches fall evenly over it, not all in its second half. */
TEST(nextuse_next_epoch_counts_at_a_fixed_step_per_sample)
{
    CHECK_EQ(larder__nextuse_spread(0), UINT64_C(0xe220a8397b1dcdaf));
    CHECK_EQ(larder__nextuse_spread(UINT64_C(0x9e3779b97f4a7c15)), UINT64_C(0x6e789e6aa1b965f4));
    /* 40 steps: the first 5 count where they are, the rest at 5 + key % 35 */
    CHECK_EQ(larder__nextuse_step(40, 4, 0), 4);
    CHECK_EQ(larder__nextuse_step(40, 5, 0), 5 + 0xe220a8397b1dcdaf % 35);
    CHECK_EQ(larder__nextuse_step(40, 39, 0), 5 + 0xe220a8397b1dcdaf % 35);
    CHECK_EQ(larder__nextuse_step(1, 0, 0), 0);
    setup();
    uint64_t steps = SAMPLES / 4, total = total_blocks(); /* the first eighth: step 0 */
    uint64_t use[2][1024];
    CHECK(total <= 1024);
    for (int e = 0; e < 2; e++) {
        struct reader r[] = {{.params = plan(3 + (uint64_t)e, 1, 0, 1, 0, 0), .consumed = steps}};
        check_next_uses(r, 1); /* the reference agrees */
        register_all(r, 1);
        for (uint64_t b = 0; b < total; b++) {
            uint32_t shard;
            uint64_t block;
            locate(b, &shard, &block);
            use[e][b] = larder__cache_next_use(cache, shard, block);
        }
        unregister_all(r, 1);
    }
    int alike = 0, first = 0;
    uint64_t seen = UINT64_MAX;
    bool varied = false;
    for (uint64_t b = 0; b < total; b++) {
        CHECK(use[0][b] == UINT64_MAX || use[0][b] < steps);
        if (use[0][b] == 0 || use[1][b] == 0) { /* read in the first step of one order */
            first++;
            continue;
        }
        CHECK_EQ(use[0][b], use[1][b]);
        alike++;
        varied = varied || (seen != UINT64_MAX && use[0][b] != seen);
        seen = use[0][b];
    }
    CHECK(first > 0 && alike > first && varied); /* the scenario says something */
    larder_close(dataset);
}

/* A fill's blocks are admitted in one decision (larder__cache_admit_each):
 * in a full cache, exactly the blocks the reference says are needed
 * sooner than the farthest resident one. */
TEST(nextuse_admission_decides_each_block_like_the_reference)
{
    setup();
    struct reader r[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 2}};
    register_all(r, 1);
    uint64_t total = total_blocks(), present = 0;
    for (uint64_t b = 0; b < total; b++)
        present += resident(b);
    long long use[1024], evict[1024];
    uint64_t limit = present * 2 / 3;
    int count = reference(r, 1, limit, use, evict);
    CHECK(count > 0);
    struct larder__cache *other;
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                limit * BLOCK, 0),
             0);
    larder__cache_trim(cache); /* full: the limit exactly */
    bool never_resident = false;
    long long farthest = 0;
    for (uint64_t b = 0; b < total; b++)
        if (resident(b)) {
            never_resident = never_resident || use[b] < 0;
            if (use[b] > farthest) farthest = use[b];
        }
    int admitted = 0, refused = 0;
    for (uint64_t b = 0; b < total; b++) {
        uint32_t shard;
        uint64_t block;
        locate(b, &shard, &block);
        bool admit[1];
        larder__cache_admit_each(cache, shard, block, block, admit);
        bool want = use[b] >= 0 && (never_resident || use[b] < farthest);
        if (admit[0] != want)
            fprintf(stderr, "    block %llu (next use %lld, farthest resident %lld): %s\n",
                    (unsigned long long)b, use[b], never_resident ? -1 : farthest,
                    admit[0] ? "admitted" : "refused");
        CHECK_EQ(admit[0], want);
        admitted += want;
        refused += !want;
    }
    CHECK(admitted > 0 && refused > 0); /* the scenario says something */
    /* a run of blocks: each decided alike */
    uint32_t shard;
    uint64_t block;
    locate(0, &shard, &block);
    uint64_t blocks = (larder__dataset_shard_size(dataset, shard) + BLOCK - 1) / BLOCK;
    bool run[1024];
    larder__cache_admit_each(cache, shard, 0, blocks - 1, run);
    for (uint64_t b = 0; b < blocks; b++) {
        bool alone[1];
        larder__cache_admit_each(cache, shard, b, b, alone);
        CHECK_EQ(run[b], alone[0]);
    }
    larder__cache_close(other);
    unregister_all(r, 1);
    larder_close(dataset);
}

/* A DataLoader worker's pass ends and its process exits before the next
 * pass's worker registers: until then (or 30 s), its next epoch still
 * counts, as the reference counts a reader done with its epoch; its
 * successor takes over; a reader that leaves mid-epoch counts no more. */
TEST(nextuse_a_reader_done_with_its_epoch_counts_until_its_successor)
{
    setup();
    /* 12 steps; rank 0 of 2, workers 0 and 1 of 2: worker 0 done (6 of
     * its 6 steps), worker 1 at its last step */
    struct reader r[] = {{.params = plan(3, 2, 0, 2, 0, 0), .consumed = 6},
                         {.params = plan(3, 2, 0, 2, 1, 0), .consumed = 5}};
    register_all(r, 2);
    expect_next_uses(r, 2);
    larder__cache_plan_unregister(cache, r[0].slot); /* its process leaves */
    expect_next_uses(r, 2);                          /* and still counts */
    /* worker 0's next pass registers: it counts from there */
    struct reader next[] = {{.params = plan(4, 2, 0, 2, 0, 0), .consumed = 0}, r[1]};
    register_all(next, 1);
    expect_next_uses(next, 2);
    /* a reader that leaves mid-epoch (a crash, a stop) counts no more */
    struct reader early[] = {{.params = plan(3, 2, 1, 1, 0, 0), .consumed = 2}};
    register_all(early, 1);
    struct reader all[] = {next[0], r[1], early[0]};
    expect_next_uses(all, 3);
    larder__cache_plan_unregister(cache, early[0].slot);
    expect_next_uses(next, 2);
    larder__cache_plan_unregister(cache, next[0].slot);
    larder__cache_plan_unregister(cache, r[1].slot);
    larder_close(dataset);
}
