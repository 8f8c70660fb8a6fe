/*
 * test_larderd_publish_mine.c - this node's own names across a restart
 * (src/larderd/publish_mine.c): the cache's published/mine, read when the
 * registry is made, keeps the uid of the local user who published each
 * name (who may replace it after the restart); a line written before the
 * uid was kept loads with no known publisher; a line whose generation or
 * uid is not plain decimal digits (a sign, a space, too large, empty, one
 * field too many) is dropped, never half taken.  Also a RESOLVE parked on
 * a name no member knew yet: its members are asked again every REASK_MS
 * while it waits (an ANNOUNCE that never came, lost, does not leave it
 * waiting for nothing).
 */
#include "daemon_fixture.h"
#include "test.h"

#include "publish.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

/* The publisher's uid of the name loaded, -1 when unknown; -2: not loaded. */
static int64_t uid_of(struct publications *r, const char *name)
{
    struct publication *p = find(r, name, strlen(name));
    return p ? p->publisher_uid : -2;
}

TEST(larderd_publish_mine_uid)
{
    char index[4096];
    snprintf(index, sizeof index, "%s", fixture_dataset("ckpt", 6, 8000));
    struct larderd d;
    fixture_daemon(&d, 1);
    uint64_t low, high;
    CHECK(claimed_id(index, &low, &high));
    char id[33];
    larder__hex128(high, low, id);
    CHECK_EQ(test_sh("mkdir -p '%s/published'", d.config.cache_dir), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/published/mine", d.config.cache_dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    const char *tails[][2] = {
        {"with-uid", "\t0\t1000"},
        {"root", "\t0\t0"},
        {"legacy", ""},
        {"legacy-replaced", "\t2"},
        {"replaced-uid", "\t3\t4242"},
        {"gen0-no-uid", "\t0"},
        {"negative", "\t0\t-5"},
        {"plus", "\t0\t+5"},
        {"space", "\t0\t 5"},
        {"too-large", "\t0\t4294967296"},
        {"letters", "\t0\t12a"},
        {"empty-uid", "\t0\t"},
        {"extra-field", "\t1\t7\tmore"},
        {"huge", "\t0\t123456789012345678901234"},
        {"bad-generation", "\t-1\t5"},
    };
    size_t count = sizeof tails / sizeof tails[0];
    for (size_t i = 0; i < count; i++)
        fprintf(f, "%s\t%s\t%s\t-%s\n", tails[i][0], id, index, tails[i][1]);
    fclose(f);
    /* the daemon made its registry at start (published/mine absent then):
     * made again, as after a restart, it loads the file */
    publications_stop(&d);
    publications_free(&d);
    struct publications *r = registry(&d); /* loads published/mine */
    CHECK(r != NULL);
    pthread_mutex_lock(&r->lock);
    CHECK_EQ(uid_of(r, "with-uid"), 1000);
    CHECK_EQ(uid_of(r, "root"), 0);
    CHECK_EQ(uid_of(r, "legacy"), -1);
    CHECK_EQ(uid_of(r, "legacy-replaced"), -1);
    CHECK_EQ(uid_of(r, "replaced-uid"), 4242);
    CHECK_EQ(find(r, "replaced-uid", 12)->generation, 3);
    const char *dropped[] = {"gen0-no-uid", "negative",  "plus",        "space", "too-large",
                             "letters",     "empty-uid", "extra-field", "huge",  "bad-generation"};
    for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
        CHECK_EQ(uid_of(r, dropped[i]), -2);
    CHECK_EQ(r->count, 5);
    pthread_mutex_unlock(&r->lock);

    /* what publication_remember appends is read back the same */
    pthread_mutex_lock(&r->lock);
    find(r, "legacy", 6)->publisher_uid = 777; /* as a --replace by uid 777 leaves it */
    find(r, "legacy", 6)->generation = 1;
    pthread_mutex_unlock(&r->lock);
    publication_remember(&d, "legacy");
    publications_free(&d);
    r = registry(&d);
    pthread_mutex_lock(&r->lock);
    CHECK_EQ(uid_of(r, "legacy"), 777); /* the later line, a generation up, stands */
    CHECK_EQ(find(r, "legacy", 6)->generation, 1);
    CHECK_EQ(uid_of(r, "with-uid"), 1000);
    pthread_mutex_unlock(&r->lock);
    larderd_free(&d);
}

/* A member that takes connections and closes them at once: each is one
 * asking of it (the learn job fails fast, with nothing answered). */
struct closing_member {
    int listener;
    int accepted; /* atomic */
    volatile bool stop;
    pthread_t thread;
};

static void *closing_member_run(void *arg)
{
    struct closing_member *m = arg;
    while (!m->stop) {
        struct pollfd p = {.fd = m->listener, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0) continue;
        int fd = accept(m->listener, NULL, NULL);
        if (fd < 0) continue;
        __atomic_add_fetch(&m->accepted, 1, __ATOMIC_RELAXED);
        close(fd);
    }
    return NULL;
}

/* Wait (5 s at most) until the member was asked `n` times; how often it was. */
static int asked(struct closing_member *m, int n)
{
    for (int i = 0; i < 500 && __atomic_load_n(&m->accepted, __ATOMIC_RELAXED) < n; i++)
        usleep(10000);
    return __atomic_load_n(&m->accepted, __ATOMIC_RELAXED);
}

TEST(larderd_publish_parked_resolve_asks_again)
{
    struct closing_member m = {.listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof a;
    CHECK(m.listener >= 0 && bind(m.listener, (struct sockaddr *)&a, sizeof a) == 0 &&
          listen(m.listener, 16) == 0 &&
          getsockname(m.listener, (struct sockaddr *)&a, &length) == 0);
    CHECK_EQ(pthread_create(&m.thread, NULL, closing_member_run, &m), 0);
    struct larderd d;
    fixture_daemon(&d, 1);
    char members[64];
    snprintf(members, sizeof members, "127.0.0.1:1,127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    CHECK_EQ(larder__members_parse_list(&d.members, members, 0), 0);
    d.self = 0;
    d.self_name = d.members.names[0];
    struct connection *reader = fixture_connection(&d, false);
    fixture_hello(reader, false);
    struct larder__resolve q = {.wait_ms = 60000, .name_length = 4, .name = "late"};
    uint8_t frame[LARDER__WIRE_HEADER + 8 + LARDER__WIRE_MAX_PUBLICATION];
    int n = larder__wire_encode_resolve(frame, sizeof frame, 2, &q);
    CHECK(n > 0 && fixture_send(reader, frame, (size_t)n));
    CHECK_EQ(asked(&m, 1), 1); /* unknown here: the member asked at once */
    struct publications *r = d.publications;
    for (int i = 0; i < 500; i++) { /* its "no" (a closed connection): the name forgotten */
        pthread_mutex_lock(&r->lock);
        bool learning = find(r, "late", 4) != NULL;
        pthread_mutex_unlock(&r->lock);
        if (!learning) break;
        usleep(10000);
    }
    publications_sweep(&d, now_ms()); /* within REASK_MS of the first asking: not again */
    usleep(100000);
    CHECK_EQ(__atomic_load_n(&m.accepted, __ATOMIC_RELAXED), 1);
    publications_sweep(&d, now_ms() + REASK_MS); /* a second on: the RESOLVE still waits */
    CHECK_EQ(asked(&m, 2), 2);
    CHECK(connection_take_output(reader) == NULL); /* parked all along */
    m.stop = true;
    pthread_join(m.thread, NULL);
    close(m.listener);
    connection_release(reader);
    larderd_free(&d);
}
