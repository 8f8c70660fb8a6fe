/*
 * index_open.c - how the index scales: build an index of N samples with
 * the internal builder (the one `larder pack` uses), then measure what a
 * reader pays for it: larder_open() time, resident memory before and
 * after open and after a million random lookups, ns per lookup by id and
 * by key, and index bytes per sample.  Prints a markdown table.
 *
 * The shards are fake: sizes and checksums are invented and no shard
 * file exists, because nothing here reads sample bytes.  Every open and
 * every memory figure is taken in a fresh child process (this program
 * re-executed), so the builder's heap does not pollute them.  Nothing is
 * dropped from the page cache: the index was just written, so opens and
 * lookups run against a warm cache, which is what a node with the index
 * resident sees.
 *
 * usage: larder_bench_index [--samples N] [--lookups N] [--runs N]
 *                           [--index PATH] [--keep]
 */
#include "index.h"
#include "larder.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define SAMPLES_PER_SHARD 10000
#define JPG_BYTES (74 * 1024)  /* mean size of the "jpg" field */
#define CLS_BYTES (212 * 1024) /* mean size of the "cls" field */
#define SIZE_SPREAD 8192       /* field sizes vary uniformly by +- this much */
#define KEY_CAPACITY 32
#define MAX_RUNS 64

/* Memory figures from /proc/self/status, in KiB. */
struct memory {
    long rss, anon, file, peak;
};

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void make_key(char *out, uint64_t id)
{
    snprintf(out, KEY_CAPACITY, "train/%09llu", (unsigned long long)id);
}

static long minor_faults(void)
{
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt + usage.ru_majflt;
}

static struct memory memory_now(void)
{
    struct memory m = {-1, -1, -1, -1};
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return m;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long value;
        if (sscanf(line, "VmRSS: %ld", &value) == 1) m.rss = value;
        if (sscanf(line, "RssAnon: %ld", &value) == 1) m.anon = value;
        if (sscanf(line, "RssFile: %ld", &value) == 1) m.file = value;
        if (sscanf(line, "VmHWM: %ld", &value) == 1) m.peak = value;
    }
    fclose(f);
    return m;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *values, int count)
{
    double sorted[MAX_RUNS];
    memcpy(sorted, values, (size_t)count * sizeof *sorted);
    qsort(sorted, (size_t)count, sizeof *sorted, compare_doubles);
    return count % 2 ? sorted[count / 2] : (sorted[count / 2 - 1] + sorted[count / 2]) / 2;
}

static double min_of(const double *values, int count)
{
    double m = values[0];
    for (int i = 1; i < count; i++)
        m = values[i] < m ? values[i] : m;
    return m;
}

static double max_of(const double *values, int count)
{
    double m = values[0];
    for (int i = 1; i < count; i++)
        m = values[i] > m ? values[i] : m;
    return m;
}

static void die(const char *what, int code)
{
    fprintf(stderr, "larder_bench_index: %s: %s (%s)\n", what, larder_strerror(code),
            larder_errmsg());
    exit(1);
}

/* ---- building ------------------------------------------------------------ */

struct build_result {
    double add_seconds, write_seconds;
    long peak_kib; /* the builder process's peak resident set */
    char dataset_id[33];
};

static void build_index(const char *path, uint64_t num_samples, struct build_result *result)
{
    struct larder__index_builder *b;
    int rc = larder__index_builder_new(&b, 0);
    if (rc < 0) die("builder_new", rc);
    uint64_t rng = 42, position = 0, checksum_state = 7;
    int64_t shard = -1;
    char key[KEY_CAPACITY], name[64];
    double start = now_seconds();
    for (uint64_t i = 0; i < num_samples; i++) {
        /* Shards are added as their first sample comes, as larder pack
         * does, so shard names interleave with keys in the string table. */
        if (i % SAMPLES_PER_SHARD == 0) {
            if (shard >= 0)
                larder__index_builder_set_shard(b, (uint32_t)shard, position,
                                                splitmix64(&checksum_state));
            snprintf(name, sizeof name, "shard-%06llu.tar", (unsigned long long)(shard + 1));
            shard = larder__index_builder_add_shard(b, name, LARDER_FORMAT_TAR);
            if (shard < 0) die("add_shard", (int)shard);
            position = 0;
        }
        struct larder__field fields[2];
        memset(fields, 0, sizeof fields);
        fields[0].name = "jpg";
        fields[0].length = JPG_BYTES - SIZE_SPREAD + splitmix64(&rng) % (2 * SIZE_SPREAD + 1);
        fields[1].name = "cls";
        fields[1].offset = fields[0].length;
        fields[1].length = CLS_BYTES - SIZE_SPREAD + splitmix64(&rng) % (2 * SIZE_SPREAD + 1);
        uint64_t length = fields[0].length + fields[1].length;
        int n = snprintf(key, sizeof key, "train/%09llu", (unsigned long long)i);
        int64_t id = larder__index_builder_add_sample(b, (uint32_t)shard, position, length,
                                                      splitmix64(&checksum_state), key, (size_t)n,
                                                      fields, 2);
        if (id < 0) die("add_sample", (int)id);
        position += length;
    }
    larder__index_builder_set_shard(b, (uint32_t)shard, position, splitmix64(&checksum_state));
    double added = now_seconds();
    rc = larder__index_builder_write(b, path, result->dataset_id);
    if (rc < 0) die("write", rc);
    double written = now_seconds();
    result->add_seconds = added - start;
    result->write_seconds = written - added;
    result->peak_kib = memory_now().peak;
    larder__index_builder_free(b);
}

/* ---- child processes ------------------------------------------------------ */

/* Run this program again with `args` and capture its stdout into out[0..size). */
static void run_child(char *const args[], char *out, size_t size)
{
    int pipe_fds[2];
    if (pipe(pipe_fds) < 0) die("pipe", -errno);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &actions, NULL, args, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_fds[1]);
    if (rc != 0) die("posix_spawn", -rc);
    size_t used = 0;
    for (;;) {
        ssize_t n = read(pipe_fds[0], out + used, size - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        used += (size_t)n;
    }
    out[used] = '\0';
    close(pipe_fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "larder_bench_index: child %s failed\n", args[1]);
        exit(1);
    }
}

/* The value of "name=value" in a child's output. */
static double child_value(const char *output, const char *name)
{
    size_t length = strlen(name);
    for (const char *p = output; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, length) == 0 && p[length] == '=') return strtod(p + length + 1, NULL);
    fprintf(stderr, "larder_bench_index: child output lacks %s:\n%s\n", name, output);
    exit(1);
}

/* Child: one timed larder_open() of a fresh process. */
static int child_open(const char *path)
{
    struct memory before = memory_now();
    larder_dataset *d;
    long faults = minor_faults();
    double start = now_seconds();
    int rc = larder_open(&d, path, NULL);
    double seconds = now_seconds() - start;
    faults = minor_faults() - faults;
    if (rc < 0) die("larder_open", rc);
    struct memory after = memory_now();
    printf("open_ns=%.0f\nrss_before=%ld\nrss_after=%ld\nfaults=%ld\n", seconds * 1e9, before.rss,
           after.rss, faults);
    larder_close(d);
    return 0;
}

static volatile uint64_t sink;

/* Child: memory around open and lookups, then timed lookup runs. */
static int child_lookups(const char *path, uint64_t lookups, int runs)
{
    struct memory before = memory_now();
    larder_dataset *d;
    int rc = larder_open(&d, path, NULL);
    if (rc < 0) die("larder_open", rc);
    struct memory opened = memory_now();
    uint64_t n = larder_num_samples(d);
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);

    /* A raw baseline: one 8-byte load from the sample's record through a
     * mapping of our own, with no checks: what a lookup cannot beat. */
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) die(path, -errno);
    const uint8_t *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) die("mmap", -errno);
    close(fd);
    const uint8_t *records =
        map + LARDER__INDEX_HEADER_SIZE + info.num_shards * LARDER__INDEX_SHARD_SIZE;

    /* Touch: `lookups` random ids by id and as many by key, checked. */
    uint64_t rng = 1234, sum = 0;
    char key[KEY_CAPACITY];
    for (uint64_t i = 0; i < lookups; i++) {
        uint64_t id = splitmix64(&rng) % n;
        larder_sample_info s;
        if ((rc = larder_sample_info_get(d, id, &s)) < 0) die("larder_sample_info_get", rc);
        make_key(key, id);
        if (strcmp(s.key, key) != 0) die("key of sample does not match", LARDER_EBADINDEX);
        sum += s.offset;
    }
    struct memory touched_by_id = memory_now();
    for (uint64_t i = 0; i < lookups; i++) {
        uint64_t id = splitmix64(&rng) % n;
        make_key(key, id);
        int64_t found = larder_find_key(d, key);
        if (found != (int64_t)id) die("larder_find_key", found < 0 ? (int)found : LARDER_EBADINDEX);
    }
    struct memory touched_by_key = memory_now();

    /* Timed runs, over precomputed random ids and keys so that neither
     * the generator nor the formatting is counted. */
    uint64_t *ids = malloc(lookups * sizeof *ids);
    char(*keys)[KEY_CAPACITY] = malloc(lookups * sizeof *keys);
    if (!ids || !keys) die("malloc", -ENOMEM);
    double by_id[MAX_RUNS], by_key[MAX_RUNS], raw[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        for (uint64_t i = 0; i < lookups; i++) {
            ids[i] = splitmix64(&rng) % n;
            make_key(keys[i], ids[i]);
        }
        double start = now_seconds();
        for (uint64_t i = 0; i < lookups; i++) {
            larder_sample_info s;
            larder_sample_info_get(d, ids[i], &s);
            sum += s.length;
        }
        double t1 = now_seconds();
        for (uint64_t i = 0; i < lookups; i++)
            sum += (uint64_t)larder_find_key(d, keys[i]);
        double t2 = now_seconds();
        for (uint64_t i = 0; i < lookups; i++) {
            uint64_t length;
            memcpy(&length, records + ids[i] * LARDER__INDEX_SAMPLE_SIZE + 8, 8);
            sum += length;
        }
        double t3 = now_seconds();
        by_id[r] = (t1 - start) * 1e9 / (double)lookups;
        by_key[r] = (t2 - t1) * 1e9 / (double)lookups;
        raw[r] = (t3 - t2) * 1e9 / (double)lookups;
    }
    sink = sum;
    printf("rss_before=%ld\nrss_open=%ld\nanon_open=%ld\nfile_open=%ld\n", before.rss, opened.rss,
           opened.anon, opened.file);
    printf("rss_by_id=%ld\nanon_by_id=%ld\nfile_by_id=%ld\n", touched_by_id.rss, touched_by_id.anon,
           touched_by_id.file);
    printf("rss_by_key=%ld\nanon_by_key=%ld\nfile_by_key=%ld\n", touched_by_key.rss,
           touched_by_key.anon, touched_by_key.file);
    printf("by_id_ns=%.1f\nby_id_min=%.1f\nby_id_max=%.1f\n", median(by_id, runs),
           min_of(by_id, runs), max_of(by_id, runs));
    printf("by_key_ns=%.1f\nby_key_min=%.1f\nby_key_max=%.1f\n", median(by_key, runs),
           min_of(by_key, runs), max_of(by_key, runs));
    printf("raw_ns=%.1f\nraw_min=%.1f\nraw_max=%.1f\n", median(raw, runs), min_of(raw, runs),
           max_of(raw, runs));
    printf("samples=%llu\nshards=%llu\n", (unsigned long long)info.num_samples,
           (unsigned long long)info.num_shards);
    free(ids);
    free(keys);
    munmap((void *)map, (size_t)st.st_size);
    larder_close(d);
    return 0;
}

/* Seconds to read the whole file with read(2) (page cache warm): what an
 * open that loaded the index would cost at least. */
static double read_whole_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) die(path, -errno);
    size_t size = 1 << 20;
    char *buf = malloc(size);
    if (!buf) die("malloc", -ENOMEM);
    double start = now_seconds();
    for (;;) {
        ssize_t n = read(fd, buf, size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die(path, -errno);
        if (n == 0) break;
        sink += (uint8_t)buf[n - 1];
    }
    double seconds = now_seconds() - start;
    free(buf);
    close(fd);
    return seconds;
}

/* ---- main ------------------------------------------------------------------ */

static uint64_t parse_count(const char *option, const char *text)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || v == 0) {
        fprintf(stderr, "larder_bench_index: bad %s '%s'\n", option, text);
        exit(2);
    }
    return (uint64_t)v;
}

static const char usage[] =
    "usage: larder_bench_index [--samples N] [--lookups N] [--runs N] [--index PATH] [--keep]\n"
    "  --samples N   samples in the index (default 5000000)\n"
    "  --lookups N   random lookups per timed run (default 1000000)\n"
    "  --runs N      timed runs and fresh-process opens (default 5)\n"
    "  --index PATH  where to write the index (default bench/work/index.larder)\n"
    "  --keep        keep the index file afterwards\n";

int main(int argc, char **argv)
{
    uint64_t num_samples = 5000000, lookups = 1000000;
    int runs = 5, keep = 0;
    const char *path = "bench/work/index.larder";
    if (argc == 3 && strcmp(argv[1], "--child-open") == 0) return child_open(argv[2]);
    if (argc == 5 && strcmp(argv[1], "--child-lookups") == 0)
        return child_lookups(argv[2], parse_count("lookups", argv[3]),
                             (int)parse_count("runs", argv[4]));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--keep") == 0) {
            keep = 1;
        } else if (i + 1 < argc && strcmp(a, "--samples") == 0) {
            num_samples = parse_count(a, argv[++i]);
        } else if (i + 1 < argc && strcmp(a, "--lookups") == 0) {
            lookups = parse_count(a, argv[++i]);
        } else if (i + 1 < argc && strcmp(a, "--runs") == 0) {
            uint64_t v = parse_count(a, argv[++i]);
            runs = v > MAX_RUNS ? MAX_RUNS : (int)v;
        } else if (i + 1 < argc && strcmp(a, "--index") == 0) {
            path = argv[++i];
        } else {
            fputs(usage, strcmp(a, "--help") == 0 ? stdout : stderr);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (strcmp(path, "bench/work/index.larder") == 0 && mkdir("bench/work", 0755) < 0 &&
        errno != EEXIST)
        die("bench/work", -errno);

    struct build_result built;
    build_index(path, num_samples, &built);
    struct stat st;
    if (stat(path, &st) < 0) die(path, -errno);
    uint64_t file_size = (uint64_t)st.st_size;
    fprintf(stderr, "built %llu samples: add %.2f s, write %.2f s, %.1f MB\n",
            (unsigned long long)num_samples, built.add_seconds, built.write_seconds,
            (double)file_size / 1e6);

    char output[4096], run_text[32], lookups_text[32];
    double open_ns[MAX_RUNS], open_rss_before[MAX_RUNS], open_rss_after[MAX_RUNS];
    double open_faults[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        char *args[] = {argv[0], "--child-open", (char *)path, NULL};
        run_child(args, output, sizeof output);
        open_ns[r] = child_value(output, "open_ns");
        open_rss_before[r] = child_value(output, "rss_before");
        open_rss_after[r] = child_value(output, "rss_after");
        open_faults[r] = child_value(output, "faults");
    }
    double read_seconds[3];
    for (int r = 0; r < 3; r++)
        read_seconds[r] = read_whole_file(path);

    snprintf(run_text, sizeof run_text, "%d", runs);
    snprintf(lookups_text, sizeof lookups_text, "%llu", (unsigned long long)lookups);
    char *args[] = {argv[0], "--child-lookups", (char *)path, lookups_text, run_text, NULL};
    run_child(args, output, sizeof output);
    if ((uint64_t)child_value(output, "samples") != num_samples)
        die("sample count read back differs", LARDER_EBADINDEX);

    double open_median = median(open_ns, runs), read_median = median(read_seconds, 3);
    double mib = 1.0 / 1024;
    printf("### Index open and lookup (%llu samples, %llu shards)\n\n",
           (unsigned long long)num_samples, (unsigned long long)child_value(output, "shards"));
    printf("Built with the internal index builder: 2 fields per sample (\"jpg\" ~%d KiB, "
           "\"cls\" ~%d KiB), keys `train/%%09llu`, %d samples per shard, each shard added when "
           "its first sample comes, as `larder pack` does (the writer gathers the shard names at "
           "the start of the string table). The shards are fake "
           "(sizes and checksums invented; no shard file exists). Every open and memory figure "
           "comes from a fresh process; the page cache is warm (nothing dropped). "
           "Lookups: %llu random ids per run, median of %d runs (min-max in brackets).\n\n",
           JPG_BYTES / 1024, CLS_BYTES / 1024, SAMPLES_PER_SHARD, (unsigned long long)lookups,
           runs);
    printf("| measure | value |\n|---|---|\n");
    printf("| builder: add %llu samples | %.2f s (%.0f ns/sample) |\n",
           (unsigned long long)num_samples, built.add_seconds,
           built.add_seconds * 1e9 / (double)num_samples);
    printf("| builder: write index (incl. fsync) | %.2f s (%.0f MB/s) |\n", built.write_seconds,
           (double)file_size / 1e6 / built.write_seconds);
    printf("| builder: peak RSS | %.0f MiB (%.0f B/sample) |\n", (double)built.peak_kib * mib,
           (double)built.peak_kib * 1024 / (double)num_samples);
    printf("| index file size | %.1f MB |\n", (double)file_size / 1e6);
    printf("| index bytes per sample | %.1f |\n", (double)file_size / (double)num_samples);
    printf("| larder_open(), median of %d fresh processes | %.3f ms [%.3f-%.3f] |\n", runs,
           open_median / 1e6, min_of(open_ns, runs) / 1e6, max_of(open_ns, runs) / 1e6);
    printf("| read(2) of the whole index file, warm cache, median of 3 | %.1f ms "
           "(open is %.4f%% of it) |\n",
           read_median * 1e3, open_median / 1e9 / read_median * 100);
    printf("| page faults taken inside larder_open() (median) | %.0f |\n",
           median(open_faults, runs));
    printf("| VmRSS before open -> after open (open-only processes, median) | %.1f -> %.1f MiB "
           "|\n",
           median(open_rss_before, runs) * mib, median(open_rss_after, runs) * mib);
    printf("| VmRSS before open -> after open (lookup process) | %.1f -> %.1f MiB "
           "(anon %.1f, file %.1f) |\n",
           child_value(output, "rss_before") * mib, child_value(output, "rss_open") * mib,
           child_value(output, "anon_open") * mib, child_value(output, "file_open") * mib);
    printf("| VmRSS after %llu random lookups by id | %.1f MiB (anon %.1f, file %.1f) |\n",
           (unsigned long long)lookups, child_value(output, "rss_by_id") * mib,
           child_value(output, "anon_by_id") * mib, child_value(output, "file_by_id") * mib);
    printf("| VmRSS after another %llu by key | %.1f MiB (anon %.1f, file %.1f) |\n",
           (unsigned long long)lookups, child_value(output, "rss_by_key") * mib,
           child_value(output, "anon_by_key") * mib, child_value(output, "file_by_key") * mib);
    printf("| larder_sample_info_get, random id | %.1f ns [%.1f-%.1f] |\n",
           child_value(output, "by_id_ns"), child_value(output, "by_id_min"),
           child_value(output, "by_id_max"));
    printf("| larder_find_key, random key | %.1f ns [%.1f-%.1f] |\n",
           child_value(output, "by_key_ns"), child_value(output, "by_key_min"),
           child_value(output, "by_key_max"));
    printf("| baseline: raw 8-byte load from the record, own mmap | %.1f ns [%.1f-%.1f] |\n",
           child_value(output, "raw_ns"), child_value(output, "raw_min"),
           child_value(output, "raw_max"));
    printf("| by id / baseline, by key / baseline | %.2fx, %.2fx |\n",
           child_value(output, "by_id_ns") / child_value(output, "raw_ns"),
           child_value(output, "by_key_ns") / child_value(output, "raw_ns"));
    printf("\nVmRSS counts mapped page-cache pages (\"file\": shared with every process that maps "
           "the index, and evictable) apart from private memory (\"anon\"); the kernel maps "
           "up to 16 cached pages around each faulting one, so a few scattered touches show "
           "as megabytes. The baseline loads 8 bytes of each random record through a plain "
           "mmap with no checks: the memory cost a lookup cannot go below. "
           "Dataset id of the benchmark index: %s.\n",
           built.dataset_id);
    if (!keep) unlink(path);
    return 0;
}
