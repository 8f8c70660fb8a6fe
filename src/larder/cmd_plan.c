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

/* What the command line asks of `larder plan`. */
struct plan_args {
    larder_plan_options options; /* deny_path is --deny's, or NULL */
    uint64_t max_steps;          /* --steps, UINT64_MAX when not given */
    int no_deny;                 /* --no-deny */
    int keys;                    /* --keys */
    int info;                    /* --info */
    const char *index;           /* INDEX, into argv */
};

/* getopt_long codes of the options without a short form. */
enum { FROM_STEP = 256, STEPS, WORKERS, WORKER, MODE, WINDOW, PAD, DENY, NO_DENY, KEYS, INFO };

/* `larder plan`'s options, for getopt_long. */
static const struct option plan_options[] = {{"seed", required_argument, 0, 's'},
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

/* Apply option `c` with argument `arg` to `a`; CLI_RUN, or the exit status to return. */
static int plan_option(int c, const char *arg, struct plan_args *a)
{
    larder_plan_options *o = &a->options;
    switch (c) {
    case 's':
        if (args_parse_u64(arg, &o->seed) < 0) return usage_error("plan", "bad seed '%s'", arg);
        return CLI_RUN;
    case 'e':
        if (args_parse_u64(arg, &o->epoch) < 0) return usage_error("plan", "bad epoch '%s'", arg);
        return CLI_RUN;
    case 'b':
        if (args_parse_u64(arg, &o->global_batch) < 0 || o->global_batch == 0)
            return usage_error("plan", "bad global batch '%s' (a positive number)", arg);
        return CLI_RUN;
    case 'w':
        if (args_parse_u32(arg, &o->world) < 0 || o->world == 0)
            return usage_error("plan", "bad world size '%s' (a positive number)", arg);
        return CLI_RUN;
    case 'r':
        if (args_parse_u32(arg, &o->rank) < 0) return usage_error("plan", "bad rank '%s'", arg);
        return CLI_RUN;
    case FROM_STEP:
        if (args_parse_u64(arg, &o->start_step) < 0)
            return usage_error("plan", "bad step '%s'", arg);
        return CLI_RUN;
    case STEPS:
        if (args_parse_u64(arg, &a->max_steps) < 0)
            return usage_error("plan", "bad step count '%s'", arg);
        return CLI_RUN;
    case WORKERS:
        if (args_parse_u32(arg, &o->workers) < 0 || o->workers == 0)
            return usage_error("plan", "bad worker count '%s' (a positive number)", arg);
        return CLI_RUN;
    case WORKER:
        if (args_parse_u32(arg, &o->worker) < 0) return usage_error("plan", "bad worker '%s'", arg);
        return CLI_RUN;
    case MODE:
        if (strcmp(arg, "global") == 0)
            o->mode = LARDER_PLAN_GLOBAL;
        else if (strcmp(arg, "locality") == 0)
            o->mode = LARDER_PLAN_LOCALITY;
        else if (strcmp(arg, "none") == 0)
            o->mode = LARDER_PLAN_NONE;
        else
            return usage_error("plan", "unknown mode '%s' (global, locality or none)", arg);
        return CLI_RUN;
    case WINDOW:
        if (args_parse_u32(arg, &o->locality_window) < 0 || o->locality_window == 0)
            return usage_error("plan", "bad window '%s' (shards per window, a positive number)",
                               arg);
        return CLI_RUN;
    case PAD:
        o->pad = 1;
        return CLI_RUN;
    case DENY:
        o->deny_path = arg;
        return CLI_RUN;
    case NO_DENY:
        a->no_deny = 1;
        return CLI_RUN;
    case KEYS:
        a->keys = 1;
        return CLI_RUN;
    case INFO:
        a->info = 1;
        return CLI_RUN;
    case 'h':
        fputs(plan_help, stdout);
        return 0;
    default:
        return usage_error("plan", "bad option");
    }
}

/* Fill `a` from the command line; CLI_RUN, or the exit status to return. */
static int parse_plan_args(int argc, char **argv, struct plan_args *a)
{
    *a = (struct plan_args){
        .options = {.version = LARDER_PLAN_OPTIONS_VERSION, .global_batch = 1},
        .max_steps = UINT64_MAX,
    };
    int c;
    while ((c = getopt_long(argc, argv, "s:e:b:w:r:h", plan_options, NULL)) != -1) {
        int status = plan_option(c, optarg, a);
        if (status != CLI_RUN) return status;
    }
    if (optind + 1 != argc) return usage_error("plan", "expected one INDEX");
    if (a->options.deny_path && a->no_deny)
        return usage_error("plan", "--deny and --no-deny contradict each other");
    a->index = argv[optind];
    return CLI_RUN;
}

int cmd_plan(int argc, char **argv)
{
    struct plan_args a;
    int status = parse_plan_args(argc, argv, &a);
    if (status != CLI_RUN) return status;
    larder_plan_options *o = &a.options;
    const char *index = a.index;
    char default_deny[4096];
    if (!o->deny_path && !a.no_deny) {
        int found = larder_plan_default_deny(index, default_deny, sizeof default_deny);
        if (found < 0) return fail_or_usage("plan", found);
        if (found) o->deny_path = default_deny;
    }

    larder_dataset *d;
    int rc = cli_open(&d, index, NULL);
    if (rc < 0) return fail_or_usage("plan", rc);
    larder_plan *plan;
    rc = larder_plan_create(&plan, d, o);
    if (rc < 0) {
        larder_close(d);
        return fail_or_usage("plan", rc);
    }
    status = 0;
    uint64_t steps = larder_plan_steps(plan);
    if (a.info) {
        print_info(plan, o->deny_path);
    } else if (o->start_step > steps) {
        status = usage_error(
            "plan", "--from-step %" PRIu64 " is past the end of the epoch (%" PRIu64 " steps)",
            o->start_step, steps);
    } else {
        uint64_t end = steps - o->start_step < a.max_steps ? steps : o->start_step + a.max_steps;
        status = print_ids(d, plan, end, a.keys);
    }
    larder_plan_destroy(plan);
    larder_close(d);
    return status;
}
