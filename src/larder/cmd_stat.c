/*
 * cmd_stat.c - `larder stat`: what the node cache (or a daemon) holds and
 * its counters, once or redrawn with --watch.
 */
#include "args.h"
#include "cli.h"
#include "endpoint.h"
#include "ui.h"

#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char stat_help[] =
    "usage: larder stat [--cache DIR | --socket PATH] [--json] [--watch [SECONDS]]\n"
    "\n"
    "Show what the node cache holds, per dataset, and its counters: hits,\n"
    "misses, origin and peer requests and bytes, bytes served, fill latency.\n"
    "With --socket (or LARDER_SOCKET set and no cache named), ask the node\n"
    "daemon (larderd) instead: what it answered to readers and peers, and its\n"
    "cache.  The cache is --cache's, else LARDER_CACHE's.  --watch redraws the\n"
    "view every SECONDS (default 1) until interrupted.\n";

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

/* A latency bound from the daemon (us): "< N us", or "> 10 s" past the last bound. */
static const char *latency_text(uint64_t us, char *out, size_t size)
{
    if (us == UINT64_MAX)
        snprintf(out, size, "> 10 s");
    else
        snprintf(out, size, "<= %" PRIu64 " us", us);
    return out;
}

/* One dataset of a daemon's STATS: what the daemon answered, and its cache. */
static void print_daemon_dataset(const char *at)
{
    char a[32], b[32], c[32], d[32], e[32], p50[32], p99[32];
    uint64_t hits = json_number(at, "hits"), misses = json_number(at, "misses");
    uint64_t reads = hits + misses;
    printf("dataset %.32s\n  staged        %s of %s\n", at + 16,
           human_bytes(json_number(at, "resident_bytes"), a),
           human_bytes(json_number(at, "total_bytes"), b));
    printf("  reads         %" PRIu64 " hits, %" PRIu64 " misses (hit ratio %.1f%%), %s served\n",
           hits, misses, reads ? 100.0 * (double)hits / (double)reads : 0,
           human_bytes(json_number(at, "served_bytes"), c));
    if (json_number(at, "borrowed_reads") || json_number(at, "peer_served_reads"))
        printf("                %" PRIu64 " misses borrowed from owners; %" PRIu64
               " reads (%s) served to peers\n",
               json_number(at, "borrowed_reads"), json_number(at, "peer_served_reads"),
               human_bytes(json_number(at, "peer_served_bytes"), d));
    if (json_number(at, "staged_reads"))
        printf("                %" PRIu64 " reads (%s) staged for readers that read the cache "
               "themselves\n",
               json_number(at, "staged_reads"), human_bytes(json_number(at, "staged_bytes"), d));
    if (json_number(at, "read_errors"))
        printf("  errors        %" PRIu64 " reads answered with an error\n",
               json_number(at, "read_errors"));
    if (reads)
        printf("  read latency  p50 %s, p99 %s\n",
               latency_text(json_number(at, "read_p50_us"), p50, sizeof p50),
               latency_text(json_number(at, "read_p99_us"), p99, sizeof p99));
    printf("  origin        %" PRIu64 " requests, %s\n", json_number(at, "origin_requests"),
           human_bytes(json_number(at, "origin_bytes"), e));
    if (json_number(at, "peer_requests"))
        printf("  peers         %" PRIu64 " requests, %s borrowed\n",
               json_number(at, "peer_requests"), human_bytes(json_number(at, "peer_bytes"), a));
    if (json_number(at, "pinned_bytes"))
        printf("  pinned        %s (hints, until their TTL)\n",
               human_bytes(json_number(at, "pinned_bytes"), b));
}

/* The daemon's work queues by class ("classes" in its STATS), one line each. */
static void print_daemon_classes(const char *text)
{
    const char *classes = strstr(text, "\"classes\": {");
    if (!classes) return;
    printf("queues (READs and staging, by class)\n");
    static const char *const names[] = {"demand", "near", "hinted", "warm"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char key[32];
        snprintf(key, sizeof key, "\"%s\": {", names[i]);
        const char *at = strstr(classes, key);
        if (!at) continue;
        uint64_t started = json_number(at, "started");
        printf("  %-7s %" PRIu64 " started, %" PRIu64 " queued now, %" PRIu64
               " running; queue wait mean %.1f ms, max %.1f ms\n",
               names[i], started, json_number(at, "queued") - started, json_number(at, "running"),
               started ? (double)json_number(at, "wait_us") / (double)started / 1000.0 : 0.0,
               (double)json_number(at, "wait_max_us") / 1000.0);
    }
}

/* A number of the transforms' object (0 when absent). */
static double transform_number(const char *at, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *p = strstr(at, quoted);
    return p ? strtod(p + strlen(quoted), NULL) : 0;
}

/* The daemon's transforms (docs/transforms.md): where they run, and why. */
static void print_daemon_transforms(const char *at)
{
    const char *placement = strstr(at, "\"placement\": \"reader\"") ? "readers" : "daemon";
    printf("transforms      run by the %s for %.1f s (%.0f switches); contention %.0f%% "
           "(limit %.0f%%), CPU busy %.0f%%, daemon %.0f%%\n",
           placement, transform_number(at, "placement_since_ms") / 1000,
           transform_number(at, "switches"), 100 * transform_number(at, "contention"),
           transform_number(at, "cpu_limit"), 100 * transform_number(at, "cpu_busy"),
           100 * transform_number(at, "cpu_self"));
    printf("                queue wait %.0f us, run %.0f us on %.0f jobs; readers wait %.0f us "
           "(budget %.0f us)\n",
           transform_number(at, "queue_wait_us"), transform_number(at, "run_us"),
           transform_number(at, "jobs"), transform_number(at, "reader_wait_us"),
           transform_number(at, "reader_budget_us"));
    printf("                %.0f transformed, %.0f cached, %.0f raw (busy), %.0f raw (queue), "
           "%.0f raw (unknown), %.0f errors\n",
           transform_number(at, "transformed"), transform_number(at, "cached"),
           transform_number(at, "raw_reader"), transform_number(at, "raw_shed"),
           transform_number(at, "raw_unknown"), transform_number(at, "errors"));
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
        print_daemon_classes(text); /* before the walk below cuts the text up */
        char *transforms = strstr(text, "\"transforms\": {");
        if (transforms) print_daemon_transforms(transforms);
        for (char *at = strstr(text, "{\"dataset_id\""); at;
             at = strstr(at + 1, "{\"dataset_id\"")) {
            char *end = strchr(at, '}');
            if (end) *end = '\0';
            print_daemon_dataset(at);
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

int cmd_stat(int argc, char **argv)
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
            watch = 1;
            if (optarg && (args_parse_decimal(optarg, &watch) < 0 || watch <= 0))
                return usage_error("stat", "bad --watch interval '%s'", optarg);
            break;
        case 'h':
            fputs(stat_help, stdout);
            return 0;
        default:
            return usage_error("stat", "bad option");
        }
    }
    if (optind != argc) return usage_error("stat", "unexpected argument '%s'", argv[optind]);
    if (socket) cache = NULL; /* --socket: the daemon's view, whatever else is named */
    if (!cli_cache_or_daemon(&cache, &socket))
        return usage_error("stat", "no cache: give --cache DIR or --socket PATH, or set "
                                   "LARDER_CACHE or LARDER_SOCKET");
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
