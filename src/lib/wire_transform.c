/*
 * wire_transform.c - the transform frames of the daemon protocol
 * (docs/protocol.md, "Transforms"): TRANSFORM asks for one sample with a
 * transform, TRANSFORMED answers the result, or the raw bytes when the
 * daemon leaves the work to the reader.  No I/O, no allocation: fuzzed
 * with the other frames.
 */
#include "wire.h"

int larder__wire_transform(const uint8_t *p, uint32_t length, struct larder__transform_request *out)
{
    if (length < LARDER__TRANSFORM_FIXED)
        return larder__fail(LARDER_EPROTOCOL, "TRANSFORM of %u bytes", length);
    out->id_low = larder__le64(p);
    out->id_high = larder__le64(p + 8);
    out->sample = larder__le64(p + 16);
    out->priority = p[24];
    out->flags = p[25];
    out->spec_length = larder__le16(p + 26);
    out->version = larder__le32(p + 28);
    out->wait_us = larder__le32(p + 32);
    out->budget_us = larder__le32(p + 36);
    out->spec = (const char *)p + LARDER__TRANSFORM_FIXED;
    if (out->priority > 3 || (out->flags & ~LARDER__TRANSFORM_RESIDENT))
        return larder__fail(LARDER_EPROTOCOL, "TRANSFORM: priority %u, flags 0x%x", out->priority,
                            out->flags);
    if (out->spec_length == 0 || out->spec_length >= LARDER_TRANSFORM_MAX_SPEC ||
        length != LARDER__TRANSFORM_FIXED + (uint32_t)out->spec_length)
        return larder__fail(LARDER_EPROTOCOL, "TRANSFORM: spec of %u bytes in a frame of %u",
                            out->spec_length, length);
    return 0;
}

int larder__wire_transformed(const uint8_t *p, uint32_t length, uint32_t *flags)
{
    if (length < LARDER__TRANSFORMED_FIXED)
        return larder__fail(LARDER_EPROTOCOL, "TRANSFORMED of %u bytes", length);
    *flags = larder__le32(p);
    if ((*flags & ~LARDER__TRANSFORMED_FLAGS) || larder__le32(p + 4))
        return larder__fail(LARDER_EPROTOCOL, "TRANSFORMED: flags 0x%x", *flags);
    return 0;
}

int larder__wire_encode_transform(uint8_t *out, size_t capacity, uint64_t request,
                                  const struct larder__transform_request *t)
{
    uint32_t length = LARDER__TRANSFORM_FIXED + t->spec_length;
    if (t->spec_length == 0 || t->spec_length >= LARDER_TRANSFORM_MAX_SPEC ||
        capacity < LARDER__WIRE_HEADER + (size_t)length)
        return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__TRANSFORM, length, request);
    uint8_t *p = out + LARDER__WIRE_HEADER;
    memset(p, 0, LARDER__TRANSFORM_FIXED);
    larder__put_le64(p, t->id_low);
    larder__put_le64(p + 8, t->id_high);
    larder__put_le64(p + 16, t->sample);
    p[24] = t->priority;
    p[25] = t->flags;
    larder__put_le16(p + 26, t->spec_length);
    larder__put_le32(p + 28, t->version);
    larder__put_le32(p + 32, t->wait_us);
    larder__put_le32(p + 36, t->budget_us);
    memcpy(p + LARDER__TRANSFORM_FIXED, t->spec, t->spec_length);
    return (int)(LARDER__WIRE_HEADER + length);
}

int larder__wire_encode_transformed(uint8_t *out, size_t capacity, uint64_t request, uint32_t flags,
                                    uint64_t body_length)
{
    if (capacity < LARDER__WIRE_HEADER + LARDER__TRANSFORMED_FIXED ||
        body_length > LARDER__WIRE_MAX_READ)
        return LARDER_ETOOSMALL;
    larder__wire_encode_header(out, capacity, LARDER__TRANSFORMED,
                               (uint32_t)(LARDER__TRANSFORMED_FIXED + body_length), request);
    larder__put_le32(out + LARDER__WIRE_HEADER, flags);
    larder__put_le32(out + LARDER__WIRE_HEADER + 4, 0);
    return LARDER__WIRE_HEADER + LARDER__TRANSFORMED_FIXED;
}
