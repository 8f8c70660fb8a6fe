/*
 * warm.c - warm staging (larderd --warm): as a dataset is opened, each
 * node stages the chunks of shards it owns (LARDER__OWNER_CHUNK bytes,
 * all of them without peers) in the background, a job per chunk, at the
 * lowest class (WARM: in the pool, at the owner and at the origin), paced
 * to --warm-rate by a token bucket of one chunk shared by the node's
 * workers.
 */
#include "larderd.h"

#include "fill.h"

#include <stdlib.h>
#include <time.h>

struct warm_job {
    struct larderd *daemon;
    struct dataset_entry *entry;
    uint32_t shard;
    uint64_t offset, length;
};

double warm_pace(struct larderd *d, double now, uint64_t length)
{
    if (d->config.warm_rate <= 0) return 0;
    pthread_mutex_lock(&d->warm_lock);
    double start = d->warm_next_start > now ? d->warm_next_start : now;
    d->warm_next_start = start + (double)length / (d->config.warm_rate * 1e6);
    pthread_mutex_unlock(&d->warm_lock);
    return start - now;
}

/* One owned chunk, after its wait for the pace. */
static void warm_job(void *arg)
{
    struct warm_job *job = arg;
    struct larderd *d = job->daemon;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double wait = warm_pace(d, (double)now.tv_sec + (double)now.tv_nsec / 1e9, job->length);
    if (wait > 0) {
        struct timespec pause = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&pause, NULL);
    }
    /* into the cache, copied nowhere else (no buffer) */
    if (!d->stopping && larder__fill_range_at(larder__dataset_fill(job->entry->dataset), job->shard,
                                              job->offset, job->length, LARDER__WARM, NULL) < 0)
        say("warm: shard %u at %llu: %s", job->shard, (unsigned long long)job->offset,
            larder_errmsg());
    free(job);
}

size_t warm_owned(struct larderd *d, struct dataset_entry *e)
{
    size_t queued = 0;
    uint32_t shards = larder__dataset_num_shards(e->dataset);
    _Static_assert(WARM_CHUNK == LARDER__OWNER_CHUNK, "a warm job stages one owned chunk");
    for (uint32_t shard = 0; shard < shards; shard++) {
        uint64_t size = larder__dataset_shard_size(e->dataset, shard);
        for (uint64_t at = 0; at < size; at += WARM_CHUNK) {
            if (!owns_chunk(e, shard, at / LARDER__OWNER_CHUNK)) continue;
            struct warm_job *job = malloc(sizeof *job);
            if (!job) return queued;
            *job = (struct warm_job){.daemon = d,
                                     .entry = e,
                                     .shard = shard,
                                     .offset = at,
                                     .length = size - at < WARM_CHUNK ? size - at : WARM_CHUNK};
            if (larder__pool_submit(d->pool, warm_job, job, LARDER__WARM) < 0) {
                free(job);
                return queued;
            }
            queued++;
        }
    }
    return queued;
}
