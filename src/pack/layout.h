/*
 * layout.h - where every sample of a pack goes, decided before a byte is
 * written.
 *
 * Packing runs in three steps.  (1) Each input (input.h) lists its
 * samples into the layout.  (2) The layout is shuffled and placed: every
 * sample gets its shard, offset and length, and the index records are
 * built, so any error in the input (duplicate keys, unsafe names) shows
 * before a byte is written.  (3) Writer threads (pack.c) fill the
 * shards, reading field bytes through the inputs' read op.
 *
 * This is not larder's "plan" (plan.h, the order samples are read in):
 * it is the order and the places they are written in.
 */
#ifndef LARDER_PACK_LAYOUT_H
#define LARDER_PACK_LAYOUT_H

#include "index.h"
#include "input.h"

/* The samples listed so far and the inputs they come from. */
struct larder__pack_layout;

LARDER__HIDDEN int larder__pack_layout_new(struct larder__pack_layout **out);
/* Frees the layout and closes every input added to it (NULL-safe). */
LARDER__HIDDEN void larder__pack_layout_free(struct larder__pack_layout *layout);
/*
 * List `input`'s samples into the layout.  The layout takes the input in
 * every case: on success it keeps it (and closes it when freed); on
 * failure it drops the samples the input listed and closes it.  0 or a
 * negative code: LARDER_EUSAGE for an empty key or a bad field name,
 * LARDER_EDUPKEY for a field twice in one sample, or the input's own.
 */
LARDER__HIDDEN int larder__pack_layout_add_input(struct larder__pack_layout *layout,
                                                 struct larder__pack_input *input);
LARDER__HIDDEN uint64_t larder__pack_layout_num_samples(const struct larder__pack_layout *layout);
/* Sample i as listed: its key, input and fields (valid while the layout lives). */
LARDER__HIDDEN void larder__pack_layout_sample(const struct larder__pack_layout *layout, uint64_t i,
                                               const char **key, struct larder__pack_input **input,
                                               const struct larder__pack_field **fields,
                                               uint32_t *num_fields);

/* What one field becomes in its shard. */
struct larder__pack_out_field {
    const struct larder__pack_field *field; /* as listed (the layout's copy) */
    char *member;                           /* tar member name (tar format) */
    uint64_t header_size;                   /* tar header blocks before the data */
    uint64_t npy_size; /* npy header larder writes before raw array data (tar only) */
};

/* What one sample becomes. */
struct larder__pack_out_sample {
    uint64_t listed;   /* its number in the layout */
    uint64_t index_id; /* its record in the index builder */
    uint32_t shard;
    uint64_t offset, length; /* in the shard */
    struct larder__pack_out_field *fields;
    uint32_t num_fields;
};

/* The result of placing: what the writers write. */
struct larder__pack_placement {
    int format;                              /* enum larder_shard_format */
    struct larder__pack_out_sample *samples; /* in shard order; num_samples of them */
    uint64_t num_samples;
    uint64_t *shard_first; /* first sample of each shard, plus an end marker */
    uint64_t *shard_bytes; /* each shard's size, tar end marker included */
    uint32_t num_shards;
    uint64_t bytes_total; /* of the samples, for progress */
};

/*
 * Shuffle the listed samples (options->shuffle, shuffle_seed), place
 * them in shards of options->shard_size in `format`, and add every shard
 * and sample to `builder` (checksums are set by the writers).  Reads no
 * data but the heads of .npy fields.  0 or a negative code (duplicate
 * keys name both inputs); `out` must be freed with
 * larder__pack_placement_free either way, and lives no longer than the
 * layout.
 */
LARDER__HIDDEN int larder__pack_layout_place(struct larder__pack_layout *layout,
                                             const larder_pack_options *options, int format,
                                             struct larder__index_builder *builder,
                                             struct larder__pack_placement *out);
/* NULL-safe for a zeroed placement. */
LARDER__HIDDEN void larder__pack_placement_free(struct larder__pack_placement *placement);
/* "shard-000012.tar" or ".bin". */
LARDER__HIDDEN void larder__pack_shard_name(char *out, size_t size, uint32_t shard, int format);

#endif
