/*
 * readahead.c - staging ahead of a reader of the mount (mount.h).
 *
 * A file read sequentially (each read starting where the last ended)
 * opens a window ahead of the read: 1 MiB, doubled by every further
 * sequential read up to readahead_max.  What the window covers and the
 * cache does not hold is staged on the engine's pool at NEAR priority,
 * below every blocked reader, in 1 MiB pieces so that the pool's workers
 * (the origin's requests in flight) share the work.  A read anywhere else
 * closes the window: random reads stage nothing beyond what they read.
 *
 * A staging task fills the node cache the reader shares: through the node
 * daemon when there is one (a READ at NEAR, its answer dropped), else
 * through this process's own engine (larder__fill_range_at).  Without a
 * cache or a daemon nothing is kept, so nothing is staged.
 */
#include "mount.h"

#include "dataset.h"
#include "endpoint.h"
#include "fill.h"
#include "pool.h"
#include "priority.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define PIECE (UINT64_C(1) << 20)
#define FIRST_WINDOW (UINT64_C(1) << 20)

struct stage_task {
    struct larder__mount *m;
    uint32_t shard;
    uint64_t offset, length;
    int priority;
    struct larder__mount_stage_job *job; /* stager.c's, or NULL */
};

static void stage_done(struct larder__mount *m)
{
    pthread_mutex_lock(&m->lock);
    if (--m->staging == 0) pthread_cond_broadcast(&m->idle);
    pthread_mutex_unlock(&m->lock);
}

static void run_stage(void *arg)
{
    struct stage_task *t = arg;
    struct larder__mount *m = t->m;
    larder_dataset *d = m->dataset;
    struct larder__fill *fill = larder__dataset_fill(d);
    if (!larder__fill_resident(fill, t->shard, t->offset, t->length)) {
        struct larder__endpoint *daemon = larder__dataset_daemon(d);
        int rc = LARDER_EUSAGE;
        if (daemon && !larder__endpoint_down(daemon)) {
            /* staged by the daemon; sharing its cache, the mount asks for
             * no bytes back (a daemon that sends them anyway: dropped) */
            uint64_t low, high;
            void *buf = malloc((size_t)t->length);
            larder__dataset_id(d, &low, &high);
            rc = buf ? larder__endpoint_read_flagged(daemon, low, high, t->shard, t->priority,
                                                     m->cached ? LARDER__READ_STAGE : 0, t->offset,
                                                     t->length, buf)
                     : -ENOMEM;
            free(buf);
        }
        if (rc < 0 && m->cached) /* into the cache, copied nowhere else */
            rc = larder__fill_range_at(fill, t->shard, t->offset, t->length, t->priority, NULL);
        if (rc < 0)
            larder__mount_log(LARDER_LOG_DEBUG, "staging %llu bytes at %llu of shard %u: %s",
                              (unsigned long long)t->length, (unsigned long long)t->offset,
                              t->shard, larder_errmsg());
        else
            atomic_fetch_add(&m->readahead_bytes, t->length);
        if (rc >= 0 && m->trace && t->job) { /* the whole-file staging's rate, for the trace */
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            larder__mount_log(
                LARDER_LOG_INFO, "trace: staged %llu bytes at %llu (%u in flight) at %.3f s",
                (unsigned long long)t->length, (unsigned long long)t->offset,
                atomic_load(&m->stage_running), (double)now.tv_sec + (double)now.tv_nsec / 1e9);
        }
    }
    if (t->job) larder__mount_stager_done(m, t->job);
    free(t);
    stage_done(m);
}

uint64_t larder__mount_stage_piece(struct larder__mount *m, uint32_t shard, uint64_t offset,
                                   uint64_t length, int priority,
                                   struct larder__mount_stage_job *job)
{
    struct larder__pool *pool;
    if (larder__dataset_pool_get(m->dataset, &pool) < 0) return 0;
    struct stage_task *t = malloc(sizeof *t);
    if (!t) return 0;
    *t = (struct stage_task){m, shard, offset, length, priority, job};
    pthread_mutex_lock(&m->lock);
    m->staging++;
    pthread_mutex_unlock(&m->lock);
    if (larder__pool_submit(pool, run_stage, t, priority) < 0) {
        free(t);
        stage_done(m);
        return 0;
    }
    return length;
}

uint64_t larder__mount_stage(struct larder__mount *m, uint32_t shard, uint64_t offset,
                             uint64_t length, int priority)
{
    if (!m->cached && !m->daemon) return 0;
    struct larder__fill *fill = larder__dataset_fill(m->dataset);
    uint64_t queued = 0;
    for (uint64_t at = offset; at < offset + length; at += PIECE) {
        uint64_t piece = offset + length - at < PIECE ? offset + length - at : PIECE;
        if (larder__fill_resident(fill, shard, at, piece)) continue;
        uint64_t n = larder__mount_stage_piece(m, shard, at, piece, priority, NULL);
        if (!n) break;
        queued += n;
    }
    return queued;
}

void larder__mount_stage_wait(struct larder__mount *m)
{
    pthread_mutex_lock(&m->lock);
    while (m->staging)
        pthread_cond_wait(&m->idle, &m->lock);
    pthread_mutex_unlock(&m->lock);
}

void larder__mount_stream_init(struct larder__mount_stream *s)
{
    *s = (struct larder__mount_stream){0};
    pthread_mutex_init(&s->lock, NULL);
}

void larder__mount_stream_clear(struct larder__mount_stream *s)
{
    pthread_mutex_destroy(&s->lock);
}

void larder__mount_readahead(struct larder__mount *m, struct larder__mount_stream *s,
                             uint32_t shard, uint64_t base, uint64_t header, uint64_t size,
                             uint64_t offset, uint64_t length)
{
    if (!m->cached && !m->daemon) return;
    uint64_t end = offset + length, from = 0, to = 0;
    pthread_mutex_lock(&s->lock);
    if (offset == s->next && offset != 0) { /* sequential: widen the window */
        s->window = s->window ? s->window * 2 : FIRST_WINDOW;
        if (s->window > m->readahead_max) s->window = m->readahead_max;
    } else { /* random (or the first read): no window */
        s->window = 0;
        s->staged_until = 0;
    }
    s->next = end;
    if (s->window) {
        to = end + s->window < size ? end + s->window : size;
        from = s->staged_until > end ? s->staged_until : end;
        if (to > s->staged_until) s->staged_until = to;
    }
    pthread_mutex_unlock(&s->lock);
    if (from < header) from = header;
    if (to > from) larder__mount_stage(m, shard, base + (from - header), to - from, LARDER__NEAR);
}
