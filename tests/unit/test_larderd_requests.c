/*
 * test_larderd_requests.c - the daemon's request handler
 * (src/larderd/requests.c) without sockets: frames handed to handle() on a
 * connection of a daemon of the test's own, the answers read back from the
 * connection's output queue.  The handshake, who may OPEN, READ staged by
 * the workers (the bytes checked against the shard; each READ counted as a
 * hit, a miss or an error), STAT, a peer's PROVE.
 */
#include "auth.h"
#include "daemon_fixture.h"
#include "fill.h"
#include "test.h"

#include <unistd.h>

static void send_open(struct connection *c, uint64_t request, const char *url)
{
    uint8_t frame[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_URL];
    int n = larder__wire_encode_open(frame, sizeof frame, request, url);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
}

static struct larder__opened open_ok(struct connection *c, const char *url)
{
    send_open(c, 7, url);
    struct output *o = fixture_answer(c, LARDER__OPENED);
    struct larder__opened opened;
    CHECK_EQ(larder__wire_opened(o->bytes + LARDER__WIRE_HEADER,
                                 (uint32_t)(o->length - LARDER__WIRE_HEADER), &opened),
             0);
    free(o);
    return opened;
}

/* handle() of a READ: false when the frame itself is malformed. */
static bool send_read(struct connection *c, const struct larder__opened *dataset, uint32_t shard,
                      uint64_t offset, uint64_t length)
{
    struct larder__read r = {.id_low = dataset->id_low,
                             .id_high = dataset->id_high,
                             .shard = shard,
                             .offset = offset,
                             .length = length};
    uint8_t frame[LARDER__WIRE_HEADER + 64];
    int n = larder__wire_encode_read(frame, sizeof frame, 9, &r);
    CHECK(n > 0);
    return fixture_send(c, frame, (size_t)n);
}

TEST(larderd_requests_hello)
{
    struct larderd d;
    fixture_daemon(&d, 2);
    struct connection *c = fixture_connection(&d, false);
    uint8_t stat[LARDER__WIRE_HEADER];
    larder__wire_encode_header(stat, sizeof stat, LARDER__STAT, 0, 3);
    CHECK(!fixture_send(c, stat, sizeof stat)); /* nothing before HELLO */
    CHECK(connection_take_output(c) == NULL);

    struct larder__hello h = {.role = LARDER__ROLE_READER};
    uint8_t frame[128];
    int n = larder__wire_encode_hello(frame, sizeof frame, 1, &h);
    CHECK(fixture_send(c, frame, (size_t)n));
    struct output *o = fixture_answer(c, LARDER__WELCOME);
    struct larder__welcome w;
    CHECK_EQ(larder__wire_welcome(o->bytes + LARDER__WIRE_HEADER,
                                  (uint32_t)(o->length - LARDER__WIRE_HEADER), &w),
             0);
    CHECK_EQ(w.auth, LARDER__AUTH_NONE);
    CHECK(w.name_length == 5 && memcmp(w.name, "local", 5) == 0);
    free(o);
    CHECK(!fixture_send(c, frame, (size_t)n)); /* a second HELLO */
    CHECK_EQ(c->charged, 0);                   /* what was taken is uncharged */
    connection_release(c);

    /* a reader's HELLO over TCP: refused, and the connection closes */
    c = fixture_connection(&d, true);
    CHECK(fixture_send(c, frame, (size_t)n));
    char message[256];
    CHECK_EQ(fixture_error(c, message, sizeof message), LARDER_EDENIED);
    CHECK(strcmp(message, "readers connect over the node's Unix socket, not TCP") == 0);
    CHECK(c->closing);
    connection_release(c);

    /* a peer that owns by other chunks (0: a daemon from before striping, or
     * 1 MiB) would route chunks elsewhere: refused, saying why */
    for (uint32_t other = 0; other <= 1u << 20; other += 1u << 20) {
        c = fixture_connection(&d, true);
        struct larder__hello ph = {.role = LARDER__ROLE_PEER, .owner_chunk = other};
        n = larder__wire_encode_hello(frame, sizeof frame, 1, &ph);
        CHECK(fixture_send(c, frame, (size_t)n));
        CHECK_EQ(fixture_error(c, message, sizeof message), LARDER_EPROTOCOL);
        CHECK(strstr(message, "chunks of 4194304 bytes") != NULL);
        CHECK(c->closing);
        connection_release(c);
    }
    /* the same chunks (4 MiB): welcomed */
    c = fixture_connection(&d, true);
    struct larder__hello same = {.role = LARDER__ROLE_PEER, .owner_chunk = 4u << 20};
    n = larder__wire_encode_hello(frame, sizeof frame, 1, &same);
    CHECK(fixture_send(c, frame, (size_t)n));
    free(fixture_answer(c, LARDER__WELCOME));
    connection_release(c);
    larderd_free(&d);
}

TEST(larderd_requests_open_read_stat)
{
    const char *index = fixture_dataset("ds", 30, 16 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct connection *c = fixture_connection(&d, false);
    fixture_hello(c, false);
    struct larder__opened opened = open_ok(c, index);
    CHECK(opened.num_shards >= 2);
    CHECK_EQ(d.num_datasets, 1);

    /* a READ of shard 1, bytes 100..1100: staged by a worker, sent from the cache file */
    CHECK(send_read(c, &opened, 1, 100, 1000));
    fixture_wait_jobs(c);
    struct output *o = fixture_answer(c, LARDER__DATA);
    uint8_t got[1000];
    if (o->file >= 0) {
        CHECK_EQ(o->file_length, 1000);
        CHECK_EQ(pread(o->file, got, 1000, o->file_offset), 1000);
    } else {
        CHECK_EQ(o->length, LARDER__WIRE_HEADER + 1000);
        memcpy(got, o->bytes + LARDER__WIRE_HEADER, 1000);
    }
    free(o);
    larder_dataset *check;
    CHECK_EQ(larder_open(&check, index, NULL), 0);
    uint8_t want[1000];
    CHECK_EQ(larder__dataset_read_range(check, 1, 100, 1000, want), 0);
    larder_close(check);
    CHECK(memcmp(got, want, 1000) == 0);
    CHECK_EQ(c->charged, 0);
    const struct served *served = &d.datasets[0].served;
    CHECK(served->misses == 1 && served->hits == 0 && served->bytes == 1000);
    /* the same bytes again: from the cache, with no fill, a hit */
    CHECK(send_read(c, &opened, 1, 100, 1000));
    fixture_wait_jobs(c);
    free(fixture_answer(c, LARDER__DATA));
    CHECK(served->misses == 1 && served->hits == 1 && served->bytes == 2000);
    CHECK(served->peer_reads == 0 && served->borrowed == 0);

    /* past the shard's end: an ERROR, the connection stays */
    CHECK(send_read(c, &opened, 1, 0, 1u << 20));
    fixture_wait_jobs(c);
    char message[256];
    CHECK(fixture_error(c, message, sizeof message) < 0);
    CHECK(served->errors == 1 && served->hits == 1 && served->misses == 1);
    uint64_t answered = 0;
    for (int b = 0; b <= READ_LATENCY_BUCKETS; b++)
        answered += served->latency[b];
    CHECK_EQ(answered, 3); /* every READ answered is in the histogram */

    uint8_t stat[LARDER__WIRE_HEADER];
    larder__wire_encode_header(stat, sizeof stat, LARDER__STAT, 0, 3);
    CHECK(fixture_send(c, stat, sizeof stat));
    o = fixture_answer(c, LARDER__STATS);
    larder_dataset_info info;
    larder_dataset_info_get(d.datasets[0].dataset, &info);
    char *text = strndup((char *)o->bytes + LARDER__WIRE_HEADER, o->length - LARDER__WIRE_HEADER);
    CHECK(strstr(text, info.dataset_id) != NULL);
    CHECK(strncmp(text, "{\"self\": \"\", \"members\": 0, \"datasets\": [", 40) == 0);
    CHECK(strstr(text, "\"hits\": 1, \"misses\": 1, \"borrowed_reads\": 0, \"read_errors\": 1, "
                       "\"served_bytes\": 2000, ") != NULL);
    free(text);
    free(o);

    /* another connection has not opened it */
    struct connection *other = fixture_connection(&d, false);
    fixture_hello(other, false);
    CHECK(send_read(other, &opened, 0, 0, 10));
    CHECK_EQ(fixture_error(other, message, sizeof message), LARDER_ENOTFOUND);
    CHECK(strcmp(message, "dataset not opened on this connection") == 0);
    /* a READ longer than any frame may carry: malformed, the connection closes */
    CHECK(!send_read(other, &opened, 0, 0, 1u << 30));
    connection_release(other);
    connection_release(c);
    larderd_free(&d);
}

/* A STAGE READ of bytes 100..1100 of shard 1 on a daemon whose cache keeps
 * at most `capacity` bytes (0: no limit; a cache that evicts sends no
 * zero-copy answers, but stages for STAGE all the same): an empty DATA,
 * and the bytes are in the cache after it.  A peer may not ask it. */
static void stage_round(const char *index, const char *cache, uint64_t capacity)
{
    struct larderd d;
    larderd_init(&d);
    say_quietly(true);
    d.config.cache_dir = cache;
    d.config.cache_capacity = capacity;
    d.config.jobs = 2;
    CHECK_EQ(larderd_start(&d), 0);
    struct connection *c = fixture_connection(&d, false);
    fixture_hello(c, false);
    struct larder__opened opened = open_ok(c, index);
    struct larder__fill *fill = larder__dataset_fill(d.datasets[0].dataset);
    CHECK(!larder__fill_resident(fill, 1, 100, 1000));
    struct larder__read r = {.id_low = opened.id_low,
                             .id_high = opened.id_high,
                             .shard = 1,
                             .flags = LARDER__READ_STAGE,
                             .offset = 100,
                             .length = 1000};
    uint8_t frame[LARDER__WIRE_HEADER + 64];
    int n = larder__wire_encode_read(frame, sizeof frame, 9, &r);
    CHECK(fixture_send(c, frame, (size_t)n));
    fixture_wait_jobs(c);
    struct output *o = fixture_answer(c, LARDER__DATA);
    CHECK_EQ(o->length, LARDER__WIRE_HEADER);  /* the header alone, */
    CHECK_EQ(larder__le32(o->bytes + 8), 0);   /* of an empty DATA, */
    CHECK(o->file < 0 && o->file_length == 0); /* and no bytes of the file behind it */
    CHECK_EQ(larder__le64(o->bytes + 16), 9);
    free(o);
    CHECK(larder__fill_resident(fill, 1, 100, 1000)); /* staged */
    /* what the cache holds is the shard's bytes */
    larder_dataset *check;
    CHECK_EQ(larder_open(&check, index, NULL), 0);
    uint8_t want[1000], got[1000];
    CHECK_EQ(larder__dataset_read_range(check, 1, 100, 1000, want), 0);
    larder_close(check);
    CHECK_EQ(larder__dataset_read_range(d.datasets[0].dataset, 1, 100, 1000, got), 0);
    CHECK(memcmp(got, want, sizeof want) == 0);
    const struct served *served = &d.datasets[0].served;
    CHECK(served->misses == 1 && served->errors == 0);
    CHECK(served->staged_reads == 1 && served->staged_bytes == 1000 && served->bytes == 1000);

    /* a peer's STAGE: an ERROR, and the connection stays */
    struct connection *peer = fixture_connection(&d, true);
    fixture_hello(peer, true);
    CHECK(fixture_send(peer, frame, (size_t)n));
    char message[256];
    CHECK_EQ(fixture_error(peer, message, sizeof message), LARDER_EUSAGE);
    CHECK(strstr(message, "STAGE") != NULL);
    connection_release(peer);
    connection_release(c);
    larderd_free(&d);
}

/* STAGE (docs/protocol.md, READ): a local reader that reads the cache
 * itself asks for bytes to be staged there, not sent. */
TEST(larderd_requests_stage_answers_no_bytes)
{
    const char *index = fixture_dataset("ds", 30, 16 * 1024);
    static char unlimited[4096], evicting[4096];
    snprintf(unlimited, sizeof unlimited, "%s", test_path("cache"));
    snprintf(evicting, sizeof evicting, "%s", test_path("cache-evicting"));
    stage_round(index, unlimited, 0);
    stage_round(index, evicting, UINT64_C(1) << 30);
}

TEST(larderd_requests_who_may_open)
{
    const char *index = fixture_dataset("ds", 10, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 2);
    /* another uid, no --allow: no OPEN at all */
    struct connection *c = fixture_connection(&d, false);
    c->uid = d.config.uid + 1;
    c->own_user = false;
    fixture_hello(c, false);
    send_open(c, 2, index);
    char message[256];
    CHECK_EQ(fixture_error(c, message, sizeof message), LARDER_EDENIED);
    CHECK(strstr(message, "may not open indexes on this daemon") != NULL);
    CHECK_EQ(d.num_datasets, 0);
    /* with --allow over the test's directory, it may */
    d.config.allow[0] = test_dir();
    d.config.num_allow = 1;
    open_ok(c, index);
    CHECK_EQ(d.num_datasets, 1);
    connection_release(c);

    /* a peer without a cluster secret reads only what is open here */
    struct connection *p = fixture_connection(&d, true);
    fixture_hello(p, true);
    open_ok(p, index);
    send_open(p, 3, test_path("ds/other.larder"));
    CHECK_EQ(fixture_error(p, message, sizeof message), LARDER_ENOTFOUND);
    CHECK(strstr(message, "is not open on this node") != NULL);
    connection_release(p);
    larderd_free(&d);
}

/* An index marked unchecked (flag 4: no checksums) is opened only for a
 * local client of the daemon's own uid: anyone else, even under --allow,
 * and peers are refused, also once it is open. */
TEST(larderd_requests_unchecked_index_only_for_own_user)
{
    test_write_file(test_path("tree/a.bin"), "abcdefgh", 8);
    larder_index_files_options io = {.struct_size = sizeof io, .listing_only = 1};
    const char *index = test_path("listed.larder");
    CHECK_EQ(larder_index_files(test_path("tree"), index, &io, NULL), 0);
    struct larderd d;
    fixture_daemon(&d, 2);
    d.config.allow[0] = test_dir();
    d.config.num_allow = 1;
    char message[256];
    /* another uid, allowed to open what lies under the test's directory */
    struct connection *other = fixture_connection(&d, false);
    other->uid = d.config.uid + 1;
    other->own_user = false;
    fixture_hello(other, false);
    send_open(other, 2, index);
    CHECK_EQ(fixture_error(other, message, sizeof message), LARDER_EDENIED);
    CHECK(strstr(message, "unchecked") != NULL);
    CHECK_EQ(d.num_datasets, 0);
    /* the daemon's own user: opened, and its bytes read */
    struct connection *own = fixture_connection(&d, false);
    fixture_hello(own, false);
    struct larder__opened opened = open_ok(own, index);
    CHECK_EQ(d.num_datasets, 1);
    CHECK(send_read(own, &opened, 0, 0, 8));
    fixture_wait_jobs(own);
    struct output *o = fixture_answer(own, LARDER__DATA);
    uint8_t got[8];
    if (o->file >= 0)
        CHECK_EQ(pread(o->file, got, 8, o->file_offset), 8);
    else
        memcpy(got, o->bytes + LARDER__WIRE_HEADER, 8);
    CHECK(memcmp(got, "abcdefgh", 8) == 0);
    free(o);
    /* open now, it is still refused to the other user and to a peer */
    send_open(other, 3, index);
    CHECK_EQ(fixture_error(other, message, sizeof message), LARDER_EDENIED);
    struct connection *p = fixture_connection(&d, true);
    fixture_hello(p, true);
    send_open(p, 4, index);
    CHECK_EQ(fixture_error(p, message, sizeof message), LARDER_EDENIED);
    connection_release(p);
    connection_release(other);
    connection_release(own);
    larderd_free(&d);
}

TEST(larderd_requests_peer_proves_secret)
{
    struct larderd d;
    fixture_daemon(&d, 2);
    d.secret = strdup("cluster-secret");
    struct connection *c = fixture_connection(&d, true);
    struct larder__hello h = {.role = LARDER__ROLE_PEER, .owner_chunk = 4u << 20};
    memset(h.nonce, 0x5a, sizeof h.nonce);
    uint8_t frame[256];
    int n = larder__wire_encode_hello(frame, sizeof frame, 1, &h);
    CHECK(fixture_send(c, frame, (size_t)n));
    struct output *o = fixture_answer(c, LARDER__WELCOME);
    struct larder__welcome w;
    CHECK_EQ(larder__wire_welcome(o->bytes + LARDER__WIRE_HEADER,
                                  (uint32_t)(o->length - LARDER__WIRE_HEADER), &w),
             0);
    CHECK_EQ(w.auth, LARDER__AUTH_HMAC);
    uint8_t expected[LARDER__WIRE_PROOF];
    CHECK_EQ(larder__auth_proof(d.secret, strlen(d.secret), LARDER__AUTH_SERVER_LABEL, h.nonce,
                                w.nonce, expected),
             0);
    CHECK(memcmp(expected, w.proof, LARDER__WIRE_PROOF) == 0); /* the daemon knows the secret */
    struct larder__prove prove;
    CHECK_EQ(larder__auth_proof(d.secret, strlen(d.secret), LARDER__AUTH_CLIENT_LABEL, w.nonce,
                                h.nonce, prove.proof),
             0);
    free(o);

    /* a wrong proof: refused */
    struct connection *bad = fixture_connection(&d, true);
    fixture_hello(bad, true);
    struct larder__prove wrong = prove;
    wrong.proof[0] ^= 1;
    n = larder__wire_encode_prove(frame, sizeof frame, 2, &wrong);
    CHECK(fixture_send(bad, frame, (size_t)n));
    char message[256];
    CHECK_EQ(fixture_error(bad, message, sizeof message), LARDER_EDENIED);
    CHECK(strcmp(message, "wrong cluster secret") == 0);
    CHECK(bad->closing && !bad->proven);
    connection_release(bad);

    /* anything but PROVE first: refused */
    struct connection *early = fixture_connection(&d, true);
    fixture_hello(early, true);
    uint8_t stat[LARDER__WIRE_HEADER];
    larder__wire_encode_header(stat, sizeof stat, LARDER__STAT, 0, 3);
    CHECK(fixture_send(early, stat, sizeof stat));
    CHECK_EQ(fixture_error(early, message, sizeof message), LARDER_EDENIED);
    CHECK(strcmp(message, "prove the cluster secret first (PROVE)") == 0);
    connection_release(early);

    /* the right proof: proven, nothing answered, STAT served */
    n = larder__wire_encode_prove(frame, sizeof frame, 2, &prove);
    CHECK(fixture_send(c, frame, (size_t)n));
    CHECK(c->proven && !c->closing);
    CHECK(connection_take_output(c) == NULL);
    CHECK(fixture_send(c, stat, sizeof stat));
    free(fixture_answer(c, LARDER__STATS));
    connection_release(c);
    larderd_free(&d);
}
