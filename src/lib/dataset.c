/*
 * dataset.c - the public dataset handle: an index (mapped when local,
 * loaded when remote), one origin per shard (opened on first use), and
 * optionally the node cache.
 *
 * The read path: a sample whose blocks are all resident is read from the
 * cache file and its checksum checked (no lock, no IPC).  Otherwise the
 * reader takes the fill lock of the sample's blocks, reads whatever is
 * still missing from the origin as one read per run of missing blocks,
 * checks the sample's checksum over the assembled bytes, stores the new
 * blocks and sets their bits, then releases the lock.  Wrong bytes in the
 * cache (a damaged or truncated file) lead to one fetch of the whole
 * range from the origin; wrong bytes from the origin are an error naming
 * the sample.
 */
#include "cache.h"
#include "client.h"
#include "confine.h"
#include "dataset.h"
#include "hedge.h"
#include "index.h"
#include "source.h"
#include "pool.h"
#include "shardmap.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <sys/mman.h>
#include <time.h>
#include <xxhash.h>

struct larder_dataset {
    char *url;
    uint8_t *image;
    uint64_t image_size;
    bool mapped;
    struct larder__index ix;
    larder_open_options options;
    pthread_mutex_t lock; /* guards shards[] and pool */
    struct larder__source **shards;
    char **locations;              /* where each shard is, resolved and checked at open */
    struct larder__shard_map *map; /* samples by offset, for fills (made on first use) */
    int map_error;                 /* why the map could not be made (a corrupt index) */
    char map_message[512];
    struct larder__cache *cache;         /* NULL: reads go to the origin */
    struct larder__cache_counters local; /* counters when there is no cache */
    struct larder__pool *pool;           /* for larder_read_samples, made on first use */
    /* Samples whose cached bytes this process checked, valid while the
     * cache's generation is verified_generation (see read_resident). */
    uint64_t *verified;
    uint64_t verified_generation;
    pthread_mutex_t verified_lock;
    struct larder__endpoint *daemon;  /* the node daemon, when one is configured */
    larder__peer_fetch_fn peer_fetch; /* in a daemon: the shard owners */
    void *peer_context;
};

#define DEFAULT_INFLIGHT 64

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
    pthread_mutex_init(&d->lock, NULL);
    if (options && options->version == 1) /* a version 1 struct ends before trust_index */
        memcpy(&d->options, options, offsetof(larder_open_options, trust_index));
    else if (options)
        d->options = *options;
    const char *const *allow = d->options.version >= 2 ? d->options.allow_prefixes : NULL;
    /* a confined opener (the node daemon) reads nothing it may not: not even an index */
    int rc = larder__allowed(url, allow, "index");
    if (rc < 0) {
        /* nothing */
    } else if (larder__is_remote(url)) {
        rc = larder__source_load(url, &d->image, &d->image_size);
    } else {
        const char *path = strncmp(url, "file://", 7) == 0 ? url + 7 : url;
        int fd = rc = larder__open(path, O_RDONLY, 0);
        if (fd >= 0) {
            rc = larder__file_size(fd, &d->image_size, path);
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
        }
    }
    if (rc == 0) rc = larder__index_parse(&d->ix, d->image, d->image_size, d->url);
    if (rc == 0 &&
        (!(d->shards = calloc(d->ix.num_shards ? d->ix.num_shards : 1, sizeof *d->shards)) ||
         !(d->locations = calloc(d->ix.num_shards ? d->ix.num_shards : 1, sizeof *d->locations))))
        rc = -ENOMEM;
    /* every shard's location, confined to the index's base and the allowed
     * prefixes, before any byte is read on the index's word */
    for (uint64_t i = 0; rc == 0 && i < d->ix.num_shards; i++) {
        rc = larder__shard_location(&d->ix, d->url, i, d->options.trust_index != 0,
                                    &d->locations[i]);
        if (rc == 0 && allow) {
            char what[32];
            snprintf(what, sizeof what, "shard %llu", (unsigned long long)i);
            rc = larder__allowed(d->locations[i], allow, what);
        }
    }
    const char *cache_dir = options ? options->cache_dir : NULL;
    if (!cache_dir) cache_dir = getenv("LARDER_CACHE");
    const char *daemon = options ? options->daemon_socket : NULL;
    if (!daemon) daemon = getenv("LARDER_SOCKET");
    /* the cache is keyed by the dataset id: an index must not claim
     * another's id and so reach (or reset) that dataset's cache.  One hash
     * of the index, at 10 GB/s or so. */
    if (rc == 0 && cache_dir && cache_dir[0]) rc = larder__index_check_hash(&d->ix);
    if (rc == 0 && cache_dir && cache_dir[0]) {
        rc = larder__cache_open(&d->cache, cache_dir, &d->ix, options ? options->block_size : 0,
                                options ? options->cache_capacity : 0,
                                options ? options->borrow_capacity : 0);
        if ((rc == -EACCES || rc == -EPERM) && daemon && daemon[0]) {
            /* another user's daemon owns the node cache (0750/0640): its
             * clients go through it for everything */
            larder__log(LARDER_LOG_INFO, "%s; reading through the node daemon only",
                        larder_errmsg());
            rc = 0;
        }
    }
    if (rc == 0 && d->cache) larder__hedge_attach(cache_dir); /* else the process's own budget */
    pthread_mutex_init(&d->verified_lock, NULL);
    if (rc == 0 && daemon && daemon[0]) {
        /* the daemon opens the index itself: give it a path it can find */
        char absolute[PATH_MAX];
        const char *where = d->url;
        if (!larder__is_remote(d->url) && realpath(larder__file_path(d->url), absolute))
            where = absolute;
        rc = larder__endpoint_new(&d->daemon, daemon, 1, NULL, where, 0);
    }
    if (rc == 0 && d->cache) {
        d->verified = calloc((d->ix.num_samples + 63) / 64 + 1, 8);
        if (!d->verified) rc = -ENOMEM;
        d->verified_generation = larder__cache_generation(d->cache);
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
    larder__pool_free(d->pool);
    larder__endpoint_free(d->daemon);
    larder__cache_close(d->cache);
    free(d->verified);
    pthread_mutex_destroy(&d->verified_lock);
    if (d->shards)
        for (uint64_t i = 0; i < d->ix.num_shards; i++)
            larder__source_destroy(d->shards[i]);
    free(d->shards);
    if (d->locations)
        for (uint64_t i = 0; i < d->ix.num_shards; i++)
            free(d->locations[i]);
    free(d->locations);
    larder__shard_map_free(d->map);
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

int larder_validate(larder_dataset *d)
{
    if (!d) return larder__fail(LARDER_EUSAGE, "larder_validate: NULL dataset");
    int rc = larder__index_check_hash(&d->ix);
    return rc < 0 ? rc : larder__index_validate(&d->ix);
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
static int shard_origin(larder_dataset *d, uint32_t shard, struct larder__source **out)
{
    pthread_mutex_lock(&d->lock);
    int rc = 0;
    if (!d->shards[shard]) rc = larder__source_open(&d->shards[shard], d->locations[shard], NULL);
    *out = d->shards[shard];
    pthread_mutex_unlock(&d->lock);
    return rc;
}

/* A sample's key for messages (the read path carries only its range). */
static const char *key_of(const larder_dataset *d, uint64_t id)
{
    struct larder__sample s;
    return larder__index_sample(&d->ix, id, &s) == 0 ? s.key : "?";
}

static int read_range(larder_dataset *d, const struct larder__sample *s, uint64_t id, void *buf,
                      uint64_t offset, uint64_t length)
{
    struct larder__source *o;
    int rc = shard_origin(d, s->shard, &o);
    if (rc == 0) rc = larder__source_read(o, buf, (size_t)length, s->offset + offset, 0);
    if (rc < 0)
        return larder__fail_context(rc, "sample %llu ('%s')", (unsigned long long)id,
                                    key_of(d, id));
    return 0;
}

static bool checksum_ok(const struct larder__sample *s, const void *data)
{
    return XXH3_64bits(data, (size_t)s->length) == s->checksum;
}

static int check_sample(larder_dataset *d, const struct larder__sample *s, uint64_t id,
                        const void *data)
{
    uint64_t got = XXH3_64bits(data, (size_t)s->length);
    if (got != s->checksum)
        return larder__fail(LARDER_ECHECKSUM,
                            "sample %llu ('%s'): checksum %016llx, index says %016llx",
                            (unsigned long long)id, key_of(d, id), (unsigned long long)got,
                            (unsigned long long)s->checksum);
    return 0;
}

static struct larder__cache_counters *counters(larder_dataset *d)
{
    return d->cache ? larder__cache_counters(d->cache) : &d->local;
}

static uint64_t now_microseconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/*
 * Whether this process checked sample `id` in the current generation.
 * A new generation (something changed under readers) forgets them all.
 */
static bool verified(larder_dataset *d, uint64_t id, uint64_t generation)
{
    if (__atomic_load_n(&d->verified_generation, __ATOMIC_ACQUIRE) != generation) {
        pthread_mutex_lock(&d->verified_lock);
        if (d->verified_generation != generation) {
            memset(d->verified, 0, ((d->ix.num_samples + 63) / 64 + 1) * 8);
            __atomic_store_n(&d->verified_generation, generation, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&d->verified_lock);
        return false;
    }
    return (__atomic_load_n(&d->verified[id / 64], __ATOMIC_RELAXED) >> (id % 64)) & 1;
}

static void mark_verified(larder_dataset *d, uint64_t id, uint64_t generation)
{
    if (__atomic_load_n(&d->verified_generation, __ATOMIC_ACQUIRE) == generation)
        __atomic_fetch_or(&d->verified[id / 64], UINT64_C(1) << (id % 64), __ATOMIC_RELAXED);
}

/*
 * The fast path: all blocks resident, read them, and make sure they were
 * right.  The checksum is checked on the first read of a sample in this
 * process, and again whenever the cache's generation moved (an eviction,
 * damage found, a repair); a generation that moves during the read
 * means the bytes may have changed under it, so they are checked too.
 * Damage the cache's own checks cannot see (bytes rewritten in place by
 * someone else, with the size unchanged) is caught on the first read in
 * each process.
 */
static bool read_resident(larder_dataset *d, const struct larder__sample *s, uint64_t id,
                          uint64_t first, uint64_t last, void *buf)
{
    struct larder__cache *c = d->cache;
    uint64_t generation = larder__cache_generation(c);
    if (!larder__cache_present(c, s->shard, first, last)) return false;
    if (larder__cache_pread(c, s->shard, buf, (size_t)s->length, s->offset) < 0) return false;
    /* suspect blocks (shared with a sample not yet checked, or from before
     * a reboot) are served only after this sample's own check */
    bool trusted = larder__cache_resident(c, s->shard, first, last);
    bool steady = larder__cache_generation(c) == generation &&
                  larder__cache_present(c, s->shard, first, last);
    if (!steady || !trusted || !verified(d, id, generation)) {
        if (!checksum_ok(s, buf) || !larder__cache_present(c, s->shard, first, last)) return false;
        if (steady && trusted) mark_verified(d, id, generation);
    }
    larder__cache_touch(c, s->shard, first, last);
    return true;
}

static int fetch_run(larder_dataset *d, uint32_t shard, uint64_t offset, uint64_t length,
                     uint8_t *buf, bool *from_peer);

/* Where each block of a fill came from. */
enum { FROM_CACHE = 0, FROM_ORIGIN, FROM_PEER };

/* A fill may read this much of the cache beyond what was asked to take in
 * the whole samples at its edges (so that their blocks can be checked and
 * trusted); a raw range cutting into a sample with more than
 * MAX_EXTRA_BYTES around it is refused rather than read whole
 * (docs/cache.md). */
#define EDGE_EXTENSION (1u << 20)
#define MAX_EXTRA_BYTES (UINT64_C(256) << 20)

/*
 * Read the blocks [first, last] of `shard` into span: those present in
 * the cache from there (unless `everything`), the rest as one read per run
 * of missing blocks, from the shard's owner node in a daemon or else the
 * origin; fetched[] marks where each block came from.  Present blocks
 * include suspect ones: the caller checks everything it keeps.
 */
static int fetch_missing(larder_dataset *d, uint32_t shard, uint64_t first, uint64_t last,
                         uint8_t *span, uint8_t *fetched, bool everything)
{
    struct larder__cache *c = d->cache;
    uint64_t start = larder__cache_block_offset(c, first);
    for (uint64_t b = first; b <= last;) {
        uint64_t at = larder__cache_block_offset(c, b) - start;
        uint64_t end = b;
        if (!everything && larder__cache_present(c, shard, b, b)) {
            /* a run of present blocks: one read from the cache */
            while (end < last && larder__cache_present(c, shard, end + 1, end + 1))
                end++;
            if (larder__cache_pread(c, shard, span + at,
                                    (size_t)larder__cache_span(c, shard, b, end),
                                    start + at) == 0) {
                for (uint64_t i = b; i <= end; i++)
                    fetched[i - first] = FROM_CACHE;
                b = end + 1;
                continue;
            } /* else the file was cut underneath: fetch the run */
        } else {
            while (end < last && (everything || !larder__cache_present(c, shard, end + 1, end + 1)))
                end++;
        }
        uint64_t n = larder__cache_span(c, shard, b, end);
        /* a refetch after wrong bytes goes to the origin itself, past any peer */
        bool from_peer = everything;
        int rc = fetch_run(d, shard, start + at, n, span + at, &from_peer);
        if (rc < 0) return rc;
        for (uint64_t i = b; i <= end; i++)
            fetched[i - first] = from_peer ? FROM_PEER : FROM_ORIGIN;
        b = end + 1;
    }
    return 0;
}

/* One run of blocks: from the shard's owner node when a peer fetcher says
 * so, else (or when that fails) from the origin.  *from_peer: in, true to
 * skip the peers; out, whether a peer answered. */
static int fetch_run(larder_dataset *d, uint32_t shard, uint64_t offset, uint64_t length,
                     uint8_t *buf, bool *from_peer)
{
    struct larder__cache_counters *k = counters(d);
    bool skip_peers = *from_peer;
    *from_peer = false;
    if (d->peer_fetch && !skip_peers &&
        d->peer_fetch(d->peer_context, d, shard, offset, length, buf) == 0) {
        *from_peer = true;
        larder__cache_count(&k->peer_requests, 1);
        larder__cache_count(&k->peer_bytes, length);
        return 0;
    }
    struct larder__source *o;
    int rc = shard_origin(d, shard, &o);
    if (rc == 0) rc = larder__source_read(o, buf, (size_t)length, offset, 0);
    if (rc < 0) return rc;
    larder__cache_count(&k->origin_requests, 1);
    larder__cache_count(&k->origin_bytes, length);
    return 0;
}

/* The shard map, built (and the sample records checked) on first use. */
static int shard_map(larder_dataset *d, struct larder__shard_map **out)
{
    struct larder__shard_map *map = __atomic_load_n(&d->map, __ATOMIC_ACQUIRE);
    if (map) {
        *out = map;
        return 0;
    }
    pthread_mutex_lock(&d->lock);
    int rc = d->map_error;
    if (!d->map && rc == 0) {
        rc = larder__shard_map_build(&map, &d->ix);
        if (rc == 0)
            __atomic_store_n(&d->map, map, __ATOMIC_RELEASE);
        else if (rc != -ENOMEM) { /* a bad index stays bad: say why on every fill */
            d->map_error = rc;
            snprintf(d->map_message, sizeof d->map_message, "%s", larder_errmsg());
        }
    } else if (!d->map) {
        rc = larder__fail(rc, "%s", d->map_message);
    }
    *out = d->map;
    pthread_mutex_unlock(&d->lock);
    return *out ? 0 : rc;
}

/* A sample's offset and end, from a record the shard map has checked. */
static void sample_span(const larder_dataset *d, uint64_t id, uint64_t *offset, uint64_t *end)
{
    struct larder__sample s;
    larder__index_sample_range(&d->ix, id, &s);
    *offset = s.offset;
    *end = s.offset + s.length;
}

/*
 * What a fill reads and checks: the samples overlapping what was asked
 * (which must be checked, or nothing is served), and those overlapping
 * the blocks around it (checked when cheap, so that their blocks can be
 * kept).  Positions are the shard map's.
 */
struct fill_plan {
    uint64_t need_first, need_last;   /* samples overlapping [lo, hi): [first, last) */
    uint64_t check_first, check_last; /* every sample checked: [first, last) */
    uint64_t first, last;             /* blocks read */
    /* straddling samples that may be taken in (their other blocks are in
     * the cache already), if their blocks' locks are free: the blocks they
     * add, below first and above last; none when left_first == first /
     * right_last == last */
    uint64_t left_first, right_last;
};

/*
 * The samples overlapping bytes [lo, hi) of a shard (p->need_first and
 * need_last), which must be read whole and checked before any of those
 * bytes is served, and the bytes that takes: [*start, *end).  0, or
 * LARDER_EUNSUPPORTED when that is more than MAX_EXTRA_BYTES beyond what
 * was asked.
 */
static int plan_needed(larder_dataset *d, struct larder__shard_map *map, uint32_t shard,
                       uint64_t lo, uint64_t hi, struct fill_plan *p, uint64_t *start,
                       uint64_t *end)
{
    larder__shard_map_overlapping(map, shard, lo, hi, &p->need_first, &p->need_last);
    *start = lo, *end = hi;
    if (p->need_first < p->need_last) { /* without overlaps, the first starts and the last ends */
        uint64_t a, z;
        sample_span(d, larder__shard_map_id(map, p->need_first), &a, &z);
        if (a < *start) *start = a;
        sample_span(d, larder__shard_map_id(map, p->need_last - 1), &a, &z);
        if (z > *end) *end = z;
    }
    if ((lo - *start) + (*end - hi) > MAX_EXTRA_BYTES)
        return larder__fail(LARDER_EUNSUPPORTED,
                            "bytes %llu+%llu of shard %u cut into a sample too large to check "
                            "for them (%llu bytes around them); read the sample itself",
                            (unsigned long long)lo, (unsigned long long)(hi - lo), shard,
                            (unsigned long long)(*end - *start));
    return 0;
}

static int plan_fill(larder_dataset *d, struct larder__shard_map *map, uint32_t shard, uint64_t lo,
                     uint64_t hi, struct fill_plan *p)
{
    struct larder__cache *c = d->cache;
    uint64_t shard_size = larder__dataset_shard_size(d, shard);
    uint64_t start, end;
    int rc = plan_needed(d, map, shard, lo, hi, p, &start, &end);
    if (rc < 0) return rc;
    /* the blocks these bytes fill, and the samples sharing them */
    uint64_t first, last;
    larder__cache_blocks(c, start, end - start, &first, &last);
    uint64_t block_start = larder__cache_block_offset(c, first);
    uint64_t block_end = block_start + larder__cache_span(c, shard, first, last);
    larder__shard_map_overlapping(map, shard, block_start, block_end, &p->check_first,
                                  &p->check_last);
    /* samples straddling the edges are left out, but noted when their
     * other blocks are in the cache already and few: checking them then
     * costs a pread, and lets the shared edge blocks be trusted.  Fetching
     * them, or waiting for their locks, would widen every cold fill. */
    p->left_first = first, p->right_last = last;
    if (p->check_first < p->check_last &&
        (p->check_first < p->need_first || p->need_first == p->need_last)) {
        uint64_t a, z, f, l;
        sample_span(d, larder__shard_map_id(map, p->check_first), &a, &z);
        if (a < block_start) {
            larder__cache_blocks(c, a, block_start - a, &f, &l);
            if (block_start - a <= EDGE_EXTENSION && larder__cache_present(c, shard, f, l))
                p->left_first = f;
            p->check_first++;
        }
    }
    if (p->check_first < p->check_last) {
        uint64_t a, z, f, l;
        sample_span(d, larder__shard_map_id(map, p->check_last - 1), &a, &z);
        bool needed = p->check_last == p->need_last && p->need_first < p->need_last;
        if (!needed && z > block_end) {
            larder__cache_blocks(c, block_end, z - block_end, &f, &l);
            if (z - block_end <= EDGE_EXTENSION && larder__cache_present(c, shard, f, l))
                p->right_last = l;
            p->check_last--;
        }
    }
    if (p->check_first > p->check_last) p->check_first = p->check_last;
    if (end > shard_size) end = shard_size;
    p->first = first, p->last = last;
    return 0;
}

/* Take in the noted straddlers whose blocks no one else holds (see fill_plan). */
static void take_in_straddlers(larder_dataset *d, uint32_t shard, int lock, struct fill_plan *p)
{
    struct larder__cache *c = d->cache;
    if (p->left_first < p->first && p->check_first > 0 &&
        larder__cache_try_lock(c, lock, shard, p->left_first, p->first - 1))
        p->check_first--, p->first = p->left_first;
    if (p->right_last > p->last &&
        larder__cache_try_lock(c, lock, shard, p->last + 1, p->right_last))
        p->check_last++, p->last = p->right_last;
}

/*
 * Check the samples of a fill against their checksums.  ok[] (one per
 * sample of the plan's checked range) says which matched; returns the
 * first needed sample that did not (as an id), or UINT64_MAX.
 */
static uint64_t check_plan(larder_dataset *d, struct larder__shard_map *map,
                           const struct fill_plan *p, const uint8_t *span, uint64_t span_start,
                           bool *ok)
{
    uint64_t bad_needed = UINT64_MAX;
    for (uint64_t q = p->check_first; q < p->check_last; q++) {
        uint64_t id = larder__shard_map_id(map, q);
        struct larder__sample s;
        larder__index_sample_range(&d->ix, id, &s);
        ok[q - p->check_first] = checksum_ok(&s, span + (s.offset - span_start));
        if (!ok[q - p->check_first] && q >= p->need_first && q < p->need_last &&
            bad_needed == UINT64_MAX)
            bad_needed = id;
    }
    return bad_needed;
}

/* LARDER_ECHECKSUM naming sample `id`, whose bytes are in span (which starts at span_start). */
static int checksum_failure(larder_dataset *d, uint64_t id, const uint8_t *span,
                            uint64_t span_start)
{
    struct larder__sample s;
    larder__index_sample_range(&d->ix, id, &s);
    return check_sample(d, &s, id, span + (s.offset - span_start));
}

/* What becomes of each block a fill read. */
enum { KEEP_CHECKED = 0, KEEP_SUSPECT, DISCARD };

/*
 * Which blocks of the fill may be kept: trusted, those whose every sample
 * byte was checked and matched; suspect, those shared with a sample the
 * fill did not check (a later fill checks them without fetching them
 * again); none that hold bytes of a sample that failed.  Bytes of no
 * sample (a tar's end blocks) have no checksum to check and no reader to
 * mislead.  keep[] is per block.
 */
static void keepable(larder_dataset *d, struct larder__shard_map *map, uint32_t shard,
                     const struct fill_plan *p, const bool *ok, uint8_t *keep)
{
    struct larder__cache *c = d->cache;
    uint64_t n = p->last - p->first + 1;
    for (uint64_t i = 0; i < n; i++)
        keep[i] = KEEP_CHECKED;
    uint64_t start = larder__cache_block_offset(c, p->first);
    uint64_t end = start + larder__cache_span(c, shard, p->first, p->last);
    uint64_t from, to;
    larder__shard_map_overlapping(map, shard, start, end, &from, &to);
    for (uint64_t q = from; q < to; q++) {
        bool checked = q >= p->check_first && q < p->check_last;
        if (checked && ok[q - p->check_first]) continue;
        uint64_t a, z, first, last;
        sample_span(d, larder__shard_map_id(map, q), &a, &z);
        if (z == a) continue;
        larder__cache_blocks(c, a, z - a, &first, &last);
        for (uint64_t b = first < p->first ? p->first : first; b <= last && b <= p->last; b++)
            if (keep[b - p->first] != DISCARD)
                keep[b - p->first] = checked ? DISCARD : KEEP_SUSPECT;
    }
}

/* Store (or trust, when they were read from the cache) the blocks that may be kept. */
static void keep_blocks(larder_dataset *d, uint32_t shard, const struct fill_plan *p,
                        const uint8_t *span, const uint8_t *fetched, const uint8_t *keep)
{
    struct larder__cache *c = d->cache;
    uint64_t start = larder__cache_block_offset(c, p->first);
    for (uint64_t b = p->first; b <= p->last;) {
        uint64_t end = b; /* a run of blocks kept alike, from the same place */
        while (end < p->last && keep[end + 1 - p->first] == keep[b - p->first] &&
               fetched[end + 1 - p->first] == fetched[b - p->first])
            end++;
        uint8_t what = keep[b - p->first];
        if (what == KEEP_CHECKED && fetched[b - p->first] == FROM_CACHE)
            larder__cache_trust(c, shard, b, end);
        else if (what != DISCARD && fetched[b - p->first] != FROM_CACHE &&
                 larder__cache_store(c, shard, b, end,
                                     span + larder__cache_block_offset(c, b) - start,
                                     fetched[b - p->first] == FROM_PEER, what == KEEP_CHECKED) < 0)
            return; /* disk full: served uncached (the cache counts it and warns once) */
        b = end + 1;
    }
}

/*
 * The fill engine: bytes [lo, hi) of `shard` through the cache.  Under
 * the fill lock of the blocks it reads, it reads what the cache does not
 * hold, checks every sample those bytes belong to (and the samples
 * sharing their blocks, when cheap), keeps the blocks whose bytes all
 * checked out, and copies [lo, hi) to buf (when not NULL).  Nothing is
 * copied or kept that failed its checksum: wrong bytes lead to one more
 * read of everything from the origin itself, then to LARDER_ECHECKSUM
 * naming the sample.  `suspect`: cached bytes already proved wrong.
 */
static int fill_range(larder_dataset *d, uint32_t shard, uint64_t lo, uint64_t hi, void *buf,
                      bool suspect)
{
    struct larder__cache *c = d->cache;
    struct larder__cache_counters *k = counters(d);
    struct larder__shard_map *map;
    int rc = shard_map(d, &map);
    if (rc < 0) return rc;
    struct fill_plan p;
    if ((rc = plan_fill(d, map, shard, lo, hi, &p)) < 0) return rc;
    uint64_t started = now_microseconds();
    int lock = larder__cache_lock(c, shard, p.first, p.last);
    if (lock < 0) return lock;
    take_in_straddlers(d, shard, lock, &p);
    uint64_t want_first, want_last;
    larder__cache_blocks(c, lo, hi - lo, &want_first, &want_last);
    if (!suspect && larder__cache_resident(c, shard, want_first, want_last)) {
        /* filled while we waited: resident blocks were checked when kept */
        rc = buf ? larder__cache_pread(c, shard, buf, (size_t)(hi - lo), lo) : 0;
        larder__cache_unlock(c, lock);
        if (rc == 0) {
            larder__cache_count(&k->hits, 1);
            return 0;
        }
        lock = larder__cache_lock(c, shard, p.first, p.last); /* cut underneath: fill it */
        if (lock < 0) return lock;
    }
    if (suspect) {
        larder__cache_count(&k->refetches, 1);
        larder__cache_forget(c, shard, want_first, want_last);
    }
    uint64_t blocks = p.last - p.first + 1, checked = p.check_last - p.check_first;
    uint64_t span_start = larder__cache_block_offset(c, p.first);
    uint64_t span_length = larder__cache_span(c, shard, p.first, p.last);
    uint8_t *span = malloc(span_length ? (size_t)span_length : 1);
    uint8_t *fetched = calloc(blocks, sizeof *fetched);
    bool *ok = calloc(checked ? checked : 1, sizeof *ok);
    uint8_t *keep = calloc(blocks, sizeof *keep);
    rc = span && fetched && ok && keep ? 0 : -ENOMEM;
    if (rc == 0) rc = fetch_missing(d, shard, p.first, p.last, span, fetched, suspect);
    bool fetched_any = false; /* a miss needs a fetch; the rest came from the cache */
    for (uint64_t i = 0; rc == 0 && i < blocks; i++)
        fetched_any = fetched_any || fetched[i] != FROM_CACHE;
    larder__cache_count(fetched_any ? &k->misses : &k->hits, 1);
    uint64_t bad = rc == 0 ? check_plan(d, map, &p, span, span_start, ok) : UINT64_MAX;
    bool all_ok = true;
    for (uint64_t i = 0; rc == 0 && i < checked; i++)
        all_ok = all_ok && ok[i];
    if (rc == 0 && !all_ok) {
        /* cached neighbours, a peer, or the transfer may be what is wrong:
         * read it all from the origin once more, then give up */
        larder__cache_count(&k->refetches, 1);
        larder__cache_forget(c, shard, p.first, p.last);
        rc = fetch_missing(d, shard, p.first, p.last, span, fetched, true);
        bad = rc == 0 ? check_plan(d, map, &p, span, span_start, ok) : UINT64_MAX;
    }
    if (rc == 0 && bad != UINT64_MAX) {
        checksum_failure(d, bad, span, span_start);
        rc = larder__fail_context(LARDER_ECHECKSUM, "the origin's bytes do not match the index");
    }
    if (rc == 0) {
        keepable(d, map, shard, &p, ok, keep);
        keep_blocks(d, shard, &p, span, fetched, keep);
        if (buf) memcpy(buf, span + (lo - span_start), (size_t)(hi - lo));
    }
    larder__cache_unlock(c, lock);
    larder__cache_trim(c);
    larder__cache_record_fill(c, now_microseconds() - started);
    free(span);
    free(fetched);
    free(ok);
    free(keep);
    return rc;
}

/* The fill path for one sample (see fill_range); `suspect`: its cached bytes proved wrong. */
static int fill(larder_dataset *d, const struct larder__sample *s, uint64_t id, void *buf,
                bool suspect)
{
    if (s->length == 0) return 0;
    int rc = fill_range(d, s->shard, s->offset, s->offset + s->length, buf, suspect);
    if (rc < 0 && rc != LARDER_ECHECKSUM)
        rc = larder__fail_context(rc, "sample %llu ('%s')", (unsigned long long)id, key_of(d, id));
    return rc;
}

/*
 * Ask the node daemon for the sample's bytes and check them.  0 when they
 * came and were right; otherwise the caller takes its own path.
 */
static int read_through_daemon(larder_dataset *d, const struct larder__sample *s, uint64_t id,
                               void *buf)
{
    if (d->cache) {
        uint64_t first, last;
        larder__cache_blocks(d->cache, s->offset, s->length, &first, &last);
        if (larder__cache_present(d->cache, s->shard, first, last)) return -EAGAIN;
    }
    if (larder__endpoint_down(d->daemon)) return -EAGAIN;
    int rc = larder__endpoint_read(d->daemon, d->ix.id_low, d->ix.id_high, s->shard, LARDER__DEMAND,
                                   s->offset, s->length, buf);
    if (rc == 0 && !checksum_ok(s, buf)) rc = check_sample(d, s, id, buf);
    if (rc == 0) larder__cache_count(&counters(d)->misses, 1);
    if (rc < 0)
        larder__log(LARDER_LOG_WARN,
                    "sample %llu: the node daemon did not serve it (%s); "
                    "reading it directly",
                    (unsigned long long)id, larder_errmsg());
    return rc;
}

/* Read a whole sample into buf (capacity already checked). */
static int read_whole(larder_dataset *d, const struct larder__sample *s, uint64_t id, void *buf)
{
    struct larder__cache_counters *k = counters(d);
    int rc;
    if (d->daemon && read_through_daemon(d, s, id, buf) == 0) {
        rc = 0; /* the daemon staged it (and, sharing the cache, for the next read too) */
    } else if (!d->cache) {
        rc = read_range(d, s, id, buf, 0, s->length);
        larder__cache_count(&k->misses, 1);
        larder__cache_count(&k->origin_requests, 1);
        larder__cache_count(&k->origin_bytes, s->length);
        if (rc == 0 && d->options.verify_checksums) rc = check_sample(d, s, id, buf);
    } else {
        uint64_t first, last;
        larder__cache_blocks(d->cache, s->offset, s->length, &first, &last);
        if (read_resident(d, s, id, first, last, buf)) {
            larder__cache_count(&k->hits, 1);
            rc = 0;
        } else {
            /* all resident yet wrong or unreadable: the cache is what is wrong */
            bool suspect = larder__cache_present(d->cache, s->shard, first, last);
            rc = fill(d, s, id, buf, suspect);
        }
    }
    if (rc == 0) larder__cache_count(&k->bytes_served, s->length);
    return rc;
}

int64_t larder_read_sample(larder_dataset *d, uint64_t id, void *buf, size_t capacity)
{
    struct larder__sample s;
    int rc = larder__index_sample_range(&d->ix, id, &s);
    if (rc < 0) return rc;
    if (s.length > capacity)
        return larder__fail(LARDER_ETOOSMALL, "sample %llu is %llu bytes; buffer holds %zu",
                            (unsigned long long)id, (unsigned long long)s.length, capacity);
    rc = read_whole(d, &s, id, buf);
    return rc < 0 ? rc : (int64_t)s.length;
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
                            "field '%s' of sample %llu is %llu bytes; buffer holds %zu", f.name,
                            (unsigned long long)id, (unsigned long long)f.length, capacity);
    if (!d->cache && !d->options.verify_checksums) {
        rc = read_range(d, &s, id, buf, f.offset, f.length);
        return rc < 0 ? rc : (int64_t)f.length;
    }
    /* the checksum covers the whole sample */
    uint8_t *whole = malloc(s.length ? (size_t)s.length : 1);
    if (!whole) return -ENOMEM;
    rc = read_whole(d, &s, id, whole);
    if (rc == 0) memcpy(buf, whole + f.offset, (size_t)f.length);
    free(whole);
    return rc < 0 ? rc : (int64_t)f.length;
}

/* ---- many at once ------------------------------------------------------- */

struct batch_item {
    larder_dataset *d;
    struct larder__sample sample;
    uint64_t id;
    void *buf;
    int64_t *result;
    char message[512]; /* the worker's error detail, carried to the caller */
    struct larder__latch *latch;
};

static int by_position(const void *a, const void *b, void *items_)
{
    const struct batch_item *items = items_;
    const struct larder__sample *x = &items[*(const size_t *)a].sample;
    const struct larder__sample *y = &items[*(const size_t *)b].sample;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void read_task(void *arg)
{
    struct batch_item *item = arg;
    int rc = read_whole(item->d, &item->sample, item->id, item->buf);
    *item->result = rc < 0 ? rc : (int64_t)item->sample.length;
    if (rc < 0) snprintf(item->message, sizeof item->message, "%s", larder_errmsg());
    larder__latch_arrive(item->latch);
}

int64_t larder_read_samples(larder_dataset *d, const uint64_t *ids, size_t count, void *const *bufs,
                            const size_t *caps, int64_t *results)
{
    struct batch_item *items = calloc(count ? count : 1, sizeof *items);
    if (!items) return -ENOMEM;
    struct larder__latch latch;
    size_t queued = 0;
    for (size_t i = 0; i < count; i++) {
        struct larder__sample sample;
        int rc = larder__index_sample_range(&d->ix, ids[i], &sample);
        if (rc == 0 && sample.length > caps[i])
            rc = larder__fail(LARDER_ETOOSMALL, "sample %llu is %llu bytes; buffer holds %zu",
                              (unsigned long long)ids[i], (unsigned long long)sample.length,
                              caps[i]);
        results[i] = rc;
        if (rc < 0) continue;
        items[queued++] = (struct batch_item){.d = d,
                                              .sample = sample,
                                              .id = ids[i],
                                              .buf = bufs[i],
                                              .result = &results[i],
                                              .latch = &latch};
    }
    struct larder__pool *pool;
    int rc = larder__dataset_pool_get(d, &pool);
    if (rc < 0) {
        free(items);
        return rc;
    }
    /* Samples that share a block would wait on each other's fill lock and
     * hold workers idle: first fetch one sample per run of blocks (the
     * leaders), then the rest, which mostly find their blocks resident. */
    size_t *order = malloc((queued ? queued : 1) * sizeof *order);
    bool *follower = calloc(queued ? queued : 1, sizeof *follower);
    if (!order || !follower) {
        free(order), free(follower), free(items);
        return -ENOMEM;
    }
    for (size_t i = 0; i < queued; i++)
        order[i] = i;
    if (d->cache) {
        qsort_r(order, queued, sizeof *order, by_position, items);
        /* leaders have disjoint block ranges: a sample overlapping the last
         * leader's range waits for the second phase */
        uint64_t reach = 0; /* end of the last leader's range in this shard, exclusive */
        for (size_t k = 0; k < queued; k++) {
            const struct larder__sample *x = &items[order[k]].sample;
            bool same_shard = k > 0 && items[order[k - 1]].sample.shard == x->shard;
            uint64_t first, last;
            larder__cache_blocks(d->cache, x->offset, x->length, &first, &last);
            if (same_shard && first < reach)
                follower[order[k]] = true;
            else
                reach = last + 1;
        }
    }
    for (int phase = 0; phase < 2; phase++) {
        size_t n = 0;
        for (size_t i = 0; i < queued; i++)
            n += follower[i] == (phase == 1);
        larder__latch_init(&latch, n);
        for (size_t i = 0; i < queued; i++)
            if (follower[i] == (phase == 1))
                larder__pool_submit(d->pool, read_task, &items[i], LARDER__DEMAND);
        larder__latch_wait(&latch);
    }
    free(order);
    free(follower);
    int64_t done = 0, first_error = 0;
    const char *message = NULL;
    for (size_t i = 0; i < queued; i++)
        if (*items[i].result < 0 && !message) message = items[i].message;
    for (size_t i = 0; i < count; i++) {
        if (results[i] >= 0)
            done++;
        else if (!first_error)
            first_error = results[i];
    }
    if (first_error && message) larder__fail((int)first_error, "%s", message);
    free(items);
    return first_error ? first_error : done;
}

/* ---- statistics ---------------------------------------------------------- */

int larder_stats_get(larder_dataset *d, larder_stats *out)
{
    if (d->cache) {
        larder__cache_stats(d->cache, out);
        return 0;
    }
    memset(out, 0, sizeof *out);
    larder__counters_copy(counters(d), out);
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
        struct larder__source *o;
        int rc = shard_origin(d, i, &o);
        if (rc == 0) rc = larder__source_stream(o, verify_sink, &v);
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

/* ---- for the prefetcher --------------------------------------------------- */

bool larder__dataset_cached(const larder_dataset *d)
{
    return d->cache != NULL;
}

int larder__dataset_inflight(const larder_dataset *d)
{
    return d->options.max_inflight > 0 ? d->options.max_inflight : DEFAULT_INFLIGHT;
}

int larder__dataset_pool_get(larder_dataset *d, struct larder__pool **pool)
{
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    if (!d->pool) rc = larder__pool_new(&d->pool, larder__dataset_inflight(d));
    *pool = d->pool;
    pthread_mutex_unlock(&d->lock);
    return rc;
}

struct larder__pool *larder__dataset_pool(larder_dataset *d)
{
    return d->pool;
}

bool larder__dataset_staged(const larder_dataset *d, uint64_t id)
{
    struct larder__sample s;
    if (!d->cache || larder__index_sample_range(&d->ix, id, &s) < 0) return false;
    uint64_t first, last;
    larder__cache_blocks(d->cache, s.offset, s.length, &first, &last);
    return larder__cache_present(d->cache, s.shard, first, last); /* no origin read left */
}

int larder__dataset_stage(larder_dataset *d, uint64_t id)
{
    struct larder__sample s;
    int rc = larder__index_sample_range(&d->ix, id, &s);
    if (rc < 0) return rc;
    if (!d->cache || larder__dataset_staged(d, id)) return 0;
    uint8_t *buf = malloc(s.length ? (size_t)s.length : 1);
    if (!buf) return -ENOMEM;
    rc = fill(d, &s, id, buf, false);
    free(buf);
    return rc;
}

/* ---- for the node daemon -------------------------------------------------- */

void larder__dataset_set_peer_fetch(larder_dataset *d, larder__peer_fetch_fn fetch, void *context)
{
    d->peer_fetch = fetch;
    d->peer_context = context;
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
    struct larder__shard info;
    return larder__index_shard(&d->ix, shard, &info) == 0 ? info.size : 0;
}

/* A raw range request (a daemon's client asks for it): inside one shard, not empty. */
static int check_range(const larder_dataset *d, uint32_t shard, uint64_t offset, uint64_t length)
{
    uint64_t end;
    if (shard >= d->ix.num_shards || length == 0 || !larder__add_ok(offset, length, &end) ||
        end > larder__dataset_shard_size(d, shard))
        return larder__fail(LARDER_EUSAGE, "bytes %llu+%llu are not inside shard %u",
                            (unsigned long long)offset, (unsigned long long)length, shard);
    return 0;
}

int larder__dataset_read_range(larder_dataset *d, uint32_t shard, uint64_t offset, uint64_t length,
                               void *buf)
{
    int rc = check_range(d, shard, offset, length);
    if (rc < 0) return rc;
    if (d->cache) {
        uint64_t first, last;
        larder__cache_blocks(d->cache, offset, length, &first, &last);
        /* resident blocks were checked when they were kept; no lock, so
         * an eviction (and a refill) racing the read must be seen: every
         * eviction moves the generation before it punches its hole */
        uint64_t generation = larder__cache_generation(d->cache);
        if (larder__cache_resident(d->cache, shard, first, last) &&
            larder__cache_pread(d->cache, shard, buf, (size_t)length, offset) == 0 &&
            larder__cache_generation(d->cache) == generation &&
            larder__cache_resident(d->cache, shard, first, last))
            return 0;
        return fill_range(d, shard, offset, offset + length, buf, false);
    }
    /* no cache: read the samples these bytes belong to, and check them */
    struct larder__shard_map *map;
    struct fill_plan p;
    if ((rc = shard_map(d, &map)) < 0) return rc;
    uint64_t start, end;
    if ((rc = plan_needed(d, map, shard, offset, offset + length, &p, &start, &end)) < 0) return rc;
    p.check_first = p.need_first, p.check_last = p.need_last;
    uint8_t *span = start == offset && end == offset + length ? buf : malloc((size_t)(end - start));
    bool *ok = calloc(p.need_last - p.need_first + 1, sizeof *ok);
    bool from_peer = false;
    rc = span && ok ? fetch_run(d, shard, start, end - start, span, &from_peer) : -ENOMEM;
    uint64_t bad = rc == 0 ? check_plan(d, map, &p, span, start, ok) : UINT64_MAX;
    if (rc == 0 && bad != UINT64_MAX) rc = checksum_failure(d, bad, span, start);
    if (rc == 0 && span != buf) memcpy(buf, span + (offset - start), (size_t)length);
    if (span != buf) free(span);
    free(ok);
    return rc;
}

int larder__dataset_stage_range(larder_dataset *d, uint32_t shard, uint64_t offset, uint64_t length,
                                int *fd)
{
    /* sendfile hands the socket references to page-cache pages that are
     * read when the bytes go out, after sendfile has returned: an
     * eviction's hole punched then reaches the client as zeros (seen in
     * tests/cli/daemon.sh).  Holding a lock on the blocks until the client
     * has taken them would let a slow client stall every fill of them.
     * So zero-copy only from a cache that evicts nothing, node-wide (the
     * capacity is in the shared header: a reader that sets one turns it
     * off here too). */
    if (!d->cache || larder__cache_evicts(d->cache)) return 1;
    int rc = check_range(d, shard, offset, length);
    if (rc < 0) return rc;
    uint64_t first, last;
    larder__cache_blocks(d->cache, offset, length, &first, &last);
    if (!larder__cache_resident(d->cache, shard, first, last) &&
        (rc = fill_range(d, shard, offset, offset + length, NULL, false)) < 0)
        return rc;
    /* not kept (a full disk, or suspect neighbours): send a copy */
    if (!larder__cache_resident(d->cache, shard, first, last)) return 1;
    return (*fd = larder__cache_data_fd(d->cache, shard)) < 0 ? 1 : 0;
}
