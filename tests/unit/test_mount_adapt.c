/*
 * test_mount_adapt.c - the adaptive staging limit of `larder mount`
 * (src/mount/adapt.c, docs/mount.md "Staging on open"), fed made-up miss
 * latencies: the limits expected follow from the rule as documented
 * (grow by one per window of 8 misses whose median is within 1.5x the
 * no-staging latency, halve past 2x, never below 1 nor above 32; a
 * limit's worth of staging pieces with no miss grows it by one).
 */
#include "adapt.h"
#include "test.h"

#include <math.h>

/* Eight misses of `ms` with staging in flight: whether the limit changed. */
static bool window_of(struct larder__mount_adapt *a, double ms)
{
    bool changed = false;
    for (int i = 0; i < 8; i++)
        changed = larder__mount_adapt_miss(a, ms, true, NULL) || changed;
    return changed;
}

TEST(mount_adapt_grows_while_misses_stay_near_their_quiet_latency)
{
    struct larder__mount_adapt a = {.limit = 1};
    for (int i = 0; i < 4; i++) /* misses with no staging in flight: 20 ms */
        CHECK(!larder__mount_adapt_miss(&a, 20.0, false, NULL));
    CHECK(fabs(a.baseline - 20.0) < 1e-9);
    /* seven misses decide nothing; the eighth closes the window */
    for (int i = 0; i < 7; i++)
        CHECK(!larder__mount_adapt_miss(&a, 25.0, true, NULL));
    CHECK_EQ(a.limit, 1u);
    const char *why = NULL;
    CHECK(larder__mount_adapt_miss(&a, 25.0, true, &why)); /* 25 <= 1.5 x 20 */
    CHECK_EQ(a.limit, 2u);
    CHECK(why != NULL);
    CHECK(window_of(&a, 29.0));
    CHECK_EQ(a.limit, 3u);
    /* between 1.5x and 2x: held */
    CHECK(!window_of(&a, 35.0));
    CHECK_EQ(a.limit, 3u);
    /* past 2x: halved, then halved again, never below one */
    CHECK(window_of(&a, 45.0));
    CHECK_EQ(a.limit, 1u);
    CHECK(!window_of(&a, 90.0));
    CHECK_EQ(a.limit, 1u);
    /* and up to 32 at most */
    for (int i = 0; i < 40; i++)
        window_of(&a, 10.0);
    CHECK_EQ(a.limit, 32u);
}

TEST(mount_adapt_takes_its_baseline_from_the_medians_until_a_quiet_miss)
{
    struct larder__mount_adapt a = {.limit = 1};
    /* staging from the start: the first window's median is the baseline */
    CHECK(window_of(&a, 40.0)); /* 40 <= 1.5 x 40: grows */
    CHECK_EQ(a.limit, 2u);
    CHECK(fabs(a.baseline - 40.0) < 1e-9);
    /* a median is the middle of the window, not its mean: one stall of
     * two seconds among fast misses does not cut the limit */
    for (int i = 0; i < 7; i++)
        larder__mount_adapt_miss(&a, 41.0, true, NULL);
    CHECK(larder__mount_adapt_miss(&a, 2000.0, true, NULL));
    CHECK_EQ(a.limit, 3u);
    /* a quiet miss lower than the medians becomes the baseline */
    larder__mount_adapt_miss(&a, 10.0, false, NULL);
    CHECK(fabs(a.baseline - 10.0) < 1e-9);
    CHECK(window_of(&a, 41.0)); /* now 4x the baseline: halved */
    CHECK_EQ(a.limit, 1u);
}

TEST(mount_adapt_grows_while_no_reader_misses_and_ignores_bad_latencies)
{
    struct larder__mount_adapt a = {.limit = 0}; /* 0 is taken as 1 */
    CHECK(larder__mount_adapt_piece(&a, NULL));  /* one piece, no miss: 2 */
    CHECK_EQ(a.limit, 2u);
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK(larder__mount_adapt_piece(&a, NULL)); /* two more: 3 */
    CHECK_EQ(a.limit, 3u);
    /* a miss restarts the count */
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    larder__mount_adapt_miss(&a, 5.0, false, NULL);
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK_EQ(a.limit, 3u);
    /* NaN, negative and absurd latencies change nothing */
    struct larder__mount_adapt before = a;
    CHECK(!larder__mount_adapt_miss(&a, NAN, true, NULL));
    CHECK(!larder__mount_adapt_miss(&a, -1.0, false, NULL));
    CHECK(!larder__mount_adapt_miss(&a, 1e300, true, NULL));
    CHECK_EQ(a.filled, before.filled);
    CHECK(fabs(a.baseline - before.baseline) < 1e-9);
}
