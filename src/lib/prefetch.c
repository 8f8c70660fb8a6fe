/*
 * prefetch.c - staging the samples a reader's plan will ask for, ahead
 * of the reader.
 *
 * The reader registers its plan once and then only publishes how many of
 * its steps it has consumed (one atomic store, no request per sample).
 * A thread walks the same plan: it keeps the samples of the next `window`
 * steps staged, queueing their fills at NEAR priority on the dataset's
 * pool, so a reader's own misses (DEMAND) always go first.  It keeps at
 * most max_inflight fills queued or running (bounded memory: one sample
 * buffer per fill), stops at the end of the epoch, and on stop waits for
 * its fills to finish.
 *
 * With a capacity, the reader's plan is registered with the node cache
 * (cache_plans.c) and its position published there too, so that every
 * process evicts by next use (cache_nextuse.c).  Admission: a sample whose
 * blocks would be the next to go is not staged (the reader reads it
 * through), and the window is cut to a share of the capacity, so what is
 * staged is not evicted before it is read.
 */
#include "cache.h"
#include "dataset.h"
#include "fill.h"
#include "pool.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct larder_prefetch {
    larder_dataset *dataset;
    const larder_plan *plan;
    uint64_t window;
    int max_inflight;
    uint64_t consumed; /* atomic: the reader's steps done */
    uint64_t staged_steps;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int inflight;
    bool stopping;
    uint64_t fills, failures; /* counters, under lock */
    int slot;                 /* the plan's slot in the cache's registry, or -1 */
    uint64_t start_after;     /* stage nothing before the reader consumed this many steps */
    uint64_t skipped;         /* samples not staged: they would be evicted first */
    /* the window: asked for, and as cut to the capacity (cut_window) */
    uint64_t asked, step_bytes, generation;
    uint32_t workers;
    bool published;
};

struct fill_task {
    struct larder_prefetch *p;
    uint64_t id;
};

static void fill_task(void *arg)
{
    struct fill_task *t = arg;
    struct larder_prefetch *p = t->p;
    /* at NEAR all the way down: behind the reader's own misses in the
     * pool, on the owner's queue and in the origin's transfers */
    int rc = larder__fill_stage_at(larder__dataset_fill(p->dataset), t->id, LARDER__NEAR);
    pthread_mutex_lock(&p->lock);
    p->inflight--;
    if (rc < 0)
        p->failures++; /* the reader will meet the error itself */
    else
        p->fills++;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    free(t);
}

/* Whether staging sample `id` now keeps it until it is read (admission). */
static bool admitted(struct larder_prefetch *p, uint64_t id)
{
    struct larder__cache *c = larder__dataset_cache(p->dataset);
    struct larder__sample s;
    if (!c || p->slot < 0 ||
        larder__index_sample_range(larder__dataset_index(p->dataset), id, &s) < 0)
        return true;
    uint64_t first, last;
    larder__cache_blocks(c, s.offset, s.length, &first, &last);
    return larder__cache_admit(c, s.shard, first, last);
}

/* Cut the window to what the capacity holds for every live reader of
 * the node, and publish it (for the next epoch's head, and the trace)
 * when it changed.  Again whenever the registry's generation moves: a
 * reader that registered first would otherwise keep the window of one
 * reader alone after the others came. */
static void cut_window(struct larder_prefetch *p)
{
    struct larder__cache *c = larder__dataset_cache(p->dataset);
    if (!c || p->slot < 0) return;
    p->generation = larder__cache_plans_generation(c);
    const struct larder__index *ix = larder__dataset_index(p->dataset);
    struct larder__cache_plan live[LARDER__CACHE_PLAN_SLOTS];
    int readers = larder__cache_plans_live(c, ix->num_samples, live, LARDER__CACHE_PLAN_SLOTS);
    uint64_t window_bytes = larder__cache_window_bytes(c, readers);
    uint64_t window = p->asked;
    if (window_bytes && p->step_bytes) {
        /* the step the reader is on is read now in any case (by it, or its
         * read-ahead): the share holds the steps staged past it */
        uint64_t steps = window_bytes / p->step_bytes + 1;
        if (steps < window) window = steps;
    }
    if (window == p->window && p->published) return;
    p->window = window;
    p->published = true;
    larder__cache_plan_set_window(c, p->slot, window < (1u << 20) ? (uint32_t)window : 1u << 20);
    p->generation = larder__cache_plans_generation(c); /* its own change */
    larder__cache_trace_window(c, window, p->workers);
}

/* Register the plan with the node cache, and cut the window. */
static void register_plan(struct larder_prefetch *p)
{
    p->slot = -1;
    struct larder__cache *c = larder__dataset_cache(p->dataset);
    struct larder__plan_params params;
    if (!c || larder__plan_params_get(p->plan, &params) < 0) return;
    int slot = larder__cache_plan_register(c, &params);
    if (slot < 0) {
        larder__log(LARDER_LOG_INFO, "%s; eviction ignores this reader's plan", larder_errmsg());
        return;
    }
    p->slot = slot;
    p->workers = params.workers;
    const struct larder__index *ix = larder__dataset_index(p->dataset);
    uint64_t total = 0;
    for (uint64_t i = 0; i < ix->num_shards; i++) {
        struct larder__shard shard;
        larder__index_shard(ix, i, &shard);
        total += shard.size;
    }
    p->step_bytes = ix->num_samples ? total / ix->num_samples : 0;
    if (!larder__mul_ok(p->step_bytes, params.global_batch / params.world, &p->step_bytes))
        p->step_bytes = UINT64_MAX; /* a step over any capacity: a window of one */
    cut_window(p);
}

static void *prefetch_thread(void *arg)
{
    struct larder_prefetch *p = arg;
    larder_plan_info info;
    larder_plan_info_get(p->plan, &info);
    size_t capacity =
        info.local_batch ? (size_t)info.local_batch : 1; /* its bytes fit: prefetch_start */
    uint64_t *ids = malloc(capacity * sizeof *ids);
    pthread_mutex_lock(&p->lock);
    while (ids && !p->stopping) {
        uint64_t consumed = __atomic_load_n(&p->consumed, __ATOMIC_ACQUIRE);
        if (p->staged_steps < consumed) p->staged_steps = consumed; /* behind: skip ahead */
        struct larder__cache *c = larder__dataset_cache(p->dataset);
        if (c && p->slot >= 0 && larder__cache_plans_generation(c) != p->generation) {
            pthread_mutex_unlock(&p->lock);
            cut_window(p); /* readers came or went */
            pthread_mutex_lock(&p->lock);
            continue; /* look at stopping and the reader again */
        }
        if (consumed < p->start_after || p->staged_steps >= consumed + p->window) {
            pthread_cond_wait(&p->changed, &p->lock);
            continue;
        }
        int64_t step = larder_plan_worker_step(p->plan, p->staged_steps);
        if (step < 0) break; /* the end of the epoch */
        pthread_mutex_unlock(&p->lock);
        int64_t n = larder_plan_batch(p->plan, (uint64_t)step, ids, capacity);
        pthread_mutex_lock(&p->lock);
        for (int64_t i = 0; i < n && !p->stopping; i++) {
            while (p->inflight >= p->max_inflight && !p->stopping)
                pthread_cond_wait(&p->changed, &p->lock);
            if (p->stopping) break;
            if (larder__dataset_staged(p->dataset, ids[i])) continue;
            if (!admitted(p, ids[i])) {
                p->skipped++;
                continue;
            }
            struct fill_task *t = malloc(sizeof *t);
            if (!t) break;
            *t = (struct fill_task){.p = p, .id = ids[i]};
            p->inflight++;
            pthread_mutex_unlock(&p->lock);
            larder__pool_submit(larder__dataset_pool(p->dataset), fill_task, t, LARDER__NEAR);
            pthread_mutex_lock(&p->lock);
        }
        p->staged_steps++;
    }
    while (p->inflight > 0)
        pthread_cond_wait(&p->changed, &p->lock);
    pthread_mutex_unlock(&p->lock);
    free(ids);
    return NULL;
}

int larder_prefetch_start(larder_prefetch **out, larder_dataset *dataset, const larder_plan *plan,
                          const larder_prefetch_options *options)
{
    if (!out || !dataset || !plan)
        return larder__fail(LARDER_EUSAGE, "larder_prefetch_start: NULL");
    if (options && options->version != LARDER_PREFETCH_OPTIONS_VERSION && options->version != 1)
        return larder__fail(LARDER_EUSAGE, "larder_prefetch_start: options version %d, expected %d",
                            options->version, LARDER_PREFETCH_OPTIONS_VERSION);
    if (!larder__dataset_cached(dataset))
        return larder__fail(LARDER_EUSAGE, "prefetching needs a node cache to stage into "
                                           "(cache_dir or LARDER_CACHE)");
    /* one step's ids are held at once (prefetch_thread): a local batch whose
     * array's size wraps would be allocated short, or not at all */
    larder_plan_info info;
    uint64_t ids_bytes;
    int rc = larder_plan_info_get(plan, &info);
    if (rc < 0) return rc;
    if (!larder__mul_ok(info.local_batch, sizeof(uint64_t), &ids_bytes) || ids_bytes > SIZE_MAX)
        return larder__fail(LARDER_EUSAGE,
                            "larder_prefetch_start: a local batch of %" PRIu64
                            " samples is more than a step's ids can hold",
                            info.local_batch);
    struct larder__pool *pool;
    rc = larder__dataset_pool_get(dataset, &pool);
    if (rc < 0) return rc;
    struct larder_prefetch *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->dataset = dataset;
    p->plan = plan;
    p->window = options && options->window_steps ? options->window_steps : 8;
    p->asked = p->window;
    p->max_inflight = options && options->max_inflight > 0 ? options->max_inflight
                                                           : larder__dataset_inflight(dataset);
    p->start_after = options && options->version >= 2 ? options->start_after : 0;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->changed, NULL);
    register_plan(p);
    if (pthread_create(&p->thread, NULL, prefetch_thread, p) != 0) {
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->changed);
        larder__cache_plan_unregister(larder__dataset_cache(dataset), p->slot);
        free(p);
        return larder__fail(-EAGAIN, "cannot start the prefetch thread");
    }
    *out = p;
    return 0;
}

void larder_prefetch_advance(larder_prefetch *p, uint64_t consumed)
{
    __atomic_store_n(&p->consumed, consumed, __ATOMIC_RELEASE);
    larder__cache_plan_advance(larder__dataset_cache(p->dataset), p->slot, consumed);
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
}

int larder_prefetch_stats_get(larder_prefetch *p, uint64_t *fills, uint64_t *failures)
{
    pthread_mutex_lock(&p->lock);
    if (fills) *fills = p->fills;
    if (failures) *failures = p->failures;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void larder_prefetch_stop(larder_prefetch *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    larder__nextuse_trace_costs(larder__dataset_cache(p->dataset)); /* LARDER_EVICT_TRACE */
    larder__cache_plan_unregister(larder__dataset_cache(p->dataset), p->slot);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->changed);
    free(p);
}
