/*
 * hdf5_stage.c - HDF5 metadata first (mount.h, docs/mount.md "HDF5 files:
 * metadata first").  When a file staged on open (stager.c) is HDF5, a
 * thread scans it (hdf5.c) through the mount's own checked reads at NEAR
 * and stages the blocks that hold its metadata -- everything that is not
 * a dataset's raw data -- at NEAR, ahead of the whole file's staging at
 * WARM, so that h5py's dependent metadata reads (superblock, object
 * headers, B-trees, heaps) find the cache warm and a row costs one miss,
 * its data.
 *
 * Only where the metadata is concentrated: when the blocks holding it are
 * more than SPREAD_SHARE of the file's (a file of many small groups, whose
 * headers sit beside each group's data in every block), staging them
 * first is staging the whole file at NEAR, which the stager's adaptive
 * limit exists to avoid; the log says so and the whole-file staging
 * brings them in its order.
 */
#include "mount.h"

#include "dataset.h"
#include "fill.h"
#include "hdf5_layout.h"
#include "priority.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE (UINT64_C(1) << 20)
#define SIGNATURE_LIMIT (UINT64_C(1) << 20) /* where a superblock is looked for: 0, 512, ... */
#define SPREAD_SHARE 8                      /* metadata in over 1/8 of the blocks: not first */
#define MIN_PIECES 64                       /* ... unless that is at most this many blocks */
#define SMALL_FILE (UINT64_C(5) << 20)      /* stager.c's HEAD + TAIL: staged at once anyway */
#define TRACE_LINES 4096                    /* metadata extents traced at most per file */
/* Blocks the scan may fetch (misses) before it stops: a file whose
 * metadata needs more is one whose metadata is spread through it, and
 * scanning it would be a serial reader of most of the file. */
#define SCAN_MISSES MIN_PIECES

struct hdf5_task {
    struct larder__mount *m;
    uint32_t shard;
    uint64_t base, length, sample;
    uint64_t misses; /* the scan's reads that were not resident */
};

static int read_file(void *context, uint64_t offset, void *buf, size_t length)
{
    struct hdf5_task *t = context;
    if (t->m->stopping) return -EINTR; /* unmounting: the scan ends at its next read */
    if (offset > t->length || length > t->length - offset) return LARDER_ETRUNCATED;
    struct larder__fill *fill = larder__dataset_fill(t->m->dataset);
    if (!larder__fill_resident(fill, t->shard, t->base + offset, length) &&
        ++t->misses > SCAN_MISSES)
        return -ECANCELED; /* spread through the file: see SCAN_MISSES */
    return larder__fill_range_at(fill, t->shard, t->base + offset, length, LARDER__NEAR, buf);
}

/* Whether the file has an HDF5 superblock at 0, 512, 1024, 2048, ... */
static bool is_hdf5(struct hdf5_task *t)
{
    uint8_t magic[8];
    for (uint64_t at = 0; at + sizeof magic <= t->length && at < SIGNATURE_LIMIT;
         at = at ? at * 2 : 512) {
        if (read_file(t, at, magic, sizeof magic) < 0) return false;
        if (larder__mount_hdf5_signature(magic, sizeof magic)) return true;
    }
    return false;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Stage the pieces (PIECE-aligned in the shard) that hold metadata, at
 * NEAR, unless they are spread through the file (false). */
static bool stage_metadata(struct hdf5_task *t, const struct larder__mount_hdf5_layout *l,
                           uint64_t *pieces_out)
{
    /* the distinct pieces first, to decide whether they are few */
    uint64_t pieces = 0, last = UINT64_MAX;
    for (size_t i = 0; i < l->metadata_count; i++) {
        uint64_t first = (t->base + l->metadata[i].offset) / PIECE;
        uint64_t end = (t->base + l->metadata[i].offset + l->metadata[i].length - 1) / PIECE;
        for (uint64_t p = first; p <= end; p++)
            if (p != last) pieces++, last = p;
    }
    *pieces_out = pieces;
    uint64_t file_pieces = (t->length + PIECE - 1) / PIECE + 1;
    if (pieces > MIN_PIECES && pieces * SPREAD_SHARE > file_pieces) return false;
    last = UINT64_MAX;
    for (size_t i = 0; i < l->metadata_count && !t->m->stopping; i++) {
        uint64_t first = (t->base + l->metadata[i].offset) / PIECE;
        uint64_t end = (t->base + l->metadata[i].offset + l->metadata[i].length - 1) / PIECE;
        for (uint64_t p = first; p <= end; p++) {
            if (p == last) continue;
            last = p;
            /* the piece, within the file's bytes of the shard */
            uint64_t from = p * PIECE < t->base ? t->base : p * PIECE;
            uint64_t to = (p + 1) * PIECE;
            if (to > t->base + t->length) to = t->base + t->length;
            if (to > from) larder__mount_stage(t->m, t->shard, from, to - from, LARDER__NEAR);
        }
    }
    return true;
}

static void scan_and_stage(struct hdf5_task *t)
{
    struct larder__mount *m = t->m;
    if (!is_hdf5(t)) return;
    double began = now_s();
    struct larder__mount_hdf5_layout *l;
    int rc = larder__mount_hdf5_scan(read_file, t, t->length, &l);
    if (rc == -ECANCELED) {
        larder__mount_log(LARDER_LOG_INFO,
                          "hdf5: sample %" PRIu64 ": metadata spread through the file (the scan "
                          "stopped after %d blocks), staged with it (%.2f s)",
                          t->sample, SCAN_MISSES, now_s() - began);
        return;
    }
    if (rc < 0) {
        if (!m->stopping)
            larder__mount_log(LARDER_LOG_WARN, "hdf5: sample %" PRIu64 ": %s", t->sample,
                              larder_errmsg());
        return;
    }
    uint64_t pieces = 0;
    bool first = stage_metadata(t, l, &pieces);
    larder__mount_log(LARDER_LOG_INFO,
                      "hdf5: sample %" PRIu64 ": %" PRIu64 " datasets (%" PRIu64
                      " compressed), %zu raw extents%s, %zu metadata extents of %" PRIu64
                      " bytes in %" PRIu64 " blocks of 1 MiB: %s (scan %.2f s)",
                      t->sample, l->datasets, l->compressed, l->raw_count,
                      l->truncated ? " (capped)" : "", l->metadata_count, l->metadata_bytes, pieces,
                      first ? "staged first" : "spread through the file, staged with it",
                      now_s() - began);
    if (m->trace)
        for (size_t i = 0; i < l->metadata_count && i < TRACE_LINES; i++)
            larder__mount_log(LARDER_LOG_INFO, "trace: hdf5 metadata %" PRIu64 " %" PRIu64,
                              l->metadata[i].offset, l->metadata[i].length);
    larder__mount_hdf5_layout_free(l);
}

static void *run(void *arg)
{
    struct hdf5_task *t = arg;
    struct larder__mount *m = t->m;
    scan_and_stage(t);
    free(t);
    pthread_mutex_lock(&m->lock);
    if (--m->staging == 0) pthread_cond_broadcast(&m->idle);
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

void larder__mount_hdf5_stage(struct larder__mount *m, uint32_t shard, uint64_t base,
                              uint64_t length, uint64_t sample)
{
    const char *off = getenv("LARDER_MOUNT_HDF5"); /* "0": off, to compare (bench/mount.sh) */
    /* a file within the head and tail stager.c stages at once at NEAR has
     * nothing to put first (and small files are opened by the thousand) */
    if (!m->cached || length <= SMALL_FILE || (off && strcmp(off, "0") == 0)) return;
    struct hdf5_task *t = malloc(sizeof *t);
    if (!t) return;
    *t = (struct hdf5_task){m, shard, base, length, sample};
    pthread_mutex_lock(&m->lock);
    bool stopping = m->stopping;
    if (!stopping) m->staging++; /* waited for at unmount, like a staging task */
    pthread_mutex_unlock(&m->lock);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stopping || pthread_create(&thread, &attr, run, t) != 0) {
        free(t);
        if (!stopping) {
            pthread_mutex_lock(&m->lock);
            if (--m->staging == 0) pthread_cond_broadcast(&m->idle);
            pthread_mutex_unlock(&m->lock);
        }
    }
    pthread_attr_destroy(&attr);
}
