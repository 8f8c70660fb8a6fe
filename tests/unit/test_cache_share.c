/*
 * test_cache_share.c - two datasets sharing one capacity
 * (LARDER_NODE_CACHE_SIZE, cache_share.c) by the rule of next use.  Both
 * are read whole with a plan registered for each; afterwards the two
 * together hold no more than the capacity, both gave up blocks, and no
 * block still cached is read later than any block that went (Belady's
 * rule keeps the nearest ones, whichever dataset they belong to).  The
 * next uses come from tests/tools/nextuse_reference.py, per dataset.
 */
#include "cache.h"
#include "dataset.h"
#include "larder_pack.h"
#include "share_fixture.h"
#include "test.h"

#define BLOCK 4096
#define SAMPLES 48

struct side {
    larder_dataset *d;
    struct larder__cache *cache;
    struct larder__plan_params plan;
    uint64_t consumed;
    int slot;
    uint64_t blocks;
    long long use[1024];
};

void share_fixture_make(const char *name, uint64_t seed, int samples, int spread,
                        uint64_t shard_size)
{
    char path[4096];
    for (int i = 0; i < samples; i++) {
        static uint8_t data[65536];
        size_t size = (size_t)(i * 7919 % spread) + 500;
        CHECK(size <= sizeof data);
        test_fill_random(data, size, seed + (uint64_t)i);
        snprintf(path, sizeof path, "%s/src-%s/s%03d.bin", test_dir(), name, i);
        test_write_file(path, data, size);
    }
    char src[4096], out[4096];
    snprintf(src, sizeof src, "%s/src-%s", test_dir(), name);
    snprintf(out, sizeof out, "%s/%s", test_dir(), name);
    const char *sources[] = {src};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = shard_size,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, out, &o, NULL), 0);
}

static void make(const char *name, uint64_t seed)
{
    share_fixture_make(name, seed, SAMPLES, 9000, 100000);
}

larder_dataset *share_fixture_open(const char *name, uint32_t block)
{
    char index[4096];
    snprintf(index, sizeof index, "%s/%s/index.larder", test_dir(), name);
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                              .cache_dir = test_path("cache"),
                              .block_size = block};
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, index, &oo), 0);
    return d;
}

static void open_side(struct side *s, const char *name)
{
    s->d = share_fixture_open(name, BLOCK);
    s->cache = larder__dataset_cache(s->d);
    s->plan.num_samples = SAMPLES;
    s->slot = larder__cache_plan_register(s->cache, &s->plan);
    CHECK(s->slot >= 0);
    larder__cache_plan_advance(s->cache, s->slot, s->consumed);
    s->blocks = 0;
    for (uint32_t k = 0; k < larder__dataset_num_shards(s->d); k++)
        s->blocks += (larder__dataset_shard_size(s->d, k) + BLOCK - 1) / BLOCK;
    CHECK(s->blocks <= 1024);
}

/* The reference's next use of every block of the side's dataset. */
static void reference(struct side *s)
{
    FILE *f = fopen(test_path("in.json"), "w");
    CHECK(f != NULL);
    fprintf(f, "{\"block_size\": %d, \"shard_blocks\": [", BLOCK);
    for (uint32_t k = 0; k < larder__dataset_num_shards(s->d); k++)
        fprintf(f, "%s%llu", k ? ", " : "",
                (unsigned long long)((larder__dataset_shard_size(s->d, k) + BLOCK - 1) / BLOCK));
    fprintf(f, "], \"samples\": [");
    for (uint64_t i = 0; i < SAMPLES; i++) {
        larder_sample_info x;
        CHECK_EQ(larder_sample_info_get(s->d, i, &x), 0);
        fprintf(f, "%s[%u, %llu, %llu]", i ? ", " : "", x.shard, (unsigned long long)x.offset,
                (unsigned long long)x.length);
    }
    const struct larder__plan_params *p = &s->plan;
    fprintf(f,
            "], \"plans\": [{\"seed\": %llu, \"epoch\": %llu, \"global_batch\": %llu, "
            "\"world\": %u, \"rank\": %u, \"workers\": %u, \"worker\": %u, \"start_step\": %llu, "
            "\"consumed\": %llu}]}\n",
            (unsigned long long)p->seed, (unsigned long long)p->epoch,
            (unsigned long long)p->global_batch, p->world, p->rank, p->workers, p->worker,
            (unsigned long long)p->start_step, (unsigned long long)s->consumed);
    fclose(f);
    CHECK_EQ(test_sh("/usr/bin/python3 %s/tests/tools/nextuse_reference.py %s/docs/plan.md %s > %s",
                     LARDER_SOURCE_DIR, LARDER_SOURCE_DIR, test_path("in.json"),
                     test_path("out.txt")),
             0);
    f = fopen(test_path("out.txt"), "r");
    CHECK(f != NULL);
    char line[64];
    uint64_t b = 0;
    while (fgets(line, sizeof line, f) && strncmp(line, "evict", 5) != 0)
        if (b < 1024) s->use[b++] = atoll(line);
    fclose(f);
    CHECK_EQ(b, s->blocks);
}

static bool resident(struct side *s, uint64_t b)
{
    for (uint32_t k = 0;; k++) {
        uint64_t count = (larder__dataset_shard_size(s->d, k) + BLOCK - 1) / BLOCK;
        if (b < count) return larder__cache_present(s->cache, k, b, b);
        b -= count;
    }
}

/* "never" compares as the farthest */
static long long rank_of(long long use)
{
    return use < 0 ? (1LL << 62) : use;
}

TEST(share_two_datasets_one_capacity_by_next_use)
{
    make("a", 100);
    make("b", 900);
    struct side a = {.plan = {.seed = 3, .epoch = 1, .global_batch = 4, .world = 2, .workers = 1},
                     .consumed = 1};
    struct side b = {.plan = {.seed = 8, .epoch = 6, .global_batch = 4, .world = 1, .workers = 1},
                     .consumed = 4};
    /* the capacity: 40% of the two datasets together */
    setenv("LARDER_NODE_CACHE_SIZE", "0", 1);
    open_side(&a, "a");
    open_side(&b, "b");
    uint64_t capacity_blocks = (a.blocks + b.blocks) * 2 / 5;
    larder_close(a.d);
    larder_close(b.d);
    char size[32];
    snprintf(size, sizeof size, "%llu", (unsigned long long)(capacity_blocks * BLOCK));
    setenv("LARDER_NODE_CACHE_SIZE", size, 1);
    CHECK_EQ(test_sh("rm -rf %s", test_path("cache")), 0);
    open_side(&a, "a");
    open_side(&b, "b");
    reference(&a);
    reference(&b);
    static uint8_t buf[10000];
    for (uint64_t i = 0; i < SAMPLES; i++) { /* the two readers take turns */
        CHECK(larder_read_sample(a.d, i, buf, sizeof buf) > 0);
        CHECK(larder_read_sample(b.d, i, buf, sizeof buf) > 0);
    }
    uint64_t held = 0, held_a = 0, held_b = 0;
    long long farthest_kept = -1, nearest_gone = 1LL << 62;
    struct side *sides[2] = {&a, &b};
    for (int k = 0; k < 2; k++)
        for (uint64_t x = 0; x < sides[k]->blocks; x++) {
            long long r = rank_of(sides[k]->use[x]);
            if (resident(sides[k], x)) {
                held++;
                if (k)
                    held_b++;
                else
                    held_a++;
                if (r > farthest_kept) farthest_kept = r;
            } else if (r < nearest_gone) {
                nearest_gone = r;
            }
        }
    fprintf(stderr,
            "    held %llu of %llu blocks (a %llu, b %llu); farthest kept %lld, nearest gone "
            "%lld\n",
            (unsigned long long)held, (unsigned long long)capacity_blocks,
            (unsigned long long)held_a, (unsigned long long)held_b, farthest_kept, nearest_gone);
    CHECK(held <= capacity_blocks);
    CHECK(held >= capacity_blocks - 2);            /* filled, not emptied */
    CHECK(held_a < a.blocks && held_b < b.blocks); /* both gave up blocks */
    CHECK(farthest_kept <= nearest_gone);
    larder__cache_plan_unregister(a.cache, a.slot);
    larder__cache_plan_unregister(b.cache, b.slot);
    larder_close(a.d);
    larder_close(b.d);
    unsetenv("LARDER_NODE_CACHE_SIZE");
}
