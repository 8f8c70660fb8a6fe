/*
 * shardmap.c - samples of each shard in offset order (see shardmap.h).
 */
#include "shardmap.h"

#include <errno.h>
#include <stdlib.h>

struct larder__shard_map {
    const struct larder__index *ix;
    uint64_t *shard_first; /* position of each shard's first sample; [num_shards] = total */
    uint64_t *ids;         /* sample id at each position; NULL: the position is the id */
};

/* Offset and end of sample `id` (its record was checked when the map was built). */
static uint64_t sample_offset(const struct larder__index *ix, uint64_t id)
{
    return larder__le64(ix->samples + id * LARDER__INDEX_SAMPLE_SIZE);
}

static uint64_t sample_end(const struct larder__index *ix, uint64_t id)
{
    const uint8_t *r = ix->samples + id * LARDER__INDEX_SAMPLE_SIZE;
    return larder__le64(r) + larder__le64(r + 8);
}

uint64_t larder__shard_map_id(const struct larder__shard_map *map, uint64_t position)
{
    return map->ids ? map->ids[position] : position;
}

static int by_offset(const void *a, const void *b, void *ix)
{
    uint64_t x = sample_offset(ix, *(const uint64_t *)a),
             y = sample_offset(ix, *(const uint64_t *)b);
    return x < y ? -1 : x > y;
}

/* Overlapping neighbours are corrupt: the bytes would have two checksums. */
static int check_overlaps(const struct larder__shard_map *map)
{
    const struct larder__index *ix = map->ix;
    for (uint64_t s = 0; s < ix->num_shards; s++)
        for (uint64_t p = map->shard_first[s] + 1; p < map->shard_first[s + 1]; p++) {
            uint64_t a = larder__shard_map_id(map, p - 1), b = larder__shard_map_id(map, p);
            if (sample_end(ix, a) > sample_offset(ix, b))
                return larder__fail(LARDER_EBADINDEX,
                                    "%s: samples %llu and %llu overlap in shard %llu (bytes "
                                    "%llu+%llu and %llu+%llu)",
                                    ix->name, (unsigned long long)a, (unsigned long long)b,
                                    (unsigned long long)s, (unsigned long long)sample_offset(ix, a),
                                    (unsigned long long)(sample_end(ix, a) - sample_offset(ix, a)),
                                    (unsigned long long)sample_offset(ix, b),
                                    (unsigned long long)(sample_end(ix, b) - sample_offset(ix, b)));
        }
    return 0;
}

int larder__shard_map_new(struct larder__shard_map **out, const struct larder__index *ix)
{
    struct larder__shard_map *map = calloc(1, sizeof *map);
    if (!map) return -ENOMEM;
    map->ix = ix;
    map->shard_first = calloc(ix->num_shards + 1, sizeof *map->shard_first);
    int rc = map->shard_first ? 0 : -ENOMEM;
    /* one pass: every record, samples per shard, and whether the table is
     * already in (shard, offset) order */
    bool ordered = true;
    uint32_t previous_shard = 0;
    uint64_t previous_offset = 0;
    for (uint64_t id = 0; rc == 0 && id < ix->num_samples; id++) {
        struct larder__sample s;
        rc = larder__index_sample_range(ix, id, &s);
        if (rc < 0) break;
        map->shard_first[s.shard + 1]++;
        if (id > 0 &&
            (s.shard < previous_shard || (s.shard == previous_shard && s.offset < previous_offset)))
            ordered = false;
        previous_shard = s.shard, previous_offset = s.offset;
    }
    for (uint64_t s = 0; rc == 0 && s < ix->num_shards; s++)
        map->shard_first[s + 1] += map->shard_first[s];
    if (rc == 0 && !ordered) {
        map->ids = malloc((ix->num_samples ? ix->num_samples : 1) * sizeof *map->ids);
        uint64_t *fill = calloc(ix->num_shards + 1, sizeof *fill);
        rc = map->ids && fill ? 0 : -ENOMEM;
        for (uint64_t id = 0; rc == 0 && id < ix->num_samples; id++) {
            uint32_t shard = larder__le32(ix->samples + id * LARDER__INDEX_SAMPLE_SIZE + 40);
            map->ids[map->shard_first[shard] + fill[shard]++] = id;
        }
        for (uint64_t s = 0; rc == 0 && s < ix->num_shards; s++)
            qsort_r(map->ids + map->shard_first[s], map->shard_first[s + 1] - map->shard_first[s],
                    sizeof *map->ids, by_offset, (void *)ix);
        free(fill);
    }
    if (rc == 0) rc = check_overlaps(map);
    if (rc < 0) {
        larder__shard_map_free(map);
        return rc;
    }
    *out = map;
    return 0;
}

void larder__shard_map_free(struct larder__shard_map *map)
{
    if (!map) return;
    free(map->shard_first);
    free(map->ids);
    free(map);
}

void larder__shard_map_overlapping(const struct larder__shard_map *map, uint32_t shard,
                                   uint64_t start, uint64_t end, uint64_t *first, uint64_t *last)
{
    const struct larder__index *ix = map->ix;
    /* without overlaps, both the starts and the ends of a shard's samples
     * rise with the position: two binary searches */
    uint64_t low = map->shard_first[shard], high = map->shard_first[shard + 1];
    while (low < high) { /* first sample ending after start */
        uint64_t mid = low + (high - low) / 2;
        if (sample_end(ix, larder__shard_map_id(map, mid)) > start)
            high = mid;
        else
            low = mid + 1;
    }
    *first = low;
    high = map->shard_first[shard + 1];
    while (low < high) { /* first sample starting at or after end */
        uint64_t mid = low + (high - low) / 2;
        if (sample_offset(ix, larder__shard_map_id(map, mid)) >= end)
            high = mid;
        else
            low = mid + 1;
    }
    *last = low;
}

int larder__index_validate(const struct larder__index *ix)
{
    struct larder__shard_map *map;
    int rc = larder__shard_map_new(&map, ix);
    if (rc < 0) return rc;
    larder__shard_map_free(map);
    for (uint64_t id = 0; id < ix->num_samples; id++) {
        struct larder__sample s;
        rc = larder__index_sample(ix, id, &s);
        for (uint32_t f = 0; rc == 0 && f < s.num_fields; f++) {
            struct larder__field field;
            rc = larder__index_field(ix, &s, id, f, &field);
        }
        if (rc < 0) return rc;
        int64_t found = larder__index_find_key(ix, s.key, strlen(s.key));
        if (found < 0) return (int)found; /* a duplicate names both samples */
        if ((uint64_t)found != id)
            return larder__fail(LARDER_EBADINDEX,
                                "%s: sample %llu: key '%s' does not lead back to it through the "
                                "key table",
                                ix->name, (unsigned long long)id, s.key);
    }
    return 0;
}
