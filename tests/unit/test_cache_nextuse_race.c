/*
 * test_cache_nextuse_race.c - readers never see a block evicted under
 * them while eviction by next use runs: threads and processes read random
 * samples through a cache a quarter of the dataset's size, with plans
 * registered and moving on (so every store evicts by next use and the
 * candidates are picked again and again, without the eviction lock, while
 * plans come and go), and every byte they get must be
 * the sample's own, regenerated here from its seed.  Repeated; also run
 * under ASan by the CI's sanitizer build.
 */
#include "cache.h"
#include "dataset.h"
#include "larder_pack.h"
#include "test.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCK 4096
#define SAMPLES 64
#define THREADS 4
#define READS 1500

static size_t size_of(int i)
{
    return (size_t)(i * 7919 % 9000) + 500;
}

static void make_dataset(void)
{
    char path[4096];
    for (int i = 0; i < SAMPLES; i++) {
        static uint8_t data[10000];
        test_fill_random(data, size_of(i), (uint64_t)i + 21);
        snprintf(path, sizeof path, "%s/src/s%03d.bin", test_dir(), i);
        test_write_file(path, data, size_of(i));
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = 150000,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
}

static larder_dataset *open_small(void)
{
    uint64_t total = 0;
    for (int i = 0; i < SAMPLES; i++)
        total += size_of(i);
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                              .cache_dir = test_path("cache"),
                              .block_size = BLOCK,
                              .cache_capacity = total / 4};
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &oo), 0);
    return d;
}

struct worker {
    larder_dataset *d;
    uint64_t seed;
    int failures;
    int slot;
    struct larder__plan_params plan; /* as registered */
};

/* Read random samples and compare every byte with the sample's own. */
static void *read_random(void *arg)
{
    struct worker *w = arg;
    static _Thread_local uint8_t buf[10000], want[10000];
    uint64_t x = w->seed;
    struct larder__cache *cache = larder__dataset_cache(w->d);
    for (int i = 0; i < READS; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        uint64_t id = (x >> 33) % SAMPLES;
        larder_sample_info s;
        larder_sample_info_get(w->d, id, &s);
        int source = atoi(s.key + 1); /* keys are sNNN, the file's name */
        int64_t n = larder_read_sample(w->d, id, buf, sizeof buf);
        test_fill_random(want, size_of(source), (uint64_t)source + 21);
        if (n != (int64_t)size_of(source) || memcmp(buf, want, size_of(source)) != 0) {
            fprintf(stderr, "    sample %llu: %lld bytes, %s\n", (unsigned long long)id,
                    (long long)n, n < 0 ? larder_errmsg() : "not the sample's bytes");
            w->failures++;
        }
        if (w->slot >= 0 && i % 16 == 0) /* the reader moves on: next uses change */
            larder__cache_plan_advance(cache, w->slot, (uint64_t)(i / 16) % 8);
        if (w->slot >= 0 && i % 200 == 199) { /* a new epoch: the orders scans walk change */
            larder__cache_plan_unregister(cache, w->slot);
            w->plan.epoch += 2;
            w->slot = larder__cache_plan_register(cache, &w->plan);
            larder__cache_plan_set_window(cache, w->slot, (uint32_t)(i % 3));
        }
    }
    return NULL;
}

/* THREADS readers on one handle, each registered as a worker of one rank. */
static int run_readers(uint64_t seed)
{
    larder_dataset *d = open_small();
    struct larder__cache *cache = larder__dataset_cache(d);
    pthread_t threads[THREADS];
    struct worker w[THREADS];
    for (int t = 0; t < THREADS; t++) {
        struct larder__plan_params p = {.seed = seed,
                                        .epoch = (uint64_t)t % 2,
                                        .global_batch = 8,
                                        .num_samples = SAMPLES,
                                        .world = 2,
                                        .rank = (uint32_t)t % 2,
                                        .workers = 2,
                                        .worker = (uint32_t)t / 2};
        w[t] = (struct worker){.d = d, .seed = seed * 100 + (uint64_t)t, .plan = p};
        w[t].slot = larder__cache_plan_register(cache, &p);
        CHECK(w[t].slot >= 0);
        CHECK_EQ(pthread_create(&threads[t], NULL, read_random, &w[t]), 0);
    }
    int failures = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        failures += w[t].failures;
    }
    /* the plans were live (eviction went by next use, not the clock) */
    int known = 0;
    for (uint64_t b = 0; b < 16; b++)
        known += larder__cache_next_use(cache, 0, b) != UINT64_MAX;
    CHECK(known > 0);
    for (int t = 0; t < THREADS; t++)
        larder__cache_plan_unregister(cache, w[t].slot);
    larder_stats st;
    CHECK_EQ(larder_stats_get(d, &st), 0);
    CHECK(st.evictions > 0); /* eviction really ran under the readers */
    larder_close(d);
    return failures;
}

TEST(nextuse_race_threads_never_see_evicted_bytes)
{
    make_dataset();
    for (uint64_t round = 1; round <= 3; round++)
        CHECK_EQ(run_readers(round), 0);
}

TEST(nextuse_race_processes_never_see_evicted_bytes)
{
    make_dataset();
    pid_t children[3];
    for (int c = 0; c < 3; c++) {
        children[c] = fork();
        if (children[c] == 0) _exit(run_readers(10 + (uint64_t)c) == 0 ? 0 : 1);
    }
    for (int c = 0; c < 3; c++) {
        int status;
        CHECK_EQ(waitpid(children[c], &status, 0), children[c]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

/* Processes that make a cache's plan registry at the same moment: each
 * registers a plan at once (no process may find a registry half made, or
 * have its slot wiped by another's making of it), over fresh caches. */
TEST(nextuse_registry_made_by_many_processes_at_once)
{
    make_dataset();
    enum { PROCESSES = 8, ROUNDS = 12 };
    for (int round = 0; round < ROUNDS; round++) {
        char dir[64];
        snprintf(dir, sizeof dir, "cache-many-%d", round);
        int go[2];
        CHECK_EQ(pipe(go), 0);
        pid_t children[PROCESSES];
        for (int c = 0; c < PROCESSES; c++) {
            children[c] = fork();
            if (children[c] == 0) {
                close(go[1]);
                larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                                          .cache_dir = test_path(dir),
                                          .block_size = BLOCK};
                larder_dataset *d;
                if (larder_open(&d, test_path("packed/index.larder"), &oo) < 0) _exit(2);
                char byte;
                if (read(go[0], &byte, 1) != 0) _exit(3); /* all start when the pipe closes */
                struct larder__cache *cache = larder__dataset_cache(d);
                struct larder__plan_params p = {.seed = 100 + (uint64_t)c,
                                                .global_batch = 8,
                                                .num_samples = SAMPLES,
                                                .world = 1,
                                                .workers = 1};
                int slot = larder__cache_plan_register(cache, &p);
                usleep(20000);
                /* still ours a moment later: no other process's making wiped it */
                struct larder__cache_plan live[LARDER__CACHE_PLAN_SLOTS];
                int n = larder__cache_plans_live(cache, SAMPLES, live, LARDER__CACHE_PLAN_SLOTS);
                int rc = slot < 0 ? 4 : 5;
                for (int i = 0; slot >= 0 && i < n; i++)
                    if (live[i].slot == slot && live[i].params.seed == p.seed) rc = 0;
                larder_close(d);
                _exit(rc);
            }
        }
        close(go[0]);
        usleep(50000);
        close(go[1]);
        for (int c = 0; c < PROCESSES; c++) {
            int status;
            CHECK_EQ(waitpid(children[c], &status, 0), children[c]);
            CHECK(WIFEXITED(status));
            CHECK_EQ(WEXITSTATUS(status), 0);
        }
    }
}
