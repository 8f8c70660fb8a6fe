/*
 * test_larderd_hints_governor.c - a hint's staging takes a small share
 * while readers are about (src/larderd/hints_governor.c): with a DEMAND
 * task running on the daemon's pool, one staging job is admitted to move
 * bytes and the next only after it leaves, and take_ready's share is one;
 * with no reader about, the pool's share (half its workers) is admitted
 * at once and no more.  Counts are checked, never time: the DEMAND task
 * runs until the test lets it end.
 */
#include "daemon_fixture.h"
#include "hints.h"
#include "pool.h"
#include "test.h"

#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static bool demand_go, demand_running;

/* A reader's DEMAND task: runs until the test lets it end. */
static void demand_task(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    demand_running = true;
    pthread_cond_broadcast(&changed);
    while (!demand_go)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

static bool admit(struct larderd *d)
{
    pthread_mutex_lock(&d->hints->lock);
    bool yes = hints_governor_admit_locked(d);
    pthread_mutex_unlock(&d->hints->lock);
    return yes;
}

static void leave(struct larderd *d)
{
    pthread_mutex_lock(&d->hints->lock);
    hints_governor_leave_locked(d);
    pthread_mutex_unlock(&d->hints->lock);
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
    CHECK_EQ(hints_governor_jobs(&d), 8);
    CHECK_EQ(larder__pool_submit(d.pool, demand_task, NULL, LARDER__DEMAND), 0);
    pthread_mutex_lock(&lock);
    while (!demand_running)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    CHECK(hints_readers_about(&d));
    for (int round = 0; round < 4; round++) {
        CHECK(admit(&d)); /* the one that moves bytes */
        for (int other = 0; other < 8; other++)
            CHECK(!admit(&d)); /* the rest go back to the queue */
        CHECK_EQ(d.hints->transferring, 1);
        leave(&d);
    }
    CHECK_EQ(d.hints->most_beside_readers, HINTS_BESIDE_READERS);
    CHECK_EQ(d.hints->transferring, 0);
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
    CHECK(!hints_readers_about(&d));
    for (int i = 0; i < 8; i++)
        CHECK(admit(&d)); /* all of the pool's share at once */
    CHECK(!admit(&d));    /* and no more */
    CHECK_EQ(d.hints->transferring, 8);
    CHECK_EQ(d.hints->most_beside_readers, 0);
    for (int i = 0; i < 8; i++)
        leave(&d);
    CHECK_EQ(d.hints->transferring, 0);
    larderd_free(&d);
}
