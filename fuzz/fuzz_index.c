/*
 * fuzz_index.c - the index parser on arbitrary bytes: parse, then walk
 * every shard, sample, field and key as a reader would.  Any crash,
 * sanitizer report or hang is a bug; errors are the expected outcome.
 */
#include "index.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <xxhash.h>

int larder_fuzz_index(const uint8_t *data, size_t size);

static void walk(const uint8_t *data, size_t size)
{
    struct larder__index ix;
    if (larder__index_parse(&ix, data, size, "fuzz") < 0) return;
    larder__index_check_hash(&ix);
    uint64_t limit = ix.num_samples < 4096 ? ix.num_samples : 4096;
    for (uint64_t id = 0; id < limit; id++) {
        struct larder__sample s;
        if (larder__index_sample(&ix, id, &s) < 0) continue;
        for (uint32_t f = 0; f < s.num_fields && f < 64; f++) {
            struct larder__field field;
            larder__index_field(&ix, &s, id, f, &field);
        }
        larder__index_find_key(&ix, s.key, strlen(s.key));
    }
    larder__index_find_key(&ix, "missing", 7);
}

/*
 * Walk the input as it is, then again with its header checksum made
 * right, so that mutations reach the checks behind it.
 */
int larder_fuzz_index(const uint8_t *data, size_t size)
{
    walk(data, size);
    if (size < 128) return 0;
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    larder__put_le64(copy + 120, XXH3_64bits(copy, 120));
    walk(copy, size);
    free(copy);
    return 0;
}

#ifndef LARDER_FUZZ_REPLAY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return larder_fuzz_index(data, size);
}
#endif
