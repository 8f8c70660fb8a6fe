/*
 * passthrough_proto.c - FUSE messages for passthrough (passthrough_proto.h).
 * Fields are read and written with memcpy at the kernel's offsets, checked
 * here against the 7.38 structs of <linux/fuse.h> whose unused words 7.40
 * took: max_stack_depth is the first word after fuse_init_out's flags2,
 * backing_id is fuse_open_out's padding.
 */
#include "passthrough_proto.h"

#include <errno.h>
#include <linux/fuse.h>
#include <string.h>

_Static_assert(sizeof(struct fuse_in_header) == 40, "fuse_in_header");
_Static_assert(sizeof(struct fuse_out_header) == 16, "fuse_out_header");
_Static_assert(offsetof(struct fuse_init_in, flags2) == 16, "fuse_init_in's flags2");
_Static_assert(offsetof(struct fuse_init_out, flags) == 12, "fuse_init_out's flags");
_Static_assert(offsetof(struct fuse_init_out, flags2) == 32, "fuse_init_out's flags2");
_Static_assert(offsetof(struct fuse_init_out, unused) == 36, "max_stack_depth's place");
_Static_assert(offsetof(struct fuse_open_out, open_flags) == 8, "fuse_open_out's open_flags");
_Static_assert(offsetof(struct fuse_open_out, padding) == 12, "backing_id's place");
_Static_assert(sizeof(struct fuse_open_out) == 16, "fuse_open_out");

#define MAX_STACK_DEPTH_AT (offsetof(struct fuse_init_out, unused))

int larder__fuse_parse_request(const void *buf, size_t length, struct larder__fuse_request *out)
{
    memset(out, 0, sizeof *out);
    struct fuse_in_header h;
    if (!buf || length < sizeof h) return -EINVAL;
    memcpy(&h, buf, sizeof h);
    out->opcode = h.opcode, out->unique = h.unique;
    if (h.opcode != FUSE_INIT) return 0;
    out->init = true;
    /* major, minor, max_readahead, flags, flags2: all needed to see the offer */
    struct fuse_init_in in;
    if (length - sizeof h < offsetof(struct fuse_init_in, flags2) + sizeof in.flags2) return 0;
    memcpy(&in, (const char *)buf + sizeof h,
           offsetof(struct fuse_init_in, flags2) + sizeof in.flags2);
    out->offers_passthrough = in.major == 7 && (in.flags & FUSE_INIT_EXT) &&
                              (in.flags2 & LARDER__FUSE_PASSTHROUGH_FLAGS2);
    return 0;
}

/* Whether iov[0..count) is a successful two-part reply to `unique` whose
 * argument is at least `least` bytes. */
static bool reply_to(const struct iovec *iov, int count, uint64_t unique, size_t least)
{
    struct fuse_out_header out;
    if (!iov || count != 2 || !iov[0].iov_base || iov[0].iov_len < sizeof out || !iov[1].iov_base ||
        iov[1].iov_len < least)
        return false;
    memcpy(&out, iov[0].iov_base, sizeof out);
    return out.unique == unique && out.error == 0;
}

enum larder__fuse_patch larder__fuse_patch_init_reply(struct iovec *iov, int count, uint64_t unique)
{
    if (!reply_to(iov, count, unique, MAX_STACK_DEPTH_AT + sizeof(uint32_t)))
        return LARDER__FUSE_PATCH_NONE;
    char *arg = iov[1].iov_base;
    uint32_t major, flags, flags2, depth = LARDER__FUSE_MAX_STACK_DEPTH;
    memcpy(&major, arg + offsetof(struct fuse_init_out, major), sizeof major);
    memcpy(&flags, arg + offsetof(struct fuse_init_out, flags), sizeof flags);
    memcpy(&flags2, arg + offsetof(struct fuse_init_out, flags2), sizeof flags2);
    if (major != 7) return LARDER__FUSE_PATCH_NONE; /* a later major's renegotiation */
    if (flags & FUSE_WRITEBACK_CACHE) return LARDER__FUSE_PATCH_WRITEBACK;
    flags |= FUSE_INIT_EXT;
    flags2 |= LARDER__FUSE_PASSTHROUGH_FLAGS2;
    memcpy(arg + offsetof(struct fuse_init_out, flags), &flags, sizeof flags);
    memcpy(arg + offsetof(struct fuse_init_out, flags2), &flags2, sizeof flags2);
    memcpy(arg + MAX_STACK_DEPTH_AT, &depth, sizeof depth);
    return LARDER__FUSE_PATCH_DONE;
}

enum larder__fuse_patch larder__fuse_patch_open_reply(struct iovec *iov, int count, uint64_t unique,
                                                      int32_t backing_id)
{
    if (backing_id <= 0 || !reply_to(iov, count, unique, sizeof(struct fuse_open_out)) ||
        iov[1].iov_len != sizeof(struct fuse_open_out))
        return LARDER__FUSE_PATCH_NONE;
    char *arg = iov[1].iov_base;
    uint32_t flags;
    memcpy(&flags, arg + offsetof(struct fuse_open_out, open_flags), sizeof flags);
    flags &= ~(uint32_t)FOPEN_KEEP_CACHE;
    flags |= LARDER__FOPEN_PASSTHROUGH;
    memcpy(arg + offsetof(struct fuse_open_out, open_flags), &flags, sizeof flags);
    memcpy(arg + offsetof(struct fuse_open_out, padding), &backing_id, sizeof backing_id);
    return LARDER__FUSE_PATCH_DONE;
}
