/*
 * test_cache_nextuse.c - eviction by next use (cache_plans.c,
 * cache_nextuse.c).  Every expected value comes from
 * tests/tools/nextuse_reference.py, which walks the readers' future reads
 * from docs/plan.md's own code: the next use of every block under several
 * plans (a reader moving on, a new epoch, a resume on another world size,
 * two readers), exactly which blocks an eviction takes, that admission
 * reads through a block no reader needs, and that dead readers' plans are
 * dropped.  The races (readers against eviction by next use, in threads
 * and processes) are test_cache_nextuse_race.c.
 */
#include "cache.h"
#include "dataset.h"
#include "larder_pack.h"
#include "test.h"

#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 4096
#define SAMPLES 48

static larder_dataset *dataset;
static struct larder__cache *cache;

/* Flat shards of samples from 500 to 9,500 bytes (sharing and spanning
 * blocks of 4 KiB), all read once so that every block is resident. */
static void setup(void)
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

static uint64_t total_blocks(void)
{
    uint64_t total = 0;
    for (uint32_t s = 0; s < larder__dataset_num_shards(dataset); s++)
        total += (larder__dataset_shard_size(dataset, s) + BLOCK - 1) / BLOCK;
    return total;
}

/* Global block b as (shard, block). */
static void locate(uint64_t b, uint32_t *shard, uint64_t *block)
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

static bool resident(uint64_t b)
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
};

/* Write the reference's input: the layout, the readers, the resident blocks and the limit. */
static void write_input(const char *path, const struct reader *r, int count, uint64_t limit)
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
                "\"consumed\": %llu}",
                i ? ", " : "", (unsigned long long)p->seed, (unsigned long long)p->epoch,
                (unsigned long long)p->global_batch, p->world, p->rank, p->workers, p->worker,
                (unsigned long long)p->start_step, (unsigned long long)r[i].consumed);
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
static int reference(const struct reader *r, int count, uint64_t limit, long long *next_use,
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

static void register_all(struct reader *r, int count)
{
    for (int i = 0; i < count; i++) {
        r[i].params.num_samples = SAMPLES;
        r[i].slot = larder__cache_plan_register(cache, &r[i].params);
        CHECK(r[i].slot >= 0);
        larder__cache_plan_advance(cache, r[i].slot, r[i].consumed);
    }
}

static void unregister_all(struct reader *r, int count)
{
    for (int i = 0; i < count; i++)
        larder__cache_plan_unregister(cache, r[i].slot);
}

/* The C's next use of every block equals the reference's. */
static void check_next_uses(struct reader *r, int count)
{
    long long want[1024], evict[1024];
    CHECK(total_blocks() <= 1024);
    register_all(r, count);
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
    CHECK(finite > 0); /* the scenario says something */
    unregister_all(r, count);
}

static struct larder__plan_params plan(uint64_t epoch, uint32_t world, uint32_t rank,
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

TEST(nextuse_matches_reference_as_plans_change)
{
    setup();
    /* a reader (rank 0 of 2, worker 1 of 2) two of its steps in, then four */
    struct reader a[] = {{.params = plan(3, 2, 0, 2, 1, 0), .consumed = 2}};
    check_next_uses(a, 1);
    a[0].consumed = 4;
    check_next_uses(a, 1);
    /* near the end of the epoch the next epoch's order counts */
    a[0].consumed = 5;
    check_next_uses(a, 1);
    /* a new epoch */
    struct reader b[] = {{.params = plan(4, 2, 0, 2, 1, 0), .consumed = 0}};
    check_next_uses(b, 1);
    /* a resume at step 5 on another world size, one worker */
    struct reader c[] = {{.params = plan(4, 4, 3, 1, 0, 5), .consumed = 1}};
    check_next_uses(c, 1);
    /* two readers of the node: ranks 0 and 1 of 2 */
    struct reader d[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 3},
                         {.params = plan(3, 2, 1, 1, 0, 0), .consumed = 2}};
    check_next_uses(d, 2);
    larder_close(dataset);
}

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
    CHECK_EQ(larder__nextuse_step(40, 4, 0), 4);
    CHECK_EQ(larder__nextuse_step(40, 5, 0), 5 + 0xe220a8397b1dcdaf % 35);
    CHECK_EQ(larder__nextuse_step(40, 39, 0), 5 + 0xe220a8397b1dcdaf % 35);
    CHECK_EQ(larder__nextuse_step(1, 0, 0), 0);
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

TEST(nextuse_evicts_exactly_the_farthest_blocks)
{
    setup();
    struct reader r[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 3},
                         {.params = plan(3, 2, 1, 1, 0, 0), .consumed = 2}};
    register_all(r, 2);
    uint64_t before = 0;
    bool was[1024];
    for (uint64_t b = 0; b < total_blocks(); b++)
        before += was[b] = resident(b);
    long long use[1024], evict[1024];
    for (int round = 0; round < 2; round++) {
        uint64_t limit = before * (round ? 1 : 2) / 4; /* to a half, then a quarter */
        int count = reference(r, 2, limit, use, evict);
        CHECK(count > 0);
        /* the node's capacity, set by another opener as a daemon would */
        struct larder__cache *other;
        CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset),
                                    BLOCK, limit * BLOCK, 0),
                 0);
        larder__cache_trim(cache);
        larder__cache_close(other);
        int evicted = 0;
        for (uint64_t b = 0; b < total_blocks(); b++)
            if (was[b] && !resident(b)) {
                bool expected = false;
                for (int i = 0; i < count; i++)
                    expected = expected || evict[i] == (long long)b;
                if (!expected)
                    fprintf(stderr, "    round %d: block %llu (next use %lld) went\n", round,
                            (unsigned long long)b, use[b]);
                CHECK(expected);
                evicted++;
                was[b] = false;
            }
        CHECK_EQ(evicted, count);
        before -= (uint64_t)count;
        /* the readers move on before the second round */
        r[0].consumed = 6;
        r[1].consumed = 5;
        larder__cache_plan_advance(cache, r[0].slot, 6);
        larder__cache_plan_advance(cache, r[1].slot, 5);
    }
    unregister_all(r, 2);
    larder_close(dataset);
}

TEST(nextuse_admission_reads_through_what_no_reader_needs)
{
    setup();
    /* one reader, rank 0 of 2: the other rank's samples are another node's */
    struct reader r[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 1}};
    register_all(r, 1);
    long long use[1024], evict[1024];
    reference(r, 1, 0, use, evict);
    uint64_t total = total_blocks(), present = 0;
    for (uint64_t b = 0; b < total; b++)
        present += resident(b);
    /* a full cache: capacity at what is resident less the blocks no one needs */
    uint64_t never = 0;
    for (uint64_t b = 0; b < total; b++)
        never += resident(b) && use[b] < 0;
    CHECK(never > 0);
    struct larder__cache *other;
    uint64_t limit = present - never;
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                limit * BLOCK, 0),
             0);
    larder__cache_trim(cache);
    for (uint64_t b = 0; b < total; b++)
        CHECK(!resident(b) || use[b] >= 0); /* exactly the unneeded ones went */
    /* reading a sample whose blocks no reader needs serves it, keeps nothing */
    static uint8_t buf[10000];
    int tried = 0;
    for (uint64_t id = 0; id < SAMPLES && tried < 3; id++) {
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(dataset, id, &s), 0);
        uint64_t first = s.offset / BLOCK, last = (s.offset + s.length - 1) / BLOCK, base = 0;
        for (uint32_t k = 0; k < s.shard; k++)
            base += (larder__dataset_shard_size(dataset, k) + BLOCK - 1) / BLOCK;
        bool unneeded = true, absent = true;
        for (uint64_t b = first; b <= last; b++) {
            unneeded = unneeded && use[base + b] < 0;
            absent = absent && !resident(base + b);
        }
        if (!unneeded || !absent) continue;
        tried++;
        larder_stats st;
        larder_stats_get(dataset, &st);
        uint64_t resident_before = st.resident_bytes;
        CHECK_EQ(larder_read_sample(dataset, id, buf, sizeof buf), (int64_t)s.length);
        for (uint64_t b = first; b <= last; b++)
            CHECK(!resident(base + b));
        larder_stats_get(dataset, &st);
        CHECK(st.resident_bytes <= resident_before);
    }
    CHECK(tried > 0);
    larder__cache_close(other);
    unregister_all(r, 1);
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

TEST(nextuse_dead_readers_plans_are_dropped)
{
    setup();
    uint64_t generation = larder__cache_plans_generation(cache);
    pid_t child = fork();
    if (child == 0) {
        struct larder__plan_params p = plan(3, 1, 0, 1, 0, 0);
        p.num_samples = SAMPLES;
        _exit(larder__cache_plan_register(cache, &p) >= 0 ? 0 : 1);
    }
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(larder__cache_plans_generation(cache) != generation);
    struct larder__cache_plan live[LARDER__CACHE_PLAN_SLOTS];
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 0);
    /* and a live one is listed, with what it registered */
    struct reader r[] = {{.params = plan(3, 2, 1, 1, 0, 0), .consumed = 0}};
    register_all(r, 1);
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 1);
    CHECK_EQ(live[0].params.rank, 1);
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES + 1, live, LARDER__CACHE_PLAN_SLOTS), 0);
    unregister_all(r, 1);
    larder_close(dataset);
}

TEST(nextuse_hostile_registry_is_ignored)
{
    setup();
    /* a live slot of ours, then its fields overwritten with nonsense, as a
     * damaged (or written by someone else) file would hold */
    struct reader r[] = {{.params = plan(3, 2, 0, 1, 0, 0), .consumed = 1}};
    register_all(r, 1);
    struct larder__cache_plan live[LARDER__CACHE_PLAN_SLOTS];
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 1);
    char path[4096];
    larder_dataset_info info;
    larder_dataset_info_get(dataset, &info);
    snprintf(path, sizeof path, "%s/%s/plans", test_path("cache"), info.dataset_id);
    size_t length;
    uint8_t *bytes = test_read_file(path, &length);
    CHECK(length >= 64 + 128);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    /* slot 0's world (offset 64 + 64 in the file) set to 0, then rank past world */
    uint32_t bad[4] = {0, 5, 1, 0};
    fseek(f, 64 + 8 * 8, SEEK_SET); /* world, rank, workers, worker follow 8 words */
    CHECK_EQ(fwrite(bad, sizeof bad, 1, f), 1);
    fflush(f);
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 0);
    uint32_t big[4] = {1u << 31, 3, 0, 0}; /* a world that does not divide G, no workers */
    fseek(f, 64 + 8 * 8, SEEK_SET);
    CHECK_EQ(fwrite(big, sizeof big, 1, f), 1);
    fflush(f);
    CHECK_EQ(larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS), 0);
    /* random bytes over every slot: nothing sane is listed, nothing breaks */
    static uint8_t noise[64 * 128];
    test_fill_random(noise, sizeof noise, 77);
    fseek(f, 64, SEEK_SET);
    CHECK_EQ(fwrite(noise, sizeof noise, 1, f), 1);
    fclose(f);
    int n = larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS);
    CHECK(n >= 0 && n <= LARDER__CACHE_PLAN_SLOTS);
    for (uint64_t b = 0; b < 4; b++)
        larder__cache_next_use(cache, 0, b);
    larder__cache_trim(cache);
    free(bytes);
    larder_close(dataset);
}

TEST(nextuse_prefers_dropping_borrowed_blocks)
{
    setup();
    /* one reader of the whole order: every block has a next use */
    struct reader r[] = {{.params = plan(3, 1, 0, 1, 0, 0), .consumed = 2}};
    register_all(r, 1);
    long long use[1024], evict[1024];
    reference(r, 1, 0, use, evict);
    uint64_t total = total_blocks(), present = 0, farthest = 0;
    for (uint64_t b = 0; b < total; b++)
        if (resident(b)) {
            present++;
            CHECK(use[b] >= 0);
            if (use[b] > use[farthest] || !resident(farthest)) farthest = b;
        }
    /* a block nearer than the farthest, but farther than a quarter of it,
     * kept again as borrowed from a peer */
    uint64_t borrowed = UINT64_MAX;
    for (uint64_t b = 0; b < total && borrowed == UINT64_MAX; b++)
        if (resident(b) && use[b] < use[farthest] && 4 * use[b] > use[farthest]) borrowed = b;
    CHECK(borrowed != UINT64_MAX);
    uint32_t shard;
    uint64_t block;
    locate(borrowed, &shard, &block);
    static uint8_t bytes[BLOCK];
    uint64_t length = larder__cache_span(cache, shard, block, block);
    CHECK_EQ(larder__cache_pread(cache, shard, bytes, (size_t)length, block * BLOCK), 0);
    int lock = larder__cache_lock(cache, shard, block, block);
    CHECK(lock >= 0);
    CHECK_EQ(larder__cache_store(cache, shard, block, block, bytes, true, true), 0);
    larder__cache_unlock(cache, lock);
    /* room for one block less: the borrowed one goes, not the farthest */
    struct larder__cache *other;
    CHECK_EQ(larder__cache_open(&other, test_path("cache"), larder__dataset_index(dataset), BLOCK,
                                (present - 1) * BLOCK, 0),
             0);
    larder__cache_trim(cache);
    CHECK(!resident(borrowed));
    CHECK(resident(farthest));
    larder__cache_close(other);
    unregister_all(r, 1);
    larder_close(dataset);
}

TEST(nextuse_registry_never_follows_a_symlink)
{
    setup();
    /* someone who may write the cache directory puts a link where the
     * plans file goes, to a file of the reader's: registering must not
     * grow, zero or write that file (it did before O_NOFOLLOW) */
    char path[4096];
    larder_dataset_info info;
    larder_dataset_info_get(dataset, &info);
    snprintf(path, sizeof path, "%s/%s/plans", test_path("cache"), info.dataset_id);
    unlink(path);
    static const char victim_text[] = "the reader's own file, not the cache's";
    test_write_file(test_path("victim"), victim_text, sizeof victim_text);
    CHECK_EQ(symlink(test_path("victim"), path), 0);
    struct larder__plan_params p = plan(0, 1, 0, 1, 0, 0);
    p.num_samples = SAMPLES;
    int slot = larder__cache_plan_register(cache, &p);
    if (slot >= 0) larder__cache_plan_unregister(cache, slot);
    size_t length;
    uint8_t *bytes = test_read_file(test_path("victim"), &length);
    CHECK_EQ(length, sizeof victim_text);
    CHECK(memcmp(bytes, victim_text, sizeof victim_text) == 0);
    free(bytes);
    larder_close(dataset);
}
