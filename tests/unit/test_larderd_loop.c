/*
 * test_larderd_loop.c - the event loop's parts that need no socket
 * (src/larderd/loop.c, connection.c): frames taken out of a connection's
 * input whole, a cut frame kept and timed, a malformed one closing the
 * connection, the memory budget (and an OPEN under way) pausing it, the sweep's reasons to drop a
 * connection, who may use the Unix socket, the output queue's charge, an answer sent at once by
 * the thread that made it (a socketpair), and the Unix socket replacing a stale one.
 */
#include "daemon_fixture.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Append a frame to c's input. */
static void feed(struct connection *c, const uint8_t *frame, size_t length)
{
    CHECK(c->in_used + length <= sizeof c->in);
    memcpy(c->in + c->in_used, frame, length);
    c->in_used += length;
}

static size_t hello_frame(uint8_t *frame, size_t size)
{
    struct larder__hello h = {.role = LARDER__ROLE_READER};
    int n = larder__wire_encode_hello(frame, size, 1, &h);
    CHECK(n > 0);
    return (size_t)n;
}

TEST(larderd_loop_frames_from_input)
{
    struct larderd d;
    fixture_daemon(&d, 1);
    struct connection *c = fixture_connection(&d, false);
    uint8_t hello[128], stat[LARDER__WIRE_HEADER];
    size_t n = hello_frame(hello, sizeof hello);
    larder__wire_encode_header(stat, sizeof stat, LARDER__STAT, 0, 2);
    /* HELLO, STAT and the first half of another STAT, in one read */
    feed(c, hello, n);
    feed(c, stat, sizeof stat);
    feed(c, stat, 10);
    CHECK(process_input(c));
    free(fixture_answer(c, LARDER__WELCOME));
    free(fixture_answer(c, LARDER__STATS));
    CHECK(connection_take_output(c) == NULL);
    CHECK_EQ(c->in_used, 10); /* the cut frame waits, its clock started */
    CHECK(memcmp(c->in, stat, 10) == 0);
    CHECK(c->partial_since_ms > 0);
    CHECK(c->last_active_ms > 0);
    /* the rest of it */
    feed(c, stat + 10, sizeof stat - 10);
    CHECK(process_input(c));
    free(fixture_answer(c, LARDER__STATS));
    CHECK_EQ(c->in_used, 0);
    CHECK_EQ(c->partial_since_ms, 0);

    /* a header no client sends: close */
    uint8_t junk[LARDER__WIRE_HEADER];
    memset(junk, 0xff, sizeof junk);
    feed(c, junk, sizeof junk);
    CHECK(!process_input(c));
    connection_release(c);
    larderd_free(&d);
}

TEST(larderd_loop_budget_pauses)
{
    struct larderd d;
    fixture_daemon(&d, 1);
    d.config.connection_budget = 65536;
    struct connection *c = fixture_connection(&d, false);
    uint8_t hello[128];
    size_t n = hello_frame(hello, sizeof hello);
    feed(c, hello, n);
    c->charged = 65536; /* READs in flight and answers queued at the budget */
    CHECK(process_input(c));
    CHECK(c->paused);
    CHECK_EQ(c->in_used, n); /* not read on: it waits for its answers to drain */
    CHECK_EQ(c->partial_since_ms, 0);
    CHECK(connection_take_output(c) == NULL);
    c->charged = 0;
    c->paused = false;
    CHECK(process_input(c));
    free(fixture_answer(c, LARDER__WELCOME));
    connection_release(c);
    larderd_free(&d);
}

/* An OPEN of an index not open yet goes to a worker; the frames behind it
 * on its connection wait until it is answered, so a READ sent right after
 * its OPEN finds the dataset opened (and the loop thread never waits). */
TEST(larderd_loop_open_holds_back_next_frames)
{
    struct larderd d;
    fixture_daemon(&d, 1);
    const char *index = fixture_dataset("loop-open", 20, 4096);
    struct connection *c = fixture_connection(&d, false);
    fixture_hello(c, false);
    uint8_t open[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_URL], stat[LARDER__WIRE_HEADER];
    int n = larder__wire_encode_open(open, sizeof open, 4, index);
    CHECK(n > 0);
    larder__wire_encode_header(stat, sizeof stat, LARDER__STAT, 0, 5);
    feed(c, open, (size_t)n);
    feed(c, stat, sizeof stat);
    CHECK(process_input(c));
    /* either the OPEN is still under way (the STAT waits, the connection
     * paused) or it ended already; never is the STAT answered first */
    if (c->paused) {
        CHECK_EQ(c->in_used, sizeof stat);
        fixture_wait_jobs(c);
        CHECK_EQ(c->opens, 0);
        c->paused = false; /* as flush() does once it is not held back */
        CHECK(process_input(c));
    }
    CHECK_EQ(c->in_used, 0);
    struct output *o = fixture_answer(c, LARDER__OPENED);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(o->bytes, o->length, &f), 0);
    CHECK_EQ(f.request, 4);
    free(o);
    free(fixture_answer(c, LARDER__STATS));
    CHECK_EQ(__atomic_load_n(&d.datasets[0].holders, __ATOMIC_ACQUIRE), 1);
    CHECK_EQ(c->opened, 1);

    /* open already: answered on the spot, no job, held once per connection */
    feed(c, open, (size_t)n);
    CHECK(process_input(c));
    CHECK(!c->paused);
    CHECK_EQ(c->jobs, 0);
    free(fixture_answer(c, LARDER__OPENED));
    CHECK_EQ(__atomic_load_n(&d.datasets[0].holders, __ATOMIC_ACQUIRE), 1);
    connection_release(c);
    CHECK_EQ(__atomic_load_n(&d.datasets[0].holders, __ATOMIC_ACQUIRE), 0);
    larderd_free(&d);
}

/* A bad index opened on a worker: an ERROR, nothing held, the connection
 * read on. */
TEST(larderd_loop_open_error_from_worker)
{
    struct larderd d;
    fixture_daemon(&d, 1);
    struct connection *c = fixture_connection(&d, false);
    fixture_hello(c, false);
    uint8_t junk[64] = "not an index";
    test_write_file(test_path("loop-junk.larder"), junk, sizeof junk);
    uint8_t open[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_URL];
    int n = larder__wire_encode_open(open, sizeof open, 4, test_path("loop-junk.larder"));
    CHECK(n > 0);
    feed(c, open, (size_t)n);
    CHECK(process_input(c));
    fixture_wait_jobs(c);
    char message[256];
    CHECK(fixture_error(c, message, sizeof message) < 0);
    CHECK_EQ(c->opened, 0);
    CHECK_EQ(d.num_datasets, 0);
    connection_release(c);
    larderd_free(&d);
}

TEST(larderd_loop_output_charge)
{
    struct larderd d;
    fixture_daemon(&d, 1);
    struct connection *c = fixture_connection(&d, false);
    enqueue(c, "abcdef", 6);
    send_error(c, 5, LARDER_EDENIED, "no");
    CHECK(!c->closing);
    refuse(c, 6, LARDER_EDENIED, "go away");
    CHECK(c->closing && c->closing_since_ms > 0);
    struct output *o = connection_take_output(c);
    CHECK(o->length == 6 && memcmp(o->bytes, "abcdef", 6) == 0 && o->file == -1);
    free(o);
    CHECK(c->charged > 0);
    char message[64];
    CHECK_EQ(fixture_error(c, message, sizeof message), LARDER_EDENIED);
    CHECK(strcmp(message, "no") == 0);
    CHECK_EQ(fixture_error(c, message, sizeof message), LARDER_EDENIED);
    CHECK(strcmp(message, "go away") == 0);
    CHECK_EQ(c->charged, 0);
    /* what is still queued when the last reference goes is freed with it */
    enqueue(c, "x", 1);
    connection_release(c);
    larderd_free(&d);
}

/* Read exactly n bytes of fd (a socketpair's end) into buf. */
static void read_all(int fd, uint8_t *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, buf + got, n - got);
        CHECK(k > 0);
        got += (size_t)k;
    }
}

/* An answer with nothing queued before it leaves from the thread that made
 * it, header and file bytes, with no loop; what the socket does not take
 * stays queued, begun, and what comes after waits behind it; a refused
 * connection's ERROR goes at once and the loop is woken to close it; a
 * dropped connection is sent nothing. */
TEST(larderd_loop_output_sent_at_once)
{
    struct larderd d;
    fixture_daemon(&d, 1);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct connection *c = connection_new(&d, sv[0], false);
    CHECK(c != NULL);
    static uint8_t data[1 << 20], got[sizeof data + 16]; /* a header, the data, "after" */
    test_fill_random(data, sizeof data, 3);
    char path[4096];
    snprintf(path, sizeof path, "%s/answer.bin", test_dir());
    test_write_file(path, data, sizeof data);
    int file = open(path, O_RDONLY);
    CHECK(file >= 0);

    /* small: all of it at once */
    struct output *o = output_new(8);
    memcpy(o->bytes, "HEADER:1", 8);
    o->file = file, o->file_offset = 100, o->file_length = 1000;
    enqueue_output(c, o);
    CHECK(c->head == NULL && c->charged == 0);
    read_all(sv[1], got, 1008);
    CHECK(memcmp(got, "HEADER:1", 8) == 0 && memcmp(got + 8, data + 100, 1000) == 0);
    CHECK(c->last_active_ms > 0);

    /* larger than the socket takes: begun, the rest queued; the next
     * answer behind it, whole */
    int small = 4096;
    CHECK_EQ(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    o = output_new(8);
    memcpy(o->bytes, "HEADER:2", 8);
    o->file = file, o->file_offset = 0, o->file_length = sizeof data;
    enqueue_output(c, o);
    CHECK(c->head == o && o->sent == 8 && o->file_length > 0 && o->file_length < sizeof data);
    enqueue(c, "after", 5);
    CHECK(c->head == o && c->tail != o && c->tail->sent == 0);
    /* the loop's part, as flush() does it: the reader drains, the queue goes */
    size_t want = 8 + sizeof data + 5, have = 0;
    while (have < want) {
        pthread_mutex_lock(&c->lock);
        while (c->head) {
            int rc = output_push(c->fd, c->head);
            CHECK(rc >= 0);
            if (rc == 0) break;
            struct output *done = c->head;
            c->head = done->next;
            if (!c->head) c->tail = NULL;
            output_free(c, done);
        }
        pthread_mutex_unlock(&c->lock);
        ssize_t k = read(sv[1], got + have, want - have < 65536 ? want - have : 65536);
        if (k > 0) have += (size_t)k;
    }
    CHECK(memcmp(got, "HEADER:2", 8) == 0 && memcmp(got + 8, data, sizeof data) == 0);
    CHECK(memcmp(got + 8 + sizeof data, "after", 5) == 0);
    CHECK(c->head == NULL && c->charged == 0);

    /* refused: its ERROR leaves at once, and the loop is woken to close it */
    uint64_t count;
    while (read(d.wake, &count, sizeof count) > 0) {
    }
    refuse(c, 9, LARDER_EDENIED, "no");
    CHECK(c->closing && c->head == NULL);
    CHECK(read(d.wake, &count, sizeof count) == sizeof count && count >= 1);
    uint8_t error[LARDER__WIRE_HEADER];
    read_all(sv[1], error, sizeof error);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(error, sizeof error, &f), 0);
    CHECK(f.type == LARDER__ERROR && f.request == 9);
    read_all(sv[1], got, f.length); /* its code and message */
    c->closing = false;

    /* dropped (its fd closed by the loop, under the lock): not sent, and
     * not queued either (never to be sent: its room is given back at once) */
    c->dropped = true;
    enqueue(c, "late", 4);
    CHECK(c->head == NULL && c->charged == 0);
    uint8_t byte;
    CHECK(recv(sv[1], &byte, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN);
    close(file);
    close(sv[0]), close(sv[1]);
    connection_release(c);
    larderd_free(&d);
}

TEST(larderd_loop_sweep_reasons)
{
    struct larderd d;
    fixture_daemon(&d, 1);
    d.config.idle_timeout_ms = 60000;
    struct connection *c = fixture_connection(&d, false);
    int64_t t = c->last_active_ms;
    CHECK(sweep_reason(c, t + 1000) == NULL);
    CHECK(strcmp(sweep_reason(c, t + 60000), "") == 0); /* idle: dropped without a line */
    c->jobs = 1;                                        /* a READ in flight is not idle */
    CHECK(sweep_reason(c, t + 60000) == NULL);
    c->jobs = 0;
    c->partial_since_ms = t;
    CHECK(sweep_reason(c, t + 9999) == NULL);
    CHECK(strcmp(sweep_reason(c, t + 10000), "a frame begun and not finished in 10 s") == 0);
    c->partial_since_ms = 0;
    c->blocked_since_ms = t;
    CHECK(strcmp(sweep_reason(c, t + 60000), "a client that does not take its answers") == 0);
    c->blocked_since_ms = 0;
    c->closing = true;
    c->closing_since_ms = t;
    CHECK(strcmp(sweep_reason(c, t + 5000), "a refused client did not take its answer") == 0);
    connection_release(c);
    larderd_free(&d);
}

TEST(larderd_loop_credentials)
{
    struct larderd_config config;
    larderd_config_defaults(&config);
    config.uid = 1000;
    config.gid = 100;
    struct ucred root = {.uid = 0, .gid = 0}, own = {.uid = 1000, .gid = 5000},
                 group = {.uid = 2000, .gid = 100}, other = {.uid = 3000, .gid = 3000};
    CHECK(credentials_allowed(&config, -1, &root));
    CHECK(credentials_allowed(&config, -1, &own));
    CHECK(credentials_allowed(&config, -1, &group));
    CHECK(!credentials_allowed(&config, -1, &other));
    config.allow_uids[config.num_allow_uids++] = 3000;
    CHECK(credentials_allowed(&config, -1, &other));
    config.num_allow_uids = 0;
    config.allow_gids[config.num_allow_gids++] = 3000;
    CHECK(credentials_allowed(&config, -1, &other));
}

/* Whether a client can connect to the Unix socket at path. */
static bool connects(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

TEST(larderd_loop_unix_socket_replaces_a_stale_one)
{
    char path[256];
    snprintf(path, sizeof path, "%s", test_path("sock"));
    /* a socket file left by a daemon that died: nobody listens on it */
    int stale = listen_unix(path);
    CHECK(stale >= 0);
    close(stale);
    CHECK(!connects(path));
    int fd = listen_unix(path);
    CHECK(fd >= 0);
    CHECK(connects(path));
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISSOCK(st.st_mode));
    CHECK_EQ(st.st_mode & 0777 & ~(mode_t)0770, 0); /* owner and group only */
    /* nothing else left in the directory: the name it was bound under is gone */
    char listing[512];
    snprintf(listing, sizeof listing, "test \"$(ls -A '%s')\" = sock", test_dir());
    CHECK_EQ(test_sh("%s", listing), 0);
    close(fd);
    /* a name too long to carry a suffix is bound where it is */
    char longer[sizeof((struct sockaddr_un *)0)->sun_path];
    int room = (int)sizeof longer - 1 - (int)strlen(test_dir()) - 1;
    CHECK(room > 4);
    snprintf(longer, sizeof longer, "%s/%0*d", test_dir(), room, 7);
    CHECK_EQ(strlen(longer), sizeof longer - 1);
    fd = listen_unix(longer);
    CHECK(fd >= 0);
    CHECK(connects(longer));
    close(fd);
}
