/*
 * transform_jpeg.c - the built-in jpeg_decode_resize:N: a JPEG field
 * (named jpg or jpeg, or ending in .jpg / .jpeg) decoded by libturbojpeg
 * and resized to N x N RGB, uint8, shape (N, N, 3).
 *
 * The algorithm (docs/transforms.md), deterministic to the byte:
 *   1. the largest of libjpeg's DCT scalings 1/8, 1/4, 1/2 (else 1/1)
 *      whose decoded width and height, ceil(W * s) and ceil(H * s), are
 *      both at least N: the decoder skips the detail a resize would drop;
 *   2. decode to RGB at that scale (libjpeg-turbo's accurate integer IDCT
 *      and its default upsampling), refusing any warning: a truncated or
 *      corrupt file is an error, never a grey-filled image;
 *   3. an area resize to N x N, separable, in integers: output pixel x of
 *      a row of w covers [x w, (x+1) w) in units of 1/N source pixels;
 *      each source pixel i covers [i N, (i+1) N) and weighs by the overlap;
 *      the sum over the overlap, (sum + w/2) / w, rounded, as uint8.
 *      Rows first (width w to N), then columns (height h to N).
 */
#include "transform.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <turbojpeg.h>

#define MAX_SIDE 4096                          /* N at most */
#define MAX_SOURCE_PIXELS (UINT64_C(1) << 28)  /* of the JPEG as stored */
#define MAX_DECODED_BYTES (UINT64_C(96) << 20) /* of the scaled decode, and of the rows' pass */
/* libjpeg holds a progressive (or multi-scan) JPEG's DCT coefficients
 * whole, whatever the output scale, 2 bytes a sample: width x height x
 * components x 2 (less with chroma subsampling).  TurboJPEG 2.1 has no
 * memory cap (TJPARAM_MAXMEMORY is 3.0's), so such JPEGs are bounded by
 * that size before libjpeg sees them. */
#define MAX_COEFFICIENT_BYTES (UINT64_C(96) << 20)

/*
 * Whether libjpeg will buffer the whole image's coefficients: a
 * progressive frame (SOF2, 6, 10, 14), or a sequential one whose first
 * scan has fewer components than the frame.  Walks the markers up to the
 * first SOS; *components is the frame's.  0, or -1 when they cannot be
 * walked (the decoder then fails on its own).
 */
static int jpeg_buffers_whole(const void *data, size_t length, bool *whole, int *components)
{
    const uint8_t *b = data;
    *whole = false;
    *components = 0;
    bool progressive = false;
    size_t at = 2; /* after SOI */
    while (at + 4 <= length) {
        if (b[at] != 0xFF) return -1;
        uint8_t marker = b[at + 1];
        if (marker == 0xFF) { /* fill */
            at++;
            continue;
        }
        size_t segment = ((size_t)b[at + 2] << 8) | b[at + 3];
        if (segment < 2 || at + 2 + segment > length) return -1;
        const uint8_t *p = b + at + 4;
        bool sof =
            marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
        if (sof && segment >= 8) {
            progressive = marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE;
            *components = p[5];
        } else if (marker == 0xDA && segment >= 3) {
            *whole = progressive || p[0] < *components;
            return 0;
        }
        at += 2 + segment;
    }
    return -1;
}

struct jpeg_state {
    uint32_t side;
};

static int jpeg_parse(const char *params, void *state_, char *canonical, char *error,
                      size_t error_size)
{
    struct jpeg_state *state = state_;
    uint64_t n = 0;
    size_t i = 0;
    for (; params[i] >= '0' && params[i] <= '9' && i < 8; i++)
        n = n * 10 + (uint64_t)(params[i] - '0');
    if (i == 0 || params[i] || params[0] == '0' || n > MAX_SIDE)
        return larder__transform_error(error, error_size, LARDER_EUSAGE,
                                       "parameter '%.40s': the side N in pixels, 1 to %d "
                                       "(jpeg_decode_resize:224)",
                                       params, MAX_SIDE);
    state->side = (uint32_t)n;
    snprintf(canonical, LARDER_TRANSFORM_MAX_SPEC, "%u", state->side);
    return 0;
}

static int jpeg_applies(const void *state, const larder_field_info *f)
{
    (void)state;
    if (!f->name || f->dtype != LARDER_DTYPE_NONE) return 0;
    const char *dot = strrchr(f->name, '.');
    const char *ext = dot ? dot + 1 : f->name;
    return strcasecmp(ext, "jpg") == 0 || strcasecmp(ext, "jpeg") == 0;
}

/* The header's size, and the scale (1, 2, 4 or 8: a divisor) step 1 picks. */
static int jpeg_header(tjhandle tj, const struct jpeg_state *state, const larder_field_info *f,
                       const void *data, int *width, int *height, int *divisor, char *error,
                       size_t error_size)
{
    int subsampling, colorspace;
    if (f->length > ULONG_MAX || f->length < 4 ||
        tjDecompressHeader3(tj, data, (unsigned long)f->length, width, height, &subsampling,
                            &colorspace) != 0)
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "not a JPEG, or a corrupt one: %s",
                                       f->length < 4 ? "too short" : tjGetErrorStr2(tj));
    if (*width <= 0 || *height <= 0 || (uint64_t)*width * (uint64_t)*height > MAX_SOURCE_PIXELS)
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "JPEG of %d x %d pixels: at most %llu", *width, *height,
                                       (unsigned long long)MAX_SOURCE_PIXELS);
    bool whole;
    int components;
    if (jpeg_buffers_whole(data, (size_t)f->length, &whole, &components) == 0 && whole &&
        (uint64_t)*width * (uint64_t)*height * (uint64_t)components * 2 > MAX_COEFFICIENT_BYTES)
        return larder__transform_error(
            error, error_size, LARDER_EUNSUPPORTED,
            "progressive (or multi-scan) JPEG of %d x %d pixels, %d components: its "
            "coefficients would take %llu bytes, at most %llu",
            *width, *height, components,
            (unsigned long long)((uint64_t)*width * (uint64_t)*height * (uint64_t)components * 2),
            (unsigned long long)MAX_COEFFICIENT_BYTES);
    *divisor = 1;
    for (int d = 8; d >= 2; d /= 2)
        if ((uint64_t)((*width + d - 1) / d) >= state->side &&
            (uint64_t)((*height + d - 1) / d) >= state->side) {
            *divisor = d;
            break;
        }
    uint64_t w = (uint64_t)((*width + *divisor - 1) / *divisor);
    uint64_t h = (uint64_t)((*height + *divisor - 1) / *divisor);
    if (w * h * 3 > MAX_DECODED_BYTES)
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "JPEG of %d x %d pixels decodes to too many bytes", *width,
                                       *height);
    /* the rows' pass: h rows of N pixels (a 1 x 65500 JPEG to 4096: 768 MiB) */
    if (h * state->side * 3 > MAX_DECODED_BYTES)
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "JPEG of %d x %d pixels resized to %u: its rows' pass "
                                       "takes %llu bytes, at most %llu",
                                       *width, *height, state->side,
                                       (unsigned long long)(h * state->side * 3),
                                       (unsigned long long)MAX_DECODED_BYTES);
    return 0;
}

static int64_t jpeg_bound(const void *state_, const larder_field_info *f, const void *data,
                          char *error, size_t error_size)
{
    const struct jpeg_state *state = state_;
    tjhandle tj = tjInitDecompress();
    if (!tj) return larder__transform_error(error, error_size, -ENOMEM, "no turbojpeg handle");
    int width, height, divisor;
    int rc = jpeg_header(tj, state, f, data, &width, &height, &divisor, error, error_size);
    tjDestroy(tj);
    if (rc < 0) return rc;
    return (int64_t)state->side * state->side * 3;
}

/* Area resize of one axis: `count` lines of `from` pixels (stride apart,
 * `step` apart within a line) to `to` pixels, into out (same layout). */
static void area_axis(const uint8_t *in, size_t in_stride, size_t in_step, uint8_t *out,
                      size_t out_stride, size_t out_step, size_t count, uint32_t from, uint32_t to)
{
    for (uint32_t x = 0; x < to; x++) {
        uint64_t lo = (uint64_t)x * from, hi = (uint64_t)(x + 1) * from; /* in 1/to units */
        uint32_t first = (uint32_t)(lo / to), last = (uint32_t)((hi + to - 1) / to);
        for (size_t line = 0; line < count; line++)
            for (int c = 0; c < 3; c++) {
                uint64_t sum = 0;
                for (uint32_t i = first; i < last; i++) {
                    uint64_t a = (uint64_t)i * to, b = a + to;
                    uint64_t w = (b < hi ? b : hi) - (a > lo ? a : lo);
                    sum += w * in[line * in_stride + i * in_step + (size_t)c];
                }
                out[line * out_stride + x * out_step + (size_t)c] =
                    (uint8_t)((sum + from / 2) / from);
            }
    }
}

static int64_t jpeg_run(const void *state_, const larder_field_info *f, const void *data, void *out,
                        size_t capacity, larder_field_info *result, char *name, char *error,
                        size_t error_size)
{
    const struct jpeg_state *state = state_;
    uint32_t n = state->side;
    (void)name; /* the field keeps its name */
    if (capacity < (size_t)n * n * 3)
        return larder__transform_error(error, error_size, LARDER_ETOOSMALL, "no room");
    tjhandle tj = tjInitDecompress();
    if (!tj) return larder__transform_error(error, error_size, -ENOMEM, "no turbojpeg handle");
    int width, height, divisor;
    int64_t rc = jpeg_header(tj, state, f, data, &width, &height, &divisor, error, error_size);
    uint32_t w = (uint32_t)((width + divisor - 1) / divisor);
    uint32_t h = (uint32_t)((height + divisor - 1) / divisor);
    uint8_t *decoded = rc == 0 ? malloc((size_t)w * h * 3) : NULL;
    uint8_t *rows = rc == 0 ? malloc((size_t)h * n * 3) : NULL;
    if (rc == 0 && (!decoded || !rows))
        rc = larder__transform_error(error, error_size, -ENOMEM, "out of memory");
    if (rc == 0 && tjDecompress2(tj, data, (unsigned long)f->length, decoded, (int)w, 0, (int)h,
                                 TJPF_RGB, TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
        rc = larder__transform_error(error, error_size, LARDER_EUNSUPPORTED, "corrupt JPEG: %s",
                                     tjGetErrorStr2(tj));
    if (rc == 0) {
        area_axis(decoded, (size_t)w * 3, 3, rows, (size_t)n * 3, 3, h, w, n); /* rows */
        area_axis(rows, 3, (size_t)n * 3, out, 3, (size_t)n * 3, n, h, n);     /* columns */
        result->dtype = LARDER_DTYPE_U8;
        result->ndim = 3;
        result->shape[0] = n;
        result->shape[1] = n;
        result->shape[2] = 3;
        rc = (int64_t)n * n * 3;
    }
    free(decoded);
    free(rows);
    tjDestroy(tj);
    return rc;
}

uint64_t larder__transform_jpeg_max_output(const void *state_)
{
    const struct jpeg_state *state = state_;
    return (uint64_t)state->side * state->side * 3;
}

static const larder_transform_ops jpeg_ops = {
    .abi = LARDER_TRANSFORM_ABI,
    .name = "jpeg_decode_resize",
    .version = 1,
    .parse = jpeg_parse,
    .applies = jpeg_applies,
    .bound = jpeg_bound,
    .run = jpeg_run,
};

const larder_transform_ops *larder__transform_jpeg_ops(void)
{
    return &jpeg_ops;
}
