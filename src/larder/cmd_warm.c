/*
 * cmd_warm.c - `larder warm`: stage a whole dataset onto the node cache,
 * checking every sample: itself into a cache directory it may write
 * (--cache, LARDER_CACHE), or through the node daemon, which owns its
 * cache (--socket, LARDER_SOCKET): READs of every shard, chunk by chunk,
 * at the protocol's warm priority, so the daemon stages and checks them.
 */
#include "args.h"
#include "cli.h"
#include "dataset.h"
#include "endpoint.h"
#include "source.h"
#include "ui.h"

#include <errno.h>
#include <inttypes.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char warm_help[] =
    "usage: larder warm INDEX [--cache DIR | --socket PATH] [--jobs N] [--block-size SIZE]\n"
    "                   [--cache-size SIZE]\n"
    "\n"
    "Stage the whole dataset onto the node cache (--cache, or LARDER_CACHE),\n"
    "checking every sample's checksum, with up to N origin reads in flight\n"
    "(default 64).  What is already staged is not fetched again.\n"
    "\n"
    "With no cache named and the node daemon's socket (--socket, or\n"
    "LARDER_SOCKET), ask the daemon to stage it in the cache it owns: every\n"
    "shard is read through it, in 4 MB pieces, at the warm priority (after its\n"
    "readers' requests), up to N at once (at most 16).  The daemon's cache is\n"
    "sized by larderd: --block-size and --cache-size are for a cache of your own.\n";

/* What the command line asks of `larder warm`. */
struct warm_args {
    larder_open_options options; /* cache_dir is --cache's, else LARDER_CACHE */
    const char *socket;          /* the daemon's (--socket, else LARDER_SOCKET) when no cache */
    const char *index;           /* INDEX, into argv */
};

/* Fill `a` from the command line; CLI_RUN, or the exit status to return. */
static int parse_warm_args(int argc, char **argv, struct warm_args *a)
{
    static const struct option options[] = {{"cache", required_argument, 0, 'c'},
                                            {"socket", required_argument, 0, 'S'},
                                            {"jobs", required_argument, 0, 'j'},
                                            {"block-size", required_argument, 0, 'b'},
                                            {"cache-size", required_argument, 0, 's'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    *a = (struct warm_args){
        .options = {.version = LARDER_OPEN_OPTIONS_VERSION, .max_inflight = 64},
    };
    larder_open_options *o = &a->options;
    uint64_t v;
    int c;
    while ((c = getopt_long(argc, argv, "j:h", options, NULL)) != -1) {
        switch (c) {
        case 'c':
            o->cache_dir = optarg;
            break;
        case 'S':
            a->socket = optarg;
            break;
        case 'j':
            if (args_parse_u64(optarg, &v) < 0 || v == 0 || v > 1024)
                return usage_error("warm", "bad job count '%s' (1-1024)", optarg);
            o->max_inflight = (int)v;
            break;
        case 'b':
            if (args_parse_size(optarg, &v) < 0 || v < 512 || v > (1u << 30) || (v & (v - 1)))
                return usage_error("warm", "block size '%s' must be a power of two", optarg);
            o->block_size = (uint32_t)v;
            break;
        case 's':
            if (args_parse_size(optarg, &o->cache_capacity) < 0)
                return usage_error("warm", "bad cache size '%s'", optarg);
            break;
        case 'h':
            fputs(warm_help, stdout);
            return 0;
        default:
            return usage_error("warm", "bad option");
        }
    }
    if (optind + 1 != argc) return usage_error("warm", "expected one INDEX");
    if (o->cache_dir && !o->cache_dir[0]) return usage_error("warm", "--cache needs a directory");
    if (!cli_cache_or_daemon(&o->cache_dir, &a->socket))
        return usage_error("warm", "no cache: give --cache DIR or set LARDER_CACHE, or reach the "
                                   "node daemon with --socket PATH or LARDER_SOCKET");
    if (o->cache_dir) {
        o->daemon_socket = a->socket; /* NULL: LARDER_SOCKET's, as every reader */
        a->socket = NULL;
    } else if (o->block_size || o->cache_capacity) {
        return usage_error("warm", "--block-size and --cache-size are for a cache of your own; "
                                   "the daemon's is sized by larderd");
    }
    a->index = argv[optind];
    return CLI_RUN;
}

/* A warm of one's own: the batches left, and what came of those read. */
struct sample_warm {
    larder_dataset *dataset;
    const larder_dataset_info *info;
    pthread_mutex_t lock; /* everything below */
    size_t batch;         /* samples a lane reads at once */
    uint64_t next;        /* the first sample of the next batch */
    uint64_t done, bad;   /* bytes read, samples failed */
    struct progress bar;
};

/*
 * One lane of warm_samples: batches until none is left.  Two lanes run at
 * once, each with its own buffers, so that one batch's reads are in flight
 * while the other's last reads end: with one lane, a batch had to end
 * whole before the next was asked for, and its slowest read held up the
 * rest.  Through a node daemon of a cluster (bench/peer.sh, "borrowing
 * only"; LARDERD_TRACE on the borrowing daemon) the daemon sat idle while
 * the reader read a batch of resident samples from the cache (40 ms
 * gaps with no READ), and the reader waited while the daemon borrowed the
 * next batch's chunks: the second lane's READs reach the daemon meanwhile.
 */
static void *warm_lane(void *arg)
{
    struct sample_warm *w = arg;
    /* half the reads in flight per batch (--jobs, 64 by default), so
     * that the two lanes' batches are in flight at once and there are no
     * more buffers than reads in flight, each used again by its lane's next
     * batch: a fresh buffer is a fault and a zeroed page every 4 KiB.
     * Measured on bench/peer.sh's borrowing-only run (perf stat on the
     * reader, 4 alternated rounds): 70-81 ms of CPU with two lanes of 32,
     * 82-98 ms with two of 64, where page faults and unmapping them were a
     * quarter of its samples; with two of 128, 30% page faults alone. */
    size_t batch = w->batch;
    uint64_t *ids = calloc(batch, sizeof *ids);
    void **bufs = calloc(batch, sizeof *bufs);
    size_t *caps = calloc(batch, sizeof *caps);
    int64_t *results = calloc(batch, sizeof *results);
    uint64_t total = w->info->num_samples;
    pthread_mutex_lock(&w->lock);
    /* no memory for this lane's arrays: the other lane reads them all
     * (warm_samples counts what neither read) */
    while (ids && bufs && caps && results && w->next < total) {
        uint64_t first = w->next;
        size_t n = total - first < batch ? (size_t)(total - first) : batch;
        w->next += n;
        pthread_mutex_unlock(&w->lock);
        for (size_t i = 0; i < n; i++) {
            larder_sample_info s;
            ids[i] = first + i;
            if (larder_sample_info_get(w->dataset, ids[i], &s) == 0 && s.length > caps[i]) {
                free(bufs[i]);
                bufs[i] = malloc(s.length ? s.length : 1);
                caps[i] = bufs[i] ? s.length : 0;
            }
        }
        larder_read_samples(w->dataset, ids, n, bufs, caps, results);
        pthread_mutex_lock(&w->lock);
        for (size_t i = 0; i < n; i++) {
            if (results[i] >= 0) {
                w->done += (uint64_t)results[i];
                continue;
            }
            progress_end(&w->bar);
            larder_sample_info s;
            const char *key = larder_sample_info_get(w->dataset, ids[i], &s) == 0 ? s.key : "?";
            fprintf(stderr, "%s: sample %" PRIu64 " ('%s'): %s\n", program, ids[i], key,
                    larder_strerror((int)results[i]));
            w->bad++;
        }
        progress_update(&w->bar, w->done, w->info->total_bytes);
    }
    pthread_mutex_unlock(&w->lock);
    for (size_t i = 0; bufs && i < batch; i++)
        free(bufs[i]);
    free(ids), free(bufs), free(caps), free(results);
    return NULL;
}

/* Read every sample of `d` once, in batches (two at a time), with a
 * progress bar; each failure is printed.  Adds the bytes read to *done;
 * the failure count. */
static uint64_t warm_samples(larder_dataset *d, const larder_dataset_info *info, int in_flight,
                             uint64_t *done)
{
    enum { LANES = 2 };
    struct sample_warm w = {
        .dataset = d, .info = info, .batch = in_flight >= LANES ? (size_t)in_flight / LANES : 1};
    pthread_mutex_init(&w.lock, NULL);
    progress_start(&w.bar, "warming");
    pthread_t lanes[LANES];
    int running = 0;
    while (running < LANES && pthread_create(&lanes[running], NULL, warm_lane, &w) == 0)
        running++;
    if (running == 0) warm_lane(&w); /* no thread to be had: one lane, on this one */
    for (int i = 0; i < running; i++)
        pthread_join(lanes[i], NULL);
    progress_end(&w.bar);
    pthread_mutex_destroy(&w.lock);
    if (w.next < info->num_samples) { /* no lane could hold a batch */
        fprintf(stderr, "%s: %s\n", program, larder_strerror(-ENOMEM));
        w.bad += info->num_samples - w.next;
    }
    *done += w.done;
    return w.bad;
}

/* ---- through the node daemon ---------------------------------------------- */

#define DAEMON_CHUNK (4u << 20)  /* bytes of a shard one READ asks for */
#define DAEMON_PRIORITY 3        /* the protocol's warm priority: after readers' reads */
#define DAEMON_TIMEOUT_MS 120000 /* a warm READ waits behind readers' reads, and a fill */
#define DAEMON_MAX_THREADS 16    /* READs in flight */
#define SHOWN_FAILURES 5         /* failures printed; the rest only counted */

/* A warm through the daemon: the chunks left, and what came of those asked for. */
struct daemon_warm {
    larder_dataset *dataset; /* the index, read here: the shards' sizes */
    struct larder__endpoint *endpoint;
    uint64_t id_low, id_high;
    uint32_t shards;
    pthread_mutex_t lock; /* everything below */
    uint32_t shard;       /* the next chunk: this shard, from this offset */
    uint64_t offset;
    uint64_t done, total; /* bytes staged, and of all the shards */
    uint64_t failed;      /* chunks the daemon could not stage */
    bool stop;            /* the daemon stopped answering: ask for nothing more */
    struct progress bar;
};

/* The next chunk to ask for, under w->lock; false when there is none. */
static bool next_chunk(struct daemon_warm *w, uint32_t *shard, uint64_t *offset, uint64_t *length)
{
    for (; !w->stop && w->shard < w->shards; w->shard++, w->offset = 0) {
        uint64_t size = larder__dataset_shard_size(w->dataset, w->shard);
        if (w->offset < size) {
            *shard = w->shard;
            *offset = w->offset;
            *length = size - w->offset < DAEMON_CHUNK ? size - w->offset : DAEMON_CHUNK;
            w->offset += *length;
            return true;
        }
    }
    return false;
}

/* A thread asking for chunks until none is left (or the daemon is gone). */
static void *daemon_worker(void *arg)
{
    struct daemon_warm *w = arg;
    uint8_t *buf = malloc(DAEMON_CHUNK);
    uint32_t shard;
    uint64_t offset, length;
    pthread_mutex_lock(&w->lock);
    if (!buf) w->stop = true, w->failed++;
    while (next_chunk(w, &shard, &offset, &length)) {
        pthread_mutex_unlock(&w->lock);
        int rc = larder__endpoint_read(w->endpoint, w->id_low, w->id_high, shard, DAEMON_PRIORITY,
                                       offset, length, buf);
        pthread_mutex_lock(&w->lock);
        if (rc == 0) {
            w->done += length;
            progress_update(&w->bar, w->done, w->total);
            continue;
        }
        /* a connection that failed marks the endpoint down: the daemon is gone */
        w->stop = w->stop || larder__endpoint_down(w->endpoint);
        if (++w->failed <= SHOWN_FAILURES) {
            progress_end(&w->bar);
            fprintf(stderr, "%s: shard %" PRIu32 " bytes %" PRIu64 "+%" PRIu64 ": %s\n", program,
                    shard, offset, length, larder_errmsg());
        }
    }
    pthread_mutex_unlock(&w->lock);
    free(buf);
    return NULL;
}

/* The daemon's resident and total bytes of the dataset; false when it does not say. */
static bool daemon_holds(struct larder__endpoint *e, const char *id, uint64_t *resident,
                         uint64_t *total)
{
    char *text = NULL;
    if (larder__endpoint_stats(e, &text) < 0) return false;
    char *object = daemon_dataset_stats(text, id);
    if (object) {
        *resident = json_number(object, "resident_bytes");
        *total = json_number(object, "total_bytes");
    }
    free(text);
    return object != NULL;
}

/* `larder warm` through the daemon at args->socket: its exit status. */
static int warm_through_daemon(const struct warm_args *args)
{
    /* the index is read here for the shards' sizes: no cache, no daemon */
    larder_open_options local = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = "", .daemon_socket = ""};
    struct daemon_warm w = {.shard = 0};
    int rc = cli_open(&w.dataset, args->index, &local);
    if (rc < 0) return fail(rc);
    larder_dataset_info info;
    larder_dataset_info_get(w.dataset, &info);
    larder__dataset_id(w.dataset, &w.id_low, &w.id_high);
    w.shards = larder__dataset_num_shards(w.dataset);
    for (uint32_t s = 0; s < w.shards; s++)
        w.total += larder__dataset_shard_size(w.dataset, s);
    /* the daemon opens the index itself: a path it can find from its own directory */
    char absolute[PATH_MAX];
    const char *where = args->index;
    if (!larder__is_remote(where) && realpath(larder__file_path(where), absolute)) where = absolute;
    rc = larder__endpoint_new(&w.endpoint, args->socket, LARDER__ROLE_READER, NULL, where,
                              DAEMON_TIMEOUT_MS);
    uint64_t resident = 0, total = 0;
    char *probe = NULL; /* the daemon is there and opens the index: else say why, at once */
    if (rc == 0 && (rc = larder__endpoint_stats(w.endpoint, &probe)) == 0) free(probe);
    if (rc < 0) {
        larder__endpoint_free(w.endpoint);
        larder_close(w.dataset);
        return fail(rc);
    }
    pthread_mutex_init(&w.lock, NULL);
    progress_start(&w.bar, "warming");
    double started = now_seconds();
    int threads = args->options.max_inflight < DAEMON_MAX_THREADS ? args->options.max_inflight
                                                                  : DAEMON_MAX_THREADS;
    pthread_t workers[DAEMON_MAX_THREADS];
    int running = 0;
    while (running < threads && pthread_create(&workers[running], NULL, daemon_worker, &w) == 0)
        running++;
    if (running == 0) daemon_worker(&w);
    for (int i = 0; i < running; i++)
        pthread_join(workers[i], NULL);
    progress_end(&w.bar);
    double seconds = now_seconds() - started;
    bool known = daemon_holds(w.endpoint, info.dataset_id, &resident, &total);
    larder__endpoint_free(w.endpoint);
    larder_close(w.dataset);
    pthread_mutex_destroy(&w.lock);
    char a[32], b[32], r[32], t[32];
    printf("warmed %s through the daemon at %s: %s of shards in %.2f s (%s/s)", info.dataset_id,
           args->socket, human_bytes(w.done, a), seconds,
           human_bytes(seconds > 0 ? (uint64_t)((double)w.done / seconds) : 0, r));
    if (known)
        printf("; its cache holds %s of %s", human_bytes(resident, b), human_bytes(total, t));
    printf("\n");
    if (w.failed || w.done < w.total) {
        printf("%" PRIu64 " pieces failed%s; %s of %s not staged\n", w.failed,
               w.stop ? " (the daemon stopped answering)" : "", human_bytes(w.total - w.done, a),
               human_bytes(w.total, t));
        return 1;
    }
    return 0;
}

int cmd_warm(int argc, char **argv)
{
    struct warm_args args;
    int status = parse_warm_args(argc, argv, &args);
    if (status != CLI_RUN) return status;
    if (args.socket) return warm_through_daemon(&args);
    larder_dataset *d;
    int rc = cli_open(&d, args.index, &args.options);
    if (rc < 0) return fail(rc);
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    double started = now_seconds();
    uint64_t done = 0;
    uint64_t bad = warm_samples(d, &info, args.options.max_inflight, &done);
    double seconds = now_seconds() - started;
    larder_stats st;
    larder_stats_get(d, &st);
    larder_close(d);
    char a[32], b[32], r[32], t[32];
    printf("warmed %" PRIu64 " samples (%s) in %.2f s (%s/s); the cache holds %s of %s\n",
           info.num_samples - bad, human_bytes(done, a), seconds,
           human_bytes(seconds > 0 ? (uint64_t)((double)done / seconds) : 0, r),
           human_bytes(st.resident_bytes, b), human_bytes(st.total_bytes, t));
    if (bad) {
        printf("%" PRIu64 " samples failed\n", bad);
        return 1;
    }
    return 0;
}
