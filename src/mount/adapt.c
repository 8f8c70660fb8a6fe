/*
 * adapt.c - the adaptive staging limit (adapt.h).
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

static int compare_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

bool larder__mount_adapt_miss(struct larder__mount_adapt *a, double ms, bool staging,
                              const char **why)
{
    if (!(ms >= 0) || ms > 1e9) return false; /* NaN, negative, absurd: not a latency */
    a->pieces_calm = 0;
    if (!staging) {
        a->quiet = a->quiet > 0 ? a->quiet + (ms - a->quiet) / 8 : ms;
        if (a->baseline <= 0 || a->quiet < a->baseline) a->baseline = a->quiet;
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
    if (a->baseline <= 0 || median < a->baseline) a->baseline = median;
    unsigned limit = a->limit ? a->limit : 1;
    if (median <= GROW_BELOW * a->baseline) {
        if (why) *why = "misses near their latency without staging";
        return set_limit(a, limit + 1);
    }
    if (median > SHRINK_ABOVE * a->baseline) {
        if (why) *why = "misses slowed by staging";
        return set_limit(a, limit / 2);
    }
    return false;
}

bool larder__mount_adapt_piece(struct larder__mount_adapt *a, const char **why)
{
    unsigned limit = a->limit ? a->limit : 1;
    if (++a->pieces_calm < limit) return false;
    a->pieces_calm = 0;
    if (why) *why = "no reader missed";
    return set_limit(a, limit + 1);
}
