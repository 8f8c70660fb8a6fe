/*
 * restart_read.c - the readers of bench/restart.sh, talking to their
 * node's daemon (larderd) over its Unix socket the way a reader does.
 *
 *   larder_bench_restart read SOCKET INDEX [THREADS] [CHUNK_KB] [PRIORITY]
 *
 * One rank loading a checkpoint: every byte of every shard of INDEX (a
 * pack of the checkpoint's files, or an `index --files` of them), in
 * shard order, as READs of CHUNK_KB (default 4096) with THREADS (default
 * 16) in flight, at PRIORITY (0 demand .. 3 warm; default 0).  Bytes are
 * discarded: the daemon checked them against the index before sending.
 * Prints "BYTES SECONDS".
 *
 *   larder_bench_restart files SOCKET CACHE INDEX [THREADS] [CHUNK_KB]
 *
 * The same rank reading the same bytes as a program does through the
 * public file API (larder_file_open and larder_file_pread: what
 * `larder.open(...)` hands `torch.load`), with the node cache CACHE its
 * daemon (at SOCKET) keeps: a range already in the cache is one pread of
 * the cache file, checked; a miss is asked of the daemon.  Every sample
 * (a checkpoint file of an `index --files` index) in id order, CHUNK_KB
 * pieces, THREADS in flight.  Prints "BYTES SECONDS".
 *
 *   larder_bench_restart train SOCKET INDEX STEPS BATCH COMPUTE_MS
 *
 * A training loop: each step reads BATCH samples, in id order, through the
 * public API with LARDER_SOCKET set to SOCKET (so every read is a DEMAND
 * READ of the daemon), then sleeps COMPUTE_MS.  Prints the per-step data
 * wait in ms: "mean p50 p99 max", then the machine's CPU pressure during
 * the waits: the time some runnable task waited for a core (Linux PSI,
 * /proc/pressure/cpu "some"), in ms per step, over all steps and over the
 * steps at or above the p99 wait ("psi_all psi_slow"; -1 without PSI).
 * Slow steps with high pressure are slow for want of a core, whoever's
 * task it was.
 */
#include "larder.h"

#include "endpoint.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct larder__endpoint *endpoint; /* read: READs go here */
static larder_file **files;               /* files: one handle per sample */
static uint64_t id_low, id_high, chunk;
/* what a reader reads, in order: each item's bytes (a shard's, or a file's) */
static uint64_t *sizes, num_items;
static int priority;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_item, next_offset, total;
static int failures;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Take the next chunk in item order; false when all are taken. */
static bool next_chunk(uint64_t *item, uint64_t *offset, uint64_t *length)
{
    pthread_mutex_lock(&lock);
    while (next_item < num_items && next_offset >= sizes[next_item])
        next_item++, next_offset = 0;
    bool more = next_item < num_items;
    if (more) {
        *item = next_item;
        *offset = next_offset;
        *length = sizes[next_item] - next_offset;
        if (*length > chunk) *length = chunk;
        next_offset += *length;
    }
    pthread_mutex_unlock(&lock);
    return more;
}

/* One chunk into buf: a READ of a shard (read), or a pread of a file (files). */
static int read_chunk(uint64_t item, uint64_t offset, uint64_t length, void *buf)
{
    if (!files)
        return larder__endpoint_read(endpoint, id_low, id_high, (uint32_t)item, priority, offset,
                                     length, buf);
    int64_t got = larder_file_pread(files[item], buf, length, offset);
    if (got < 0) return (int)got;
    return got == (int64_t)length ? 0
                                  : larder__fail(-EIO, "short read (%lld bytes)", (long long)got);
}

static void *reader(void *arg)
{
    (void)arg;
    uint8_t *buf = malloc(chunk);
    uint64_t item, offset, length;
    while (buf && next_chunk(&item, &offset, &length)) {
        if (read_chunk(item, offset, length, buf) < 0) {
            fprintf(stderr, "read of %s %llu at %llu: %s\n", files ? "file" : "shard",
                    (unsigned long long)item, (unsigned long long)offset, larder_errmsg());
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
            break;
        }
        __atomic_fetch_add(&total, length, __ATOMIC_RELAXED);
    }
    free(buf);
    return NULL;
}

/* THREADS readers over every item; prints "BYTES SECONDS".  0, or 1 when a read failed. */
static int read_everything(int threads)
{
    pthread_t t[256];
    double start = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, reader, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("%llu %.3f\n", (unsigned long long)total, now() - start);
    return failures ? 1 : 0;
}

/* Parse the dataset id's 32 hex digits into the two halves a READ names. */
static void dataset_id(const larder_dataset_info *info)
{
    char hex[17];
    memcpy(hex, info->dataset_id + 16, 16), hex[16] = 0;
    id_low = strtoull(hex, NULL, 16);
    memcpy(hex, info->dataset_id, 16), hex[16] = 0;
    id_high = strtoull(hex, NULL, 16);
}

static int read_all(int argc, char **argv)
{
    int threads = argc > 4 ? atoi(argv[4]) : 16;
    chunk = (uint64_t)(argc > 5 ? atoi(argv[5]) : 4096) * 1024;
    priority = argc > 6 ? atoi(argv[6]) : 0;
    if (threads < 1 || threads > 256 || chunk == 0 || chunk > (64u << 20) || priority < 0 ||
        priority > 3) {
        fprintf(stderr, "threads 1..256, chunk 1..65536 KiB, priority 0..3\n");
        return 2;
    }
    larder_dataset *d;
    if (larder_open(&d, argv[3], NULL) < 0) {
        fprintf(stderr, "%s: %s\n", argv[3], larder_errmsg());
        return 1;
    }
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    dataset_id(&info);
    num_items = info.num_shards;
    sizes = calloc(num_items ? num_items : 1, sizeof *sizes);
    /* a shard's bytes to read: up to the end of its last sample */
    for (uint64_t i = 0; sizes && i < info.num_samples; i++) {
        larder_sample_info s;
        if (larder_sample_info_get(d, i, &s) == 0 && s.offset + s.length > sizes[s.shard])
            sizes[s.shard] = s.offset + s.length;
    }
    char absolute[4096];
    if (!sizes || !realpath(argv[3], absolute) ||
        larder__endpoint_new(&endpoint, argv[2], LARDER__ROLE_READER, NULL, absolute, 120000) < 0) {
        fprintf(stderr, "cannot reach the daemon at %s\n", argv[2]);
        return 1;
    }
    int rc = read_everything(threads);
    larder__endpoint_free(endpoint);
    larder_close(d);
    free(sizes);
    return rc;
}

/* The library's warnings (a daemon passed over, an origin read) on stderr. */
static void log_stderr(void *userdata, int level, const char *message)
{
    (void)userdata, (void)level;
    fprintf(stderr, "larder: %s\n", message);
}

static int read_files(int argc, char **argv)
{
    larder_set_log(log_stderr, NULL, LARDER_LOG_WARN);
    int threads = argc > 5 ? atoi(argv[5]) : 16;
    chunk = (uint64_t)(argc > 6 ? atoi(argv[6]) : 4096) * 1024;
    if (threads < 1 || threads > 256 || chunk == 0 || chunk > (64u << 20)) {
        fprintf(stderr, "threads 1..256, chunk 1..65536 KiB\n");
        return 2;
    }
    larder_open_options options = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = argv[3], .daemon_socket = argv[2]};
    larder_dataset *d;
    if (larder_open(&d, argv[4], &options) < 0) {
        fprintf(stderr, "%s: %s\n", argv[4], larder_errmsg());
        return 1;
    }
    num_items = larder_num_samples(d);
    files = calloc(num_items ? num_items : 1, sizeof *files);
    sizes = calloc(num_items ? num_items : 1, sizeof *sizes);
    for (uint64_t i = 0; files && sizes && i < num_items; i++) {
        if (larder_file_open(&files[i], d, i, -1) < 0) {
            fprintf(stderr, "file %llu: %s\n", (unsigned long long)i, larder_errmsg());
            return 1;
        }
        sizes[i] = larder_file_size(files[i]);
    }
    if (!files || !sizes) return 1;
    int rc = read_everything(threads);
    for (uint64_t i = 0; i < num_items; i++)
        larder_file_close(files[i]);
    free(files);
    free(sizes);
    larder_close(d);
    return rc;
}

/* PSI's cpu "some" total in microseconds since boot, or -1 without PSI. */
static double cpu_pressure_us(void)
{
    char text[256];
    FILE *f = fopen("/proc/pressure/cpu", "r");
    if (!f) return -1;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *at = strstr(text, "total=");
    return at && strncmp(text, "some", 4) == 0 ? strtod(at + 6, NULL) : -1;
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int train(int argc, char **argv)
{
    if (argc < 7) return 2;
    long steps = atol(argv[4]), batch = atol(argv[5]);
    double compute = atof(argv[6]) / 1000.0;
    if (steps < 1 || batch < 1 || compute < 0) return 2;
    setenv("LARDER_SOCKET", argv[2], 1);
    unsetenv("LARDER_CACHE");
    larder_dataset *d;
    if (larder_open(&d, argv[3], NULL) < 0) {
        fprintf(stderr, "%s: %s\n", argv[3], larder_errmsg());
        return 1;
    }
    uint64_t samples = larder_num_samples(d), id = 0;
    double *waits = calloc((size_t)steps, sizeof *waits), sum = 0, began = now();
    double *pressure = calloc((size_t)steps, sizeof *pressure); /* ms during each step's wait */
    bool psi = cpu_pressure_us() >= 0;
    /* RESTART_TRACE=FILE: each step's start (wall clock, s since the epoch, to line up with
     * the daemons' LARDERD_TRACE) and wait (ms), for a look */
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    double wall_began = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9;
    const char *trace_path = getenv("RESTART_TRACE");
    FILE *trace = trace_path && *trace_path ? fopen(trace_path, "w") : NULL;
    void *buf = NULL;
    size_t cap = 0;
    for (long s = 0; waits && pressure && s < steps; s++) {
        double start = now(), psi_start = psi ? cpu_pressure_us() : 0;
        for (long b = 0; b < batch; b++, id = (id + 1) % samples) {
            larder_sample_info info;
            if (larder_sample_info_get(d, id, &info) < 0) return 1;
            if (info.length > cap) {
                free(buf);
                cap = info.length;
                buf = malloc(cap);
                if (!buf) return 1;
            }
            if (larder_read_sample(d, id, buf, cap) < 0) {
                fprintf(stderr, "sample %llu: %s\n", (unsigned long long)id, larder_errmsg());
                return 1;
            }
        }
        waits[s] = (now() - start) * 1000;
        pressure[s] = psi ? (cpu_pressure_us() - psi_start) / 1000 : -1;
        sum += waits[s];
        if (trace)
            fprintf(trace, "%.3f %.2f %.2f\n", wall_began + (start - began), waits[s], pressure[s]);
        struct timespec nap = {(time_t)compute, (long)((compute - (double)(time_t)compute) * 1e9)};
        nanosleep(&nap, NULL);
    }
    if (trace) fclose(trace);
    if (!waits || !pressure) return 1;
    double *sorted = malloc((size_t)steps * sizeof *sorted);
    if (!sorted) return 1;
    memcpy(sorted, waits, (size_t)steps * sizeof *sorted);
    qsort(sorted, (size_t)steps, sizeof *sorted, compare);
    double p99 = sorted[(size_t)((double)(steps - 1) * 0.99)];
    double psi_all = 0, psi_slow = 0;
    long slow = 0;
    for (long s = 0; s < steps; s++) {
        psi_all += pressure[s];
        if (waits[s] >= p99) psi_slow += pressure[s], slow++;
    }
    printf("%.2f %.2f %.2f %.2f %.2f %.2f\n", sum / (double)steps, sorted[(steps - 1) / 2], p99,
           sorted[steps - 1], psi ? psi_all / (double)steps : -1,
           psi ? psi_slow / (double)slow : -1);
    free(sorted);
    free(pressure);
    free(buf);
    free(waits);
    larder_close(d);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "read") == 0) return read_all(argc, argv);
    if (argc >= 5 && strcmp(argv[1], "files") == 0) return read_files(argc, argv);
    if (argc >= 7 && strcmp(argv[1], "train") == 0) return train(argc, argv);
    fprintf(stderr,
            "usage: %s read SOCKET INDEX [THREADS] [CHUNK_KB] [PRIORITY]\n"
            "       %s files SOCKET CACHE INDEX [THREADS] [CHUNK_KB]\n"
            "       %s train SOCKET INDEX STEPS BATCH COMPUTE_MS\n",
            argv[0], argv[0], argv[0]);
    return 2;
}
