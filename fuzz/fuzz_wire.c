/*
 * fuzz_wire.c - the daemon protocol's frame parser on arbitrary bytes: a
 * stream of frames, each payload handed to its type's parser.
 */
#include "wire.h"

#include <stddef.h>
#include <stdint.h>

int larder_fuzz_wire(const uint8_t *data, size_t size);

int larder_fuzz_wire(const uint8_t *data, size_t size)
{
    size_t at = 0;
    while (at < size) {
        struct larder__frame frame;
        if (larder__wire_header(data + at, size - at, &frame) < 0) break;
        at += LARDER__WIRE_HEADER;
        if (frame.length > size - at) break;
        const uint8_t *p = data + at;
        struct larder__hello hello;
        struct larder__welcome welcome;
        struct larder__read read;
        struct larder__error_frame error;
        struct larder__opened opened;
        struct larder__prove prove;
        struct larder__hint hint;
        struct larder__hinted hinted;
        struct larder__publish publish;
        struct larder__resolve resolve;
        struct larder__publication publication;
        struct larder__transform_request transform;
        uint32_t transformed_flags;
        switch (frame.type) {
        case LARDER__HELLO:
            larder__wire_hello(p, frame.length, &hello);
            break;
        case LARDER__WELCOME:
            larder__wire_welcome(p, frame.length, &welcome);
            break;
        case LARDER__READ:
            larder__wire_read(p, frame.length, &read);
            break;
        case LARDER__ERROR:
            larder__wire_error(p, frame.length, &error);
            break;
        case LARDER__OPENED:
            larder__wire_opened(p, frame.length, &opened);
            break;
        case LARDER__PROVE:
            larder__wire_prove(p, frame.length, &prove);
            break;
        case LARDER__HINT:
            if (larder__wire_hint(p, frame.length, &hint) == 0) {
                const char *key;
                uint32_t cursor = 0, key_length, keys = 0;
                while (larder__wire_hint_key(&hint, &cursor, &key, &key_length))
                    keys += key[0] != 0 && key_length > 0; /* touch every key's bytes */
                (void)keys;
            }
            break;
        case LARDER__HINT_ANSWER:
            larder__wire_hinted(p, frame.length, &hinted);
            break;
        case LARDER__PUBLISH:
            larder__wire_publish(p, frame.length, &publish);
            break;
        case LARDER__RESOLVE:
            larder__wire_resolve(p, frame.length, &resolve);
            break;
        case LARDER__RESOLVED:
        case LARDER__ANNOUNCE:
            larder__wire_publication(frame.type, p, frame.length, &publication);
            break;
        case LARDER__TRANSFORM:
            larder__wire_transform(p, frame.length, &transform);
            break;
        case LARDER__TRANSFORMED:
            larder__wire_transformed(p, frame.length, &transformed_flags);
            break;
        default:
            break;
        }
        at += frame.length;
    }
    return 0;
}

#ifndef LARDER_FUZZ_REPLAY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return larder_fuzz_wire(data, size);
}
#endif
