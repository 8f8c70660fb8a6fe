/*
 * source_hedge.h - the one hedging policy (private to the sources).
 *
 * When to send a second request for a read, and whether it may be sent:
 * a read of a source still unanswered after the recent p95 latency of that
 * source (over its last LARDER__HEDGE_WINDOW reads, once
 * LARDER__HEDGE_MIN_SAMPLES are known; 500 ms before that; never under
 * 2 ms) may be hedged, if the budget (hedge.h) grants it.  Every read that
 * could be hedged is counted in the budget; a hedge is taken before it is
 * sent and refunded if it could not be sent.  A read refused by the budget
 * asks again every LARDER__HEDGE_RETRY_MS: credit comes with every read on
 * the node, and the read may still stall.
 *
 * Two users: the hedge wrapper (source_hedge.c, any source, attempts on
 * shared worker threads) and the HTTP source (source_http.c, which hedges
 * inside its curl multi handle so it can cancel the losing transfer).
 * Both embed a struct larder__hedge_policy and go through these functions,
 * so there is one latency window and one budget rule, not two.
 */
#ifndef LARDER_SOURCE_HEDGE_H
#define LARDER_SOURCE_HEDGE_H

#include "common.h"

#include <pthread.h>

#define LARDER__HEDGE_WINDOW 64
#define LARDER__HEDGE_MIN_SAMPLES 16
#define LARDER__HEDGE_RETRY_MS 50
/*
 * Reads longer than this are neither hedged nor in the latency window.  A
 * hedge cuts a latency tail (a stalled server, a lost packet); a large
 * read's time is its transfer, and against an origin whose link is the
 * bottleneck (a restart storm on a capped file system) a second copy of it
 * only doubles the bytes and slows every read sharing that link
 * (bench/restart.sh measured the origin serving twice the checkpoint).
 * Large reads would also lift the p95 that small reads are hedged by.
 */
#define LARDER__HEDGE_MAX_READ (1u << 20)

struct larder__hedge_budget;

/* The latency window of one source and the budget its hedges draw on. */
struct larder__hedge_policy {
    pthread_mutex_t lock;                    /* guards the window */
    double latency_ms[LARDER__HEDGE_WINDOW]; /* recent good reads, a ring */
    int latencies;                           /* how many of latency_ms hold samples */
    int next_latency;                        /* where the next sample goes */
    struct larder__hedge_budget *budget;     /* NULL: larder__hedge_process(), at each use */
};

LARDER__HIDDEN void larder__hedge_policy_init(struct larder__hedge_policy *policy,
                                              struct larder__hedge_budget *budget);
LARDER__HIDDEN void larder__hedge_policy_clear(struct larder__hedge_policy *policy);
/* How long a read may take, in ms, before it is hedged. */
LARDER__HIDDEN double larder__hedge_policy_delay_ms(struct larder__hedge_policy *policy);
/*
 * Whether reads are so fast (p95 under 2 ms after LARDER__HEDGE_MIN_SAMPLES
 * reads: local disk, page cache) that they are best read inline, unhedged.
 */
LARDER__HIDDEN bool larder__hedge_policy_fast(struct larder__hedge_policy *policy);
/* Whether a read of `length` bytes may be hedged (LARDER__HEDGE_MAX_READ). */
static inline bool larder__hedge_policy_sized(size_t length)
{
    return length <= LARDER__HEDGE_MAX_READ;
}
/* A good read's latency, into the window. */
LARDER__HIDDEN void larder__hedge_policy_record(struct larder__hedge_policy *policy, double ms);
/* Count a read that may be hedged, in the budget. */
LARDER__HIDDEN void larder__hedge_policy_count_read(struct larder__hedge_policy *policy);
/* Ask the budget for a hedge: true when granted (and then counted). */
LARDER__HIDDEN bool larder__hedge_policy_take(struct larder__hedge_policy *policy);
/* Give back a granted hedge that could not be sent. */
LARDER__HIDDEN void larder__hedge_policy_refund(struct larder__hedge_policy *policy);
/* A granted hedge was sent: counted in larder__source_hedges(), logged. */
LARDER__HIDDEN void larder__hedge_policy_sent(struct larder__hedge_policy *policy, const char *name,
                                              double after_ms);

/* Milliseconds on the monotonic clock. */
LARDER__HIDDEN double larder__now_ms(void);

#endif
