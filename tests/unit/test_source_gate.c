/*
 * test_source_gate.c - background reads of a gated origin yield to
 * foreground ones (source_gate.c): with no reader about, a HINTED read
 * passes whole; while a DEMAND read is in flight, a HINTED read does not
 * reach the origin at all, and after it, goes in pieces of 256 KiB with
 * at most 2 in flight.  Order and counts are checked, never time.  The
 * gate is the process's: each test runs in a process of its own.
 */
#include "source.h"
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

TEST(source_gate_background_passes_whole_with_no_reader_about)
{
    static struct held_origin o;
    origin_init(&o);
    struct larder__source *gate;
    CHECK_EQ(larder__source_gate_open(&gate, &o.base), 0);
    uint8_t *buf = malloc(1 << 20);
    CHECK_EQ(larder__source_read(gate, buf, 1 << 20, 0, larder__read_at(LARDER__HINTED)),
             LARDER__FROM_ORIGIN);
    CHECK_EQ(o.reads, 1);
    CHECK_EQ(o.lengths[0], 1 << 20);
    CHECK_EQ(o.classes[0], LARDER__HINTED);
    CHECK(buf[0] == 'o' && buf[(1 << 20) - 1] == 'o');
    free(buf);
    larder__source_close(gate);
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
    /* 1 + 2 x 4 pieces of 256 KiB, at most 2 at once besides the DEMAND read's end */
    CHECK_EQ(o.reads, 9);
    CHECK_EQ(o.classes[0], LARDER__DEMAND);
    for (int i = 1; i < 9; i++) {
        CHECK_EQ(o.lengths[i], 256 << 10);
        CHECK(o.classes[i] >= LARDER__HINTED);
    }
    CHECK(o.most_in_flight <= 2);
    CHECK(background_buf[0] == 'o' && background_buf[sizeof background_buf - 1] == 'o');
    CHECK(more_buf[0] == 'o' && more_buf[sizeof more_buf - 1] == 'o');
    CHECK(larder__source_gate_waits() >= 2);
    larder__source_close(gate);
}
