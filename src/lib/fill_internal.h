/*
 * fill_internal.h - what the read engine's files (fill.c, fill_raw.c)
 * share: the engine's handle and the steps of a fill that raw ranges
 * take too.  Private to them; everyone else goes through fill.h, where
 * the design is.
 */
#ifndef LARDER_FILL_INTERNAL_H
#define LARDER_FILL_INTERNAL_H

#include "fill.h"
#include "fill_scope.h"
#include "shardmap.h"
#include "source.h"

#include <pthread.h>

/* The read engine of one dataset (fill.h says what it does). */
struct larder__fill {
    const struct larder__index *ix;
    struct larder__cache *cache;         /* NULL: reads go to the sources */
    struct larder__cache_counters local; /* counters when there is no cache */
    bool verify;
    int inflight;
    larder__open_source_fn open_source;
    void *context;
    pthread_mutex_t lock;            /* guards sources[], map and pool */
    struct larder__source **sources; /* per shard, opened on first use */
    struct larder__shard_map *map;   /* samples by offset (made on first use) */
    int map_error;                   /* why the map could not be made (a corrupt index) */
    char map_message[512];
    struct larder__pool *pool;       /* for batches and prefetch, made on first use */
    struct larder__block_sums *sums; /* shards checked by checksum block; NULL: none */
    /* Samples whose cached bytes this process checked, valid while the
     * cache's generation is verified_generation (see read_resident). */
    uint64_t *verified;
    uint64_t verified_generation;
    pthread_mutex_t verified_lock;
};

/* Runs of blocks from the shard's source in one vectored read, at class
 * `priority`; where the bytes came from, or a negative code (fill.c). */
LARDER__HIDDEN int larder__fill_fetch_runs(struct larder__fill *f, uint32_t shard,
                                           const struct larder__extent *runs, size_t count,
                                           bool origin_only, int priority);
/* The shard map, built (and the sample records checked) on first use. */
LARDER__HIDDEN int larder__fill_shard_map(struct larder__fill *f, struct larder__shard_map **out);
/* LARDER_ECHECKSUM naming sample `id`, whose bytes are in span (which starts at span_start). */
LARDER__HIDDEN int larder__fill_checksum_failure(struct larder__fill *f, uint64_t id,
                                                 const uint8_t *span, uint64_t span_start);
/* The fill engine: bytes [lo, hi) of `shard` through the cache, under
 * the fill lock of the blocks it reads (fill.c says how). */
LARDER__HIDDEN int larder__fill_through_cache(struct larder__fill *f, uint32_t shard, uint64_t lo,
                                              uint64_t hi, void *buf, bool suspect, int priority);

/* The span offered this thread's next fill when [start, start + length)
 * lies within it (the offer is then taken), else NULL (fill_inplace.c). */
LARDER__HIDDEN uint8_t *larder__fill_take_offered_span(uint32_t shard, uint64_t start,
                                                       uint64_t length);
/* A fill's lock of blocks [first, last]: larder__cache_lock, or the lock
 * of blocks put in place offered with the span, grown to them; and its
 * release, which punches out what of those was not published first. */
LARDER__HIDDEN int larder__fill_lock_blocks(struct larder__cache *cache, uint32_t shard,
                                            uint64_t first, uint64_t last);
LARDER__HIDDEN void larder__fill_unlock_blocks(struct larder__cache *cache, int lock);
/* Whether data (length bytes) are the pages of blocks put in place under
 * this thread's fill lock: stored by marking them, not by writing. */
LARDER__HIDDEN bool larder__fill_in_place(const void *data, uint64_t length);
/* Store blocks for which larder__fill_in_place said true: marked when the
 * data file is still the one mapped, else written from the mapping
 * (larder__cache_store_placed). */
LARDER__HIDDEN int larder__fill_store_in_place(struct larder__cache *cache, uint32_t shard,
                                               uint64_t first, uint64_t last, const void *data,
                                               bool borrowed, bool checked);
#endif
