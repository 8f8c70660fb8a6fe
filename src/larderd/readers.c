/*
 * readers.c - READERS (readers.h): the sender, a thread that tells every
 * other member when this node's gate sees a foreground origin read start
 * or end (at most every READERS_EVERY_MS), and the receiver, which holds
 * this node's background origin reads.
 *
 * The gate's watcher runs on reading threads: it only compares a clock and
 * wakes the thread, which sends on the members' pooled control connections
 * (endpoint.c's larder__endpoint_call), one member after another.
 */
#include "readers.h"

#include "source.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define READERS_TIMEOUT_MS 1000 /* a member's answer; past it the word is late anyway */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct larderd *daemon;
    struct larder__endpoint **peers; /* one per member; NULL for this node */
    size_t count;
    pthread_t thread;
    bool started, stopping, pending;
    int64_t sent_ms; /* when the last word went out (atomic: read by the watcher) */
    uint64_t sent;   /* words sent, for a look in a debugger */
} signal_state = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static int64_t clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The gate's watcher: wake the sender, unless it spoke under a period ago. */
static void on_foreground(void *context)
{
    (void)context;
    if (clock_ms() - __atomic_load_n(&signal_state.sent_ms, __ATOMIC_RELAXED) < READERS_EVERY_MS)
        return;
    pthread_mutex_lock(&signal_state.lock);
    signal_state.pending = true;
    pthread_cond_signal(&signal_state.wake);
    pthread_mutex_unlock(&signal_state.lock);
}

static void *sender(void *arg)
{
    (void)arg;
    uint8_t frame[LARDER__WIRE_HEADER + 4], answer[16];
    int length = larder__wire_encode_readers(frame, sizeof frame, 1, READERS_HOLD_MS);
    pthread_mutex_lock(&signal_state.lock);
    for (;;) {
        while (!signal_state.pending && !signal_state.stopping)
            pthread_cond_wait(&signal_state.wake, &signal_state.lock);
        if (signal_state.stopping) break;
        signal_state.pending = false;
        __atomic_store_n(&signal_state.sent_ms, clock_ms(), __ATOMIC_RELAXED);
        pthread_mutex_unlock(&signal_state.lock);
        for (size_t m = 0; length > 0 && m < signal_state.count; m++) {
            struct larder__frame f;
            /* a member that is down or refuses is skipped: the word only
             * spares its readers a wait (endpoint.c marks it down) */
            if (signal_state.peers[m] && !larder__endpoint_down(signal_state.peers[m]))
                larder__endpoint_call(signal_state.peers[m], frame, (size_t)length, &f, answer,
                                      sizeof answer, READERS_TIMEOUT_MS);
        }
        pthread_mutex_lock(&signal_state.lock);
        signal_state.sent++;
    }
    pthread_mutex_unlock(&signal_state.lock);
    return NULL;
}

int readers_signal_start(struct larderd *d)
{
    if (d->members.count <= 1 || !d->secret || d->self >= d->members.count) return 0;
    struct larder__endpoint **peers = calloc(d->members.count, sizeof *peers);
    if (!peers) return -ENOMEM;
    for (size_t m = 0; m < d->members.count; m++) {
        if (m == d->self) continue;
        int rc = larder__endpoint_new(&peers[m], d->members.names[m], LARDER__ROLE_PEER, d->secret,
                                      NULL, READERS_TIMEOUT_MS);
        if (rc < 0) peers[m] = NULL; /* not told: its staging only yields less */
    }
    signal_state.daemon = d;
    signal_state.peers = peers;
    signal_state.count = d->members.count;
    signal_state.stopping = signal_state.pending = false;
    if (pthread_create(&signal_state.thread, NULL, sender, NULL) != 0) {
        for (size_t m = 0; m < d->members.count; m++)
            larder__endpoint_free(peers[m]);
        free(peers);
        signal_state.peers = NULL;
        return -EAGAIN;
    }
    signal_state.started = true;
    larder__source_gate_watch(on_foreground, NULL);
    return 0;
}

void readers_signal_stop(struct larderd *d)
{
    (void)d;
    if (!signal_state.started) return;
    larder__source_gate_watch(NULL, NULL);
    pthread_mutex_lock(&signal_state.lock);
    signal_state.stopping = true;
    pthread_cond_signal(&signal_state.wake);
    pthread_mutex_unlock(&signal_state.lock);
    pthread_join(signal_state.thread, NULL);
    for (size_t m = 0; m < signal_state.count; m++)
        larder__endpoint_free(signal_state.peers[m]);
    free(signal_state.peers);
    signal_state.peers = NULL;
    signal_state.started = false;
}

bool readers_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    if (!c->peer || !c->daemon->secret || !c->proven) {
        refuse(c, f->request, LARDER_EDENIED, "READERS is for members that proved the secret");
        return true;
    }
    uint32_t hold_ms;
    if (larder__wire_readers(payload, f->length, &hold_ms) < 0) {
        refuse(c, f->request, LARDER_EPROTOCOL, larder_errmsg());
        return true;
    }
    larder__source_gate_hold(hold_ms);
    uint8_t frame[LARDER__WIRE_HEADER];
    larder__wire_encode_header(frame, sizeof frame, LARDER__READERS, 0, f->request);
    enqueue(c, frame, sizeof frame);
    return true;
}
