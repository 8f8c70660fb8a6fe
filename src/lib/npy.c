/*
 * npy.c - dtype names and sizes, and the .npy header (numpy's NEP 1).
 */
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>

static const struct {
    const char *name;  /* numpy dtype name */
    const char *descr; /* .npy descr, little-endian */
    size_t size;
} dtypes[LARDER_DTYPE_COUNT] = {
    [LARDER_DTYPE_NONE] = {"bytes", "", 0},     [LARDER_DTYPE_U8] = {"uint8", "|u1", 1},
    [LARDER_DTYPE_I8] = {"int8", "|i1", 1},     [LARDER_DTYPE_U16] = {"uint16", "<u2", 2},
    [LARDER_DTYPE_I16] = {"int16", "<i2", 2},   [LARDER_DTYPE_U32] = {"uint32", "<u4", 4},
    [LARDER_DTYPE_I32] = {"int32", "<i4", 4},   [LARDER_DTYPE_U64] = {"uint64", "<u8", 8},
    [LARDER_DTYPE_I64] = {"int64", "<i8", 8},   [LARDER_DTYPE_F16] = {"float16", "<f2", 2},
    [LARDER_DTYPE_F32] = {"float32", "<f4", 4}, [LARDER_DTYPE_F64] = {"float64", "<f8", 8},
    [LARDER_DTYPE_BOOL] = {"bool", "|b1", 1},
};

const char *larder_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < LARDER_DTYPE_COUNT ? dtypes[dtype].name : "unknown";
}

size_t larder_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < LARDER_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

/* Find `'name':` in the header dict; returns the text after the colon. */
static const char *dict_value(const char *dict, size_t length, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i + n + 2 < length; i++) {
        if ((dict[i] == '\'' || dict[i] == '"') && memcmp(dict + i + 1, name, n) == 0 &&
            dict[i + 1 + n] == dict[i]) {
            const char *p = dict + i + n + 2;
            const char *end = dict + length;
            while (p < end && *p == ' ')
                p++;
            if (p < end && *p == ':') {
                p++;
                while (p < end && *p == ' ')
                    p++;
                return p < end ? p : NULL;
            }
        }
    }
    return NULL;
}

int larder__npy_parse(const void *data, size_t length, struct larder__npy *out)
{
    const uint8_t *b = data;
    if (length < 10 || memcmp(b, "\x93NUMPY", 6) != 0) return LARDER_EUNSUPPORTED;
    uint8_t major = b[6];
    size_t header_length, prefix;
    if (major == 1) {
        header_length = larder__le16(b + 8);
        prefix = 10;
    } else if (major == 2 || major == 3) {
        if (length < 12) return LARDER_EUNSUPPORTED;
        header_length = larder__le32(b + 8);
        prefix = 12;
    } else {
        return LARDER_EUNSUPPORTED;
    }
    if (header_length > length - prefix || header_length > 65536) return LARDER_EUNSUPPORTED;
    const char *dict = (const char *)b + prefix;
    const char *end = dict + header_length;

    memset(out, 0, sizeof *out);
    const char *descr = dict_value(dict, header_length, "descr");
    if (!descr || (*descr != '\'' && *descr != '"')) return LARDER_EUNSUPPORTED;
    char quote = *descr++;
    const char *close = memchr(descr, quote, (size_t)(end - descr));
    if (!close) return LARDER_EUNSUPPORTED;
    size_t descr_length = (size_t)(close - descr);
    out->dtype = -1;
    for (int t = 1; t < LARDER_DTYPE_COUNT; t++) {
        const char *want = dtypes[t].descr;
        /* byte-sized types may be written with '|', '<' or '=' */
        if (descr_length == 3 && memcmp(descr + 1, want + 1, 2) == 0 &&
            (descr[0] == want[0] || descr[0] == '<' || (descr[0] == '|' && dtypes[t].size == 1) ||
             descr[0] == '=')) {
            out->dtype = t;
            break;
        }
    }
    if (out->dtype < 0) return LARDER_EUNSUPPORTED;

    const char *fortran = dict_value(dict, header_length, "fortran_order");
    if (!fortran || (size_t)(end - fortran) < 5 || memcmp(fortran, "False", 5) != 0)
        return LARDER_EUNSUPPORTED;

    const char *shape = dict_value(dict, header_length, "shape");
    if (!shape || *shape != '(') return LARDER_EUNSUPPORTED;
    const char *p = shape + 1;
    uint64_t elements = 1;
    for (;;) {
        while (p < end && (*p == ' ' || *p == ','))
            p++;
        if (p >= end) return LARDER_EUNSUPPORTED;
        if (*p == ')') break;
        if (*p < '0' || *p > '9' || out->ndim == LARDER_MAX_DIMS) return LARDER_EUNSUPPORTED;
        uint64_t v = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (!larder__mul_ok(v, 10, &v) || !larder__add_ok(v, (uint64_t)(*p - '0'), &v))
                return LARDER_EUNSUPPORTED;
            p++;
        }
        if (p < end && *p == 'L') p++; /* Python 2 longs */
        out->shape[out->ndim++] = v;
        if (!larder__mul_ok(elements, v, &elements)) return LARDER_EUNSUPPORTED;
    }
    if (!larder__mul_ok(elements, dtypes[out->dtype].size, &out->data_length))
        return LARDER_EUNSUPPORTED;
    out->data_offset = prefix + header_length;
    return 0;
}

size_t larder__npy_write_header(uint8_t out[LARDER__NPY_MAX_HEADER], int dtype, uint32_t ndim,
                                const uint64_t *shape)
{
    char dict[LARDER__NPY_MAX_HEADER];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     dtypes[dtype].descr);
    for (uint32_t d = 0; d < ndim; d++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%llu%s", (unsigned long long)shape[d],
                      ndim == 1 ? "," : (d + 1 < ndim ? ", " : ""));
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    /* pad with spaces and a newline so that 10 + header is a multiple of 64 */
    size_t total = ((size_t)n + 1 + 10 + 63) / 64 * 64;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    larder__put_le16(out + 8, (uint16_t)(total - 10));
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', total - 10 - (size_t)n - 1);
    out[total - 1] = '\n';
    return total;
}
