/*
 * nextuse_fixture.h - what the tests of eviction by next use share
 * (test_cache_nextuse.c, test_cache_nextuse_next.c): a small dataset of
 * flat shards all read into a cache of 4 KiB blocks, readers' plans, and
 * tests/tools/nextuse_reference.py run over them for the expected values.
 */
#ifndef LARDER_TESTS_NEXTUSE_FIXTURE_H
#define LARDER_TESTS_NEXTUSE_FIXTURE_H

#include "cache.h"
#include "dataset.h"
#include "larder_pack.h"
#include "test.h"

#define BLOCK 4096
#define SAMPLES 48

static larder_dataset *dataset;
static struct larder__cache *cache;

/* Flat shards of samples from 500 to 9,500 bytes (sharing and spanning
 * blocks of 4 KiB), all read once so that every block is resident. */
static inline void setup(void)
{
    char path[4096];
    for (int i = 0; i < SAMPLES; i++) {
        static uint8_t data[10000];
        size_t size = (size_t)(i * 7919 % 9000) + 500;
        test_fill_random(data, size, (uint64_t)i + 9);
        snprintf(path, sizeof path, "%s/src/s%03d.bin", test_dir(), i);
        test_write_file(path, data, size);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = 100000,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                              .cache_dir = test_path("cache"),
                              .block_size = BLOCK};
    CHECK_EQ(larder_open(&dataset, test_path("packed/index.larder"), &oo), 0);
    CHECK(larder__dataset_index(dataset)->num_shards >= 2);
    static uint8_t buf[10000];
    for (uint64_t i = 0; i < SAMPLES; i++)
        CHECK(larder_read_sample(dataset, i, buf, sizeof buf) > 0);
    cache = larder__dataset_cache(dataset);
}

static inline uint64_t total_blocks(void)
{
    uint64_t total = 0;
    for (uint32_t s = 0; s < larder__dataset_num_shards(dataset); s++)
        total += (larder__dataset_shard_size(dataset, s) + BLOCK - 1) / BLOCK;
    return total;
}

/* Global block b as (shard, block). */
static inline void locate(uint64_t b, uint32_t *shard, uint64_t *block)
{
    for (uint32_t s = 0;; s++) {
        uint64_t blocks = (larder__dataset_shard_size(dataset, s) + BLOCK - 1) / BLOCK;
        if (b < blocks) {
            *shard = s;
            *block = b;
            return;
        }
        b -= blocks;
    }
}

static inline bool resident(uint64_t b)
{
    uint32_t shard;
    uint64_t block;
    locate(b, &shard, &block);
    return larder__cache_present(cache, shard, block, block);
}

struct reader {
    struct larder__plan_params params;
    uint64_t consumed;
    int slot;
    uint32_t window; /* its prefetch window as registered (0: not said) */
};

/* Write the reference's input: the layout, the readers, the resident blocks and the limit. */
static inline void write_input(const char *path, const struct reader *r, int count, uint64_t limit)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "{\"block_size\": %d, \"shard_blocks\": [", BLOCK);
    for (uint32_t s = 0; s < larder__dataset_num_shards(dataset); s++)
        fprintf(f, "%s%llu", s ? ", " : "",
                (unsigned long long)((larder__dataset_shard_size(dataset, s) + BLOCK - 1) / BLOCK));
    fprintf(f, "], \"samples\": [");
    for (uint64_t i = 0; i < SAMPLES; i++) {
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(dataset, i, &s), 0);
        fprintf(f, "%s[%u, %llu, %llu]", i ? ", " : "", s.shard, (unsigned long long)s.offset,
                (unsigned long long)s.length);
    }
    fprintf(f, "], \"plans\": [");
    for (int i = 0; i < count; i++) {
        const struct larder__plan_params *p = &r[i].params;
        fprintf(f,
                "%s{\"seed\": %llu, \"epoch\": %llu, \"global_batch\": %llu, \"world\": %u, "
                "\"rank\": %u, \"workers\": %u, \"worker\": %u, \"start_step\": %llu, "
                "\"consumed\": %llu, \"window\": %u}",
                i ? ", " : "", (unsigned long long)p->seed, (unsigned long long)p->epoch,
                (unsigned long long)p->global_batch, p->world, p->rank, p->workers, p->worker,
                (unsigned long long)p->start_step, (unsigned long long)r[i].consumed, r[i].window);
    }
    fprintf(f, "], \"resident\": [");
    bool first = true;
    for (uint64_t b = 0; b < total_blocks(); b++)
        if (resident(b)) {
            fprintf(f, "%s%llu", first ? "" : ", ", (unsigned long long)b);
            first = false;
        }
    fprintf(f, "], \"limit\": %llu}\n", (unsigned long long)limit);
    fclose(f);
}

/* Run the reference: next_use[b] (-1: never) for every block, and the blocks to evict. */
static inline int reference(const struct reader *r, int count, uint64_t limit, long long *next_use,
                            long long *evict)
{
    write_input(test_path("reference.json"), r, count, limit);
    CHECK_EQ(test_sh("/usr/bin/python3 %s/tests/tools/nextuse_reference.py %s/docs/plan.md %s > %s",
                     LARDER_SOURCE_DIR, LARDER_SOURCE_DIR, test_path("reference.json"),
                     test_path("reference.txt")),
             0);
    FILE *f = fopen(test_path("reference.txt"), "r");
    CHECK(f != NULL);
    char line[64];
    uint64_t b = 0;
    int evicting = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "evict", 5) == 0)
            evicting = 0;
        else if (evicting < 0)
            next_use[b++] = atoll(line);
        else
            evict[evicting++] = atoll(line);
    }
    fclose(f);
    CHECK_EQ(b, total_blocks());
    return evicting < 0 ? 0 : evicting;
}

static inline void register_all(struct reader *r, int count)
{
    for (int i = 0; i < count; i++) {
        r[i].params.num_samples = SAMPLES;
        r[i].slot = larder__cache_plan_register(cache, &r[i].params);
        CHECK(r[i].slot >= 0);
        larder__cache_plan_advance(cache, r[i].slot, r[i].consumed);
        if (r[i].window) larder__cache_plan_set_window(cache, r[i].slot, r[i].window);
    }
}

static inline void unregister_all(struct reader *r, int count)
{
    for (int i = 0; i < count; i++)
        larder__cache_plan_unregister(cache, r[i].slot);
}

/* The C's next use of every block equals the reference's for readers `r`
 * (registered or not: the reference is told who counts); how many blocks
 * have a next use at all. */
static inline int expect_next_uses(const struct reader *r, int count)
{
    long long want[1024], evict[1024];
    CHECK(total_blocks() <= 1024);
    reference(r, count, 0, want, evict);
    int finite = 0;
    for (uint64_t b = 0; b < total_blocks(); b++) {
        uint32_t shard;
        uint64_t block;
        locate(b, &shard, &block);
        uint64_t got = larder__cache_next_use(cache, shard, block);
        long long have = got == UINT64_MAX ? -1 : (long long)got;
        if (have != want[b])
            fprintf(stderr, "    block %llu: next use %lld, the reference says %lld\n",
                    (unsigned long long)b, have, want[b]);
        CHECK_EQ(have, want[b]);
        finite += want[b] >= 0;
    }
    return finite;
}

/* The same with r registered, in a scenario where some block has a next use. */
static inline void check_next_uses(struct reader *r, int count)
{
    register_all(r, count);
    CHECK(expect_next_uses(r, count) > 0); /* the scenario says something */
    unregister_all(r, count);
}

static inline struct larder__plan_params plan(uint64_t epoch, uint32_t world, uint32_t rank,
                                              uint32_t workers, uint32_t worker, uint64_t start)
{
    return (struct larder__plan_params){.seed = 11,
                                        .epoch = epoch,
                                        .global_batch = 4,
                                        .start_step = start,
                                        .world = world,
                                        .rank = rank,
                                        .workers = workers,
                                        .worker = worker};
}

#endif
