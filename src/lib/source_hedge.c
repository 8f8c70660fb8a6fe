/*
 * source_hedge.c - hedged reads of any source, and the one hedging policy
 * (source_hedge.h) that the HTTP source shares.
 *
 * A shared file system has tails too (a stalled server thread, a busy
 * OST), and so does a peer: a read slower than the source's recent p95
 * gets a second, identical read, and the first good answer wins.  A read
 * of a source whose reads are fast (p95 under 2 ms) is made inline.
 * Otherwise both attempts run on worker threads shared by the process
 * (the caller waits, and decides when to hedge): no thread is created per
 * read; the pool grows on demand up to WORKERS_MAX and lets threads idle
 * past WORKER_IDLE_MS go while more than WORKERS_IDLE stay.  Each attempt
 * reads into a buffer of its own, held by a reference-counted read that
 * also holds a reference on the wrapper, so the loser can finish late
 * without touching the caller's memory or a closed source.  The idle
 * workers stay for the life of the process, running liblarder's code:
 * the library must not be unloaded (dlclose) while a process runs
 * (Python's ctypes never unloads it).  A vectored read is hedged extent
 * by extent, so the latency window holds single reads, and only extents
 * up to LARDER__HEDGE_MAX_READ: a larger one is read once, inline.
 */
#include "bigbuf.h"
#include "hedge.h"
#include "source.h"
#include "source_hedge.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define HEDGE_COLD_MS 500.0 /* the delay until a source's latencies are known */
#define HEDGE_FLOOR_MS 2.0  /* never hedge sooner; faster sources are read inline */
/* threads running attempts, at most: stalled attempts keep theirs (a hung
 * NFS server), so there is room for a few stalls per fill worker (64 a
 * dataset by default) before reads fall back to unhedged inline reads */
#define WORKERS_MAX 256
#define WORKERS_IDLE 4      /* idle threads kept */
#define WORKER_IDLE_MS 2000 /* an idle thread beyond those leaves after this */

static _Atomic uint64_t hedges_sent; /* by this process, all sources: statistics and tests */

uint64_t larder__source_hedges(void)
{
    return hedges_sent;
}

double larder__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the policy --------------------------------------------------------------- */

void larder__hedge_policy_init(struct larder__hedge_policy *p, struct larder__hedge_budget *budget)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    p->budget = budget;
}

void larder__hedge_policy_clear(struct larder__hedge_policy *p)
{
    pthread_mutex_destroy(&p->lock);
}

static struct larder__hedge_budget *budget_of(const struct larder__hedge_policy *p)
{
    return p->budget ? p->budget : larder__hedge_process();
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double larder__hedge_policy_delay_ms(struct larder__hedge_policy *p)
{
    double recent[LARDER__HEDGE_WINDOW];
    pthread_mutex_lock(&p->lock);
    int n = p->latencies;
    memcpy(recent, p->latency_ms, (size_t)n * sizeof *recent);
    pthread_mutex_unlock(&p->lock);
    if (n < LARDER__HEDGE_MIN_SAMPLES) return HEDGE_COLD_MS;
    qsort(recent, (size_t)n, sizeof *recent, compare_double);
    double p95 = recent[(int)(0.95 * (n - 1))];
    return p95 > HEDGE_FLOOR_MS ? p95 : HEDGE_FLOOR_MS;
}

bool larder__hedge_policy_fast(struct larder__hedge_policy *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->latencies;
    pthread_mutex_unlock(&p->lock);
    return n >= LARDER__HEDGE_MIN_SAMPLES && larder__hedge_policy_delay_ms(p) <= HEDGE_FLOOR_MS;
}

void larder__hedge_policy_record(struct larder__hedge_policy *p, double ms)
{
    pthread_mutex_lock(&p->lock);
    p->latency_ms[p->next_latency] = ms;
    p->next_latency = (p->next_latency + 1) % LARDER__HEDGE_WINDOW;
    if (p->latencies < LARDER__HEDGE_WINDOW) p->latencies++;
    pthread_mutex_unlock(&p->lock);
}

void larder__hedge_policy_count_read(struct larder__hedge_policy *p)
{
    larder__hedge_count_read(budget_of(p));
}

bool larder__hedge_policy_take(struct larder__hedge_policy *p)
{
    return larder__hedge_take(budget_of(p));
}

void larder__hedge_policy_refund(struct larder__hedge_policy *p)
{
    larder__hedge_refund(budget_of(p));
}

void larder__hedge_policy_sent(struct larder__hedge_policy *p, const char *name, double after_ms)
{
    (void)p;
    hedges_sent++;
    larder__log(LARDER_LOG_DEBUG, "%s: hedging a read after %.1f ms", name, after_ms);
}

/* ---- the workers ------------------------------------------------------------------ */

struct task {
    void (*run)(void *arg);
    void *arg;
    struct task *next;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work;
    struct task *head, *tail;
    int queued;  /* tasks in the queue */
    int threads; /* workers alive */
    int idle;    /* workers waiting for a task (a new one counts from its start) */
} workers = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER};

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&workers.lock);
    for (;;) {
        while (!workers.head) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += WORKER_IDLE_MS / 1000;
            int rc = pthread_cond_timedwait(&workers.work, &workers.lock, &until);
            if (rc == ETIMEDOUT && !workers.head && workers.idle > WORKERS_IDLE) {
                workers.threads--, workers.idle--;
                pthread_mutex_unlock(&workers.lock);
                return NULL;
            }
        }
        struct task *t = workers.head;
        if (!(workers.head = t->next)) workers.tail = NULL;
        workers.queued--, workers.idle--;
        pthread_mutex_unlock(&workers.lock);
        t->run(t->arg);
        free(t);
        pthread_mutex_lock(&workers.lock);
        workers.idle++;
    }
}

/*
 * A child of fork() has only the thread that forked: the workers counted
 * idle are gone, so it starts with none (tasks queued in the parent are
 * the parent's; their memory is left).  Taking the lock around fork keeps
 * the queue consistent in the child.
 */
static void workers_before_fork(void)
{
    pthread_mutex_lock(&workers.lock);
}

static void workers_after_fork_parent(void)
{
    pthread_mutex_unlock(&workers.lock);
}

static void workers_after_fork_child(void)
{
    pthread_mutex_init(&workers.lock, NULL);
    pthread_cond_init(&workers.work, NULL);
    workers.head = workers.tail = NULL;
    workers.queued = workers.threads = workers.idle = 0;
}

static pthread_once_t workers_once = PTHREAD_ONCE_INIT;
static void workers_init(void)
{
    pthread_atfork(workers_before_fork, workers_after_fork_parent, workers_after_fork_child);
}

/*
 * Run `run(arg)` on a worker now: on an idle one, or a new one while there
 * are fewer than WORKERS_MAX.  false, and nothing runs, when neither can
 * be had: a task never waits in the queue behind stalled reads.
 */
static bool workers_submit(void (*run)(void *), void *arg)
{
    struct task *t = malloc(sizeof *t);
    if (!t) return false;
    *t = (struct task){.run = run, .arg = arg};
    pthread_once(&workers_once, workers_init);
    pthread_mutex_lock(&workers.lock);
    if (workers.queued >= workers.idle) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        bool ok =
            workers.threads < WORKERS_MAX && pthread_create(&thread, &attr, worker_main, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (!ok) {
            static _Atomic bool said;
            bool first = !said;
            said = true;
            pthread_mutex_unlock(&workers.lock);
            free(t);
            if (first)
                larder__log(LARDER_LOG_WARN,
                            "%d hedge workers are busy (stalled reads?): reads "
                            "go on inline and unhedged until one is free",
                            WORKERS_MAX);
            return false;
        }
        workers.threads++, workers.idle++;
    }
    if (workers.tail)
        workers.tail->next = t;
    else
        workers.head = t;
    workers.tail = t;
    workers.queued++;
    pthread_cond_signal(&workers.work);
    pthread_mutex_unlock(&workers.lock);
    return true;
}

/* ---- the wrapper ----------------------------------------------------------------- */

struct hedge_source {
    struct larder__source base;
    struct larder__source *inner;
    struct larder__hedge_policy policy;
    _Atomic int refs; /* the owner's, and one per read in flight */
};

static void hedge_release(struct hedge_source *h)
{
    if (--h->refs > 0) return;
    larder__source_close(h->inner);
    larder__hedge_policy_clear(&h->policy);
    free(h);
}

/* One hedged read: shared by the caller and its attempts, freed by the last. */
struct hedged_read {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* an attempt finished */
    struct hedge_source *source;
    struct larder__extent *extents; /* offsets and lengths (the caller's buffers are not used) */
    size_t count, total;
    unsigned flags;
    struct {
        uint8_t *buf; /* total bytes: the extents back to back */
        int rc;
        char message[512];
    } attempt[2];
    int started, finished, winner; /* winner: the first attempt to succeed, or -1 */
    int refs;
};

static void read_release(struct hedged_read *r)
{
    pthread_mutex_lock(&r->lock);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->lock);
    if (!last) return;
    larder__bigbuf_put(r->attempt[0].buf);
    larder__bigbuf_put(r->attempt[1].buf);
    free(r->extents);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->changed);
    hedge_release(r->source);
    free(r);
}

struct attempt_arg {
    struct hedged_read *read;
    int index;
};

/* One attempt, on a worker: the whole read into the attempt's own buffer. */
static void attempt_run(void *arg)
{
    struct attempt_arg *a = arg;
    struct hedged_read *r = a->read;
    int i = a->index;
    free(a);
    struct larder__extent *mine = malloc(r->count * sizeof *mine);
    int rc = -ENOMEM;
    if (mine) {
        size_t at = 0;
        for (size_t k = 0; k < r->count; k++) {
            mine[k] = r->extents[k];
            mine[k].buf = r->attempt[i].buf + at;
            at += r->extents[k].length;
        }
        rc = larder__source_readv(r->source->inner, mine, r->count, r->flags);
        free(mine);
    } else {
        larder__fail(rc, "%s: no memory for a read", r->source->base.name);
    }
    pthread_mutex_lock(&r->lock);
    r->attempt[i].rc = rc;
    if (rc < 0)
        snprintf(r->attempt[i].message, sizeof r->attempt[i].message, "%s", larder_errmsg());
    r->finished++;
    if (rc >= 0 && r->winner < 0) r->winner = i;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    read_release(r);
}

/* Start attempt number r->started on a worker (with r->lock held); false if it cannot. */
static bool attempt_start(struct hedged_read *r)
{
    int i = r->started;
    struct attempt_arg *a = malloc(sizeof *a);
    /* kept buffers (bigbuf.c): a fresh MiB a read was a page fault per 4 KiB */
    if (!a || !(r->attempt[i].buf = larder__bigbuf_get(r->total ? r->total : 1))) {
        free(a);
        return false;
    }
    *a = (struct attempt_arg){.read = r, .index = i};
    r->refs++;
    if (!workers_submit(attempt_run, a)) {
        r->refs--;
        free(a);
        return false;
    }
    r->started++;
    return true;
}

/* Wait for the attempts (r->lock held), hedging once the policy says so. */
static void wait_and_hedge(struct hedge_source *h, struct hedged_read *r, double start)
{
    double ask_at = larder__hedge_policy_delay_ms(&h->policy); /* ms after start */
    bool may_hedge = true; /* false once a hedge could not be started */
    while (r->winner < 0 && r->finished < r->started) {
        if (r->started == 2 || !may_hedge) {
            pthread_cond_wait(&r->changed, &r->lock);
            continue;
        }
        double left = ask_at - (larder__now_ms() - start);
        if (left <= 0) {
            if (!larder__hedge_policy_take(&h->policy)) { /* over budget: credit may come */
                ask_at = larder__now_ms() - start + LARDER__HEDGE_RETRY_MS;
            } else if (attempt_start(r)) {
                larder__hedge_policy_sent(&h->policy, h->base.name, larder__now_ms() - start);
            } else {
                larder__hedge_policy_refund(&h->policy);
                may_hedge = false;
            }
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        long nanos = until.tv_nsec + (long)(left * 1e6);
        until.tv_sec += nanos / 1000000000;
        until.tv_nsec = nanos % 1000000000;
        pthread_cond_timedwait(&r->changed, &r->lock, &until);
    }
}

/* The winner's bytes (or, when all failed, the first attempt's) into the caller's extents. */
static int deliver(struct hedged_read *r, const struct larder__extent *extents)
{
    int i = r->winner >= 0 ? r->winner : 0;
    size_t at = 0;
    for (size_t k = 0; k < r->count; k++) {
        memcpy(extents[k].buf, r->attempt[i].buf + at, extents[k].length);
        at += extents[k].length;
    }
    if (r->winner < 0) larder__fail(r->attempt[0].rc, "%s", r->attempt[0].message);
    return r->attempt[i].rc;
}

static struct hedged_read *read_new(struct hedge_source *h, const struct larder__extent *extents,
                                    size_t count, unsigned flags)
{
    struct hedged_read *r = calloc(1, sizeof *r);
    if (!r || !(r->extents = malloc(count * sizeof *extents))) {
        free(r);
        return NULL;
    }
    memcpy(r->extents, extents, count * sizeof *extents);
    for (size_t k = 0; k < count; k++) {
        r->extents[k].buf = NULL;
        r->total += extents[k].length;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->changed, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&r->lock, NULL);
    r->count = count;
    r->flags = flags;
    r->winner = -1;
    r->refs = 1;
    r->source = h;
    h->refs++;
    return r;
}

/* One extent, hedged when the source is slow enough to be worth it. */
static int hedge_read_one(struct hedge_source *h, const struct larder__extent *extent,
                          unsigned flags)
{
    double start = larder__now_ms();
    struct hedged_read *r = NULL;
    /* background (HINTED, WARM) is neither hedged nor timed: nobody waits
     * on its tail, a hedge doubles its bytes on a link that may be the
     * bottleneck, and its pieces queue behind each other on purpose
     * (source_gate.c), which would raise the p95 that DEMAND reads hedge at */
    bool sized =
        larder__hedge_policy_sized(extent->length) && larder__read_class(flags) < LARDER__HINTED;
    if (sized && !larder__hedge_policy_fast(&h->policy) && (r = read_new(h, extent, 1, flags))) {
        larder__hedge_policy_count_read(&h->policy);
        pthread_mutex_lock(&r->lock);
        if (!attempt_start(r)) { /* no worker: read inline, unhedged */
            pthread_mutex_unlock(&r->lock);
            read_release(r);
            r = NULL;
        }
    }
    int rc;
    if (r) {
        wait_and_hedge(h, r, start);
        rc = deliver(r, extent);
        pthread_mutex_unlock(&r->lock);
        read_release(r);
    } else {
        rc = larder__source_readv(h->inner, extent, 1, flags);
    }
    if (rc >= 0 && sized) larder__hedge_policy_record(&h->policy, larder__now_ms() - start);
    return rc;
}

/* Each extent on its own: the latency window holds single reads, so a
 * vectored read of many runs neither looks slow nor is hedged as one. */
static int hedge_read(struct larder__source *source, const struct larder__extent *extents,
                      size_t count, unsigned flags)
{
    struct hedge_source *h = (struct hedge_source *)source;
    int rc = LARDER__FROM_ORIGIN;
    for (size_t i = 0; i < count && rc >= 0; i++)
        rc = hedge_read_one(h, &extents[i], flags);
    return rc;
}

static int hedge_size(struct larder__source *source, uint64_t *size)
{
    return larder__source_size(((struct hedge_source *)source)->inner, size);
}

static int hedge_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    return larder__source_stream(((struct hedge_source *)source)->inner, sink, userdata);
}

static void hedge_close(struct larder__source *source)
{
    hedge_release((struct hedge_source *)source);
}

static const struct larder__source_ops hedge_ops = {
    .kind = "hedge",
    .size = hedge_size,
    .read = hedge_read,
    .stream = hedge_stream,
    .close = hedge_close,
};

int larder__source_hedge_open(struct larder__source **out, struct larder__source *inner,
                              struct larder__hedge_budget *budget)
{
    struct hedge_source *h = calloc(1, sizeof *h);
    if (!h) {
        larder__source_close(inner);
        return -ENOMEM;
    }
    h->base.ops = &hedge_ops;
    h->base.name = inner->name;
    h->inner = inner;
    h->refs = 1;
    larder__hedge_policy_init(&h->policy, budget);
    *out = &h->base;
    return 0;
}
