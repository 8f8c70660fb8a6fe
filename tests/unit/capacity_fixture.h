/*
 * capacity_fixture.h - what the tests of blocks that survive eviction
 * share (test_cache_pin.c, test_cache_hold.c): one flat shard of about
 * 1.5 MB (some 370 blocks of 4 KiB) in a cache with room for
 * CAPACITY_BLOCKS of them, blocks stored the way a fill stores them, and
 * a count of the blocks present.
 */
#ifndef LARDER_TESTS_CAPACITY_FIXTURE_H
#define LARDER_TESTS_CAPACITY_FIXTURE_H

#include "cache.h"
#include "dataset.h"
#include "larder_pack.h"
#include "test.h"

#define BLOCK 4096
#define CAPACITY_BLOCKS 32

static larder_dataset *dataset;
static struct larder__cache *cache;

/* The shard (its samples' bytes drawn from `seed`) and its cache. */
static inline void setup_seeded(uint64_t seed)
{
    char path[4096];
    for (int i = 0; i < 20; i++) {
        static uint8_t data[150000];
        size_t size = (size_t)(i * 7919 % 100000) + 30000;
        test_fill_random(data, size, (uint64_t)i + seed);
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

static inline void teardown(void)
{
    larder__cache_close(cache);
    larder_close(dataset);
}

/* Store block b of shard 0 into c the way a fill does (under its lock), then trim. */
static inline void store_in(struct larder__cache *c, uint64_t b)
{
    static uint8_t data[BLOCK];
    memset(data, (int)b, sizeof data);
    int lock = larder__cache_lock(c, 0, b, b);
    CHECK(lock >= 0);
    CHECK_EQ(larder__cache_store(c, 0, b, b, data, false, true), 0);
    larder__cache_unlock(c, lock);
    larder__cache_trim(c);
}

/* How many of blocks [first, last] of shard 0 the cache holds. */
static inline int present(uint64_t first, uint64_t last)
{
    int n = 0;
    for (uint64_t b = first; b <= last; b++)
        n += larder__cache_present(cache, 0, b, b);
    return n;
}

#endif
