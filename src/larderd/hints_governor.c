/*
 * hints_governor.c - a hint's staging takes a small share while readers
 * are about (hints.h, "The governor"; docs/scale.md, "Priorities").
 *
 * Why: the gate (source_gate.c) keeps background reads of the origin out
 * of a reader's way, but a hot hint to all nodes moves most of its bytes
 * between daemons (each member copies the chunks it does not own from a
 * peer), and up to half the pool's workers of every node stage at once:
 * with a pool of 64, 32 chunk transfers per node, each a sendfile of up
 * to 4 MiB on the owner's loop thread, a socket read and a cache write
 * with its checksum here.  On a node whose cores the reader, its daemon
 * and the origin share, that CPU lands beside the reader's steps, and
 * its slowest steps were the ones that waited for a core (PSI, the
 * priorities part of bench/restart.sh).  So while readers are about, one
 * staging job per node moves bytes at a time (the hint still progresses,
 * in the readers' gaps, as the gate's pieces do), and all of them again
 * as soon as the readers are gone.
 *
 * "Readers about" is what the gate sees (a DEMAND or NEAR read of a gated
 * origin here within the last second, or a peer's READERS), or DEMAND or
 * NEAR tasks running on this daemon's pool (readers served from the
 * cache or from peers).  A job waits before it registers as running
 * (hints_staging_wait), so a peer's READ never waits on a job that waits
 * here: no chain of nodes waiting on each other's governors.
 */
#include "hints.h"

#include "source.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often a waiting job looks again: readers come and go without
 * telling the hints' condition. */
#define GOVERNOR_RECHECK_MS 5

int hints_governor_share(bool readers_about, int jobs)
{
    if (jobs < 1) jobs = 1;
    if (!readers_about) return jobs;
    return HINTS_BESIDE_READERS < jobs ? HINTS_BESIDE_READERS : jobs;
}

/* LARDER_HINTS_GOVERNOR=off in the daemon's environment: no share beside
 * readers (bench/restart.sh's A/B runs, GOVERNOR_AB=1). */
static bool governor_off(void)
{
    static int off = -1;
    int known = __atomic_load_n(&off, __ATOMIC_RELAXED);
    if (known < 0) {
        const char *v = getenv("LARDER_HINTS_GOVERNOR");
        known = v && strcmp(v, "off") == 0;
        __atomic_store_n(&off, known, __ATOMIC_RELAXED);
    }
    return known;
}

/* Whether readers are about this node, now. */
static bool readers_about(struct larderd *d)
{
    if (governor_off()) return false;
    if (larder__source_gate_readers_active()) return true;
    struct larder__pool_stats stats;
    larderd_classes_get(d, &stats);
    return stats.running[LARDER__DEMAND] + stats.running[LARDER__NEAR] > 0;
}

void hints_governor_enter(struct larderd *d)
{
    struct hints *hints = d->hints;
    int jobs = d->config.jobs / 2 > 1 ? d->config.jobs / 2 : 1; /* take_ready's share */
    pthread_mutex_lock(&hints->lock);
    for (;;) {
        /* the readers' state is read without the hints' lock held by
         * anyone waiting on it for long: both calls take their own */
        bool about = readers_about(d);
        if (hints->stopping || d->stopping ||
            hints->transferring < hints_governor_share(about, jobs)) {
            hints->transferring++;
            if (about && hints->transferring > hints->most_beside_readers)
                hints->most_beside_readers = hints->transferring;
            break;
        }
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        at.tv_nsec += GOVERNOR_RECHECK_MS * 1000000L;
        if (at.tv_nsec >= 1000000000L) at.tv_sec++, at.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&hints->changed, &hints->lock, &at);
    }
    pthread_mutex_unlock(&hints->lock);
}

void hints_governor_leave(struct larderd *d)
{
    struct hints *hints = d->hints;
    pthread_mutex_lock(&hints->lock);
    hints->transferring--;
    pthread_cond_broadcast(&hints->changed);
    pthread_mutex_unlock(&hints->lock);
}
