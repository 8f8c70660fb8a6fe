/*
 * pool.h - a fixed set of worker threads running queued tasks, so a
 * batch of reads can keep many origin requests in flight (Little's law:
 * throughput = requests in flight / latency) without a thread per read.
 */
#ifndef LARDER_POOL_H
#define LARDER_POOL_H

#include "common.h"
#include "priority.h"

#include <pthread.h>

struct larder__pool;

typedef void (*larder__task_fn)(void *arg);

/*
 * Tasks are queued in the four classes of priority.h.  A worker takes the
 * oldest task of the highest class whose share of the workers
 * (larder__priority_limit) is not all taken: DEMAND may use every worker,
 * NEAR and the classes below it 3/4 of them together, HINTED and WARM
 * half, WARM a quarter.  So a higher class never waits behind a lower one
 * for a free worker: queued lower-class work is overtaken, and a worker
 * is kept free for each higher class while lower ones run (with 4
 * workers or more; a 1-worker pool can only take the highest class next).
 * Nothing running is preempted.
 */

/* A pool of `threads` workers, started as work arrives. */
LARDER__HIDDEN int larder__pool_new(struct larder__pool **out, int threads);
/* Stop the workers after the queued tasks ran (NULL-safe). */
LARDER__HIDDEN void larder__pool_free(struct larder__pool *pool);
/* Queue fn(arg) in a class (out of range: WARM); runs it inline when no
 * thread could be started. */
LARDER__HIDDEN int larder__pool_submit(struct larder__pool *pool, larder__task_fn fn, void *arg,
                                       int priority);
/* Tasks queued in a class and not yet started. */
LARDER__HIDDEN size_t larder__pool_queued(struct larder__pool *pool, int priority);

/* What a pool ran, per class, since it was made. */
struct larder__pool_stats {
    uint64_t submitted[LARDER__CLASSES];   /* tasks queued */
    uint64_t started[LARDER__CLASSES];     /* tasks a worker took */
    uint64_t running[LARDER__CLASSES];     /* tasks running now */
    uint64_t wait_us[LARDER__CLASSES];     /* queue waits of the started tasks, summed */
    uint64_t wait_max_us[LARDER__CLASSES]; /* the longest of them */
    /* CPU time the workers spent running tasks of the class (their thread's
     * CPU clock around each task), summed: what background work cost the
     * node's cores, beside the readers' */
    uint64_t cpu_us[LARDER__CLASSES];
};
/* A snapshot of the counters (zeros for a NULL pool). */
LARDER__HIDDEN void larder__pool_stats_get(struct larder__pool *pool,
                                           struct larder__pool_stats *out);

/* A countdown a batch waits on, in the caller's memory: _init sets it up and
 * _wait, once every arrival is in, releases its mutex and condition, so it
 * has no destructor of its own. */
struct larder__latch {
    pthread_mutex_t lock;
    pthread_cond_t done;
    size_t left;
};
LARDER__HIDDEN void larder__latch_init(struct larder__latch *latch, size_t count);
LARDER__HIDDEN void larder__latch_arrive(struct larder__latch *latch);
LARDER__HIDDEN void larder__latch_wait(struct larder__latch *latch);

#endif
