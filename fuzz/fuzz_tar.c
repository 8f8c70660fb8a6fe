/*
 * fuzz_tar.c - the tar scanner on arbitrary bytes, pushed in uneven
 * pieces (the split points come from the input) so every state of the
 * push parser meets a buffer boundary; also the .npy header parser on
 * each member head.
 */
#include "npy.h"
#include "tar.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int larder_fuzz_tar(const uint8_t *data, size_t size);

static int check_sample(void *userdata, const struct larder__tar_sample *sample)
{
    const size_t *size = userdata;
    /* invariants the rest of larder relies on */
    if (sample->offset + sample->length > *size) abort();
    for (uint32_t f = 0; f < sample->num_fields; f++) {
        const struct larder__field *field = &sample->fields[f].field;
        if (field->offset + field->length > sample->length) abort();
    }
    return 0;
}

int larder_fuzz_tar(const uint8_t *data, size_t size)
{
    static struct larder__tar_scanner *scanner;
    if (!scanner) scanner = malloc(larder__tar_scanner_size());
    larder__tar_scanner_init(scanner, "fuzz", check_sample, NULL, &size);
    size_t step = size ? (size_t)data[0] * 7 + 1 : 1, at = 0;
    int rc = 0;
    while (at < size && rc == 0) {
        size_t n = size - at < step ? size - at : step;
        rc = larder__tar_scanner_feed(scanner, data + at, n);
        at += n;
        step = step * 3 % 1031 + 1;
    }
    if (rc == 0) larder__tar_scanner_finish(scanner);
    struct larder__npy npy;
    larder__npy_parse(data, size, &npy);
    return 0;
}

#ifndef LARDER_FUZZ_REPLAY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return larder_fuzz_tar(data, size);
}
#endif
