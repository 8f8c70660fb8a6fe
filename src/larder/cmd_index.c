/*
 * cmd_index.c - `larder index`: index WebDataset tar shards where they are.
 */
#include "args.h"
#include "cli.h"
#include "ui.h"

#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>

static const char index_help[] =
    "usage: larder index SHARD... -o INDEX [--block-size SIZE]\n"
    "\n"
    "Index existing WebDataset tar shards (local paths or http(s) URLs) where\n"
    "they are, without rewriting them.  Local shard names are recorded relative\n"
    "to the index's directory.\n";

int cmd_index(int argc, char **argv)
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
            if (args_parse_size(optarg, &block) < 0 || block == 0 || block > (1u << 30) ||
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
                                 output, (uint32_t)block, cli_progress, &bar, &result);
    progress_end(&bar);
    if (rc < 0) return fail(rc);
    char size[32];
    printf("indexed %" PRIu64 " samples in %" PRIu64 " shards (%s)\nindex: %s\ndataset id: %s\n",
           result.num_samples, result.num_shards, human_bytes(result.bytes_written, size), output,
           result.dataset_id);
    return 0;
}
