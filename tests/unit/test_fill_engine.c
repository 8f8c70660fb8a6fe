/*
 * test_fill_engine.c - the read engine (fill.h) against a fake source: a
 * shard held in memory that can fail, come up short, stall, or hand out
 * wrong bytes (as a peer or as the origin).  The engine must name the
 * sample on every error, keep nothing it did not check, go back to the
 * origin itself once when bytes are wrong, fetch once for many readers,
 * and count where bytes came from.  Expected bytes are the shard files
 * the packer wrote from data the test made.
 */
#include "dataset.h"
#include "fill.h"
#include "index.h"
#include "larder_pack.h"
#include "source.h"
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

enum fault { NONE, FAIL, SHORT, WRONG, WRONG_UNLESS_ORIGIN };

/* One shard in memory, served through struct larder__source_ops. */
struct fake {
    struct larder__source base;
    uint8_t *bytes;
    size_t size;
    enum fault fault;
    int from;         /* what a good read answers: LARDER__FROM_ORIGIN or _PEER */
    int delay_ms;     /* every read stalls this long */
    int reads;        /* read calls */
    size_t extents;   /* extents in the last read */
    unsigned flags;   /* of the last read */
    uint64_t low, hi; /* lowest offset and highest end asked for */
    pthread_mutex_t lock;
};

static int fake_size(struct larder__source *s, uint64_t *size)
{
    *size = ((struct fake *)s)->size;
    return 0;
}

static int fake_read(struct larder__source *s, const struct larder__extent *e, size_t n,
                     unsigned flags)
{
    struct fake *f = (struct fake *)s;
    if (f->delay_ms) nanosleep(&(struct timespec){0, f->delay_ms * 1000000L}, NULL);
    pthread_mutex_lock(&f->lock);
    f->reads++;
    f->flags = flags;
    f->extents = n;
    enum fault fault = f->fault;
    pthread_mutex_unlock(&f->lock);
    for (size_t i = 0; i < n; i++) {
        if (fault == FAIL) return larder__fail(-EIO, "fake: read failed");
        if (e[i].offset + e[i].length > f->size || fault == SHORT)
            return larder__fail(LARDER_ETRUNCATED, "fake: object ends early");
        memcpy(e[i].buf, f->bytes + e[i].offset, e[i].length);
        pthread_mutex_lock(&f->lock);
        if (e[i].offset < f->low) f->low = e[i].offset;
        if (e[i].offset + e[i].length > f->hi) f->hi = e[i].offset + e[i].length;
        pthread_mutex_unlock(&f->lock);
        bool lie =
            fault == WRONG || (fault == WRONG_UNLESS_ORIGIN && !(flags & LARDER__READ_ORIGIN_ONLY));
        if (lie && e[i].length) ((uint8_t *)e[i].buf)[e[i].length / 2] ^= 0x5a;
    }
    return f->from;
}

static void fake_destroy(struct larder__source *s)
{
    (void)s; /* the test owns its fakes */
}

static const struct larder__source_ops fake_ops = {"fake", fake_size, fake_read, NULL,
                                                   fake_destroy};

/* The packed dataset: shard 0's bytes in the fake, and an engine over it. */
static struct {
    larder_dataset *d;
    const struct larder__index *ix;
    struct larder__cache *cache;
    struct larder__fill *fill;
    struct fake fake;
} t;

static int open_fake(void *context, uint32_t shard, struct larder__source **out)
{
    (void)context;
    CHECK_EQ(shard, 0);
    *out = &t.fake.base;
    return 0;
}

static void setup(bool cached, bool verify)
{
    static int round; /* a test may set up more than once: fresh directories each time */
    char path[4096], packed[64], cache[64];
    round++;
    snprintf(packed, sizeof packed, "packed%d", round);
    snprintf(cache, sizeof cache, "cache%d", round);
    for (int i = 0; i < 20; i++) {
        static uint8_t data[30000];
        size_t size = (size_t)(i * 1543 % 25000) + 100;
        test_fill_random(data, size, (uint64_t)i + 11);
        snprintf(path, sizeof path, "%s/src/s%03d.bin", test_dir(), i);
        test_write_file(path, data, size);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = 1 << 30,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path(packed), &o, NULL), 0);
    snprintf(path, sizeof path, "%s/%s/index.larder", test_dir(), packed);
    CHECK_EQ(larder_open(&t.d, path, NULL), 0);
    t.ix = larder__dataset_index(t.d);
    CHECK_EQ(t.ix->num_shards, 1);
    larder_sample_info s;
    CHECK_EQ(larder_sample_info_get(t.d, 0, &s), 0);
    snprintf(path, sizeof path, "%s/%s/%s", test_dir(), packed, s.shard_name);
    memset(&t.fake, 0, sizeof t.fake);
    t.fake.base = (struct larder__source){&fake_ops, "fake shard"};
    t.fake.bytes = test_read_file(path, &t.fake.size);
    t.fake.low = UINT64_MAX;
    pthread_mutex_init(&t.fake.lock, NULL);
    t.cache = NULL;
    if (cached) CHECK_EQ(larder__cache_open(&t.cache, test_path(cache), t.ix, 4096, 0, 0), 0);
    struct larder__fill_config c = {
        .ix = t.ix, .cache = t.cache, .verify = verify, .inflight = 4, .open_source = open_fake};
    CHECK_EQ(larder__fill_new(&t.fill, &c), 0);
}

static void teardown(void)
{
    larder__fill_free(t.fill);
    larder__cache_close(t.cache);
    larder_close(t.d);
    free(t.fake.bytes);
    pthread_mutex_destroy(&t.fake.lock);
}

/* Read sample `id` through the engine into a fresh buffer; *rc gets the result. */
static uint8_t *read_sample(uint64_t id, int *rc, struct larder__sample *s)
{
    CHECK_EQ(larder__index_sample_range(t.ix, id, s), 0);
    uint8_t *buf = malloc(s->length);
    *rc = larder__fill_sample(t.fill, s, id, buf);
    return buf;
}

static bool is_sample(const struct larder__sample *s, const uint8_t *buf)
{
    return memcmp(buf, t.fake.bytes + s->offset, s->length) == 0;
}

TEST(fill_engine_source_errors_name_the_sample_and_keep_nothing)
{
    setup(true, true);
    struct larder__sample s;
    int rc;
    enum fault faults[] = {FAIL, SHORT};
    int codes[] = {-EIO, LARDER_ETRUNCATED};
    for (int k = 0; k < 2; k++) {
        t.fake.fault = faults[k];
        free(read_sample(3, &rc, &s));
        CHECK_EQ(rc, codes[k]);
        CHECK(strstr(larder_errmsg(), "sample 3 ('s003')") != NULL);
        CHECK(!larder__fill_staged(t.fill, 3));
    }
    t.fake.fault = NONE;
    uint8_t *buf = read_sample(3, &rc, &s);
    CHECK_EQ(rc, 0);
    CHECK(is_sample(&s, buf));
    CHECK(larder__fill_staged(t.fill, 3));
    free(buf);
    teardown();
}

TEST(fill_engine_wrong_bytes_from_a_peer_go_back_to_the_origin_once)
{
    setup(true, true);
    t.fake.fault = WRONG_UNLESS_ORIGIN;
    t.fake.from = LARDER__FROM_PEER;
    struct larder__sample s;
    int rc;
    uint8_t *buf = read_sample(7, &rc, &s);
    CHECK_EQ(rc, 0);
    CHECK(is_sample(&s, buf));
    CHECK(t.fake.flags & LARDER__READ_ORIGIN_ONLY); /* the second read skipped peers */
    struct larder__cache_counters *k = larder__fill_counters(t.fill);
    CHECK_EQ(k->refetches, 1);
    /* kept, and served from the cache from now on */
    int reads = t.fake.reads;
    free(buf);
    buf = read_sample(7, &rc, &s);
    CHECK_EQ(rc, 0);
    CHECK(is_sample(&s, buf));
    CHECK_EQ(t.fake.reads, reads);
    CHECK_EQ(k->hits, 1);
    free(buf);
    teardown();
}

TEST(fill_engine_wrong_bytes_everywhere_are_an_error_and_never_kept)
{
    setup(true, true);
    t.fake.fault = WRONG;
    struct larder__sample s;
    int rc;
    free(read_sample(5, &rc, &s));
    CHECK_EQ(rc, LARDER_ECHECKSUM);
    CHECK(strstr(larder_errmsg(), "sample 5 ('s005')") != NULL);
    CHECK(!larder__fill_staged(t.fill, 5));
    CHECK_EQ(t.fake.reads, 2); /* the first read, and one from the origin itself */
    /* a raw range inside the sample is refused just the same */
    uint8_t small[16];
    CHECK_EQ(larder__fill_range(t.fill, 0, s.offset + 1, sizeof small, small), LARDER_ECHECKSUM);
    teardown();
}

struct racer {
    uint64_t id;
    int rc;
    bool right;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    struct larder__sample s;
    uint8_t *buf = read_sample(r->id, &r->rc, &s);
    r->right = r->rc == 0 && is_sample(&s, buf);
    free(buf);
    return NULL;
}

TEST(fill_engine_one_fetch_for_many_readers_of_a_slow_source)
{
    setup(true, true);
    t.fake.delay_ms = 150;
    struct racer r[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct racer){.id = 9};
        CHECK_EQ(pthread_create(&threads[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        CHECK_EQ(r[i].rc, 0);
        CHECK(r[i].right);
    }
    CHECK_EQ(t.fake.reads, 1); /* the others waited on the fill lock and found it resident */
    struct larder__cache_counters *k = larder__fill_counters(t.fill);
    CHECK_EQ(k->origin_requests, 1);
    CHECK_EQ(k->misses + k->hits, 4);
    teardown();
}

TEST(fill_engine_counts_borrowed_bytes_as_a_peer_s)
{
    setup(true, true);
    t.fake.from = LARDER__FROM_PEER;
    struct larder__sample s;
    int rc;
    uint8_t *buf = read_sample(2, &rc, &s);
    CHECK_EQ(rc, 0);
    CHECK(is_sample(&s, buf));
    struct larder__cache_counters *k = larder__fill_counters(t.fill);
    CHECK_EQ(k->peer_requests, 1);
    CHECK(k->peer_bytes >= s.length);
    CHECK_EQ(k->origin_requests, 0);
    free(buf);
    teardown();
}

TEST(fill_engine_raw_ranges_read_and_check_whole_samples)
{
    setup(true, true);
    struct larder__sample a, b;
    CHECK_EQ(larder__index_sample_range(t.ix, 4, &a), 0);
    CHECK_EQ(larder__index_sample_range(t.ix, 5, &b), 0);
    CHECK_EQ(a.offset + a.length <= b.offset, true);
    /* from the middle of sample 4 to the middle of sample 5 */
    uint64_t lo = a.offset + a.length / 2, hi = b.offset + b.length / 2;
    uint8_t *buf = malloc(hi - lo);
    CHECK_EQ(larder__fill_range(t.fill, 0, lo, hi - lo, buf), 0);
    CHECK(memcmp(buf, t.fake.bytes + lo, hi - lo) == 0);
    CHECK(t.fake.low <= a.offset);
    CHECK(t.fake.hi >= b.offset + b.length);
    CHECK(larder__fill_staged(t.fill, 4) && larder__fill_staged(t.fill, 5));
    /* outside the shard: refused before any read */
    int reads = t.fake.reads;
    CHECK_EQ(larder__fill_range(t.fill, 0, t.fake.size - 1, 2, buf), LARDER_EUSAGE);
    CHECK_EQ(larder__fill_range(t.fill, 1, 0, 1, buf), LARDER_EUSAGE);
    CHECK_EQ(t.fake.reads, reads);
    free(buf);
    teardown();
}

/* Whether all of buf[0, length) is `byte`. */
static bool all_are(const uint8_t *buf, size_t length, uint8_t byte)
{
    for (size_t i = 0; i < length; i++)
        if (buf[i] != byte) return false;
    return true;
}

TEST(fill_engine_reads_into_an_offered_span)
{
    setup(true, true);
    struct larder__sample a, b;
    CHECK_EQ(larder__index_sample_range(t.ix, 4, &a), 0);
    CHECK_EQ(larder__index_sample_range(t.ix, 5, &b), 0);
    uint64_t lo = a.offset + a.length / 2, hi = b.offset + b.length / 2, span_lo, span_hi;
    CHECK_EQ(larder__fill_range_scope(t.fill, 0, lo, hi - lo, &span_lo, &span_hi), 0);
    CHECK(span_lo <= lo && span_hi >= hi);
    /* a buffer of the span and 4 KiB either side: the fill reads into its place */
    uint64_t room_lo = span_lo >= 4096 ? span_lo - 4096 : 0, room_hi = span_hi + 4096;
    uint8_t *room = malloc(room_hi - room_lo), *buf = malloc(hi - lo);
    memset(room, 0xEE, room_hi - room_lo);
    larder__fill_offer_span(0, room_lo, room_hi - room_lo, room);
    CHECK_EQ(larder__fill_range(t.fill, 0, lo, hi - lo, buf), 0);
    CHECK(memcmp(buf, t.fake.bytes + lo, hi - lo) == 0);
    CHECK(memcmp(room + (span_lo - room_lo), t.fake.bytes + span_lo, span_hi - span_lo) == 0);
    CHECK(all_are(room, span_lo - room_lo, 0xEE));
    CHECK(all_are(room + (span_hi - room_lo), room_hi - span_hi, 0xEE));
    /* an offer the span does not fit in is not used (nor kept for later) */
    struct larder__sample c;
    CHECK_EQ(larder__index_sample_range(t.ix, 7, &c), 0);
    CHECK_EQ(larder__fill_range_scope(t.fill, 0, c.offset, c.length, &span_lo, &span_hi), 0);
    uint8_t *room2 = malloc(span_hi - span_lo), *buf2 = malloc(c.length);
    memset(room2, 0xEE, span_hi - span_lo);
    larder__fill_offer_span(0, span_lo + 1, span_hi - span_lo, room2); /* a byte short */
    CHECK_EQ(larder__fill_range(t.fill, 0, c.offset, c.length, buf2), 0);
    CHECK(memcmp(buf2, t.fake.bytes + c.offset, c.length) == 0);
    CHECK(all_are(room2, span_hi - span_lo, 0xEE));
    free(room);
    free(buf);
    free(room2);
    free(buf2);
    teardown();
}

TEST(fill_engine_without_a_cache_checks_when_asked)
{
    setup(false, true);
    t.fake.fault = WRONG;
    struct larder__sample s;
    int rc;
    free(read_sample(1, &rc, &s));
    CHECK_EQ(rc, LARDER_ECHECKSUM);
    teardown();

    setup(false, false); /* unchecked: the reader asked for speed over checks */
    t.fake.fault = NONE;
    uint8_t *buf = read_sample(1, &rc, &s);
    CHECK_EQ(rc, 0);
    CHECK(is_sample(&s, buf));
    free(buf);
    /* raw ranges are checked whatever the reader asked */
    t.fake.fault = WRONG;
    uint8_t small[8];
    CHECK_EQ(larder__fill_range(t.fill, 0, s.offset, sizeof small, small), LARDER_ECHECKSUM);
    teardown();
}

TEST(fill_engine_reads_the_missing_runs_of_a_fill_at_once)
{
    setup(true, true);
    /* sample 5 staged: its blocks are present; 4's and 6's other blocks are not */
    CHECK_EQ(larder__fill_stage(t.fill, 5), 0);
    struct larder__sample a, c;
    CHECK_EQ(larder__index_sample_range(t.ix, 4, &a), 0);
    CHECK_EQ(larder__index_sample_range(t.ix, 6, &c), 0);
    int reads = t.fake.reads;
    uint64_t lo = a.offset + 1, hi = c.offset + c.length - 1;
    uint8_t *buf = malloc(hi - lo);
    CHECK_EQ(larder__fill_range(t.fill, 0, lo, hi - lo, buf), 0);
    CHECK(memcmp(buf, t.fake.bytes + lo, hi - lo) == 0);
    /* two runs of missing blocks, on either side of 5's: one vectored read */
    CHECK_EQ(t.fake.reads, reads + 1);
    CHECK_EQ(t.fake.extents, 2);
    CHECK_EQ(larder__fill_counters(t.fill)->origin_requests, 1 + 2);
    free(buf);
    teardown();
}

/* Whether any cache block holding bytes of sample s alone (none of a
 * neighbour's) is resident. */
static bool own_blocks_resident(const struct larder__sample *s)
{
    for (uint64_t b = (s->offset + 4095) / 4096; (b + 1) * 4096 <= s->offset + s->length; b++)
        if (larder__fill_resident(t.fill, 0, b * 4096, 4096)) return true;
    return false;
}

/* The owner's side of a whole-chunk borrow (borrow.c): a raw range over
 * every sample of the shard, one of them wrong at the origin, after the
 * others were staged one by one.  The range fails naming that sample and
 * keeps none of the blocks holding its bytes alone; with the byte put
 * back, the same range keeps every block. */
TEST(fill_engine_a_range_over_many_samples_keeps_nothing_of_a_bad_one)
{
    setup(true, true);
    uint64_t bad = 0;
    struct larder__sample s, b = {0};
    for (uint64_t id = 1; id + 1 < t.ix->num_samples; id++) { /* the longest with neighbours */
        CHECK_EQ(larder__index_sample_range(t.ix, id, &s), 0);
        if (s.length > b.length) bad = id, b = s;
    }
    CHECK(b.length >= 3 * 4096); /* blocks of its own */
    for (uint64_t id = 0; id < t.ix->num_samples; id++)
        if (id != bad) CHECK_EQ(larder__fill_stage(t.fill, id), 0);
    t.fake.bytes[b.offset + b.length / 2] ^= 0xff;
    struct larder__sample named;
    CHECK_EQ(larder__index_sample(t.ix, bad, &named), 0);
    int fd = -1;
    CHECK_EQ(larder__fill_stage_range(t.fill, 0, 0, t.fake.size, &fd), LARDER_ECHECKSUM);
    CHECK(strstr(larder_errmsg(), named.key) != NULL);
    CHECK(!own_blocks_resident(&b));
    uint8_t *buf = malloc(t.fake.size);
    CHECK_EQ(larder__fill_range(t.fill, 0, 0, t.fake.size, buf), LARDER_ECHECKSUM);
    CHECK(!own_blocks_resident(&b));
    CHECK(!larder__fill_staged(t.fill, bad));
    /* the byte put back: the same range keeps every block */
    t.fake.bytes[b.offset + b.length / 2] ^= 0xff;
    CHECK_EQ(larder__fill_stage_range(t.fill, 0, 0, t.fake.size, &fd), 0);
    CHECK(larder__fill_resident(t.fill, 0, 0, t.fake.size));
    CHECK_EQ(larder__fill_range(t.fill, 0, 0, t.fake.size, buf), 0);
    CHECK(memcmp(buf, t.fake.bytes, t.fake.size) == 0);
    free(buf);
    teardown();
}
