/*
 * endpoint_wire.c - one connection of an endpoint (endpoint_internal.h):
 * dialling a Unix socket or TCP address with timeouts, the handshake with
 * its proof of the cluster secret (docs/protocol.md, "Handshake"), and
 * whole frames in and out.  The pools and the requests are endpoint.c's.
 */
#include "auth.h"
#include "cluster.h"
#include "endpoint_internal.h"
#include "wire.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int64_t larder__endpoint_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Send all of buf: 0, or -errno (EPIPE when the other end is gone). */
int larder__endpoint_send_all(int fd, const void *buf, size_t length)
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

/* Milliseconds left until deadline_ms (0: none: -1), at least 0. */
static int left_ms(int64_t deadline_ms)
{
    if (!deadline_ms) return -1;
    int64_t left = deadline_ms - larder__endpoint_now_ms();
    return left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
}

int larder__endpoint_recv_until(int fd, void *buf, size_t length, int64_t deadline_ms)
{
    uint8_t *p = buf;
    while (length) {
        if (deadline_ms) { /* one deadline for all of it, however it trickles in */
            struct pollfd w = {.fd = fd, .events = POLLIN};
            int n = poll(&w, 1, left_ms(deadline_ms));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return -errno;
            if (n == 0) return -ETIMEDOUT;
        }
        ssize_t n = recv(fd, p, length, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -(errno == EAGAIN ? ETIMEDOUT : errno);
        if (n == 0) return -ECONNRESET;
        p += n, length -= (size_t)n;
    }
    return 0;
}

/* Receive exactly length bytes (the socket has a receive timeout): 0 or -errno. */
int larder__endpoint_recv_all(int fd, void *buf, size_t length)
{
    return larder__endpoint_recv_until(fd, buf, length, 0);
}

/*
 * Wait up to timeout_ms for an answer to start, then receive its header.
 * 0; -ETIMEDOUT when nothing came in time; -ECONNRESET (or another
 * -errno) with *answered false when the connection ended before any byte
 * of the answer, with *answered true when it ended inside the header.
 */
static int recv_header_until(int fd, uint8_t header[LARDER__WIRE_HEADER], int timeout_ms,
                             bool *answered, int64_t deadline_ms)
{
    *answered = false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int64_t deadline = larder__endpoint_now_ms() + timeout_ms;
    if (deadline_ms && deadline_ms < deadline) deadline = deadline_ms;
    for (;;) {
        int left = (int)(deadline - larder__endpoint_now_ms());
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
    return larder__endpoint_recv_until(fd, header + n, LARDER__WIRE_HEADER - (size_t)n,
                                       deadline_ms);
}

int larder__endpoint_recv_header(int fd, uint8_t header[LARDER__WIRE_HEADER], int timeout_ms,
                                 bool *answered)
{
    return recv_header_until(fd, header, timeout_ms, answered, 0);
}

int larder__endpoint_recv_frame_until(int fd, struct larder__frame *frame, void *payload,
                                      size_t capacity, int timeout_ms, int64_t deadline_ms)
{
    uint8_t header[LARDER__WIRE_HEADER];
    bool answered;
    int rc = recv_header_until(fd, header, timeout_ms, &answered, deadline_ms);
    if (rc < 0) return rc;
    if ((rc = larder__wire_header(header, sizeof header, frame)) < 0) return rc;
    if (frame->length > capacity)
        return larder__fail(LARDER_EPROTOCOL, "answer of %u bytes, expected at most %zu",
                            frame->length, capacity);
    return larder__endpoint_recv_until(fd, payload, frame->length, deadline_ms);
}

/* One frame: header into *frame, payload (up to capacity) into payload.  0 or a negative code. */
int larder__endpoint_recv_frame(int fd, struct larder__frame *frame, void *payload, size_t capacity,
                                int timeout_ms)
{
    return larder__endpoint_recv_frame_until(fd, frame, payload, capacity, timeout_ms, 0);
}

/* The daemon's ERROR frame (its payload in hand) as our failure: its code and message. */
int larder__endpoint_error_answer(const struct larder__endpoint *e, const uint8_t *payload,
                                  uint32_t length)
{
    struct larder__error_frame error;
    int rc = larder__wire_error(payload, length, &error);
    if (rc < 0) return rc;
    return larder__fail(error.code, "larder daemon at %s: %.*s", e->address,
                        (int)error.message_length, error.message);
}

/* A connected socket (blocking, with send and receive timeouts, the
 * connect itself bounded by deadline_ms too), or -errno. */
int larder__endpoint_dial(const struct larder__endpoint *e, int64_t deadline_ms)
{
    int fd = -1;
    int timeout = e->timeout_ms, left = left_ms(deadline_ms);
    if (left == 0) return -ETIMEDOUT;
    if (left > 0 && left < timeout) timeout = left;
    struct timeval tv = {timeout / 1000, (timeout % 1000) * 1000};
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

int64_t larder__endpoint_peer_ticks(int fd)
{
    struct ucred peer = {0};
    socklen_t size = sizeof peer;
    if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) < 0 || peer.pid <= 0)
        return -1;
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)peer.pid);
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *p = strrchr(text, ')'); /* the name may hold anything but ends at the last ')' */
    char state;
    unsigned long long utime, stime;
    /* after the name: state (field 3), then fields 4-13, utime (14), stime (15) */
    if (!p ||
        sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu", &state, &utime,
               &stime) != 3 ||
        strchr("TtZXx", state))
        return -1;
    return (int64_t)(utime + stime);
}

bool larder__endpoint_ran(int64_t before, int64_t after, int64_t waited_ms)
{
    long hz = sysconf(_SC_CLK_TCK);
    return before >= 0 && after >= before && hz > 0 && waited_ms > 0 &&
           (after - before) * 1000 / hz * 10 >= waited_ms;
}

/*
 * A reader's connect: wait for the daemon's WELCOME to start, a slice of
 * the endpoint's timeout (within *deadline_ms, 0: none) at a time, on past
 * the first while the daemon runs (its CPU time grew through the slice),
 * up to QUEUED_TIMEOUT_MS; each such slice moves *deadline_ms on by its
 * length.  0 once there is something to read; -ETIMEDOUT after a slice
 * with nothing, the daemon not running (or not known to /proc): what a
 * plain wait of one timeout would have said.
 */
static int wait_for_welcome(const struct larder__endpoint *e, int fd, int64_t *deadline_ms)
{
    int64_t ticks = larder__endpoint_peer_ticks(fd);
    for (int64_t waited = 0;;) {
        int64_t started = larder__endpoint_now_ms(), slice = e->timeout_ms;
        if (*deadline_ms && *deadline_ms - started < slice)
            slice = *deadline_ms > started ? *deadline_ms - started : 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)slice) != 0) return 0; /* an answer, an error or EINTR: go and see */
        int64_t took = larder__endpoint_now_ms() - started,
                now_ticks = larder__endpoint_peer_ticks(fd);
        waited += took;
        if (waited >= QUEUED_TIMEOUT_MS || !larder__endpoint_ran(ticks, now_ticks, took))
            return -ETIMEDOUT;
        ticks = now_ticks;
        if (*deadline_ms) *deadline_ms += took; /* a slice the daemon ran through does not count */
    }
}

/*
 * HELLO, WELCOME and, where the daemon asks for it, the proof of the
 * cluster secret (docs/protocol.md, "Handshake").  A peer endpoint with a
 * secret believes only a daemon that proves it first, and never sends
 * the secret itself.  0, or a negative code with a message.
 */
int larder__endpoint_greet(struct larder__endpoint *e, int fd, int64_t deadline_ms, int wait_ms)
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
    if ((rc = larder__endpoint_send_all(fd, buf, (size_t)n)) < 0) return rc;
    if (e->role == LARDER__ROLE_READER && wait_ms == 0 &&
        (rc = wait_for_welcome(e, fd, &deadline_ms)) < 0)
        return rc;
    struct larder__frame frame;
    uint8_t answer[LARDER__WIRE_MAX_MESSAGE + 300];
    if ((rc = larder__endpoint_recv_frame_until(fd, &frame, answer, sizeof answer,
                                                wait_ms > 0 ? wait_ms : e->timeout_ms,
                                                deadline_ms)) < 0)
        return rc;
    if (frame.type == LARDER__ERROR) return larder__endpoint_error_answer(e, answer, frame.length);
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
    return n < 0 ? n : larder__endpoint_send_all(fd, frame_bytes, (size_t)n);
}
