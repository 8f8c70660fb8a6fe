/*
 * cmd_pack.c - `larder pack`: files, tar shards or HDF5 into shards and an
 * index.  The packing itself is the library's (larder_pack); its warnings
 * about single inputs ("SUBJECT: CAUSE", larder_pack.h) are gathered here
 * by cause and shown as a count with a few examples (--verbose: each one
 * as it comes), and the summary says how many inputs were skipped, and why.
 */
#include "args.h"
#include "cli.h"
#include "larder_pack.h"
#include "ui.h"

#include <inttypes.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    "      --hdf5-rows A,B     HDF5: one sample per row of datasets A, B along axis 0\n"
    "  -v, --verbose           print every warning (default: a count per cause and\n"
    "                          a few examples)\n"
    "\n"
    "Files without an extension have no sample key and are skipped; the summary\n"
    "says how many inputs were skipped, and why.\n";

/* ---- warnings, by cause ----------------------------------------------------- */

#define EXAMPLES 3 /* subjects shown per cause */
#define SKIPPED_PREFIX "skipped, "

/* The warnings of one cause: how many, and the first few subjects. */
struct warning_group {
    char *cause;
    uint64_t count;
    char *examples[EXAMPLES];
};

/* What the library said while packing (it logs from its writer threads). */
struct warnings {
    pthread_mutex_t lock;
    bool verbose; /* print each as it comes, too */
    struct warning_group *groups;
    size_t count, capacity;
};

static struct warnings gathered = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The group of `cause` (cause_length bytes), made when new; NULL when out of memory. */
static struct warning_group *group_of(struct warnings *w, const char *cause, size_t cause_length)
{
    for (size_t i = 0; i < w->count; i++)
        if (strlen(w->groups[i].cause) == cause_length &&
            memcmp(w->groups[i].cause, cause, cause_length) == 0)
            return &w->groups[i];
    if (w->count == w->capacity) {
        size_t capacity = w->capacity ? 2 * w->capacity : 8;
        struct warning_group *groups = realloc(w->groups, capacity * sizeof *groups);
        if (!groups) return NULL;
        w->groups = groups, w->capacity = capacity;
    }
    struct warning_group *g = &w->groups[w->count];
    *g = (struct warning_group){.cause = strndup(cause, cause_length)};
    if (!g->cause) return NULL;
    w->count++;
    return g;
}

/* The log callback while packing: errors at once, warnings gathered by
 * cause (the text after the message's last ": "). */
static void gather(void *userdata, int level, const char *message)
{
    struct warnings *w = userdata;
    if (level == LARDER_LOG_ERROR) {
        cli_log(NULL, level, message);
        return;
    }
    const char *split = NULL;
    for (const char *at = strstr(message, ": "); at; at = strstr(at + 1, ": "))
        split = at;
    const char *cause = split ? split + 2 : message;
    pthread_mutex_lock(&w->lock);
    if (w->verbose) cli_log(NULL, level, message);
    struct warning_group *g = group_of(w, cause, strlen(cause));
    if (g && g->count < EXAMPLES)
        g->examples[g->count] = split ? strndup(message, (size_t)(split - message)) : NULL;
    if (g) g->count++;
    if (!g && !w->verbose) cli_log(NULL, level, message); /* out of memory: as it comes */
    pthread_mutex_unlock(&w->lock);
}

/* Each cause once, with its count and examples (without --verbose, which printed them all). */
static void show_warnings(const struct warnings *w)
{
    for (size_t i = 0; i < w->count && !w->verbose; i++) {
        const struct warning_group *g = &w->groups[i];
        if (g->count == 1) {
            fprintf(stderr, "%s: warning: %s%s%s\n", program, g->examples[0] ? g->examples[0] : "",
                    g->examples[0] ? ": " : "", g->cause);
            continue;
        }
        fprintf(stderr, "%s: warning: %" PRIu64 " times: %s, such as\n", program, g->count,
                g->cause);
        for (int e = 0; e < EXAMPLES && (uint64_t)e < g->count; e++)
            if (g->examples[e]) fprintf(stderr, "  %s\n", g->examples[e]);
        if (g->count > EXAMPLES)
            fprintf(stderr, "  and %" PRIu64 " more (--verbose lists them all)\n",
                    g->count - EXAMPLES);
    }
}

/* The summary's line on what was skipped, and why: "skipped N inputs: n1 for R1, ...". */
static void show_skipped(const struct warnings *w)
{
    uint64_t skipped = 0;
    for (size_t i = 0; i < w->count; i++)
        if (strncmp(w->groups[i].cause, SKIPPED_PREFIX, strlen(SKIPPED_PREFIX)) == 0)
            skipped += w->groups[i].count;
    if (!skipped) return;
    printf("skipped %" PRIu64 " input%s:", skipped, skipped == 1 ? "" : "s");
    const char *separator = " ";
    for (size_t i = 0; i < w->count; i++)
        if (strncmp(w->groups[i].cause, SKIPPED_PREFIX, strlen(SKIPPED_PREFIX)) == 0) {
            printf("%s%" PRIu64 " for %s", separator, w->groups[i].count,
                   w->groups[i].cause + strlen(SKIPPED_PREFIX));
            separator = ", ";
        }
    printf("\n");
}

static void warnings_free(struct warnings *w)
{
    for (size_t i = 0; i < w->count; i++) {
        free(w->groups[i].cause);
        for (int e = 0; e < EXAMPLES; e++)
            free(w->groups[i].examples[e]);
    }
    free(w->groups);
    w->groups = NULL;
    w->count = w->capacity = 0;
}

/* Warn when the shards do not suit `readers` readers: some would get none, or uneven shares. */
static void warn_about_readers(uint64_t shards, uint64_t readers)
{
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

/* What the command line asks of `larder pack`. */
struct pack_args {
    larder_pack_options options; /* for larder_pack; progress is set when it runs */
    const char *outdir;          /* -o */
    uint64_t readers;            /* --readers, 0 when not given */
    const char *const *sources;  /* the SRC arguments, into argv */
    size_t num_sources;
    bool verbose; /* -v: every warning, not a summary of them */
};

/* Fill `a` from the command line; CLI_RUN, or the exit status to return. */
static int parse_pack_args(int argc, char **argv, struct pack_args *a)
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
                                            {"verbose", no_argument, 0, 'v'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    *a = (struct pack_args){
        .options = {.version = LARDER_PACK_OPTIONS_VERSION, .shuffle = 1},
    };
    larder_pack_options *o = &a->options;
    uint64_t v;
    int c;
    while ((c = getopt_long(argc, argv, "o:f:s:j:vh", options, NULL)) != -1) {
        switch (c) {
        case 'o':
            a->outdir = optarg;
            break;
        case 'f':
            if (strcmp(optarg, "tar") == 0)
                o->format = LARDER_FORMAT_TAR;
            else if (strcmp(optarg, "flat") == 0)
                o->format = LARDER_FORMAT_FLAT;
            else
                return usage_error("pack", "unknown format '%s' (tar or flat)", optarg);
            break;
        case 's':
            if (args_parse_size(optarg, &o->shard_size) < 0 || o->shard_size == 0)
                return usage_error("pack", "bad shard size '%s'", optarg);
            break;
        case 'S':
            if (args_parse_u64(optarg, &o->shuffle_seed) < 0)
                return usage_error("pack", "bad seed '%s'", optarg);
            break;
        case 'N':
            o->shuffle = 0;
            break;
        case 'j':
            if (args_parse_u64(optarg, &v) < 0 || v == 0 || v > 256)
                return usage_error("pack", "bad job count '%s' (1-256)", optarg);
            o->jobs = (int)v;
            break;
        case 'r':
            if (args_parse_u64(optarg, &a->readers) < 0 || a->readers == 0)
                return usage_error("pack", "bad reader count '%s'", optarg);
            break;
        case 'b':
            if (args_parse_size(optarg, &v) < 0 || v == 0 || v > (1u << 30) || (v & (v - 1)))
                return usage_error("pack", "block size '%s' must be a power of two", optarg);
            o->block_size = (uint32_t)v;
            break;
        case 'd':
            if (args_parse_u64(optarg, &v) < 0 || v == 0 || v > 64)
                return usage_error("pack", "bad HDF5 group depth '%s'", optarg);
            o->hdf5_group_depth = (int)v;
            break;
        case 'R':
            o->hdf5_rows = optarg;
            break;
        case 'v':
            a->verbose = true;
            break;
        case 'h':
            fputs(pack_help, stdout);
            return 0;
        default:
            return usage_error("pack", "bad option");
        }
    }
    if (!a->outdir) return usage_error("pack", "missing -o OUTDIR");
    if (optind >= argc) return usage_error("pack", "no sources given");
    a->sources = (const char *const *)argv + optind;
    a->num_sources = (size_t)(argc - optind);
    return CLI_RUN;
}

int cmd_pack(int argc, char **argv)
{
    struct pack_args a;
    int status = parse_pack_args(argc, argv, &a);
    if (status != CLI_RUN) return status;
    larder_pack_options *o = &a.options;
    struct progress bar;
    progress_start(&bar, "packing");
    o->progress = cli_progress;
    o->progress_userdata = &bar;
    larder_pack_result result;
    double started = now_seconds();
    gathered.verbose = a.verbose;
    larder_set_log(gather, &gathered, LARDER_LOG_WARN);
    int rc = larder_pack(a.sources, a.num_sources, a.outdir, o, &result);
    larder_set_log(cli_log, NULL, LARDER_LOG_WARN);
    progress_end(&bar);
    show_warnings(&gathered);
    if (rc < 0) {
        warnings_free(&gathered);
        return fail(rc);
    }
    double seconds = now_seconds() - started;
    char size[32], rate[32];
    printf("packed %" PRIu64 " samples into %" PRIu64 " %s shards (%s) in %.2f s (%s/s)\n",
           result.num_samples, result.num_shards, o->format == LARDER_FORMAT_FLAT ? "flat" : "tar",
           human_bytes(result.bytes_written, size), seconds,
           human_bytes(seconds > 0 ? (uint64_t)(result.bytes_written / seconds) : 0, rate));
    show_skipped(&gathered);
    warnings_free(&gathered);
    printf("index: %s/index.larder\ndataset id: %s\n", a.outdir, result.dataset_id);
    if (a.readers) warn_about_readers(result.num_shards, a.readers);
    return 0;
}
