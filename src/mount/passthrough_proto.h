/*
 * passthrough_proto.h - the FUSE protocol pieces of passthrough
 * (passthrough.h): reading a request's header and the INIT request's
 * offer, and patching libfuse 3.14's INIT and OPEN replies.  Pure: no
 * I/O, no allocation, no state; every length checked, since the bytes
 * come from outside (the kernel, and libfuse's buffers).  Tested on its
 * own (tests/unit/test_mount_passthrough.c) against the kernel's uapi
 * layout (include/uapi/linux/fuse.h, protocol 7.40).
 */
#ifndef LARDER_MOUNT_PASSTHROUGH_PROTO_H
#define LARDER_MOUNT_PASSTHROUGH_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* FUSE 7.40 values that Debian 12's linux-libc-dev (7.38) lacks */
#define LARDER__FUSE_PASSTHROUGH_FLAGS2 (1u << (37 - 32)) /* FUSE_PASSTHROUGH, bit 37 */
#define LARDER__FOPEN_PASSTHROUGH (1u << 7)
#define LARDER__FUSE_MAX_STACK_DEPTH 1 /* backing files on a file system stacking nothing */

/* A request's header, as the kernel sent it. */
struct larder__fuse_request {
    uint32_t opcode;
    uint64_t unique;
    bool init;               /* a FUSE_INIT request ... */
    bool offers_passthrough; /* ... whose flags offer FUSE_PASSTHROUGH (and FUSE_INIT_EXT) */
};

/* Read the request in buf[0..length): 0, or -EINVAL when it is shorter than
 * a header (out is then zeroed). */
int larder__fuse_parse_request(const void *buf, size_t length, struct larder__fuse_request *out);

/* What a reply patch did. */
enum larder__fuse_patch {
    LARDER__FUSE_PATCH_NONE = 0,      /* not the reply looked for (or an error reply): untouched */
    LARDER__FUSE_PATCH_DONE = 1,      /* patched */
    LARDER__FUSE_PATCH_WRITEBACK = 2, /* an INIT reply asking for the writeback cache: untouched,
                                         since the kernel refuses passthrough beside it */
};

/*
 * The reply iov[0..count) (libfuse's: iov[0] the out header, iov[1] the
 * argument) to request `unique`: when it is a successful 7.x INIT reply
 * long enough to hold max_stack_depth, ask for passthrough (FUSE_INIT_EXT,
 * FUSE_PASSTHROUGH in flags2, max_stack_depth).
 */
enum larder__fuse_patch larder__fuse_patch_init_reply(struct iovec *iov, int count,
                                                      uint64_t unique);

/*
 * The reply iov[0..count) to OPEN request `unique`: when it is a successful
 * one with a 16-byte fuse_open_out, set FOPEN_PASSTHROUGH and backing_id
 * (> 0) and clear FOPEN_KEEP_CACHE, which the kernel refuses beside it.
 */
enum larder__fuse_patch larder__fuse_patch_open_reply(struct iovec *iov, int count, uint64_t unique,
                                                      int32_t backing_id);

#endif
