/*
 * test_wire_names.c - the names' frames (docs/protocol.md, "Names"):
 * payloads laid out here byte by byte from the document, parsed; the
 * encoders' bytes compared with those; every malformed field refused
 * with a message naming it; publication names checked against a table.
 */
#include "test.h"
#include "wire.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The failure and its message holds needle. */
static void refused(int rc, const char *needle)
{
    CHECK(rc < 0);
    if (!strstr(larder_errmsg(), needle)) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK(strstr(larder_errmsg(), needle) != NULL);
}

/* A PUBLISH payload by the table: three u32 lengths, u32 flags (0), the strings. */
static size_t publish_payload(uint8_t *p, const char *name, const char *index, const char *origin)
{
    size_t n = strlen(name), i = strlen(index), o = strlen(origin);
    put32(p, (uint32_t)n);
    put32(p + 4, (uint32_t)i);
    put32(p + 8, (uint32_t)o);
    put32(p + 12, 0);
    memcpy(p + 16, name, n);
    memcpy(p + 16 + n, index, i);
    memcpy(p + 16 + n + i, origin, o);
    return 16 + n + i + o;
}

/* ANNOUNCE / RESOLVED by the table: id, flags, five u32 lengths, the five parts. */
static size_t publication_payload(uint8_t *p, uint32_t flags, const char *name,
                                  const char *producer, const char *location, const char *origin,
                                  size_t index_length)
{
    const char *parts[4] = {name, producer, location, origin};
    put64(p, UINT64_C(0x1122334455667788));
    put64(p + 8, UINT64_C(0x99aabbccddeeff00));
    put32(p + 16, flags);
    size_t at = 40;
    for (int k = 0; k < 4; k++) {
        put32(p + 20 + 4 * k, (uint32_t)strlen(parts[k]));
        memcpy(p + at, parts[k], strlen(parts[k]));
        at += strlen(parts[k]);
    }
    put32(p + 36, (uint32_t)index_length);
    for (size_t i = 0; i < index_length; i++)
        p[at++] = (uint8_t)(i * 13);
    return at;
}

TEST(wire_names_publication_names)
{
    static const char *good[] = {"a", "ckpt/step-1000", "run_7.eval+x=1@host:3", "A.b/c.d/e"};
    static const char *bad[] = {"",     "/abs", "trail/", "a//b", "./a",   "a/./b",       "../etc",
                                "a/..", "a b",  "a\tb",   "a\\b", "a\x7f", "caf\xc3\xa9", "a%2fb",
                                "a?b",  "a#b",  "a\"b"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK_EQ(larder__wire_check_publication(good[i], strlen(good[i])), 0);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_EQ(larder__wire_check_publication(bad[i], strlen(bad[i])), LARDER_EUSAGE);
    char longest[129];
    memset(longest, 'n', sizeof longest);
    CHECK_EQ(larder__wire_check_publication(longest, 128), 0);
    refused(larder__wire_check_publication(longest, 129), "129 bytes");
    /* a NUL inside the bytes is a bad byte, not an end */
    refused(larder__wire_check_publication("ab\0cd", 5), "byte 0x00 at 2");
}

TEST(wire_names_publish)
{
    uint8_t p[8192], frame[8192];
    size_t n = publish_payload(p, "ckpt/1", "/data/ckpt/index.larder", "/shared/ckpt/index.larder");
    struct larder__publish m;
    CHECK_EQ(larder__wire_publish(p, (uint32_t)n, &m), 0);
    CHECK_EQ(m.name_length, 6);
    CHECK(memcmp(m.name, "ckpt/1", 6) == 0);
    CHECK(m.index_length == 23 && memcmp(m.index, "/data/ckpt/index.larder", 23) == 0);
    CHECK(m.origin_length == 25 && memcmp(m.origin, "/shared/ckpt/index.larder", 25) == 0);
    /* the encoder writes the same bytes behind a header of type 13 */
    CHECK_EQ(larder__wire_encode_publish(frame, sizeof frame, 5, &m), (int)(24 + n));
    CHECK_EQ(frame[5], 13);
    CHECK(memcmp(frame + 24, p, n) == 0);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(frame, 24 + n, &f), 0);
    CHECK_EQ(f.length, n);

    n = publish_payload(p, "x", "/i", "");
    CHECK_EQ(larder__wire_publish(p, (uint32_t)n, &m), 0);
    CHECK_EQ(m.origin_length, 0);
    refused(larder__wire_publish(p, (uint32_t)n - 1, &m), "do not fit");
    refused(larder__wire_publish(p, 15, &m), "PUBLISH of 15 bytes");
    p[12] = 1; /* flag REPLACE, taken, and written back by the encoder */
    CHECK_EQ(larder__wire_publish(p, (uint32_t)n, &m), 0);
    CHECK_EQ(m.flags, LARDER__PUBLISH_REPLACE);
    CHECK_EQ(larder__wire_encode_publish(frame, sizeof frame, 5, &m), (int)(24 + n));
    CHECK(memcmp(frame + 24, p, n) == 0);
    p[12] = 2;
    refused(larder__wire_publish(p, (uint32_t)n, &m), "unknown flags 0x2");
    p[12] = 0, p[15] = 0x80;
    refused(larder__wire_publish(p, (uint32_t)n, &m), "unknown flags");
    p[15] = 0;
    n = publish_payload(p, "x", "relative", "");
    refused(larder__wire_publish(p, (uint32_t)n, &m), "not absolute");
    n = publish_payload(p, "x", "/a\nb", "");
    refused(larder__wire_publish(p, (uint32_t)n, &m), "control character");
    n = publish_payload(p, "x", "", "");
    refused(larder__wire_publish(p, (uint32_t)n, &m), "do not fit");
    n = publish_payload(p, "bad name", "/i", "");
    refused(larder__wire_publish(p, (uint32_t)n, &m), "byte 0x20");
    /* lengths that would wrap a 32-bit sum */
    n = publish_payload(p, "x", "/i", "");
    put32(p, UINT32_MAX - 10);
    refused(larder__wire_publish(p, (uint32_t)n, &m), "do not fit");
    /* a frame over its type's limit is refused by the header */
    uint8_t header[24];
    CHECK_EQ(larder__wire_encode_header(header, sizeof header, LARDER__PUBLISH, 4096 + 65, 1), 24);
    refused(larder__wire_header(header, sizeof header, &f), "at most 4160");
}

TEST(wire_names_resolve)
{
    uint8_t p[256], frame[256];
    put32(p, 2500);
    put32(p + 4, 3);
    memcpy(p + 8, "ckpt/1", 6);
    struct larder__resolve q;
    CHECK_EQ(larder__wire_resolve(p, 14, &q), 0);
    CHECK(q.wait_ms == 2500 && q.flags == 3 && q.name_length == 6);
    CHECK_EQ(larder__wire_encode_resolve(frame, sizeof frame, 9, &q), 24 + 14);
    CHECK_EQ(frame[5], 14);
    CHECK(memcmp(frame + 24, p, 14) == 0);

    put32(p + 4, 8);
    refused(larder__wire_resolve(p, 14, &q), "unknown flags 0x8");
    put32(p + 4, 4); /* a list takes no name */
    refused(larder__wire_resolve(p, 14, &q), "with a name");
    CHECK_EQ(larder__wire_resolve(p, 8, &q), 0);
    put32(p + 4, 0);
    refused(larder__wire_resolve(p, 8, &q), "name of 0 bytes"); /* an empty name */
    put32(p, 3600001);
    refused(larder__wire_resolve(p, 14, &q), "waiting 3600001 ms");
    put32(p, 0);
    p[9] = '\n';
    refused(larder__wire_resolve(p, 14, &q), "byte 0x0a");
    refused(larder__wire_resolve(p, 7, &q), "RESOLVE of 7 bytes");
}

TEST(wire_names_publication)
{
    static uint8_t p[1 << 16], frame[1 << 16];
    size_t n = publication_payload(p, 1, "ckpt/1", "10.0.0.1:7461", "/data/ckpt/index.larder",
                                   "/shared/ckpt/index.larder", 0);
    struct larder__publication m;
    CHECK_EQ(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), 0);
    CHECK(m.id_low == UINT64_C(0x1122334455667788) && m.id_high == UINT64_C(0x99aabbccddeeff00));
    CHECK(m.producer_length == 13 && memcmp(m.producer, "10.0.0.1:7461", 13) == 0);
    CHECK(m.location_length == 23 && m.origin_length == 25 && m.index_length == 0);
    CHECK_EQ(larder__wire_publication_size(LARDER__ANNOUNCE, &m), 24 + n);
    CHECK_EQ(larder__wire_encode_publication(frame, sizeof frame, LARDER__ANNOUNCE, 4, &m),
             (int)(24 + n));
    CHECK_EQ(frame[5], 16);
    CHECK(memcmp(frame + 24, p, n) == 0);

    /* RESOLVED carries the index's bytes; ANNOUNCE may not */
    n = publication_payload(p, 0, "ckpt/1", "n1:1", "/i", "", 5000);
    CHECK_EQ(larder__wire_publication(LARDER__RESOLVED, p, (uint32_t)n, &m), 0);
    CHECK_EQ(m.index_length, 5000);
    CHECK_EQ(m.index[4999], (uint8_t)(4999 * 13));
    CHECK_EQ(larder__wire_encode_publication(frame, sizeof frame, LARDER__RESOLVED, 4, &m),
             (int)(24 + n));
    CHECK_EQ(frame[5], 15);
    CHECK(memcmp(frame + 24, p, n) == 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "ANNOUNCE of 5052");
    n = publication_payload(p, 0, "ckpt/1", "n1:1", "/i", "", 1);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "lengths");

    n = publication_payload(p, 0, "ckpt/1", "n1:1", "/i", "/o", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "without its flag");
    n = publication_payload(p, 1, "ckpt/1", "n1:1", "/i", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "without its flag");
    n = publication_payload(p, 4, "ckpt/1", "n1:1", "/i", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "unknown flags");
    /* flag 2: a u64 generation after every other byte (here after 3 bytes of index) */
    n = publication_payload(p, 2, "ckpt/1", "n1:1", "/i", "", 3);
    refused(larder__wire_publication(LARDER__RESOLVED, p, (uint32_t)n, &m), "lengths");
    put64(p + n, UINT64_C(0x0102030405060708));
    CHECK_EQ(larder__wire_publication(LARDER__RESOLVED, p, (uint32_t)n + 8, &m), 0);
    CHECK(m.generation == UINT64_C(0x0102030405060708) && m.index_length == 3);
    CHECK_EQ(larder__wire_encode_publication(frame, sizeof frame, LARDER__RESOLVED, 4, &m),
             (int)(24 + n + 8));
    CHECK(memcmp(frame + 24, p, n + 8) == 0);
    put64(p + n, 0); /* generation 0 is said by leaving the flag out */
    refused(larder__wire_publication(LARDER__RESOLVED, p, (uint32_t)n + 8, &m), "generation 0");
    /* the encoder sets the flag from the field, and leaves it out for 0 */
    n = publication_payload(p, 0, "ckpt/1", "n1:1", "/i", "", 0);
    CHECK_EQ(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), 0);
    CHECK_EQ(m.generation, 0);
    m.generation = 9;
    CHECK_EQ(larder__wire_encode_publication(frame, sizeof frame, LARDER__ANNOUNCE, 4, &m),
             (int)(24 + n + 8));
    CHECK(frame[24 + 16] == 2 && frame[24 + n] == 9);
    m.flags = LARDER__PUBLISHED_GENERATION, m.generation = 0;
    CHECK_EQ(larder__wire_encode_publication(frame, sizeof frame, LARDER__ANNOUNCE, 4, &m),
             (int)(24 + n));
    CHECK_EQ(frame[24 + 16], 0);
    n = publication_payload(p, 0, "ckpt/1", "", "/i", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "lengths");
    n = publication_payload(p, 0, "ckpt/1", "n1 :1", "/i", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "producer name");
    n = publication_payload(p, 0, "ckpt/1", "n1:1", "", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "lengths");
    n = publication_payload(p, 0, "ckpt/1", "n1:1", "/a\x1b", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "control character");
    n = publication_payload(p, 0, "../x", "n1:1", "/i", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "'..' component");
    n = publication_payload(p, 0, "ckpt/1", "n1:1", "/i", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n - 1, &m), "lengths");
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, 39, &m), "of 39 bytes");
    refused(larder__wire_publication(LARDER__PUBLISH, p, (uint32_t)n, &m), "bytes");
    char name[200];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    n = publication_payload(p, 0, name, "n1:1", "/i", "", 0);
    refused(larder__wire_publication(LARDER__ANNOUNCE, p, (uint32_t)n, &m), "199 bytes");
    /* the encoders refuse what the parsers would */
    m.name_length = 129;
    CHECK_EQ(larder__wire_publication_size(LARDER__ANNOUNCE, &m), 0);
    CHECK_EQ(larder__wire_encode_publication(frame, sizeof frame, LARDER__ANNOUNCE, 1, &m),
             LARDER_ETOOSMALL);
}

TEST(wire_names_header_types)
{
    /* 11 and 12 are the hints' (docs/protocol.md), 13 to 16 the names';
     * 17 and 18 the transforms' (TRANSFORMED: 8 bytes at least); 19 is nobody's */
    uint8_t header[24];
    struct larder__frame f;
    for (int type = 11; type <= 19; type++) {
        CHECK_EQ(larder__wire_encode_header(header, sizeof header, (uint8_t)type, 8, 1), 24);
        int rc = larder__wire_header(header, sizeof header, &f);
        CHECK_EQ(rc, type <= 18 ? 0 : LARDER_EPROTOCOL);
    }
}
