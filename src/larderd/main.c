/*
 * larderd - the node daemon.
 *
 * One per node.  Local readers connect over a Unix socket and ask for the
 * byte ranges they miss; the daemon stages them in the node cache and
 * answers with the bytes.  Daemons of a cluster connect over TCP: each
 * shard has one owner (rendezvous hashing over the members), which alone
 * reads it from the origin; the others borrow its bytes from the owner,
 * and read the origin themselves when the owner does not answer.
 *
 * One thread runs an epoll loop over the listeners and connections and
 * parses frames (docs/protocol.md); reads are staged by a pool of workers
 * in priority order, which queue their answers back to the loop.
 */
#include "larder.h"

#include "client.h"
#include "cluster.h"
#include "dataset.h"
#include "pool.h"
#include "ui.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 4096
#define IN_CAPACITY (LARDER_WIRE_HEADER + LARDER_WIRE_MAX_URL + 64)
#define MAX_DATASETS 64

struct output {
    struct output *next;
    size_t length, sent;
    int file;           /* then file_length bytes of this file (sendfile), or -1 */
    off_t file_offset;  /* advanced as they are sent */
    size_t file_length; /* left to send */
    /* the lease that keeps those blocks from eviction until they are sent */
    larder_dataset *leased_from;
    int lease;
    uint8_t bytes[];
};

struct connection {
    int fd;
    bool tcp, greeted, peer, closing;
    uint8_t in[IN_CAPACITY];
    size_t in_used;
    pthread_mutex_t lock; /* guards the output queue and refs */
    struct output *head, *tail;
    int refs; /* the loop's, plus one per job in flight */
};

struct dataset_entry {
    larder_dataset *dataset;
    char *url;
    uint64_t id_low, id_high;
    struct larder__endpoint **members; /* one per member; NULL for this node */
};

static struct {
    const char *cache_dir, *socket_path, *listen_address, *self_name, *secret, *metrics_address;
    int jobs;
    uint64_t borrow_capacity; /* bytes of a dataset's cache for borrowed blocks */
    bool warm;                /* stage owned shards in the background */
    double warm_rate;         /* MB/s for that, 0: unpaced */
    struct larder__members members;
    size_t self; /* index in members, or SIZE_MAX */
    int epoll, wake;
    struct larder__pool *pool;
    pthread_mutex_t lock; /* datasets[] */
    struct dataset_entry datasets[MAX_DATASETS];
    int num_datasets;
    struct connection *connections[MAX_CONNECTIONS];
    volatile sig_atomic_t stopping;
} daemon_state = {.self = SIZE_MAX};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "larderd: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static void on_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    say("%s%s", level == LARDER_LOG_ERROR ? "error: " : "", message);
}

static void on_signal(int signal_number)
{
    (void)signal_number;
    daemon_state.stopping = 1;
}

/* ---- connections and their output ---------------------------------------- */

/* Free an output, ending its lease on cache blocks if it holds one. */
static void output_free(struct output *o)
{
    if (o->leased_from) larder__dataset_release(o->leased_from, o->lease);
    free(o);
}

static void connection_release(struct connection *c)
{
    pthread_mutex_lock(&c->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (!last) return;
    while (c->head) {
        struct output *next = c->head->next;
        output_free(c->head);
        c->head = next;
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* An output buffer for a frame of `length` bytes, to fill and then queue. */
static struct output *output_new(size_t length)
{
    struct output *o = malloc(sizeof *o + length);
    if (o)
        o->next = NULL, o->length = length, o->sent = 0, o->file = -1, o->file_length = 0,
        o->leased_from = NULL, o->lease = -1;
    return o;
}

/* Queue a filled output (from any thread; the queue owns it) and wake the loop. */
static void enqueue_output(struct connection *c, struct output *o)
{
    pthread_mutex_lock(&c->lock);
    if (c->tail)
        c->tail->next = o;
    else
        c->head = o;
    c->tail = o;
    pthread_mutex_unlock(&c->lock);
    uint64_t one = 1;
    if (write(daemon_state.wake, &one, sizeof one) < 0) { /* the loop flushes anyway */
    }
}

/* Queue a copy of a whole frame. */
static void enqueue(struct connection *c, const void *bytes, size_t length)
{
    struct output *o = output_new(length);
    if (!o) return; /* the client times out and goes elsewhere */
    memcpy(o->bytes, bytes, length);
    enqueue_output(c, o);
}

static void send_error(struct connection *c, uint64_t request, int code, const char *message)
{
    uint8_t frame[LARDER_WIRE_HEADER + 4 + LARDER_WIRE_MAX_MESSAGE];
    int n = larder__wire_encode_error(frame, sizeof frame, request, code, message);
    if (n > 0) enqueue(c, frame, (size_t)n);
}

/* Send what the socket takes; false when the connection is broken. */
static bool flush(struct connection *c)
{
    pthread_mutex_lock(&c->lock);
    bool ok = true;
    while (c->head) {
        struct output *o = c->head;
        ssize_t n;
        if (o->sent < o->length)
            n = send(c->fd, o->bytes + o->sent, o->length - o->sent, MSG_NOSIGNAL);
        else /* the bytes of the frame come straight from the cache file */
            n = sendfile(c->fd, o->file, &o->file_offset, o->file_length);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            ok = errno == EAGAIN;
            break;
        }
        if (n == 0 && o->sent == o->length) { /* the file ended early: a cut cache file */
            ok = false;
            break;
        }
        if (o->sent < o->length)
            o->sent += (size_t)n;
        else
            o->file_length -= (size_t)n;
        if (o->sent < o->length || o->file_length) continue;
        c->head = o->next;
        if (!c->head) c->tail = NULL;
        output_free(o);
    }
    bool pending = c->head != NULL;
    pthread_mutex_unlock(&c->lock);
    struct epoll_event ev = {.events = EPOLLIN | (pending ? EPOLLOUT : 0u), .data.fd = c->fd};
    epoll_ctl(daemon_state.epoll, EPOLL_CTL_MOD, c->fd, &ev);
    return ok;
}

static void drop(struct connection *c)
{
    epoll_ctl(daemon_state.epoll, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    daemon_state.connections[c->fd] = NULL;
    pthread_mutex_lock(&c->lock);
    c->closing = true;
    pthread_mutex_unlock(&c->lock);
    connection_release(c);
}

/* ---- datasets and peers ------------------------------------------------------ */

/*
 * Borrow a run of blocks from the shard's owner (this daemon's peer
 * fetcher).  LARDER__NOT_MINE when this node owns the shard, or the
 * owner is down: the caller reads the origin.
 */
static int fetch_from_owner(void *context, const larder_dataset *dataset, uint32_t shard,
                            uint64_t offset, uint64_t length, void *buf)
{
    struct dataset_entry *e = context;
    (void)dataset;
    size_t owner = larder__owner(&daemon_state.members, e->id_low, e->id_high, shard);
    struct larder__endpoint *peer = e->members ? e->members[owner] : NULL;
    if (owner == daemon_state.self || !peer || larder__endpoint_down(peer)) return LARDER__NOT_MINE;
    int rc = larder__endpoint_read(peer, e->id_low, e->id_high, shard, LARDER__DEMAND, offset,
                                   length, buf);
    if (rc < 0)
        say("owner %s of shard %u did not answer (%s): reading the origin",
            larder__endpoint_address(peer), shard, larder_errmsg());
    return rc;
}

static void warm_owned(struct dataset_entry *entry);

/* Find the dataset at `url`, or open it when `may_open`. */
static int open_dataset(const char *url, bool may_open, struct dataset_entry **out)
{
    pthread_mutex_lock(&daemon_state.lock);
    int rc = 0;
    for (int i = 0; i < daemon_state.num_datasets; i++) {
        struct dataset_entry *e = &daemon_state.datasets[i];
        if (strcmp(e->url, url) == 0) {
            *out = e;
            pthread_mutex_unlock(&daemon_state.lock);
            return 0;
        }
    }
    if (!may_open) {
        rc = larder__fail(LARDER_ENOTFOUND, "dataset %s is not open on this node", url);
    } else if (daemon_state.num_datasets == MAX_DATASETS) {
        rc = larder__fail(LARDER_EUSAGE, "too many datasets open");
    } else {
        larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                                 .cache_dir = daemon_state.cache_dir,
                                 .max_inflight = daemon_state.jobs,
                                 .daemon_socket = "",
                                 .borrow_capacity = daemon_state.borrow_capacity};
        struct dataset_entry *e = &daemon_state.datasets[daemon_state.num_datasets];
        memset(e, 0, sizeof *e);
        rc = larder_open(&e->dataset, url, &o);
        if (rc == 0 && !(e->url = strdup(url))) rc = -ENOMEM;
        if (rc == 0 && daemon_state.members.count > 1) {
            larder__dataset_id(e->dataset, &e->id_low, &e->id_high);
            e->members = calloc(daemon_state.members.count, sizeof *e->members);
            for (size_t m = 0; rc == 0 && m < daemon_state.members.count; m++)
                if (m != daemon_state.self)
                    rc = larder__endpoint_new(&e->members[m], daemon_state.members.names[m], 2,
                                              daemon_state.secret, url, 5000);
            larder__dataset_set_peer_fetch(e->dataset, fetch_from_owner, e);
        } else if (rc == 0) {
            larder__dataset_id(e->dataset, &e->id_low, &e->id_high);
        }
        if (rc == 0) {
            daemon_state.num_datasets++;
            *out = e;
            say("opened %s", url);
            if (daemon_state.warm) warm_owned(e);
        } else {
            larder_close(e->dataset);
            free(e->url);
        }
    }
    pthread_mutex_unlock(&daemon_state.lock);
    return rc;
}

static struct dataset_entry *find_dataset(uint64_t low, uint64_t high)
{
    pthread_mutex_lock(&daemon_state.lock);
    struct dataset_entry *found = NULL;
    for (int i = 0; i < daemon_state.num_datasets && !found; i++) {
        struct dataset_entry *e = &daemon_state.datasets[i];
        if (e->id_low == low && e->id_high == high) found = e;
    }
    pthread_mutex_unlock(&daemon_state.lock);
    return found;
}

/* ---- requests ------------------------------------------------------------------ */

struct read_job {
    struct connection *connection;
    struct dataset_entry *entry;
    struct larder__read read;
    uint64_t request;
};

static void read_job(void *arg)
{
    struct read_job *job = arg;
    size_t length = (size_t)job->read.length;
    int file = -1, lease = -1;
    int staged = larder__dataset_stage_range(job->entry->dataset, job->read.shard, job->read.offset,
                                             job->read.length, &file, &lease);
    if (staged == 0) { /* in the cache: send it from there with sendfile */
        struct output *o = output_new(LARDER_WIRE_HEADER);
        if (o) {
            larder__wire_encode_header(o->bytes, LARDER_WIRE_HEADER, LARDER__DATA, (uint32_t)length,
                                       job->request);
            o->file = file;
            o->file_offset = (off_t)job->read.offset;
            o->file_length = length;
            o->leased_from = job->entry->dataset, o->lease = lease;
            enqueue_output(job->connection, o);
        } else {
            larder__dataset_release(job->entry->dataset, lease);
            send_error(job->connection, job->request, -ENOMEM, "out of memory");
        }
        connection_release(job->connection);
        free(job);
        return;
    }
    if (staged < 0) {
        send_error(job->connection, job->request, staged, larder_errmsg());
        connection_release(job->connection);
        free(job);
        return;
    }
    /* not cacheable (no room): the bytes land in the frame that is sent */
    struct output *o = output_new(LARDER_WIRE_HEADER + length);
    int rc = o ? 0 : -ENOMEM;
    if (rc == 0)
        rc = larder__dataset_read_range(job->entry->dataset, job->read.shard, job->read.offset,
                                        job->read.length, o->bytes + LARDER_WIRE_HEADER);
    if (rc == 0) {
        larder__wire_encode_header(o->bytes, LARDER_WIRE_HEADER, LARDER__DATA, (uint32_t)length,
                                   job->request);
        enqueue_output(job->connection, o);
    } else {
        free(o);
        send_error(job->connection, job->request, rc, larder_errmsg());
    }
    connection_release(job->connection);
    free(job);
}

static void stats_frame(struct connection *c, uint64_t request)
{
    size_t capacity = 64 * 1024, used = 0;
    char *text = malloc(LARDER_WIRE_HEADER + capacity);
    if (!text) return;
    char *p = text + LARDER_WIRE_HEADER;
    used += (size_t)snprintf(p, capacity, "{\"self\": \"%s\", \"members\": %zu, \"datasets\": [",
                             daemon_state.self_name ? daemon_state.self_name : "",
                             daemon_state.members.count);
    pthread_mutex_lock(&daemon_state.lock);
    for (int i = 0; i < daemon_state.num_datasets && used < capacity - 512; i++) {
        larder_stats s;
        larder_dataset_info info;
        larder_stats_get(daemon_state.datasets[i].dataset, &s);
        larder_dataset_info_get(daemon_state.datasets[i].dataset, &info);
        used += (size_t)snprintf(
            p + used, capacity - used,
            "%s{\"dataset_id\": \"%s\", \"hits\": %llu, \"misses\": %llu, "
            "\"origin_requests\": %llu, \"origin_bytes\": %llu, \"peer_requests\": %llu, "
            "\"peer_bytes\": %llu, \"resident_bytes\": %llu, \"total_bytes\": %llu}",
            i ? ", " : "", info.dataset_id, (unsigned long long)s.hits,
            (unsigned long long)s.misses, (unsigned long long)s.origin_requests,
            (unsigned long long)s.origin_bytes, (unsigned long long)s.peer_requests,
            (unsigned long long)s.peer_bytes, (unsigned long long)s.resident_bytes,
            (unsigned long long)s.total_bytes);
    }
    pthread_mutex_unlock(&daemon_state.lock);
    used += (size_t)snprintf(p + used, capacity - used, "]}");
    larder__wire_encode_header((uint8_t *)text, LARDER_WIRE_HEADER, LARDER__STATS, (uint32_t)used,
                               request);
    enqueue(c, text, LARDER_WIRE_HEADER + used);
    free(text);
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

/* Answer one HTTP request on the metrics port, whatever it asks, and close. */
static void serve_metrics(int listener)
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

/* Handle one whole frame; false closes the connection (malformed input). */
static bool handle(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    if (!c->greeted && f->type != LARDER__HELLO) {
        say("a client spoke before HELLO: closing");
        return false;
    }
    switch (f->type) {
    case LARDER__HELLO: {
        struct larder__hello hello;
        if (c->greeted || larder__wire_hello(payload, f->length, &hello) < 0) return false;
        bool peer = hello.role == 2;
        if (c->tcp && !peer) return false; /* readers use the Unix socket */
        if (peer && daemon_state.secret &&
            (hello.token_length != strlen(daemon_state.secret) ||
             memcmp(hello.token, daemon_state.secret, hello.token_length) != 0)) {
            say("a peer gave the wrong secret: closing");
            send_error(c, f->request, -EACCES, "wrong cluster secret");
            c->closing = true;
            return true;
        }
        c->greeted = true;
        c->peer = peer;
        const char *name = daemon_state.self_name ? daemon_state.self_name : "local";
        struct larder__welcome w = {.name_length = (uint32_t)strlen(name), .name = name};
        uint8_t frame[LARDER_WIRE_HEADER + 20 + LARDER_WIRE_MAX_NAME];
        int n = larder__wire_encode_welcome(frame, sizeof frame, f->request, &w);
        if (n > 0) enqueue(c, frame, (size_t)n);
        return true;
    }
    case LARDER__OPEN: {
        char url[LARDER_WIRE_MAX_URL + 1];
        memcpy(url, payload, f->length);
        url[f->length] = '\0';
        if (strlen(url) != f->length) return false;
        struct dataset_entry *e = NULL;
        /* a reader opens what it likes (it could read those files itself); a
         * peer only what is open here already, unless the cluster's shared
         * secret proved it one of ours */
        int rc = open_dataset(url, !c->peer || daemon_state.secret, &e);
        if (rc < 0) {
            send_error(c, f->request, rc, larder_errmsg());
            return true;
        }
        struct larder__opened opened = {.id_low = e->id_low,
                                        .id_high = e->id_high,
                                        .num_shards = larder__dataset_num_shards(e->dataset)};
        uint8_t frame[LARDER_WIRE_HEADER + 20];
        int n = larder__wire_encode_opened(frame, sizeof frame, f->request, &opened);
        if (n > 0) enqueue(c, frame, (size_t)n);
        return true;
    }
    case LARDER__READ: {
        struct larder__read read;
        if (larder__wire_read(payload, f->length, &read) < 0) return false;
        struct dataset_entry *e = find_dataset(read.id_low, read.id_high);
        if (!e) {
            send_error(c, f->request, LARDER_ENOTFOUND, "dataset not open on this node");
            return true;
        }
        struct read_job *job = malloc(sizeof *job);
        if (!job) {
            send_error(c, f->request, -ENOMEM, "out of memory");
            return true;
        }
        *job = (struct read_job){.connection = c, .entry = e, .read = read, .request = f->request};
        pthread_mutex_lock(&c->lock);
        c->refs++;
        pthread_mutex_unlock(&c->lock);
        int priority = read.priority <= 1 ? read.priority : LARDER__BACKGROUND;
        larder__pool_submit(daemon_state.pool, read_job, job, priority);
        return true;
    }
    case LARDER__STAT:
        stats_frame(c, f->request);
        return true;
    default:
        return false; /* answers are not requests */
    }
}

/* Read and handle what the client sent; false closes the connection. */
static bool receive(struct connection *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->in_used, sizeof c->in - c->in_used, 0);
        if (n < 0) return errno == EAGAIN || errno == EINTR;
        if (n == 0) return false;
        c->in_used += (size_t)n;
        size_t at = 0;
        for (;;) {
            struct larder__frame f;
            int rc = larder__wire_header(c->in + at, c->in_used - at, &f);
            if (rc == LARDER_ETRUNCATED) break;
            if (rc < 0 || LARDER_WIRE_HEADER + (size_t)f.length > sizeof c->in) {
                say("malformed frame from a client (%s): closing", larder_errmsg());
                return false;
            }
            if (c->in_used - at < LARDER_WIRE_HEADER + f.length) break;
            if (!handle(c, &f, c->in + at + LARDER_WIRE_HEADER)) return false;
            at += LARDER_WIRE_HEADER + f.length;
        }
        memmove(c->in, c->in + at, c->in_used - at);
        c->in_used -= at;
    }
}

/* ---- listeners -------------------------------------------------------------------- */

static int listen_unix(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) return -ENAMETOOLONG;
    strcpy(a.sun_path, path);
    unlink(path); /* a socket left by a daemon that died */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t old = umask(007); /* owner and group only */
    int rc = fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0;
    umask(old);
    if (rc) {
        int err = errno;
        if (fd >= 0) close(fd);
        return -err;
    }
    return fd;
}

static int listen_tcp(const char *address)
{
    const char *colon = strrchr(address, ':');
    if (!colon) return -EINVAL;
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(colon - address), address);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list;
    if (getaddrinfo(host, colon + 1, &hints, &list) != 0) return -EADDRNOTAVAIL;
    int fd = socket(list->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = fd < 0 || bind(fd, list->ai_addr, list->ai_addrlen) < 0 || listen(fd, 256) < 0;
    int err = errno;
    freeaddrinfo(list);
    if (rc) {
        if (fd >= 0) close(fd);
        return -err;
    }
    return fd;
}

static void accept_all(int listener, bool tcp)
{
    int fd;
    while ((fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        struct connection *c = fd < MAX_CONNECTIONS ? calloc(1, sizeof *c) : NULL;
        if (!c) {
            close(fd);
            continue;
        }
        int one = 1;
        if (tcp) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->tcp = tcp;
        c->refs = 1;
        pthread_mutex_init(&c->lock, NULL);
        daemon_state.connections[fd] = c;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(daemon_state.epoll, EPOLL_CTL_ADD, fd, &ev);
    }
}

/* ---- main ------------------------------------------------------------------------- */

static const char help[] =
    "usage: larderd --cache DIR [--socket PATH] [--listen HOST:PORT]\n"
    "               [--peers H:P,... | --hostfile FILE | --slurm] [--self H:P]\n"
    "               [--secret-file FILE] [--jobs N] [--warm [--warm-rate MB/S]]\n"
    "               [--metrics HOST:PORT]\n"
    "\n"
    "The node daemon: stages what local readers miss in the node cache, and with\n"
    "peers, reads each shard from the origin on one node only (its owner, by\n"
    "rendezvous hashing) and borrows the rest from the owners.\n"
    "\n"
    "  --cache DIR          the node cache (required)\n"
    "  --socket PATH        Unix socket for local readers (default: $LARDER_SOCKET)\n"
    "  --listen HOST:PORT   TCP address for peers\n"
    "  --peers LIST         the cluster's members, host:port, comma-separated\n"
    "  --hostfile FILE      the members, one a line\n"
    "  --slurm              the members from SLURM_JOB_NODELIST (port of --listen)\n"
    "  --self HOST:PORT     which member this is (default: --listen)\n"
    "  --secret-file FILE   a shared secret peers must present\n"
    "  --jobs N             reads staged at once (default 64)\n"
    "  --warm               stage the shards this node owns in the background, at the\n"
    "                       lowest priority, as datasets are opened\n"
    "  --warm-rate MB/S     pace that staging (default: unpaced)\n"
    "  --metrics HOST:PORT  serve the counters as Prometheus text over HTTP\n"
    "  --borrow-size SIZE   cache bytes per dataset for blocks borrowed from other\n"
    "                       nodes, evicted first (default: no limit of their own)\n"
    "\n"
    "In Slurm: srun --ntasks-per-node=1 larderd --cache /local/larder --slurm \\\n"
    "          --listen 0.0.0.0:7461 --socket /tmp/larderd.sock\n";

static char *read_small_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = calloc(1, 65537);
    size_t n = text ? fread(text, 1, 65536, f) : 0;
    fclose(f);
    if (!text) return NULL;
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
        text[--n] = 0;
    return text;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {{"cache", required_argument, 0, 'c'},
                                            {"socket", required_argument, 0, 's'},
                                            {"listen", required_argument, 0, 'l'},
                                            {"peers", required_argument, 0, 'p'},
                                            {"hostfile", required_argument, 0, 'H'},
                                            {"slurm", no_argument, 0, 'S'},
                                            {"self", required_argument, 0, 'n'},
                                            {"secret-file", required_argument, 0, 'k'},
                                            {"jobs", required_argument, 0, 'j'},
                                            {"metrics", required_argument, 0, 'm'},
                                            {"warm", no_argument, 0, 'w'},
                                            {"warm-rate", required_argument, 0, 'r'},
                                            {"borrow-size", required_argument, 0, 'b'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    const char *peers = NULL, *hostfile = NULL;
    bool slurm = false;
    daemon_state.jobs = 64;
    daemon_state.socket_path = getenv("LARDER_SOCKET");
    int c;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'c':
            daemon_state.cache_dir = optarg;
            break;
        case 's':
            daemon_state.socket_path = optarg;
            break;
        case 'l':
            daemon_state.listen_address = optarg;
            break;
        case 'p':
            peers = optarg;
            break;
        case 'H':
            hostfile = optarg;
            break;
        case 'S':
            slurm = true;
            break;
        case 'n':
            daemon_state.self_name = optarg;
            break;
        case 'k':
            if (!(daemon_state.secret = read_small_file(optarg)) || !daemon_state.secret[0]) {
                say("cannot read a secret from %s", optarg);
                return 2;
            }
            break;
        case 'j':
            daemon_state.jobs = atoi(optarg);
            break;
        case 'm':
            daemon_state.metrics_address = optarg;
            break;
        case 'w':
            daemon_state.warm = true;
            break;
        case 'r':
            daemon_state.warm_rate = atof(optarg);
            break;
        case 'b':
            if (parse_size(optarg, &daemon_state.borrow_capacity) < 0) {
                say("bad --borrow-size '%s'", optarg);
                return 2;
            }
            break;
        case 'h':
            fputs(help, stdout);
            return 0;
        default:
            fputs(help, stderr);
            return 2;
        }
    }
    if (!daemon_state.cache_dir || optind != argc || daemon_state.jobs < 1) {
        fputs(help, stderr);
        return 2;
    }
    if (!daemon_state.socket_path && !daemon_state.listen_address) {
        say("nothing to listen on: give --socket (or set LARDER_SOCKET) and/or --listen");
        return 2;
    }
    larder_set_log(on_log, NULL, LARDER_LOG_WARN);
    const char *port =
        daemon_state.listen_address ? strrchr(daemon_state.listen_address, ':') : NULL;
    int default_port = port ? atoi(port + 1) : LARDER_DEFAULT_PORT;
    int rc = 0;
    if (peers) rc = larder__members_parse_list(&daemon_state.members, peers, default_port);
    if (rc == 0 && hostfile) {
        char *text = read_small_file(hostfile);
        rc = text ? larder__members_parse_hostfile(&daemon_state.members, text, strlen(text),
                                                   default_port)
                  : larder__fail(-errno, "%s: %s", hostfile, strerror(errno));
        free(text);
    }
    if (rc == 0 && slurm) {
        const char *list = getenv("SLURM_JOB_NODELIST");
        rc = list ? larder__members_parse_slurm(&daemon_state.members, list, default_port)
                  : larder__fail(LARDER_EUSAGE, "--slurm: SLURM_JOB_NODELIST is not set");
    }
    if (rc < 0) {
        say("%s", larder_errmsg());
        return 2;
    }
    if (!daemon_state.self_name) daemon_state.self_name = daemon_state.listen_address;
    if (daemon_state.members.count > 1) {
        for (size_t m = 0; m < daemon_state.members.count && daemon_state.self_name; m++)
            if (strcmp(daemon_state.members.names[m], daemon_state.self_name) == 0)
                daemon_state.self = m;
        if (daemon_state.self == SIZE_MAX) {
            say("this node (%s) is not among the members; give --self",
                daemon_state.self_name ? daemon_state.self_name : "no --listen");
            return 2;
        }
    }

    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    pthread_mutex_init(&daemon_state.lock, NULL);
    daemon_state.epoll = epoll_create1(EPOLL_CLOEXEC);
    daemon_state.wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (larder__pool_new(&daemon_state.pool, daemon_state.jobs) < 0) return 1;
    int unix_fd = -1, tcp_fd = -1;
    if (daemon_state.socket_path && (unix_fd = listen_unix(daemon_state.socket_path)) < 0) {
        say("%s: %s", daemon_state.socket_path, strerror(-unix_fd));
        return 1;
    }
    if (daemon_state.listen_address && (tcp_fd = listen_tcp(daemon_state.listen_address)) < 0) {
        say("%s: %s", daemon_state.listen_address, strerror(-tcp_fd));
        return 1;
    }
    int metrics_fd = -1;
    if (daemon_state.metrics_address &&
        (metrics_fd = listen_tcp(daemon_state.metrics_address)) < 0) {
        say("%s: %s", daemon_state.metrics_address, strerror(-metrics_fd));
        return 1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = daemon_state.wake};
    epoll_ctl(daemon_state.epoll, EPOLL_CTL_ADD, daemon_state.wake, &ev);
    if (unix_fd >= 0) {
        ev.data.fd = unix_fd;
        epoll_ctl(daemon_state.epoll, EPOLL_CTL_ADD, unix_fd, &ev);
    }
    if (tcp_fd >= 0) {
        ev.data.fd = tcp_fd;
        epoll_ctl(daemon_state.epoll, EPOLL_CTL_ADD, tcp_fd, &ev);
    }
    if (metrics_fd >= 0) {
        ev.data.fd = metrics_fd;
        epoll_ctl(daemon_state.epoll, EPOLL_CTL_ADD, metrics_fd, &ev);
    }
    say("serving cache %s%s%s%s%s, %zu members", daemon_state.cache_dir, unix_fd >= 0 ? " on " : "",
        unix_fd >= 0 ? daemon_state.socket_path : "", tcp_fd >= 0 ? " and " : "",
        tcp_fd >= 0 ? daemon_state.listen_address : "",
        daemon_state.members.count ? daemon_state.members.count : 1);

    struct epoll_event events[128];
    while (!daemon_state.stopping) {
        int n = epoll_wait(daemon_state.epoll, events, 128, 1000);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == metrics_fd) {
                serve_metrics(fd);
            } else if (fd == unix_fd || fd == tcp_fd) {
                accept_all(fd, fd == tcp_fd);
            } else if (fd == daemon_state.wake) {
                uint64_t count;
                if (read(fd, &count, sizeof count) < 0) { /* nothing to do */
                }
                for (int k = 0; k < MAX_CONNECTIONS; k++) {
                    struct connection *conn = daemon_state.connections[k];
                    if (conn && conn->head && (!flush(conn) || (conn->closing && !conn->head)))
                        drop(conn);
                }
            } else if (daemon_state.connections[fd]) {
                struct connection *conn = daemon_state.connections[fd];
                bool ok = true;
                if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) ok = receive(conn);
                if (ok) ok = flush(conn);
                if (!ok || (conn->closing && !conn->head)) drop(conn);
            }
        }
    }
    say("stopping");
    larder__pool_free(daemon_state.pool); /* finishes the reads in flight */
    for (int k = 0; k < MAX_CONNECTIONS; k++)
        if (daemon_state.connections[k]) drop(daemon_state.connections[k]);
    for (int i = 0; i < daemon_state.num_datasets; i++) {
        struct dataset_entry *e = &daemon_state.datasets[i];
        larder_close(e->dataset);
        for (size_t m = 0; e->members && m < daemon_state.members.count; m++)
            larder__endpoint_free(e->members[m]);
        free(e->members);
        free(e->url);
    }
    larder__members_free(&daemon_state.members);
    if (daemon_state.socket_path) unlink(daemon_state.socket_path);
    free((char *)daemon_state.secret);
    return 0;
}
