/*
 * publish_retire.c - publications replaced on this node (publish.c has the
 * whole), and the closing of their datasets.  A `--replace` moves a name
 * to a new dataset; the one it named stays open for the readers that
 * opened it (they read it byte for byte until they close: never a mix),
 * and is closed by the loop's sweep once no connection holds it and no
 * hint, warm job or name job may use it.  Without this every replacement
 * left one dataset open in every daemon that had opened it, and a job
 * republishing "latest" every few minutes reached MAX_DATASETS.
 *
 * A replaced publication is remembered (r->retired, the last
 * MAX_RETIRED): what closes its dataset, and what makes a reader that
 * comes back after its connection was dropped (idle) find the same owner
 * again when its OPEN opens the old index anew (publication_adopt).  What
 * the producer keeps on disk of it is its own business; its blocks in the
 * node cache are evicted as it is closed (close_unused_datasets).
 *
 * Known limit: a replaced publication's record is in memory only; a
 * dataset a reader reopens after a daemon restart is opened as a plain
 * dataset, never closed until the next restart.
 *
 * Locks: the registry's lock inside d->lock (closable runs with d->lock
 * held), and the hints' lock inside both; nothing here takes d->lock.
 */
#include "publish.h"

#include "hints.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A copy of p's identity and places, or NULL when out of memory. */
static struct publication *copy_of(const struct publication *p)
{
    struct publication *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    memcpy(q->name, p->name, sizeof q->name);
    q->state = READY;
    q->id_low = p->id_low, q->id_high = p->id_high;
    q->generation = p->generation;
    q->mine = p->mine;
    q->publisher_uid = p->publisher_uid;
    q->producer_member = p->producer_member;
    q->producer = p->producer ? strdup(p->producer) : NULL;
    q->location = p->location ? strdup(p->location) : NULL;
    q->origin = p->origin ? strdup(p->origin) : NULL;
    /* READY: its local path is its own; FETCHING: it may still be the one
     * before's (never opened again as this one: local NULL) */
    q->local = p->state == READY && p->local ? strdup(p->local) : NULL;
    if ((p->producer && !q->producer) || (p->location && !q->location) ||
        (p->origin && !q->origin) || (p->state == READY && p->local && !q->local)) {
        publication_free(q);
        return NULL;
    }
    return q;
}

void publication_retire(struct publications *r, const struct publication *p)
{
    size_t count = 0;
    struct publication **last = NULL;
    for (struct publication **at = &r->retired; *at; at = &(*at)->next) {
        if ((*at)->id_low == p->id_low && (*at)->id_high == p->id_high) return; /* known */
        count++;
        last = at;
    }
    struct publication *q = copy_of(p);
    if (!q) return;                     /* then its dataset stays open, as it did before */
    if (count >= MAX_RETIRED && last) { /* the oldest goes: its dataset closed long ago */
        publication_free(*last);
        *last = NULL;
    }
    q->next = r->retired;
    r->retired = q;
}

void retire_opened(struct publications *r, const char *name, const struct dataset_entry *e)
{
    /* no producer, no places: find_retired never answers it, so a reader's
     * later OPEN of that index opens a plain dataset */
    struct publication p = {
        .state = READY, .id_low = e->id_low, .id_high = e->id_high, .producer_member = SIZE_MAX};
    snprintf(p.name, sizeof p.name, "%s", name);
    publication_retire(r, &p);
}

struct publication *find_retired(struct publications *r, const char *local)
{
    for (struct publication *q = r->retired; q; q = q->next)
        if (q->local && strcmp(q->local, local) == 0) return q;
    return NULL;
}

/* Whether the pool has tasks of class `priority` queued or running. */
static bool pool_busy(struct larder__pool *pool, int priority)
{
    if (!pool) return false;
    struct larder__pool_stats s;
    larder__pool_stats_get(pool, &s);
    return s.running[priority] > 0 || s.submitted[priority] > s.started[priority];
}

/* Whether a hint uses e: one pins it, its staging is queued or running, or
 * a hint's thread runs (it may be opening e right now). */
static bool hinted(struct larderd *d, const struct dataset_entry *e)
{
    struct hints *hints = d->hints;
    if (!hints) return false;
    pthread_mutex_lock(&hints->lock);
    bool used = hints->threads > 0;
    for (struct hint *h = hints->list; h && !used; h = h->next)
        used = h->entry == e;
    for (struct stage_job *j = hints->running; j && !used; j = j->next)
        used = j->hint->entry == e;
    for (struct stage_job *j = hints->pending; j && !used; j = j->next)
        used = j->hint->entry == e;
    pthread_mutex_unlock(&hints->lock);
    return used;
}

/* close_unused_datasets' question, with d->lock held: e is a replaced
 * publication's, which no name here stands for any more, and nothing
 * but a connection could be using it (the caller looked at those). */
static bool closable(struct larderd *d, const struct dataset_entry *e)
{
    struct publications *r = d->publications;
    pthread_mutex_lock(&r->lock);
    bool replaced = false, named = false;
    for (struct publication *q = r->retired; q && !replaced; q = q->next)
        replaced = q->id_low == e->id_low && q->id_high == e->id_high;
    /* a name that stands for it again (published anew), or is being
     * learned as it: it stays */
    for (struct publication *p = r->list; p && replaced && !named; p = p->next)
        named = p->state != LEARNING && p->id_low == e->id_low && p->id_high == e->id_high;
    /* a name job may hold e between opening it and its last use */
    bool jobs = r->opening > 0;
    pthread_mutex_unlock(&r->lock);
    if (!replaced || named || jobs) return false;
    /* without a secret, peers are unproven and may OPEN only what is open
     * (requests.c may_open): closed here, a member whose reader still
     * holds this generation could not reopen it on this node */
    if (d->members.count > 1 && !d->secret) return false;
    if (d->config.warm && pool_busy(d->pool, LARDER__WARM)) return false; /* warm jobs hold e */
    return !hinted(d, e);
}

void publications_close_replaced(struct larderd *d, int64_t now)
{
    struct publications *r = d->publications;
    if (!r || now - r->closed_ms < CLOSE_EVERY_MS) return;
    r->closed_ms = now; /* (the loop thread's alone) */
    pthread_mutex_lock(&r->lock);
    bool any = r->retired != NULL;
    pthread_mutex_unlock(&r->lock);
    if (any) close_unused_datasets(d, closable);
}
