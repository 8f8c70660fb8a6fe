/*
 * cmd_warm.c - `larder warm`: stage a whole dataset onto the node cache,
 * checking every sample.
 */
#include "args.h"
#include "cli.h"
#include "ui.h"

#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static const char warm_help[] =
    "usage: larder warm INDEX [--cache DIR] [--jobs N] [--block-size SIZE] [--cache-size SIZE]\n"
    "\n"
    "Stage the whole dataset onto the node cache (--cache, or LARDER_CACHE),\n"
    "checking every sample's checksum, with up to N origin reads in flight\n"
    "(default 64).  What is already staged is not fetched again.\n";

/* What the command line asks of `larder warm`. */
struct warm_args {
    larder_open_options options; /* cache_dir is --cache's, else LARDER_CACHE */
    const char *index;           /* INDEX, into argv */
};

/* Fill `a` from the command line; CLI_RUN, or the exit status to return. */
static int parse_warm_args(int argc, char **argv, struct warm_args *a)
{
    static const struct option options[] = {{"cache", required_argument, 0, 'c'},
                                            {"jobs", required_argument, 0, 'j'},
                                            {"block-size", required_argument, 0, 'b'},
                                            {"cache-size", required_argument, 0, 's'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    *a = (struct warm_args){
        .options = {.version = LARDER_OPEN_OPTIONS_VERSION, .max_inflight = 64},
    };
    larder_open_options *o = &a->options;
    uint64_t v;
    int c;
    while ((c = getopt_long(argc, argv, "j:h", options, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->cache_dir = optarg;
            break;
        case 'j':
            if (args_parse_u64(optarg, &v) < 0 || v == 0 || v > 1024)
                return usage_error("warm", "bad job count '%s' (1-1024)", optarg);
            o->max_inflight = (int)v;
            break;
        case 'b':
            if (args_parse_size(optarg, &v) < 0 || v < 512 || v > (1u << 30) || (v & (v - 1)))
                return usage_error("warm", "block size '%s' must be a power of two", optarg);
            o->block_size = (uint32_t)v;
            break;
        case 's':
            if (args_parse_size(optarg, &o->cache_capacity) < 0)
                return usage_error("warm", "bad cache size '%s'", optarg);
            break;
        case 'h':
            fputs(warm_help, stdout);
            return 0;
        default:
            return usage_error("warm", "bad option");
        }
    }
    if (optind + 1 != argc) return usage_error("warm", "expected one INDEX");
    if (!o->cache_dir) o->cache_dir = getenv("LARDER_CACHE");
    if (!o->cache_dir || !o->cache_dir[0])
        return usage_error("warm", "no cache: give --cache DIR or set LARDER_CACHE");
    a->index = argv[optind];
    return CLI_RUN;
}

/* Read every sample of `d` once, in batches, with a progress bar; each
 * failure is printed.  Adds the bytes read to *done; the failure count. */
static uint64_t warm_samples(larder_dataset *d, const larder_dataset_info *info, uint64_t *done)
{
    enum { BATCH = 256 };
    uint64_t ids[BATCH];
    void *bufs[BATCH] = {0};
    size_t caps[BATCH] = {0};
    int64_t results[BATCH];
    struct progress bar;
    progress_start(&bar, "warming");
    uint64_t bad = 0;
    for (uint64_t first = 0; first < info->num_samples; first += BATCH) {
        size_t n = info->num_samples - first < BATCH ? (size_t)(info->num_samples - first) : BATCH;
        for (size_t i = 0; i < n; i++) {
            larder_sample_info s;
            ids[i] = first + i;
            if (larder_sample_info_get(d, ids[i], &s) == 0 && s.length > caps[i]) {
                free(bufs[i]);
                bufs[i] = malloc(s.length ? s.length : 1);
                caps[i] = bufs[i] ? s.length : 0;
            }
        }
        larder_read_samples(d, ids, n, bufs, caps, results);
        for (size_t i = 0; i < n; i++) {
            if (results[i] >= 0) {
                *done += (uint64_t)results[i];
                continue;
            }
            progress_end(&bar);
            larder_sample_info s;
            const char *key = larder_sample_info_get(d, ids[i], &s) == 0 ? s.key : "?";
            fprintf(stderr, "%s: sample %" PRIu64 " ('%s'): %s\n", program, ids[i], key,
                    larder_strerror((int)results[i]));
            bad++;
        }
        progress_update(&bar, *done, info->total_bytes);
    }
    progress_end(&bar);
    for (int i = 0; i < BATCH; i++)
        free(bufs[i]);
    return bad;
}

int cmd_warm(int argc, char **argv)
{
    struct warm_args args;
    int status = parse_warm_args(argc, argv, &args);
    if (status != CLI_RUN) return status;
    larder_dataset *d;
    int rc = cli_open(&d, args.index, &args.options);
    if (rc < 0) return fail(rc);
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    double started = now_seconds();
    uint64_t done = 0;
    uint64_t bad = warm_samples(d, &info, &done);
    double seconds = now_seconds() - started;
    larder_stats st;
    larder_stats_get(d, &st);
    larder_close(d);
    char a[32], b[32], r[32], t[32];
    printf("warmed %" PRIu64 " samples (%s) in %.2f s (%s/s); the cache holds %s of %s\n",
           info.num_samples - bad, human_bytes(done, a), seconds,
           human_bytes(seconds > 0 ? (uint64_t)((double)done / seconds) : 0, r),
           human_bytes(st.resident_bytes, b), human_bytes(st.total_bytes, t));
    if (bad) {
        printf("%" PRIu64 " samples failed\n", bad);
        return 1;
    }
    return 0;
}
