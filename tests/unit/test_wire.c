/*
 * test_wire.c - daemon protocol frames: round trips, and every malformed
 * header or payload refused with a message.
 */
#include "test.h"
#include "wire.h"

TEST(wire_roundtrip)
{
    uint8_t buf[1024];
    struct larder__read read = {.id_low = 1,
                                .id_high = 2,
                                .shard = 7,
                                .priority = 1,
                                .offset = UINT64_C(5) << 32,
                                .length = 65536};
    int n = larder__wire_encode_read(buf, sizeof buf, 99, &read);
    CHECK_EQ(n, LARDER_WIRE_HEADER + 40);
    struct larder__frame frame;
    for (int cut = 0; cut < LARDER_WIRE_HEADER; cut++)
        CHECK_EQ(larder__wire_header(buf, (size_t)cut, &frame), LARDER_ETRUNCATED);
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    CHECK_EQ(frame.type, LARDER__READ);
    CHECK_EQ(frame.request, 99);
    struct larder__read back;
    CHECK_EQ(larder__wire_read(buf + LARDER_WIRE_HEADER, frame.length, &back), 0);
    CHECK_EQ(back.shard, 7);
    CHECK_EQ(back.offset, UINT64_C(5) << 32);
    CHECK_EQ(back.id_high, 2);

    struct larder__hello hello = {.role = 2, .token_length = 3, .token = (const uint8_t *)"abc"};
    n = larder__wire_encode_hello(buf, sizeof buf, 1, &hello);
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    struct larder__hello hello_back;
    CHECK_EQ(larder__wire_hello(buf + LARDER_WIRE_HEADER, frame.length, &hello_back), 0);
    CHECK(memcmp(hello_back.token, "abc", 3) == 0);

    struct larder__welcome welcome = {.member = {1, 2, 3}, .name_length = 9, .name = "node:4000"};
    n = larder__wire_encode_welcome(buf, sizeof buf, 1, &welcome);
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    struct larder__welcome welcome_back;
    CHECK_EQ(larder__wire_welcome(buf + LARDER_WIRE_HEADER, frame.length, &welcome_back), 0);
    CHECK(memcmp(welcome_back.name, "node:4000", 9) == 0);

    n = larder__wire_encode_error(buf, sizeof buf, 5, LARDER_ENOTFOUND, "no such dataset");
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    struct larder__error_frame error;
    CHECK_EQ(larder__wire_error(buf + LARDER_WIRE_HEADER, frame.length, &error), 0);
    CHECK_EQ(error.code, LARDER_ENOTFOUND);
    CHECK_EQ(error.message_length, 15);
    CHECK_EQ(larder__wire_encode_read(buf, 30, 1, &read), LARDER_ETOOSMALL);
}

/* Damage byte `at` of a good READ frame and expect the parse to refuse it. */
static void expect_refused(size_t at, uint8_t value, const char *needle)
{
    uint8_t buf[128];
    struct larder__read read = {.shard = 1, .offset = 0, .length = 10};
    int n = larder__wire_encode_read(buf, sizeof buf, 1, &read);
    buf[at] = value;
    struct larder__frame frame;
    int rc = larder__wire_header(buf, (size_t)n, &frame);
    if (rc == 0) {
        struct larder__read back;
        rc = larder__wire_read(buf + LARDER_WIRE_HEADER, frame.length, &back);
    }
    CHECK_EQ(rc, LARDER_EPROTOCOL);
    if (!strstr(larder_errmsg(), needle)) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK(strstr(larder_errmsg(), needle) != NULL);
}

TEST(wire_refuses_bad_frames)
{
    expect_refused(0, 'X', "magic");
    expect_refused(4, 9, "version 9");
    expect_refused(5, 0, "type 0");
    expect_refused(5, 200, "type 200");
    expect_refused(6, 1, "flags");
    expect_refused(12, 1, "reserved");
    expect_refused(8, 41, "payload bytes"); /* READ longer than 40 */
    expect_refused(8, 39, "not 40");
    expect_refused(LARDER_WIRE_HEADER + 20, 4, "priority 4");
    expect_refused(LARDER_WIRE_HEADER + 21, 1, "reserved");
    expect_refused(LARDER_WIRE_HEADER + 32, 0, "READ of 0 bytes");
    expect_refused(LARDER_WIRE_HEADER + 39, 0xff, "READ of"); /* huge length */
    /* a DATA frame over the limit, an offset that overflows */
    uint8_t buf[128];
    larder__wire_encode_header(buf, sizeof buf, LARDER__DATA, LARDER_WIRE_MAX_READ + 1, 1);
    struct larder__frame frame;
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &frame), LARDER_EPROTOCOL);
    struct larder__read read = {.offset = UINT64_MAX - 5, .length = 10};
    larder__wire_encode_read(buf, sizeof buf, 1, &read);
    CHECK_EQ(larder__wire_read(buf + LARDER_WIRE_HEADER, 40, &read), LARDER_EPROTOCOL);
    /* HELLO whose token length disagrees with the frame */
    struct larder__hello hello = {.role = 1, .token_length = 4, .token = (const uint8_t *)"abcd"};
    int n = larder__wire_encode_hello(buf, sizeof buf, 1, &hello);
    larder__put_le32(buf + LARDER_WIRE_HEADER + 4, 200);
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    struct larder__hello back;
    CHECK_EQ(larder__wire_hello(buf + LARDER_WIRE_HEADER, frame.length, &back), LARDER_EPROTOCOL);
    larder__put_le32(buf + LARDER_WIRE_HEADER, 3);
    CHECK_EQ(larder__wire_hello(buf + LARDER_WIRE_HEADER, frame.length, &back), LARDER_EPROTOCOL);
}
