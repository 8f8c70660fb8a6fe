/*
 * datasets.c - the daemon's dataset registry (opened on request, through
 * the --allow prefixes when given, never trusting an index's shard names
 * beyond its base), reading a shard from its owner before the origin, warm staging
 * of owned shards, and the Prometheus metrics endpoint.
 */
#include "larderd.h"
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How long a shard's owner that failed is left alone before it is asked again. */
#define OWNER_DOWN_MS 10000

/*
 * The source of a shard this daemon reads (the dataset's source wrapper):
 * its owner node, then the origin, when another node owns it; the origin
 * alone when this one does.
 */
static int owner_then_origin(void *context, uint32_t shard, struct larder__source *origin,
                             struct larder__source **out)
{
    struct dataset_entry *e = context;
    size_t owner = larder__owner(&daemon_state.members, e->id_low, e->id_high, shard);
    struct larder__endpoint *peer = e->members ? e->members[owner] : NULL;
    if (owner == daemon_state.self || !peer) {
        *out = origin;
        return 0;
    }
    struct larder__source *links[2] = {NULL, origin};
    int rc = larder__source_peer_new(&links[0], peer, e->id_low, e->id_high, shard);
    if (rc < 0) { /* read the origin alone */
        *out = origin;
        return 0;
    }
    return larder__source_chain_new(out, links, 2, OWNER_DOWN_MS);
}

static void warm_owned(struct dataset_entry *entry);

int open_dataset(const char *url, bool may_open, struct dataset_entry **out, int *slot)
{
    pthread_mutex_lock(&daemon_state.lock);
    int rc = 0;
    for (int i = 0; i < daemon_state.num_datasets; i++) {
        struct dataset_entry *e = &daemon_state.datasets[i];
        if (strcmp(e->url, url) == 0) {
            *out = e;
            *slot = i;
            pthread_mutex_unlock(&daemon_state.lock);
            return 0;
        }
    }
    if (!may_open) {
        rc = larder__fail(LARDER_ENOTFOUND, "dataset %s is not open on this node", url);
    } else if (daemon_state.num_datasets == MAX_DATASETS) {
        rc = larder__fail(LARDER_EUSAGE, "too many datasets open");
    } else {
        /* never trust_index: an index from anywhere names only shards under
         * its own base, and with --allow, under one of those prefixes */
        larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                                 .cache_dir = daemon_state.cache_dir,
                                 .cache_capacity = daemon_state.cache_capacity,
                                 .max_inflight = daemon_state.jobs,
                                 .daemon_socket = "",
                                 .borrow_capacity = daemon_state.borrow_capacity,
                                 .trust_index = 0,
                                 .allow_prefixes = daemon_state.allow};
        struct dataset_entry *e = &daemon_state.datasets[daemon_state.num_datasets];
        memset(e, 0, sizeof *e);
        /* larder_open checks the index's content against the id it claims
         * before it touches the cache of that id (an index claiming
         * another's id would otherwise reset that dataset's cache state);
         * then the whole index, before any of it is served: records, keys
         * and overlaps.  So no index stands in for another in this registry
         * or the cache. */
        rc = larder_open(&e->dataset, url, &o);
        if (rc == 0) rc = larder_validate(e->dataset);
        if (rc == 0) {
            larder__dataset_id(e->dataset, &e->id_low, &e->id_high);
            for (int i = 0; i < daemon_state.num_datasets; i++) {
                struct dataset_entry *same = &daemon_state.datasets[i];
                if (same->id_low == e->id_low && same->id_high == e->id_high) {
                    /* the same content under another name: one entry */
                    larder_close(e->dataset);
                    memset(e, 0, sizeof *e);
                    *out = same;
                    *slot = i;
                    pthread_mutex_unlock(&daemon_state.lock);
                    return 0;
                }
            }
        }
        if (rc == 0 && !(e->url = strdup(url))) rc = -ENOMEM;
        if (rc == 0 && daemon_state.members.count > 1) {
            e->members = calloc(daemon_state.members.count, sizeof *e->members);
            if (!e->members) rc = -ENOMEM;
            for (size_t m = 0; rc == 0 && m < daemon_state.members.count; m++)
                if (m != daemon_state.self)
                    rc = larder__endpoint_new(&e->members[m], daemon_state.members.names[m],
                                              LARDER__ROLE_PEER, daemon_state.secret, url, 5000);
            larder__dataset_set_source_wrapper(e->dataset, owner_then_origin, e);
        }
        if (rc == 0) {
            *slot = daemon_state.num_datasets++;
            *out = e;
            say("opened %s", url);
            if (daemon_state.warm) warm_owned(e);
        } else {
            larder_close(e->dataset);
            for (size_t m = 0; e->members && m < daemon_state.members.count; m++)
                larder__endpoint_free(e->members[m]);
            free(e->members);
            free(e->url);
        }
    }
    pthread_mutex_unlock(&daemon_state.lock);
    return rc;
}

struct dataset_entry *find_dataset(uint64_t low, uint64_t high, int *slot)
{
    pthread_mutex_lock(&daemon_state.lock);
    struct dataset_entry *found = NULL;
    for (int i = 0; i < daemon_state.num_datasets && !found; i++) {
        struct dataset_entry *e = &daemon_state.datasets[i];
        if (e->id_low == low && e->id_high == high) found = e, *slot = i;
    }
    pthread_mutex_unlock(&daemon_state.lock);
    return found;
}

/* The Prometheus text exposition of every open dataset's counters. */
static size_t metrics_text(char *out, size_t capacity)
{
    static const struct {
        const char *name, *type, *help;
    } metrics[] = {
        {"larder_hits_total", "counter", "Samples served from the node cache."},
        {"larder_misses_total", "counter", "Samples that needed a fetch."},
        {"larder_origin_requests_total", "counter", "Reads sent to the origin."},
        {"larder_origin_bytes_total", "counter", "Bytes read from the origin."},
        {"larder_peer_requests_total", "counter", "Reads answered by a shard's owner node."},
        {"larder_peer_bytes_total", "counter", "Bytes borrowed from owner nodes."},
        {"larder_served_bytes_total", "counter", "Sample bytes handed to readers."},
        {"larder_resident_bytes", "gauge", "Bytes staged in the node cache."},
        {"larder_dataset_bytes", "gauge", "Bytes of the dataset's shards."},
    };
    size_t used = 0;
    pthread_mutex_lock(&daemon_state.lock);
    for (size_t m = 0; m < sizeof metrics / sizeof *metrics; m++) {
        used +=
            (size_t)snprintf(out + used, capacity - used, "# HELP %s %s\n# TYPE %s %s\n",
                             metrics[m].name, metrics[m].help, metrics[m].name, metrics[m].type);
        for (int i = 0; i < daemon_state.num_datasets && used < capacity - 256; i++) {
            larder_stats st;
            larder_dataset_info info;
            larder_stats_get(daemon_state.datasets[i].dataset, &st);
            larder_dataset_info_get(daemon_state.datasets[i].dataset, &info);
            uint64_t values[] = {st.hits,         st.misses,         st.origin_requests,
                                 st.origin_bytes, st.peer_requests,  st.peer_bytes,
                                 st.bytes_served, st.resident_bytes, st.total_bytes};
            used +=
                (size_t)snprintf(out + used, capacity - used, "%s{dataset=\"%s\"} %llu\n",
                                 metrics[m].name, info.dataset_id, (unsigned long long)values[m]);
        }
        if (used >= capacity - 256) break;
    }
    pthread_mutex_unlock(&daemon_state.lock);
    return used;
}

void serve_metrics(int listener)
{
    int fd;
    while ((fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
        struct timeval tv = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        char request[2048];
        if (recv(fd, request, sizeof request, 0) > 0) {
            size_t capacity = 256 * 1024;
            char *body = malloc(capacity);
            size_t length = body ? metrics_text(body, capacity) : 0;
            char head[256];
            int n = snprintf(head, sizeof head,
                             "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                             "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                             length);
            if (send(fd, head, (size_t)n, MSG_NOSIGNAL) == n && length)
                (void)!send(fd, body, length, MSG_NOSIGNAL);
            free(body);
        }
        close(fd);
    }
}

/* ---- warm mode: each owner stages its shards in the background ------------ */

#define WARM_CHUNK (4u << 20)

struct warm_job {
    struct dataset_entry *entry;
    uint32_t shard;
    uint64_t offset, length;
};

/* One chunk of an owned shard, at the lowest priority, paced to --warm-rate. */
static void warm_job(void *arg)
{
    struct warm_job *job = arg;
    static pthread_mutex_t pace = PTHREAD_MUTEX_INITIALIZER;
    static double next_start;
    if (daemon_state.warm_rate > 0) { /* a token bucket of one chunk */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double t = (double)now.tv_sec + (double)now.tv_nsec / 1e9, wait = 0;
        pthread_mutex_lock(&pace);
        if (next_start > t) wait = next_start - t;
        next_start = (next_start > t ? next_start : t) +
                     (double)job->length / (daemon_state.warm_rate * 1e6);
        pthread_mutex_unlock(&pace);
        if (wait > 0) {
            struct timespec pause = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            nanosleep(&pause, NULL);
        }
    }
    uint8_t *buf = daemon_state.stopping ? NULL : malloc((size_t)job->length);
    if (buf && larder__dataset_read_range(job->entry->dataset, job->shard, job->offset, job->length,
                                          buf) < 0)
        say("warm: shard %u at %llu: %s", job->shard, (unsigned long long)job->offset,
            larder_errmsg());
    free(buf);
    free(job);
}

/* Queue the background staging of every shard this node owns. */
static void warm_owned(struct dataset_entry *e)
{
    uint32_t shards = larder__dataset_num_shards(e->dataset);
    for (uint32_t shard = 0; shard < shards; shard++) {
        if (daemon_state.members.count > 1 &&
            larder__owner(&daemon_state.members, e->id_low, e->id_high, shard) != daemon_state.self)
            continue;
        uint64_t size = larder__dataset_shard_size(e->dataset, shard);
        for (uint64_t at = 0; at < size; at += WARM_CHUNK) {
            struct warm_job *job = malloc(sizeof *job);
            if (!job) return;
            *job = (struct warm_job){.entry = e,
                                     .shard = shard,
                                     .offset = at,
                                     .length = size - at < WARM_CHUNK ? size - at : WARM_CHUNK};
            larder__pool_submit(daemon_state.pool, warm_job, job, LARDER__BACKGROUND);
        }
    }
}

void close_datasets(void)
{
    for (int i = 0; i < daemon_state.num_datasets; i++) {
        struct dataset_entry *e = &daemon_state.datasets[i];
        larder_close(e->dataset);
        for (size_t m = 0; e->members && m < daemon_state.members.count; m++)
            larder__endpoint_free(e->members[m]);
        free(e->members);
        free(e->url);
    }
    daemon_state.num_datasets = 0;
}
