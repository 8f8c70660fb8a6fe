/*
 * metrics.c - the Prometheus endpoint (larderd --metrics HOST:PORT): the
 * counters of every open dataset as text (metrics.h), answered to any
 * HTTP request on that port, one request a connection, on a thread of its
 * own (below, "the HTTP endpoint"); and the counting of what the daemon
 * answers (struct served), which requests.c calls.
 * docs/operations.md lists every metric.
 */
#include "metrics.h"

#include "larderd.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
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
    uint64_t uncached, parked;
    uncached_figures(d, &uncached, &parked);
    n = used < capacity
            ? snprintf(out + used, capacity - used,
                       "# HELP larder_uncached_bytes Bytes of answers not from the cache "
                       "held in memory until sent (256 MiB at most).\n"
                       "# TYPE larder_uncached_bytes gauge\n"
                       "larder_uncached_bytes %llu\n"
                       "# HELP larder_reads_parked READs waiting for room for their answers.\n"
                       "# TYPE larder_reads_parked gauge\n"
                       "larder_reads_parked %llu\n"
                       "# HELP larder_stalled_clients_dropped_total Clients dropped for "
                       "taking no answer while holding room other users waited for.\n"
                       "# TYPE larder_stalled_clients_dropped_total counter\n"
                       "larder_stalled_clients_dropped_total %llu\n",
                       (unsigned long long)uncached, (unsigned long long)parked,
                       (unsigned long long)__atomic_load_n(&d->stalled_drops, __ATOMIC_RELAXED))
            : 0;
    if (n > 0 && (size_t)n < capacity - used) used += (size_t)n;
    struct larder__pool_stats classes;
    larderd_classes_get(d, &classes);
    metrics_format_classes(&classes, out, capacity, &used);
    if (used < capacity) used += ucx_metrics_text(d, out + used, capacity - used); /* transports */
    if (used < capacity) used += transforms_metrics(d, out + used, capacity - used);
    return used;
}

/* ---- the HTTP endpoint ---------------------------------------------------------------- */

/* The metrics port is open to anyone on the network (docs/security.md), so
 * it is served on a thread of its own, never the loop's: a client that
 * connects and sends nothing, or takes no answer, costs a slot here until
 * its deadline, and never holds up readers or peers.  Its sockets are
 * non-blocking and waited on with poll(), each client with a deadline, at
 * most METRICS_CLIENTS at once. */
#define METRICS_CLIENTS 16          /* at once; one more is accepted and closed at once */
#define METRICS_REQUEST_MS 1000     /* for the request's first bytes, from the connect */
#define METRICS_ANSWER_MS 5000      /* for the answer to be taken, from the request */
#define METRICS_BODY (256 * 1024)   /* the text's room: lines past it are left out */
#define METRICS_RETRY_ACCEPT_MS 100 /* accept failed (out of descriptors): listen again after */

struct metrics_client {
    int fd;
    int64_t deadline_ms; /* closed then, whatever it is doing */
    bool answering;      /* the request came: sending head, then body */
    char head[256];
    size_t head_length;
    char *body; /* malloc'ed with the request; NULL: none (out of memory, or not yet) */
    size_t body_length;
    size_t sent; /* of head and body, in that order */
};

struct metrics_server {
    struct larderd *daemon;
    int listener; /* owned: closed by metrics_stop */
    int stop;     /* an eventfd: written by metrics_stop, ends the thread */
    pthread_t thread;
    struct metrics_client clients[METRICS_CLIENTS];
    int count; /* clients[0 .. count) are connected */
};

static void client_close(struct metrics_server *s, int i)
{
    close(s->clients[i].fd);
    free(s->clients[i].body);
    s->clients[i] = s->clients[--s->count];
}

/* Send what the socket takes of head and body: 1 when all went, 0 when the
 * socket took no more, -1 when the connection is broken. */
static int client_push(struct metrics_client *c)
{
    for (;;) {
        const char *from;
        size_t left;
        if (c->sent < c->head_length) {
            from = c->head + c->sent, left = c->head_length - c->sent;
        } else {
            size_t at = c->sent - c->head_length;
            from = c->body + at, left = c->body_length - at;
        }
        if (left == 0) return 1;
        ssize_t n = send(c->fd, from, left, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
        c->sent += (size_t)n;
    }
}

/* The request came (whatever it asks): its answer made, and sent as far as
 * the socket takes it.  false: done (sent whole, or broken): close it. */
static bool client_answer(struct metrics_server *s, struct metrics_client *c, int64_t now)
{
    c->body = malloc(METRICS_BODY);
    c->body_length = c->body ? metrics_text(s->daemon, c->body, METRICS_BODY) : 0;
    int n = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     c->body_length);
    c->head_length = n > 0 && (size_t)n < sizeof c->head ? (size_t)n : 0;
    c->answering = true;
    c->deadline_ms = now + METRICS_ANSWER_MS;
    return client_push(c) == 0;
}

/* What poll() said of client i: false: close it. */
static bool client_event(struct metrics_server *s, int i, short revents, int64_t now)
{
    struct metrics_client *c = &s->clients[i];
    if (c->answering) return !(revents & (POLLOUT | POLLERR | POLLHUP)) || client_push(c) == 0;
    if (!(revents & (POLLIN | POLLERR | POLLHUP))) return true;
    char request[2048]; /* read once and not parsed: any request gets the text */
    ssize_t n = recv(c->fd, request, sizeof request, MSG_DONTWAIT);
    if (n > 0) return client_answer(s, c, now);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* Accept every pending connection; false when accept failed for want of
 * descriptors or memory (the listener stays readable: wait before again). */
static bool accept_clients(struct metrics_server *s, int64_t now)
{
    for (;;) {
        int fd = accept4(s->listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                   errno == ECONNABORTED;
        if (s->count == METRICS_CLIENTS) {
            close(fd); /* over the cap: the clients being served carry on */
            continue;
        }
        s->clients[s->count++] =
            (struct metrics_client){.fd = fd, .deadline_ms = now + METRICS_REQUEST_MS};
    }
}

static void *serve(void *arg)
{
    struct metrics_server *s = arg;
    struct pollfd fds[2 + METRICS_CLIENTS];
    int64_t accept_again_ms = 0;
    for (;;) {
        int64_t now = now_ms();
        int timeout = -1;
        fds[0] = (struct pollfd){.fd = s->stop, .events = POLLIN};
        /* a negative fd is left out by poll() */
        fds[1] = (struct pollfd){.fd = now >= accept_again_ms ? s->listener : -1, .events = POLLIN};
        if (fds[1].fd < 0) timeout = (int)(accept_again_ms - now);
        for (int i = 0; i < s->count; i++) {
            const struct metrics_client *c = &s->clients[i];
            fds[2 + i] = (struct pollfd){.fd = c->fd, .events = c->answering ? POLLOUT : POLLIN};
            int64_t left = c->deadline_ms > now ? c->deadline_ms - now : 0;
            if (timeout < 0 || left < timeout) timeout = (int)left;
        }
        int count = s->count;
        if (poll(fds, 2 + (nfds_t)count, timeout) < 0 && errno != EINTR) {
            /* out of kernel memory, the one failure poll() can have here:
             * again shortly, not in a spin */
            fds[0].revents = 0, count = 0;
            usleep(10000);
        }
        if (fds[0].revents) break;
        now = now_ms();
        /* from the last: client_close moves the last one into the slot freed */
        for (int i = count - 1; i >= 0; i--) {
            bool keep = client_event(s, i, fds[2 + i].revents, now);
            if (!keep || now >= s->clients[i].deadline_ms) client_close(s, i);
        }
        if (fds[1].fd >= 0 && (fds[1].revents & POLLIN) && !accept_clients(s, now))
            accept_again_ms = now + METRICS_RETRY_ACCEPT_MS;
    }
    while (s->count)
        client_close(s, s->count - 1);
    return NULL;
}

int metrics_start(struct larderd *d, int listener)
{
    struct metrics_server *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    s->daemon = d;
    s->listener = listener;
    s->stop = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int rc = s->stop < 0 ? -errno : -pthread_create(&s->thread, NULL, serve, s);
    if (rc < 0) {
        if (s->stop >= 0) close(s->stop);
        free(s);
        return rc;
    }
    d->metrics = s;
    return 0;
}

void metrics_stop(struct larderd *d)
{
    struct metrics_server *s = d->metrics;
    if (!s) return;
    uint64_t one = 1;
    if (write(s->stop, &one, sizeof one) < 0) { /* an eventfd's counter does not fill */
    }
    pthread_join(s->thread, NULL);
    close(s->stop);
    close(s->listener);
    free(s);
    d->metrics = NULL;
}
