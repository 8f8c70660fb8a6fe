/*
 * index.h - the index file: its binary layout (docs/format.md), a parser
 * that validates a mapped or loaded image without doing any I/O or
 * allocation of its own (so it can be fuzzed alone), per-record
 * accessors that check every record they return (index.c), and a builder
 * used by `larder pack` and `larder index` to write new indexes
 * (index_builder.c).  index_internal.h holds what the two share.
 */
#ifndef LARDER_INDEX_H
#define LARDER_INDEX_H

#include "common.h"

#define LARDER__INDEX_MAGIC "LARDERIX"
/* the newest this build reads; it writes 1 unless a base (2) or block sums (3) need more */
#define LARDER__INDEX_VERSION 3
#define LARDER__INDEX_FLAG_BASE 1u       /* version 2: the header names the shards' base */
#define LARDER__INDEX_FLAG_BLOCK_SUMS 2u /* version 3: some shards have per-block checksums */
/* version 3: no checksums at all (a listing-only index of plain files, made by
 * `larder mount` from sizes alone): samples are read unchecked */
#define LARDER__INDEX_FLAG_UNCHECKED 4u
#define LARDER__INDEX_HEADER_SIZE 128
#define LARDER__INDEX_SHARD_SIZE 32
#define LARDER__INDEX_SAMPLE_SIZE 48
#define LARDER__INDEX_FIELD_SIZE 40
#define LARDER__DEFAULT_BLOCK_SIZE (64u * 1024)
/* Bounds that keep block arithmetic far from overflow: a shard of at most
 * 2^56 bytes, all shards together at most 2^60, block size hints from
 * 512 bytes to 1 GiB. */
#define LARDER__MAX_SHARD_SIZE (UINT64_C(1) << 56)
#define LARDER__MAX_DATASET_SIZE (UINT64_C(1) << 60)
#define LARDER__MIN_BLOCK_SIZE 512u
#define LARDER__MAX_BLOCK_SIZE (1u << 30)
/* Checksum blocks (version 3): a power of two from 2^9 to 2^26 bytes, and
 * never smaller than the index's block size hint.  The upper bound keeps
 * what a fill reads around a small range to two such blocks. */
#define LARDER__MIN_SUM_SHIFT 9
#define LARDER__MAX_SUM_SHIFT 26
#define LARDER__DEFAULT_SUM_BLOCK (UINT64_C(1) << 20)

/* A validated view of an index image; pointers into the image. */
struct larder__index {
    const uint8_t *image;
    uint64_t image_size;
    const char *name; /* for messages; not owned */
    uint32_t version;
    uint32_t block_size;
    uint64_t num_shards, num_samples, num_fields, num_dims, num_key_slots;
    uint64_t strings_size, total_bytes;
    uint64_t id_low, id_high; /* dataset id, xxh3-128 */
    uint64_t shard_bytes;     /* sum of the shard sizes (at most LARDER__MAX_DATASET_SIZE) */
    const char *base;         /* version 2: where shard names are relative to; else NULL */
    uint64_t num_block_sums;  /* version 3: entries of the block checksum table; else 0 */
    bool unchecked;           /* version 3, LARDER__INDEX_FLAG_UNCHECKED: no checksums to check */
    const uint8_t *shards, *samples, *fields, *dims, *key_slots, *block_sums, *strings;
};

struct larder__shard {
    const char *name;
    uint64_t size;
    uint64_t checksum;
    uint32_t format;    /* enum larder_shard_format */
    uint32_t sum_shift; /* version 3: log2 of its checksum block size; 0: no block sums */
};

struct larder__sample {
    uint64_t offset, length, checksum, field_first;
    uint32_t shard, num_fields;
    const char *key;
};

/* A field as the builder takes it and the accessor returns it. */
struct larder__field {
    const char *name;
    uint64_t offset; /* relative to the sample */
    uint64_t length;
    int dtype;
    uint32_t ndim;
    uint64_t shape[LARDER_MAX_DIMS];
};

/*
 * Whether `image` (size bytes) is an index whose content hashes to the
 * dataset id (low, high) and whose header says so: bytes a daemon is about
 * to hand out as a known dataset's index, read again from a path that may
 * have been replaced since (nothing else of the image is checked).
 */
LARDER__HIDDEN bool larder__index_image_is(const uint8_t *image, uint64_t size, uint64_t low,
                                           uint64_t high);
/*
 * Validate the header and section bounds of image[0..size) and fill `ix`.
 * O(1) plus O(num_shards): every shard record (name, size within
 * LARDER__MAX_SHARD_SIZE, the sizes' sum within LARDER__MAX_DATASET_SIZE)
 * and the base are checked here; sample and field records as they are
 * accessed (larder__index_validate checks them all at once).
 * Returns 0, LARDER_EBADINDEX or LARDER_EVERSION with a message naming
 * `name` and the position.
 */
LARDER__HIDDEN int larder__index_parse(struct larder__index *ix, const void *image, uint64_t size,
                                       const char *name);
LARDER__HIDDEN int larder__index_shard(const struct larder__index *ix, uint64_t shard,
                                       struct larder__shard *out);
LARDER__HIDDEN int larder__index_sample(const struct larder__index *ix, uint64_t id,
                                        struct larder__sample *out);
/* A shard's size in bytes; 0 for a shard the index does not have. */
static inline uint64_t larder__index_shard_size(const struct larder__index *ix, uint64_t shard)
{
    struct larder__shard info;
    return larder__index_shard(ix, shard, &info) == 0 ? info.size : 0;
}
/* The same without the key and field checks: for the read path, which
 * needs only the range.  out->key is NULL. */
LARDER__HIDDEN int larder__index_sample_range(const struct larder__index *ix, uint64_t id,
                                              struct larder__sample *out);
LARDER__HIDDEN int larder__index_field(const struct larder__index *ix,
                                       const struct larder__sample *sample, uint64_t sample_id,
                                       uint32_t field, struct larder__field *out);
/* Sample id of `key`; LARDER_ENOTFOUND, or LARDER_EDUPKEY when two samples
 * carry the key (a corrupt index: keys are unique). */
LARDER__HIDDEN int64_t larder__index_find_key(const struct larder__index *ix, const char *key,
                                              size_t key_length);
/*
 * Entry `i` of the block checksum table (XXH3-64 of one checksum block);
 * i < ix->num_block_sums.  Which entries are a shard's: index_sums.h.
 */
static inline uint64_t larder__index_block_sum(const struct larder__index *ix, uint64_t i)
{
    return larder__le64(ix->block_sums + i * 8);
}
/* Recompute the content hash over the whole image; 0 or LARDER_ECHECKSUM. */
LARDER__HIDDEN int larder__index_check_hash(const struct larder__index *ix);

/* xxh3-64 of a key, as the key table uses it. */
LARDER__HIDDEN uint64_t larder__key_hash(const char *key, size_t length);

/* ---- builder ----------------------------------------------------------- */

struct larder__index_builder;

LARDER__HIDDEN int larder__index_builder_new(struct larder__index_builder **out,
                                             uint32_t block_size);
LARDER__HIDDEN void larder__index_builder_free(struct larder__index_builder *builder);
/* Record `base` (an absolute path or a URL ending in '/') as where the
 * shard names are relative to; the index is then written as version 2.
 * NULL clears it.  0 or a negative code. */
LARDER__HIDDEN int larder__index_builder_set_base(struct larder__index_builder *builder,
                                                  const char *base);
/* Mark the index unchecked (LARDER__INDEX_FLAG_UNCHECKED, version 3): its
 * checksums are not there to check (a listing-only index). */
LARDER__HIDDEN void larder__index_builder_set_unchecked(struct larder__index_builder *builder);
/* Add a shard; returns its number (>= 0) or a negative code. */
LARDER__HIDDEN int64_t larder__index_builder_add_shard(struct larder__index_builder *builder,
                                                       const char *name, uint32_t format);
LARDER__HIDDEN void larder__index_builder_set_shard(struct larder__index_builder *builder,
                                                    uint32_t shard, uint64_t size,
                                                    uint64_t checksum);
/*
 * Give shard `shard` per-block checksums: sums[i] is XXH3-64 of bytes
 * [i << shift, (i + 1) << shift) of the shard (the last block shorter),
 * count = ceil(size / 2^shift) for the size set with _set_shard.  The
 * sums are copied; the index is then written as version 3.  0, or
 * LARDER_EUSAGE for a shift out of range or a wrong count, or -ENOMEM.
 */
LARDER__HIDDEN int larder__index_builder_set_block_sums(struct larder__index_builder *builder,
                                                        uint32_t shard, uint32_t shift,
                                                        const uint64_t *sums, uint64_t count);
/*
 * Add a sample; returns its id (>= 0), or LARDER_EDUPKEY (message names
 * the key), LARDER_EUSAGE for an inconsistent record, or -ENOMEM.
 */
LARDER__HIDDEN int64_t larder__index_builder_add_sample(struct larder__index_builder *builder,
                                                        uint32_t shard, uint64_t offset,
                                                        uint64_t length, uint64_t checksum,
                                                        const char *key, size_t key_length,
                                                        const struct larder__field *fields,
                                                        uint32_t num_fields);
LARDER__HIDDEN void larder__index_builder_set_checksum(struct larder__index_builder *builder,
                                                       uint64_t id, uint64_t checksum);
LARDER__HIDDEN uint64_t larder__index_builder_num_samples(const struct larder__index_builder *b);
/* Key of sample `id` (valid until the builder changes), for messages. */
LARDER__HIDDEN const char *larder__index_builder_key(const struct larder__index_builder *b,
                                                     uint64_t id);
/* Write the index to `path` atomically (temporary file, fsync, rename). */
LARDER__HIDDEN int larder__index_builder_write(struct larder__index_builder *builder,
                                               const char *path, char dataset_id[33]);

#endif
