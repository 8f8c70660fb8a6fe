/*
 * pack.h - the packing pipeline's internal interface.
 *
 * Packing runs in three steps.  (1) Each source enumerates its samples
 * into a plan: key, and per field a name, a size and, for arrays, dtype
 * and shape; no data is read yet except small heads.  (2) The plan is
 * shuffled and laid out: every sample gets its shard, offset and length,
 * and the index records are built, so any error in the input (duplicate
 * keys, unsafe names) shows before a byte is written.  (3) Writer threads
 * fill the shards, reading field bytes through the source's read op.
 */
#ifndef LARDER_PACK_H
#define LARDER_PACK_H

#include "common.h"

struct larder__pack_source;
struct larder__pack_field;

struct larder__pack_source_ops {
    /* Read bytes [offset, offset+length) of a field's data.  0 or a
     * negative code with a message naming the source file.  Called from
     * several writer threads at once. */
    int (*read)(struct larder__pack_source *source, const struct larder__pack_field *field,
                uint64_t offset, void *buf, size_t length);
    /* Release the source (NULL-safe is not required: never called on NULL). */
    void (*close)(struct larder__pack_source *source);
};

struct larder__pack_source {
    const struct larder__pack_source_ops *ops;
    char *name; /* path as the user gave it, for messages; freed by close */
};

struct larder__pack_field {
    const char *name; /* field name, e.g. "jpg", "image.npy", or an HDF5 dataset name */
    uint64_t size;    /* data bytes the source holds for it */
    int dtype;        /* enum larder_dtype for raw arrays (HDF5), else NONE */
    uint32_t ndim;
    const uint64_t *shape; /* ndim entries, owned by the plan (or the caller until added) */
    uint64_t locator[2];   /* meaning private to the source (file number, offset, row...) */
};

struct larder__pack_plan;

/*
 * Add one sample.  Strings and the shape arrays are copied into the
 * plan.  Field names must be unique within the sample.  0 or a negative
 * code (LARDER_EUSAGE for an empty key or a field name with '/').
 */
LARDER_HIDDEN int larder__pack_add_sample(struct larder__pack_plan *plan,
                                          struct larder__pack_source *source, const char *key,
                                          size_t key_length,
                                          const struct larder__pack_field *fields,
                                          uint32_t num_fields);

/* Plans (pack.c): created by larder_pack; also used directly by tests. */
LARDER_HIDDEN int larder__pack_plan_new(struct larder__pack_plan **out);
/* Frees the plan and closes every source added to it (NULL-safe). */
LARDER_HIDDEN void larder__pack_plan_free(struct larder__pack_plan *plan);
/* Register a source so the plan closes it. */
LARDER_HIDDEN int larder__pack_plan_add_source(struct larder__pack_plan *plan,
                                               struct larder__pack_source *source);
LARDER_HIDDEN uint64_t larder__pack_plan_num_samples(const struct larder__pack_plan *plan);
/* Sample i as added: its key, source and fields (valid while the plan lives). */
LARDER_HIDDEN void larder__pack_plan_sample(const struct larder__pack_plan *plan, uint64_t i,
                                            const char **key, struct larder__pack_source **source,
                                            const struct larder__pack_field **fields,
                                            uint32_t *num_fields);

/* Sources: each enumerates its samples into the plan, registers itself
 * with larder__pack_plan_add_source (so the plan closes it) and returns
 * its handle in *out.  On error nothing of it stays registered. */
LARDER_HIDDEN int larder__dir_source_open(struct larder__pack_plan *plan, const char *path,
                                          struct larder__pack_source **out);
LARDER_HIDDEN int larder__tar_source_open(struct larder__pack_plan *plan, const char *path,
                                          struct larder__pack_source **out);
/*
 * HDF5: with options->hdf5_rows set (comma-separated dataset paths), one
 * sample per row along axis 0 of those datasets (all must have the same
 * length on axis 0), key = the row number as 8+ zero-padded digits, one
 * field per dataset named by its path with '/' turned to '.'; otherwise
 * one sample per group at depth options->hdf5_group_depth (default 1),
 * key = the group's path without the leading '/', one field per dataset
 * anywhere below that group, named by its path relative to the group
 * with '/' turned to '.'.  Fields keep dtype and shape (little-endian,
 * C order).  Attributes are not packed.
 */
LARDER_HIDDEN int larder__hdf5_source_open(struct larder__pack_plan *plan, const char *path,
                                           const larder_pack_options *options,
                                           struct larder__pack_source **out);
/* Whether `path` is an HDF5 file (reads its signature). */
LARDER_HIDDEN bool larder__is_hdf5(const char *path);

#endif
