/*
 * test_transport_ucx_peer.c - a peer's lanes (transport_ucx_peer.c), read
 * through an endpoint (LARDER_UCX_LANES=2) from a fake daemon of the
 * test's own: it greets without a secret, answers each UCX_OFFER with a
 * session of its hub (docs/protocol.md: UCX_ACCEPT is the token, then
 * the worker address) and READs over TCP with DATA.  Every byte read is
 * checked against a formula of its offset.  What is checked: each lane
 * has a session of its own and READs take them in turn; a lane whose
 * path cannot be made (its connection closed, its offer refused, its
 * offer slow) leaves READs on the other, never failing one nor marking
 * the peer down; a lane whose control connection closes under READs in
 * flight costs those READs a trip over TCP (byte-exact), and the other
 * lane stays on UCX; a lane whose worker does not start makes no second
 * session over the first lane's worker.  Skipped when UCX has no usable
 * transport here.
 */
#include "endpoint.h"
#include "priority.h"
#include "test.h"
#include "transport_ucx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 32
#define SIZE 8192 /* bytes of each READ */

static void sleep_ms(int ms)
{
    struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

static uint8_t pattern(uint64_t at)
{
    return (uint8_t)((at * 7 + 3) % 251);
}

struct fake {
    int listener;
    struct larder__ucx *hub;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int accepted;
    int fds[MAX_CONNS + 1]; /* each accepted connection's, by number (1 on) */
    int drop_conn;          /* this connection is closed unanswered */
    int refuse_conn;        /* this connection's UCX_OFFER is answered by closing it */
    int oversize_conn;      /* ...answered with a DATA frame of 1 MiB (no offer's answer) */
    int hold_conn;          /* this connection's UCX_OFFER waits for `release`... */
    bool holding, release;  /* ...(3 s at most) */
    int stall_conn;         /* UCX READs of this connection's session are not answered */
    int stalled;            /* such READs */
    struct larder__ucx_session *held[64];
    int sessions;             /* UCX_ACCEPTs sent */
    int ucx_reads, tcp_reads; /* READs answered */
    int order[64];            /* the connection of each UCX READ */
};

static struct fake fake;

/* On the daemon's progress thread: a READ over UCX, answered now (or never). */
static void serve(void *owner, struct larder__ucx_session *s, uint64_t request,
                  const struct larder__read *read)
{
    int conn = (int)(intptr_t)owner;
    pthread_mutex_lock(&fake.lock);
    bool stall = conn == fake.stall_conn && fake.stalled < 64;
    if (stall) {
        larder__ucx_session_hold(s);
        fake.held[fake.stalled++] = s;
    } else if (fake.ucx_reads < 64) {
        fake.order[fake.ucx_reads] = conn;
    }
    if (!stall) fake.ucx_reads++;
    pthread_cond_broadcast(&fake.changed);
    pthread_mutex_unlock(&fake.lock);
    if (stall) return;
    uint8_t *bytes = malloc(read->length);
    for (uint64_t i = 0; i < read->length; i++)
        bytes[i] = pattern(read->offset + i);
    larder__ucx_answer(s, request, 0, bytes, read->length);
    free(bytes);
}

static bool send_exact(int fd, const void *buf, size_t n)
{
    return send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* The UCX_OFFER of connection `conn`: a session, and its UCX_ACCEPT. */
static bool accept_offer(int conn, int fd, uint64_t request, const uint8_t *address, size_t length,
                         struct larder__ucx_session **session)
{
    pthread_mutex_lock(&fake.lock);
    bool refuse = conn == fake.refuse_conn;
    if (conn == fake.hold_conn) {
        fake.holding = true;
        pthread_cond_broadcast(&fake.changed);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 3;
        while (!fake.release &&
               pthread_cond_timedwait(&fake.changed, &fake.lock, &until) != ETIMEDOUT) {
        }
        fake.holding = false;
    }
    bool oversize = conn == fake.oversize_conn;
    pthread_mutex_unlock(&fake.lock);
    if (refuse) return false;
    if (oversize) { /* a frame over what an offer's answer may hold, of a type it is not */
        size_t n = (size_t)1 << 20;
        uint8_t *frame = malloc(LARDER__WIRE_HEADER + n);
        larder__wire_encode_header(frame, LARDER__WIRE_HEADER, LARDER__DATA, (uint32_t)n, request);
        memset(frame + LARDER__WIRE_HEADER, 0x41, n);
        bool sent = send_exact(fd, frame, LARDER__WIRE_HEADER + n);
        free(frame);
        return sent;
    }
    uint8_t token[LARDER__UCX_TOKEN];
    CHECK_EQ(
        larder__ucx_session_new(fake.hub, (void *)(intptr_t)conn, address, length, token, session),
        0);
    const void *own;
    size_t own_length;
    larder__ucx_address(fake.hub, &own, &own_length);
    uint8_t *frame = malloc(LARDER__WIRE_HEADER + LARDER__UCX_TOKEN + own_length);
    larder__wire_encode_header(frame, LARDER__WIRE_HEADER, LARDER__UCX_ACCEPT,
                               (uint32_t)(LARDER__UCX_TOKEN + own_length), request);
    memcpy(frame + LARDER__WIRE_HEADER, token, LARDER__UCX_TOKEN);
    memcpy(frame + LARDER__WIRE_HEADER + LARDER__UCX_TOKEN, own, own_length);
    bool sent = send_exact(fd, frame, LARDER__WIRE_HEADER + LARDER__UCX_TOKEN + own_length);
    free(frame);
    pthread_mutex_lock(&fake.lock);
    fake.sessions++;
    pthread_mutex_unlock(&fake.lock);
    return sent;
}

static void *serve_connection(void *arg)
{
    int conn = (int)(intptr_t)arg;
    pthread_mutex_lock(&fake.lock);
    int fd = fake.fds[conn];
    bool drop = conn == fake.drop_conn;
    pthread_mutex_unlock(&fake.lock);
    struct larder__ucx_session *session = NULL;
    uint8_t header[LARDER__WIRE_HEADER], payload[4096];
    while (!drop && test_recv_exact(fd, header, sizeof header)) {
        uint8_t type = header[5];
        uint32_t length = larder__le32(header + 8);
        uint64_t request = larder__le64(header + 16);
        if (length > sizeof payload || !test_recv_exact(fd, payload, length)) break;
        if (type == LARDER__HELLO) {
            struct larder__welcome w = {
                .auth = LARDER__AUTH_NONE, .name_length = 4, .name = "fake"};
            uint8_t frame[512];
            int n = larder__wire_encode_welcome(frame, sizeof frame, request, &w);
            if (n <= 0 || !send_exact(fd, frame, (size_t)n)) break;
        } else if (type == LARDER__UCX_OFFER && !session) {
            if (!accept_offer(conn, fd, request, payload, length, &session)) break;
        } else if (type == LARDER__READ && length == 40) {
            uint64_t offset = larder__le64(payload + 24), asked = larder__le64(payload + 32);
            CHECK(asked <= SIZE);
            uint8_t frame[LARDER__WIRE_HEADER + SIZE];
            larder__wire_encode_header(frame, LARDER__WIRE_HEADER, LARDER__DATA, (uint32_t)asked,
                                       request);
            for (uint64_t i = 0; i < asked; i++)
                frame[LARDER__WIRE_HEADER + i] = pattern(offset + i);
            pthread_mutex_lock(&fake.lock);
            fake.tcp_reads++;
            pthread_mutex_unlock(&fake.lock);
            if (!send_exact(fd, frame, LARDER__WIRE_HEADER + asked)) break;
        } else {
            break;
        }
    }
    larder__ucx_session_free(session); /* as larderd's loop does when the connection goes */
    shutdown(fd, SHUT_RDWR);
    return NULL;
}

static void *accept_loop(void *arg)
{
    (void)arg;
    int fd;
    while ((fd = accept(fake.listener, NULL, NULL)) >= 0) {
        pthread_mutex_lock(&fake.lock);
        int conn = ++fake.accepted;
        CHECK(conn <= MAX_CONNS);
        fake.fds[conn] = fd;
        pthread_mutex_unlock(&fake.lock);
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, serve_connection, (void *)(intptr_t)conn), 0);
        pthread_detach(t);
    }
    return NULL;
}

/* The fake daemon, a borrower's hub (2 lanes) and an endpoint reading it over UCX. */
static void start(struct larder__ucx **borrower, struct larder__endpoint **endpoint)
{
    setenv("LARDER_UCX_LANES", "2", 1);
    memset(&fake, 0, sizeof fake);
    if (larder__ucx_start(&fake.hub) < 0) SKIP("UCX has no usable transport here");
    if (larder__ucx_start(borrower) < 0) SKIP("UCX has no usable transport here");
    unsetenv("LARDER_UCX_LANES");
    larder__ucx_serve(fake.hub, serve);
    pthread_mutex_init(&fake.lock, NULL);
    pthread_cond_init(&fake.changed, NULL);
    fake.listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof a;
    CHECK(bind(fake.listener, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(fake.listener, 16) == 0);
    CHECK(getsockname(fake.listener, (struct sockaddr *)&a, &length) == 0);
    pthread_t acceptor;
    CHECK_EQ(pthread_create(&acceptor, NULL, accept_loop, NULL), 0);
    pthread_detach(acceptor);
    char address[64];
    snprintf(address, sizeof address, "127.0.0.1:%u", ntohs(a.sin_port));
    CHECK_EQ(larder__endpoint_new(endpoint, address, LARDER__ROLE_PEER, NULL, NULL, 5000), 0);
    CHECK_EQ(larder__endpoint_use_ucx(*endpoint, *borrower), 0);
}

static void stop(struct larder__ucx *borrower, struct larder__endpoint *endpoint)
{
    larder__endpoint_free(endpoint);
    shutdown(fake.listener, SHUT_RDWR);
    close(fake.listener);
    pthread_mutex_lock(&fake.lock);
    for (int i = 1; i <= fake.accepted; i++)
        shutdown(fake.fds[i], SHUT_RDWR);
    for (int i = 0; i < fake.stalled; i++)
        larder__ucx_session_release(fake.held[i]);
    fake.stalled = 0;
    pthread_mutex_unlock(&fake.lock);
    sleep_ms(200); /* the connections' threads free their sessions */
    for (int i = 1; i <= fake.accepted; i++)
        close(fake.fds[i]);
    larder__ucx_stop(borrower);
    larder__ucx_stop(fake.hub);
}

/* One READ of SIZE bytes at offset, checked byte by byte: its code. */
static int read_at(struct larder__endpoint *endpoint, uint64_t offset)
{
    uint8_t *buf = calloc(1, SIZE);
    int rc = larder__endpoint_read(endpoint, 1, 2, 3, LARDER__DEMAND, offset, SIZE, buf);
    for (uint64_t i = 0; rc == 0 && i < SIZE; i++)
        if (buf[i] != pattern(offset + i)) rc = -EILSEQ;
    free(buf);
    return rc;
}

static int counter(int *at)
{
    pthread_mutex_lock(&fake.lock);
    int n = *at;
    pthread_mutex_unlock(&fake.lock);
    return n;
}

TEST(ucx_peer_reads_take_the_lanes_in_turn_each_its_own_session)
{
    struct larder__ucx *borrower;
    struct larder__endpoint *endpoint;
    start(&borrower, &endpoint);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(read_at(endpoint, (uint64_t)i * 100000), 0);
    pthread_mutex_lock(&fake.lock);
    CHECK_EQ(fake.sessions, 2); /* one per lane, each on a control connection of its own */
    CHECK_EQ(fake.accepted, 2);
    CHECK_EQ(fake.ucx_reads, 6);
    CHECK_EQ(fake.tcp_reads, 0);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(fake.order[i], 1 + i % 2); /* lane 0's session, lane 1's, in turn */
    pthread_mutex_unlock(&fake.lock);
    stop(borrower, endpoint);
}

/* Lane 1's path cannot be made: its connection is closed at once (a peer
 * over --max-connections), or its offer is refused.  Every READ is read
 * over lane 0, none fails, the peer is not marked down. */
TEST(ucx_peer_lane_that_cannot_be_made_leaves_the_other)
{
    for (int variant = 0; variant < 2; variant++) {
        struct larder__ucx *borrower;
        struct larder__endpoint *endpoint;
        start(&borrower, &endpoint);
        if (variant == 0)
            fake.drop_conn = 2;
        else
            fake.refuse_conn = 2;
        for (int i = 0; i < 6; i++)
            CHECK_EQ(read_at(endpoint, (uint64_t)i * 70000 + 11), 0);
        CHECK(!larder__endpoint_down(endpoint));
        CHECK(strcmp(larder__endpoint_transport(endpoint), "ucx") == 0);
        pthread_mutex_lock(&fake.lock);
        CHECK_EQ(fake.ucx_reads, 6); /* all over lane 0 */
        CHECK_EQ(fake.tcp_reads, 0);
        CHECK_EQ(fake.sessions, 1);
        CHECK_EQ(fake.accepted, 2); /* lane 1 tried once, then waits for its retry time */
        for (int i = 0; i < 6; i++)
            CHECK_EQ(fake.order[i], 1);
        pthread_mutex_unlock(&fake.lock);
        stop(borrower, endpoint);
    }
}

/* The first lane's offer is answered with a DATA frame of 1 MiB, not a
 * UCX_ACCEPT: refused unread, and every READ is answered byte-exact all
 * the same, the peer not marked down.  It was received into the offer's
 * 4 KiB buffer (found by review; under ASan a heap-buffer-overflow). */
TEST(ucx_peer_offer_answered_with_another_frame_is_refused_unread)
{
    struct larder__ucx *borrower;
    struct larder__endpoint *endpoint;
    start(&borrower, &endpoint);
    fake.oversize_conn = 1;
    for (int i = 0; i < 6; i++)
        CHECK_EQ(read_at(endpoint, (uint64_t)i * 70000 + 11), 0);
    CHECK(!larder__endpoint_down(endpoint));
    stop(borrower, endpoint);
}

struct slow_read {
    struct larder__endpoint *endpoint;
    uint64_t offset;
    int rc;
};

static void *read_thread(void *arg)
{
    struct slow_read *r = arg;
    r->rc = read_at(r->endpoint, r->offset);
    return NULL;
}

/* Lane 1's offer is slow: meanwhile READs go over lane 0 (its path is not
 * made under a lock that they wait for), then lane 1 is used. */
TEST(ucx_peer_slow_lane_does_not_hold_the_other)
{
    struct larder__ucx *borrower;
    struct larder__endpoint *endpoint;
    start(&borrower, &endpoint);
    fake.hold_conn = 2;
    CHECK_EQ(read_at(endpoint, 0), 0); /* lane 0 made */
    struct slow_read slow = {endpoint, 5000, -1};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, read_thread, &slow), 0); /* lane 1: held */
    pthread_mutex_lock(&fake.lock);
    while (!fake.holding)
        pthread_cond_wait(&fake.changed, &fake.lock);
    pthread_mutex_unlock(&fake.lock);
    CHECK_EQ(read_at(endpoint, 10000), 0); /* lane 0's turn */
    CHECK_EQ(read_at(endpoint, 20000), 0); /* lane 1's turn, being made: lane 0 */
    pthread_mutex_lock(&fake.lock);
    CHECK(fake.holding); /* both read while lane 1's offer was still held */
    CHECK_EQ(fake.ucx_reads, 3);
    fake.release = true;
    pthread_cond_broadcast(&fake.changed);
    pthread_mutex_unlock(&fake.lock);
    pthread_join(t, NULL);
    CHECK_EQ(slow.rc, 0);
    CHECK_EQ(read_at(endpoint, 30000), 0);
    pthread_mutex_lock(&fake.lock);
    CHECK_EQ(fake.sessions, 2);
    CHECK_EQ(fake.tcp_reads, 0);
    CHECK_EQ(fake.ucx_reads, 5);
    pthread_mutex_unlock(&fake.lock);
    CHECK(!larder__endpoint_down(endpoint));
    stop(borrower, endpoint);
}

/* Lane 1's control connection closes while READs wait on it: each of them
 * is read over TCP, byte-exact; lane 0 stays on UCX, and lane 1 is made
 * again at its next READ. */
TEST(ucx_peer_lane_closed_under_reads_costs_only_that_lane)
{
    struct larder__ucx *borrower;
    struct larder__endpoint *endpoint;
    start(&borrower, &endpoint);
    CHECK_EQ(read_at(endpoint, 0), 0);
    CHECK_EQ(read_at(endpoint, SIZE), 0); /* both lanes made */
    CHECK_EQ(counter(&fake.sessions), 2);
    pthread_mutex_lock(&fake.lock);
    fake.stall_conn = 2;
    pthread_mutex_unlock(&fake.lock);
    enum { THREADS = 8 };
    struct slow_read reads[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        reads[i] = (struct slow_read){endpoint, (uint64_t)(i + 2) * SIZE * 3 + 1, -1};
        CHECK_EQ(pthread_create(&threads[i], NULL, read_thread, &reads[i]), 0);
    }
    pthread_mutex_lock(&fake.lock);
    while (fake.stalled < 2) /* READs in flight on lane 1 */
        pthread_cond_wait(&fake.changed, &fake.lock);
    int stalled = fake.stalled;
    shutdown(fake.fds[2], SHUT_RDWR); /* lane 1's control connection, and its session, go */
    pthread_mutex_unlock(&fake.lock);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK_EQ(reads[i].rc, 0);
    }
    CHECK(counter(&fake.tcp_reads) >= stalled); /* those in flight on lane 1 went over TCP */
    CHECK(!larder__endpoint_down(endpoint));
    pthread_mutex_lock(&fake.lock);
    fake.stall_conn = 0;
    int ucx_before = fake.ucx_reads, tcp_before = fake.tcp_reads;
    pthread_mutex_unlock(&fake.lock);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(read_at(endpoint, 1000000 + (uint64_t)i * SIZE), 0);
    pthread_mutex_lock(&fake.lock);
    CHECK_EQ(fake.ucx_reads - ucx_before, 4); /* over UCX still, not TCP for a while */
    CHECK_EQ(fake.tcp_reads, tcp_before);
    CHECK_EQ(fake.sessions, 3); /* lane 1 made again */
    pthread_mutex_unlock(&fake.lock);
    stop(borrower, endpoint);
}

/* Lane 1's worker cannot start (UCX_TLS names no transport by then): the
 * peer is read over lane 0's path alone, with no second control
 * connection and session for the same worker. */
TEST(ucx_peer_lane_that_does_not_start_reuses_the_first)
{
    struct larder__ucx *borrower;
    struct larder__endpoint *endpoint;
    start(&borrower, &endpoint);
    const char *tls = getenv("UCX_TLS");
    char *saved = tls ? strdup(tls) : NULL;
    setenv("UCX_TLS", "no_such_transport", 1); /* read when lane 1 starts */
    for (int i = 0; i < 4; i++)
        CHECK_EQ(read_at(endpoint, (uint64_t)i * SIZE), 0);
    if (saved)
        setenv("UCX_TLS", saved, 1);
    else
        unsetenv("UCX_TLS");
    free(saved);
    pthread_mutex_lock(&fake.lock);
    CHECK_EQ(fake.accepted, 1);
    CHECK_EQ(fake.sessions, 1);
    CHECK_EQ(fake.ucx_reads, 4);
    CHECK_EQ(fake.tcp_reads, 0);
    pthread_mutex_unlock(&fake.lock);
    CHECK(!larder__endpoint_down(endpoint));
    stop(borrower, endpoint);
}
