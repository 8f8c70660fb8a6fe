/*
 * transform.c - TRANSFORM requests (docs/protocol.md, "Transforms"): a
 * reader asks for sample i with a transform; the daemon answers the
 * result from its result cache (transform_cache.c), or runs the
 * transform next to the cached bytes on its transform pool (ordered by
 * class: a DEMAND read's work before prefetch work), or, when placement
 * (transform_place.c) says the daemon is the bottleneck, or it has not
 * the transform at the reader's version, answers the raw bytes marked
 * untransformed, read on the READ pool, and the reader runs it.  A
 * transform that fails on a sample answers that sample's ERROR, and the
 * daemon goes on.
 */
#include "larderd.h"

#include "dataset.h"
#include "fill.h"
#include "pool.h"
#include "transform.h"
#include "transform_cache.h"
#include "transform_place.h"

#include <errno.h>
#include <stddef.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct transforms {
    struct larder__pool *pool; /* --transform-jobs workers */
    int jobs;
    struct transform_cache *cache;
    struct placement place;
    uint64_t queued; /* transforms queued or running (atomic) */
    /* the sampler (transforms_start): placement's inputs measured every
     * PLACE_SAMPLE_MS, requests or not, so a decision is ready when one comes */
    pthread_t sampler;
    bool sampling, stopping;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop;
    /* counters (atomic) */
    uint64_t transformed, cached, raw_reader, raw_shed, raw_unknown, errors;
};

enum job_kind { JOB_TRANSFORM, JOB_RAW, JOB_RAW_AT_READER };

struct transform_job {
    struct connection *connection;
    struct dataset_entry *entry;
    struct larder__transform_request request; /* spec: not valid past the frame */
    struct larder__transform transform;       /* JOB_TRANSFORM */
    enum job_kind kind;
    uint64_t request_id;
    uint64_t charge;
    int64_t arrived_us;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void count(uint64_t *counter)
{
    __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

/* The daemon's transforms, made on first use (d->lock). */
static struct transforms *transforms_of(struct larderd *d)
{
    pthread_mutex_lock(&d->lock);
    struct transforms *t = d->transforms;
    if (!t && (t = calloc(1, sizeof *t))) {
        int jobs = d->config.transform_jobs;
        if (jobs <= 0) {
            cpu_set_t set;
            jobs = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
            if (jobs > 16) jobs = 16;
        }
        t->jobs = jobs;
        pthread_mutex_init(&t->stop_lock, NULL);
        pthread_cond_init(&t->stop, NULL);
        t->cache = transform_cache_new(d->config.transform_cache_bytes);
        placement_init(&t->place, d->config.transform_cpu_limit, now_ms());
        if (!t->cache || larder__pool_new(&t->pool, jobs) < 0) {
            transform_cache_free(t->cache);
            placement_free(&t->place);
            free(t);
            t = NULL;
        }
        d->transforms = t;
    }
    pthread_mutex_unlock(&d->lock);
    return t;
}

struct larder__pool *transforms_pool(struct larderd *d)
{
    struct transforms *t = transforms_of(d);
    return t ? t->pool : NULL;
}

static void *sampler(void *arg)
{
    struct transforms *t = arg;
    pthread_mutex_lock(&t->stop_lock);
    while (!t->stopping) {
        pthread_mutex_unlock(&t->stop_lock);
        placement_tick(&t->place, now_ms());
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += PLACE_SAMPLE_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&t->stop_lock);
        if (!t->stopping) pthread_cond_timedwait(&t->stop, &t->stop_lock, &until);
    }
    pthread_mutex_unlock(&t->stop_lock);
    return NULL;
}

int transforms_start(struct larderd *d)
{
    struct transforms *t = transforms_of(d);
    if (!t) return -ENOMEM;
    if (pthread_create(&t->sampler, NULL, sampler, t) != 0) return -EAGAIN;
    t->sampling = true;
    return 0;
}

void transforms_free(struct larderd *d)
{
    struct transforms *t = d->transforms;
    if (!t) return;
    if (t->sampling) {
        pthread_mutex_lock(&t->stop_lock);
        t->stopping = true;
        pthread_cond_signal(&t->stop);
        pthread_mutex_unlock(&t->stop_lock);
        pthread_join(t->sampler, NULL);
    }
    pthread_mutex_destroy(&t->stop_lock);
    pthread_cond_destroy(&t->stop);
    larder__pool_free(t->pool); /* runs what is queued */
    transform_cache_free(t->cache);
    placement_free(&t->place);
    free(t);
    d->transforms = NULL;
}

static void job_end(struct transform_job *job)
{
    struct connection *c = job->connection;
    pthread_mutex_lock(&c->lock);
    c->charged -= (size_t)job->charge;
    c->jobs--;
    pthread_mutex_unlock(&c->lock);
    struct larderd *d = c->daemon;
    connection_release(c);
    free(job);
    larderd_wake(d);
}

#define FRAME_HEAD (LARDER__WIRE_HEADER + LARDER__TRANSFORMED_FIXED)

/* What an answer costs when the node-wide budget of answers in memory is
 * spent: an ERROR, and the reader runs the transform itself. */
static void refuse_memory(struct connection *c, uint64_t request, size_t length)
{
    char message[160];
    snprintf(message, sizeof message,
             "an answer of %zu bytes: the daemon's answers in memory are at their node-wide "
             "limit (%u MiB); transform it here",
             length, UNCACHED_BUDGET >> 20);
    send_error(c, request, -EAGAIN, message);
}

/* An output for a TRANSFORMED frame with a body of `length` bytes, that
 * holds its share of the node-wide budget of answers in memory until it
 * is sent: NULL, with an ERROR answered, when that is spent. */
static struct output *answer_new(struct connection *c, uint64_t request, size_t length)
{
    size_t frame = FRAME_HEAD + length;
    if (!uncached_try_take(c, frame)) {
        refuse_memory(c, request, frame);
        return NULL;
    }
    struct output *o = output_new(frame);
    if (!o) {
        uncached_give(c, frame);
        send_error(c, request, -ENOMEM, "out of memory");
        return NULL;
    }
    o->uncached = frame;
    return o;
}

/* Queue o, a TRANSFORMED frame of `flags` whose body is in place. */
static void answer_send(struct connection *c, struct output *o, uint64_t request, uint32_t flags,
                        int priority)
{
    larder__wire_encode_transformed(o->bytes, FRAME_HEAD, request, flags, o->length - FRAME_HEAD);
    o->priority = (uint8_t)priority;
    enqueue_output(c, o);
}

/* Queue a TRANSFORMED frame of `flags` with body[0..length). */
static void answer(struct connection *c, uint64_t request, uint32_t flags, const void *body,
                   size_t length, int priority)
{
    struct output *o = answer_new(c, request, length);
    if (!o) return;
    if (length) memcpy(o->bytes + FRAME_HEAD, body, length);
    answer_send(c, o, request, flags, priority);
}

/* The sample's layout and its bytes, checked, read at the request's class. */
static int read_sample(struct transform_job *job, larder_field_info **fields, uint32_t *num_fields,
                       uint8_t **bytes, uint64_t *length)
{
    larder_dataset *ds = job->entry->dataset;
    larder_sample_info info;
    int rc = larder_sample_info_get(ds, job->request.sample, &info);
    if (rc < 0) return rc;
    if (info.length > LARDER__WIRE_MAX_READ)
        return larder__fail(LARDER_ETOOSMALL, "sample %llu is %llu bytes: at most %u in a frame",
                            (unsigned long long)info.id, (unsigned long long)info.length,
                            LARDER__WIRE_MAX_READ);
    *fields = calloc(info.num_fields ? info.num_fields : 1, sizeof **fields);
    *bytes = malloc(info.length ? (size_t)info.length : 1);
    if (!*fields || !*bytes) return -ENOMEM;
    rc = larder_sample_layout_get(ds, info.id, NULL, *fields, info.num_fields);
    if (rc < 0) return rc;
    /* as a READ's worker does: other owners' chunks borrowed before the fill locks */
    struct larder__source *stripe = NULL;
    struct larder__stripe_loan *loan = borrow_ahead(job->entry, info.shard, info.offset,
                                                    info.length, job->request.priority, &stripe);
    take_source_reads();
    rc = larder__fill_range_at(larder__dataset_fill(ds), info.shard, info.offset, info.length,
                               job->request.priority, *bytes);
    take_source_reads();
    borrow_return(stripe, loan);
    *num_fields = info.num_fields;
    *length = info.length;
    return rc;
}

static void transform_job(void *arg)
{
    struct transform_job *job = arg;
    struct connection *c = job->connection;
    struct transforms *t = c->daemon->transforms;
    int64_t started = now_us();
    larder_field_info *fields = NULL;
    uint8_t *bytes = NULL;
    uint32_t num_fields = 0;
    uint64_t length = 0;
    size_t result_length = 0;
    int rc = read_sample(job, &fields, &num_fields, &bytes, &length);
    if (rc == 0 && job->kind != JOB_TRANSFORM) {
        uint32_t flags = LARDER__TRANSFORMED_RAW;
        if (job->kind == JOB_RAW_AT_READER) flags |= LARDER__TRANSFORMED_AT_READER;
        answer(c, job->request_id, flags, bytes, (size_t)length, job->request.priority);
    } else if (rc == 0) {
        /* the result lands in the frame that is sent: one copy of it here,
         * besides the result cache's */
        uint8_t *buffer = NULL;
        rc = larder__transform_run_at(&job->transform, job->request.sample, fields, num_fields,
                                      bytes, length, offsetof(struct output, bytes) + FRAME_HEAD,
                                      &buffer, &result_length);
        free(bytes), bytes = NULL;
        if (rc == 0) {
            struct output *o = (struct output *)buffer;
            const uint8_t *result = buffer + offsetof(struct output, bytes) + FRAME_HEAD;
            struct transform_key key = {job->entry->id_low, job->entry->id_high,
                                        job->request.sample, job->transform.ops->version,
                                        job->transform.canonical};
            transform_cache_put(t->cache, &key, result, result_length);
            size_t frame = FRAME_HEAD + result_length;
            if (uncached_try_take(c, frame)) {
                *o = (struct output){.length = frame, .file = -1, .uncached = frame};
                answer_send(c, o, job->request_id, 0, job->request.priority);
                count(&t->transformed);
            } else {
                free(buffer);
                refuse_memory(c, job->request_id, frame);
                count(&t->errors);
            }
        }
    }
    if (rc < 0) { /* the transform's, or the read's (a checksum that failed, an origin gone) */
        count(&t->errors);
        send_error(c, job->request_id, rc, larder_errmsg());
    }
    if (job->kind == JOB_TRANSFORM) {
        placement_note(&t->place, (uint64_t)(started - job->arrived_us),
                       (uint64_t)(now_us() - started));
        __atomic_fetch_sub(&t->queued, 1, __ATOMIC_RELAXED);
    }
    free(fields), free(bytes);
    job_end(job);
}

bool transform_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    struct larder__transform_request request;
    if (larder__wire_transform(payload, f->length, &request) < 0) return false;
    if (c->tcp) { /* a node's own readers' work, not its peers' */
        send_error(c, f->request, LARDER_EDENIED, "TRANSFORM is for local readers");
        return true;
    }
    int slot = -1;
    struct dataset_entry *e = find_dataset(c->daemon, request.id_low, request.id_high, &slot);
    if (!e || !(c->opened & (UINT64_C(1) << slot))) {
        send_error(c, f->request, LARDER_ENOTFOUND, "dataset not opened on this connection");
        return true;
    }
    struct transforms *t = transforms_of(c->daemon);
    if (!t) {
        send_error(c, f->request, -ENOMEM, "out of memory");
        return true;
    }
    larder_sample_info info;
    if (larder_sample_info_get(e->dataset, request.sample, &info) < 0) {
        send_error(c, f->request, LARDER_ENOTFOUND, larder_errmsg());
        return true;
    }
    struct transform_job *job = calloc(1, sizeof *job);
    if (!job) {
        send_error(c, f->request, -ENOMEM, "out of memory");
        return true;
    }
    *job = (struct transform_job){.connection = c,
                                  .entry = e,
                                  .request = request,
                                  .kind = JOB_TRANSFORM,
                                  .request_id = f->request,
                                  .arrived_us = now_us()};
    job->request.spec = NULL;
    /* a transform we lack, or at another version than the reader's: its bytes, raw */
    if (larder__transform_parse(request.spec, request.spec_length, &job->transform) < 0 ||
        job->transform.ops->version != request.version) {
        job->kind = JOB_RAW;
        count(&t->raw_unknown);
    }
    if (job->kind == JOB_TRANSFORM) {
        struct transform_key key = {e->id_low, e->id_high, request.sample,
                                    job->transform.ops->version, job->transform.canonical};
        size_t n = transform_cache_length(t->cache, &key);
        if (n) { /* a hit: read from the cache into the frame that is sent */
            struct output *o = answer_new(c, f->request, n);
            if (!o) {
                free(job);
                return true;
            }
            if (transform_cache_get(t->cache, &key, o->bytes + FRAME_HEAD, n) == n) {
                answer_send(c, o, f->request, LARDER__TRANSFORMED_CACHED, request.priority);
                count(&t->cached);
                free(job);
                return true;
            }
            /* evicted meanwhile: run it */
            uncached_give(c, o->uncached);
            free(o);
        }
        bool shed;
        uint64_t queued = __atomic_load_n(&t->queued, __ATOMIC_RELAXED);
        if (!placement_admit(&t->place, now_ms(), request.wait_us, request.budget_us, queued,
                             t->jobs, &shed)) {
            job->kind = shed ? JOB_RAW : JOB_RAW_AT_READER;
            count(shed ? &t->raw_shed : &t->raw_reader);
        }
    }
    if (job->kind != JOB_TRANSFORM && (request.flags & LARDER__TRANSFORM_RESIDENT)) {
        /* the reader holds the bytes: "run it yourself" needs no read here */
        uint32_t flags = LARDER__TRANSFORMED_RAW;
        if (job->kind == JOB_RAW_AT_READER) flags |= LARDER__TRANSFORMED_AT_READER;
        answer(c, f->request, flags, NULL, 0, request.priority);
        free(job);
        return true;
    }
    /* charged while it runs: its bytes and what it can answer, so that a
     * reader that does not read its answers stops being read before the
     * answers its queued transforms will make pass its budget */
    job->charge = info.length + REQUEST_OVERHEAD;
    if (job->kind == JOB_TRANSFORM)
        job->charge += larder__transform_result_max(&job->transform, info.num_fields, info.length);
    pthread_mutex_lock(&c->lock);
    c->refs++;
    c->jobs++;
    c->charged += (size_t)job->charge;
    pthread_mutex_unlock(&c->lock);
    if (job->kind == JOB_TRANSFORM) {
        __atomic_fetch_add(&t->queued, 1, __ATOMIC_RELAXED);
        larder__pool_submit(t->pool, transform_job, job, request.priority);
    } else { /* raw bytes are a read: on the READ workers, not behind transforms */
        larder__pool_submit(c->daemon->pool, transform_job, job, request.priority);
    }
    return true;
}

size_t transforms_json(struct larderd *d, char *out, size_t capacity)
{
    struct transforms *t = transforms_of(d);
    if (!t) return (size_t)snprintf(out, capacity, "null");
    struct placement *p = &t->place;
    placement_tick(p, now_ms());
    uint64_t bytes, entries;
    transform_cache_usage(t->cache, &bytes, &entries);
    pthread_mutex_lock(&p->lock);
    int n = snprintf(
        out, capacity,
        "{\"placement\": \"%s\", \"placement_since_ms\": %lld, \"switches\": %llu, "
        "\"cpu_limit\": %d, \"cpu_busy\": %.3f, \"cpu_self\": %.3f, \"contention\": %.3f, "
        "\"cpus\": %d, \"jobs\": %d, \"queued\": %llu, \"queue_wait_us\": %.0f, \"run_us\": %.0f, "
        "\"reader_wait_us\": %u, \"reader_budget_us\": %u, \"transformed\": %llu, "
        "\"cached\": %llu, \"raw_reader\": %llu, \"raw_shed\": %llu, \"raw_unknown\": %llu, "
        "\"errors\": %llu, \"cache_bytes\": %llu, \"cache_entries\": %llu}",
        p->at_reader ? "reader" : "daemon", (long long)(now_ms() - p->since_ms),
        (unsigned long long)p->switches, p->limit, p->last.busy, p->last.self, p->contention,
        p->ncpu, t->jobs, (unsigned long long)__atomic_load_n(&t->queued, __ATOMIC_RELAXED),
        p->wait_us, p->run_us, p->reader_wait_us, p->reader_budget_us,
        (unsigned long long)t->transformed, (unsigned long long)t->cached,
        (unsigned long long)t->raw_reader, (unsigned long long)t->raw_shed,
        (unsigned long long)t->raw_unknown, (unsigned long long)t->errors,
        (unsigned long long)bytes, (unsigned long long)entries);
    pthread_mutex_unlock(&p->lock);
    return n < 0 ? 0 : (size_t)n >= capacity ? capacity - 1 : (size_t)n;
}

size_t transforms_metrics(struct larderd *d, char *out, size_t capacity)
{
    struct transforms *t = d->transforms;
    if (!t || capacity == 0) return 0;
    struct placement *p = &t->place;
    uint64_t bytes, entries;
    transform_cache_usage(t->cache, &bytes, &entries);
    pthread_mutex_lock(&p->lock);
    int n = snprintf(
        out, capacity,
        "# TYPE larder_transform_at_reader gauge\nlarder_transform_at_reader %d\n"
        "# TYPE larder_transform_switches_total counter\nlarder_transform_switches_total %llu\n"
        "# TYPE larder_transform_contention gauge\nlarder_transform_contention %.3f\n"
        "# TYPE larder_transform_cpu_busy gauge\nlarder_transform_cpu_busy %.3f\n"
        "# TYPE larder_transform_cpu_self gauge\nlarder_transform_cpu_self %.3f\n"
        "# TYPE larder_transform_queue_wait_us gauge\nlarder_transform_queue_wait_us %.0f\n"
        "# TYPE larder_transform_run_us gauge\nlarder_transform_run_us %.0f\n"
        "# TYPE larder_transform_reader_wait_us gauge\nlarder_transform_reader_wait_us %u\n"
        "# TYPE larder_transform_reader_budget_us gauge\nlarder_transform_reader_budget_us %u\n"
        "# TYPE larder_transform_answers_total counter\n"
        "larder_transform_answers_total{how=\"transformed\"} %llu\n"
        "larder_transform_answers_total{how=\"cached\"} %llu\n"
        "larder_transform_answers_total{how=\"raw_reader\"} %llu\n"
        "larder_transform_answers_total{how=\"raw_shed\"} %llu\n"
        "larder_transform_answers_total{how=\"raw_unknown\"} %llu\n"
        "larder_transform_answers_total{how=\"error\"} %llu\n"
        "# TYPE larder_transform_cache_bytes gauge\nlarder_transform_cache_bytes %llu\n",
        p->at_reader ? 1 : 0, (unsigned long long)p->switches, p->contention, p->last.busy,
        p->last.self, p->wait_us, p->run_us, p->reader_wait_us, p->reader_budget_us,
        (unsigned long long)t->transformed, (unsigned long long)t->cached,
        (unsigned long long)t->raw_reader, (unsigned long long)t->raw_shed,
        (unsigned long long)t->raw_unknown, (unsigned long long)t->errors,
        (unsigned long long)bytes);
    pthread_mutex_unlock(&p->lock);
    return n < 0 ? 0 : (size_t)n >= capacity ? capacity - 1 : (size_t)n;
}
