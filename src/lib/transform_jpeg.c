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
#include <string.h>
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
 * walked: then the JPEG is refused, not decoded unbounded (a TEM marker,
 * which has no length and libjpeg passes over, made the walk fail and the
 * bound was skipped: found by review).
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
        if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) { /* TEM, RSTn: no length */
            at += 2;
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
    if (jpeg_buffers_whole(data, (size_t)f->length, &whole, &components) != 0)
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "JPEG whose markers do not lead to its first scan");
    if (whole &&
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

/*
 * Area resize of one axis from `from` pixels to `to`: for output pixel x,
 * the source pixels [first[x], first[x] + count[x]) and their weights
 * (the overlaps, in 1/to units of a source pixel; they add up to `from`),
 * flattened in x order.  The sums are the same whatever order the passes
 * take them in, so the output is the same bytes as the step 3 of
 * docs/transforms.md computed one pixel at a time.
 */
struct area_plan {
    uint32_t *first, *count, *weights;
};

static void area_plan_free(struct area_plan *p)
{
    free(p->first), free(p->count), free(p->weights);
}

static int area_plan(struct area_plan *p, uint32_t from, uint32_t to)
{
    /* each output pixel takes at most from / to + 2 source pixels: the
     * taps add up to at most from + 2 to */
    p->first = malloc(to * sizeof *p->first);
    p->count = malloc(to * sizeof *p->count);
    p->weights = malloc(((size_t)from + 2 * (size_t)to) * sizeof *p->weights);
    if (!p->first || !p->count || !p->weights) {
        area_plan_free(p);
        return -ENOMEM;
    }
    size_t k = 0;
    for (uint32_t x = 0; x < to; x++) {
        uint64_t lo = (uint64_t)x * from, hi = lo + from; /* in 1/to units */
        uint32_t first = (uint32_t)(lo / to), last = (uint32_t)((hi + to - 1) / to);
        p->first[x] = first;
        p->count[x] = last - first;
        for (uint32_t i = first; i < last; i++) {
            uint64_t a = (uint64_t)i * to, b = a + to;
            p->weights[k++] = (uint32_t)((b < hi ? b : hi) - (a > lo ? a : lo));
        }
    }
    return 0;
}

/* The rows' pass: h rows of w RGB pixels to h rows of n.  A sum is at
 * most 255 x w (the weights add up to w), well within 32 bits, and with
 * w / 2 added below 256 w: larder__divide's range (w and h are a JPEG's
 * 16-bit sides, scaled). */
static void area_rows(const struct area_plan *p, const uint8_t *in, uint32_t w, uint32_t h,
                      uint8_t *out, uint32_t n)
{
    for (uint32_t line = 0; line < h; line++) {
        const uint8_t *row = in + (size_t)line * w * 3;
        uint8_t *o = out + (size_t)line * n * 3;
        const uint32_t *weight = p->weights;
        uint64_t m = larder__reciprocal(w);
        for (uint32_t x = 0; x < n; x++) {
            const uint8_t *s = row + (size_t)p->first[x] * 3;
            uint32_t r = 0, g = 0, b = 0;
            for (uint32_t i = 0; i < p->count[x]; i++, s += 3) {
                uint32_t wi = weight[i];
                r += wi * s[0], g += wi * s[1], b += wi * s[2];
            }
            weight += p->count[x];
            o[3 * x] = (uint8_t)larder__divide(r + w / 2, m);
            o[3 * x + 1] = (uint8_t)larder__divide(g + w / 2, m);
            o[3 * x + 2] = (uint8_t)larder__divide(b + w / 2, m);
        }
    }
}

/* The columns' pass: h rows of n RGB pixels to n rows, a whole output row
 * at a time (each source row weighted into `sums`, n x 3 of them). */
static void area_columns(const struct area_plan *p, const uint8_t *in, uint32_t h, uint8_t *out,
                         uint32_t n, uint32_t *sums)
{
    size_t line = (size_t)n * 3;
    const uint32_t *weight = p->weights;
    uint64_t m = larder__reciprocal(h);
    for (uint32_t y = 0; y < n; y++) {
        memset(sums, 0, line * sizeof *sums);
        for (uint32_t i = 0; i < p->count[y]; i++) {
            const uint8_t *row = in + (size_t)(p->first[y] + i) * line;
            uint32_t wi = weight[i];
            for (size_t j = 0; j < line; j++)
                sums[j] += wi * row[j];
        }
        weight += p->count[y];
        uint8_t *o = out + (size_t)y * line;
        for (size_t j = 0; j < line; j++)
            o[j] = (uint8_t)larder__divide(sums[j] + h / 2, m);
    }
}

/* decoded (w x h RGB) to out (n x n RGB) through rows (h x n RGB). */
static int area_resize(const uint8_t *decoded, uint32_t w, uint32_t h, uint8_t *rows, uint8_t *out,
                       uint32_t n)
{
    struct area_plan across, down;
    if (area_plan(&across, w, n) < 0) return -ENOMEM;
    if (area_plan(&down, h, n) < 0) {
        area_plan_free(&across);
        return -ENOMEM;
    }
    uint32_t *sums = malloc((size_t)n * 3 * sizeof *sums);
    if (sums) {
        area_rows(&across, decoded, w, h, rows, n);
        area_columns(&down, rows, h, out, n, sums);
    }
    free(sums);
    area_plan_free(&across);
    area_plan_free(&down);
    return sums ? 0 : -ENOMEM;
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
    if (rc == 0 && area_resize(decoded, w, h, rows, out, n) < 0)
        rc = larder__transform_error(error, error_size, -ENOMEM, "out of memory");
    if (rc == 0) {
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
