/*
 * cache_read.c - warm-cache read throughput against raw pread of the
 * same byte ranges from the same files, in one run (issue 3, measure 1).
 *
 *   larder_bench_cache [--dir DIR] [--total-mb N] [--rounds R]
 *
 * For each sample size (4 KiB, 64 KiB, 286 KiB, 4 MiB): pack a flat
 * dataset of about N MB, warm a cache, then alternate R rounds of
 * (a) larder_read_sample over every sample in a shuffled order and
 * (b) pread(2) of exactly the same ranges from the cache's data files
 * into the same buffer, in the same order.  Both read the page cache
 * (warm); larder's extra work is the bitmap check, the checksum and the
 * bookkeeping.  Prints a markdown table of medians.
 */
#include "larder.h"
#include "larder_pack.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void fill_random(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (unsigned char)(seed >> 16);
    }
}

static int shell(const char *fmt, const char *a, const char *b, const char *c)
{
    char command[16384];
    snprintf(command, sizeof command, fmt, a, b, c);
    return system(command);
}

static int run(const char *dir, size_t sample_size, double total_mb, int rounds)
{
    char src[4096], out[4096], cache[4096], index[4200];
    snprintf(src, sizeof src, "%s/src-%zu", dir, sample_size);
    snprintf(out, sizeof out, "%s/packed-%zu", dir, sample_size);
    snprintf(cache, sizeof cache, "%s/cache-%zu", dir, sample_size);
    snprintf(index, sizeof index, "%s/index.larder", out);
    size_t count = (size_t)(total_mb * 1e6 / (double)sample_size);
    if (count < 16) count = 16;
    if (shell("rm -rf '%s' '%s' '%s'", src, out, cache) != 0 ||
        shell("mkdir -p '%s'%s%s", src, "", ""))
        return 1;
    unsigned char *data = malloc(sample_size);
    for (size_t i = 0; i < count; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/s%07zu.bin", src, i);
        fill_random(data, sample_size, (unsigned)i + 1);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(data, 1, sample_size, f) != sample_size) return 1;
        fclose(f);
    }
    const char *sources[] = {src};
    larder_pack_options po = {.version = LARDER_PACK_OPTIONS_VERSION,
                              .format = LARDER_FORMAT_FLAT,
                              .shard_size = 256u << 20,
                              .shuffle = 1};
    if (larder_pack(sources, 1, out, &po, NULL) < 0) {
        fprintf(stderr, "pack: %s\n", larder_errmsg());
        return 1;
    }
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = cache};
    larder_dataset *d;
    if (larder_open(&d, index, &oo) < 0) {
        fprintf(stderr, "open: %s\n", larder_errmsg());
        return 1;
    }
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    uint64_t n = info.num_samples;
    uint64_t *order = malloc(n * sizeof *order);
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    unsigned seed = 42;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = (uint64_t)rand_r(&seed) % i, t = order[i - 1];
        order[i - 1] = order[j], order[j] = t;
    }
    unsigned char *buf = malloc(sample_size);
    for (uint64_t i = 0; i < n; i++) /* warm: every sample through larder once */
        if (larder_read_sample(d, order[i], buf, sample_size) < 0) {
            fprintf(stderr, "read: %s\n", larder_errmsg());
            return 1;
        }
    /* the raw side: the same files, the same ranges, the same order */
    int *fds = calloc(info.num_shards, sizeof *fds);
    for (uint64_t s = 0; s < info.num_shards; s++) {
        char path[8400];
        snprintf(path, sizeof path, "%s/%s/%06llu.data", cache, info.dataset_id,
                 (unsigned long long)s);
        if ((fds[s] = open(path, O_RDONLY)) < 0) return 1;
    }
    larder_sample_info *where = malloc(n * sizeof *where);
    for (uint64_t i = 0; i < n; i++)
        larder_sample_info_get(d, order[i], &where[i]);
    /* a reader of raw files must find each sample somewhere too: the
     * third column looks the range up by sample id in a table of its
     * own (24 bytes a sample, in id order), as any index would */
    struct range {
        uint64_t offset, length;
        uint32_t shard;
    } *by_id = malloc(n * sizeof *by_id);
    for (uint64_t i = 0; i < n; i++)
        by_id[order[i]] = (struct range){where[i].offset, where[i].length, where[i].shard};
    larder_stats before, after;
    larder_stats_get(d, &before);
    double *t_larder = malloc((size_t)rounds * sizeof(double));
    double *t_raw = malloc((size_t)rounds * sizeof(double));
    double *t_lookup = malloc((size_t)rounds * sizeof(double));
    for (int r = 0; r < rounds; r++) {
        /* the three in a rotating order, so that none always runs first
         * (after the others have warmed the CPU's caches and clocks) */
        for (int k = 0; k < 3; k++) {
            int which = (r + k) % 3;
            double t0 = now();
            for (uint64_t i = 0; i < n; i++) {
                if (which == 0) {
                    if (larder_read_sample(d, order[i], buf, sample_size) < 0) return 1;
                } else if (which == 1) { /* the range, precomputed in reading order */
                    if (pread(fds[where[i].shard], buf, where[i].length, (off_t)where[i].offset) !=
                        (ssize_t)where[i].length)
                        return 1;
                } else { /* the range, looked up by sample id */
                    const struct range *w = &by_id[order[i]];
                    if (pread(fds[w->shard], buf, w->length, (off_t)w->offset) !=
                        (ssize_t)w->length)
                        return 1;
                }
            }
            double t = now() - t0;
            if (which == 0) t_larder[r] = t;
            if (which == 1) t_raw[r] = t;
            if (which == 2) t_lookup[r] = t;
        }
    }
    larder_stats_get(d, &after);
    double bytes = (double)n * (double)sample_size;
    double ml = median(t_larder, rounds), mr = median(t_raw, rounds);
    double mk = median(t_lookup, rounds);
    char label[32];
    if (sample_size >= (1u << 20))
        snprintf(label, sizeof label, "%zu MiB", sample_size >> 20);
    else
        snprintf(label, sizeof label, "%zu KiB", sample_size >> 10);
    printf("| %s | %llu | %.0f | %.0f | %.2fx | %.2fx | %.2f | %.2f | %.2f | %llu |\n", label,
           (unsigned long long)n, bytes / ml / 1e6, bytes / mr / 1e6, mr / ml, mk / ml,
           ml / (double)n * 1e6, mr / (double)n * 1e6, mk / (double)n * 1e6,
           (unsigned long long)(after.origin_requests - before.origin_requests));
    fflush(stdout);
    for (uint64_t s = 0; s < info.num_shards; s++)
        close(fds[s]);
    larder_close(d);
    free(fds), free(where), free(by_id), free(order), free(buf), free(data), free(t_larder),
        free(t_raw), free(t_lookup);
    return shell("rm -rf '%s' '%s' '%s'", src, out, cache) != 0;
}

int main(int argc, char **argv)
{
    const char *dir = "bench/work/cache";
    double total_mb = 256;
    int rounds = 5;
    size_t only = 0; /* --size BYTES: that sample size alone */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--size") == 0) only = (size_t)atol(argv[i + 1]);
        if (strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
        if (strcmp(argv[i], "--total-mb") == 0) total_mb = atof(argv[i + 1]);
        if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
    }
    if (shell("mkdir -p '%s'%s%s", dir, "", "") != 0) return 1;
    printf("| sample size | samples | larder MB/s | raw pread MB/s | larder / raw "
           "| larder / raw with lookup | larder us/read | raw us/read | raw with lookup us/read "
           "| origin requests while measuring |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    size_t sizes[] = {4096, 65536, 286 * 1024, 4u << 20};
    for (int i = 0; i < 4; i++)
        if ((!only || sizes[i] == only) && run(dir, sizes[i], total_mb, rounds) != 0) {
            fprintf(stderr, "benchmark failed at sample size %zu\n", sizes[i]);
            return 1;
        }
    return 0;
}
