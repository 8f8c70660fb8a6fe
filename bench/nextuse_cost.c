/*
 * nextuse_cost.c - what eviction by next use costs (docs/cache.md,
 * "Costs"): the time to compute one block's next use, and the time of one
 * candidate scan over every resident block, with R readers registered.
 *
 *   larder_bench_nextuse INDEX CACHE_DIR [--readers R] [--repeat N]
 *
 * Stages the whole dataset into CACHE_DIR (no capacity) unless it is
 * there, registers R plans (ranks of one world, global batch 64), then
 * times larder__cache_next_use over every block and larder__cache_trim
 * with a capacity one block below what is resident (one scan and one
 * eviction), N times each.  Prints one markdown row: blocks, readers,
 * median ns per block, median ms per scan.
 */
#include "cache.h"
#include "dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s INDEX CACHE_DIR [--readers R] [--repeat N]\n", argv[0]);
        return 2;
    }
    int readers = 4, repeat = 5;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--readers")) readers = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
    }
    if (readers < 1 || readers > 64 || repeat < 1 || repeat > 100) return 2;
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = argv[2]};
    larder_dataset *d;
    if (larder_open(&d, argv[1], &oo) < 0) {
        fprintf(stderr, "open: %s\n", larder_errmsg());
        return 1;
    }
    uint64_t n = larder_num_samples(d);
    for (uint64_t id = 0; id < n; id++)
        if (larder__dataset_stage(d, id) < 0) {
            fprintf(stderr, "stage: %s\n", larder_errmsg());
            return 1;
        }
    struct larder__cache *c = larder__dataset_cache(d);
    int slots[64];
    for (int r = 0; r < readers; r++) {
        struct larder__plan_params p = {.seed = 1,
                                        .epoch = 0,
                                        .global_batch = 64,
                                        .num_samples = n,
                                        .world = (uint32_t)readers,
                                        .rank = (uint32_t)r,
                                        .workers = 1};
        if (64 % readers) p.global_batch = (uint64_t)readers * 16;
        slots[r] = larder__cache_plan_register(c, &p);
        larder__cache_plan_advance(c, slots[r], 3);
    }
    uint64_t blocks = 0;
    for (uint32_t s = 0; s < larder__dataset_num_shards(d); s++)
        blocks += (larder__dataset_shard_size(d, s) + larder__cache_block_size(c) - 1) /
                  larder__cache_block_size(c);
    double *per_block = calloc((size_t)repeat, sizeof *per_block);
    double *per_scan = calloc((size_t)repeat, sizeof *per_scan);
    uint64_t sink = 0;
    for (int k = 0; k < repeat; k++) {
        double t0 = now_s();
        for (uint32_t s = 0; s < larder__dataset_num_shards(d); s++) {
            uint64_t count = (larder__dataset_shard_size(d, s) + larder__cache_block_size(c) - 1) /
                             larder__cache_block_size(c);
            for (uint64_t b = 0; b < count; b++)
                sink += larder__cache_next_use(c, s, b);
        }
        per_block[k] = (now_s() - t0) / (double)blocks * 1e9;
        larder_stats st;
        larder_stats_get(d, &st);
        struct larder__cache *limit;
        larder__cache_open(&limit, argv[2], larder__dataset_index(d), 0,
                           st.resident_bytes - larder__cache_block_size(c), 0);
        /* a reader moves on, and long enough after the last scan that the
         * rate limit (a scan waits 20x its cost) lets the next trim scan */
        larder__cache_plan_advance(c, slots[0], (uint64_t)k + 10);
        nanosleep(&(struct timespec){.tv_sec = 1}, NULL);
        t0 = now_s();
        larder__cache_trim(c);
        per_scan[k] = (now_s() - t0) * 1e3;
        larder_stats after;
        larder_stats_get(d, &after);
        if (getenv("NEXTUSE_DEBUG"))
            fprintf(stderr, "resident %llu -> %llu bytes, evictions %llu\n",
                    (unsigned long long)st.resident_bytes, (unsigned long long)after.resident_bytes,
                    (unsigned long long)after.evictions);
        larder__cache_close(limit);
    }
    qsort(per_block, (size_t)repeat, sizeof *per_block, compare);
    qsort(per_scan, (size_t)repeat, sizeof *per_scan, compare);
    printf("| %llu | %d | %.0f | %.2f |\n", (unsigned long long)blocks, readers,
           per_block[repeat / 2], per_scan[repeat / 2]);
    if (sink == 42) printf("\n");
    for (int r = 0; r < readers; r++)
        larder__cache_plan_unregister(c, slots[r]);
    free(per_block);
    free(per_scan);
    larder_close(d);
    return 0;
}
