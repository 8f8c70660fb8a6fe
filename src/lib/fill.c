/*
 * fill.c - the read engine (fill.h): the handle, resident reads, fills
 * under the cache's fill lock, and the checks that keep wrong bytes from
 * being served or kept.  What a fill reads, checks and keeps is decided
 * in fill_scope.c; here it is done.  Raw ranges (what a daemon serves)
 * are in fill_raw.c.
 */
#include "bigbuf.h"
#include "fill_internal.h"
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "hash.h"

#define DEFAULT_INFLIGHT 64

int larder__fill_new(struct larder__fill **out, const struct larder__fill_config *c)
{
    struct larder__fill *f = calloc(1, sizeof *f);
    if (!f) return -ENOMEM;
    f->ix = c->ix;
    f->cache = c->cache;
    f->verify = c->verify;
    f->inflight = c->inflight > 0 ? c->inflight : DEFAULT_INFLIGHT;
    f->open_source = c->open_source;
    f->context = c->context;
    pthread_mutex_init(&f->lock, NULL);
    pthread_mutex_init(&f->verified_lock, NULL);
    f->sources = calloc(f->ix->num_shards ? f->ix->num_shards : 1, sizeof *f->sources);
    int sums_rc = larder__block_sums_new(&f->sums, f->ix);
    if (f->cache) {
        f->verified = calloc((f->ix->num_samples + 63) / 64 + 1, 8);
        f->verified_generation = larder__cache_generation(f->cache);
    }
    if (!f->sources || sums_rc < 0 || (f->cache && !f->verified)) {
        larder__fill_free(f);
        return -ENOMEM;
    }
    *out = f;
    return 0;
}

void larder__fill_free(struct larder__fill *f)
{
    if (!f) return;
    larder__pool_free(f->pool);
    if (f->sources)
        for (uint64_t i = 0; i < f->ix->num_shards; i++)
            larder__source_close(f->sources[i]);
    free(f->sources);
    if (f->cache && f->map)
        larder__cache_set_layout(f->cache, NULL, NULL); /* before the map goes */
    larder__shard_map_free(f->map);
    larder__block_sums_free(f->sums);
    free(f->verified);
    pthread_mutex_destroy(&f->verified_lock);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

int larder__fill_source(struct larder__fill *f, uint32_t shard, struct larder__source **out)
{
    struct larder__source *s = __atomic_load_n(&f->sources[shard], __ATOMIC_ACQUIRE);
    if (s) {
        *out = s;
        return 0;
    }
    pthread_mutex_lock(&f->lock);
    int rc = 0;
    if (!f->sources[shard] && (rc = f->open_source(f->context, shard, &s)) == 0)
        __atomic_store_n(&f->sources[shard], s, __ATOMIC_RELEASE);
    *out = f->sources[shard];
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int larder__fill_inflight(const struct larder__fill *f)
{
    return f->inflight;
}

int larder__fill_pool(struct larder__fill *f, struct larder__pool **pool)
{
    int rc = 0;
    pthread_mutex_lock(&f->lock);
    if (!f->pool) rc = larder__pool_new(&f->pool, f->inflight);
    *pool = f->pool;
    pthread_mutex_unlock(&f->lock);
    return rc;
}

struct larder__cache_counters *larder__fill_counters(struct larder__fill *f)
{
    return f->cache ? larder__cache_counters(f->cache) : &f->local;
}

/* A sample's key for messages (the read path carries only its range). */
static const char *key_of(const struct larder__fill *f, uint64_t id)
{
    struct larder__sample s;
    return larder__index_sample(f->ix, id, &s) == 0 ? s.key : "?";
}

int larder__fill_direct(struct larder__fill *f, const struct larder__sample *s, uint64_t id,
                        void *buf, uint64_t offset, uint64_t length)
{
    struct larder__extent e = {buf, s->offset + offset, (size_t)length};
    int rc = length ? larder__fill_fetch_runs(f, s->shard, &e, 1, false, LARDER__DEMAND) : 0;
    if (rc < 0)
        return larder__fail_context(rc, "sample %llu ('%s')", (unsigned long long)id,
                                    key_of(f, id));
    return 0;
}

static int check_sample(const struct larder__fill *f, const struct larder__sample *s, uint64_t id,
                        const void *data)
{
    if (f->ix->unchecked) return 0; /* a listing-only index: nothing to check against */
    uint64_t got = XXH3_64bits(data, (size_t)s->length);
    if (got != s->checksum)
        return larder__fail(LARDER_ECHECKSUM,
                            "sample %llu ('%s'): checksum %016llx, index says %016llx",
                            (unsigned long long)id, key_of(f, id), (unsigned long long)got,
                            (unsigned long long)s->checksum);
    return 0;
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
static bool verified(struct larder__fill *f, uint64_t id, uint64_t generation)
{
    if (__atomic_load_n(&f->verified_generation, __ATOMIC_ACQUIRE) != generation) {
        pthread_mutex_lock(&f->verified_lock);
        if (f->verified_generation != generation) {
            memset(f->verified, 0, ((f->ix->num_samples + 63) / 64 + 1) * 8);
            __atomic_store_n(&f->verified_generation, generation, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&f->verified_lock);
        return false;
    }
    return (__atomic_load_n(&f->verified[id / 64], __ATOMIC_RELAXED) >> (id % 64)) & 1;
}

static void mark_verified(struct larder__fill *f, uint64_t id, uint64_t generation)
{
    if (__atomic_load_n(&f->verified_generation, __ATOMIC_ACQUIRE) == generation)
        __atomic_fetch_or(&f->verified[id / 64], UINT64_C(1) << (id % 64), __ATOMIC_RELAXED);
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
static bool read_resident(struct larder__fill *f, const struct larder__sample *s, uint64_t id,
                          uint64_t first, uint64_t last, void *buf)
{
    struct larder__cache *c = f->cache;
    uint64_t generation = larder__cache_generation(c);
    if (!larder__cache_present(c, s->shard, first, last)) return false;
    if (larder__cache_pread(c, s->shard, buf, (size_t)s->length, s->offset) < 0) return false;
    /* suspect blocks (shared with a sample not yet checked, or from before
     * a reboot) are served only after this sample's own check */
    bool trusted = larder__cache_resident(c, s->shard, first, last);
    bool steady = larder__cache_generation(c) == generation &&
                  larder__cache_present(c, s->shard, first, last);
    if (!steady || !trusted || !verified(f, id, generation)) {
        if (!larder__checksum_ok(f->ix, s, buf) || !larder__cache_present(c, s->shard, first, last))
            return false;
        if (steady && trusted) mark_verified(f, id, generation);
    }
    larder__cache_touch(c, s->shard, first, last);
    return true;
}

/* Where each block of a fill came from. */
enum { BLOCK_CACHED = 0, BLOCK_ORIGIN, BLOCK_PEER };

/*
 * Runs of blocks from the shard's source in one vectored read (its owner
 * node first, in a daemon; `origin_only`: the origin itself, past any
 * peer), at class `priority` (a peer and the origin's in-flight limit
 * queue it behind higher classes).  Returns where the bytes came from
 * (enum larder__from), or a negative code.
 */
int larder__fill_fetch_runs(struct larder__fill *f, uint32_t shard,
                            const struct larder__extent *runs, size_t count, bool origin_only,
                            int priority)
{
    struct larder__cache_counters *k = larder__fill_counters(f);
    struct larder__source *source;
    int rc = larder__fill_source(f, shard, &source);
    if (rc == 0)
        rc = larder__source_readv(source, runs, count,
                                  (origin_only ? LARDER__READ_ORIGIN_ONLY : 0) |
                                      larder__read_at(priority));
    if (rc < 0) return rc;
    uint64_t bytes = 0, from_peers = 0;
    for (size_t i = 0; i < count; i++) {
        bytes += runs[i].length;
        /* a stripe reads some runs from their owners, the rest from the origin */
        if (rc == LARDER__FROM_PEER)
            from_peers += larder__source_peer_bytes(runs[i].offset, runs[i].length);
    }
    if (from_peers) larder__cache_count(&k->peer_requests, count);
    if (from_peers < bytes) larder__cache_count(&k->origin_requests, count);
    larder__cache_count(&k->peer_bytes, from_peers);
    larder__cache_count(&k->origin_bytes, bytes - from_peers);
    return rc;
}

/*
 * Read the blocks [first, last] of `shard` into span: those present in
 * the cache from there (unless `everything`), the runs of missing ones
 * with one vectored read of the shard's source (which reads them at once
 * where it can); fetched[] marks where each block came from.  Present
 * blocks include suspect ones: the caller checks everything it keeps.
 * `everything`: a refetch after wrong bytes, from the origin itself.
 */
static int fetch_missing(struct larder__fill *f, uint32_t shard, uint64_t first, uint64_t last,
                         uint8_t *span, uint8_t *fetched, bool everything, int priority)
{
    struct larder__cache *c = f->cache;
    uint64_t start = larder__cache_block_offset(c, first);
    size_t count = 0;
    struct larder__extent *runs = malloc((size_t)((last - first) / 2 + 1) * sizeof *runs);
    if (!runs) return -ENOMEM;
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
                memset(fetched + (b - first), BLOCK_CACHED, (size_t)(end - b + 1));
                b = end + 1;
                continue;
            } /* else the file was cut underneath: fetch the run */
        } else {
            while (end < last && (everything || !larder__cache_present(c, shard, end + 1, end + 1)))
                end++;
        }
        size_t length = (size_t)larder__cache_span(c, shard, b, end);
        if (count > 0 && (uint8_t *)runs[count - 1].buf + runs[count - 1].length == span + at)
            runs[count - 1].length += length; /* after a run found cut: one run */
        else
            runs[count++] = (struct larder__extent){span + at, start + at, length};
        memset(fetched + (b - first), BLOCK_ORIGIN, (size_t)(end - b + 1));
        b = end + 1;
    }
    int rc = count ? larder__fill_fetch_runs(f, shard, runs, count, everything, priority)
                   : LARDER__FROM_ORIGIN;
    free(runs);
    if (rc < 0) return rc;
    if (rc == LARDER__FROM_PEER) /* borrowed: the blocks a peer sent (a stripe's: some) */
        for (uint64_t i = 0; i <= last - first; i++) {
            uint64_t at = larder__cache_block_offset(c, first + i);
            uint64_t length = larder__cache_span(c, shard, first + i, first + i);
            if (fetched[i] == BLOCK_ORIGIN && larder__source_peer_bytes(at, length) == length)
                fetched[i] = BLOCK_PEER;
        }
    return 0;
}

/* The shard map, built (and the sample records checked) on first use. */
int larder__fill_shard_map(struct larder__fill *f, struct larder__shard_map **out)
{
    struct larder__shard_map *map = __atomic_load_n(&f->map, __ATOMIC_ACQUIRE);
    if (map) {
        *out = map;
        return 0;
    }
    pthread_mutex_lock(&f->lock);
    int rc = f->map_error;
    if (!f->map && rc == 0) {
        rc = larder__shard_map_new(&map, f->ix);
        if (rc == 0) {
            __atomic_store_n(&f->map, map, __ATOMIC_RELEASE);
            if (f->cache) larder__cache_set_layout(f->cache, f->ix, map); /* for next use */
        } else if (rc != -ENOMEM) { /* a bad index stays bad: say why on every fill */
            f->map_error = rc;
            snprintf(f->map_message, sizeof f->map_message, "%s", larder_errmsg());
        }
    } else if (!f->map) {
        rc = larder__fail(rc, "%s", f->map_message);
    }
    *out = f->map;
    pthread_mutex_unlock(&f->lock);
    return *out ? 0 : rc;
}

/* LARDER_ECHECKSUM naming sample `id`, whose bytes are in span (which starts at span_start). */
int larder__fill_checksum_failure(struct larder__fill *f, uint64_t id, const uint8_t *span,
                                  uint64_t span_start)
{
    struct larder__sample s;
    larder__index_sample_range(f->ix, id, &s);
    return check_sample(f, &s, id, span + (s.offset - span_start));
}

/* Store (or trust, when they were read from the cache) the blocks that may be kept. */
static void keep_blocks(struct larder__fill *f, uint32_t shard, const struct larder__fill_scope *p,
                        const uint8_t *span, const uint8_t *fetched, const uint8_t *keep)
{
    struct larder__cache *c = f->cache;
    uint64_t start = larder__cache_block_offset(c, p->first);
    bool *admitted = malloc((size_t)(p->last - p->first + 1) * sizeof *admitted);
    if (!admitted) return; /* served uncached */
    for (uint64_t b = p->first; b <= p->last;) {
        uint64_t end = b; /* a run of blocks kept alike, from the same place */
        while (end < p->last && keep[end + 1 - p->first] == keep[b - p->first] &&
               fetched[end + 1 - p->first] == fetched[b - p->first])
            end++;
        uint8_t what = keep[b - p->first];
        if (what == LARDER__KEEP_CHECKED && fetched[b - p->first] == BLOCK_CACHED)
            larder__cache_trust(c, shard, b, end);
        else if (what != LARDER__DISCARD && fetched[b - p->first] != BLOCK_CACHED) {
            /* admission, block by block (in one decision): what would be
             * the next to go is read through */
            bool *admit = admitted + (b - p->first);
            larder__cache_admit_each(c, shard, b, end, admit);
            for (uint64_t x = b, y; x <= end; x = y + 1) {
                y = x;
                if (!admit[x - b]) continue;
                /* a run admitted alike, and alike in place or not: blocks
                 * received (or read) into the data file's own pages are
                 * marked, not written again */
                const uint8_t *data = span + larder__cache_block_offset(c, x) - start;
                bool in_place = larder__fill_in_place(data, larder__cache_span(c, shard, x, x));
                while (y < end && admit[y + 1 - b] &&
                       larder__fill_in_place(span + larder__cache_block_offset(c, y + 1) - start,
                                             larder__cache_span(c, shard, y + 1, y + 1)) ==
                           in_place)
                    y++;
                bool peer = fetched[b - p->first] == BLOCK_PEER;
                bool checked = what == LARDER__KEEP_CHECKED;
                if ((in_place ? larder__fill_store_in_place(c, shard, x, y, data, peer, checked)
                              : larder__cache_store(c, shard, x, y, data, peer, checked)) < 0) {
                    free(admitted);
                    return; /* disk full: served uncached (the cache counts it and warns once) */
                }
            }
        }
        b = end + 1;
    }
    free(admitted);
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
 * `priority`: the class its source reads go at.
 */
int larder__fill_through_cache(struct larder__fill *f, uint32_t shard, uint64_t lo, uint64_t hi,
                               void *buf, bool suspect, int priority)
{
    struct larder__cache *c = f->cache;
    struct larder__cache_counters *k = larder__fill_counters(f);
    struct larder__shard_map *map;
    int rc = larder__fill_shard_map(f, &map);
    if (rc < 0) return rc;
    struct larder__fill_scope p;
    if ((rc = larder__fill_scope_make(f->ix, f->sums, f->cache, map, shard, lo, hi, &p)) < 0)
        return rc;
    uint64_t started = now_microseconds();
    int lock = larder__fill_lock_blocks(c, shard, p.first, p.last);
    if (lock < 0) return lock;
    larder__fill_scope_take_in(f->cache, shard, lock, &p);
    uint64_t want_first, want_last;
    larder__cache_blocks(c, lo, hi - lo, &want_first, &want_last);
    if (!suspect && larder__cache_resident(c, shard, want_first, want_last)) {
        /* filled while we waited: resident blocks were checked when kept */
        rc = buf ? larder__cache_pread(c, shard, buf, (size_t)(hi - lo), lo) : 0;
        larder__fill_unlock_blocks(c, lock);
        if (rc == 0) {
            larder__cache_count(&k->hits, 1);
            return 0;
        }
        /* cut underneath: fill it, in ordinary memory.  A span offered
         * with blocks in place maps the data file, which may be the file
         * cut short (a read past its end is a SIGBUS); letting the lock
         * go above punched out its unpublished blocks already */
        (void)larder__fill_take_offered_span(shard, 0, 0);
        lock = larder__cache_lock(c, shard, p.first, p.last);
        if (lock < 0) return lock;
    }
    if (suspect) {
        larder__cache_count(&k->refetches, 1);
        larder__cache_forget(c, shard, want_first, want_last);
    }
    uint64_t blocks = p.last - p.first + 1, checked = p.check_last - p.check_first;
    uint64_t span_start = larder__cache_block_offset(c, p.first);
    uint64_t span_length = larder__cache_span(c, shard, p.first, p.last);
    uint8_t *offered_span = larder__fill_take_offered_span(shard, span_start, span_length);
    uint8_t *span = offered_span ? offered_span : larder__bigbuf_get((size_t)span_length);
    uint8_t *fetched = calloc(blocks, sizeof *fetched);
    bool *ok = calloc(checked ? checked : 1, sizeof *ok);
    uint8_t *keep = calloc(blocks, sizeof *keep);
    rc = span && fetched && ok && keep ? 0 : -ENOMEM;
    if (rc == 0) rc = fetch_missing(f, shard, p.first, p.last, span, fetched, suspect, priority);
    bool fetched_any = false; /* a miss needs a fetch; the rest came from the cache */
    for (uint64_t i = 0; rc == 0 && i < blocks; i++)
        fetched_any = fetched_any || fetched[i] != BLOCK_CACHED;
    if (rc == 0) larder__cache_count(fetched_any ? &k->misses : &k->hits, 1);
    uint64_t bad =
        rc == 0 ? larder__fill_scope_check(f->ix, map, &p, span, span_start, ok) : UINT64_MAX;
    bool all_ok = true;
    for (uint64_t i = 0; rc == 0 && i < checked; i++)
        all_ok = all_ok && ok[i];
    if (rc == 0 && !all_ok) {
        /* cached neighbours, a peer, or the transfer may be what is wrong:
         * read it all from the origin once more, then give up */
        larder__cache_count(&k->refetches, 1);
        larder__cache_forget(c, shard, p.first, p.last);
        rc = fetch_missing(f, shard, p.first, p.last, span, fetched, true, priority);
        bad = rc == 0 ? larder__fill_scope_check(f->ix, map, &p, span, span_start, ok) : UINT64_MAX;
    }
    if (rc == 0 && bad != UINT64_MAX) {
        if (p.by_block)
            larder__fill_scope_block_failure(f->ix, shard, &p, bad, span, span_start);
        else
            larder__fill_checksum_failure(f, bad, span, span_start);
        rc = larder__fail_context(LARDER_ECHECKSUM, "the origin's bytes do not match the index");
    }
    if (rc == 0) {
        larder__fill_scope_keepable(f->ix, f->cache, map, shard, &p, ok, keep);
        keep_blocks(f, shard, &p, span, fetched, keep);
        if (buf) memcpy(buf, span + (lo - span_start), (size_t)(hi - lo));
    }
    larder__fill_unlock_blocks(c, lock);
    larder__cache_trim(c);
    larder__cache_record_fill(c, now_microseconds() - started);
    if (span != offered_span) larder__bigbuf_put(span); /* pages kept mapped */
    free(fetched);
    free(ok);
    free(keep);
    return rc;
}

/*
 * The fill path for one sample (see fill_range); `suspect`: its cached
 * bytes proved wrong.  A sample of a shard checked by checksum block is
 * filled a piece at a time (buf may then be NULL: staging).
 */
static int fill(struct larder__fill *f, const struct larder__sample *s, uint64_t id, void *buf,
                bool suspect, int priority)
{
    int rc = 0;
    for (uint64_t lo = s->offset, hi; rc == 0 && lo < s->offset + s->length; lo = hi) {
        hi = larder__fill_scope_piece_end(f->sums, s, lo);
        rc = larder__fill_through_cache(
            f, s->shard, lo, hi, buf ? (uint8_t *)buf + (lo - s->offset) : NULL, suspect, priority);
    }
    if (rc < 0 && rc != LARDER_ECHECKSUM)
        rc = larder__fail_context(rc, "sample %llu ('%s')", (unsigned long long)id, key_of(f, id));
    return rc;
}

int larder__fill_check(const struct larder__fill *f, const struct larder__sample *s, uint64_t id,
                       const void *buf)
{
    return larder__checksum_ok(f->ix, s, buf) ? 0 : check_sample(f, s, id, buf);
}

int larder__fill_sample(struct larder__fill *f, const struct larder__sample *s, uint64_t id,
                        void *buf)
{
    struct larder__cache_counters *k = larder__fill_counters(f);
    int rc;
    if (!f->cache) {
        rc = larder__fill_direct(f, s, id, buf, 0, s->length); /* counts the request */
        larder__cache_count(&k->misses, 1);
        if (rc == 0 && f->verify) rc = check_sample(f, s, id, buf);
        return rc;
    }
    uint64_t first, last;
    larder__cache_blocks(f->cache, s->offset, s->length, &first, &last);
    larder__cache_trace(f->cache, s->shard, first, last);
    if (read_resident(f, s, id, first, last, buf)) {
        larder__cache_count(&k->hits, 1);
        return 0;
    }
    larder__cache_trace_miss(f->cache, s->shard, first, last);
    /* all resident yet wrong or unreadable: the cache is what is wrong */
    bool suspect = larder__cache_present(f->cache, s->shard, first, last);
    return fill(f, s, id, buf, suspect, LARDER__DEMAND);
}

bool larder__fill_staged(const struct larder__fill *f, uint64_t id)
{
    struct larder__sample s;
    if (!f->cache || larder__index_sample_range(f->ix, id, &s) < 0) return false;
    uint64_t first, last;
    larder__cache_blocks(f->cache, s.offset, s.length, &first, &last);
    return larder__cache_present(f->cache, s.shard, first, last); /* no origin read left */
}

int larder__fill_stage(struct larder__fill *f, uint64_t id)
{
    return larder__fill_stage_at(f, id, LARDER__DEMAND);
}

int larder__fill_stage_at(struct larder__fill *f, uint64_t id, int priority)
{
    struct larder__sample s;
    int rc = larder__index_sample_range(f->ix, id, &s);
    if (rc < 0) return rc;
    if (!f->cache || larder__fill_staged(f, id)) return 0;
    struct larder__shard_sums sums; /* by checksum block: by pieces, nothing copied out */
    if (larder__block_sums_of(f->sums, s.shard, &sums))
        return fill(f, &s, id, NULL, false, priority);
    uint8_t *buf = malloc(s.length ? (size_t)s.length : 1);
    if (!buf) return -ENOMEM;
    rc = fill(f, &s, id, buf, false, priority);
    free(buf);
    return rc;
}

bool larder__fill_resident(const struct larder__fill *f, uint32_t shard, uint64_t offset,
                           uint64_t length)
{
    if (!f->cache || length == 0) return false;
    uint64_t first, last;
    larder__cache_blocks(f->cache, offset, length, &first, &last);
    return larder__cache_resident(f->cache, shard, first, last);
}
