/*
 * pool.c - worker threads and prioritized task queues (see pool.h): one
 * ring per class, and per class the tasks running, so that a worker takes
 * a lower class only while the classes above keep their share free.
 */
#include "pool.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The nice value a worker runs HINTED and WARM tasks at: on a node whose
 * cores are shared, background staging (checksums, copies, peer transfers)
 * then takes CPU after the readers' work, not beside it. */
#define BACKGROUND_NICE 10

struct task {
    larder__task_fn fn;
    void *arg;
    uint64_t queued_us; /* when it was submitted */
    int priority;
};

struct queue { /* a ring */
    struct task *tasks;
    size_t head, count, capacity;
};

struct larder__pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct queue queues[LARDER__CLASSES];
    int limit[LARDER__CLASSES];      /* workers a class and those below it may hold together */
    struct larder__pool_stats stats; /* running[] is what next_task() checks */
    pthread_t *threads;
    int wanted, started, idle;
    bool stopping;
};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

int larder__pool_new(struct larder__pool **out, int threads)
{
    struct larder__pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)threads, sizeof *p->threads))) {
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->wanted = threads;
    for (int c = 0; c < LARDER__CLASSES; c++)
        p->limit[c] = larder__priority_limit(threads, c);
    *out = p;
    return 0;
}

/* Whether a task of class `priority` may start now: taking it keeps every
 * class at or above it within its share of the workers.  Lock held. */
static bool may_start(const struct larder__pool *p, int priority)
{
    uint64_t held = 0; /* tasks running of classes [c, CLASSES) */
    for (int c = LARDER__CLASSES - 1; c > priority; c--)
        held += p->stats.running[c];
    for (int c = priority; c > LARDER__DEMAND; c--) {
        held += p->stats.running[c];
        if (held >= (uint64_t)p->limit[c]) return false;
    }
    return true;
}

/* The oldest task of the highest class that may start, taken off its
 * queue and counted as running; lock held.  false when none. */
static bool next_task(struct larder__pool *p, struct task *t)
{
    for (int c = 0; c < LARDER__CLASSES; c++) {
        struct queue *q = &p->queues[c];
        if (q->count == 0) continue;
        if (!may_start(p, c)) return false; /* nor any class below it */
        *t = q->tasks[q->head];
        q->head = (q->head + 1) % q->capacity;
        q->count--;
        uint64_t wait = now_us() - t->queued_us;
        p->stats.started[c]++;
        p->stats.running[c]++;
        p->stats.wait_us[c] += wait;
        if (wait > p->stats.wait_max_us[c]) p->stats.wait_max_us[c] = wait;
        return true;
    }
    return false;
}

/* Whether some queued task may start now (lock held). */
static bool startable(const struct larder__pool *p)
{
    for (int c = 0; c < LARDER__CLASSES; c++)
        if (p->queues[c].count) return may_start(p, c);
    return false;
}

/* How much nicer background tasks run: BACKGROUND_NICE, or
 * LARDER_BACKGROUND_NICE (0 to 19; 0: not at all); 0 where a thread could
 * not go back (neither root nor an RLIMIT_NICE of 20 or more), for a worker
 * niced for good would run the next DEMAND task niced too. */
static int background_nice(void)
{
    static int answer = -1; /* -1: not asked yet */
    int known = __atomic_load_n(&answer, __ATOMIC_RELAXED);
    if (known >= 0) return known;
    struct rlimit limit;
    bool may = geteuid() == 0 || (getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur >= 20);
    const char *text = getenv("LARDER_BACKGROUND_NICE");
    char *end;
    long value = text ? strtol(text, &end, 10) : BACKGROUND_NICE;
    if (text && (*end || value < 0 || value > 19)) value = BACKGROUND_NICE;
    int n = may ? (int)value : 0;
    __atomic_store_n(&answer, n, __ATOMIC_RELAXED);
    return n;
}

/* Whether HINTED and WARM tasks run at SCHED_IDLE besides their nice value
 * (LARDER_BACKGROUND_SCHED=idle): then any other thread ready to run takes
 * the core first, where nice 10 still leaves background about a tenth of a
 * contended core.  Off by default: a DEMAND read single-flighted behind a
 * background fill of the same block waits as long as the core stays busy
 * (a restart storm's readers of a hinted checkpoint would), and measured
 * (docs/scale.md) it made a training reader's slow steps beside hinted
 * replication slower, not faster.  Needs the rights background_nice()
 * needs to come back. */
static bool background_idle(void)
{
    static int answer = -1; /* -1: not asked yet */
    int known = __atomic_load_n(&answer, __ATOMIC_RELAXED);
    if (known >= 0) return known;
    struct rlimit limit;
    bool may = geteuid() == 0 || (getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur >= 20);
    const char *text = getenv("LARDER_BACKGROUND_SCHED");
    int idle = may && text && strcmp(text, "idle") == 0;
    __atomic_store_n(&answer, idle, __ATOMIC_RELAXED);
    return idle;
}

/* The calling worker's scheduling policy for a task of class `priority`:
 * SCHED_IDLE for HINTED and WARM when background_idle(), else SCHED_OTHER. */
static void policy_for(int priority)
{
    static _Thread_local bool idle; /* this thread's, as set here */
    bool want = priority >= LARDER__HINTED && background_idle();
    struct sched_param none = {0};
    if (want != idle &&
        pthread_setschedparam(pthread_self(), want ? SCHED_IDLE : SCHED_OTHER, &none) == 0)
        idle = want;
}

/* The calling worker's nice value for a task of class `priority`: its own
 * first value (the process's), plus background_nice() for HINTED and WARM;
 * and its policy (policy_for). */
static void nice_for(int priority)
{
    static _Thread_local int base = INT32_MIN, current; /* this thread's, as set here */
    policy_for(priority);
    int extra = background_nice();
    if (extra == 0) return;
    if (base == INT32_MIN) {
        errno = 0;
        int now = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
        if (errno) return;
        base = current = now;
    }
    int want = priority >= LARDER__HINTED ? base + extra : base;
    if (want > 19) want = 19;
    if (want != current && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), want) == 0)
        current = want;
}

/* This thread's CPU time in microseconds (0 where the clock is missing). */
static uint64_t thread_cpu_us(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Run t outside the lock, then count it done; lock held on entry and return. */
static void run_task(struct larder__pool *p, const struct task *t)
{
    pthread_mutex_unlock(&p->lock);
    uint64_t cpu = thread_cpu_us();
    t->fn(t->arg);
    cpu = thread_cpu_us() - cpu;
    pthread_mutex_lock(&p->lock);
    p->stats.running[t->priority]--;
    p->stats.cpu_us[t->priority] += cpu;
}

static void *worker(void *arg)
{
    struct larder__pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        struct task t;
        if (next_task(p, &t)) {
            /* a slot this worker did not take (a lower class's, freed by the
             * task it ran last) goes to an idle worker */
            if (p->idle && startable(p)) pthread_cond_signal(&p->wake);
            nice_for(t.priority); /* a worker's own thread only, never a caller's */
            run_task(p, &t);
            continue;
        }
        if (p->stopping) break;
        /* idle at the process's own nice value: the task that wakes this
         * worker may be a DEMAND one, and a worker still niced from a
         * background task waits its turn for a core behind every busy
         * thread at nice 0 before it even takes the task (the trace showed
         * peers' DEMAND READs queued 20-45 ms on an idle pool) */
        pthread_mutex_unlock(&p->lock);
        nice_for(LARDER__DEMAND);
        pthread_mutex_lock(&p->lock);
        if (p->stopping || startable(p)) continue; /* came while the lock was let go */
        p->idle++;
        pthread_cond_wait(&p->wake, &p->lock);
        p->idle--;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void larder__pool_free(struct larder__pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    /* with no thread ever started, queued tasks ran inline at submit */
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    for (int c = 0; c < LARDER__CLASSES; c++)
        free(p->queues[c].tasks);
    free(p->threads);
    free(p);
}

static bool push(struct queue *q, struct task t)
{
    if (q->count == q->capacity) {
        size_t capacity = q->capacity ? q->capacity * 2 : 64;
        struct task *tasks = malloc(capacity * sizeof *tasks);
        if (!tasks) return false;
        for (size_t i = 0; i < q->count; i++)
            tasks[i] = q->tasks[(q->head + i) % q->capacity];
        free(q->tasks);
        q->tasks = tasks;
        q->head = 0;
        q->capacity = capacity;
    }
    q->tasks[(q->head + q->count++) % q->capacity] = t;
    return true;
}

int larder__pool_submit(struct larder__pool *p, larder__task_fn fn, void *arg, int priority)
{
    if (priority < 0 || priority >= LARDER__CLASSES) priority = LARDER__WARM;
    struct task task = {fn, arg, now_us(), priority};
    pthread_mutex_lock(&p->lock);
    p->stats.submitted[priority]++;
    if (!push(&p->queues[priority], task)) {
        pthread_mutex_unlock(&p->lock);
        fn(arg); /* out of memory for the queue: do it now */
        pthread_mutex_lock(&p->lock);
        p->stats.started[priority]++;
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    /* another worker while there is more work queued than idle workers
     * (an idle worker signalled but not yet awake still counts as idle:
     * comparing with the queue, not with zero, starts one per task of a
     * burst submitted faster than the workers wake) */
    size_t queued = 0;
    for (int c = 0; c < LARDER__CLASSES; c++)
        queued += p->queues[c].count;
    if (queued > (size_t)p->idle && p->started < p->wanted &&
        pthread_create(&p->threads[p->started], NULL, worker, p) == 0)
        p->started++;
    if (p->started == 0) { /* no thread at all: run it here */
        struct task t;
        while (next_task(p, &t))
            run_task(p, &t);
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

void larder__pool_stats_get(struct larder__pool *p, struct larder__pool_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    pthread_mutex_unlock(&p->lock);
}

size_t larder__pool_queued(struct larder__pool *p, int priority)
{
    if (priority < 0 || priority >= LARDER__CLASSES) return 0;
    pthread_mutex_lock(&p->lock);
    size_t n = p->queues[priority].count;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void larder__latch_init(struct larder__latch *latch, size_t count)
{
    pthread_mutex_init(&latch->lock, NULL);
    pthread_cond_init(&latch->done, NULL);
    latch->left = count;
}

void larder__latch_arrive(struct larder__latch *latch)
{
    pthread_mutex_lock(&latch->lock);
    if (--latch->left == 0) pthread_cond_broadcast(&latch->done);
    pthread_mutex_unlock(&latch->lock);
}

void larder__latch_wait(struct larder__latch *latch)
{
    pthread_mutex_lock(&latch->lock);
    while (latch->left)
        pthread_cond_wait(&latch->done, &latch->lock);
    pthread_mutex_unlock(&latch->lock);
    pthread_mutex_destroy(&latch->lock);
    pthread_cond_destroy(&latch->done);
}
