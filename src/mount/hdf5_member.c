/*
 * hdf5_member.c - where one member group of an HDF5 file keeps its bytes
 * (mount.h, docs/mount.md "A registered row order for an HDF5 file").
 *
 * A registered row order stages the next members a rank reads.  A member's
 * bytes are not those from its object header to the next member's: h5py's
 * files (libhdf5's allocation from its metadata and small-data blocks)
 * keep a group's datasets 0.5-2.3 MB past its header in the seed
 * benchmark's file, beyond the headers of several other members.  So each
 * member is followed here as libhdf5 would follow it, four small reads
 * deep: its object header (version 1) names its symbol table (a B-tree and
 * a local heap); the B-tree's node names its symbol-table nodes; their
 * entries name the datasets' object headers; and each of those holds a
 * data layout message with the data's address and size (contiguous) or
 * nothing to follow (chunked, compact).  Everything read is the file's and
 * hostile: every count and offset is bounded by the bytes read, every
 * address by the file's size; a wrong answer stages other bytes of the
 * same file, never more than MEMBER_EXTENTS extents.
 *
 * The parsers (larder__mount_hdf5_*message*) do no I/O; the walk reads
 * through a callback (hdf5_order.c: the checksum block a read starts in
 * through the cache, checked; the rest, if any, unchecked from the origin).
 */
#include "hdf5_layout.h"

#include <stdlib.h>
#include <string.h>

#define NODE_BYTES 4096 /* read of a header or node: h5py's are 300-1000 bytes */

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int b = n - 1; b >= 0; b--)
        v = v << 8 | p[b];
    return v;
}

int larder__mount_hdf5_v1_message(const uint8_t *header, size_t length, unsigned type,
                                  const uint8_t **payload, size_t *payload_length)
{
    if (length < 16 || header[0] != 1) return -1; /* version 1 object headers only */
    size_t messages = (size_t)le(header + 2, 2), size = (size_t)le(header + 8, 4);
    size_t end = 16 + size < length ? 16 + size : length, at = 16;
    for (size_t i = 0; i < messages && at + 8 <= end; i++) {
        unsigned t = (unsigned)le(header + at, 2);
        size_t n = (size_t)le(header + at + 2, 2);
        if (at + 8 + n > end) return -1;
        if (t == type) {
            *payload = header + at + 8, *payload_length = n;
            return 0;
        }
        at += 8 + n;
    }
    return -1;
}

/* The B-tree address of a group's header's symbol table message (0x11), or UINT64_MAX. */
static uint64_t symbol_table(const uint8_t *header, size_t length, uint64_t *heap)
{
    const uint8_t *p;
    size_t n;
    if (larder__mount_hdf5_v1_message(header, length, 0x11, &p, &n) < 0 || n < 16)
        return UINT64_MAX;
    *heap = le(p + 8, 8);
    return le(p, 8);
}

/* A dataset header's contiguous data (layout message 0x08, version 3 or 4). */
static bool contiguous(const uint8_t *header, size_t length, uint64_t *address, uint64_t *size)
{
    const uint8_t *p;
    size_t n;
    if (larder__mount_hdf5_v1_message(header, length, 0x08, &p, &n) < 0 || n < 18) return false;
    if ((p[0] != 3 && p[0] != 4) || p[1] != 1) return false;
    *address = le(p + 2, 8), *size = le(p + 10, 8);
    return true;
}

static void add(struct larder__mount_hdf5_extent *out, size_t *count, size_t capacity,
                uint64_t offset, uint64_t length, uint64_t file_size)
{
    if (*count >= capacity || offset >= file_size) return;
    if (length > file_size - offset) length = file_size - offset;
    out[(*count)++] = (struct larder__mount_hdf5_extent){offset, length};
}

size_t larder__mount_hdf5_member(larder__mount_hdf5_read_fn read, void *context, uint64_t file_size,
                                 uint64_t header, struct larder__mount_hdf5_extent *out,
                                 size_t capacity)
{
    uint8_t *buf = malloc(NODE_BYTES);
    size_t count = 0;
    if (!buf || header >= file_size) {
        free(buf);
        return 0;
    }
#define READ(at)                                                                                   \
    ((at) < file_size &&                                                                           \
     read(context, (at), buf,                                                                      \
          (size_t)(file_size - (at) < NODE_BYTES ? file_size - (at) : NODE_BYTES)) == 0)
#define GOT(at) (size_t)(file_size - (at) < NODE_BYTES ? file_size - (at) : NODE_BYTES)
    uint64_t heap = UINT64_MAX, tree, nodes[64], objects[64];
    size_t n_nodes = 0, n_objects = 0;
    /* each field read below lies within what was read: a short read past
     * the file's end is checked for the bytes it needs */
    if (!READ(header) || GOT(header) < 16) goto out;
    add(out, &count, capacity, header, 16 + le(buf + 8, 4), file_size);
    if ((tree = symbol_table(buf, GOT(header), &heap)) == UINT64_MAX) goto out;
    add(out, &count, capacity, heap, 32, file_size);
    if (heap < file_size && READ(heap) && GOT(heap) >= 32 && memcmp(buf, "HEAP", 4) == 0)
        add(out, &count, capacity, le(buf + 24, 8), le(buf + 8, 8) < 65536 ? le(buf + 8, 8) : 65536,
            file_size);
    if (!READ(tree) || GOT(tree) < 24 || memcmp(buf, "TREE", 4) != 0 || buf[4] != 0 || buf[5] != 0)
        goto out;
    add(out, &count, capacity, tree, 24 + 16 * le(buf + 6, 2) + 8, file_size);
    for (size_t i = 0, used = (size_t)le(buf + 6, 2); i < used && n_nodes < 64; i++) {
        size_t at = 24 + 8 + i * 16;
        if (at + 8 > GOT(tree)) break;
        nodes[n_nodes++] = le(buf + at, 8);
    }
    for (size_t k = 0; k < n_nodes; k++) {
        if (!READ(nodes[k]) || GOT(nodes[k]) < 8 || memcmp(buf, "SNOD", 4) != 0) continue;
        size_t used = (size_t)le(buf + 6, 2);
        add(out, &count, capacity, nodes[k], 8 + 40 * used, file_size);
        for (size_t i = 0; i < used && n_objects < 64 && 8 + (i + 1) * 40 <= GOT(nodes[k]); i++)
            objects[n_objects++] = le(buf + 8 + i * 40 + 8, 8);
    }
    for (size_t k = 0; k < n_objects; k++) {
        uint64_t address, size;
        if (!READ(objects[k]) || GOT(objects[k]) < 16) continue;
        add(out, &count, capacity, objects[k], 16 + le(buf + 8, 4), file_size);
        if (contiguous(buf, GOT(objects[k]), &address, &size))
            add(out, &count, capacity, address, size, file_size);
    }
#undef READ
#undef GOT
out:
    free(buf);
    return count;
}
