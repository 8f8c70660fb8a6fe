/*
 * test_mount_hdf5_extents.c - the pure half of `larder mount`'s HDF5 scan
 * (src/mount/hdf5_extents.c): extents that libhdf5 reports from a hostile
 * file are clipped to the file, sorted and merged, and the metadata is
 * their complement.  Expected values are worked out by hand below.
 */
#include "hdf5_layout.h"
#include "test.h"

#include <string.h>

typedef struct larder__mount_hdf5_extent extent;

TEST(mount_hdf5_normalize_clips_sorts_and_merges)
{
    extent e[] = {
        {900, 200},            /* runs past the end (1000): clipped to 100 */
        {100, 50},             /* [100, 150) */
        {140, 20},             /* overlaps it: [100, 160) */
        {160, 10},             /* touches it: [100, 170) */
        {500, 0},              /* empty: dropped */
        {1000, 5},             /* at the end: dropped */
        {UINT64_MAX - 3, 100}, /* wraps: dropped (past the end) */
        {300, UINT64_MAX},     /* huge: [300, 1000), swallowing the first */
    };
    size_t n = larder__mount_hdf5_normalize(e, sizeof e / sizeof e[0], 1000);
    CHECK_EQ(n, (size_t)2);
    CHECK_EQ(e[0].offset, (uint64_t)100);
    CHECK_EQ(e[0].length, (uint64_t)70);
    CHECK_EQ(e[1].offset, (uint64_t)300);
    CHECK_EQ(e[1].length, (uint64_t)700);
}

TEST(mount_hdf5_complement_is_the_gaps)
{
    extent raw[] = {{100, 70}, {300, 200}};
    extent out[4];
    size_t n = larder__mount_hdf5_complement(raw, 2, 1000, out, 4);
    CHECK_EQ(n, (size_t)3);
    CHECK(out[0].offset == 0 && out[0].length == 100);
    CHECK(out[1].offset == 170 && out[1].length == 130);
    CHECK(out[2].offset == 500 && out[2].length == 500);
    /* counted past the capacity, written up to it */
    memset(out, 0, sizeof out);
    CHECK_EQ(larder__mount_hdf5_complement(raw, 2, 1000, out, 1), (size_t)3);
    CHECK(out[0].offset == 0 && out[0].length == 100 && out[1].length == 0);
    /* raw data from the start to the end: no metadata */
    extent all[] = {{0, 1000}};
    CHECK_EQ(larder__mount_hdf5_complement(all, 1, 1000, out, 4), (size_t)0);
    /* no raw data: the whole file */
    CHECK_EQ(larder__mount_hdf5_complement(NULL, 0, 1000, out, 4), (size_t)1);
    CHECK(out[0].offset == 0 && out[0].length == 1000);
    /* extents not normalized (past the end) never give a gap outside the file */
    extent wild[] = {{200, UINT64_MAX}, {5000, 10}};
    CHECK_EQ(larder__mount_hdf5_complement(wild, 2, 1000, out, 4), (size_t)1);
    CHECK(out[0].offset == 0 && out[0].length == 200);
}

TEST(mount_hdf5_signature)
{
    const uint8_t good[] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n', 0};
    const uint8_t bad[] = {0x89, 'H', 'D', 'F', '\n', '\r', 0x1a, '\n'};
    CHECK(larder__mount_hdf5_signature(good, sizeof good));
    CHECK(!larder__mount_hdf5_signature(good, 7));
    CHECK(!larder__mount_hdf5_signature(bad, sizeof bad));
}
