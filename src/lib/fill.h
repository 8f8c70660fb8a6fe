/*
 * fill.h - the read engine of one dataset: given its index, the node
 * cache (or none) and a source per shard (source.h), it answers "this
 * sample" and "these bytes of a shard" with every byte checked against
 * the index's checksums before anyone sees it.
 *
 * With a cache, resident samples are read from the cache file with no
 * lock and no IPC (their checksum checked on the first read in this
 * process and whenever the cache's generation moved); anything else goes
 * through a fill: under the fill lock of its blocks (single flight across
 * threads and processes), whatever the cache lacks is read from the
 * shard's source (one vectored read of its runs of missing blocks), every sample the
 * bytes belong to is checked, the blocks whose bytes all checked out are
 * kept, and the asked-for bytes copied out.  Wrong bytes lead to one more
 * read from the origin itself (past any peer), then to LARDER_ECHECKSUM
 * naming the sample.  Without a cache, samples are read straight from
 * the source (checked when the dataset asks for it; raw ranges always).
 *
 * The public dataset handle (dataset.c), the prefetcher and the node
 * daemon all read through this engine; what differs between them is the
 * shard sources they give it (a daemon's are chains: the shard's owner
 * node, then the origin).
 */
#ifndef LARDER_FILL_H
#define LARDER_FILL_H

#include "cache.h"
#include "index.h"
#include "priority.h"

struct larder__fill;
struct larder__source;
struct larder__pool;

/* The source of shard `shard`, opened on the engine's first read of it
 * (the engine owns it from then on and closes it). */
typedef int (*larder__open_source_fn)(void *context, uint32_t shard, struct larder__source **out);

struct larder__fill_config {
    const struct larder__index *ix; /* parsed; must outlive the engine */
    struct larder__cache *cache;    /* NULL: read the sources directly; borrowed */
    bool verify;                    /* without a cache, check every sample read */
    int inflight;                   /* worker threads for batches (0: 64) */
    larder__open_source_fn open_source;
    void *context;
};

LARDER__HIDDEN int larder__fill_new(struct larder__fill **out, const struct larder__fill_config *c);
/* Accepts NULL.  Destroys the shard sources; leaves the cache alone. */
LARDER__HIDDEN void larder__fill_free(struct larder__fill *fill);

/*
 * Sample `id` (its record `s`, from larder__index_sample_range) whole
 * into buf, which holds s->length bytes: from the cache when resident,
 * else through a fill.  0 or a negative code naming the sample.
 */
LARDER__HIDDEN int larder__fill_sample(struct larder__fill *fill, const struct larder__sample *s,
                                       uint64_t id, void *buf);
/* Bytes [offset, offset + length) of sample `id` straight from its
 * shard's source, unchecked (a field read without a cache or checks). */
LARDER__HIDDEN int larder__fill_direct(struct larder__fill *fill, const struct larder__sample *s,
                                       uint64_t id, void *buf, uint64_t offset, uint64_t length);
/* Bytes [offset, offset + length) of `shard`, every sample they belong to
 * checked (see larder__dataset_read_range), fetched at DEMAND. */
LARDER__HIDDEN int larder__fill_range(struct larder__fill *fill, uint32_t shard, uint64_t offset,
                                      uint64_t length, void *buf);
/*
 * What a fill of bytes [offset, offset + length) of `shard` would read
 * from the shard's source were nothing cached: [*lo, *hi) (whole samples,
 * whole blocks).  1 when those bytes are resident already (no fill), 0, or
 * a negative code (a range outside the shard).  A daemon borrows that much
 * from the chunks' owners before the fill (larder__source_stripe_borrow).
 */
LARDER__HIDDEN int larder__fill_range_scope(struct larder__fill *fill, uint32_t shard,
                                            uint64_t offset, uint64_t length, uint64_t *lo,
                                            uint64_t *hi);
/* Stage the range for a zero-copy send (see larder__dataset_stage_range), at DEMAND. */
LARDER__HIDDEN int larder__fill_stage_range(struct larder__fill *fill, uint32_t shard,
                                            uint64_t offset, uint64_t length, int *fd);
/*
 * The same at a class of priority.h: what is missing is fetched at
 * `priority` (a peer's READ carries it, the HTTP origin's transfers in
 * flight are shared by it).  A daemon stages what a READ asks at the
 * READ's class; hints and replication stage at LARDER__HINTED, warm
 * staging at LARDER__WARM.  What is already cached is served the same
 * at any class.  A NULL buf stages the bytes into the node cache and
 * copies nothing out (LARDER_EUSAGE without a cache).
 */
LARDER__HIDDEN int larder__fill_range_at(struct larder__fill *fill, uint32_t shard, uint64_t offset,
                                         uint64_t length, int priority, void *buf);
LARDER__HIDDEN int larder__fill_stage_range_at(struct larder__fill *fill, uint32_t shard,
                                               uint64_t offset, uint64_t length, int priority,
                                               int *fd);
/* The same when the range is resident already, and nothing more: 0 with
 * *fd (the cache's data file, valid while the engine lives), or 1 (not
 * resident, a cache that evicts, or a range outside the shard: nothing
 * is filled, no error is set; stage_range_at says why).  Never waits for
 * a fill: for a thread that may not (UCX's progress thread). */
LARDER__HIDDEN int larder__fill_resident_fd(struct larder__fill *fill, uint32_t shard,
                                            uint64_t offset, uint64_t length, int *fd);
/*
 * Offer the next fill on this thread a span buffer: buf holds the bytes
 * [start, start + length) of the shard, and when that fill's span (the
 * blocks it reads, checks and keeps, neighbours taken in included) lies
 * within them, it reads into its place in buf instead of a buffer of its
 * own (a chunk borrowed with larder__source_stripe_borrow_into lies there
 * already); otherwise buf is not used.  The offer is for one fill: the
 * next one takes it or drops it, and the caller withdraws it (buf NULL)
 * after the call it was for (which may fill nothing).  buf stays the
 * caller's.
 */
LARDER__HIDDEN void larder__fill_offer_span(uint32_t shard, uint64_t start, uint64_t length,
                                            void *buf);
/*
 * A whole chunk borrowed straight into the cache file (fill_inplace.c):
 * a daemon staging chunk [lo, hi) of `shard` calls _begin before it
 * borrows the chunk's span, with room_start and room_length the span
 * buffer it will offer (larder__fill_offer_span's start and length).
 * _begin takes the fill lock of the chunk's inner blocks (waiting, with
 * nothing held), and returns 0 with `room` that buffer: anonymous memory
 * with those blocks' pages of the data file mapped in its middle; 1 when
 * it cannot (no cache, one that evicts, no inner blocks or all of them in
 * the cache, the disk full): nothing is held, and the caller uses a buffer
 * of its own.  _offer, just before the fill, offers the next fill on this
 * thread the room and the lock: that fill checks the bytes where they lie
 * and marks resident those that checked out without writing them again.
 * _end, after the fill (or instead of it), punches out what was not
 * published, lets the lock go and unmaps the room; call it once the loan
 * the bytes were received through is returned.
 */
/* inner blocks put in place at most (more: a buffer as before) */
#define LARDER__INPLACE_BLOCKS 1024
#define LARDER__INPLACE_RUNS 8 /* runs of them (between blocks cached already) at most */
struct larder__fill_inplace {
    uint8_t *room;               /* the span's memory; NULL: not begun */
    uint8_t *base;               /* the mapping room lies in (fill_inplace.c, "Rooms") */
    size_t mapped;               /* bytes mapped at base (whole pages) */
    uint64_t room_start;         /* shard offset of room[0] */
    uint64_t room_length;        /* bytes of the shard room stands for */
    struct larder__cache *cache; /* whose data file is mapped */
    uint32_t shard;
    uint64_t first, last; /* the inner blocks, locked */
    int lock;             /* their fill lock; -1: none, or a fill settled it */
    int fd;               /* the data file mapped (the cache's descriptor: not closed here) */
    bool offered;         /* offered to a fill: the peer's bytes were received into it */
    /* which of them are put in place (bit i: block first + i): those not
     * in the cache when locked; the others' bytes go through room's
     * anonymous pages (the fill reads them from the cache over those) */
    uint64_t in_file[LARDER__INPLACE_BLOCKS / 64];
    /* the runs of them registered as windows onto the data file, which a
     * peer's answer is spliced into (recv_window.h); -1: none */
    int windows[LARDER__INPLACE_RUNS];
    /* where in room the data file is mapped, run by run (mapped_length 0:
     * none): put back to anonymous memory at the end, so that the room is
     * kept for the next chunk (fill_inplace.c, "Rooms") */
    uint8_t *mapped_at[LARDER__INPLACE_RUNS];
    size_t mapped_length[LARDER__INPLACE_RUNS];
};
LARDER__HIDDEN int larder__fill_inplace_begin(struct larder__fill *fill, uint32_t shard,
                                              uint64_t lo, uint64_t hi, uint64_t room_start,
                                              uint64_t room_length,
                                              struct larder__fill_inplace *in);
LARDER__HIDDEN void larder__fill_inplace_offer(struct larder__fill_inplace *in);
/* Returns how many blocks the peer's bytes were received into in place
 * (counted once the fill took the span: the borrow was whole). */
LARDER__HIDDEN uint64_t larder__fill_inplace_end(struct larder__fill_inplace *in);
/* Whether every block of sample `id` is in the cache (false without one). */
LARDER__HIDDEN bool larder__fill_staged(const struct larder__fill *fill, uint64_t id);
/* Bring sample `id` into the cache, checked (nothing without a cache), at
 * DEMAND; _at: at a class of priority.h (the prefetcher's: NEAR). */
LARDER__HIDDEN int larder__fill_stage(struct larder__fill *fill, uint64_t id);
LARDER__HIDDEN int larder__fill_stage_at(struct larder__fill *fill, uint64_t id, int priority);
/* Whether every block of bytes [offset, offset + length) of `shard` is in
 * the cache and trusted (false without a cache), for file.c. */
LARDER__HIDDEN bool larder__fill_resident(const struct larder__fill *fill, uint32_t shard,
                                          uint64_t offset, uint64_t length);

/* 0 when buf holds sample `id`'s bytes; else LARDER_ECHECKSUM naming it. */
LARDER__HIDDEN int larder__fill_check(const struct larder__fill *fill,
                                      const struct larder__sample *s, uint64_t id, const void *buf);
/* The source of a shard, opened on first use (valid while the engine lives). */
LARDER__HIDDEN int larder__fill_source(struct larder__fill *fill, uint32_t shard,
                                       struct larder__source **out);
/* The engine's worker pool, made on first use. */
LARDER__HIDDEN int larder__fill_pool(struct larder__fill *fill, struct larder__pool **out);
/* Requests in flight the engine allows (its pool's size). */
LARDER__HIDDEN int larder__fill_inflight(const struct larder__fill *fill);
/* The counters reads are counted in: the cache's (node-wide), or the engine's own. */
LARDER__HIDDEN struct larder__cache_counters *larder__fill_counters(struct larder__fill *fill);

#endif
