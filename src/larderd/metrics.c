/*
 * metrics.c - the Prometheus endpoint (larderd --metrics HOST:PORT): the
 * counters of every open dataset as text (metrics.h), answered to any
 * HTTP request on that port, one request a connection; and the counting
 * of what the daemon answers (struct served), which requests.c calls.
 * docs/operations.md lists every metric.
 */
#include "metrics.h"

#include "larderd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

const uint64_t read_latency_bounds_us[READ_LATENCY_BUCKETS] = {
    100,   250,    500,    1000,   2500,    5000,    10000,   25000,
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};

static void add(uint64_t *counter, uint64_t amount)
{
    __atomic_fetch_add(counter, amount, __ATOMIC_RELAXED);
}

void served_count(struct served *s, bool hit, bool borrowed, bool error, bool to_peer,
                  uint64_t bytes, uint64_t microseconds)
{
    if (error) {
        add(&s->errors, 1);
    } else {
        add(hit ? &s->hits : &s->misses, 1);
        if (!hit && borrowed) add(&s->borrowed, 1);
        add(&s->bytes, bytes);
        if (to_peer) add(&s->peer_reads, 1), add(&s->peer_bytes, bytes);
    }
    size_t bucket = 0;
    while (bucket < READ_LATENCY_BUCKETS && microseconds > read_latency_bounds_us[bucket])
        bucket++;
    add(&s->latency[bucket], 1);
    add(&s->latency_sum_us, microseconds);
}

void served_copy(const struct served *s, struct served *out)
{
    const uint64_t *from = (const uint64_t *)s;
    uint64_t *to = (uint64_t *)out;
    for (size_t i = 0; i < sizeof *s / sizeof(uint64_t); i++)
        to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
}

uint64_t served_percentile(const struct served *s, double fraction)
{
    uint64_t total = 0, seen = 0;
    for (size_t i = 0; i <= READ_LATENCY_BUCKETS; i++)
        total += s->latency[i];
    if (total == 0) return 0;
    uint64_t want = (uint64_t)(fraction * (double)total + 0.5);
    if (want == 0) want = 1;
    for (size_t i = 0; i < READ_LATENCY_BUCKETS; i++)
        if ((seen += s->latency[i]) >= want) return read_latency_bounds_us[i];
    return UINT64_MAX;
}

/* The plain series, one value per dataset.  `daemon`: of struct served (this
 * daemon's answers), else of larder_stats (the node cache's counters). */
static const struct {
    const char *name, *type, *help;
} metrics[] = {
    {"larder_hits_total", "counter", "READs this daemon answered from its cache, with no fill."},
    {"larder_misses_total", "counter",
     "READs this daemon answered that needed a fill (from the origin or the owner node)."},
    {"larder_borrowed_reads_total", "counter",
     "Of the misses, READs filled with blocks borrowed from the shard's owner node."},
    {"larder_read_errors_total", "counter", "READs this daemon answered with an ERROR."},
    {"larder_served_bytes_total", "counter",
     "Bytes this daemon answered READs for, to readers and peers: sent, or staged for a reader "
     "that reads the node cache itself (larder_staged_bytes_total)."},
    {"larder_peer_served_reads_total", "counter",
     "READs this daemon answered to other nodes' daemons."},
    {"larder_peer_served_bytes_total", "counter",
     "Bytes this daemon sent in answers to other nodes' daemons."},
    {"larder_origin_requests_total", "counter",
     "Reads the node cache sent to the origin (one per run of missing blocks)."},
    {"larder_origin_bytes_total", "counter", "Bytes the node cache read from the origin."},
    {"larder_peer_requests_total", "counter",
     "Reads of blocks the node cache borrowed from a shard's owner node."},
    {"larder_peer_bytes_total", "counter", "Bytes the node cache borrowed from owner nodes."},
    {"larder_resident_bytes", "gauge", "Bytes staged in the node cache."},
    {"larder_dataset_bytes", "gauge", "Bytes of the dataset's shards."},
    {"larder_pinned_bytes", "gauge", "Bytes of the node cache pinned by hints until their TTL."},
    {"larder_inplace_blocks_total", "counter",
     "Cache blocks of borrowed chunks received straight into the cache file (spliced)."},
    {"larder_staged_reads_total", "counter",
     "READs of local readers that read the node cache themselves, answered by staging the bytes "
     "there (STAGE: none sent)."},
    {"larder_staged_bytes_total", "counter", "Bytes of those READs."},
};

enum { NUM_METRICS = sizeof metrics / sizeof *metrics };

/* Metric m of a dataset's figures, in the order of metrics[]. */
static uint64_t value_of(const struct metrics_row *r, size_t m)
{
    const larder_stats *s = &r->stats;
    const struct served *v = &r->served;
    const uint64_t values[NUM_METRICS] = {
        v->hits,         v->misses,         v->borrowed,        v->errors,       v->bytes,
        v->peer_reads,   v->peer_bytes,     s->origin_requests, s->origin_bytes, s->peer_requests,
        s->peer_bytes,   s->resident_bytes, s->total_bytes,     r->pinned_bytes, v->inplace_blocks,
        v->staged_reads, v->staged_bytes};
    return values[m];
}

#define LATENCY_NAME "larder_read_duration_seconds"

/* Append one formatted line when it fits whole; false when it does not. */
static bool append(char *out, size_t capacity, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool append(char *out, size_t capacity, size_t *used, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line || *used + (size_t)n >= capacity) return false;
    memcpy(out + *used, line, (size_t)n + 1);
    *used += (size_t)n;
    return true;
}

/* The READ latency histogram of every row; false when the text is full. */
static bool format_latency(const struct metrics_row *rows, size_t count, char *out, size_t capacity,
                           size_t *used)
{
    if (!append(out, capacity, used,
                "# HELP " LATENCY_NAME " Time from a READ's arrival to its answer queued.\n"
                "# TYPE " LATENCY_NAME " histogram\n"))
        return false;
    for (size_t i = 0; i < count; i++) {
        const struct served *v = &rows[i].served;
        uint64_t cumulative = 0;
        for (size_t b = 0; b <= READ_LATENCY_BUCKETS; b++) {
            cumulative += v->latency[b];
            char bound[32];
            if (b < READ_LATENCY_BUCKETS)
                snprintf(bound, sizeof bound, "%g", (double)read_latency_bounds_us[b] / 1e6);
            else
                snprintf(bound, sizeof bound, "+Inf");
            if (!append(out, capacity, used,
                        LATENCY_NAME "_bucket{dataset=\"%s\",le=\"%s\"} %llu\n", rows[i].dataset_id,
                        bound, (unsigned long long)cumulative))
                return false;
        }
        if (!append(out, capacity, used, LATENCY_NAME "_sum{dataset=\"%s\"} %.6f\n",
                    rows[i].dataset_id, (double)v->latency_sum_us / 1e6) ||
            !append(out, capacity, used, LATENCY_NAME "_count{dataset=\"%s\"} %llu\n",
                    rows[i].dataset_id, (unsigned long long)cumulative))
            return false;
    }
    return true;
}

size_t metrics_format(const struct metrics_row *rows, size_t count, char *out, size_t capacity)
{
    size_t used = 0;
    if (capacity) out[0] = '\0';
    for (size_t m = 0; m < NUM_METRICS; m++) {
        if (!append(out, capacity, &used, "# HELP %s %s\n# TYPE %s %s\n", metrics[m].name,
                    metrics[m].help, metrics[m].name, metrics[m].type))
            return used;
        for (size_t i = 0; i < count; i++)
            if (!append(out, capacity, &used, "%s{dataset=\"%s\"} %llu\n", metrics[m].name,
                        rows[i].dataset_id, (unsigned long long)value_of(&rows[i], m)))
                return used;
    }
    format_latency(rows, count, out, capacity, &used);
    return used;
}

/* The class series: name, type, help, and which counter of the stats. */
static const struct {
    const char *name, *type, *help;
} class_metrics[] = {
    {"larder_queue_submitted_total", "counter",
     "Tasks (READs, warm staging) queued on the daemon's workers, by class."},
    {"larder_queue_started_total", "counter", "Tasks a worker took, by class."},
    {"larder_queue_running", "gauge", "Tasks running now, by class."},
    {"larder_queue_wait_seconds_total", "counter",
     "Time the started tasks waited in the queue, summed, by class."},
    {"larder_queue_wait_max_seconds", "gauge", "The longest such wait, by class."},
};

static uint64_t class_value(const struct larder__pool_stats *s, size_t m, int c)
{
    const uint64_t values[] = {s->submitted[c], s->started[c], s->running[c], s->wait_us[c],
                               s->wait_max_us[c]};
    return values[m];
}

void metrics_format_classes(const struct larder__pool_stats *stats, char *out, size_t capacity,
                            size_t *used)
{
    for (size_t m = 0; m < sizeof class_metrics / sizeof *class_metrics; m++) {
        if (!append(out, capacity, used, "# HELP %s %s\n# TYPE %s %s\n", class_metrics[m].name,
                    class_metrics[m].help, class_metrics[m].name, class_metrics[m].type))
            return;
        bool seconds = m >= 3;
        for (int c = 0; c < LARDER__CLASSES; c++) {
            uint64_t v = class_value(stats, m, c);
            bool ok =
                seconds
                    ? append(out, capacity, used, "%s{class=\"%s\"} %.6f\n", class_metrics[m].name,
                             larder__priority_name(c), (double)v / 1e6)
                    : append(out, capacity, used, "%s{class=\"%s\"} %llu\n", class_metrics[m].name,
                             larder__priority_name(c), (unsigned long long)v);
            if (!ok) return;
        }
    }
}

size_t metrics_classes_json(const struct larder__pool_stats *s, char *out, size_t capacity)
{
    size_t used = 0;
    for (int c = 0; c < LARDER__CLASSES; c++) {
        int n =
            snprintf(out + used, capacity - used,
                     "%s\"%s\": {\"queued\": %llu, \"started\": %llu, \"running\": %llu, "
                     "\"wait_us\": %llu, \"wait_max_us\": %llu, \"cpu_us\": %llu}%s",
                     c ? ", " : "{", larder__priority_name(c), (unsigned long long)s->submitted[c],
                     (unsigned long long)s->started[c], (unsigned long long)s->running[c],
                     (unsigned long long)s->wait_us[c], (unsigned long long)s->wait_max_us[c],
                     (unsigned long long)s->cpu_us[c], c == LARDER__CLASSES - 1 ? "}" : "");
        if (n < 0 || (size_t)n >= capacity - used) return 0;
        used += (size_t)n;
    }
    return used;
}

size_t metrics_text(struct larderd *d, char *out, size_t capacity)
{
    struct metrics_row rows[MAX_DATASETS];
    pthread_mutex_lock(&d->lock);
    size_t count = 0;
    for (int i = 0; i < d->num_datasets; i++) {
        if (!d->datasets[i].dataset) continue; /* closed: its slot free */
        larder_dataset_info info;
        larder_stats_get(d->datasets[i].dataset, &rows[count].stats);
        served_copy(&d->datasets[i].served, &rows[count].served);
        rows[count].pinned_bytes = dataset_pinned_bytes(d->datasets[i].dataset);
        larder_dataset_info_get(d->datasets[i].dataset, &info);
        memcpy(rows[count].dataset_id, info.dataset_id, sizeof rows[count].dataset_id);
        count++;
    }
    uint64_t closed = d->datasets_closed;
    pthread_mutex_unlock(&d->lock);
    size_t used = metrics_format(rows, count, out, capacity);
    int n = used < capacity ? snprintf(out + used, capacity - used,
                                       "# HELP larder_datasets_open Datasets open in the daemon.\n"
                                       "# TYPE larder_datasets_open gauge\n"
                                       "larder_datasets_open %zu\n"
                                       "# HELP larder_datasets_closed_total Replaced publications "
                                       "closed once no one read them.\n"
                                       "# TYPE larder_datasets_closed_total counter\n"
                                       "larder_datasets_closed_total %llu\n",
                                       count, (unsigned long long)closed)
                            : 0;
    if (n > 0 && (size_t)n < capacity - used) used += (size_t)n;
    struct larder__pool_stats classes;
    larderd_classes_get(d, &classes);
    metrics_format_classes(&classes, out, capacity, &used);
    if (used < capacity) used += ucx_metrics_text(d, out + used, capacity - used); /* transports */
    if (used < capacity) used += transforms_metrics(d, out + used, capacity - used);
    return used;
}

void serve_metrics(struct larderd *d, int listener)
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
            size_t length = body ? metrics_text(d, body, capacity) : 0;
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
