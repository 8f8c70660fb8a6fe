/*
 * source_gate.c - background reads of an origin yield to foreground ones
 * (source.h, larder__source_gate_open).
 *
 * Why: an origin that is a shared link (a parallel file system, an object
 * store's bandwidth, slowfs in the benchmarks) serves reads roughly in the
 * order they arrive, so a reader's DEMAND read waits behind every byte of
 * background staging already asked of it, whatever the daemon's queues
 * do: 4 daemons staging a hot hint with 16 reads of 4 MiB in flight each
 * put 256 MiB (2.7 s at 100 MB/s) ahead of a training reader's first
 * sample (LARDERD_TRACE showed it).  The pool's shares keep workers free
 * for DEMAND; they do not keep the origin free.
 *
 * So, for the reads of the origins wrapped with one gate (a daemon wraps
 * every shard's origin; the gate is the process's):
 *   - a HINTED or WARM read always goes in pieces of at most GATE_PIECE
 *     bytes, and nothing running is ever cut, so what a reader that
 *     arrives finds ahead of it is the pieces in flight, never whole
 *     chunks;
 *   - how many pieces may be in flight adapts to the origin's delay, as
 *     LEDBAT does (RFC 6817): each piece's time against the least seen
 *     lately (the base: the origin's own latency and transfer time); while
 *     the excess stays under GATE_TARGET_US the window grows (doubling
 *     under half of it, by one a window between), above it the window
 *     halves, down to one piece.  On an origin whose latency dominates (an
 *     object store) pieces do not queue and the window opens to
 *     GATE_MAX_SLOTS; on a saturated link (every node's background adds to
 *     the same queue, and each node sees the delay) it stays small, so a
 *     reader arriving waits about GATE_TARGET_US behind background, not
 *     seconds;
 *   - while readers are active (a DEMAND or NEAR read of a gated origin in
 *     the last GATE_ACTIVE_MS), at most GATE_SLOTS pieces are in flight,
 *     and a piece does not start while a DEMAND or NEAR read of a gated
 *     origin is in flight, nor within GATE_QUIET_MS after one ended (a
 *     reader between two reads is still reading), so background fills the
 *     gaps;
 *   - foreground reads pass untouched, only counted.
 */
#include "source.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GATE_PIECE (256u << 10)       /* bytes of one background piece */
#define GATE_ACTIVE_PIECE (64u << 10) /* ... while readers (here or a peer's) are active */
#define GATE_SLOTS 2                /* background pieces in flight, node-wide, while readers read */
#define GATE_MAX_SLOTS 32           /* ... with no reader about, at most (the window's ceiling) */
#define GATE_TARGET_US 25000        /* delay background may add to a piece's time at the origin */
#define GATE_BASE_EPOCH_US 60000000 /* the base is the least piece time of this and the last */
#define GATE_QUIET_MS 20            /* after a foreground read, before background resumes */
#define GATE_ACTIVE_MS 1000         /* readers are active this long after their last read */

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int foreground;                    /* DEMAND and NEAR reads in flight */
    int background;                    /* background pieces in flight */
    int64_t quiet_until_ms;            /* no background piece starts before this */
    int64_t active_until_ms;           /* background is paced until this */
    uint64_t waited_pieces;            /* background pieces that waited for foreground reads */
    struct larder__gate_window window; /* pieces in flight with no reader about */
    int64_t held_until_ms;   /* a peer's readers: no background piece starts before this */
    int64_t remote_until_ms; /* a peer's readers are active until this: one piece at most */
    void (*watcher)(void *); /* told of each foreground read's start and end */
    void *watcher_context;
};

static struct gate process_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

void larder__gate_window_init(struct larder__gate_window *w)
{
    /* as many pieces as while readers read: the pool's and the peers'
     * guarantees (half the workers' reads reach the origin) start from it */
    *w = (struct larder__gate_window){
        .slots = GATE_SLOTS, .base_us = UINT64_MAX, .last_base_us = UINT64_MAX};
}

int larder__gate_window_update(struct larder__gate_window *w, uint64_t piece_us, uint64_t now_us)
{
    if (w->slots < 1) larder__gate_window_init(w);
    /* the base: the least piece time of this epoch and the last, so that a
     * route or an origin that became slower for good is the base again
     * within two epochs (LEDBAT's base history, in two buckets) */
    if (now_us - w->epoch_us >= GATE_BASE_EPOCH_US) {
        w->epoch_us = now_us;
        w->last_base_us = w->base_us;
        w->base_us = UINT64_MAX;
    }
    if (piece_us < w->base_us) w->base_us = piece_us;
    uint64_t base = w->base_us < w->last_base_us ? w->base_us : w->last_base_us;
    uint64_t delay = piece_us - base;
    if (delay > GATE_TARGET_US) {
        /* halve at most once a piece time: the pieces in flight together
         * all saw the same queue */
        if (now_us - w->decreased_us >= piece_us || w->decreased_us == 0) {
            w->slots = w->slots / 2 > 1 ? w->slots / 2 : 1;
            w->decreased_us = now_us;
            w->counted = 0;
        }
    } else if (delay < GATE_TARGET_US / 2) {
        if (w->slots < GATE_MAX_SLOTS) w->slots++; /* one per piece: doubles a window */
    } else if (++w->counted >= w->slots) {
        w->counted = 0;
        if (w->slots < GATE_MAX_SLOTS) w->slots++; /* one per window */
    }
    return w->slots;
}

struct gated_source {
    struct larder__source base;
    struct larder__source *inner;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* What the calling thread's gated reads did since its last take (a
 * request trace's breakdown, larder__source_gate_trace_take). */
static _Thread_local struct larder__gate_trace thread_trace;

/* Count one inner read of `bytes` that took `us` on this thread. */
static void traced(uint64_t us, uint64_t bytes)
{
    thread_trace.origin_us += us;
    thread_trace.origin_bytes += bytes;
    thread_trace.origin_reads++;
}

/* The pieces that may be in flight now (lock held): the window, and no
 * more than GATE_SLOTS while readers are active. */
static int slots_now(struct gate *g, int64_t now)
{
    if (g->window.slots < 1) larder__gate_window_init(&g->window);
    int slots = g->window.slots;
    if (now < g->active_until_ms && slots > GATE_SLOTS) slots = GATE_SLOTS;
    if (now < g->remote_until_ms) slots = 1; /* what a peer's reader finds ahead: one per node */
    return slots;
}

/* Wait (lock held) until a background piece may start, then count it. */
static void enter_background(struct gate *g)
{
    bool waited = false;
    for (;;) {
        int64_t now = now_ms();
        bool active = now < g->active_until_ms;
        int slots = slots_now(g, now);
        int64_t until =
            active && g->quiet_until_ms > g->held_until_ms ? g->quiet_until_ms : g->held_until_ms;
        if (g->background < slots && (!active || g->foreground == 0) && now >= until) break;
        if (active || now < until) waited = true; /* for readers, not only for the window */
        if ((!active || g->foreground == 0) && g->background < slots) {
            /* only the quiet or held time is left: sleep it off
             * (CLOCK_REALTIME for the condition) */
            struct timespec at;
            clock_gettime(CLOCK_REALTIME, &at);
            int64_t ns = at.tv_nsec + (until - now) * 1000000;
            at.tv_sec += ns / 1000000000;
            at.tv_nsec = ns % 1000000000;
            pthread_cond_timedwait(&g->changed, &g->lock, &at);
        } else {
            pthread_cond_wait(&g->changed, &g->lock);
        }
    }
    g->background++;
    g->waited_pieces += waited;
}

static uint64_t extent_bytes(const struct larder__extent *extents, size_t count)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < count; i++)
        bytes += extents[i].length;
    return bytes;
}

static int gated_read(struct larder__source *source, const struct larder__extent *extents,
                      size_t count, unsigned flags)
{
    struct larder__source *inner = ((struct gated_source *)source)->inner;
    struct gate *g = &process_gate;
    int rc = 0;
    if (larder__read_class(flags) < LARDER__HINTED) {
        pthread_mutex_lock(&g->lock);
        g->foreground++;
        g->active_until_ms = INT64_MAX; /* until it ends, and GATE_ACTIVE_MS after */
        int ahead = g->background;
        if (ahead > thread_trace.background_ahead) thread_trace.background_ahead = ahead;
        void (*watcher)(void *) = g->watcher;
        void *context = g->watcher_context;
        pthread_mutex_unlock(&g->lock);
        if (watcher) watcher(context);
        uint64_t began = now_us();
        rc = larder__source_readv(inner, extents, count, flags);
        traced(now_us() - began, extent_bytes(extents, count));
        pthread_mutex_lock(&g->lock);
        g->foreground--;
        g->quiet_until_ms = now_ms() + GATE_QUIET_MS;
        g->active_until_ms = now_ms() + GATE_ACTIVE_MS;
        pthread_cond_broadcast(&g->changed);
        watcher = g->watcher;
        context = g->watcher_context;
        pthread_mutex_unlock(&g->lock);
        if (watcher) watcher(context);
        return rc;
    }
    for (size_t i = 0; rc >= 0 && i < count; i++)
        for (size_t done = 0; rc >= 0 && done < extents[i].length;) {
            uint64_t asked = now_us();
            pthread_mutex_lock(&g->lock);
            enter_background(g);
            /* the piece's size once it may start: small while readers are about */
            int64_t now = now_ms();
            size_t most = now < g->active_until_ms || now < g->remote_until_ms ? GATE_ACTIVE_PIECE
                                                                               : GATE_PIECE;
            pthread_mutex_unlock(&g->lock);
            size_t n = extents[i].length - done;
            if (n > most) n = most;
            struct larder__extent piece = {(uint8_t *)extents[i].buf + done,
                                           extents[i].offset + done, n};
            uint64_t began = now_us();
            thread_trace.wait_us += began - asked;
            rc = larder__source_readv(inner, &piece, 1, flags);
            uint64_t ended = now_us();
            traced(ended - began, n);
            pthread_mutex_lock(&g->lock);
            g->background--;
            if (rc >= 0) larder__gate_window_update(&g->window, ended - began, ended);
            pthread_cond_broadcast(&g->changed);
            pthread_mutex_unlock(&g->lock);
            done += n;
        }
    return rc;
}

static int gated_size(struct larder__source *source, uint64_t *size)
{
    return larder__source_size(((struct gated_source *)source)->inner, size);
}

static int gated_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    return larder__source_stream(((struct gated_source *)source)->inner, sink, userdata);
}

static void gated_close(struct larder__source *source)
{
    larder__source_close(((struct gated_source *)source)->inner);
    free(source);
}

static const struct larder__source_ops gated_ops = {
    .kind = "gate",
    .size = gated_size,
    .read = gated_read,
    .stream = gated_stream,
    .close = gated_close,
};

int larder__source_gate_open(struct larder__source **out, struct larder__source *inner)
{
    struct gated_source *s = malloc(sizeof *s);
    if (!s) {
        larder__source_close(inner);
        return -ENOMEM;
    }
    *s = (struct gated_source){.base = {.ops = &gated_ops, .name = inner->name}, .inner = inner};
    *out = &s->base;
    return 0;
}

uint64_t larder__source_gate_waits(void)
{
    pthread_mutex_lock(&process_gate.lock);
    uint64_t n = process_gate.waited_pieces;
    pthread_mutex_unlock(&process_gate.lock);
    return n;
}

void larder__source_gate_trace_take(struct larder__gate_trace *out)
{
    *out = thread_trace;
    memset(&thread_trace, 0, sizeof thread_trace);
}

void larder__source_gate_state(int *foreground, int *background)
{
    pthread_mutex_lock(&process_gate.lock);
    *foreground = process_gate.foreground;
    *background = process_gate.background;
    pthread_mutex_unlock(&process_gate.lock);
}

int larder__source_gate_slots(void)
{
    pthread_mutex_lock(&process_gate.lock);
    int slots = slots_now(&process_gate, now_ms());
    pthread_mutex_unlock(&process_gate.lock);
    return slots;
}

void larder__source_gate_hold(unsigned hold_ms)
{
    if (hold_ms > 1000) hold_ms = 1000;
    pthread_mutex_lock(&process_gate.lock);
    int64_t now = now_ms();
    if (now + hold_ms > process_gate.held_until_ms) process_gate.held_until_ms = now + hold_ms;
    process_gate.remote_until_ms = now + hold_ms + GATE_ACTIVE_MS;
    pthread_cond_broadcast(&process_gate.changed);
    pthread_mutex_unlock(&process_gate.lock);
}

void larder__source_gate_watch(void (*watcher)(void *context), void *context)
{
    pthread_mutex_lock(&process_gate.lock);
    process_gate.watcher = watcher;
    process_gate.watcher_context = context;
    pthread_mutex_unlock(&process_gate.lock);
}

int larder__source_gate_held_ms(void)
{
    pthread_mutex_lock(&process_gate.lock);
    int64_t left = process_gate.held_until_ms - now_ms();
    pthread_mutex_unlock(&process_gate.lock);
    return left > 0 ? (int)left : 0;
}
