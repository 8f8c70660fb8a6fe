/*
 * dataset.c - the public dataset handle: an index (mapped when local,
 * loaded when remote) plus one origin per shard, opened on first use.
 * Reads go straight to the origin here; the node cache layers on top.
 */
#include "index.h"
#include "origin.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <xxhash.h>

struct larder_dataset {
    char *url;
    uint8_t *image;
    uint64_t image_size;
    bool mapped;
    struct larder__index ix;
    larder_open_options options;
    pthread_mutex_t lock; /* guards shards[] */
    struct larder__origin **shards;
};

int larder_open(larder_dataset **out, const char *url, const larder_open_options *options)
{
    if (!out || !url) return larder__fail(LARDER_EUSAGE, "larder_open: NULL argument");
    if (options && options->version != LARDER_OPEN_OPTIONS_VERSION)
        return larder__fail(LARDER_EUSAGE, "larder_open: options version %d, expected %d",
                            options->version, LARDER_OPEN_OPTIONS_VERSION);
    larder_dataset *d = calloc(1, sizeof *d);
    if (!d || !(d->url = strdup(url))) {
        free(d);
        return -ENOMEM;
    }
    pthread_mutex_init(&d->lock, NULL);
    if (options) d->options = *options;
    int rc;
    if (larder__is_remote(url)) {
        rc = larder__origin_load(url, &d->image, &d->image_size);
    } else {
        const char *path = strncmp(url, "file://", 7) == 0 ? url + 7 : url;
        int fd = rc = larder__open(path, O_RDONLY, 0);
        if (fd >= 0) {
            rc = larder__file_size(fd, &d->image_size, path);
            if (rc == 0 && d->image_size > 0) {
                void *map = mmap(NULL, d->image_size, PROT_READ, MAP_SHARED, fd, 0);
                if (map == MAP_FAILED)
                    rc = larder__fail(-errno, "%s: mmap: %s", path, strerror(errno));
                else
                    d->image = map, d->mapped = true;
            }
            larder__sys.close(fd);
        }
    }
    if (rc == 0) rc = larder__index_parse(&d->ix, d->image, d->image_size, d->url);
    if (rc == 0 &&
        !(d->shards = calloc(d->ix.num_shards ? d->ix.num_shards : 1, sizeof *d->shards)))
        rc = -ENOMEM;
    if (rc < 0) {
        larder_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

void larder_close(larder_dataset *d)
{
    if (!d) return;
    if (d->shards)
        for (uint64_t i = 0; i < d->ix.num_shards; i++)
            larder__origin_close(d->shards[i]);
    free(d->shards);
    if (d->mapped)
        munmap(d->image, d->image_size);
    else
        free(d->image);
    pthread_mutex_destroy(&d->lock);
    free(d->url);
    free(d);
}

uint64_t larder_num_samples(const larder_dataset *d)
{
    return d->ix.num_samples;
}

int larder_dataset_info_get(const larder_dataset *d, larder_dataset_info *info)
{
    info->num_samples = d->ix.num_samples;
    info->num_shards = d->ix.num_shards;
    info->total_bytes = d->ix.total_bytes;
    info->block_size = d->ix.block_size;
    info->version = d->ix.version;
    larder__hex128(d->ix.id_high, d->ix.id_low, info->dataset_id);
    return 0;
}

int larder_sample_info_get(const larder_dataset *d, uint64_t id, larder_sample_info *info)
{
    struct larder__sample s;
    struct larder__shard shard;
    int rc = larder__index_sample(&d->ix, id, &s);
    if (rc == 0) rc = larder__index_shard(&d->ix, s.shard, &shard);
    if (rc < 0) return rc;
    *info = (larder_sample_info){.id = id,
                                 .offset = s.offset,
                                 .length = s.length,
                                 .checksum = s.checksum,
                                 .shard = s.shard,
                                 .num_fields = s.num_fields,
                                 .key = s.key,
                                 .shard_name = shard.name};
    return 0;
}

int larder_field_info_get(const larder_dataset *d, uint64_t id, uint32_t field,
                          larder_field_info *info)
{
    struct larder__sample s;
    struct larder__field f;
    int rc = larder__index_sample(&d->ix, id, &s);
    if (rc == 0) rc = larder__index_field(&d->ix, &s, id, field, &f);
    if (rc < 0) return rc;
    info->name = f.name;
    info->offset = f.offset;
    info->length = f.length;
    info->dtype = f.dtype;
    info->ndim = f.ndim;
    memcpy(info->shape, f.shape, sizeof info->shape);
    return 0;
}

int64_t larder_find_key(const larder_dataset *d, const char *key)
{
    return larder__index_find_key(&d->ix, key, strlen(key));
}

int larder_find_field(const larder_dataset *d, uint64_t id, const char *name)
{
    struct larder__sample s;
    int rc = larder__index_sample(&d->ix, id, &s);
    if (rc < 0) return rc;
    for (uint32_t i = 0; i < s.num_fields; i++) {
        struct larder__field f;
        if ((rc = larder__index_field(&d->ix, &s, id, i, &f)) < 0) return rc;
        if (strcmp(f.name, name) == 0) return (int)i;
    }
    return larder__fail(LARDER_ENOTFOUND, "sample '%s' has no field '%s'", s.key, name);
}

/* The origin of shard `shard`, opened on first use. */
static int shard_origin(larder_dataset *d, uint32_t shard, struct larder__origin **out)
{
    pthread_mutex_lock(&d->lock);
    int rc = 0;
    if (!d->shards[shard]) {
        struct larder__shard info;
        rc = larder__index_shard(&d->ix, shard, &info);
        char *url = rc == 0 ? larder__resolve(d->url, info.name) : NULL;
        if (rc == 0 && !url) rc = -ENOMEM;
        if (rc == 0) rc = larder__origin_open(&d->shards[shard], url);
        free(url);
    }
    *out = d->shards[shard];
    pthread_mutex_unlock(&d->lock);
    return rc;
}

static int read_range(larder_dataset *d, const struct larder__sample *s, uint64_t id, void *buf,
                      uint64_t offset, uint64_t length)
{
    struct larder__origin *o;
    int rc = shard_origin(d, s->shard, &o);
    if (rc == 0) rc = larder__origin_read(o, buf, (size_t)length, s->offset + offset);
    if (rc < 0)
        return larder__fail_context(rc, "sample %llu ('%s')", (unsigned long long)id, s->key);
    return 0;
}

static int check_sample(const struct larder__sample *s, uint64_t id, const void *data)
{
    uint64_t got = XXH3_64bits(data, (size_t)s->length);
    if (got != s->checksum)
        return larder__fail(LARDER_ECHECKSUM,
                            "sample %llu ('%s'): checksum %016llx, index says %016llx",
                            (unsigned long long)id, s->key, (unsigned long long)got,
                            (unsigned long long)s->checksum);
    return 0;
}

int64_t larder_read_sample(larder_dataset *d, uint64_t id, void *buf, size_t capacity)
{
    struct larder__sample s;
    int rc = larder__index_sample(&d->ix, id, &s);
    if (rc < 0) return rc;
    if (s.length > capacity)
        return larder__fail(LARDER_ETOOSMALL, "sample %llu is %llu bytes; buffer holds %zu",
                            (unsigned long long)id, (unsigned long long)s.length, capacity);
    if ((rc = read_range(d, &s, id, buf, 0, s.length)) < 0) return rc;
    if (d->options.verify_checksums && (rc = check_sample(&s, id, buf)) < 0) return rc;
    return (int64_t)s.length;
}

int64_t larder_read_field(larder_dataset *d, uint64_t id, uint32_t field, void *buf,
                          size_t capacity)
{
    struct larder__sample s;
    struct larder__field f;
    int rc = larder__index_sample(&d->ix, id, &s);
    if (rc == 0) rc = larder__index_field(&d->ix, &s, id, field, &f);
    if (rc < 0) return rc;
    if (f.length > capacity)
        return larder__fail(LARDER_ETOOSMALL,
                            "field '%s' of sample %llu is %llu bytes; buffer "
                            "holds %zu",
                            f.name, (unsigned long long)id, (unsigned long long)f.length, capacity);
    if (!d->options.verify_checksums) {
        rc = read_range(d, &s, id, buf, f.offset, f.length);
        return rc < 0 ? rc : (int64_t)f.length;
    }
    /* the checksum covers the whole sample */
    uint8_t *whole = malloc(s.length ? (size_t)s.length : 1);
    if (!whole) return -ENOMEM;
    rc = read_range(d, &s, id, whole, 0, s.length);
    if (rc == 0) rc = check_sample(&s, id, whole);
    if (rc == 0) memcpy(buf, whole + f.offset, (size_t)f.length);
    free(whole);
    return rc < 0 ? rc : (int64_t)f.length;
}

/* ---- verify ------------------------------------------------------------ */

struct verify {
    larder_dataset *d;
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
};

static void report(struct verify *v, uint64_t id, int error)
{
    v->problems++;
    if (v->bad) v->bad(v->userdata, id, error, larder_errmsg());
}

static int by_offset(const void *a, const void *b, void *dataset)
{
    const struct larder__index *ix = &((const larder_dataset *)dataset)->ix;
    struct larder__sample x, y;
    larder__index_sample(ix, *(const uint64_t *)a, &x);
    larder__index_sample(ix, *(const uint64_t *)b, &y);
    return x.offset < y.offset ? -1 : x.offset > y.offset;
}

static int verify_sink(void *userdata, const void *data, size_t length)
{
    struct verify *v = userdata;
    const uint8_t *p = data;
    uint64_t start = v->position, end = start + length;
    XXH3_64bits_update(&v->shard_hash, p, length);
    while (v->next < v->count) {
        struct larder__sample s;
        larder__index_sample(&v->d->ix, v->order[v->next], &s);
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

int64_t larder_verify(larder_dataset *d, larder_bad_sample_fn bad, larder_progress_fn progress,
                      void *userdata)
{
    struct verify v = {.d = d, .bad = bad, .progress = progress, .userdata = userdata};
    const struct larder__index *ix = &d->ix;
    if (larder__index_check_hash(ix) < 0) report(&v, LARDER_NO_SAMPLE, LARDER_ECHECKSUM);

    /* records, keys, and the samples of each shard */
    size_t *counts = calloc(ix->num_shards + 1, sizeof *counts);
    uint64_t *order = malloc((ix->num_samples ? ix->num_samples : 1) * sizeof *order);
    bool *sound = calloc(ix->num_samples ? ix->num_samples : 1, 1);
    if (!counts || !order || !sound) {
        free(counts), free(order), free(sound);
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
            report(&v, id, rc);
            continue;
        }
        sound[id] = true;
        counts[s.shard + 1]++;
    }
    for (uint64_t i = 0; i < ix->num_shards; i++) {
        struct larder__shard shard;
        larder__index_shard(ix, i, &shard);
        v.total += shard.size;
        counts[i + 1] += counts[i];
    }
    size_t *fill = calloc(ix->num_shards + 1, sizeof *fill);
    if (!fill) {
        free(counts), free(order), free(sound);
        return -ENOMEM;
    }
    for (uint64_t id = 0; id < ix->num_samples; id++) {
        if (!sound[id]) continue;
        struct larder__sample s;
        larder__index_sample(ix, id, &s);
        order[counts[s.shard] + fill[s.shard]++] = id;
    }

    for (uint32_t i = 0; i < ix->num_shards; i++) {
        struct larder__shard shard;
        larder__index_shard(ix, i, &shard);
        v.shard = i;
        v.order = order + counts[i];
        v.count = counts[i + 1] - counts[i];
        v.next = 0;
        v.open = false;
        v.position = 0;
        qsort_r(v.order, v.count, sizeof *v.order, by_offset, d);
        /* overlapping samples are corrupt: report, then check the rest */
        for (size_t k = 1; k < v.count; k++) {
            struct larder__sample a, b;
            larder__index_sample(ix, v.order[k - 1], &a);
            larder__index_sample(ix, v.order[k], &b);
            if (a.offset + a.length > b.offset) {
                larder__fail(LARDER_EBADINDEX, "%s: samples %llu and %llu overlap in shard %u",
                             ix->name, (unsigned long long)v.order[k - 1],
                             (unsigned long long)v.order[k], i);
                report(&v, v.order[k], LARDER_EBADINDEX);
                memmove(v.order + k, v.order + k + 1, (v.count - k - 1) * sizeof *v.order);
                v.count--, k--;
            }
        }
        XXH3_64bits_reset(&v.shard_hash);
        struct larder__origin *o;
        int rc = shard_origin(d, i, &o);
        if (rc == 0) rc = larder__origin_stream(o, verify_sink, &v);
        if (rc < 0) {
            /* one problem for the shard, not one per sample it could not check */
            larder__fail_context(rc, "shard %u ('%s'), %zu samples left unchecked", i, shard.name,
                                 v.count - v.next);
            report(&v, LARDER_NO_SAMPLE, rc);
            continue;
        } else if (v.position != shard.size) {
            larder__fail(LARDER_ETRUNCATED, "shard %u ('%s'): %llu bytes, index says %llu", i,
                         shard.name, (unsigned long long)v.position,
                         (unsigned long long)shard.size);
            report(&v, LARDER_NO_SAMPLE, LARDER_ETRUNCATED);
        } else if (XXH3_64bits_digest(&v.shard_hash) != shard.checksum) {
            larder__fail(LARDER_ECHECKSUM, "shard %u ('%s'): checksum mismatch", i, shard.name);
            report(&v, LARDER_NO_SAMPLE, LARDER_ECHECKSUM);
        }
        /* samples the stream never finished */
        for (; v.next < v.count; v.next++) {
            struct larder__sample s;
            larder__index_sample(ix, v.order[v.next], &s);
            larder__fail(LARDER_ETRUNCATED, "sample %llu ('%s'): shard %u ends before it",
                         (unsigned long long)v.order[v.next], s.key, i);
            report(&v, v.order[v.next], LARDER_ETRUNCATED);
        }
    }
    free(counts), free(order), free(sound), free(fill);
    return v.problems;
}
