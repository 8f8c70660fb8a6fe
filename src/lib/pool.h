/*
 * pool.h - a fixed set of worker threads running queued tasks, so a
 * batch of reads can keep many origin requests in flight (Little's law:
 * throughput = requests in flight / latency) without a thread per read.
 */
#ifndef LARDER_POOL_H
#define LARDER_POOL_H

#include "common.h"

#include <pthread.h>

struct larder__pool;

typedef void (*larder__task_fn)(void *arg);

/*
 * Priority classes, highest first (DESIGN.md): a reader is blocked; the
 * plan needs it within the prefetch window; background staging.  A
 * worker always takes the oldest task of the highest class waiting, so
 * a higher class never waits behind a lower one for a free worker.
 */
enum larder__priority { LARDER__DEMAND = 0, LARDER__NEAR, LARDER__BACKGROUND, LARDER__CLASSES };

/* A pool of `threads` workers, started as work arrives. */
LARDER__HIDDEN int larder__pool_new(struct larder__pool **out, int threads);
/* Stop the workers after the queued tasks ran (NULL-safe). */
LARDER__HIDDEN void larder__pool_free(struct larder__pool *pool);
/* Queue fn(arg) in a class; runs it inline when no thread could be started. */
LARDER__HIDDEN int larder__pool_submit(struct larder__pool *pool, larder__task_fn fn, void *arg,
                                       int priority);
/* Tasks queued in a class and not yet started. */
LARDER__HIDDEN size_t larder__pool_queued(struct larder__pool *pool, int priority);

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
