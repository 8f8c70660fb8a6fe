/*
 * index_internal.h - what the index reader (index.c) and the builder
 * (index_builder.c) share of the file's layout (docs/format.md): the
 * header's field offsets, the key slot encoding and the section offsets
 * computed from the counts.  Private to those two files; everyone else
 * goes through index.h.
 */
#ifndef LARDER_INDEX_INTERNAL_H
#define LARDER_INDEX_INTERNAL_H

#include "index.h"

/* Header field offsets. */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HEADER_SIZE = 12,
    H_ID = 16,
    H_NUM_SHARDS = 32,
    H_NUM_SAMPLES = 40,
    H_NUM_FIELDS = 48,
    H_NUM_DIMS = 56,
    H_NUM_KEY_SLOTS = 64,
    H_STRINGS_SIZE = 72,
    H_TOTAL_BYTES = 80,
    H_FILE_SIZE = 88,
    H_BLOCK_SIZE = 96,
    H_FLAGS = 100,
    H_BASE = 104,           /* version 2, with LARDER__INDEX_FLAG_BASE: string reference */
    H_NUM_BLOCK_SUMS = 112, /* version 3, with LARDER__INDEX_FLAG_BLOCK_SUMS; else reserved, 0 */
    H_CHECKSUM = 120,
};

/* A key slot: 0 is empty, else (tag << 40) | (sample id + 1). */
#define LARDER__SLOT_ID_BITS 40
#define LARDER__SLOT_ID_MASK ((UINT64_C(1) << LARDER__SLOT_ID_BITS) - 1)
#define LARDER__INDEX_MAX_SAMPLES (LARDER__SLOT_ID_MASK - 1)

/* The tag a key's hash leaves in its slot, beside the sample id. */
static inline uint64_t larder__slot_tag(uint64_t hash)
{
    return hash >> LARDER__SLOT_ID_BITS;
}

/* Where each section starts, and where the file ends. */
struct larder__index_layout {
    uint64_t shards, samples, fields, dims, key_slots, block_sums, strings, end;
};

/* Section offsets from the counts; false on overflow. */
LARDER__HIDDEN bool larder__index_compute_layout(uint64_t num_shards, uint64_t num_samples,
                                                 uint64_t num_fields, uint64_t num_dims,
                                                 uint64_t num_key_slots, uint64_t num_block_sums,
                                                 uint64_t strings_size,
                                                 struct larder__index_layout *l);

#endif
