/*
 * dataset_read.c - reading samples through the public dataset handle
 * (dataset.c): one sample or one field, asked of the node daemon first
 * when the cache does not hold it, else read by the engine (fill.h); and
 * batches, run on the engine's pool in two phases so that samples sharing
 * blocks do not hold workers waiting on each other's fill lock.
 */
#include "cache.h"
#include "dataset_internal.h"
#include "endpoint.h"
#include "fill.h"
#include "pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int larder__dataset_daemon_stage(larder_dataset *d, uint32_t shard, uint64_t offset,
                                 uint64_t length, void *buf)
{
    int rc = larder__endpoint_read_flagged(d->daemon, d->ix.id_low, d->ix.id_high, shard,
                                           LARDER__DEMAND, LARDER__READ_STAGE, offset, length, buf);
    if (rc == 1 && !larder__fill_resident(d->fill, shard, offset, length))
        rc = larder__endpoint_read(d->daemon, d->ix.id_low, d->ix.id_high, shard, LARDER__DEMAND,
                                   offset, length, buf);
    return rc;
}

/*
 * Ask the node daemon for the sample's bytes and check them.  0 when they
 * came and were right; otherwise the caller takes its own path.  A reader
 * with a node cache asks for them staged there (a STAGE READ, no bytes
 * sent: 1), and the caller's own read then finds them resident.
 */
static int read_through_daemon(larder_dataset *d, const struct larder__sample *s, uint64_t id,
                               void *buf)
{
    if (d->cache) {
        uint64_t first, last;
        larder__cache_blocks(d->cache, s->offset, s->length, &first, &last);
        if (larder__cache_present(d->cache, s->shard, first, last)) return -EAGAIN;
    }
    if (larder__endpoint_down(d->daemon)) return -EAGAIN;
    int rc = d->cache ? larder__dataset_daemon_stage(d, s->shard, s->offset, s->length, buf)
                      : larder__endpoint_read(d->daemon, d->ix.id_low, d->ix.id_high, s->shard,
                                              LARDER__DEMAND, s->offset, s->length, buf);
    if (rc == 1) return 1; /* staged in the cache this reader reads */
    if (rc == 0) rc = larder__fill_check(d->fill, s, id, buf);
    if (rc == 0) larder__cache_count(&larder__fill_counters(d->fill)->misses, 1);
    if (rc < 0)
        larder__log(LARDER_LOG_WARN,
                    "sample %llu: the node daemon did not serve it (%s); "
                    "reading it directly",
                    (unsigned long long)id, larder_errmsg());
    return rc;
}

/* Read a whole sample into buf (capacity already checked). */
static int read_whole(larder_dataset *d, const struct larder__sample *s, uint64_t id, void *buf)
{
    int rc;
    if (d->daemon && read_through_daemon(d, s, id, buf) == 0)
        rc = 0; /* the daemon sent it (and, sharing the cache, staged it for the next read too) */
    else        /* read by the engine: from the cache when the daemon staged it there */
        rc = larder__fill_sample(d->fill, s, id, buf);
    if (rc == 0) larder__cache_count(&larder__fill_counters(d->fill)->bytes_served, s->length);
    return rc;
}

int64_t larder_read_sample(larder_dataset *d, uint64_t id, void *buf, size_t capacity)
{
    struct larder__sample s;
    int rc = larder__index_sample_range(&d->ix, id, &s);
    if (rc < 0) return rc;
    if (s.length > capacity)
        return larder__fail(LARDER_ETOOSMALL, "sample %llu is %llu bytes; buffer holds %zu",
                            (unsigned long long)id, (unsigned long long)s.length, capacity);
    rc = read_whole(d, &s, id, buf);
    return rc < 0 ? rc : (int64_t)s.length;
}

int64_t larder_read_field(larder_dataset *d, uint64_t id, uint32_t field, void *buf,
                          size_t capacity)
{
    struct larder__sample s;
    struct larder__field f;
    int rc = larder__index_sample(&d->ix, id, &s);
    if (rc == 0) rc = larder__index_field(&d->ix, &s, id, field, &f);
    if (rc < 0) return rc;
    if (f.length > capacity)
        return larder__fail(LARDER_ETOOSMALL,
                            "field '%s' of sample %llu is %llu bytes; buffer holds %zu", f.name,
                            (unsigned long long)id, (unsigned long long)f.length, capacity);
    if (!d->cache && !d->options.verify_checksums) {
        rc = larder__fill_direct(d->fill, &s, id, buf, f.offset, f.length);
        return rc < 0 ? rc : (int64_t)f.length;
    }
    /* the checksum covers the whole sample */
    uint8_t *whole = malloc(s.length ? (size_t)s.length : 1);
    if (!whole) return -ENOMEM;
    rc = read_whole(d, &s, id, whole);
    if (rc == 0) memcpy(buf, whole + f.offset, (size_t)f.length);
    free(whole);
    return rc < 0 ? rc : (int64_t)f.length;
}

/* ---- many at once ------------------------------------------------------- */

struct batch_item {
    larder_dataset *d;
    struct larder__sample sample;
    uint64_t id;
    void *buf;
    int64_t *result;
    char message[512]; /* the worker's error detail, carried to the caller */
    struct larder__latch *latch;
};

static int by_position(const void *a, const void *b, void *items_)
{
    const struct batch_item *items = items_;
    const struct larder__sample *x = &items[*(const size_t *)a].sample;
    const struct larder__sample *y = &items[*(const size_t *)b].sample;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Read one sample of a batch, its result and error detail into the item. */
static void read_item(struct batch_item *item)
{
    int rc = read_whole(item->d, &item->sample, item->id, item->buf);
    *item->result = rc < 0 ? rc : (int64_t)item->sample.length;
    if (rc < 0) snprintf(item->message, sizeof item->message, "%s", larder_errmsg());
}

static void read_task(void *arg)
{
    struct batch_item *item = arg;
    read_item(item);
    larder__latch_arrive(item->latch);
}

/*
 * Samples that share a block would wait on each other's fill lock and
 * hold workers idle: a batch first fetches one sample per run of blocks
 * (the leaders), then the rest (followers), which mostly find their
 * blocks resident.  Leaders have disjoint block ranges: a sample
 * overlapping the last leader's range waits for the second phase.
 */
static int mark_followers(larder_dataset *d, const struct batch_item *items, size_t count,
                          bool *follower)
{
    if (!d->cache) return 0;
    size_t *order = malloc((count ? count : 1) * sizeof *order);
    if (!order) return -ENOMEM;
    for (size_t i = 0; i < count; i++)
        order[i] = i;
    qsort_r(order, count, sizeof *order, by_position, (void *)items);
    uint64_t reach = 0; /* end of the last leader's range in this shard, exclusive */
    for (size_t k = 0; k < count; k++) {
        const struct larder__sample *x = &items[order[k]].sample;
        bool same_shard = k > 0 && items[order[k - 1]].sample.shard == x->shard;
        uint64_t first, last;
        larder__cache_blocks(d->cache, x->offset, x->length, &first, &last);
        if (same_shard && first < reach)
            follower[order[k]] = true;
        else
            reach = last + 1;
    }
    free(order);
    return 0;
}

int64_t larder_read_samples(larder_dataset *d, const uint64_t *ids, size_t count, void *const *bufs,
                            const size_t *caps, int64_t *results)
{
    struct batch_item *items = calloc(count ? count : 1, sizeof *items);
    if (!items) return -ENOMEM;
    struct larder__latch latch;
    size_t queued = 0;
    for (size_t i = 0; i < count; i++) {
        struct larder__sample sample;
        int rc = larder__index_sample_range(&d->ix, ids[i], &sample);
        if (rc == 0 && sample.length > caps[i])
            rc = larder__fail(LARDER_ETOOSMALL, "sample %llu is %llu bytes; buffer holds %zu",
                              (unsigned long long)ids[i], (unsigned long long)sample.length,
                              caps[i]);
        results[i] = rc;
        if (rc < 0) continue;
        items[queued++] = (struct batch_item){.d = d,
                                              .sample = sample,
                                              .id = ids[i],
                                              .buf = bufs[i],
                                              .result = &results[i],
                                              .latch = &latch};
    }
    struct larder__pool *pool;
    int rc = larder__fill_pool(d->fill, &pool);
    bool *follower = rc == 0 ? calloc(queued ? queued : 1, sizeof *follower) : NULL;
    if (rc == 0 && (!follower || mark_followers(d, items, queued, follower) < 0)) rc = -ENOMEM;
    if (rc < 0) { /* nothing was read: no result may look like a success */
        for (size_t i = 0; i < queued; i++)
            *items[i].result = rc;
        free(follower), free(items);
        return rc;
    }
    /* samples whose blocks are all in the cache are read here, on the
     * caller's thread, while the workers fetch the rest: a resident read is
     * a pread and a check, and handing it to a worker and back cost more
     * than that (wake-ups, futexes and context switches: about ten futex
     * calls a sample in `larder warm` of a resident dataset, strace).  One
     * that stops being resident meanwhile is read by the fill as any miss
     * would be, here. */
    bool *here = calloc(queued ? queued : 1, sizeof *here);
    for (size_t i = 0; here && d->cache && i < queued; i++) {
        uint64_t first, last;
        larder__cache_blocks(d->cache, items[i].sample.offset, items[i].sample.length, &first,
                             &last);
        here[i] = larder__cache_present(d->cache, items[i].sample.shard, first, last);
    }
    for (int phase = 0; phase < 2; phase++) {
        size_t n = 0;
        for (size_t i = 0; i < queued; i++)
            n += !(here && here[i]) && follower[i] == (phase == 1);
        larder__latch_init(&latch, n);
        for (size_t i = 0; i < queued; i++)
            if (!(here && here[i]) && follower[i] == (phase == 1))
                larder__pool_submit(pool, read_task, &items[i], LARDER__DEMAND);
        for (size_t i = 0; phase == 0 && here && i < queued; i++)
            if (here[i]) read_item(&items[i]);
        if (n) larder__latch_wait(&latch);
    }
    free(here);
    free(follower);
    int64_t done = 0, first_error = 0;
    const char *message = NULL;
    for (size_t i = 0; i < queued; i++)
        if (*items[i].result < 0 && !message) message = items[i].message;
    for (size_t i = 0; i < count; i++) {
        if (results[i] >= 0)
            done++;
        else if (!first_error)
            first_error = results[i];
    }
    if (first_error && message) larder__fail((int)first_error, "%s", message);
    free(items);
    return first_error ? first_error : done;
}
