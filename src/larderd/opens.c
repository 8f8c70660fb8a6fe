/*
 * opens.c - OPEN (docs/protocol.md "OPEN and OPENED"): who may open what,
 * a dataset open here already answered on the loop thread, a new index
 * opened on the open pool (larderd.h, open_pool) while the loop serves
 * everyone else, and the connection's next frames held back until then;
 * and open_dataset itself: the index fetched and checked with no lock
 * held, one fetch per url however many ask (struct opening), the entry
 * placed in the registry (datasets.c) under d->lock.
 */
#include "larderd.h"
#include "dataset.h"
#include "index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Whether this connection may open an index not yet open here (the
 * library still holds it to the --allow prefixes).  1: yes; 0: only
 * datasets already open; a negative code with a message: no OPEN at all.
 */
int may_open(const struct connection *c)
{
    if (c->peer) return c->proven ? 1 : 0;
    if (c->daemon->config.num_allow || c->own_user) return 1;
    return larder__fail(LARDER_EDENIED,
                        "uid %u may not open indexes on this daemon: its admin allows other users "
                        "only under prefixes given with larderd --allow PREFIX",
                        (unsigned)c->uid);
}

unsigned open_how(const struct connection *c, int allowed)
{
    return (allowed == 1 ? OPEN_NEW : 0) | (!c->peer && c->own_user ? OPEN_UNCHECKED : 0);
}

/* OPEN's answer on c: OPENED with the dataset's id and shards, or an ERROR. */
static void answer_open(struct connection *c, uint64_t request, int rc,
                        const struct dataset_entry *e, const char *url)
{
    if (rc < 0) {
        /* a peer's refused OPEN (an index under none of this daemon's
         * --allow prefixes, or marked unchecked: a member's connect-ahead
         * may ask for one its own readers may open) is no news here */
        if (rc == LARDER_EDENIED && c->peer)
            larder__log(LARDER_LOG_DEBUG, "a peer's OPEN of %s refused: %s", url, larder_errmsg());
        else if (rc == LARDER_EDENIED)
            say("OPEN of %s refused: %s", url, larder_errmsg());
        send_error(c, request, rc, larder_errmsg());
        return;
    }
    struct larder__opened opened = {.id_low = e->id_low,
                                    .id_high = e->id_high,
                                    .num_shards = larder__dataset_num_shards(e->dataset)};
    if (c->peer) __atomic_add_fetch(&c->daemon->peer_opens, 1, __ATOMIC_RELAXED);
    uint8_t frame[LARDER__WIRE_HEADER + 20];
    int n = larder__wire_encode_opened(frame, sizeof frame, request, &opened);
    if (n > 0) enqueue(c, frame, (size_t)n);
}

/* An OPEN of an index not open here yet, on the open pool. */
struct open_job {
    struct connection *connection;
    uint64_t request;
    unsigned how;
    char url[];
};

static void open_job(void *arg)
{
    struct open_job *job = arg;
    struct connection *c = job->connection;
    struct larderd *d = c->daemon;
    struct dataset_entry *e = NULL;
    int slot = -1;
    /* c->opened is the loop's, but the loop reads none of c's frames until
     * c->opens is back to 0 (below, under c->lock, after this store) */
    int rc = d->stopping ? larder__fail(-EAGAIN, "the daemon is stopping")
                         : open_dataset_held(d, job->url, job->how, &e, &slot, &c->opened);
    answer_open(c, job->request, rc, e, job->url);
    pthread_mutex_lock(&c->lock);
    c->jobs--;
    c->opens--;
    pthread_mutex_unlock(&c->lock);
    connection_release(c);
    free(job);
    larderd_wake(d); /* its answer to send, and its next frames to read */
}

/*
 * OPEN: a dataset open here already is answered at once; a new index is
 * opened on the open pool (fetched, hashed and validated whole: seconds for
 * a large one, or a slow origin's), so the loop serves everyone else
 * meanwhile.  The connection's next frames wait for the answer (c->opens:
 * process_input reads none of them), so a client that sends its READs
 * right after its OPEN finds the dataset opened.
 */
bool open_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    char url[LARDER__WIRE_MAX_URL + 1];
    memcpy(url, payload, f->length);
    url[f->length] = '\0';
    if (f->length == 0 || strlen(url) != f->length) return false;
    int allowed = may_open(c);
    struct dataset_entry *e = NULL;
    int slot = -1;
    unsigned how = allowed < 0 ? 0 : open_how(c, allowed) | (c->peer ? 0 : OPEN_AHEAD);
    /* without OPEN_NEW: never blocks (an index being opened is not found) */
    int rc = allowed < 0
                 ? allowed
                 : open_dataset_held(c->daemon, url, how & ~OPEN_NEW, &e, &slot, &c->opened);
    if (rc == LARDER_ENOTFOUND && (how & OPEN_NEW)) {
        struct open_job *job = malloc(sizeof *job + f->length + 1);
        if (job) {
            job->connection = c, job->request = f->request, job->how = how;
            memcpy(job->url, url, f->length + 1);
            pthread_mutex_lock(&c->lock);
            c->refs++;
            c->jobs++;
            c->opens++;
            pthread_mutex_unlock(&c->lock);
            /* a peer's at NEAR: those wait for an index another OPEN is
             * fetching (every member's connect-ahead and first READs ask
             * for the same one at once), and NEAR never takes the last
             * quarter of the workers (pool.h), kept for this node's own
             * readers' OPENs and PUBLISHes */
            int class = c->peer ? LARDER__NEAR : LARDER__DEMAND;
            if (larder__pool_submit(c->daemon->open_pool, open_job, job, class) == 0) return true;
            pthread_mutex_lock(&c->lock);
            c->jobs--;
            c->opens--;
            pthread_mutex_unlock(&c->lock);
            connection_release(c); /* ours: the loop still holds its own */
            free(job);
        }
        rc = larder__fail(-EAGAIN,
                          "%s could not be queued for opening (out of memory, or stopping)", url);
    }
    answer_open(c, f->request, rc, e, url);
    return true;
}

/* ---- opening a dataset (open_dataset) ----------------------------------------------- */

/* The refusal of an unchecked index to an opener without OPEN_UNCHECKED. */
static int refuse_unchecked(const char *url)
{
    return larder__fail(LARDER_EDENIED,
                        "%s: index marked unchecked (no checksums): this daemon opens it only for "
                        "its own user, whose bytes it cannot check for anyone else",
                        url);
}

/* Whether the index at url (refused by larder_open) is one marked
 * unchecked: asked again with the flag allowed, nothing kept. */
static bool is_marked_unchecked(const char *url, const struct larderd *d)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = "",
                             .daemon_socket = "",
                             .allow_prefixes = d->config.num_allow ? d->config.allow : NULL,
                             .allow_unchecked = 1};
    larder_dataset *probe = NULL;
    bool marked = larder_open(&probe, url, &o) == 0 && larder__dataset_index(probe)->unchecked;
    larder_close(probe);
    return marked;
}

/*
 * Open url into e (zeroed first) and check all of it, with no lock held:
 * the slow part of an OPEN (the index fetched, hashed and validated whole).
 * larder_open checks the index's content against the id it claims before
 * it touches the cache of that id (an index claiming another's id would
 * otherwise reset that dataset's cache state); then larder_validate checks
 * the whole index, before any of it is served: records, keys and overlaps.
 * So no index stands in for another in this registry or the cache.
 */
static int open_entry(struct larderd *d, struct dataset_entry *e, const char *url, bool unchecked,
                      bool ahead)
{
    /* never trust_index: an index from anywhere names only shards under
     * its own base, and with --allow, under one of those prefixes */
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = d->config.cache_dir,
                             .cache_capacity = d->config.cache_capacity,
                             .max_inflight = d->config.jobs,
                             .daemon_socket = "",
                             .borrow_capacity = d->config.borrow_capacity,
                             .trust_index = 0,
                             .allow_prefixes = d->config.num_allow ? d->config.allow : NULL,
                             .allow_unchecked = unchecked};
    memset(e, 0, sizeof *e);
    int rc = larder_open(&e->dataset, url, &o);
    if (rc == LARDER_EBADINDEX && !unchecked && is_marked_unchecked(url, d))
        rc = refuse_unchecked(url);
    if (rc == 0) e->unchecked = larder__dataset_index(e->dataset)->unchecked;
    /* a local reader's: the members open it while this daemon validates
     * it, now that it is known to be allowed here, to exist with the id it
     * claims, and not to be marked unchecked (which no member would open
     * for a peer): never for a url a client merely asked for */
    if (rc == 0 && ahead && !e->unchecked) connect_ahead_url(d, url);
    if (rc == 0) rc = larder_validate(e->dataset);
    if (rc == 0) larder__dataset_id(e->dataset, &e->id_low, &e->id_high);
    return rc;
}

/* An entry in its slot (d->lock held), before any READ can find it: every
 * shard's source is the entry's (the wrapper's context is the slot). */
static void entry_attach(struct larderd *d, struct dataset_entry *e)
{
    e->daemon = d;
    /* the owners of a read's chunks are read at once on the dataset's pool
     * (none: one after another) */
    if (larder__dataset_pool_get(e->dataset, &e->stripe_pool) < 0) e->stripe_pool = NULL;
    larder__dataset_set_source_wrapper(e->dataset, dataset_striped_source, e);
}

/* The endpoints of the other members, which the wrapper reads each chunk
 * of a shard through (its owner's). */
static int connect_members(struct larderd *d, struct dataset_entry *e, const char *url)
{
    int rc = 0;
    e->members = calloc(d->members.count, sizeof *e->members);
    if (!e->members) rc = -ENOMEM;
    for (size_t m = 0; rc == 0 && m < d->members.count; m++)
        if (m != d->self)
            rc = larder__endpoint_new(&e->members[m], d->members.names[m], LARDER__ROLE_PEER,
                                      d->secret, url, 5000);
    for (size_t m = 0; rc == 0 && m < d->members.count; m++)
        if (e->members[m]) ucx_adopt_endpoint(d, e->members[m]); /* --transport ucx|auto */
    return rc;
}

/* An OPEN under way (open_dataset_held), on its opener's stack, in
 * d->opening while it runs: others asking for the same url wait for its
 * result rather than fetch the index beside it, and take its failure as
 * theirs (a url that fails is fetched once, not once per waiter). */
struct opening {
    const char *url;
    bool done;
    int rc;                   /* once done: 0, or the failure */
    uint64_t id_low, id_high; /* once done with 0: the dataset's id */
    int waiters;              /* waiting for it: the opener returns once none is left */
    char message[256];
};

/* The OPEN of url under way, or NULL.  Call with d->lock held. */
static struct opening *opening_of(const struct larderd *d, const char *url)
{
    for (int i = 0; i < MAX_OPENING; i++)
        if (d->opening[i] && strcmp(d->opening[i]->url, url) == 0) return d->opening[i];
    return NULL;
}

/* Note o as under way: its place in d->opening, or -1 when all
 * MAX_OPENING are taken.  Call with d->lock held. */
static int opening_add(struct larderd *d, struct opening *o)
{
    for (int i = 0; i < MAX_OPENING; i++)
        if (!d->opening[i]) {
            d->opening[i] = o;
            return i;
        }
    return -1;
}

/* The caller holds e (slot) for its connection: one holder per connection
 * (bit `slot` of *held).  Call with d->lock held. */
static void hold(struct dataset_entry *e, int slot, uint64_t *held)
{
    if (!held || (*held & (UINT64_C(1) << slot))) return;
    __atomic_add_fetch(&e->holders, 1, __ATOMIC_ACQ_REL);
    *held |= UINT64_C(1) << slot;
}

/* Wait (d->lock held) for another's OPEN of the same url: 0 and the id of
 * what it opened (look again), or its failure, as this caller's.  o is
 * read only before this waiter is counted off (the opener returns then). */
static int wait_for(struct larderd *d, struct opening *o, uint64_t *low, uint64_t *high)
{
    o->waiters++;
    while (!o->done)
        pthread_cond_wait(&d->opened, &d->lock);
    int rc = o->rc;
    if (rc < 0) larder__fail(rc, "%s", o->message);
    *low = o->id_low, *high = o->id_high;
    o->waiters--;
    pthread_cond_broadcast(&d->opened); /* the opener waits for the last waiter */
    return rc;
}

/* Place what open_entry opened (d->lock held): in a free slot, or as the
 * entry already open with the same content. */
static int place(struct larderd *d, struct dataset_entry *opened, const char *url,
                 struct dataset_entry **out, int *slot, uint64_t *held)
{
    struct dataset_entry *same;
    if (datasets_closing(d, NULL, opened->id_low, opened->id_high)) {
        dataset_entry_free(d, opened);
        return larder__fail(-EAGAIN,
                            "dataset %s is being closed here under another name (a "
                            "replaced publication): open it again in a moment",
                            url);
    }
    if ((same = datasets_find_id(d, opened->id_low, opened->id_high, NULL, slot))) {
        dataset_entry_free(d, opened); /* the same content under another name: one entry */
        hold(same, *slot, held);
        *out = same;
        return 0;
    }
    int free = datasets_free_slot(d);
    if (free < 0) {
        dataset_entry_free(d, opened);
        return larder__fail(LARDER_EUSAGE, "too many datasets open");
    }
    struct dataset_entry *e = &d->datasets[free];
    *e = *opened;
    entry_attach(d, e);
    int rc = (e->url = strdup(url)) ? 0 : -ENOMEM;
    if (rc == 0) publication_adopt(d, e, url); /* a publication's owner is its producer */
    /* an unchecked dataset is read from its origin only: no peer is asked
     * for it (nor may a peer OPEN it) */
    if (rc == 0 && d->members.count > 1 && !e->unchecked)
        rc = connect_members(d, e, e->peer_url ? e->peer_url : url);
    if (rc < 0) {
        dataset_entry_free(d, e);
        return rc;
    }
    *slot = free;
    if (free == d->num_datasets) d->num_datasets++;
    hold(e, free, held);
    *out = e;
    say("opened %s", url);
    if (d->config.warm) warm_owned(d, e);
    return 0;
}

/*
 * Registered under d->lock, opened without it: the index is fetched,
 * hashed and validated by open_entry with the lock released, so the loop's
 * find_dataset (every READ) and other openers go on meanwhile.  A second
 * opener of the same url waits for the first (struct opening) rather than
 * open it beside it; so does one past MAX_OPENING opens at once.  Only
 * callers with OPEN_NEW and without OPEN_NOWAIT ever wait: the loop thread
 * asks without OPEN_NEW (LARDER_ENOTFOUND for a url not open yet:
 * requests.c opens it on the open pool); OPEN_NOWAIT (-EAGAIN rather than
 * wait) is for a caller on the loop thread (none now: PUBLISH opens its
 * index on the open pool too, publish.c).
 */
int open_dataset_held(struct larderd *d, const char *url, unsigned how, struct dataset_entry **out,
                      int *slot, uint64_t *held)
{
    bool unchecked = (how & OPEN_UNCHECKED) != 0;
    struct dataset_entry opened, *e;
    struct opening mine = {.url = url}, *other;
    int rc = 0, mark = -1;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        if ((e = datasets_find_url(d, url, slot))) {
            if (e->unchecked && !unchecked) {
                rc = refuse_unchecked(url);
            } else {
                hold(e, *slot, held);
                *out = e;
            }
            goto done;
        }
        if (!(how & OPEN_NEW)) {
            rc = larder__fail(LARDER_ENOTFOUND, "dataset %s is not open on this node", url);
            goto done;
        }
        if (d->stopping) { /* whatever asks now (a learn job drained at shutdown, a
                            * PUBLISH's written-through copy) would hold up the exit */
            rc = larder__fail(-EAGAIN, "the daemon is stopping");
            goto done;
        }
        if (datasets_closing(d, url, 0, 0)) {
            rc = larder__fail(-EAGAIN,
                              "dataset %s is being closed here (a replaced publication no one "
                              "read): open it again in a moment",
                              url);
            goto done;
        }
        if (datasets_free_slot(d) < 0) {
            rc = larder__fail(LARDER_EUSAGE, "too many datasets open");
            goto done;
        }
        other = opening_of(d, url);
        if (!other && (mark = opening_add(d, &mine)) >= 0) break;
        if (how & OPEN_NOWAIT) {
            rc = larder__fail(-EAGAIN, "%s is being opened here: try again in a moment", url);
            goto done;
        }
        if (!other) { /* MAX_OPENING under way: wait for one to end */
            pthread_cond_wait(&d->opened, &d->lock);
            continue;
        }
        uint64_t low, high;
        if ((rc = wait_for(d, other, &low, &high)) < 0) goto done;
        if ((e = datasets_find_id(d, low, high, NULL, slot))) { /* perhaps under another name */
            if (e->unchecked && !unchecked) {
                rc = refuse_unchecked(url);
            } else {
                hold(e, *slot, held);
                *out = e;
            }
            goto done;
        }
    }
    pthread_mutex_unlock(&d->lock);
    /* with OPEN_AHEAD, the members open it meanwhile (open_entry) */
    rc = open_entry(d, &opened, url, unchecked, (how & OPEN_AHEAD) != 0);
    pthread_mutex_lock(&d->lock);
    if (rc == 0) {
        rc = place(d, &opened, url, out, slot, held);
    } else {
        dataset_entry_free(d, &opened);
    }
    d->opening[mark] = NULL;
    mine.rc = rc;
    if (rc < 0)
        snprintf(mine.message, sizeof mine.message, "%s", larder_errmsg());
    else
        mine.id_low = (*out)->id_low, mine.id_high = (*out)->id_high;
    mine.done = true;
    pthread_cond_broadcast(&d->opened);
    while (mine.waiters > 0) /* they read mine: it lives on this stack */
        pthread_cond_wait(&d->opened, &d->lock);
    if (rc < 0) larder__fail(rc, "%s", mine.message); /* the message is this thread's again */
done:
    /* a local reader's OPEN that has the entry, however (opened here, found
     * open, found after another's open, perhaps a peer's): the first one
     * connects ahead, so that its first borrows find the connections up */
    if (rc == 0 && (how & OPEN_AHEAD)) connect_ahead_entry(d, *out, *slot);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

int open_dataset(struct larderd *d, const char *url, unsigned how, struct dataset_entry **out,
                 int *slot)
{
    return open_dataset_held(d, url, how, out, slot, NULL);
}

bool opens_ended_within(struct larderd *d, int ms)
{
    struct timespec deadline; /* d->opened waits on CLOCK_REALTIME, the default */
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&d->lock);
    bool ended;
    int rc = 0;
    for (;;) {
        ended = connect_ahead_running(d) == 0; /* each ends by its deadline */
        for (int i = 0; i < MAX_OPENING; i++)
            if (d->opening[i]) ended = false;
        if (ended || rc == ETIMEDOUT) break;
        rc = pthread_cond_timedwait(&d->opened, &d->lock, &deadline);
    }
    pthread_mutex_unlock(&d->lock);
    return ended;
}
