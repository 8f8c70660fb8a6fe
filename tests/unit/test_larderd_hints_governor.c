/*
 * test_larderd_hints_governor.c - a hint's staging takes a small share
 * while readers are about (src/larderd/hints_governor.c): with a DEMAND
 * task running on the daemon's pool, staging jobs pass the governor one
 * at a time (each waits for the one before it to leave), and the most
 * that moved bytes at once beside readers is HINTS_BESIDE_READERS; with
 * no reader about, as many pass at once as the pool's share.  Counts and
 * order are checked, never time: each "passed" is waited for on a
 * condition, and the runner's timeout ends a test whose governor never
 * lets a job pass.
 */
#include "daemon_fixture.h"
#include "hints.h"
#include "pool.h"
#include "test.h"

#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int passed;     /* staging stand-ins past the governor */
static int released;   /* stand-ins the test let leave */
static bool demand_go; /* the DEMAND task may end */
static bool demand_running;

/* A staging job's part here: enter, count, wait to be let go, leave. */
static void *stand_in(void *arg)
{
    struct larderd *d = arg;
    hints_governor_enter(d);
    pthread_mutex_lock(&lock);
    int me = ++passed;
    pthread_cond_broadcast(&changed);
    while (released < me)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    hints_governor_leave(d);
    return NULL;
}

/* A reader's DEMAND task: runs until the test lets it end. */
static void demand_task(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    demand_running = true;
    pthread_cond_broadcast(&changed);
    while (!demand_go)
        pthread_cond_wait(&changed, &lock);
    demand_running = false;
    pthread_mutex_unlock(&lock);
}

static int transferring(struct larderd *d)
{
    pthread_mutex_lock(&d->hints->lock);
    int n = d->hints->transferring;
    pthread_mutex_unlock(&d->hints->lock);
    return n;
}

static void wait_passed(int n)
{
    pthread_mutex_lock(&lock);
    while (passed < n)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

TEST(larderd_hints_governor_share)
{
    CHECK_EQ(hints_governor_share(false, 32), 32);
    CHECK_EQ(hints_governor_share(true, 32), HINTS_BESIDE_READERS);
    CHECK_EQ(hints_governor_share(true, 1), 1);
    CHECK_EQ(hints_governor_share(false, 0), 1); /* every class makes progress */
}

TEST(larderd_hints_governor_one_at_a_time_beside_a_demand_read)
{
    struct larderd d;
    fixture_daemon(&d, 16); /* the pool's share for staging: 8 */
    CHECK(hints_of(&d) != NULL);
    CHECK_EQ(larder__pool_submit(d.pool, demand_task, NULL, LARDER__DEMAND), 0);
    pthread_mutex_lock(&lock);
    while (!demand_running)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    enum { JOBS = 4 };
    pthread_t t[JOBS];
    for (int i = 0; i < JOBS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, stand_in, &d), 0);
    /* each passes only once the one before it has left */
    for (int i = 1; i <= JOBS; i++) {
        wait_passed(i);
        CHECK_EQ(transferring(&d), 1);
        pthread_mutex_lock(&lock);
        CHECK_EQ(passed, i);
        released = i;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
    }
    for (int i = 0; i < JOBS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(d.hints->most_beside_readers, HINTS_BESIDE_READERS);
    CHECK_EQ(transferring(&d), 0);
    pthread_mutex_lock(&lock);
    demand_go = true;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    larderd_free(&d);
}

TEST(larderd_hints_governor_all_pass_with_no_reader_about)
{
    struct larderd d;
    fixture_daemon(&d, 16);
    CHECK(hints_of(&d) != NULL);
    enum { JOBS = 8 }; /* the pool's share: jobs / 2 */
    pthread_t t[JOBS];
    for (int i = 0; i < JOBS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, stand_in, &d), 0);
    wait_passed(JOBS); /* all at once: none has left */
    CHECK_EQ(transferring(&d), JOBS);
    CHECK_EQ(d.hints->most_beside_readers, 0);
    pthread_mutex_lock(&lock);
    released = JOBS;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < JOBS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(transferring(&d), 0);
    larderd_free(&d);
}
