/*
 * cache_nextuse.h - the state of eviction by next use in one process,
 * shared by cache_nextuse.c (the readers, next uses and candidate picks)
 * and cache_admit.c (admission, and what the prefetcher and tests ask).
 */
#ifndef LARDER_CACHE_NEXTUSE_H
#define LARDER_CACHE_NEXTUSE_H

#include "cache_internal.h"
#include "plan.h"

#define LARDER__NEXTUSE_GROUPS 8
#define LARDER__NEXTUSE_NEVER UINT64_MAX /* no reader that counts reads it */

/* The order of one (seed, epoch, mode) that some reader reads now or next. */
struct larder__nextuse_group {
    uint64_t seed, epoch;
    uint32_t mode, window;
    larder_plan *plan;
    bool used;
};

struct larder__nextuse_reader {
    int slot;             /* -1: a reader that finished its epoch and left (a ghost) */
    uint64_t ghost_until; /* now_ns() a ghost counts until (0: live) */
    struct larder__plan_params params;
    uint32_t window; /* its prefetch window, as registered (0: not said) */
    int now, next;   /* groups of its epoch and the next one (-1: none) */
    uint64_t global_batch, local_batch, steps, start_step;
    uint64_t head; /* the next epoch's steps that count where they are (larder__nextuse_head) */
    uint32_t rank, workers, worker;
    uint64_t cur; /* global step it is at, as of the last look */
};

struct larder__nextuse_candidate {
    uint64_t use; /* weighed steps to the next use */
    uint64_t block;
};

struct larder__nextuse {
    const struct larder__index *ix;
    const struct larder__shard_map *map;
    uint64_t generation; /* of the registry, when readers[] was read */
    bool known;          /* readers[] was read at least once */
    struct larder__nextuse_group groups[LARDER__NEXTUSE_GROUPS];
    struct larder__nextuse_reader readers[2 * LARDER__CACHE_PLAN_SLOTS]; /* live, then ghosts */
    int num_readers;
    uint64_t ghost_deadline; /* the earliest ghost_until (0: no ghost) */
    uint64_t positions;      /* the readers' positions the candidates were picked at */
    struct larder__nextuse_candidate *candidates;
    size_t num_candidates, next_candidate, cap_candidates;
    bool candidates_valid;
    /* A scan runs without evict_lock (admission never waits for one): on
     * a copy of this state (`view`: the readers and their orders as they
     * were) into `scratch`, swapped in when done.  While `scanning`, the
     * registry is not read again, so the orders the copy points to stay. */
    bool scanning;
    pthread_cond_t scanned; /* broadcast when a scan is swapped in */
    struct larder__nextuse *view;
    struct larder__nextuse_candidate *scratch;
    size_t cap_scratch;
    uint64_t last_scan_ns, scan_cost_ns, scan_wall_ns;
    uint64_t resident_at_pick; /* with a node capacity, blocks stored since count too */
    /* what deciding cost this process (LARDER_EVICT_TRACE reports it at close) */
    uint64_t scans, scan_cpu_ns, admits, admit_wait_ns;
};

/* Monotonic ns. */
LARDER__HIDDEN uint64_t larder__nextuse_now_ns(void);
/* Make the candidate list current: false when no plan counts.  With evict_lock held. */
LARDER__HIDDEN bool larder__nextuse_current(struct larder__cache *c, struct larder__nextuse *n,
                                            bool pins);
/* The candidate list as it is (picked again only when it is used up or
 * no longer valid), the readers' positions current: for admission, which
 * needs the farthest resident block's next use, not a fresh pick on every
 * fill.  With evict_lock held. */
LARDER__HIDDEN bool larder__nextuse_listed(struct larder__cache *c, struct larder__nextuse *n,
                                           bool pins);
/* Read the registry again when due; false when no reader counts.  With evict_lock held. */
LARDER__HIDDEN bool larder__nextuse_readers(struct larder__cache *c, struct larder__nextuse *n);
/* Where every reader is now; the sum of their positions. */
LARDER__HIDDEN uint64_t larder__nextuse_positions(struct larder__cache *c,
                                                  struct larder__nextuse *n);
/* Steps until global block b (of `shard`) is read next by a reader that counts. */
LARDER__HIDDEN uint64_t larder__nextuse_block_distance(struct larder__cache *c,
                                                       struct larder__nextuse *n, uint32_t shard,
                                                       uint64_t block);

#endif
