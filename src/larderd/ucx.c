/*
 * ucx.c - the daemon's side of peers' data over UCX (docs/protocol.md,
 * "Transports"): the hub that --transport starts, the UCX_OFFER of an
 * authenticated peer (answered with this worker's address and a session
 * token bound to that connection), READs arriving over UCX handed to the
 * workers as if they came on the connection, and how each member is read
 * for STATS and the metrics.
 *
 * A session's owner is its connection: the loop forgets the session
 * (ucx_forget, from drop) before it lets go of the connection, and a
 * READ from the progress thread takes its reference on the connection
 * only while the session is live, both under `sessions_lock`, so a READ
 * never reaches a connection that is gone.
 */
#include "larderd.h"

#include "transport_ucx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;

/* READs in flight over one connection's UCX path at most (a peer's READs
 * are bounded by its threads; this bounds a hostile one's). */
#define MAX_UCX_JOBS 1024

/* On the progress thread: a READ of session s, owned by connection c. */
static void ucx_read(void *owner, struct larder__ucx_session *s, uint64_t request,
                     const struct larder__read *read)
{
    struct connection *c = owner;
    pthread_mutex_lock(&sessions_lock);
    /* c is alive while its session is: ucx_forget frees the session under
     * this lock, before the loop lets go of c */
    if (!larder__ucx_session_live(s)) {
        pthread_mutex_unlock(&sessions_lock);
        return;
    }
    pthread_mutex_lock(&c->lock);
    bool over = c->jobs >= MAX_UCX_JOBS;
    c->refs++; /* held across read_submit, which takes the job's own */
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&sessions_lock);
    __atomic_store_n(&c->ucx_used_ms, now_ms(), __ATOMIC_RELAXED);
    if (over)
        larder__ucx_answer(s, request, -EAGAIN, "too many READs in flight", 24);
    else if (read->flags & LARDER__READ_STAGE) /* a peer's: another node's cache is not ours */
        larder__ucx_answer(s, request, LARDER_EUSAGE, STAGE_REFUSED, sizeof STAGE_REFUSED - 1);
    else if (!read_answer_resident(c, read, request, s)) /* in the cache: answered here */
        read_submit(c, read, request, s);
    connection_release(c);
}

int ucx_daemon_start(struct larderd *d)
{
    if (d->config.transport == TRANSPORT_TCP) {
        say("peers over TCP");
        return 0;
    }
    int rc = larder__ucx_start(&d->ucx);
    if (rc < 0) {
        d->ucx = NULL;
        if (d->config.transport == TRANSPORT_UCX) {
            say("--transport ucx: %s", larder_errmsg());
            return -1;
        }
        say("peers over TCP (no UCX: %s)", larder_errmsg());
        return 0;
    }
    larder__ucx_serve(d->ucx, ucx_read);
    say("peers over UCX (%s)", larder__ucx_transports(d->ucx));
    return 0;
}

void ucx_daemon_quiesce(struct larderd *d)
{
    if (!d->ucx) return;
    size_t left = larder__ucx_quiesce(d->ucx);
    if (left == 0) return;
    /* their completions end READ jobs, which use the datasets */
    say("%zu answers over UCX still in flight: the datasets stay until exit", left);
    d->ucx_answers_left = true;
}

void ucx_daemon_stop(struct larderd *d)
{
    if (d->hints) return; /* its datasets' endpoints stay: so does the hub, until exit */
    larder__ucx_stop(d->ucx);
    d->ucx = NULL;
}

bool ucx_offer(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    struct larderd *d = c->daemon;
    /* handle() refused an unproven peer of a cluster with a secret already */
    if (!c->peer) {
        refuse(c, f->request, LARDER_EDENIED, "only peers ask for a UCX data path");
        return true;
    }
    if (!d->ucx) {
        send_error(c, f->request, LARDER_EUNSUPPORTED,
                   "this larderd runs its peers over TCP (--transport tcp, or no UCX)");
        return true;
    }
    if (c->ucx) { /* one path per connection */
        send_error(c, f->request, LARDER_EUSAGE, "this connection has a UCX data path already");
        return true;
    }
    uint8_t token[LARDER__UCX_TOKEN];
    struct larder__ucx_session *s;
    if (larder__ucx_session_new(d->ucx, c, payload, f->length, token, &s) < 0) {
        say("a peer's UCX offer failed: %s", larder_errmsg());
        send_error(c, f->request, LARDER_EUNSUPPORTED, larder_errmsg());
        return true;
    }
    pthread_mutex_lock(&sessions_lock);
    c->ucx = s;
    pthread_mutex_unlock(&sessions_lock);
    __atomic_store_n(&c->ucx_used_ms, now_ms(), __ATOMIC_RELAXED);
    const void *address;
    size_t length;
    larder__ucx_address(d->ucx, &address, &length);
    uint8_t frame[LARDER__WIRE_HEADER + LARDER__UCX_TOKEN + LARDER__UCX_MAX_ADDRESS];
    larder__wire_encode_header(frame, LARDER__WIRE_HEADER, LARDER__UCX_ACCEPT,
                               (uint32_t)(LARDER__UCX_TOKEN + length), f->request);
    memcpy(frame + LARDER__WIRE_HEADER, token, LARDER__UCX_TOKEN);
    memcpy(frame + LARDER__WIRE_HEADER + LARDER__UCX_TOKEN, address, length);
    enqueue(c, frame, LARDER__WIRE_HEADER + LARDER__UCX_TOKEN + length);
    memset(token, 0, sizeof token);
    return true;
}

void ucx_forget(struct connection *c)
{
    pthread_mutex_lock(&sessions_lock);
    struct larder__ucx_session *s = c->ucx;
    c->ucx = NULL;
    larder__ucx_session_free(s);
    pthread_mutex_unlock(&sessions_lock);
}

bool ucx_recently_used(struct connection *c, int64_t now, int idle_ms)
{
    return c->ucx && now - __atomic_load_n(&c->ucx_used_ms, __ATOMIC_RELAXED) < idle_ms;
}

/* ---- how each member is read ---------------------------------------------------------- */

/* Member m's transport as the open datasets' endpoints know it: "ucx" when
 * any reads it over UCX, else "tcp" when any found it has none, else what
 * the first says ("ucx?": not asked yet; "tcp" under --transport tcp). */
static const char *member_transport(struct larderd *d, size_t m)
{
    const char *best = d->ucx ? "ucx?" : "tcp";
    for (int i = 0; i < d->num_datasets; i++) {
        struct larder__endpoint *e = d->datasets[i].members ? d->datasets[i].members[m] : NULL;
        if (!e) continue;
        const char *t = larder__endpoint_transport(e);
        if (strcmp(t, "ucx") == 0) return t;
        if (strcmp(t, "tcp") == 0) best = t;
    }
    return best;
}

size_t ucx_stats_json(struct larderd *d, char *out, size_t capacity)
{
    size_t used = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int n_ = snprintf(out + used, capacity - used, __VA_ARGS__);                               \
        if (n_ < 0 || (size_t)n_ >= capacity - used) return 0;                                     \
        used += (size_t)n_;                                                                        \
    } while (0)
    if (capacity == 0) return 0;
    PUT(", \"transport\": \"%s%s%s%s\", \"peers\": [", d->ucx ? "ucx" : "tcp", d->ucx ? " (" : "",
        d->ucx ? larder__ucx_transports(d->ucx) : "", d->ucx ? ")" : "");
    pthread_mutex_lock(&d->lock);
    bool first = true;
    for (size_t m = 0; m < d->members.count; m++) {
        if (m == d->self) continue;
        /* member names come from the configuration: only [A-Za-z0-9.:_-] reach here */
        const char *name = d->members.names[m];
        bool plain = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                  "0123456789.:_-[]") == strlen(name);
        const char *t = member_transport(d, m);
        int n =
            snprintf(out + used, capacity - used, "%s{\"member\": \"%s\", \"transport\": \"%s\"}",
                     first ? "" : ", ", plain ? name : "?", t);
        if (n < 0 || (size_t)n >= capacity - used) {
            pthread_mutex_unlock(&d->lock);
            return 0;
        }
        used += (size_t)n;
        first = false;
    }
    pthread_mutex_unlock(&d->lock);
    PUT("]");
#undef PUT
    return used;
}

size_t ucx_metrics_text(struct larderd *d, char *out, size_t capacity)
{
    size_t used = 0;
    int n = snprintf(out, capacity,
                     "# HELP larder_peer_transport How this daemon reads each member's data "
                     "(1 on the transport in use).\n# TYPE larder_peer_transport gauge\n");
    if (n < 0 || (size_t)n >= capacity) return 0;
    used = (size_t)n;
    pthread_mutex_lock(&d->lock);
    for (size_t m = 0; m < d->members.count; m++) {
        if (m == d->self) continue;
        const char *name = d->members.names[m];
        bool plain = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                  "0123456789.:_-[]") == strlen(name);
        n = snprintf(out + used, capacity - used,
                     "larder_peer_transport{member=\"%s\",transport=\"%s\"} 1\n",
                     plain ? name : "?", member_transport(d, m));
        if (n < 0 || (size_t)n >= capacity - used) break;
        used += (size_t)n;
    }
    pthread_mutex_unlock(&d->lock);
    return used;
}

void ucx_adopt_endpoint(struct larderd *d, struct larder__endpoint *endpoint)
{
    if (d->ucx) larder__endpoint_use_ucx(endpoint, d->ucx);
}
