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
#define MAX_DECODED_BYTES (UINT64_C(96) << 20) /* of the scaled decode */

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
    *divisor = 1;
    for (int d = 8; d >= 2; d /= 2)
        if ((uint64_t)((*width + d - 1) / d) >= state->side &&
            (uint64_t)((*height + d - 1) / d) >= state->side) {
            *divisor = d;
            break;
        }
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
    if (rc == 0 && (uint64_t)w * h * 3 > MAX_DECODED_BYTES)
        rc = larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                     "JPEG of %d x %d pixels decodes to too many bytes", width,
                                     height);
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
