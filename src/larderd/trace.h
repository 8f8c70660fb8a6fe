/*
 * trace.h - the daemon's request trace (LARDERD_TRACE=FILE): one line per
 * READ it answered and per hint staging job, with where the time went, so
 * that a reader's slow step can be lined up with what every daemon was
 * doing at that moment (docs/scale.md, "Priorities"; bench/restart.sh).
 *
 * Several daemons may append to one file: each line is written with one
 * write(2) on a file opened O_APPEND, shorter than PIPE_BUF.  Times are
 * wall-clock milliseconds (CLOCK_REALTIME) so that the lines of daemons and
 * of a reader (RESTART_TRACE) line up.  Off (nothing measured beyond a
 * clock read) without LARDERD_TRACE; LARDERD_TRACE_MS=N writes only the
 * lines that took N ms or more.
 */
#ifndef LARDERD_TRACE_H
#define LARDERD_TRACE_H

#include <stdbool.h>
#include <stdint.h>

/* One traced piece of work, filled in by its caller. */
struct trace_span {
    const char *kind; /* "read" (a READ), "stage" (a hint's chunk), "chunk" (borrow.c) */
    int node;         /* this daemon's member index (larderd.h, self) */
    bool peer;        /* a peer's READ (else a local reader's, or this node's) */
    int priority;     /* its class (priority.h) */
    uint32_t shard;   /* what it read */
    uint64_t offset, length;
    uint64_t arrived_us;        /* monotonic: taken off the connection, or queued */
    uint64_t started_us;        /* monotonic: a worker took it */
    uint64_t borrowed_us;       /* monotonic: its chunks of other owners were asked for (borrow) */
    int foreground, background; /* this node's gated origin reads in flight when it started */
};

/* Whether the trace is on (LARDERD_TRACE names a file that opened). */
bool trace_on(void);
/* The monotonic clock in microseconds, as the span's fields take it. */
uint64_t trace_now_us(void);
/* Fill in the start of a span: its worker's start now, and what the gate has in flight. */
void trace_begin(struct trace_span *span);
/* Write the span's line, ended now, with the calling thread's gate figures
 * since trace_begin (larder__source_gate_trace_take). */
void trace_end(const struct trace_span *span, int result);

#endif
