/*
 * source_stripe.h - what the two halves of the stripe (source_stripe.c:
 * cutting, grouping, reading owners at once; source_stripe_loan.c: bytes
 * borrowed ahead of a fill) share.  Private to them: everyone else uses
 * source.h.
 */
#ifndef LARDER_SOURCE_STRIPE_H
#define LARDER_SOURCE_STRIPE_H

#include "source.h"

#include <pthread.h>
#include <stdatomic.h>

#define LARDER__STRIPE_TO_ORIGIN SIZE_MAX /* a piece's owner: read it from the origin */

struct larder__stripe_link {
    struct larder__source *_Atomic peer; /* NULL: none (this node, no endpoint) or not yet
                                            opened (open_peer: on first use) */
    _Atomic bool none;                   /* open_peer said there is none */
    _Atomic int64_t down_until_ms;       /* skipped until then (monotonic ms); 0: never failed */
};

/* Bytes borrowed from other owners ahead of a fill (larder__source_stripe_borrow). */
struct larder__stripe_loan {
    struct larder__stripe_loan *next; /* the stripe's list */
    uint8_t *bytes; /* the other owners' pieces asked for; only `kept` holds good bytes */
    size_t count;
    struct larder__extent kept[]; /* what the owners answered (buf: into bytes) */
};

struct larder__stripe {
    struct larder__source base;
    struct larder__source *origin;
    bool borrow_ahead;
    pthread_mutex_t loans_lock; /* guards loans (read unlocked, atomically, as a hint) */
    struct larder__stripe_loan *loans;
    uint32_t shard;
    uint64_t chunk_size;
    larder__chunk_owner_fn owner;
    void *owner_context;
    struct larder__pool *pool;      /* borrowed; NULL: groups one after another */
    larder__open_peer_fn open_peer; /* NULL: the peers were given at open */
    void *peer_context;
    int down_ms;
    size_t members;
    struct larder__stripe_link links[];
};

/* One piece of a read, within one chunk (or several of one owner, once joined). */
struct larder__stripe_piece {
    size_t owner; /* a member index, or LARDER__STRIPE_TO_ORIGIN */
    size_t order; /* its place in the read, to keep each group's pieces in order */
    struct larder__extent extent;
};

struct larder__stripe_batch;

/* What a batch's groups do. */
enum larder__stripe_mode {
    LARDER__STRIPE_READ_PEERS,  /* each owner's pieces from its peer, the origin when that fails */
    LARDER__STRIPE_READ_LOANS,  /* from the loans, the rest from the origin (borrow_ahead) */
    LARDER__STRIPE_BORROW_AHEAD /* from the peers only: what fails is left out of the loan */
};

/* One owner's share of a read. */
struct larder__stripe_group {
    struct larder__stripe_batch *batch;
    size_t owner;
    const struct larder__extent *extents;
    size_t count;
    _Atomic int claimed; /* 1 once a worker or the caller took it to run */
    int result;          /* its enum larder__from, or a negative code */
    char message[256];   /* larder_errmsg() of a failure, from the thread that ran it */
    struct larder__extent
        *lent; /* LARDER__STRIPE_READ_LOANS: the parts found in loans (malloc'd) */
    size_t lent_count;
};

/* The groups of one read; freed by the last of the caller and the queued tasks. */
struct larder__stripe_batch {
    struct larder__stripe *source;
    unsigned flags;
    enum larder__stripe_mode mode;
    pthread_mutex_t lock;
    pthread_cond_t done;
    size_t unfinished; /* groups not yet run to the end */
    size_t refs;       /* the caller's, plus one per task still queued in the pool */
    size_t count;
    struct larder__stripe_group groups[];
};

/* The peer source of `owner`, opened on first use when the stripe opens
 * them; NULL: none (its chunks are read from the origin). */
LARDER__HIDDEN struct larder__source *larder__stripe_owner_peer(struct larder__stripe *s,
                                                                size_t owner);
/* The batch of a read of `extents` in `mode` (see source_stripe.c). */
LARDER__HIDDEN struct larder__stripe_batch *
larder__stripe_plan(struct larder__stripe *s, const struct larder__extent *extents, size_t count,
                    unsigned flags, enum larder__stripe_mode mode,
                    struct larder__extent **joined_out, int *rc);
/* Run a batch's groups at once on the pool; then release it. */
LARDER__HIDDEN void larder__stripe_run_batch(struct larder__stripe_batch *b);
LARDER__HIDDEN void larder__stripe_batch_release(struct larder__stripe_batch *b);
/* A group of a LARDER__STRIPE_READ_LOANS read: from the loans, the rest from the origin. */
LARDER__HIDDEN int larder__stripe_read_from_loans(struct larder__stripe *s,
                                                  struct larder__stripe_group *g, unsigned flags);

#endif
