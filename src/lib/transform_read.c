/*
 * transform_read.c - larder_read_transformed: a sample with a transform,
 * from the node daemon when there is one (TRANSFORM, docs/protocol.md),
 * else made here.  When the daemon answers the raw bytes (it is busy, or
 * has not this transform at this version), they are checked against the
 * index's checksum and the transform runs here: the same code as in the
 * daemon (transform.c), so the same bytes.  Each read reports the
 * process's recent wait for transformed samples and its budget, what the
 * daemon places work by (docs/transforms.md): the budget set, else the
 * process's step budget, what the transformed reads it has in flight
 * would take it one after another (their number times the CPU time of a
 * transform here, measured on the first transformed read, which runs
 * here, and whenever one runs here).
 * A daemon that says it leaves transforms to its readers is not asked
 * again for AT_READER_BACKOFF_US: the process transforms what it reads.
 */
#include "cache.h"
#include "dataset_internal.h"
#include "endpoint.h"
#include "fill.h"
#include "transform.h"
#include "wire.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TRANSFORM_TIMEOUT_MS 30000 /* the daemon answers raw bytes well before, when busy */

#define AT_READER_BACKOFF_US 500000

static uint32_t wait_ewma_us; /* the process's wait per transformed sample, smoothed */
static uint32_t cost_ewma_us; /* CPU time of a transform run here, smoothed; 0: none yet */
static uint32_t inflight;     /* larder_read_transformed calls under way in this process */
/* the most of them under way at once lately (a step's reads: the first
 * reads of a step find fewer under way than the step will have), and when
 * it was last reached; older than STEP_PEAK_US, the number now replaces it */
static uint32_t inflight_peak;
static uint64_t inflight_peak_us;
#define STEP_PEAK_US 1000000
/* the daemons that said they leave transforms to their readers lately, by
 * their address's 64-bit hash, with the now_us() before which they are not
 * asked (one daemon's word never holds back another's readers) */
#define BUSY_DAEMONS 64
static struct {
    uint64_t hash, until;
} busy_daemons[BUSY_DAEMONS];
static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t budget_us = UINT64_MAX; /* UINT64_MAX: not set, read LARDER_TRANSFORM_BUDGET_MS */
static pthread_once_t dir_once = PTHREAD_ONCE_INIT;

void larder_transform_set_budget(uint64_t budget)
{
    __atomic_store_n(&budget_us, budget, __ATOMIC_RELAXED);
}

void larder__transform_reader_load(uint32_t *wait_us, uint32_t *budget)
{
    uint64_t b = __atomic_load_n(&budget_us, __ATOMIC_RELAXED);
    if (b == UINT64_MAX) {
        const char *text = getenv("LARDER_TRANSFORM_BUDGET_MS");
        b = text && *text ? strtoull(text, NULL, 10) * 1000 : 0;
        __atomic_store_n(&budget_us, b, __ATOMIC_RELAXED);
    }
    if (!b)
        b = larder__transform_step_budget(__atomic_load_n(&inflight_peak, __ATOMIC_RELAXED),
                                          __atomic_load_n(&cost_ewma_us, __ATOMIC_RELAXED));
    *budget = b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
    *wait_us = __atomic_load_n(&wait_ewma_us, __ATOMIC_RELAXED);
}

uint64_t larder__transform_step_budget(uint32_t reads, uint32_t cost_us)
{
    return (uint64_t)(reads ? reads : 1) * cost_us;
}

static uint64_t daemon_hash(larder_dataset *d)
{
    uint64_t h = 1469598103934665603u;
    for (const char *c = larder__endpoint_address(d->daemon); *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211u;
    return h;
}

/* Whether d's daemon may be asked now (it did not say "readers" lately). */
static bool daemon_askable(larder_dataset *d, uint64_t now)
{
    uint64_t h = daemon_hash(d);
    bool askable = true;
    pthread_mutex_lock(&busy_lock);
    for (int i = 0; i < BUSY_DAEMONS; i++)
        if (busy_daemons[i].hash == h && busy_daemons[i].until > now) askable = false;
    pthread_mutex_unlock(&busy_lock);
    return askable;
}

/* d's daemon leaves transforms to its readers: not asked until `until`
 * (its own slot, else one whose time is up, else the soonest to end). */
static void daemon_busy(larder_dataset *d, uint64_t until)
{
    uint64_t h = daemon_hash(d);
    pthread_mutex_lock(&busy_lock);
    int at = 0;
    for (int i = 0; i < BUSY_DAEMONS; i++) {
        if (busy_daemons[i].hash == h) {
            at = i;
            break;
        }
        if (busy_daemons[i].until < busy_daemons[at].until) at = i;
    }
    busy_daemons[at].hash = h;
    busy_daemons[at].until = until;
    pthread_mutex_unlock(&busy_lock);
}

/* Smooth a measurement into *ewma (the first one is taken as it is). */
static void note(uint32_t *ewma, uint64_t us)
{
    uint32_t old = __atomic_load_n(ewma, __ATOMIC_RELAXED);
    if (us > UINT32_MAX) us = UINT32_MAX;
    uint64_t next = old ? (7 * (uint64_t)old + us) / 8 : (us ? us : 1);
    __atomic_store_n(ewma, (uint32_t)next, __ATOMIC_RELAXED);
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* This thread's CPU time: what a transform costs, whatever else shares the CPU. */
static uint64_t thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* LARDER_TRANSFORM_DIR: this process's loadable transforms, once. */
static void load_env_dir(void)
{
    const char *dir = getenv("LARDER_TRANSFORM_DIR");
    if (dir && *dir && larder_transform_load_dir(dir) < 0)
        larder__log(LARDER_LOG_WARN, "LARDER_TRANSFORM_DIR: %s", larder_errmsg());
}

/* Run t here over sample id: raw (its bytes, checked already) or read now. */
static int run_here(larder_dataset *d, const struct larder__transform *t, uint64_t id,
                    const uint8_t *raw, larder_transformed **out)
{
    larder_sample_info info;
    int rc = larder_sample_info_get(d, id, &info);
    if (rc < 0) return rc;
    larder_field_info *fields = calloc(info.num_fields ? info.num_fields : 1, sizeof *fields);
    uint8_t *bytes = raw ? NULL : malloc(info.length ? (size_t)info.length : 1);
    if (!fields || (!raw && !bytes)) rc = -ENOMEM;
    if (rc == 0) rc = larder_sample_layout_get(d, id, NULL, fields, info.num_fields);
    if (rc >= 0 && !raw) {
        int64_t n = larder_read_sample(d, id, bytes, (size_t)info.length);
        rc = n < 0 ? (int)n : 0;
    }
    uint8_t *result = NULL;
    size_t length = 0;
    /* CPU time: wall time would count the process's other transforms and
     * threads sharing its CPUs, which the step budget counts by itself */
    uint64_t began = thread_cpu_us();
    if (rc >= 0)
        rc = larder__transform_run(t, id, fields, info.num_fields, raw ? raw : bytes, info.length,
                                   &result, &length);
    if (rc >= 0) note(&cost_ewma_us, thread_cpu_us() - began);
    if (rc == 0) rc = larder__transform_decode(result, length, out);
    free(result), free(bytes), free(fields);
    return rc;
}

/*
 * Ask the daemon.  0 and *out (made there, or here from the raw bytes it
 * sent); 1 when the reader should run it itself (no answer, or an error);
 * or a negative code for raw bytes that are wrong.
 */
static int ask_daemon(larder_dataset *d, const struct larder__transform *t, uint64_t id,
                      const char *spec, larder_transformed **out)
{
    struct larder__sample s;
    int rc = larder__index_sample_range(&d->ix, id, &s);
    if (rc < 0) return rc;
    struct larder__transform_request request = {
        .id_low = d->ix.id_low,
        .id_high = d->ix.id_high,
        .sample = id,
        .priority = LARDER__DEMAND,
        .version = t->ops->version,
        .spec_length = (uint16_t)strlen(spec),
        .spec = spec,
    };
    larder__transform_reader_load(&request.wait_us, &request.budget_us);
    if (d->cache) { /* held here: raw bytes would only travel for nothing */
        uint64_t first, last;
        larder__cache_blocks(d->cache, s.offset, s.length, &first, &last);
        if (larder__cache_present(d->cache, s.shard, first, last))
            request.flags = LARDER__TRANSFORM_RESIDENT;
    }
    uint8_t frame[LARDER__WIRE_HEADER + LARDER__TRANSFORM_FIXED + LARDER_TRANSFORM_MAX_SPEC];
    int n = larder__wire_encode_transform(frame, sizeof frame, 1, &request);
    if (n < 0) return 1;
    /* room for the raw bytes or the most this transform can make of them
     * (the daemon runs the same code at the same version): not the 48 MiB a
     * result may reach, which malloc maps and unmaps on every call */
    uint64_t most = larder__transform_result_max(t, s.num_fields, s.length);
    if (most > LARDER__TRANSFORM_MAX_RESULT) most = LARDER__TRANSFORM_MAX_RESULT;
    size_t capacity = LARDER__TRANSFORMED_FIXED + (size_t)(s.length > most ? s.length : most);
    uint8_t *payload = malloc(capacity);
    if (!payload) return -ENOMEM;
    struct larder__frame answer;
    rc = larder__endpoint_call(d->daemon, frame, (size_t)n, &answer, payload, capacity,
                               TRANSFORM_TIMEOUT_MS);
    uint32_t flags = 0;
    if (rc == 0 && answer.type != LARDER__TRANSFORMED)
        rc = larder__fail(LARDER_EPROTOCOL, "answer type %u to TRANSFORM", answer.type);
    if (rc == 0) rc = larder__wire_transformed(payload, answer.length, &flags);
    if (rc < 0) {
        /* the daemon gone, out of step, or failing on this sample: the
         * reader runs it itself, and a sample that cannot be transformed
         * fails here with the same error (the daemon counted it too) */
        free(payload);
        larder__log(LARDER_LOG_DEBUG,
                    "sample %llu: the node daemon did not transform it (%s); "
                    "transforming it here",
                    (unsigned long long)id, larder_errmsg());
        return 1;
    }
    const uint8_t *body = payload + LARDER__TRANSFORMED_FIXED;
    size_t body_length = answer.length - LARDER__TRANSFORMED_FIXED;
    if (flags & LARDER__TRANSFORMED_AT_READER) daemon_busy(d, now_us() + AT_READER_BACKOFF_US);
    if ((flags & LARDER__TRANSFORMED_RAW) && body_length == 0 && s.length &&
        (request.flags & LARDER__TRANSFORM_RESIDENT)) {
        rc = run_here(d, t, id, NULL, out); /* read here, from the node cache */
        if (rc == 0) (*out)->placement = LARDER_PLACED_FALLBACK;
    } else if (flags & LARDER__TRANSFORMED_RAW) {
        if (body_length != s.length)
            rc =
                larder__fail(LARDER_EPROTOCOL, "daemon sent %zu raw bytes of sample %llu, not %llu",
                             body_length, (unsigned long long)id, (unsigned long long)s.length);
        if (rc == 0) rc = larder__fill_check(d->fill, &s, id, body);
        if (rc == 0) rc = run_here(d, t, id, body, out);
        if (rc == 0) (*out)->placement = LARDER_PLACED_FALLBACK;
    } else {
        rc = larder__transform_decode(body, body_length, out);
        if (rc == 0)
            (*out)->placement =
                flags & LARDER__TRANSFORMED_CACHED ? LARDER_PLACED_CACHED : LARDER_PLACED_DAEMON;
    }
    free(payload);
    return rc;
}

int larder_read_transformed(larder_dataset *d, uint64_t id, const char *spec,
                            larder_transformed **out)
{
    uint64_t started = now_us();
    *out = NULL;
    pthread_once(&dir_once, load_env_dir);
    if (!spec) return larder__fail(LARDER_EUSAGE, "no transform spec");
    struct larder__transform t;
    int rc = larder__transform_parse(spec, strlen(spec), &t);
    if (rc < 0) return rc;
    rc = 1;
    uint32_t under_way = __atomic_add_fetch(&inflight, 1, __ATOMIC_RELAXED);
    if (under_way >= __atomic_load_n(&inflight_peak, __ATOMIC_RELAXED) ||
        started - __atomic_load_n(&inflight_peak_us, __ATOMIC_RELAXED) > STEP_PEAK_US) {
        /* racing threads may store a smaller number: the next read corrects it */
        __atomic_store_n(&inflight_peak, under_way, __ATOMIC_RELAXED);
        __atomic_store_n(&inflight_peak_us, started, __ATOMIC_RELAXED);
    }
    uint32_t wait, budget;
    larder__transform_reader_load(&wait, &budget);
    /* a first transform runs here, to know what one costs (the budget's
     * default); a daemon that leaves transforms to readers is not asked */
    bool ask =
        d->daemon && budget && !larder__endpoint_down(d->daemon) && daemon_askable(d, now_us());
    if (ask) rc = ask_daemon(d, &t, id, t.canonical, out);
    if (rc == 1) {
        rc = run_here(d, &t, id, NULL, out);
        if (rc == 0) (*out)->placement = LARDER_PLACED_LOCAL;
    }
    if (rc == 0) note(&wait_ewma_us, now_us() - started);
    __atomic_fetch_sub(&inflight, 1, __ATOMIC_RELAXED);
    return rc;
}
