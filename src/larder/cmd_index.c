/*
 * cmd_index.c - `larder index`: index WebDataset tar shards where they
 * are, or (--files) a tree of plain files, one sample per file.
 */
#include "args.h"
#include "cli.h"
#include "ui.h"

#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char index_help[] =
    "usage: larder index SHARD... -o INDEX [--block-size SIZE]\n"
    "       larder index --files DIR -o INDEX [--files-from LIST] [--checksum-block SIZE]\n"
    "                    [--large-file SIZE] [--block-size SIZE] [--verbose]\n"
    "\n"
    "Index existing WebDataset tar shards (local paths or http(s) URLs) where\n"
    "they are, without rewriting them.  Local shard names are recorded relative\n"
    "to the index's directory.\n"
    "\n"
    "--files DIR indexes every regular file under DIR instead, one sample per\n"
    "file (key: its path under DIR), read once for its checksums; files above\n"
    "--large-file (4M) also get a checksum per --checksum-block (1M), so that a\n"
    "range of them is read and checked by those blocks alone.  Symbolic links\n"
    "are not followed, the index itself is left out, and files whose names an\n"
    "index cannot hold are skipped (the summary says how many, and why).\n"
    "--files-from LIST takes the names from LIST (one a line) instead of\n"
    "listing DIR, which may then be an http(s):// URL directory.  An\n"
    "s3://bucket/prefix/ DIR needs no list: its objects are listed.\n";

/* ---- skipped files, by cause ------------------------------------------------ */

#define EXAMPLES 3

struct skipped_cause {
    char *cause;
    uint64_t count;
    char *examples[EXAMPLES];
};

static struct {
    struct skipped_cause *causes;
    size_t count;
    bool verbose;
} skipped;

/* The log callback while indexing files: "NAME: skipped, WHY" gathered by WHY. */
static void gather(void *userdata, int level, const char *message)
{
    (void)userdata;
    const char *split = strstr(message, ": skipped, ");
    if (level == LARDER_LOG_ERROR || !split || skipped.verbose) cli_log(NULL, level, message);
    if (level == LARDER_LOG_ERROR || !split) return;
    const char *cause = split + strlen(": skipped, ");
    struct skipped_cause *c = NULL;
    for (size_t i = 0; i < skipped.count && !c; i++)
        if (strcmp(skipped.causes[i].cause, cause) == 0) c = &skipped.causes[i];
    if (!c) {
        struct skipped_cause *grown =
            realloc(skipped.causes, (skipped.count + 1) * sizeof *skipped.causes);
        if (!grown) return;
        skipped.causes = grown;
        c = &grown[skipped.count];
        *c = (struct skipped_cause){.cause = strdup(cause)};
        if (!c->cause) return;
        skipped.count++;
    }
    if (c->count < EXAMPLES) c->examples[c->count] = strndup(message, (size_t)(split - message));
    c->count++;
}

/* A name as it can be printed: control characters as \xNN. */
static void print_name(const char *name)
{
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            fprintf(stderr, "\\x%02x", *p);
        else
            fputc(*p, stderr);
}

/* "skipped N files: n1 for R1, ..." and a few names of each, then forget them. */
static void show_skipped(void)
{
    uint64_t total = 0;
    for (size_t i = 0; i < skipped.count; i++)
        total += skipped.causes[i].count;
    if (total) {
        fprintf(stderr, "%s: warning: skipped %" PRIu64 " file%s:", program, total,
                total == 1 ? "" : "s");
        for (size_t i = 0; i < skipped.count; i++)
            fprintf(stderr, "%s %" PRIu64 " for %s", i ? "," : "", skipped.causes[i].count,
                    skipped.causes[i].cause);
        fprintf(stderr, "\n");
    }
    for (size_t i = 0; i < skipped.count; i++) {
        struct skipped_cause *c = &skipped.causes[i];
        for (int e = 0; e < EXAMPLES && (uint64_t)e < c->count && !skipped.verbose; e++)
            if (c->examples[e]) {
                fprintf(stderr, "  ");
                print_name(c->examples[e]);
                fprintf(stderr, " (%s)\n", c->cause);
            }
        if (c->count > EXAMPLES && !skipped.verbose)
            fprintf(stderr, "  and %" PRIu64 " more for %s (--verbose lists them all)\n",
                    c->count - EXAMPLES, c->cause);
        for (int e = 0; e < EXAMPLES; e++)
            free(c->examples[e]);
        free(c->cause);
    }
    free(skipped.causes);
    skipped.causes = NULL, skipped.count = 0;
}

/* A size option: a power of two (`power`) or any size, at least `minimum`; 0 or -1. */
static int size_option(const char *text, bool power, uint64_t minimum, uint64_t *out)
{
    if (args_parse_size(text, out) < 0 || *out < minimum || (power && (*out & (*out - 1))))
        return -1;
    return 0;
}

static int index_files(const char *root, const char *output, larder_index_files_options *o)
{
    struct progress bar;
    progress_start(&bar, "indexing");
    o->progress = cli_progress;
    o->userdata = &bar;
    larder_pack_result result;
    larder_set_log(gather, NULL, LARDER_LOG_WARN);
    int rc = larder_index_files(root, output, o, &result);
    larder_set_log(cli_log, NULL, LARDER_LOG_WARN);
    progress_end(&bar);
    show_skipped();
    if (rc < 0) return fail(rc);
    char size[32];
    printf("indexed %" PRIu64 " files (%s)\nindex: %s\ndataset id: %s\n", result.num_samples,
           human_bytes(result.bytes_written, size), output, result.dataset_id);
    return 0;
}

int cmd_index(int argc, char **argv)
{
    static const struct option options[] = {{"output", required_argument, 0, 'o'},
                                            {"block-size", required_argument, 0, 'b'},
                                            {"files", required_argument, 0, 'F'},
                                            {"files-from", required_argument, 0, 'L'},
                                            {"checksum-block", required_argument, 0, 'C'},
                                            {"large-file", required_argument, 0, 'G'},
                                            {"verbose", no_argument, 0, 'v'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    const char *output = NULL, *files = NULL;
    uint64_t block = 0;
    larder_index_files_options o = {.struct_size = sizeof o};
    int c;
    while ((c = getopt_long(argc, argv, "o:vh", options, NULL)) != -1) {
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case 'b':
            if (args_parse_size(optarg, &block) < 0 || block == 0 || block > (1u << 30) ||
                (block & (block - 1)))
                return usage_error("index", "block size '%s' must be a power of two", optarg);
            break;
        case 'F':
            files = optarg;
            break;
        case 'L':
            o.files_from = optarg;
            break;
        case 'C':
            if (size_option(optarg, true, 512, &o.checksum_block) < 0 ||
                o.checksum_block > (UINT64_C(64) << 20))
                return usage_error("index",
                                   "checksum block '%s' must be a power of two from 512 "
                                   "to 64M",
                                   optarg);
            break;
        case 'G':
            if (size_option(optarg, false, 1, &o.large_file) < 0)
                return usage_error("index", "large file size '%s' must be a size above 0", optarg);
            break;
        case 'v':
            skipped.verbose = true;
            break;
        case 'h':
            fputs(index_help, stdout);
            return 0;
        default:
            return usage_error("index", "bad option");
        }
    }
    if (!output) return usage_error("index", "missing -o INDEX");
    if (files && optind < argc)
        return usage_error("index", "--files DIR takes no shards ('%s')", argv[optind]);
    if (!files && (o.files_from || o.checksum_block || o.large_file))
        return usage_error("index", "--files-from, --checksum-block and --large-file need --files");
    if (files) {
        o.block_size = (uint32_t)block;
        return index_files(files, output, &o);
    }
    if (optind >= argc) return usage_error("index", "no shards given");
    struct progress bar;
    progress_start(&bar, "indexing");
    larder_pack_result result;
    int rc = larder_index_shards((const char *const *)argv + optind, (size_t)(argc - optind),
                                 output, (uint32_t)block, cli_progress, &bar, &result);
    progress_end(&bar);
    if (rc < 0) return fail(rc);
    char size[32];
    printf("indexed %" PRIu64 " samples in %" PRIu64 " shards (%s)\nindex: %s\ndataset id: %s\n",
           result.num_samples, result.num_shards, human_bytes(result.bytes_written, size), output,
           result.dataset_id);
    return 0;
}
