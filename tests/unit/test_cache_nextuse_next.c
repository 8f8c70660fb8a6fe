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
    CHECK_EQ(larder__nextuse_step(40, 5, 4, 0), 4);
    CHECK_EQ(larder__nextuse_step(40, 5, 5, 0), 5 + 0xe220a8397b1dcdaf % 35);
    CHECK_EQ(larder__nextuse_step(40, 5, 39, 0), 5 + 0xe220a8397b1dcdaf % 35);
    CHECK_EQ(larder__nextuse_step(1, 1, 0, 0), 0);
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

/* The head of the next epoch (the steps that count where they are) is
 * what the readers read or stage as it starts: K workers' first steps and
 * their prefetch windows, K * (window + 1) global steps, for short and
 * long epochs alike; the first eighth for a reader that said no window.
 * Arithmetic from docs/cache.md, then every block's next use and the
 * eviction order against the reference with the window registered. */
TEST(nextuse_next_epoch_head_is_the_readers_lead)
{
    CHECK_EQ(larder__nextuse_head(40, 2, 1), 4);  /* 2 workers, 1 step each: 2 x 2 */
    CHECK_EQ(larder__nextuse_head(10, 2, 1), 4);  /* a short epoch: the same lead */
    CHECK_EQ(larder__nextuse_head(40, 0, 0), 5);  /* no window said: the eighth */
    CHECK_EQ(larder__nextuse_head(10, 2, 0), 1);  /* at least one step */
    CHECK_EQ(larder__nextuse_head(10, 4, 8), 10); /* at most the epoch */
    CHECK_EQ(larder__nextuse_head(10, 1u << 16, 1u << 20), 10);
    CHECK_EQ(larder__nextuse_head(UINT64_MAX, UINT64_MAX, UINT64_MAX), UINT64_MAX);
    /* past the head, at head + key % (steps - head) */
    CHECK_EQ(larder__nextuse_step(10, 4, 3, 0), 3);
    CHECK_EQ(larder__nextuse_step(10, 4, 4, 0), 4 + 0xe220a8397b1dcdaf % 6);
    setup();
    uint64_t steps = SAMPLES / 4; /* 12: the eighth is 1 step, 2 x (1 + 1) = 4 */
    /* two workers done with epoch 3, one with a window of 1 step, and one
     * mid-epoch with a window of 2: blocks of the next epoch's steps 0-3
     * count where they are, for the first two */
    struct reader r[] = {{.params = plan(3, 1, 0, 2, 0, 0), .consumed = steps / 2, .window = 1},
                         {.params = plan(3, 1, 0, 2, 1, 0), .consumed = steps / 2, .window = 1},
                         {.params = plan(5, 1, 0, 1, 0, 0), .consumed = 7, .window = 2}};
    check_next_uses(r, 3);
    register_all(r, 3);
    uint64_t total = total_blocks(), present = 0;
    for (uint64_t b = 0; b < total; b++)
        present += resident(b);
    long long use[1024], evict[1024];
    uint64_t limit = present / 2;
    int count = reference(r, 3, limit, use, evict);
    CHECK(count > 0);
    /* the reference's order differs from the one without windows (so the
     * window is what decides here) */
    struct reader plain[3];
    memcpy(plain, r, sizeof plain);
    for (int i = 0; i < 3; i++)
        plain[i].window = 0;
    long long use_plain[1024], evict_plain[1024];
    CHECK_EQ(reference(plain, 3, limit, use_plain, evict_plain), count);
    CHECK(memcmp(use, use_plain, total * sizeof *use) != 0);
    struct larder__cache *other; /* the capacity, set by another opener */
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                limit * BLOCK, 0),
             0);
    larder__cache_trim(cache);
    larder__cache_close(other);
    for (int i = 0; i < count; i++)
        CHECK(!resident((uint64_t)evict[i]));
    uint64_t left = 0;
    for (uint64_t b = 0; b < total; b++)
        left += resident(b);
    CHECK_EQ(left, limit);
    unregister_all(r, 3);
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
