/*
 * fuzz_index.c - the index parser on arbitrary bytes: parse, then walk
 * every shard, sample, field and key as a reader would, and (version 3)
 * every shard's block checksums as the fill engine finds them.  Any crash,
 * sanitizer report or hang is a bug; errors are the expected outcome.
 */
#include "index.h"
#include "index_sums.h"

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
    /* the block checksums of each shard: inside the table, and the table
     * used up exactly (the parser promised it) */
    struct larder__block_sums *sums;
    if (larder__block_sums_new(&sums, &ix) < 0) return;
    uint64_t used = 0;
    uint8_t zeros[512] = {0};
    for (uint64_t shard = 0; sums && shard < ix.num_shards && shard < 4096; shard++) {
        struct larder__shard_sums s;
        if (!larder__block_sums_of(sums, (uint32_t)shard, &s)) continue;
        if (s.first + s.count > ix.num_block_sums) abort();
        used += s.count;
        uint64_t start, end;
        larder__sum_block_span(&s, 0, &start, &end);
        if (s.count && end - start <= sizeof zeros) larder__sum_block_ok(&ix, &s, 0, zeros);
    }
    if (sums && ix.num_shards <= 4096 && used != ix.num_block_sums) abort();
    larder__block_sums_free(sums);
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
