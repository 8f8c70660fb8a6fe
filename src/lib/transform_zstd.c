/*
 * transform_zstd.c - the built-in zstd_decompress: a field named zst or
 * ending in .zst (WebDataset: "KEY.bin.zst" is the field "bin.zst")
 * decompressed by libzstd into the field without its ".zst", plain bytes.
 *
 * The output is bounded before anything is decompressed: by the frames'
 * content sizes where their headers state them (the zstd tool does for
 * files), else by their blocks (at most 128 KiB each: a stream's frames),
 * libzstd's ZSTD_decompressBound.  Data that could decompress to more than
 * LARDER_TRANSFORM_MAX_OUTPUT is refused with an error (a zstd bomb), and
 * decompression writes into that bound and no further.
 */
#include "transform.h"

#include <errno.h>
#include <stdio.h>
#include <strings.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_decompressBound: exported by libzstd 1.4+ */
#include <zstd.h>

static int zstd_parse(const char *params, void *state, char *canonical, char *error,
                      size_t error_size)
{
    (void)state;
    canonical[0] = '\0';
    if (params[0])
        return larder__transform_error(error, error_size, LARDER_EUSAGE,
                                       "takes no parameters (got '%.40s')", params);
    return 0;
}

static int zstd_applies(const void *state, const larder_field_info *f)
{
    (void)state;
    if (!f->name || f->dtype != LARDER_DTYPE_NONE) return 0;
    const char *dot = strrchr(f->name, '.');
    return strcasecmp(dot ? dot + 1 : f->name, "zst") == 0;
}

static int64_t zstd_bound(const void *state, const larder_field_info *f, const void *data,
                          char *error, size_t error_size)
{
    (void)state;
    /* no frame at all (empty) is not zstd data either */
    unsigned long long size =
        f->length < 4 ? ZSTD_CONTENTSIZE_ERROR : ZSTD_decompressBound(data, (size_t)f->length);
    if (size == ZSTD_CONTENTSIZE_ERROR)
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "not zstd data, or a corrupt frame");
    if (size > LARDER_TRANSFORM_MAX_OUTPUT)
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "zstd data may decompress to %llu bytes: at most %u", size,
                                       LARDER_TRANSFORM_MAX_OUTPUT);
    return (int64_t)size;
}

static int64_t zstd_run(const void *state, const larder_field_info *f, const void *data, void *out,
                        size_t capacity, larder_field_info *result, char *name, char *error,
                        size_t error_size)
{
    int64_t bound = zstd_bound(state, f, data, error, error_size);
    if (bound < 0) return bound;
    if ((uint64_t)bound > capacity)
        return larder__transform_error(error, error_size, LARDER_ETOOSMALL, "no room");
    /* into the bound and no further; a frame that holds other than its
     * header's content size is an error of libzstd's */
    size_t n = ZSTD_decompress(out, (size_t)bound, data, (size_t)f->length);
    if (ZSTD_isError(n))
        return larder__transform_error(error, error_size, LARDER_EUNSUPPORTED,
                                       "corrupt zstd data: %s", ZSTD_getErrorName(n));
    size_t length = strlen(name);
    if (length >= 4 && strcasecmp(name + length - 4, ".zst") == 0)
        name[length - 4] = '\0';
    else if (strcasecmp(name, "zst") == 0)
        snprintf(name, LARDER_TRANSFORM_MAX_NAME, "bin");
    result->dtype = LARDER_DTYPE_NONE;
    result->ndim = 0;
    return (int64_t)n;
}

static const larder_transform_ops zstd_ops = {
    .abi = LARDER_TRANSFORM_ABI,
    .name = "zstd_decompress",
    .version = 1,
    .parse = zstd_parse,
    .applies = zstd_applies,
    .bound = zstd_bound,
    .run = zstd_run,
};

const larder_transform_ops *larder__transform_zstd_ops(void)
{
    return &zstd_ops;
}
