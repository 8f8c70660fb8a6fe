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
    "With --socket, ask the node daemon (larderd) instead.  --watch redraws\n"
    "the view every SECONDS (default 1) until interrupted.\n";

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

/* The number after "key": in a flat JSON object, or 0. */
static uint64_t json_number(const char *object, const char *key)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(object, pattern);
    return at ? strtoull(at + strlen(pattern), NULL, 10) : 0;
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
        for (char *at = strstr(text, "{\"dataset_id\""); at;
             at = strstr(at + 1, "{\"dataset_id\"")) {
            char *end = strchr(at, '}');
            if (end) *end = '\0';
            char a[32], b[32], c[32], d[32];
            printf("dataset %.32s\n  staged        %s of %s\n  reads         %llu hits, %llu "
                   "misses\n  origin        %s\n  peers         %s borrowed\n",
                   at + 16, human_bytes(json_number(at, "resident_bytes"), a),
                   human_bytes(json_number(at, "total_bytes"), b),
                   (unsigned long long)json_number(at, "hits"),
                   (unsigned long long)json_number(at, "misses"),
                   human_bytes(json_number(at, "origin_bytes"), c),
                   human_bytes(json_number(at, "peer_bytes"), d));
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
    if (!cache) cache = getenv("LARDER_CACHE");
    if (!cache || !cache[0])
        return usage_error("stat", "no cache: give --cache DIR or set LARDER_CACHE");
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
