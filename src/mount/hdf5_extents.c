/*
 * hdf5_extents.c - the pure half of hdf5_layout.h: hostile extents clipped,
 * sorted, merged, and their complement in the file.
 */
#include "hdf5_layout.h"

#include <stdlib.h>
#include <string.h>

static int by_offset(const void *x, const void *y)
{
    const struct larder__mount_hdf5_extent *a = x, *b = y;
    return (a->offset > b->offset) - (a->offset < b->offset);
}

size_t larder__mount_hdf5_normalize(struct larder__mount_hdf5_extent *extents, size_t count,
                                    uint64_t file_size)
{
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t offset = extents[i].offset, length = extents[i].length;
        if (offset >= file_size || length == 0) continue;
        if (length > file_size - offset) length = file_size - offset; /* no wrap: offset < size */
        extents[kept++] = (struct larder__mount_hdf5_extent){offset, length};
    }
    if (kept == 0) return 0;
    qsort(extents, kept, sizeof extents[0], by_offset);
    size_t merged = 0;
    for (size_t i = 1; i < kept; i++) {
        struct larder__mount_hdf5_extent *last = &extents[merged];
        uint64_t end = last->offset + last->length; /* <= file_size: no overflow */
        if (extents[i].offset <= end) {
            uint64_t other = extents[i].offset + extents[i].length;
            if (other > end) last->length = other - last->offset;
        } else {
            extents[++merged] = extents[i];
        }
    }
    return merged + 1;
}

size_t larder__mount_hdf5_complement(const struct larder__mount_hdf5_extent *extents, size_t count,
                                     uint64_t file_size, struct larder__mount_hdf5_extent *out,
                                     size_t capacity)
{
    size_t gaps = 0;
    uint64_t at = 0;
    for (size_t i = 0; i <= count; i++) {
        uint64_t next = i < count ? extents[i].offset : file_size;
        if (next > file_size) next = file_size;
        if (next > at) {
            if (gaps < capacity) out[gaps] = (struct larder__mount_hdf5_extent){at, next - at};
            gaps++;
        }
        if (i < count) {
            uint64_t end = extents[i].offset + extents[i].length;
            if (end < extents[i].offset || end > file_size) end = file_size; /* not normalized */
            if (end > at) at = end;
        }
    }
    return gaps;
}

bool larder__mount_hdf5_signature(const uint8_t *buf, size_t length)
{
    static const uint8_t magic[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    return length >= sizeof magic && memcmp(buf, magic, sizeof magic) == 0;
}
