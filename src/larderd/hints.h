/*
 * hints.h - what hints.c (requests, members, the publish policy) and
 * hints_pins.c (the daemon's pins: staging, expiry, the list) share.
 * Private to those two; the rest of the daemon sees larderd.h's hints_*.
 */
#ifndef LARDERD_HINTS_H
#define LARDERD_HINTS_H

/* Hints live (pinning) on one node at once: each is walked by every
 * expiry and listed, so they are bounded; past it a HINT gets EAGAIN. */
#define MAX_LIVE_HINTS 1024

#include "larderd.h"

/* A byte range of one shard a hint pins and stages. */
struct pin_range {
    uint32_t shard;
    uint64_t offset, length;
};

/* One hint this node took: its pins, their time, its staging. */
struct hint {
    struct hint *next; /* the live list (hints->list) */
    struct dataset_entry *entry;
    int64_t expiry_ms;        /* on the cache's clock (CLOCK_REALTIME ms) */
    struct pin_range *ranges; /* sorted by shard and offset, pinned and to stage */
    size_t num_ranges;
    uint64_t samples, bytes; /* what was asked */
    uint64_t pinned_bytes;   /* what the pins cover */
    uint64_t staged_bytes;   /* staged so far */
    size_t jobs_left;        /* staging jobs not yet run */
    bool partial;            /* pinned less than asked: the cache's pin limit */
    bool failed;             /* a staging job failed (said in the log) */
    bool live;               /* on the list: pinned until expiry_ms */
    int refs;                /* the list's, and one per staging job and waiter */
};

/* One chunk of a hint to stage (hints_pins.c: queued in this node's order). */
struct stage_job {
    struct stage_job *next; /* hints->pending, then hints->running */
    struct larderd *daemon;
    struct hint *hint;
    uint32_t shard;
    uint64_t offset, length; /* within one owner chunk */
    unsigned phase;          /* its place in this node's order (queue_staging) */
    size_t relay;            /* the member asked first for it (SIZE_MAX: its owner) */
};

struct hints {
    pthread_mutex_t lock; /* everything here, and every hint's fields */
    /* staging jobs not yet on the pool, oldest first: at most half the
     * pool's workers stage hints at once, so that the rest are free for
     * READs -- the peers' among them, which the staging of other nodes
     * waits on (all workers staging, on two nodes borrowing from each
     * other, would wait on each other until the peer timeout) */
    struct stage_job *pending, *pending_tail;
    struct stage_job *running; /* staging now (hints_staging_wait looks at them) */
    int staging;               /* staging jobs on the pool */
    pthread_cond_t changed;    /* a hint's staging ended, the list changed, or stopping */
    struct hint *list;
    pthread_t reaper; /* unpins hints whose time is up */
    bool reaper_running, stopping;
    int threads; /* hint request threads running */
};

/* d's hints, made on first use; NULL when out of memory. */
struct hints *hints_of(struct larderd *d);

/*
 * Pin and stage samples of e on this node for ttl_ms: those named by
 * keys[0..num_keys), or all when num_keys is 0; `relay`: every member
 * stages them too (a hot hint to all nodes), so members pass chunks on.  The hint is on the list
 * (its pins released when its time is up) and its staging queued on the
 * pool at the background class when this returns 0 with *out (one
 * reference the caller drops with hint_put); a negative code with a
 * message (an unknown key, no cache) leaves nothing pinned.
 */
int hint_here(struct larderd *d, struct dataset_entry *e, char *const *keys, uint32_t num_keys,
              uint64_t ttl_ms, bool relay, struct hint **out);
/* The phase of a chunk owned by `owner` in the staging order of member
 * `self` of `members` (hints_pins.c, queue_staging): its own chunks 0, the
 * previous member's 1, and so on; 0 outside a cluster. */
unsigned hint_stage_phase(size_t members, size_t self, size_t owner);
/* Wait until h's staging ended (or the daemon stops). */
void hint_wait(struct larderd *d, struct hint *h);
/* Drop one reference. */
void hint_put(struct larderd *d, struct hint *h);

#endif
