/*
 * cmd_hint.c - `larder hint hot|replicate|list`: tell the node daemon
 * what will be read (larder_hint, larder_hint_list; docs/protocol.md
 * "Hints"), and show what it pinned.
 */
#include "args.h"
#include "wire.h"
#include "cli.h"
#include "ui.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char hint_help[] =
    "usage: larder hint hot INDEX|NAME [KEY...] [--ttl DURATION] [--replicas N | --all-nodes]\n"
    "                   [--wait] [--socket PATH] [--json]\n"
    "       larder hint replicate INDEX|NAME --to H:P,... [--ttl DURATION] [--wait]\n"
    "                   [--socket PATH] [--json]\n"
    "       larder hint list [--socket PATH] [--json]\n"
    "\n"
    "Tell the node daemon (--socket, else LARDER_SOCKET) what will be read soon.\n"
    "hot: the daemon stages the samples named by KEY (all of them without keys)\n"
    "in its node cache in the background, below every reader's priority, and\n"
    "pins them against eviction for --ttl (default 10m); with --replicas N, N\n"
    "nodes do (this one and N-1 others chosen by the dataset id), with\n"
    "--all-nodes every member; each copies from the shard's owner node, so the\n"
    "origin serves each byte once for the cluster.  replicate: the members named\n"
    "by --to stage and pin the whole dataset, so a reader there later finds it\n"
    "local.  list: what this node has pinned, and for how long yet.\n"
    "\n"
    "A hint larger than the pins may hold (7/8 of the daemon's --cache-size)\n"
    "pins what fits and says so.  Without --wait the command returns once the\n"
    "daemons have taken the hint; with it, when the staging is done.\n"
    "INDEX is an index's path or URL; anything else that is no file here is taken\n"
    "for a NAME published with `larder publish`, which every daemon concerned\n"
    "resolves to its own copy of the publication's index.\n"
    "DURATION: a number with a unit, ms, s, m, h or d (a bare number: seconds).\n"
    "Exit status 1 when a node did not take the hint.\n";

/* "10m", "30s", "500ms", "2h", "1d", or seconds: milliseconds, or -1. */
static int64_t parse_duration(const char *text)
{
    char *end;
    double value = strtod(text, &end);
    if (end == text || !(value > 0)) return -1;
    double unit = strcmp(end, "ms") == 0             ? 1
                  : strcmp(end, "s") == 0 || !end[0] ? 1e3
                  : strcmp(end, "m") == 0            ? 60e3
                  : strcmp(end, "h") == 0            ? 3600e3
                  : strcmp(end, "d") == 0            ? 86400e3
                                                     : -1;
    if (unit < 0 || value * unit > 30 * 86400e3 || value * unit < 1) return -1;
    return (int64_t)(value * unit);
}

static void print_result(const char *what, const larder_hint_result *r, int json)
{
    if (json) {
        printf("{\"hint\": \"%s\", \"nodes\": %u, \"failed\": %u, \"done\": %s, \"partial\": %s, "
               "\"samples\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"pinned_bytes\": %" PRIu64
               ", \"staged_bytes\": %" PRIu64 "}\n",
               what, r->nodes, r->failed, r->done ? "true" : "false", r->partial ? "true" : "false",
               r->samples, r->bytes, r->pinned_bytes, r->staged_bytes);
        return;
    }
    char a[32], b[32], c[32];
    printf("hinted %" PRIu64 " samples (%s) on %u node%s: %s pinned, %s staged%s\n", r->samples,
           human_bytes(r->bytes, a), r->nodes, r->nodes == 1 ? "" : "s",
           human_bytes(r->pinned_bytes, b), human_bytes(r->staged_bytes, c),
           r->done ? "" : " so far (staging in the background)");
    if (r->partial)
        printf("pinned less than asked on some node: more than its cache's pins may hold "
               "(7/8 of --cache-size), or a staging error (see its log)\n");
    if (r->failed) fprintf(stderr, "%s: %u node(s) did not take the hint\n", program, r->failed);
}

static int list(const char *socket, int json)
{
    size_t capacity = 1u << 20;
    char *text = malloc(capacity);
    if (!text) return fail(-ENOMEM);
    int64_t n = larder_hint_list(socket, text, capacity);
    if (n < 0) {
        free(text);
        return fail((int)n);
    }
    if (json) {
        printf("%s\n", text);
    } else if (strstr(text, "\"url\"") == NULL) {
        printf("nothing pinned\n");
    } else { /* a line per hint: the fields from the daemon's JSON */
        for (const char *p = text; (p = strstr(p, "{\"url\": \"")); p++) {
            const char *url = p + 9, *end = strchr(url, '"');
            char object[1024];
            const char *close = strchr(p, '}');
            snprintf(object, sizeof object, "%.*s", close ? (int)(close - p) : 0, p);
            char a[32], b[32];
            long long left = (long long)json_number(object, "ttl_left_ms");
            printf("%.*s  %s pinned, %s staged, %lld s left%s\n", end ? (int)(end - url) : 0, url,
                   human_bytes(json_number(object, "pinned_bytes"), a),
                   human_bytes(json_number(object, "staged_bytes"), b),
                   left > 0 ? (left + 999) / 1000 : 0,
                   strstr(object, "\"staging\": true") ? " (staging)" : "");
        }
    }
    free(text);
    return 0;
}

int cmd_hint(int argc, char **argv)
{
    static const struct option options[] = {{"ttl", required_argument, 0, 't'},
                                            {"replicas", required_argument, 0, 'r'},
                                            {"all-nodes", no_argument, 0, 'a'},
                                            {"to", required_argument, 0, 'T'},
                                            {"wait", no_argument, 0, 'w'},
                                            {"socket", required_argument, 0, 'S'},
                                            {"json", no_argument, 0, 'j'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    larder_hint_options o = {.version = LARDER_HINT_OPTIONS_VERSION, .ttl_ms = 600000};
    const char *socket = NULL;
    int json = 0, c;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        int64_t ttl;
        switch (c) {
        case 't':
            if ((ttl = parse_duration(optarg)) < 0)
                return usage_error("hint", "bad --ttl '%s' (1ms to 30d: 10m, 30s, 2h)", optarg);
            o.ttl_ms = (uint64_t)ttl;
            break;
        case 'r':
            if (args_parse_u32(optarg, &o.replicas) < 0 || o.replicas < 1 || o.replicas > 65536)
                return usage_error("hint", "bad --replicas '%s' (1-65536)", optarg);
            break;
        case 'a':
            o.all_nodes = 1;
            break;
        case 'T':
            o.targets = optarg;
            break;
        case 'w':
            o.wait = 1;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            fputs(hint_help, stdout);
            return 0;
        default:
            return usage_error("hint", "bad option");
        }
    }
    if (optind >= argc) return usage_error("hint", "expected hot, replicate or list");
    const char *what = argv[optind++];
    if (!socket && !getenv("LARDER_SOCKET"))
        return usage_error("hint", "no node daemon: give --socket PATH or set LARDER_SOCKET");
    if (strcmp(what, "list") == 0) {
        if (optind != argc) return usage_error("hint", "list takes no arguments");
        return list(socket, json);
    }
    bool hot = strcmp(what, "hot") == 0;
    if (!hot && strcmp(what, "replicate") != 0)
        return usage_error("hint", "unknown hint '%s' (hot, replicate or list)", what);
    if (optind >= argc) return usage_error("hint", "expected INDEX or NAME");
    const char *target = argv[optind++];
    struct stat st;
    /* an index is a URL or a file here; anything else names a publication */
    if (strstr(target, "://") || stat(target, &st) == 0)
        o.index = target;
    else if (larder__wire_check_publication(target, strlen(target)) == 0)
        o.name = target;
    else
        return usage_error("hint", "%s is no index here, nor a publication name", target);
    if (hot) {
        if (o.targets) return usage_error("hint", "--to is for replicate");
        if (o.all_nodes && o.replicas)
            return usage_error("hint", "--replicas or --all-nodes, not both");
        o.kind = LARDER_HINT_HOT;
        o.keys = (const char *const *)argv + optind;
        o.num_keys = (size_t)(argc - optind);
    } else {
        if (!o.targets) return usage_error("hint", "replicate needs --to H:P,...");
        if (o.all_nodes || o.replicas)
            return usage_error("hint", "replicate goes to the --to members only");
        if (optind != argc) return usage_error("hint", "replicate takes no keys");
        o.kind = LARDER_HINT_REPLICATE;
    }
    larder_hint_result r;
    int rc = larder_hint(socket, &o, &r);
    if (rc < 0) return fail_or_usage("hint", rc);
    print_result(what, &r, json);
    return r.failed ? 1 : 0;
}
