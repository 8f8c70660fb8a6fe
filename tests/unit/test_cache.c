/*
 * test_cache.c - the node-local cache: cold then warm reads, restarts,
 * single flight across threads and processes, damage underneath, a full
 * disk, eviction, and refusal of a foreign cache.
 */
#include "larder_pack.h"
#include "sys.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Pack n samples of varied sizes (some spanning blocks) into DIR/packed. */
static void make_dataset(int n, uint64_t shard_size)
{
    char path[4096];
    for (int i = 0; i < n; i++) {
        static uint8_t data[300000];
        size_t size = (size_t)(i * 7919 % 150000) + 100;
        test_fill_random(data, size, (uint64_t)i + 1);
        snprintf(path, sizeof path, "%s/src/s%04d.bin", test_dir(), i);
        test_write_file(path, data, size);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {
        .version = LARDER_PACK_OPTIONS_VERSION, .shard_size = shard_size, .shuffle = 1, .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
}

static larder_dataset *open_cached(const char *cache, uint32_t block_size, uint64_t capacity)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = cache,
                             .block_size = block_size,
                             .cache_capacity = capacity};
    larder_dataset *d;
    int rc = larder_open(&d, test_path("packed/index.larder"), &o);
    if (rc) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    return d;
}

/* Read every sample and compare with its source file. */
static void read_all(larder_dataset *d)
{
    static uint8_t buf[300000];
    for (uint64_t i = 0; i < larder_num_samples(d); i++) {
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(d, i, &s), 0);
        int64_t n = larder_read_field(d, i, 0, buf, sizeof buf);
        if (n < 0) fprintf(stderr, "    sample %llu: %s\n", (unsigned long long)i, larder_errmsg());
        CHECK(n > 0);
        char path[4096];
        snprintf(path, sizeof path, "%s/src/%s.bin", test_dir(), s.key);
        size_t size;
        uint8_t *want = test_read_file(path, &size);
        CHECK_EQ(n, size);
        CHECK(memcmp(buf, want, size) == 0);
        free(want);
    }
}

static larder_stats stats_of(larder_dataset *d)
{
    larder_stats s;
    CHECK_EQ(larder_stats_get(d, &s), 0);
    return s;
}

TEST(cache_cold_then_warm_then_restart)
{
    make_dataset(120, 4 << 20);
    larder_dataset *d = open_cached(test_path("cache"), 0, 0);
    read_all(d);
    larder_stats cold = stats_of(d);
    CHECK(cold.cached);
    CHECK_EQ(cold.hits + cold.misses, 120);
    CHECK(cold.origin_requests <= 120); /* at most one origin read per sample */
    /* origin bytes over bytes needed: whole blocks only, so a little more */
    CHECK(cold.origin_bytes <= cold.total_bytes);
    CHECK_EQ(cold.resident_bytes, cold.total_bytes);
    read_all(d);
    larder_stats warm = stats_of(d);
    CHECK_EQ(warm.origin_requests, cold.origin_requests); /* none in the second epoch */
    CHECK_EQ(warm.hits, cold.hits + 120);
    larder_close(d);
    /* a new process (here: a new open) finds it warm */
    d = open_cached(test_path("cache"), 0, 0);
    read_all(d);
    CHECK_EQ(stats_of(d).origin_requests, cold.origin_requests);
    larder_close(d);
    /* another block size is refused, naming both */
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = test_path("cache"),
                             .block_size = 4096};
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &o), LARDER_ECACHE);
    CHECK(strstr(larder_errmsg(), "65536") != NULL);
    CHECK(strstr(larder_errmsg(), "4096") != NULL);
}

/* Read ids[0..n) in one batch and compare each with its source file. */
static void batch_matches_sources(larder_dataset *d, const uint64_t *ids, size_t n)
{
    void *bufs[64];
    size_t caps[64];
    int64_t results[64];
    CHECK(n <= 64);
    for (size_t i = 0; i < n; i++) {
        caps[i] = 300000;
        bufs[i] = malloc(caps[i]);
    }
    CHECK_EQ(larder_read_samples(d, ids, n, bufs, caps, results), (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(d, ids[i], &s), 0);
        char path[4096];
        snprintf(path, sizeof path, "%s/src/%s.bin", test_dir(), s.key);
        size_t size;
        uint8_t *want = test_read_file(path, &size);
        larder_field_info f; /* a packed sample: a tar header, then its one field */
        CHECK_EQ(larder_field_info_get(d, ids[i], 0, &f), 0);
        CHECK_EQ(results[i], (int64_t)s.length);
        CHECK_EQ(f.length, size);
        CHECK(f.offset + f.length <= s.length);
        CHECK(memcmp((uint8_t *)bufs[i] + f.offset, want, size) == 0);
        free(want);
        free(bufs[i]);
    }
}

TEST(cache_small_blocks_and_batches)
{
    make_dataset(60, 1 << 20);
    larder_dataset *d = open_cached(test_path("cache"), 4096, 0);
    uint64_t n = larder_num_samples(d);
    uint64_t ids[60];
    int64_t results[60];
    CHECK_EQ(n, 60);
    for (uint64_t i = 0; i < n; i++)
        ids[i] = n - 1 - i;
    batch_matches_sources(d, ids, n);
    uint64_t hits = stats_of(d).hits; /* a few: fills that found a shared block done */
    read_all(d);
    larder_stats st = stats_of(d);
    CHECK_EQ(st.block_size, 4096);
    CHECK_EQ(st.hits - hits, n); /* the second pass */
    /* a buffer too small fails that sample alone */
    uint8_t small[8];
    void *one[1] = {small};
    size_t cap[1] = {sizeof small};
    CHECK_EQ(larder_read_samples(d, ids, 1, one, cap, results), LARDER_ETOOSMALL);
    larder_close(d);
}

/* A batch with some samples resident (read on the caller's thread) and
 * the rest not (read by the pool meanwhile): every sample byte-exact, the
 * resident ones counted as hits with no origin read, and a resident
 * sample whose cached bytes were damaged is fetched again, not served. */
TEST(cache_batch_resident_and_missing)
{
    make_dataset(60, 1 << 20);
    larder_dataset *d = open_cached(test_path("cache"), 4096, 0);
    uint64_t ids[60];
    static uint8_t buf[300000];
    for (uint64_t i = 0; i < 60; i += 3) /* a third resident first */
        CHECK(larder_read_sample(d, i, buf, sizeof buf) > 0);
    larder_stats before = stats_of(d);
    for (size_t i = 0; i < 60; i++)
        ids[i] = (uint64_t)(59 - i);
    batch_matches_sources(d, ids, 60);
    larder_stats after = stats_of(d);
    CHECK(after.hits - before.hits >= 20);
    CHECK(after.origin_requests - before.origin_requests <= 40);
    batch_matches_sources(d, ids, 60); /* all resident now */
    CHECK_EQ(stats_of(d).origin_requests, after.origin_requests);
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    larder_close(d);
    /* every data file scribbled on at its start: a new open's batch (all
     * resident, none checked yet in this process) must find it */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", test_path("cache"), info.dataset_id);
    CHECK_EQ(test_sh("for f in %s/*.data; do printf 'XXXXXXXXXXXXXXXX' | "
                     "dd of=$f bs=1 seek=600 conv=notrunc 2>/dev/null; done",
                     dir),
             0);
    d = open_cached(test_path("cache"), 4096, 0);
    batch_matches_sources(d, ids, 60);
    CHECK(stats_of(d).refetches >= 1);
    larder_close(d);
}

TEST(cache_repairs_damage_underneath)
{
    make_dataset(40, 1 << 20);
    larder_dataset *d = open_cached(test_path("cache"), 0, 0);
    read_all(d); /* fills */
    read_all(d); /* checks each sample once in this process */
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", test_path("cache"), info.dataset_id);
    /* cut one data file and delete another while this process runs */
    CHECK_EQ(test_sh("truncate -s 5000 %s/000001.data && rm %s/000002.data", dir, dir), 0);
    read_all(d); /* the cut is seen at once; the deleted file is still open here */
    CHECK(stats_of(d).refetches >= 1);
    larder_close(d);
    /* scribble on a third; a new process finds it, and the deleted one */
    CHECK_EQ(test_sh("printf 'XXXXXXXXXXXXXXXX' | dd of=%s/000000.data bs=1 seek=1000 "
                     "conv=notrunc 2>/dev/null",
                     dir),
             0);
    uint64_t refetches = stats_of(d = open_cached(test_path("cache"), 0, 0)).refetches;
    uint64_t misses = stats_of(d).misses;
    read_all(d);
    CHECK(stats_of(d).refetches > refetches); /* the scribble */
    CHECK(stats_of(d).misses > misses + 1);   /* and the deleted file's samples */
    uint64_t before = stats_of(d).origin_requests;
    read_all(d);
    CHECK_EQ(stats_of(d).origin_requests, before); /* repaired for good */
    larder_close(d);
}

TEST(cache_origin_corruption_is_an_error)
{
    make_dataset(10, 1 << 20);
    larder_dataset *d = open_cached(test_path("cache"), 0, 0);
    larder_sample_info s;
    CHECK_EQ(larder_sample_info_get(d, 3, &s), 0);
    CHECK_EQ(test_sh("printf 'Z' | dd of=%s/packed/%s bs=1 seek=%llu conv=notrunc 2>/dev/null",
                     test_dir(), s.shard_name, (unsigned long long)(s.offset + s.length / 2)),
             0);
    static uint8_t buf[300000];
    CHECK_EQ(larder_read_sample(d, 3, buf, sizeof buf), LARDER_ECHECKSUM);
    CHECK(strstr(larder_errmsg(), s.key) != NULL);
    CHECK(strstr(larder_errmsg(), "origin") != NULL);
    CHECK_EQ(stats_of(d).refetches, 1); /* fetched once more before giving up */
    CHECK_EQ(larder_read_sample(d, 3, buf, sizeof buf), LARDER_ECHECKSUM); /* not cached */
    CHECK(larder_read_sample(d, 4, buf, sizeof buf) > 0);
    larder_close(d);
}

/* ---- a slow origin, for single flight -------------------------------------- */

struct reader {
    larder_dataset *d;
    uint64_t id;
    int64_t result;
};

static void *read_one(void *arg)
{
    struct reader *r = arg;
    static _Thread_local uint8_t buf[300000];
    r->result = larder_read_sample(r->d, r->id, buf, sizeof buf);
    return NULL;
}

TEST(cache_single_flight_threads)
{
    make_dataset(10, 1 << 20);
    test_slow_origin(30);
    larder_dataset *d = open_cached(test_path("cache"), 0, 0);
    pthread_t threads[8];
    struct reader readers[8];
    for (int i = 0; i < 8; i++) {
        readers[i] = (struct reader){.d = d, .id = 5};
        pthread_create(&threads[i], NULL, read_one, &readers[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(threads[i], NULL);
        CHECK(readers[i].result > 0);
    }
    larder_stats st = stats_of(d);
    CHECK_EQ(st.origin_requests, 1);
    CHECK_EQ(st.misses, 1);
    CHECK_EQ(st.hits, 7);
    larder_close(d);
    test_slow_origin(0);
}

TEST(cache_single_flight_processes)
{
    make_dataset(30, 1 << 20);
    /* the cache exists before the children start */
    larder_close(open_cached(test_path("cache"), 0, 0));
    pid_t children[4];
    for (int c = 0; c < 4; c++) {
        if ((children[c] = fork()) == 0) {
            test_slow_origin(30);
            larder_dataset *d = open_cached(test_path("cache"), 0, 0);
            static uint8_t buf[300000];
            int bad = 0;
            for (uint64_t i = 0; i < larder_num_samples(d); i++)
                bad += larder_read_sample(d, (i + (uint64_t)c * 7) % larder_num_samples(d), buf,
                                          sizeof buf) <= 0;
            larder_close(d);
            _exit(bad ? 1 : 0);
        }
    }
    for (int c = 0; c < 4; c++) {
        int status;
        waitpid(children[c], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    larder_dataset *d = open_cached(test_path("cache"), 0, 0);
    larder_stats st = stats_of(d);
    CHECK_EQ(st.hits + st.misses, 4 * 30);
    /* each block came from the origin once for the whole node */
    CHECK(st.origin_bytes <= st.total_bytes);
    CHECK_EQ(st.resident_bytes, st.total_bytes);
    read_all(d);
    larder_close(d);
}

/* Readers killed in the middle of fills, again and again: afterwards every
 * sample reads right, and no cached block was ever marked before written. */
TEST(cache_survives_killed_readers)
{
    make_dataset(60, 1 << 20);
    larder_close(open_cached(test_path("cache"), 0, 0));
    for (int round = 0; round < 12; round++) {
        pid_t child = fork();
        if (child == 0) {
            test_slow_origin(30);
            larder_dataset *d = open_cached(test_path("cache"), 0, 0);
            static uint8_t buf[300000];
            for (uint64_t i = 0;; i = (i + 1) % larder_num_samples(d))
                larder_read_sample(d, (i * 13 + (uint64_t)round) % larder_num_samples(d), buf,
                                   sizeof buf);
        }
        struct timespec pause = {0, (long)(20 + round * 17 % 90) * 1000 * 1000};
        nanosleep(&pause, NULL);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    larder_dataset *d = open_cached(test_path("cache"), 0, 0);
    read_all(d);
    CHECK_EQ(stats_of(d).refetches, 0);
    larder_close(d);
}

/* ---- a full disk ---------------------------------------------------------- */

static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);

static ssize_t full_pwrite(int fd, const void *buf, size_t count, off_t offset)
{
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n > 0) {
        target[n] = '\0';
        if (strstr(target, ".data")) {
            errno = ENOSPC;
            return -1;
        }
    }
    return real_pwrite(fd, buf, count, offset);
}

static int warnings;
static void count_warning(void *userdata, int level, const char *message)
{
    (void)userdata;
    if (level == LARDER_LOG_WARN && strstr(message, "without caching")) warnings++;
}

TEST(cache_disk_full_serves_uncached)
{
    make_dataset(20, 1 << 20);
    larder_set_log(count_warning, NULL, LARDER_LOG_WARN);
    real_pwrite = larder__sys.pwrite;
    larder__sys.pwrite = full_pwrite;
    larder_dataset *d = open_cached(test_path("cache"), 0, 0);
    read_all(d);
    larder_stats st = stats_of(d);
    CHECK_EQ(st.uncached_fills, st.misses);
    CHECK_EQ(st.resident_bytes, 0);
    CHECK_EQ(warnings, 1); /* warned once */
    larder__sys.pwrite = real_pwrite;
    read_all(d); /* space again: now it caches */
    CHECK_EQ(stats_of(d).resident_bytes, st.total_bytes);
    larder_close(d);
    larder_set_log(NULL, NULL, LARDER_LOG_WARN);
}

TEST(cache_capacity_evicts)
{
    make_dataset(80, 1 << 20);
    uint64_t capacity = 1 << 20; /* 16 blocks of 64 KiB */
    larder_dataset *d = open_cached(test_path("cache"), 0, capacity);
    read_all(d);
    read_all(d);
    larder_stats st = stats_of(d);
    CHECK(st.evictions > 0);
    CHECK(st.resident_bytes <= capacity);
    CHECK(st.total_bytes > 4 * capacity);
    /* the evicted blocks are holes: the data files use about the capacity */
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    CHECK_EQ(test_sh("test $(du -sk %s/%s | cut -f1) -le %llu", test_path("cache"), info.dataset_id,
                     (unsigned long long)(capacity / 1024 + 256)),
             0);
    larder_close(d);
}

TEST(cache_unusable_directory)
{
    make_dataset(3, 1 << 20);
    test_write_file(test_path("afile"), "x", 1);
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = test_path("afile")};
    larder_dataset *d;
    int rc = larder_open(&d, test_path("packed/index.larder"), &o);
    CHECK(rc < 0);
    CHECK(strstr(larder_errmsg(), "afile") != NULL);
    /* "" means no cache, even with LARDER_CACHE set */
    setenv("LARDER_CACHE", test_path("envcache"), 1);
    o.cache_dir = "";
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &o), 0);
    CHECK_EQ(stats_of(d).cached, 0);
    larder_close(d);
    o.cache_dir = NULL;
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &o), 0);
    CHECK_EQ(stats_of(d).cached, 1);
    larder_close(d);
    unsetenv("LARDER_CACHE");
}
