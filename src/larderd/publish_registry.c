/*
 * publish_registry.c - the daemon's registry of names (publish.c has the
 * whole): the publications this node knows, found, added and forgotten;
 * the RESOLVEs parked until a name is known, answered or expired by the
 * loop's sweep; a publication's dataset adopted by open_dataset (every
 * shard owned by its producer); the registry freed.  The lock rules are
 * publish.c's: the registry's lock is taken inside d->lock, never around it.
 */
#include "publish.h"

#include "index.h"
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

/* The registry (with this node's own publications from before a restart),
 * made by larderd_start before the loop or any worker runs: OPEN and
 * PUBLISH jobs, the loop and the name jobs all reach it at once, and
 * making it changes the allowed prefixes (publications_allow).  Made here
 * on first use only where larderd_start was not called (one thread). */
struct publications *registry(struct larderd *d)
{
    if (!d->publications) {
        struct publications *r = calloc(1, sizeof *r);
        if (!r) return NULL;
        pthread_mutex_init(&r->lock, NULL);
        if (larder__pool_new(&r->jobs, NAME_WORKERS) < 0) {
            pthread_mutex_destroy(&r->lock);
            free(r);
            return NULL;
        }
        publications_load(d, r);
        publications_allow(d, r);
        d->publications = r;
    }
    return d->publications;
}

int publications_start(struct larderd *d)
{
    return registry(d) ? 0 : -ENOMEM;
}

void publication_free(struct publication *p)
{
    if (!p) return;
    free(p->producer);
    free(p->location);
    free(p->origin);
    free(p->local);
    free(p);
}

/* The publication named name[0..length), or NULL.  Call with the lock held. */
struct publication *find(struct publications *r, const char *name, size_t length)
{
    for (struct publication *p = r->list; p; p = p->next)
        if (strlen(p->name) == length && memcmp(p->name, name, length) == 0) return p;
    return NULL;
}

/* Take p off the list and free it.  Call with the lock held. */
void forget(struct publications *r, struct publication *p)
{
    for (struct publication **at = &r->list; *at; at = &(*at)->next)
        if (*at == p) {
            *at = p->next;
            r->count--;
            publication_free(p);
            return;
        }
}

/* A new publication on the list (state LEARNING), or NULL when full or out of memory.
 * Call with the lock held. */
struct publication *add(struct publications *r, const char *name, size_t length)
{
    if (r->count >= MAX_PUBLICATIONS) return NULL;
    struct publication *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    memcpy(p->name, name, length);
    p->producer_member = SIZE_MAX;
    p->publisher_uid = -1; /* restored from published/mine, or learned: unknown */
    p->next = r->list;
    r->list = p;
    r->count++;
    return p;
}

/* The member called name[0..length), or SIZE_MAX. */
size_t member_named(const struct larderd *d, const char *name, size_t length)
{
    for (size_t m = 0; m < d->members.count; m++)
        if (strlen(d->members.names[m]) == length && memcmp(d->members.names[m], name, length) == 0)
            return m;
    return SIZE_MAX;
}

/*
 * Queue RESOLVED(p) to c (to a peer: the producer's path, and the
 * index's bytes when asked and there is no origin; to a local reader:
 * what it opens here).  Call with the registry lock held.
 */
void send_publication(struct connection *c, uint64_t request, uint32_t flags,
                      const struct publication *p)
{
    const char *location = c->peer ? p->location : p->local;
    struct larder__publication m = {
        .id_low = p->id_low,
        .id_high = p->id_high,
        .flags = p->origin ? LARDER__PUBLISHED_ORIGIN : 0,
        .generation = p->generation,
        .name_length = (uint32_t)strlen(p->name),
        .name = p->name,
        .producer_length = (uint32_t)strlen(p->producer),
        .producer = p->producer,
        .location_length = (uint32_t)strlen(location),
        .location = location,
        .origin_length = p->origin ? (uint32_t)strlen(p->origin) : 0,
        .origin = p->origin,
    };
    uint8_t *index = NULL;
    if ((flags & LARDER__RESOLVE_INDEX) && !p->origin) {
        uint32_t length = 0;
        int rc = read_file(p->local, &index, &length);
        /* the file at that path may have been replaced since it was
         * published (its directory is its user's): only the bytes of the
         * dataset that was published go out */
        if (rc == 0 && !larder__index_image_is(index, length, p->id_low, p->id_high))
            rc = larder__fail(LARDER_EBADINDEX,
                              "publication %s: its index at %s is no longer the one published",
                              p->name, p->local);
        if (rc < 0) {
            free(index);
            send_error(c, request, rc, larder_errmsg());
            return;
        }
        m.index = index;
        m.index_length = length;
    }
    size_t size = larder__wire_publication_size(LARDER__RESOLVED, &m);
    struct output *o = size ? output_new(size) : NULL;
    if (o && larder__wire_encode_publication(o->bytes, size, LARDER__RESOLVED, request, &m) > 0) {
        enqueue_output(c, o);
    } else {
        free(o);
        send_error(c, request, size ? -ENOMEM : LARDER_ETOOSMALL,
                   "the publication does not fit an answer");
    }
    free(index);
}

/* The waiter is answered: its connection's job and reference go back. */
static void waiter_free(struct waiter *w)
{
    struct connection *c = w->connection;
    pthread_mutex_lock(&c->lock);
    c->jobs--;
    pthread_mutex_unlock(&c->lock);
    struct larderd *d = c->daemon;
    connection_release(c);
    free(w);
    larderd_wake(d);
}

/* Answer every waiter for p.  Call with the registry lock held. */
void answer_waiters(struct publications *r, const struct publication *p)
{
    for (struct waiter **at = &r->waiters; *at;) {
        struct waiter *w = *at;
        if (strcmp(w->name, p->name) != 0) {
            at = &w->next;
            continue;
        }
        *at = w->next;
        r->num_waiters--;
        send_publication(w->connection, w->request, w->flags, p);
        waiter_free(w);
    }
}

/* Answer the waiters whose wait is over (or whose client is gone), those
 * of a name being learned excepted.  Call with the registry lock held. */
static void expire_waiters(struct publications *r, int64_t now)
{
    for (struct waiter **at = &r->waiters; *at;) {
        struct waiter *w = *at;
        struct publication *p = find(r, w->name, strlen(w->name));
        bool busy = p && p->state != READY;
        if (!w->connection->dropped && (now < w->deadline_ms || busy)) {
            at = &w->next;
            continue;
        }
        *at = w->next;
        r->num_waiters--;
        if (!w->connection->dropped) {
            char message[LARDER__WIRE_MAX_PUBLICATION + 128];
            snprintf(message, sizeof message, "no publication named %s (waited until the timeout)",
                     w->name);
            send_error(w->connection, w->request, LARDER_ENOTFOUND, message);
        }
        waiter_free(w);
    }
}

/* The names that RESOLVEs wait for and that are unknown here (no learning
 * job: it failed, or the name was forgotten): their members are asked
 * again every REASK_MS, so a name published after a member's "not here"
 * is found without waiting for an ANNOUNCE that may not come (one lost).
 * Call with the registry lock held; the jobs are added to *jobs. */
static void reask(struct larderd *d, struct publications *r, int64_t now, struct name_job **jobs)
{
    if (d->members.count <= 1 || d->stopping) return;
    size_t started = 0; /* a few names a sweep: parked RESOLVEs of made-up names
                         * cost the members no more than a client's own asking */
    for (struct waiter *w = r->waiters; w && started < MAX_REASKS; w = w->next) {
        if ((w->flags & LARDER__RESOLVE_LOCAL) || now - w->asked_ms < REASK_MS) continue;
        w->asked_ms = now;
        size_t length = strlen(w->name);
        if (find(r, w->name, length)) continue; /* being learned, or known */
        struct name_job *job = name_job_new(d, w->name, length);
        if (!job || !add(r, w->name, length)) {
            if (job) name_job_free(job);
            continue;
        }
        job->next = *jobs;
        *jobs = job;
        started++;
    }
}

void publications_sweep(struct larderd *d, int64_t now)
{
    struct publications *r = d->publications;
    if (!r) return;
    struct name_job *jobs = NULL;
    pthread_mutex_lock(&r->lock);
    expire_waiters(r, now);
    reask(d, r, now, &jobs);
    pthread_mutex_unlock(&r->lock);
    while (jobs) {
        struct name_job *job = jobs;
        jobs = job->next;
        job->next = NULL;
        char name[NAME_CAPACITY];
        memcpy(name, job->name, sizeof name);
        if (!submit(d, learn_job, job)) { /* forget what reask added (submit freed job) */
            pthread_mutex_lock(&r->lock);
            struct publication *p = find(r, name, strlen(name));
            if (p && p->state == LEARNING) forget(r, p);
            pthread_mutex_unlock(&r->lock);
        }
    }
    announce_due(d, now);
    publications_close_replaced(d, now);
}

void publication_adopt(struct larderd *d, struct dataset_entry *e, const char *url)
{
    struct publications *r = registry(d);
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    struct publication *p = r->list;
    while (p && (!p->local || strcmp(p->local, url) != 0))
        p = p->next;
    /* a replaced one, opened again by a reader that still reads it (its
     * connection was dropped, idle, and the dataset closed meanwhile) */
    if (!p) p = find_retired(r, url);
    if (p) {
        size_t owner = p->mine ? d->self : p->producer_member;
        if (owner < d->members.count) {
            e->fixed_owner = owner;
            __atomic_store_n(&e->fixed, true, __ATOMIC_RELEASE);
        }
        if (!p->mine) e->peer_url = strdup(p->location); /* NULL: the url (no memory) */
        if (!p->mine && !p->origin) {
            char why[LARDER__WIRE_MAX_PUBLICATION + LARDER__WIRE_MAX_NAME + 128];
            snprintf(why, sizeof why,
                     "%s was published without --write-through: its producer %s, which holds "
                     "the only copy, did not serve it",
                     p->name, p->producer);
            larder__dataset_set_missing_origin(e->dataset, why);
        }
    }
    pthread_mutex_unlock(&r->lock);
}

bool publication_local(struct larderd *d, const char *url)
{
    struct publications *r = d->publications; /* made by larderd_start, or none */
    if (!r) return false;
    pthread_mutex_lock(&r->lock);
    struct publication *p = r->list;
    while (p && (!p->local || strcmp(p->local, url) != 0))
        p = p->next;
    bool found = p || find_retired(r, url);
    pthread_mutex_unlock(&r->lock);
    return found;
}

void publications_stop(struct larderd *d)
{
    struct publications *r = d->publications;
    if (!r || !r->jobs) return;
    struct larder__pool *jobs = r->jobs;
    larder__pool_free(jobs); /* the jobs queued and running end (d->stopping: at once) */
    r->jobs = NULL;          /* from now on submit() refuses */
}

void publications_free(struct larderd *d)
{
    struct publications *r = d->publications;
    if (!r) return;
    publications_stop(d);
    while (r->retired) {
        struct publication *p = r->retired;
        r->retired = p->next;
        publication_free(p);
    }
    while (r->retries) {
        struct name_job *job = r->retries;
        r->retries = job->next;
        name_job_free(job);
    }
    while (r->waiters) {
        struct waiter *w = r->waiters;
        r->waiters = w->next;
        waiter_free(w);
    }
    while (r->list) {
        struct publication *p = r->list;
        r->list = p->next;
        publication_free(p);
    }
    for (int i = 0; r->allowed && i < d->config.num_allow; i++)
        if (d->config.allow[i] == r->allowed) { /* publications_allow's, the last */
            d->config.allow[i] = NULL;
            d->config.num_allow = i;
        }
    free(r->allowed);
    pthread_mutex_destroy(&r->lock);
    free(r);
    d->publications = NULL;
}
