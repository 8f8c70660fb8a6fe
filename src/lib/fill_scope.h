/*
 * fill_scope.h - the scope of one fill (fill.c): which samples a range
 * belongs to and must be read whole and checked before any of its bytes
 * is served, which blocks that reads, which neighbours it takes in, and
 * which of the blocks read may be kept (trusted or suspect).  Decisions
 * only: the fill engine does the reading, checking and storing.
 */
#ifndef LARDER_FILL_SCOPE_H
#define LARDER_FILL_SCOPE_H

#include "cache.h"
#include "index.h"
#include "index_sums.h"
#include "shardmap.h"

#include "hash.h"

/* Whether `data` holds sample s's bytes (its checksum matches; always, in an
 * index marked unchecked: a listing-only index has no checksums). */
static inline bool larder__checksum_ok(const struct larder__index *ix,
                                       const struct larder__sample *s, const void *data)
{
    return ix->unchecked || XXH3_64bits(data, (size_t)s->length) == s->checksum;
}

/*
 * What a fill reads and checks: the samples overlapping what was asked
 * (which must be checked, or nothing is served), and those overlapping
 * the blocks around it (checked when cheap, so that their blocks can be
 * kept).  Positions are the shard map's.
 */
struct larder__fill_scope {
    bool by_block;                    /* checked by checksum blocks: the counts below are theirs */
    struct larder__shard_sums sums;   /* by_block: the shard's checksum blocks */
    uint64_t need_first, need_last;   /* samples overlapping [lo, hi): [first, last) */
    uint64_t check_first, check_last; /* every sample checked: [first, last) */
    uint64_t first, last;             /* blocks read */
    /* straddling samples that may be taken in (their other blocks are in
     * the cache already), if their blocks' locks are free: the blocks they
     * add, below first and above last; none when left_first == first /
     * right_last == last */
    uint64_t left_first, right_last;
};

/* What becomes of each block a fill read. */
enum larder__keep { LARDER__KEEP_CHECKED = 0, LARDER__KEEP_SUSPECT, LARDER__DISCARD };

/*
 * The samples overlapping bytes [lo, hi) of a shard (p->need_first and
 * need_last), which must be read whole and checked before any of those
 * bytes is served, and the bytes that takes: [*start, *end).  0, or
 * LARDER_EUNSUPPORTED when that is more than MAX_EXTRA_BYTES beyond what
 * was asked.  When `sums` (may be NULL) has the shard's checksum blocks,
 * the checksum blocks overlapping [lo, hi) instead (p->by_block).
 */
LARDER__HIDDEN int larder__fill_scope_needed(const struct larder__index *ix,
                                             const struct larder__block_sums *sums,
                                             struct larder__shard_map *map, uint32_t shard,
                                             uint64_t lo, uint64_t hi, struct larder__fill_scope *p,
                                             uint64_t *start, uint64_t *end);

/*
 * The scope of a fill of bytes [lo, hi) of `shard` through the cache:
 * the needed samples (as larder__fill_scope_needed), the blocks they
 * cover, the samples sharing those blocks (checked too, so that the
 * blocks can be trusted), and the straddlers that may be taken in; for a
 * shard with checksum blocks, those covering [lo, hi) and every one the
 * cache blocks they fill touch.
 */
LARDER__HIDDEN int larder__fill_scope_make(const struct larder__index *ix,
                                           const struct larder__block_sums *sums,
                                           struct larder__cache *c, struct larder__shard_map *map,
                                           uint32_t shard, uint64_t lo, uint64_t hi,
                                           struct larder__fill_scope *p);

/* Take in the noted straddlers whose blocks no one else holds (see struct larder__fill_scope). */
LARDER__HIDDEN void larder__fill_scope_take_in(struct larder__cache *c, uint32_t shard, int lock,
                                               struct larder__fill_scope *p);

/*
 * Check the samples of a fill against their checksums.  ok[] (one per
 * sample of the scope's checked range) says which matched; returns the
 * first needed sample that did not (as an id), or UINT64_MAX.  By block:
 * one per checksum block, and the first needed block that did not match.
 */
LARDER__HIDDEN uint64_t larder__fill_scope_check(const struct larder__index *ix,
                                                 struct larder__shard_map *map,
                                                 const struct larder__fill_scope *p,
                                                 const uint8_t *span, uint64_t span_start,
                                                 bool *ok);

/*
 * Which blocks of the fill may be kept: trusted, those whose every sample
 * byte was checked and matched; suspect, those shared with a sample the
 * fill did not check (a later fill checks them without fetching them
 * again); none that hold bytes of a sample that failed.  Bytes of no
 * sample (a tar's end blocks) have no checksum to check and no reader to
 * mislead.  keep[] is per block.
 */
LARDER__HIDDEN void larder__fill_scope_keepable(const struct larder__index *ix,
                                                struct larder__cache *c,
                                                struct larder__shard_map *map, uint32_t shard,
                                                const struct larder__fill_scope *p, const bool *ok,
                                                uint8_t *keep);

/*
 * Where a fill of sample `s`'s bytes from `lo` on stops: the sample's end,
 * or, in a shard checked by checksum block, the next 64 MiB boundary, so
 * that a whole large file is filled a piece at a time, never held twice
 * in memory.
 */
LARDER__HIDDEN uint64_t larder__fill_scope_piece_end(const struct larder__block_sums *sums,
                                                     const struct larder__sample *s, uint64_t lo);

/*
 * LARDER_ECHECKSUM for checksum block `block` of a by_block scope (as
 * larder__fill_scope_check returned it), naming the shard and the bytes;
 * span holds the block's bytes from span_start on.
 */
LARDER__HIDDEN int larder__fill_scope_block_failure(const struct larder__index *ix, uint32_t shard,
                                                    const struct larder__fill_scope *p,
                                                    uint64_t block, const uint8_t *span,
                                                    uint64_t span_start);

#endif
