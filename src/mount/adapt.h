/*
 * adapt.h - the adaptive limit on staging pieces in flight (stager.c,
 * docs/mount.md "Staging on open"): a rule over the readers' miss
 * latencies alone, no I/O, no clock, no lock (the caller holds its own),
 * so that it can be tested with made-up latencies.
 *
 * The limit starts at one piece.  Misses that begin with no staging in
 * flight set the baseline (an EWMA); misses with staging in flight are
 * taken in windows of LARDER__MOUNT_ADAPT_WINDOW, and each window's
 * median against the baseline decides: within GROW_BELOW times it the
 * limit grows by one, over SHRINK_ABOVE times it the limit halves.  With
 * no quiet miss yet (staging begins with a file's first open), the
 * lowest window median seen stands in for the baseline.  A whole limit's
 * worth of pieces answered with no reader missing meanwhile grows it by
 * one too: staging is in nobody's way.
 */
#ifndef LARDER_MOUNT_ADAPT_H
#define LARDER_MOUNT_ADAPT_H

#include <stdbool.h>

#define LARDER__MOUNT_ADAPT_MAX 32   /* pieces in flight at most */
#define LARDER__MOUNT_ADAPT_WINDOW 8 /* misses per decision */

struct larder__mount_adapt {
    unsigned limit;  /* pieces allowed in flight now; 0 is taken as 1 */
    double baseline; /* ms: what a reader's miss costs with no staging in the way; 0: unknown */
    double quiet;    /* ms: EWMA of misses begun with no staging in flight; 0: none yet */
    double window[LARDER__MOUNT_ADAPT_WINDOW]; /* ms: the latest misses with staging in flight */
    unsigned filled;                           /* how many of window are set */
    unsigned pieces_calm;                      /* pieces answered since the last reader's miss */
};

/* A reader's miss took `ms` milliseconds, with staging in flight when it
 * began or not.  true when the limit changed (*why says why, for the trace). */
bool larder__mount_adapt_miss(struct larder__mount_adapt *a, double ms, bool staging,
                              const char **why);
/* A staging piece was answered.  true when the limit changed (*why says why). */
bool larder__mount_adapt_piece(struct larder__mount_adapt *a, const char **why);

#endif
