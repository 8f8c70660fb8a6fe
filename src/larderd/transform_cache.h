/*
 * transform_cache.h - the daemon's bounded cache of transformed samples,
 * keyed by (dataset id, sample, transform name and canonical parameters,
 * transform version), least recently used out first.  A result is only
 * ever found under the whole key: another version or other parameters
 * are another key.  Thread-safe (one mutex).
 */
#ifndef LARDERD_TRANSFORM_CACHE_H
#define LARDERD_TRANSFORM_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct transform_cache;

struct transform_key {
    uint64_t id_low, id_high; /* the dataset */
    uint64_t sample;
    uint32_t version;      /* the transform's */
    const char *canonical; /* "name:params" in canonical form (larder__transform_parse) */
};

/* A cache of at most `capacity` bytes of results (0: keeps nothing); NULL when out of memory. */
struct transform_cache *transform_cache_new(uint64_t capacity);
void transform_cache_free(struct transform_cache *cache);
/* Copy the result under key into out (capacity bytes) when it is there and
 * fits: its length; 0 when it is not there (results are never empty). */
size_t transform_cache_get(struct transform_cache *cache, const struct transform_key *key,
                           void *out, size_t capacity);
/* The length of the result under key, 0 when none. */
size_t transform_cache_length(struct transform_cache *cache, const struct transform_key *key);
/* Keep a copy of result[0..length) under key (replacing one there), evicting the least
 * recently used to stay within the capacity; one larger than the capacity is not kept. */
void transform_cache_put(struct transform_cache *cache, const struct transform_key *key,
                         const void *result, size_t length);
/* What it holds. */
void transform_cache_usage(struct transform_cache *cache, uint64_t *bytes, uint64_t *entries);

#endif
