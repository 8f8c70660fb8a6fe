/*
 * fuzz_daemon.c - the daemon's request handler (handle() in
 * src/larderd/requests.c) on mutated sequences of frames, with the real
 * dataset registry (datasets.c), node cache and worker pool: OPEN of
 * crafted indexes, READ staged by the workers, STAT, the handshake.
 *
 * Once per process: a temporary directory holding the two flat shards of
 * craft_index.py's fuzz layout (shard-0.bin, shard-1.bin, as fuzz_open.c
 * writes them), the indexes of daemon_indexes.h (good.larder and hostile
 * variants: shard names leaving the directory, shard sizes near 2^64,
 * samples past their shard, overlaps, a duplicate key, a wrong content
 * hash; fuzz/daemon_seeds.py writes that header and the seeds) and the
 * node cache; daemon_state set up as main.c does (larderd_init, bounds,
 * larderd_start: the wake eventfd, epoll, a pool of 4 workers), say()
 * quiet, and http(s)
 * and S3 sent to a proxy that cannot be reached (so that an OPEN of any
 * URL fails at once, with no DNS lookup: the replay stays hermetic).
 *
 * Per input: a fresh connection as loop.c's accept makes it
 * (connection_new), its fd one end of a socketpair; who it is comes from the first byte (enum
 * peer). The rest is split into frames by larder__wire_header as loop.c's process_input() does --
 * each frame handed to handle() from a buffer of its own exact size, so an over-read is caught; a
 * PROVE whose proof starts with a zero byte is given the right proof (a peer of a cluster with a
 * secret can then be proven) -- until handle() returns false, the connection is refused (closing),
 * or a frame is malformed or cut.  Over its memory budget the connection waits for its READs and
 * its answers are taken (as a client would).  At the end its READ jobs are waited for, its queued
 * answers discarded and it is released.  Only the registry of opened datasets (and the cache)
 * outlives an input; it is cleared when it holds MAX_KEPT datasets.  The process works in the
 * temporary directory only while an input runs (OPEN names are relative
 * to it), so libFuzzer's relative paths keep working.
 *
 * LARDER_FUZZ_DAEMON_DEBUG=1 in the environment: say() speaks, and the
 * answers queued over the run are counted by type on stderr at exit, and
 * each ERROR is printed.
 */
#include "larderd.h"

#include "auth.h"
#include "daemon_indexes.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int larder_fuzz_daemon(const uint8_t *data, size_t size);

/* Who is connected, from the input's first byte (modulo PEER_KINDS). */
enum peer {
    READER,            /* a reader of the daemon's own uid, on the Unix socket */
    OTHER_UID,         /* a reader of another uid, no --allow */
    OTHER_UID_ALLOWED, /* a reader of another uid, --allow over the directory */
    PEER,              /* a peer over TCP, a cluster without a secret */
    PEER_SECRET,       /* a peer over TCP, a cluster with a secret (see feed() for PROVE) */
    PEER_KINDS
};

enum { MAX_KEPT = 8 };

#define NOWHERE "http://127.0.0.1:99999" /* a port no URL may have */

static char root[256];  /* the shards and indexes, for the whole process */
static char cache[300]; /* the node cache, in root */
static char secret[] = "fuzz-secret";
static bool debug;
static unsigned long inputs, answers[LARDER__PROVE + 1];

static int write_file(const char *name, const void *bytes, size_t size)
{
    FILE *f = fopen(name, "wb");
    if (!f) return -1;
    size_t n = fwrite(bytes, 1, size, f);
    return fclose(f) == 0 && n == size ? 0 : -1;
}

/* Shard `shard` of the fuzz layout: byte i is the top byte of the (i+1)-th
 * step of a 64-bit LCG from shard + 1 (craft_index.py's fuzz_bytes). */
static int write_shard(int shard, size_t size)
{
    uint8_t *bytes = malloc(size);
    if (!bytes) return -1;
    uint64_t x = (uint64_t)shard + 1;
    for (size_t i = 0; i < size; i++) {
        x = x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        bytes[i] = (uint8_t)(x >> 56);
    }
    char name[32];
    snprintf(name, sizeof name, "shard-%d.bin", shard);
    int rc = write_file(name, bytes, size);
    free(bytes);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void teardown(void)
{
    larderd_free(&daemon_state); /* nothing is in flight between inputs */
    if (root[0]) nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (debug) {
        static const char *names[] = {"?",    "HELLO", "WELCOME", "READ",   "DATA", "ERROR",
                                      "STAT", "STATS", "OPEN",    "OPENED", "PROVE"};
        fprintf(stderr, "fuzz_daemon: %lu inputs; answers:", inputs);
        for (int t = 1; t <= LARDER__PROVE; t++)
            if (answers[t]) fprintf(stderr, " %lu %s", answers[t], names[t]);
        fprintf(stderr, "\n");
    }
}

/* The library's warnings through say(), as main.c sends them. */
static void on_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    say("%s%s", level == LARDER_LOG_ERROR ? "error: " : "", message);
}

static void fail_setup(const char *what)
{
    fprintf(stderr, "fuzz_daemon: cannot set up %s: %s\n", root, what);
    abort();
}

static void setup(void)
{
    if (root[0]) return;
    debug = getenv("LARDER_FUZZ_DAEMON_DEBUG") != NULL;
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/larder-fuzz-daemon-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(root)) fail_setup("mkdtemp");
    snprintf(cache, sizeof cache, "%s/cache", root);
    int home = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (home < 0 || chdir(root) < 0) fail_setup("chdir");
    if (write_shard(0, 6000) < 0 || write_shard(1, 9000) < 0) fail_setup("shards");
    for (size_t i = 0; i < sizeof daemon_indexes / sizeof *daemon_indexes; i++)
        if (write_file(daemon_indexes[i].name, daemon_indexes[i].bytes, daemon_indexes[i].size) < 0)
            fail_setup(daemon_indexes[i].name);
    if (fchdir(home) < 0) fail_setup("fchdir");
    close(home);

    /* what main.c sets, with small bounds: a budget a few READs exceed */
    struct larderd *d = &daemon_state;
    larderd_init(d);
    say_quietly(!debug);
    larder_set_log(on_log, NULL, LARDER_LOG_WARN);
    d->config.cache_dir = cache;
    d->config.cache_capacity = 12 * 1024; /* below the shards' 15000 bytes: evictions */
    d->config.jobs = 4;
    d->config.connection_budget = 1u << 20;
    if (larderd_start(d) < 0) fail_setup("epoll, eventfd or pool");
    atexit(teardown);

    /* bounds of the harness, as fuzz_open.c's: no file above 1 GiB, and a
     * URL that names a host gives up soon */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {1 << 30, 1 << 30};
    setrlimit(RLIMIT_FSIZE, &limit);
    setenv("LARDER_HTTP_TIMEOUT", "0.2", 0);
    /* and no OPEN leaves the machine or waits on DNS: every http(s) and S3
     * request goes to a proxy on a port no address has, so curl fails at
     * once, without resolving the URL's host, whatever the input names
     * (a refused connection would be retried for seconds) */
    static const char *const proxies[] = {"http_proxy", "HTTPS_PROXY", "ALL_PROXY"};
    for (size_t i = 0; i < sizeof proxies / sizeof *proxies; i++)
        setenv(proxies[i], NOWHERE, 1);
    unsetenv("NO_PROXY");
    unsetenv("no_proxy");
    setenv("LARDER_S3_ENDPOINT", NOWHERE, 1);
    setenv("LARDER_S3_ADDRESSING", "path", 1);
}

/* Wait until the connection's READ jobs have ended.  A RESOLVE parked
 * for a name counts as a job too: its wait is taken as over at once (the
 * loop's sweep would answer it later), so that nothing waits on it. */
static void wait_for_jobs(struct connection *c)
{
    for (;;) {
        publications_sweep(c->daemon, INT64_MAX);
        pthread_mutex_lock(&c->lock);
        int jobs = c->jobs;
        pthread_mutex_unlock(&c->lock);
        if (!jobs) return;
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
}

/* Take the queued answers as a client would (counting them by type),
 * uncharging them as loop.c's output_free() does (connection_take_output). */
static void take_answers(struct connection *c)
{
    struct output *o;
    while ((o = connection_take_output(c))) {
        if (o->length >= LARDER__WIRE_HEADER && o->bytes[5] <= LARDER__PROVE)
            answers[o->bytes[5]]++;
        struct larder__error_frame error;
        if (debug && o->length >= LARDER__WIRE_HEADER && o->bytes[5] == LARDER__ERROR &&
            larder__wire_error(o->bytes + LARDER__WIRE_HEADER,
                               (uint32_t)(o->length - LARDER__WIRE_HEADER), &error) == 0)
            fprintf(stderr, "fuzz_daemon: ERROR %d %.*s\n", error.code, (int)error.message_length,
                    error.message);
        free(o);
    }
    uint64_t count;
    if (read(c->daemon->wake, &count, sizeof count) < 0) { /* nothing was queued */
    }
}

/* The frames of `data`, as loop.c's process_input() takes them. */
static void feed(struct connection *c, const uint8_t *data, size_t size)
{
    size_t at = 0;
    while (!c->closing) {
        pthread_mutex_lock(&c->lock);
        bool over = connection_held_back(c);
        pthread_mutex_unlock(&c->lock);
        if (over) { /* paused until its answers drain (or its OPEN ends): let them */
            wait_for_jobs(c);
            take_answers(c);
        }
        struct larder__frame f;
        int rc = larder__wire_header(data + at, size - at, &f);
        if (rc < 0 || LARDER__WIRE_HEADER + (size_t)f.length > sizeof c->in) return;
        if (size - at < LARDER__WIRE_HEADER + f.length) return;
        uint8_t *payload = malloc(f.length ? f.length : 1);
        if (!payload) return;
        memcpy(payload, data + at + LARDER__WIRE_HEADER, f.length);
        /* the fuzzer cannot compute an HMAC over the daemon's fresh nonce:
         * a PROVE whose proof starts with a zero byte gets the right one,
         * so that what a proven peer may do is reached too */
        const char *key = c->daemon->secret;
        if (f.type == LARDER__PROVE && f.length == LARDER__WIRE_PROOF && payload[0] == 0 && key)
            larder__auth_proof(key, strlen(key), LARDER__AUTH_CLIENT_LABEL, c->server_nonce,
                               c->client_nonce, payload);
        c->last_active_ms = now_ms();
        bool ok = handle(c, &f, payload);
        free(payload);
        if (!ok) return;
        at += LARDER__WIRE_HEADER + f.length;
    }
}

int larder_fuzz_daemon(const uint8_t *data, size_t size)
{
    setup();
    if (size == 0) return 0;
    inputs++;
    int home = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int pair[2];
    if (home < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) < 0)
        abort();
    if (chdir(root) < 0) abort();
    struct larderd *d = &daemon_state;
    enum peer who = (enum peer)(data[0] % PEER_KINDS);
    struct connection *c = connection_new(d, pair[0], who == PEER || who == PEER_SECRET);
    if (!c) abort();
    if (!c->tcp) {
        c->uid = who == READER ? d->config.uid : d->config.uid + 1;
        c->own_user = who == READER || c->uid == 0;
    }
    d->secret = who == PEER_SECRET ? secret : NULL;
    d->config.allow[0] = who == OTHER_UID_ALLOWED ? root : NULL;
    d->config.num_allow = who == OTHER_UID_ALLOWED ? 1 : 0;

    feed(c, data + 1, size - 1);

    wait_for_jobs(c);
    take_answers(c);
    close(c->fd);
    close(pair[1]);
    connection_release(c); /* the last reference: frees it */
    d->secret = NULL;
    d->config.allow[0] = NULL;
    d->config.num_allow = 0;
    if (d->num_datasets >= MAX_KEPT) {
        /* hints hold datasets: their staging ends with the pool, then they go */
        hints_stop(d);
        larder__pool_free(d->peer_pool);
        larder__pool_free(d->pool);
        hints_free(d);
        close_datasets(d);
        if (larder__pool_new(&d->pool, d->config.jobs) < 0) abort();
        if (larder__pool_new(&d->peer_pool, d->config.jobs) < 0) abort();
    }
    if (fchdir(home) < 0) abort();
    close(home);
    return 0;
}

#ifndef LARDER_FUZZ_REPLAY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return larder_fuzz_daemon(data, size);
}
#endif
