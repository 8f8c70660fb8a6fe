/*
 * requests.c - what the daemon does with one whole frame from a client
 * (docs/protocol.md): the handshake (HELLO, and PROVE from a peer when the
 * cluster has a secret), OPEN under the daemon's access rules, READ staged
 * by the worker pool and answered from the cache file with sendfile, STAT.
 *
 * Who may do what:
 *   - a peer (TCP) of a cluster with a secret is served nothing before a
 *     valid PROVE; one with the wrong secret gets an ERROR and is closed;
 *   - a peer of a cluster without a secret (loopback, or --insecure-peers)
 *     reads only datasets already open on this node;
 *   - a local client (Unix socket, already past the SO_PEERCRED check)
 *     opens any index when it runs as the daemon's uid or root and no
 *     --allow is given; with --allow, every OPEN goes through those
 *     prefixes (the library refuses the rest); without --allow, other uids
 *     may not OPEN at all;
 *   - a READ names a dataset this connection has opened, nothing else.
 */
#include "larderd.h"
#include "readers.h"
#include "trace.h"

#include "auth.h"
#include "fill.h"
#include "transport_ucx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct read_job {
    struct connection *connection;
    struct dataset_entry *entry;
    struct larder__read read;
    uint64_t request;
    uint64_t arrived_us;           /* when the READ was taken off the connection */
    struct larder__source *stripe; /* what was borrowed ahead for it, and from whose stripe */
    struct larder__stripe_loan *loan;
    struct larder__ucx_session *via; /* a READ that came over UCX: answered there (ucx.c) */
    struct trace_span trace;         /* LARDERD_TRACE's line for it (trace.h) */
    struct larder__pool *pool;       /* the workers it was queued on */
    struct read_job *next_parked;    /* parked for room (its user's), or given it (d->resumable) */
    uint64_t parked_seq;             /* when it parked, in d->parked_seq's count */
    bool roomless;                   /* resumed without room: its connection was dropped */
};

/* The job's ERROR answer: on its connection, or over UCX when it came that way. */
static void answer_error(struct read_job *job, int code, const char *message)
{
    if (job->via)
        larder__ucx_answer(job->via, job->request, code, message, strlen(message));
    else
        send_error(job->connection, job->request, code, message);
}

/* How long a relay's READ waits for this node's staging of its bytes
 * (under the borrower's 60 s: it hears PROGRESS meanwhile). */
#define RELAY_WAIT_MS 20000

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void read_job_resume(void *arg);
static void answer_uncached(struct read_job *job);

/*
 * Room for answers.  A READ whose answer cannot come from the cache file
 * (no room, or a cache that evicts: every READ then) has its bytes copied
 * into the frame sent, and what such frames hold at once is bounded
 * node-wide (UNCACHED_BUDGET) until each is sent or its connection is
 * dropped.  A READ that finds no room parks (in its user's queue, in
 * arrival order), holding no worker, and goes back to its workers once
 * answers sent make room for it: room freed goes to the user holding
 * least whose next READ fits (next_user), so that a user who waits while
 * others hold much is served first.  One user holds at most
 * UNCACHED_SHARE: a user is a local uid, or the peers together
 * (uncached_key).  Found by review: READs used
 * to wait for room on their workers, so a client that sent READs and never
 * read the answers filled the budget with four connections, then held
 * every worker (64) and with them every READ on the node, cached or not,
 * until the loop's sweep dropped it a minute later.
 *
 * The share bounds one user; two users' clients that never read (two
 * accounts, or one and the peers) still filled the budget together, and
 * every other user's READs parked until the sweep's minute.  So while a
 * READ of another user is parked, a connection whose queued answers hold
 * room and of which no answer went out whole for UNCACHED_STALL_MS is
 * dropped by the sweep (uncached_stalled), its room given to the parked
 * READs, the waiting user's first, and its own parked READs ended unread
 * (uncached_forget).  A reader that reads its answers takes an 8 MiB one
 * in milliseconds; 5 s without one is not reading.
 */
static int64_t uncached_key(const struct connection *c)
{
    return c->peer ? -1 : (int64_t)c->uid;
}

/* key's entry of d->uncached_users, or NULL.  uncached_lock held, as for
 * everything below that takes d. */
static struct uncached_user *user_find(struct larderd *d, int64_t key)
{
    for (size_t i = 0; i < d->uncached_users_count; i++)
        if (d->uncached_users[i].key == key) return &d->uncached_users[i];
    return NULL;
}

/* key's entry, made when it has none; NULL when out of memory.  The table
 * holds the users holding room or waiting for it: a few on a node. */
static struct uncached_user *user_make(struct larderd *d, int64_t key)
{
    struct uncached_user *u = user_find(d, key);
    if (u) return u;
    if (d->uncached_users_count == d->uncached_users_capacity) {
        size_t capacity = d->uncached_users_capacity ? 2 * d->uncached_users_capacity : 16;
        struct uncached_user *grown = realloc(d->uncached_users, capacity * sizeof *grown);
        if (!grown) return NULL;
        d->uncached_users = grown;
        d->uncached_users_capacity = capacity;
    }
    u = &d->uncached_users[d->uncached_users_count++];
    *u = (struct uncached_user){.key = key};
    return u;
}

/* u's entry gone when it holds no room and waits for none (the last entry
 * takes its place: pointers into the table are stale after). */
static void user_tidy(struct larderd *d, struct uncached_user *u)
{
    if (!u->bytes && !u->parked) *u = d->uncached_users[--d->uncached_users_count];
}

/* Whether length bytes fit for u: the budget, u's share; one answer alone
 * always fits, and so does a user's first. */
static bool fits(const struct larderd *d, const struct uncached_user *u, uint64_t length)
{
    if (d->uncached_bytes && d->uncached_bytes + length > UNCACHED_BUDGET) return false;
    return !u->bytes || u->bytes + length <= UNCACHED_SHARE;
}

static void take_room(struct larderd *d, struct uncached_user *u, uint64_t length)
{
    u->bytes += length;
    d->uncached_bytes += length;
}

static void give_room(struct larderd *d, int64_t key, uint64_t length)
{
    struct uncached_user *u = user_find(d, key);
    if (u) {
        u->bytes -= length < u->bytes ? length : u->bytes;
        user_tidy(d, u);
    }
    d->uncached_bytes -= length < d->uncached_bytes ? length : d->uncached_bytes;
}

/* The user whose first parked READ takes room next: of those whose first
 * fits, the one holding least, and the oldest first among equals; NULL
 * when none fits. */
static struct uncached_user *next_user(struct larderd *d)
{
    struct uncached_user *best = NULL;
    for (size_t i = 0; i < d->uncached_users_count; i++) {
        struct uncached_user *u = &d->uncached_users[i];
        if (!u->parked || !fits(d, u, u->parked->read.length)) continue;
        if (!best || u->bytes < best->bytes ||
            (u->bytes == best->bytes && u->parked->parked_seq < best->parked->parked_seq))
            best = u;
    }
    return best;
}

/* The end of d->resumable, to append to. */
static struct read_job **resumable_end(struct larderd *d)
{
    struct read_job **last = &d->resumable;
    while (*last)
        last = &(*last)->next_parked;
    return last;
}

bool uncached_stalled(struct connection *c, int64_t now)
{
    bool holds = false;
    pthread_mutex_lock(&c->lock);
    if (c->unsent_since_ms && now - c->unsent_since_ms >= UNCACHED_STALL_MS)
        for (const struct output *o = c->head; o && !holds; o = o->next)
            holds = o->uncached > 0;
    pthread_mutex_unlock(&c->lock);
    if (!holds) return false;
    struct larderd *d = c->daemon;
    int64_t key = uncached_key(c);
    bool others_wait = false;
    pthread_mutex_lock(&d->uncached_lock);
    for (size_t i = 0; i < d->uncached_users_count && !others_wait; i++)
        others_wait = d->uncached_users[i].parked && d->uncached_users[i].key != key;
    pthread_mutex_unlock(&d->uncached_lock);
    return others_wait;
}

void uncached_figures(struct larderd *d, uint64_t *bytes, uint64_t *parked)
{
    pthread_mutex_lock(&d->uncached_lock);
    *bytes = d->uncached_bytes;
    *parked = d->parked_count;
    pthread_mutex_unlock(&d->uncached_lock);
}

bool uncached_try_take(const struct connection *c, uint64_t length)
{
    struct larderd *d = c->daemon;
    pthread_mutex_lock(&d->uncached_lock);
    struct uncached_user *u = user_make(d, uncached_key(c));
    bool room = u && fits(d, u, length);
    if (room)
        take_room(d, u, length);
    else if (u)
        user_tidy(d, u);
    pthread_mutex_unlock(&d->uncached_lock);
    return room;
}

void uncached_give(const struct connection *c, uint64_t length)
{
    if (!length) return;
    struct larderd *d = c->daemon;
    pthread_mutex_lock(&d->uncached_lock);
    give_room(d, uncached_key(c), length);
    /* the parked READs that fit now, their room taken, for the loop to hand
     * to their workers: the caller may hold a connection's lock, which a
     * READ run here at once (a pool short of memory runs its task on the
     * submitting thread) would take again */
    struct read_job **last = resumable_end(d);
    bool any = false;
    for (struct uncached_user *u; (u = next_user(d));) {
        struct read_job *job = u->parked;
        u->parked = job->next_parked;
        if (!u->parked) u->parked_tail = NULL;
        d->parked_count--;
        take_room(d, u, job->read.length);
        job->next_parked = NULL;
        *last = job;
        last = &job->next_parked;
        any = true;
    }
    pthread_mutex_unlock(&d->uncached_lock);
    if (any) larderd_wake(d);
}

void uncached_forget(struct connection *c)
{
    struct larderd *d = c->daemon;
    bool any = false;
    pthread_mutex_lock(&d->uncached_lock);
    struct uncached_user *u = user_find(d, uncached_key(c));
    if (u) {
        struct read_job **at = &u->parked, *previous = NULL, **last = resumable_end(d);
        while (*at) {
            struct read_job *job = *at;
            if (job->connection != c) {
                previous = job;
                at = &job->next_parked;
                continue;
            }
            *at = job->next_parked;
            if (u->parked_tail == job) u->parked_tail = previous;
            job->next_parked = NULL;
            job->roomless = true;
            *last = job;
            last = &job->next_parked;
            d->parked_count--;
            any = true;
        }
        user_tidy(d, u);
    }
    pthread_mutex_unlock(&d->uncached_lock);
    if (any) larderd_wake(d);
}

void uncached_resume(struct larderd *d)
{
    pthread_mutex_lock(&d->uncached_lock);
    struct read_job *job = d->resumable;
    d->resumable = NULL;
    pthread_mutex_unlock(&d->uncached_lock);
    while (job) {
        struct read_job *next = job->next_parked;
        job->next_parked = NULL;
        larder__pool_submit(job->pool, read_job_resume, job, job->read.priority);
        job = next;
    }
}

/*
 * The job is done, answered with `bytes` of DATA (0: an ERROR): it is
 * counted (a hit when no source was read for it on this thread, a miss
 * otherwise; borrowed when the owner node answered) and its charge leaves
 * the connection's budget.
 */
static void read_job_end(struct read_job *job, uint64_t bytes)
{
    struct connection *c = job->connection;
    unsigned reads = take_source_reads();
    trace_end(&job->trace, bytes > 0);
    serving_peer(false);
    borrow_return(job->stripe, job->loan);
    served_count(&job->entry->served, reads == 0, (reads & SOURCE_READ_PEER) != 0, bytes == 0,
                 c->peer, bytes, now_us() - job->arrived_us);
    struct larderd *d = c->daemon;
    pthread_mutex_lock(&c->lock);
    bool was_over = c->charged >= d->config.connection_budget;
    c->charged -= (size_t)job->read.length + REQUEST_OVERHEAD;
    c->jobs--;
    if (!job->via) c->reads--; /* PROGRESS is for READs on the connection itself */
    pthread_mutex_unlock(&c->lock);
    /* a connection paused over its budget may read again: only then is the
     * loop woken here (an answer left queued woke it already, and one sent
     * from this thread needs nothing of it; a wake-up per answer was one
     * more context switch each).  Before the read ahead below, which may
     * take a while */
    if (was_over) larderd_wake(d);
    larder__ucx_session_release(job->via);
    /* answered: a reader reading in turn has its next piece come over
     * meanwhile (the connection, and so the entry, still held) */
    if (bytes && !c->peer)
        borrow_next_piece(job->entry, c, job->read.shard, job->read.offset, job->read.length,
                          job->read.priority);
    connection_release(c);
    free(job);
}

/*
 * A STAGE READ (a local reader that reads the node cache itself): the
 * range staged in the cache and answered with an empty DATA, so that no
 * copy of it crosses the socket.  Also from a cache that evicts, which
 * sends no zero-copy answers (fill_raw.c): the reader's own read of the
 * cache sees an eviction racing it and fills the bytes itself.  false:
 * not all of it could be kept (a full disk, blocks shared with samples
 * not checked yet), and the READ is answered the usual way, with bytes.
 */
static bool stage_only(struct read_job *job, struct larder__fill *fill)
{
    const struct larder__read *r = &job->read;
    /* over the Unix socket only (a peer's STAGE was refused on arrival) */
    if (job->via || !larder__dataset_cached(job->entry->dataset)) return false;
    int rc = larder__fill_range_at(fill, r->shard, r->offset, r->length, r->priority, NULL);
    if (rc < 0) {
        answer_error(job, rc, larder_errmsg());
        read_job_end(job, 0);
        return true;
    }
    if (!larder__fill_resident(fill, r->shard, r->offset, r->length)) return false;
    struct output *o = output_new(LARDER__WIRE_HEADER);
    if (!o) return false;
    larder__wire_encode_header(o->bytes, LARDER__WIRE_HEADER, LARDER__DATA, 0, job->request);
    o->priority = r->priority;
    enqueue_output(job->connection, o);
    __atomic_fetch_add(&job->entry->served.staged_reads, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&job->entry->served.staged_bytes, r->length, __ATOMIC_RELAXED);
    read_job_end(job, r->length);
    return true;
}

/*
 * Room for job's answer: true when taken.  false when it parked (it goes
 * on from read_job_resume once answers sent make room) or, the daemon
 * stopping (or out of memory), was answered with an error.  A user's
 * READs take room in turn: none while an earlier one of the same user is
 * parked.
 */
static bool room_or_park(struct read_job *job)
{
    struct connection *c = job->connection;
    struct larderd *d = c->daemon;
    pthread_mutex_lock(&d->uncached_lock);
    struct uncached_user *u = user_make(d, uncached_key(c));
    if (u && !u->parked && fits(d, u, job->read.length)) {
        take_room(d, u, job->read.length);
        pthread_mutex_unlock(&d->uncached_lock);
        return true;
    }
    bool closed = d->uncached_closed, parked = u && !closed;
    if (parked) { /* from here on job is uncached_give's to resume: not touched */
        job->parked_seq = ++d->parked_seq;
        if (u->parked_tail)
            u->parked_tail->next_parked = job;
        else
            u->parked = job;
        u->parked_tail = job;
        d->parked_count++;
    } else if (u) {
        user_tidy(d, u);
    }
    pthread_mutex_unlock(&d->uncached_lock);
    if (!parked) {
        answer_error(job, closed ? -ECANCELED : -ENOMEM,
                     closed ? "the daemon is stopping" : "out of memory");
        read_job_end(job, 0);
    }
    return false;
}

void uncached_close(struct larderd *d)
{
    pthread_mutex_lock(&d->uncached_lock);
    d->uncached_closed = true;
    /* every user's parked READs, then those given room and not yet resumed
     * (the loop has ended), their room back */
    struct read_job *job = NULL, **last = &job;
    for (size_t i = d->uncached_users_count; i-- > 0;) {
        struct uncached_user *u = &d->uncached_users[i];
        *last = u->parked;
        if (u->parked) last = &u->parked_tail->next_parked;
        u->parked = u->parked_tail = NULL;
        user_tidy(d, u);
    }
    d->parked_count = 0;
    for (struct read_job *r = d->resumable; r; r = r->next_parked)
        if (!r->roomless) give_room(d, uncached_key(r->connection), r->read.length);
    *last = d->resumable;
    d->resumable = NULL;
    pthread_mutex_unlock(&d->uncached_lock);
    while (job) {
        struct read_job *next = job->next_parked;
        answer_error(job, -ECANCELED, "the daemon is stopping");
        read_job_end(job, 0);
        job = next;
    }
}

static void read_job(void *arg)
{
    struct read_job *job = arg;
    size_t length = (size_t)job->read.length;
    int file = -1;
    take_source_reads(); /* what a warm job on this thread read is not this READ's */
    trace_begin(&job->trace);
    serving_peer(job->connection->peer); /* a peer's READ: the origin only, never onward */
    /* at the READ's class all the way down: the owners it borrows from and
     * the origin's transfers see it too */
    struct larder__fill *fill = larder__dataset_fill(job->entry->dataset);
    int priority = job->read.priority;
    uint64_t lo, hi;
    /* a relay's READ (storm): from the cache, or declined, never filled;
     * bytes this node is staging for a hint right now are waited for */
    if (job->read.flags & LARDER__READ_CACHED &&
        larder__fill_range_scope(fill, job->read.shard, job->read.offset, job->read.length, &lo,
                                 &hi) != 1 &&
        (!hints_staging_wait(job->connection->daemon, job->entry, job->read.shard, job->read.offset,
                             job->read.length, RELAY_WAIT_MS) ||
         larder__fill_range_scope(fill, job->read.shard, job->read.offset, job->read.length, &lo,
                                  &hi) != 1)) {
        answer_error(job, LARDER_ENOTFOUND, "not in this node's cache (a READ for what it holds)");
        read_job_end(job, 0);
        return;
    }
    /* a reader's READ: other owners' chunks borrowed before the fill takes its locks */
    if (!job->connection->peer) {
        /* the whole chunks of other owners it reaches into, once (borrow.c) */
        if (!borrow_whole_chunks(job->entry, job->connection, job->read.shard, job->read.offset,
                                 job->read.length, priority))
            job->loan = borrow_ahead(job->entry, job->read.shard, job->read.offset,
                                     job->read.length, priority, &job->stripe);
    }
    job->trace.borrowed_us = trace_now_us();
    if ((job->read.flags & LARDER__READ_STAGE) && stage_only(job, fill)) return;
    int staged = larder__fill_stage_range_at(fill, job->read.shard, job->read.offset,
                                             job->read.length, priority, &file);
    if (staged == 0 && job->via) { /* over UCX, from a mapping of the cache file */
        int rc = larder__ucx_answer_file(job->via, job->request, file, job->read.offset, length);
        read_job_end(job, rc == 0 ? length : 0);
        return;
    }
    if (staged == 0) { /* in the cache: send it from there with sendfile */
        struct output *o = output_new(LARDER__WIRE_HEADER);
        if (o) {
            larder__wire_encode_header(o->bytes, LARDER__WIRE_HEADER, LARDER__DATA,
                                       (uint32_t)length, job->request);
            o->file = file;
            o->file_offset = (off_t)job->read.offset;
            o->file_length = length;
            o->priority = (uint8_t)priority;
            enqueue_output(job->connection, o);
        } else {
            send_error(job->connection, job->request, -ENOMEM, "out of memory");
        }
        read_job_end(job, o ? length : 0);
        return;
    }
    if (staged < 0) {
        answer_error(job, staged, larder_errmsg());
        read_job_end(job, 0);
        return;
    }
    /* not cacheable (no room, or a cache that evicts): the bytes land in
     * the frame that is sent, once there is room for it ("Room") */
    if (room_or_park(job)) answer_uncached(job);
}

/* A READ parked for room, given room: answered from its worker. */
static void read_job_resume(void *arg)
{
    struct read_job *job = arg;
    struct connection *c = job->connection;
    pthread_mutex_lock(&c->lock);
    bool gone = c->dropped;
    pthread_mutex_unlock(&c->lock);
    if (gone) { /* no one to answer: its room back, unread */
        if (!job->roomless) uncached_give(c, job->read.length);
        read_job_end(job, 0);
        return;
    }
    take_source_reads(); /* what this thread read before is not this READ's */
    serving_peer(job->connection->peer);
    answer_uncached(job);
}

/* Answer job with its bytes copied into the frame (its room taken). */
static void answer_uncached(struct read_job *job)
{
    struct larder__fill *fill = larder__dataset_fill(job->entry->dataset);
    int priority = job->read.priority;
    size_t length = (size_t)job->read.length;
    if (job->via) {
        uint8_t *bytes = malloc(length ? length : 1);
        int rc = bytes ? 0 : -ENOMEM;
        if (rc == 0)
            rc = larder__fill_range_at(fill, job->read.shard, job->read.offset, job->read.length,
                                       priority, bytes);
        if (rc == 0)
            rc = larder__ucx_answer(job->via, job->request, 0, bytes, length);
        else
            answer_error(job, rc, larder_errmsg());
        free(bytes);
        uncached_give(job->connection, length);
        read_job_end(job, rc == 0 ? length : 0);
        return;
    }
    struct output *o = output_new(LARDER__WIRE_HEADER + length);
    int rc = o ? 0 : -ENOMEM;
    if (rc == 0)
        rc = larder__fill_range_at(fill, job->read.shard, job->read.offset, job->read.length,
                                   priority, o->bytes + LARDER__WIRE_HEADER);
    if (rc == 0) {
        larder__wire_encode_header(o->bytes, LARDER__WIRE_HEADER, LARDER__DATA, (uint32_t)length,
                                   job->request);
        o->uncached = length; /* given back when the output is freed */
        o->priority = (uint8_t)priority;
        enqueue_output(job->connection, o);
    } else {
        free(o);
        uncached_give(job->connection, length);
        send_error(job->connection, job->request, rc, larder_errmsg());
    }
    read_job_end(job, rc == 0 ? length : 0);
}

/* STATS: per dataset, what this daemon answered (struct served) and the node cache's figures. */
static void stats_frame(struct connection *c, uint64_t request)
{
    struct larderd *d = c->daemon;
    size_t capacity = 64 * 1024, used = 0;
    char *text = malloc(LARDER__WIRE_HEADER + capacity);
    if (!text) return;
    char *p = text + LARDER__WIRE_HEADER;
    pthread_mutex_lock(&d->lock);
    int open = 0;
    for (int i = 0; i < d->num_datasets; i++)
        open += d->datasets[i].dataset != NULL;
    uint64_t closed = d->datasets_closed;
    used += (size_t)snprintf(p, capacity, "{\"self\": \"%s\", \"members\": %zu, \"datasets\": [",
                             d->self_name ? d->self_name : "", d->members.count);
    bool first = true;
    for (int i = 0; i < d->num_datasets && used < capacity - 1024; i++) {
        if (!d->datasets[i].dataset) continue; /* closed: its slot free */
        larder_stats s;
        larder_dataset_info info;
        struct served v;
        larder_stats_get(d->datasets[i].dataset, &s);
        larder_dataset_info_get(d->datasets[i].dataset, &info);
        served_copy(&d->datasets[i].served, &v);
        used += (size_t)snprintf(
            p + used, capacity - used,
            "%s{\"dataset_id\": \"%s\", \"hits\": %llu, \"misses\": %llu, "
            "\"borrowed_reads\": %llu, \"read_errors\": %llu, \"served_bytes\": %llu, "
            "\"peer_served_reads\": %llu, \"peer_served_bytes\": %llu, "
            "\"read_p50_us\": %llu, \"read_p99_us\": %llu, "
            "\"origin_requests\": %llu, \"origin_bytes\": %llu, \"peer_requests\": %llu, "
            "\"peer_bytes\": %llu, \"resident_bytes\": %llu, \"total_bytes\": %llu, "
            "\"inplace_blocks\": %llu, \"pinned_bytes\": %llu, \"staged_reads\": %llu, "
            "\"staged_bytes\": %llu}",
            first ? "" : ", ", info.dataset_id, (unsigned long long)v.hits,
            (unsigned long long)v.misses, (unsigned long long)v.borrowed,
            (unsigned long long)v.errors, (unsigned long long)v.bytes,
            (unsigned long long)v.peer_reads, (unsigned long long)v.peer_bytes,
            (unsigned long long)served_percentile(&v, 0.5),
            (unsigned long long)served_percentile(&v, 0.99), (unsigned long long)s.origin_requests,
            (unsigned long long)s.origin_bytes, (unsigned long long)s.peer_requests,
            (unsigned long long)s.peer_bytes, (unsigned long long)s.resident_bytes,
            (unsigned long long)s.total_bytes, (unsigned long long)v.inplace_blocks,
            (unsigned long long)dataset_pinned_bytes(d->datasets[i].dataset),
            (unsigned long long)v.staged_reads, (unsigned long long)v.staged_bytes);
        first = false;
    }
    pthread_mutex_unlock(&d->lock);
    /* the work queue by class (priority.h), after the datasets */
    struct larder__pool_stats classes;
    larderd_classes_get(d, &classes);
    used += (size_t)snprintf(p + used, capacity - used, "]");
    used += ucx_stats_json(d, p + used, capacity - used); /* how peers are read */
    used += (size_t)snprintf(p + used, capacity - used, ", \"classes\": ");
    size_t n = metrics_classes_json(&classes, p + used, capacity - used);
    used += n ? n : (size_t)snprintf(p + used, capacity - used, "{}");
    used += (size_t)snprintf(p + used, capacity - used, ", \"transforms\": ");
    used += transforms_json(d, p + used, capacity - used);
    /* open now, and replaced publications closed since the start (publish_retire.c) */
    used += (size_t)snprintf(p + used, capacity - used,
                             ", \"open_datasets\": %d, \"closed_datasets\": %llu", open,
                             (unsigned long long)closed);
    /* the node-wide room for answers not from the cache ("Room" above) */
    uint64_t uncached, parked;
    uncached_figures(d, &uncached, &parked);
    used +=
        (size_t)snprintf(p + used, capacity - used,
                         ", \"uncached_bytes\": %llu, \"parked_reads\": %llu, "
                         "\"stalled_drops\": %llu",
                         (unsigned long long)uncached, (unsigned long long)parked,
                         (unsigned long long)__atomic_load_n(&d->stalled_drops, __ATOMIC_RELAXED));
    /* peers' OPENs answered here, and connections to peers made ahead (connect_ahead.c) */
    used += (size_t)snprintf(
        p + used, capacity - used, ", \"peer_opens\": %llu, \"connected_ahead\": %llu}",
        (unsigned long long)__atomic_load_n(&d->peer_opens, __ATOMIC_RELAXED),
        (unsigned long long)__atomic_load_n(&d->connected_ahead, __ATOMIC_RELAXED));
    larder__wire_encode_header((uint8_t *)text, LARDER__WIRE_HEADER, LARDER__STATS, (uint32_t)used,
                               request);
    enqueue(c, text, LARDER__WIRE_HEADER + used);
    free(text);
}

/* HELLO: the client's role and nonce; the answer WELCOME carries ours and,
 * to a peer of a cluster with a secret, our proof.  false: close at once. */
static bool hello(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    struct larderd *d = c->daemon;
    struct larder__hello h;
    if (c->greeted || larder__wire_hello(payload, f->length, &h) < 0) return false;
    bool peer = h.role == LARDER__ROLE_PEER;
    if (c->tcp != peer) {
        refuse(c, f->request, LARDER_EDENIED,
               peer ? "peers connect over TCP, not the node's Unix socket"
                    : "readers connect over the node's Unix socket, not TCP");
        return true;
    }
    if (peer && h.owner_chunk != LARDER__OWNER_CHUNK) { /* it would route chunks elsewhere */
        char why[160];
        snprintf(why, sizeof why,
                 "this daemon owns shards by chunks of %llu bytes, the peer by %u: "
                 "every member must run the same ownership (docs/protocol.md)",
                 (unsigned long long)LARDER__OWNER_CHUNK, h.owner_chunk);
        say("refused a peer: %s", why);
        refuse(c, f->request, LARDER_EPROTOCOL, why);
        return true;
    }
    c->greeted = true;
    c->peer = peer;
    memcpy(c->client_nonce, h.nonce, LARDER__WIRE_NONCE);
    const char *name = d->self_name ? d->self_name : "local";
    struct larder__welcome w = {
        .auth = LARDER__AUTH_NONE, .name_length = (uint32_t)strlen(name), .name = name};
    if (peer && d->secret) {
        const char *secret = d->secret;
        w.auth = LARDER__AUTH_HMAC;
        if (larder__auth_nonce(c->server_nonce) < 0 ||
            larder__auth_proof(secret, strlen(secret), LARDER__AUTH_SERVER_LABEL, c->client_nonce,
                               c->server_nonce, w.proof) < 0) {
            refuse(c, f->request, -EAGAIN, "no nonce or proof: try again");
            return true;
        }
        memcpy(w.nonce, c->server_nonce, LARDER__WIRE_NONCE);
    } else if (larder__auth_nonce(w.nonce) < 0) {
        memset(w.nonce, 0, sizeof w.nonce); /* nothing depends on it without a secret */
    }
    uint8_t frame[LARDER__WIRE_HEADER + 88 + LARDER__WIRE_MAX_NAME];
    int n = larder__wire_encode_welcome(frame, sizeof frame, f->request, &w);
    if (n > 0) enqueue(c, frame, (size_t)n);
    return true;
}

/* PROVE: a peer's HMAC over our nonce and its own, compared in constant time. */
static bool prove(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    const char *secret = c->daemon->secret;
    struct larder__prove p;
    if (!c->peer || !secret || c->proven || larder__wire_prove(payload, f->length, &p) < 0)
        return false;
    uint8_t expected[LARDER__WIRE_PROOF];
    if (larder__auth_proof(secret, strlen(secret), LARDER__AUTH_CLIENT_LABEL, c->server_nonce,
                           c->client_nonce, expected) < 0 ||
        !larder__auth_equal(expected, p.proof)) {
        say("a peer failed to prove the cluster secret: refused");
        refuse(c, f->request, LARDER_EDENIED, "wrong cluster secret");
        return true;
    }
    c->proven = true;
    return true;
}

/* A READ's job as it arrives: its connection, dataset, request and trace. */
static void read_job_init(struct read_job *job, struct connection *c, struct dataset_entry *e,
                          const struct larder__read *read, uint64_t request,
                          struct larder__ucx_session *via)
{
    *job = (struct read_job){.connection = c,
                             .entry = e,
                             .read = *read,
                             .request = request,
                             .arrived_us = now_us(),
                             .via = via};
    job->trace = (struct trace_span){.kind = "read",
                                     .node = (int)c->daemon->self,
                                     .peer = c->peer,
                                     .priority = read->priority,
                                     .shard = read->shard,
                                     .offset = read->offset,
                                     .length = read->length,
                                     .arrived_us = trace_now_us()};
}

/* A READ answered on UCX's progress thread is done (rc 0: the borrower took its bytes). */
static void resident_answered(void *arg, int rc)
{
    struct read_job *job = arg;
    read_job_end(job, rc == 0 ? (uint64_t)job->read.length : 0);
}

bool read_answer_resident(struct connection *c, const struct larder__read *read, uint64_t request,
                          struct larder__ucx_session *via)
{
    int slot = -1;
    struct dataset_entry *e = find_dataset(c->daemon, read->id_low, read->id_high, &slot);
    int fd = -1;
    /* a READ refused, or one whose bytes are not all in the cache, goes to the workers */
    if (!e || !(c->opened & (UINT64_C(1) << slot)) ||
        larder__fill_resident_fd(larder__dataset_fill(e->dataset), read->shard, read->offset,
                                 read->length, &fd) != 0)
        return false;
    struct read_job *job = malloc(sizeof *job);
    if (!job) return false;
    read_job_init(job, c, e, read, request, via);
    larder__ucx_session_hold(via);
    pthread_mutex_lock(&c->lock);
    c->refs++;
    c->jobs++;
    c->charged += (size_t)read->length + REQUEST_OVERHEAD;
    pthread_mutex_unlock(&c->lock);
    take_source_reads(); /* none are this READ's: it is a hit */
    trace_begin(&job->trace);
    job->trace.borrowed_us = trace_now_us();
    if (larder__ucx_answer_file_async(via, request, fd, read->offset, (size_t)read->length,
                                      resident_answered, job) != 0) {
        /* not sent (the mapping failed, the endpoint broke): undone, and
         * the workers answer it the waiting way, which says why */
        pthread_mutex_lock(&c->lock);
        c->refs--;
        c->jobs--;
        c->charged -= (size_t)read->length + REQUEST_OVERHEAD;
        pthread_mutex_unlock(&c->lock);
        larder__ucx_session_release(via);
        free(job);
        return false;
    }
    return true;
}

/* Queue a READ of c's (request id `request`; via: it came over UCX, answered
 * there) on the workers, once its dataset is found opened on c. */
void read_submit(struct connection *c, const struct larder__read *read, uint64_t request,
                 struct larder__ucx_session *via)
{
    int slot = -1;
    struct dataset_entry *e = find_dataset(c->daemon, read->id_low, read->id_high, &slot);
    struct read_job *job = NULL;
    const char *refused = NULL;
    int code = 0;
    if (!e || !(c->opened & (UINT64_C(1) << slot)))
        code = LARDER_ENOTFOUND, refused = "dataset not opened on this connection";
    else if (!(job = malloc(sizeof *job)))
        code = -ENOMEM, refused = "out of memory";
    if (refused) {
        if (via)
            larder__ucx_answer(via, request, code, refused, strlen(refused));
        else
            send_error(c, request, code, refused);
        return;
    }
    read_job_init(job, c, e, read, request, via);
    if (via) larder__ucx_session_hold(via);
    pthread_mutex_lock(&c->lock);
    c->refs++;
    c->jobs++;
    if (!via) c->reads++;
    c->charged += (size_t)read->length + REQUEST_OVERHEAD;
    pthread_mutex_unlock(&c->lock);
    /* queued by its class (wire.c took 0-3 only): a worker takes DEMAND
     * first and keeps slots free for it while lower classes run; a peer's
     * READ on the peers' workers (larderd.h, peer_pool) */
    struct larder__pool *pool =
        c->peer && c->daemon->peer_pool ? c->daemon->peer_pool : c->daemon->pool;
    job->pool = pool;
    larder__pool_submit(pool, read_job, job, read->priority);
}

static bool read_request(struct connection *c, const struct larder__frame *f,
                         const uint8_t *payload)
{
    struct larder__read read;
    if (larder__wire_read(payload, f->length, &read) < 0) return false;
    if (c->peer && (read.flags & LARDER__READ_STAGE)) { /* another node's cache is not ours */
        send_error(c, f->request, LARDER_EUSAGE, STAGE_REFUSED);
        return true;
    }
    read_submit(c, &read, f->request, NULL);
    return true;
}

bool handle(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    if (f->type == LARDER__HELLO) return hello(c, f, payload);
    if (!c->greeted) {
        say("a client spoke before HELLO: closing");
        return false;
    }
    if (f->type == LARDER__PROVE) return prove(c, f, payload);
    if (c->peer && c->daemon->secret && !c->proven) {
        refuse(c, f->request, LARDER_EDENIED, "prove the cluster secret first (PROVE)");
        return true;
    }
    switch (f->type) {
    case LARDER__OPEN:
        return open_request(c, f, payload);
    case LARDER__READ:
        return read_request(c, f, payload);
    case LARDER__STAT:
        stats_frame(c, f->request);
        return true;
    case LARDER__HINT:
        return hints_request(c, f, payload);
    case LARDER__PUBLISH:
        return publish_request(c, f, payload);
    case LARDER__RESOLVE:
        return resolve_request(c, f, payload);
    case LARDER__ANNOUNCE:
        return announce_request(c, f, payload);
    case LARDER__UCX_OFFER:
        return ucx_offer(c, f, payload);
    case LARDER__TRANSFORM:
        return transform_request(c, f, payload);
    case LARDER__READERS:
        return readers_request(c, f, payload);
    default:
        return false; /* answers are not requests */
    }
}
