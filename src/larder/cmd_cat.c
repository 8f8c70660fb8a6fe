/*
 * cmd_cat.c - `larder cat`: one sample's bytes, or one field's, to stdout.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char cat_help[] =
    "usage: larder cat INDEX ID|KEY [--field NAME] [--cache DIR] [--socket PATH]\n"
    "\n"
    "Write one sample's bytes (or one field's) to stdout.  Array fields are\n"
    "written as their raw little-endian elements.  With a cache (--cache, or\n"
    "the LARDER_CACHE environment variable) the bytes come from node-local\n"
    "disk when staged, and are staged there when not.  With the node daemon\n"
    "(--socket, or LARDER_SOCKET), what is not in a cache of your own is asked\n"
    "of the daemon, which stages it in its cache; when it does not answer, the\n"
    "bytes are read from the origin directly (with a warning).\n";

int cmd_cat(int argc, char **argv)
{
    static const struct option options[] = {{"field", required_argument, 0, 'f'},
                                            {"cache", required_argument, 0, 'c'},
                                            {"socket", required_argument, 0, 'S'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    const char *field = NULL, *cache = NULL, *socket = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "f:h", options, NULL)) != -1) {
        switch (c) {
        case 'f':
            field = optarg;
            break;
        case 'c':
            cache = optarg;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'h':
            fputs(cat_help, stdout);
            return 0;
        default:
            return usage_error("cat", "bad option");
        }
    }
    if (optind + 2 != argc) return usage_error("cat", "expected INDEX and a sample id or key");
    larder_open_options open_options = {.version = LARDER_OPEN_OPTIONS_VERSION,
                                        .verify_checksums = 1,
                                        .cache_dir = cache,
                                        .daemon_socket =
                                            socket}; /* NULL: LARDER_CACHE's and LARDER_SOCKET's */
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
