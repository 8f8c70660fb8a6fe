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
 * A READ of exactly one whole chunk stages it the same way (its other
 * READs wait for it); a READ of several chunks borrows them itself, in
 * one transfer per owner already.  At most CHUNK_SLOTS chunks are staged
 * at once; past that, a READ borrows its own bytes.
 *
 * Only for a cache that evicts nothing (no --cache-size, no
 * --borrow-size): with a capacity, bytes no reader asked for would push
 * out ones a reader will ask for, so each READ borrows its own bytes.
 */
#include "larderd.h"
#include "trace.h"
#include "borrow_stream.h"

#include "bigbuf.h"
#include "cache.h"
#include "fill.h"
#include "index.h"
#include "dataset.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* whole chunks (or pieces) staged at once, node-wide.  A READ finding
 * none free borrows its own bytes, which no other READ can wait for: with
 * 4, the restart storm's readers (16 a node, 16 READs of 4 MiB each in
 * flight, bench/restart.sh) had owners send each chunk 2-6 times; 16 bring
 * it to about once.  At DEMAND a staging is received in place (rooms,
 * fill_inplace.c), at other classes into a buffer (bigbuf.h): the first
 * RESERVED_BUFFERS of those are made at start */
#define CHUNK_SLOTS 16
#define RESERVED_BUFFERS 4
/* room on either side of a staged chunk's span for neighbours its fill takes in */
#define SPAN_SLACK ((uint64_t)1 << 20)
#define CHUNK_WAIT_MS 60000 /* a READ waits this long at most for another's chunk */

/* One chunk (or piece of one) being borrowed and staged by one READ's
 * worker; in the ring `asked`, a chunk a READ asked for. */
struct chunk_slot {
    const struct dataset_entry *entry; /* NULL: the slot is free */
    uint32_t shard;
    uint64_t chunk;  /* the ring's: which chunk */
    uint64_t lo, hi; /* the slots': the bytes being staged */
    int priority;    /* the class it is staged at (priority.h: lower is more urgent) */
    unsigned asks;   /* the ring's: READs that needed bytes of it (2: read in turn) */
};

static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_freed = PTHREAD_COND_INITIALIZER;
static struct chunk_slot slots[CHUNK_SLOTS];
/* the chunks READs asked for lately (a ring): a chunk asked for again is borrowed whole */
#define ASKED 64
static struct chunk_slot asked[ASKED];
static int next_asked;

/* The slot staging bytes of [lo, hi) of that shard, or NULL; call with slots_lock held. */
static struct chunk_slot *find_slot(const struct dataset_entry *e, uint32_t shard, uint64_t lo,
                                    uint64_t hi)
{
    for (int i = 0; i < CHUNK_SLOTS; i++)
        if (slots[i].entry == e && slots[i].shard == shard && slots[i].lo < hi && lo < slots[i].hi)
            return &slots[i];
    return NULL;
}

/* Whether any bytes of [lo, hi) of that shard are being staged. */
static bool staging(const struct dataset_entry *e, uint32_t shard, uint64_t lo, uint64_t hi)
{
    pthread_mutex_lock(&slots_lock);
    bool found = find_slot(e, shard, lo, hi) != NULL;
    pthread_mutex_unlock(&slots_lock);
    return found;
}

/* A free slot, or NULL; call with slots_lock held. */
static struct chunk_slot *free_slot(void)
{
    for (int i = 0; i < CHUNK_SLOTS; i++)
        if (!slots[i].entry) return &slots[i];
    return NULL;
}

/*
 * Claim bytes [lo, hi) of the shard (a chunk, or a piece of one) for the
 * caller to stage at class `priority`: its slot, or NULL when the caller
 * should borrow its own bytes instead.  Bytes being staged at the caller's
 * class or a more urgent one are waited for (up to deadline), then NULL:
 * they are resident now, or failed.  Ones staged at a less urgent class
 * are not (a HINTED staging may wait on its owner's readers: a DEMAND READ
 * must not wait behind it), nor is a free slot (the slots' stagings may
 * wait on a busy origin at the owner).  With `no_wait`, NULL at once when
 * any of those bytes are being staged.
 */
static struct chunk_slot *claim(const struct dataset_entry *e, uint32_t shard, uint64_t lo,
                                uint64_t hi, int priority, const struct timespec *deadline,
                                bool no_wait)
{
    pthread_mutex_lock(&slots_lock);
    struct chunk_slot *s = find_slot(e, shard, lo, hi);
    if (s && s->priority <= priority && !no_wait) {
        while (find_slot(e, shard, lo, hi) &&
               pthread_cond_timedwait(&slot_freed, &slots_lock, deadline) != ETIMEDOUT)
            ;
        s = NULL;
    } else if (s) {
        s = NULL;
    } else if ((s = free_slot()) != NULL) {
        *s = (struct chunk_slot){
            .entry = e, .shard = shard, .lo = lo, .hi = hi, .priority = priority};
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
    larder__bigbuf_reserve(RESERVED_BUFFERS, LARDER__OWNER_CHUNK + 2 * SPAN_SLACK + (1u << 20));
}

/* The ring's entry for that chunk, or NULL; call with slots_lock held. */
static struct chunk_slot *asked_entry(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    for (int i = 0; i < ASKED; i++)
        if (asked[i].entry == e && asked[i].shard == shard && asked[i].chunk == chunk)
            return &asked[i];
    return NULL;
}

/* Note that a READ asked for bytes of that chunk (`asks` times at least);
 * call with slots_lock held. */
static void note_asked(const struct dataset_entry *e, uint32_t shard, uint64_t chunk, unsigned asks)
{
    struct chunk_slot *a = asked_entry(e, shard, chunk);
    if (!a) {
        a = &asked[next_asked];
        next_asked = (next_asked + 1) % ASKED;
        *a = (struct chunk_slot){.entry = e, .shard = shard, .chunk = chunk};
    }
    if (a->asks < asks) a->asks = asks;
}

/* Whether a READ asked for bytes of that chunk lately, noting that this
 * one did; call with slots_lock held. */
static bool asked_before(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    struct chunk_slot *a = asked_entry(e, shard, chunk);
    if (a) {
        a->asks++;
        return true;
    }
    note_asked(e, shard, chunk, 1);
    return false;
}

/*
 * Pieces.  A chunk borrowed whole comes in one transfer that its owner
 * answers once the whole chunk is in its cache: 4 MiB from an origin of
 * 100 MB/s is about 46 ms, and the READ that asked for it, a reader's
 * second sample in the chunk, waits all of it (bench/restart.sh's traced
 * training reader: its p99 steps were these, 70-80 ms of borrow each).
 * So a DEMAND or NEAR READ has the chunk come over in pieces of
 * LARDERD_BORROW_PIECE bytes (default BORROW_PIECE; a power of two from
 * 64 KiB to 2 MiB, so pieces divide chunks; 0 or anything else: whole
 * chunks, as before): it stages and waits for the pieces holding its own
 * bytes only.  Once it is answered, its worker stages the pieces after its
 * end, in order, up to AHEAD past the one the reader is in (into the next
 * chunk at a chunk's end and the next shard at a shard's end, this node's
 * own pieces from the origin), at the READ's class, one at a time: two at
 * once would share the owner's link and each come in later.  So a reader
 * reading on finds its bytes resident or in flight.  Each piece is one borrow its
 * owner fills from the origin, so the origin still reads each byte once;
 * READs needing one piece stage it once (the slots), the others wait for
 * it.  HINTED and WARM stagings, which no reader waits on, still borrow
 * whole chunks.
 *
 * A reader streaming through a chunk (its own READs, from its process,
 * moving on in order from one piece to the next STREAM_AFTER times, or
 * entering a chunk at its start just after one it streamed through) has
 * its read ahead grow: the rest of its chunk and one chunk past it (this
 * node's own resident chunks passed), in steps of AHEAD_STEP (this node's own chunks, from
 * the origin, a piece at a time); its READs stage the steps holding their
 * bytes.  Pieces cost a bulk reader about twice a whole chunk's CPU per
 * borrowed MB (bench/results/peer-borrow.md, "Fifth pass": more requests
 * to the owner, and the samples crossing each piece's edges kept out of
 * the in-place window).  The state is the reader's (borrow_stream.c),
 * never the node's: another reader's READ in a chunk a streamer reads or read ahead is a
 * lone sample or a piece, as ever, and waits for one step at most.  A
 * reader jumping about (a piece two or more past the last one) keeps the
 * pieces, and their tail latency.
 */
#define BORROW_PIECE ((uint64_t)1 << 20)
#define AHEAD 2 /* pieces in flight past the one a reader is in, at most */
/* bytes a streaming reader's stagings of other members' chunks take at
 * once (step_bytes): half a chunk */
#define AHEAD_STEP (LARDER__OWNER_CHUNK / 2)

/* Bytes of a piece; 0: whole chunks. */
static uint64_t piece_bytes(void)
{
    static uint64_t piece = UINT64_MAX;
    uint64_t p = __atomic_load_n(&piece, __ATOMIC_RELAXED);
    if (p != UINT64_MAX) return p;
    const char *text = getenv("LARDERD_BORROW_PIECE");
    char *end;
    unsigned long long v = text && *text ? strtoull(text, &end, 10) : BORROW_PIECE;
    /* a power of two from the smallest checksum block to half a chunk (so
     * pieces divide chunks); anything else: whole chunks */
    if (text && *text && (*end || v < (64u << 10) || v > LARDER__OWNER_CHUNK / 2 || (v & (v - 1))))
        v = 0;
    __atomic_store_n(&piece, (uint64_t)v, __ATOMIC_RELAXED);
    return (uint64_t)v;
}

/* The piece size for a shard: piece_bytes(), but never smaller than the
 * shard's checksum block (a fill takes whole blocks: smaller pieces would
 * each bring the same block again); 0, whole chunks, when that reaches
 * more than half a chunk. */
static uint64_t shard_piece(const struct dataset_entry *e, uint32_t shard)
{
    uint64_t piece = piece_bytes();
    struct larder__shard s;
    if (piece && larder__index_shard(larder__dataset_index(e->dataset), shard, &s) == 0 &&
        s.sum_shift > 0 && s.sum_shift < 40 && (UINT64_C(1) << s.sum_shift) > piece)
        piece = UINT64_C(1) << s.sum_shift;
    return piece > LARDER__OWNER_CHUNK / 2 ? 0 : piece;
}

/* Stage the pieces of chunk [start, end) that hold bytes of [want_lo,
 * want_hi) the cache lacks, waiting for those another READ stages; true
 * when it staged or waited for some. */
static bool stage_pieces(struct dataset_entry *e, uint32_t shard, uint64_t start, uint64_t end,
                         uint64_t want_lo, uint64_t want_hi, int priority,
                         const struct timespec *deadline)
{
    struct larder__fill *fill = larder__dataset_fill(e->dataset);
    uint64_t piece = shard_piece(e, shard), x, y;
    bool staged = false;
    for (uint64_t p = start + (want_lo - start) / piece * piece; p < want_hi; p += piece) {
        uint64_t p_hi = p + piece < end ? p + piece : end;
        uint64_t a = p > want_lo ? p : want_lo, b = p_hi < want_hi ? p_hi : want_hi;
        if (larder__fill_range_scope(fill, shard, a, b - a, &x, &y) != 0) continue;
        struct chunk_slot *slot = claim(e, shard, p, p_hi, priority, deadline, false);
        staged = true;
        if (!slot) continue; /* staged by another READ meanwhile, or its own bytes */
        if (larder__fill_range_scope(fill, shard, a, b - a, &x, &y) == 0)
            stage_chunk(e, shard, p, p_hi, priority);
        release(slot);
    }
    return staged;
}

/* Whether that chunk was asked for twice lately (read in turn). */
static bool read_in_turn(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    pthread_mutex_lock(&slots_lock);
    struct chunk_slot *a = asked_entry(e, shard, chunk);
    bool in_turn = a && a->asks >= 2;
    pthread_mutex_unlock(&slots_lock);
    return in_turn;
}

/* Bytes a streaming reader's stagings take at once in a chunk: this
 * node's own (read from the origin under their fill locks, which a
 * peer's piece for its jumping reader waits on) a piece, other members'
 * AHEAD_STEP, so that a jumping DEMAND READ of another reader there waits
 * for one step at most, not the whole chunk (claim). */
static uint64_t step_bytes(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    uint64_t piece = shard_piece(e, shard);
    if (!piece) return LARDER__OWNER_CHUNK;
    if (owns_chunk(e, shard, chunk)) return piece;
    /* LARDERD_BORROW_STEP: a power of two up to a chunk, for an A/B */
    static uint64_t step = UINT64_MAX;
    uint64_t v = __atomic_load_n(&step, __ATOMIC_RELAXED);
    if (v == UINT64_MAX) {
        const char *text = getenv("LARDERD_BORROW_STEP");
        char *end;
        v = text && *text ? strtoull(text, &end, 10) : AHEAD_STEP;
        if (text && *text && (*end || v > LARDER__OWNER_CHUNK || !v || (v & (v - 1))))
            v = AHEAD_STEP;
        __atomic_store_n(&step, v, __ATOMIC_RELAXED);
    }
    return piece > v ? piece : v;
}

/*
 * Stage what the cache lacks of [lo, hi) of chunk `chunk` of shard, step
 * by step (step_bytes, aligned in the chunk), in order; this node's steps
 * from the origin, other members' borrowed in place.  With a deadline (a
 * READ that needs those bytes), a step another READ stages is waited for,
 * and claimed once more if it is still lacking then (that staging failed);
 * without one (a read ahead), it is passed.
 */
static void stage_steps(struct dataset_entry *e, uint32_t shard, uint64_t chunk, uint64_t lo,
                        uint64_t hi, int priority, const struct timespec *deadline)
{
    struct larder__fill *fill = larder__dataset_fill(e->dataset);
    uint64_t size = larder__dataset_shard_size(e->dataset, shard), x, y;
    uint64_t start = chunk * LARDER__OWNER_CHUNK, end = start + LARDER__OWNER_CHUNK;
    uint64_t step = step_bytes(e, shard, chunk), piece = shard_piece(e, shard);
    if (!piece) piece = step;
    if (end > size) end = size;
    if (hi > end) hi = end;
    for (uint64_t p = start + (lo - start) / step * step; p < hi; p += step) {
        uint64_t p_hi = p + step < end ? p + step : end;
        uint64_t a = p > lo ? p : lo, b = p_hi < hi ? p_hi : hi;
        for (int tries = 0; tries < 2; tries++) {
            /* resident (checked again once the step is claimed: staged by
             * a READ that ended as this one claimed it) */
            if (larder__fill_range_scope(fill, shard, a, b - a, &x, &y) != 0) break;
            struct chunk_slot *slot = claim(e, shard, p, p_hi, priority, deadline, !deadline);
            if (!slot) {
                if (deadline) continue;
                /* a read ahead: in flight, its stager has it; no slot free: it
                 * ends here (passed over, the step was a hole no one staged) */
                if (!staging(e, shard, p, p_hi)) return;
                break;
            }
            /* from its first piece the cache lacks: a piece staged before
             * (a reader's own, or a failed staging's) is not asked for again */
            uint64_t q = p + (a - p) / piece * piece; /* the piece holding a */
            while (q < b && larder__fill_range_scope(
                                fill, shard, q > a ? q : a,
                                (q + piece < b ? q + piece : b) - (q > a ? q : a), &x, &y) != 0)
                q += piece;
            int fd;
            if (q >= b)
                ; /* resident by now */
            else if (owns_chunk(e, shard, chunk))
                larder__fill_stage_range_at(fill, shard, q, p_hi - q, priority, &fd);
            else
                stage_chunk(e, shard, q, p_hi, priority);
            release(slot);
            break;
        }
    }
}

/*
 * A streaming reader's read ahead, from byte `from` of shard on: the rest
 * of its chunk, then the next chunk (into the next shard at a shard's
 * end), one, past this node's own resident ones, fewer than STREAM_BEHIND,
 * so that the reader entering the staged one still streams (borrow_stream_note).
 * Steps in flight are left to their stagers.
 */
static void read_ahead_streaming(struct dataset_entry *e, struct connection *c, uint32_t shard,
                                 uint64_t from, int priority)
{
    struct larder__fill *fill = larder__dataset_fill(e->dataset);
    uint32_t shards = larder__dataset_num_shards(e->dataset);
    uint64_t size = larder__dataset_shard_size(e->dataset, shard), x, y;
    uint64_t p = from;
    bool beyond = false; /* past the reader's own chunk */
    for (int passed = 0;;) {
        if (p >= size) { /* the shard read to its end: the next one's first chunk */
            if (++shard >= shards || !shard_piece(e, shard)) return;
            size = larder__dataset_shard_size(e->dataset, shard);
            p = from = 0;
            if (size == 0) return;
        }
        uint64_t chunk = p / LARDER__OWNER_CHUNK, end = (chunk + 1) * LARDER__OWNER_CHUNK;
        if (end > size) end = size;
        if (from < p) from = p;
        if (beyond) /* the reader's READs there stream: its own read ahead's mark */
            borrow_stream_mark(c, e, shard, chunk);
        bool resident =
            from >= end || larder__fill_range_scope(fill, shard, from, end - from, &x, &y) != 0;
        if (!resident) stage_steps(e, shard, chunk, from, end, priority, NULL);
        p = end;
        /* past the reader's chunk, one: this node's own chunks resident
         * (warmed) are passed, fewer than STREAM_BEHIND; another member's
         * resident counts (staged by this read ahead lately: the reader
         * has not reached it yet) */
        if (beyond && (!resident || !owns_chunk(e, shard, chunk) || ++passed >= STREAM_BEHIND))
            return;
        beyond = true;
    }
}

void borrow_next_piece(struct dataset_entry *e, struct connection *c, uint32_t shard,
                       uint64_t offset, uint64_t length, int priority)
{
    uint32_t shards = larder__dataset_num_shards(e->dataset);
    uint64_t piece = shard < shards ? shard_piece(e, shard) : 0, x, y;
    if (!piece || priority > LARDER__NEAR || length == 0 || !e->members ||
        e->daemon->members.count <= 1 || shard >= shards)
        return;
    struct larder__cache *cache = larder__dataset_cache(e->dataset);
    if (!cache || larder__cache_evicts(cache)) return;
    struct larder__fill *fill = larder__dataset_fill(e->dataset);
    uint64_t size = larder__dataset_shard_size(e->dataset, shard), next = offset + length;
    if (next < offset || next > size) return;
    /* read in turn: a chunk of the READ's asked for twice lately (a lone
     * sample's READ has nothing more come over).  borrow_whole_chunks
     * counts the READs of other members' chunks; this node's are counted
     * here */
    uint64_t first = offset / LARDER__OWNER_CHUNK, last = (next - 1) / LARDER__OWNER_CHUNK;
    pthread_mutex_lock(&slots_lock);
    if (owns_chunk(e, shard, last)) asked_before(e, shard, last);
    uint64_t last_start = last * LARDER__OWNER_CHUNK;
    bool streaming = borrow_stream_note(
        c, e, shard, last, ((offset > last_start ? offset : last_start) - last_start) / piece,
        (next - 1 - last_start) / piece);
    pthread_mutex_unlock(&slots_lock);
    if (streaming) { /* this reader's own READs moved on in order */
        read_ahead_streaming(e, c, shard, next, priority);
        return;
    }
    if (!read_in_turn(e, shard, last) && (first == last || !read_in_turn(e, shard, first))) return;
    /* from the piece holding the next byte, AHEAD pieces past it, in
     * order, each that is neither resident nor in flight (into the next
     * chunk at a chunk's end: pieces divide chunks; into the next shard at
     * a shard's end); at a piece in flight, its stager goes on after it.
     * This node's pieces are read from the origin, other members' borrowed */
    uint32_t reader_shard = shard;
    uint64_t p = next / piece * piece, from = next;
    for (int i = 0; i <= AHEAD; i++) {
        if (p >= size) { /* the shard read to its end: the next one's first pieces */
            if (++shard >= shards || !(piece = shard_piece(e, shard))) return;
            size = larder__dataset_shard_size(e->dataset, shard);
            p = from = 0;
            if (size == 0) return;
        }
        uint64_t chunk = p / LARDER__OWNER_CHUNK, p_hi = p + piece < size ? p + piece : size;
        if (from < p) from = p;
        if (from < p_hi && larder__fill_range_scope(fill, shard, from, p_hi - from, &x, &y) == 0) {
            struct chunk_slot *slot = claim(e, shard, p, p_hi, priority, NULL, true);
            if (!slot) return;                            /* in flight already */
            if (shard != reader_shard || chunk != last) { /* the reader goes on into it */
                pthread_mutex_lock(&slots_lock);
                note_asked(e, shard, chunk, 2);
                pthread_mutex_unlock(&slots_lock);
            }
            int fd;
            if (larder__fill_range_scope(fill, shard, from, p_hi - from, &x, &y) != 0)
                ; /* resident by now */
            else if (owns_chunk(e, shard, chunk))
                larder__fill_stage_range_at(fill, shard, p, p_hi - p, priority, &fd);
            else
                stage_chunk(e, shard, p, p_hi, priority);
            release(slot);
        }
        p = p_hi;
    }
}

/* The chunk [start, end) staged whole under its slot (claim) for a READ
 * of [want_lo, want_hi) in it: true when claimed, false when staged by
 * another READ meanwhile (waited for) or left to the READ's own borrow (no
 * slot free). */
static bool stage_claimed(struct dataset_entry *e, uint32_t shard, uint64_t start, uint64_t end,
                          uint64_t want_lo, uint64_t want_hi, int priority,
                          const struct timespec *deadline)
{
    struct chunk_slot *slot = claim(e, shard, start, end, priority, deadline, false);
    if (!slot) return false;
    /* resident by now (staged by a READ that ended as this one claimed it)? */
    uint64_t lo, hi;
    if (larder__fill_range_scope(larder__dataset_fill(e->dataset), shard, want_lo,
                                 want_hi - want_lo, &lo, &hi) == 0)
        stage_chunk(e, shard, start, end, priority);
    release(slot);
    return true;
}

bool borrow_whole_chunks(struct dataset_entry *e, struct connection *c, uint32_t shard,
                         uint64_t offset, uint64_t length, int priority)
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
        if (owns_chunk(e, shard, chunk)) continue; /* from the origin, under the fill's locks */
        uint64_t a, b; /* what the READ needs of this chunk: resident yet? */
        if (larder__fill_range_scope(fill, shard, want_lo, want_hi - want_lo, &a, &b) != 0)
            continue;
        /* a READ of this whole chunk and nothing else: staged in one
         * transfer under the chunk's slot, so that the other READs of it
         * wait for this one (claim) instead of each borrowing the chunk
         * itself, and received in place at DEMAND.  Left to the READ's own
         * borrow (borrow_ahead, not single-flighted), 16 readers of a
         * checkpoint on a node asking for its chunks at once had the owner
         * send each chunk 11-16 times (bench/restart.sh's storm: 24 GB sent
         * to each daemon for 1.5 GB borrowed).  With no slot free, the READ
         * borrows its own bytes as before.  A READ over several chunks
         * still borrows its other owners' whole chunks itself, at once
         * (one transfer per owner, the owners side by side). */
        if (want_lo == start && want_hi == end) {
            if (offset == start && offset + length == end)
                staged |=
                    stage_claimed(e, shard, start, end, want_lo, want_hi, priority, &deadline);
            continue;
        }
        uint64_t piece = shard_piece(e, shard);
        pthread_mutex_lock(&slots_lock);
        bool busy = find_slot(e, shard, start, end) != NULL, again = asked_before(e, shard, chunk);
        /* this READ's reader streaming through it, or entering it at its
         * start from one it streamed through (borrow_stream_note) */
        bool streaming = piece && priority <= LARDER__NEAR &&
                         borrow_stream_note(c, e, shard, chunk, (want_lo - start) / piece,
                                            (want_hi - 1 - start) / piece);
        pthread_mutex_unlock(&slots_lock);
        if (streaming) { /* the steps holding its bytes; the rest is its read ahead's */
            stage_steps(e, shard, chunk, want_lo, want_hi, priority, &deadline);
            staged = true;
            continue;
        }
        /* the first READ of a chunk lately borrows its own bytes: a lone
         * reader's sample costs no more than it did; the next one, or one
         * arriving while the chunk is staged, has all of it come over */
        if (!busy && !again) continue;
        if (piece && priority <= LARDER__NEAR) { /* a reader waits: in pieces */
            staged |= stage_pieces(e, shard, start, end, want_lo, want_hi, priority, &deadline);
            continue;
        }
        staged |= stage_claimed(e, shard, start, end, want_lo, want_hi, priority, &deadline);
    }
    /* all of it in the cache now: nothing left for the READ to borrow */
    return staged && larder__fill_range_scope(fill, shard, offset, length, &lo, &hi) == 1;
}
