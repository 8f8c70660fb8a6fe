/*
 * shardmap.h - the samples of each shard in offset order, and the whole
 * index checked once.
 *
 * Fills verify every byte they stage against the checksums of the samples
 * those bytes belong to, so the fill engine must find, for a byte range of
 * a shard, the samples that overlap it.  The map answers that in
 * O(log samples of the shard).  Building it checks every sample record
 * (range inside its shard) and that no two samples of a shard overlap; an
 * index written by larder lists its samples shard by shard in offset
 * order, so the map is then the identity and costs one pass and one array
 * per shard, otherwise the ids are sorted once.
 *
 * larder__index_validate goes further (every field record and every key)
 * for openers that must know an index is sound before serving any of it:
 * the node daemon, `larder inspect`.
 */
#ifndef LARDER_SHARDMAP_H
#define LARDER_SHARDMAP_H

#include "index.h"

struct larder__shard_map;

/*
 * Check every sample record of `ix` and build its map.  Returns 0, or
 * LARDER_EBADINDEX naming the first bad record or overlapping pair, or
 * -ENOMEM.  The map refers to `ix`, which must outlive it.
 */
LARDER__HIDDEN int larder__shard_map_new(struct larder__shard_map **out,
                                         const struct larder__index *ix);
LARDER__HIDDEN void larder__shard_map_free(struct larder__shard_map *map);

/*
 * Samples of `shard` overlapping bytes [start, end), in offset order:
 * positions [*first, *last) for larder__shard_map_id.
 */
LARDER__HIDDEN void larder__shard_map_overlapping(const struct larder__shard_map *map,
                                                  uint32_t shard, uint64_t start, uint64_t end,
                                                  uint64_t *first, uint64_t *last);
/* The sample id at a position of the map. */
LARDER__HIDDEN uint64_t larder__shard_map_id(const struct larder__shard_map *map,
                                             uint64_t position);

/*
 * Check all of `ix`: the shard map's checks, every field record, and that
 * every key leads back to its own sample through the key table (so no
 * key is duplicated or unreachable).  0 or the first problem's code with
 * a message naming it.  O(samples + fields), plus a sort when samples are
 * out of offset order.
 */
LARDER__HIDDEN int larder__index_validate(const struct larder__index *ix);

#endif
