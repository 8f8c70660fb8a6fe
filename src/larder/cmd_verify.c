/*
 * cmd_verify.c - `larder verify`: read every shard once and check every
 * sample's checksum, listing the bad ones.
 */
#include "cli.h"
#include "ui.h"

#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>

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

int cmd_verify(int argc, char **argv)
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
