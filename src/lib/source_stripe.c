/*
 * source_stripe.c - one shard read from the owners of its chunks.
 *
 * A shard is cut into chunks of chunk_size bytes (LARDER__OWNER_CHUNK in a
 * daemon), each with its own owner node (cluster.h), so a large shard read
 * by every node is served by every owner at once instead of by one.  A
 * vectored read is cut at chunk boundaries, the pieces grouped by owner
 * (adjacent pieces of one owner joined again), and each owner's group read
 * as one vectored read: through that owner's peer source, or from the
 * origin for the chunks this node owns.  Groups run at the same time on the
 * given worker pool; the caller runs one itself and takes back any group no
 * worker has started yet, so it never waits on a queued task (no deadlock
 * when the pool is busy with the callers themselves) and no thread is
 * started per read.
 *
 * Each owner's link falls back to the origin as a chain's does
 * (source_chain.c): a peer whose read fails is logged once and left alone
 * for down_ms, its groups read from the origin meanwhile; a peer that
 * declines unasked (-EHOSTUNREACH: its endpoint knows it is down) is passed
 * over quietly.  LARDER__READ_ORIGIN_ONLY reads everything from the origin.
 * A read answers LARDER__FROM_PEER when any of its bytes came from a peer,
 * and says which did (larder__source_peer_bytes).  The size, the stream and
 * the name are the origin's.
 *
 * Borrowing ahead (a daemon's way): a read of the fill engine holds the
 * fill lock of its blocks, and an owner serving a peer takes the same
 * locks on its side, so two nodes each filling while asking the other
 * would wait on each other.  With borrow_ahead, reads never ask a peer:
 * larder__source_stripe_borrow, called before the fill with no lock held,
 * reads the other owners' pieces of a range at once into a loan, and reads
 * take those pieces from the loans (the rest from the origin) until the
 * loan is returned.
 */
#include "pool.h"
#include "source.h"
#include "source_hedge.h"
#include "source_stripe.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* The peer source of `owner`, opened on first use when the stripe opens them;
 * NULL: none (its chunks are read from the origin). */
struct larder__source *larder__stripe_owner_peer(struct larder__stripe *s, size_t owner)
{
    if (owner >= s->members) return NULL;
    struct larder__stripe_link *l = &s->links[owner];
    struct larder__source *peer = atomic_load_explicit(&l->peer, memory_order_acquire);
    if (peer || !s->open_peer || l->none) return peer;
    int rc = s->open_peer(s->peer_context, owner, s->shard, &peer);
    if (rc < 0 || !peer) {
        if (rc == 0) l->none = true; /* none there; after a failure (memory), ask again later */
        return NULL;
    }
    struct larder__source *expected = NULL; /* another thread may have opened it meanwhile */
    if (!atomic_compare_exchange_strong_explicit(&l->peer, &expected, peer, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        larder__source_close(peer);
        return expected;
    }
    return peer;
}

/* Leave owner's link alone for down_ms; the first to mark it down logs why. */
static void link_failed(struct larder__stripe *s, struct larder__stripe_link *l, int64_t now)
{
    int64_t until = l->down_until_ms;
    if (until > now) return; /* another reader marked it down already */
    if (!atomic_compare_exchange_strong(&l->down_until_ms, &until, now + s->down_ms)) return;
    larder__log(LARDER_LOG_WARN, "%s; skipped for %d ms, reading its chunks from the origin",
                larder_errmsg(), s->down_ms);
}

/* The peer of `owner` when it is to be asked now: one, and not left alone. */
static struct larder__source *live_peer(struct larder__stripe *s, size_t owner)
{
    struct larder__source *peer = larder__stripe_owner_peer(s, owner);
    if (peer && s->links[owner].down_until_ms > (int64_t)larder__now_ms()) return NULL;
    return peer;
}

/* Ask owner's peer for the extents; a failure other than a quiet decline
 * or this node's own (LARDER_ELOCAL: its disk, a READ given up in place)
 * marks it down. */
static int ask_peer(struct larder__stripe *s, size_t owner, struct larder__source *peer,
                    const struct larder__extent *extents, size_t count, unsigned flags)
{
    int rc = larder__source_readv(peer, extents, count, flags);
    /* declined unasked (known down), or not the peer's doing: nothing to mark */
    if (rc < 0 && rc != -EHOSTUNREACH && rc != LARDER_ELOCAL)
        link_failed(s, &s->links[owner], (int64_t)larder__now_ms());
    return rc;
}

/* One owner's extents, as the batch's mode says. */
static int read_group(struct larder__stripe *s, struct larder__stripe_group *g,
                      enum larder__stripe_mode mode, unsigned flags)
{
    struct larder__source *peer = live_peer(s, g->owner);
    if (mode == LARDER__STRIPE_BORROW_AHEAD)
        return peer ? ask_peer(s, g->owner, peer, g->extents, g->count, flags) : -EHOSTUNREACH;
    if (mode == LARDER__STRIPE_READ_LOANS && larder__stripe_owner_peer(s, g->owner))
        return larder__stripe_read_from_loans(s, g, flags);
    if (mode == LARDER__STRIPE_READ_PEERS && peer) {
        int rc = ask_peer(s, g->owner, peer, g->extents, g->count, flags);
        if (rc >= 0) return rc;
    }
    return larder__source_readv(s->origin, g->extents, g->count, flags);
}

/* Run group g (whoever claimed it) and mark it finished. */
static void run_group(struct larder__stripe_group *g)
{
    struct larder__stripe_batch *b = g->batch;
    g->result = read_group(b->source, g, b->mode, b->flags);
    if (g->result < 0) snprintf(g->message, sizeof g->message, "%s", larder_errmsg());
    pthread_mutex_lock(&b->lock);
    if (--b->unfinished == 0) pthread_cond_broadcast(&b->done);
    pthread_mutex_unlock(&b->lock);
}

/* Drop one reference on b; the last frees it. */
void larder__stripe_batch_release(struct larder__stripe_batch *b)
{
    pthread_mutex_lock(&b->lock);
    bool last = --b->refs == 0;
    pthread_mutex_unlock(&b->lock);
    if (!last) return;
    for (size_t i = 0; i < b->count; i++)
        free(b->groups[i].lent);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->done);
    free(b);
}

/* A pool task: run the group unless the caller took it back first. */
static void group_task(void *arg)
{
    struct larder__stripe_group *g = arg;
    struct larder__stripe_batch *b = g->batch;
    if (atomic_exchange_explicit(&g->claimed, 1, memory_order_acq_rel) == 0) run_group(g);
    larder__stripe_batch_release(b);
}

static int compare_pieces(const void *a, const void *b)
{
    const struct larder__stripe_piece *x = a, *y = b;
    if (x->owner != y->owner) return x->owner < y->owner ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Run the groups of b at once on the pool (this thread runs group 0, and any no worker started). */
void larder__stripe_run_batch(struct larder__stripe_batch *b)
{
    struct larder__stripe *s = b->source;
    int priority = larder__read_class(b->flags);
    for (size_t i = 1; s->pool && i < b->count; i++) {
        pthread_mutex_lock(&b->lock);
        b->refs++;
        pthread_mutex_unlock(&b->lock);
        if (larder__pool_submit(s->pool, group_task, &b->groups[i], priority) < 0)
            larder__stripe_batch_release(b); /* not queued: this thread runs it below */
    }
    for (size_t i = 0; i < b->count; i++)
        if (atomic_exchange_explicit(&b->groups[i].claimed, 1, memory_order_acq_rel) == 0)
            run_group(&b->groups[i]);
    pthread_mutex_lock(&b->lock);
    while (b->unfinished > 0)
        pthread_cond_wait(&b->done, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

/*
 * A read's answer from its groups: the first failure, or LARDER__FROM_PEER
 * when any bytes came from a peer (and which: larder__source_set_peer_ranges
 * on this thread), else LARDER__FROM_ORIGIN.
 */
static int batch_answer(struct larder__stripe_batch *b)
{
    size_t ranges = 0;
    for (size_t i = 0; i < b->count; i++) {
        struct larder__stripe_group *g = &b->groups[i];
        if (g->result < 0) return larder__fail(g->result, "%s", g->message);
        if (g->result == LARDER__FROM_PEER) ranges += g->lent ? g->lent_count : g->count;
    }
    if (ranges == 0) return LARDER__FROM_ORIGIN;
    struct larder__extent *from_peers = malloc(ranges * sizeof *from_peers);
    if (!from_peers) return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < b->count; i++) {
        struct larder__stripe_group *g = &b->groups[i];
        if (g->result != LARDER__FROM_PEER) continue;
        size_t count = g->lent ? g->lent_count : g->count;
        memcpy(from_peers + n, g->lent ? g->lent : g->extents, count * sizeof *from_peers);
        n += count;
    }
    larder__source_set_peer_ranges(from_peers, n);
    free(from_peers);
    return LARDER__FROM_PEER;
}

/* The pieces of the extents cut at chunk boundaries, each with its owner; *count of them. */
static struct larder__stripe_piece *cut(struct larder__stripe *s,
                                        const struct larder__extent *extents, size_t count,
                                        size_t *pieces_out, bool *any_peer)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        if (extents[i].length)
            n += (size_t)((extents[i].offset + extents[i].length - 1) / s->chunk_size -
                          extents[i].offset / s->chunk_size + 1);
    struct larder__stripe_piece *pieces = malloc((n ? n : 1) * sizeof *pieces);
    if (!pieces) return NULL;
    size_t k = 0;
    *any_peer = false;
    for (size_t i = 0; i < count; i++) {
        const struct larder__extent *e = &extents[i];
        for (size_t done = 0; done < e->length;) {
            uint64_t at = e->offset + done, chunk = at / s->chunk_size;
            uint64_t room = (chunk + 1) * s->chunk_size - at;
            size_t length = e->length - done < room ? e->length - done : (size_t)room;
            size_t owner = s->owner(s->owner_context, s->shard, chunk);
            if (!larder__stripe_owner_peer(s, owner)) owner = LARDER__STRIPE_TO_ORIGIN;
            *any_peer = *any_peer || owner != LARDER__STRIPE_TO_ORIGIN;
            pieces[k] =
                (struct larder__stripe_piece){owner, k, {(uint8_t *)e->buf + done, at, length}};
            k++;
            done += length;
        }
    }
    *pieces_out = k;
    return pieces;
}

/*
 * The batch of a read of `extents` in `mode`: cut at chunk boundaries,
 * grouped by owner (pieces in order, adjacent ones joined; this node's
 * pieces left out when `peers_only`).  NULL with *rc 0 when no piece is a
 * peer's (read the origin as asked), or with *rc -ENOMEM.  The caller
 * frees *joined after running it, and releases it.
 */
struct larder__stripe_batch *larder__stripe_plan(struct larder__stripe *s,
                                                 const struct larder__extent *extents, size_t count,
                                                 unsigned flags, enum larder__stripe_mode mode,
                                                 struct larder__extent **joined_out, int *rc)
{
    size_t n;
    bool any_peer;
    *rc = 0;
    *joined_out = NULL;
    struct larder__stripe_piece *pieces = cut(s, extents, count, &n, &any_peer);
    if (!pieces) *rc = -ENOMEM;
    if (!pieces || !any_peer) {
        free(pieces);
        return NULL;
    }
    qsort(pieces, n, sizeof *pieces, compare_pieces);
    struct larder__extent *joined = malloc(n * sizeof *joined);
    size_t *owners = malloc(n * sizeof *owners);
    size_t m = 0, groups = 0;
    for (size_t i = 0; joined && owners && i < n; i++) {
        if (mode == LARDER__STRIPE_BORROW_AHEAD && pieces[i].owner == LARDER__STRIPE_TO_ORIGIN)
            continue; /* this node's */
        struct larder__extent *last = m ? &joined[m - 1] : NULL;
        if (last && owners[m - 1] == pieces[i].owner &&
            last->offset + last->length == pieces[i].extent.offset &&
            (uint8_t *)last->buf + last->length == (uint8_t *)pieces[i].extent.buf) {
            last->length += pieces[i].extent.length;
            continue;
        }
        groups += !last || owners[m - 1] != pieces[i].owner;
        owners[m] = pieces[i].owner;
        joined[m++] = pieces[i].extent;
    }
    free(pieces);
    struct larder__stripe_batch *b =
        joined && owners ? calloc(1, sizeof *b + groups * sizeof *b->groups) : NULL;
    if (!b) {
        free(joined);
        free(owners);
        *rc = -ENOMEM;
        return NULL;
    }
    b->source = s;
    b->flags = flags;
    b->mode = mode;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->done, NULL);
    b->unfinished = b->count = groups;
    b->refs = 1;
    for (size_t i = 0, g = 0; i < m; g++) {
        size_t first = i;
        while (i < m && owners[i] == owners[first])
            i++;
        b->groups[g] = (struct larder__stripe_group){
            .batch = b, .owner = owners[first], .extents = &joined[first], .count = i - first};
    }
    free(owners);
    *joined_out = joined;
    return b;
}

static int stripe_read(struct larder__source *source, const struct larder__extent *extents,
                       size_t count, unsigned flags)
{
    struct larder__stripe *s = (struct larder__stripe *)source;
    /* the origin alone, as asked: when told so, or when no loan could cover a piece */
    if (flags & LARDER__READ_ORIGIN_ONLY ||
        (s->borrow_ahead && !__atomic_load_n(&s->loans, __ATOMIC_ACQUIRE)))
        return larder__source_readv(s->origin, extents, count, flags);
    for (size_t i = 0; i < count; i++) /* past the end of offsets: the origin says so */
        if (extents[i].offset + extents[i].length < extents[i].offset)
            return larder__source_readv(s->origin, extents, count, flags);
    struct larder__extent *joined;
    int rc;
    struct larder__stripe_batch *b = larder__stripe_plan(
        s, extents, count, flags,
        s->borrow_ahead ? LARDER__STRIPE_READ_LOANS : LARDER__STRIPE_READ_PEERS, &joined, &rc);
    if (!b) /* every byte is this node's: one read of the origin, as asked */
        return rc < 0 ? rc : larder__source_readv(s->origin, extents, count, flags);
    larder__stripe_run_batch(b);
    rc = batch_answer(b);
    larder__stripe_batch_release(b);
    free(joined);
    return rc;
}

static int stripe_size(struct larder__source *source, uint64_t *size)
{
    return larder__source_size(((struct larder__stripe *)source)->origin, size);
}

static int stripe_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    return larder__source_stream(((struct larder__stripe *)source)->origin, sink, userdata);
}

static void stripe_close(struct larder__source *source)
{
    struct larder__stripe *s = (struct larder__stripe *)source;
    for (size_t i = 0; i < s->members; i++)
        larder__source_close(s->links[i].peer);
    larder__source_close(s->origin);
    while (s->loans) /* loans not returned: the stripe's to free */
        larder__source_stripe_return(source, s->loans);
    pthread_mutex_destroy(&s->loans_lock);
    free(s);
}

static const struct larder__source_ops stripe_ops = {
    .kind = "stripe",
    .size = stripe_size,
    .read = stripe_read,
    .stream = stripe_stream,
    .close = stripe_close,
};

int larder__source_stripe_open(struct larder__source **out, const struct larder__stripe_config *c,
                               struct larder__source *origin)
{
    struct larder__stripe *s = NULL;
    int rc = 0;
    if (!origin || !c->owner || c->chunk_size == 0)
        rc = larder__fail(LARDER_EUSAGE, "a stripe needs an origin, an owner and a chunk size");
    else if (!(s = calloc(1, sizeof *s + c->members * sizeof *s->links)))
        rc = -ENOMEM;
    if (rc < 0) {
        for (size_t i = 0; c->peers && i < c->members; i++)
            larder__source_close(c->peers[i]);
        larder__source_close(origin);
        return rc;
    }
    s->base.ops = &stripe_ops;
    s->base.name = origin->name;
    s->origin = origin;
    s->borrow_ahead = c->borrow_ahead;
    pthread_mutex_init(&s->loans_lock, NULL);
    s->shard = c->shard;
    s->chunk_size = c->chunk_size;
    s->owner = c->owner;
    s->owner_context = c->owner_context;
    s->pool = c->pool;
    s->down_ms = c->down_ms;
    s->members = c->members;
    s->open_peer = c->open_peer;
    s->peer_context = c->peer_context;
    for (size_t i = 0; c->peers && i < c->members; i++)
        s->links[i].peer = c->peers[i];
    *out = &s->base;
    return 0;
}
