/*
 * hdf5_input.h - what the HDF5 input's files share (input_hdf5.c: the
 * input, its tables and reads; hdf5_types.c: element types and shapes;
 * hdf5_walk.c: the listing in group and rows mode).  Nothing outside
 * those files includes it: the rest of packing sees the input through
 * input.h alone.
 *
 * Every function declared here is called with the HDF5 lock held and
 * HDF5's error printing off (see input_hdf5.c).
 */
#ifndef LARDER_PACK_HDF5_INPUT_H
#define LARDER_PACK_HDF5_INPUT_H

#include "input.h"

#include <hdf5.h>

/* Group nesting beyond this is treated as a link cycle. */
#define LARDER__HDF5_MAX_NESTING 64
/* Field cache slots per input (see input_hdf5.c). */
#define LARDER__HDF5_CACHE_SLOTS 64

struct larder__hdf5_dataset {
    size_t path; /* offset of its absolute path ("/a/b") in input->paths */
    /* Rows mode keeps the dataset open for the input's life, with the
     * type to read it with and its dataspace (reselected on each read);
     * group mode opens it per read and these are H5I_INVALID_HID. */
    hid_t handle, memory_type, space;
};

struct larder__hdf5_cache_slot {
    uint8_t *data; /* the whole field; NULL: slot free */
    uint64_t dataset, row, size;
    uint64_t last_use; /* input->clock at the last hit */
};

struct larder__hdf5_input {
    struct larder__pack_input base;
    hid_t file;
    bool rows_mode;
    int group_depth;   /* group mode: the samples' depth */
    char *rows;        /* rows mode: options->hdf5_rows, copied */
    uint64_t num_rows; /* rows mode: length of axis 0 */
    char *paths;       /* NUL-terminated dataset paths, back to back */
    size_t paths_length, paths_capacity;
    struct larder__hdf5_dataset *datasets;
    size_t num_datasets, datasets_capacity;
    struct larder__hdf5_cache_slot cache[LARDER__HDF5_CACHE_SLOTS];
    uint64_t cache_bytes, clock;
};

/* A dataset's element type and extent as a field records them. */
struct larder__hdf5_shape {
    int dtype;
    uint32_t ndim;
    uint64_t shape[LARDER_MAX_DIMS];
    uint64_t size; /* bytes */
};

/* Fail with LARDER_EHDF5: "file: object: what (HDF5: innermost message)". */
LARDER__HIDDEN int larder__hdf5_fail(const char *file, const char *object, const char *what);
/* The absolute path of dataset number `dataset` (valid while the input lives). */
LARDER__HIDDEN const char *larder__hdf5_dataset_path(const struct larder__hdf5_input *input,
                                                     uint64_t dataset);
/* Append a dataset to the input's table; its number, or a negative code. */
LARDER__HIDDEN int64_t larder__hdf5_add_dataset(struct larder__hdf5_input *input, const char *path);
/*
 * Read a dataset's dtype, shape and byte size, and when `memory_type` is
 * not NULL the type to read it with (the caller closes it on success).
 * LARDER_EUNSUPPORTED for what a field cannot be (strings, compounds...).
 */
LARDER__HIDDEN int larder__hdf5_describe_dataset(hid_t dataset, const char *file, const char *path,
                                                 struct larder__hdf5_shape *out,
                                                 hid_t *memory_type);
/* The listings (hdf5_walk.c): one sample per group at input->group_depth,
 * or one per row of the datasets input->rows names. */
LARDER__HIDDEN int larder__hdf5_list_groups(struct larder__hdf5_input *input,
                                            larder__pack_sample_fn on_sample, void *context);
LARDER__HIDDEN int larder__hdf5_list_rows(struct larder__hdf5_input *input,
                                          larder__pack_sample_fn on_sample, void *context);

#endif
