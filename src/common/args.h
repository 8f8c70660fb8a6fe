/*
 * args.h - the command-line values both programs parse (larder and
 * larderd): counts, sizes with units, decimal numbers such as rates and
 * intervals.  Pure: no I/O, no allocation, no locale; every parser takes
 * the whole text or nothing, and leaves *out untouched on failure.
 *
 * Each returns 0, -EINVAL for malformed text, or -ERANGE for a value
 * that does not fit (so 99999999999999999999G is refused, never wrapped).
 */
#ifndef LARDER_ARGS_H
#define LARDER_ARGS_H

#include <stdint.h>

/* A plain decimal count: digits only ("0", "64"). */
int args_parse_u64(const char *text, uint64_t *out);
/* The same, at most UINT32_MAX. */
int args_parse_u32(const char *text, uint32_t *out);
/*
 * A size in bytes: a decimal number (a fraction allowed: "1.5G") and an
 * optional unit, spaces between them allowed.  K, M, G, T, P alone or
 * with "i"/"iB" are binary (64K = 65536, 1GiB = 2^30); with "B" they are
 * decimal (1GB = 10^9); "B" or no unit is bytes.  Case is ignored.  A
 * fraction of a byte is dropped.
 */
int args_parse_size(const char *text, uint64_t *out);
/*
 * A non-negative decimal number, digits with an optional fraction ("60",
 * "0.3", ".5"): rates, intervals in seconds.  No sign, exponent, hex,
 * "inf" or "nan".
 */
int args_parse_decimal(const char *text, double *out);

#endif
