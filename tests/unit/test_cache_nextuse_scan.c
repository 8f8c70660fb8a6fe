/*
 * test_cache_nextuse_scan.c - a candidate scan holds no lock: admission
 * decides while another thread's scan runs (docs/cache.md, "Costs"),
 * instead of queueing behind it as it did when scans ran under the
 * eviction lock (5.7 s of summed waits in a benchmark run).
 */
#include "cache_nextuse.h"
#include "dataset.h"
#include "larder_pack.h"
#include "test.h"

#include <pthread.h>
#include <unistd.h>

#define BLOCK 4096
#define SAMPLES 400
#define SAMPLE_BYTES 40000 /* 400 x 40 KB: about 3,900 blocks to scan */
#define READERS 8

struct scanner {
    struct larder__cache *cache;
    int slot;
    bool done; /* atomic */
};

/* Move a reader on (so a scan is due) and pick again, over and over. */
static void *scan_repeatedly(void *arg)
{
    struct scanner *s = arg;
    for (int i = 0; i < 100 && !__atomic_load_n(&s->done, __ATOMIC_ACQUIRE); i++) {
        larder__cache_plan_advance(s->cache, s->slot, (uint64_t)(i % 4));
        usleep(40 * 1000); /* past the rate limit: 20 times a scan's cost */
        pthread_mutex_lock(&s->cache->evict_lock);
        larder__nextuse_refresh(s->cache, false);
        pthread_mutex_unlock(&s->cache->evict_lock);
    }
    __atomic_store_n(&s->done, true, __ATOMIC_RELEASE);
    return NULL;
}

TEST(nextuse_admission_decides_while_a_scan_runs)
{
    static uint8_t data[SAMPLE_BYTES];
    char path[4096];
    for (int i = 0; i < SAMPLES; i++) {
        test_fill_random(data, sizeof data, (uint64_t)i + 5);
        snprintf(path, sizeof path, "%s/src/s%04d.bin", test_dir(), i);
        test_write_file(path, data, sizeof data);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = 4000000,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                              .cache_dir = test_path("cache"),
                              .block_size = BLOCK};
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &oo), 0);
    for (uint64_t i = 0; i < SAMPLES; i++)
        CHECK(larder_read_sample(d, i, data, sizeof data) == SAMPLE_BYTES);
    struct larder__cache *cache = larder__dataset_cache(d);
    /* full to the block (admission decides, nothing is evicted) */
    uint64_t resident = __atomic_load_n(&cache->header->resident_blocks, __ATOMIC_ACQUIRE);
    struct larder__cache *other;
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(d), BLOCK,
                                resident * BLOCK, 0),
             0);
    int slots[READERS];
    for (uint32_t r = 0; r < READERS; r++) {
        struct larder__plan_params p = {.seed = 7,
                                        .global_batch = 16,
                                        .num_samples = SAMPLES,
                                        .world = 2,
                                        .rank = r % 2,
                                        .workers = READERS / 2,
                                        .worker = r / 2};
        slots[r] = larder__cache_plan_register(cache, &p);
        CHECK(slots[r] >= 0);
    }
    (void)larder__cache_admit(cache, 0, 0, 0); /* the first pick: a list to decide against */
    struct scanner s = {.cache = cache, .slot = slots[0]};
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, scan_repeatedly, &s), 0);
    int during = 0, decisions = 0;
    while (!__atomic_load_n(&s.done, __ATOMIC_ACQUIRE) && during == 0) {
        struct larder__nextuse *n = cache->nextuse;
        if (!n || !__atomic_load_n(&n->scanning, __ATOMIC_ACQUIRE)) continue;
        bool admit[4];
        larder__cache_admit_each(cache, 0, 0, 3, admit);
        decisions++;
        /* decided, and the scan that was running still runs */
        if (__atomic_load_n(&n->scanning, __ATOMIC_ACQUIRE)) during++;
    }
    __atomic_store_n(&s.done, true, __ATOMIC_RELEASE);
    pthread_join(thread, NULL);
    fprintf(stderr, "    %d admission decisions while a scan ran, %d of them before it ended\n",
            decisions, during);
    CHECK(during > 0);
    for (int r = 0; r < READERS; r++)
        larder__cache_plan_unregister(cache, slots[r]);
    larder__cache_close(other);
    larder_close(d);
}
