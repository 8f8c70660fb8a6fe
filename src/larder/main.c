/*
 * main.c - the `larder` command-line tool.  Each subcommand parses its
 * options, calls liblarder, and decides what a person sees: results on
 * stdout, warnings and errors on stderr, a progress bar on a terminal.
 * Exit status: 0 success, 1 the operation failed (or verify found bad
 * data), 2 usage error.
 */
#include "larder.h"
#include "endpoint.h"
#include "larder_pack.h"
#include "ui.h"

#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *program = "larder";

int cmd_plan(int argc, char **argv); /* cmd_plan.c */
int cli_open(larder_dataset **dataset, const char *url, larder_open_options *options);

/* --trust-index, taken out of the arguments of any command */
static bool trust_index;

/* larder_open with the command line's trust setting (options may be NULL). */
int cli_open(larder_dataset **dataset, const char *url, larder_open_options *options)
{
    larder_open_options defaults = {.version = LARDER_OPEN_OPTIONS_VERSION};
    if (!options) options = &defaults;
    options->version = LARDER_OPEN_OPTIONS_VERSION;
    options->trust_index = trust_index;
    return larder_open(dataset, url, options);
}

static void on_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    fprintf(stderr, "%s: %s: %s\n", program, level == LARDER_LOG_ERROR ? "error" : "warning",
            message);
}

/* Print the library's failure and return exit status 1. */
static int fail(int rc)
{
    const char *detail = larder_errmsg();
    fprintf(stderr, "%s: %s\n", program, strcmp(detail, "no error") ? detail : larder_strerror(rc));
    return 1;
}

static int usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", program, command);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s %s --help'.\n", program, command);
    va_end(ap);
    return 2;
}

static void on_progress(void *userdata, uint64_t done, uint64_t total)
{
    progress_update(userdata, done, total);
}

/* A sample named on the command line: an exact key first, else a decimal id. */
static int64_t resolve_sample(larder_dataset *d, const char *what)
{
    int64_t id = larder_find_key(d, what);
    uint64_t n;
    if (id >= 0) return id;
    if (id != LARDER_ENOTFOUND) { /* a corrupt index (a duplicated key, say): say so */
        fail((int)id);
        return -1;
    }
    if (parse_u64(what, &n) == 0) {
        if (n < larder_num_samples(d)) return (int64_t)n;
        fprintf(stderr,
                "%s: no sample %s: the dataset has %" PRIu64 " samples (ids 0-%" PRIu64
                ") and no sample with that key\n",
                program, what, larder_num_samples(d), larder_num_samples(d) - 1);
        return -1;
    }
    fprintf(stderr, "%s: no sample with key '%s'\n", program, what);
    return -1;
}

/* ---- pack --------------------------------------------------------------- */

static const char pack_help[] =
    "usage: larder pack SRC... -o OUTDIR [options]\n"
    "\n"
    "Pack a dataset into shards and an index (OUTDIR/index.larder).  Each SRC is\n"
    "a directory (files grouped into samples by WebDataset key: the path up to\n"
    "the first dot of the file name), a tar shard (repacked), or an HDF5 file.\n"
    "\n"
    "  -o, --output DIR        where to write (created if missing)\n"
    "  -f, --format tar|flat   shard format (default tar: readable by tar and WebDataset)\n"
    "  -s, --shard-size SIZE   target shard size, e.g. 256M, 1G (default 1G)\n"
    "      --shuffle-seed N    seed of the write-time shuffle (default 0)\n"
    "      --no-shuffle        keep the sources' order\n"
    "  -j, --jobs N            writer threads (default: number of CPUs)\n"
    "      --readers N         warn unless the shard count suits N readers\n"
    "      --block-size SIZE   cache block size recorded in the index (default 64K)\n"
    "      --hdf5-depth D      HDF5: one sample per group at depth D (default 1)\n"
    "      --hdf5-rows A,B     HDF5: one sample per row of datasets A, B along axis 0\n";

static int cmd_pack(int argc, char **argv)
{
    static const struct option options[] = {{"output", required_argument, 0, 'o'},
                                            {"format", required_argument, 0, 'f'},
                                            {"shard-size", required_argument, 0, 's'},
                                            {"shuffle-seed", required_argument, 0, 'S'},
                                            {"no-shuffle", no_argument, 0, 'N'},
                                            {"jobs", required_argument, 0, 'j'},
                                            {"readers", required_argument, 0, 'r'},
                                            {"block-size", required_argument, 0, 'b'},
                                            {"hdf5-depth", required_argument, 0, 'd'},
                                            {"hdf5-rows", required_argument, 0, 'R'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION, .shuffle = 1};
    const char *outdir = NULL;
    uint64_t readers = 0, v;
    int c;
    while ((c = getopt_long(argc, argv, "o:f:s:j:h", options, NULL)) != -1) {
        switch (c) {
        case 'o':
            outdir = optarg;
            break;
        case 'f':
            if (strcmp(optarg, "tar") == 0)
                o.format = LARDER_FORMAT_TAR;
            else if (strcmp(optarg, "flat") == 0)
                o.format = LARDER_FORMAT_FLAT;
            else
                return usage_error("pack", "unknown format '%s' (tar or flat)", optarg);
            break;
        case 's':
            if (parse_size(optarg, &o.shard_size) < 0 || o.shard_size == 0)
                return usage_error("pack", "bad shard size '%s'", optarg);
            break;
        case 'S':
            if (parse_u64(optarg, &o.shuffle_seed) < 0)
                return usage_error("pack", "bad seed '%s'", optarg);
            break;
        case 'N':
            o.shuffle = 0;
            break;
        case 'j':
            if (parse_u64(optarg, &v) < 0 || v == 0 || v > 256)
                return usage_error("pack", "bad job count '%s' (1-256)", optarg);
            o.jobs = (int)v;
            break;
        case 'r':
            if (parse_u64(optarg, &readers) < 0 || readers == 0)
                return usage_error("pack", "bad reader count '%s'", optarg);
            break;
        case 'b':
            if (parse_size(optarg, &v) < 0 || v == 0 || v > (1u << 30) || (v & (v - 1)))
                return usage_error("pack", "block size '%s' must be a power of two", optarg);
            o.block_size = (uint32_t)v;
            break;
        case 'd':
            if (parse_u64(optarg, &v) < 0 || v == 0 || v > 64)
                return usage_error("pack", "bad HDF5 group depth '%s'", optarg);
            o.hdf5_group_depth = (int)v;
            break;
        case 'R':
            o.hdf5_rows = optarg;
            break;
        case 'h':
            fputs(pack_help, stdout);
            return 0;
        default:
            return usage_error("pack", "bad option");
        }
    }
    if (!outdir) return usage_error("pack", "missing -o OUTDIR");
    if (optind >= argc) return usage_error("pack", "no sources given");
    struct progress bar;
    progress_start(&bar, "packing");
    o.progress = on_progress;
    o.progress_userdata = &bar;
    larder_pack_result result;
    double started = now_seconds();
    int rc = larder_pack((const char *const *)argv + optind, (size_t)(argc - optind), outdir, &o,
                         &result);
    progress_end(&bar);
    if (rc < 0) return fail(rc);
    double seconds = now_seconds() - started;
    char size[32], rate[32];
    printf("packed %" PRIu64 " samples into %" PRIu64 " %s shards (%s) in %.2f s (%s/s)\n",
           result.num_samples, result.num_shards, o.format == LARDER_FORMAT_FLAT ? "flat" : "tar",
           human_bytes(result.bytes_written, size), seconds,
           human_bytes(seconds > 0 ? (uint64_t)(result.bytes_written / seconds) : 0, rate));
    printf("index: %s/index.larder\ndataset id: %s\n", outdir, result.dataset_id);
    if (readers) {
        uint64_t shards = result.num_shards;
        if (shards < readers)
            fprintf(stderr,
                    "%s: warning: %" PRIu64 " shards for %" PRIu64 " readers: %" PRIu64
                    " readers would get no shard of their own; use a smaller --shard-size\n",
                    program, shards, readers, readers - shards);
        else if (shards % readers != 0 && shards / readers < 8)
            fprintf(stderr,
                    "%s: warning: %" PRIu64 " shards do not split evenly over %" PRIu64
                    " readers (some read %" PRIu64 ", some %" PRIu64 "); a multiple of %" PRIu64
                    " balances them\n",
                    program, shards, readers, shards / readers, shards / readers + 1, readers);
    }
    return 0;
}

/* ---- index -------------------------------------------------------------- */

static const char index_help[] =
    "usage: larder index SHARD... -o INDEX [--block-size SIZE]\n"
    "\n"
    "Index existing WebDataset tar shards (local paths or http(s) URLs) where\n"
    "they are, without rewriting them.  Local shard names are recorded relative\n"
    "to the index's directory.\n";

static int cmd_index(int argc, char **argv)
{
    static const struct option options[] = {{"output", required_argument, 0, 'o'},
                                            {"block-size", required_argument, 0, 'b'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    const char *output = NULL;
    uint64_t block = 0;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", options, NULL)) != -1) {
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case 'b':
            if (parse_size(optarg, &block) < 0 || block == 0 || block > (1u << 30) ||
                (block & (block - 1)))
                return usage_error("index", "block size '%s' must be a power of two", optarg);
            break;
        case 'h':
            fputs(index_help, stdout);
            return 0;
        default:
            return usage_error("index", "bad option");
        }
    }
    if (!output) return usage_error("index", "missing -o INDEX");
    if (optind >= argc) return usage_error("index", "no shards given");
    struct progress bar;
    progress_start(&bar, "indexing");
    larder_pack_result result;
    int rc = larder_index_shards((const char *const *)argv + optind, (size_t)(argc - optind),
                                 output, (uint32_t)block, on_progress, &bar, &result);
    progress_end(&bar);
    if (rc < 0) return fail(rc);
    char size[32];
    printf("indexed %" PRIu64 " samples in %" PRIu64 " shards (%s)\nindex: %s\ndataset id: %s\n",
           result.num_samples, result.num_shards, human_bytes(result.bytes_written, size), output,
           result.dataset_id);
    return 0;
}

/* ---- inspect ------------------------------------------------------------ */

static const char inspect_help[] =
    "usage: larder inspect INDEX [--json] [--sample ID|KEY]\n"
    "\n"
    "Summarize a dataset, or show one sample's layout.  A sample is named by its\n"
    "key, or by its id (0-based position) when no sample has that key.\n";

static void shape_text(const larder_field_info *f, char *out, size_t size)
{
    size_t used = (size_t)snprintf(out, size, "(");
    for (uint32_t d = 0; d < f->ndim && used < size; d++)
        used += (size_t)snprintf(out + used, size - used, "%s%" PRIu64, d ? ", " : "", f->shape[d]);
    if (used < size) snprintf(out + used, size - used, "%s)", f->ndim == 1 ? "," : "");
}

static int inspect_sample(larder_dataset *d, const char *what, int json)
{
    int64_t id = resolve_sample(d, what);
    if (id < 0) return 1;
    larder_sample_info s;
    int rc = larder_sample_info_get(d, (uint64_t)id, &s);
    if (rc < 0) return fail(rc);
    if (json) {
        printf("{\"id\": %" PRId64 ", \"key\": ", id);
        json_string(stdout, s.key);
        printf(", \"shard\": %u, \"shard_name\": ", s.shard);
        json_string(stdout, s.shard_name);
        printf(", \"offset\": %" PRIu64 ", \"length\": %" PRIu64 ", \"checksum\": \"%016" PRIx64
               "\", \"fields\": [",
               s.offset, s.length, s.checksum);
    } else {
        printf("sample     %" PRId64 "\nkey        %s\nshard      %u (%s)\nbytes      %" PRIu64
               "+%" PRIu64 "\nchecksum   %016" PRIx64 " (xxh3-64)\nfields     %u\n",
               id, s.key, s.shard, s.shard_name, s.offset, s.length, s.checksum, s.num_fields);
        printf("  %-20s %12s %12s  %-8s %s\n", "name", "offset", "length", "dtype", "shape");
    }
    for (uint32_t f = 0; f < s.num_fields; f++) {
        larder_field_info fi;
        if ((rc = larder_field_info_get(d, (uint64_t)id, f, &fi)) < 0) return fail(rc);
        char shape[1024] = "";
        if (fi.dtype) shape_text(&fi, shape, sizeof shape);
        if (json) {
            printf("%s{\"name\": ", f ? ", " : "");
            json_string(stdout, fi.name);
            printf(", \"offset\": %" PRIu64 ", \"length\": %" PRIu64 ", \"dtype\": \"%s\"",
                   fi.offset, fi.length, larder_dtype_name(fi.dtype));
            if (fi.dtype) {
                printf(", \"shape\": [");
                for (uint32_t k = 0; k < fi.ndim; k++)
                    printf("%s%" PRIu64, k ? ", " : "", fi.shape[k]);
                printf("]");
            }
            printf("}");
        } else {
            printf("  %-20s %12" PRIu64 " %12" PRIu64 "  %-8s %s\n", fi.name, fi.offset, fi.length,
                   larder_dtype_name(fi.dtype), shape);
        }
    }
    if (json) printf("]}\n");
    return 0;
}

/* Field names and how many samples carry each (first 64 names). */
struct field_count {
    const char *name;
    uint64_t count;
};

static int inspect_summary(larder_dataset *d, const char *url, int json)
{
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    struct field_count names[64];
    int num_names = 0;
    uint64_t min = UINT64_MAX, max = 0;
    for (uint64_t id = 0; id < info.num_samples; id++) {
        larder_sample_info s;
        int rc = larder_sample_info_get(d, id, &s);
        if (rc < 0) return fail(rc);
        if (s.length < min) min = s.length;
        if (s.length > max) max = s.length;
        for (uint32_t f = 0; f < s.num_fields; f++) {
            larder_field_info fi;
            if ((rc = larder_field_info_get(d, id, f, &fi)) < 0) return fail(rc);
            int k = 0;
            while (k < num_names && strcmp(names[k].name, fi.name) != 0)
                k++;
            if (k == num_names && num_names < 64)
                names[num_names++] = (struct field_count){fi.name, 0};
            if (k < num_names) names[k].count++;
        }
    }
    if (json) {
        printf("{\"index\": ");
        json_string(stdout, url);
        printf(", \"version\": %u, \"dataset_id\": \"%s\", \"num_samples\": %" PRIu64
               ", \"num_shards\": %" PRIu64 ", \"total_bytes\": %" PRIu64
               ", \"block_size\": %u, \"min_sample_bytes\": %" PRIu64
               ", \"max_sample_bytes\": %" PRIu64 ", \"fields\": {",
               info.version, info.dataset_id, info.num_samples, info.num_shards, info.total_bytes,
               info.block_size, min, max);
        for (int k = 0; k < num_names; k++) {
            printf("%s", k ? ", " : "");
            json_string(stdout, names[k].name);
            printf(": %" PRIu64, names[k].count);
        }
        printf("}}\n");
        return 0;
    }
    char total[32], a[32], b[32], mean[32];
    printf("index       %s\nversion     %u\ndataset id  %s\nsamples     %" PRIu64
           "\nshards      %" PRIu64
           "\nbytes       %s (samples %s to %s, mean %s)\nblock size  %u\n",
           url, info.version, info.dataset_id, info.num_samples, info.num_shards,
           human_bytes(info.total_bytes, total), human_bytes(min, a), human_bytes(max, b),
           human_bytes(info.total_bytes / info.num_samples, mean), info.block_size);
    printf("fields     ");
    for (int k = 0; k < num_names; k++)
        printf(" %s (%" PRIu64 ")%s", names[k].name, names[k].count, k + 1 < num_names ? "," : "");
    printf("\n");
    return 0;
}

static int cmd_inspect(int argc, char **argv)
{
    static const struct option options[] = {{"json", no_argument, 0, 'J'},
                                            {"sample", required_argument, 0, 's'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    int json = 0, c;
    const char *sample = NULL;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'J':
            json = 1;
            break;
        case 's':
            sample = optarg;
            break;
        case 'h':
            fputs(inspect_help, stdout);
            return 0;
        default:
            return usage_error("inspect", "bad option");
        }
    }
    if (optind + 1 != argc) return usage_error("inspect", "expected one INDEX");
    larder_dataset *d;
    int rc = cli_open(&d, argv[optind], NULL);
    if (rc < 0) return fail(rc);
    /* inspect is where a person asks whether an index is sound: check all of it */
    if ((rc = larder_validate(d)) < 0) {
        larder_close(d);
        return fail(rc);
    }
    int status = sample ? inspect_sample(d, sample, json) : inspect_summary(d, argv[optind], json);
    larder_close(d);
    return status;
}

/* ---- verify ------------------------------------------------------------- */

static const char verify_help[] =
    "usage: larder verify INDEX\n"
    "\n"
    "Check the index's content hash and records, then read every shard once and\n"
    "check every sample's checksum.  Lists each bad sample by key; exits 1 if any.\n";

struct verify_state {
    larder_dataset *d;
    struct progress bar;
};

static void on_bad(void *userdata, uint64_t id, int error, const char *message)
{
    struct verify_state *v = userdata;
    (void)error;
    progress_end(&v->bar);
    larder_sample_info s;
    if (id != LARDER_NO_SAMPLE && larder_sample_info_get(v->d, id, &s) == 0)
        printf("BAD %s (sample %" PRIu64 "): %s\n", s.key, id, message);
    else
        printf("BAD %s\n", message);
}

static void on_verify_progress(void *userdata, uint64_t done, uint64_t total)
{
    struct verify_state *v = userdata;
    progress_update(&v->bar, done, total);
}

static int cmd_verify(int argc, char **argv)
{
    static const struct option options[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (c == 'h') {
            fputs(verify_help, stdout);
            return 0;
        }
        return usage_error("verify", "bad option");
    }
    if (optind + 1 != argc) return usage_error("verify", "expected one INDEX");
    struct verify_state v;
    int rc = cli_open(&v.d, argv[optind], NULL);
    if (rc < 0) return fail(rc);
    progress_start(&v.bar, "verifying");
    int64_t bad = larder_verify(v.d, on_bad, on_verify_progress, &v);
    progress_end(&v.bar);
    larder_dataset_info info;
    larder_dataset_info_get(v.d, &info);
    larder_close(v.d);
    if (bad < 0) return fail((int)bad);
    if (bad > 0) {
        printf("%" PRId64 " problem%s in %" PRIu64 " samples\n", bad, bad == 1 ? "" : "s",
               info.num_samples);
        return 1;
    }
    printf("ok: %" PRIu64 " samples in %" PRIu64 " shards verified\n", info.num_samples,
           info.num_shards);
    return 0;
}

/* ---- cat ---------------------------------------------------------------- */

static const char cat_help[] =
    "usage: larder cat INDEX ID|KEY [--field NAME] [--cache DIR]\n"
    "\n"
    "Write one sample's bytes (or one field's) to stdout.  Array fields are\n"
    "written as their raw little-endian elements.  With a cache (--cache, or\n"
    "the LARDER_CACHE environment variable) the bytes come from node-local\n"
    "disk when staged, and are staged there when not.\n";

static int cmd_cat(int argc, char **argv)
{
    static const struct option options[] = {{"field", required_argument, 0, 'f'},
                                            {"cache", required_argument, 0, 'c'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    const char *field = NULL, *cache = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "f:h", options, NULL)) != -1) {
        switch (c) {
        case 'f':
            field = optarg;
            break;
        case 'c':
            cache = optarg;
            break;
        case 'h':
            fputs(cat_help, stdout);
            return 0;
        default:
            return usage_error("cat", "bad option");
        }
    }
    if (optind + 2 != argc) return usage_error("cat", "expected INDEX and a sample id or key");
    larder_open_options open_options = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .verify_checksums = 1, .cache_dir = cache};
    larder_dataset *d;
    int rc = cli_open(&d, argv[optind], &open_options);
    if (rc < 0) return fail(rc);
    int status = 1;
    int64_t id = resolve_sample(d, argv[optind + 1]);
    larder_sample_info s;
    if (id >= 0 && (rc = larder_sample_info_get(d, (uint64_t)id, &s)) < 0) {
        status = fail(rc);
        id = -1;
    }
    int f = -1;
    if (id >= 0 && field && (f = larder_find_field(d, (uint64_t)id, field)) < 0 &&
        f != LARDER_ENOTFOUND) { /* a corrupt field record is not a missing field */
        status = fail(f);
        id = -1;
    } else if (id >= 0 && field && f < 0) {
        fprintf(stderr, "%s: sample '%s' has no field '%s'; it has:", program, s.key, field);
        for (uint32_t k = 0; k < s.num_fields; k++) {
            larder_field_info fi;
            if (larder_field_info_get(d, (uint64_t)id, k, &fi) == 0)
                fprintf(stderr, " %s", fi.name);
        }
        fprintf(stderr, "\n");
        id = -1;
    }
    if (id >= 0) {
        size_t capacity = (size_t)s.length ? (size_t)s.length : 1;
        void *buf = malloc(capacity);
        int64_t n = !buf     ? -ENOMEM
                    : f >= 0 ? larder_read_field(d, (uint64_t)id, (uint32_t)f, buf, capacity)
                             : larder_read_sample(d, (uint64_t)id, buf, capacity);
        if (n < 0) {
            status = fail((int)n);
        } else if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n || fflush(stdout) != 0) {
            fprintf(stderr, "%s: writing to stdout: %s\n", program, strerror(errno));
        } else {
            status = 0;
        }
        free(buf);
    }
    larder_close(d);
    return status;
}

/* ---- warm --------------------------------------------------------------- */

static const char warm_help[] =
    "usage: larder warm INDEX [--cache DIR] [--jobs N] [--block-size SIZE] [--cache-size SIZE]\n"
    "\n"
    "Stage the whole dataset onto the node cache (--cache, or LARDER_CACHE),\n"
    "checking every sample's checksum, with up to N origin reads in flight\n"
    "(default 64).  What is already staged is not fetched again.\n";

static int cmd_warm(int argc, char **argv)
{
    static const struct option options[] = {{"cache", required_argument, 0, 'c'},
                                            {"jobs", required_argument, 0, 'j'},
                                            {"block-size", required_argument, 0, 'b'},
                                            {"cache-size", required_argument, 0, 's'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .max_inflight = 64};
    uint64_t v;
    int c;
    while ((c = getopt_long(argc, argv, "j:h", options, NULL)) != -1) {
        switch (c) {
        case 'c':
            o.cache_dir = optarg;
            break;
        case 'j':
            if (parse_u64(optarg, &v) < 0 || v == 0 || v > 1024)
                return usage_error("warm", "bad job count '%s' (1-1024)", optarg);
            o.max_inflight = (int)v;
            break;
        case 'b':
            if (parse_size(optarg, &v) < 0 || v < 512 || v > (1u << 30) || (v & (v - 1)))
                return usage_error("warm", "block size '%s' must be a power of two", optarg);
            o.block_size = (uint32_t)v;
            break;
        case 's':
            if (parse_size(optarg, &o.cache_capacity) < 0)
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
    if (!o.cache_dir) o.cache_dir = getenv("LARDER_CACHE");
    if (!o.cache_dir || !o.cache_dir[0])
        return usage_error("warm", "no cache: give --cache DIR or set LARDER_CACHE");
    larder_dataset *d;
    int rc = cli_open(&d, argv[optind], &o);
    if (rc < 0) return fail(rc);
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    enum { BATCH = 256 };
    uint64_t ids[BATCH];
    void *bufs[BATCH] = {0};
    size_t caps[BATCH] = {0};
    int64_t results[BATCH];
    struct progress bar;
    progress_start(&bar, "warming");
    double started = now_seconds();
    uint64_t done = 0, bad = 0;
    for (uint64_t first = 0; first < info.num_samples; first += BATCH) {
        size_t n = info.num_samples - first < BATCH ? (size_t)(info.num_samples - first) : BATCH;
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
                done += (uint64_t)results[i];
                continue;
            }
            progress_end(&bar);
            larder_sample_info s;
            const char *key = larder_sample_info_get(d, ids[i], &s) == 0 ? s.key : "?";
            fprintf(stderr, "%s: sample %" PRIu64 " ('%s'): %s\n", program, ids[i], key,
                    larder_strerror((int)results[i]));
            bad++;
        }
        progress_update(&bar, done, info.total_bytes);
    }
    progress_end(&bar);
    for (int i = 0; i < BATCH; i++)
        free(bufs[i]);
    double seconds = now_seconds() - started;
    larder_stats st;
    larder_stats_get(d, &st);
    larder_close(d);
    char a[32], b[32], r[32];
    printf("warmed %" PRIu64 " samples (%s) in %.2f s (%s/s); the cache holds %s of %s\n",
           info.num_samples - bad, human_bytes(done, a), seconds,
           human_bytes(seconds > 0 ? (uint64_t)((double)done / seconds) : 0, r),
           human_bytes(st.resident_bytes, b), human_bytes(st.total_bytes, a));
    if (bad) {
        printf("%" PRIu64 " samples failed\n", bad);
        return 1;
    }
    return 0;
}

/* ---- stat --------------------------------------------------------------- */

static const char stat_help[] =
    "usage: larder stat [--cache DIR | --socket PATH] [--json] [--watch [SECONDS]]\n"
    "\n"
    "Show what the node cache holds, per dataset, and its counters: hits,\n"
    "misses, origin and peer requests and bytes, bytes served, fill latency.\n"
    "With --socket, ask the node daemon (larderd) instead.  --watch redraws\n"
    "the view every SECONDS (default 1) until interrupted.\n";

struct stat_print {
    int json, count;
};

static void print_entry(void *userdata, const char *id, const larder_stats *s)
{
    struct stat_print *p = userdata;
    uint64_t reads = s->hits + s->misses;
    double hit_ratio = reads ? (double)s->hits / (double)reads : 0;
    uint64_t p50 = larder_stats_fill_percentile(s, 0.5),
             p95 = larder_stats_fill_percentile(s, 0.95),
             p99 = larder_stats_fill_percentile(s, 0.99);
    if (p->json) {
        printf("%s{\"dataset_id\": \"%s\", \"block_size\": %u, \"resident_bytes\": %" PRIu64
               ", \"total_bytes\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
               ", \"hit_ratio\": %.4f, \"origin_requests\": %" PRIu64 ", \"origin_bytes\": %" PRIu64
               ", \"bytes_served\": %" PRIu64 ", \"refetches\": %" PRIu64
               ", \"evictions\": %" PRIu64 ", \"uncached_fills\": %" PRIu64
               ", \"peer_requests\": %" PRIu64 ", \"peer_bytes\": %" PRIu64
               ", \"borrowed_bytes\": %" PRIu64 ", \"fill_latency_us\": {\"p50\": %" PRIu64
               ", \"p95\": %" PRIu64 ", \"p99\": %" PRIu64 "}}",
               p->count ? ", " : "", id, s->block_size, s->resident_bytes, s->total_bytes, s->hits,
               s->misses, hit_ratio, s->origin_requests, s->origin_bytes, s->bytes_served,
               s->refetches, s->evictions, s->uncached_fills, s->peer_requests, s->peer_bytes,
               s->borrowed_bytes, p50, p95, p99);
    } else {
        char a[32], b[32], c[32], e[32];
        printf("dataset %s\n  staged        %s of %s (%.1f%%), %u-byte blocks\n", id,
               human_bytes(s->resident_bytes, a), human_bytes(s->total_bytes, b),
               s->total_bytes ? 100.0 * (double)s->resident_bytes / (double)s->total_bytes : 0,
               s->block_size);
        printf("  reads         %" PRIu64 " hits, %" PRIu64
               " misses (hit ratio %.1f%%), %s served\n",
               s->hits, s->misses, 100 * hit_ratio, human_bytes(s->bytes_served, c));
        printf("  origin        %" PRIu64 " requests, %s\n", s->origin_requests,
               human_bytes(s->origin_bytes, e));
        if (s->peer_requests)
            printf("  peers         %" PRIu64 " requests, %s (%s of it still cached)\n",
                   s->peer_requests, human_bytes(s->peer_bytes, e),
                   human_bytes(s->borrowed_bytes, a));
        printf("  fill latency  p50 < %" PRIu64 " us, p95 < %" PRIu64 " us, p99 < %" PRIu64 " us\n",
               p50, p95, p99);
        if (s->refetches || s->evictions || s->uncached_fills)
            printf("  repairs       %" PRIu64 " refetches, %" PRIu64 " evictions, %" PRIu64
                   " uncached fills\n",
                   s->refetches, s->evictions, s->uncached_fills);
    }
    p->count++;
}

/* The number after "key": in a flat JSON object, or 0. */
static uint64_t json_number(const char *object, const char *key)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(object, pattern);
    return at ? strtoull(at + strlen(pattern), NULL, 10) : 0;
}

/* The daemon's own view: its JSON as it is, or the main figures. */
static int stat_daemon(const char *socket, int json)
{
    struct larder__endpoint *e;
    char *text = NULL;
    int rc = larder__endpoint_new(&e, socket, LARDER__ROLE_READER, NULL, NULL, 5000);
    if (rc == 0) rc = larder__endpoint_stats(e, &text);
    larder__endpoint_free(e);
    if (rc < 0) return fail(rc);
    if (json) {
        printf("%s\n", text);
    } else {
        /* the daemon's JSON is flat: pick each dataset's figures out of it */
        printf("daemon at %s\n", socket);
        for (char *at = strstr(text, "{\"dataset_id\""); at;
             at = strstr(at + 1, "{\"dataset_id\"")) {
            char *end = strchr(at, '}');
            if (end) *end = '\0';
            char a[32], b[32], c[32], d[32];
            printf("dataset %.32s\n  staged        %s of %s\n  reads         %llu hits, %llu "
                   "misses\n  origin        %s\n  peers         %s borrowed\n",
                   at + 16, human_bytes(json_number(at, "resident_bytes"), a),
                   human_bytes(json_number(at, "total_bytes"), b),
                   (unsigned long long)json_number(at, "hits"),
                   (unsigned long long)json_number(at, "misses"),
                   human_bytes(json_number(at, "origin_bytes"), c),
                   human_bytes(json_number(at, "peer_bytes"), d));
            if (!end) break;
            at = end;
        }
    }
    free(text);
    return 0;
}

/* One view of a cache (or of a daemon, with socket). */
static int stat_once(const char *socket, const char *cache, struct stat_print *pp)
{
    struct stat_print p = *pp;
    if (socket) return stat_daemon(socket, p.json);
    if (!cache) cache = getenv("LARDER_CACHE");
    if (!cache || !cache[0])
        return usage_error("stat", "no cache: give --cache DIR or set LARDER_CACHE");
    if (p.json) {
        printf("{\"cache\": ");
        json_string(stdout, cache);
        printf(", \"datasets\": [");
    }
    int rc = larder_cache_list(cache, print_entry, &p);
    if (p.json) printf("]}\n");
    if (rc < 0) return fail(rc);
    if (!p.json && rc == 0) printf("%s: no datasets cached\n", cache);
    return 0;
}

static int cmd_stat(int argc, char **argv)
{
    static const struct option options[] = {
        {"cache", required_argument, 0, 'c'}, {"socket", required_argument, 0, 's'},
        {"json", no_argument, 0, 'J'},        {"watch", optional_argument, 0, 'w'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    const char *cache = NULL, *socket = NULL;
    struct stat_print p = {0};
    double watch = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'c':
            cache = optarg;
            break;
        case 's':
            socket = optarg;
            break;
        case 'J':
            p.json = 1;
            break;
        case 'w':
            watch = optarg ? atof(optarg) : 1;
            if (watch <= 0) return usage_error("stat", "bad --watch interval '%s'", optarg);
            break;
        case 'h':
            fputs(stat_help, stdout);
            return 0;
        default:
            return usage_error("stat", "bad option");
        }
    }
    if (optind != argc) return usage_error("stat", "unexpected argument '%s'", argv[optind]);
    for (;;) {
        if (watch > 0 && isatty(STDOUT_FILENO)) printf("\033[H\033[2J"); /* home, clear */
        int status = stat_once(socket, cache, &p);
        if (watch <= 0 || status != 0) return status;
        fflush(stdout);
        struct timespec pause = {(time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9)};
        nanosleep(&pause, NULL);
        p.count = 0;
    }
}

/* ---- main --------------------------------------------------------------- */

static const char main_help[] =
    "usage: larder COMMAND [ARGS]\n"
    "\n"
    "Turn a training dataset into indexed shards and read it back.\n"
    "\n"
    "  pack SRC... -o OUTDIR     pack files, tar shards or HDF5 into shards and an index\n"
    "  index SHARD... -o INDEX   index existing WebDataset tar shards in place\n"
    "  inspect INDEX             summarize a dataset, or one sample (--sample)\n"
    "  verify INDEX              check every sample's checksum\n"
    "  cat INDEX ID|KEY          write a sample or a field (--field) to stdout\n"
    "  warm INDEX --cache DIR    stage a dataset onto the node cache\n"
    "  stat --cache DIR          what the node cache holds, and its counters\n"
    "  plan INDEX --batch G      print a rank's sample ids for an epoch, in order\n"
    "\n"
    "Every command that reads an index refuses one whose shard names leave its\n"
    "base (absolute paths, '..', file:// or other hosts' URLs) unless given\n"
    "--trust-index: only for an index you trust as much as your own files.\n"
    "\n"
    "'larder COMMAND --help' describes a command.  Version " LARDER_VERSION_STRING ".\n";

int main(int argc, char **argv)
{
    larder_set_log(on_log, NULL, LARDER_LOG_WARN);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("larder %s\n", LARDER_VERSION_STRING);
        return 0;
    }
    int kept = 2;
    for (int i = 2; i < argc; i++) { /* a flag of every command */
        if (strcmp(argv[i], "--") == 0) {
            while (i < argc)
                argv[kept++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], "--trust-index") == 0)
            trust_index = true;
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    argv[argc] = NULL;
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } commands[] = {{"pack", cmd_pack},     {"index", cmd_index}, {"inspect", cmd_inspect},
                    {"verify", cmd_verify}, {"cat", cmd_cat},     {"warm", cmd_warm},
                    {"stat", cmd_stat},     {"plan", cmd_plan}};
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s'\n\n%s", program, argv[1], main_help);
    return 2;
}
