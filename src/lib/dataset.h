/*
 * dataset.h - what other liblarder modules (the prefetcher) and the node
 * daemon need of a dataset handle beyond the public API.
 */
#ifndef LARDER_DATASET_H
#define LARDER_DATASET_H

#include "common.h"

struct larder__fill;
struct larder__index;
struct larder__pool;

/* The dataset's parsed index and its read engine. */
LARDER__HIDDEN const struct larder__index *larder__dataset_index(const larder_dataset *dataset);
LARDER__HIDDEN struct larder__fill *larder__dataset_fill(larder_dataset *dataset);

/* Whether the dataset reads through a node cache. */
LARDER__HIDDEN bool larder__dataset_cached(const larder_dataset *dataset);
/* The dataset's node cache (valid while it is open), or NULL: none. */
struct larder__cache;
LARDER__HIDDEN struct larder__cache *larder__dataset_cache(larder_dataset *dataset);
/* Whether all blocks of sample `id` are in the cache (false without one). */
LARDER__HIDDEN bool larder__dataset_staged(const larder_dataset *dataset, uint64_t id);
/* Bring sample `id` into the cache, checked, without handing it to anyone. */
LARDER__HIDDEN int larder__dataset_stage(larder_dataset *dataset, uint64_t id);
/* The dataset's worker pool, made on first use. */
LARDER__HIDDEN int larder__dataset_pool_get(larder_dataset *dataset, struct larder__pool **pool);
/* The same pool (made on first use, NULL when it could not be). */
LARDER__HIDDEN struct larder__pool *larder__dataset_pool(larder_dataset *dataset);
/* Origin requests in flight the dataset allows (its pool's size). */
LARDER__HIDDEN int larder__dataset_inflight(const larder_dataset *dataset);

/* ---- for file handles (file.c) ------------------------------------------- */

struct larder__endpoint;
/* The node daemon's endpoint; NULL without one (valid while the dataset is open). */
LARDER__HIDDEN struct larder__endpoint *larder__dataset_daemon(larder_dataset *dataset);
/* Whether reads without a cache are checked too (verify_checksums). */
LARDER__HIDDEN bool larder__dataset_verifies(const larder_dataset *dataset);
/*
 * Have the node daemon (there must be one) stage bytes [offset, offset +
 * length) of a shard in the node cache this reader shares, with no bytes
 * sent (a STAGE READ): 1 when they are resident in this reader's cache
 * now; 0 with the bytes in buf when the daemon sent them instead (it could
 * not keep them, or keeps another cache than this reader's: then asked
 * for them with a plain READ); a negative code when the daemon failed.
 */
LARDER__HIDDEN int larder__dataset_daemon_stage(larder_dataset *dataset, uint32_t shard,
                                                uint64_t offset, uint64_t length, void *buf);

/* ---- for the node daemon ------------------------------------------------- */

struct larder__source;
/*
 * What the daemon puts before a shard's origin: called when the read
 * engine first reads shard `shard`, with its origin source (which the
 * wrapper owns from then on, even when it fails); *out is the source to
 * read (a chain: the shard's owner node, then the origin).
 */
typedef int (*larder__wrap_source_fn)(void *context, uint32_t shard, struct larder__source *origin,
                                      struct larder__source **out);
/* Set before the first read. */
LARDER__HIDDEN void larder__dataset_set_source_wrapper(larder_dataset *dataset,
                                                       larder__wrap_source_fn wrap, void *context);
/* Why a shard's origin may not exist (a publication whose files are only
 * at its producer): what a read of such a shard says, before the origin's
 * name and error, when no owner served it; NULL: those alone.  Set before
 * the first read.  0 or -ENOMEM. */
LARDER__HIDDEN int larder__dataset_set_missing_origin(larder_dataset *dataset, const char *why);
/* The dataset's id and shard geometry, for checking requests. */
LARDER__HIDDEN void larder__dataset_id(const larder_dataset *dataset, uint64_t *low,
                                       uint64_t *high);
LARDER__HIDDEN uint32_t larder__dataset_num_shards(const larder_dataset *dataset);
LARDER__HIDDEN uint64_t larder__dataset_shard_size(const larder_dataset *dataset, uint32_t shard);
/*
 * Bytes [offset, offset + length) of a shard, through the cache when there
 * is one: the blocks covering them are staged (from peers or the origin,
 * under the fill lock) and the bytes copied out.  Every sample those bytes
 * belong to is read whole and checked first, so raw ranges are as
 * trustworthy as samples (bytes of no sample, such as a tar's end blocks,
 * have nothing to check).  A range cutting into a sample of more than
 * 256 MiB around it is refused (LARDER_EUNSUPPORTED).
 */
LARDER__HIDDEN int larder__dataset_read_range(larder_dataset *dataset, uint32_t shard,
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
LARDER__HIDDEN int larder__dataset_stage_range(larder_dataset *dataset, uint32_t shard,
                                               uint64_t offset, uint64_t length, int *fd);

#endif
