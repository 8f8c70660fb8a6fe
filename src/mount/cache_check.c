/*
 * cache_check.c - the mount's own check of what it hands out from the
 * node cache (mount.h).  fs.c answers a read that the cache holds whole
 * straight from the cache's data file, past the library's sample path.
 * The library checks the first read of each sample in each process
 * (docs/security.md), because whoever can write the cache files could
 * have changed them; so does the mount, here: the first time a sample
 * wholly in the cache is read, its bytes as the cache file holds them
 * are hashed against the index's checksum, and one bit per sample
 * remembers that it passed.  Bytes that do not pass are fetched again
 * through the library's checked path, which forgets the cached blocks,
 * reads the origin and keeps what checks out; if they still do not pass,
 * the read fails.
 */
#include "mount.h"

#include "common.h"
#include "dataset.h"
#include "fill.h"
#include "index.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include "hash.h"

#define PIECE (UINT64_C(4) << 20)          /* bytes hashed at a time */
#define REPAIR_LIMIT (UINT64_C(256) << 20) /* the largest sample refetched whole */

/* The bits of the samples that passed, made on first use (NULL: none yet). */
static _Atomic uint64_t *bits(struct larder__mount *m)
{
    _Atomic uint64_t *b = atomic_load(&m->checked);
    if (b) return b;
    _Atomic uint64_t *fresh = calloc(larder_num_samples(m->dataset) / 64 + 1, sizeof *fresh);
    if (!fresh) return NULL;
    if (atomic_compare_exchange_strong(&m->checked, &b, fresh)) return fresh;
    free((void *)fresh);
    return b;
}

/* Whether sample s's bytes in the cache hash to its checksum: 1, 0, or a negative code. */
static int cached_bytes_match(larder_dataset *d, const larder_sample_info *s)
{
    uint8_t *buf = malloc(s->length < PIECE ? (size_t)s->length : (size_t)PIECE);
    if (!buf) return -ENOMEM;
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    int rc = 0;
    for (uint64_t at = 0; rc == 0 && at < s->length; at += PIECE) {
        uint64_t n = s->length - at < PIECE ? s->length - at : PIECE;
        rc = larder__dataset_read_range(d, s->shard, s->offset + at, n, buf);
        if (rc == 0) XXH3_64bits_update(&state, buf, (size_t)n);
    }
    free(buf);
    return rc < 0 ? rc : XXH3_64bits_digest(&state) == s->checksum;
}

/* One check of a sample at a time: readers that open a large cached file
 * at once (8 threads, each first read) waited on 8 hashes of the whole
 * file instead of one.  Striped by sample, so that different samples are
 * checked side by side. */
#define STRIPES 64
static pthread_mutex_t stripes[STRIPES];
static pthread_once_t stripes_once = PTHREAD_ONCE_INIT;

static void stripes_init(void)
{
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&stripes[i], NULL);
}

static int check_once(struct larder__mount *m, uint64_t id, _Atomic uint64_t *b, uint64_t bit);

bool larder__mount_check_passed(struct larder__mount *m, uint64_t id)
{
    _Atomic uint64_t *b = atomic_load(&m->checked);
    return b &&
           (atomic_load_explicit(&b[id / 64], memory_order_relaxed) & (UINT64_C(1) << (id % 64)));
}

int larder__mount_check_cached(struct larder__mount *m, uint64_t id)
{
    _Atomic uint64_t *b = bits(m);
    uint64_t bit = UINT64_C(1) << (id % 64);
    if (b && (atomic_load_explicit(&b[id / 64], memory_order_relaxed) & bit)) return 0;
    pthread_once(&stripes_once, stripes_init);
    pthread_mutex_t *lock = &stripes[id % STRIPES];
    pthread_mutex_lock(lock);
    int rc = b && (atomic_load_explicit(&b[id / 64], memory_order_relaxed) & bit)
                 ? 0 /* checked while this reader waited */
                 : check_once(m, id, b, bit);
    pthread_mutex_unlock(lock);
    return rc;
}

static int check_once(struct larder__mount *m, uint64_t id, _Atomic uint64_t *b, uint64_t bit)
{
    larder_dataset *d = m->dataset;
    larder_sample_info s;
    int rc = larder_sample_info_get(d, id, &s);
    if (rc < 0) return rc;
    /* an index of plain files has no checksums to hold the bytes to; a
     * sample only partly in the cache is read through the engine.  Its
     * last byte first: a file read from its start (and staged ahead of
     * the reads) lacks it until the end, and the whole test scans the
     * resident blocks one by one up to the first that is not */
    struct larder__fill *fill = larder__dataset_fill(d);
    if (larder__dataset_index(d)->unchecked || s.length == 0 ||
        !larder__fill_resident(fill, s.shard, s.offset + s.length - 1, 1) ||
        !larder__fill_resident(fill, s.shard, s.offset, s.length))
        return 0;
    if ((rc = cached_bytes_match(d, &s)) == 0) {
        uint64_t limit = m->repair_limit ? m->repair_limit : REPAIR_LIMIT;
        larder__mount_log(LARDER_LOG_WARN,
                          "sample %llu ('%s'): the node cache's bytes do not match its checksum "
                          "(its files were changed); %s",
                          (unsigned long long)id, s.key,
                          s.length <= limit ? "fetching it again"
                                            : "too large to fetch again whole");
        if (s.length <= limit) {
            uint8_t *again = malloc((size_t)s.length);
            int64_t got = again ? larder_read_sample(d, id, again, (size_t)s.length) : -ENOMEM;
            free(again);
            rc = got < 0 ? (int)got : cached_bytes_match(d, &s);
        }
        /* Over the limit the bytes stay wrong: a checksum error (EIO), as
         * when the fetch did not put them right.  It was ENOMEM, which a
         * reader takes for a shortage worth retrying (found by review). */
        if (rc == 0)
            rc = larder__fail(LARDER_ECHECKSUM,
                              "sample %llu ('%s'): the node cache's bytes do not match its "
                              "checksum",
                              (unsigned long long)id, s.key);
    }
    if (rc < 0) return rc;
    if (b) atomic_fetch_or_explicit(&b[id / 64], bit, memory_order_relaxed);
    return 0;
}
