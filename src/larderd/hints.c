/*
 * hints.c - HINT requests (docs/protocol.md, "Hints"): who may hint,
 * which nodes stage a hint, and the answer.
 *
 *   - hot: this node pins and stages the samples (hints_pins.c); with
 *     --replicas N, so do the N-1 other members ranked first by rendezvous
 *     hashing of the dataset id, and with all nodes every member.  Each
 *     member stages through its own chain (the shard's owner node, then
 *     the origin), and the owner's fills are single-flight, so the origin
 *     serves each byte once for the cluster.
 *   - replicate: the members named stage and pin the whole dataset (this
 *     node too when it is named); --replicate-prefix does the same for
 *     every publication under a prefix (hints_on_publish).
 *   - list: what this node has pinned, as JSON.
 *
 * Who may hint: a local client that may OPEN the index (the same rules as
 * OPEN, requests.c's may_open), and a peer that proved the cluster secret
 * (a cluster without one takes no hint from a peer: a loopback port is
 * open to every local user, and pins take room from every reader).  A
 * peer's hint is staged on this node only, never forwarded again.
 *
 * A hint runs on a thread of its own (forwarding blocks on members, and
 * a hint that waits blocks until its staging ends) and answers HINTED
 * when this node's pins are set and the members answered, or, with
 * LARDER__HINT_WAIT, when the staging is done everywhere.
 */
#include "hints.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hash.h"

#define FORWARD_TIMEOUT_MS 30000 /* a member's answer to a hint that does not wait */
#define WAIT_TIMEOUT_MS 3600000  /* ... to one that waits for its staging */
#define POLICY_TTL_MS 600000     /* pins of --replicate-prefix */
#define NAME_WAIT_MS 30000       /* a hint by name waits this long for a name being learned */
/* Hints being taken at once (a thread each, and a thread per member it is
 * forwarded to): past it a HINT is refused with EAGAIN, so that a client
 * looping `larder hint --wait` cannot take the node's threads */
#define MAX_HINT_THREADS 32
#define HINTED_ROOM (LARDER__WIRE_HEADER + LARDER__HINTED_FIXED)

struct hint_request {
    struct larderd *daemon;
    struct connection *connection; /* NULL: the publish policy's (nobody to answer) */
    uint64_t request;
    struct dataset_entry *entry;
    uint8_t kind, flags;
    uint32_t replicas;
    uint64_t ttl_ms;
    bool from_peer;
    char **keys; /* NUL-terminated copies */
    uint32_t num_keys;
    char *targets; /* replicate: the members named */
    char *name;    /* a publication's name: entry is resolved from it on the hint's thread,
                    * and members are told the name (each resolves its own copy) */
    char *url;     /* else the index's url: opened on the hint's thread when not open yet */
    unsigned how;  /* open_dataset's `how` for the client */
};

/* A member's share of a hint: sent and answered on a thread of its own. */
struct forward {
    struct larder__endpoint *endpoint;
    const uint8_t *frame;
    size_t length;
    int timeout_ms, rc;
    struct larder__hinted answer;
    uint8_t payload[LARDER__HINTED_FIXED + 4096];
    pthread_t thread;
    bool started;
};

static void request_free(struct hint_request *r)
{
    if (!r) return;
    for (uint32_t k = 0; r->keys && k < r->num_keys; k++)
        free(r->keys[k]);
    free(r->keys);
    free(r->targets);
    free(r->name);
    free(r->url);
    free(r);
}

struct ranked {
    uint64_t score;
    size_t member;
};

static int by_score(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    return x->score < y->score ? 1 : x->score > y->score ? -1 : 0;
}

/* The members besides this one that stage a hot hint into out (room for
 * every member): all of them, or the replicas-1 ranked first by
 * rendezvous hashing of the dataset id.  How many; -ENOMEM. */
static int rank_members(const struct larderd *d, const struct hint_request *r, size_t *out)
{
    bool all = r->flags & LARDER__HINT_ALL_NODES;
    size_t want = all ? SIZE_MAX : r->replicas > 1 ? r->replicas - 1 : 0, count = 0;
    if (want == 0) return 0;
    struct ranked *ranks = malloc(d->members.count * sizeof *ranks);
    if (!ranks) return -ENOMEM;
    uint64_t key[3] = {r->entry->id_low, r->entry->id_high, UINT64_C(0x68696e74)}; /* "hint" */
    for (size_t m = 0; m < d->members.count; m++)
        if (m != d->self)
            ranks[count++] =
                (struct ranked){XXH3_64bits_withSeed(key, sizeof key, d->members.weights[m]), m};
    if (!all) qsort(ranks, count, sizeof *ranks, by_score);
    if (count > want) count = want;
    for (size_t i = 0; i < count; i++)
        out[i] = ranks[i].member;
    free(ranks);
    return (int)count;
}

/* Which nodes stage r: *here (this one), and the other members' indexes.
 * 0, or a negative code with a message (a member named that is none). */
static int choose(const struct larderd *d, const struct hint_request *r, bool *here, size_t *out,
                  size_t *count)
{
    *count = 0;
    *here = true;
    if (r->from_peer || (r->flags & LARDER__HINT_HERE)) return 0;
    if (r->kind == LARDER__HINT_HOT) {
        int n = d->members.count > 1 && r->entry->members ? rank_members(d, r, out) : 0;
        if (n < 0) return n;
        *count = (size_t)n;
        return 0;
    }
    *here = false; /* replicate: only the members named */
    struct larder__members named = {0};
    int rc = larder__members_parse_list(&named, r->targets, LARDER__DEFAULT_PORT);
    for (size_t i = 0; rc == 0 && i < named.count; i++) {
        size_t m = 0;
        while (m < d->members.count && strcmp(d->members.names[m], named.names[i]) != 0)
            m++;
        bool self = m == d->self || (d->members.count == 0 && d->self_name &&
                                     strcmp(d->self_name, named.names[i]) == 0);
        if (self)
            *here = true;
        else if (m == d->members.count || !r->entry->members)
            rc = larder__fail(LARDER_EUSAGE, "hint replicate: %s is not a member of this cluster",
                              named.names[i]);
        else
            out[(*count)++] = m; /* named once each: the list drops duplicates */
    }
    larder__members_clear(&named);
    return rc;
}

static void *forward_run(void *arg)
{
    struct forward *f = arg;
    struct larder__frame frame;
    f->rc = larder__endpoint_call(f->endpoint, f->frame, f->length, &frame, f->payload,
                                  sizeof f->payload, f->timeout_ms);
    if (f->rc == 0 && frame.type != LARDER__HINT_ANSWER)
        f->rc = larder__fail(LARDER_EPROTOCOL, "answer type %u to HINT", frame.type);
    if (f->rc == 0) f->rc = larder__wire_hinted(f->payload, frame.length, &f->answer);
    if (f->rc < 0)
        say("hint: member %s did not take the hint: %s", larder__endpoint_address(f->endpoint),
            larder_errmsg());
    return NULL;
}

/* Answer r's client (when it has one) and let its connection go. */
static void answer(struct hint_request *r, int rc, const char *message,
                   const struct larder__hinted *h)
{
    struct connection *c = r->connection;
    if (!c) return;
    if (rc < 0) {
        send_error(c, r->request, rc, message);
    } else {
        uint8_t frame[HINTED_ROOM];
        int n = larder__wire_encode_hinted(frame, sizeof frame, r->request, h);
        if (n > 0) enqueue(c, frame, (size_t)n);
    }
    struct larderd *d = c->daemon;
    pthread_mutex_lock(&c->lock);
    c->jobs--;
    pthread_mutex_unlock(&c->lock);
    connection_release(c);
    larderd_wake(d);
}

/* Send r to the members chosen, on a thread each; their answers summed into *sum. */
static void forward_all(struct hint_request *r, const size_t *members, size_t count,
                        struct larder__hinted *sum)
{
    if (!count) return;
    uint8_t *frame = malloc(LARDER__WIRE_HEADER + LARDER__WIRE_MAX_HINT);
    struct forward *f = calloc(count, sizeof *f);
    struct larder__hint h = {
        .kind = LARDER__HINT_HOT,
        .flags = (uint8_t)(LARDER__HINT_HERE | (r->name ? LARDER__HINT_NAME : 0) |
                           (r->flags & (LARDER__HINT_WAIT | LARDER__HINT_ALL_NODES))),
        .ttl_ms = r->ttl_ms,
        /* a publication by its name: the path here may not exist there */
        .url_length = (uint32_t)strlen(r->name ? r->name : r->entry->url),
        .url = r->name ? r->name : r->entry->url,
        .num_keys = r->num_keys,
        .key_list = (const char *const *)r->keys};
    int n =
        frame && f
            ? larder__wire_encode_hint(frame, LARDER__WIRE_HEADER + LARDER__WIRE_MAX_HINT, 7, &h)
            : -ENOMEM;
    for (size_t i = 0; n > 0 && i < count; i++) {
        f[i] = (struct forward){.endpoint = r->entry->members[members[i]],
                                .frame = frame,
                                .length = (size_t)n,
                                .timeout_ms = r->flags & LARDER__HINT_WAIT ? WAIT_TIMEOUT_MS
                                                                           : FORWARD_TIMEOUT_MS};
        f[i].started = pthread_create(&f[i].thread, NULL, forward_run, &f[i]) == 0;
        if (!f[i].started) forward_run(&f[i]);
    }
    for (size_t i = 0; i < count; i++) {
        if (n > 0 && f[i].started) pthread_join(f[i].thread, NULL);
        if (n <= 0 || f[i].rc < 0) {
            sum->failed++;
            continue;
        }
        sum->nodes += f[i].answer.nodes;
        sum->failed += f[i].answer.failed;
        if (!sum->samples) sum->samples = f[i].answer.samples, sum->bytes = f[i].answer.bytes;
        sum->pinned_bytes += f[i].answer.pinned_bytes;
        sum->staged_bytes += f[i].answer.staged_bytes;
        sum->flags |= f[i].answer.flags & LARDER__HINTED_PARTIAL;
        if (!(f[i].answer.flags & LARDER__HINTED_DONE)) sum->flags &= ~LARDER__HINTED_DONE;
    }
    free(f);
    free(frame);
}

/* A hint's thread: pin and stage here, forward, wait when asked, answer. */
static void *hint_run(void *arg)
{
    struct hint_request *r = arg;
    struct larderd *d = r->daemon;
    struct larder__hinted sum = {.flags = LARDER__HINTED_DONE};
    size_t *members = malloc((d->members.count + 1) * sizeof *members);
    size_t count = 0;
    bool here = false;
    char message[LARDER__WIRE_MAX_MESSAGE] = "";
    struct hint *h = NULL;
    int rc = members ? 0 : -ENOMEM;
    int slot;
    if (rc == 0 && !r->entry) /* by name, or an index not open yet: here, off the loop thread */
        rc = r->name ? publication_open(d, r->name, r->how, NAME_WAIT_MS, &r->entry)
                     : open_dataset(d, r->url, r->how, &r->entry, &slot);
    if (rc == 0) rc = choose(d, r, &here, members, &count);
    /* every member staging it: they pass chunks on to each other (hints_pins.c) */
    bool everyone = r->kind == LARDER__HINT_HOT && (r->flags & LARDER__HINT_ALL_NODES);
    if (rc == 0 && here) rc = hint_here(d, r->entry, r->keys, r->num_keys, r->ttl_ms, everyone, &h);
    if (rc < 0) snprintf(message, sizeof message, "%s", larder_errmsg());
    if (rc == 0) forward_all(r, members, count, &sum);
    free(members);
    if (h && (r->flags & LARDER__HINT_WAIT)) hint_wait(d, h);
    if (h) {
        pthread_mutex_lock(&d->hints->lock);
        sum.nodes++;
        sum.samples = h->samples, sum.bytes = h->bytes;
        sum.pinned_bytes += h->pinned_bytes;
        sum.staged_bytes += h->staged_bytes;
        if (h->partial || h->failed) sum.flags |= LARDER__HINTED_PARTIAL;
        if (h->jobs_left) sum.flags &= ~LARDER__HINTED_DONE;
        pthread_mutex_unlock(&d->hints->lock);
        hint_put(d, h);
    }
    answer(r, rc, message, &sum);
    struct hints *hints = d->hints;
    request_free(r);
    if (hints) {
        pthread_mutex_lock(&hints->lock);
        hints->threads--;
        pthread_cond_broadcast(&hints->changed);
        pthread_mutex_unlock(&hints->lock);
    }
    return NULL;
}

/* Run r on a thread of its own; false when none could be started, or
 * MAX_HINT_THREADS run already (r is freed). */
static bool start(struct larderd *d, struct hint_request *r)
{
    struct hints *hints = hints_of(d);
    if (!hints) {
        request_free(r);
        return false;
    }
    pthread_mutex_lock(&hints->lock);
    bool stopping = hints->stopping || hints->threads >= MAX_HINT_THREADS;
    if (!stopping) hints->threads++;
    pthread_mutex_unlock(&hints->lock);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool started = !stopping && pthread_create(&thread, &attr, hint_run, r) == 0;
    pthread_attr_destroy(&attr);
    if (!started) {
        if (!stopping) {
            pthread_mutex_lock(&hints->lock);
            hints->threads--;
            pthread_mutex_unlock(&hints->lock);
        }
        request_free(r);
    }
    return started;
}

/* Copies of the parsed hint's keys and members into r.  0 or -ENOMEM. */
static int copy_strings(struct hint_request *r, const struct larder__hint *h)
{
    if (h->targets_length && !(r->targets = strndup(h->targets, h->targets_length))) return -ENOMEM;
    if (!h->num_keys) return 0;
    if (!(r->keys = calloc(h->num_keys, sizeof *r->keys))) return -ENOMEM;
    const char *key;
    uint32_t cursor = 0, length;
    while (r->num_keys < h->num_keys && larder__wire_hint_key(h, &cursor, &key, &length))
        if (!(r->keys[r->num_keys++] = strndup(key, length))) return -ENOMEM;
    return 0;
}

static void list_answer(struct connection *c, uint64_t request)
{
    char *text = hints_list_json(c->daemon);
    size_t n = text ? strlen(text) : 0;
    uint8_t *frame = text && n <= LARDER__HINTED_MAX_TEXT ? malloc(HINTED_ROOM + n) : NULL;
    struct larder__hinted h = {.text_length = (uint32_t)n, .text = text};
    int size = frame ? larder__wire_encode_hinted(frame, HINTED_ROOM + n, request, &h) : -ENOMEM;
    if (size > 0)
        enqueue(c, frame, (size_t)size);
    else
        send_error(c, request, -ENOMEM, "out of memory (or a list too long to send)");
    free(frame);
    free(text);
}

bool hints_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    struct larderd *d = c->daemon;
    struct larder__hint h;
    if (larder__wire_hint(payload, f->length, &h) < 0) return false;
    if (c->peer && !c->proven) { /* pins take room from every reader; the list names datasets */
        send_error(c, f->request, LARDER_EDENIED,
                   "hints from peers need the cluster secret (larderd --secret-file)");
        return true;
    }
    if (h.kind == LARDER__HINT_LIST) {
        list_answer(c, f->request);
        return true;
    }
    char url[LARDER__WIRE_MAX_URL + 1];
    memcpy(url, h.url, h.url_length);
    url[h.url_length] = '\0';
    int allowed = may_open(c);
    struct dataset_entry *e = NULL;
    int slot = -1;
    bool by_name = h.flags & LARDER__HINT_NAME; /* resolved and opened on the hint's thread */
    /* an index open here already is found at once; one not yet is opened
     * on the hint's thread (open_dataset may fetch it: not on the loop) */
    int rc = allowed < 0 ? allowed
             : by_name   ? 0
                         : open_dataset(d, url, open_how(c, allowed) & ~OPEN_NEW, &e, &slot);
    if (rc == LARDER_ENOTFOUND && allowed == 1) rc = 0, e = NULL;
    if (rc < 0) {
        if (rc == LARDER_EDENIED) say("HINT of %s refused: %s", url, larder_errmsg());
        send_error(c, f->request, rc, larder_errmsg());
        return true;
    }
    struct hint_request *r = calloc(1, sizeof *r);
    if (r) {
        *r = (struct hint_request){.daemon = d,
                                   .connection = c,
                                   .request = f->request,
                                   .entry = e,
                                   .kind = h.kind,
                                   .flags = h.flags,
                                   .replicas = h.replicas,
                                   .ttl_ms = h.ttl_ms,
                                   .from_peer = c->peer,
                                   .how = open_how(c, allowed)};
        rc = copy_strings(r, &h);
        if (rc == 0 && by_name && !(r->name = strdup(url))) rc = -ENOMEM;
        if (rc == 0 && !by_name && !e && !(r->url = strdup(url))) rc = -ENOMEM;
    }
    if (!r || rc < 0) {
        request_free(r);
        send_error(c, f->request, -ENOMEM, "out of memory");
        return true;
    }
    pthread_mutex_lock(&c->lock); /* the connection stays, busy, until answered */
    c->refs++;
    c->jobs++;
    pthread_mutex_unlock(&c->lock);
    if (!start(d, r)) {
        send_error(c, f->request, -EAGAIN,
                   "too many hints in progress on this node (or no thread, or stopping): "
                   "try again");
        pthread_mutex_lock(&c->lock);
        c->jobs--;
        pthread_mutex_unlock(&c->lock);
        connection_release(c); /* ours: the loop still holds its own */
    }
    return true;
}

void hints_on_publish(struct larderd *d, const char *name, struct dataset_entry *e)
{
    for (int i = 0; i < d->config.num_replicate; i++) {
        const char *rule = d->config.replicate[i], *equals = strchr(rule, '=');
        size_t prefix = equals ? (size_t)(equals - rule) : 0;
        if (!equals || strncmp(name, rule, prefix) != 0) continue;
        struct hint_request *r = calloc(1, sizeof *r);
        if (r) {
            *r = (struct hint_request){.daemon = d,
                                       .entry = e,
                                       .kind = LARDER__HINT_REPLICATE,
                                       .ttl_ms = POLICY_TTL_MS,
                                       .targets = strdup(equals + 1),
                                       .name = strdup(name)};
            if (!r->targets || !r->name) {
                request_free(r);
                r = NULL;
            }
        }
        if (!r || !start(d, r)) { /* start() frees r when it fails */
            say("hint: publication %s: could not start its replication", name);
            continue;
        }
        say("hint: publication %s: replicating to %s (--replicate-prefix)", name, equals + 1);
    }
}
