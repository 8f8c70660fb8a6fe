/*
 * test_larderd_hints.c - the daemon's hints (src/larderd/hints.c,
 * hints_pins.c) driven through handle() without sockets: a hot hint that
 * waits stages and pins every byte asked; keys pick samples (the bytes
 * expected are the fixture's sample sizes, (i * 7919 % 3000) + 100);
 * an unknown key, a malformed frame, a user who may not open and a peer
 * of a cluster without a secret are refused; pins end with their TTL; the --replicate-prefix policy
 * (hints_on_publish) replicates a matching publication to this node and
 * nothing else.
 */
#include "cache.h"
#include "daemon_fixture.h"
#include "hints.h"
#include "test.h"

#include <time.h>

static uint64_t sample_size(int i)
{
    return (uint64_t)(i * 7919 % 3000) + 100;
}

/* Send a hot HINT (wait, ttl_ms, keys) on c and return its answer. */
static struct output *hint(struct connection *c, const char *index, const char *const *keys,
                           uint32_t num_keys, uint64_t ttl_ms)
{
    struct larder__hint h = {.kind = LARDER__HINT_HOT,
                             .flags = LARDER__HINT_WAIT,
                             .ttl_ms = ttl_ms,
                             .url_length = (uint32_t)strlen(index),
                             .url = index,
                             .num_keys = num_keys,
                             .key_list = keys};
    static uint8_t frame[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_HINT];
    int n = larder__wire_encode_hint(frame, sizeof frame, 3, &h);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
    fixture_wait_jobs(c);
    return connection_take_output(c);
}

static struct larder__hinted hinted_of(struct output *o)
{
    struct larder__frame f;
    CHECK(o != NULL);
    CHECK_EQ(larder__wire_header(o->bytes, o->length, &f), 0);
    CHECK_EQ(f.type, LARDER__HINT_ANSWER);
    struct larder__hinted h;
    CHECK_EQ(larder__wire_hinted(o->bytes + LARDER__WIRE_HEADER, f.length, &h), 0);
    return h;
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

TEST(larderd_hint_hot_all_and_keys)
{
    const char *index = fixture_dataset("ds", 30, 16 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct connection *c = fixture_connection(&d, false);
    fixture_hello(c, false);

    uint64_t total = 0;
    for (int i = 0; i < 30; i++)
        total += sample_size(i);
    struct output *o = hint(c, index, NULL, 0, 60000);
    struct larder__hinted h = hinted_of(o);
    free(o);
    CHECK_EQ(h.nodes, 1);
    CHECK_EQ(h.failed, 0);
    CHECK_EQ(h.samples, 30);
    CHECK_EQ(h.bytes, total);
    CHECK(h.flags & LARDER__HINTED_DONE);
    CHECK(!(h.flags & LARDER__HINTED_PARTIAL));
    CHECK(h.staged_bytes >= total && h.pinned_bytes >= total);
    /* every byte is in the daemon's cache, and pinned */
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, false, &e, &slot), 0);
    larder_stats s;
    CHECK_EQ(larder_stats_get(e->dataset, &s), 0);
    CHECK_EQ(s.resident_bytes, s.total_bytes);
    struct larder__cache *cache = larder__dataset_cache(e->dataset);
    CHECK(larder__cache_pinned_bytes(cache) >= total);
    /* and STAT says so, per dataset, in whole blocks (what the capacity is
     * charged): every block of every shard, as the index lays them out */
    uint64_t shard_end[64] = {0}, blocks_bytes = 0;
    uint32_t block = larder__cache_block_size(cache);
    for (uint64_t i = 0; i < larder_num_samples(e->dataset); i++) {
        larder_sample_info info;
        CHECK_EQ(larder_sample_info_get(e->dataset, i, &info), 0);
        CHECK(info.shard < 64);
        if (info.offset + info.length > shard_end[info.shard])
            shard_end[info.shard] = info.offset + info.length;
    }
    for (int i = 0; i < 64; i++)
        blocks_bytes += (shard_end[i] + block - 1) / block * block;
    uint8_t stat[LARDER__WIRE_HEADER];
    larder__wire_encode_header(stat, sizeof stat, LARDER__STAT, 0, 4);
    CHECK(fixture_send(c, stat, sizeof stat));
    o = fixture_answer(c, LARDER__STATS);
    char want[64];
    snprintf(want, sizeof want, "\"pinned_bytes\": %llu,", (unsigned long long)blocks_bytes);
    CHECK(memmem(o->bytes, o->length, want, strlen(want)) != NULL);
    free(o);

    /* two keys: their two samples */
    const char *keys[] = {"s0003", "s0017"};
    o = hint(c, index, keys, 2, 60000);
    h = hinted_of(o);
    free(o);
    CHECK_EQ(h.samples, 2);
    CHECK_EQ(h.bytes, sample_size(3) + sample_size(17));

    /* the list names both hints */
    char *list = hints_list_json(&d);
    CHECK(list && strstr(list, "\"samples\": 30") && strstr(list, "\"samples\": 2"));
    CHECK(strstr(list, index));
    free(list);

    /* an unknown key: an ERROR naming it, and nothing pinned for it */
    const char *bad[] = {"s0003", "no-such-key"};
    o = hint(c, index, bad, 2, 60000);
    CHECK(o != NULL);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(o->bytes, o->length, &f), 0);
    CHECK_EQ(f.type, LARDER__ERROR);
    struct larder__error_frame err;
    CHECK_EQ(larder__wire_error(o->bytes + LARDER__WIRE_HEADER, f.length, &err), 0);
    CHECK_EQ(err.code, LARDER_ENOTFOUND);
    CHECK(memmem(err.message, err.message_length, "no-such-key", 11) != NULL);
    free(o);

    /* a malformed HINT closes the connection */
    uint8_t frame[LARDER__WIRE_HEADER + 32] = {0};
    larder__wire_encode_header(frame, sizeof frame, LARDER__HINT, 32, 9);
    frame[LARDER__WIRE_HEADER] = 9; /* no such kind */
    CHECK(!fixture_send(c, frame, sizeof frame));
    connection_release(c);
    larderd_free(&d);
}

TEST(larderd_hint_refused_to_other_users)
{
    const char *index = fixture_dataset("ds", 5, 16 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct connection *c = fixture_connection(&d, false);
    c->own_user = false; /* another uid, and no --allow: it may not OPEN, so not HINT */
    c->uid = d.config.uid + 1;
    fixture_hello(c, false);
    struct output *o = hint(c, index, NULL, 0, 60000);
    CHECK(o != NULL);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(o->bytes, o->length, &f), 0);
    CHECK_EQ(f.type, LARDER__ERROR);
    struct larder__error_frame err;
    CHECK_EQ(larder__wire_error(o->bytes + LARDER__WIRE_HEADER, f.length, &err), 0);
    CHECK_EQ(err.code, LARDER_EDENIED);
    free(o);
    /* a peer of a cluster without a secret: no hints either */
    struct connection *p = fixture_connection(&d, true);
    fixture_hello(p, true);
    o = hint(p, index, NULL, 0, 60000);
    CHECK(o != NULL);
    CHECK_EQ(larder__wire_header(o->bytes, o->length, &f), 0);
    CHECK_EQ(f.type, LARDER__ERROR);
    CHECK_EQ(larder__wire_error(o->bytes + LARDER__WIRE_HEADER, f.length, &err), 0);
    CHECK_EQ(err.code, LARDER_EDENIED);
    CHECK(memmem(err.message, err.message_length, "secret", 6) != NULL);
    free(o);
    char *list = hints_list_json(&d);
    CHECK(list && strcmp(list, "{\"hints\": []}") == 0);
    free(list);
    connection_release(p);
    connection_release(c);
    larderd_free(&d);
}

TEST(larderd_hint_ttl_releases_pins)
{
    const char *index = fixture_dataset("ds", 10, 16 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct connection *c = fixture_connection(&d, false);
    fixture_hello(c, false);
    struct output *o = hint(c, index, NULL, 0, 2000);
    struct larder__hinted h = hinted_of(o);
    free(o);
    CHECK(h.pinned_bytes > 0);
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, false, &e, &slot), 0);
    struct larder__cache *cache = larder__dataset_cache(e->dataset);
    CHECK(larder__cache_pinned_bytes(cache) > 0);
    /* past the TTL the expiry thread unpins it (polled: a loaded machine
     * may take a while to run it) */
    for (int i = 0; i < 300 && larder__cache_pinned_bytes(cache) > 0; i++)
        sleep_ms(50);
    CHECK_EQ(larder__cache_pinned_bytes(cache), 0);
    CHECK(!larder__cache_pinned(cache, 0, 0));
    char *list = hints_list_json(&d);
    CHECK(list && strcmp(list, "{\"hints\": []}") == 0);
    free(list);
    connection_release(c);
    larderd_free(&d);
}

/* Wait until the list holds `count` hints, none staging; the list's text. */
static char *wait_listed(struct larderd *d, int count)
{
    for (int spins = 0; spins < 2000; spins++) {
        char *list = hints_list_json(d);
        CHECK(list != NULL);
        int n = 0;
        for (const char *p = list; (p = strstr(p, "\"url\"")); p++)
            n++;
        if (n == count && !strstr(list, "\"staging\": true")) return list;
        free(list);
        sleep_ms(10);
    }
    CHECK(!"the hints were not staged in 20 s");
    return NULL;
}

/* Wait (20 s at most) until no hint request's thread runs: whether none does. */
static bool hint_threads_done(struct larderd *d)
{
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_lock(&d->hints->lock);
        int running = d->hints->threads;
        pthread_mutex_unlock(&d->hints->lock);
        if (running == 0) return true;
        sleep_ms(10);
    }
    return false;
}

TEST(larderd_hint_publish_policy)
{
    const char *index = fixture_dataset("ckpt", 12, 16 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    d.config.replicate[0] = "eval/=127.0.0.1:7999";        /* not this node */
    d.config.replicate[1] = "ckpt/=127.0.0.1:7001,self:1"; /* this node among others */
    d.config.num_replicate = 2;
    CHECK_EQ(larder__members_parse_list(&d.members, "127.0.0.1:7001", 7461), 0);
    d.self = 0;
    d.self_name = "127.0.0.1:7001";
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);

    hints_on_publish(&d, "other/step-1", e); /* no rule: nothing */
    char *list = hints_list_json(&d);
    CHECK(list && strcmp(list, "{\"hints\": []}") == 0);
    free(list);

    /* ckpt/ names this node (and a member that is none: the hint fails
     * there before anything is pinned, so nothing is listed) */
    hints_on_publish(&d, "ckpt/step-100", e);
    CHECK(d.hints != NULL); /* the rule matched: a hint request was started */
    CHECK(hint_threads_done(&d));
    list = hints_list_json(&d);
    CHECK(list && strcmp(list, "{\"hints\": []}") == 0);
    free(list);

    d.config.replicate[1] = "ckpt/=127.0.0.1:7001";
    hints_on_publish(&d, "ckpt/step-200", e);
    list = wait_listed(&d, 1);
    uint64_t total = 0;
    for (int i = 0; i < 12; i++)
        total += sample_size(i);
    char want[64];
    snprintf(want, sizeof want, "\"bytes\": %llu", (unsigned long long)total);
    CHECK(strstr(list, want) != NULL);
    CHECK(strstr(list, "\"samples\": 12") != NULL);
    free(list);
    larder_stats s;
    CHECK_EQ(larder_stats_get(e->dataset, &s), 0);
    CHECK_EQ(s.resident_bytes, s.total_bytes);
    larderd_free(&d);
}

TEST(larderd_hint_short_beside_long)
{
    /* a short hint of everything and a long one of one sample: when the
     * short one's time is up, the long one's blocks stay pinned and the
     * rest are released */
    const char *index = fixture_dataset("ds", 30, 8 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct connection *c = fixture_connection(&d, false);
    fixture_hello(c, false);
    free(hint(c, index, NULL, 0, 2000));
    const char *keys[] = {"s0003"};
    free(hint(c, index, keys, 1, 60000));
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, false, &e, &slot), 0);
    struct larder__cache *cache = larder__dataset_cache(e->dataset);
    uint32_t block = larder__cache_block_size(cache);
    larder_sample_info s;
    CHECK_EQ(larder_sample_info_get(e->dataset, (uint64_t)larder_find_key(e->dataset, "s0003"), &s),
             0);
    uint32_t other = s.shard == 0 ? 1 : 0; /* a shard without s0003 */
    CHECK(larder__dataset_num_shards(e->dataset) > 1);
    CHECK(larder__cache_pinned(cache, s.shard, s.offset / block));
    CHECK(larder__cache_pinned(cache, other, 0));
    for (int i = 0; i < 300 && larder__cache_pinned(cache, other, 0); i++)
        sleep_ms(50); /* the short hint's TTL runs out */
    CHECK(larder__cache_pinned(cache, s.shard, s.offset / block));
    CHECK(larder__cache_pinned(cache, s.shard, (s.offset + s.length - 1) / block));
    CHECK(!larder__cache_pinned(cache, other, 0));
    uint64_t span = ((s.offset + s.length - 1) / block - s.offset / block + 1) * block;
    CHECK(larder__cache_pinned_bytes(cache) <= span);
    char *list = hints_list_json(&d);
    CHECK(list && strstr(list, "\"samples\": 1,") && !strstr(list, "\"samples\": 30"));
    free(list);
    connection_release(c);
    larderd_free(&d);
}

/*
 * The staging order of a hot hint on member 1 of 4 (hints_pins.c,
 * queue_staging), against one computed here: jobs of one 4 MiB chunk each
 * (cut at chunk boundaries), this member's own chunks first, then those of
 * member 0 (the one before it), then 3, then 2, each in file order; with
 * every member staging, the chunks of the last two are asked first of
 * member 0 (which staged them a phase earlier), the rest of their owners.
 * Owners come from larder__owner_chunk (checked against the reference of
 * docs/protocol.md in test_cluster.c).
 */
TEST(larderd_hint_staging_order_is_staggered_by_member)
{
    const char *index = fixture_dataset("big", 12000, 8 << 20);
    struct larderd d;
    fixture_daemon(&d, 2);
    CHECK_EQ(larder__members_parse_list(&d.members,
                                        "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,"
                                        "127.0.0.1:7004",
                                        7461),
             0);
    d.self = 1;
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    struct hints *hints = hints_of(&d);
    CHECK(hints != NULL);
    hints->staging = 1 << 20; /* none may start: the whole order stays pending */
    struct hint *h;
    CHECK_EQ(hint_here(&d, e, NULL, 0, 60000, true, &h), 0);

    /* expected: (shard, chunk) by phase (1 - owner) mod 4, then file order */
    uint32_t shards = larder__dataset_num_shards(e->dataset);
    struct {
        uint32_t shard;
        uint64_t chunk;
        unsigned phase;
    } want[64];
    size_t n = 0;
    bool seen[4] = {false};
    for (unsigned phase = 0; phase < 4; phase++)
        for (uint32_t s = 0; s < shards; s++) {
            uint64_t size = 0;
            for (uint64_t i = 0; i < larder_num_samples(e->dataset); i++) {
                larder_sample_info info;
                CHECK_EQ(larder_sample_info_get(e->dataset, i, &info), 0);
                if (info.shard == s && info.offset + info.length > size)
                    size = info.offset + info.length;
            }
            for (uint64_t c = 0; c * (4 << 20) < size; c++) {
                size_t owner = larder__owner_chunk(&d.members, e->id_low, e->id_high, s, c);
                if ((1 + 4 - owner) % 4 != phase) continue;
                CHECK(n < 64);
                want[n].shard = s, want[n].chunk = c, want[n].phase = phase;
                seen[phase] = true;
                n++;
            }
        }
    CHECK(n >= 5);
    CHECK(seen[0] && (seen[2] || seen[3])); /* own chunks, and some passed on by a relay */
    size_t i = 0;
    pthread_mutex_lock(&hints->lock);
    for (const struct stage_job *j = hints->pending; j; j = j->next, i++) {
        CHECK(i < n);
        CHECK_EQ(j->shard, want[i].shard);
        CHECK_EQ(j->offset / (4 << 20), want[i].chunk);
        CHECK(j->length <= (4 << 20) && j->offset % (4 << 20) == 0);
        CHECK_EQ(j->phase, want[i].phase);
        CHECK_EQ(j->relay, want[i].phase >= 2 ? (size_t)0 : SIZE_MAX);
    }
    pthread_mutex_unlock(&hints->lock);
    CHECK_EQ(i, n);
    CHECK_EQ(hint_stage_phase(4, 1, 1), 0);
    CHECK_EQ(hint_stage_phase(4, 1, 2), 3);
    CHECK_EQ(hint_stage_phase(1, 0, 0), 0);
    hint_put(&d, h);
    larderd_free(&d);
}
