/*
 * test_mount_hdf5_member.c - following one member group of an HDF5 file
 * (src/mount/hdf5_member.c) through a small file laid out by hand here from
 * the HDF5 format specification (version-1 object header, symbol table
 * message, local heap, version-1 B-tree, symbol-table node, data layout
 * message version 3), and the same file made hostile.
 */
#include "hdf5_layout.h"
#include "test.h"

#include <string.h>

#define FILE_SIZE 65536
static uint8_t image[FILE_SIZE];

static void put(uint64_t at, uint64_t value, int bytes)
{
    for (int b = 0; b < bytes; b++)
        image[at + (uint64_t)b] = (uint8_t)(value >> (8 * b));
}

/* A version-1 object header at `at` with one message of `type`: its payload's offset. */
static uint64_t header(uint64_t at, unsigned type, unsigned payload)
{
    image[at] = 1;               /* version */
    put(at + 2, 1, 2);           /* one message */
    put(at + 8, 8 + payload, 4); /* the messages' bytes */
    put(at + 16, type, 2);       /* the message: type */
    put(at + 18, payload, 2);    /* its size */
    return at + 24;
}

static int read_image(void *context, uint64_t offset, void *buf, size_t length)
{
    (void)context;
    if (offset > FILE_SIZE || length > FILE_SIZE - offset) return -1;
    memcpy(buf, image + offset, length);
    return 0;
}

/* group header at 1000 -> B-tree 2000, heap 3000 (data at 3100, 64 bytes);
 * B-tree -> symbol-table node 4000 -> datasets' headers 5000 and 6000;
 * their data at 20000 (800 bytes) and 30000 (1200). */
static void lay_out(void)
{
    memset(image, 0, sizeof image);
    uint64_t p = header(1000, 0x11, 16);
    put(p, 2000, 8), put(p + 8, 3000, 8);
    memcpy(image + 3000, "HEAP", 4);
    put(3000 + 8, 64, 8), put(3000 + 24, 3100, 8);
    memcpy(image + 2000, "TREE", 4);
    put(2000 + 6, 1, 2);         /* one child, level 0, type 0 (group) */
    put(2000 + 24 + 8, 4000, 8); /* key 0, then child 0 */
    memcpy(image + 4000, "SNOD", 4);
    image[4004] = 1;
    put(4000 + 6, 2, 2);
    put(4000 + 8 + 8, 5000, 8), put(4000 + 48 + 8, 6000, 8);
    p = header(5000, 0x08, 18);
    image[p] = 3, image[p + 1] = 1, put(p + 2, 20000, 8), put(p + 10, 800, 8);
    p = header(6000, 0x08, 18);
    image[p] = 3, image[p + 1] = 1, put(p + 2, 30000, 8), put(p + 10, 1200, 8);
}

static bool has(const struct larder__mount_hdf5_extent *e, size_t n, uint64_t offset,
                uint64_t length)
{
    for (size_t i = 0; i < n; i++)
        if (e[i].offset == offset && e[i].length == length) return true;
    return false;
}

TEST(mount_hdf5_member_follows_a_group_to_its_data)
{
    lay_out();
    struct larder__mount_hdf5_extent e[64];
    size_t n = larder__mount_hdf5_member(read_image, NULL, FILE_SIZE, 1000, e, 64);
    CHECK(has(e, n, 20000, 800));
    CHECK(has(e, n, 30000, 1200));
    CHECK(has(e, n, 1000, 16 + 8 + 16)); /* the group's header */
    CHECK(has(e, n, 3100, 64));          /* its heap's data */
    CHECK(has(e, n, 4000, 8 + 2 * 40));  /* its symbol-table node */
    CHECK(has(e, n, 5000, 16 + 8 + 18)); /* a dataset's header */
    CHECK(n == 9); /* + the heap's header, the B-tree node, the other dataset's header */
    /* room for three: the first three, nothing past */
    CHECK(larder__mount_hdf5_member(read_image, NULL, FILE_SIZE, 1000, e, 3) == 3);
}

TEST(mount_hdf5_member_bounds_what_the_file_says)
{
    struct larder__mount_hdf5_extent e[64];
    lay_out();
    put(1000 + 18, 4000, 2); /* the message runs past the header */
    CHECK(larder__mount_hdf5_member(read_image, NULL, FILE_SIZE, 1000, e, 64) == 1);
    lay_out();
    image[1000] = 2; /* not a version-1 header */
    CHECK(larder__mount_hdf5_member(read_image, NULL, FILE_SIZE, 1000, e, 64) == 1);
    lay_out();
    put(4000 + 8 + 8, UINT64_C(1) << 40, 8);   /* a dataset past the file's end */
    put(6000 + 24 + 10, UINT64_C(1) << 40, 8); /* data running past it */
    size_t n = larder__mount_hdf5_member(read_image, NULL, FILE_SIZE, 1000, e, 64);
    for (size_t i = 0; i < n; i++)
        CHECK(e[i].offset < FILE_SIZE && e[i].length <= FILE_SIZE - e[i].offset);
    CHECK(has(e, n, 30000, FILE_SIZE - 30000)); /* clipped to the file */
    CHECK(larder__mount_hdf5_member(read_image, NULL, FILE_SIZE, FILE_SIZE + 1, e, 64) == 0);
    const uint8_t *payload;
    size_t length;
    lay_out();
    CHECK(larder__mount_hdf5_v1_message(image + 5000, 64, 0x08, &payload, &length) == 0);
    CHECK(payload == image + 5024 && length == 18);
    CHECK(larder__mount_hdf5_v1_message(image + 5000, 64, 0x11, &payload, &length) < 0);
    CHECK(larder__mount_hdf5_v1_message(image + 5000, 30, 0x08, &payload, &length) < 0);
}
