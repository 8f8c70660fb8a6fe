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
 * cache or from peers).  Nothing waits here: a job the governor does not
 * admit goes back to the head of the node's queue before it registers as
 * running (so a peer's READ never waits on it: no chain of nodes waiting
 * on each other's governors), and take_ready hands out no more jobs than
 * the share, so the job that moves bytes takes the next when it ends.  No
 * thread polls while it waits (a pool of 64 had up to 31 per node).
 */
#include "hints.h"

#include "source.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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

bool hints_readers_about(struct larderd *d)
{
    if (governor_off()) return false;
    if (larder__source_gate_readers_active()) return true;
    struct larder__pool_stats stats;
    larderd_classes_get(d, &stats);
    return stats.running[LARDER__DEMAND] + stats.running[LARDER__NEAR] > 0;
}

int hints_governor_jobs(const struct larderd *d)
{
    return d->config.jobs / 2 > 1 ? d->config.jobs / 2 : 1; /* half the pool's workers */
}

bool hints_governor_admit_locked(struct larderd *d)
{
    struct hints *hints = d->hints;
    bool about = hints_readers_about(d);
    if (!hints->stopping && !d->stopping &&
        hints->transferring >= hints_governor_share(about, hints_governor_jobs(d)))
        return false;
    hints->transferring++;
    if (about && hints->transferring > hints->most_beside_readers)
        hints->most_beside_readers = hints->transferring;
    return true;
}

void hints_governor_leave_locked(struct larderd *d)
{
    d->hints->transferring--;
}

/* A staging job waits this long at most for the readers' work to pause. */
#define YIELD_MAX_MS 500

/* Wait (YIELD_MAX_MS at most) while this daemon runs DEMAND or NEAR READs
 * (its readers', or peers' for their readers): a staging job starts in the
 * gaps between them, so its transfers and checksums do not take the CPU
 * and the links beside a reader's read (docs/scale.md, "Priorities"). */
void hints_yield_to_readers(struct larderd *d)
{
    for (int waited = 0; waited < YIELD_MAX_MS && !d->stopping; waited += 2) {
        struct larder__pool_stats stats;
        larderd_classes_get(d, &stats);
        if (stats.running[LARDER__DEMAND] + stats.running[LARDER__NEAR] == 0) return;
        struct timespec nap = {0, 2 * 1000000};
        nanosleep(&nap, NULL);
    }
}
