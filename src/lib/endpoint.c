/*
 * endpoint.c - blocking daemon clients with connection pools (endpoint.h).
 *
 * Timeouts are what make a reader's fallback prompt: a reader (LARDER__ROLE_READER,
 * created with timeout 0) gives its daemon LARDER_DAEMON_TIMEOUT_MS
 * (default 1000 ms) to accept, to greet and to start answering a READ,
 * and goes to its own path to the origin when it does not; a dead
 * daemon's socket refuses a connect at once.  A READ that waits longer in
 * a daemon that is alive (it answered another READ, or greets a fresh
 * connection, within that time: busy, as every daemon of a cluster is in a
 * restart storm) waits on, up to QUEUED_TIMEOUT_MS: reading the origin
 * instead would read it once more for every rank of the node.  A pooled
 * connection the daemon closed meanwhile (its idle timeout) is not a
 * failure of the daemon: the request is sent again, once, on a fresh
 * connection.
 * One connection's dialling, handshake and frames are endpoint_wire.c's.
 */
#include "endpoint_internal.h"
#include "recv_window.h"
#include "cluster.h"
#include "priority.h"
#include "transport_ucx_peer.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The pool group of a class. */
static int group_of(int priority)
{
    return priority >= LARDER__HINTED ? 1 : 0;
}

/* The reader's timeout: LARDER_DAEMON_TIMEOUT_MS when it is a positive number, else 1000 ms. */
static int reader_timeout_ms(void)
{
    const char *text = getenv("LARDER_DAEMON_TIMEOUT_MS");
    char *end;
    long value = text ? strtol(text, &end, 10) : 0;
    if (text && *end == '\0' && value > 0 && value <= 3600000) return (int)value;
    return READER_TIMEOUT_MS;
}

int larder__endpoint_new(struct larder__endpoint **out, const char *address, enum larder__role role,
                         const char *token, const char *index_url, int timeout_ms)
{
    struct larder__endpoint *e = calloc(1, sizeof *e);
    if (!e || !(e->address = strdup(address)) || (token && !(e->token = strdup(token))) ||
        (index_url && !(e->index_url = strdup(index_url)))) {
        larder__endpoint_free(e);
        return -ENOMEM;
    }
    e->role = role;
    e->timeout_ms = timeout_ms > 0 ? timeout_ms : reader_timeout_ms();
    e->down_ms = role == LARDER__ROLE_READER ? READER_DOWN_MS : PEER_DOWN_MS;
    pthread_mutex_init(&e->lock, NULL);
    *out = e;
    return 0;
}

void larder__endpoint_free(struct larder__endpoint *e)
{
    if (!e) return;
    larder__ucx_peer_free(e->ucx);
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < e->num_idle[g]; i++)
            close(e->idle[g][i]);
    pthread_mutex_destroy(&e->lock);
    free(e->address);
    if (e->token) memset(e->token, 0, strlen(e->token));
    free(e->token);
    free(e->index_url);
    free(e);
}

const char *larder__endpoint_address(const struct larder__endpoint *e)
{
    return e->address;
}

bool larder__endpoint_down(struct larder__endpoint *e)
{
    pthread_mutex_lock(&e->lock);
    bool down = e->down_until_ms > larder__endpoint_now_ms();
    pthread_mutex_unlock(&e->lock);
    return down;
}

/* Leave the endpoint alone for down_ms, and drop its pooled connections. */
static void mark_down(struct larder__endpoint *e, int down_ms)
{
    pthread_mutex_lock(&e->lock);
    e->down_until_ms = larder__endpoint_now_ms() + down_ms;
    for (int g = 0; g < 2; g++) {
        for (int i = 0; i < e->num_idle[g]; i++)
            close(e->idle[g][i]);
        e->num_idle[g] = 0;
    }
    pthread_mutex_unlock(&e->lock);
}

/* The longest a connect may take in all: the dial and the greeting within
 * the endpoint's timeout, the OPEN within the longer OPEN_TIMEOUT_MS (a
 * member may fetch the index first).  One deadline for the whole, so a
 * listener that trickles its answers a byte at a time, each inside the
 * socket's timeout, cannot hold the caller longer than that. */
static int64_t connect_deadline(const struct larder__endpoint *e)
{
    int open_ms =
        e->index_url ? (e->timeout_ms > OPEN_TIMEOUT_MS ? e->timeout_ms : OPEN_TIMEOUT_MS) : 0;
    return larder__endpoint_now_ms() + e->timeout_ms + open_ms;
}

/* A fresh connection: dialled, greeted, the dataset opened, all by
 * deadline_ms (0: connect_deadline's).  With `wait_opened` false the OPEN
 * is sent and its answer not waited for.  The fd, or a negative code. */
static int connect_until(struct larder__endpoint *e, int64_t deadline_ms, bool wait_opened)
{
    if (!deadline_ms) deadline_ms = connect_deadline(e);
    int fd = larder__endpoint_dial(e, deadline_ms);
    if (fd < 0) return larder__fail(fd, "larder daemon at %s: %s", e->address, strerror(-fd));
    int rc = larder__endpoint_greet(e, fd, deadline_ms, 0);
    if (rc == 0 && e->index_url) {
        uint8_t buf[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_URL];
        struct larder__frame frame;
        uint8_t answer[LARDER__WIRE_MAX_MESSAGE + 300];
        int n = larder__wire_encode_open(buf, sizeof buf, 1, e->index_url);
        rc = n < 0 ? n : larder__endpoint_send_all(fd, buf, (size_t)n);
        int timeout = e->timeout_ms > OPEN_TIMEOUT_MS ? e->timeout_ms : OPEN_TIMEOUT_MS;
        if (rc == 0 && wait_opened)
            rc = larder__endpoint_recv_frame_until(fd, &frame, answer, sizeof answer, timeout,
                                                   deadline_ms);
        if (rc == 0 && wait_opened && frame.type == LARDER__ERROR)
            rc = larder__endpoint_error_answer(e, answer, frame.length);
        else if (rc == 0 && wait_opened && frame.type != LARDER__OPENED)
            rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer type %u to OPEN",
                              e->address, frame.type);
    }
    if (rc < 0) {
        close(fd);
        if (larder__endpoint_is_errno(rc))
            return larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
        return rc;
    }
    return fd;
}

static int connect_endpoint(struct larder__endpoint *e)
{
    return connect_until(e, 0, true);
}

/* A pooled connection of a group that still looks open (no EOF or stray
 * bytes waiting), or -1. */
static int take_idle(struct larder__endpoint *e, int group)
{
    for (;;) {
        pthread_mutex_lock(&e->lock);
        int fd = e->num_idle[group] ? e->idle[group][--e->num_idle[group]] : -1;
        pthread_mutex_unlock(&e->lock);
        if (fd < 0) return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
        if (poll(&p, 1, 0) == 0) return fd;
        close(fd); /* closed by the daemon (idle timeout), or out of step */
    }
}

/* How long a READ staged in place waits at most for a busy member's answer to start */
#define INPLACE_ANSWER_MS 2000

/*
 * Whether a node daemon whose answer to a reader's READ is late, and that
 * answered none of the reader's other READs lately either (shows_life), is
 * alive (busy) rather than hung: it accepts and greets a fresh
 * connection within twice the timeout (its loop thread does that; a
 * stopped or wedged daemon does not), or, when the greeting is late, it
 * ran meanwhile (the CPU time /proc gives for the pid at the socket's
 * other end grew by a tenth of the wait or more, and it is not stopped):
 * a loop thread on cores that every rank of a storm keeps busy may take
 * seconds to be scheduled (64 readers of a 2 GiB checkpoint on 4 daemons
 * and 2 cores: readers left their daemons for the origin, 1.10
 * checkpoints from it), while a stopped or deadlocked daemon uses no CPU.
 * One thread of the endpoint probes at a time; the others take the last
 * finding, or wait one more timeout for the probe.
 * A daemon sends a reader no PROGRESS (docs/protocol.md), so this is how a
 * reader tells a queue from a hang.
 */
static bool daemon_alive(struct larder__endpoint *e)
{
    int64_t now = larder__endpoint_now_ms();
    if (now - __atomic_load_n(&e->greeted_ms, __ATOMIC_RELAXED) < e->timeout_ms) return true;
    if (larder__endpoint_down(e)) return false; /* another thread's probe failed */
    if (__atomic_exchange_n(&e->probing, true, __ATOMIC_ACQUIRE)) return true;
    int64_t deadline = now + 2 * (int64_t)e->timeout_ms;
    int fd = larder__endpoint_dial(e, deadline);
    int64_t ticks = fd >= 0 ? larder__endpoint_peer_ticks(fd) : -1;
    int64_t started = larder__endpoint_now_ms();
    int rc = fd < 0 ? fd : larder__endpoint_greet(e, fd, deadline, 2 * e->timeout_ms);
    /* late: did it run meanwhile? */
    if (rc == -ETIMEDOUT && larder__endpoint_ran(ticks, larder__endpoint_peer_ticks(fd),
                                                 larder__endpoint_now_ms() - started))
        rc = 0;
    if (fd >= 0) close(fd);
    if (rc == 0) __atomic_store_n(&e->greeted_ms, larder__endpoint_now_ms(), __ATOMIC_RELAXED);
    __atomic_store_n(&e->probing, false, __ATOMIC_RELEASE);
    return rc == 0;
}

/* Whether the member or node daemon started an answer on any of the
 * endpoint's connections within the timeout, or (a node daemon) is alive. */
static bool shows_life(struct larder__endpoint *e, bool peer)
{
    if (larder__endpoint_now_ms() - __atomic_load_n(&e->answered_ms, __ATOMIC_RELAXED) <
        e->timeout_ms)
        return true;
    return !peer && daemon_alive(e);
}

/*
 * Wait for the answer to a READ at `priority` to start, and take its
 * header into *frame: 0, or a negative code (-ETIMEDOUT: none in time).
 * An answer may be late for good reasons (the member or node daemon
 * queues it, or fills it from a busy origin), and reading the origin
 * instead costs the origin a second copy of the bytes: so a READ waits on,
 * up to QUEUED_TIMEOUT_MS in all, while the member sends PROGRESS frames
 * for it (docs/protocol.md) or answers other READs, or while the node
 * daemon is alive (daemon_alive); it gives up after e->timeout_ms in which
 * a member sent nothing at all, or once the node daemon no longer greets.
 *
 * `in_place`: the answer is bound for a window onto the cache file
 * (recv_window.h), whose fill lock the caller holds, blocking every other
 * filler of those blocks: the member is waited for INPLACE_ANSWER_MS at
 * most (busy, silent or sending PROGRESS alike), then LARDER_ELOCAL (the
 * caller gives up in place, lets the lock go and borrows the ordinary
 * way, under the usual rules above; the member is not marked down here).
 */
static int await_answer(struct larder__endpoint *e, int fd, int priority,
                        struct larder__frame *frame, bool *answered, bool in_place)
{
    uint8_t header[LARDER__WIRE_HEADER];
    bool peer = e->role == LARDER__ROLE_PEER;
    int wait_ms = e->timeout_ms;
    if (priority >= LARDER__HINTED && wait_ms < QUEUED_TIMEOUT_MS) wait_ms = QUEUED_TIMEOUT_MS;
    int64_t limit = in_place ? INPLACE_ANSWER_MS : QUEUED_TIMEOUT_MS;
    if (wait_ms > limit) wait_ms = (int)limit;
    int64_t started = larder__endpoint_now_ms();
    for (;;) {
        int rc = larder__endpoint_recv_header(fd, header, wait_ms, answered);
        /* a peer that answers others meanwhile is busy, not hung, and so is
         * a node daemon that answers others or greets: wait on */
        while (rc == -ETIMEDOUT && larder__endpoint_now_ms() - started < limit &&
               shows_life(e, peer)) {
            int64_t left = limit - (larder__endpoint_now_ms() - started);
            rc = larder__endpoint_recv_header(
                fd, header, left < e->timeout_ms ? (int)left : e->timeout_ms, answered);
        }
        if (rc == 0) __atomic_store_n(&e->answered_ms, larder__endpoint_now_ms(), __ATOMIC_RELAXED);
        if (rc == 0) rc = larder__wire_header(header, sizeof header, frame);
        if (rc == -ETIMEDOUT && in_place) break; /* whether busy or silent: not for this lock */
        if (rc < 0 || frame->type != LARDER__PROGRESS || !peer) return rc;
        /* the member has it in hand: wait on, within the limit */
        *answered = false;
        int64_t left = limit - (larder__endpoint_now_ms() - started);
        if (left <= 0 && in_place) break;
        if (left <= 0) return -ETIMEDOUT;
        wait_ms = priority >= LARDER__HINTED || left < e->timeout_ms ? (int)left : e->timeout_ms;
    }
    return larder__fail(LARDER_ELOCAL,
                        "larder daemon at %s: busy past %lld ms with a READ staged in place "
                        "(its blocks locked); borrowing it the ordinary way",
                        e->address, (long long)limit);
}

/*
 * One READ on fd.  0 (1: staged, for a STAGE READ: nothing in buf), or a
 * negative code with a message; *connection_fault says the failure was the
 * connection's (close it), *unanswered that it ended before any byte of an
 * answer (EOF, EPIPE or ECONNRESET).
 */
static int read_on(struct larder__endpoint *e, int fd, const struct larder__read *read, void *buf,
                   bool *connection_fault, bool *unanswered)
{
    uint8_t request[LARDER__WIRE_HEADER + 40];
    int n = larder__wire_encode_read(request, sizeof request, 2, read);
    int rc = n < 0 ? n : larder__endpoint_send_all(fd, request, (size_t)n);
    struct larder__frame frame;
    bool answered = false;
    bool in_place = larder__recv_window_covers(buf, (size_t)read->length);
    if (rc == 0) rc = await_answer(e, fd, read->priority, &frame, &answered, in_place);
    *unanswered = !answered && (rc == -EPIPE || rc == -ECONNRESET);
    *connection_fault = rc < 0;
    if (rc < 0) return rc;
    if (frame.type == LARDER__DATA && frame.length == 0 && (read->flags & LARDER__READ_STAGE)) {
        rc = 1; /* staged in the cache the reader shares: nothing follows */
    } else if (frame.type == LARDER__DATA && frame.length == read->length) {
        /* into a cache file's pages with splice where buf is a window onto
         * them (a daemon staging a borrowed chunk in place, recv_window.h) */
        rc = larder__recv_into(fd, buf, (size_t)read->length);
        *connection_fault = rc < 0;
    } else if (frame.type == LARDER__ERROR && frame.length <= 4 + LARDER__WIRE_MAX_MESSAGE) {
        uint8_t payload[4 + LARDER__WIRE_MAX_MESSAGE];
        rc = larder__endpoint_recv_all(fd, payload, frame.length);
        *connection_fault = rc < 0;
        if (rc == 0) {
            rc = larder__endpoint_error_answer(e, payload, frame.length);
            /* a malformed ERROR leaves the stream out of step */
            *connection_fault = rc == LARDER_EPROTOCOL;
        }
    } else {
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: unexpected answer type %u",
                          e->address, frame.type);
        *connection_fault = true;
    }
    return rc;
}

int larder__endpoint_read(struct larder__endpoint *e, uint64_t id_low, uint64_t id_high,
                          uint32_t shard, int priority, uint64_t offset, uint64_t length, void *buf)
{
    return larder__endpoint_read_flagged(e, id_low, id_high, shard, priority, 0, offset, length,
                                         buf);
}

int larder__endpoint_read_flagged(struct larder__endpoint *e, uint64_t id_low, uint64_t id_high,
                                  uint32_t shard, int priority, unsigned flags, uint64_t offset,
                                  uint64_t length, void *buf)
{
    struct larder__read read = {.id_low = id_low,
                                .id_high = id_high,
                                .shard = shard,
                                .priority = (uint8_t)priority,
                                .flags = (uint8_t)flags,
                                .offset = offset,
                                .length = length};
    /* over UCX, unless this peer has none: then on, over TCP.  Never into
     * a window onto the cache file (recv_window.h): a UCX receive there
     * has no deadline of its own while the fill lock is held (larderd
     * stages in place only without a UCX hub; this keeps it so) */
    if (e->ucx && !larder__recv_window_covers(buf, (size_t)length)) {
        bool fault = false;
        int wait_ms = priority >= LARDER__HINTED ? QUEUED_TIMEOUT_MS : e->timeout_ms;
        int rc = larder__ucx_peer_read(e->ucx, &read, buf, wait_ms, QUEUED_TIMEOUT_MS, &fault);
        if (rc != LARDER__UCX_USE_TCP) {
            if (fault) {
                if (rc != LARDER_ENOTFOUND)
                    mark_down(e, rc == LARDER_EDENIED ? DENIED_DOWN_MS : e->down_ms);
                if (larder__endpoint_is_errno(rc))
                    rc = larder__fail(rc, "larder daemon at %s over UCX: %s", e->address,
                                      strerror(-rc));
            }
            return rc;
        }
    }
    if (__atomic_load_n(&e->no_stage, __ATOMIC_RELAXED)) read.flags &= ~LARDER__READ_STAGE;
    int group = group_of(priority);
    for (int attempt = 0;; attempt++) {
        int fd = take_idle(e, group);
        bool pooled = fd >= 0;
        if (!pooled && (fd = connect_endpoint(e)) < 0) {
            if (fd != LARDER_ENOTFOUND)
                mark_down(e, fd == LARDER_EDENIED ? DENIED_DOWN_MS : e->down_ms);
            return fd;
        }
        bool connection_fault, unanswered;
        int rc = read_on(e, fd, &read, buf, &connection_fault, &unanswered);
        if (connection_fault) {
            close(fd);
            /* a pooled connection the daemon closed while it sat idle: not
             * the daemon's failure; once more on a fresh one */
            if (pooled && unanswered && attempt == 0) continue;
            /* a daemon from before STAGE closes on it (a malformed READ to
             * it): asked the old way, now and from then on */
            if (unanswered && (read.flags & LARDER__READ_STAGE)) {
                __atomic_store_n(&e->no_stage, true, __ATOMIC_RELAXED);
                read.flags &= ~LARDER__READ_STAGE;
                continue;
            }
            /* this node's own failure (its disk, its lock): the member is fine */
            if (rc != LARDER_ELOCAL) mark_down(e, e->down_ms);
            if (larder__endpoint_is_errno(rc))
                rc = larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
            return rc;
        }
        pthread_mutex_lock(&e->lock);
        if (e->num_idle[group] < POOL) {
            e->idle[group][e->num_idle[group]++] = fd;
            fd = -1;
        }
        pthread_mutex_unlock(&e->lock);
        if (fd >= 0) close(fd);
        return rc;
    }
}

int larder__endpoint_prepare(struct larder__endpoint *e, int count, int64_t deadline_ms,
                             const volatile sig_atomic_t *stop)
{
    int made = 0;
    if (e->ucx && !larder__endpoint_down(e)) { /* its READs go over UCX: that path first */
        int rc = larder__ucx_peer_prepare(e->ucx, deadline_ms); /* LARDER__UCX_USE_TCP: on below */
        if (rc < 0) return rc;
    } /* and the TCP connections, for READs that fall back to TCP */
    for (; made < count; made++) {
        if (stop && *stop) break; /* the daemon stops: no more */
        if (larder__endpoint_now_ms() >= deadline_ms)
            return made ? made
                        : larder__fail(-ETIMEDOUT,
                                       "larder daemon at %s: no connection by the "
                                       "deadline",
                                       e->address);
        pthread_mutex_lock(&e->lock);
        bool enough = e->num_idle[0] >= count || e->num_idle[0] >= POOL ||
                      e->down_until_ms > larder__endpoint_now_ms();
        pthread_mutex_unlock(&e->lock);
        if (enough) break;
        /* a failure marks nothing down: the first READ finds out for itself,
         * and its caller says so (source_stripe.c's "skipped for") */
        int fd = connect_until(e, deadline_ms, true);
        if (fd < 0) return made ? made : fd;
        pthread_mutex_lock(&e->lock);
        if (e->num_idle[0] < POOL) {
            e->idle[0][e->num_idle[0]++] = fd;
            fd = -1;
        }
        pthread_mutex_unlock(&e->lock);
        if (fd >= 0) close(fd);
    }
    return made;
}

int larder__endpoint_open_ahead(struct larder__endpoint *e, int64_t deadline_ms)
{
    if (!e->index_url)
        return larder__fail(LARDER_EUSAGE, "larder__endpoint_open_ahead on an endpoint without an "
                                           "index");
    int fd = connect_until(e, deadline_ms, false);
    if (fd < 0) return fd;
    close(fd); /* the daemon opens it all the same (docs/protocol.md, "Peer connections") */
    return 0;
}

int larder__endpoint_stats(struct larder__endpoint *e, char **json)
{
    int fd = connect_endpoint(e);
    if (fd < 0) return fd;
    uint8_t request[LARDER__WIRE_HEADER];
    larder__wire_encode_header(request, sizeof request, LARDER__STAT, 0, 3);
    int rc = larder__endpoint_send_all(fd, request, sizeof request);
    struct larder__frame frame;
    char *text = malloc(LARDER__WIRE_MAX_STATS + 1);
    if (!text) rc = -ENOMEM;
    if (rc == 0)
        rc = larder__endpoint_recv_frame(fd, &frame, text, LARDER__WIRE_MAX_STATS, e->timeout_ms);
    if (rc == 0 && frame.type != LARDER__STATS)
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer type %u to STAT",
                          e->address, frame.type);
    close(fd);
    if (rc < 0) {
        free(text);
        if (larder__endpoint_is_errno(rc))
            rc = larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
        return rc;
    }
    text[frame.length] = '\0';
    *json = text;
    return 0;
}

int larder__endpoint_call(struct larder__endpoint *e, const void *request, size_t length,
                          struct larder__frame *frame, void *payload, size_t capacity,
                          int timeout_ms)
{
    if (timeout_ms <= 0) timeout_ms = e->timeout_ms;
    int group = group_of(LARDER__HINTED); /* control calls (hints): never a reader's connection */
    for (int attempt = 0;; attempt++) {
        int fd = take_idle(e, group);
        bool pooled = fd >= 0;
        if (!pooled && (fd = connect_endpoint(e)) < 0) {
            if (fd != LARDER_ENOTFOUND)
                mark_down(e, fd == LARDER_EDENIED ? DENIED_DOWN_MS : e->down_ms);
            return fd;
        }
        bool answered = false;
        uint8_t header[LARDER__WIRE_HEADER];
        int rc = larder__endpoint_send_all(fd, request, length);
        if (rc == 0) rc = larder__endpoint_recv_header(fd, header, timeout_ms, &answered);
        bool unanswered = !answered && (rc == -EPIPE || rc == -ECONNRESET);
        if (rc == 0) rc = larder__wire_header(header, sizeof header, frame);
        if (rc == 0 && frame->length > capacity)
            rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer of %u bytes",
                              e->address, frame->length);
        if (rc == 0) rc = larder__endpoint_recv_all(fd, payload, frame->length);
        if (rc < 0) { /* the connection's fault: out of step or gone */
            close(fd);
            if (pooled && unanswered && attempt == 0) continue;
            /* not marked down: a control call may wait long (a HINT that
             * waits for staging), and a slow answer to one must not send
             * this member's readers to the origin; a dead member is found
             * by its connect */
            if (larder__endpoint_is_errno(rc))
                rc = larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
            return rc;
        }
        if (frame->type == LARDER__ERROR)
            rc = larder__endpoint_error_answer(e, payload, frame->length);
        pthread_mutex_lock(&e->lock);
        if (e->num_idle[group] < POOL && rc != LARDER_EPROTOCOL) {
            e->idle[group][e->num_idle[group]++] = fd;
            fd = -1;
        }
        pthread_mutex_unlock(&e->lock);
        if (fd >= 0) close(fd);
        return rc;
    }
}

int larder__endpoint_ask(struct larder__endpoint *e, const void *request, size_t length,
                         int wait_ms, uint8_t *type, uint8_t **payload, uint32_t *payload_length)
{
    if (e->index_url) /* a names endpoint: no dataset is opened on its connections */
        return larder__fail(LARDER_EUSAGE, "larder__endpoint_ask on an endpoint with an index");
    int fd = connect_endpoint(e);
    if (fd < 0) return fd;
    int rc = larder__endpoint_send_all(fd, request, length);
    uint8_t header[LARDER__WIRE_HEADER];
    struct larder__frame frame;
    bool answered;
    uint8_t *bytes = NULL;
    if (rc == 0) rc = larder__endpoint_recv_header(fd, header, wait_ms + e->timeout_ms, &answered);
    if (rc == 0) rc = larder__wire_header(header, sizeof header, &frame);
    if (rc == 0 && !(bytes = malloc(frame.length ? frame.length : 1))) rc = -ENOMEM;
    if (rc == 0) rc = larder__endpoint_recv_all(fd, bytes, frame.length);
    close(fd);
    if (rc < 0 && larder__endpoint_is_errno(rc)) /* the connection's failure */
        rc = larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
    if (rc == 0 && frame.type == LARDER__ERROR)
        rc = larder__endpoint_error_answer(e, bytes, frame.length);
    if (rc < 0) {
        free(bytes);
        return rc;
    }
    *type = frame.type;
    *payload = bytes;
    *payload_length = frame.length;
    return 0;
}

/* ---- ucx: the hooks of transport_ucx_peer.c ------------------------------------------- */

int larder__endpoint_connect(struct larder__endpoint *e, int *timeout_ms, int64_t deadline_ms)
{
    *timeout_ms = e->timeout_ms;
    return connect_until(e, deadline_ms, true);
}

int larder__endpoint_use_ucx(struct larder__endpoint *e, struct larder__ucx *hub)
{
    if (e->ucx || !hub) return 0;
    return larder__ucx_peer_new(hub, e, &e->ucx);
}

const char *larder__endpoint_transport(const struct larder__endpoint *e)
{
    return e->ucx ? larder__ucx_peer_transport(e->ucx) : "tcp";
}
