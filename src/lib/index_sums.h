/*
 * index_sums.h - per-block checksums (index version 3, docs/format.md):
 * a shard may carry, besides its whole checksum and its samples', one
 * XXH3-64 per checksum block of 2^shift bytes, so that a range of a
 * large file is checked by reading only the checksum blocks covering it.
 * The index's block checksum table holds the shards' entries one shard
 * after another; where a shard's start is a prefix sum over the shard
 * table, computed once here (the parser allocates nothing).  A reader
 * of an index without block sums gets NULL and pays nothing.
 */
#ifndef LARDER_INDEX_SUMS_H
#define LARDER_INDEX_SUMS_H

#include "index.h"

struct larder__block_sums;

/* One shard's checksum blocks: entries [first, first + count) of the table. */
struct larder__shard_sums {
    uint64_t first, count;
    uint32_t shift;      /* blocks of 2^shift bytes from the shard's byte 0 */
    uint64_t shard_size; /* the last block ends here */
};

/*
 * Where each shard's block sums start, for a parsed index that must
 * outlive the result.  *out is NULL when the index has none.  0 or
 * -ENOMEM.
 */
LARDER__HIDDEN int larder__block_sums_new(struct larder__block_sums **out,
                                          const struct larder__index *ix);
/* Accepts NULL. */
LARDER__HIDDEN void larder__block_sums_free(struct larder__block_sums *sums);
/* Shard `shard`'s checksum blocks into *out; false when it has none (or `sums` is NULL). */
LARDER__HIDDEN bool larder__block_sums_of(const struct larder__block_sums *sums, uint32_t shard,
                                          struct larder__shard_sums *out);

/* Bytes [*start, *end) of checksum block `block` of the shard. */
static inline void larder__sum_block_span(const struct larder__shard_sums *s, uint64_t block,
                                          uint64_t *start, uint64_t *end)
{
    *start = block << s->shift;
    *end = *start + (UINT64_C(1) << s->shift);
    if (*end > s->shard_size) *end = s->shard_size;
}

/* The checksum blocks overlapping bytes [lo, hi) (hi > lo): [*first, *last). */
static inline void larder__sum_blocks_covering(const struct larder__shard_sums *s, uint64_t lo,
                                               uint64_t hi, uint64_t *first, uint64_t *last)
{
    *first = lo >> s->shift;
    *last = ((hi - 1) >> s->shift) + 1;
}

/*
 * Whether `data` (the bytes of checksum block `block`, whose length
 * larder__sum_block_span gives) matches the index.
 */
LARDER__HIDDEN bool larder__sum_block_ok(const struct larder__index *ix,
                                         const struct larder__shard_sums *s, uint64_t block,
                                         const void *data);

#endif
