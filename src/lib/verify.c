/*
 * verify.c - larder_verify: every record of the index, and every byte of
 * every shard streamed once from its source, against the index's
 * checksums (shards whole, samples as they pass, and the checksum blocks
 * of shards that have them).
 */
#include "dataset.h"
#include "fill.h"
#include "index.h"
#include "index_sums.h"
#include "source.h"

#include <errno.h>
#include <stdlib.h>
#include "hash.h"

struct verify {
    const struct larder__index *ix;
    larder_bad_sample_fn bad;
    larder_progress_fn progress;
    void *userdata;
    int64_t problems;
    uint64_t done, total;
    /* the shard being streamed */
    uint32_t shard;
    uint64_t position;
    XXH3_state_t shard_hash;
    uint64_t *order; /* sample ids of this shard by offset */
    size_t count, next;
    bool open; /* order[next] has started */
    XXH3_state_t sample_hash;
    /* checksum blocks, for shards that have them */
    struct larder__block_sums *sums;
    bool by_block;                 /* this shard has them */
    struct larder__shard_sums cur; /* this shard's */
    uint64_t block;                /* the block being hashed */
    XXH3_state_t block_hash;
};

static void report(struct verify *v, uint64_t id, int error)
{
    v->problems++;
    if (v->bad) v->bad(v->userdata, id, error, larder_errmsg());
}

static int by_offset(const void *a, const void *b, void *index)
{
    const struct larder__index *ix = index;
    struct larder__sample x, y;
    larder__index_sample(ix, *(const uint64_t *)a, &x);
    larder__index_sample(ix, *(const uint64_t *)b, &y);
    return x.offset < y.offset ? -1 : x.offset > y.offset;
}

/* Bytes [start, end) of the shard (at p) through its checksum blocks. */
static void check_blocks(struct verify *v, const uint8_t *p, uint64_t start, uint64_t end)
{
    while (start < end && v->block < v->cur.count) {
        uint64_t a, z;
        larder__sum_block_span(&v->cur, v->block, &a, &z);
        uint64_t to = z < end ? z : end;
        XXH3_64bits_update(&v->block_hash, p, (size_t)(to - start));
        p += to - start, start = to;
        if (to < z) break;
        uint64_t got = XXH3_64bits_digest(&v->block_hash);
        uint64_t want = larder__index_block_sum(v->ix, v->cur.first + v->block);
        if (got != want) {
            struct larder__shard shard;
            larder__index_shard(v->ix, v->shard, &shard);
            larder__fail(LARDER_ECHECKSUM,
                         "shard %u ('%s'), checksum block %llu (bytes %llu+%llu): checksum "
                         "%016llx, index says %016llx",
                         v->shard, shard.name, (unsigned long long)v->block, (unsigned long long)a,
                         (unsigned long long)(z - a), (unsigned long long)got,
                         (unsigned long long)want);
            report(v, LARDER_NO_SAMPLE, LARDER_ECHECKSUM);
        }
        v->block++;
        XXH3_64bits_reset(&v->block_hash);
    }
}

static int verify_sink(void *userdata, const void *data, size_t length)
{
    struct verify *v = userdata;
    const uint8_t *p = data;
    uint64_t start = v->position, end = start + length;
    XXH3_64bits_update(&v->shard_hash, p, length);
    if (v->by_block) check_blocks(v, p, start, end);
    while (v->next < v->count) {
        struct larder__sample s;
        larder__index_sample(v->ix, v->order[v->next], &s);
        if (s.offset >= end) break;
        uint64_t from = s.offset > start ? s.offset : start;
        uint64_t to = s.offset + s.length < end ? s.offset + s.length : end;
        if (!v->open) {
            XXH3_64bits_reset(&v->sample_hash);
            v->open = true;
        }
        XXH3_64bits_update(&v->sample_hash, p + (from - start), (size_t)(to - from));
        if (s.offset + s.length > end) break;
        uint64_t got = XXH3_64bits_digest(&v->sample_hash);
        if (got != s.checksum) {
            larder__fail(LARDER_ECHECKSUM,
                         "sample %llu ('%s') in shard %u: checksum %016llx, index says %016llx",
                         (unsigned long long)v->order[v->next], s.key, s.shard,
                         (unsigned long long)got, (unsigned long long)s.checksum);
            report(v, v->order[v->next], LARDER_ECHECKSUM);
        }
        v->open = false;
        v->next++;
    }
    v->position = end;
    v->done += length;
    if (v->progress) v->progress(v->userdata, v->done, v->total);
    return 0;
}

/*
 * Check every sample's records and key; the sound samples of each shard
 * go into order[counts[shard] .. counts[shard + 1]).  Returns 0 or
 * -ENOMEM.
 */
static int check_records(struct verify *v, size_t *counts, uint64_t *order)
{
    const struct larder__index *ix = v->ix;
    bool *sound = calloc(ix->num_samples ? ix->num_samples : 1, 1);
    size_t *fill = calloc(ix->num_shards + 1, sizeof *fill);
    if (!sound || !fill) {
        free(sound), free(fill);
        return -ENOMEM;
    }
    for (uint64_t id = 0; id < ix->num_samples; id++) {
        struct larder__sample s;
        int rc = larder__index_sample(ix, id, &s);
        for (uint32_t f = 0; rc == 0 && f < s.num_fields; f++) {
            struct larder__field field;
            rc = larder__index_field(ix, &s, id, f, &field);
        }
        if (rc == 0 && larder__index_find_key(ix, s.key, strlen(s.key)) != (int64_t)id)
            rc = larder__fail(LARDER_EBADINDEX,
                              "%s: sample %llu: key '%s' does not lead back to "
                              "it through the key table",
                              ix->name, (unsigned long long)id, s.key);
        if (rc < 0) {
            report(v, id, rc);
            continue;
        }
        sound[id] = true;
        counts[s.shard + 1]++;
    }
    for (uint64_t i = 0; i < ix->num_shards; i++)
        counts[i + 1] += counts[i];
    for (uint64_t id = 0; id < ix->num_samples; id++) {
        if (!sound[id]) continue;
        struct larder__sample s;
        larder__index_sample(ix, id, &s);
        order[counts[s.shard] + fill[s.shard]++] = id;
    }
    free(sound), free(fill);
    return 0;
}

/* Sort v->order by offset; report overlapping samples and leave them out. */
static void order_by_offset(struct verify *v, uint32_t shard)
{
    const struct larder__index *ix = v->ix;
    qsort_r(v->order, v->count, sizeof *v->order, by_offset, (void *)ix);
    for (size_t k = 1; k < v->count; k++) {
        struct larder__sample a, b;
        larder__index_sample(ix, v->order[k - 1], &a);
        larder__index_sample(ix, v->order[k], &b);
        if (a.offset + a.length > b.offset) {
            larder__fail(LARDER_EBADINDEX, "%s: samples %llu and %llu overlap in shard %u",
                         ix->name, (unsigned long long)v->order[k - 1],
                         (unsigned long long)v->order[k], shard);
            report(v, v->order[k], LARDER_EBADINDEX);
            memmove(v->order + k, v->order + k + 1, (v->count - k - 1) * sizeof *v->order);
            v->count--, k--;
        }
    }
}

/* Stream shard `i` once from its source, checking it and its samples. */
static void verify_shard(struct verify *v, struct larder__fill *fill, uint32_t i)
{
    const struct larder__index *ix = v->ix;
    struct larder__shard shard;
    larder__index_shard(ix, i, &shard);
    v->shard = i;
    v->next = 0;
    v->open = false;
    v->position = 0;
    order_by_offset(v, i);
    XXH3_64bits_reset(&v->shard_hash);
    v->by_block = larder__block_sums_of(v->sums, i, &v->cur);
    v->block = 0;
    XXH3_64bits_reset(&v->block_hash);
    struct larder__source *source;
    int rc = larder__fill_source(fill, i, &source);
    if (rc == 0) rc = larder__source_stream(source, verify_sink, v);
    if (rc < 0) {
        /* one problem for the shard, not one per sample it could not check */
        larder__fail_context(rc, "shard %u ('%s'), %zu samples left unchecked", i, shard.name,
                             v->count - v->next);
        report(v, LARDER_NO_SAMPLE, rc);
        return;
    } else if (v->position != shard.size) {
        larder__fail(LARDER_ETRUNCATED, "shard %u ('%s'): %llu bytes, index says %llu", i,
                     shard.name, (unsigned long long)v->position, (unsigned long long)shard.size);
        report(v, LARDER_NO_SAMPLE, LARDER_ETRUNCATED);
    } else if (XXH3_64bits_digest(&v->shard_hash) != shard.checksum) {
        larder__fail(LARDER_ECHECKSUM, "shard %u ('%s'): checksum mismatch", i, shard.name);
        report(v, LARDER_NO_SAMPLE, LARDER_ECHECKSUM);
    }
    /* samples the stream never finished */
    for (; v->next < v->count; v->next++) {
        struct larder__sample s;
        larder__index_sample(ix, v->order[v->next], &s);
        if (s.length == 0 && s.offset <= v->position) { /* empty, at the end: no bytes came */
            if (XXH3_64bits(NULL, 0) != s.checksum) {
                larder__fail(LARDER_ECHECKSUM,
                             "sample %llu ('%s'): empty, and its checksum "
                             "is not that of no bytes",
                             (unsigned long long)v->order[v->next], s.key);
                report(v, v->order[v->next], LARDER_ECHECKSUM);
            }
            continue;
        }
        larder__fail(LARDER_ETRUNCATED, "sample %llu ('%s'): shard %u ends before it",
                     (unsigned long long)v->order[v->next], s.key, i);
        report(v, v->order[v->next], LARDER_ETRUNCATED);
    }
}

int64_t larder_verify(larder_dataset *d, larder_bad_sample_fn bad, larder_progress_fn progress,
                      void *userdata)
{
    const struct larder__index *ix = larder__dataset_index(d);
    if (ix->unchecked) /* made from a listing (larder mount of plain files) */
        return larder__fail(LARDER_EUNSUPPORTED,
                            "%s: an index made from a listing alone has no checksums to verify",
                            ix->name);
    struct verify v = {.ix = ix, .bad = bad, .progress = progress, .userdata = userdata};
    if (larder__index_check_hash(ix) < 0) report(&v, LARDER_NO_SAMPLE, LARDER_ECHECKSUM);
    /* records, keys, and the samples of each shard */
    size_t *counts = calloc(ix->num_shards + 1, sizeof *counts);
    uint64_t *order = malloc((ix->num_samples ? ix->num_samples : 1) * sizeof *order);
    int rc = counts && order ? check_records(&v, counts, order) : -ENOMEM;
    if (rc == 0) rc = larder__block_sums_new(&v.sums, ix);
    for (uint64_t i = 0; rc == 0 && i < ix->num_shards; i++) {
        struct larder__shard shard;
        larder__index_shard(ix, i, &shard);
        v.total += shard.size;
    }
    for (uint32_t i = 0; rc == 0 && i < ix->num_shards; i++) {
        v.order = order + counts[i];
        v.count = counts[i + 1] - counts[i];
        verify_shard(&v, larder__dataset_fill(d), i);
    }
    free(counts), free(order);
    larder__block_sums_free(v.sums);
    return rc < 0 ? rc : v.problems;
}
