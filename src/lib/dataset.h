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

#endif
