/*
 * metrics.c - the Prometheus endpoint (larderd --metrics HOST:PORT): the
 * counters of every open dataset as text (metrics.h), answered to any
 * HTTP request on that port, one request a connection.
 */
#include "metrics.h"

#include "larderd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

enum { NUM_METRICS = sizeof metrics / sizeof *metrics };

/* Metric m of a dataset's figures, in the order of metrics[]. */
static uint64_t value_of(const larder_stats *s, size_t m)
{
    const uint64_t values[NUM_METRICS] = {s->hits,         s->misses,         s->origin_requests,
                                          s->origin_bytes, s->peer_requests,  s->peer_bytes,
                                          s->bytes_served, s->resident_bytes, s->total_bytes};
    return values[m];
}

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
                        rows[i].dataset_id, (unsigned long long)value_of(&rows[i].stats, m)))
                return used;
    }
    return used;
}

size_t metrics_text(struct larderd *d, char *out, size_t capacity)
{
    struct metrics_row rows[MAX_DATASETS];
    pthread_mutex_lock(&d->lock);
    size_t count = (size_t)d->num_datasets;
    for (size_t i = 0; i < count; i++) {
        larder_dataset_info info;
        larder_stats_get(d->datasets[i].dataset, &rows[i].stats);
        larder_dataset_info_get(d->datasets[i].dataset, &info);
        memcpy(rows[i].dataset_id, info.dataset_id, sizeof rows[i].dataset_id);
    }
    pthread_mutex_unlock(&d->lock);
    return metrics_format(rows, count, out, capacity);
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
