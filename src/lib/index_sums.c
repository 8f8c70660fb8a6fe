/*
 * index_sums.c - where each shard's per-block checksums are (index_sums.h).
 */
#include "index_sums.h"

#include <errno.h>
#include <stdlib.h>
#include "hash.h"

struct larder__block_sums {
    const struct larder__index *ix;
    uint64_t *first; /* per shard: its first entry; first[n] = the table's size */
};

int larder__block_sums_new(struct larder__block_sums **out, const struct larder__index *ix)
{
    *out = NULL;
    if (ix->num_block_sums == 0) return 0;
    struct larder__block_sums *b = calloc(1, sizeof *b);
    if (b) b->first = malloc((ix->num_shards + 1) * sizeof *b->first);
    if (!b || !b->first) {
        larder__block_sums_free(b);
        return -ENOMEM;
    }
    b->ix = ix;
    uint64_t at = 0;
    for (uint64_t i = 0; i < ix->num_shards; i++) {
        b->first[i] = at;
        struct larder__shard shard;
        /* every shard record was checked at parse, with these counts */
        if (larder__index_shard(ix, i, &shard) == 0 && shard.sum_shift && shard.size)
            at += ((shard.size - 1) >> shard.sum_shift) + 1;
    }
    b->first[ix->num_shards] = at;
    *out = b;
    return 0;
}

void larder__block_sums_free(struct larder__block_sums *b)
{
    if (!b) return;
    free(b->first);
    free(b);
}

bool larder__block_sums_of(const struct larder__block_sums *b, uint32_t shard,
                           struct larder__shard_sums *out)
{
    if (!b || shard >= b->ix->num_shards) return false;
    struct larder__shard info;
    if (larder__index_shard(b->ix, shard, &info) < 0 || info.sum_shift == 0) return false;
    out->first = b->first[shard];
    out->count = b->first[shard + 1] - b->first[shard];
    out->shift = info.sum_shift;
    out->shard_size = info.size;
    return true;
}

bool larder__sum_block_ok(const struct larder__index *ix, const struct larder__shard_sums *s,
                          uint64_t block, const void *data)
{
    uint64_t start, end;
    larder__sum_block_span(s, block, &start, &end);
    return block < s->count && XXH3_64bits(data, (size_t)(end - start)) ==
                                   larder__index_block_sum(ix, s->first + block);
}
