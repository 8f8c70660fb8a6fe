/*
 * source_gate.c - background reads of an origin yield to foreground ones
 * (source.h, larder__source_gate_open).
 *
 * Why: an origin that is a shared link (a parallel file system, an object
 * store's bandwidth, slowfs in the benchmarks) serves reads roughly in the
 * order they arrive, so a reader's DEMAND read waits behind every byte of
 * background staging already asked of it, whatever the daemon's queues
 * do: 4 daemons staging a hot hint with 32 reads of 4 MiB in flight each
 * put half a gigabyte ahead of a training reader's next sample.  The pool's
 * shares keep workers free for DEMAND; they do not keep the origin free.
 *
 * So, for the reads of the origins wrapped with one gate (a daemon wraps
 * every shard's origin; the gate is the process's), while readers are
 * active (a DEMAND or NEAR read of a gated origin in the last
 * GATE_ACTIVE_MS; otherwise background reads pass whole, at full speed):
 *   - a HINTED or WARM read goes in pieces of at most GATE_PIECE bytes, at
 *     most GATE_SLOTS pieces in flight at once, so little background is
 *     ever ahead of a foreground read;
 *   - a piece does not start while a DEMAND or NEAR read of a gated origin
 *     is in flight, nor within GATE_QUIET_MS after one ended (a reader
 *     between two reads is still reading), so background fills the gaps;
 *   - foreground reads pass untouched, only counted.
 * Background work therefore slows while readers read, and stops only while
 * they read without pause; nothing running is cut: a reader that starts
 * while background reads are in flight whole waits for those once.
 */
#include "source.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GATE_PIECE (256u << 10) /* bytes of one background piece */
#define GATE_SLOTS 2            /* background pieces in flight, node-wide */
#define GATE_QUIET_MS 20        /* after a foreground read, before background resumes */
#define GATE_ACTIVE_MS 1000     /* readers are active this long after their last read */

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int foreground;          /* DEMAND and NEAR reads in flight */
    int background;          /* background pieces in flight */
    int64_t quiet_until_ms;  /* no background piece starts before this */
    int64_t active_until_ms; /* background is paced until this */
    uint64_t waited_pieces;  /* background pieces that waited for foreground reads */
    int whole;               /* background reads in flight whole (no reader was about) */
};

static struct gate process_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

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

/* Wait (lock held) until a background piece may start, then count it. */
static void enter_background(struct gate *g)
{
    bool waited = false;
    for (;;) {
        int64_t now = now_ms();
        if (g->background < GATE_SLOTS && g->foreground == 0 && now >= g->quiet_until_ms) break;
        waited = true;
        if (g->foreground == 0 && g->background < GATE_SLOTS) {
            /* only the quiet time is left: sleep it off (CLOCK_REALTIME for the condition) */
            struct timespec at;
            clock_gettime(CLOCK_REALTIME, &at);
            int64_t ns = at.tv_nsec + (g->quiet_until_ms - now) * 1000000;
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
        int ahead = g->background + g->whole;
        if (ahead > thread_trace.background_ahead) thread_trace.background_ahead = ahead;
        pthread_mutex_unlock(&g->lock);
        uint64_t began = now_us();
        rc = larder__source_readv(inner, extents, count, flags);
        traced(now_us() - began, extent_bytes(extents, count));
        pthread_mutex_lock(&g->lock);
        g->foreground--;
        g->quiet_until_ms = now_ms() + GATE_QUIET_MS;
        g->active_until_ms = now_ms() + GATE_ACTIVE_MS;
        pthread_cond_broadcast(&g->changed);
        pthread_mutex_unlock(&g->lock);
        return rc;
    }
    pthread_mutex_lock(&g->lock);
    bool paced = now_ms() < g->active_until_ms;
    if (!paced) g->whole++;
    pthread_mutex_unlock(&g->lock);
    if (!paced) { /* no reader about */
        uint64_t began = now_us();
        rc = larder__source_readv(inner, extents, count, flags);
        traced(now_us() - began, extent_bytes(extents, count));
        pthread_mutex_lock(&g->lock);
        g->whole--;
        pthread_mutex_unlock(&g->lock);
        return rc;
    }
    for (size_t i = 0; rc >= 0 && i < count; i++)
        for (size_t done = 0; rc >= 0 && done < extents[i].length;) {
            size_t n = extents[i].length - done;
            if (n > GATE_PIECE) n = GATE_PIECE;
            struct larder__extent piece = {(uint8_t *)extents[i].buf + done,
                                           extents[i].offset + done, n};
            uint64_t asked = now_us();
            pthread_mutex_lock(&g->lock);
            enter_background(g);
            pthread_mutex_unlock(&g->lock);
            uint64_t began = now_us();
            thread_trace.wait_us += began - asked;
            rc = larder__source_readv(inner, &piece, 1, flags);
            traced(now_us() - began, n);
            pthread_mutex_lock(&g->lock);
            g->background--;
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
    *background = process_gate.background + process_gate.whole;
    pthread_mutex_unlock(&process_gate.lock);
}
