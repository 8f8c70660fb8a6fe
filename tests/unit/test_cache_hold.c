/*
 * test_cache_hold.c - holds on cache blocks (larder__cache_hold, for FUSE
 * passthrough): held blocks survive eviction sweeps that take everything
 * else around them, in this process and from another opener of the cache,
 * until the hold is released; a hold is refused while a fill holds a
 * block, and for blocks outside the shard.  Expected values are arithmetic
 * on the block counts the tests choose.
 */
#include "capacity_fixture.h"

#include <errno.h>

TEST(cache_hold_keeps_blocks_from_eviction_until_released)
{
    setup_seeded(9);
    for (uint64_t b = 0; b < 10; b++)
        store_in(cache, b);
    int hold = larder__cache_hold(cache, 0, 0, 9);
    CHECK(hold >= 0);
    /* 200 more blocks through a cache of 32: the sweep takes all it can */
    for (uint64_t b = 10; b < 210; b++)
        store_in(cache, b);
    CHECK_EQ(present(0, 9), 10);
    CHECK(present(10, 209) <= CAPACITY_BLOCKS - 10);
    /* another opener of the same cache (another process's view) evicts too */
    struct larder__cache *other;
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                CAPACITY_BLOCKS * BLOCK, 0),
             0);
    for (uint64_t b = 210; b < 260; b++)
        store_in(other, b);
    CHECK_EQ(present(0, 9), 10);
    /* two holds of the same blocks share them; released, the next sweeps take them */
    int again = larder__cache_hold(other, 0, 0, 9);
    CHECK(again >= 0);
    larder__cache_unlock(cache, hold);
    for (uint64_t b = 260; b < 300; b++)
        store_in(cache, b);
    CHECK_EQ(present(0, 9), 10);
    larder__cache_unlock(other, again);
    for (uint64_t b = 300; b < 360; b++)
        store_in(cache, b);
    CHECK_EQ(present(0, 9), 0);
    larder__cache_close(other);
    teardown();
}

TEST(cache_hold_refused_under_a_fill_and_outside_the_shard)
{
    setup_seeded(9);
    int fill = larder__cache_lock(cache, 0, 5, 5);
    CHECK(fill >= 0);
    CHECK_EQ(larder__cache_hold(cache, 0, 0, 9), -EAGAIN);
    int hold = larder__cache_hold(cache, 0, 6, 9); /* beside it: fine */
    CHECK(hold >= 0);
    larder__cache_unlock(cache, fill);
    larder__cache_unlock(cache, hold);
    CHECK((hold = larder__cache_hold(cache, 0, 0, 9)) >= 0);
    larder__cache_unlock(cache, hold);
    uint64_t first, last;
    larder__cache_blocks(cache, 0, larder__dataset_shard_size(dataset, 0), &first, &last);
    CHECK((hold = larder__cache_hold(cache, 0, first, last)) >= 0);
    larder__cache_unlock(cache, hold);
    CHECK_EQ(larder__cache_hold(cache, 0, 0, last + 1), -EINVAL);
    CHECK_EQ(larder__cache_hold(cache, 1, 0, 0), -EINVAL);
    CHECK_EQ(larder__cache_hold(cache, 0, 9, 8), -EINVAL);
    teardown();
}
