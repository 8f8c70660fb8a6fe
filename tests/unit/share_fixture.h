/*
 * share_fixture.h - datasets for the node share's tests (test_cache_share.c
 * defines it, test_cache_share_hostile.c uses it too).
 */
#ifndef LARDER_SHARE_FIXTURE_H
#define LARDER_SHARE_FIXTURE_H

#include "larder.h"

#include <stdint.h>

/* Pack `samples` random files of 500 to 500 + spread - 1 bytes (seeded by
 * `seed`) from test_dir()/src-NAME into test_dir()/NAME, flat shards of
 * shard_size bytes. */
void share_fixture_make(const char *name, uint64_t seed, int samples, int spread,
                        uint64_t shard_size);
/* Open test_dir()/NAME/index.larder with the cache at test_path("cache"),
 * in blocks of `block` bytes (checked). */
larder_dataset *share_fixture_open(const char *name, uint32_t block);

#endif
