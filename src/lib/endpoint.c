/*
 * endpoint.c - blocking daemon clients with connection pools (endpoint.h).
 *
 * Timeouts are what make a reader's fallback prompt: a reader (LARDER__ROLE_READER,
 * created with timeout 0) gives its daemon LARDER_DAEMON_TIMEOUT_MS
 * (default 1000 ms) to accept, to greet and to start answering a READ,
 * and goes to its own path to the origin when it does not; a dead
 * daemon's socket refuses a connect at once.  A pooled connection the
 * daemon closed meanwhile (its idle timeout) is not a failure of the
 * daemon: the request is sent again, once, on a fresh connection.
 */
#include "endpoint.h"
#include "auth.h"
#include "cluster.h"
#include "priority.h"
#include "wire.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define POOL 64              /* idle connections kept per group of classes */
#define PEER_DOWN_MS 10000   /* a peer that failed is left alone this long */
#define READER_DOWN_MS 2000  /* a node daemon that failed: short, it may be restarting */
#define DENIED_DOWN_MS 60000 /* a daemon that refused us will refuse again */
#define READER_TIMEOUT_MS 1000
#define OPEN_TIMEOUT_MS 10000 /* opening an index may read it from a remote origin */
/* How long a HINTED or WARM READ waits for its answer to start (the daemon
 * queues it behind its higher-class READs: busy, not dead), and a DEMAND or
 * NEAR READ to a peer at most while the member shows life (await_answer). */
#define QUEUED_TIMEOUT_MS 60000

/* Whether a negative code is -errno (larder's own range starts at -1000),
 * whose message is then worth adding the daemon's address to. */
static bool is_errno(int rc)
{
    return rc < 0 && rc > -1000;
}

struct larder__endpoint {
    char *address, *token, *index_url;
    enum larder__role role;
    int timeout_ms, down_ms;
    pthread_mutex_t lock;
    /* Idle connections by group of classes: [0] DEMAND and NEAR, [1]
     * HINTED and WARM.  A connection carries one request at a time, and
     * the groups never share one, so a reader's READ is never sent on a
     * socket a bulk transfer was last using (whose tail the daemon may
     * still be pushing through the kernel's buffers). */
    int idle[2][POOL];
    int num_idle[2];
    int64_t down_until_ms;
    int64_t answered_ms; /* when any connection last got an answer's header (atomic) */
};

/* The pool group of a class. */
static int group_of(int priority)
{
    return priority >= LARDER__HINTED ? 1 : 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
    bool down = e->down_until_ms > now_ms();
    pthread_mutex_unlock(&e->lock);
    return down;
}

/* Leave the endpoint alone for down_ms, and drop its pooled connections. */
static void mark_down(struct larder__endpoint *e, int down_ms)
{
    pthread_mutex_lock(&e->lock);
    e->down_until_ms = now_ms() + down_ms;
    for (int g = 0; g < 2; g++) {
        for (int i = 0; i < e->num_idle[g]; i++)
            close(e->idle[g][i]);
        e->num_idle[g] = 0;
    }
    pthread_mutex_unlock(&e->lock);
}

/* Send all of buf: 0, or -errno (EPIPE when the other end is gone). */
static int send_all(int fd, const void *buf, size_t length)
{
    const uint8_t *p = buf;
    while (length) {
        ssize_t n = send(fd, p, length, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return -ETIMEDOUT;
        if (n <= 0) return -(n < 0 ? errno : EPIPE);
        p += n, length -= (size_t)n;
    }
    return 0;
}

/* Receive exactly length bytes (the socket has a receive timeout): 0 or -errno. */
static int recv_all(int fd, void *buf, size_t length)
{
    uint8_t *p = buf;
    while (length) {
        ssize_t n = recv(fd, p, length, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -(errno == EAGAIN ? ETIMEDOUT : errno);
        if (n == 0) return -ECONNRESET;
        p += n, length -= (size_t)n;
    }
    return 0;
}

/*
 * Wait up to timeout_ms for an answer to start, then receive its header.
 * 0; -ETIMEDOUT when nothing came in time; -ECONNRESET (or another
 * -errno) with *answered false when the connection ended before any byte
 * of the answer, with *answered true when it ended inside the header.
 */
static int recv_header(int fd, uint8_t header[LARDER__WIRE_HEADER], int timeout_ms, bool *answered)
{
    *answered = false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(deadline - now_ms());
        int n = poll(&p, 1, left > 0 ? left : 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return -ETIMEDOUT;
        break;
    }
    ssize_t n;
    do
        n = recv(fd, header, LARDER__WIRE_HEADER, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) return -(errno == EAGAIN ? ETIMEDOUT : errno);
    if (n == 0) return -ECONNRESET;
    *answered = true;
    return recv_all(fd, header + n, LARDER__WIRE_HEADER - (size_t)n);
}

/* One frame: header into *frame, payload (up to capacity) into payload.  0 or a negative code. */
static int recv_frame(int fd, struct larder__frame *frame, void *payload, size_t capacity,
                      int timeout_ms)
{
    uint8_t header[LARDER__WIRE_HEADER];
    bool answered;
    int rc = recv_header(fd, header, timeout_ms, &answered);
    if (rc < 0) return rc;
    if ((rc = larder__wire_header(header, sizeof header, frame)) < 0) return rc;
    if (frame->length > capacity)
        return larder__fail(LARDER_EPROTOCOL, "answer of %u bytes, expected at most %zu",
                            frame->length, capacity);
    return recv_all(fd, payload, frame->length);
}

/* The daemon's ERROR frame (its payload in hand) as our failure: its code and message. */
static int error_answer(const struct larder__endpoint *e, const uint8_t *payload, uint32_t length)
{
    struct larder__error_frame error;
    int rc = larder__wire_error(payload, length, &error);
    if (rc < 0) return rc;
    return larder__fail(error.code, "larder daemon at %s: %.*s", e->address,
                        (int)error.message_length, error.message);
}

/* A connected socket (blocking, with send and receive timeouts), or -errno. */
static int dial(const struct larder__endpoint *e)
{
    int fd = -1;
    struct timeval tv = {e->timeout_ms / 1000, (e->timeout_ms % 1000) * 1000};
    if (strchr(e->address, '/')) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        if (strlen(e->address) >= sizeof a.sun_path) return -ENAMETOOLONG;
        strcpy(a.sun_path, e->address);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -errno;
        /* a dead daemon's socket refuses at once; a hung one's full backlog
         * would block the connect: the send timeout bounds that */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
            int err = errno == EAGAIN || errno == EINPROGRESS ? ETIMEDOUT : errno;
            close(fd);
            return -err;
        }
    } else {
        const char *colon = strrchr(e->address, ':');
        if (!colon) return -EINVAL;
        char host[256];
        snprintf(host, sizeof host, "%.*s", (int)(colon - e->address), e->address);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list;
        if (getaddrinfo(host, colon + 1, &hints, &list) != 0) return -EHOSTUNREACH;
        int err = ECONNREFUSED;
        for (struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next) {
            fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) continue;
            /* the send timeout bounds the connect too */
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                err = errno == EINPROGRESS ? ETIMEDOUT : errno;
                close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(list);
        if (fd < 0) return -err;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/*
 * HELLO, WELCOME and, where the daemon asks for it, the proof of the
 * cluster secret (docs/protocol.md, "Handshake").  A peer endpoint with a
 * secret believes only a daemon that proves it first, and never sends
 * the secret itself.  0, or a negative code with a message.
 */
static int greet(struct larder__endpoint *e, int fd)
{
    /* a peer says how it stripes ownership: a daemon striping otherwise refuses it */
    struct larder__hello hello = {
        .role = e->role,
        .owner_chunk = e->role == LARDER__ROLE_PEER ? (uint32_t)LARDER__OWNER_CHUNK : 0};
    int rc = larder__auth_nonce(hello.nonce);
    if (rc < 0) return larder__fail(rc, "no random nonce: %s", strerror(-rc));
    uint8_t buf[LARDER__WIRE_HEADER + 8 + LARDER__WIRE_NONCE];
    int n = larder__wire_encode_hello(buf, sizeof buf, 0, &hello);
    if (n < 0) return n;
    if ((rc = send_all(fd, buf, (size_t)n)) < 0) return rc;
    struct larder__frame frame;
    uint8_t answer[LARDER__WIRE_MAX_MESSAGE + 300];
    if ((rc = recv_frame(fd, &frame, answer, sizeof answer, e->timeout_ms)) < 0) return rc;
    if (frame.type == LARDER__ERROR) return error_answer(e, answer, frame.length);
    if (frame.type != LARDER__WELCOME)
        return larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer type %u to HELLO",
                            e->address, frame.type);
    struct larder__welcome welcome;
    if ((rc = larder__wire_welcome(answer, frame.length, &welcome)) < 0) return rc;
    bool with_secret = e->token && e->token[0];
    if (welcome.auth == LARDER__AUTH_NONE) {
        if (with_secret && e->role == LARDER__ROLE_PEER)
            return larder__fail(LARDER_EDENIED,
                                "larder daemon at %s does not authenticate (it has no cluster "
                                "secret): not trusted",
                                e->address);
        return 0;
    }
    if (!with_secret)
        return larder__fail(LARDER_EDENIED,
                            "larder daemon at %s asks for the cluster secret, and none is set "
                            "here",
                            e->address);
    uint8_t expected[LARDER__WIRE_PROOF];
    size_t secret_length = strlen(e->token);
    rc = larder__auth_proof(e->token, secret_length, LARDER__AUTH_SERVER_LABEL, hello.nonce,
                            welcome.nonce, expected);
    if (rc < 0) return rc;
    if (!larder__auth_equal(expected, welcome.proof))
        return larder__fail(LARDER_EDENIED,
                            "larder daemon at %s did not prove the cluster secret: not trusted",
                            e->address);
    struct larder__prove prove;
    rc = larder__auth_proof(e->token, secret_length, LARDER__AUTH_CLIENT_LABEL, welcome.nonce,
                            hello.nonce, prove.proof);
    if (rc < 0) return rc;
    uint8_t frame_bytes[LARDER__WIRE_HEADER + LARDER__WIRE_PROOF];
    n = larder__wire_encode_prove(frame_bytes, sizeof frame_bytes, 0, &prove);
    return n < 0 ? n : send_all(fd, frame_bytes, (size_t)n);
}

/* A fresh connection: dialled, greeted, the dataset opened.  The fd, or a negative code. */
static int connect_endpoint(struct larder__endpoint *e)
{
    int fd = dial(e);
    if (fd < 0) return larder__fail(fd, "larder daemon at %s: %s", e->address, strerror(-fd));
    int rc = greet(e, fd);
    if (rc == 0 && e->index_url) {
        uint8_t buf[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_URL];
        struct larder__frame frame;
        uint8_t answer[LARDER__WIRE_MAX_MESSAGE + 300];
        int n = larder__wire_encode_open(buf, sizeof buf, 1, e->index_url);
        rc = n < 0 ? n : send_all(fd, buf, (size_t)n);
        int timeout = e->timeout_ms > OPEN_TIMEOUT_MS ? e->timeout_ms : OPEN_TIMEOUT_MS;
        if (rc == 0) rc = recv_frame(fd, &frame, answer, sizeof answer, timeout);
        if (rc == 0 && frame.type == LARDER__ERROR)
            rc = error_answer(e, answer, frame.length);
        else if (rc == 0 && frame.type != LARDER__OPENED)
            rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer type %u to OPEN",
                              e->address, frame.type);
    }
    if (rc < 0) {
        close(fd);
        if (is_errno(rc))
            return larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
        return rc;
    }
    return fd;
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

/*
 * Wait for the answer to a READ at `priority` to start, and take its
 * header into *frame: 0, or a negative code (-ETIMEDOUT: none in time).
 * A peer's answer may be late for good reasons (the member queues it, or
 * fills it from a busy origin), and reading the origin instead costs the
 * origin a second copy of the chunk: so a READ to a peer waits on, up to
 * QUEUED_TIMEOUT_MS in all, while the member sends PROGRESS frames for it
 * (docs/protocol.md) or answers other READs; it gives up after
 * e->timeout_ms in which the member sent nothing at all.
 */
static int await_answer(struct larder__endpoint *e, int fd, int priority,
                        struct larder__frame *frame, bool *answered)
{
    uint8_t header[LARDER__WIRE_HEADER];
    bool peer = e->role == LARDER__ROLE_PEER;
    int wait_ms = e->timeout_ms;
    if (priority >= LARDER__HINTED && wait_ms < QUEUED_TIMEOUT_MS) wait_ms = QUEUED_TIMEOUT_MS;
    int64_t started = now_ms();
    for (;;) {
        int rc = recv_header(fd, header, wait_ms, answered);
        /* a peer that answers others meanwhile is busy, not hung: wait on */
        while (rc == -ETIMEDOUT && peer &&
               now_ms() - __atomic_load_n(&e->answered_ms, __ATOMIC_RELAXED) < e->timeout_ms &&
               now_ms() - started < QUEUED_TIMEOUT_MS)
            rc = recv_header(fd, header, e->timeout_ms, answered);
        if (rc == 0) __atomic_store_n(&e->answered_ms, now_ms(), __ATOMIC_RELAXED);
        if (rc == 0) rc = larder__wire_header(header, sizeof header, frame);
        if (rc < 0 || frame->type != LARDER__PROGRESS || !peer) return rc;
        /* the member has it in hand: wait on, within the limit */
        *answered = false;
        int64_t left = QUEUED_TIMEOUT_MS - (now_ms() - started);
        if (left <= 0) return -ETIMEDOUT;
        wait_ms = priority >= LARDER__HINTED || left < e->timeout_ms ? (int)left : e->timeout_ms;
    }
}

/*
 * One READ on fd.  0, or a negative code with a message; *connection_fault
 * says the failure was the connection's (close it), *unanswered that it
 * ended before any byte of an answer (EOF, EPIPE or ECONNRESET).
 */
static int read_on(struct larder__endpoint *e, int fd, const struct larder__read *read, void *buf,
                   bool *connection_fault, bool *unanswered)
{
    uint8_t request[LARDER__WIRE_HEADER + 40];
    int n = larder__wire_encode_read(request, sizeof request, 2, read);
    int rc = n < 0 ? n : send_all(fd, request, (size_t)n);
    struct larder__frame frame;
    bool answered = false;
    if (rc == 0) rc = await_answer(e, fd, read->priority, &frame, &answered);
    *unanswered = !answered && (rc == -EPIPE || rc == -ECONNRESET);
    *connection_fault = rc < 0;
    if (rc < 0) return rc;
    if (frame.type == LARDER__DATA && frame.length == read->length) {
        rc = recv_all(fd, buf, (size_t)read->length);
        *connection_fault = rc < 0;
    } else if (frame.type == LARDER__ERROR && frame.length <= 4 + LARDER__WIRE_MAX_MESSAGE) {
        uint8_t payload[4 + LARDER__WIRE_MAX_MESSAGE];
        rc = recv_all(fd, payload, frame.length);
        *connection_fault = rc < 0;
        if (rc == 0) {
            rc = error_answer(e, payload, frame.length);
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
            mark_down(e, e->down_ms);
            if (is_errno(rc))
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

int larder__endpoint_stats(struct larder__endpoint *e, char **json)
{
    int fd = connect_endpoint(e);
    if (fd < 0) return fd;
    uint8_t request[LARDER__WIRE_HEADER];
    larder__wire_encode_header(request, sizeof request, LARDER__STAT, 0, 3);
    int rc = send_all(fd, request, sizeof request);
    struct larder__frame frame;
    char *text = malloc(LARDER__WIRE_MAX_STATS + 1);
    if (!text) rc = -ENOMEM;
    if (rc == 0) rc = recv_frame(fd, &frame, text, LARDER__WIRE_MAX_STATS, e->timeout_ms);
    if (rc == 0 && frame.type != LARDER__STATS)
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer type %u to STAT",
                          e->address, frame.type);
    close(fd);
    if (rc < 0) {
        free(text);
        if (is_errno(rc))
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
        int rc = send_all(fd, request, length);
        if (rc == 0) rc = recv_header(fd, header, timeout_ms, &answered);
        bool unanswered = !answered && (rc == -EPIPE || rc == -ECONNRESET);
        if (rc == 0) rc = larder__wire_header(header, sizeof header, frame);
        if (rc == 0 && frame->length > capacity)
            rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer of %u bytes",
                              e->address, frame->length);
        if (rc == 0) rc = recv_all(fd, payload, frame->length);
        if (rc < 0) { /* the connection's fault: out of step or gone */
            close(fd);
            if (pooled && unanswered && attempt == 0) continue;
            /* not marked down: a control call may wait long (a HINT that
             * waits for staging), and a slow answer to one must not send
             * this member's readers to the origin; a dead member is found
             * by its connect */
            if (is_errno(rc))
                rc = larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
            return rc;
        }
        if (frame->type == LARDER__ERROR) rc = error_answer(e, payload, frame->length);
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
    int rc = send_all(fd, request, length);
    uint8_t header[LARDER__WIRE_HEADER];
    struct larder__frame frame;
    bool answered;
    uint8_t *bytes = NULL;
    if (rc == 0) rc = recv_header(fd, header, wait_ms + e->timeout_ms, &answered);
    if (rc == 0) rc = larder__wire_header(header, sizeof header, &frame);
    if (rc == 0 && !(bytes = malloc(frame.length ? frame.length : 1))) rc = -ENOMEM;
    if (rc == 0) rc = recv_all(fd, bytes, frame.length);
    close(fd);
    if (rc < 0 && is_errno(rc)) /* the connection's failure */
        rc = larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
    if (rc == 0 && frame.type == LARDER__ERROR) rc = error_answer(e, bytes, frame.length);
    if (rc < 0) {
        free(bytes);
        return rc;
    }
    *type = frame.type;
    *payload = bytes;
    *payload_length = frame.length;
    return 0;
}
