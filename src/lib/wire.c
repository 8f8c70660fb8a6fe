/*
 * wire.c - the daemon protocol's frames (docs/protocol.md).  Every length
 * is checked against its type's limit before anything is trusted.
 */
#include "wire.h"

/* The largest payload each type may carry. */
uint64_t larder__wire_max_payload(uint8_t type)
{
    switch (type) {
    case LARDER__HELLO:
        return 8 + LARDER__WIRE_NONCE;
    case LARDER__WELCOME:
        return 88 + LARDER__WIRE_MAX_NAME;
    case LARDER__PROVE:
        return LARDER__WIRE_PROOF;
    case LARDER__READ:
        return 40;
    case LARDER__DATA:
        return LARDER__WIRE_MAX_READ;
    case LARDER__ERROR:
        return 4 + LARDER__WIRE_MAX_MESSAGE;
    case LARDER__STAT:
        return 0;
    case LARDER__STATS:
        return LARDER__WIRE_MAX_STATS;
    case LARDER__OPEN:
        return LARDER__WIRE_MAX_URL;
    case LARDER__OPENED:
        return 20;
    case LARDER__HINT:
        return LARDER__WIRE_MAX_HINT;
    case LARDER__HINT_ANSWER:
        return LARDER__HINTED_FIXED + LARDER__HINTED_MAX_TEXT;
    case LARDER__PUBLISH:
    case LARDER__ANNOUNCE:
        return LARDER__WIRE_MAX_NAMES_FRAME;
    case LARDER__RESOLVE:
        return 8 + LARDER__WIRE_MAX_PUBLICATION;
    case LARDER__RESOLVED:
        return 40 + LARDER__WIRE_MAX_PUBLICATION + LARDER__WIRE_MAX_NAME +
               2 * LARDER__WIRE_MAX_URL + LARDER__WIRE_MAX_INDEX;
    case LARDER__UCX_OFFER:
        return LARDER__WIRE_MAX_UCX;
    case LARDER__UCX_ACCEPT:
        return LARDER__WIRE_PROOF + LARDER__WIRE_MAX_UCX;
    case LARDER__TRANSFORM:
        return LARDER__TRANSFORM_FIXED + LARDER_TRANSFORM_MAX_SPEC - 1;
    case LARDER__TRANSFORMED:
        return LARDER__TRANSFORMED_FIXED + LARDER__WIRE_MAX_READ;
    case LARDER__READERS:
        return 4;
    default:
        return 0;
    }
}

/* Types 11 and 12 are the hints' (HINT, HINTED): unknown to this build. */
static bool known_type(uint8_t type)
{
    return (type >= LARDER__HELLO && type <= LARDER__ANNOUNCE) ||        /* 1 .. 16, no gaps */
           (type >= LARDER__TRANSFORM && type <= LARDER__TRANSFORMED) || /* 17, 18 */
           type == LARDER__PROGRESS ||                                   /* 20, no payload */
           type == LARDER__UCX_OFFER || type == LARDER__UCX_ACCEPT ||    /* 24, 25 */
           type == LARDER__READERS;                                      /* 26 */
}

int larder__wire_header(const uint8_t *buf, size_t available, struct larder__frame *frame)
{
    if (available < LARDER__WIRE_HEADER) return LARDER_ETRUNCATED;
    if (larder__le32(buf) != LARDER__WIRE_MAGIC)
        return larder__fail(LARDER_EPROTOCOL, "bad magic 0x%08x", larder__le32(buf));
    if (buf[4] != LARDER__WIRE_VERSION)
        return larder__fail(LARDER_EPROTOCOL, "protocol version %u, this build speaks %d", buf[4],
                            LARDER__WIRE_VERSION);
    uint8_t type = buf[5];
    if (!known_type(type)) return larder__fail(LARDER_EPROTOCOL, "unknown frame type %u", type);
    if (larder__le16(buf + 6) != 0 || larder__le32(buf + 12) != 0)
        return larder__fail(LARDER_EPROTOCOL, "nonzero flags or reserved bytes");
    uint32_t length = larder__le32(buf + 8);
    if (length > larder__wire_max_payload(type))
        return larder__fail(LARDER_EPROTOCOL, "frame type %u with %u payload bytes (at most %llu)",
                            type, length, (unsigned long long)larder__wire_max_payload(type));
    frame->type = type;
    frame->length = length;
    frame->request = larder__le64(buf + 16);
    return 0;
}

int larder__wire_hello(const uint8_t *p, uint32_t length, struct larder__hello *out)
{
    if (length != 8 + LARDER__WIRE_NONCE)
        return larder__fail(LARDER_EPROTOCOL, "HELLO of %u bytes, not %d", length,
                            8 + LARDER__WIRE_NONCE);
    uint32_t role = larder__le32(p);
    if (role != LARDER__ROLE_READER && role != LARDER__ROLE_PEER)
        return larder__fail(LARDER_EPROTOCOL, "HELLO with unknown role %u", role);
    out->role = (enum larder__role)role;
    out->owner_chunk = larder__le32(p + 4); /* a peer's; the daemon compares it with its own */
    if (role == LARDER__ROLE_READER && out->owner_chunk != 0)
        return larder__fail(LARDER_EPROTOCOL, "HELLO with nonzero reserved bytes");
    memcpy(out->nonce, p + 8, LARDER__WIRE_NONCE);
    return 0;
}

int larder__wire_welcome(const uint8_t *p, uint32_t length, struct larder__welcome *out)
{
    if (length < 88) return larder__fail(LARDER_EPROTOCOL, "WELCOME of %u bytes", length);
    memcpy(out->member, p, 16);
    out->auth = larder__le32(p + 16);
    memcpy(out->nonce, p + 20, LARDER__WIRE_NONCE);
    memcpy(out->proof, p + 52, LARDER__WIRE_PROOF);
    out->name_length = larder__le32(p + 84);
    out->name = (const char *)p + 88;
    if (out->auth != LARDER__AUTH_NONE && out->auth != LARDER__AUTH_HMAC)
        return larder__fail(LARDER_EPROTOCOL, "WELCOME with unknown authentication %u", out->auth);
    if (out->name_length > LARDER__WIRE_MAX_NAME || out->name_length != length - 88)
        return larder__fail(LARDER_EPROTOCOL, "WELCOME name of %u bytes in %u", out->name_length,
                            length);
    return 0;
}

int larder__wire_prove(const uint8_t *p, uint32_t length, struct larder__prove *out)
{
    if (length != LARDER__WIRE_PROOF)
        return larder__fail(LARDER_EPROTOCOL, "PROVE of %u bytes, not %d", length,
                            LARDER__WIRE_PROOF);
    memcpy(out->proof, p, LARDER__WIRE_PROOF);
    return 0;
}

int larder__wire_read(const uint8_t *p, uint32_t length, struct larder__read *out)
{
    if (length != 40) return larder__fail(LARDER_EPROTOCOL, "READ of %u bytes, not 40", length);
    out->id_low = larder__le64(p);
    out->id_high = larder__le64(p + 8);
    out->shard = larder__le32(p + 16);
    out->priority = p[20];
    out->offset = larder__le64(p + 24);
    out->length = larder__le64(p + 32);
    uint64_t end;
    out->flags = p[21];
    if ((p[21] & ~LARDER__READ_FLAGS) || p[22] || p[23])
        return larder__fail(LARDER_EPROTOCOL, "READ with nonzero reserved bytes");
    if (out->priority > 3)
        return larder__fail(LARDER_EPROTOCOL, "READ with priority %u", out->priority);
    if (out->length == 0 || out->length > LARDER__WIRE_MAX_READ ||
        !larder__add_ok(out->offset, out->length, &end))
        return larder__fail(LARDER_EPROTOCOL, "READ of %llu bytes at %llu",
                            (unsigned long long)out->length, (unsigned long long)out->offset);
    return 0;
}

int larder__wire_error(const uint8_t *p, uint32_t length, struct larder__error_frame *out)
{
    if (length < 4) return larder__fail(LARDER_EPROTOCOL, "ERROR of %u bytes", length);
    out->code = (int32_t)larder__le32(p);
    out->message_length = length - 4;
    out->message = (const char *)p + 4;
    if (out->code >= 0) return larder__fail(LARDER_EPROTOCOL, "ERROR with code %d", out->code);
    return 0;
}

int larder__wire_encode_header(uint8_t *out, size_t capacity, uint8_t type, uint32_t length,
                               uint64_t request)
{
    if (capacity < LARDER__WIRE_HEADER) return LARDER_ETOOSMALL;
    larder__put_le32(out, LARDER__WIRE_MAGIC);
    out[4] = LARDER__WIRE_VERSION;
    out[5] = type;
    larder__put_le16(out + 6, 0);
    larder__put_le32(out + 8, length);
    larder__put_le32(out + 12, 0);
    larder__put_le64(out + 16, request);
    return LARDER__WIRE_HEADER;
}

int larder__wire_encode_hello(uint8_t *out, size_t capacity, uint64_t request,
                              const struct larder__hello *hello)
{
    uint32_t length = 8 + LARDER__WIRE_NONCE;
    if (capacity < LARDER__WIRE_HEADER + length) return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__HELLO, length, request);
    larder__put_le32(out + LARDER__WIRE_HEADER, (uint32_t)hello->role);
    larder__put_le32(out + LARDER__WIRE_HEADER + 4, hello->owner_chunk);
    memcpy(out + LARDER__WIRE_HEADER + 8, hello->nonce, LARDER__WIRE_NONCE);
    return (int)(LARDER__WIRE_HEADER + length);
}

int larder__wire_encode_welcome(uint8_t *out, size_t capacity, uint64_t request,
                                const struct larder__welcome *welcome)
{
    uint32_t length = 88 + welcome->name_length;
    if (welcome->name_length > LARDER__WIRE_MAX_NAME || capacity < LARDER__WIRE_HEADER + length)
        return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__WELCOME, length, request);
    uint8_t *p = out + LARDER__WIRE_HEADER;
    memcpy(p, welcome->member, 16);
    larder__put_le32(p + 16, welcome->auth);
    memcpy(p + 20, welcome->nonce, LARDER__WIRE_NONCE);
    memcpy(p + 52, welcome->proof, LARDER__WIRE_PROOF);
    larder__put_le32(p + 84, welcome->name_length);
    if (welcome->name_length) memcpy(p + 88, welcome->name, welcome->name_length);
    return (int)(LARDER__WIRE_HEADER + length);
}

int larder__wire_encode_prove(uint8_t *out, size_t capacity, uint64_t request,
                              const struct larder__prove *prove)
{
    if (capacity < LARDER__WIRE_HEADER + LARDER__WIRE_PROOF) return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__PROVE, LARDER__WIRE_PROOF, request);
    memcpy(out + LARDER__WIRE_HEADER, prove->proof, LARDER__WIRE_PROOF);
    return LARDER__WIRE_HEADER + LARDER__WIRE_PROOF;
}

int larder__wire_encode_read(uint8_t *out, size_t capacity, uint64_t request,
                             const struct larder__read *read)
{
    if (capacity < LARDER__WIRE_HEADER + 40) return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__READ, 40, request);
    uint8_t *p = out + LARDER__WIRE_HEADER;
    memset(p, 0, 40);
    larder__put_le64(p, read->id_low);
    larder__put_le64(p + 8, read->id_high);
    larder__put_le32(p + 16, read->shard);
    p[20] = read->priority;
    p[21] = read->flags;
    larder__put_le64(p + 24, read->offset);
    larder__put_le64(p + 32, read->length);
    return LARDER__WIRE_HEADER + 40;
}

int larder__wire_encode_error(uint8_t *out, size_t capacity, uint64_t request, int32_t code,
                              const char *message)
{
    size_t n = strlen(message);
    if (n > LARDER__WIRE_MAX_MESSAGE) n = LARDER__WIRE_MAX_MESSAGE;
    if (capacity < LARDER__WIRE_HEADER + 4 + n) return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__ERROR, (uint32_t)(4 + n), request);
    larder__put_le32(out + LARDER__WIRE_HEADER, (uint32_t)code);
    memcpy(out + LARDER__WIRE_HEADER + 4, message, n);
    return (int)(LARDER__WIRE_HEADER + 4 + n);
}

int larder__wire_opened(const uint8_t *p, uint32_t length, struct larder__opened *out)
{
    if (length != 20) return larder__fail(LARDER_EPROTOCOL, "OPENED of %u bytes, not 20", length);
    out->id_low = larder__le64(p);
    out->id_high = larder__le64(p + 8);
    out->num_shards = larder__le32(p + 16);
    return 0;
}

int larder__wire_encode_open(uint8_t *out, size_t capacity, uint64_t request, const char *index_url)
{
    size_t n = strlen(index_url);
    if (n == 0 || n > LARDER__WIRE_MAX_URL || capacity < LARDER__WIRE_HEADER + n)
        return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__OPEN, (uint32_t)n, request);
    memcpy(out + LARDER__WIRE_HEADER, index_url, n);
    return (int)(LARDER__WIRE_HEADER + n);
}

int larder__wire_encode_opened(uint8_t *out, size_t capacity, uint64_t request,
                               const struct larder__opened *opened)
{
    if (capacity < LARDER__WIRE_HEADER + 20) return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__OPENED, 20, request);
    larder__put_le64(out + LARDER__WIRE_HEADER, opened->id_low);
    larder__put_le64(out + LARDER__WIRE_HEADER + 8, opened->id_high);
    larder__put_le32(out + LARDER__WIRE_HEADER + 16, opened->num_shards);
    return LARDER__WIRE_HEADER + 20;
}

/* ---- READERS ---- */

int larder__wire_encode_readers(uint8_t *out, size_t capacity, uint64_t request, uint32_t hold_ms)
{
    if (capacity < LARDER__WIRE_HEADER + 4) return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__READERS, 4, request);
    larder__put_le32(out + LARDER__WIRE_HEADER, hold_ms);
    return LARDER__WIRE_HEADER + 4;
}

int larder__wire_readers(const uint8_t *payload, uint32_t length, uint32_t *hold_ms)
{
    if (length != 4) return larder__fail(LARDER_EPROTOCOL, "READERS of %u bytes, not 4", length);
    *hold_ms = larder__le32(payload);
    if (*hold_ms > LARDER__READERS_MAX_HOLD_MS)
        return larder__fail(LARDER_EPROTOCOL, "READERS holding %u ms, more than %d", *hold_ms,
                            LARDER__READERS_MAX_HOLD_MS);
    return 0;
}

/* ---- hints ---- */

/* Whether bytes [0, n) hold no NUL (a string the daemon will print and open). */
static bool no_nul(const char *p, uint32_t n)
{
    return memchr(p, '\0', n) == NULL;
}

int larder__wire_hint(const uint8_t *p, uint32_t length, struct larder__hint *out)
{
    if (length < 32 || length > LARDER__WIRE_MAX_HINT)
        return larder__fail(LARDER_EPROTOCOL, "HINT of %u bytes", length);
    memset(out, 0, sizeof *out);
    out->kind = p[0];
    out->flags = p[1];
    out->replicas = larder__le32(p + 4);
    out->ttl_ms = larder__le64(p + 8);
    out->url_length = larder__le32(p + 16);
    out->targets_length = larder__le32(p + 20);
    out->num_keys = larder__le32(p + 24);
    if (larder__le16(p + 2) || larder__le32(p + 28))
        return larder__fail(LARDER_EPROTOCOL, "HINT with nonzero reserved bytes");
    if (out->kind < LARDER__HINT_HOT || out->kind > LARDER__HINT_LIST)
        return larder__fail(LARDER_EPROTOCOL, "HINT of unknown kind %u", out->kind);
    if (out->flags & ~LARDER__HINT_FLAGS)
        return larder__fail(LARDER_EPROTOCOL, "HINT with unknown flags 0x%x", out->flags);
    bool list = out->kind == LARDER__HINT_LIST, replicate = out->kind == LARDER__HINT_REPLICATE;
    if (list ? out->ttl_ms != 0 : out->ttl_ms == 0 || out->ttl_ms > LARDER__HINT_MAX_TTL_MS)
        return larder__fail(LARDER_EPROTOCOL, "HINT with a TTL of %llu ms",
                            (unsigned long long)out->ttl_ms);
    if (list ? out->url_length != 0
             : out->url_length == 0 || out->url_length > LARDER__WIRE_MAX_URL)
        return larder__fail(LARDER_EPROTOCOL, "HINT with an index name of %u bytes",
                            out->url_length);
    if (replicate ? out->targets_length == 0 || out->targets_length > LARDER__HINT_MAX_TARGETS
                  : out->targets_length != 0)
        return larder__fail(LARDER_EPROTOCOL, "HINT with a member list of %u bytes",
                            out->targets_length);
    if (out->num_keys > (out->kind == LARDER__HINT_HOT ? LARDER__HINT_MAX_KEYS : 0))
        return larder__fail(LARDER_EPROTOCOL, "HINT with %u keys", out->num_keys);
    if (out->replicas > (out->kind == LARDER__HINT_HOT && !(out->flags & LARDER__HINT_ALL_NODES)
                             ? LARDER__HINT_MAX_REPLICAS
                             : 0))
        return larder__fail(LARDER_EPROTOCOL, "HINT with %u replicas", out->replicas);
    if (list && out->flags)
        return larder__fail(LARDER_EPROTOCOL, "HINT list with flags 0x%x", out->flags);
    if (replicate && (out->flags & LARDER__HINT_ALL_NODES))
        return larder__fail(LARDER_EPROTOCOL, "HINT replicate to all nodes");
    /* the lengths are bounded above, so these sums cannot overflow */
    uint32_t at = 32;
    if (out->url_length + out->targets_length > length - at)
        return larder__fail(LARDER_EPROTOCOL, "HINT strings past its end");
    out->url = (const char *)p + at;
    at += out->url_length;
    out->targets = (const char *)p + at;
    at += out->targets_length;
    if (!no_nul(out->url, out->url_length) || !no_nul(out->targets, out->targets_length))
        return larder__fail(LARDER_EPROTOCOL, "HINT string with a NUL byte");
    if ((out->flags & LARDER__HINT_NAME) &&
        larder__wire_check_publication(out->url, out->url_length) < 0)
        return larder__fail(LARDER_EPROTOCOL, "HINT of a malformed publication name");
    out->keys = p + at;
    out->keys_length = length - at;
    uint32_t k = 0;
    while (at < length) {
        if (length - at < 2 || k == out->num_keys)
            return larder__fail(LARDER_EPROTOCOL, "HINT with bytes past its keys");
        uint32_t n = larder__le16(p + at);
        at += 2;
        if (n == 0 || n > LARDER__HINT_MAX_KEY || n > length - at ||
            !no_nul((const char *)p + at, n))
            return larder__fail(LARDER_EPROTOCOL, "HINT key %u of %u bytes", k, n);
        at += n;
        k++;
    }
    if (k != out->num_keys)
        return larder__fail(LARDER_EPROTOCOL, "HINT with %u of its %u keys", k, out->num_keys);
    return 0;
}

int larder__wire_hint_key(const struct larder__hint *h, uint32_t *cursor, const char **key,
                          uint32_t *length)
{
    if (*cursor + 2 > h->keys_length) return 0; /* the parser checked the records */
    *length = larder__le16(h->keys + *cursor);
    *key = (const char *)h->keys + *cursor + 2;
    *cursor += 2 + *length;
    return 1;
}

int larder__wire_encode_hint(uint8_t *out, size_t capacity, uint64_t request,
                             const struct larder__hint *h)
{
    size_t length = 32 + (size_t)h->url_length + h->targets_length;
    if (h->url_length > LARDER__WIRE_MAX_URL || h->targets_length > LARDER__HINT_MAX_TARGETS ||
        h->num_keys > LARDER__HINT_MAX_KEYS)
        return LARDER_ETOOSMALL;
    for (uint32_t k = 0; k < h->num_keys; k++) {
        size_t n = strlen(h->key_list[k]);
        if (n == 0 || n > LARDER__HINT_MAX_KEY) return LARDER_ETOOSMALL;
        length += 2 + n;
    }
    if (length > LARDER__WIRE_MAX_HINT || capacity < LARDER__WIRE_HEADER + length)
        return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__HINT, (uint32_t)length, request);
    uint8_t *p = out + LARDER__WIRE_HEADER;
    memset(p, 0, 32);
    p[0] = h->kind;
    p[1] = h->flags;
    larder__put_le32(p + 4, h->replicas);
    larder__put_le64(p + 8, h->ttl_ms);
    larder__put_le32(p + 16, h->url_length);
    larder__put_le32(p + 20, h->targets_length);
    larder__put_le32(p + 24, h->num_keys);
    size_t at = 32;
    if (h->url_length) memcpy(p + at, h->url, h->url_length);
    at += h->url_length;
    if (h->targets_length) memcpy(p + at, h->targets, h->targets_length);
    at += h->targets_length;
    for (uint32_t k = 0; k < h->num_keys; k++) {
        size_t n = strlen(h->key_list[k]);
        larder__put_le16(p + at, (uint16_t)n);
        memcpy(p + at + 2, h->key_list[k], n);
        at += 2 + n;
    }
    return (int)(LARDER__WIRE_HEADER + length);
}

int larder__wire_hinted(const uint8_t *p, uint32_t length, struct larder__hinted *out)
{
    if (length < LARDER__HINTED_FIXED || length > LARDER__HINTED_FIXED + LARDER__HINTED_MAX_TEXT)
        return larder__fail(LARDER_EPROTOCOL, "HINTED of %u bytes", length);
    out->flags = larder__le32(p);
    out->nodes = larder__le32(p + 4);
    out->failed = larder__le32(p + 8);
    out->text_length = larder__le32(p + 12);
    out->samples = larder__le64(p + 16);
    out->bytes = larder__le64(p + 24);
    out->pinned_bytes = larder__le64(p + 32);
    out->staged_bytes = larder__le64(p + 40);
    out->text = (const char *)p + LARDER__HINTED_FIXED;
    if (out->flags & ~LARDER__HINTED_FLAGS)
        return larder__fail(LARDER_EPROTOCOL, "HINTED with unknown flags 0x%x", out->flags);
    if (out->text_length != length - LARDER__HINTED_FIXED)
        return larder__fail(LARDER_EPROTOCOL, "HINTED text of %u bytes in %u", out->text_length,
                            length);
    if (out->nodes > LARDER__HINT_MAX_REPLICAS || out->failed > LARDER__HINT_MAX_REPLICAS)
        return larder__fail(LARDER_EPROTOCOL, "HINTED with %u nodes and %u failed", out->nodes,
                            out->failed);
    return 0;
}

int larder__wire_encode_hinted(uint8_t *out, size_t capacity, uint64_t request,
                               const struct larder__hinted *h)
{
    size_t length = LARDER__HINTED_FIXED + (size_t)h->text_length;
    if (h->text_length > LARDER__HINTED_MAX_TEXT || capacity < LARDER__WIRE_HEADER + length)
        return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__HINT_ANSWER, (uint32_t)length, request);
    uint8_t *p = out + LARDER__WIRE_HEADER;
    larder__put_le32(p, h->flags);
    larder__put_le32(p + 4, h->nodes);
    larder__put_le32(p + 8, h->failed);
    larder__put_le32(p + 12, h->text_length);
    larder__put_le64(p + 16, h->samples);
    larder__put_le64(p + 24, h->bytes);
    larder__put_le64(p + 32, h->pinned_bytes);
    larder__put_le64(p + 40, h->staged_bytes);
    if (h->text_length) memcpy(p + LARDER__HINTED_FIXED, h->text, h->text_length);
    return (int)(LARDER__WIRE_HEADER + length);
}
