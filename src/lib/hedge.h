/*
 * hedge.h - the hedging budget: how many second requests ("hedges") the
 * readers of a node may send, shared by every process on the node.
 *
 * A hedge cuts one slow read's tail, but against an origin that queues (a
 * shared file system at its cap) every hedge is load added exactly when
 * the origin is slow, so hedges are a budget, not a reflex.  The rule:
 *
 *   In any stretch of time, the hedges sent on a node are at most 5% of
 *   the reads started on it in that stretch (one hedge per
 *   LARDER__HEDGE_READS_PER_HEDGE reads), plus LARDER__HEDGE_SPARE.
 *
 * It is a token bucket.  The budget holds credit counted in reads: every
 * read started adds one, a hedge costs LARDER__HEDGE_READS_PER_HEDGE,
 * and credit never exceeds LARDER__HEDGE_SPARE hedges' worth.  A new
 * budget starts full, so a cold node may hedge its first SPARE stalls
 * (the start-up allowance) before any read has paid for them; the cap
 * makes the budget a window rather than a lifetime total: a node that
 * ran a million quiet reads has saved SPARE hedges, not 50,000.  Since
 * credit comes only from the starting allowance and from reads, the
 * hedges since the budget was made are at most 5% of its reads + SPARE,
 * and over any stretch at most 5% of that stretch's reads + SPARE.
 *
 * Check and count are one step: credit is one 64-bit word changed only by
 * compare-and-swap, so threads and processes racing for the last hedge
 * cannot both take it.
 *
 * Where the budget lives: a process that opens a dataset with a node cache
 * attaches CACHE_DIR/hedge-budget, a one-page file mapped shared by every
 * process on the node (created 0640; a header with magic, version and the
 * rule's two numbers, then the credit word and statistics).  Until then,
 * and when the file cannot be used (unwritable, damaged, another version
 * or rule), the process keeps a budget of its own, with the same rule.
 * A damaged file is left alone for a person to look at (delete it to
 * start afresh); the credit word is clamped on every use, so whatever
 * another process writes there buys at most SPARE hedges.
 */
#ifndef LARDER_HEDGE_H
#define LARDER_HEDGE_H

#include "common.h"

#define LARDER__HEDGE_READS_PER_HEDGE 20  /* 5% */
#define LARDER__HEDGE_SPARE 16            /* hedges: start-up allowance and most saved */
#define LARDER__HEDGE_FILE "hedge-budget" /* in the cache directory */

struct larder__hedge_budget;

/* Totals since the budget was made (statistics; the credit decides). */
struct larder__hedge_stats {
    uint64_t reads;   /* reads started that could have been hedged */
    uint64_t hedges;  /* hedges granted */
    uint64_t refused; /* hedges asked for and refused */
    uint64_t credit;  /* now, in reads: LARDER__HEDGE_READS_PER_HEDGE buys a hedge */
};

/*
 * A budget of this process alone, full.  Returns 0 or -ENOMEM.  Free it
 * with larder__hedge_close.
 */
LARDER__HIDDEN int larder__hedge_open_local(struct larder__hedge_budget **out);
/*
 * Map the budget file at `path`, creating it (full, 0640) if absent.
 * Returns 0; a negative errno when the file cannot be opened, created or
 * mapped (the message names it); LARDER_ECACHE when it is not a budget
 * file of this version and rule (damaged, cut short, another version).
 * The mapping stays valid until larder__hedge_close.
 */
LARDER__HIDDEN int larder__hedge_open_file(struct larder__hedge_budget **out, const char *path);
/* Unmap or free a budget; accepts NULL.  Nobody may be using it. */
LARDER__HIDDEN void larder__hedge_close(struct larder__hedge_budget *budget);

/* Count a read that might be hedged (adds credit up to the cap). */
LARDER__HIDDEN void larder__hedge_count_read(struct larder__hedge_budget *budget);
/*
 * Ask for one hedge: true, and the hedge is counted, when the budget
 * allows it; false when it does not (counted as refused).
 */
LARDER__HIDDEN bool larder__hedge_take(struct larder__hedge_budget *budget);
/*
 * Give back a hedge that was granted but never sent (no memory, no
 * connection): its credit returns, within the cap.
 */
LARDER__HIDDEN void larder__hedge_refund(struct larder__hedge_budget *budget);
/* The budget's totals and credit now. */
LARDER__HIDDEN void larder__hedge_stats_get(const struct larder__hedge_budget *budget,
                                            struct larder__hedge_stats *stats);

/* ---- the budget of this process ------------------------------------------ */

/*
 * The budget the origins of this process draw on: the node's once
 * larder__hedge_attach succeeded, else one of the process's own.  Never
 * NULL; valid for the life of the process.
 */
LARDER__HIDDEN struct larder__hedge_budget *larder__hedge_process(void);
/*
 * Share the node's budget in `cache_dir` (its LARDER__HEDGE_FILE) from
 * now on.  The first directory attached stays for the life of the process
 * (origins of every dataset may be using it); attaching again is a no-op.
 * Returns 0, or a negative code when the file cannot be used, in which
 * case the process keeps its own budget (and a warning is logged): a
 * dataset opens either way.
 */
LARDER__HIDDEN int larder__hedge_attach(const char *cache_dir);

#endif
