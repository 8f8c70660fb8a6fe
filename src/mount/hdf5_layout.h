/*
 * hdf5_layout.h - what `larder mount` knows of an HDF5 file's layout
 * (docs/mount.md "HDF5 files: metadata first"): the byte extents of its
 * datasets' raw data, read with libhdf5 through a read callback (the
 * mount's own checked reads, so an origin over HTTP works as well as a
 * local one), and everything else in the file, its metadata.
 *
 * Two halves:
 *
 *   hdf5_extents.c  pure: hostile extents clipped to the file, sorted,
 *                   merged, capped, and their complement; no I/O, no
 *                   libhdf5, tested and fuzzable alone;
 *   hdf5.c          the scan: a read-only libhdf5 file driver over the
 *                   callback, every dataset visited once, its extents
 *                   taken from H5Dget_offset (contiguous) or
 *                   H5Dget_chunk_info (chunked).  libhdf5 is not
 *                   thread-safe here (Debian's serial build): scans are
 *                   serialized by one lock in hdf5.c.
 *
 * Every extent libhdf5 reports comes from the file, so it is as hostile as
 * the file: an offset past the end, a length that wraps, millions of
 * chunks.  They are clipped to the file and capped in count before
 * anything is staged; a wrong extent can only make the mount stage the
 * wrong bytes of the same file, never read outside it.
 */
#ifndef LARDER_MOUNT_HDF5_LAYOUT_H
#define LARDER_MOUNT_HDF5_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Extents kept at most per file (raw data ones; more are counted, not kept). */
#define LARDER__MOUNT_HDF5_MAX_EXTENTS (UINT64_C(1) << 20)
/* Chunks asked of libhdf5 at most per dataset (H5Dget_chunk_info walks its
 * index from the start for each one, so more would be quadratic). */
#define LARDER__MOUNT_HDF5_MAX_CHUNKS 65536
/* Objects visited at most per file. */
#define LARDER__MOUNT_HDF5_MAX_OBJECTS (UINT64_C(1) << 20)

/* A byte extent of the file. */
struct larder__mount_hdf5_extent {
    uint64_t offset;
    uint64_t length;
};

/*
 * Clip extents[0..count) to [0, file_size), drop empty ones, sort them by
 * offset and merge those that overlap or touch, in place.  The number
 * left (at most count).  Pure.
 */
size_t larder__mount_hdf5_normalize(struct larder__mount_hdf5_extent *extents, size_t count,
                                    uint64_t file_size);

/*
 * The complement in [0, file_size) of normalized extents[0..count): the
 * gaps between them, before the first and after the last, written to
 * out[0..capacity).  The number of gaps (which may exceed capacity: only
 * the first capacity are written).  Pure.
 */
size_t larder__mount_hdf5_complement(const struct larder__mount_hdf5_extent *extents, size_t count,
                                     uint64_t file_size, struct larder__mount_hdf5_extent *out,
                                     size_t capacity);

/*
 * Whether buf[0..length), the bytes at file offset `at`, begin with the
 * HDF5 superblock's signature (\x89HDF\r\n\x1a\n); libhdf5 looks for it at
 * 0, 512, 1024, 2048, ...  Pure.
 */
bool larder__mount_hdf5_signature(const uint8_t *buf, size_t length);

/* The file's bytes [offset, offset + length) into buf: 0, or a negative code. */
typedef int (*larder__mount_hdf5_read_fn)(void *context, uint64_t offset, void *buf, size_t length);

/* What a scan found. */
struct larder__mount_hdf5_layout {
    uint64_t file_size;
    struct larder__mount_hdf5_extent *raw; /* datasets' raw data, normalized */
    size_t raw_count;
    struct larder__mount_hdf5_extent *metadata; /* the complement of raw in the file */
    size_t metadata_count;
    uint64_t metadata_bytes;
    uint64_t datasets;   /* datasets visited */
    uint64_t compressed; /* of which with filters: their chunks are raw data, staged as such */
    uint64_t dropped;    /* extents not kept: past the caps */
    bool truncated;      /* a cap was reached: the metadata may hold raw bytes too */
};

/*
 * Scan the HDF5 file of `file_size` bytes that `read` reads: every
 * dataset's raw-data extents, and their complement.  0 with *out set (free
 * with larder__mount_hdf5_layout_free), or a negative code with
 * larder_errmsg() (not an HDF5 file libhdf5 can open, a read failed, no
 * memory).  Blocks while another scan runs.
 */
int larder__mount_hdf5_scan(larder__mount_hdf5_read_fn read, void *context, uint64_t file_size,
                            struct larder__mount_hdf5_layout **out);
void larder__mount_hdf5_layout_free(struct larder__mount_hdf5_layout *layout);

/*
 * The members of group `group` ("/" for the root) of the HDF5 file that
 * `read` reads, in name order (as h5py lists them): the address of each
 * hard link's object header in *addresses (malloc'd, the caller frees),
 * their number in *count (at most LARDER__MOUNT_HDF5_MAX_EXTENTS; soft and
 * external links are skipped).  Only the group's own index is read (its
 * B-tree and heap, or its link messages), no member is opened.  0, or a
 * negative code with larder_errmsg().  The addresses come from the file:
 * hostile, not checked here.
 */
int larder__mount_hdf5_members(larder__mount_hdf5_read_fn read, void *context, uint64_t file_size,
                               const char *group, uint64_t **addresses, size_t *count);

/* Rows of a dataset kept at most (each costs the order about 40 bytes). */
#define LARDER__MOUNT_HDF5_MAX_ROWS (UINT64_C(1) << 22)

/*
 * The rows of dataset `path` (its first dimension) as byte extents of the
 * file: rows[i] for row i, malloc'd (the caller frees), *count of them.
 * Contiguous: its offset + i x the row's bytes.  Chunked without filters:
 * within row i's chunk, at (i mod the chunk's rows) x the row's bytes when
 * the chunks span whole rows, else the whole chunk.  A compressed
 * dataset's rows are no byte ranges: LARDER_EUNSUPPORTED.  0, or a
 * negative code with larder_errmsg().  Offsets come from the file:
 * hostile, not clipped here.
 */
int larder__mount_hdf5_rows(larder__mount_hdf5_read_fn read, void *context, uint64_t file_size,
                            const char *path, struct larder__mount_hdf5_extent **rows,
                            size_t *count);

/*
 * The payload of the first message of `type` in a version-1 object header
 * at header[0..length): 0 with *payload pointing into header, or -1 (not
 * version 1, not found within the bytes, or a message running past them).
 * Pure (hdf5_member.c).
 */
int larder__mount_hdf5_v1_message(const uint8_t *header, size_t length, unsigned type,
                                  const uint8_t **payload, size_t *payload_length);

/*
 * The extents holding the member group whose object header is at `header`
 * (version 1, as h5py writes by default): its header, local heap, B-tree
 * and symbol-table nodes, its objects' headers and their contiguous data,
 * followed through `read` four small reads deep; at most `capacity`
 * written to out, clipped to the file.  How many (0: not such a group).
 * (hdf5_member.c)
 */
size_t larder__mount_hdf5_member(larder__mount_hdf5_read_fn read, void *context, uint64_t file_size,
                                 uint64_t header, struct larder__mount_hdf5_extent *out,
                                 size_t capacity);

#endif
