/*
 * dataset.h - what other liblarder modules need of a dataset handle
 * beyond the public API (the prefetcher, for now).
 */
#ifndef LARDER_DATASET_H
#define LARDER_DATASET_H

#include "common.h"

struct larder__pool;

/* Whether the dataset reads through a node cache. */
LARDER_HIDDEN bool larder__dataset_cached(const larder_dataset *dataset);
/* Whether all blocks of sample `id` are in the cache (false without one). */
LARDER_HIDDEN bool larder__dataset_staged(const larder_dataset *dataset, uint64_t id);
/* Bring sample `id` into the cache, checked, without handing it to anyone. */
LARDER_HIDDEN int larder__dataset_stage(larder_dataset *dataset, uint64_t id);
/* The dataset's worker pool, made on first use. */
LARDER_HIDDEN int larder__dataset_pool_get(larder_dataset *dataset, struct larder__pool **pool);
LARDER_HIDDEN struct larder__pool *larder__dataset_pool(larder_dataset *dataset);
/* Origin requests in flight the dataset allows (its pool's size). */
LARDER_HIDDEN int larder__dataset_inflight(const larder_dataset *dataset);

/* ---- for the node daemon ------------------------------------------------- */

/*
 * A source of shard bytes tried before the origin (the daemon's peers):
 * returns 0 when it filled buf, LARDER__NOT_MINE when the origin should be
 * read instead (this node owns the shard, or its owner is down), or a
 * negative code (the origin is then read instead, too).
 */
#define LARDER__NOT_MINE 1
typedef int (*larder__peer_fetch_fn)(void *context, const larder_dataset *dataset, uint32_t shard,
                                     uint64_t offset, uint64_t length, void *buf);
LARDER_HIDDEN void larder__dataset_set_peer_fetch(larder_dataset *dataset,
                                                  larder__peer_fetch_fn fetch, void *context);
/* The dataset's id and shard geometry, for checking requests. */
LARDER_HIDDEN void larder__dataset_id(const larder_dataset *dataset, uint64_t *low, uint64_t *high);
LARDER_HIDDEN uint32_t larder__dataset_num_shards(const larder_dataset *dataset);
LARDER_HIDDEN uint64_t larder__dataset_shard_size(const larder_dataset *dataset, uint32_t shard);
/*
 * Bytes [offset, offset + length) of a shard, through the cache when there
 * is one: the blocks covering them are staged (from peers or the origin,
 * under the fill lock) and the bytes copied out.  Every sample those bytes
 * belong to is read whole and checked first, so raw ranges are as
 * trustworthy as samples (bytes of no sample, such as a tar's end blocks,
 * have nothing to check).  A range cutting into a sample of more than
 * 256 MiB around it is refused (LARDER_EUNSUPPORTED).
 */
LARDER_HIDDEN int larder__dataset_read_range(larder_dataset *dataset, uint32_t shard,
                                             uint64_t offset, uint64_t length, void *buf);
/*
 * Stage the same range in the cache without copying it out, for sending
 * straight from the data file: 0 and the file's descriptor in *fd (valid
 * while the dataset is open) when every block is resident and trusted
 * now and the node's cache evicts nothing (so nothing can punch a hole
 * under bytes the socket has yet to read); 1 when that cannot be (no
 * cache, a cache that evicts, a full disk: use larder__dataset_read_range);
 * or a negative code.
 */
LARDER_HIDDEN int larder__dataset_stage_range(larder_dataset *dataset, uint32_t shard,
                                              uint64_t offset, uint64_t length, int *fd);

#endif
