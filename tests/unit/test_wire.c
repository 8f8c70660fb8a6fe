/*
 * test_wire.c - daemon protocol frames: round trips, and every malformed
 * header or payload refused with a message; the handshake's HMAC-SHA256
 * against RFC 4231's published vectors.
 */
#include "auth.h"
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
    CHECK_EQ(n, LARDER__WIRE_HEADER + 40);
    struct larder__frame frame;
    for (int cut = 0; cut < LARDER__WIRE_HEADER; cut++)
        CHECK_EQ(larder__wire_header(buf, (size_t)cut, &frame), LARDER_ETRUNCATED);
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    CHECK_EQ(frame.type, LARDER__READ);
    CHECK_EQ(frame.request, 99);
    struct larder__read back;
    CHECK_EQ(larder__wire_read(buf + LARDER__WIRE_HEADER, frame.length, &back), 0);
    CHECK_EQ(back.shard, 7);
    CHECK_EQ(back.offset, UINT64_C(5) << 32);
    CHECK_EQ(back.id_high, 2);

    struct larder__hello hello = {.role = LARDER__ROLE_PEER, .owner_chunk = 4194304};
    for (int i = 0; i < LARDER__WIRE_NONCE; i++)
        hello.nonce[i] = (uint8_t)(i * 7 + 1);
    n = larder__wire_encode_hello(buf, sizeof buf, 1, &hello);
    CHECK_EQ(n, LARDER__WIRE_HEADER + 40);
    CHECK_EQ(buf[4], 2); /* the version that carries nonces, not secrets */
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    struct larder__hello hello_back;
    CHECK_EQ(larder__wire_hello(buf + LARDER__WIRE_HEADER, frame.length, &hello_back), 0);
    CHECK_EQ(hello_back.role, LARDER__ROLE_PEER);
    CHECK_EQ(hello_back.owner_chunk, 4194304); /* a peer's ownership chunk, at 4 */
    CHECK_EQ(larder__le32(buf + LARDER__WIRE_HEADER + 4), 4194304);
    CHECK(memcmp(hello_back.nonce, hello.nonce, LARDER__WIRE_NONCE) == 0);
    /* the layout of docs/protocol.md: role at 0, ownership chunk at 4, nonce at 8 */
    CHECK_EQ(larder__le32(buf + LARDER__WIRE_HEADER), 2);
    CHECK_EQ(buf[LARDER__WIRE_HEADER + 8 + 31], hello.nonce[31]);

    struct larder__welcome welcome = {
        .member = {1, 2, 3}, .auth = LARDER__AUTH_HMAC, .name_length = 9, .name = "node:4000"};
    welcome.nonce[0] = 0xaa, welcome.proof[31] = 0xbb;
    n = larder__wire_encode_welcome(buf, sizeof buf, 1, &welcome);
    CHECK_EQ(n, LARDER__WIRE_HEADER + 88 + 9);
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    CHECK_EQ(buf[LARDER__WIRE_HEADER + 20], 0xaa); /* nonce at 20 */
    CHECK_EQ(buf[LARDER__WIRE_HEADER + 83], 0xbb); /* proof at 52..84 */
    struct larder__welcome welcome_back;
    CHECK_EQ(larder__wire_welcome(buf + LARDER__WIRE_HEADER, frame.length, &welcome_back), 0);
    CHECK(memcmp(welcome_back.name, "node:4000", 9) == 0);
    CHECK_EQ(welcome_back.auth, LARDER__AUTH_HMAC);
    CHECK(memcmp(welcome_back.proof, welcome.proof, LARDER__WIRE_PROOF) == 0);
    CHECK(memcmp(welcome_back.nonce, welcome.nonce, LARDER__WIRE_NONCE) == 0);

    struct larder__prove prove = {.proof = {9, 8, 7}};
    n = larder__wire_encode_prove(buf, sizeof buf, 4, &prove);
    CHECK_EQ(n, LARDER__WIRE_HEADER + 32);
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    CHECK_EQ(frame.type, LARDER__PROVE);
    struct larder__prove prove_back;
    CHECK_EQ(larder__wire_prove(buf + LARDER__WIRE_HEADER, frame.length, &prove_back), 0);
    CHECK(memcmp(prove_back.proof, prove.proof, LARDER__WIRE_PROOF) == 0);

    n = larder__wire_encode_error(buf, sizeof buf, 5, LARDER_ENOTFOUND, "no such dataset");
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    struct larder__error_frame error;
    CHECK_EQ(larder__wire_error(buf + LARDER__WIRE_HEADER, frame.length, &error), 0);
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
        rc = larder__wire_read(buf + LARDER__WIRE_HEADER, frame.length, &back);
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
    expect_refused(LARDER__WIRE_HEADER + 20, 4, "priority 4");
    expect_refused(LARDER__WIRE_HEADER + 21, 4, "reserved"); /* 1 CACHED, 2 STAGE, 4 nobody's */
    expect_refused(LARDER__WIRE_HEADER + 21, 0x80, "reserved");
    expect_refused(LARDER__WIRE_HEADER + 22, 1, "reserved");
    expect_refused(LARDER__WIRE_HEADER + 32, 0, "READ of 0 bytes");
    expect_refused(LARDER__WIRE_HEADER + 39, 0xff, "READ of"); /* huge length */
    /* a DATA frame over the limit, an offset that overflows */
    uint8_t buf[128];
    larder__wire_encode_header(buf, sizeof buf, LARDER__DATA, LARDER__WIRE_MAX_READ + 1, 1);
    struct larder__frame frame;
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &frame), LARDER_EPROTOCOL);
    struct larder__read read = {.offset = UINT64_MAX - 5, .length = 10};
    larder__wire_encode_read(buf, sizeof buf, 1, &read);
    CHECK_EQ(larder__wire_read(buf + LARDER__WIRE_HEADER, 40, &read), LARDER_EPROTOCOL);
    /* READ's flag byte (21): CACHED goes and comes back at its place */
    struct larder__read cached = {
        .shard = 3, .priority = 2, .flags = LARDER__READ_CACHED, .offset = 7, .length = 9};
    CHECK_EQ(larder__wire_encode_read(buf, sizeof buf, 1, &cached), LARDER__WIRE_HEADER + 40);
    CHECK_EQ(buf[LARDER__WIRE_HEADER + 21], 1);
    CHECK_EQ(larder__wire_read(buf + LARDER__WIRE_HEADER, 40, &read), 0);
    CHECK_EQ(read.flags, LARDER__READ_CACHED);
    CHECK_EQ(read.priority, 2);
    /* and STAGE, bit 1 (docs/protocol.md), alone or with CACHED */
    cached.flags = LARDER__READ_STAGE;
    CHECK_EQ(larder__wire_encode_read(buf, sizeof buf, 1, &cached), LARDER__WIRE_HEADER + 40);
    CHECK_EQ(buf[LARDER__WIRE_HEADER + 21], 2);
    CHECK_EQ(larder__wire_read(buf + LARDER__WIRE_HEADER, 40, &read), 0);
    CHECK_EQ(read.flags, LARDER__READ_STAGE);
    buf[LARDER__WIRE_HEADER + 21] = 3;
    CHECK_EQ(larder__wire_read(buf + LARDER__WIRE_HEADER, 40, &read), 0);
    CHECK_EQ(read.flags, LARDER__READ_CACHED | LARDER__READ_STAGE);
    /* an empty DATA (STAGE's answer) is a valid header */
    larder__wire_encode_header(buf, sizeof buf, LARDER__DATA, 0, 1);
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &frame), 0);
    CHECK_EQ(frame.length, 0);
    /* PROGRESS (20) carries nothing: a payload is refused; 21 is nobody's yet */
    larder__wire_encode_header(buf, sizeof buf, LARDER__PROGRESS, 0, 0);
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &frame), 0);
    CHECK_EQ(frame.type, 20);
    larder__wire_encode_header(buf, sizeof buf, LARDER__PROGRESS, 1, 0);
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &frame), LARDER_EPROTOCOL);
    larder__wire_encode_header(buf, sizeof buf, 21, 0, 0);
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &frame), LARDER_EPROTOCOL);
    /* HELLO with nonzero reserved bytes, an unknown role, a wrong size */
    struct larder__hello hello = {.role = 1};
    int n = larder__wire_encode_hello(buf, sizeof buf, 1, &hello);
    larder__put_le32(buf + LARDER__WIRE_HEADER + 4, 200);
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), 0);
    struct larder__hello back;
    CHECK_EQ(larder__wire_hello(buf + LARDER__WIRE_HEADER, frame.length, &back), LARDER_EPROTOCOL);
    larder__put_le32(buf + LARDER__WIRE_HEADER + 4, 0);
    CHECK_EQ(larder__wire_hello(buf + LARDER__WIRE_HEADER, frame.length, &back), 0);
    larder__put_le32(buf + LARDER__WIRE_HEADER, 3);
    CHECK_EQ(larder__wire_hello(buf + LARDER__WIRE_HEADER, frame.length, &back), LARDER_EPROTOCOL);
    CHECK_EQ(larder__wire_hello(buf + LARDER__WIRE_HEADER, 39, &back), LARDER_EPROTOCOL);
    /* a version 1 HELLO (a token where the nonce is) is refused by its header */
    buf[4] = 1;
    CHECK_EQ(larder__wire_header(buf, (size_t)n, &frame), LARDER_EPROTOCOL);
    /* a HELLO longer than its fixed size never gets past the header */
    larder__wire_encode_header(buf, sizeof buf, LARDER__HELLO, 41, 1);
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &frame), LARDER_EPROTOCOL);
    larder__wire_encode_header(buf, sizeof buf, LARDER__PROVE, 33, 1);
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &frame), LARDER_EPROTOCOL);
    struct larder__prove prove;
    CHECK_EQ(larder__wire_prove(buf, 31, &prove), LARDER_EPROTOCOL);
    /* WELCOME: unknown authentication, a name longer than the frame */
    struct larder__welcome welcome = {.auth = 1, .name_length = 2, .name = "ab"};
    n = larder__wire_encode_welcome(buf, sizeof buf, 1, &welcome);
    CHECK_EQ(n, LARDER__WIRE_HEADER + 90);
    struct larder__welcome welcome_back;
    larder__put_le32(buf + LARDER__WIRE_HEADER + 16, 7);
    CHECK_EQ(larder__wire_welcome(buf + LARDER__WIRE_HEADER, 90, &welcome_back), LARDER_EPROTOCOL);
    larder__put_le32(buf + LARDER__WIRE_HEADER + 16, 1);
    larder__put_le32(buf + LARDER__WIRE_HEADER + 84, 3);
    CHECK_EQ(larder__wire_welcome(buf + LARDER__WIRE_HEADER, 90, &welcome_back), LARDER_EPROTOCOL);
    CHECK_EQ(larder__wire_welcome(buf + LARDER__WIRE_HEADER, 87, &welcome_back), LARDER_EPROTOCOL);
}

/* Hex of 32 bytes, for comparing against published vectors. */
static const char *hex32(const uint8_t bytes[32])
{
    static char text[65];
    for (int i = 0; i < 32; i++)
        snprintf(text + 2 * i, 3, "%02x", bytes[i]);
    return text;
}

/* RFC 4231's HMAC-SHA256 vectors (test cases 1, 2, 6), computed by the
 * code that signs the handshake. */
TEST(wire_hmac_rfc4231)
{
    uint8_t key[131], out[32];
    memset(key, 0x0b, 20);
    CHECK_EQ(larder__hmac_sha256(key, 20, "Hi There", 8, out), 0);
    CHECK(strcmp(hex32(out), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7") ==
          0);
    CHECK_EQ(larder__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, out), 0);
    CHECK(strcmp(hex32(out), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") ==
          0);
    memset(key, 0xaa, 131); /* a key longer than the block size is hashed first */
    const char *text = "Test Using Larger Than Block-Size Key - Hash Key First";
    CHECK_EQ(larder__hmac_sha256(key, 131, text, strlen(text), out), 0);
    CHECK(strcmp(hex32(out), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54") ==
          0);
}

/* A proof is HMAC(secret, label | first nonce | second nonce): the same
 * as the HMAC of that message built here by hand; the server's and the
 * client's differ; comparison tells them apart; nonces are fresh. */
TEST(wire_handshake_proofs)
{
    uint8_t a[LARDER__WIRE_NONCE], b[LARDER__WIRE_NONCE];
    CHECK_EQ(larder__auth_nonce(a), 0);
    CHECK_EQ(larder__auth_nonce(b), 0);
    CHECK(memcmp(a, b, sizeof a) != 0);
    uint8_t message[13 + 64], direct[32], server[32], client[32];
    memcpy(message, "larder server", 13);
    memcpy(message + 13, a, 32);
    memcpy(message + 45, b, 32);
    CHECK_EQ(larder__hmac_sha256("s3cret", 6, message, sizeof message, direct), 0);
    CHECK_EQ(larder__auth_proof("s3cret", 6, LARDER__AUTH_SERVER_LABEL, a, b, server), 0);
    CHECK(larder__auth_equal(direct, server));
    CHECK_EQ(larder__auth_proof("s3cret", 6, LARDER__AUTH_CLIENT_LABEL, b, a, client), 0);
    CHECK(!larder__auth_equal(client, server));
    uint8_t wrong[32];
    CHECK_EQ(larder__auth_proof("s3cres", 6, LARDER__AUTH_SERVER_LABEL, a, b, wrong), 0);
    CHECK(!larder__auth_equal(wrong, server));
    memcpy(wrong, server, 32);
    wrong[31] ^= 1;
    CHECK(!larder__auth_equal(wrong, server));
}

/* READERS (docs/protocol.md): type 26, a u32 hold in ms, little-endian;
 * a wrong length or a hold past 1000 ms is refused (a peer must not hold
 * another's staging for long with one frame). */
TEST(wire_readers)
{
    uint8_t buf[LARDER__WIRE_HEADER + 4];
    CHECK_EQ(larder__wire_encode_readers(buf, sizeof buf - 1, 5, 30), LARDER_ETOOSMALL);
    CHECK_EQ(larder__wire_encode_readers(buf, sizeof buf, 5, 30), LARDER__WIRE_HEADER + 4);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(buf, sizeof buf, &f), 0);
    CHECK_EQ(f.type, 26);
    CHECK_EQ(f.length, 4);
    CHECK_EQ(f.request, 5);
    const uint8_t *p = buf + LARDER__WIRE_HEADER;
    CHECK(p[0] == 30 && p[1] == 0 && p[2] == 0 && p[3] == 0);
    uint32_t hold = 0;
    CHECK_EQ(larder__wire_readers(p, 4, &hold), 0);
    CHECK_EQ(hold, 30);
    CHECK_EQ(larder__wire_readers(p, 3, &hold), LARDER_EPROTOCOL);
    CHECK_EQ(larder__wire_readers(p, 5, &hold), LARDER_EPROTOCOL);
    const uint8_t at_most[4] = {0xe8, 0x03, 0, 0}; /* 1000 */
    CHECK_EQ(larder__wire_readers(at_most, 4, &hold), 0);
    CHECK_EQ(hold, 1000);
    const uint8_t too_long[4] = {0xe9, 0x03, 0, 0}; /* 1001 */
    CHECK_EQ(larder__wire_readers(too_long, 4, &hold), LARDER_EPROTOCOL);
    const uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    CHECK_EQ(larder__wire_readers(huge, 4, &hold), LARDER_EPROTOCOL);
    /* a header claiming more than 4 bytes of READERS is refused before any payload */
    larder__wire_encode_header(buf, sizeof buf, LARDER__READERS, 5, 5);
    CHECK(larder__wire_header(buf, sizeof buf, &f) < 0);
}
