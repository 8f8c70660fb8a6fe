/*
 * cmd_pack.c - `larder pack`: files, tar shards or HDF5 into shards and an
 * index.  The packing itself is the library's (larder_pack).
 */
#include "args.h"
#include "cli.h"
#include "larder_pack.h"
#include "ui.h"

#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
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
    "      --hdf5-rows A,B     HDF5: one sample per row of datasets A, B along axis 0\n";

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
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    *a = (struct pack_args){
        .options = {.version = LARDER_PACK_OPTIONS_VERSION, .shuffle = 1},
    };
    larder_pack_options *o = &a->options;
    uint64_t v;
    int c;
    while ((c = getopt_long(argc, argv, "o:f:s:j:h", options, NULL)) != -1) {
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
    int rc = larder_pack(a.sources, a.num_sources, a.outdir, o, &result);
    progress_end(&bar);
    if (rc < 0) return fail(rc);
    double seconds = now_seconds() - started;
    char size[32], rate[32];
    printf("packed %" PRIu64 " samples into %" PRIu64 " %s shards (%s) in %.2f s (%s/s)\n",
           result.num_samples, result.num_shards, o->format == LARDER_FORMAT_FLAT ? "flat" : "tar",
           human_bytes(result.bytes_written, size), seconds,
           human_bytes(seconds > 0 ? (uint64_t)(result.bytes_written / seconds) : 0, rate));
    printf("index: %s/index.larder\ndataset id: %s\n", a.outdir, result.dataset_id);
    if (a.readers) warn_about_readers(result.num_shards, a.readers);
    return 0;
}
