/*
 * fuzz_transform.c - transforms on arbitrary bytes: the spec parser, the
 * built-ins run over one field (a JPEG, an array, a zstd frame: whatever
 * the input says), and the result decoder that a reader runs on a
 * daemon's answer.  Input: u8 spec length L, L bytes of spec, u8 field
 * kind, then the field's bytes.
 */
#include "transform.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int larder_fuzz_transform(const uint8_t *data, size_t size);

int larder_fuzz_transform(const uint8_t *data, size_t size)
{
    larder_transformed *out = NULL;
    /* the whole input as a daemon's answer */
    if (larder__transform_decode(data, size, &out) == 0) larder_transformed_free(out);
    if (size < 2) return 0;
    size_t spec_length = data[0];
    if (spec_length + 2 > size) return 0;
    struct larder__transform t;
    if (larder__transform_parse((const char *)data + 1, spec_length, &t) < 0) return 0;
    /* keep runs quick: no 4096 x 4096 outputs */
    if (t.ops == larder__transform_jpeg_ops() && atoi(t.canonical + 19) > 256) return 0;
    uint8_t kind = data[1 + spec_length];
    const uint8_t *field = data + 2 + spec_length;
    size_t length = size - 2 - spec_length;
    static const struct {
        const char *name;
        int dtype;
    } kinds[] = {{"jpg", LARDER_DTYPE_NONE}, {"bin.zst", LARDER_DTYPE_NONE},
                 {"f", LARDER_DTYPE_F32},    {"d", LARDER_DTYPE_F64},
                 {"h", LARDER_DTYPE_F16},    {"i", LARDER_DTYPE_I64},
                 {"u", LARDER_DTYPE_U16},    {"b", LARDER_DTYPE_BOOL}};
    larder_field_info f = {
        .name = kinds[kind % 8].name, .length = length, .dtype = kinds[kind % 8].dtype};
    size_t element = larder_dtype_size(f.dtype);
    if (element) {
        f.length -= f.length % element;
        f.ndim = 1;
        f.shape[0] = f.length / element;
    }
    uint8_t *result = NULL;
    size_t result_length = 0;
    if (larder__transform_run(&t, 0, &f, 1, field, length, &result, &result_length) == 0) {
        if (larder__transform_decode(result, result_length, &out) != 0) abort(); /* our own */
        larder_transformed_free(out);
    }
    free(result);
    return 0;
}

#ifndef LARDER_FUZZ_REPLAY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return larder_fuzz_transform(data, size);
}
#endif
