/*
 * fill_scope.c - the scope of one fill (fill_scope.h).
 */
#include "fill_scope.h"

/* A fill may read this much of the cache beyond what was asked to take in
 * the whole samples at its edges (so that their blocks can be checked and
 * trusted); a raw range cutting into a sample with more than
 * MAX_EXTRA_BYTES around it is refused rather than read whole
 * (docs/cache.md). */
#define EDGE_EXTENSION (1u << 20)
#define MAX_EXTRA_BYTES (UINT64_C(256) << 20)

/* A sample's offset and end, from a record the shard map has checked. */
static void sample_span(const struct larder__index *ix, uint64_t id, uint64_t *offset,
                        uint64_t *end)
{
    struct larder__sample s;
    larder__index_sample_range(ix, id, &s);
    *offset = s.offset;
    *end = s.offset + s.length;
}

/*
 * The samples overlapping bytes [lo, hi) of a shard (p->need_first and
 * need_last), which must be read whole and checked before any of those
 * bytes is served, and the bytes that takes: [*start, *end).  0, or
 * LARDER_EUNSUPPORTED when that is more than MAX_EXTRA_BYTES beyond what
 * was asked.  A shard with checksum blocks: the blocks instead, which
 * are at most 2^LARDER__MAX_SUM_SHIFT bytes each.
 */
int larder__fill_scope_needed(const struct larder__index *ix, const struct larder__block_sums *sums,
                              struct larder__shard_map *map, uint32_t shard, uint64_t lo,
                              uint64_t hi, struct larder__fill_scope *p, uint64_t *start,
                              uint64_t *end)
{
    p->by_block = larder__block_sums_of(sums, shard, &p->sums);
    if (p->by_block) {
        uint64_t unused;
        larder__sum_blocks_covering(&p->sums, lo, hi, &p->need_first, &p->need_last);
        larder__sum_block_span(&p->sums, p->need_first, start, &unused);
        larder__sum_block_span(&p->sums, p->need_last - 1, &unused, end);
        return 0;
    }
    larder__shard_map_overlapping(map, shard, lo, hi, &p->need_first, &p->need_last);
    *start = lo, *end = hi;
    if (p->need_first < p->need_last) { /* without overlaps, the first starts and the last ends */
        uint64_t a, z;
        sample_span(ix, larder__shard_map_id(map, p->need_first), &a, &z);
        if (a < *start) *start = a;
        sample_span(ix, larder__shard_map_id(map, p->need_last - 1), &a, &z);
        if (z > *end) *end = z;
    }
    if ((lo - *start) + (*end - hi) > MAX_EXTRA_BYTES)
        return larder__fail(LARDER_EUNSUPPORTED,
                            "bytes %llu+%llu of shard %u cut into a sample too large to check "
                            "for them (%llu bytes around them); read the sample itself",
                            (unsigned long long)lo, (unsigned long long)(hi - lo), shard,
                            (unsigned long long)(*end - *start));
    return 0;
}

int larder__fill_scope_make(const struct larder__index *ix, const struct larder__block_sums *sums,
                            struct larder__cache *c, struct larder__shard_map *map, uint32_t shard,
                            uint64_t lo, uint64_t hi, struct larder__fill_scope *p)
{
    uint64_t start, end;
    int rc = larder__fill_scope_needed(ix, sums, map, shard, lo, hi, p, &start, &end);
    if (rc < 0) return rc;
    /* the blocks these bytes fill, and the samples sharing them */
    uint64_t first, last;
    larder__cache_blocks(c, start, end - start, &first, &last);
    uint64_t block_start = larder__cache_block_offset(c, first);
    uint64_t block_end = block_start + larder__cache_span(c, shard, first, last);
    p->first = first, p->last = last;
    p->left_first = first, p->right_last = last;
    if (p->by_block) {
        /* both sizes are powers of two from byte 0: the larger's edges
         * are edges of the smaller, so these checksum blocks lie whole
         * inside the cache blocks read */
        larder__sum_blocks_covering(&p->sums, block_start, block_end, &p->check_first,
                                    &p->check_last);
        return 0;
    }
    larder__shard_map_overlapping(map, shard, block_start, block_end, &p->check_first,
                                  &p->check_last);
    /* samples straddling the edges are left out, but noted when their
     * other blocks are in the cache already and few: checking them then
     * costs a pread, and lets the shared edge blocks be trusted.  Fetching
     * them, or waiting for their locks, would widen every cold fill. */
    if (p->check_first < p->check_last &&
        (p->check_first < p->need_first || p->need_first == p->need_last)) {
        uint64_t a, z, bf, bl;
        sample_span(ix, larder__shard_map_id(map, p->check_first), &a, &z);
        if (a < block_start) {
            larder__cache_blocks(c, a, block_start - a, &bf, &bl);
            if (block_start - a <= EDGE_EXTENSION && larder__cache_present(c, shard, bf, bl))
                p->left_first = bf;
            p->check_first++;
        }
    }
    if (p->check_first < p->check_last) {
        uint64_t a, z, bf, bl;
        sample_span(ix, larder__shard_map_id(map, p->check_last - 1), &a, &z);
        bool needed = p->check_last == p->need_last && p->need_first < p->need_last;
        if (!needed && z > block_end) {
            larder__cache_blocks(c, block_end, z - block_end, &bf, &bl);
            if (z - block_end <= EDGE_EXTENSION && larder__cache_present(c, shard, bf, bl))
                p->right_last = bl;
            p->check_last--;
        }
    }
    if (p->check_first > p->check_last) p->check_first = p->check_last;
    return 0;
}

/* Take in the noted straddlers whose blocks no one else holds (see struct larder__fill_scope). */
void larder__fill_scope_take_in(struct larder__cache *c, uint32_t shard, int lock,
                                struct larder__fill_scope *p)
{
    if (p->left_first < p->first && p->check_first > 0 &&
        larder__cache_try_lock(c, lock, shard, p->left_first, p->first - 1))
        p->check_first--, p->first = p->left_first;
    if (p->right_last > p->last &&
        larder__cache_try_lock(c, lock, shard, p->last + 1, p->right_last))
        p->check_last++, p->last = p->right_last;
}

/*
 * Check the samples of a fill against their checksums.  ok[] (one per
 * sample of the scope's checked range) says which matched; returns the
 * first needed sample that did not (as an id), or UINT64_MAX.
 */
uint64_t larder__fill_scope_check(const struct larder__index *ix, struct larder__shard_map *map,
                                  const struct larder__fill_scope *p, const uint8_t *span,
                                  uint64_t span_start, bool *ok)
{
    uint64_t bad_needed = UINT64_MAX;
    if (p->by_block) {
        for (uint64_t q = p->check_first; q < p->check_last; q++) {
            uint64_t start, end;
            larder__sum_block_span(&p->sums, q, &start, &end);
            ok[q - p->check_first] =
                larder__sum_block_ok(ix, &p->sums, q, span + (start - span_start));
            if (!ok[q - p->check_first] && q >= p->need_first && q < p->need_last &&
                bad_needed == UINT64_MAX)
                bad_needed = q;
        }
        return bad_needed;
    }
    for (uint64_t q = p->check_first; q < p->check_last; q++) {
        uint64_t id = larder__shard_map_id(map, q);
        struct larder__sample s;
        larder__index_sample_range(ix, id, &s);
        ok[q - p->check_first] = larder__checksum_ok(ix, &s, span + (s.offset - span_start));
        if (!ok[q - p->check_first] && q >= p->need_first && q < p->need_last &&
            bad_needed == UINT64_MAX)
            bad_needed = id;
    }
    return bad_needed;
}

/*
 * Which blocks of the fill may be kept: trusted, those whose every sample
 * byte was checked and matched; suspect, those shared with a sample the
 * fill did not check (a later fill checks them without fetching them
 * again); none that hold bytes of a sample that failed.  Bytes of no
 * sample (a tar's end blocks) have no checksum to check and no reader to
 * mislead.  keep[] is per block.
 */
void larder__fill_scope_keepable(const struct larder__index *ix, struct larder__cache *c,
                                 struct larder__shard_map *map, uint32_t shard,
                                 const struct larder__fill_scope *p, const bool *ok, uint8_t *keep)
{
    uint64_t n = p->last - p->first + 1;
    for (uint64_t i = 0; i < n; i++)
        keep[i] = LARDER__KEEP_CHECKED;
    if (p->by_block) { /* a block is kept when every checksum block it touches matched */
        for (uint64_t q = p->check_first; q < p->check_last; q++) {
            if (ok[q - p->check_first]) continue;
            uint64_t a, z, first, last;
            larder__sum_block_span(&p->sums, q, &a, &z);
            if (z == a) continue;
            larder__cache_blocks(c, a, z - a, &first, &last);
            for (uint64_t b = first < p->first ? p->first : first; b <= last && b <= p->last; b++)
                keep[b - p->first] = LARDER__DISCARD;
        }
        return;
    }
    uint64_t start = larder__cache_block_offset(c, p->first);
    uint64_t end = start + larder__cache_span(c, shard, p->first, p->last);
    uint64_t from, to;
    larder__shard_map_overlapping(map, shard, start, end, &from, &to);
    for (uint64_t q = from; q < to; q++) {
        bool checked = q >= p->check_first && q < p->check_last;
        if (checked && ok[q - p->check_first]) continue;
        uint64_t a, z, first, last;
        sample_span(ix, larder__shard_map_id(map, q), &a, &z);
        if (z == a) continue;
        larder__cache_blocks(c, a, z - a, &first, &last);
        for (uint64_t b = first < p->first ? p->first : first; b <= last && b <= p->last; b++)
            if (keep[b - p->first] != LARDER__DISCARD)
                keep[b - p->first] = checked ? LARDER__DISCARD : LARDER__KEEP_SUSPECT;
    }
}

uint64_t larder__fill_scope_piece_end(const struct larder__block_sums *sums,
                                      const struct larder__sample *s, uint64_t lo)
{
    /* a multiple of every checksum block size */
    const uint64_t piece = UINT64_C(1) << LARDER__MAX_SUM_SHIFT;
    struct larder__shard_sums shard;
    uint64_t end = s->offset + s->length;
    if (!larder__block_sums_of(sums, s->shard, &shard) || end - lo <= piece) return end;
    return (lo & ~(piece - 1)) + piece;
}

int larder__fill_scope_block_failure(const struct larder__index *ix, uint32_t shard,
                                     const struct larder__fill_scope *p, uint64_t block,
                                     const uint8_t *span, uint64_t span_start)
{
    uint64_t start, end;
    larder__sum_block_span(&p->sums, block, &start, &end);
    struct larder__shard info;
    const char *name = larder__index_shard(ix, shard, &info) == 0 ? info.name : "?";
    return larder__fail(
        LARDER_ECHECKSUM,
        "shard %u ('%s'), checksum block %llu (bytes %llu+%llu): checksum "
        "%016llx, index says %016llx",
        shard, name, (unsigned long long)block, (unsigned long long)start,
        (unsigned long long)(end - start),
        (unsigned long long)XXH3_64bits(span + (start - span_start), (size_t)(end - start)),
        (unsigned long long)larder__index_block_sum(ix, p->sums.first + block));
}
