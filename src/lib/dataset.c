/*
 * dataset.c - the public dataset handle: an index (mapped when local,
 * loaded when remote), where each shard is (resolved and confined at
 * open), optionally the node cache and the node daemon, and the read
 * engine (fill.h) that reads samples through them.  The handle answers
 * questions about the index itself and hands reads to the engine (the
 * reads are in dataset_read.c); a reader with a node daemon asks the
 * daemon first for samples its cache does not hold (the daemon stages
 * them in the cache they share).
 */
#include "cache.h"
#include "endpoint.h"
#include "confine.h"
#include "dataset_internal.h"
#include "fill.h"
#include "hedge.h"
#include "index.h"
#include "pool.h"
#include "shardmap.h"
#include "source.h"
#include "source_http.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

/* The index at d->url into d->image: mapped when local, loaded when remote. */
static int load_index(larder_dataset *d)
{
    if (larder__is_remote(d->url))
        return larder__source_load_confined(d->url, LARDER__LOAD_INDEX_MAX, "an index",
                                            (const char *const *)d->allow, &d->image,
                                            &d->image_size);
    const char *path = larder__file_path(d->url);
    int fd = larder__open(path, O_RDONLY, 0);
    if (fd < 0) return fd;
    int rc = larder__file_size(fd, &d->image_size, path);
    if (rc == 0 && d->image_size > 0) {
        void *map = larder__sys.mmap(NULL, d->image_size, PROT_READ, MAP_SHARED, fd, 0);
        if (map != MAP_FAILED) {
            d->image = map, d->mapped = true;
        } else if (d->image_size > SIZE_MAX / 2 || !(d->image = malloc(d->image_size))) {
            rc = larder__fail(-ENOMEM, "%s: cannot map or load %llu bytes", path,
                              (unsigned long long)d->image_size);
        } else {
            /* some file systems (FUSE with direct I/O, for one) cannot map
             * files: read the index into memory instead */
            rc = larder__pread_full(fd, d->image, (size_t)d->image_size, 0, path);
        }
    }
    larder__sys.close(fd);
    return rc;
}

/* A copy of the allowed prefixes in d->allow, for its HTTP origins'
 * redirects (the caller's array need not outlive the open).  0 or -ENOMEM. */
static int copy_prefixes(larder_dataset *d, const char *const *allow)
{
    size_t n = 0;
    while (allow[n])
        n++;
    if (!(d->allow = calloc(n + 1, sizeof *d->allow))) return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!(d->allow[i] = strdup(allow[i]))) return -ENOMEM; /* larder_close frees */
    return 0;
}

/* Every shard's location, confined to the index's base and the allowed
 * prefixes, before any byte is read on the index's word. */
static int locate_shards(larder_dataset *d, const char *const *allow)
{
    d->locations = calloc(d->ix.num_shards ? d->ix.num_shards : 1, sizeof *d->locations);
    if (!d->locations) return -ENOMEM;
    int rc = 0;
    for (uint64_t i = 0; rc == 0 && i < d->ix.num_shards; i++) {
        rc = larder__shard_location(&d->ix, d->url, i, d->options.trust_index != 0,
                                    &d->locations[i]);
        if (rc == 0 && allow) {
            char what[32];
            snprintf(what, sizeof what, "shard %llu", (unsigned long long)i);
            rc = larder__allowed(d->locations[i], allow, what);
        }
    }
    return rc;
}

/* The node cache in `dir`, when this user may use it. */
static int open_cache(larder_dataset *d, const char *dir, const char *daemon)
{
    /* the cache is keyed by the dataset id: an index must not claim
     * another's id and so reach (or reset) that dataset's cache.  One hash
     * of the index, at 10 GB/s or so. */
    int rc = larder__index_check_hash(&d->ix);
    if (rc == 0)
        rc = larder__cache_open(&d->cache, dir, &d->ix, d->options.block_size,
                                d->options.cache_capacity, d->options.borrow_capacity);
    if ((rc == -EACCES || rc == -EPERM) && daemon && daemon[0]) {
        /* another user's daemon owns the node cache (0750/0640): its
         * clients go through it for everything */
        larder__log(LARDER_LOG_INFO, "%s; reading through the node daemon only", larder_errmsg());
        return 0;
    }
    if (rc == 0) larder__hedge_attach(dir); /* else the process's own budget */
    return rc;
}

/* The node daemon at `address`, told where the index is. */
static int connect_daemon(larder_dataset *d, const char *address)
{
    /* the daemon opens the index itself: give it a path it can find */
    char absolute[PATH_MAX];
    const char *where = d->url;
    if (!larder__is_remote(d->url) && realpath(larder__file_path(d->url), absolute))
        where = absolute;
    return larder__endpoint_new(&d->daemon, address, LARDER__ROLE_READER, NULL, where, 0);
}

/* The read engine's source of a shard: its origin, behind the daemon's wrapper if any. */
static int open_source(void *context, uint32_t shard, struct larder__source **out)
{
    larder_dataset *d = context;
    struct larder__source *origin;
    int rc = larder__source_open(&origin, d->locations[shard], NULL);
    /* a confined opener's redirects stay under its prefixes (s3:// is never redirected) */
    if (rc == 0 && d->allow && larder__is_remote(d->locations[shard]))
        larder__source_http_confine(origin, (const char *const *)d->allow);
    /* behind the daemon's wrapper, an origin that cannot be opened is not
     * the end: the shard's owner node may serve it (a publication read
     * from its producer); the failure shows when the origin is read */
    if (rc < 0 && d->wrap)
        rc = larder__source_missing_open(&origin, d->locations[shard], rc, d->missing_origin);
    if (rc < 0 || !d->wrap) {
        *out = rc < 0 ? NULL : origin;
        return rc;
    }
    return d->wrap(d->wrap_context, shard, origin, out);
}

/*
 * An index marked unchecked (flag 4) has no checksums, so every check of
 * what is read through it passes: taken only from an opener that asked for
 * it (the mount, for the index it made itself), never from an index that
 * merely says so.  0 or LARDER_EBADINDEX.
 */
static int refuse_unchecked(const larder_dataset *d)
{
    if (!d->ix.unchecked || (d->options.version >= 3 && d->options.allow_unchecked)) return 0;
    return larder__fail(LARDER_EBADINDEX,
                        "%s: index marked unchecked (flag 4: made from a listing alone, with no "
                        "checksums); refused: only the process that made it may open it "
                        "(larder mount of plain files)",
                        d->url);
}

int larder_open(larder_dataset **out, const char *url, const larder_open_options *options)
{
    if (!out || !url) return larder__fail(LARDER_EUSAGE, "larder_open: NULL argument");
    if (options && (options->version < 1 || options->version > LARDER_OPEN_OPTIONS_VERSION))
        return larder__fail(LARDER_EUSAGE, "larder_open: options version %d, expected 1 to %d",
                            options->version, LARDER_OPEN_OPTIONS_VERSION);
    larder_dataset *d = calloc(1, sizeof *d);
    if (!d || !(d->url = strdup(url))) {
        free(d);
        return -ENOMEM;
    }
    if (options && options->version == 1) /* a version 1 struct ends before trust_index */
        memcpy(&d->options, options, offsetof(larder_open_options, trust_index));
    else if (options && options->version == 2) /* ends before allow_unchecked */
        memcpy(&d->options, options, offsetof(larder_open_options, allow_unchecked));
    else if (options)
        d->options = *options;
    const char *const *allow = d->options.version >= 2 ? d->options.allow_prefixes : NULL;
    const char *cache_dir = d->options.cache_dir ? d->options.cache_dir : getenv("LARDER_CACHE");
    const char *daemon =
        d->options.daemon_socket ? d->options.daemon_socket : getenv("LARDER_SOCKET");
    /* a confined opener (the node daemon) reads nothing it may not: not even an index */
    int rc = larder__allowed(url, allow, "index");
    if (rc == 0 && allow) rc = copy_prefixes(d, allow);
    if (rc == 0) rc = load_index(d);
    if (rc == 0) rc = larder__index_parse(&d->ix, d->image, d->image_size, d->url);
    if (rc == 0) rc = refuse_unchecked(d);
    if (rc == 0) rc = locate_shards(d, allow);
    if (rc == 0 && cache_dir && cache_dir[0]) rc = open_cache(d, cache_dir, daemon);
    if (rc == 0 && daemon && daemon[0]) rc = connect_daemon(d, daemon);
    if (rc == 0) {
        struct larder__fill_config c = {.ix = &d->ix,
                                        .cache = d->cache,
                                        .verify = d->options.verify_checksums != 0,
                                        .inflight = d->options.max_inflight,
                                        .open_source = open_source,
                                        .context = d};
        rc = larder__fill_new(&d->fill, &c);
    }
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
    larder__fill_free(d->fill); /* first: its workers may be reading the cache */
    larder__endpoint_free(d->daemon);
    larder__cache_close(d->cache);
    if (d->locations)
        for (uint64_t i = 0; i < d->ix.num_shards; i++)
            free(d->locations[i]);
    free(d->locations);
    free(d->missing_origin);
    for (size_t i = 0; d->allow && d->allow[i]; i++)
        free(d->allow[i]);
    free(d->allow);
    if (d->mapped)
        munmap(d->image, d->image_size);
    else
        free(d->image);
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

int larder_validate(larder_dataset *d)
{
    if (!d) return larder__fail(LARDER_EUSAGE, "larder_validate: NULL dataset");
    int rc = larder__index_check_hash(&d->ix);
    return rc < 0 ? rc : larder__index_validate(&d->ix);
}

/* The public view of sample `id`, whose record is `s`. */
static int sample_info_of(const larder_dataset *d, uint64_t id, const struct larder__sample *s,
                          larder_sample_info *info)
{
    struct larder__shard shard;
    int rc = larder__index_shard(&d->ix, s->shard, &shard);
    if (rc < 0) return rc;
    *info = (larder_sample_info){.id = id,
                                 .offset = s->offset,
                                 .length = s->length,
                                 .checksum = s->checksum,
                                 .shard = s->shard,
                                 .num_fields = s->num_fields,
                                 .key = s->key,
                                 .shard_name = shard.name};
    return 0;
}

static void field_info_of(const struct larder__field *f, larder_field_info *info)
{
    info->name = f->name;
    info->offset = f->offset;
    info->length = f->length;
    info->dtype = f->dtype;
    info->ndim = f->ndim;
    memcpy(info->shape, f->shape, sizeof info->shape);
}

int larder_sample_info_get(const larder_dataset *d, uint64_t id, larder_sample_info *info)
{
    struct larder__sample s;
    int rc = larder__index_sample(&d->ix, id, &s);
    return rc < 0 ? rc : sample_info_of(d, id, &s, info);
}

int larder_field_info_get(const larder_dataset *d, uint64_t id, uint32_t field,
                          larder_field_info *info)
{
    struct larder__sample s;
    struct larder__field f;
    int rc = larder__index_sample(&d->ix, id, &s);
    if (rc == 0) rc = larder__index_field(&d->ix, &s, id, field, &f);
    if (rc < 0) return rc;
    field_info_of(&f, info);
    return 0;
}

/* One call where Python used to make 1 + num_fields of the two above. */
int larder_sample_layout_get(const larder_dataset *d, uint64_t id, larder_sample_info *info,
                             larder_field_info *fields, uint32_t capacity)
{
    if (!d || (!fields && capacity))
        return larder__fail(LARDER_EUSAGE, "larder_sample_layout_get: NULL argument");
    struct larder__sample s;
    int rc = larder__index_sample(&d->ix, id, &s);
    if (rc == 0 && info) rc = sample_info_of(d, id, &s, info);
    if (rc < 0) return rc;
    if (s.num_fields > INT_MAX)
        return larder__fail(LARDER_EBADINDEX, "%s: sample %llu: %u fields", d->url,
                            (unsigned long long)id, s.num_fields);
    if (s.num_fields > capacity)
        return larder__fail(LARDER_ETOOSMALL, "sample %llu has %u fields, room for %u",
                            (unsigned long long)id, s.num_fields, capacity);
    for (uint32_t i = 0; i < s.num_fields; i++) {
        struct larder__field f;
        if ((rc = larder__index_field(&d->ix, &s, id, i, &f)) < 0) return rc;
        field_info_of(&f, &fields[i]);
    }
    return (int)s.num_fields;
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

/* ---- statistics ---------------------------------------------------------- */

int larder_stats_get(larder_dataset *d, larder_stats *out)
{
    if (d->cache) {
        larder__cache_stats(d->cache, out);
        return 0;
    }
    memset(out, 0, sizeof *out);
    larder__counters_copy(larder__fill_counters(d->fill), out);
    for (uint64_t i = 0; i < d->ix.num_shards; i++) {
        struct larder__shard shard;
        larder__index_shard(&d->ix, i, &shard);
        out->total_bytes += shard.size;
    }
    return 0;
}

uint64_t larder_stats_fill_percentile(const larder_stats *stats, double fraction)
{
    uint64_t total = 0;
    for (int i = 0; i < LARDER_FILL_BUCKETS; i++)
        total += stats->fill_latency[i];
    if (total == 0) return 0;
    uint64_t want = (uint64_t)(fraction * (double)total + 0.5), seen = 0;
    if (want == 0) want = 1;
    for (int i = 0; i < LARDER_FILL_BUCKETS; i++) {
        seen += stats->fill_latency[i];
        if (seen >= want) return UINT64_C(2) << i;
    }
    return UINT64_C(2) << (LARDER_FILL_BUCKETS - 1);
}

/* ---- for the prefetcher ----------------------------------------------------- */

bool larder__dataset_cached(const larder_dataset *d)
{
    return d->cache != NULL;
}

struct larder__cache *larder__dataset_cache(larder_dataset *d)
{
    return d->cache;
}

const struct larder__index *larder__dataset_index(const larder_dataset *d)
{
    return &d->ix;
}

struct larder__fill *larder__dataset_fill(larder_dataset *d)
{
    return d->fill;
}

bool larder__dataset_staged(const larder_dataset *d, uint64_t id)
{
    return larder__fill_staged(d->fill, id);
}

int larder__dataset_stage(larder_dataset *d, uint64_t id)
{
    return larder__fill_stage(d->fill, id);
}

int larder__dataset_pool_get(larder_dataset *d, struct larder__pool **pool)
{
    return larder__fill_pool(d->fill, pool);
}

struct larder__pool *larder__dataset_pool(larder_dataset *d)
{
    struct larder__pool *pool = NULL;
    larder__fill_pool(d->fill, &pool);
    return pool;
}

int larder__dataset_inflight(const larder_dataset *d)
{
    return larder__fill_inflight(d->fill);
}

/* ---- for file handles ----------------------------------------------------- */

struct larder__endpoint *larder__dataset_daemon(larder_dataset *d)
{
    return d->daemon;
}

bool larder__dataset_verifies(const larder_dataset *d)
{
    return d->options.verify_checksums != 0;
}

/* ---- for the node daemon -------------------------------------------------- */

void larder__dataset_set_source_wrapper(larder_dataset *d, larder__wrap_source_fn wrap,
                                        void *context)
{
    d->wrap = wrap;
    d->wrap_context = context;
}

int larder__dataset_set_missing_origin(larder_dataset *d, const char *why)
{
    free(d->missing_origin);
    d->missing_origin = why ? strdup(why) : NULL;
    return !why || d->missing_origin ? 0 : -ENOMEM;
}

void larder__dataset_id(const larder_dataset *d, uint64_t *low, uint64_t *high)
{
    *low = d->ix.id_low;
    *high = d->ix.id_high;
}

uint32_t larder__dataset_num_shards(const larder_dataset *d)
{
    return (uint32_t)d->ix.num_shards;
}

uint64_t larder__dataset_shard_size(const larder_dataset *d, uint32_t shard)
{
    return larder__index_shard_size(&d->ix, shard);
}

int larder__dataset_read_range(larder_dataset *d, uint32_t shard, uint64_t offset, uint64_t length,
                               void *buf)
{
    return larder__fill_range(d->fill, shard, offset, length, buf);
}

int larder__dataset_stage_range(larder_dataset *d, uint32_t shard, uint64_t offset, uint64_t length,
                                int *fd)
{
    return larder__fill_stage_range(d->fill, shard, offset, length, fd);
}
