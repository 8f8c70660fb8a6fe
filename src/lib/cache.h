/*
 * cache.h - the node-local block cache of one dataset.
 *
 * A cache directory holds one subdirectory per dataset id:
 *
 *   DIR/<dataset id>/blocks         shared state, mapped by every process
 *   DIR/<dataset id>/locks          byte-range locks: one byte per block
 *   DIR/<dataset id>/NNNNNN.data    one sparse file per shard
 *
 * Directories are created 0750 and files 0640 (less what the umask
 * takes): other users reach the cache only through the node daemon.
 *
 * `blocks` holds a header (block size, the capacity every process
 * sharing the cache evicts to, counters shared by all processes of the
 * node, the boot id) and four bitmaps over all blocks of all shards:
 * resident (the block's bytes are in its data file, and were checked
 * against the index's checksums before the bit was set), referenced (read
 * since the eviction clock hand last passed), borrowed (came from another
 * node), and suspect (resident before the machine last restarted).  A
 * bit is set only after its data is written, so a process crash leaves at
 * worst a block to fetch again; a power loss can leave a set bit over a
 * hole, which is why a new boot marks every resident block suspect, and a
 * suspect block is served only after a fill has checked it again.
 *
 * Single flight: a fill takes an exclusive open-file-description lock
 * (F_OFD_SETLKW) on the bytes of `locks` numbered like its blocks, then
 * looks at the bitmap again and fetches only what is still missing.  The
 * kernel serializes threads and processes alike, and drops the locks of
 * a process that dies.  Reads of resident blocks take no lock at all;
 * they check the sample's checksum and that the bits are still set after
 * the read, so an eviction or a damaged file under them sends them to the
 * fill path instead of returning wrong bytes.
 */
#ifndef LARDER_CACHE_H
#define LARDER_CACHE_H

#include "index.h"
#include "plan.h"

struct larder__cache;

/* Counters shared by all processes using the cache (see larder_stats;
 * fill latency bucket i: [2^i, 2^(i+1)) microseconds). */
struct larder__cache_counters {
    uint64_t hits, misses; /* samples read from disk / needing a fill */
    uint64_t origin_requests, origin_bytes;
    uint64_t bytes_served;   /* sample bytes handed to readers */
    uint64_t refetches;      /* fills repeated after a checksum mismatch */
    uint64_t evictions;      /* blocks evicted */
    uint64_t uncached_fills; /* fills served without caching (disk full) */
    uint64_t fill_latency[LARDER_FILL_BUCKETS];
    uint64_t peer_requests, peer_bytes; /* blocks borrowed from the shard's owner node */
};

/*
 * Open (creating if needed) the cache of the dataset `ix` under `dir`.
 * block_size 0 takes the index's hint.  capacity: bytes of resident
 * blocks, enforced by eviction, for every process sharing the cache (the
 * last opener that sets one sets it); 0 follows what is set, and no one
 * having set one means no limit.  borrow_capacity bounds
 * the blocks borrowed from other nodes (stored with borrowed set), which
 * are evicted first.  Refuses a cache
 * directory made with another block size (LARDER_EUSAGE, message says
 * both) or for another dataset.
 */
LARDER__HIDDEN int larder__cache_open(struct larder__cache **out, const char *dir,
                                      const struct larder__index *ix, uint32_t block_size,
                                      uint64_t capacity, uint64_t borrow_capacity);
LARDER__HIDDEN void larder__cache_close(struct larder__cache *cache);
LARDER__HIDDEN uint32_t larder__cache_block_size(const struct larder__cache *cache);

/* Blocks [first, last] of `shard` covering bytes [offset, offset + length). */
LARDER__HIDDEN void larder__cache_blocks(const struct larder__cache *cache, uint64_t offset,
                                         uint64_t length, uint64_t *first, uint64_t *last);
/* Whether all blocks [first, last] of `shard` are resident and trusted
 * (none suspect): their bytes may be served as they are. */
LARDER__HIDDEN bool larder__cache_resident(const struct larder__cache *cache, uint32_t shard,
                                           uint64_t first, uint64_t last);
/* Whether all blocks [first, last] are in the data file, trusted or not
 * (a fill may read suspect blocks, and checks them). */
LARDER__HIDDEN bool larder__cache_present(const struct larder__cache *cache, uint32_t shard,
                                          uint64_t first, uint64_t last);
/* Whether any of blocks [first, last] of `shard` came from another node
 * (borrowed: a daemon with a borrowed share evicts them first). */
LARDER__HIDDEN bool larder__cache_any_borrowed(const struct larder__cache *cache, uint32_t shard,
                                               uint64_t first, uint64_t last);
/* Trust suspect blocks a fill has checked.  Call with the fill lock held. */
LARDER__HIDDEN void larder__cache_trust(struct larder__cache *cache, uint32_t shard, uint64_t first,
                                        uint64_t last);
/*
 * The cache's generation: it changes whenever bytes a reader trusted may
 * have changed under it (an eviction, damage found, a repair).  Readers
 * that skip the checksum of a sample they verified before do so only
 * while the generation they verified it in still holds.
 */
LARDER__HIDDEN uint64_t larder__cache_generation(const struct larder__cache *cache);

/* Read bytes of a shard from its data file.  0, or a negative code
 * (LARDER_ETRUNCATED when the file is shorter: it was cut underneath). */
LARDER__HIDDEN int larder__cache_pread(struct larder__cache *cache, uint32_t shard, void *buf,
                                       size_t length, uint64_t offset);
/* Whether this cache may evict blocks (the node's capacity, or this opener's borrowed share). */
LARDER__HIDDEN bool larder__cache_evicts(const struct larder__cache *cache);
/* The data file of a shard (opened on first use; valid until the cache closes). */
LARDER__HIDDEN int larder__cache_data_fd(struct larder__cache *cache, uint32_t shard);
/* Mark blocks as read (for eviction). */
LARDER__HIDDEN void larder__cache_touch(struct larder__cache *cache, uint32_t shard, uint64_t first,
                                        uint64_t last);

/*
 * Take the fill lock of blocks [first, last] of `shard`, waiting for any
 * other filler.  Returns a lock handle (>= 0) for larder__cache_unlock,
 * or a negative code.
 */
LARDER__HIDDEN int larder__cache_lock(struct larder__cache *cache, uint32_t shard, uint64_t first,
                                      uint64_t last);
LARDER__HIDDEN void larder__cache_unlock(struct larder__cache *cache, int lock);
/*
 * Hold blocks [first, last] of `shard` against eviction and repair: a
 * shared fill lock, which every eviction (and every fill, which would
 * rewrite them) must take exclusively first; never waits.  For bytes that
 * are read from the data file by someone larder cannot check, such as the
 * kernel serving a FUSE passthrough file (src/mount/passthrough.c).
 * Returns a lock handle (>= 0) for larder__cache_unlock, or a negative
 * code (-EAGAIN: a fill or an eviction holds some of them now).
 */
LARDER__HIDDEN int larder__cache_hold(struct larder__cache *cache, uint32_t shard, uint64_t first,
                                      uint64_t last);
/* Add blocks [first, last] to a fill lock if no one holds them now; false
 * (and nothing added) when someone does.  Never waits. */
LARDER__HIDDEN bool larder__cache_try_lock(struct larder__cache *cache, int lock, uint32_t shard,
                                           uint64_t first, uint64_t last);

/*
 * Store `data`, the bytes of blocks [first, last] of `shard` (the last
 * block may be short at the shard's end), and mark them resident (and
 * borrowed, when they came from another node).  `checked`: every sample
 * byte in them matched its checksum; otherwise (a block shared with a
 * sample the fill did not read whole) they are kept suspect, for a later
 * fill to check without fetching them again.  data NULL: the bytes are in
 * the data file already (put in place, below).  Call with the fill lock held.  Returns 0; or
 * -ENOSPC/-EDQUOT/-EIO when the disk refuses, in which case nothing is marked and the caller serves
 * the bytes uncached.
 */
LARDER__HIDDEN int larder__cache_store(struct larder__cache *cache, uint32_t shard, uint64_t first,
                                       uint64_t last, const void *data, bool borrowed,
                                       bool checked);
/* Store blocks put in place: `mapped` maps them in file `placed_fd` (the
 * data file larder__cache_map_blocks mapped).  When the shard's data file
 * is still that file (same device and inode, not unlinked) they are only
 * marked; when it was replaced meanwhile (deleted underneath), the bytes
 * are written from the mapping into the new one; when the mapped file was
 * cut short of them, -ESTALE and nothing is marked.  Else as
 * larder__cache_store. */
LARDER__HIDDEN int larder__cache_store_placed(struct larder__cache *cache, uint32_t shard,
                                              uint64_t first, uint64_t last, const void *mapped,
                                              int placed_fd, bool borrowed, bool checked);
/*
 * In place (cache_inplace.c): a daemon borrowing a whole chunk has the
 * peer's bytes spliced straight into the data file's pages of blocks it
 * holds the fill lock of, none of them present, and stores them with
 * larder__cache_store(data NULL) once they checked out.  Unchecked bytes
 * therefore sit only in blocks whose resident bit is clear (no reader
 * reads those) under a fill lock (no other fill stores or publishes them);
 * whatever was not published is punched out before that lock is let go,
 * and a process that dies leaves its blocks absent and unlocked.
 */
/* Grow fill lock `lock` by blocks [first, last], waiting for their fillers. */
LARDER__HIDDEN int larder__cache_lock_more(struct larder__cache *cache, int lock, uint32_t shard,
                                           uint64_t first, uint64_t last);
/* Whether any of blocks [first, last] of `shard` is in the data file. */
LARDER__HIDDEN bool larder__cache_any_present(const struct larder__cache *cache, uint32_t shard,
                                              uint64_t first, uint64_t last);
/* Map blocks [first, last] of `shard`'s data file (fd, from
 * larder__cache_data_fd) writable and shared at
 * `at` (page aligned; MAP_FIXED over memory the caller owns), room on disk
 * allocated first (fallocate).  Call with their fill lock held
 * and none of them present.  0, or a negative code (at's memory is then
 * the caller's to unmap). */
LARDER__HIDDEN int larder__cache_map_blocks(struct larder__cache *cache, uint32_t shard, int fd,
                                            uint64_t first, uint64_t last, void *at);
/* Punch out the blocks of [first, last] that are not resident: bytes put
 * in place and never published.  Call with their fill lock held. */
LARDER__HIDDEN void larder__cache_punch_absent(struct larder__cache *cache, uint32_t shard,
                                               uint64_t first, uint64_t last);
/* Evict down to the limits again (stores do it as they go, but cannot evict
 * what their own fill lock covers): call after releasing a fill lock. */
LARDER__HIDDEN void larder__cache_trim(struct larder__cache *cache);
/* Evict every resident block of the dataset that no hint pins and no fill
 * holds (one no one will read again: a replaced publication the daemon
 * closes), with no fill lock held; how many.  Readers that still read it
 * find them missing, as after any eviction, and fetch them again. */
LARDER__HIDDEN uint64_t larder__cache_evict_all(struct larder__cache *cache);
/* Mark blocks absent (their bytes proved wrong).  Call with the fill lock held. */
LARDER__HIDDEN void larder__cache_forget(struct larder__cache *cache, uint32_t shard,
                                         uint64_t first, uint64_t last);

/* Shard offset of a block, and bytes in blocks [first, last] (short at the shard's end). */
LARDER__HIDDEN uint64_t larder__cache_block_offset(const struct larder__cache *cache,
                                                   uint64_t block);
LARDER__HIDDEN uint64_t larder__cache_span(const struct larder__cache *cache, uint32_t shard,
                                           uint64_t first, uint64_t last);

/*
 * Pins (cache_pin.c; docs/cache.md "Pins"): blocks a hint keeps against
 * eviction until a time on CLOCK_REALTIME, in milliseconds
 * (larder__cache_clock_ms), shared by every process of the node.  The
 * cache keeps one time for all pins, the latest; the daemon that pinned
 * keeps each hint's and unpins its blocks when it is up.  Pinned blocks
 * count against the capacity; pins take at most 7/8 of it.
 */
LARDER__HIDDEN int64_t larder__cache_clock_ms(void);
/* Pin blocks [first, last] of `shard` (clamped to the shard) until at
 * least expiry_ms.  Returns how many of them, from `first` on, are pinned
 * now: fewer than asked when the pin limit was reached. */
LARDER__HIDDEN uint64_t larder__cache_pin(struct larder__cache *cache, uint32_t shard,
                                          uint64_t first, uint64_t last, int64_t expiry_ms);
/* Unpin blocks [first, last] of `shard` (evictable again). */
LARDER__HIDDEN void larder__cache_unpin(struct larder__cache *cache, uint32_t shard, uint64_t first,
                                        uint64_t last);
/* Whether block `block` of `shard` is pinned now. */
LARDER__HIDDEN bool larder__cache_pinned(const struct larder__cache *cache, uint32_t shard,
                                         uint64_t block);
/* Set the time every pin holds until (the latest live pin's; 0: none). */
LARDER__HIDDEN void larder__cache_set_pin_expiry(struct larder__cache *cache, int64_t expiry_ms);
/* Bytes pinned now (0 once the pins' time is up), and the most pins may hold, in blocks. */
LARDER__HIDDEN uint64_t larder__cache_pinned_bytes(const struct larder__cache *cache);
LARDER__HIDDEN uint64_t larder__cache_pin_limit(const struct larder__cache *cache);

/* Copy counters into public statistics (the rest of *stats is left alone). */
LARDER__HIDDEN void larder__counters_copy(const struct larder__cache_counters *counters,
                                          larder_stats *stats);

/* The node-wide statistics of this cache (counters, usage). */
LARDER__HIDDEN void larder__cache_stats(const struct larder__cache *cache, larder_stats *stats);

/* The shared counters (live, updated atomically). */
LARDER__HIDDEN struct larder__cache_counters *larder__cache_counters(struct larder__cache *cache);
LARDER__HIDDEN void larder__cache_count(uint64_t *counter, uint64_t amount);
LARDER__HIDDEN void larder__cache_record_fill(struct larder__cache *cache, uint64_t microseconds);

/*
 * Eviction by next use (cache_plans.c, cache_nextuse.c; docs/cache.md
 * "Eviction").  Readers register their plan in DIR/<id>/plans and store
 * their position there as they go; whichever process evicts computes,
 * from every live plan of the node, the step at which each resident
 * block is read next, and evicts the block read farthest in the future
 * first (Belady's rule, online: the plan is the future).  A dataset
 * with no live plan, or LARDER_EVICT=clock in the evicting process,
 * keeps the clock.  LARDER_EVICT_TRACE=FILE appends the blocks of every
 * sample a reader asks for (one line "FIRST LAST" in global block
 * numbers), for bench/belady.py to replay.
 */
#define LARDER__CACHE_PLAN_SLOTS 64

/* One live plan of the registry, as read back. */
struct larder__cache_plan {
    int slot;
    struct larder__plan_params params;
    uint32_t window; /* its prefetch window in its own steps (0: not said) */
};

/* Register a reader's plan; returns its slot (>= 0) or a negative code
 * (LARDER_EUNSUPPORTED for a plan with denied samples; -EAGAIN when 64
 * live readers hold every slot). */
LARDER__HIDDEN int larder__cache_plan_register(struct larder__cache *cache,
                                               const struct larder__plan_params *params);
/* The reader of `slot` has consumed `consumed` of its own steps (one atomic store). */
LARDER__HIDDEN void larder__cache_plan_advance(struct larder__cache *cache, int slot,
                                               uint64_t consumed);
LARDER__HIDDEN void larder__cache_plan_unregister(struct larder__cache *cache, int slot);
/* The reader of `slot` stages `window` of its own steps ahead (its
 * prefetch window, at most 2^20): where the next epoch's head ends for
 * eviction (larder__nextuse_step). */
LARDER__HIDDEN void larder__cache_plan_set_window(struct larder__cache *cache, int slot,
                                                  uint32_t window);
/* The live, sane plans of this dataset (num_samples: its N), at most `max`. */
LARDER__HIDDEN int larder__cache_plans_live(struct larder__cache *cache, uint64_t num_samples,
                                            struct larder__cache_plan *out, int max);
LARDER__HIDDEN uint64_t larder__cache_plan_consumed(struct larder__cache *cache, int slot);
/* Bumped whenever a plan comes, goes or changes (0 without a registry). */
LARDER__HIDDEN uint64_t larder__cache_plans_generation(struct larder__cache *cache);

/* What next use needs of the dataset: its index and shard map (from the
 * fill engine, which owns them; NULL, NULL before it frees them). */
struct larder__shard_map;
LARDER__HIDDEN void larder__cache_set_layout(struct larder__cache *cache,
                                             const struct larder__index *ix,
                                             const struct larder__shard_map *map);
/*
 * Admission: whether blocks [first, last] of `shard` should be kept when
 * stored now.  False only when the cache is full, plans are known, and
 * every one of the blocks is next read later than every resident block
 * (it would be the next to go: read it through instead).  A use at a
 * reader's current step counts as to come: the reader (or its prefetcher,
 * racing it) may be reading the blocks now, and a block read through
 * there would be fetched twice.
 */
LARDER__HIDDEN bool larder__cache_admit(struct larder__cache *cache, uint32_t shard, uint64_t first,
                                        uint64_t last);
/* larder__cache_admit for each block of [first, last] alone, in one
 * decision (one take of the eviction lock): admit[i] for block first + i. */
LARDER__HIDDEN void larder__cache_admit_each(struct larder__cache *cache, uint32_t shard,
                                             uint64_t first, uint64_t last, bool *admit);
/* Steps until block `block` of `shard` is read next by a live plan of the
 * node (0: in the current step), or UINT64_MAX when none reads it in this
 * epoch or the next.  A use in the next epoch counts at
 * larder__nextuse_step (docs/cache.md).  For tests and the benchmark. */
LARDER__HIDDEN uint64_t larder__cache_next_use(struct larder__cache *cache, uint32_t shard,
                                               uint64_t block);
/* The key that places sample `id` in the next epoch for eviction
 * (splitmix64's output function of the id, docs/cache.md). */
LARDER__HIDDEN uint64_t larder__nextuse_spread(uint64_t id);
/* The steps of the next epoch that count at their own step for eviction
 * (its head): those a reader of `workers` DataLoader workers with a
 * prefetch window of `window` of its own steps reads or stages when the
 * epoch starts, workers * (window + 1); without a window (0: a reader
 * that did not say), the epoch's first eighth.  At least 1, at most steps. */
LARDER__HIDDEN uint64_t larder__nextuse_head(uint64_t steps, uint64_t workers, uint64_t window);
/* The step of an epoch of `steps` at which sample `id`, which that epoch
 * reads at `step`, counts for eviction while it is the next epoch: `step`
 * in its head (larder__nextuse_head), else the head's end plus the spread
 * key modulo the steps after it. */
LARDER__HIDDEN uint64_t larder__nextuse_step(uint64_t steps, uint64_t head, uint64_t step,
                                             uint64_t id);
/* The most a reader's prefetch window may hold, in bytes, so that what it
 * stages is not evicted before it is read: a share of the capacity (0: no limit). */
LARDER__HIDDEN uint64_t larder__cache_window_bytes(struct larder__cache *cache, int readers);
/* With LARDER_EVICT_TRACE, append what this process's eviction decisions
 * cost since it last did ("# pid P scans N scan_cpu_us U admits A
 * admit_wait_us W": candidate scans, their CPU, admission checks and the
 * time they waited for the eviction lock).  At a prefetcher's stop and at
 * close. */
LARDER__HIDDEN void larder__nextuse_trace_costs(struct larder__cache *cache);
/* Record a prefetcher's window, in its reader's steps, as registered
 * (LARDER_EVICT_TRACE: a "# window W workers K" line). */
LARDER__HIDDEN void larder__cache_trace_window(struct larder__cache *cache, uint64_t window,
                                               uint32_t workers);
/* Record that a reader's read of blocks [first, last] of `shard` missed
 * the cache (LARDER_EVICT_TRACE: a "# miss FIRST LAST" line). */
LARDER__HIDDEN void larder__cache_trace_miss(struct larder__cache *cache, uint32_t shard,
                                             uint64_t first, uint64_t last);
/* Record that a reader asks for blocks [first, last] of `shard` (LARDER_EVICT_TRACE). */
LARDER__HIDDEN void larder__cache_trace(struct larder__cache *cache, uint32_t shard, uint64_t first,
                                        uint64_t last);

#endif
