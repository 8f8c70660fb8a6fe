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

struct stage_job;

struct hints {
    pthread_mutex_t lock; /* everything here, and every hint's fields */
    /* staging jobs not yet on the pool, oldest first: at most half the
     * pool's workers stage hints at once, so that the rest are free for
     * READs -- the peers' among them, which the staging of other nodes
     * waits on (all workers staging, on two nodes borrowing from each
     * other, would wait on each other until the peer timeout) */
    struct stage_job *pending, *pending_tail;
    int staging;            /* staging jobs on the pool */
    pthread_cond_t changed; /* a hint's staging ended, the list changed, or stopping */
    struct hint *list;
    pthread_t reaper; /* unpins hints whose time is up */
    bool reaper_running, stopping;
    int threads; /* hint request threads running */
};

/* d's hints, made on first use; NULL when out of memory. */
struct hints *hints_of(struct larderd *d);

/*
 * Pin and stage samples of e on this node for ttl_ms: those named by
 * keys[0..num_keys), or all when num_keys is 0.  The hint is on the list
 * (its pins released when its time is up) and its staging queued on the
 * pool at the background class when this returns 0 with *out (one
 * reference the caller drops with hint_put); a negative code with a
 * message (an unknown key, no cache) leaves nothing pinned.
 */
int hint_here(struct larderd *d, struct dataset_entry *e, char *const *keys, uint32_t num_keys,
              uint64_t ttl_ms, struct hint **out);
/* Wait until h's staging ended (or the daemon stops). */
void hint_wait(struct larderd *d, struct hint *h);
/* Drop one reference. */
void hint_put(struct larderd *d, struct hint *h);

#endif
