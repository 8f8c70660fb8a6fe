/*
 * test_source.c - the sources behind one ops table: shard name resolution,
 * file sources, the chain and the hedge wrapper driven by a fake source
 * (an ops table defined here), and vectored, hedged and refused HTTP
 * reads against a loopback range server.  tests/cli/cache_http.sh,
 * index_http.sh and s3.sh run HTTP and S3 against real servers.
 */
#include "endpoint.h"
#include "hedge.h"
#include "source.h"
#include "sys.h"
#include "test.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

static bool all_bytes(const void *buf, size_t length, uint8_t value)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < length; i++)
        if (p[i] != value) return false;
    return true;
}

/* ---- names ------------------------------------------------------------------ */

static void expect_resolve(const char *index, const char *name, const char *want)
{
    char *got = larder__resolve(index, name);
    if (strcmp(got, want) != 0) fprintf(stderr, "    resolve(%s, %s) = %s\n", index, name, got);
    CHECK(strcmp(got, want) == 0);
    free(got);
}

TEST(source_resolve_names)
{
    expect_resolve("/data/set/index.larder", "shard-0.tar", "/data/set/shard-0.tar");
    expect_resolve("/data/set/index.larder", "../raw/a.tar", "/data/set/../raw/a.tar");
    expect_resolve("/data/set/index.larder", "/abs/a.tar", "/abs/a.tar");
    expect_resolve("index.larder", "a.tar", "a.tar");
    expect_resolve("http://h:8/d/index.larder", "a.tar", "http://h:8/d/a.tar");
    expect_resolve("https://h/index.larder", "x/a.tar", "https://h/x/a.tar");
    expect_resolve("http://h", "a.tar", "http://h/a.tar");
    expect_resolve("/d/index.larder", "https://cdn/a.tar", "https://cdn/a.tar");
    expect_resolve("file:///d/index.larder", "a.tar", "file:///d/a.tar");
    CHECK(strcmp(larder__file_path("file:///x/y"), "/x/y") == 0);
    CHECK(larder__is_remote("https://h/a") && !larder__is_remote("/h/a"));
}

/* ---- files ------------------------------------------------------------------ */

static int collect_sink(void *userdata, const void *data, size_t length)
{
    char *out = userdata;
    memcpy(out + strlen(out), data, length);
    return 0;
}

/* `open` is larder__source_file_open or a plain larder__source_open (hedged) */
static void check_file_source(struct larder__source *s, const char *kind)
{
    CHECK(strcmp(s->ops->kind, kind) == 0);
    uint64_t size;
    CHECK_EQ(larder__source_size(s, &size), 0);
    CHECK_EQ(size, 10);
    char buf[16];
    CHECK_EQ(larder__source_read(s, buf, 4, 3, 0), LARDER__FROM_ORIGIN);
    CHECK(memcmp(buf, "3456", 4) == 0);
    char a[3], b[2];
    struct larder__extent extents[] = {{a, 7, 3}, {b, 0, 2}};
    CHECK_EQ(larder__source_readv(s, extents, 2, 0), LARDER__FROM_ORIGIN);
    CHECK(memcmp(a, "789", 3) == 0 && memcmp(b, "01", 2) == 0);
    memset(buf, 'x', sizeof buf);
    CHECK_EQ(larder__source_read(s, buf, 6, 7, 0), LARDER_ETRUNCATED);
    CHECK(memcmp(buf, "789\0\0\0", 6) == 0); /* the unread tail is zeroed */
    CHECK(strstr(larder_errmsg(), "f.bin") != NULL);
    char all[32] = {0};
    CHECK_EQ(larder__source_stream(s, collect_sink, all), 0);
    CHECK(strcmp(all, "0123456789") == 0);
}

TEST(source_file_reads)
{
    test_write_file(test_path("f.bin"), "0123456789", 10);
    struct larder__source *s;
    CHECK_EQ(larder__source_file_open(&s, test_path("f.bin")), 0);
    check_file_source(s, "file");
    larder__source_close(s);
    char url[4096];
    snprintf(url, sizeof url, "file://%s", test_path("f.bin"));
    CHECK_EQ(larder__source_open(&s, url, NULL), 0);
    check_file_source(s, "hedge");
    larder__source_close(s);
    CHECK_EQ(larder__source_open(&s, test_path("none.bin"), NULL), -ENOENT);
    CHECK(strstr(larder_errmsg(), "none.bin") != NULL);
    larder__source_close(NULL);
}

static ssize_t (*real_pread)(int, void *, size_t, off_t);
static int stalls_left;

/* The first read of the file stalls for 3 s; the rest are quick. */
static ssize_t stalling_pread(int fd, void *buf, size_t count, off_t offset)
{
    if (__atomic_fetch_sub(&stalls_left, 1, __ATOMIC_RELAXED) > 0) sleep(3);
    return real_pread(fd, buf, count, offset);
}

TEST(source_file_reads_are_hedged)
{
    char data[8192];
    test_fill_random(data, sizeof data, 9);
    test_write_file(test_path("stall.bin"), data, sizeof data);
    struct larder__source *s;
    CHECK_EQ(larder__source_open(&s, test_path("stall.bin"), NULL), 0);
    real_pread = larder__sys.pread;
    larder__sys.pread = stalling_pread;
    stalls_left = 1;
    uint64_t hedges = larder__source_hedges();
    double start = now_ms();
    char buf[4096];
    CHECK_EQ(larder__source_read(s, buf, sizeof buf, 1000, 0), LARDER__FROM_ORIGIN);
    CHECK(now_ms() - start < 2500); /* the hedge answered long before the stalled read would */
    CHECK(memcmp(buf, data + 1000, sizeof buf) == 0);
    CHECK_EQ(larder__source_hedges(), hedges + 1);
    larder__source_close(s); /* the stalled read still holds the file open */
    sleep_ms(3200);
    larder__sys.pread = real_pread;
}

/* ---- a fake source ------------------------------------------------------------- */

struct fake {
    struct larder__source base;
    int fail;              /* reads fail with this code; 0: they succeed */
    int answer;            /* what a good read returns */
    uint8_t fill;          /* the byte a good read writes */
    uint64_t size;         /* what size() says */
    int stall_ms;          /* reads numbered in stall_mask sleep this long first... */
    unsigned stall_mask;   /* ...bit n: read n (0-based) */
    uint8_t stall_fill;    /* ...and write this byte instead */
    int reads;             /* reads begun (atomic) */
    int stalled_done;      /* stalled reads that have finished writing (atomic) */
    int *destroyed;        /* set to 1 + stalled_done when destroyed, if not NULL */
    pthread_t last_reader; /* the thread of the latest read */
};

static int fake_size(struct larder__source *source, uint64_t *size)
{
    *size = ((struct fake *)source)->size;
    return 0;
}

static int fake_read(struct larder__source *source, const struct larder__extent *extents,
                     size_t count, unsigned flags)
{
    struct fake *f = (struct fake *)source;
    (void)flags;
    int n = __atomic_fetch_add(&f->reads, 1, __ATOMIC_SEQ_CST);
    f->last_reader = pthread_self();
    bool stall = n < 32 && (f->stall_mask >> n & 1);
    if (stall) sleep_ms(f->stall_ms);
    if (f->fail) return larder__fail(f->fail, "%s: broken", f->base.name);
    for (size_t i = 0; i < count; i++)
        memset(extents[i].buf, stall ? f->stall_fill : f->fill, extents[i].length);
    if (stall) __atomic_add_fetch(&f->stalled_done, 1, __ATOMIC_SEQ_CST);
    return f->answer;
}

static void fake_destroy(struct larder__source *source)
{
    struct fake *f = (struct fake *)source;
    if (f->destroyed) *f->destroyed = 1 + __atomic_load_n(&f->stalled_done, __ATOMIC_SEQ_CST);
    free(f);
}

static const struct larder__source_ops fake_ops = {
    .kind = "fake",
    .size = fake_size,
    .read = fake_read,
    .stream = NULL, /* larder__source_stream reads it in chunks */
    .close = fake_destroy,
};

static struct fake *fake_new(const char *name, int answer, uint8_t fill)
{
    struct fake *f = calloc(1, sizeof *f);
    CHECK(f != NULL);
    f->base.ops = &fake_ops;
    f->base.name = name;
    f->answer = answer;
    f->fill = fill;
    f->size = 3000000;
    return f;
}

static int fake_reads(struct fake *f)
{
    return __atomic_load_n(&f->reads, __ATOMIC_SEQ_CST);
}

/* ---- the chain ------------------------------------------------------------------ */

TEST(source_chain_falls_through_and_skips_a_failed_link)
{
    int peer_gone = 0, origin_gone = 0;
    struct fake *peer = fake_new("fake peer", LARDER__FROM_PEER, 'P');
    struct fake *origin = fake_new("fake origin", LARDER__FROM_ORIGIN, 'O');
    peer->destroyed = &peer_gone, origin->destroyed = &origin_gone;
    origin->size = 1234;
    peer->fail = -EIO;
    struct larder__source *links[] = {&peer->base, &origin->base}, *chain;
    CHECK_EQ(larder__source_chain_open(&chain, links, 2, 300), 0);
    char buf[100];
    /* the peer fails: the origin answers, and the peer is left alone for 300 ms */
    CHECK_EQ(larder__source_read(chain, buf, sizeof buf, 10, 0), LARDER__FROM_ORIGIN);
    CHECK(all_bytes(buf, sizeof buf, 'O'));
    CHECK_EQ(fake_reads(peer), 1);
    CHECK_EQ(fake_reads(origin), 1);
    CHECK_EQ(larder__source_read(chain, buf, sizeof buf, 10, 0), LARDER__FROM_ORIGIN);
    CHECK_EQ(fake_reads(peer), 1); /* skipped while down */
    CHECK_EQ(fake_reads(origin), 2);
    /* back after down_ms, working now */
    peer->fail = 0;
    sleep_ms(350);
    CHECK_EQ(larder__source_read(chain, buf, sizeof buf, 10, 0), LARDER__FROM_PEER);
    CHECK(all_bytes(buf, sizeof buf, 'P'));
    CHECK_EQ(fake_reads(peer), 2);
    CHECK_EQ(fake_reads(origin), 2);
    /* ORIGIN_ONLY: never the peer */
    CHECK_EQ(larder__source_read(chain, buf, sizeof buf, 10, LARDER__READ_ORIGIN_ONLY),
             LARDER__FROM_ORIGIN);
    CHECK(all_bytes(buf, sizeof buf, 'O'));
    CHECK_EQ(fake_reads(peer), 2);
    /* the size is the last link's; the origin failing too is the chain's failure */
    uint64_t size;
    CHECK_EQ(larder__source_size(chain, &size), 0);
    CHECK_EQ(size, 1234);
    origin->fail = -EIO;
    peer->fail = -ENOENT;
    sleep_ms(10);
    CHECK_EQ(larder__source_read(chain, buf, sizeof buf, 10, 0), -EIO);
    CHECK(strstr(larder_errmsg(), "fake origin: broken") != NULL);
    larder__source_close(chain);
    CHECK(peer_gone && origin_gone); /* the chain owned its links */
}

TEST(source_chain_passes_over_a_dead_peer)
{
    /* nothing listens on the port: the peer's read fails, the origin answers */
    struct larder__endpoint *endpoint;
    CHECK_EQ(larder__endpoint_new(&endpoint, "127.0.0.1:1", LARDER__ROLE_PEER, "secret",
                                  "/nowhere/index.larder", 200),
             0);
    struct larder__source *peer;
    CHECK_EQ(larder__source_peer_open(&peer, endpoint, 1, 2, 7), 0);
    CHECK(strcmp(peer->ops->kind, "peer") == 0);
    CHECK(strcmp(peer->name, "peer 127.0.0.1:1 shard 7") == 0);
    uint64_t size;
    CHECK_EQ(larder__source_size(peer, &size), LARDER_EUNSUPPORTED);
    struct fake *origin = fake_new("fake origin", LARDER__FROM_ORIGIN, 'O');
    struct larder__source *links[] = {peer, &origin->base}, *chain;
    CHECK_EQ(larder__source_chain_open(&chain, links, 2, 10000), 0);
    char buf[64];
    CHECK_EQ(larder__source_read(chain, buf, sizeof buf, 0, larder__read_at(LARDER__WARM)),
             LARDER__FROM_ORIGIN);
    CHECK(all_bytes(buf, sizeof buf, 'O'));
    CHECK(larder__endpoint_down(endpoint)); /* the endpoint's own marking, as before */
    /* a peer marked down is not asked */
    CHECK(larder__source_read(peer, buf, sizeof buf, 0, 0) < 0);
    CHECK(strstr(larder_errmsg(), "peer 127.0.0.1:1 shard 7") != NULL);
    larder__source_close(chain);
    larder__endpoint_free(endpoint);
}

/* ---- the hedge wrapper --------------------------------------------------------- */

TEST(source_hedge_sends_one_hedge_and_the_loser_never_writes_late)
{
    struct larder__hedge_budget *budget;
    CHECK_EQ(larder__hedge_open_local(&budget), 0);
    int gone = 0;
    struct fake *f = fake_new("fake slow", LARDER__FROM_PEER, 'W');
    f->stall_ms = 1000, f->stall_mask = 1u << 0 | 1u << 2, f->stall_fill = 'L';
    f->destroyed = &gone;
    struct larder__source *s;
    CHECK_EQ(larder__source_hedge_open(&s, &f->base, budget), 0);
    CHECK(strcmp(s->ops->kind, "hedge") == 0);
    uint64_t hedges = larder__source_hedges();

    /* read 0 stalls; after the cold 500 ms, read 1 (the hedge) answers */
    size_t length = 65536;
    uint8_t *buf = malloc(length);
    double start = now_ms();
    CHECK_EQ(larder__source_read(s, buf, length, 4096, 0), LARDER__FROM_PEER);
    double took = now_ms() - start;
    CHECK(took >= 450 && took < 900);
    CHECK(all_bytes(buf, length, 'W'));
    CHECK_EQ(larder__source_hedges(), hedges + 1);
    struct larder__hedge_stats st;
    larder__hedge_stats_get(budget, &st);
    CHECK_EQ(st.reads, 1);
    CHECK_EQ(st.hedges, 1);
    /* the loser finishes later, into its own buffer: the caller's is left alone */
    memset(buf, 'P', length);
    for (int i = 0; i < 200 && __atomic_load_n(&f->stalled_done, __ATOMIC_SEQ_CST) < 1; i++)
        sleep_ms(10);
    CHECK_EQ(__atomic_load_n(&f->stalled_done, __ATOMIC_SEQ_CST), 1);
    CHECK(all_bytes(buf, length, 'P'));

    /* again (read 2 stalls, read 3 answers); then the buffer is freed and the
     * source destroyed at once: ASan would see a late write, and the fake
     * must outlive the stalled read */
    CHECK_EQ(larder__source_read(s, buf, length, 0, 0), LARDER__FROM_PEER);
    CHECK(all_bytes(buf, length, 'W'));
    free(buf);
    larder__source_close(s);
    CHECK_EQ(gone, 0); /* the stalled attempt still holds it */
    for (int i = 0; i < 200 && !gone; i++)
        sleep_ms(10);
    CHECK_EQ(gone, 1 + 2); /* destroyed after both stalled reads finished */
    CHECK_EQ(larder__source_hedges(), hedges + 2);
    larder__hedge_close(budget);
}

/* A read longer than 1 MiB (LARDER__HEDGE_MAX_READ) is read once, however slow:
 * its time is its transfer, and a second copy would only double the bytes
 * on a link that is the bottleneck.  Nor does it count in the budget. */
TEST(source_hedge_leaves_large_reads_alone)
{
    struct larder__hedge_budget *budget;
    CHECK_EQ(larder__hedge_open_local(&budget), 0);
    struct fake *f = fake_new("fake slow", LARDER__FROM_ORIGIN, 'W');
    f->stall_ms = 800, f->stall_mask = 1u << 0, f->stall_fill = 'W';
    struct larder__source *s;
    CHECK_EQ(larder__source_hedge_open(&s, &f->base, budget), 0);
    uint64_t hedges = larder__source_hedges();
    size_t length = (1u << 20) + 1; /* past the 1 MiB that may be hedged (source_hedge.h) */
    uint8_t *buf = malloc(length);
    double start = now_ms();
    CHECK_EQ(larder__source_read(s, buf, length, 0, 0), LARDER__FROM_ORIGIN);
    CHECK(now_ms() - start >= 750); /* waited out the stall: no second read */
    CHECK(all_bytes(buf, length, 'W'));
    CHECK_EQ(larder__source_hedges(), hedges);
    struct larder__hedge_stats st;
    larder__hedge_stats_get(budget, &st);
    CHECK_EQ(st.reads, 0);
    CHECK_EQ(st.hedges, 0);
    free(buf);
    larder__source_close(s);
    larder__hedge_close(budget);
}

/* After 700 ms, the credit of one hedge, as reads on the node would add it. */
static void *credit_later(void *budget)
{
    sleep_ms(700);
    for (int i = 0; i < LARDER__HEDGE_READS_PER_HEDGE; i++)
        larder__hedge_count_read(budget);
    return NULL;
}

TEST(source_hedge_refused_by_the_budget_sends_none)
{
    struct larder__hedge_budget *budget;
    CHECK_EQ(larder__hedge_open_local(&budget), 0);
    while (larder__hedge_take(budget)) {
    }
    struct larder__hedge_stats before;
    larder__hedge_stats_get(budget, &before);
    struct fake *f = fake_new("fake slow", LARDER__FROM_ORIGIN, 'W');
    f->stall_ms = 800, f->stall_mask = 1, f->stall_fill = 'L';
    struct larder__source *s;
    CHECK_EQ(larder__source_hedge_open(&s, &f->base, budget), 0);
    uint64_t hedges = larder__source_hedges();
    char buf[512];
    CHECK_EQ(larder__source_read(s, buf, sizeof buf, 0, 0), LARDER__FROM_ORIGIN);
    CHECK(all_bytes(buf, sizeof buf, 'L')); /* the stalled read's own answer */
    CHECK_EQ(fake_reads(f), 1);
    CHECK_EQ(larder__source_hedges(), hedges);
    struct larder__hedge_stats after;
    larder__hedge_stats_get(budget, &after);
    CHECK_EQ(after.hedges, before.hedges);
    CHECK_EQ(after.reads, before.reads + 1);
    /* asked at 500 ms, then every 50 ms until the read answered at 800 */

    /* credit that comes while a read waits buys its hedge: the read asks every 50 ms */
    f->stall_ms = 1500, f->stall_mask = 1u << 1;
    pthread_t helper;
    CHECK_EQ(pthread_create(&helper, NULL, credit_later, budget), 0);
    double start = now_ms();
    CHECK_EQ(larder__source_read(s, buf, sizeof buf, 0, 0), LARDER__FROM_ORIGIN);
    double took = now_ms() - start;
    pthread_join(helper, NULL);
    CHECK(all_bytes(buf, sizeof buf, 'W')); /* the hedge's answer */
    CHECK(took >= 650 && took < 1200);
    CHECK_EQ(larder__source_hedges(), hedges + 1);
    larder__source_close(s);
    larder__hedge_close(budget);
}

TEST(source_hedge_reads_in_a_forked_child)
{
    /* the parent's workers exist (idle) when it forks: the child has none of
     * them and must start its own (DataLoader workers fork like this) */
    struct fake *f = fake_new("fake", LARDER__FROM_ORIGIN, 'W');
    struct larder__source *s;
    CHECK_EQ(larder__source_hedge_open(&s, &f->base, NULL), 0);
    char buf[64];
    CHECK_EQ(larder__source_read(s, buf, sizeof buf, 0, 0), LARDER__FROM_ORIGIN);
    CHECK(!pthread_equal(f->last_reader, pthread_self())); /* on a worker */
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        alarm(5);
        memset(buf, 0, sizeof buf);
        int rc = larder__source_read(s, buf, sizeof buf, 0, 0);
        _exit(rc == LARDER__FROM_ORIGIN && all_bytes(buf, sizeof buf, 'W') ? 0 : 1);
    }
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    larder__source_close(s);
}

/* Counts bytes that are all 'W'; -1 at any other. */
static int count_w_sink(void *userdata, const void *data, size_t length)
{
    *(size_t *)userdata += length;
    return all_bytes(data, length, 'W') ? 0 : -1;
}

TEST(source_hedge_reads_fast_sources_inline)
{
    struct larder__hedge_budget *budget;
    CHECK_EQ(larder__hedge_open_local(&budget), 0);
    struct fake *f = fake_new("fake fast", LARDER__FROM_ORIGIN, 'W');
    struct larder__source *s;
    CHECK_EQ(larder__source_hedge_open(&s, &f->base, budget), 0);
    char buf[64];
    for (int i = 0; i < 16; i++) { /* learning the latency: on the workers */
        CHECK_EQ(larder__source_read(s, buf, sizeof buf, 0, 0), LARDER__FROM_ORIGIN);
        CHECK(!pthread_equal(f->last_reader, pthread_self()));
    }
    /* fast (p95 under 2 ms): inline, soon (a busy machine may slow a few handoffs) */
    int inline_at = -1;
    for (int i = 16; i < 64 && inline_at < 0; i++) {
        CHECK_EQ(larder__source_read(s, buf, sizeof buf, 0, 0), LARDER__FROM_ORIGIN);
        if (pthread_equal(f->last_reader, pthread_self())) inline_at = i;
    }
    CHECK(inline_at >= 16);
    CHECK(all_bytes(buf, sizeof buf, 'W'));
    struct larder__hedge_stats st;
    larder__hedge_stats_get(budget, &st);
    CHECK_EQ(st.reads, (uint64_t)inline_at); /* inline reads are not hedgeable: not counted */
    /* a stream of a source without one: reads of its size, in order */
    f->size = 2500000;
    size_t total = 0;
    CHECK_EQ(larder__source_stream(s, count_w_sink, &total), 0);
    CHECK_EQ(total, 2500000);
    /* a failing read: the inner source's code and message */
    f->fail = -EIO;
    CHECK_EQ(larder__source_read(s, buf, sizeof buf, 0, 0), -EIO);
    CHECK(strstr(larder_errmsg(), "fake fast: broken") != NULL);
    larder__source_close(s);
    larder__hedge_close(budget);
}

/* ---- HTTP, against a loopback range server --------------------------------------- */

enum serve_mode { SERVE_RANGES, SERVE_WHOLE, SERVE_SHORT };

/* Answers range GETs (and HEAD) of `data`, one thread per connection. */
struct range_server {
    int listener, port;
    pthread_t thread;
    const uint8_t *data;
    size_t size;
    enum serve_mode mode;
    int stall_first_ms; /* the first request waits this long before answering */
    int requests;       /* (atomic) */
    int active;         /* connections being answered (atomic) */
    char ranges[64][64];
};

struct connection {
    struct range_server *server;
    int fd;
};

static void write_all(int fd, const void *data, size_t length)
{
    const char *p = data;
    while (length > 0) {
        ssize_t n = send(fd, p, length, MSG_NOSIGNAL); /* a cancelled transfer closes early */
        if (n <= 0) return;
        p += n, length -= (size_t)n;
    }
}

static void *serve_connection(void *arg)
{
    struct connection *c = arg;
    struct range_server *s = c->server;
    char head[8192] = {0};
    size_t used = 0;
    while (used < sizeof head - 1 && !strstr(head, "\r\n\r\n")) {
        ssize_t n = read(c->fd, head + used, sizeof head - 1 - used);
        if (n <= 0) break;
        used += (size_t)n;
    }
    int n = __atomic_fetch_add(&s->requests, 1, __ATOMIC_SEQ_CST);
    unsigned long long first = 0, last = s->size - 1;
    const char *range = strcasestr(head, "\r\nRange: bytes=");
    if (range) sscanf(range + 15, "%llu-%llu", &first, &last);
    if (n < 64) snprintf(s->ranges[n], sizeof s->ranges[n], "%llu-%llu", first, last);
    if (n == 0 && s->stall_first_ms) sleep_ms(s->stall_first_ms);
    char reply[512];
    size_t length = (size_t)(last - first + 1);
    if (strncmp(head, "HEAD ", 5) == 0) {
        snprintf(reply, sizeof reply, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", s->size);
        write_all(c->fd, reply, strlen(reply));
    } else if (!range || s->mode == SERVE_WHOLE) {
        snprintf(reply, sizeof reply, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", s->size);
        write_all(c->fd, reply, strlen(reply));
        write_all(c->fd, s->data, s->size);
    } else {
        size_t sent = s->mode == SERVE_SHORT ? length / 2 : length;
        snprintf(reply, sizeof reply,
                 "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %llu-%llu/%zu\r\n"
                 "Content-Length: %zu\r\n\r\n",
                 first, last, s->size, sent);
        write_all(c->fd, reply, strlen(reply));
        write_all(c->fd, s->data + first, sent);
    }
    close(c->fd);
    free(c);
    __atomic_sub_fetch(&s->active, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *serve_main(void *arg)
{
    struct range_server *s = arg;
    for (;;) {
        int fd = accept(s->listener, NULL, NULL);
        if (fd < 0) break; /* shut down */
        struct connection *c = malloc(sizeof *c);
        *c = (struct connection){s, fd};
        __atomic_add_fetch(&s->active, 1, __ATOMIC_SEQ_CST);
        pthread_t thread;
        pthread_create(&thread, NULL, serve_connection, c);
        pthread_detach(thread);
    }
    return NULL;
}

static void server_start(struct range_server *s, const uint8_t *data, size_t size, char *url,
                         size_t url_size)
{
    memset(s, 0, sizeof *s);
    s->data = data, s->size = size;
    s->listener = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(s->listener >= 0);
    struct sockaddr_in address = {.sin_family = AF_INET};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    CHECK_EQ(bind(s->listener, (struct sockaddr *)&address, length), 0);
    CHECK_EQ(listen(s->listener, 64), 0);
    CHECK_EQ(getsockname(s->listener, (struct sockaddr *)&address, &length), 0);
    s->port = ntohs(address.sin_port);
    snprintf(url, url_size, "http://127.0.0.1:%d/data/shard.bin", s->port);
    CHECK_EQ(pthread_create(&s->thread, NULL, serve_main, s), 0);
}

/* Stop accepting and wait for the connections; returns the requests answered. */
static int server_stop(struct range_server *s)
{
    shutdown(s->listener, SHUT_RDWR);
    pthread_join(s->thread, NULL);
    close(s->listener);
    for (int i = 0; i < 500 && __atomic_load_n(&s->active, __ATOMIC_SEQ_CST) > 0; i++)
        sleep_ms(10);
    return __atomic_load_n(&s->requests, __ATOMIC_SEQ_CST);
}

static bool saw_range(const struct range_server *s, const char *range)
{
    for (int i = 0; i < s->requests && i < 64; i++)
        if (strcmp(s->ranges[i], range) == 0) return true;
    return false;
}

TEST(source_http_vectored_reads)
{
    static uint8_t data[100000];
    test_fill_random(data, sizeof data, 21);
    struct range_server server;
    char url[128];
    server_start(&server, data, sizeof data, url, sizeof url);
    struct larder__source *s;
    CHECK_EQ(larder__source_open(&s, url, NULL), 0);
    CHECK(strcmp(s->ops->kind, "http") == 0); /* hedged inside, not wrapped */
    uint64_t size;
    CHECK_EQ(larder__source_size(s, &size), 0);
    CHECK_EQ(size, sizeof data);
    static uint8_t a[5000], b[1], c[40000];
    struct larder__extent extents[] = {{a, 0, sizeof a}, {b, 99999, 1}, {c, 30000, sizeof c}};
    CHECK_EQ(larder__source_readv(s, extents, 3, 0), LARDER__FROM_ORIGIN);
    CHECK(memcmp(a, data, sizeof a) == 0);
    CHECK(b[0] == data[99999]);
    CHECK(memcmp(c, data + 30000, sizeof c) == 0);
    larder__source_close(s);
    CHECK_EQ(server_stop(&server), 4); /* HEAD and three range GETs */
    CHECK(saw_range(&server, "0-4999") && saw_range(&server, "99999-99999") &&
          saw_range(&server, "30000-69999"));
}

TEST(source_http_refuses_bad_answers)
{
    static uint8_t data[10000];
    test_fill_random(data, sizeof data, 22);
    struct range_server server;
    char url[128];
    struct larder__source *s;
    char buf[1000];

    /* 200 with the whole object instead of 206: refused, not believed */
    server_start(&server, data, sizeof data, url, sizeof url);
    server.mode = SERVE_WHOLE;
    CHECK_EQ(larder__source_open(&s, url, NULL), 0);
    CHECK_EQ(larder__source_read(s, buf, sizeof buf, 100, 0), LARDER_EHTTP);
    CHECK(strstr(larder_errmsg(), "does not serve byte ranges") != NULL);
    CHECK(strstr(larder_errmsg(), url) != NULL);
    larder__source_close(s);
    CHECK_EQ(server_stop(&server), 1); /* no retries */

    /* a short body: LARDER_ETRUNCATED, the tail zeroed */
    server_start(&server, data, sizeof data, url, sizeof url);
    server.mode = SERVE_SHORT;
    CHECK_EQ(larder__source_open(&s, url, NULL), 0);
    memset(buf, 'x', sizeof buf);
    CHECK_EQ(larder__source_read(s, buf, sizeof buf, 100, 0), LARDER_ETRUNCATED);
    CHECK(memcmp(buf, data + 100, 500) == 0);
    CHECK(all_bytes(buf + 500, 500, 0));
    CHECK(strstr(larder_errmsg(), "short body") != NULL);
    larder__source_close(s);
    server_stop(&server);
}

TEST(source_http_hedges_a_stalled_range_read)
{
    static uint8_t data[50000];
    test_fill_random(data, sizeof data, 23);
    struct larder__hedge_budget *budget;
    CHECK_EQ(larder__hedge_open_local(&budget), 0);
    struct range_server server;
    char url[128];
    server_start(&server, data, sizeof data, url, sizeof url);
    server.stall_first_ms = 2000;
    struct larder__source *s;
    CHECK_EQ(larder__source_http_open(&s, url, budget), 0);
    uint64_t hedges = larder__source_hedges();
    static uint8_t buf[20000];
    double start = now_ms();
    CHECK_EQ(larder__source_read(s, buf, sizeof buf, 7000, 0), LARDER__FROM_ORIGIN);
    double took = now_ms() - start;
    CHECK(took >= 450 && took < 1500); /* the hedge, after the cold 500 ms */
    CHECK(memcmp(buf, data + 7000, sizeof buf) == 0);
    CHECK_EQ(larder__source_hedges(), hedges + 1);
    struct larder__hedge_stats st;
    larder__hedge_stats_get(budget, &st);
    CHECK_EQ(st.reads, 1);
    CHECK_EQ(st.hedges, 1);
    larder__source_close(s);
    CHECK_EQ(server_stop(&server), 2); /* the read and its hedge: same range */
    CHECK(strcmp(server.ranges[0], "7000-26999") == 0 &&
          strcmp(server.ranges[1], "7000-26999") == 0);
    larder__hedge_close(budget);
}
