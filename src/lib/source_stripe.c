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
 * A read answers LARDER__FROM_PEER when any of its bytes came from a peer.
 * The size, the stream and the name are the origin's.
 */
#include "pool.h"
#include "source.h"
#include "source_hedge.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define TO_ORIGIN SIZE_MAX /* a piece's owner: read it from the origin */

struct owner_link {
    struct larder__source *peer;   /* NULL: none (this node, or no endpoint) */
    _Atomic int64_t down_until_ms; /* skipped until then (monotonic ms); 0: never failed */
};

struct stripe_source {
    struct larder__source base;
    struct larder__source *origin;
    uint32_t shard;
    uint64_t chunk_size;
    larder__chunk_owner_fn owner;
    void *owner_context;
    struct larder__pool *pool; /* borrowed; NULL: groups one after another */
    int down_ms;
    size_t members;
    struct owner_link links[];
};

/* One piece of a read, within one chunk (or several of one owner, once joined). */
struct piece {
    size_t owner; /* a member index, or TO_ORIGIN */
    size_t order; /* its place in the read, to keep each group's pieces in order */
    struct larder__extent extent;
};

struct batch;

/* One owner's share of a read. */
struct group {
    struct batch *batch;
    size_t owner;
    const struct larder__extent *extents;
    size_t count;
    _Atomic int claimed; /* 1 once a worker or the caller took it to run */
    int result;          /* its enum larder__from, or a negative code */
    char message[256];   /* larder_errmsg() of a failure, from the thread that ran it */
};

/* The groups of one read; freed by the last of the caller and the queued tasks. */
struct batch {
    struct stripe_source *source;
    unsigned flags;
    pthread_mutex_t lock;
    pthread_cond_t done;
    size_t unfinished; /* groups not yet run to the end */
    size_t refs;       /* the caller's, plus one per task still queued in the pool */
    size_t count;
    struct group groups[];
};

static struct larder__source *owner_peer(struct stripe_source *s, size_t owner)
{
    return owner < s->members ? s->links[owner].peer : NULL;
}

/* Leave owner's link alone for down_ms; the first to mark it down logs why. */
static void link_failed(struct stripe_source *s, struct owner_link *l, int64_t now)
{
    int64_t until = l->down_until_ms;
    if (until > now) return; /* another reader marked it down already */
    if (!__atomic_compare_exchange_n(&l->down_until_ms, &until, now + s->down_ms, false,
                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return;
    larder__log(LARDER_LOG_WARN, "%s; skipped for %d ms, reading its chunks from the origin",
                larder_errmsg(), s->down_ms);
}

/* One owner's extents: its peer, else (down, failed, or none) the origin. */
static int read_group(struct stripe_source *s, size_t owner, const struct larder__extent *extents,
                      size_t count, unsigned flags)
{
    struct larder__source *peer = owner_peer(s, owner);
    if (peer) {
        struct owner_link *l = &s->links[owner];
        if (l->down_until_ms <= (int64_t)larder__now_ms()) {
            int rc = larder__source_readv(peer, extents, count, flags);
            if (rc >= 0) return rc;
            if (rc != -EHOSTUNREACH) /* declined unasked (known down): nothing to mark */
                link_failed(s, l, (int64_t)larder__now_ms());
        }
    }
    return larder__source_readv(s->origin, extents, count, flags);
}

/* Run group g (whoever claimed it) and mark it finished. */
static void run_group(struct group *g)
{
    struct batch *b = g->batch;
    g->result = read_group(b->source, g->owner, g->extents, g->count, b->flags);
    if (g->result < 0) snprintf(g->message, sizeof g->message, "%s", larder_errmsg());
    pthread_mutex_lock(&b->lock);
    if (--b->unfinished == 0) pthread_cond_broadcast(&b->done);
    pthread_mutex_unlock(&b->lock);
}

/* Drop one reference on b; the last frees it. */
static void batch_release(struct batch *b)
{
    pthread_mutex_lock(&b->lock);
    bool last = --b->refs == 0;
    pthread_mutex_unlock(&b->lock);
    if (!last) return;
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->done);
    free(b);
}

/* A pool task: run the group unless the caller took it back first. */
static void group_task(void *arg)
{
    struct group *g = arg;
    struct batch *b = g->batch;
    if (__atomic_exchange_n(&g->claimed, 1, __ATOMIC_ACQ_REL) == 0) run_group(g);
    batch_release(b);
}

static int compare_pieces(const void *a, const void *b)
{
    const struct piece *x = a, *y = b;
    if (x->owner != y->owner) return x->owner < y->owner ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Run the groups of b at once on the pool (group 0 on this thread); the first failure, or
 * LARDER__FROM_PEER when any group's bytes came from a peer. */
static int run_batch(struct batch *b)
{
    struct stripe_source *s = b->source;
    int priority = b->flags & LARDER__READ_BACKGROUND ? LARDER__BACKGROUND : LARDER__DEMAND;
    for (size_t i = 1; s->pool && i < b->count; i++) {
        pthread_mutex_lock(&b->lock);
        b->refs++;
        pthread_mutex_unlock(&b->lock);
        if (larder__pool_submit(s->pool, group_task, &b->groups[i], priority) < 0)
            batch_release(b); /* not queued: this thread runs it below */
    }
    /* this thread runs group 0 and every group no worker has started */
    for (size_t i = 0; i < b->count; i++)
        if (__atomic_exchange_n(&b->groups[i].claimed, 1, __ATOMIC_ACQ_REL) == 0)
            run_group(&b->groups[i]);
    pthread_mutex_lock(&b->lock);
    while (b->unfinished > 0)
        pthread_cond_wait(&b->done, &b->lock);
    pthread_mutex_unlock(&b->lock);
    int rc = LARDER__FROM_ORIGIN;
    for (size_t i = 0; i < b->count; i++) {
        struct group *g = &b->groups[i];
        if (g->result < 0) return larder__fail(g->result, "%s", g->message);
        if (g->result == LARDER__FROM_PEER) rc = LARDER__FROM_PEER;
    }
    return rc;
}

/* The pieces of the extents cut at chunk boundaries, each with its owner; *count of them. */
static struct piece *cut(struct stripe_source *s, const struct larder__extent *extents,
                         size_t count, size_t *pieces_out, bool *any_peer)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        if (extents[i].length)
            n += (size_t)((extents[i].offset + extents[i].length - 1) / s->chunk_size -
                          extents[i].offset / s->chunk_size + 1);
    struct piece *pieces = malloc((n ? n : 1) * sizeof *pieces);
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
            if (!owner_peer(s, owner)) owner = TO_ORIGIN;
            *any_peer = *any_peer || owner != TO_ORIGIN;
            pieces[k] = (struct piece){owner, k, {(uint8_t *)e->buf + done, at, length}};
            k++;
            done += length;
        }
    }
    *pieces_out = k;
    return pieces;
}

static int stripe_read(struct larder__source *source, const struct larder__extent *extents,
                       size_t count, unsigned flags)
{
    struct stripe_source *s = (struct stripe_source *)source;
    if (flags & LARDER__READ_ORIGIN_ONLY)
        return larder__source_readv(s->origin, extents, count, flags);
    for (size_t i = 0; i < count; i++) /* past the end of offsets: the origin says so */
        if (extents[i].offset + extents[i].length < extents[i].offset)
            return larder__source_readv(s->origin, extents, count, flags);
    size_t n;
    bool any_peer;
    struct piece *pieces = cut(s, extents, count, &n, &any_peer);
    if (!pieces) return -ENOMEM;
    if (!any_peer) { /* every byte is this node's: one read of the origin, as asked */
        free(pieces);
        return larder__source_readv(s->origin, extents, count, flags);
    }
    qsort(pieces, n, sizeof *pieces, compare_pieces);
    /* join the pieces of one owner that follow each other in the shard and the buffer */
    struct larder__extent *joined = malloc(n * sizeof *joined);
    size_t *owners = malloc(n * sizeof *owners);
    size_t m = 0, groups = 0;
    for (size_t i = 0; joined && owners && i < n; i++) {
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
    struct batch *b = joined && owners ? calloc(1, sizeof *b + groups * sizeof *b->groups) : NULL;
    if (!b) {
        free(joined);
        free(owners);
        return -ENOMEM;
    }
    b->source = s;
    b->flags = flags;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->done, NULL);
    b->unfinished = b->count = groups;
    b->refs = 1;
    for (size_t i = 0, g = 0; i < m; g++) {
        size_t first = i;
        while (i < m && owners[i] == owners[first])
            i++;
        b->groups[g] = (struct group){
            .batch = b, .owner = owners[first], .extents = &joined[first], .count = i - first};
    }
    int rc = run_batch(b);
    batch_release(b);
    free(joined);
    free(owners);
    return rc;
}

static int stripe_size(struct larder__source *source, uint64_t *size)
{
    return larder__source_size(((struct stripe_source *)source)->origin, size);
}

static int stripe_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    return larder__source_stream(((struct stripe_source *)source)->origin, sink, userdata);
}

static void stripe_close(struct larder__source *source)
{
    struct stripe_source *s = (struct stripe_source *)source;
    for (size_t i = 0; i < s->members; i++)
        larder__source_close(s->links[i].peer);
    larder__source_close(s->origin);
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
    struct stripe_source *s = NULL;
    int rc = 0;
    if (!origin || !c->owner || c->chunk_size == 0)
        rc = larder__fail(LARDER_EUSAGE, "a stripe needs an origin, an owner and a chunk size");
    else if (!(s = calloc(1, sizeof *s + c->members * sizeof *s->links)))
        rc = -ENOMEM;
    if (rc < 0) {
        for (size_t i = 0; i < c->members; i++)
            larder__source_close(c->peers[i]);
        larder__source_close(origin);
        return rc;
    }
    s->base.ops = &stripe_ops;
    s->base.name = origin->name;
    s->origin = origin;
    s->shard = c->shard;
    s->chunk_size = c->chunk_size;
    s->owner = c->owner;
    s->owner_context = c->owner_context;
    s->pool = c->pool;
    s->down_ms = c->down_ms;
    s->members = c->members;
    for (size_t i = 0; i < c->members; i++)
        s->links[i].peer = c->peers[i];
    *out = &s->base;
    return 0;
}
