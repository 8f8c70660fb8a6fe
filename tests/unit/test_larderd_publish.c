/*
 * test_larderd_publish.c - the daemon's names (src/larderd/publish.c)
 * without sockets: PUBLISH, RESOLVE and ANNOUNCE handed to handle() on
 * connections of a daemon of the test's own.  A RESOLVE of a name not yet
 * published is parked (nothing answered, the connection busy) and
 * answered by the publication, or by the sweep once its wait is over; a
 * publication's dataset has every shard owned by its producer; who may
 * send what.
 */
#include "daemon_fixture.h"
#include "test.h"

#include "dataset.h"
#include "publish.h"

#include <errno.h>

#include <unistd.h>

static void send_publish(struct connection *c, const char *name, const char *index,
                         const char *origin)
{
    struct larder__publish m = {.name_length = (uint32_t)strlen(name),
                                .name = name,
                                .index_length = (uint32_t)strlen(index),
                                .index = index,
                                .origin_length = origin ? (uint32_t)strlen(origin) : 0,
                                .origin = origin};
    uint8_t frame[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_NAMES_FRAME];
    int n = larder__wire_encode_publish(frame, sizeof frame, 1, &m);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
}

static void send_resolve(struct connection *c, const char *name, uint32_t wait_ms)
{
    struct larder__resolve q = {
        .wait_ms = wait_ms, .name_length = (uint32_t)strlen(name), .name = name};
    uint8_t frame[LARDER__WIRE_HEADER + 8 + LARDER__WIRE_MAX_PUBLICATION];
    int n = larder__wire_encode_resolve(frame, sizeof frame, 2, &q);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
}

static void send_announce(struct connection *c, const char *name, const char *producer,
                          const char *location, const char *origin, uint64_t id_low,
                          uint64_t id_high)
{
    struct larder__publication m = {.id_low = id_low,
                                    .id_high = id_high,
                                    .flags = origin ? LARDER__PUBLISHED_ORIGIN : 0,
                                    .name_length = (uint32_t)strlen(name),
                                    .name = name,
                                    .producer_length = (uint32_t)strlen(producer),
                                    .producer = producer,
                                    .location_length = (uint32_t)strlen(location),
                                    .location = location,
                                    .origin_length = origin ? (uint32_t)strlen(origin) : 0,
                                    .origin = origin};
    uint8_t frame[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_NAMES_FRAME];
    int n = larder__wire_encode_publication(frame, sizeof frame, LARDER__ANNOUNCE, 3, &m);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
}

/* The next answer on c, a RESOLVED: its location is `location`. */
static void resolved(struct connection *c, const char *location)
{
    struct output *o = fixture_answer(c, LARDER__RESOLVED);
    struct larder__publication m;
    CHECK_EQ(larder__wire_publication(LARDER__RESOLVED, o->bytes + LARDER__WIRE_HEADER,
                                      (uint32_t)(o->length - LARDER__WIRE_HEADER), &m),
             0);
    CHECK_EQ(m.location_length, strlen(location));
    CHECK(memcmp(m.location, location, m.location_length) == 0);
    free(o);
}

/* RESOLVE `name` on c, unknown here: answered with an ERROR once the
 * members were asked (none answers), the sweep running meanwhile. */
static void unknown(struct larderd *d, struct connection *c, const char *name)
{
    send_resolve(c, name, 0);
    struct output *answer = connection_take_output(c);
    for (int i = 0; i < 500 && !answer; i++) {
        usleep(10000);
        publications_sweep(d, now_ms());
        answer = connection_take_output(c);
    }
    CHECK(answer != NULL);
    CHECK_EQ(answer->bytes[5], LARDER__ERROR);
    free(answer);
}

/* Whether d has the dataset at url open. */
static bool open_here(struct larderd *d, const char *url)
{
    int slot;
    pthread_mutex_lock(&d->lock);
    bool open = datasets_find_url(d, url, &slot) != NULL;
    pthread_mutex_unlock(&d->lock);
    return open;
}

static int jobs_of(struct connection *c)
{
    pthread_mutex_lock(&c->lock);
    int jobs = c->jobs;
    pthread_mutex_unlock(&c->lock);
    return jobs;
}

TEST(larderd_publish_waiters)
{
    struct larderd d;
    fixture_daemon(&d, 2);
    char index[4096];
    snprintf(index, sizeof index, "%s", fixture_dataset("ckpt", 20, 8000));
    struct connection *reader = fixture_connection(&d, false),
                      *waiter = fixture_connection(&d, false),
                      *late = fixture_connection(&d, false);
    fixture_hello(reader, false);
    fixture_hello(waiter, false);
    fixture_hello(late, false);

    /* parked: no answer, the connection busy (the idle sweep leaves it) */
    send_resolve(waiter, "ckpt/1", 60000);
    send_resolve(late, "ckpt/never", 200);
    CHECK(connection_take_output(waiter) == NULL);
    CHECK_EQ(jobs_of(waiter), 1);
    CHECK(sweep_reason(waiter, now_ms() + 3600000) == NULL);
    publications_sweep(&d, now_ms() + 100);
    CHECK(connection_take_output(late) == NULL);

    /* the publication answers the one waiting for it */
    send_publish(reader, "ckpt/1", index, NULL);
    resolved(reader, index);
    resolved(waiter, index);
    CHECK_EQ(jobs_of(waiter), 0);
    /* known: answered at once */
    send_resolve(reader, "ckpt/1", 0);
    resolved(reader, index);
    /* the other one's wait ends at the sweep after its deadline */
    publications_sweep(&d, now_ms() + 1000);
    char message[256];
    CHECK_EQ(fixture_error(late, message, sizeof message), LARDER_ENOTFOUND);
    CHECK(strstr(message, "no publication named ckpt/never") != NULL);
    CHECK_EQ(jobs_of(late), 0);
    /* unknown, no wait, no members to ask: at once */
    send_resolve(late, "ckpt/2", 0);
    CHECK_EQ(fixture_error(late, message, sizeof message), LARDER_ENOTFOUND);
    /* once only */
    send_publish(reader, "ckpt/1", index, NULL);
    CHECK_EQ(fixture_error(reader, message, sizeof message), -EEXIST);
    CHECK(strstr(message, "already published") != NULL);

    /* the same index file rewritten as another dataset: refused, not
     * published as the dataset still open under its path */
    fixture_dataset("ckpt", 21, 8000);
    send_publish(reader, "ckpt/again", index, NULL);
    CHECK_EQ(fixture_error(reader, message, sizeof message), -EBUSY);
    CHECK(strstr(message, "rewritten") != NULL);
    send_resolve(reader, "ckpt/again", 0);
    CHECK_EQ(fixture_error(reader, message, sizeof message), LARDER_ENOTFOUND);

    /* a waiter whose client is gone is let go at the sweep */
    send_resolve(late, "ckpt/3", 60000);
    CHECK_EQ(jobs_of(late), 1);
    late->dropped = true;
    publications_sweep(&d, now_ms());
    CHECK_EQ(jobs_of(late), 0);
    CHECK(connection_take_output(late) == NULL);

    connection_release(reader);
    connection_release(waiter);
    connection_release(late);
    larderd_free(&d);
}

TEST(larderd_publish_owner_and_rules)
{
    struct larderd d;
    fixture_daemon(&d, 2);
    /* a cluster of three; this daemon is the first; nobody listens at the others */
    CHECK_EQ(larder__members_parse_list(&d.members, "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", 0), 0);
    d.self = 0;
    d.self_name = d.members.names[0];
    char index[4096], other[4096];
    snprintf(index, sizeof index, "%s", fixture_dataset("mine", 12, 6000));
    snprintf(other, sizeof other, "%s", fixture_dataset("theirs", 15, 6000));
    struct connection *reader = fixture_connection(&d, false), *peer = fixture_connection(&d, true);
    fixture_hello(reader, false);
    fixture_hello(peer, true);
    fixture_prove(peer);
    char message[256];

    /* published here: every shard is this node's */
    send_publish(reader, "mine", index, NULL);
    resolved(reader, index);
    struct dataset_entry *e = NULL;
    pthread_mutex_lock(&d.lock);
    for (int i = 0; i < d.num_datasets; i++)
        if (strcmp(d.datasets[i].url, index) == 0) e = &d.datasets[i];
    pthread_mutex_unlock(&d.lock);
    CHECK(e != NULL && e->fixed && e->fixed_owner == 0 && e->peer_url == NULL);

    /* announced by member 2, written through (its origin: `other`): once
     * fetched, the entry opened here reads every shard from member 2, at
     * the index's path there, and local readers are pointed at the origin */
    larder_dataset *ds;
    larder_open_options o = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = "", .daemon_socket = ""};
    CHECK_EQ(larder_open(&ds, other, &o), 0);
    uint64_t low, high;
    larder__dataset_id(ds, &low, &high);
    larder_close(ds);
    send_announce(peer, "theirs", "127.0.0.1:3", "/on/producer/index.larder", index, low + 1, high);
    free(fixture_answer(peer, LARDER__RESOLVED)); /* acknowledged; its fetch finds another id */
    send_announce(peer, "theirs2", "127.0.0.1:3", "/on/producer/index.larder", other, low, high);
    free(fixture_answer(peer, LARDER__RESOLVED));
    send_resolve(reader, "theirs2", 10000); /* parked until the fetch is done */
    struct output *answer = NULL;
    for (int i = 0; i < 500 && !answer; i++) {
        usleep(10000);
        answer = connection_take_output(reader);
    }
    CHECK(answer != NULL);
    CHECK_EQ(answer->bytes[5], LARDER__RESOLVED);
    free(answer);
    e = NULL;
    pthread_mutex_lock(&d.lock);
    for (int i = 0; i < d.num_datasets; i++)
        if (strcmp(d.datasets[i].url, other) == 0) e = &d.datasets[i];
    pthread_mutex_unlock(&d.lock);
    CHECK(e != NULL && e->fixed && e->fixed_owner == 2);
    CHECK(e->peer_url && strcmp(e->peer_url, "/on/producer/index.larder") == 0);
    send_resolve(reader, "theirs2", 0);
    resolved(reader, other);
    /* the first announcement's index was not the one announced: forgotten */
    unknown(&d, reader, "theirs");
    /* announced with a written-through index of another dataset, not open
     * here before: what its fetch opened is closed once no one reads it,
     * not left open (and owned by the announcer) until the daemon stops */
    char stray[4096];
    snprintf(stray, sizeof stray, "%s", fixture_dataset("stray", 17, 6000));
    send_announce(peer, "stray", "127.0.0.1:3", "/on/producer/stray.larder", stray, low, high);
    free(fixture_answer(peer, LARDER__RESOLVED));
    bool open = false, done = false;
    for (int i = 0; i < 1000 && !(open && done); i++) { /* its fetch opened it and ended */
        usleep(10000);
        open = open_here(&d, stray);
        pthread_mutex_lock(&d.publications->lock);
        done = d.publications->opening == 0;
        pthread_mutex_unlock(&d.publications->lock);
    }
    CHECK(open && done);
    for (int i = 0; i < 100 && open; i++) { /* no one holds it: the sweep closes it */
        publications_sweep(&d, now_ms() + (int64_t)i * 1000);
        open = open_here(&d, stray);
    }
    CHECK(!open);
    /* the name it was announced as is not registered */
    unknown(&d, reader, "stray");
    /* and "theirs2", open and named, was left alone */
    send_resolve(reader, "theirs2", 0);
    resolved(reader, other);

    /* the same name announced as another dataset: refused */
    send_announce(peer, "theirs2", "127.0.0.1:3", "/elsewhere", NULL, 5, 6);
    CHECK_EQ(fixture_error(peer, message, sizeof message), -EEXIST);

    /* who may send what */
    send_announce(reader, "x", "127.0.0.1:2", "/i", NULL, 1, 2);
    CHECK_EQ(fixture_error(reader, message, sizeof message), LARDER_EDENIED);
    CHECK(strstr(message, "peer daemons only") != NULL);
    send_announce(peer, "x", "10.0.0.9:7461", "/i", NULL, 1, 2);
    CHECK_EQ(fixture_error(peer, message, sizeof message), LARDER_EDENIED);
    CHECK(strstr(message, "not a member") != NULL);
    CHECK(peer->closing);
    struct connection *peer2 = fixture_connection(&d, true);
    fixture_hello(peer2, true);
    fixture_prove(peer2);
    send_announce(peer2, "x", "127.0.0.1:1", "/i", NULL, 1, 2); /* this node is not the producer */
    CHECK_EQ(fixture_error(peer2, message, sizeof message), LARDER_EDENIED);
    CHECK(strstr(message, "this node") != NULL);
    struct connection *peer3 = fixture_connection(&d, true);
    fixture_hello(peer3, true);
    fixture_prove(peer3);
    send_publish(peer3, "y", index, NULL);
    CHECK_EQ(fixture_error(peer3, message, sizeof message), LARDER_EDENIED);
    CHECK(peer3->closing);

    connection_release(reader);
    connection_release(peer);
    connection_release(peer2);
    connection_release(peer3);
    larderd_free(&d);
}

/* A RESOLVE asking for the index's bytes: only a peer may, and only the
 * published dataset's bytes go out, even when the file at the published
 * path was replaced since (its directory is its publisher's: a symlink to
 * a file the daemon can read must not become a way to read it).  One
 * connection parks a few RESOLVEs, not the whole table. */
TEST(larderd_publish_index_bytes_and_limits)
{
    struct larderd d;
    fixture_daemon(&d, 2);
    char index[4096];
    snprintf(index, sizeof index, "%s", fixture_dataset("ckpt", 20, 8000));
    struct connection *reader = fixture_connection(&d, false), *peer = fixture_connection(&d, true);
    fixture_hello(reader, false);
    fixture_hello(peer, true);
    fixture_prove(peer);
    send_publish(reader, "ckpt/bytes", index, NULL);
    resolved(reader, index);

    struct larder__resolve q = {.flags = LARDER__RESOLVE_INDEX,
                                .name_length = (uint32_t)strlen("ckpt/bytes"),
                                .name = "ckpt/bytes"};
    uint8_t frame[LARDER__WIRE_HEADER + 8 + LARDER__WIRE_MAX_PUBLICATION];
    int n = larder__wire_encode_resolve(frame, sizeof frame, 5, &q);
    CHECK(n > 0);
    char message[256];
    CHECK(fixture_send(reader, frame, (size_t)n)); /* a local reader: refused */
    CHECK_EQ(fixture_error(reader, message, sizeof message), LARDER_EDENIED);

    /* a peer gets the file's bytes, as they are on disk */
    FILE *f = fopen(index, "rb");
    CHECK(f != NULL);
    static uint8_t want[1 << 16];
    size_t size = fread(want, 1, sizeof want, f);
    fclose(f);
    CHECK(size > 128 && size < sizeof want);
    CHECK(fixture_send(peer, frame, (size_t)n));
    struct output *o = fixture_answer(peer, LARDER__RESOLVED);
    struct larder__publication m;
    CHECK_EQ(larder__wire_publication(LARDER__RESOLVED, o->bytes + LARDER__WIRE_HEADER,
                                      (uint32_t)(o->length - LARDER__WIRE_HEADER), &m),
             0);
    CHECK_EQ(m.index_length, size);
    CHECK(memcmp(m.index, want, size) == 0);
    free(o);

    /* the path now holds other bytes (here another dataset's index; a
     * symlink to a secret reads the same): refused, nothing of them sent */
    fixture_dataset("ckpt", 21, 8000);
    CHECK(fixture_send(peer, frame, (size_t)n));
    CHECK_EQ(fixture_error(peer, message, sizeof message), LARDER_EBADINDEX);
    CHECK(strstr(message, "no longer the one published") != NULL);

    /* 16 RESOLVEs parked on one connection; the 17th is refused */
    char name[32];
    for (int i = 0; i < 16; i++) {
        snprintf(name, sizeof name, "later/%d", i);
        send_resolve(reader, name, 60000);
        CHECK(connection_take_output(reader) == NULL);
    }
    send_resolve(reader, "later/16", 60000);
    CHECK_EQ(fixture_error(reader, message, sizeof message), -EAGAIN);
    CHECK_EQ(jobs_of(reader), 16);
    reader->dropped = true; /* let them go */
    publications_sweep(&d, now_ms());
    CHECK_EQ(jobs_of(reader), 0);

    connection_release(reader);
    connection_release(peer);
    larderd_free(&d);
}
