/*
 * daemon_fixture.c - the daemon's unit tests' shared set-up (daemon_fixture.h).
 */
#include "daemon_fixture.h"

#include "larder_pack.h"
#include "test.h"

#include <time.h>
#include <unistd.h>

void fixture_daemon(struct larderd *d, int jobs)
{
    larderd_init(d);
    say_quietly(true);
    static char cache[4096];
    snprintf(cache, sizeof cache, "%s", test_path("cache"));
    d->config.cache_dir = cache;
    d->config.jobs = jobs;
    CHECK_EQ(larderd_start(d), 0);
}

const char *fixture_dataset(const char *name, int n, uint64_t shard_size)
{
    static char index[4096];
    char path[4096];
    for (int i = 0; i < n; i++) {
        uint8_t data[4000];
        size_t size = (size_t)(i * 7919 % 3000) + 100;
        test_fill_random(data, size, (uint64_t)i + 11);
        snprintf(path, sizeof path, "%s/%s-src/s%04d.bin", test_dir(), name, i);
        test_write_file(path, data, size);
    }
    snprintf(path, sizeof path, "%s/%s-src", test_dir(), name);
    const char *sources[] = {path};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = shard_size,
                             .jobs = 1};
    snprintf(index, sizeof index, "%s/%s", test_dir(), name);
    CHECK_EQ(larder_pack(sources, 1, index, &o, NULL), 0);
    snprintf(index, sizeof index, "%s/%s/index.larder", test_dir(), name);
    return index;
}

struct connection *fixture_connection(struct larderd *d, bool tcp)
{
    struct connection *c = connection_new(d, -1, tcp);
    CHECK(c != NULL);
    if (!tcp) {
        c->uid = d->config.uid;
        c->own_user = true;
    }
    return c;
}

bool fixture_send(struct connection *c, const uint8_t *frame, size_t length)
{
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(frame, length, &f), 0);
    CHECK_EQ(LARDER__WIRE_HEADER + f.length, length);
    uint8_t *payload = malloc(f.length ? f.length : 1); /* its own size: over-reads show */
    CHECK(payload != NULL);
    memcpy(payload, frame + LARDER__WIRE_HEADER, f.length);
    bool ok = handle(c, &f, payload);
    free(payload);
    return ok;
}

void fixture_hello(struct connection *c, bool peer)
{
    struct larder__hello h = {.role = peer ? LARDER__ROLE_PEER : LARDER__ROLE_READER,
                              .owner_chunk = peer ? 4u << 20 : 0};
    uint8_t frame[128];
    int n = larder__wire_encode_hello(frame, sizeof frame, 1, &h);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
    free(fixture_answer(c, LARDER__WELCOME));
}

void fixture_prove(struct connection *c)
{
    if (!c->daemon->secret) c->daemon->secret = strdup("fixture-secret");
    CHECK(c->daemon->secret != NULL);
    c->proven = true;
}

void fixture_wait_jobs(struct connection *c)
{
    for (int spins = 0;; spins++) {
        pthread_mutex_lock(&c->lock);
        int jobs = c->jobs;
        pthread_mutex_unlock(&c->lock);
        if (!jobs) return;
        CHECK(spins < 100000); /* 20 s */
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
}

struct output *fixture_answer(struct connection *c, int type)
{
    /* an answer from a worker (READ, an OPEN of a new index) may come later */
    struct output *o;
    for (int spins = 0; !(o = connection_take_output(c)); spins++) {
        CHECK(spins < 100000); /* 20 s */
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
    CHECK(o->length >= LARDER__WIRE_HEADER);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(o->bytes, o->length, &f), 0);
    if (f.type != type && f.type == LARDER__ERROR) {
        struct larder__error_frame e;
        if (larder__wire_error(o->bytes + LARDER__WIRE_HEADER, f.length, &e) == 0)
            fprintf(stderr, "    ERROR %d: %.*s\n", e.code, (int)e.message_length, e.message);
    }
    CHECK_EQ(f.type, type);
    return o;
}

int fixture_error(struct connection *c, char *message, size_t size)
{
    struct output *o = fixture_answer(c, LARDER__ERROR);
    struct larder__error_frame e;
    CHECK_EQ(larder__wire_error(o->bytes + LARDER__WIRE_HEADER,
                                (uint32_t)(o->length - LARDER__WIRE_HEADER), &e),
             0);
    snprintf(message, size, "%.*s", (int)e.message_length, e.message);
    free(o);
    return e.code;
}
