/*
 * test_endpoint_alive.c - how a reader tells a busy node daemon from a
 * hung one (endpoint.c daemon_alive): a fake daemon on a Unix socket in
 * this process greets the reader's first connection, holds its READ's
 * answer for 2.5 s, and greets no later connection (its loop thread, as
 * on cores a storm keeps busy, never gets to the probe).  While the
 * process runs (a thread spins), the reader waits for the answer; while
 * it runs nothing, the reader gives up in about three timeouts.  The same
 * for a connect whose WELCOME is late.
 */
#include "endpoint.h"
#include "endpoint_internal.h"
#include "priority.h"
#include "test.h"
#include "wire.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 300
#define ANSWER_AFTER_MS 2500

struct fake_daemon {
    int listener;
    atomic_int connections;
    atomic_int greet_after_ms, answer_after_ms; /* of the first connection */
    atomic_bool spin, stop;
};

struct fake_connection {
    struct fake_daemon *daemon;
    int fd, number;
};

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* The first connection is greeted and its READ answered late; the
 * others (the reader's probes) are read and never answered. */
static void *serve(void *arg)
{
    struct fake_connection *c = arg;
    uint8_t header[LARDER__WIRE_HEADER], payload[64];
    while (test_recv_exact(c->fd, header, sizeof header)) {
        uint32_t length = larder__le32(header + 8);
        uint64_t request = larder__le64(header + 16);
        if (length > sizeof payload || !test_recv_exact(c->fd, payload, length)) break;
        if (c->number > 1) continue; /* a probe: never greeted */
        if (header[5] == LARDER__HELLO) {
            sleep_ms(atomic_load(&c->daemon->greet_after_ms));
            struct larder__welcome w = {
                .auth = LARDER__AUTH_NONE, .name_length = 4, .name = "fake"};
            uint8_t frame[512];
            int n = larder__wire_encode_welcome(frame, sizeof frame, request, &w);
            CHECK(n > 0);
            if (send(c->fd, frame, (size_t)n, MSG_NOSIGNAL) != n) break; /* the reader left */
        } else if (header[5] == LARDER__READ) {
            sleep_ms(atomic_load(&c->daemon->answer_after_ms));
            uint64_t asked = larder__le64(payload + 32);
            uint8_t frame[LARDER__WIRE_HEADER + 100];
            CHECK(asked == 100);
            larder__wire_encode_header(frame, LARDER__WIRE_HEADER, LARDER__DATA, 100, request);
            memset(frame + LARDER__WIRE_HEADER, 'd', 100);
            if (send(c->fd, frame, sizeof frame, MSG_NOSIGNAL) != (ssize_t)sizeof frame) break;
        }
    }
    close(c->fd);
    free(c);
    return NULL;
}

static void *accept_loop(void *arg)
{
    struct fake_daemon *d = arg;
    int fd;
    while ((fd = accept(d->listener, NULL, NULL)) >= 0) {
        struct fake_connection *c = malloc(sizeof *c);
        CHECK(c != NULL);
        *c = (struct fake_connection){d, fd, atomic_fetch_add(&d->connections, 1) + 1};
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, serve, c), 0);
        pthread_detach(t);
    }
    return NULL;
}

/* Busy work on a core while d->spin is set (the daemon's workers in a storm). */
static void *spinner(void *arg)
{
    struct fake_daemon *d = arg;
    volatile uint64_t x = 0;
    while (!atomic_load(&d->stop))
        if (atomic_load(&d->spin))
            x = x * 6364136223846793005u + 1;
        else
            sleep_ms(5);
    return NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One READ of 100 bytes through a fresh reader endpoint: its result, how long it took. */
static int one_read(const char *path, bool spin, struct fake_daemon *d, double *took, bool *down)
{
    atomic_store(&d->connections, 0);
    atomic_store(&d->answer_after_ms, ANSWER_AFTER_MS);
    atomic_store(&d->spin, spin);
    struct larder__endpoint *e;
    CHECK_EQ(larder__endpoint_new(&e, path, LARDER__ROLE_READER, NULL, NULL, TIMEOUT_MS), 0);
    uint8_t buf[100] = {0};
    double started = now_s();
    int rc = larder__endpoint_read(e, 1, 2, 0, LARDER__DEMAND, 0, 100, buf);
    *took = now_s() - started;
    *down = larder__endpoint_down(e);
    atomic_store(&d->spin, false);
    if (rc == 0) CHECK(buf[0] == 'd' && buf[99] == 'd');
    larder__endpoint_free(e);
    return rc;
}

TEST(endpoint_reader_waits_on_a_daemon_that_runs_but_does_not_greet)
{
    static struct fake_daemon d;
    char path[sizeof((struct sockaddr_un *)0)->sun_path];
    snprintf(path, sizeof path, "%s", test_path("sock"));
    d.listener = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    CHECK(bind(d.listener, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(d.listener, 16) == 0);
    pthread_t acceptor, spin;
    CHECK_EQ(pthread_create(&acceptor, NULL, accept_loop, &d), 0);
    pthread_detach(acceptor);
    CHECK_EQ(pthread_create(&spin, NULL, spinner, &d), 0);

    /* running (its CPU time grows while the probe waits): the answer, late */
    double took;
    bool down;
    atomic_store(&d.greet_after_ms, 0);
    int rc = one_read(path, true, &d, &took, &down);
    fprintf(stderr, "    running daemon: rc %d after %.2f s, %d connections\n", rc, took,
            atomic_load(&d.connections));
    CHECK_EQ(rc, 0);
    CHECK(took >= ANSWER_AFTER_MS / 1000.0 - 0.1);
    CHECK(atomic_load(&d.connections) >= 2); /* it was probed, and not greeted */
    CHECK(!down);

    /* idle (as a deadlocked daemon is): left after the timeout and a probe */
    rc = one_read(path, false, &d, &took, &down);
    fprintf(stderr, "    idle daemon: rc %d after %.2f s\n", rc, took);
    CHECK(rc < 0);
    CHECK(took < ANSWER_AFTER_MS / 1000.0 - 0.5);
    CHECK(down);

    /* a connect whose WELCOME is 2 s late (a reader connecting to a daemon
     * a storm keeps busy): running, the reader waits for it (and then for
     * the answer); idle, it gives up after its timeout */
    atomic_store(&d.greet_after_ms, 2000);
    rc = one_read(path, true, &d, &took, &down);
    fprintf(stderr, "    running daemon, late WELCOME: rc %d after %.2f s\n", rc, took);
    CHECK_EQ(rc, 0);
    CHECK(took >= 2.0 + ANSWER_AFTER_MS / 1000.0 - 0.1);
    CHECK(!down);
    rc = one_read(path, false, &d, &took, &down);
    fprintf(stderr, "    idle daemon, late WELCOME: rc %d after %.2f s\n", rc, took);
    CHECK(rc < 0);
    CHECK(took < 1.5);
    CHECK(down);

    atomic_store(&d.stop, true);
    pthread_join(spin, NULL);
    shutdown(d.listener, SHUT_RDWR);
    close(d.listener);
    sleep_ms(2000 + ANSWER_AFTER_MS); /* the held answers' threads end on closed sockets */
}
