/*
 * args.c - counts, sizes and decimal numbers from the command line, for
 * both programs (args.h).  Integers are parsed digit by digit with an
 * overflow check rather than through strtod, so a size is exact up to
 * 2^64 - 1 and a huge one is refused rather than rounded or wrapped.
 */
#include "args.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Digits at *p into *value, advancing *p; -ERANGE past UINT64_MAX. */
static int take_digits(const char **p, uint64_t *value)
{
    uint64_t v = 0;
    bool overflow = false;
    for (; is_digit(**p); (*p)++) {
        unsigned digit = (unsigned)(**p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            overflow = true;
        else
            v = v * 10 + digit;
    }
    *value = v;
    return overflow ? -ERANGE : 0;
}

int args_parse_u64(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t v;
    if (!text || !is_digit(*p)) return -EINVAL;
    int rc = take_digits(&p, &v);
    if (*p) return -EINVAL;
    if (rc < 0) return rc;
    *out = v;
    return 0;
}

int args_parse_u32(const char *text, uint32_t *out)
{
    uint64_t v;
    int rc = args_parse_u64(text, &v);
    if (rc < 0) return rc;
    if (v > UINT32_MAX) return -ERANGE;
    *out = (uint32_t)v;
    return 0;
}

/* The multiplier of a size's unit at p (the rest of the text); 0: not a unit. */
static uint64_t unit_scale(const char *p)
{
    static const char units[] = "bkmgtp";
    while (*p == ' ')
        p++;
    if (!*p) return 1;
    char letter = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    const char *at = letter ? strchr(units, letter) : NULL;
    if (!at) return 0;
    int power = (int)(at - units);
    p++;
    uint64_t base = 1024;
    if (power == 0) {
        /* "B" alone */
    } else if (*p == 'i' || *p == 'I') {
        p++;
        if (*p == 'b' || *p == 'B') p++;
    } else if (*p == 'b' || *p == 'B') {
        base = 1000, p++;
    }
    if (*p) return 0;
    uint64_t scale = 1;
    for (int i = 0; i < power; i++)
        scale *= base; /* at most 1024^5 */
    return scale;
}

int args_parse_size(const char *text, uint64_t *out)
{
    if (!text) return -EINVAL;
    const char *p = text;
    uint64_t whole = 0, fraction = 0, denominator = 1;
    bool digits = is_digit(*p);
    int rc = take_digits(&p, &whole);
    if (*p == '.') {
        p++;
        digits = digits || is_digit(*p);
        for (; is_digit(*p); p++) {
            if (denominator > UINT64_MAX / 100) continue; /* beyond 18 digits: dropped */
            fraction = fraction * 10 + (uint64_t)(*p - '0');
            denominator *= 10;
        }
    }
    if (!digits) return -EINVAL;
    uint64_t scale = unit_scale(p);
    if (!scale) return -EINVAL;
    if (rc < 0 || whole > UINT64_MAX / scale) return -ERANGE;
    uint64_t bytes = whole * scale;
    /* fraction / denominator < 1, so its share of the scale fits in 64 bits */
    uint64_t part = (uint64_t)((long double)fraction / (long double)denominator * scale);
    if (bytes > UINT64_MAX - part) return -ERANGE;
    *out = bytes + part;
    return 0;
}

int args_parse_decimal(const char *text, double *out)
{
    if (!text) return -EINVAL;
    const char *p = text;
    double v = 0, step = 0.1;
    bool digits = false;
    for (; is_digit(*p); p++, digits = true)
        v = v * 10 + (*p - '0');
    if (*p == '.')
        for (p++; is_digit(*p); p++, digits = true, step /= 10)
            v += (*p - '0') * step;
    if (!digits || *p) return -EINVAL;
    if (v > 1e300) return -ERANGE;
    *out = v;
    return 0;
}
