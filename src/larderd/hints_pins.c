/*
 * hints_pins.c - the pins of the hints this node took: each hint's byte
 * ranges are pinned in the node cache (cache_pin.c) until its time, and
 * staged by jobs on the daemon's pool at the HINTED class, below
 * every reader's READ; a thread unpins each hint when its time is up,
 * sparing blocks another live hint still pins.  Pins live in the cache's
 * shared state, which also holds the time the latest one ends: a daemon
 * that stops or dies leaves them there until then, and a restarted
 * daemon neither lists nor extends them (docs/cache.md, "Pins").
 */
#include "hints.h"

#include "cache.h"
#include "fill.h"
#include "trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hints *hints_of(struct larderd *d)
{
    pthread_mutex_lock(&d->lock);
    if (!d->hints && (d->hints = calloc(1, sizeof *d->hints))) {
        pthread_mutex_init(&d->hints->lock, NULL);
        pthread_cond_init(&d->hints->changed, NULL);
    }
    pthread_mutex_unlock(&d->lock);
    return d->hints;
}

/* Drop a reference; call with hints->lock held. */
static void put_locked(struct hint *h)
{
    if (--h->refs > 0) return;
    free(h->ranges);
    free(h);
}

void hint_put(struct larderd *d, struct hint *h)
{
    pthread_mutex_lock(&d->hints->lock);
    put_locked(h);
    pthread_mutex_unlock(&d->hints->lock);
}

static int by_place(const void *a, const void *b)
{
    const struct pin_range *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The samples' ranges, sorted, and merged where less than `gap` bytes lie
 * between them (a tar's headers): *count ranges.  0 or a negative code. */
static int sample_ranges(struct hint *h, larder_dataset *ds, char *const *keys, uint32_t num_keys,
                         uint64_t gap)
{
    uint64_t n = num_keys ? num_keys : larder_num_samples(ds);
    h->ranges = malloc((n ? n : 1) * sizeof *h->ranges);
    if (!h->ranges) return -ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        int64_t id = num_keys ? larder_find_key(ds, keys[i]) : (int64_t)i;
        if (id < 0) return larder__fail(LARDER_ENOTFOUND, "hint: no sample with key '%s'", keys[i]);
        larder_sample_info info;
        int rc = larder_sample_info_get(ds, (uint64_t)id, &info);
        if (rc < 0) return rc;
        h->ranges[i] = (struct pin_range){info.shard, info.offset, info.length};
        h->samples++;
        h->bytes += info.length;
    }
    qsort(h->ranges, (size_t)n, sizeof *h->ranges, by_place);
    size_t kept = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct pin_range *last = kept ? &h->ranges[kept - 1] : NULL, *r = &h->ranges[i];
        if (r->length == 0) continue;
        if (last && last->shard == r->shard && r->offset <= last->offset + last->length + gap) {
            uint64_t end = r->offset + r->length;
            if (end > last->offset + last->length) last->length = end - last->offset;
        } else {
            h->ranges[kept++] = *r;
        }
    }
    h->num_ranges = kept;
    return 0;
}

/* Pin the ranges in order until the cache's pin limit; cut at what fits. */
static void pin_ranges(struct hint *h, struct larder__cache *cache)
{
    size_t kept = 0;
    for (size_t i = 0; i < h->num_ranges; i++) {
        struct pin_range *r = &h->ranges[i];
        uint64_t first, last;
        larder__cache_blocks(cache, r->offset, r->length, &first, &last);
        uint64_t pinned = larder__cache_pin(cache, r->shard, first, last, h->expiry_ms);
        if (pinned) {
            h->pinned_bytes += larder__cache_span(cache, r->shard, first, first + pinned - 1);
            kept++;
        }
        if (pinned < last - first + 1) {
            h->partial = true;
            if (pinned) { /* stage only what is pinned: the rest would be evicted */
                uint64_t end = larder__cache_block_offset(cache, first + pinned);
                if (end < r->offset + r->length) r->length = end - r->offset;
            }
            break;
        }
    }
    h->num_ranges = kept;
}

static void stage_job(void *arg);

/* Take the pending staging jobs that may start now (while fewer than
 * half the pool's workers stage), counted as staging; call with
 * hints->lock held, and submit() them after letting it go (the pool may
 * run a task inline, and the task takes the lock). */
static struct stage_job *take_ready(struct larderd *d)
{
    struct hints *hints = d->hints;
    struct stage_job *ready = NULL, **tail = &ready;
    int most = d->config.jobs / 2 > 1 ? d->config.jobs / 2 : 1;
    while (!hints->stopping && hints->pending && hints->staging < most) {
        struct stage_job *job = hints->pending;
        hints->pending = job->next;
        if (!hints->pending) hints->pending_tail = NULL;
        job->next = NULL;
        *tail = job;
        tail = &job->next;
        hints->staging++;
    }
    return ready;
}

static void submit(struct larderd *d, struct stage_job *ready)
{
    while (ready) {
        struct stage_job *job = ready;
        ready = job->next;
        larder__pool_submit(d->pool, stage_job, job, LARDER__HINTED);
    }
}

/* A staging job waits this long at most for the readers' work to pause. */
#define YIELD_MAX_MS 500

/* Wait (YIELD_MAX_MS at most) while this daemon runs DEMAND or NEAR READs
 * (its readers', or peers' for their readers): a staging job starts in the
 * gaps between them, so its transfers and checksums do not take the CPU
 * and the links beside a reader's read (docs/scale.md, "Priorities"). */
static void yield_to_readers(struct larderd *d)
{
    for (int waited = 0; waited < YIELD_MAX_MS && !d->stopping; waited += 2) {
        struct larder__pool_stats stats;
        larderd_classes_get(d, &stats);
        if (stats.running[LARDER__DEMAND] + stats.running[LARDER__NEAR] == 0) return;
        struct timespec nap = {0, 2 * 1000000};
        nanosleep(&nap, NULL);
    }
}

/* Stage one chunk of a hint: in the cache without a copy where it can,
 * else through a buffer (a cache that evicts).  The chain of the shard's
 * source reads it from its owner node before the origin. */
static void stage_job(void *arg)
{
    struct stage_job *job = arg;
    struct larderd *d = job->daemon;
    struct hint *h = job->hint;
    larder_dataset *ds = h->entry->dataset;
    pthread_mutex_lock(&d->hints->lock);
    bool skip = d->hints->stopping || !h->live; /* stopping, or its time is up */
    job->next = d->hints->running; /* a relay's READ for it waits for it (hints_staging_wait) */
    d->hints->running = job;
    pthread_mutex_unlock(&d->hints->lock);
    int rc = 0;
    struct trace_span trace = {.kind = "stage",
                               .node = (int)d->self,
                               .priority = LARDER__HINTED,
                               .shard = job->shard,
                               .offset = job->offset,
                               .length = job->length,
                               .arrived_us = trace_now_us()};
    if (!skip && !d->stopping) yield_to_readers(d);
    trace_begin(&trace);
    if (!skip && !d->stopping) {
        int fd;
        struct larder__fill *fill = larder__dataset_fill(ds);
        /* other owners' chunks borrowed before the fill takes its locks, as
         * for a READ: every node staging at once must not wait on each
         * other's fill locks */
        struct larder__source *stripe;
        bool from_relay;
        struct larder__stripe_loan *loan =
            borrow_ahead_via(h->entry, job->shard, job->offset, job->length, LARDER__HINTED,
                             job->relay, &stripe, &from_relay);
        rc = larder__fill_stage_range_at(fill, job->shard, job->offset, job->length, LARDER__HINTED,
                                         &fd);
        if (rc == 1) /* a cache that evicts: staged all the same, copied nowhere */
            rc = larder__fill_range_at(fill, job->shard, job->offset, job->length, LARDER__HINTED,
                                       NULL);
        borrow_return(stripe, loan);
        trace.borrowed_us = trace.started_us; /* the borrow is in the fill's time */
        trace_end(&trace, rc);
        if (rc < 0)
            say("hint: staging shard %u at %llu: %s", job->shard, (unsigned long long)job->offset,
                larder_errmsg());
    }
    take_source_reads(); /* not a READ's: forget where these bytes came from */
    pthread_mutex_lock(&d->hints->lock);
    if (rc < 0) h->failed = true;
    if (rc >= 0 && !skip) h->staged_bytes += job->length;
    for (struct stage_job **at = &d->hints->running; *at; at = &(*at)->next)
        if (*at == job) {
            *at = job->next;
            break;
        }
    --h->jobs_left;
    pthread_cond_broadcast(&d->hints->changed); /* its waiters, and a relay's READs */
    put_locked(h);
    d->hints->staging--;
    struct stage_job *ready = take_ready(d);
    pthread_mutex_unlock(&d->hints->lock);
    free(job);
    submit(d, ready);
}

static int by_phase(const void *a, const void *b)
{
    const struct stage_job *x = *(struct stage_job *const *)a, *y = *(struct stage_job *const *)b;
    if (x->phase != y->phase) return x->phase < y->phase ? -1 : 1;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

unsigned hint_stage_phase(size_t members, size_t self, size_t owner)
{
    if (members <= 1 || self >= members || owner >= members) return 0;
    return (unsigned)((self + members - owner) % members);
}

/*
 * Queue the staging of h's ranges in jobs of at most one owner chunk; call
 * with hints->lock held.  Not in the same order on every node (which had
 * every node ask the same owners at the same moment): this node's own
 * chunks first (phase 0, from the origin), then those of the member before
 * it (phase 1, from their owner), then of the one before that, and so on
 * (hint_stage_phase), each phase in file order.  With `relay` (every member
 * stages the hint), a chunk of phase 2 or later is asked first of the
 * member just before this one, which staged it one phase earlier: so each
 * owner serves its chunks once and the members pass them on in a ring, and
 * no member serves much more than another however lumpy the ownership
 * (docs/scale.md, "Balance").  A relay that does not hold it (yet) declines
 * and the owner is asked.
 */
static void queue_staging(struct larderd *d, struct hint *h, bool relay)
{
    size_t count = 0, members = d->members.count, self = d->self;
    for (size_t i = 0; i < h->num_ranges; i++) {
        const struct pin_range *r = &h->ranges[i];
        if (r->length)
            count += (r->offset + r->length - 1) / WARM_CHUNK - r->offset / WARM_CHUNK + 1;
    }
    struct stage_job **jobs = malloc((count ? count : 1) * sizeof *jobs);
    size_t n = 0;
    for (size_t i = 0; jobs && i < h->num_ranges; i++) {
        const struct pin_range *r = &h->ranges[i];
        for (uint64_t at = r->offset, end = r->offset + r->length; at < end && n < count;) {
            uint64_t stop = (at / WARM_CHUNK + 1) * WARM_CHUNK; /* the chunk's end */
            if (stop > end) stop = end;
            struct stage_job *job = malloc(sizeof *job);
            if (!job) break;
            size_t owner = owner_of_chunk(h->entry, r->shard, at / WARM_CHUNK);
            unsigned phase = hint_stage_phase(members, self, owner);
            *job = (struct stage_job){.daemon = d,
                                      .hint = h,
                                      .shard = r->shard,
                                      .offset = at,
                                      .length = stop - at,
                                      .phase = phase,
                                      .relay = relay && phase >= 2 ? (self + members - 1) % members
                                                                   : SIZE_MAX};
            jobs[n++] = job;
            at = stop;
        }
    }
    if (!jobs || n < count) h->failed = true; /* out of memory: what was made is staged */
    if (jobs) qsort(jobs, n, sizeof *jobs, by_phase);
    for (size_t i = 0; i < n; i++) {
        h->refs++;
        h->jobs_left++;
        if (d->hints->pending_tail)
            d->hints->pending_tail->next = jobs[i];
        else
            d->hints->pending = jobs[i];
        d->hints->pending_tail = jobs[i];
    }
    free(jobs);
}

bool hints_staging_wait(struct larderd *d, const struct dataset_entry *e, uint32_t shard,
                        uint64_t offset, uint64_t length, int timeout_ms)
{
    struct hints *hints = d->hints;
    if (!hints) return false;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) deadline.tv_sec++, deadline.tv_nsec -= 1000000000;
    bool waited = false;
    pthread_mutex_lock(&hints->lock);
    for (;;) {
        bool staging = false;
        for (const struct stage_job *j = hints->running; j && !staging; j = j->next)
            staging = j->hint->entry == e && j->shard == shard && j->offset < offset + length &&
                      offset < j->offset + j->length;
        if (!staging || hints->stopping) break;
        waited = true;
        if (pthread_cond_timedwait(&hints->changed, &hints->lock, &deadline) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&hints->lock);
    return waited;
}

static void *reaper(void *arg);

int hint_here(struct larderd *d, struct dataset_entry *e, char *const *keys, uint32_t num_keys,
              uint64_t ttl_ms, bool relay, struct hint **out)
{
    struct hints *hints = hints_of(d);
    struct larder__cache *cache = larder__dataset_cache(e->dataset);
    if (!hints) return -ENOMEM;
    if (!cache) return larder__fail(LARDER_EUSAGE, "hint: this daemon has no node cache");
    struct hint *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->entry = e;
    h->refs = 2; /* the list's and the caller's */
    int rc = sample_ranges(h, e->dataset, keys, num_keys, larder__cache_block_size(cache));
    if (rc < 0) {
        free(h->ranges);
        free(h);
        return rc;
    }
    /* pinned and listed under the lock: the reaper, releasing another
     * hint's blocks, sees this one's as live */
    pthread_mutex_lock(&hints->lock);
    size_t live = 0;
    for (const struct hint *o = hints->list; o; o = o->next)
        live += o->live;
    if (hints->stopping || live >= MAX_LIVE_HINTS) {
        bool stopping = hints->stopping;
        pthread_mutex_unlock(&hints->lock);
        free(h->ranges);
        free(h);
        return stopping ? larder__fail(-ESHUTDOWN, "hint: the daemon is stopping")
                        : larder__fail(-EAGAIN,
                                       "hint: %d hints are live on this node already: let some "
                                       "expire (shorter --ttl) or hint fewer, larger sets",
                                       MAX_LIVE_HINTS);
    }
    h->expiry_ms = larder__cache_clock_ms() + (int64_t)ttl_ms;
    pin_ranges(h, cache);
    h->live = true;
    h->next = hints->list;
    hints->list = h;
    if (!hints->reaper_running && pthread_create(&hints->reaper, NULL, reaper, d) == 0)
        hints->reaper_running = true;
    queue_staging(d, h, relay);
    struct stage_job *ready = take_ready(d);
    pthread_cond_broadcast(&hints->changed); /* the reaper's next time may be sooner */
    pthread_mutex_unlock(&hints->lock);
    submit(d, ready);
    say("hint: %s: %llu samples, %llu bytes pinned%s for %llu s", e->url,
        (unsigned long long)h->samples, (unsigned long long)h->pinned_bytes,
        h->partial ? " (all the cache's pins may hold)" : "", (unsigned long long)ttl_ms / 1000);
    *out = h;
    return 0;
}

void hint_wait(struct larderd *d, struct hint *h)
{
    pthread_mutex_lock(&d->hints->lock);
    while (h->jobs_left && !d->hints->stopping)
        pthread_cond_wait(&d->hints->changed, &d->hints->lock);
    pthread_mutex_unlock(&d->hints->lock);
}

/* Whether another live hint of the same dataset covers bytes [lo, hi) of shard. */
static bool pinned_by_other(const struct hints *hints, const struct hint *h, uint32_t shard,
                            uint64_t lo, uint64_t hi)
{
    for (const struct hint *o = hints->list; o; o = o->next) {
        if (o == h || o->entry != h->entry) continue;
        size_t low = 0, high = o->num_ranges; /* the first range ending after lo */
        while (low < high) {
            size_t mid = (low + high) / 2;
            const struct pin_range *r = &o->ranges[mid];
            if (r->shard < shard || (r->shard == shard && r->offset + r->length <= lo))
                low = mid + 1;
            else
                high = mid;
        }
        if (low < o->num_ranges && o->ranges[low].shard == shard && o->ranges[low].offset < hi)
            return true;
    }
    return false;
}

/* Release h's pins (h is off the list); the cache's time becomes the
 * latest of the dataset's live hints.  Call with hints->lock held. */
static void unpin(struct hints *hints, struct hint *h)
{
    struct larder__cache *cache = larder__dataset_cache(h->entry->dataset);
    uint32_t block = larder__cache_block_size(cache);
    bool others = false;
    int64_t latest = 0;
    for (const struct hint *o = hints->list; o; o = o->next)
        if (o->entry == h->entry) {
            others = true;
            if (o->expiry_ms > latest) latest = o->expiry_ms;
        }
    for (size_t i = 0; i < h->num_ranges; i++) {
        const struct pin_range *r = &h->ranges[i];
        uint64_t first, last;
        larder__cache_blocks(cache, r->offset, r->length, &first, &last);
        if (!others) {
            larder__cache_unpin(cache, r->shard, first, last);
            continue;
        }
        for (uint64_t b = first; b <= last; b++)
            if (!pinned_by_other(hints, h, r->shard, b * block, (b + 1) * block))
                larder__cache_unpin(cache, r->shard, b, b);
    }
    larder__cache_set_pin_expiry(cache, latest);
}

/* The expiry thread: sleeps until the next hint's time, then unpins it. */
static void *reaper(void *arg)
{
    struct larderd *d = arg;
    struct hints *hints = d->hints;
    pthread_mutex_lock(&hints->lock);
    while (!hints->stopping) {
        int64_t now = larder__cache_clock_ms(), next = INT64_MAX;
        for (struct hint **p = &hints->list; *p;) {
            struct hint *h = *p;
            if (h->expiry_ms <= now) {
                *p = h->next;
                h->live = false;
                unpin(hints, h);
                say("hint: %s: time is up, %llu bytes unpinned", h->entry->url,
                    (unsigned long long)h->pinned_bytes);
                put_locked(h);
                continue;
            }
            if (h->expiry_ms < next) next = h->expiry_ms;
            p = &h->next;
        }
        if (next == INT64_MAX) {
            pthread_cond_wait(&hints->changed, &hints->lock);
        } else { /* the condition's clock is CLOCK_REALTIME, the pins' */
            struct timespec until = {(time_t)(next / 1000), (long)(next % 1000) * 1000000};
            pthread_cond_timedwait(&hints->changed, &hints->lock, &until);
        }
    }
    pthread_mutex_unlock(&hints->lock);
    return NULL;
}

/* Append text, with the JSON escapes a string needs when `quoted`. */
static void append(char **out, size_t *used, size_t *capacity, const char *text, bool quoted)
{
    for (const char *p = text; *out && *p; p++) {
        char piece[8];
        unsigned char ch = (unsigned char)*p;
        if (quoted && (ch < 0x20 || ch == '"' || ch == '\\'))
            snprintf(piece, sizeof piece, "\\u%04x", ch);
        else
            piece[0] = (char)ch, piece[1] = '\0';
        size_t n = strlen(piece);
        if (*used + n + 1 > *capacity) {
            char *bigger = realloc(*out, *capacity * 2);
            if (!bigger) {
                free(*out);
                *out = NULL;
                return;
            }
            *out = bigger;
            *capacity *= 2;
        }
        memcpy(*out + *used, piece, n + 1);
        *used += n;
    }
}

char *hints_list_json(struct larderd *d)
{
    struct hints *hints = hints_of(d);
    size_t used = 0, capacity = 4096;
    char *out = malloc(capacity);
    if (!out || !hints) {
        free(out);
        return NULL;
    }
    out[0] = '\0';
    append(&out, &used, &capacity, "{\"hints\": [", false);
    pthread_mutex_lock(&hints->lock);
    int64_t now = larder__cache_clock_ms();
    for (const struct hint *h = hints->list; h && out; h = h->next) {
        larder_dataset_info info;
        larder_dataset_info_get(h->entry->dataset, &info);
        char line[512];
        append(&out, &used, &capacity, h == hints->list ? "{\"url\": \"" : ", {\"url\": \"", false);
        append(&out, &used, &capacity, h->entry->url, true);
        snprintf(line, sizeof line,
                 "\", \"dataset_id\": \"%s\", \"ttl_left_ms\": %lld, \"samples\": %llu, "
                 "\"bytes\": %llu, \"pinned_bytes\": %llu, \"staged_bytes\": %llu, "
                 "\"staging\": %s, \"partial\": %s, \"failed\": %s}",
                 info.dataset_id, (long long)(h->expiry_ms - now), (unsigned long long)h->samples,
                 (unsigned long long)h->bytes, (unsigned long long)h->pinned_bytes,
                 (unsigned long long)h->staged_bytes, h->jobs_left ? "true" : "false",
                 h->partial ? "true" : "false", h->failed ? "true" : "false");
        append(&out, &used, &capacity, line, false);
    }
    pthread_mutex_unlock(&hints->lock);
    append(&out, &used, &capacity, "]}", false);
    return out;
}

void hints_stop(struct larderd *d)
{
    struct hints *hints = d->hints;
    if (!hints) return;
    pthread_mutex_lock(&hints->lock);
    hints->stopping = true;
    pthread_cond_broadcast(&hints->changed);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    while (hints->threads > 0)
        if (pthread_cond_timedwait(&hints->changed, &hints->lock, &until) != 0) break;
    pthread_mutex_unlock(&hints->lock);
}

void hints_free(struct larderd *d)
{
    struct hints *hints = d->hints;
    if (!hints) return;
    hints_stop(d);
    if (hints->reaper_running) pthread_join(hints->reaper, NULL);
    pthread_mutex_lock(&hints->lock);
    bool busy = hints->threads > 0;
    while (hints->pending) { /* never started: the pool is gone */
        struct stage_job *job = hints->pending;
        hints->pending = job->next;
        put_locked(job->hint);
        free(job);
    }
    hints->pending_tail = NULL;
    while (hints->list) {
        struct hint *h = hints->list;
        hints->list = h->next;
        h->live = false;
        put_locked(h);
    }
    pthread_mutex_unlock(&hints->lock);
    if (busy) { /* a thread stuck on a member past 10 s: the process is ending; leave
                 * it (and what it uses) be */
        say("hint: a hint thread is still waiting on a member; not waiting for it");
        return;
    }
    pthread_mutex_destroy(&hints->lock);
    pthread_cond_destroy(&hints->changed);
    free(hints);
    d->hints = NULL;
}
