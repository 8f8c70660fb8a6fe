/*
 * transform_cast.c - the built-in npy_cast:DTYPE: every array field (one
 * with a dtype in the index) converted element by element to float16,
 * float32 or float64, as numpy's astype does with its default casting:
 * integers and booleans by C's conversion, float64 to float32 by C's
 * (round to nearest even), and to float16 by the functions below, which
 * round to nearest even from the source's bits (never through float32,
 * which would round twice), keep infinities and signs, overflow to
 * infinity, and keep a NaN a NaN with the top bits of its payload, as
 * numpy's npy_floatbits_to_halfbits and npy_doublebits_to_halfbits do.
 */
#include "transform.h"

#include <errno.h>
#include <stdio.h>

struct cast_state {
    int dtype; /* the target */
};

uint16_t larder__half_from_float_bits(uint32_t f)
{
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t exp = f & 0x7f800000u, sig = f & 0x007fffffu;
    if (exp == 0x7f800000u) { /* infinity, or NaN: still a NaN after the shift */
        if (!sig) return sign | 0x7c00u;
        uint16_t h = (uint16_t)(0x7c00u + (sig >> 13));
        return sign | (h == 0x7c00u ? 0x7c01u : h);
    }
    if (exp >= 0x47800000u) return sign | 0x7c00u; /* >= 2^16: infinity */
    if (exp <= 0x38000000u) {                      /* below 2^-14: a subnormal half or zero */
        if (exp < 0x33000000u) return sign;        /* below 2^-25: rounds to zero */
        uint32_t e = exp >> 23;                    /* 102 .. 112 */
        uint32_t m = sig | 0x00800000u;            /* the implicit bit */
        uint32_t shift = 126 - e;                  /* 14 .. 24: to units of 2^-24 */
        uint32_t q = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (q & 1))) q++;
        return sign | (uint16_t)q; /* a carry into the exponent is right too */
    }
    uint32_t h = ((exp - 0x38000000u) >> 13) | (sig >> 13), rest = sig & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++; /* may carry up to infinity */
    return sign | (uint16_t)h;
}

uint16_t larder__half_from_double_bits(uint64_t d)
{
    uint16_t sign = (uint16_t)((d >> 48) & 0x8000u);
    uint64_t exp = d & UINT64_C(0x7ff0000000000000), sig = d & UINT64_C(0x000fffffffffffff);
    if (exp == UINT64_C(0x7ff0000000000000)) {
        if (!sig) return sign | 0x7c00u;
        uint16_t h = (uint16_t)(0x7c00u + (sig >> 42));
        return sign | (h == 0x7c00u ? 0x7c01u : h);
    }
    if (exp >= UINT64_C(0x40f0000000000000)) return sign | 0x7c00u; /* >= 2^16 */
    if (exp <= UINT64_C(0x3f00000000000000)) {                      /* below 2^-14 */
        if (exp < UINT64_C(0x3e60000000000000)) return sign;        /* below 2^-25 */
        uint64_t e = exp >> 52;                                     /* 998 .. 1008 */
        uint64_t m = sig | UINT64_C(0x0010000000000000);
        uint64_t shift = 1051 - e; /* 43 .. 53: to units of 2^-24 */
        uint64_t q = m >> shift, rest = m & ((UINT64_C(1) << shift) - 1),
                 half = UINT64_C(1) << (shift - 1);
        if (rest > half || (rest == half && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    uint64_t h = ((exp - UINT64_C(0x3f00000000000000)) >> 42) | (sig >> 42);
    uint64_t rest = sig & ((UINT64_C(1) << 42) - 1), half = UINT64_C(1) << 41;
    if (rest > half || (rest == half && (h & 1))) h++;
    return sign | (uint16_t)h;
}

static int cast_parse(const char *params, void *state_, char *canonical, char *error,
                      size_t error_size)
{
    struct cast_state *state = state_;
    if (strcmp(params, "float16") == 0 || strcmp(params, "f2") == 0)
        state->dtype = LARDER_DTYPE_F16;
    else if (strcmp(params, "float32") == 0 || strcmp(params, "f4") == 0)
        state->dtype = LARDER_DTYPE_F32;
    else if (strcmp(params, "float64") == 0 || strcmp(params, "f8") == 0)
        state->dtype = LARDER_DTYPE_F64;
    else
        return larder__transform_error(error, error_size, LARDER_EUSAGE,
                                       "dtype '%.40s': float16, float32 or float64", params);
    snprintf(canonical, LARDER_TRANSFORM_MAX_SPEC, "%s", larder_dtype_name(state->dtype));
    return 0;
}

static int cast_applies(const void *state, const larder_field_info *f)
{
    (void)state;
    return f->dtype > LARDER_DTYPE_NONE && f->dtype < LARDER_DTYPE_COUNT;
}

static int64_t cast_bound(const void *state_, const larder_field_info *f, const void *data,
                          char *error, size_t error_size)
{
    const struct cast_state *state = state_;
    (void)data;
    size_t in = larder_dtype_size(f->dtype);
    uint64_t count = in ? f->length / in : 0, bytes;
    if (!in || f->length % in || !larder__mul_ok(count, larder_dtype_size(state->dtype), &bytes) ||
        bytes > LARDER_TRANSFORM_MAX_OUTPUT)
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "%llu bytes of %s: not whole elements, or too many",
                                       (unsigned long long)f->length, larder_dtype_name(f->dtype));
    return (int64_t)bytes;
}

/* Element i of an input of dtype `dtype` as a double (exact for every
 * source but 64-bit integers, which C rounds to nearest as numpy does). */
static double element(int dtype, const uint8_t *p)
{
    switch (dtype) {
    case LARDER_DTYPE_U8:
        return (double)p[0];
    case LARDER_DTYPE_I8:
        return (double)(int8_t)p[0];
    case LARDER_DTYPE_U16:
        return (double)larder__le16(p);
    case LARDER_DTYPE_I16:
        return (double)(int16_t)larder__le16(p);
    case LARDER_DTYPE_U32:
        return (double)larder__le32(p);
    case LARDER_DTYPE_I32:
        return (double)(int32_t)larder__le32(p);
    case LARDER_DTYPE_BOOL:
        return p[0] ? 1.0 : 0.0;
    default:
        return 0.0;
    }
}

static int64_t cast_run(const void *state_, const larder_field_info *f, const void *data_,
                        void *out_, size_t capacity, larder_field_info *result, char *name,
                        char *error, size_t error_size)
{
    const struct cast_state *state = state_;
    const uint8_t *in = data_;
    uint8_t *out = out_;
    (void)name;
    int64_t bytes = cast_bound(state_, f, data_, error, error_size);
    if (bytes < 0) return bytes;
    if ((uint64_t)bytes > capacity)
        return larder__transform_error(error, error_size, LARDER_ETOOSMALL, "no room");
    size_t in_size = larder_dtype_size(f->dtype), count = (size_t)(f->length / in_size);
    int to = state->dtype;
    for (size_t i = 0; i < count; i++, in += in_size) {
        uint32_t f32;
        uint64_t f64;
        float vf;
        double vd;
        uint16_t half;
        switch (f->dtype) { /* the floating sources, from their bits */
        case LARDER_DTYPE_F16:
            half = larder__le16(in);
            if (to == LARDER_DTYPE_F16) {
                larder__put_le16(out + 2 * i, half);
                continue;
            }
            { /* widening is exact: rebuild as float */
                uint32_t s = (uint32_t)(half & 0x8000u) << 16, e = (half >> 10) & 0x1f,
                         m = half & 0x3ffu;
                if (e == 0x1f)
                    f32 = s | 0x7f800000u | (m << 13);
                else if (e)
                    f32 = s | ((e + 112) << 23) | (m << 13);
                else if (!m)
                    f32 = s;
                else { /* subnormal: normalise */
                    e = 113;
                    while (!(m & 0x400u))
                        m <<= 1, e--;
                    f32 = s | (e << 23) | ((m & 0x3ffu) << 13);
                }
            }
            goto from_float;
        case LARDER_DTYPE_F32:
            f32 = larder__le32(in);
        from_float:
            if (to == LARDER_DTYPE_F16) {
                larder__put_le16(out + 2 * i, larder__half_from_float_bits(f32));
            } else if (to == LARDER_DTYPE_F32) {
                larder__put_le32(out + 4 * i, f32);
            } else {
                memcpy(&vf, &f32, 4);
                vd = (double)vf;
                memcpy(&f64, &vd, 8);
                larder__put_le64(out + 8 * i, f64);
            }
            continue;
        case LARDER_DTYPE_F64:
            f64 = larder__le64(in);
            goto from_double;
        case LARDER_DTYPE_I64:
            vd = (double)(int64_t)larder__le64(in);
            if (to == LARDER_DTYPE_F32) goto int64_to_float;
            memcpy(&f64, &vd, 8);
            goto from_double;
        case LARDER_DTYPE_U64:
            vd = (double)larder__le64(in);
            if (to == LARDER_DTYPE_F32) goto int64_to_float;
            memcpy(&f64, &vd, 8);
            goto from_double;
        default:
            vd = element(f->dtype, in); /* exact */
            memcpy(&f64, &vd, 8);
            goto from_double;
        }
    int64_to_float: /* one rounding, from the integer itself, as C (and numpy) do */
        vf = f->dtype == LARDER_DTYPE_I64 ? (float)(int64_t)larder__le64(in)
                                          : (float)larder__le64(in);
        memcpy(&f32, &vf, 4);
        larder__put_le32(out + 4 * i, f32);
        continue;
    from_double:
        if (to == LARDER_DTYPE_F16) {
            larder__put_le16(out + 2 * i, larder__half_from_double_bits(f64));
        } else if (to == LARDER_DTYPE_F32) {
            memcpy(&vd, &f64, 8);
            vf = (float)vd;
            memcpy(&f32, &vf, 4);
            larder__put_le32(out + 4 * i, f32);
        } else {
            larder__put_le64(out + 8 * i, f64);
        }
    }
    result->dtype = to;
    return bytes;
}

static const larder_transform_ops cast_ops = {
    .abi = LARDER_TRANSFORM_ABI,
    .name = "npy_cast",
    .version = 1,
    .parse = cast_parse,
    .applies = cast_applies,
    .bound = cast_bound,
    .run = cast_run,
};

const larder_transform_ops *larder__transform_cast_ops(void)
{
    return &cast_ops;
}
