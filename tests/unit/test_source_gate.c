/*
 * test_source_gate.c - background reads of a gated origin yield to
 * foreground ones (source_gate.c): a HINTED read always goes in pieces of
 * 256 KiB; while a DEMAND read is in flight, it does not reach the origin
 * at all, and after it, at most 2 pieces are in flight; with no reader
 * about, the window of pieces follows the origin's delay (fake clock); a
 * peer's READERS holds background reads, then lets one small piece go at
 * a time.  Order and counts are
 * checked, never time.  The gate is the process's: each test runs in a process of its own.
 */
#include "hedge.h"
#include "source.h"
#include "source_hedge.h"
#include "test.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* An origin that logs each read (class, length) and holds reads at
 * offset `hold_at` until released. */
struct held_origin {
    struct larder__source base;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    uint64_t hold_at;
    bool held, release;
    int reads, in_flight, most_in_flight;
    int classes[64];
    size_t lengths[64];
    uint64_t offsets[64];
};

static int origin_size(struct larder__source *s, uint64_t *size)
{
    (void)s;
    *size = UINT64_C(1) << 30;
    return 0;
}

static int origin_read(struct larder__source *s, const struct larder__extent *e, size_t n,
                       unsigned flags)
{
    struct held_origin *o = (struct held_origin *)s;
    pthread_mutex_lock(&o->lock);
    if (o->reads < 64) {
        o->classes[o->reads] = larder__read_class(flags);
        o->lengths[o->reads] = e[0].length;
        o->offsets[o->reads] = e[0].offset;
    }
    o->reads++;
    if (++o->in_flight > o->most_in_flight) o->most_in_flight = o->in_flight;
    pthread_cond_broadcast(&o->changed);
    while (n == 1 && e[0].offset == o->hold_at && !o->release) {
        o->held = true;
        pthread_cond_broadcast(&o->changed);
        pthread_cond_wait(&o->changed, &o->lock);
    }
    o->in_flight--;
    pthread_mutex_unlock(&o->lock);
    for (size_t i = 0; i < n; i++)
        memset(e[i].buf, 'o', e[i].length);
    return LARDER__FROM_ORIGIN;
}

static void origin_close(struct larder__source *s)
{
    (void)s; /* the test's own */
}

static const struct larder__source_ops origin_ops = {"held", origin_size, origin_read, NULL,
                                                     origin_close};

static void origin_init(struct held_origin *o)
{
    memset(o, 0, sizeof *o);
    o->base.ops = &origin_ops;
    o->base.name = "held";
    o->hold_at = UINT64_MAX;
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->changed, NULL);
}

struct gated_read {
    struct larder__source *gate;
    uint64_t offset;
    size_t length;
    int priority, rc;
    uint8_t *buf;
};

static void *gated_read_thread(void *arg)
{
    struct gated_read *r = arg;
    r->rc =
        larder__source_read(r->gate, r->buf, r->length, r->offset, larder__read_at(r->priority));
    return NULL;
}

/* With no reader about, background still goes in pieces (a reader that
 * arrives finds pieces ahead of it at the origin, never whole chunks), in
 * order, every byte read once. */
TEST(source_gate_background_goes_in_pieces_with_no_reader_about)
{
    static struct held_origin o;
    origin_init(&o);
    struct larder__source *gate;
    CHECK_EQ(larder__source_gate_open(&gate, &o.base), 0);
    uint8_t *buf = malloc(1 << 20);
    CHECK_EQ(larder__source_read(gate, buf, 1 << 20, 0, larder__read_at(LARDER__HINTED)),
             LARDER__FROM_ORIGIN);
    CHECK_EQ(o.reads, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(o.lengths[i], 256 << 10);
        CHECK_EQ(o.offsets[i], (uint64_t)i << 18);
        CHECK_EQ(o.classes[i], LARDER__HINTED);
    }
    CHECK(buf[0] == 'o' && buf[(1 << 20) - 1] == 'o');
    CHECK_EQ(larder__source_gate_waits(), 0); /* no reader: nothing waited for one */
    free(buf);
    larder__source_close(gate);
}

/* The window (fake clock, piece times given): pieces near the base open
 * it to its ceiling; a delay past the target halves it, once for pieces
 * that ended together; it never closes below one piece. */
TEST(source_gate_window_opens_on_a_quiet_origin_and_halves_on_delay)
{
    struct larder__gate_window w;
    larder__gate_window_init(&w);
    CHECK_EQ(w.slots, 2);
    uint64_t now = 1000000;
    /* an object store: 40 ms a piece, every piece alike: no queue */
    for (int i = 0; i < 100; i++)
        larder__gate_window_update(&w, 40000, now += 1000);
    CHECK_EQ(w.slots, 32);
    /* a queue builds: 40 ms + 30 ms of waiting (past the 25 ms target) */
    CHECK_EQ(larder__gate_window_update(&w, 70000, now += 1000), 16);
    /* pieces that were in flight with it saw the same queue: no second halving */
    CHECK_EQ(larder__gate_window_update(&w, 70000, now += 1000), 16);
    /* a piece time later, still delayed: halves again, down to one */
    CHECK_EQ(larder__gate_window_update(&w, 70000, now += 80000), 8);
    for (int i = 0; i < 10; i++)
        larder__gate_window_update(&w, 90000, now += 100000);
    CHECK_EQ(w.slots, 1);
    /* between half the target and the target: one more a window, not doubling */
    CHECK_EQ(larder__gate_window_update(&w, 60000, now += 1000), 2);
    CHECK_EQ(larder__gate_window_update(&w, 60000, now += 1000), 2);
    CHECK_EQ(larder__gate_window_update(&w, 60000, now += 1000), 3);
}

/* A saturated link: each piece's time grows with the pieces in flight
 * (queue = pieces x transfer time); the window settles where the queue
 * stays about the target, far below its ceiling. */
TEST(source_gate_window_stays_small_on_a_saturated_link)
{
    struct larder__gate_window w;
    larder__gate_window_init(&w);
    uint64_t now = 1000000;
    const uint64_t transfer = 10000; /* 10 ms a piece on the link, 2 ms latency */
    int most = 0;
    for (int i = 0; i < 2000; i++) {
        uint64_t piece = 2000 + transfer * (uint64_t)w.slots;
        larder__gate_window_update(&w, piece, now += piece / (uint64_t)w.slots);
        if (i > 100 && w.slots > most) most = w.slots;
    }
    /* the base is learned with 2 pieces in flight (22 ms); past 25 ms more
     * (2.5 pieces more) it halves: never above 5 once settled */
    CHECK(most >= 2 && most <= 5);
    CHECK(w.slots >= 1);
}

/* The base is refreshed: an origin that is slower for good (another
 * route) is the base again within two epochs, and the window reopens. */
TEST(source_gate_window_base_follows_a_slower_origin)
{
    struct larder__gate_window w;
    larder__gate_window_init(&w);
    uint64_t now = 1000000;
    for (int i = 0; i < 50; i++)
        larder__gate_window_update(&w, 5000, now += 1000);
    CHECK_EQ(w.slots, 32);
    for (int i = 0; i < 10; i++) /* 100 ms a piece from now on */
        larder__gate_window_update(&w, 100000, now += 200000);
    CHECK_EQ(w.slots, 1);
    for (int i = 0; i < 1300; i++) /* 130 s: two epochs of 60 s */
        larder__gate_window_update(&w, 100000, now += 100000);
    CHECK_EQ(w.slots, 32);
}

TEST(source_gate_background_waits_for_a_demand_read_then_goes_in_pieces)
{
    static struct held_origin o;
    origin_init(&o);
    o.hold_at = 7; /* the DEMAND read's offset */
    struct larder__source *gate;
    CHECK_EQ(larder__source_gate_open(&gate, &o.base), 0);
    static uint8_t demand_buf[4096], background_buf[1 << 20], more_buf[1 << 20];
    struct gated_read demand = {gate, 7, sizeof demand_buf, LARDER__DEMAND, 0, demand_buf};
    struct gated_read background = {gate,           1 << 20, sizeof background_buf,
                                    LARDER__HINTED, 0,       background_buf};
    struct gated_read more = {gate, 4 << 20, sizeof more_buf, LARDER__WARM, 0, more_buf};
    pthread_t t_demand, t_background, t_more;
    CHECK_EQ(pthread_create(&t_demand, NULL, gated_read_thread, &demand), 0);
    pthread_mutex_lock(&o.lock);
    while (!o.held)
        pthread_cond_wait(&o.changed, &o.lock);
    pthread_mutex_unlock(&o.lock);
    /* the DEMAND read is at the origin: background reads queue at the gate */
    CHECK_EQ(pthread_create(&t_background, NULL, gated_read_thread, &background), 0);
    CHECK_EQ(pthread_create(&t_more, NULL, gated_read_thread, &more), 0);
    for (int i = 0; i < 20; i++) { /* a while: nothing of theirs may reach the origin */
        struct timespec nap = {0, 5 * 1000000};
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&o.lock);
        CHECK_EQ(o.reads, 1);
        pthread_mutex_unlock(&o.lock);
    }
    pthread_mutex_lock(&o.lock);
    o.release = true;
    pthread_cond_broadcast(&o.changed);
    pthread_mutex_unlock(&o.lock);
    pthread_join(t_demand, NULL);
    pthread_join(t_background, NULL);
    pthread_join(t_more, NULL);
    CHECK_EQ(demand.rc, LARDER__FROM_ORIGIN);
    CHECK_EQ(background.rc, LARDER__FROM_ORIGIN);
    CHECK_EQ(more.rc, LARDER__FROM_ORIGIN);
    /* 1 + 2 x 16 pieces of 64 KiB (a reader is active: small pieces), at
     * most 2 at once besides the DEMAND read's end */
    CHECK_EQ(o.reads, 33);
    CHECK_EQ(o.classes[0], LARDER__DEMAND);
    for (int i = 1; i < 33; i++) {
        CHECK_EQ(o.lengths[i], 64 << 10);
        CHECK(o.classes[i] >= LARDER__HINTED);
    }
    CHECK(o.most_in_flight <= 2);
    CHECK(background_buf[0] == 'o' && background_buf[sizeof background_buf - 1] == 'o');
    CHECK(more_buf[0] == 'o' && more_buf[sizeof more_buf - 1] == 'o');
    CHECK(larder__source_gate_waits() >= 2);
    larder__source_close(gate);
}

/* A peer's readers (READERS, larder__source_gate_hold): no background
 * piece reaches the origin while the hold lasts (1 s, looked at well
 * within it), then pieces of 64 KiB go one at a time while that peer's
 * readers count as active. */
TEST(source_gate_peer_readers_hold_background_then_one_small_piece)
{
    static struct held_origin o;
    origin_init(&o);
    struct larder__source *gate;
    CHECK_EQ(larder__source_gate_open(&gate, &o.base), 0);
    static uint8_t buf[1 << 20];
    larder__source_gate_hold(1000);
    struct gated_read background = {gate, 0, sizeof buf, LARDER__HINTED, 0, buf};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, gated_read_thread, &background), 0);
    for (int i = 0; i < 10; i++) {
        struct timespec nap = {0, 5 * 1000000};
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&o.lock);
        CHECK_EQ(o.reads, 0);
        pthread_mutex_unlock(&o.lock);
    }
    pthread_join(t, NULL);
    CHECK_EQ(background.rc, LARDER__FROM_ORIGIN);
    CHECK_EQ(o.reads, 16);
    for (int i = 0; i < 16; i++)
        CHECK_EQ(o.lengths[i], 64 << 10);
    CHECK_EQ(o.most_in_flight, 1);
    CHECK(larder__source_gate_waits() >= 1);
    CHECK(buf[0] == 'o' && buf[sizeof buf - 1] == 'o');
    larder__source_close(gate);
}

/* Background is never hedged (source_hedge.c): a HINTED read stalled at
 * the origin well past the hedge's cold delay (500 ms) stays one read, and
 * counts neither in the hedge budget nor in the latency window.  Without
 * the rule a second, identical read reaches the origin after 500 ms. */
TEST(source_hedge_leaves_background_reads_alone)
{
    static struct held_origin o;
    origin_init(&o);
    o.hold_at = 0;
    struct larder__hedge_budget *budget;
    CHECK_EQ(larder__hedge_open_local(&budget), 0);
    struct larder__source *hedged;
    CHECK_EQ(larder__source_hedge_open(&hedged, &o.base, budget), 0);
    uint64_t hedges = larder__source_hedges();
    static uint8_t buf[64 << 10];
    struct gated_read background = {hedged, 0, sizeof buf, LARDER__HINTED, 0, buf};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, gated_read_thread, &background), 0);
    for (int i = 0; i < 80; i++) { /* 800 ms */
        struct timespec nap = {0, 10 * 1000000};
        nanosleep(&nap, NULL);
    }
    pthread_mutex_lock(&o.lock);
    CHECK_EQ(o.reads, 1);
    o.release = true;
    pthread_cond_broadcast(&o.changed);
    pthread_mutex_unlock(&o.lock);
    pthread_join(t, NULL);
    CHECK_EQ(background.rc, LARDER__FROM_ORIGIN);
    CHECK_EQ(larder__source_hedges(), hedges);
    struct larder__hedge_stats st;
    larder__hedge_stats_get(budget, &st);
    CHECK_EQ(st.reads, 0);
    CHECK_EQ(st.hedges, 0);
    larder__source_close(hedged);
    larder__hedge_close(budget);
}
