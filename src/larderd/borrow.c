/*
 * borrow.c - borrowing whole owner chunks (docs/architecture.md, "Peer").
 * A local reader's READ of a sample or two used to borrow just its own
 * bytes from the chunk's owner: a sequential reader of a remote chunk
 * then paid one peer round trip, one fill (with its lock, its checks and
 * its writes) and one partly kept edge block per sample, and the blocks
 * two samples share were read twice.  Here, before its fill, a READ that
 * needs part of another member's chunk that the cache lacks, a chunk a
 * READ asked for lately too (the ring `asked`: a lone READ of a sample
 * still borrows just its bytes), has the whole chunk (LARDER__OWNER_CHUNK
 * bytes) borrowed in one transfer and staged: checked against the index
 * and kept, once, by whichever READ claims it first; the other READs of
 * that chunk at its class or a less urgent one wait for it (no lock
 * held), then find their bytes resident and are answered from the cache.
 * A READ of whole chunks borrows them itself, in one transfer already.
 * At most CHUNK_SLOTS chunks are staged at once (each holds two buffers
 * of a chunk); past that, a READ borrows its own bytes.
 *
 * Only for a cache that evicts nothing (no --cache-size, no
 * --borrow-size): with a capacity, bytes no reader asked for would push
 * out ones a reader will ask for, so each READ borrows its own bytes.
 */
#include "larderd.h"
#include "trace.h"

#include "bigbuf.h"
#include "cache.h"
#include "fill.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* whole chunks staged at once, node-wide: a few keep the cores busy, and
 * their buffers (bigbuf.h) are reused rather than faulted in afresh */
#define CHUNK_SLOTS 4
/* room on either side of a staged chunk's span for neighbours its fill takes in */
#define SPAN_SLACK ((uint64_t)1 << 20)
#define CHUNK_WAIT_MS 60000 /* a READ waits this long at most for another's chunk */

/* One chunk being borrowed and staged by one READ's worker. */
struct chunk_slot {
    const struct dataset_entry *entry; /* NULL: the slot is free */
    uint32_t shard;
    uint64_t chunk;
    int priority; /* the class it is staged at (priority.h: lower is more urgent) */
};

static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_freed = PTHREAD_COND_INITIALIZER;
static struct chunk_slot slots[CHUNK_SLOTS];
/* the chunks READs asked for lately (a ring): a chunk asked for again is borrowed whole */
#define ASKED 64
static struct chunk_slot asked[ASKED];
static int next_asked;

/* The slot staging that chunk, or NULL; call with slots_lock held. */
static struct chunk_slot *find_slot(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    for (int i = 0; i < CHUNK_SLOTS; i++)
        if (slots[i].entry == e && slots[i].shard == shard && slots[i].chunk == chunk)
            return &slots[i];
    return NULL;
}

/*
 * Claim the chunk for the caller to stage at class `priority`: its slot,
 * or NULL when the caller should borrow its own bytes instead.  A chunk
 * being staged at the caller's class or a more urgent one is waited for
 * (up to deadline), then NULL: it is resident now, or failed.  One staged
 * at a less urgent class is not (a HINTED staging may wait on its owner's
 * readers: a DEMAND READ must not wait behind it), nor is a free slot
 * (the slots' stagings may wait on a busy origin at the owner).
 */
static struct chunk_slot *claim(const struct dataset_entry *e, uint32_t shard, uint64_t chunk,
                                int priority, const struct timespec *deadline)
{
    pthread_mutex_lock(&slots_lock);
    struct chunk_slot *s = find_slot(e, shard, chunk);
    if (s && s->priority <= priority) {
        while (find_slot(e, shard, chunk) &&
               pthread_cond_timedwait(&slot_freed, &slots_lock, deadline) != ETIMEDOUT)
            ;
        s = NULL;
    } else if (s) {
        s = NULL;
    } else if ((s = find_slot(NULL, 0, 0)) != NULL) {
        *s = (struct chunk_slot){.entry = e, .shard = shard, .chunk = chunk, .priority = priority};
    }
    pthread_mutex_unlock(&slots_lock);
    return s;
}

static void release(struct chunk_slot *s)
{
    pthread_mutex_lock(&slots_lock);
    *s = (struct chunk_slot){.entry = NULL};
    pthread_cond_broadcast(&slot_freed);
    pthread_mutex_unlock(&slots_lock);
}

/*
 * Borrow and stage all of chunk `chunk` of shard (its bytes [lo, hi)).
 * With LARDERD_TRACE, one "chunk" line: borrow= is the time from asking
 * the owner to the chunk's last byte in hand, total= that plus the fill
 * (its checks and its writes into the cache).
 */
static void stage_chunk(struct dataset_entry *e, uint32_t shard, uint64_t lo, uint64_t hi,
                        int priority)
{
    struct trace_span span_trace = {.kind = "chunk",
                                    .node = (int)e->daemon->self,
                                    .priority = priority,
                                    .shard = shard,
                                    .offset = lo,
                                    .length = hi - lo,
                                    .arrived_us = trace_now_us()};
    trace_begin(&span_trace);
    struct larder__fill *fill = larder__dataset_fill(e->dataset);
    struct larder__source *stripe = NULL;
    struct larder__stripe_loan *loan = NULL;
    /* the chunk's bytes received straight into the span its fill will
     * read, check and keep: no copy from a loan of its own into the span.
     * The fill may take in neighbours straddling its edge blocks once it
     * holds their locks (fill_scope.c): SPAN_SLACK bytes on either side
     * leave it room to, still in this buffer.  The fill writes into the
     * loan's bytes (its cached blocks, and the origin's bytes when the
     * owner's prove wrong) while another READ's fill may copy from the
     * loan: what that one copies is checked before it is kept, as ever. */
    uint64_t span_lo, span_hi, room_lo = 0;
    uint8_t *room = NULL;
    /* the chunk's inner blocks spliced straight into the cache file's
     * pages, under their fill lock (fill_inplace.c), when it can; the
     * rest of the span (or all of it) into a buffer */
    struct larder__fill_inplace in_place = {.lock = -1};
    if (larder__fill_range_scope(fill, shard, lo, hi - lo, &span_lo, &span_hi) == 0 &&
        span_hi - span_lo <= SIZE_MAX - 2 * SPAN_SLACK) {
        room_lo = span_lo > SPAN_SLACK ? span_lo - SPAN_SLACK : 0;
        uint64_t room_length = span_hi - room_lo + SPAN_SLACK;
        /* at DEMAND only: the lock is held while the owner sends, and a
         * READ more urgent than a staging does not wait for it (claim):
         * behind a NEAR or HINTED staging's lock it would */
        /* and over TCP only: a UCX receive into the window would have no
         * deadline while the lock is held (recv_window.h) */
        if (priority <= LARDER__DEMAND && !e->daemon->ucx &&
            larder__fill_inplace_begin(fill, shard, lo, hi, room_lo, room_length, &in_place) == 0)
            room = in_place.room;
        else
            room = larder__bigbuf_get((size_t)room_length);
        if (room)
            loan = borrow_range_into(e, shard, span_lo, span_hi - span_lo, priority,
                                     room + (span_lo - room_lo), &stripe);
    }
    span_trace.borrowed_us = trace_now_us();
    int fd = -1, rc = -1;
    /* a failed borrow left no loan: the fill reads the chunk from the origin
     * (what a READ of it would do), and a failed fill is the READ's to say */
    if (loan) {
        if (in_place.room)
            larder__fill_inplace_offer(&in_place);
        else
            larder__fill_offer_span(shard, room_lo, span_hi - room_lo + SPAN_SLACK, room);
        rc = larder__fill_stage_range_at(fill, shard, lo, hi - lo, priority, &fd);
        larder__fill_offer_span(0, 0, 0, NULL);
    }
    borrow_return(stripe, loan);
    if (in_place.room) /* after the loan: its bytes lie there */
        __atomic_fetch_add(&e->served.inplace_blocks, larder__fill_inplace_end(&in_place),
                           __ATOMIC_RELAXED);
    else
        larder__bigbuf_put(room);
    trace_end(&span_trace, rc >= 0);
}

void borrow_reserve_buffers(const struct larderd *d)
{
    /* whole chunks are staged only in a cluster, into a cache that evicts nothing */
    if (d->members.count <= 1 || d->config.cache_capacity || d->config.borrow_capacity) return;
    /* a chunk's span: the chunk, samples straddling its edges, SPAN_SLACK
     * either side; bigbuf rounds up to whole MiB, and takes the smallest
     * kept buffer that fits.  Measured on bench/peer.sh's borrowing-only
     * run with fresh daemons: node 1's minor faults during the run 6500-
     * 10000 (26-40 MiB), most of them recv into the slots' fresh spans */
    larder__bigbuf_reserve(CHUNK_SLOTS, LARDER__OWNER_CHUNK + 2 * SPAN_SLACK + (1u << 20));
}

/* Whether a READ asked for bytes of that chunk lately, noting that this
 * one did; call with slots_lock held. */
static bool asked_before(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    for (int i = 0; i < ASKED; i++)
        if (asked[i].entry == e && asked[i].shard == shard && asked[i].chunk == chunk) return true;
    asked[next_asked] = (struct chunk_slot){.entry = e, .shard = shard, .chunk = chunk};
    next_asked = (next_asked + 1) % ASKED;
    return false;
}

bool borrow_whole_chunks(struct dataset_entry *e, uint32_t shard, uint64_t offset, uint64_t length,
                         int priority)
{
    if (!e->members || e->daemon->members.count <= 1 || length == 0 ||
        shard >= larder__dataset_num_shards(e->dataset))
        return false;
    struct larder__cache *cache = larder__dataset_cache(e->dataset);
    if (!cache || larder__cache_evicts(cache)) return false;
    struct larder__fill *fill = larder__dataset_fill(e->dataset);
    uint64_t size = larder__dataset_shard_size(e->dataset, shard), lo, hi;
    if (offset >= size || offset + length > size || offset + length < offset ||
        larder__fill_range_scope(fill, shard, offset, length, &lo, &hi) != 0)
        return false; /* outside the shard (the READ says so), or resident already */
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += CHUNK_WAIT_MS / 1000;
    bool staged = false;
    for (uint64_t chunk = offset / LARDER__OWNER_CHUNK;
         chunk * LARDER__OWNER_CHUNK < offset + length; chunk++) {
        uint64_t start = chunk * LARDER__OWNER_CHUNK, end = start + LARDER__OWNER_CHUNK;
        if (end > size) end = size;
        uint64_t want_lo = start > offset ? start : offset;
        uint64_t want_hi = end < offset + length ? end : offset + length;
        /* this node's, or all of it asked for: the READ's own borrow takes it in one */
        if (owns_chunk(e, shard, chunk) || (want_lo == start && want_hi == end)) continue;
        uint64_t a, b; /* what the READ needs of this chunk: resident yet? */
        if (larder__fill_range_scope(fill, shard, want_lo, want_hi - want_lo, &a, &b) != 0)
            continue;
        pthread_mutex_lock(&slots_lock);
        bool busy = find_slot(e, shard, chunk) != NULL, again = asked_before(e, shard, chunk);
        pthread_mutex_unlock(&slots_lock);
        /* the first READ of a chunk lately borrows its own bytes: a lone
         * reader's sample costs no more than it did; the next one, or one
         * arriving while the chunk is staged, has all of it come over */
        if (!busy && !again) continue;
        struct chunk_slot *slot = claim(e, shard, chunk, priority, &deadline);
        if (!slot) continue; /* staged by another READ meanwhile, or its own bytes */
        /* resident by now (staged by a READ that ended as this one claimed it)? */
        if (larder__fill_range_scope(fill, shard, want_lo, want_hi - want_lo, &a, &b) == 0)
            stage_chunk(e, shard, start, end, priority);
        release(slot);
        staged = true;
    }
    /* all of it in the cache now: nothing left for the READ to borrow */
    return staged && larder__fill_range_scope(fill, shard, offset, length, &lo, &hi) == 1;
}
