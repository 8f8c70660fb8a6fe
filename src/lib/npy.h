/*
 * npy.h - numpy .npy headers: parsing (pure, fuzzable) and writing.
 * An array field stored in a tar shard is a KEY.NAME.npy member whose
 * header a WebDataset reader decodes; larder's index points past the
 * header at the raw little-endian, C-order elements.
 */
#ifndef LARDER_NPY_H
#define LARDER_NPY_H

#include "common.h"

struct larder__npy {
    int dtype;
    uint32_t ndim;
    uint64_t shape[LARDER_MAX_DIMS];
    uint64_t data_offset; /* header bytes before the elements */
    uint64_t data_length; /* element bytes the shape implies */
};

/*
 * Parse the .npy header at the start of data[0..length).  Returns 0 for a
 * little-endian (or byte-sized), C-order array of a dtype larder knows,
 * LARDER_EUNSUPPORTED for anything else (not .npy, big-endian, Fortran
 * order, object arrays, or a header not wholly inside the buffer).
 */
LARDER__HIDDEN int larder__npy_parse(const void *data, size_t length, struct larder__npy *out);

/*
 * Field names that mark an .npy member: "NAME.npy" (the array field is
 * called NAME) or plain "npy" (called "npy").  Returns the length of the
 * array field's name, or 0 when `ext` is no .npy name.
 */
static inline size_t larder__npy_bare_length(const char *ext)
{
    size_t n = strlen(ext);
    if (n == 3 && memcmp(ext, "npy", 3) == 0) return 3;
    if (n > 4 && memcmp(ext + n - 4, ".npy", 4) == 0) return n - 4;
    return 0;
}

/* Longest header larder__npy_write_header produces. */
#define LARDER__NPY_MAX_HEADER 1024
/* Write a version 1.0 header; returns its size (a multiple of 64). */
LARDER__HIDDEN size_t larder__npy_write_header(uint8_t out[LARDER__NPY_MAX_HEADER], int dtype,
                                               uint32_t ndim, const uint64_t *shape);

#endif
