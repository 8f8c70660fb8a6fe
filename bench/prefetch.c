/*
 * prefetch.c - the per-step data wait of an emulated training loop, with
 * and without prefetching from the known order (issue 4, measure).
 *
 *   larder_bench_prefetch INDEX_URL CACHE_DIR --prefetch 0|1
 *       [--steps N] [--batch G] [--compute-ms C] [--window W] [--label TEXT]
 *
 * Each step reads this rank's batch of the plan (one larder_read_samples
 * call, every miss in flight together), then "computes" for C ms.  The
 * data wait is the time the read took.  Prints one markdown row: wait
 * mean, p50, p95, p99, max, the share of steps that waited longer than
 * the compute window, and accelerator utilization AU = compute / wall.
 */
#include "larder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double quantile(const double *sorted, int n, double q)
{
    int i = (int)(q * (n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s INDEX_URL CACHE_DIR --prefetch 0|1 [...]\n", argv[0]);
        return 2;
    }
    int prefetch = 0, steps = 60, batch = 32, window = 8;
    double compute_ms = 100;
    const char *label = NULL;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--prefetch")) prefetch = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--compute-ms")) compute_ms = atof(argv[i + 1]);
        if (!strcmp(argv[i], "--window")) window = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--label")) label = argv[i + 1];
    }
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = argv[2]};
    larder_dataset *d;
    if (larder_open(&d, argv[1], &oo) < 0) {
        fprintf(stderr, "open: %s\n", larder_errmsg());
        return 1;
    }
    larder_plan_options po = {
        .version = LARDER_PLAN_OPTIONS_VERSION, .seed = 1, .global_batch = (uint64_t)batch};
    larder_plan *plan;
    if (larder_plan_create(&plan, d, &po) < 0) {
        fprintf(stderr, "plan: %s\n", larder_errmsg());
        return 1;
    }
    if ((uint64_t)steps > larder_plan_steps(plan)) steps = (int)larder_plan_steps(plan);
    larder_prefetch *pf = NULL;
    larder_prefetch_options fo = {.version = LARDER_PREFETCH_OPTIONS_VERSION,
                                  .window_steps = (uint64_t)window};
    if (prefetch && larder_prefetch_start(&pf, d, plan, &fo) < 0) {
        fprintf(stderr, "prefetch: %s\n", larder_errmsg());
        return 1;
    }
    uint64_t *ids = malloc((size_t)batch * sizeof *ids);
    void **bufs = malloc((size_t)batch * sizeof *bufs);
    size_t *caps = malloc((size_t)batch * sizeof *caps);
    int64_t *results = malloc((size_t)batch * sizeof *results);
    for (int i = 0; i < batch; i++)
        caps[i] = 8u << 20, bufs[i] = malloc(caps[i]);
    double *waits = malloc((size_t)steps * sizeof *waits);
    double started = now();
    for (int s = 0; s < steps; s++) {
        double t0 = now();
        larder_plan_batch(plan, (uint64_t)larder_plan_worker_step(plan, (uint64_t)s), ids,
                          (size_t)batch);
        if (larder_read_samples(d, ids, (size_t)batch, bufs, caps, results) < 0) {
            fprintf(stderr, "read: %s\n", larder_errmsg());
            return 1;
        }
        waits[s] = (now() - t0) * 1000;
        if (pf) larder_prefetch_advance(pf, (uint64_t)s + 1);
        struct timespec pause = {(time_t)(compute_ms / 1000),
                                 (long)((compute_ms - 1000 * (long)(compute_ms / 1000)) * 1e6)};
        nanosleep(&pause, NULL);
    }
    double wall = now() - started;
    larder_prefetch_stop(pf);
    double sum = 0;
    int over = 0;
    for (int s = 0; s < steps; s++) {
        sum += waits[s];
        over += waits[s] > compute_ms;
    }
    qsort(waits, (size_t)steps, sizeof *waits, compare_double);
    printf("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f%% | %.1f%% |\n",
           label ? label : (prefetch ? "with prefetch" : "without prefetch"), steps, sum / steps,
           quantile(waits, steps, 0.5), quantile(waits, steps, 0.95), quantile(waits, steps, 0.99),
           waits[steps - 1], 100.0 * over / steps, 100.0 * steps * compute_ms / 1000 / wall);
    larder_plan_destroy(plan);
    larder_close(d);
    return 0;
}
