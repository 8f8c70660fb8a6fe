/*
 * test_pool.c - the worker pool's classes (src/lib/pool.c): a DEMAND task
 * overtakes lower-class tasks queued before it, and lower classes never
 * hold the workers kept for the classes above them.  Every check is on
 * order and counts, none on time: a task that never starts makes the
 * test time out, which fails it.
 */
#include "pool.h"
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A gate tasks wait at, and the log of what ran in which order. */
struct bench {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool open;
    int waiting;                     /* gated tasks blocked now */
    int running[LARDER__CLASSES];    /* gated tasks of each class blocked now */
    int most_below[LARDER__CLASSES]; /* most tasks of class >= c blocked at once */
    int order[64];                   /* tags of the tasks, in the order they ran */
    int ran;
};

struct job {
    struct bench *bench;
    int tag;      /* logged when it runs */
    int priority; /* its class, for the counts */
    bool gated;   /* waits for the gate */
};

static void bench_init(struct bench *b)
{
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->changed, NULL);
}

static void job_run(void *arg)
{
    struct job *j = arg;
    struct bench *b = j->bench;
    pthread_mutex_lock(&b->lock);
    if (b->ran < 64) b->order[b->ran] = j->tag;
    b->ran++;
    if (j->gated) {
        b->waiting++;
        b->running[j->priority]++;
        for (int c = 0; c < LARDER__CLASSES; c++) {
            int held = 0;
            for (int k = c; k < LARDER__CLASSES; k++)
                held += b->running[k];
            if (held > b->most_below[c]) b->most_below[c] = held;
        }
        pthread_cond_broadcast(&b->changed);
        while (!b->open)
            pthread_cond_wait(&b->changed, &b->lock);
        b->waiting--;
        b->running[j->priority]--;
    }
    pthread_cond_broadcast(&b->changed);
    pthread_mutex_unlock(&b->lock);
}

/* Wait until `n` gated tasks are blocked at the gate. */
static void wait_blocked(struct bench *b, int n)
{
    pthread_mutex_lock(&b->lock);
    while (b->waiting < n)
        pthread_cond_wait(&b->changed, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

/* Wait until `n` tasks have run (or started). */
static void wait_ran(struct bench *b, int n)
{
    pthread_mutex_lock(&b->lock);
    while (b->ran < n)
        pthread_cond_wait(&b->changed, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

static void open_gate(struct bench *b)
{
    pthread_mutex_lock(&b->lock);
    b->open = true;
    pthread_cond_broadcast(&b->changed);
    pthread_mutex_unlock(&b->lock);
}

TEST(pool_demand_overtakes_queued_hinted)
{
    struct bench b;
    bench_init(&b);
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 1), 0);
    struct job jobs[12];
    /* the one worker blocks in the first HINTED task ... */
    jobs[0] = (struct job){&b, 100, LARDER__HINTED, true};
    CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[0], LARDER__HINTED), 0);
    wait_blocked(&b, 1);
    /* ... while ten more HINTED ones queue, then a WARM, a NEAR and a DEMAND one */
    for (int i = 1; i <= 8; i++) {
        jobs[i] = (struct job){&b, 100 + i, LARDER__HINTED, false};
        CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[i], LARDER__HINTED), 0);
    }
    jobs[9] = (struct job){&b, 300, LARDER__WARM, false};
    CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[9], LARDER__WARM), 0);
    jobs[10] = (struct job){&b, 200, LARDER__NEAR, false};
    CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[10], LARDER__NEAR), 0);
    jobs[11] = (struct job){&b, 1, LARDER__DEMAND, false};
    CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[11], LARDER__DEMAND), 0);
    CHECK_EQ(larder__pool_queued(pool, LARDER__HINTED), 8);
    CHECK_EQ(larder__pool_queued(pool, LARDER__DEMAND), 1);
    open_gate(&b);
    wait_ran(&b, 12);
    larder__pool_free(pool);
    /* the gated task, then DEMAND, NEAR, the HINTED ones in their order, WARM */
    int expected[12] = {100, 1, 200, 101, 102, 103, 104, 105, 106, 107, 108, 300};
    for (int i = 0; i < 12; i++)
        CHECK_EQ(b.order[i], expected[i]);
}

TEST(pool_keeps_workers_for_higher_classes)
{
    struct bench b;
    bench_init(&b);
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 8), 0);
    /* 8 workers: WARM may hold 2, HINTED and WARM 4, NEAR and below 6 */
    struct job jobs[32];
    int n = 0;
    for (int i = 0; i < 6; i++, n++) {
        jobs[n] = (struct job){&b, 300 + i, LARDER__WARM, true};
        CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[n], LARDER__WARM), 0);
    }
    wait_blocked(&b, 2);
    for (int i = 0; i < 6; i++, n++) {
        jobs[n] = (struct job){&b, 200 + i, LARDER__HINTED, true};
        CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[n], LARDER__HINTED), 0);
    }
    wait_blocked(&b, 4); /* 2 WARM + 2 HINTED */
    for (int i = 0; i < 6; i++, n++) {
        jobs[n] = (struct job){&b, 100 + i, LARDER__NEAR, true};
        CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[n], LARDER__NEAR), 0);
    }
    wait_blocked(&b, 6); /* and 2 NEAR */
    /* every lower-class slot is taken and more lower work is queued: a
     * DEMAND task still starts (and finishes) with the gate closed; were
     * no worker kept for it, this would wait for the gate and time out */
    int before = 0;
    pthread_mutex_lock(&b.lock);
    before = b.ran;
    pthread_mutex_unlock(&b.lock);
    jobs[n] = (struct job){&b, 1, LARDER__DEMAND, false};
    CHECK_EQ(larder__pool_submit(pool, job_run, &jobs[n], LARDER__DEMAND), 0);
    n++;
    wait_ran(&b, before + 1);
    pthread_mutex_lock(&b.lock);
    CHECK_EQ(b.order[before], 1);
    CHECK_EQ(b.waiting, 6);
    pthread_mutex_unlock(&b.lock);
    struct larder__pool_stats stats;
    larder__pool_stats_get(pool, &stats);
    CHECK_EQ(stats.running[LARDER__WARM], 2);
    CHECK_EQ(stats.running[LARDER__HINTED], 2);
    CHECK_EQ(stats.running[LARDER__NEAR], 2);
    CHECK_EQ(stats.submitted[LARDER__NEAR], 6);
    CHECK_EQ(stats.started[LARDER__DEMAND], 1);
    CHECK_EQ(larder__pool_queued(pool, LARDER__WARM), 4);
    CHECK_EQ(larder__pool_queued(pool, LARDER__HINTED), 4);
    CHECK_EQ(larder__pool_queued(pool, LARDER__NEAR), 4);
    open_gate(&b);
    wait_ran(&b, n);
    larder__pool_free(pool);
    /* the shares held all along: at most 2 WARM, 4 HINTED+WARM, 6 NEAR+below */
    CHECK_EQ(b.most_below[LARDER__WARM], 2);
    CHECK_EQ(b.most_below[LARDER__HINTED], 4);
    CHECK_EQ(b.most_below[LARDER__NEAR], 6);
}

TEST(pool_class_limits)
{
    /* the shares, worked by hand: all, 3/4, 1/2, 1/4 of the slots, at least one */
    CHECK_EQ(larder__priority_limit(64, LARDER__DEMAND), 64);
    CHECK_EQ(larder__priority_limit(64, LARDER__NEAR), 48);
    CHECK_EQ(larder__priority_limit(64, LARDER__HINTED), 32);
    CHECK_EQ(larder__priority_limit(64, LARDER__WARM), 16);
    CHECK_EQ(larder__priority_limit(2, LARDER__NEAR), 1);
    CHECK_EQ(larder__priority_limit(2, LARDER__WARM), 1);
    CHECK_EQ(larder__priority_limit(1, LARDER__WARM), 1);
    CHECK_EQ(larder__priority_limit(5, LARDER__HINTED), 2);
    CHECK(strcmp(larder__priority_name(LARDER__HINTED), "hinted") == 0);
}

/* The nice value a task of each class runs at, on a pool's worker. */
struct nice_seen {
    struct larder__latch *done;
    int nice;
};

static void record_nice(void *arg)
{
    struct nice_seen *s = arg;
    errno = 0;
    s->nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    larder__latch_arrive(s->done);
}

/* HINTED and WARM tasks run at nice 10, DEMAND and NEAR at 0, on the same
 * worker one after another, where the process may lower a nice value again
 * (root, or RLIMIT_NICE of 20 or more); elsewhere every task at 0.  The
 * submitting thread's own value never changes. */
TEST(pool_background_tasks_run_niced)
{
    unsetenv("LARDER_BACKGROUND_NICE"); /* the default, 10 */
    struct rlimit limit;
    bool renice = geteuid() == 0 || (getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur >= 20);
    int mine = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 1), 0);
    int classes[] = {LARDER__HINTED, LARDER__DEMAND, LARDER__WARM, LARDER__NEAR};
    for (int i = 0; i < 4; i++) {
        struct larder__latch done;
        larder__latch_init(&done, 1);
        struct nice_seen seen = {&done, -100};
        CHECK_EQ(larder__pool_submit(pool, record_nice, &seen, classes[i]), 0);
        larder__latch_wait(&done);
        /* 10 above the process's own value (a suite run under `nice` starts
         * above 0), at most 19 */
        int background = mine + 10 > 19 ? 19 : mine + 10;
        CHECK_EQ(seen.nice, renice && classes[i] >= LARDER__HINTED ? background : mine);
    }
    CHECK_EQ(getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)), mine);
    larder__pool_free(pool);
}

struct worker_seen {
    struct larder__latch *done;
    pid_t tid;
};

static void record_worker(void *arg)
{
    struct worker_seen *s = arg;
    s->tid = (pid_t)syscall(SYS_gettid);
    larder__latch_arrive(s->done);
}

/* A worker that ran a HINTED task goes idle at the process's own nice
 * value, so that the DEMAND task that wakes it next is not first kept
 * off a busy core at nice 10 (a peer's READ queued 20-45 ms that way).
 * State, not time: the idle worker's nice value is looked at until it is
 * back (10 s at most; it stays at 10 for good without the rule). */
TEST(pool_worker_idles_at_its_own_nice_value)
{
    unsetenv("LARDER_BACKGROUND_NICE");
    struct rlimit limit;
    if (!(geteuid() == 0 || (getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur >= 20)))
        SKIP("a thread may not lower its nice value here (neither root nor RLIMIT_NICE 20)");
    int mine = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 1), 0);
    struct larder__latch done;
    larder__latch_init(&done, 1);
    struct worker_seen seen = {&done, 0};
    CHECK_EQ(larder__pool_submit(pool, record_worker, &seen, LARDER__HINTED), 0);
    larder__latch_wait(&done);
    CHECK(seen.tid > 0);
    int nice = 100;
    for (int i = 0; i < 1000; i++) {
        errno = 0;
        nice = getpriority(PRIO_PROCESS, (id_t)seen.tid);
        if (errno == 0 && nice == mine) break;
        struct timespec nap = {0, 10 * 1000000};
        nanosleep(&nap, NULL);
    }
    CHECK_EQ(nice, mine);
    larder__pool_free(pool);
}

struct burn {
    struct larder__latch *done;
    uint64_t burned_us; /* the task's own thread CPU clock over its run */
};

static uint64_t thread_cpu_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* Spin until this thread has used 30 ms of CPU, and say how much it used. */
static void burn_cpu(void *arg)
{
    struct burn *b = arg;
    uint64_t start = thread_cpu_now_us(), now;
    volatile uint64_t sink = 0;
    while ((now = thread_cpu_now_us()) - start < 30000)
        for (int i = 0; i < 10000; i++)
            sink += (uint64_t)i;
    b->burned_us = now - start;
    larder__latch_arrive(b->done);
}

/* The CPU a class's tasks used is counted to that class: a HINTED task
 * that burned 30 ms (by its own thread clock, read in the task) shows
 * at least that under HINTED, and a DEMAND task that did nothing much
 * adds less than that under DEMAND. */
TEST(pool_counts_cpu_by_class)
{
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 1), 0);
    struct larder__latch done;
    larder__latch_init(&done, 1);
    struct burn b = {&done, 0};
    CHECK_EQ(larder__pool_submit(pool, burn_cpu, &b, LARDER__HINTED), 0);
    larder__latch_wait(&done);
    struct larder__latch quick;
    larder__latch_init(&quick, 1);
    struct worker_seen seen = {&quick, 0};
    CHECK_EQ(larder__pool_submit(pool, record_worker, &seen, LARDER__DEMAND), 0);
    larder__latch_wait(&quick);
    struct larder__pool_stats stats;
    for (int i = 0; i < 1000; i++) { /* the counts land after the tasks' last step */
        larder__pool_stats_get(pool, &stats);
        if (stats.running[LARDER__HINTED] + stats.running[LARDER__DEMAND] == 0) break;
        usleep(1000);
    }
    CHECK(b.burned_us >= 30000);
    CHECK(stats.cpu_us[LARDER__HINTED] >= b.burned_us);
    CHECK(stats.cpu_us[LARDER__DEMAND] < 30000);
    CHECK_EQ(stats.cpu_us[LARDER__NEAR] + stats.cpu_us[LARDER__WARM], 0);
    larder__pool_free(pool);
}

struct policy_seen {
    struct larder__latch *done;
    int policy;
};

static void record_policy(void *arg)
{
    struct policy_seen *s = arg;
    s->policy = sched_getscheduler(0);
    larder__latch_arrive(s->done);
}

/* LARDER_BACKGROUND_SCHED=idle: HINTED and WARM tasks run at SCHED_IDLE,
 * DEMAND and NEAR ones (on the same worker, after them) at SCHED_OTHER;
 * without it every task runs at SCHED_OTHER.  (This test runs in a child
 * process of its own: the pool reads the setting once.) */
TEST(pool_background_sched_idle_when_asked)
{
    struct rlimit limit;
    bool may = geteuid() == 0 || (getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur >= 20);
    setenv("LARDER_BACKGROUND_SCHED", "idle", 1);
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 1), 0);
    int classes[] = {LARDER__HINTED, LARDER__DEMAND, LARDER__WARM, LARDER__NEAR, LARDER__HINTED};
    for (int i = 0; i < 5; i++) {
        struct larder__latch done;
        larder__latch_init(&done, 1);
        struct policy_seen seen = {&done, -1};
        CHECK_EQ(larder__pool_submit(pool, record_policy, &seen, classes[i]), 0);
        larder__latch_wait(&done);
        CHECK_EQ(seen.policy, may && classes[i] >= LARDER__HINTED ? SCHED_IDLE : SCHED_OTHER);
    }
    larder__pool_free(pool);
    unsetenv("LARDER_BACKGROUND_SCHED");
}
