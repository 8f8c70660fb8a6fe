/*
 * tar.h - tar archives in the WebDataset layout.
 *
 * The header parser and the scanner take bytes pushed to them and do no
 * I/O and no allocation, so the same code indexes a local file, an HTTP
 * body as it streams in, and a fuzzer's input.  The scanner groups
 * consecutive members by WebDataset key (the member path up to the first
 * dot of its base name) into samples, each one contiguous byte range,
 * and hashes each range as it passes.  It understands ustar, GNU long
 * names and PAX headers (path, size), and base-256 sizes; it refuses
 * links, devices, absolute names and names with "..".
 */
#ifndef LARDER_TAR_H
#define LARDER_TAR_H

#include "index.h"

#include "hash.h"

#define LARDER__TAR_BLOCK 512
#define LARDER__TAR_MAX_NAME 4096
#define LARDER__TAR_MAX_FIELDS 256
#define LARDER__TAR_MAX_PAX (64 * 1024)

struct larder__tar_header {
    char name[LARDER__TAR_MAX_NAME]; /* prefix/name joined */
    uint64_t size;
    char type; /* typeflag, '0' for '\0' */
};

/* Parse one 512-byte header block.  0, or LARDER_EBADTAR with a message. */
LARDER__HIDDEN int larder__tar_parse_header(const uint8_t block[LARDER__TAR_BLOCK],
                                            struct larder__tar_header *out);
/* Nonzero when the block is all zero bytes (end-of-archive marker). */
LARDER__HIDDEN int larder__tar_zero_block(const uint8_t block[LARDER__TAR_BLOCK]);

/* Split a member path into WebDataset key and extension; false if it has no extension. */
LARDER__HIDDEN bool larder__split_key(const char *path, size_t *key_length, const char **ext);
/* Reject absolute paths and ".." components: 0 or LARDER_EUNSAFE. */
LARDER__HIDDEN int larder__check_member_name(const char *name);

struct larder__tar_field {
    struct larder__field field; /* span relative to the sample, npy decoded */
    uint64_t member_offset;     /* absolute offset of the member's data */
    uint64_t member_length;     /* the member's full size */
    const char *ext;            /* member extension, e.g. "image.npy" */
};

struct larder__tar_sample {
    uint64_t offset, length, checksum;
    const char *key;
    size_t key_length;
    uint32_t num_fields;
    const struct larder__tar_field *fields;
};

/* Called for each complete sample; a negative return stops the scan with that code. */
typedef int (*larder__tar_sample_fn)(void *userdata, const struct larder__tar_sample *sample);
/* Called for a member skipped because it has no extension (WebDataset skips it too). */
typedef void (*larder__tar_skip_fn)(void *userdata, const char *name, uint64_t offset);

struct larder__tar_scanner; /* about 400 KiB: allocate it */

LARDER__HIDDEN size_t larder__tar_scanner_size(void);
/* Start a scan; `name` names the archive in messages. */
LARDER__HIDDEN void larder__tar_scanner_init(struct larder__tar_scanner *scanner, const char *name,
                                             larder__tar_sample_fn on_sample,
                                             larder__tar_skip_fn on_skip, void *userdata);
/* Push the next bytes of the archive.  0 or a negative code (message set). */
LARDER__HIDDEN int larder__tar_scanner_feed(struct larder__tar_scanner *scanner, const void *data,
                                            size_t length);
/* The archive's bytes are all pushed; emits the last sample.  0 or a negative code. */
LARDER__HIDDEN int larder__tar_scanner_finish(struct larder__tar_scanner *scanner);
/* Bytes consumed so far. */
LARDER__HIDDEN uint64_t larder__tar_scanner_offset(const struct larder__tar_scanner *scanner);

/* ---- writing ----------------------------------------------------------- */

/*
 * Encode the header blocks for a regular member `name` of `size` bytes:
 * one ustar block, preceded by a PAX block pair when the name or size does
 * not fit ustar.  Returns the bytes written to out (512, or 512 * k), or
 * LARDER_EUSAGE if the name is too long even for PAX in `capacity`.
 */
LARDER__HIDDEN int larder__tar_member_header(uint8_t *out, size_t capacity, const char *name,
                                             uint64_t size);
/* Bytes of header for that member, without writing it. */
LARDER__HIDDEN size_t larder__tar_member_header_size(const char *name, uint64_t size);
/* Padding after `size` data bytes. */
static inline uint64_t larder__tar_padding(uint64_t size)
{
    return (LARDER__TAR_BLOCK - size % LARDER__TAR_BLOCK) % LARDER__TAR_BLOCK;
}

#endif
