/*
 * test_priority_plumbing.c - the class of a fetch (priority.h) reaches
 * the sources: the read engine's entry points read at the class they are
 * given (a blocked read at DEMAND, the prefetcher at NEAR), a peer source
 * puts the class in its READ frames, and its endpoint keeps DEMAND and
 * NEAR on other connections than HINTED and WARM.  The peer here is a
 * fake daemon of the test's own that reads the READ frame's bytes where
 * docs/protocol.md puts them (priority: byte 20 of the payload; 0 demand,
 * 1 near, 2 hinted, 3 warm), not through wire.c.
 */
#include "daemon_fixture.h"
#include "endpoint.h"
#include "endpoint_internal.h"
#include "fill.h"
#include "source.h"
#include "test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the engine's entry points ------------------------------------------------ */

/* A wrapper around each shard's origin that logs the class of every read. */
struct logged {
    struct larder__source base;
    struct larder__source *inner;
};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int class_log[256];
static int logged_reads;

static int logged_size(struct larder__source *s, uint64_t *size)
{
    return larder__source_size(((struct logged *)s)->inner, size);
}

static int logged_read(struct larder__source *s, const struct larder__extent *e, size_t n,
                       unsigned flags)
{
    pthread_mutex_lock(&log_lock);
    if (logged_reads < 256) class_log[logged_reads++] = larder__read_class(flags);
    pthread_mutex_unlock(&log_lock);
    return larder__source_readv(((struct logged *)s)->inner, e, n, flags);
}

static void logged_close(struct larder__source *s)
{
    larder__source_close(((struct logged *)s)->inner);
    free(s);
}

static const struct larder__source_ops logged_ops = {"logged", logged_size, logged_read, NULL,
                                                     logged_close};

static int wrap(void *context, uint32_t shard, struct larder__source *origin,
                struct larder__source **out)
{
    (void)context, (void)shard;
    struct logged *l = calloc(1, sizeof *l);
    CHECK(l != NULL);
    l->base = (struct larder__source){&logged_ops, "logged"};
    l->inner = origin;
    *out = &l->base;
    return 0;
}

/* The classes logged since the last call: their count, the first in *first. */
static int take_log(int *first)
{
    pthread_mutex_lock(&log_lock);
    int n = logged_reads;
    *first = n ? class_log[0] : -1;
    for (int i = 1; i < n; i++)
        CHECK_EQ(class_log[i], class_log[0]); /* one entry point, one class */
    logged_reads = 0;
    pthread_mutex_unlock(&log_lock);
    return n;
}

TEST(priority_reaches_the_source_from_every_entry_point)
{
    const char *index = fixture_dataset("ds", 60, 12 * 1024);
    larder_open_options oo = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = test_path("cache"), .max_inflight = 4};
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, index, &oo), 0);
    larder__dataset_set_source_wrapper(d, wrap, NULL);
    struct larder__fill *fill = larder__dataset_fill(d);
    CHECK(larder__dataset_num_shards(d) >= 6);
    uint8_t buf[8192];
    int first;

    CHECK_EQ(larder__fill_range_at(fill, 0, 0, 1000, LARDER__HINTED, buf), 0);
    CHECK(take_log(&first) >= 1);
    CHECK_EQ(first, LARDER__HINTED);
    int fd = -1;
    CHECK(larder__fill_stage_range_at(fill, 1, 0, 1000, LARDER__WARM, &fd) >= 0);
    CHECK(take_log(&first) >= 1);
    CHECK_EQ(first, LARDER__WARM);
    CHECK_EQ(larder__fill_range(fill, 2, 0, 1000, buf), 0); /* the plain entry point: DEMAND */
    CHECK(take_log(&first) >= 1);
    CHECK_EQ(first, LARDER__DEMAND);
    /* a sample of shard 3 staged at NEAR, one of shard 4 read by a blocked reader */
    uint64_t near_id = UINT64_MAX, demand_id = UINT64_MAX;
    for (uint64_t id = 0; id < 60; id++) {
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(d, id, &s), 0);
        if (s.shard == 3 && near_id == UINT64_MAX) near_id = id;
        if (s.shard == 4 && demand_id == UINT64_MAX) demand_id = id;
    }
    CHECK(near_id != UINT64_MAX && demand_id != UINT64_MAX);
    CHECK_EQ(larder__fill_stage_at(fill, near_id, LARDER__NEAR), 0);
    CHECK(take_log(&first) >= 1);
    CHECK_EQ(first, LARDER__NEAR);
    CHECK(larder_read_sample(d, demand_id, buf, sizeof buf) > 0);
    CHECK(take_log(&first) >= 1);
    CHECK_EQ(first, LARDER__DEMAND);
    /* cached already: no read at any class */
    CHECK_EQ(larder__fill_range_at(fill, 0, 0, 1000, LARDER__WARM, buf), 0);
    CHECK_EQ(take_log(&first), 0);

    /* the prefetcher stages the plan at NEAR */
    larder_plan_options po = {.version = LARDER_PLAN_OPTIONS_VERSION, .seed = 5, .global_batch = 4};
    larder_plan *plan;
    CHECK_EQ(larder_plan_create(&plan, d, &po), 0);
    larder_prefetch_options fo = {.version = LARDER_PREFETCH_OPTIONS_VERSION, .window_steps = 4};
    larder_prefetch *pf;
    CHECK_EQ(larder_prefetch_start(&pf, d, plan, &fo), 0);
    uint64_t fills = 0;
    for (int spins = 0; fills < 8 && spins < 20000; spins++) {
        CHECK_EQ(larder_prefetch_stats_get(pf, &fills, NULL), 0);
        usleep(1000);
    }
    larder_prefetch_stop(pf);
    CHECK(fills > 0);
    CHECK(take_log(&first) >= 1);
    CHECK_EQ(first, LARDER__NEAR);
    larder_plan_destroy(plan);
    larder_close(d);
}

/* ---- a peer's READ frames --------------------------------------------------------- */

struct fake_peer {
    int listener, port;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool hold;          /* READs wait to be answered until released... */
    uint64_t hold_only; /* ...only those at this offset, when nonzero */
    bool progress;      /* while holding one, a PROGRESS frame every 50 ms */
    int accepted;
    int stage; /* to a STAGE READ: 0 the bytes, 1 an empty DATA, 2 a close (a daemon from before it)
                */
    int priority[32], connection[32], flags[32]; /* of each READ, in order */
    int reads;
};

struct peer_connection {
    struct fake_peer *peer;
    int fd, number;
};

/* One connection: WELCOME to HELLO (no secret); to a READ, a DATA of the asked length. */
static void *serve_connection(void *arg)
{
    struct peer_connection *pc = arg;
    uint8_t header[24], payload[256];
    while (test_recv_exact(pc->fd, header, 24)) {
        uint8_t type = header[5];
        uint32_t length = larder__le32(header + 8);
        uint64_t request = larder__le64(header + 16);
        if (length > sizeof payload || !test_recv_exact(pc->fd, payload, length)) break;
        if (type == LARDER__HELLO) {
            struct larder__welcome w = {
                .auth = LARDER__AUTH_NONE, .name_length = 4, .name = "fake"};
            uint8_t frame[512];
            int n = larder__wire_encode_welcome(frame, sizeof frame, request, &w);
            CHECK(n > 0 && send(pc->fd, frame, (size_t)n, MSG_NOSIGNAL) == n);
        } else if (type == LARDER__READ && length == 40) {
            pthread_mutex_lock(&pc->peer->lock);
            int i = pc->peer->reads++;
            if (i < 32) {
                pc->peer->priority[i] = payload[20];
                pc->peer->connection[i] = pc->number;
                pc->peer->flags[i] = payload[21];
            }
            int stage = payload[21] & LARDER__READ_STAGE ? pc->peer->stage : 0;
            pthread_cond_broadcast(&pc->peer->changed);
            uint64_t offset = larder__le64(payload + 24);
            while (pc->peer->hold && (!pc->peer->hold_only || offset == pc->peer->hold_only)) {
                if (!pc->peer->progress) {
                    pthread_cond_wait(&pc->peer->changed, &pc->peer->lock);
                    continue;
                }
                struct timespec at;
                clock_gettime(CLOCK_REALTIME, &at);
                at.tv_nsec += 50 * 1000000L;
                if (at.tv_nsec >= 1000000000L) at.tv_sec++, at.tv_nsec -= 1000000000L;
                if (pthread_cond_timedwait(&pc->peer->changed, &pc->peer->lock, &at) != ETIMEDOUT)
                    continue;
                uint8_t progress[24]; /* docs/protocol.md: no payload, request 0 */
                larder__wire_encode_header(progress, 24, LARDER__PROGRESS, 0, 0);
                CHECK(send(pc->fd, progress, 24, MSG_NOSIGNAL) == 24);
            }
            pthread_mutex_unlock(&pc->peer->lock);
            if (stage == 2) break; /* malformed to it: closed */
            uint64_t asked = stage == 1 ? 0 : larder__le64(payload + 32);
            uint8_t frame[24 + 4096];
            CHECK(asked <= 4096);
            larder__wire_encode_header(frame, 24, LARDER__DATA, (uint32_t)asked, request);
            memset(frame + 24, 'a' + payload[20], (size_t)asked);
            if (send(pc->fd, frame, 24 + asked, MSG_NOSIGNAL) != (ssize_t)(24 + asked))
                break; /* the client gave up on it (a timeout) */
        } else {
            break;
        }
    }
    close(pc->fd);
    free(pc);
    return NULL;
}

static void *accept_loop(void *arg)
{
    struct fake_peer *peer = arg;
    int fd;
    while ((fd = accept(peer->listener, NULL, NULL)) >= 0) {
        struct peer_connection *pc = malloc(sizeof *pc);
        CHECK(pc != NULL);
        pthread_mutex_lock(&peer->lock);
        *pc = (struct peer_connection){peer, fd, ++peer->accepted};
        pthread_mutex_unlock(&peer->lock);
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, serve_connection, pc), 0);
        pthread_detach(t);
    }
    return NULL;
}

/* A fake peer listening on loopback, its address in `address`. */
static void fake_peer_start(struct fake_peer *peer, char *address, size_t size)
{
    pthread_mutex_init(&peer->lock, NULL);
    pthread_cond_init(&peer->changed, NULL);
    peer->listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof a;
    CHECK(bind(peer->listener, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(peer->listener, 16) == 0);
    CHECK(getsockname(peer->listener, (struct sockaddr *)&a, &length) == 0);
    pthread_t acceptor;
    CHECK_EQ(pthread_create(&acceptor, NULL, accept_loop, peer), 0);
    pthread_detach(acceptor);
    snprintf(address, size, "127.0.0.1:%u", ntohs(a.sin_port));
}

TEST(priority_travels_in_a_peer_read_on_its_own_connections)
{
    static struct fake_peer peer;
    char address[64];
    fake_peer_start(&peer, address, sizeof address);
    struct larder__endpoint *endpoint;
    CHECK_EQ(larder__endpoint_new(&endpoint, address, LARDER__ROLE_PEER, NULL, NULL, 5000), 0);
    struct larder__source *source;
    CHECK_EQ(larder__source_peer_open(&source, endpoint, 1, 2, 7), 0);
    int order[] = {LARDER__HINTED, LARDER__DEMAND, LARDER__WARM, LARDER__NEAR, LARDER__DEMAND};
    char buf[100];
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(larder__source_read(source, buf, sizeof buf, 0, larder__read_at(order[i])),
                 LARDER__FROM_PEER);
        CHECK(buf[0] == 'a' + order[i] && buf[99] == 'a' + order[i]);
    }
    /* the protocol's numbers, in the order asked */
    int want_priority[] = {2, 0, 3, 1, 0};
    /* HINTED opened the first connection; DEMAND did not take it from the
     * pool but opened its own; WARM went back to the first, NEAR and
     * DEMAND to the second */
    int want_connection[] = {1, 2, 1, 2, 2};
    pthread_mutex_lock(&peer.lock);
    CHECK_EQ(peer.reads, 5);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(peer.priority[i], want_priority[i]);
        CHECK_EQ(peer.connection[i], want_connection[i]);
    }
    CHECK_EQ(peer.accepted, 2);
    pthread_mutex_unlock(&peer.lock);
    larder__source_close(source);
    larder__endpoint_free(endpoint);
    shutdown(peer.listener, SHUT_RDWR);
    close(peer.listener);
}

/* Connect-ahead (larderd's connect_ahead.c): larder__endpoint_prepare pools
 * DEMAND and NEAR connections up to its count, which the next READs of
 * those classes take (the fake peer counts what it accepts); HINTED keeps
 * to its own connections; a member that refuses is not marked down. */
TEST(endpoint_prepare_pools_connections_that_reads_take)
{
    static struct fake_peer peer;
    char address[64];
    fake_peer_start(&peer, address, sizeof address);
    struct larder__endpoint *endpoint;
    CHECK_EQ(larder__endpoint_new(&endpoint, address, LARDER__ROLE_PEER, NULL, NULL, 5000), 0);
    CHECK_EQ(larder__endpoint_prepare(endpoint, 2, larder__endpoint_now_ms() + 5000, NULL), 2);
    pthread_mutex_lock(&peer.lock);
    CHECK_EQ(peer.accepted, 2); /* each greeted before prepare returned */
    pthread_mutex_unlock(&peer.lock);
    CHECK_EQ(larder__endpoint_prepare(endpoint, 2, larder__endpoint_now_ms() + 5000, NULL),
             0); /* two pooled already */
    struct larder__source *source;
    CHECK_EQ(larder__source_peer_open(&source, endpoint, 1, 2, 7), 0);
    char buf[100];
    int order[] = {LARDER__DEMAND, LARDER__NEAR, LARDER__DEMAND, LARDER__HINTED};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(larder__source_read(source, buf, sizeof buf, 0, larder__read_at(order[i])),
                 LARDER__FROM_PEER);
    pthread_mutex_lock(&peer.lock);
    CHECK_EQ(peer.reads, 4);
    for (int i = 0; i < 3; i++) /* the foreground READs on connections made ahead */
        CHECK(peer.connection[i] == 1 || peer.connection[i] == 2);
    CHECK_EQ(peer.connection[3], 3); /* HINTED: never a foreground connection */
    CHECK_EQ(peer.accepted, 3);
    pthread_mutex_unlock(&peer.lock);
    larder__source_close(source);
    larder__endpoint_free(endpoint);
    shutdown(peer.listener, SHUT_RDWR);
    close(peer.listener);

    /* a refusing address: the failure, and the endpoint still up */
    int closed = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof a;
    CHECK(bind(closed, (struct sockaddr *)&a, sizeof a) == 0); /* bound, never listening */
    CHECK(getsockname(closed, (struct sockaddr *)&a, &length) == 0);
    snprintf(address, sizeof address, "127.0.0.1:%u", ntohs(a.sin_port));
    CHECK_EQ(larder__endpoint_new(&endpoint, address, LARDER__ROLE_PEER, NULL, NULL, 5000), 0);
    CHECK(larder__endpoint_prepare(endpoint, 2, larder__endpoint_now_ms() + 5000, NULL) < 0);
    CHECK(!larder__endpoint_down(endpoint));
    larder__endpoint_free(endpoint);
    close(closed);
}

struct held_read {
    struct larder__source *source;
    int priority, rc;
    char buf[100];
};

static void *read_thread(void *arg)
{
    struct held_read *r = arg;
    r->rc = larder__source_read(r->source, r->buf, sizeof r->buf, 0, larder__read_at(r->priority));
    return NULL;
}

static void *held_read_at_4096(void *arg)
{
    struct held_read *r = arg;
    r->rc =
        larder__source_read(r->source, r->buf, sizeof r->buf, 4096, larder__read_at(r->priority));
    return NULL;
}

/* Hold the peer's answers; read at `priority` on another thread; once the
 * peer has the READ, wait 3 times the endpoint's timeout; release. */
static int held_read(struct fake_peer *peer, struct larder__source *source, int priority)
{
    pthread_mutex_lock(&peer->lock);
    peer->hold = true;
    int before = peer->reads;
    pthread_mutex_unlock(&peer->lock);
    struct held_read r = {.source = source, .priority = priority};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, read_thread, &r), 0);
    pthread_mutex_lock(&peer->lock);
    while (peer->reads == before)
        pthread_cond_wait(&peer->changed, &peer->lock);
    pthread_mutex_unlock(&peer->lock);
    usleep(600 * 1000);
    pthread_mutex_lock(&peer->lock);
    peer->hold = false;
    pthread_cond_broadcast(&peer->changed);
    pthread_mutex_unlock(&peer->lock);
    pthread_join(t, NULL);
    if (r.rc >= 0) CHECK(r.buf[0] == 'a' + priority);
    return r.rc;
}

TEST(priority_lower_classes_wait_longer_for_a_busy_peer)
{
    /* an owner that queues a HINTED READ behind its own readers for longer
     * than the endpoint's timeout is busy, not dead: the read waits for
     * its answer and the owner is not passed over; a DEMAND READ held as
     * long times out and marks the endpoint down, as before */
    static struct fake_peer peer;
    char address[64];
    fake_peer_start(&peer, address, sizeof address);
    struct larder__endpoint *endpoint;
    CHECK_EQ(larder__endpoint_new(&endpoint, address, LARDER__ROLE_PEER, NULL, NULL, 200), 0);
    struct larder__source *source;
    CHECK_EQ(larder__source_peer_open(&source, endpoint, 1, 2, 7), 0);
    CHECK_EQ(held_read(&peer, source, LARDER__HINTED), LARDER__FROM_PEER);
    CHECK(!larder__endpoint_down(endpoint));
    CHECK_EQ(held_read(&peer, source, LARDER__WARM), LARDER__FROM_PEER);
    CHECK(!larder__endpoint_down(endpoint));
    CHECK_EQ(held_read(&peer, source, LARDER__DEMAND), -ETIMEDOUT);
    CHECK(larder__endpoint_down(endpoint));
    larder__source_close(source);
    larder__endpoint_free(endpoint);
    shutdown(peer.listener, SHUT_RDWR);
    close(peer.listener);
}

/* A DEMAND READ whose answer is late waits on while the same member
 * answers other READs (busy, not hung: reading the origin instead would
 * cost it a second copy in a restart storm); with nothing answered for the
 * endpoint's timeout it is given up on (the test above). */
TEST(priority_demand_waits_on_a_peer_that_answers_others)
{
    static struct fake_peer peer;
    char address[64];
    fake_peer_start(&peer, address, sizeof address);
    struct larder__endpoint *endpoint;
    CHECK_EQ(larder__endpoint_new(&endpoint, address, LARDER__ROLE_PEER, NULL, NULL, 200), 0);
    struct larder__source *source;
    CHECK_EQ(larder__source_peer_open(&source, endpoint, 1, 2, 7), 0);
    pthread_mutex_lock(&peer.lock);
    peer.hold = true, peer.hold_only = 4096;
    pthread_mutex_unlock(&peer.lock);
    struct held_read r = {.source = source, .priority = LARDER__DEMAND};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, held_read_at_4096, &r), 0);
    /* 1 s (5 timeouts) of other READs answered meanwhile */
    char buf[100];
    for (int i = 0; i < 20; i++) {
        CHECK_EQ(larder__source_read(source, buf, sizeof buf, 0, 0), LARDER__FROM_PEER);
        usleep(50 * 1000);
    }
    pthread_mutex_lock(&peer.lock);
    peer.hold = false;
    pthread_cond_broadcast(&peer.changed);
    pthread_mutex_unlock(&peer.lock);
    pthread_join(t, NULL);
    CHECK_EQ(r.rc, LARDER__FROM_PEER);
    CHECK(r.buf[0] == 'a' + LARDER__DEMAND);
    CHECK(!larder__endpoint_down(endpoint));
    larder__source_close(source);
    larder__endpoint_free(endpoint);
    shutdown(peer.listener, SHUT_RDWR);
    close(peer.listener);
}

/* A DEMAND READ that the member holds for 3 times the endpoint's timeout
 * while sending PROGRESS for it (its origin is slow) is waited for: the
 * member is not passed over and nothing is read elsewhere.  The same hold
 * without PROGRESS gives up and marks the member down (above). */
TEST(priority_demand_waits_on_a_peer_that_sends_progress)
{
    static struct fake_peer peer;
    char address[64];
    fake_peer_start(&peer, address, sizeof address);
    struct larder__endpoint *endpoint;
    CHECK_EQ(larder__endpoint_new(&endpoint, address, LARDER__ROLE_PEER, NULL, NULL, 200), 0);
    struct larder__source *source;
    CHECK_EQ(larder__source_peer_open(&source, endpoint, 1, 2, 7), 0);
    pthread_mutex_lock(&peer.lock);
    peer.progress = true;
    pthread_mutex_unlock(&peer.lock);
    CHECK_EQ(held_read(&peer, source, LARDER__DEMAND), LARDER__FROM_PEER);
    CHECK(!larder__endpoint_down(endpoint));
    /* and the connection is in step after it: the next READ is answered */
    char buf[100];
    CHECK_EQ(larder__source_read(source, buf, sizeof buf, 0, 0), LARDER__FROM_PEER);
    pthread_mutex_lock(&peer.lock);
    peer.progress = false;
    pthread_mutex_unlock(&peer.lock);
    CHECK_EQ(held_read(&peer, source, LARDER__DEMAND), -ETIMEDOUT); /* silent: given up on */
    CHECK(larder__endpoint_down(endpoint));
    larder__source_close(source);
    larder__endpoint_free(endpoint);
    shutdown(peer.listener, SHUT_RDWR);
    close(peer.listener);
}

/* A listener that accepts once and then sends one byte every 50 ms, each
 * well inside any socket timeout, never a whole frame header: how many it
 * sent before the other end closed. */
struct trickler {
    int listener, sent;
};

static void *trickle(void *arg)
{
    struct trickler *t = arg;
    int fd = accept(t->listener, NULL, NULL);
    if (fd < 0) return NULL;
    char hello[256];
    if (recv(fd, hello, sizeof hello, 0) <= 0) { /* the HELLO, then a byte at a time */
        close(fd);
        return NULL;
    }
    while (send(fd, "\1", 1, MSG_NOSIGNAL) == 1) {
        __atomic_add_fetch(&t->sent, 1, __ATOMIC_RELAXED);
        usleep(50 * 1000);
    }
    close(fd);
    return NULL;
}

/* Connect-ahead's deadline is one for the whole connect, however slowly
 * the member answers: a WELCOME trickled in a byte at a time is given up
 * on at the deadline (a few bytes in), not read on byte after byte (a
 * 24-byte header, then a frame that never comes); and a stop flag set
 * makes prepare connect nothing. */
TEST(endpoint_prepare_gives_up_on_a_trickling_member_by_its_deadline)
{
    static struct trickler t;
    t.listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof a;
    CHECK(bind(t.listener, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(t.listener, 4) == 0);
    CHECK(getsockname(t.listener, (struct sockaddr *)&a, &length) == 0);
    char address[64];
    snprintf(address, sizeof address, "127.0.0.1:%u", ntohs(a.sin_port));
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, trickle, &t), 0);
    struct larder__endpoint *endpoint;
    CHECK_EQ(larder__endpoint_new(&endpoint, address, LARDER__ROLE_PEER, NULL, NULL, 5000), 0);
    volatile sig_atomic_t stop = 1;
    CHECK_EQ(larder__endpoint_prepare(endpoint, 2, larder__endpoint_now_ms() + 5000, &stop), 0);
    stop = 0;
    CHECK_EQ(larder__endpoint_prepare(endpoint, 2, larder__endpoint_now_ms() + 300, &stop),
             -ETIMEDOUT);
    CHECK(!larder__endpoint_down(endpoint));
    larder__endpoint_free(endpoint);
    pthread_join(thread, NULL); /* its sends fail once the connection is closed */
    int sent = __atomic_load_n(&t.sent, __ATOMIC_RELAXED);
    CHECK(sent < LARDER__WIRE_HEADER); /* never a whole header: the deadline, not a parse */
    close(t.listener);
}

/* A reader's STAGE READ (file.c, the mount's staging): 1 for an empty
 * DATA (the bytes are in the cache), 0 with the bytes when the daemon
 * sends them; a daemon from before the flag closes the connection on it,
 * and is then asked without it, at once and from then on, and not marked
 * down. */
TEST(endpoint_stage_read_and_a_daemon_from_before_it)
{
    static struct fake_peer peer;
    char address[64];
    fake_peer_start(&peer, address, sizeof address);
    struct larder__endpoint *e;
    CHECK_EQ(larder__endpoint_new(&e, address, LARDER__ROLE_READER, NULL, NULL, 5000), 0);
    uint8_t buf[100];
    memset(buf, 0, sizeof buf);
    peer.stage = 1;
    CHECK_EQ(
        larder__endpoint_read_flagged(e, 1, 2, 0, LARDER__DEMAND, LARDER__READ_STAGE, 0, 100, buf),
        1);
    CHECK_EQ(buf[0], 0); /* nothing came */
    CHECK_EQ(peer.flags[0], LARDER__READ_STAGE);
    peer.stage = 0; /* one that could not cache them sends them */
    CHECK_EQ(
        larder__endpoint_read_flagged(e, 1, 2, 0, LARDER__DEMAND, LARDER__READ_STAGE, 0, 100, buf),
        0);
    CHECK(buf[0] == 'a' && buf[99] == 'a');
    peer.stage = 2; /* from before it: closes, then takes the plain READ */
    memset(buf, 0, sizeof buf);
    CHECK_EQ(
        larder__endpoint_read_flagged(e, 1, 2, 0, LARDER__DEMAND, LARDER__READ_STAGE, 0, 100, buf),
        0);
    CHECK(buf[0] == 'a' && buf[99] == 'a');
    CHECK(!larder__endpoint_down(e));
    CHECK_EQ(
        larder__endpoint_read_flagged(e, 1, 2, 0, LARDER__DEMAND, LARDER__READ_STAGE, 0, 100, buf),
        0);
    pthread_mutex_lock(&peer.lock);
    int reads = peer.reads;
    int flags[32];
    memcpy(flags, peer.flags, sizeof flags);
    pthread_mutex_unlock(&peer.lock);
    /* 0 staged, 1 sent; then the pooled connection closed on STAGE, a
     * fresh one closed on it too, the plain READ; and plain from then on */
    CHECK_EQ(reads, 6);
    CHECK(flags[2] == LARDER__READ_STAGE && flags[3] == LARDER__READ_STAGE);
    CHECK(flags[4] == 0 && flags[5] == 0);
    larder__endpoint_free(e);
}
