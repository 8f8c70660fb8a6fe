/*
 * test_cache_pin.c - pins in the node cache (cache_pin.c): pinned blocks
 * survive eviction sweeps that take everything else, until their time is
 * up or they are unpinned; pins take at most 7/8 of the capacity; a
 * second process opening the cache sees the same pins.  Expected values
 * are arithmetic on the block counts the tests choose.
 */
#include "capacity_fixture.h"

#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

TEST(cache_pin_survives_eviction)
{
    setup_seeded(5);
    int64_t now = larder__cache_clock_ms();
    CHECK_EQ(larder__cache_pin(cache, 0, 0, 9, now + 60000), 10);
    CHECK_EQ(larder__cache_pinned_bytes(cache), 10 * BLOCK);
    for (uint64_t b = 0; b < 300; b++) /* ten times the capacity through the cache */
        store_in(cache, b);
    CHECK_EQ(present(0, 9), 10);                     /* every pinned block stayed */
    CHECK(present(10, 299) <= CAPACITY_BLOCKS - 10); /* the rest kept within the capacity */
    CHECK(present(10, 299) > 0);
    larder_stats s;
    larder__cache_stats(cache, &s);
    CHECK(s.evictions >= 300 - CAPACITY_BLOCKS);
    CHECK(larder__cache_pinned(cache, 0, 5));
    CHECK(!larder__cache_pinned(cache, 0, 10));
    teardown();
}

TEST(cache_pin_expires)
{
    setup_seeded(5);
    CHECK_EQ(larder__cache_pin(cache, 0, 0, 9, larder__cache_clock_ms() + 300), 10);
    for (uint64_t b = 0; b < 100; b++)
        store_in(cache, b);
    CHECK_EQ(present(0, 9), 10);
    sleep_ms(400); /* past the pin's time */
    CHECK_EQ(larder__cache_pinned_bytes(cache), 0);
    CHECK(!larder__cache_pinned(cache, 0, 5));
    for (uint64_t b = 100; b < 200; b++) /* three sweeps' worth */
        store_in(cache, b);
    CHECK_EQ(present(0, 9), 0); /* released: evicted like any other block */
    /* a new pin clears the stale bits first: they do not count against the limit */
    CHECK_EQ(
        larder__cache_pin(cache, 0, 50, 50 + CAPACITY_BLOCKS, larder__cache_clock_ms() + 60000),
        CAPACITY_BLOCKS - CAPACITY_BLOCKS / 8);
    teardown();
}

TEST(cache_pin_limit_and_unpin)
{
    setup_seeded(5);
    int64_t later = larder__cache_clock_ms() + 60000;
    /* 7/8 of 32 blocks: 28 of the 100 asked for */
    CHECK_EQ(larder__cache_pin_limit(cache), 28);
    CHECK_EQ(larder__cache_pin(cache, 0, 0, 99, later), 28);
    CHECK_EQ(larder__cache_pinned_bytes(cache), 28 * BLOCK);
    /* pinning what is pinned costs nothing, anything more is refused */
    CHECK_EQ(larder__cache_pin(cache, 0, 0, 27, later), 28);
    CHECK_EQ(larder__cache_pin(cache, 0, 28, 28, later), 0);
    /* out of range: nothing; past the shard's end: clamped */
    CHECK_EQ(larder__cache_pin(cache, 7, 0, 1, later), 0);
    larder__cache_unpin(cache, 0, 0, 99);
    CHECK_EQ(larder__cache_pinned_bytes(cache), 0);
    uint64_t blocks = (larder__dataset_shard_size(dataset, 0) + BLOCK - 1) / BLOCK;
    CHECK_EQ(larder__cache_pin(cache, 0, blocks - 2, blocks + 100, later), 2);
    larder__cache_unpin(cache, 0, 0, UINT64_MAX - 1);
    /* unpinned blocks go like the others */
    CHECK_EQ(larder__cache_pin(cache, 0, 0, 9, later), 10);
    larder__cache_unpin(cache, 0, 0, 9);
    for (uint64_t b = 0; b < 200; b++)
        store_in(cache, b);
    CHECK_EQ(present(0, 9), 0);
    teardown();
}

TEST(cache_pin_shared_between_openers)
{
    setup_seeded(5);
    struct larder__cache *other;
    CHECK_EQ(
        larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK, 0, 0),
        0);
    CHECK_EQ(larder__cache_pin(cache, 0, 3, 4, larder__cache_clock_ms() + 60000), 2);
    CHECK(larder__cache_pinned(other, 0, 3));
    CHECK_EQ(larder__cache_pinned_bytes(other), 2 * BLOCK);
    for (uint64_t b = 0; b < 200; b++) /* stores and sweeps through the other handle */
    {
        static uint8_t data[BLOCK];
        int lock = larder__cache_lock(other, 0, b, b);
        CHECK(lock >= 0);
        CHECK_EQ(larder__cache_store(other, 0, b, b, data, false, true), 0);
        larder__cache_unlock(other, lock);
        larder__cache_trim(other);
    }
    CHECK_EQ(present(3, 4), 2);
    larder__cache_close(other);
    teardown();
}
