/*
 * test_mount_adapt.c - the adaptive staging limit of `larder mount`
 * (src/mount/adapt.c, docs/mount.md "Staging on open"), fed made-up miss
 * latencies: the limits expected follow from the rule as documented
 * (a window of 8 misses whose median is within 1.5x the baseline grows
 * the limit: doubled until the first halving (slow start), by one after;
 * past 2x halves it; never below 1 nor above 32; a limit's worth of
 * staging pieces with no miss grows it the same way; the baseline is the
 * lowest of the quiet misses' EWMA and the last 8 windows' medians).
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

TEST(mount_adapt_doubles_while_misses_stay_near_their_quiet_latency_then_adds_one)
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
    CHECK(window_of(&a, 29.0)); /* slow start: doubled */
    CHECK_EQ(a.limit, 4u);
    CHECK(window_of(&a, 21.0));
    CHECK_EQ(a.limit, 8u);
    /* between 1.5x and 2x: held */
    CHECK(!window_of(&a, 35.0));
    CHECK_EQ(a.limit, 8u);
    /* past 2x: halved, and slow start is over: one more per good window */
    CHECK(window_of(&a, 45.0));
    CHECK_EQ(a.limit, 4u);
    CHECK(a.congested);
    CHECK(window_of(&a, 22.0));
    CHECK_EQ(a.limit, 5u);
    CHECK(window_of(&a, 22.0));
    CHECK_EQ(a.limit, 6u);
    /* halved down to one at least, never below */
    CHECK(window_of(&a, 90.0));
    CHECK_EQ(a.limit, 3u);
    CHECK(window_of(&a, 90.0));
    CHECK_EQ(a.limit, 1u);
    /* and up to 32 at most */
    for (int i = 0; i < 40; i++)
        window_of(&a, 10.0);
    CHECK_EQ(a.limit, 32u);
}

TEST(mount_adapt_takes_its_baseline_from_the_recent_medians_and_quiet_misses)
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
    CHECK_EQ(a.limit, 4u);
    /* a quiet miss lower than the medians becomes the baseline */
    larder__mount_adapt_miss(&a, 10.0, false, NULL);
    CHECK(fabs(a.baseline - 10.0) < 1e-9);
    CHECK(window_of(&a, 41.0)); /* now 4x the baseline: halved */
    CHECK_EQ(a.limit, 2u);
}

TEST(mount_adapt_baseline_forgets_a_calm_moment_once_halving_does_not_help)
{
    /* misses slow for a reason of their own (the readers' load on the
     * origin): the limit is halved to one, and once 8 windows at the new
     * latency have passed, the calm window is forgotten and staging grows
     * again, instead of being held at one for good (the rule before:
     * the lowest median ever seen) */
    struct larder__mount_adapt a = {.limit = 4};
    CHECK(window_of(&a, 15.0)); /* the calm moment: 4 -> 8 */
    CHECK_EQ(a.limit, 8u);
    CHECK(window_of(&a, 50.0)); /* > 2 x 15: halved */
    CHECK_EQ(a.limit, 4u);
    CHECK(window_of(&a, 50.0));
    CHECK(window_of(&a, 50.0));
    CHECK_EQ(a.limit, 1u);
    for (int i = 0; i < 4; i++) /* at one, still 50 ms: held at one while 15 is remembered */
        CHECK(!window_of(&a, 50.0));
    CHECK_EQ(a.limit, 1u);
    CHECK(fabs(a.baseline - 15.0) < 1e-9);
    /* the eighth window at 50 pushes the calm one out: 50 is the baseline */
    CHECK(window_of(&a, 50.0));
    CHECK(fabs(a.baseline - 50.0) < 1e-9);
    CHECK_EQ(a.limit, 2u); /* congested: one more */
    CHECK(window_of(&a, 55.0));
    CHECK_EQ(a.limit, 3u);
    /* and staging that does slow them is still halved */
    CHECK(window_of(&a, 120.0));
    CHECK_EQ(a.limit, 1u);
}

TEST(mount_adapt_grows_while_no_reader_misses_and_ignores_bad_latencies)
{
    struct larder__mount_adapt a = {.limit = 0}; /* 0 is taken as 1 */
    CHECK(larder__mount_adapt_piece(&a, NULL));  /* one piece, no miss: doubled to 2 */
    CHECK_EQ(a.limit, 2u);
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK(larder__mount_adapt_piece(&a, NULL)); /* two more: 4 */
    CHECK_EQ(a.limit, 4u);
    /* a miss restarts the count */
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    larder__mount_adapt_miss(&a, 5.0, false, NULL);
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK_EQ(a.limit, 4u);
    CHECK(larder__mount_adapt_piece(&a, NULL)); /* the fourth: 8 */
    CHECK_EQ(a.limit, 8u);
    /* after a halving, a limit's worth of calm pieces adds one */
    a.congested = true;
    for (int i = 0; i < 7; i++)
        CHECK(!larder__mount_adapt_piece(&a, NULL));
    CHECK(larder__mount_adapt_piece(&a, NULL));
    CHECK_EQ(a.limit, 9u);
    /* NaN, negative and absurd latencies change nothing */
    struct larder__mount_adapt before = a;
    CHECK(!larder__mount_adapt_miss(&a, NAN, true, NULL));
    CHECK(!larder__mount_adapt_miss(&a, -1.0, false, NULL));
    CHECK(!larder__mount_adapt_miss(&a, 1e300, true, NULL));
    CHECK_EQ(a.filled, before.filled);
    CHECK(fabs(a.baseline - before.baseline) < 1e-9);
}

/* The span a miss brings in a file being staged, against checksum blocks
 * of 1 MiB (shift 20) and 64 KiB (16): figures worked out by hand. */
TEST(mount_miss_span_stops_at_a_checksum_block_boundary_but_covers_its_own_blocks)
{
    const uint64_t KiB = 1024, MiB = 1024 * KiB, big = 1024 * MiB;
    /* first half of a 1 MiB block: 512 KiB, as before (one block either way) */
    CHECK_EQ(larder__mount_miss_span(3 * MiB + 100, 4096, big, 20), 512 * KiB);
    /* second half: up to the block's end, not into the next block */
    CHECK_EQ(larder__mount_miss_span(3 * MiB + 768 * KiB, 4096, big, 20), 256 * KiB);
    /* a miss crossing the boundary keeps its own two blocks' bytes (up to 512 KiB) */
    CHECK_EQ(larder__mount_miss_span(4 * MiB - 4096, 8192, big, 20), 512 * KiB);
    CHECK_EQ(larder__mount_miss_span(4 * MiB - 4096, 4096, big, 20), 4096u);
    /* 64 KiB blocks: the last boundary within 512 KiB */
    CHECK_EQ(larder__mount_miss_span(3 * MiB + 100, 4096, big, 16), 512 * KiB - 100);
    /* no block sums: 512 KiB; near the file's end: what is left */
    CHECK_EQ(larder__mount_miss_span(3 * MiB + 768 * KiB, 4096, big, 0), 512 * KiB);
    CHECK_EQ(larder__mount_miss_span(3 * MiB + 100, 4096, 10000, 20), 10000u);
    /* hostile shifts and offsets: no overflow, no more than 512 KiB */
    CHECK_EQ(larder__mount_miss_span(UINT64_MAX - 10, 4096, big, 20), 512 * KiB);
    CHECK_EQ(larder__mount_miss_span(3 * MiB, 4096, big, 63), 512 * KiB);
}

/* Pieces allowed in flight: the limit, halved (at least one) while a
 * reader waits on a miss; a fixed limit (--stage-inflight) the same. */
TEST(mount_adapt_allows_half_the_limit_while_a_reader_waits)
{
    struct larder__mount_adapt a = {.limit = 8};
    CHECK_EQ(larder__mount_adapt_allowed(&a, 0, 0), 8u);
    CHECK_EQ(larder__mount_adapt_allowed(&a, 0, 1), 4u);
    CHECK_EQ(larder__mount_adapt_allowed(&a, 0, 5), 4u);
    a.limit = 1;
    CHECK_EQ(larder__mount_adapt_allowed(&a, 0, 1), 1u);
    a.limit = 0; /* taken as 1 */
    CHECK_EQ(larder__mount_adapt_allowed(&a, 0, 0), 1u);
    CHECK_EQ(larder__mount_adapt_allowed(&a, 6, 0), 6u);
    CHECK_EQ(larder__mount_adapt_allowed(&a, 6, 2), 3u);
}

/* The quiet misses' EWMA ages out as a window does: a quiet miss seen once
 * in the first second no longer holds the baseline once 8 windows have
 * been decided with no quiet miss among them (a review finding: it was
 * the baseline for good). */
TEST(mount_adapt_quiet_baseline_expires_after_eight_windows_without_a_quiet_miss)
{
    struct larder__mount_adapt a = {.limit = 4};
    CHECK(!larder__mount_adapt_miss(&a, 5.0, false, NULL)); /* calm first second: 5 ms */
    CHECK(fabs(a.baseline - 5.0) < 1e-9);
    CHECK(window_of(&a, 30.0)); /* 6x: halved */
    CHECK_EQ(a.limit, 2u);
    for (int i = 0; i < 6; i++) /* windows 2-7: still 5 ms remembered, 30 is slow */
        window_of(&a, 30.0);
    CHECK_EQ(a.limit, 1u);
    CHECK(fabs(a.baseline - 5.0) < 1e-9);
    CHECK(!window_of(&a, 30.0)); /* the eighth: not yet */
    CHECK(fabs(a.baseline - 5.0) < 1e-9);
    CHECK(window_of(&a, 30.0)); /* the ninth: the quiet 5 ms has aged out */
    CHECK(fabs(a.baseline - 30.0) < 1e-9);
    CHECK_EQ(a.limit, 2u);
    /* a fresh quiet miss counts again, and restarts its age */
    larder__mount_adapt_miss(&a, 10.0, false, NULL);
    CHECK(fabs(a.baseline - 10.0) < 1e-9);
    for (int i = 0; i < 8; i++)
        window_of(&a, 12.0);
    CHECK(fabs(a.baseline - 10.0) < 1e-9); /* 8 windows: kept (12 > 10) */
    window_of(&a, 12.0);
    CHECK(fabs(a.baseline - 12.0) < 1e-9); /* the ninth: the windows' 12 */
}
