/*
 * adapt.c - the adaptive staging limit and the span of a miss (adapt.h).
 */
#include "adapt.h"

#include <stdlib.h>
#include <string.h>

#define GROW_BELOW 1.5   /* x the baseline: a window's median under it lets staging grow */
#define SHRINK_ABOVE 2.0 /* x the baseline: a window's median over it halves staging */

static bool set_limit(struct larder__mount_adapt *a, unsigned limit)
{
    if (limit < 1) limit = 1;
    if (limit > LARDER__MOUNT_ADAPT_MAX) limit = LARDER__MOUNT_ADAPT_MAX;
    unsigned before = a->limit ? a->limit : 1;
    a->limit = limit;
    return limit != before;
}

/* Doubled in slow start, else one more. */
static bool grow(struct larder__mount_adapt *a)
{
    unsigned limit = a->limit ? a->limit : 1;
    return set_limit(a, a->congested ? limit + 1 : 2 * limit);
}

static int compare_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The lowest of the quiet EWMA and the recent windows' medians; 0: none. */
static double baseline_of(const struct larder__mount_adapt *a)
{
    double low = a->quiet;
    for (unsigned i = 0; i < a->recent_count && i < LARDER__MOUNT_ADAPT_RECENT; i++)
        if (low <= 0 || a->recent[i] < low) low = a->recent[i];
    return low;
}

bool larder__mount_adapt_miss(struct larder__mount_adapt *a, double ms, bool staging,
                              const char **why)
{
    if (!(ms >= 0) || ms > 1e9) return false; /* NaN, negative, absurd: not a latency */
    a->pieces_calm = 0;
    if (!staging) {
        a->quiet = a->quiet > 0 ? a->quiet + (ms - a->quiet) / 8 : ms;
        a->quiet_age = 0;
        a->baseline = baseline_of(a);
        return false;
    }
    if (a->filled >= LARDER__MOUNT_ADAPT_WINDOW) a->filled = 0;
    a->window[a->filled++] = ms;
    if (a->filled < LARDER__MOUNT_ADAPT_WINDOW) return false;
    double sorted[LARDER__MOUNT_ADAPT_WINDOW];
    memcpy(sorted, a->window, sizeof sorted);
    qsort(sorted, LARDER__MOUNT_ADAPT_WINDOW, sizeof sorted[0], compare_double);
    double median =
        (sorted[LARDER__MOUNT_ADAPT_WINDOW / 2 - 1] + sorted[LARDER__MOUNT_ADAPT_WINDOW / 2]) / 2;
    a->filled = 0;
    if (a->recent_next >= LARDER__MOUNT_ADAPT_RECENT) a->recent_next = 0;
    a->recent[a->recent_next++] = median;
    if (a->recent_count < LARDER__MOUNT_ADAPT_RECENT) a->recent_count++;
    if (++a->quiet_age > LARDER__MOUNT_ADAPT_RECENT) a->quiet = 0; /* aged out, as a window */
    a->baseline = baseline_of(a);
    unsigned limit = a->limit ? a->limit : 1;
    if (median <= GROW_BELOW * a->baseline) {
        if (why)
            *why = a->congested ? "misses near their latency without staging"
                                : "misses near their latency without staging (slow start)";
        return grow(a);
    }
    if (median > SHRINK_ABOVE * a->baseline) {
        if (why) *why = "misses slowed by staging";
        a->congested = true;
        return set_limit(a, limit / 2);
    }
    return false;
}

unsigned larder__mount_adapt_allowed(const struct larder__mount_adapt *a, unsigned fixed,
                                     unsigned waiting)
{
    unsigned limit = fixed ? fixed : a->limit;
    if (limit == 0) limit = 1;
    if (waiting == 0) return limit;
    return limit > 1 ? limit / 2 : 1;
}

bool larder__mount_adapt_piece(struct larder__mount_adapt *a, const char **why)
{
    unsigned limit = a->limit ? a->limit : 1;
    if (++a->pieces_calm < limit) return false;
    a->pieces_calm = 0;
    if (why) *why = "no reader missed";
    return grow(a);
}

uint64_t larder__mount_miss_span(uint64_t at, uint64_t n, uint64_t left, unsigned sum_shift)
{
    uint64_t span = left < LARDER__MOUNT_MISS_SPAN ? left : LARDER__MOUNT_MISS_SPAN;
    if (span < n) span = n < left ? n : left;
    if (sum_shift == 0 || sum_shift > 40 || at > UINT64_MAX - span - (UINT64_C(1) << 40))
        return span;
    uint64_t block = UINT64_C(1) << sum_shift;
    uint64_t end = (at + span) / block * block;          /* the last boundary within the span */
    uint64_t own = (at + n + block - 1) / block * block; /* the end of the miss's own blocks */
    if (end < own) end = own;
    return end - at < span ? end - at : span;
}
