/*
 * wire_names.c - the names' frames (docs/protocol.md, "Names"): PUBLISH,
 * RESOLVE, and the publication that ANNOUNCE and RESOLVED carry, with the
 * rules of a publication's name.  Split from wire.c, whose header checks
 * and limits (larder__wire_max_payload) they use.
 */
#include "wire.h"

#include <string.h>

/* ---- names: publish and consume ------------------------------------------------ */

int larder__wire_check_publication(const char *name, size_t length)
{
    if (length == 0 || length > LARDER__WIRE_MAX_PUBLICATION)
        return larder__fail(LARDER_EUSAGE, "a publication name of %zu bytes (1 to %d)", length,
                            LARDER__WIRE_MAX_PUBLICATION);
    size_t component = 0; /* start of the current component */
    for (size_t i = 0; i <= length; i++) {
        if (i == length || name[i] == '/') {
            size_t n = i - component;
            if (n == 0 || (n == 1 && name[component] == '.') ||
                (n == 2 && name[component] == '.' && name[component + 1] == '.'))
                return larder__fail(LARDER_EUSAGE,
                                    "publication name '%.*s': an empty, '.' or '..' component",
                                    (int)length, name);
            component = i + 1;
            continue;
        }
        unsigned char ch = (unsigned char)name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              (ch && strchr("._-+=@:", ch))))
            return larder__fail(LARDER_EUSAGE,
                                "publication name with byte 0x%02x at %zu: only letters, digits "
                                "and ._-+=@:/ are allowed",
                                ch, i);
    }
    return 0;
}

/* Whether bytes[0..length) hold no NUL and no other control character. */
static bool plain_text(const char *bytes, size_t length)
{
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)bytes[i] < 0x20 || bytes[i] == 0x7f) return false;
    return true;
}

int larder__wire_publish(const uint8_t *p, uint32_t length, struct larder__publish *out)
{
    if (length < 16 || length > LARDER__WIRE_MAX_NAMES_FRAME)
        return larder__fail(LARDER_EPROTOCOL, "PUBLISH of %u bytes", length);
    out->name_length = larder__le32(p);
    out->index_length = larder__le32(p + 4);
    out->origin_length = larder__le32(p + 8);
    out->flags = larder__le32(p + 12);
    if (out->flags & ~LARDER__PUBLISH_REPLACE)
        return larder__fail(LARDER_EPROTOCOL, "PUBLISH with unknown flags 0x%x", out->flags);
    /* the name's own limit next, with a message of its own */
    if (out->index_length == 0 || out->index_length > LARDER__WIRE_MAX_URL ||
        out->origin_length > LARDER__WIRE_MAX_URL ||
        (uint64_t)16 + out->name_length + out->index_length + out->origin_length != length)
        return larder__fail(LARDER_EPROTOCOL,
                            "PUBLISH lengths (name %u, index %u, origin %u) do not fit %u bytes",
                            out->name_length, out->index_length, out->origin_length, length);
    out->name = (const char *)p + 16;
    out->index = out->name + out->name_length;
    out->origin = out->index + out->index_length;
    int rc = larder__wire_check_publication(out->name, out->name_length);
    if (rc < 0) return rc;
    if (!plain_text(out->index, out->index_length) || out->index[0] != '/' ||
        !plain_text(out->origin, out->origin_length))
        return larder__fail(LARDER_EPROTOCOL,
                            "PUBLISH with an index path that is not absolute, or a control "
                            "character in a path");
    return 0;
}

int larder__wire_resolve(const uint8_t *p, uint32_t length, struct larder__resolve *out)
{
    if (length < 8 || length > 8 + LARDER__WIRE_MAX_PUBLICATION)
        return larder__fail(LARDER_EPROTOCOL, "RESOLVE of %u bytes", length);
    out->wait_ms = larder__le32(p);
    out->flags = larder__le32(p + 4);
    out->name_length = length - 8;
    out->name = (const char *)p + 8;
    if (out->flags & ~(LARDER__RESOLVE_INDEX | LARDER__RESOLVE_LOCAL | LARDER__RESOLVE_LIST))
        return larder__fail(LARDER_EPROTOCOL, "RESOLVE with unknown flags 0x%x", out->flags);
    if (out->wait_ms > LARDER__WIRE_MAX_WAIT_MS)
        return larder__fail(LARDER_EPROTOCOL, "RESOLVE waiting %u ms (at most %u)", out->wait_ms,
                            LARDER__WIRE_MAX_WAIT_MS);
    if (out->flags & LARDER__RESOLVE_LIST) {
        if (out->name_length)
            return larder__fail(LARDER_EPROTOCOL, "RESOLVE of a list with a name");
        return 0;
    }
    return larder__wire_check_publication(out->name, out->name_length);
}

int larder__wire_publication(uint8_t type, const uint8_t *p, uint32_t length,
                             struct larder__publication *out)
{
    const char *what = type == LARDER__ANNOUNCE ? "ANNOUNCE" : "RESOLVED";
    if (length < 40 || length > larder__wire_max_payload(type) ||
        (type != LARDER__ANNOUNCE && type != LARDER__RESOLVED))
        return larder__fail(LARDER_EPROTOCOL, "%s of %u bytes", what, length);
    out->id_low = larder__le64(p);
    out->id_high = larder__le64(p + 8);
    out->flags = larder__le32(p + 16);
    out->name_length = larder__le32(p + 20);
    out->producer_length = larder__le32(p + 24);
    out->location_length = larder__le32(p + 28);
    out->origin_length = larder__le32(p + 32);
    out->index_length = larder__le32(p + 36);
    if (out->flags & ~(LARDER__PUBLISHED_ORIGIN | LARDER__PUBLISHED_GENERATION))
        return larder__fail(LARDER_EPROTOCOL, "%s with unknown flags 0x%x", what, out->flags);
    uint32_t tail = out->flags & LARDER__PUBLISHED_GENERATION ? 8 : 0; /* the generation */
    if (out->producer_length == 0 || out->producer_length > LARDER__WIRE_MAX_NAME ||
        out->location_length == 0 || out->location_length > LARDER__WIRE_MAX_URL ||
        out->origin_length > LARDER__WIRE_MAX_URL || out->index_length > LARDER__WIRE_MAX_INDEX ||
        (type == LARDER__ANNOUNCE && out->index_length) ||
        (uint64_t)40 + out->name_length + out->producer_length + out->location_length +
                out->origin_length + out->index_length + tail !=
            length)
        return larder__fail(LARDER_EPROTOCOL, "%s lengths do not fit its %u bytes", what, length);
    if (((out->flags & LARDER__PUBLISHED_ORIGIN) != 0) != (out->origin_length != 0))
        return larder__fail(LARDER_EPROTOCOL, "%s: an origin without its flag, or the reverse",
                            what);
    out->name = (const char *)p + 40;
    out->producer = out->name + out->name_length;
    out->location = out->producer + out->producer_length;
    out->origin = out->location + out->location_length;
    out->index = (const uint8_t *)out->origin + out->origin_length;
    out->generation = tail ? larder__le64(p + length - 8) : 0;
    if (tail && out->generation == 0)
        return larder__fail(LARDER_EPROTOCOL, "%s of generation 0 with the flag", what);
    int rc = larder__wire_check_publication(out->name, out->name_length);
    if (rc < 0) return rc;
    for (uint32_t i = 0; i < out->producer_length; i++)
        if ((unsigned char)out->producer[i] <= ' ' || (unsigned char)out->producer[i] >= 0x7f)
            return larder__fail(LARDER_EPROTOCOL, "%s: a producer name with byte 0x%02x", what,
                                (unsigned char)out->producer[i]);
    if (!plain_text(out->location, out->location_length) ||
        !plain_text(out->origin, out->origin_length))
        return larder__fail(LARDER_EPROTOCOL, "%s: a control character in a location", what);
    return 0;
}

int larder__wire_encode_publish(uint8_t *out, size_t capacity, uint64_t request,
                                const struct larder__publish *m)
{
    uint64_t length = 16 + (uint64_t)m->name_length + m->index_length + m->origin_length;
    if (m->name_length > LARDER__WIRE_MAX_PUBLICATION || m->index_length > LARDER__WIRE_MAX_URL ||
        m->origin_length > LARDER__WIRE_MAX_URL || length > LARDER__WIRE_MAX_NAMES_FRAME ||
        capacity < LARDER__WIRE_HEADER + length)
        return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__PUBLISH, (uint32_t)length, request);
    uint8_t *p = out + LARDER__WIRE_HEADER;
    larder__put_le32(p, m->name_length);
    larder__put_le32(p + 4, m->index_length);
    larder__put_le32(p + 8, m->origin_length);
    larder__put_le32(p + 12, m->flags);
    p += 16;
    memcpy(p, m->name, m->name_length);
    memcpy(p + m->name_length, m->index, m->index_length);
    if (m->origin_length) memcpy(p + m->name_length + m->index_length, m->origin, m->origin_length);
    return (int)(LARDER__WIRE_HEADER + length);
}

int larder__wire_encode_resolve(uint8_t *out, size_t capacity, uint64_t request,
                                const struct larder__resolve *m)
{
    size_t length = 8 + (size_t)m->name_length;
    if (m->name_length > LARDER__WIRE_MAX_PUBLICATION || capacity < LARDER__WIRE_HEADER + length)
        return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__RESOLVE, (uint32_t)length, request);
    larder__put_le32(out + LARDER__WIRE_HEADER, m->wait_ms);
    larder__put_le32(out + LARDER__WIRE_HEADER + 4, m->flags);
    if (m->name_length) memcpy(out + LARDER__WIRE_HEADER + 8, m->name, m->name_length);
    return (int)(LARDER__WIRE_HEADER + length);
}

size_t larder__wire_publication_size(uint8_t type, const struct larder__publication *m)
{
    uint64_t length = 40 + (uint64_t)m->name_length + m->producer_length + m->location_length +
                      m->origin_length + m->index_length + (m->generation ? 8 : 0);
    if (m->name_length > LARDER__WIRE_MAX_PUBLICATION ||
        m->producer_length > LARDER__WIRE_MAX_NAME || m->location_length > LARDER__WIRE_MAX_URL ||
        m->origin_length > LARDER__WIRE_MAX_URL || m->index_length > LARDER__WIRE_MAX_INDEX ||
        length > larder__wire_max_payload(type))
        return 0;
    return LARDER__WIRE_HEADER + (size_t)length;
}

int larder__wire_encode_publication(uint8_t *out, size_t capacity, uint8_t type, uint64_t request,
                                    const struct larder__publication *m)
{
    size_t size = larder__wire_publication_size(type, m);
    if (size == 0 || capacity < size) return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, type, (uint32_t)(size - LARDER__WIRE_HEADER),
                               request);
    uint8_t *p = out + LARDER__WIRE_HEADER;
    larder__put_le64(p, m->id_low);
    larder__put_le64(p + 8, m->id_high);
    /* the generation's flag follows the field: set when it is not 0, never else */
    larder__put_le32(p + 16, (m->flags & ~LARDER__PUBLISHED_GENERATION) |
                                 (m->generation ? LARDER__PUBLISHED_GENERATION : 0));
    larder__put_le32(p + 20, m->name_length);
    larder__put_le32(p + 24, m->producer_length);
    larder__put_le32(p + 28, m->location_length);
    larder__put_le32(p + 32, m->origin_length);
    larder__put_le32(p + 36, m->index_length);
    p += 40;
    const void *parts[] = {m->name, m->producer, m->location, m->origin, m->index};
    const uint32_t lengths[] = {m->name_length, m->producer_length, m->location_length,
                                m->origin_length, m->index_length};
    for (int i = 0; i < 5; i++) {
        if (lengths[i]) memcpy(p, parts[i], lengths[i]);
        p += lengths[i];
    }
    if (m->generation) larder__put_le64(p, m->generation);
    return (int)size;
}
