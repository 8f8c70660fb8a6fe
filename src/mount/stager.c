/*
 * stager.c - staging whole files in the background on their first open
 * (mount.h, docs/mount.md "Staging on open").
 *
 * A file read in random order (one HDF5 file holding a dataset) gains
 * nothing from readahead: every read is a cold miss until the file has
 * been read once.  So its first open queues the whole file here, and a
 * few large reads at WARM bring it into the node cache from its start
 * on, while the readers' own misses go ahead of them:
 *
 *   - at most a limit of pieces of PIECE bytes in flight for the whole
 *     mount (not per file), half of them while a reader waits on a miss,
 *     so that an origin that serves a few reads at once, in order (a
 *     parallel file system's client, an object store's connection pool)
 *     never has its queue filled by staging ahead of a blocked reader.
 *     The limit is --stage-inflight's when given, else adaptive (adapt.c):
 *     it starts at one, grows (doubling until its first halving, a slow
 *     start) while the readers' misses (timed by fs.c) stay near their
 *     recent latency, or while no reader misses at all, and halves when
 *     they slow down;
 *   - the file's first HEAD and last TAIL bytes are staged at once at
 *     NEAR (where formats keep their metadata: HDF5's superblock, object
 *     headers and B-trees, a zip's directory, a checkpoint's index), so
 *     the reader's dependent metadata reads do not each wait on a miss;
 *   - what is resident already is skipped, piece by piece, when its turn
 *     comes (a reader's miss may have brought it meanwhile).
 *
 * Each piece is one staging task of readahead.c (larder__mount_stage),
 * which fills the shared node cache through the daemon or this process's
 * own engine.  Files are staged in the order they were first opened.
 */
#include "mount.h"

#include "dataset.h"
#include "fill.h"
#include "priority.h"

#include <stdlib.h>
#include <time.h>

#define PIECE (UINT64_C(1) << 20)
#define HEAD (UINT64_C(4) << 20)
#define TAIL (UINT64_C(1) << 20)

struct larder__mount_stage_job {
    struct larder__mount_stage_job *next;
    uint32_t shard;
    uint64_t start, at, end; /* shard bytes [start, end), asked up to `at` (the head at NEAR) */
    uint64_t sample;
    unsigned running; /* its pieces in flight */
    unsigned held;    /* pumps using it with the lock let go (a piece may end meanwhile) */
    double began;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Pieces allowed in flight now (m->lock held): half while a reader waits on a miss. */
static unsigned allowed(struct larder__mount *m)
{
    return larder__mount_adapt_allowed(&m->adapt, m->stage_inflight,
                                       atomic_load(&m->demand_waiting));
}

/* A job all of whose pieces were asked and answered: logged and freed (m->lock held). */
static void finish_locked(struct larder__mount *m, struct larder__mount_stage_job *j)
{
    struct larder__mount_stage_job **p = &m->stage_jobs;
    while (*p && *p != j)
        p = &(*p)->next;
    if (*p) *p = j->next;
    if (!m->stage_jobs && atomic_load(&m->stage_opening) == 0 && !m->stopping)
        larder__mount_raise_readahead(m, 1024);
    if (!m->stopping)
        larder__mount_log(LARDER_LOG_INFO,
                          "staged sample %llu (%llu bytes) %.1f s after its first open",
                          (unsigned long long)j->sample, (unsigned long long)(j->end - j->start),
                          now_s() - j->began);
    free(j);
}

/* Start pieces until the limit is reached or nothing is left (m->lock held).
 * A job stays listed until its last piece is answered and no pump holds
 * it: a piece can be answered (larder__mount_stager_done) while its pump
 * has the lock let go, and freeing the job then left the pump with freed
 * memory (seen as a job logged staged twice, then the mount gone, with 8
 * readers opening small files at once). */
static void pump_locked(struct larder__mount *m)
{
    struct larder__fill *fill = larder__dataset_fill(m->dataset);
    struct larder__mount_stage_job *j = m->stage_jobs;
    while (j && !m->stopping && atomic_load(&m->stage_running) < allowed(m)) {
        if (j->at >= j->end) { /* all asked: on to the next file */
            struct larder__mount_stage_job *next = j->next;
            if (j->running == 0 && j->held == 0) finish_locked(m, j);
            j = next;
            continue;
        }
        uint32_t shard = j->shard;
        uint64_t at = j->at, piece = j->end - at < PIECE ? j->end - at : PIECE;
        j->at += piece;
        if (larder__fill_resident(fill, shard, at, piece)) continue;
        j->running++;
        j->held++; /* the piece may be answered before the lock is back: j stays */
        atomic_fetch_add(&m->stage_running, 1);
        pthread_mutex_unlock(&m->lock);
        uint64_t queued = larder__mount_stage_piece(m, shard, at, piece, LARDER__WARM, j);
        pthread_mutex_lock(&m->lock);
        j->held--;
        if (!queued) {
            j->running--;
            atomic_fetch_sub(&m->stage_running, 1);
        }
        if (m->stopping && j->running == 0 && j->held == 0) {
            finish_locked(m, j); /* stager_stop left it to us */
            break;
        }
        if (!queued) break; /* the pool refused: the next answer or open tries again */
    }
}

void larder__mount_stager_miss(struct larder__mount *m, double ms, bool staging)
{
    if (m->stage_inflight || !m->staged_on_open) return; /* a fixed limit, or nothing staged */
    pthread_mutex_lock(&m->lock);
    const char *why = "";
    unsigned before = m->adapt.limit;
    if (larder__mount_adapt_miss(&m->adapt, ms, staging, &why) && m->trace)
        larder__mount_log(LARDER_LOG_INFO,
                          "trace: staging limit %u -> %u (%s; misses %.1f ms without staging)",
                          before, m->adapt.limit, why, m->adapt.baseline);
    pthread_mutex_unlock(&m->lock);
}

void larder__mount_stager_done(struct larder__mount *m, struct larder__mount_stage_job *j)
{
    pthread_mutex_lock(&m->lock);
    atomic_fetch_sub(&m->stage_running, 1);
    const char *why = "";
    unsigned before = m->adapt.limit;
    if (!m->stage_inflight && larder__mount_adapt_piece(&m->adapt, &why) && m->trace)
        larder__mount_log(LARDER_LOG_INFO, "trace: staging limit %u -> %u (%s)", before,
                          m->adapt.limit, why);
    if (--j->running == 0 && j->held == 0 && (j->at >= j->end || m->stopping)) finish_locked(m, j);
    pump_locked(m);
    pthread_mutex_unlock(&m->lock);
}

/*
 * The kernel's read-ahead for the mount stays at its 128 KiB while a file is
 * being staged.  A reader's miss of one page then brings 128 KiB, not the
 * 1 MiB that most often runs past what the registered order staged (an h5py
 * row's bytes end, the rest of the piece belongs to a member read much
 * later) and makes the reader wait on the origin for it: reading rank 0's
 * first 8 steps ten seconds after the registration, 61 misses with 1 MiB,
 * 12 with 128 KiB (the full benchmark's file).  Hits are what the larger
 * requests are for, and once everything is staged they are all hits.
 */
void larder__mount_stager_opened(struct larder__mount *m)
{
    pthread_mutex_lock(&m->lock);
    bool staging = m->stage_jobs != NULL || atomic_load(&m->stage_opening) > 0;
    pthread_mutex_unlock(&m->lock);
    if (!staging) larder__mount_raise_readahead(m, 1024);
}

void larder__mount_stager_kick(struct larder__mount *m)
{
    pthread_mutex_lock(&m->lock);
    pump_locked(m);
    pthread_mutex_unlock(&m->lock);
}

bool larder__mount_stage_file(struct larder__mount *m, uint32_t shard, uint64_t base,
                              uint64_t length, uint64_t sample)
{
    if ((!m->cached && !m->daemon) || length == 0) return false;
    struct larder__mount_stage_job *j = calloc(1, sizeof *j);
    if (!j) return false;
    /* the head and the tail at once, above the whole file's staging */
    uint64_t head = length < HEAD ? length : HEAD;
    *j = (struct larder__mount_stage_job){.shard = shard,
                                          .start = base,
                                          .at = base + head,
                                          .end = base + length,
                                          .sample = sample,
                                          .began = now_s()};
    larder__mount_stage(m, shard, base, head, LARDER__NEAR);
    larder__mount_hdf5_stage(m, shard, base, length, sample); /* its metadata next, if HDF5 */
    if (length > head) {
        uint64_t tail = length - head < TAIL ? length - head : TAIL;
        larder__mount_stage(m, shard, base + length - tail, tail, LARDER__NEAR);
    }
    pthread_mutex_lock(&m->lock);
    if (m->stopping) {
        free(j);
    } else {
        struct larder__mount_stage_job **p = &m->stage_jobs;
        while (*p)
            p = &(*p)->next;
        *p = j;
        pump_locked(m);
    }
    pthread_mutex_unlock(&m->lock);
    return true;
}

void larder__mount_stager_stop(struct larder__mount *m)
{
    pthread_mutex_lock(&m->lock);
    m->stopping = true;
    for (struct larder__mount_stage_job *j = m->stage_jobs, *next; j; j = next) {
        next = j->next;
        if (j->running == 0 && j->held == 0)
            finish_locked(m, j); /* else its last answer, or its pump, frees it */
    }
    pthread_mutex_unlock(&m->lock);
}
