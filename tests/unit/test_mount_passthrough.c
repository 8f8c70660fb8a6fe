/*
 * test_mount_passthrough.c - the FUSE messages of passthrough
 * (src/mount/passthrough_proto.c): requests read and INIT and OPEN
 * replies patched, on byte buffers laid out here from the kernel's uapi
 * (include/uapi/linux/fuse.h, protocol 7.40: fuse_in_header 40 bytes,
 * fuse_init_in's flags at 12 and flags2 at 16, fuse_out_header 16 bytes,
 * fuse_init_out's flags at 12, flags2 at 32 and max_stack_depth at 36,
 * fuse_open_out's open_flags at 8 and backing_id at 12; FUSE_INIT_EXT bit
 * 30, FUSE_PASSTHROUGH bit 37, FUSE_WRITEBACK_CACHE bit 16,
 * FOPEN_KEEP_CACHE bit 1, FOPEN_NOFLUSH bit 5, FOPEN_PASSTHROUGH bit 7),
 * not from the structs the code uses.  Short, foreign and failed
 * messages are left alone.
 */
#include "passthrough_proto.h"
#include "test.h"

#include <errno.h>

static void put32(uint8_t *at, uint32_t v)
{
    memcpy(at, &v, 4);
}
static void put64(uint8_t *at, uint64_t v)
{
    memcpy(at, &v, 8);
}
static uint32_t get32(const uint8_t *at)
{
    uint32_t v;
    memcpy(&v, at, 4);
    return v;
}

/* A request: header with opcode and unique, then an INIT body when init. */
static size_t request(uint8_t *buf, uint32_t opcode, uint64_t unique, uint32_t major,
                      uint32_t flags, uint32_t flags2)
{
    memset(buf, 0, 104);
    put32(buf + 0, 104);
    put32(buf + 4, opcode);
    put64(buf + 8, unique);
    put32(buf + 40, major);
    put32(buf + 44, 40); /* minor */
    put32(buf + 48, 1 << 20);
    put32(buf + 52, flags);
    put32(buf + 56, flags2);
    return 104;
}

TEST(mount_passthrough_reads_requests)
{
    uint8_t buf[104] = {0};
    struct larder__fuse_request r;
    CHECK_EQ(larder__fuse_parse_request(buf, 39, &r), -EINVAL);
    CHECK_EQ(larder__fuse_parse_request(NULL, 100, &r), -EINVAL);
    request(buf, 1 /* LOOKUP */, 77, 7, 0, 0);
    CHECK_EQ(larder__fuse_parse_request(buf, 40, &r), 0);
    CHECK_EQ(r.opcode, 1);
    CHECK_EQ(r.unique, 77);
    CHECK(!r.init && !r.offers_passthrough);
    /* INIT offering passthrough: INIT_EXT in flags, bit 37 in flags2 */
    size_t n = request(buf, 26, 2, 7, (1u << 30) | 1, 1u << 5);
    CHECK_EQ(larder__fuse_parse_request(buf, n, &r), 0);
    CHECK(r.init && r.offers_passthrough);
    CHECK_EQ(r.unique, 2);
    /* the same bit without INIT_EXT, other flags2 bits, another major: no offer */
    request(buf, 26, 2, 7, 1, 1u << 5);
    CHECK_EQ(larder__fuse_parse_request(buf, n, &r), 0);
    CHECK(r.init && !r.offers_passthrough);
    request(buf, 26, 2, 7, 1u << 30, ~(1u << 5));
    CHECK_EQ(larder__fuse_parse_request(buf, n, &r), 0);
    CHECK(!r.offers_passthrough);
    request(buf, 26, 2, 8, 1u << 30, 1u << 5);
    CHECK_EQ(larder__fuse_parse_request(buf, n, &r), 0);
    CHECK(!r.offers_passthrough);
    /* cut before the end of flags2 (an old kernel's shorter INIT): no offer read past it */
    request(buf, 26, 2, 7, 1u << 30, 1u << 5);
    CHECK_EQ(larder__fuse_parse_request(buf, 40 + 19, &r), 0);
    CHECK(r.init && !r.offers_passthrough);
    CHECK_EQ(larder__fuse_parse_request(buf, 40 + 20, &r), 0);
    CHECK(r.offers_passthrough);
}

/* An out header and a 64-byte fuse_init_out as libfuse 3.14 sends them. */
static void init_reply(uint8_t *header, uint8_t *arg, uint64_t unique, int32_t error,
                       uint32_t major, uint32_t flags)
{
    memset(header, 0, 16);
    memset(arg, 0, 64);
    put32(header, 80);
    memcpy(header + 4, &error, 4);
    put64(header + 8, unique);
    put32(arg + 0, major);
    put32(arg + 4, 38);
    put32(arg + 12, flags);
    put32(arg + 20, 1 << 20); /* max_write */
    arg[28] = 0, arg[29] = 1; /* max_pages 256 */
}

TEST(mount_passthrough_patches_the_init_reply)
{
    uint8_t header[16], arg[64], want[64];
    struct iovec iov[2] = {{header, 16}, {arg, 64}};
    init_reply(header, arg, 5, 0, 7, (1u << 30) | 1);
    memcpy(want, arg, 64);
    put32(want + 32, 1u << 5); /* flags2: FUSE_PASSTHROUGH */
    put32(want + 36, 1);       /* max_stack_depth */
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 2, 5), LARDER__FUSE_PATCH_DONE);
    CHECK(memcmp(arg, want, 64) == 0);
    /* FUSE_INIT_EXT set when libfuse left it out */
    init_reply(header, arg, 5, 0, 7, 1);
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 2, 5), LARDER__FUSE_PATCH_DONE);
    CHECK_EQ(get32(arg + 12), (1u << 30) | 1);
    CHECK_EQ(get32(arg + 32), 1u << 5);
    /* left alone: another request's reply, an error, a later major, too short,
     * one part, the writeback cache asked for */
    uint8_t before[64];
    init_reply(header, arg, 5, 0, 7, 1);
    memcpy(before, arg, 64);
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 2, 6), LARDER__FUSE_PATCH_NONE);
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 1, 5), LARDER__FUSE_PATCH_NONE);
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 3, 5), LARDER__FUSE_PATCH_NONE);
    iov[1].iov_len = 39;
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 2, 5), LARDER__FUSE_PATCH_NONE);
    iov[1].iov_len = 64;
    iov[0].iov_len = 15;
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 2, 5), LARDER__FUSE_PATCH_NONE);
    iov[0].iov_len = 16;
    CHECK(memcmp(arg, before, 64) == 0);
    init_reply(header, arg, 5, -EPROTO, 7, 1);
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 2, 5), LARDER__FUSE_PATCH_NONE);
    init_reply(header, arg, 5, 0, 8, 1);
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 2, 5), LARDER__FUSE_PATCH_NONE);
    CHECK_EQ(get32(arg + 32), 0);
    init_reply(header, arg, 5, 0, 7, (1u << 30) | (1u << 16));
    memcpy(before, arg, 64);
    CHECK_EQ(larder__fuse_patch_init_reply(iov, 2, 5), LARDER__FUSE_PATCH_WRITEBACK);
    CHECK(memcmp(arg, before, 64) == 0);
    CHECK_EQ(larder__fuse_patch_init_reply(NULL, 2, 5), LARDER__FUSE_PATCH_NONE);
}

TEST(mount_passthrough_patches_the_open_reply)
{
    uint8_t header[16] = {0}, arg[24] = {0};
    struct iovec iov[2] = {{header, 16}, {arg, 16}};
    put32(header, 32);
    put64(header + 8, 9);
    put64(arg, 0x1122334455667788u);       /* fh */
    put32(arg + 8, (1u << 1) | (1u << 5)); /* KEEP_CACHE | NOFLUSH */
    CHECK_EQ(larder__fuse_patch_open_reply(iov, 2, 9, 7), LARDER__FUSE_PATCH_DONE);
    uint64_t fh;
    memcpy(&fh, arg, 8);
    CHECK(fh == 0x1122334455667788u);
    CHECK_EQ(get32(arg + 8), (1u << 5) | (1u << 7)); /* NOFLUSH | PASSTHROUGH */
    CHECK_EQ(get32(arg + 12), 7);
    /* left alone: no backing id, another request, a failed open, another size */
    put32(arg + 8, 1u << 1);
    put32(arg + 12, 0);
    CHECK_EQ(larder__fuse_patch_open_reply(iov, 2, 9, 0), LARDER__FUSE_PATCH_NONE);
    CHECK_EQ(larder__fuse_patch_open_reply(iov, 2, 9, -3), LARDER__FUSE_PATCH_NONE);
    CHECK_EQ(larder__fuse_patch_open_reply(iov, 2, 10, 7), LARDER__FUSE_PATCH_NONE);
    iov[1].iov_len = 24;
    CHECK_EQ(larder__fuse_patch_open_reply(iov, 2, 9, 7), LARDER__FUSE_PATCH_NONE);
    iov[1].iov_len = 12;
    CHECK_EQ(larder__fuse_patch_open_reply(iov, 2, 9, 7), LARDER__FUSE_PATCH_NONE);
    iov[1].iov_len = 16;
    int32_t error = -ENOENT;
    memcpy(header + 4, &error, 4);
    CHECK_EQ(larder__fuse_patch_open_reply(iov, 2, 9, 7), LARDER__FUSE_PATCH_NONE);
    CHECK_EQ(get32(arg + 8), 1u << 1);
    CHECK_EQ(get32(arg + 12), 0);
}
