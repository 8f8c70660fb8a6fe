/*
 * test_transport_ucx.c - the UCX data path's two ends (transport_ucx.h) in
 * one process: a "daemon" hub serving READs with bytes the test computes
 * itself (a formula of the offset), and a "borrower" hub reading them
 * through a link.  A link whose token names no session gets nothing and
 * the daemon's READ handler is never called; a freed session's token
 * stops working; an error answer arrives as the daemon's code.
 * Skipped when UCX has no usable transport here.
 */
#include "test.h"

#include "transport_ucx.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int served;      /* READs the daemon side was handed */
static int answer_code; /* 0: bytes; else this error */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint8_t pattern(uint64_t at)
{
    return (uint8_t)((at * 7 + 3) % 251);
}

/* The daemon's side: answers on the progress thread (the hub sends from
 * there without waiting). */
static void serve(void *owner, struct larder__ucx_session *s, uint64_t request,
                  const struct larder__read *read)
{
    (void)owner;
    __atomic_add_fetch(&served, 1, __ATOMIC_RELAXED);
    if (answer_code) {
        larder__ucx_answer(s, request, answer_code, "no such shard", 13);
        return;
    }
    uint8_t *bytes = malloc(read->length);
    for (uint64_t i = 0; i < read->length; i++)
        bytes[i] = pattern(read->offset + i);
    larder__ucx_answer(s, request, 0, bytes, read->length);
    free(bytes);
}

static void start_pair(struct larder__ucx **daemon, struct larder__ucx **borrower)
{
    served = 0;
    answer_code = 0;
    if (larder__ucx_start(daemon) < 0) SKIP("UCX has no usable transport here");
    if (larder__ucx_start(borrower) < 0) SKIP("UCX has no usable transport here");
    larder__ucx_serve(*daemon, serve);
}

/* A session for the borrower's worker on the daemon, and a link with its token. */
static void connect_pair(struct larder__ucx *daemon, struct larder__ucx *borrower,
                         struct larder__ucx_session **session, struct larder__ucx_link **link)
{
    const void *address;
    size_t length;
    uint8_t token[LARDER__UCX_TOKEN];
    larder__ucx_address(borrower, &address, &length);
    CHECK_EQ(larder__ucx_session_new(daemon, NULL, address, length, token, session), 0);
    larder__ucx_address(daemon, &address, &length);
    CHECK_EQ(larder__ucx_link_new(borrower, address, length, token, link), 0);
}

static int read_range(struct larder__ucx_link *link, uint64_t offset, uint64_t length, uint8_t *buf,
                      int wait_ms, bool *fault)
{
    struct larder__read read = {
        .id_low = 1, .id_high = 2, .shard = 3, .offset = offset, .length = length};
    return larder__ucx_link_read(link, &read, buf, wait_ms, wait_ms, fault);
}

TEST(ucx_session_token_reads_bytes_small_and_rendezvous)
{
    struct larder__ucx *daemon, *borrower;
    start_pair(&daemon, &borrower);
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    connect_pair(daemon, borrower, &session, &link);
    /* 100 bytes (eager) and 3 MiB + 5 (rendezvous on every transport) */
    uint64_t sizes[] = {100, (3u << 20) + 5};
    for (int k = 0; k < 2; k++) {
        uint8_t *buf = malloc(sizes[k]);
        memset(buf, 0, sizes[k]);
        bool fault = true;
        CHECK_EQ(read_range(link, 1000 + k, sizes[k], buf, 10000, &fault), 0);
        CHECK(!fault);
        for (uint64_t i = 0; i < sizes[k]; i++)
            if (buf[i] != pattern(1000 + k + i)) CHECK(!"the bytes differ from the formula");
        free(buf);
    }
    CHECK_EQ(served, 2);
    larder__ucx_link_free(link);
    larder__ucx_session_free(session);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
}

TEST(ucx_wrong_or_forgotten_token_gets_nothing)
{
    struct larder__ucx *daemon, *borrower;
    start_pair(&daemon, &borrower);
    const void *address;
    size_t length;
    larder__ucx_address(daemon, &address, &length);
    /* a worker that never authenticated: a token of its own making */
    uint8_t made_up[LARDER__UCX_TOKEN];
    for (int i = 0; i < LARDER__UCX_TOKEN; i++)
        made_up[i] = (uint8_t)(i * 13 + 1);
    struct larder__ucx_link *stranger;
    CHECK_EQ(larder__ucx_link_new(borrower, address, length, made_up, &stranger), 0);
    uint8_t buf[64];
    bool fault = false;
    CHECK_EQ(read_range(stranger, 0, sizeof buf, buf, 700, &fault), -ETIMEDOUT);
    CHECK(fault);
    CHECK_EQ(served, 0);
    /* a real session, then forgotten (its connection dropped): nothing more */
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    connect_pair(daemon, borrower, &session, &link);
    CHECK_EQ(read_range(link, 0, sizeof buf, buf, 10000, &fault), 0);
    CHECK_EQ(served, 1);
    larder__ucx_session_free(session);
    CHECK_EQ(read_range(link, 0, sizeof buf, buf, 700, &fault), -ETIMEDOUT);
    CHECK_EQ(served, 1);
    larder__ucx_link_free(stranger);
    larder__ucx_link_free(link);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
}

TEST(ucx_error_answer_is_the_daemons_code)
{
    struct larder__ucx *daemon, *borrower;
    start_pair(&daemon, &borrower);
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    connect_pair(daemon, borrower, &session, &link);
    answer_code = LARDER_ENOTFOUND;
    uint8_t buf[64];
    bool fault = true;
    CHECK_EQ(read_range(link, 0, sizeof buf, buf, 10000, &fault), LARDER_ENOTFOUND);
    CHECK(!fault); /* an answer, not the link's failure */
    CHECK(strstr(larder_errmsg(), "no such shard") != NULL);
    larder__ucx_link_free(link);
    larder__ucx_session_free(session);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
}

struct reader_arg {
    struct larder__ucx_link *link;
    int index;
    int bad; /* READs failed or not byte-exact */
};

/* 40 READs of 256 KiB + index at offsets of its own, each checked whole. */
static void *read_many(void *arg)
{
    struct reader_arg *r = arg;
    uint64_t length = (256u << 10) + (uint64_t)r->index;
    uint8_t *buf = malloc(length);
    for (int i = 0; i < 40; i++) {
        uint64_t offset = (uint64_t)r->index * 1000003u + (uint64_t)i * 7919u;
        memset(buf, 0, length);
        bool fault = false;
        if (read_range(r->link, offset, length, buf, 20000, &fault) != 0) {
            r->bad++;
            continue;
        }
        for (uint64_t k = 0; k < length; k++)
            if (buf[k] != pattern(offset + k)) {
                r->bad++;
                break;
            }
    }
    free(buf);
    return NULL;
}

/* 16 threads reading at once over one link: while the progress thread
 * holds the worker pulling answers in, their READs are queued for it to
 * post (transport_ucx_link.c's outbox); every READ is answered, each with
 * its own bytes (the formula at its own offset and length). */
TEST(ucx_many_readers_at_once_each_get_their_own_bytes)
{
    struct larder__ucx *daemon, *borrower;
    start_pair(&daemon, &borrower);
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    connect_pair(daemon, borrower, &session, &link);
    enum { READERS = 16 };
    pthread_t threads[READERS];
    struct reader_arg args[READERS];
    for (int i = 0; i < READERS; i++) {
        args[i] = (struct reader_arg){.link = link, .index = i};
        CHECK_EQ(pthread_create(&threads[i], NULL, read_many, &args[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < READERS; i++) {
        pthread_join(threads[i], NULL);
        bad += args[i].bad;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(served, READERS * 40);
    larder__ucx_link_free(link);
    larder__ucx_session_free(session);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
}

/* A stopping daemon (larder__ucx_quiesce) refuses every READ from then on
 * with -ESHUTDOWN, which the borrower takes as the path's failure (it goes
 * over TCP), and its READ handler is not called again. */
TEST(ucx_quiesced_hub_refuses_reads_as_a_fault)
{
    struct larder__ucx *daemon, *borrower;
    start_pair(&daemon, &borrower);
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    connect_pair(daemon, borrower, &session, &link);
    uint8_t buf[64];
    bool fault = true;
    CHECK_EQ(read_range(link, 0, sizeof buf, buf, 10000, &fault), 0);
    CHECK_EQ(served, 1);
    int64_t started = now_ms();
    CHECK_EQ(larder__ucx_quiesce(daemon), 0); /* nothing was in flight */
    /* it waited for 50 ms without a READ, not for its 3 s bound */
    CHECK(now_ms() - started < 2000);
    for (int i = 0; i < 3; i++) {
        fault = false;
        CHECK_EQ(read_range(link, 0, sizeof buf, buf, 10000, &fault), -ESHUTDOWN);
        CHECK(fault);
        CHECK(strstr(larder_errmsg(), "the daemon is stopping") != NULL);
    }
    CHECK_EQ(served, 1);
    larder__ucx_link_free(link);
    larder__ucx_session_free(session);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
}

static void serve_nothing(void *owner, struct larder__ucx_session *s, uint64_t request,
                          const struct larder__read *read)
{
    (void)owner, (void)s, (void)request, (void)read;
    __atomic_add_fetch(&served, 1, __ATOMIC_RELAXED);
}

struct hang_up {
    int fd;
    int after_ms;
};

static void *hang_up_later(void *arg)
{
    struct hang_up *h = arg;
    usleep((useconds_t)h->after_ms * 1000);
    close(h->fd);
    return NULL;
}

/* A READ waiting on a link whose control connection closes (the daemon
 * stopped or died: over shared memory UCX cannot tell) fails as a fault
 * within a few hundred ms of the close, not at its 20 s wait. */
TEST(ucx_link_read_fails_when_its_control_connection_closes)
{
    struct larder__ucx *daemon, *borrower;
    start_pair(&daemon, &borrower);
    larder__ucx_serve(daemon, serve_nothing); /* the READ is never answered */
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    connect_pair(daemon, borrower, &session, &link);
    int pair[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    larder__ucx_link_watch(link, pair[0]);
    struct hang_up h = {.fd = pair[1], .after_ms = 300};
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, hang_up_later, &h), 0);
    uint8_t buf[64];
    bool fault = false;
    int64_t started = now_ms();
    CHECK_EQ(read_range(link, 0, sizeof buf, buf, 20000, &fault), -ECONNRESET);
    int64_t took = now_ms() - started;
    CHECK(fault);
    CHECK(took >= 250); /* not before the close */
    CHECK(took < 5000); /* its wait was 20 s */
    CHECK_EQ(served, 1);
    pthread_join(thread, NULL);
    close(pair[0]);
    larder__ucx_link_free(link);
    larder__ucx_session_free(session);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
}

/* Borrowers that come, read and go (their workers stopped: each endpoint
 * the daemon made to one fails): the daemon keeps no endpoint to any of
 * them once their sessions are gone, so a peer that keeps failing cannot
 * fill the hub's list (4096 endpoints at most).  Over a transport that
 * reports a peer's failure (tcp; shared memory does not, so the test
 * asks UCX for tcp). */
TEST(ucx_failed_endpoints_are_removed)
{
    const char *tls = getenv("UCX_TLS");
    char saved[256] = "";
    if (tls) snprintf(saved, sizeof saved, "%s", tls);
    setenv("UCX_TLS", "tcp", 1);
    struct larder__ucx *daemon, *borrower;
    start_pair(&daemon, &borrower);
    larder__ucx_stop(borrower);
    for (int round = 0; round < 3; round++) {
        if (larder__ucx_start(&borrower) < 0) SKIP("UCX has no usable transport here");
        struct larder__ucx_session *session;
        struct larder__ucx_link *link;
        connect_pair(daemon, borrower, &session, &link);
        uint8_t buf[64];
        bool fault = true;
        CHECK_EQ(read_range(link, 0, sizeof buf, buf, 10000, &fault), 0);
        CHECK_EQ(larder__ucx_num_conns(daemon), 1);
        larder__ucx_link_free(link);
        larder__ucx_stop(borrower); /* the borrower's worker is gone */
        larder__ucx_session_free(session);
        int64_t waited = 0;
        while (larder__ucx_num_conns(daemon) > 0 && waited < 15000) {
            usleep(10000);
            waited += 10;
        }
        fprintf(stderr, "    round %d: the endpoint went after %lld ms\n", round,
                (long long)waited);
        CHECK_EQ(larder__ucx_num_conns(daemon), 0);
    }
    larder__ucx_stop(daemon);
    if (tls)
        setenv("UCX_TLS", saved, 1);
    else
        unsetenv("UCX_TLS");
}

/* Borrowers whose sessions ended but whose workers live on (shared memory
 * never reports a peer gone): with the list full (2 here, for the test),
 * the endpoints nobody holds are closed to make room for a new borrower,
 * which reads as usual. */
TEST(ucx_full_list_makes_room_from_idle_endpoints)
{
    struct larder__ucx *daemon, *borrower[3];
    start_pair(&daemon, &borrower[0]);
    larder__ucx_set_max_conns(daemon, 2);
    for (int k = 0; k < 3; k++) {
        if (k > 0 && larder__ucx_start(&borrower[k]) < 0) SKIP("UCX has no usable transport here");
        struct larder__ucx_session *session;
        struct larder__ucx_link *link;
        connect_pair(daemon, borrower[k], &session, &link);
        uint8_t buf[64];
        bool fault = true;
        CHECK_EQ(read_range(link, 64 * k, sizeof buf, buf, 10000, &fault), 0);
        for (size_t i = 0; i < sizeof buf; i++)
            CHECK_EQ(buf[i], pattern(64 * k + i));
        CHECK(larder__ucx_num_conns(daemon) <= 2);
        larder__ucx_link_free(link);
        larder__ucx_session_free(session); /* its endpoint stays, idle */
    }
    CHECK_EQ(served, 3);
    for (int k = 0; k < 3; k++)
        larder__ucx_stop(borrower[k]);
    larder__ucx_stop(daemon);
}

/* A worker that reached the borrower's (another member it offered a path
 * to) sends ANSWERs with ids it guesses, 1 to 256, on its own endpoint.
 * The borrower's READ to the daemon, which never answers, must not take
 * any of them: ids were sequential, and the first such ANSWER completed
 * it with the other worker's bytes (found by review). */
static void serve_never(void *owner, struct larder__ucx_session *s, uint64_t request,
                        const struct larder__read *read)
{
    (void)owner, (void)s, (void)request, (void)read;
    __atomic_add_fetch(&served, 1, __ATOMIC_RELAXED);
}

struct spoofer {
    struct larder__ucx *hub;
    const void *address;
    size_t length;
};

static void *spoof(void *arg)
{
    struct spoofer *x = arg;
    while (__atomic_load_n(&served, __ATOMIC_RELAXED) == 0) /* the READ is pending */
        usleep(1000);
    uint8_t bytes[64];
    memset(bytes, 0x66, sizeof bytes);
    for (uint64_t id = 1; id <= 256; id++)
        CHECK_EQ(larder__ucx_answer_to(x->hub, x->address, x->length, id, bytes, sizeof bytes), 0);
    return NULL;
}

TEST(ucx_answer_from_another_worker_completes_no_read)
{
    struct larder__ucx *daemon, *borrower, *other;
    start_pair(&daemon, &borrower);
    if (larder__ucx_start(&other) < 0) SKIP("UCX has no usable transport here");
    larder__ucx_serve(daemon, serve_never);
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    connect_pair(daemon, borrower, &session, &link);
    struct spoofer x = {.hub = other};
    larder__ucx_address(borrower, &x.address, &x.length);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, spoof, &x), 0);
    uint8_t buf[64] = {0};
    bool fault;
    int rc = read_range(link, 0, sizeof buf, buf, 1500, &fault);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK(rc != 0);        /* the daemon never answered: timed out */
    CHECK(buf[0] != 0x66); /* none of the other worker's bytes */
    larder__ucx_link_free(link);
    larder__ucx_session_free(session);
    larder__ucx_stop(other);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
}

static int warnings; /* larder's log lines at WARN or worse, during the test below */

static void count_warning(void *userdata, int level, const char *message)
{
    (void)userdata, (void)message;
    if (level <= LARDER_LOG_WARN) __atomic_add_fetch(&warnings, 1, __ATOMIC_RELAXED);
}

/* Over shared memory, UCX refuses the endpoint that reports peer failures,
 * which make_ep asks for first: UCX's error about it once went to stdout
 * (bench/peer.sh read it instead of its figures).  Now nothing reaches
 * stdout, and the expected refusal is not logged either; the bytes read. */
TEST(ucx_expected_refusal_prints_nothing)
{
    const char *tls = getenv("UCX_TLS");
    char saved[256] = "";
    if (tls) snprintf(saved, sizeof saved, "%s", tls);
    setenv("UCX_TLS", "shm", 1);
    fflush(stdout);
    int pipe_fds[2];
    CHECK_EQ(pipe(pipe_fds), 0);
    int kept_stdout = dup(1);
    CHECK_EQ(dup2(pipe_fds[1], 1), 1);
    warnings = 0;
    larder_set_log(count_warning, NULL, LARDER_LOG_WARN);
    struct larder__ucx *daemon, *borrower;
    start_pair(&daemon, &borrower);
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    connect_pair(daemon, borrower, &session, &link);
    uint8_t buf[4096];
    bool fault = true;
    CHECK_EQ(read_range(link, 7, sizeof buf, buf, 10000, &fault), 0);
    for (size_t i = 0; i < sizeof buf; i++)
        CHECK_EQ(buf[i], pattern(7 + i));
    larder__ucx_link_free(link);
    larder__ucx_session_free(session);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
    fflush(stdout);
    dup2(kept_stdout, 1);
    close(kept_stdout);
    close(pipe_fds[1]);
    char printed[512];
    ssize_t n = read(pipe_fds[0], printed, sizeof printed - 1);
    close(pipe_fds[0]);
    larder_set_log(NULL, NULL, LARDER_LOG_WARN);
    if (n > 0) printed[n] = '\0', fprintf(stderr, "    on stdout: %s\n", printed);
    CHECK_EQ(n, 0);
    CHECK_EQ(warnings, 0);
    if (tls)
        setenv("UCX_TLS", saved, 1);
    else
        unsetenv("UCX_TLS");
}
