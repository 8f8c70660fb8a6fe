/*
 * fill_raw.c - raw ranges, what a daemon serves (fill.h): bytes of a
 * shard rather than a sample, every sample they touch read whole and
 * checked first (through the cache when there is one), what a fill of
 * them would read (for a daemon borrowing it from the owners first), and
 * staging for a zero-copy send from the cache file.
 */
#include "fill_internal.h"

#include <errno.h>
#include <stdlib.h>

/* A raw range request (a daemon's client asks for it): inside one shard, not empty. */
static int check_range(const struct larder__fill *f, uint32_t shard, uint64_t offset,
                       uint64_t length)
{
    uint64_t end;
    if (shard >= f->ix->num_shards || length == 0 || !larder__add_ok(offset, length, &end) ||
        end > larder__index_shard_size(f->ix, shard))
        return larder__fail(LARDER_EUSAGE, "bytes %llu+%llu are not inside shard %u",
                            (unsigned long long)offset, (unsigned long long)length, shard);
    return 0;
}

int larder__fill_range(struct larder__fill *f, uint32_t shard, uint64_t offset, uint64_t length,
                       void *buf)
{
    return larder__fill_range_at(f, shard, offset, length, LARDER__DEMAND, buf);
}

int larder__fill_range_at(struct larder__fill *f, uint32_t shard, uint64_t offset, uint64_t length,
                          int priority, void *buf)
{
    int rc = check_range(f, shard, offset, length);
    if (rc < 0) return rc;
    if (f->cache) {
        uint64_t first, last;
        larder__cache_blocks(f->cache, offset, length, &first, &last);
        if (!buf) /* staging: into the cache, and no copy out (nor a buffer to take it) */
            return larder__cache_resident(f->cache, shard, first, last)
                       ? 0
                       : larder__fill_through_cache(f, shard, offset, offset + length, NULL, false,
                                                    priority);
        /* resident blocks were checked when they were kept; no lock, so
         * an eviction (and a refill) racing the read must be seen: every
         * eviction moves the generation before it punches its hole */
        uint64_t generation = larder__cache_generation(f->cache);
        if (larder__cache_resident(f->cache, shard, first, last) &&
            larder__cache_pread(f->cache, shard, buf, (size_t)length, offset) == 0 &&
            larder__cache_generation(f->cache) == generation &&
            larder__cache_resident(f->cache, shard, first, last))
            return 0;
        return larder__fill_through_cache(f, shard, offset, offset + length, buf, false, priority);
    }
    if (!buf) return larder__fail(LARDER_EUSAGE, "staging needs a node cache");
    /* no cache: read the samples these bytes belong to, and check them */
    struct larder__shard_map *map;
    struct larder__fill_scope p;
    if ((rc = larder__fill_shard_map(f, &map)) < 0) return rc;
    uint64_t start, end;
    if ((rc = larder__fill_scope_needed(f->ix, f->sums, map, shard, offset, offset + length, &p,
                                        &start, &end)) < 0)
        return rc;
    p.check_first = p.need_first, p.check_last = p.need_last;
    uint8_t *span = start == offset && end == offset + length ? buf : malloc((size_t)(end - start));
    bool *ok = calloc(p.need_last - p.need_first + 1, sizeof *ok);
    struct larder__extent run = {span, start, (size_t)(end - start)};
    rc = span && ok ? larder__fill_fetch_runs(f, shard, &run, 1, false, priority) : -ENOMEM;
    if (rc > 0) rc = 0; /* from a peer */
    uint64_t bad = rc == 0 ? larder__fill_scope_check(f->ix, map, &p, span, start, ok) : UINT64_MAX;
    if (rc == 0 && bad != UINT64_MAX)
        rc = p.by_block ? larder__fill_scope_block_failure(f->ix, shard, &p, bad, span, start)
                        : larder__fill_checksum_failure(f, bad, span, start);
    if (rc == 0 && span != buf) memcpy(buf, span + (offset - start), (size_t)length);
    if (span != buf) free(span);
    free(ok);
    return rc;
}

int larder__fill_range_scope(struct larder__fill *f, uint32_t shard, uint64_t offset,
                             uint64_t length, uint64_t *lo, uint64_t *hi)
{
    int rc = check_range(f, shard, offset, length);
    if (rc < 0) return rc;
    struct larder__shard_map *map;
    if ((rc = larder__fill_shard_map(f, &map)) < 0) return rc;
    struct larder__fill_scope p;
    if (!f->cache) /* the samples the bytes belong to, read whole */
        return larder__fill_scope_needed(f->ix, f->sums, map, shard, offset, offset + length, &p,
                                         lo, hi);
    uint64_t first, last;
    larder__cache_blocks(f->cache, offset, length, &first, &last);
    if (larder__cache_resident(f->cache, shard, first, last)) return 1;
    if ((rc = larder__fill_scope_make(f->ix, f->sums, f->cache, map, shard, offset, offset + length,
                                      &p)) < 0)
        return rc;
    *lo = larder__cache_block_offset(f->cache, p.first);
    *hi = *lo + larder__cache_span(f->cache, shard, p.first, p.last);
    return 0;
}

int larder__fill_stage_range(struct larder__fill *f, uint32_t shard, uint64_t offset,
                             uint64_t length, int *fd)
{
    return larder__fill_stage_range_at(f, shard, offset, length, LARDER__DEMAND, fd);
}

int larder__fill_stage_range_at(struct larder__fill *f, uint32_t shard, uint64_t offset,
                                uint64_t length, int priority, int *fd)
{
    /* sendfile hands the socket references to page-cache pages that are
     * read when the bytes go out, after sendfile has returned: an
     * eviction's hole punched then reaches the client as zeros (seen in
     * tests/cli/daemon.sh).  Holding a lock on the blocks until the client
     * has taken them would let a slow client stall every fill of them.
     * So zero-copy only from a cache that evicts nothing, node-wide (the
     * capacity is in the shared header: a reader that sets one turns it
     * off here too). */
    if (!f->cache || larder__cache_evicts(f->cache)) return 1;
    int rc = larder__fill_range_at(f, shard, offset, length, priority, NULL); /* staged */
    if (rc < 0) return rc;
    uint64_t first, last;
    larder__cache_blocks(f->cache, offset, length, &first, &last);
    /* not kept (a full disk, or suspect neighbours): send a copy */
    if (!larder__cache_resident(f->cache, shard, first, last)) return 1;
    return (*fd = larder__cache_data_fd(f->cache, shard)) < 0 ? 1 : 0;
}

int larder__fill_resident_fd(struct larder__fill *f, uint32_t shard, uint64_t offset,
                             uint64_t length, int *fd)
{
    /* what stage_range_at would answer 0 to with no fill, and no more:
     * a caller that may not wait (UCX's progress thread) calls this */
    if (!f->cache || larder__cache_evicts(f->cache)) return 1;
    uint64_t end;
    if (shard >= f->ix->num_shards || length == 0 || !larder__add_ok(offset, length, &end) ||
        end > larder__index_shard_size(f->ix, shard))
        return 1; /* the waiting path says what is wrong with it */
    uint64_t first, last;
    larder__cache_blocks(f->cache, offset, length, &first, &last);
    if (!larder__cache_resident(f->cache, shard, first, last)) return 1;
    return (*fd = larder__cache_data_fd(f->cache, shard)) < 0 ? 1 : 0;
}
