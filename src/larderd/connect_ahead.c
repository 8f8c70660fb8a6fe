/*
 * connect_ahead.c - peer connections made before the first READ needs them
 * (docs/protocol.md, "Peer connections").  A peer connection costs a
 * dial, the handshake with its proofs, and an OPEN of the dataset on the
 * member, which, for an index the member has not opened yet, fetches and
 * validates it there: tens of milliseconds on loopback, more on a loaded
 * node.  Made by a reader's first borrow toward each member, that cost
 * was a whole step's wait at the start of every epoch after a restart.
 *
 * So for a local reader's OPEN, in two phases, never on the loop thread,
 * never blocking the OPENED answer, never holding d->lock while they
 * connect:
 *   - early, once this daemon has fetched the index and found it allowed,
 *     its id right and not marked unchecked (opens.c), while it validates
 *     the rest: the OPEN sent to each member on a temporary connection,
 *     closed at once without waiting for OPENED (the member opens it all
 *     the same), so that the members open the index at the same time as
 *     this daemon rather than after it.  Not for a publication (its
 *     producer, the only member read, has it open);
 *   - once a local reader's OPEN has the entry (placed by it, found open,
 *     or found after another's open: once per entry, e->ahead_done):
 *     LARDERD_CONNECT_AHEAD connections (default 2; 0 turns both phases
 *     off) of the DEMAND and NEAR group into each member endpoint's pool
 *     (larder__endpoint_prepare), which the first READs take; for a
 *     publication, into its producer's only.  The job holds the entry (its
 *     holders) while it runs, taken as it starts: an entry closed
 *     meanwhile is skipped.
 * The jobs run on AHEAD_WORKERS threads of their own (never on the open
 * pool, whose workers real OPENs need; never inline), one job per member
 * at a time (the others toward it wait in the queue), at most
 * AHEAD_QUEUED queued; beyond, a job is dropped.  Each job is over by its
 * deadline (AHEAD_DEADLINE_MS for the dial, the greeting and the OPEN in
 * all, however slowly a member answers), and stops between connections
 * once the daemon stops; queued ones are dropped then.  A member that is
 * down or slow costs a debug line and nothing else: it is not marked
 * down here, so a READ toward it fails, is marked and logged as ever
 * (source_stripe.c: "skipped for ... ms").  Over UCX the UCX path is made
 * ahead first (larder__ucx_peer_prepare), then the TCP connections, for
 * READs that fall back to TCP.
 */
#include "larderd.h"
#include "endpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AHEAD_DEFAULT 2
#define AHEAD_MAX 16
#define AHEAD_TIMEOUT_MS 5000  /* a member endpoint's own (opens.c, connect_members) */
#define AHEAD_DEADLINE_MS 5000 /* one job's connect, dial to OPENED, in all */
#define AHEAD_WORKERS 4        /* jobs running at once, each toward another member */
#define AHEAD_QUEUED 4096      /* jobs waiting; beyond, dropped */

/* LARDERD_CONNECT_AHEAD: the connections per member made ahead (0: none). */
static int ahead_count(void)
{
    const char *text = getenv("LARDERD_CONNECT_AHEAD");
    char *end;
    long value = text ? strtol(text, &end, 10) : -1;
    if (!text || *text == '\0' || *end != '\0' || value < 0) return AHEAD_DEFAULT;
    return value > AHEAD_MAX ? AHEAD_MAX : (int)value;
}

struct ahead_job {
    struct ahead_job *next;
    size_t member;            /* toward d->members.names[member] */
    int slot;                 /* late: the entry's slot; -1: early */
    uint64_t id_low, id_high; /* late: the entry's id, checked as the job starts */
    char url[];               /* early: the url OPENed on the member */
};

struct connect_ahead {
    pthread_mutex_t lock; /* all below */
    pthread_cond_t wake;  /* a job queued, a member free, or stopping */
    struct ahead_job *head, *tail;
    size_t queued;
    size_t members;
    int count;  /* LARDERD_CONNECT_AHEAD, read once at the start */
    bool *busy; /* per member: a job toward it is running */
    pthread_t threads[AHEAD_WORKERS];
    int started, idle;
    int running; /* jobs running (also read atomically by connect_ahead_running) */
    bool stopped;
};

/* The first queued job toward a member no job runs toward, taken off the
 * queue; NULL: none.  Call with a->lock held. */
static struct ahead_job *take(struct connect_ahead *a)
{
    for (struct ahead_job **p = &a->head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        struct ahead_job *job = *p;
        if (a->busy[job->member]) continue;
        *p = job->next;
        if (a->tail == job) a->tail = prev;
        a->queued--;
        return job;
    }
    return NULL;
}

/* The early phase's job: the OPEN sent on a temporary connection. */
static int run_early(struct larderd *d, const struct ahead_job *job, int64_t deadline)
{
    struct larder__endpoint *e;
    int rc = larder__endpoint_new(&e, d->members.names[job->member], LARDER__ROLE_PEER, d->secret,
                                  job->url, AHEAD_TIMEOUT_MS);
    if (rc == 0) rc = larder__endpoint_open_ahead(e, deadline);
    if (rc < 0)
        larder__log(LARDER_LOG_DEBUG, "opening ahead on %s: %s", d->members.names[job->member],
                    larder_errmsg());
    larder__endpoint_free(e);
    return rc;
}

/* The late phase's job: the entry held (if it is still there and not
 * closing) while connections are pooled into its member's endpoint. */
static void run_late(struct larderd *d, const struct ahead_job *job, int64_t deadline)
{
    pthread_mutex_lock(&d->lock);
    struct dataset_entry *e = &d->datasets[job->slot];
    bool there = job->slot < d->num_datasets && e->url && !e->closing && e->members &&
                 e->members[job->member] && e->id_low == job->id_low && e->id_high == job->id_high;
    if (there) __atomic_add_fetch(&e->holders, 1, __ATOMIC_ACQ_REL); /* under d->lock: holders */
    pthread_mutex_unlock(&d->lock);
    if (!there) return;
    struct larder__endpoint *target = e->members[job->member];
    int rc = larder__endpoint_prepare(target, d->ahead->count, deadline, &d->stopping);
    if (rc > 0) __atomic_add_fetch(&d->connected_ahead, rc, __ATOMIC_RELAXED);
    if (rc < 0)
        larder__log(LARDER_LOG_DEBUG, "connecting ahead to %s: %s",
                    larder__endpoint_address(target), larder_errmsg());
    __atomic_sub_fetch(&e->holders, 1, __ATOMIC_RELEASE);
}

static void *worker(void *arg)
{
    struct larderd *d = arg;
    struct connect_ahead *a = d->ahead;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        struct ahead_job *job = take(a);
        if (!job) {
            if (a->stopped) break;
            a->idle++;
            pthread_cond_wait(&a->wake, &a->lock);
            a->idle--;
            continue;
        }
        a->busy[job->member] = true;
        __atomic_add_fetch(&a->running, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_unlock(&a->lock);
        if (!d->stopping && !a->stopped) {
            int64_t deadline = now_ms() + AHEAD_DEADLINE_MS;
            if (job->slot < 0)
                run_early(d, job, deadline);
            else
                run_late(d, job, deadline);
        }
        size_t member = job->member;
        free(job);
        pthread_mutex_lock(&a->lock);
        a->busy[member] = false;
        pthread_cond_broadcast(&a->wake); /* jobs toward that member may go now */
        pthread_mutex_unlock(&a->lock);
        /* opens_ended_within counts the running ones: wake it (d->lock is
         * taken outside a->lock, never inside it: connect_ahead_entry
         * takes a->lock inside d->lock) */
        pthread_mutex_lock(&d->lock);
        __atomic_sub_fetch(&a->running, 1, __ATOMIC_ACQ_REL);
        pthread_cond_broadcast(&d->opened);
        pthread_mutex_unlock(&d->lock);
        pthread_mutex_lock(&a->lock);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

/* Queue a job (it is the queue's, or freed); dropped when stopping, the
 * queue is full or no worker thread runs (never run inline: the caller may
 * hold d->lock, or be the loop thread). */
static void submit(struct larderd *d, struct ahead_job *job)
{
    struct connect_ahead *a = d->ahead;
    if (!a || job->member >= a->members) {
        free(job);
        return;
    }
    pthread_mutex_lock(&a->lock);
    if (a->stopped || d->stopping || a->queued >= AHEAD_QUEUED) {
        pthread_mutex_unlock(&a->lock);
        larder__log(LARDER_LOG_DEBUG, "connect-ahead job toward %s dropped (%s)",
                    d->members.names[job->member], a->stopped ? "stopping" : "queue full");
        free(job);
        return;
    }
    if (a->idle == 0 && a->started < AHEAD_WORKERS &&
        pthread_create(&a->threads[a->started], NULL, worker, d) == 0)
        a->started++;
    if (a->started == 0) { /* no thread: drop it rather than connect here */
        pthread_mutex_unlock(&a->lock);
        free(job);
        return;
    }
    job->next = NULL;
    if (a->tail)
        a->tail->next = job;
    else
        a->head = job;
    a->tail = job;
    a->queued++;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
}

int connect_ahead_start(struct larderd *d)
{
    if (d->ahead || d->members.count < 2) return 0;
    struct connect_ahead *a = calloc(1, sizeof *a);
    if (!a || !(a->busy = calloc(d->members.count, sizeof *a->busy))) {
        free(a);
        return -ENOMEM;
    }
    a->members = d->members.count;
    a->count = ahead_count();
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    d->ahead = a;
    return 0;
}

void connect_ahead_stop(struct larderd *d)
{
    struct connect_ahead *a = d->ahead;
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    a->stopped = true;
    while (a->head) { /* the queued ones: dropped */
        struct ahead_job *job = a->head;
        a->head = job->next;
        free(job);
    }
    a->tail = NULL;
    a->queued = 0;
    pthread_cond_broadcast(&a->wake);
    pthread_mutex_unlock(&a->lock);
    for (int i = 0; i < a->started; i++) /* each running job ends by its deadline */
        pthread_join(a->threads[i], NULL);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->wake);
    free(a->busy);
    free(a);
    d->ahead = NULL;
}

int connect_ahead_running(const struct larderd *d)
{
    return d->ahead ? __atomic_load_n(&d->ahead->running, __ATOMIC_ACQUIRE) : 0;
}

/* Whether there are members to connect to ahead at all. */
static bool wanted(const struct larderd *d)
{
    return d->members.count > 1 && d->self < d->members.count && !d->stopping && d->ahead &&
           d->ahead->count > 0;
}

void connect_ahead_url(struct larderd *d, const char *url)
{
    if (!wanted(d) || publication_local(d, url)) return;
    size_t length = strlen(url);
    for (size_t m = 0; m < d->members.count; m++) {
        if (m == d->self) continue;
        struct ahead_job *job = malloc(sizeof *job + length + 1);
        if (!job) return;
        job->member = m, job->slot = -1, job->id_low = job->id_high = 0;
        memcpy(job->url, url, length + 1);
        submit(d, job);
    }
}

void connect_ahead_entry(struct larderd *d, struct dataset_entry *e, int slot)
{
    if (e->ahead_done) return;
    e->ahead_done = true;
    if (!e->members || !wanted(d)) return;
    for (size_t m = 0; m < d->members.count; m++) {
        /* a publication is read from its producer only (fixed_owner) */
        if (m == d->self || !e->members[m] || (e->fixed && m != e->fixed_owner)) continue;
        struct ahead_job *job = malloc(sizeof *job);
        if (!job) return;
        *job = (struct ahead_job){
            .member = m, .slot = slot, .id_low = e->id_low, .id_high = e->id_high};
        submit(d, job);
    }
}
