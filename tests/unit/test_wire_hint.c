/*
 * test_wire_hint.c - the HINT and HINTED frames (docs/protocol.md,
 * "Hints"): payloads written byte by byte from the document's layout are
 * parsed, the encoders write those same bytes, and every field past its
 * limit is refused with LARDER_EPROTOCOL.
 */
#include "test.h"
#include "wire.h"

static void le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
}
static void le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A hot HINT by the document: kind 1, flags, replicas 3, TTL 600000 ms,
 * the index "/d/index.larder" and keys "a" and "bc".  Its length. */
static uint32_t hot_payload(uint8_t *p, uint8_t flags)
{
    memset(p, 0, 64);
    p[0] = 1;
    p[1] = flags;
    le32(p + 4, 3);
    le64(p + 8, 600000);
    le32(p + 16, 15);
    le32(p + 20, 0);
    le32(p + 24, 2);
    memcpy(p + 32, "/d/index.larder", 15);
    le16(p + 47, 1);
    p[49] = 'a';
    le16(p + 50, 2);
    memcpy(p + 52, "bc", 2);
    return 54;
}

TEST(wire_hint_layout)
{
    uint8_t p[64];
    uint32_t n = hot_payload(p, LARDER__HINT_WAIT);
    struct larder__hint h;
    CHECK_EQ(larder__wire_hint(p, n, &h), 0);
    CHECK_EQ(h.kind, LARDER__HINT_HOT);
    CHECK_EQ(h.flags, LARDER__HINT_WAIT);
    CHECK_EQ(h.replicas, 3);
    CHECK_EQ(h.ttl_ms, 600000);
    CHECK_EQ(h.url_length, 15);
    CHECK(memcmp(h.url, "/d/index.larder", 15) == 0);
    CHECK_EQ(h.num_keys, 2);
    uint32_t cursor = 0, length;
    const char *key;
    CHECK_EQ(larder__wire_hint_key(&h, &cursor, &key, &length), 1);
    CHECK(length == 1 && key[0] == 'a');
    CHECK_EQ(larder__wire_hint_key(&h, &cursor, &key, &length), 1);
    CHECK(length == 2 && memcmp(key, "bc", 2) == 0);
    CHECK_EQ(larder__wire_hint_key(&h, &cursor, &key, &length), 0);

    /* the encoder writes the same bytes behind a header of type 11 */
    const char *keys[] = {"a", "bc"};
    struct larder__hint e = {.kind = LARDER__HINT_HOT,
                             .flags = LARDER__HINT_WAIT,
                             .replicas = 3,
                             .ttl_ms = 600000,
                             .url_length = 15,
                             .url = "/d/index.larder",
                             .num_keys = 2,
                             .key_list = keys};
    uint8_t frame[LARDER__WIRE_HEADER + 64];
    CHECK_EQ(larder__wire_encode_hint(frame, sizeof frame, 9, &e), LARDER__WIRE_HEADER + 54);
    CHECK(memcmp(frame + LARDER__WIRE_HEADER, p, 54) == 0);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(frame, sizeof frame, &f), 0);
    CHECK(f.type == 11 && f.length == 54 && f.request == 9);
    CHECK_EQ(larder__wire_encode_hint(frame, LARDER__WIRE_HEADER + 53, 9, &e), LARDER_ETOOSMALL);

    /* replicate: kind 2, the member list after the index, no keys */
    uint8_t r[64] = {2, 0};
    le64(r + 8, 1);
    le32(r + 16, 1);
    le32(r + 20, 10);
    memcpy(r + 32, "xh:1,h2:300", 12);
    CHECK_EQ(larder__wire_hint(r, 43, &h), 0);
    CHECK(h.kind == LARDER__HINT_REPLICATE && h.url[0] == 'x' && h.targets_length == 10 &&
          memcmp(h.targets, "h:1,h2:300", 10) == 0);
    /* by name (flag 0x08): the index field is a publication's name */
    uint8_t named[64];
    n = hot_payload(named, LARDER__HINT_NAME);
    memcpy(named + 32, "eval/step-1000.x", 15); /* 15 bytes: "eval/step-1000." */
    CHECK_EQ(larder__wire_hint(named, n, &h), 0);
    CHECK(h.flags == LARDER__HINT_NAME && memcmp(h.url, "eval/step-1000.", 15) == 0);
    memcpy(named + 32, "eval/../x000000", 15); /* a '..' component */
    CHECK_EQ(larder__wire_hint(named, n, &h), LARDER_EPROTOCOL);
    memcpy(named + 32, "eval/step 1000.", 15); /* a space */
    CHECK_EQ(larder__wire_hint(named, n, &h), LARDER_EPROTOCOL);
    /* list: kind 3 and nothing else */
    uint8_t l[32] = {3};
    CHECK_EQ(larder__wire_hint(l, 32, &h), 0);
    CHECK_EQ(h.kind, LARDER__HINT_LIST);
}

TEST(wire_hint_refuses_bad_fields)
{
    uint8_t p[64], q[64];
    uint32_t n = hot_payload(p, 0);
    struct larder__hint h;
#define REFUSED(edit, len)                                                                         \
    do {                                                                                           \
        memcpy(q, p, sizeof q);                                                                    \
        edit;                                                                                      \
        CHECK_EQ(larder__wire_hint(q, len, &h), LARDER_EPROTOCOL);                                 \
    } while (0)
    REFUSED((void)0, 31);    /* shorter than the fixed part */
    REFUSED(q[0] = 0, n);    /* kind */
    REFUSED(q[0] = 4, n);    /* kind */
    REFUSED(q[1] = 0x10, n); /* unknown flag */
    REFUSED(q[1] = 0x80, n); /* unknown flag */
    REFUSED(q[1] = 0x08, n); /* NAME: "/d/index.larder" is no publication name (empty component) */
    REFUSED(q[2] = 1, n);    /* reserved */
    REFUSED(q[28] = 1, n);   /* reserved */
    REFUSED(le64(q + 8, 0), n);                           /* no TTL */
    REFUSED(le64(q + 8, LARDER__HINT_MAX_TTL_MS + 1), n); /* TTL past 30 days */
    REFUSED(le32(q + 16, 0), n);                          /* no index */
    REFUSED(le32(q + 16, 5000), n);                       /* index name past 4096 */
    REFUSED(le32(q + 16, 60), n);                         /* strings past the end */
    REFUSED(le32(q + 20, 1), n);                          /* a member list on a hot hint */
    REFUSED(le32(q + 24, 1), n);                          /* fewer keys said than sent */
    REFUSED(le32(q + 24, 3), n);                          /* more keys said than sent */
    REFUSED(le32(q + 24, LARDER__HINT_MAX_KEYS + 1), n);
    REFUSED(le16(q + 47, 0), n); /* an empty key */
    REFUSED(le16(q + 50, 3), n); /* a key past the end */
    REFUSED(q[52] = 0, n);       /* a NUL in a key */
    REFUSED(q[33] = 0, n);       /* a NUL in the index name */
    REFUSED(le32(q + 4, LARDER__HINT_MAX_REPLICAS + 1), n);
    REFUSED(q[1] = LARDER__HINT_ALL_NODES, n); /* replicas with all nodes */
    REFUSED((void)0, n - 1);                   /* a key cut short */
    REFUSED(q[54] = 0, n + 1);                 /* a stray byte after the keys */
    /* replicate without members, with keys, to all nodes; list with anything */
    REFUSED((q[0] = 2, le32(q + 4, 0), le32(q + 24, 0)), 47);
    REFUSED((q[0] = 2, le32(q + 4, 0), le32(q + 20, 2)), n);
    REFUSED((q[0] = 3, le32(q + 4, 0), le64(q + 8, 0), le32(q + 16, 0), le32(q + 24, 0)), 33);
    REFUSED((memset(q, 0, 32), q[0] = 3, q[1] = 2), 32);
    REFUSED((memset(q, 0, 32), q[0] = 3, q[1] = LARDER__HINT_NAME), 32);
    REFUSED((memset(q, 0, 32), q[0] = 3, q[8] = 1), 32);
#undef REFUSED
    CHECK_EQ(larder__wire_hint(p, n, &h), 0);
}

TEST(wire_hinted_layout)
{
    uint8_t p[LARDER__HINTED_FIXED + 8];
    le32(p, 3);
    le32(p + 4, 2);
    le32(p + 8, 1);
    le32(p + 12, 2);
    le64(p + 16, 10);
    le64(p + 24, 1000);
    le64(p + 32, 2000);
    le64(p + 40, 1500);
    memcpy(p + 48, "{}", 2);
    struct larder__hinted h;
    CHECK_EQ(larder__wire_hinted(p, 50, &h), 0);
    CHECK(h.flags == 3 && h.nodes == 2 && h.failed == 1 && h.samples == 10 && h.bytes == 1000 &&
          h.pinned_bytes == 2000 && h.staged_bytes == 1500 && h.text_length == 2 &&
          memcmp(h.text, "{}", 2) == 0);
    uint8_t frame[LARDER__WIRE_HEADER + 64];
    CHECK_EQ(larder__wire_encode_hinted(frame, sizeof frame, 4, &h), LARDER__WIRE_HEADER + 50);
    CHECK(memcmp(frame + LARDER__WIRE_HEADER, p, 50) == 0);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(frame, sizeof frame, &f), 0);
    CHECK(f.type == 12 && f.length == 50);
    CHECK_EQ(larder__wire_hinted(p, 47, &h), LARDER_EPROTOCOL); /* short */
    CHECK_EQ(larder__wire_hinted(p, 51, &h), LARDER_EPROTOCOL); /* text length disagrees */
    le32(p, 4);
    CHECK_EQ(larder__wire_hinted(p, 50, &h), LARDER_EPROTOCOL); /* unknown flag */
    le32(p, 0);
    le32(p + 4, LARDER__HINT_MAX_REPLICAS + 1);
    CHECK_EQ(larder__wire_hinted(p, 50, &h), LARDER_EPROTOCOL);
    /* a header claiming more than a HINT or HINTED may carry is refused before any payload */
    larder__wire_encode_header(frame, sizeof frame, LARDER__HINT, LARDER__WIRE_MAX_HINT + 1, 1);
    CHECK_EQ(larder__wire_header(frame, sizeof frame, &f), LARDER_EPROTOCOL);
}
