/*
 * transform.h - transforms of a sample's fields (docs/transforms.md): the
 * registry of ops tables (built-ins and shared objects), the parsing of a
 * spec "name[:params]", running a transform over one sample into a
 * result, and the result's byte layout, which is both what a daemon sends
 * (TRANSFORMED) and what a reader decodes.  The same code runs in the
 * daemon and in a reader, so their outputs are byte-identical.
 *
 * A result ("LTR1", little-endian):
 *   u32 magic, u32 num_fields, u64 data_length,
 *   per field: u16 name_length, u8 dtype, u8 ndim, u32 0, u64 offset,
 *              u64 length, ndim x u64 shape, name bytes, zeros to 8 bytes;
 *   then data_length bytes of data, each field at an 8-aligned offset.
 * larder__transform_decode checks all of it (a daemon is another user).
 */
#ifndef LARDER_TRANSFORM_H
#define LARDER_TRANSFORM_H

#include "common.h"

#define LARDER__TRANSFORM_MAGIC UINT32_C(0x3152544c) /* "LTR1" */
#define LARDER__TRANSFORM_MAX_FIELDS 1024
#define LARDER__TRANSFORM_MAX_LOADED 64
/* bytes of a field's name in a result, with its NUL: a tar member's (a
 * packed HDF5 dataset's path can be long), not an op's 64 */
#define LARDER__TRANSFORM_MAX_FIELD_NAME 4096
/* a result's bytes at most: fields' outputs plus their descriptions */
#define LARDER__TRANSFORM_MAX_RESULT (LARDER_TRANSFORM_MAX_OUTPUT + (1u << 20))

/* A parsed spec: the ops table, its parameters and the canonical spec. */
struct larder__transform {
    const larder_transform_ops *ops;
    char canonical[LARDER_TRANSFORM_MAX_SPEC]; /* "name" or "name:canonical params" */
    _Alignas(16) uint8_t state[LARDER_TRANSFORM_STATE];
};

/*
 * Parse spec[0..length) (not NUL-terminated; from a reader: hostile) and
 * look its name up: 0 and *out; LARDER_EUSAGE for a malformed spec or bad
 * parameters, LARDER_ENOTFOUND for an unknown name, each with a message.
 * No I/O, no allocation.
 */
LARDER__HIDDEN int larder__transform_parse(const char *spec, size_t length,
                                           struct larder__transform *out);

/*
 * Run t over one sample: fields[0..num_fields) as the index describes
 * them (offsets into sample[0..sample_length)).  0 and a malloc'd result
 * in *result (*result_length bytes; the caller frees it), or a negative
 * code with a message naming the sample, the field and the transform.
 */
LARDER__HIDDEN int larder__transform_run(const struct larder__transform *t, uint64_t sample_id,
                                         const larder_field_info *fields, uint32_t num_fields,
                                         const uint8_t *sample, uint64_t sample_length,
                                         uint8_t **result, size_t *result_length);

/*
 * As larder__transform_run, with the result at (*buffer + headroom) of
 * one malloc'd buffer (the caller frees *buffer): room before it for a
 * frame's header, so that the daemon sends the buffer as it is.
 */
LARDER__HIDDEN int larder__transform_run_at(const struct larder__transform *t, uint64_t sample_id,
                                            const larder_field_info *fields, uint32_t num_fields,
                                            const uint8_t *sample, uint64_t sample_length,
                                            size_t headroom, uint8_t **buffer,
                                            size_t *result_length);

/*
 * The most bytes a result of t over a sample of num_fields fields and
 * sample_length bytes can take, before its bytes are read: what the
 * daemon charges a TRANSFORM while it runs.  From the built-ins'
 * parameters where they bound their output (jpeg_decode_resize:N, N*N*3
 * a field; npy_cast, 8 bytes an input byte), else the limit.  At most
 * LARDER__TRANSFORM_MAX_RESULT.
 */
LARDER__HIDDEN uint64_t larder__transform_result_max(const struct larder__transform *t,
                                                     uint32_t num_fields, uint64_t sample_length);

/*
 * Check a result and describe it: 0 and *out (malloc'd, with a copy of
 * the bytes: larder_transformed_free frees it), or LARDER_EPROTOCOL with
 * a message naming what is wrong.
 */
LARDER__HIDDEN int larder__transform_decode(const uint8_t *result, size_t length,
                                            larder_transformed **out);

/* The built-ins (transform_jpeg.c, transform_cast.c, transform_zstd.c). */
LARDER__HIDDEN const larder_transform_ops *larder__transform_jpeg_ops(void);
LARDER__HIDDEN const larder_transform_ops *larder__transform_cast_ops(void);
LARDER__HIDDEN const larder_transform_ops *larder__transform_zstd_ops(void);
/* jpeg_decode_resize:N's output of one field, N*N*3 bytes, from its state. */
LARDER__HIDDEN uint64_t larder__transform_jpeg_max_output(const void *state);

/* transform_cast.c: IEEE half from single / double bits, rounding to
 * nearest even, NaN and infinity kept (as numpy's astype does). */
LARDER__HIDDEN uint16_t larder__half_from_float_bits(uint32_t f);
LARDER__HIDDEN uint16_t larder__half_from_double_bits(uint64_t d);

/* Copy a message into error[0..size) (a transform's error buffer). */
LARDER__HIDDEN int larder__transform_error(char *error, size_t size, int code, const char *fmt, ...)
    LARDER__PRINTF(4, 5);

/*
 * Division by d without a divide instruction (the area resize divides
 * every output byte's sum by the same source width or height):
 * m = larder__reciprocal(d), then n / d is larder__divide(n, m), exactly,
 * for 1 <= d < 2^16 and n < 256 d.  With m = ceil(2^42 / d) = (2^42 + e) / d,
 * 0 <= e < d: n m / 2^42 = n / d + n e / (d 2^42), and n e < 256 d^2 < 2^40
 * keeps the second term below 1 / d, so the floor is n / d's; n m < 2^51.
 */
static inline uint64_t larder__reciprocal(uint32_t d)
{
    return ((UINT64_C(1) << 42) + d - 1) / d;
}
static inline uint32_t larder__divide(uint32_t n, uint64_t m)
{
    return (uint32_t)(((uint64_t)n * m) >> 42);
}

/* The process's measured wait for transformed reads and its budget, both
 * in microseconds (transform_read.c): what a TRANSFORM carries. */
LARDER__HIDDEN void larder__transform_reader_load(uint32_t *wait_us, uint32_t *budget_us);
/* A reader's step budget when none is set: `reads` transformed reads in
 * flight (at least 1) made here one after another, at cost_us of CPU each. */
LARDER__HIDDEN uint64_t larder__transform_step_budget(uint32_t reads, uint32_t cost_us);

#endif
