/*
 * test_cache_evict_all.c - larder__cache_evict_all (src/lib/cache_evict.c),
 * what the daemon does to a replaced publication's cache as it closes it:
 * every resident block goes (its bits cleared, counted as evictions),
 * except those a hint pins and one whose fill lock is held; a block
 * stored after is kept as usual.
 */
#include "capacity_fixture.h"

TEST(cache_evict_all_but_pinned_and_locked)
{
    setup_seeded(9);
    for (uint64_t b = 0; b < 20; b++)
        store_in(cache, b);
    CHECK_EQ(present(0, 19), 20); /* within the capacity: all there */
    CHECK_EQ(larder__cache_pin(cache, 0, 3, 4, larder__cache_clock_ms() + 60000), 2);
    int lock = larder__cache_lock(cache, 0, 7, 7); /* a fill in progress on block 7 */
    CHECK(lock >= 0);
    larder_stats before, after;
    larder__cache_stats(cache, &before);
    CHECK_EQ(larder__cache_evict_all(cache), 17); /* 20, less 2 pinned and 1 locked */
    larder__cache_unlock(cache, lock);
    CHECK_EQ(present(3, 4), 2);
    CHECK_EQ(present(7, 7), 1);
    CHECK_EQ(present(0, 2) + present(5, 6) + present(8, 19), 0);
    larder__cache_stats(cache, &after);
    CHECK_EQ(after.evictions - before.evictions, 17);
    CHECK_EQ(after.resident_bytes, 3 * BLOCK);
    store_in(cache, 12); /* stored again after: kept */
    CHECK_EQ(present(12, 12), 1);
    teardown();
}
