/*
 * input.h - what packing reads: one input per directory tree, tar
 * archive or HDF5 file, all behind one ops table.
 *
 * An input first lists its samples (a key, and per field a name, a size
 * and, for raw arrays, dtype and shape; no data is read but small heads)
 * and then serves field bytes on demand.  The layout (layout.h) collects
 * the listings, the writer (pack.c) reads through the ops.  An input
 * knows nothing of either: it needs only this header, so a new input,
 * or a test's fake one, is one file that includes it.
 */
#ifndef LARDER_PACK_INPUT_H
#define LARDER_PACK_INPUT_H

#include "common.h"
#include "larder_pack.h"

struct larder__pack_input;

struct larder__pack_field {
    const char *name; /* field name, e.g. "jpg", "image.npy", or an HDF5 dataset name */
    uint64_t size;    /* data bytes the input holds for it */
    int dtype;        /* enum larder_dtype for raw arrays (HDF5), else NONE */
    uint32_t ndim;
    const uint64_t *shape; /* ndim entries */
    uint64_t locator[2];   /* meaning private to the input (file number, offset, row...) */
};

/*
 * Receives one sample of a listing.  key, the fields, their names and
 * shapes are valid only during the call: the callee copies what it
 * keeps.  0, or a negative code, which ends the listing with that code.
 */
typedef int (*larder__pack_sample_fn)(void *context, const char *key, size_t key_length,
                                      const struct larder__pack_field *fields, uint32_t num_fields);

struct larder__pack_input_ops {
    /* Call on_sample once per sample, in an order that depends only on
     * the input's contents (not on the file system's order).  Called at
     * most once per input.  0 or a negative code with a message naming
     * the input; samples passed before a failure are the caller's to
     * drop. */
    int (*list)(struct larder__pack_input *input, larder__pack_sample_fn on_sample, void *context);
    /* Read bytes [offset, offset+length) of a field the listing passed
     * (or a copy of it, strings and shape included).  0
     * or a negative code with a message naming the input.  Called from
     * several writer threads at once. */
    int (*read)(struct larder__pack_input *input, const struct larder__pack_field *field,
                uint64_t offset, void *buf, size_t length);
    /* Release the input and its name (never called on NULL). */
    void (*close)(struct larder__pack_input *input);
};

struct larder__pack_input {
    const struct larder__pack_input_ops *ops;
    char *name; /* path as the user gave it, for messages; the input's own */
};

/*
 * The inputs.  Each returns 0 and the input in *out, or a negative code
 * with *out = NULL.  Opening does what the input needs before listing
 * (the tar archive's descriptor, the HDF5 file); the listing walks.
 */
LARDER__HIDDEN int larder__pack_input_dir_open(const char *path, struct larder__pack_input **out);
LARDER__HIDDEN int larder__pack_input_tar_open(const char *path, struct larder__pack_input **out);
/*
 * HDF5: with options->hdf5_rows set (comma-separated dataset paths), one
 * sample per row along axis 0 of those datasets (all must have the same
 * length on axis 0), key = the row number as 8+ zero-padded digits, one
 * field per dataset named by its path with '/' turned to '.'; otherwise
 * one sample per group at depth options->hdf5_group_depth (default 1),
 * key = the group's path without the leading '/', one field per dataset
 * anywhere below that group, named by its path relative to the group
 * with '/' turned to '.'.  Fields keep dtype and shape (little-endian,
 * C order).  Attributes are not packed.  `options` may be NULL.
 */
LARDER__HIDDEN int larder__pack_input_hdf5_open(const char *path,
                                                const larder_pack_options *options,
                                                struct larder__pack_input **out);
/* Whether `path` is an HDF5 file (reads its signature). */
LARDER__HIDDEN bool larder__is_hdf5(const char *path);

#endif
