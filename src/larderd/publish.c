/*
 * publish.c - names: a directory's files published under a name by the
 * node that wrote them, and found by that name on every node
 * (docs/protocol.md, "Names").
 *
 *   PUBLISH  (a local client): open the index with this node as the owner
 *            of every shard (the bytes are here: no origin read), check
 *            a written-through copy is the same index, register the name
 *            and ANNOUNCE it to every member (a pool job).  With REPLACE,
 *            a known name takes the new publication in place of the old,
 *            one generation up, once the new index is open and checked.
 *   ANNOUNCE (a peer): register the name (or replace it, when of a higher
 *            generation than the one known) and fetch its index in a pool
 *            job: from the origin when written through, else its bytes
 *            from the producer (RESOLVE with LARDER__RESOLVE_INDEX), kept
 *            in the cache directory (published/ID.index), where local
 *            readers open it; every shard's owner is then the producer.
 *   RESOLVE  (either): answered at once when the name is known; else
 *            parked (no thread waits) until an ANNOUNCE makes it known or
 *            the loop's sweep finds its wait over; a name unknown here is
 *            asked of the members (a daemon restarted after the
 *            publication still finds it).
 *
 * Threads: handlers and the sweep run on the loop thread, but a PUBLISH
 * opens its index on the open pool (the connection's next frames held back
 * until it is answered, as for an OPEN); fetches and announcements run on
 * the pool; the registry is guarded by its own lock,
 * which is taken inside d->lock (publication_adopt) and never held while
 * taking d->lock.
 *
 * Files: this one handles the three requests; publish_registry.c keeps the
 * registry and the parked RESOLVEs; publish_jobs.c runs the pool's work
 * (announcing, learning) and keeps this node's own names across restarts.
 */
#include "publish.h"

#include "index.h"
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name this node gives itself as a producer. */
static const char *self_name(const struct larderd *d)
{
    return d->self_name ? d->self_name : "local";
}

/* ---- the requests --------------------------------------------------------------- */

/* A frame that does not parse: an ERROR saying why, then the connection closes. */
static bool malformed(struct connection *c, const struct larder__frame *f, int rc)
{
    say("refused a %s frame: %s", c->peer ? "peer's" : "local client's", larder_errmsg());
    refuse(c, f->request, rc, larder_errmsg());
    return true;
}

bool resolve_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    struct larderd *d = c->daemon;
    struct larder__resolve q;
    int rc = larder__wire_resolve(payload, f->length, &q);
    if (rc < 0) return malformed(c, f, rc);
    struct publications *r = registry(d);
    if (!r) {
        send_error(c, f->request, -ENOMEM, "out of memory");
        return true;
    }
    if (q.flags & LARDER__RESOLVE_LIST) {
        send_names(c, f->request, r);
        return true;
    }
    if ((q.flags & LARDER__RESOLVE_INDEX) && !c->peer) { /* a local reader opens its path */
        send_error(c, f->request, LARDER_EDENIED,
                   "only a member of the cluster may fetch a publication's index");
        return true;
    }
    pthread_mutex_lock(&r->lock);
    struct publication *p = find(r, q.name, q.name_length);
    if (p && p->state == READY) {
        send_publication(c, f->request, q.flags, p);
        pthread_mutex_unlock(&r->lock);
        return true;
    }
    bool ask_members = !p && !(q.flags & LARDER__RESOLVE_LOCAL) && d->members.count > 1;
    if (!p && !ask_members && q.wait_ms == 0) {
        pthread_mutex_unlock(&r->lock);
        char message[LARDER__WIRE_MAX_PUBLICATION + 64];
        snprintf(message, sizeof message, "no publication named %.*s on this node",
                 (int)q.name_length, q.name);
        send_error(c, f->request, LARDER_ENOTFOUND, message);
        return true;
    }
    size_t mine = 0; /* RESOLVEs this connection has parked: a few each, not the whole table */
    for (struct waiter *v = r->waiters; v; v = v->next)
        mine += v->connection == c;
    struct waiter *w = r->num_waiters < MAX_WAITERS && mine < MAX_WAITERS_PER_CONNECTION
                           ? calloc(1, sizeof *w)
                           : NULL;
    struct publication *learning = ask_members ? add(r, q.name, q.name_length) : NULL;
    if (!w || (ask_members && !learning)) {
        pthread_mutex_unlock(&r->lock);
        free(w);
        send_error(c, f->request, -EAGAIN, "too many names or waiting clients: try again");
        return true;
    }
    *w = (struct waiter){.connection = c,
                         .request = f->request,
                         .flags = q.flags,
                         .deadline_ms = now_ms() + q.wait_ms,
                         .asked_ms = now_ms(), /* learning (when unknown): asked now */
                         .next = r->waiters};
    memcpy(w->name, q.name, q.name_length);
    r->waiters = w;
    r->num_waiters++;
    pthread_mutex_lock(&c->lock);
    c->refs++;
    c->jobs++; /* busy: the sweep does not take it for idle */
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_unlock(&r->lock);
    if (learning) {
        struct name_job *job = name_job_new(d, q.name, q.name_length);
        if (!job || !submit(d, learn_job, job)) {
            pthread_mutex_lock(&r->lock);
            forget(r, find(r, q.name, q.name_length));
            pthread_mutex_unlock(&r->lock);
        }
    }
    return true;
}

bool announce_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    struct larderd *d = c->daemon;
    if (!c->peer) {
        send_error(c, f->request, LARDER_EDENIED, "ANNOUNCE comes from peer daemons only");
        return true;
    }
    /* an ANNOUNCE has this daemon open the index it names, as its own user:
     * only for members that proved the secret.  Without one, a "peer" is
     * anyone who reaches the port (every local user on loopback), who may
     * read only datasets already open (docs/security.md), as READERS and
     * HINT refuse them */
    if (!d->secret || !c->proven) {
        send_error(c, f->request, LARDER_EDENIED,
                   "ANNOUNCE is for members that proved the cluster secret (--secret-file)");
        return true;
    }
    struct larder__publication m;
    int rc = larder__wire_publication(LARDER__ANNOUNCE, payload, f->length, &m);
    if (rc < 0) return malformed(c, f, rc);
    size_t producer = member_named(d, m.producer, m.producer_length);
    if (producer == SIZE_MAX || producer == d->self) {
        rc = larder__fail(LARDER_EDENIED, "ANNOUNCE of %.*s: producer %.*s is %s",
                          (int)m.name_length, m.name, (int)m.producer_length, m.producer,
                          producer == SIZE_MAX ? "not a member of this cluster" : "this node");
        return malformed(c, f, rc);
    }
    struct publications *r = registry(d);
    struct name_job *job = name_job_new(d, m.name, m.name_length);
    if (!r || !job || !(job->producer = strndup(m.producer, m.producer_length)) ||
        !(job->location = strndup(m.location, m.location_length)) ||
        (m.origin_length && !(job->origin = strndup(m.origin, m.origin_length)))) {
        if (job) name_job_free(job);
        send_error(c, f->request, -ENOMEM, "out of memory");
        return true;
    }
    job->id_low = m.id_low, job->id_high = m.id_high;
    job->generation = m.generation;
    job->announced = true;
    job->producer_member = producer;
    pthread_mutex_lock(&r->lock);
    struct publication *p = find(r, m.name, m.name_length);
    /* a replacement (--replace) of a known publication, or a stale announcement of one
     * replaced since (acknowledged, and nothing changes) */
    bool known = p && p->state != LEARNING;
    /* a PUBLISH of the name here, its index being opened (on the open pool):
     * a member's word does not change the entry under it */
    bool publishing = p && p->mine && p->state == FETCHING;
    bool newer = known && m.generation > p->generation,
         stale = known && m.generation < p->generation;
    if (publishing ||
        (known && !newer && !stale && (p->id_low != m.id_low || p->id_high != m.id_high))) {
        pthread_mutex_unlock(&r->lock);
        name_job_free(job);
        char message[LARDER__WIRE_MAX_PUBLICATION + 64];
        snprintf(message, sizeof message, "%.*s is %s here", (int)m.name_length, m.name,
                 publishing ? "being published" : "published as another dataset");
        send_error(c, f->request, publishing ? -EBUSY : -EEXIST, message);
        return true;
    }
    /* a learning job gives way to the producer's word */
    bool fetch = !p || p->state == LEARNING || newer;
    if (!p) p = add(r, m.name, m.name_length);
    if (!p) {
        pthread_mutex_unlock(&r->lock);
        name_job_free(job);
        send_error(c, f->request, -EAGAIN, "too many names here");
        return true;
    }
    if (fetch) { /* readers resolving the name wait for it now, then open the new one */
        /* the one it replaces is closed once its readers here are done */
        if (p->state != LEARNING && (p->id_low != m.id_low || p->id_high != m.id_high))
            publication_retire(r, p);
        p->state = FETCHING;
        p->id_low = m.id_low, p->id_high = m.id_high;
        p->generation = m.generation;
    }
    pthread_mutex_unlock(&r->lock);
    /* the answer: the publication as registered (an acknowledgement) */
    size_t size = larder__wire_publication_size(LARDER__RESOLVED, &m);
    struct output *o = output_new(size);
    if (o && larder__wire_encode_publication(o->bytes, size, LARDER__RESOLVED, f->request, &m) > 0)
        enqueue_output(c, o);
    else
        free(o);
    if (fetch) {
        say("%.*s: announced by %.*s", (int)m.name_length, m.name, (int)m.producer_length,
            m.producer);
        submit(d, learn_job, job);
    } else {
        name_job_free(job);
    }
    return true;
}

/*
 * The slow part of a PUBLISH, on the open pool (as an OPEN of a new index,
 * opens.c): the index opened (fetched, hashed and validated whole: seconds
 * for a large one), checked against a written-through copy, registered and
 * answered, while the loop serves every other client.  m points into the
 * job's copy of the frame.
 */
static void publish_open(struct connection *c, uint64_t request, int allowed,
                         const struct larder__publish *m)
{
    struct larderd *d = c->daemon;
    int rc = 0;
    struct publications *r = registry(d);
    if (!r) {
        send_error(c, request, -ENOMEM, "out of memory");
        return;
    }
    char *index = strndup(m->index, m->index_length);
    char *origin = m->origin_length ? strndup(m->origin, m->origin_length) : NULL;
    char *producer = strdup(self_name(d));
    struct publication *p = NULL, *added = NULL; /* added: the entry this PUBLISH made */
    /* --replace of a name known here: registered as this node's only once the
     * new index is open and checked, in place of the old, one generation up;
     * readers of the old keep their dataset (its id, its checksums) */
    bool replacing = false;
    uint64_t generation = 0;
    if (!index || !producer || (m->origin_length && !origin)) rc = -ENOMEM;
    if (rc == 0) {
        pthread_mutex_lock(&r->lock);
        struct publication *same = find(r, m->name, m->name_length);
        /* a name published here is replaced only by the user who published
         * it (or the daemon's own user, or root): a local user may not
         * swap another's "latest" for bytes of their own.  Names learned
         * from members are theirs (members are trusted with names). */
        bool others = same && same->mine && !c->own_user && same->publisher_uid != (int64_t)c->uid;
        if (same && (m->flags & LARDER__PUBLISH_REPLACE) && same->state == READY && others)
            rc = larder__fail(-EACCES, "%.*s was published here by another user",
                              (int)m->name_length, m->name);
        else if (same && (m->flags & LARDER__PUBLISH_REPLACE) && same->state == READY &&
                 same->replacing) /* two at once: the loser's dataset would stay open */
            rc = larder__fail(-EEXIST, "%.*s is being replaced here: try again",
                              (int)m->name_length, m->name);
        else if (same && (m->flags & LARDER__PUBLISH_REPLACE) && same->state == READY)
            replacing = same->replacing = true, generation = same->generation + 1;
        else if (same)
            rc = larder__fail(-EEXIST, "%.*s is %s (dataset from %s)%s", (int)m->name_length,
                              m->name,
                              same->state == READY ? "already published"
                              : same->mine         ? "being published here"
                                                   : "being learned",
                              same->producer ? same->producer : "a member",
                              m->flags & LARDER__PUBLISH_REPLACE ? ": try again" : "");
        else if (!(p = add(r, m->name, m->name_length)))
            rc = larder__fail(-EAGAIN, "too many names here");
        if (p) {
            added = p;
            p->state = FETCHING;
            p->mine = true;
            p->publisher_uid = (int64_t)c->uid;
            p->producer_member = d->self;
            p->producer = producer, p->location = index, p->origin = origin;
            p->local = strdup(index);
            producer = index = origin = NULL;
            if (!p->local) rc = -ENOMEM;
        }
        pthread_mutex_unlock(&r->lock);
    }
    if (!replacing) free(index), free(origin), free(producer), index = origin = producer = NULL;
    /* opened with this node as every shard's owner (publication_adopt);
     * a written-through copy must be the same index: the same entry */
    struct dataset_entry *e = NULL, *copy = NULL;
    int slot;
    char *url = NULL;
    if (rc == 0) {
        char *origin_url = NULL;
        if (replacing) {
            url = strdup(index);
            origin_url = origin ? strdup(origin) : NULL;
        } else {
            pthread_mutex_lock(&r->lock);
            url = strdup(p->local);
            origin_url = p->origin ? strdup(p->origin) : NULL;
            pthread_mutex_unlock(&r->lock);
        }
        /* on the open pool: waits for another's OPEN of the same url, as an OPEN does */
        rc = url ? open_dataset(d, url, allowed == 1 ? OPEN_NEW : 0, &e, &slot) : -ENOMEM;
        if (rc == 0 && origin_url) {
            rc = open_dataset(d, origin_url, OPEN_NEW, &copy, &slot);
            if (rc == 0 && copy != e)
                rc = larder__fail(LARDER_EUSAGE, "the written-through index %s is not %s's",
                                  origin_url, url);
        }
        free(origin_url);
    }
    uint64_t low = 0, high = 0; /* the index file may have been rewritten since it was opened */
    if (rc == 0 && (!claimed_id(url, &low, &high) || low != e->id_low || high != e->id_high))
        rc = larder__fail(-EBUSY,
                          "%s was rewritten after this daemon opened it as another dataset: "
                          "publish the new files from a directory of their own",
                          url);
    if (rc == 0 && !e->fixed && d->self < d->members.count) { /* open before it was published */
        pthread_mutex_lock(&d->lock);
        e->fixed_owner = d->self; /* then the flag: chunk_owner reads them without the lock */
        __atomic_store_n(&e->fixed, true, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&d->lock);
    }
    char name[LARDER__WIRE_MAX_PUBLICATION + 1];
    memcpy(name, m->name, m->name_length);
    name[m->name_length] = '\0';
    struct name_job *job = NULL;
    pthread_mutex_lock(&r->lock);
    p = find(r, m->name, m->name_length);
    if (replacing && p) p->replacing = false; /* (an entry made anew meanwhile has it clear) */
    /* only the entry this PUBLISH added: another's, being opened at once
     * on another worker, is that one's to keep or forget */
    if (rc < 0 && p && p == added && p->state != READY && p->mine) forget(r, p), p = NULL;
    if (rc == 0 && !p) rc = larder__fail(LARDER_ENOTFOUND, "%s: forgotten meanwhile", name);
    if (rc == 0 && replacing && (p->state != READY || p->generation != generation - 1))
        rc = larder__fail(-EBUSY, "%s was replaced meanwhile: try again", name);
    if (rc == 0 && replacing) { /* the new publication takes the old one's place */
        char *local = strdup(index);
        if (!local) {
            rc = -ENOMEM;
        } else {
            /* the old one's dataset is closed once its readers are done */
            if (p->id_low != e->id_low || p->id_high != e->id_high) publication_retire(r, p);
            free(p->producer), free(p->location), free(p->origin), free(p->local);
            p->producer = producer, p->location = index, p->origin = origin, p->local = local;
            producer = index = origin = NULL;
            p->mine = true;
            p->publisher_uid = (int64_t)c->uid;
            p->producer_member = d->self;
            p->generation = generation;
        }
    }
    if (rc == 0) {
        p->id_low = e->id_low, p->id_high = e->id_high;
        p->state = READY;
        send_publication(c, request, 0, p);
        answer_waiters(r, p);
        if (d->members.count > 1 && (job = name_job_new(d, name, m->name_length))) {
            job->id_low = p->id_low, job->id_high = p->id_high;
            job->generation = p->generation;
            job->producer = strdup(p->producer);
            job->location = strdup(p->location);
            job->origin = p->origin ? strdup(p->origin) : NULL;
            if (!job->producer || !job->location || (p->origin && !job->origin))
                name_job_free(job), job = NULL;
        }
    }
    pthread_mutex_unlock(&r->lock);
    free(index), free(origin), free(producer); /* a replacement's, when not taken */
    if (rc < 0) {
        say("PUBLISH of %s refused: %s", name, larder_errmsg());
        send_error(c, request, rc, larder_errmsg());
        free(url);
        return;
    }
    if (replacing)
        say("published %s: %s (generation %llu, replacing the one before)", name, url,
            (unsigned long long)generation);
    else
        say("published %s: %s", name, url);
    free(url);
    publication_remember(d, name); /* this node serves it again after a restart */
    hints_on_publish(d, name, e);
    if (job) announce_all(d, job);
}

/* A PUBLISH on the open pool: a copy of its frame's payload. */
struct publish_job {
    struct connection *connection;
    uint64_t request;
    int allowed; /* may_open's answer on the loop */
    uint32_t length;
    uint8_t payload[];
};

static void publish_job(void *arg)
{
    struct publish_job *job = arg;
    struct connection *c = job->connection;
    struct larderd *d = c->daemon;
    struct larder__publish m;
    /* parsed on the loop already: the same bytes parse the same */
    if (larder__wire_publish(job->payload, job->length, &m) < 0) {
        send_error(c, job->request, LARDER_EPROTOCOL, "PUBLISH frame did not parse");
    } else if (d->stopping) {
        send_error(c, job->request, -EAGAIN, "the daemon is stopping");
    } else {
        /* the entry it opens is not closed under it (a replaced publication's
         * may be, publish_retire.c) until its last use, hints_on_publish */
        struct publications *r = registry(d);
        if (r) {
            pthread_mutex_lock(&r->lock);
            r->opening++;
            pthread_mutex_unlock(&r->lock);
        }
        publish_open(c, job->request, job->allowed, &m);
        if (r) {
            pthread_mutex_lock(&r->lock);
            r->opening--;
            pthread_mutex_unlock(&r->lock);
        }
    }
    pthread_mutex_lock(&c->lock);
    c->jobs--;
    c->opens--; /* its next frames are read again */
    pthread_mutex_unlock(&c->lock);
    connection_release(c);
    free(job);
    larderd_wake(d);
}

/*
 * PUBLISH: checked on the loop (a peer may not, a malformed frame closes
 * the connection, a user who may not open indexes is refused), then opened
 * and registered on the open pool, the connection's next frames held back
 * until it is answered (c->opens, as for an OPEN).
 */
bool publish_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    struct larderd *d = c->daemon;
    if (c->peer) {
        refuse(c, f->request, LARDER_EDENIED, "PUBLISH comes from a client of this node only");
        return true;
    }
    struct larder__publish m;
    int rc = larder__wire_publish(payload, f->length, &m);
    if (rc < 0) return malformed(c, f, rc);
    int allowed = may_open(c); /* 1: a local client that may open indexes */
    if (allowed < 0) {
        send_error(c, f->request, allowed, larder_errmsg());
        return true;
    }
    struct publish_job *job = malloc(sizeof *job + f->length);
    if (job) {
        *job = (struct publish_job){
            .connection = c, .request = f->request, .allowed = allowed, .length = f->length};
        memcpy(job->payload, payload, f->length);
        pthread_mutex_lock(&c->lock);
        c->refs++;
        c->jobs++;
        c->opens++;
        pthread_mutex_unlock(&c->lock);
        if (larder__pool_submit(d->open_pool, publish_job, job, LARDER__DEMAND) == 0) return true;
        pthread_mutex_lock(&c->lock);
        c->jobs--;
        c->opens--;
        pthread_mutex_unlock(&c->lock);
        connection_release(c); /* ours: the loop still holds its own */
        free(job);
    }
    send_error(c, f->request, -EAGAIN, "PUBLISH could not be queued (out of memory, or stopping)");
    return true;
}
