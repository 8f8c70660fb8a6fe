/*
 * test_cache_hold.c - holds on cache blocks (larder__cache_hold, for FUSE
 * passthrough): held blocks survive eviction sweeps that take everything
 * else around them, in this process and from another opener of the cache,
 * until the hold is released; a hold is refused while a fill holds a
 * block, and for blocks outside the shard.  Expected values are arithmetic
 * on the block counts the tests choose.
 */
#include "cache.h"
#include "dataset.h"
#include "larder_pack.h"
#include "test.h"

#include <errno.h>

#define BLOCK 4096
#define CAPACITY_BLOCKS 32

static larder_dataset *dataset;
static struct larder__cache *cache;

/* One flat shard of about 1.5 MB (some 370 blocks of 4 KiB), and its cache
 * with room for CAPACITY_BLOCKS blocks. */
static void setup(void)
{
    char path[4096];
    for (int i = 0; i < 20; i++) {
        static uint8_t data[150000];
        size_t size = (size_t)(i * 7919 % 100000) + 30000;
        test_fill_random(data, size, (uint64_t)i + 9);
        snprintf(path, sizeof path, "%s/src/s%03d.bin", test_dir(), i);
        test_write_file(path, data, size);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = 1 << 30,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
    CHECK_EQ(larder_open(&dataset, test_path("packed/index.larder"), NULL), 0);
    CHECK_EQ(larder__dataset_index(dataset)->num_shards, 1);
    CHECK_EQ(larder__cache_open(&cache, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                CAPACITY_BLOCKS * BLOCK, 0),
             0);
}

static void teardown(void)
{
    larder__cache_close(cache);
    larder_close(dataset);
}

/* Store block b of shard 0 the way a fill does (under its lock), then trim. */
static void store(struct larder__cache *c, uint64_t b)
{
    static uint8_t data[BLOCK];
    memset(data, (int)b, sizeof data);
    int lock = larder__cache_lock(c, 0, b, b);
    CHECK(lock >= 0);
    CHECK_EQ(larder__cache_store(c, 0, b, b, data, false, true), 0);
    larder__cache_unlock(c, lock);
    larder__cache_trim(c);
}

static int present(uint64_t first, uint64_t last)
{
    int n = 0;
    for (uint64_t b = first; b <= last; b++)
        n += larder__cache_present(cache, 0, b, b);
    return n;
}

TEST(cache_hold_keeps_blocks_from_eviction_until_released)
{
    setup();
    for (uint64_t b = 0; b < 10; b++)
        store(cache, b);
    int hold = larder__cache_hold(cache, 0, 0, 9);
    CHECK(hold >= 0);
    /* 200 more blocks through a cache of 32: the sweep takes all it can */
    for (uint64_t b = 10; b < 210; b++)
        store(cache, b);
    CHECK_EQ(present(0, 9), 10);
    CHECK(present(10, 209) <= CAPACITY_BLOCKS - 10);
    /* another opener of the same cache (another process's view) evicts too */
    struct larder__cache *other;
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                CAPACITY_BLOCKS * BLOCK, 0),
             0);
    for (uint64_t b = 210; b < 260; b++)
        store(other, b);
    CHECK_EQ(present(0, 9), 10);
    /* two holds of the same blocks share them; released, the next sweeps take them */
    int again = larder__cache_hold(other, 0, 0, 9);
    CHECK(again >= 0);
    larder__cache_unlock(cache, hold);
    for (uint64_t b = 260; b < 300; b++)
        store(cache, b);
    CHECK_EQ(present(0, 9), 10);
    larder__cache_unlock(other, again);
    for (uint64_t b = 300; b < 360; b++)
        store(cache, b);
    CHECK_EQ(present(0, 9), 0);
    larder__cache_close(other);
    teardown();
}

TEST(cache_hold_refused_under_a_fill_and_outside_the_shard)
{
    setup();
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
