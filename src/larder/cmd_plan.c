/*
 * cmd_plan.c - `larder plan`: print the sample ids one rank (or one
 * loader worker of a rank) reads in an epoch, one a line, in order.
 * The order itself lives in the library (src/lib/plan.c, docs/plan.md);
 * this file only parses options and prints.
 */
#include "args.h"
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char plan_help[] =
    "usage: larder plan INDEX --batch G [options]\n"
    "\n"
    "Print the sample ids that one rank reads in one epoch, one a line, in\n"
    "order.  The order depends only on the seed, the epoch and the position:\n"
    "global step t owns positions [t*G, (t+1)*G) and rank R of W takes the\n"
    "R-th of W equal slices of it, so a run stopped at step T resumes on any\n"
    "world size with --from-step T.  docs/plan.md specifies the order.\n"
    "\n"
    "  -s, --seed S          seed of the order (default 0)\n"
    "  -e, --epoch E         epoch (default 0)\n"
    "  -b, --batch G         global batch: samples per step over all ranks (default 1)\n"
    "  -w, --world W         ranks; must divide G (default 1)\n"
    "  -r, --rank R          this rank, 0 .. W-1 (default 0)\n"
    "      --from-step T     start at global step T (default 0)\n"
    "      --steps K         print at most K steps from there (default: to the epoch's end)\n"
    "      --workers K       loader workers of the rank (default 1)\n"
    "      --worker w        print only worker w's steps: T+w, T+w+K, ... (default 0)\n"
    "      --mode MODE       global (default), locality (shuffle shards, then samples\n"
    "                        within windows of --window shards) or none (index order)\n"
    "      --window k        shards per locality window (default 8)\n"
    "      --pad             complete the last partial global batch with the epoch's\n"
    "                        first samples (default: drop it)\n"
    "      --deny FILE       leave out the samples FILE lists (ids or keys, one a line;\n"
    "                        default: INDEX.deny when it exists)\n"
    "      --no-deny         ignore INDEX.deny\n"
    "      --keys            print sample keys instead of ids\n"
    "      --info            print the plan's numbers (samples, steps, ...) instead\n";

static void print_info(const larder_plan *plan, const char *deny)
{
    larder_plan_info info;
    larder_plan_info_get(plan, &info);
    printf("samples: %" PRIu64 "\n", info.num_samples);
    printf("denied: %" PRIu64 "\n", info.num_denied);
    printf("deny-list: %s\n", deny ? deny : "none");
    printf("steps: %" PRIu64 "\n", info.steps);
    printf("global batch: %" PRIu64 "\n", info.global_batch);
    printf("local batch: %" PRIu64 "\n", info.local_batch);
    printf("padded: %" PRIu64 "\n", info.padded);
    printf("dropped: %" PRIu64 "\n", info.dropped);
}

/* Print the ids of the worker's steps below `end`; 0 or an exit status. */
static int print_ids(larder_dataset *d, const larder_plan *plan, uint64_t end, int keys)
{
    larder_plan_info info;
    larder_plan_info_get(plan, &info);
    uint64_t *ids = malloc((info.local_batch ? info.local_batch : 1) * sizeof *ids);
    if (!ids) return fail_or_usage("plan", -ENOMEM);
    for (uint64_t i = 0;; i++) {
        int64_t step = larder_plan_worker_step(plan, i);
        if (step < 0 || (uint64_t)step >= end) break;
        int64_t n = larder_plan_batch(plan, (uint64_t)step, ids, (size_t)info.local_batch);
        if (n < 0) {
            free(ids);
            return fail_or_usage("plan", (int)n);
        }
        for (int64_t k = 0; k < n; k++) {
            larder_sample_info s;
            if (!keys) {
                printf("%" PRIu64 "\n", ids[k]);
            } else if (larder_sample_info_get(d, ids[k], &s) == 0) {
                printf("%s\n", s.key);
            } else {
                free(ids);
                return fail_or_usage("plan", LARDER_EBADINDEX);
            }
        }
    }
    free(ids);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "larder plan: writing to stdout: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

int cmd_plan(int argc, char **argv)
{
    enum { FROM_STEP = 256, STEPS, WORKERS, WORKER, MODE, WINDOW, PAD, DENY, NO_DENY, KEYS, INFO };
    static const struct option options[] = {{"seed", required_argument, 0, 's'},
                                            {"epoch", required_argument, 0, 'e'},
                                            {"batch", required_argument, 0, 'b'},
                                            {"world", required_argument, 0, 'w'},
                                            {"rank", required_argument, 0, 'r'},
                                            {"from-step", required_argument, 0, FROM_STEP},
                                            {"steps", required_argument, 0, STEPS},
                                            {"workers", required_argument, 0, WORKERS},
                                            {"worker", required_argument, 0, WORKER},
                                            {"mode", required_argument, 0, MODE},
                                            {"window", required_argument, 0, WINDOW},
                                            {"pad", no_argument, 0, PAD},
                                            {"deny", required_argument, 0, DENY},
                                            {"no-deny", no_argument, 0, NO_DENY},
                                            {"keys", no_argument, 0, KEYS},
                                            {"info", no_argument, 0, INFO},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    larder_plan_options o = {.version = LARDER_PLAN_OPTIONS_VERSION, .global_batch = 1};
    uint64_t max_steps = UINT64_MAX;
    int no_deny = 0, keys = 0, info = 0, c;
    while ((c = getopt_long(argc, argv, "s:e:b:w:r:h", options, NULL)) != -1) {
        switch (c) {
        case 's':
            if (args_parse_u64(optarg, &o.seed) < 0)
                return usage_error("plan", "bad seed '%s'", optarg);
            break;
        case 'e':
            if (args_parse_u64(optarg, &o.epoch) < 0)
                return usage_error("plan", "bad epoch '%s'", optarg);
            break;
        case 'b':
            if (args_parse_u64(optarg, &o.global_batch) < 0 || o.global_batch == 0)
                return usage_error("plan", "bad global batch '%s' (a positive number)", optarg);
            break;
        case 'w':
            if (args_parse_u32(optarg, &o.world) < 0 || o.world == 0)
                return usage_error("plan", "bad world size '%s' (a positive number)", optarg);
            break;
        case 'r':
            if (args_parse_u32(optarg, &o.rank) < 0)
                return usage_error("plan", "bad rank '%s'", optarg);
            break;
        case FROM_STEP:
            if (args_parse_u64(optarg, &o.start_step) < 0)
                return usage_error("plan", "bad step '%s'", optarg);
            break;
        case STEPS:
            if (args_parse_u64(optarg, &max_steps) < 0)
                return usage_error("plan", "bad step count '%s'", optarg);
            break;
        case WORKERS:
            if (args_parse_u32(optarg, &o.workers) < 0 || o.workers == 0)
                return usage_error("plan", "bad worker count '%s' (a positive number)", optarg);
            break;
        case WORKER:
            if (args_parse_u32(optarg, &o.worker) < 0)
                return usage_error("plan", "bad worker '%s'", optarg);
            break;
        case MODE:
            if (strcmp(optarg, "global") == 0)
                o.mode = LARDER_PLAN_GLOBAL;
            else if (strcmp(optarg, "locality") == 0)
                o.mode = LARDER_PLAN_LOCALITY;
            else if (strcmp(optarg, "none") == 0)
                o.mode = LARDER_PLAN_NONE;
            else
                return usage_error("plan", "unknown mode '%s' (global, locality or none)", optarg);
            break;
        case WINDOW:
            if (args_parse_u32(optarg, &o.locality_window) < 0 || o.locality_window == 0)
                return usage_error("plan", "bad window '%s' (shards per window, a positive number)",
                                   optarg);
            break;
        case PAD:
            o.pad = 1;
            break;
        case DENY:
            o.deny_path = optarg;
            break;
        case NO_DENY:
            no_deny = 1;
            break;
        case KEYS:
            keys = 1;
            break;
        case INFO:
            info = 1;
            break;
        case 'h':
            fputs(plan_help, stdout);
            return 0;
        default:
            return usage_error("plan", "bad option");
        }
    }
    if (optind + 1 != argc) return usage_error("plan", "expected one INDEX");
    if (o.deny_path && no_deny)
        return usage_error("plan", "--deny and --no-deny contradict each other");
    const char *index = argv[optind];
    char default_deny[4096];
    if (!o.deny_path && !no_deny) {
        int found = larder_plan_default_deny(index, default_deny, sizeof default_deny);
        if (found < 0) return fail_or_usage("plan", found);
        if (found) o.deny_path = default_deny;
    }

    larder_dataset *d;
    int rc = cli_open(&d, index, NULL);
    if (rc < 0) return fail_or_usage("plan", rc);
    larder_plan *plan;
    rc = larder_plan_create(&plan, d, &o);
    if (rc < 0) {
        larder_close(d);
        return fail_or_usage("plan", rc);
    }
    int status = 0;
    uint64_t steps = larder_plan_steps(plan);
    if (info) {
        print_info(plan, o.deny_path);
    } else if (o.start_step > steps) {
        status = usage_error(
            "plan", "--from-step %" PRIu64 " is past the end of the epoch (%" PRIu64 " steps)",
            o.start_step, steps);
    } else {
        uint64_t end = steps - o.start_step < max_steps ? steps : o.start_step + max_steps;
        status = print_ids(d, plan, end, keys);
    }
    larder_plan_destroy(plan);
    larder_close(d);
    return status;
}
