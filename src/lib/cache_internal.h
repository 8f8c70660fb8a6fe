/*
 * cache_internal.h - what the cache's files (cache.c, cache_evict.c,
 * cache_stats.c) share: the layout of the shared `blocks` file, the
 * handle, and the atomic bitmap helpers.  Private to them; everyone else
 * goes through cache.h, where the design is.
 */
#ifndef LARDER_CACHE_INTERNAL_H
#define LARDER_CACHE_INTERNAL_H

#include "cache.h"

#include <pthread.h>

#define LARDER__CACHE_MAGIC "LARDERCB"
/* 2: a third bitmap, of borrowed blocks; 3: suspect blocks, boot id;
 * 4: pinned blocks (hints with a TTL, cache_pin.c) */
#define LARDER__CACHE_VERSION 4
#define LARDER__CACHE_FILE_MODE 0640 /* cache files: never world-readable (docs/security.md) */
#define LARDER__CACHE_HEADER_SIZE 4096

/* The start of the shared `blocks` file. */
struct shared_header {
    char magic[8];
    uint32_t version;
    uint32_t block_size;
    uint64_t id_low, id_high;
    uint64_t num_shards;
    uint64_t total_blocks;
    uint64_t total_bytes;
    uint64_t resident_blocks; /* atomic */
    uint64_t clock_hand;      /* atomic: next block the eviction clock looks at */
    uint64_t capacity;        /* bytes, 0 unlimited; the last opener's setting */
    uint64_t generation;      /* atomic: bumped whenever cached bytes may have changed
                               * under a reader (eviction, damage found, repair) */
    uint64_t borrowed_blocks; /* atomic: resident blocks that came from another node */
    char boot_id[40];         /* the boot whose writes the resident bits trust (see suspect) */
    uint64_t pinned_blocks;   /* atomic: blocks with the pinned bit set */
    int64_t pin_expiry_ms;    /* atomic: CLOCK_REALTIME ms until which pinned bits hold */
    uint64_t reserved[2];
    struct larder__cache_counters counters; /* atomic */
};

_Static_assert(sizeof(struct shared_header) <= LARDER__CACHE_HEADER_SIZE, "header fits its page");

/* One dataset's cache as one process holds it (cache.h says what it is). */
struct larder__cache {
    char *dir; /* DIR/<dataset id> */
    char *locks_path;
    uint32_t block_size;
    unsigned block_shift;
    uint64_t num_shards;
    uint64_t *shard_base; /* first global block of each shard, plus the total */
    uint64_t *shard_size;
    struct shared_header *header;
    uint64_t *resident, *referenced; /* bitmaps in the mapping */
    uint64_t *borrowed;              /* resident blocks borrowed from the shard's owner node */
    /* Resident blocks not trusted until a fill checks them again: those
     * the cache held when the machine last went down.  A resident bit is
     * set after its data is written, but nothing orders the two on the
     * way to disk, so after a power loss a set bit may stand over a hole
     * or stale bytes. */
    uint64_t *suspect;
    /* Blocks a hint pinned (cache_pin.c): never evicted while the
     * header's pin_expiry_ms is in the future. */
    uint64_t *pinned;
    uint64_t borrow_capacity; /* bytes of borrowed blocks kept; 0: no own limit */
    size_t map_size;
    pthread_mutex_t lock; /* guards data_fds[] and retired[] */
    int *data_fds;
    int *retired; /* descriptors of data files deleted underneath, closed at the end */
    size_t num_retired, cap_retired;
    bool warned_full;
    pthread_mutex_t evict_lock;
    /* Eviction by next use (cache_plans.c, cache_nextuse.c). */
    struct plans_file *plans;        /* DIR/plans, mapped on first use (c->lock) */
    bool evict_clock;                /* LARDER_EVICT=clock: the clock even with plans */
    int trace_fd;                    /* LARDER_EVICT_TRACE, or -1 */
    struct larder__nextuse *nextuse; /* under evict_lock */
    struct larder__share *share;     /* LARDER_NODE_CACHE_SIZE (cache_share.c); evict_lock */
};

/* The bitmaps are shared by every process of the node: bits change
 * atomically, one at a time. */
static inline uint64_t atomic_load64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline bool bit_get(const uint64_t *bits, uint64_t i)
{
    return (atomic_load64(&bits[i / 64]) >> (i % 64)) & 1;
}

static inline uint64_t clear_bits(uint64_t *bits, uint64_t from, uint64_t to)
{
    uint64_t cleared = 0;
    for (uint64_t b = from; b <= to; b++) {
        uint64_t mask = UINT64_C(1) << (b % 64);
        uint64_t old = __atomic_fetch_and(&bits[b / 64], ~mask, __ATOMIC_ACQ_REL);
        if (old & mask) cleared++;
    }
    return cleared;
}

/* Whether the pinned bits hold at `now_ms` (CLOCK_REALTIME ms): false
 * once the latest pin's time is up, whoever set them. */
static inline bool pins_hold(const struct larder__cache *c, int64_t now_ms)
{
    return __atomic_load_n(&c->header->pin_expiry_ms, __ATOMIC_ACQUIRE) > now_ms;
}

/* Readers' trust in the cached bytes may be stale: bump the generation. */
static inline void disturbed(struct larder__cache *c)
{
    __atomic_fetch_add(&c->header->generation, 1, __ATOMIC_ACQ_REL);
}

/* Blocks claimed for eviction under evict_lock (their bits cleared, their
 * fill locks held) whose holes are punched after it is released, so that
 * a trim's disk work does not hold up every other thread's admission and
 * eviction decisions (cache_evict.c). */
#define LARDER__EVICT_BATCH 256
struct larder__evict_batch {
    size_t count;
    uint64_t blocks[LARDER__EVICT_BATCH];
};

/* Next use (cache_nextuse.c): pick and evict by it; false when there is
 * no live plan (the caller runs the clock).  Call with evict_lock held (a
 * candidate scan releases it while it runs: other decisions go on);
 * the evicted blocks are claimed into `batch` (NULL: evicted at once). */
LARDER__HIDDEN bool larder__nextuse_trim(struct larder__cache *c, int lock_fd, uint64_t limit,
                                         bool pins, struct larder__evict_batch *batch);
LARDER__HIDDEN void larder__nextuse_free(struct larder__nextuse *n);
LARDER__HIDDEN void larder__cache_plans_detach(struct larder__cache *c);
/* The resident block next use would evict next (its weighed use in *use),
 * or UINT64_MAX (no live plan, nothing left); and evicting it.  Call with
 * evict_lock held (released while a candidate scan runs). */
LARDER__HIDDEN uint64_t larder__nextuse_farthest(struct larder__cache *c, bool pins, uint64_t *use);
LARDER__HIDDEN bool larder__nextuse_evict_farthest(struct larder__cache *c, int lock_fd,
                                                   uint64_t block);
/* Pick candidates again when due (and publish them, with a node capacity).
 * Call with evict_lock held (released while the scan runs). */
LARDER__HIDDEN void larder__nextuse_refresh(struct larder__cache *c, bool pins);

/* A claim of a slot in a shared file (the plan registry, node-share), as
 * one state word: 1 in the low two bits, this process's pid in bits 2-23,
 * the time (CLOCK_REALTIME seconds) from bit 24 (cache_plans.c).  A claim
 * is abandoned when its process is gone, or it is older than 10 s or
 * dated in the future: then anyone may take the slot. */
LARDER__HIDDEN uint64_t larder__claim_word(void);
LARDER__HIDDEN bool larder__claim_abandoned(uint64_t word);

/* One capacity for the datasets of a cache directory (cache_share.c). */
#define LARDER__SHARE_VICTIMS 128
LARDER__HIDDEN void larder__share_open(struct larder__cache *c, const char *root, uint64_t id_low,
                                       uint64_t id_high);
LARDER__HIDDEN void larder__share_close(struct larder__share *share);
/* Publish the blocks this dataset would drop first, farthest first. */
LARDER__HIDDEN void larder__share_publish(struct larder__cache *c, const uint64_t *blocks,
                                          const uint64_t *uses, size_t count);
/* Whether the node's datasets would hold more than its capacity with
 * more_bytes more; and the farthest next use another dataset published. */
LARDER__HIDDEN bool larder__share_over(struct larder__cache *c, uint64_t more_bytes);
LARDER__HIDDEN bool larder__share_farthest(struct larder__cache *c, uint64_t *use);
/* Evict (here or in another dataset) until the node is within its capacity. */
LARDER__HIDDEN void larder__share_trim(struct larder__cache *c, int lock_fd, bool pins);

/* Evict block b (global) unless its fill lock is held; true when it did. */
LARDER__HIDDEN bool larder__cache_evict_one(struct larder__cache *c, int lock_fd, uint64_t b);
/* The same, but with `batch` (not full) only claimed: its bits cleared and
 * its fill lock kept; larder__cache_evict_finish punches the holes and
 * releases the locks (call it with the same lock_fd, after evict_lock). */
LARDER__HIDDEN bool larder__cache_evict_claim(struct larder__cache *c, int lock_fd, uint64_t b,
                                              struct larder__evict_batch *batch);
LARDER__HIDDEN void larder__cache_evict_finish(struct larder__cache *c, int lock_fd,
                                               struct larder__evict_batch *batch);
/* Shard of a global block number. */
/* Whether the bytes up to `end` mapped from placed_fd (cache_inplace.c)
 * are in data file fd: 1 the same live file, 0 another (placed_fd's bytes
 * are readable: copy them), -ESTALE placed_fd was cut short of them.
 * fd -1: only whether placed_fd still holds them (0 or -ESTALE). */
LARDER__HIDDEN int larder__cache_placed_in(int fd, int placed_fd, uint64_t end);
LARDER__HIDDEN uint32_t larder__cache_shard_of(const struct larder__cache *c, uint64_t global);

#endif
