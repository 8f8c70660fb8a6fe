/*
 * trace.c - the daemon's request trace (trace.h).  A line:
 *
 *   T_MS NODE KIND peer|local CLASS SHARD OFFSET LENGTH queue=MS borrow=MS
 *   total=MS gate=MS origin=MS origin_bytes=N origin_reads=N ahead=N
 *   fg=N bg=N rc=N
 *
 * T_MS: when the work arrived (wall clock, ms); queue: until a worker took
 * it; borrow: asking other owners for their chunks (the wait for them is in
 * total); gate: its background pieces waiting at the source gate; origin:
 * in the origin's reads on this thread; ahead: the most background origin
 * reads in flight on this node when one of its foreground origin reads
 * began; fg, bg: this node's gated reads in flight when a worker took it.
 */
#include "trace.h"

#include "larderd.h"
#include "source.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int trace_fd = -1;
static uint64_t slower_than_us;
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;

static void trace_open(void)
{
    const char *path = getenv("LARDERD_TRACE");
    if (!path || !*path) return;
    trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (trace_fd < 0) say("LARDERD_TRACE: cannot open %s: no trace", path);
    const char *ms = getenv("LARDERD_TRACE_MS");
    if (ms) {
        char *end;
        long value = strtol(ms, &end, 10);
        if (*end == 0 && value >= 0 && value < 3600000) slower_than_us = (uint64_t)value * 1000;
    }
}

bool trace_on(void)
{
    pthread_once(&trace_once, trace_open);
    return trace_fd >= 0;
}

uint64_t trace_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void trace_begin(struct trace_span *span)
{
    if (!trace_on()) return; /* off: not even the gate's lock */
    struct larder__gate_trace forget;
    larder__source_gate_trace_take(&forget); /* what this thread did before is not this span's */
    span->started_us = trace_now_us();
    larder__source_gate_state(&span->foreground, &span->background);
}

static double ms(uint64_t us)
{
    return (double)us / 1000.0;
}

void trace_end(const struct trace_span *span, int result)
{
    if (!trace_on()) return;
    struct larder__gate_trace g;
    larder__source_gate_trace_take(&g);
    uint64_t end = trace_now_us();
    uint64_t total = end - span->arrived_us;
    if (total < slower_than_us) return;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    double arrived_ms = (double)wall.tv_sec * 1000.0 + (double)wall.tv_nsec / 1e6 - ms(total);
    uint64_t queued = span->started_us > span->arrived_us ? span->started_us - span->arrived_us : 0;
    uint64_t borrow =
        span->borrowed_us > span->started_us ? span->borrowed_us - span->started_us : 0;
    char line[512];
    int n = snprintf(line, sizeof line,
                     "%.3f %d %s %s %s %u %llu %llu queue=%.2f borrow=%.2f total=%.2f gate=%.2f "
                     "origin=%.2f origin_bytes=%llu origin_reads=%u ahead=%d fg=%d bg=%d rc=%d\n",
                     arrived_ms, span->node, span->kind, span->peer ? "peer" : "local",
                     larder__priority_name(span->priority), span->shard,
                     (unsigned long long)span->offset, (unsigned long long)span->length, ms(queued),
                     ms(borrow), ms(total), ms(g.wait_us), ms(g.origin_us),
                     (unsigned long long)g.origin_bytes, g.origin_reads, g.background_ahead,
                     span->foreground, span->background, result);
    if (n > 0 && (size_t)n < sizeof line && write(trace_fd, line, (size_t)n) < 0) {
        /* a trace is for a look: a full disk does not stop the daemon */
    }
}
