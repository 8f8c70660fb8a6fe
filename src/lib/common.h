/*
 * common.h - helpers shared by every liblarder module: error recording,
 * logging, little-endian access and overflow-checked arithmetic.
 * Internal names carry the larder__ prefix and are hidden from the
 * shared library's exports.
 */
#ifndef LARDER_COMMON_H
#define LARDER_COMMON_H

#include "larder.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define LARDER__HIDDEN __attribute__((visibility("hidden")))
#define LARDER__PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* Record a detailed message for larder_errmsg() and return `code`. */
LARDER__HIDDEN int larder__fail(int code, const char *fmt, ...) LARDER__PRINTF(2, 3);
/* Prefix the current detail with "prefix: " (for callers adding context). */
LARDER__HIDDEN int larder__fail_context(int code, const char *fmt, ...) LARDER__PRINTF(2, 3);

LARDER__HIDDEN void larder__log(int level, const char *fmt, ...) LARDER__PRINTF(2, 3);

static inline uint16_t larder__le16(const void *p)
{
    const uint8_t *b = p;
    return (uint16_t)(b[0] | b[1] << 8);
}
static inline uint32_t larder__le32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t larder__le64(const void *p)
{
    return (uint64_t)larder__le32(p) | (uint64_t)larder__le32((const uint8_t *)p + 4) << 32;
}
static inline void larder__put_le32(void *p, uint32_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v, b[1] = (uint8_t)(v >> 8), b[2] = (uint8_t)(v >> 16),
    b[3] = (uint8_t)(v >> 24);
}
static inline void larder__put_le16(void *p, uint16_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v, b[1] = (uint8_t)(v >> 8);
}
static inline void larder__put_le64(void *p, uint64_t v)
{
    larder__put_le32(p, (uint32_t)v);
    larder__put_le32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* a + b and a * b, false on overflow. */
static inline bool larder__add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline bool larder__mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* util.c.  Growable array helper: ensure room for `need` elements of `size`. */
LARDER__HIDDEN int larder__reserve(void **items, size_t *capacity, size_t need, size_t size);

/* xxh3-128 as 32 lowercase hex digits plus NUL. */
LARDER__HIDDEN void larder__hex128(uint64_t high, uint64_t low, char out[33]);

#endif
