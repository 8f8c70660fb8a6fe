/*
 * adapt.h - the adaptive limit on staging pieces in flight (stager.c,
 * docs/mount.md "Staging on open"): a rule over the readers' miss
 * latencies alone, no I/O, no clock, no lock (the caller holds its own),
 * so that it can be tested with made-up latencies.
 *
 * The limit starts at one piece.  Misses that begin with no staging in
 * flight are "quiet" (an EWMA); misses with staging in flight are taken
 * in windows of LARDER__MOUNT_ADAPT_WINDOW, and each window's median
 * against the baseline decides: within GROW_BELOW times it the limit
 * grows, over SHRINK_ABOVE times it the limit halves.  Growth is a slow
 * start, as TCP's: the limit doubles per good window until the first
 * halving, and grows by one per good window after it.  A whole limit's
 * worth of pieces answered with no reader missing meanwhile grows it the
 * same way: staging is in nobody's way.
 *
 * The baseline is the lowest of the quiet EWMA and the medians of the
 * last LARDER__MOUNT_ADAPT_RECENT windows (a windowed minimum, as BBR
 * keeps its minimum round trip): misses slowed by something other than
 * staging (the readers' own load on the origin, a congested origin) raise
 * it once halving has not brought them down, instead of holding staging
 * at one piece for good against a latency seen once in a calm moment.
 * The quiet EWMA ages out the same way: once RECENT windows have been
 * decided with no quiet miss among them, it no longer counts (a review
 * finding: a quiet miss from the first second held the baseline for good).
 */
#ifndef LARDER_MOUNT_ADAPT_H
#define LARDER_MOUNT_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

#define LARDER__MOUNT_ADAPT_MAX 32   /* pieces in flight at most */
#define LARDER__MOUNT_ADAPT_WINDOW 8 /* misses per decision */
#define LARDER__MOUNT_ADAPT_RECENT 8 /* window medians the baseline is the lowest of */

struct larder__mount_adapt {
    unsigned limit;  /* pieces allowed in flight now; 0 is taken as 1 */
    bool congested;  /* halved once: grow by one, not double (slow start ended) */
    double baseline; /* ms: what a reader's miss costs with no staging in the way; 0: unknown */
    double quiet;    /* ms: EWMA of misses begun with no staging in flight; 0: none yet */
    double window[LARDER__MOUNT_ADAPT_WINDOW]; /* ms: the latest misses with staging in flight */
    unsigned filled;                           /* how many of window are set */
    double recent[LARDER__MOUNT_ADAPT_RECENT]; /* ms: the latest windows' medians, a ring */
    unsigned recent_count;                     /* how many of recent are set */
    unsigned recent_next;                      /* where the next median goes */
    unsigned pieces_calm;                      /* pieces answered since the last reader's miss */
    unsigned quiet_age; /* windows decided since the last quiet miss: past RECENT, quiet is 0 */
};

/* A reader's miss took `ms` milliseconds, with staging in flight when it
 * began or not.  true when the limit changed (*why says why, for the trace). */
bool larder__mount_adapt_miss(struct larder__mount_adapt *a, double ms, bool staging,
                              const char **why);
/* Pieces allowed in flight now with `waiting` readers waiting on a miss:
 * the limit (a fixed one when `fixed` > 0, the --stage-inflight option;
 * at least 1), halved (at least 1) while some wait. */
unsigned larder__mount_adapt_allowed(const struct larder__mount_adapt *a, unsigned fixed,
                                     unsigned waiting);
/* A staging piece was answered.  true when the limit changed (*why says why). */
bool larder__mount_adapt_piece(struct larder__mount_adapt *a, const char **why);

/* A miss of n bytes at shard offset `at` in a file being staged brings
 * LARDER__MOUNT_MISS_SPAN bytes from `at` on, `left` bytes of file there
 * at most, cut at the last checksum block boundary (blocks of 2^sum_shift
 * bytes; 0: none) within them but never short of the miss's own blocks:
 * a fill reads whole checksum blocks, and 512 KiB from the second half of
 * a 1 MiB block read two of them where the reader needed one.  The span. */
#define LARDER__MOUNT_MISS_SPAN (UINT64_C(512) << 10)
uint64_t larder__mount_miss_span(uint64_t at, uint64_t n, uint64_t left, unsigned sum_shift);

#endif
