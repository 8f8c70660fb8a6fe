/*
 * source_stripe_loan.c - bytes a daemon borrows from the other owners of a
 * shard's chunks ahead of a fill (larder__source_stripe_borrow), with no
 * fill lock held, and reads of a borrow_ahead stripe that take them from
 * there (the rest from the origin) instead of asking a peer under the
 * fill's locks.  source_stripe.c says why.
 */
#include "bigbuf.h"
#include "source_hedge.h"
#include "source_stripe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int compare_extents(const void *a, const void *b)
{
    const struct larder__extent *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/*
 * The extents from the loans where they cover them (the parts found noted
 * in g->lent), the rest in one read of the origin: LARDER__FROM_PEER when
 * any byte was lent, else what the origin says.  Call with no fill lock
 * concern: nothing here waits on a peer.
 */
int larder__stripe_read_from_loans(struct larder__stripe *s, struct larder__stripe_group *g,
                                   unsigned flags)
{
    size_t found = 0, capacity = 0, gaps = 0;
    struct larder__extent *lent = NULL, *rest = NULL;
    int rc = 0;
    pthread_mutex_lock(&s->loans_lock);
    for (size_t i = 0; rc == 0 && i < g->count; i++) {
        const struct larder__extent *e = &g->extents[i];
        for (struct larder__stripe_loan *l = s->loans; rc == 0 && l; l = l->next)
            for (size_t k = 0; k < l->count; k++) {
                uint64_t lo = l->kept[k].offset, hi = lo + l->kept[k].length;
                if (lo < e->offset) lo = e->offset;
                if (hi > e->offset + e->length) hi = e->offset + e->length;
                if (hi <= lo) continue;
                if (found == capacity) {
                    capacity = capacity ? 2 * capacity : 8;
                    struct larder__extent *more = realloc(lent, capacity * sizeof *lent);
                    if (!more) {
                        rc = -ENOMEM;
                        break;
                    }
                    lent = more;
                }
                uint8_t *to = (uint8_t *)e->buf + (lo - e->offset);
                const uint8_t *from = (uint8_t *)l->kept[k].buf + (lo - l->kept[k].offset);
                /* a loan received into the fill's own span (borrow.c) is
                 * where it belongs already */
                if (to != from) memcpy(to, from, (size_t)(hi - lo));
                lent[found++] = (struct larder__extent){(uint8_t *)e->buf + (lo - e->offset), lo,
                                                        (size_t)(hi - lo)};
            }
    }
    pthread_mutex_unlock(&s->loans_lock);
    if (rc == 0 && found) { /* in order, and loans that overlap counted once */
        qsort(lent, found, sizeof *lent, compare_extents);
        size_t merged = 0;
        for (size_t k = 0; k < found; k++) {
            struct larder__extent *last = merged ? &lent[merged - 1] : NULL;
            if (last && lent[k].offset < last->offset + last->length) { /* one extent's */
                uint64_t end = lent[k].offset + lent[k].length;
                if (end > last->offset + last->length) last->length = (size_t)(end - last->offset);
            } else {
                lent[merged++] = lent[k];
            }
        }
        found = merged;
    }
    /* what no loan covered: the gaps between the lent parts, extent by extent */
    if (rc == 0 && !(rest = malloc((g->count + found) * sizeof *rest))) rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < g->count; i++) {
        const struct larder__extent *e = &g->extents[i];
        uint64_t at = e->offset, end = e->offset + e->length;
        for (size_t k = 0; k < found && at < end; k++) {
            uint64_t lo = lent[k].offset, hi = lo + lent[k].length;
            if (hi <= at || lo >= end) continue;
            if (lo > at)
                rest[gaps++] = (struct larder__extent){(uint8_t *)e->buf + (at - e->offset), at,
                                                       (size_t)(lo - at)};
            if (hi > at) at = hi;
        }
        if (at < end)
            rest[gaps++] = (struct larder__extent){(uint8_t *)e->buf + (at - e->offset), at,
                                                   (size_t)(end - at)};
    }
    if (rc == 0 && gaps) rc = larder__source_readv(s->origin, rest, gaps, flags);
    free(rest);
    if (rc < 0) {
        free(lent);
        return rc;
    }
    g->lent = lent;
    g->lent_count = found;
    return found ? LARDER__FROM_PEER : rc;
}

/*
 * The other owners' pieces of [offset, offset + length): into one buffer
 * of just their bytes (base NULL: the loan's own, from bigbuf.h), or each
 * at its place in the caller's `base` (base[0] is the byte at offset; the
 * loan then owns no bytes, and base must outlive it).
 */
static int borrow(struct larder__source *source, uint64_t offset, uint64_t length, unsigned flags,
                  uint8_t *base, struct larder__stripe_loan **out)
{
    *out = NULL;
    if (strcmp(source->ops->kind, "stripe") != 0 || length == 0 || offset + length < offset)
        return 0;
    struct larder__stripe *s = (struct larder__stripe *)source;
    /* the other owners' pieces, into one buffer of just their bytes */
    uint64_t end = offset + length, peer_bytes = 0;
    size_t n = 0;
    for (uint64_t at = offset; at < end; at = (at / s->chunk_size + 1) * s->chunk_size) {
        uint64_t stop = (at / s->chunk_size + 1) * s->chunk_size;
        if (larder__stripe_owner_peer(s,
                                      s->owner(s->owner_context, s->shard, at / s->chunk_size))) {
            peer_bytes += (stop < end ? stop : end) - at;
            n++;
        }
        if (stop >= end) break;
    }
    if (n == 0) return 0;
    if (peer_bytes > SIZE_MAX || length > SIZE_MAX) return -ENOMEM;
    uint8_t *bytes = base ? NULL : larder__bigbuf_get((size_t)peer_bytes);
    struct larder__extent *pieces = malloc(n * sizeof *pieces);
    if ((!base && !bytes) || !pieces) {
        larder__bigbuf_put(bytes);
        free(pieces);
        return -ENOMEM;
    }
    size_t k = 0, used = 0;
    for (uint64_t at = offset; at < end && k < n;) {
        uint64_t stop = (at / s->chunk_size + 1) * s->chunk_size;
        size_t piece = (size_t)((stop < end ? stop : end) - at);
        /* the owners' peers are asked again: one that failed to open in the
         * first pass (out of memory) may be open now, but the buffer holds
         * what that pass counted and no more (found by review) */
        if ((base || used + piece <= peer_bytes) &&
            larder__stripe_owner_peer(s,
                                      s->owner(s->owner_context, s->shard, at / s->chunk_size))) {
            pieces[k++] =
                (struct larder__extent){base ? base + (at - offset) : bytes + used, at, piece};
            used += piece;
        }
        at += piece;
    }
    struct larder__extent *joined;
    int rc;
    struct larder__stripe_batch *b = larder__stripe_plan(
        s, pieces, k, flags & ~LARDER__READ_ORIGIN_ONLY, LARDER__STRIPE_BORROW_AHEAD, &joined, &rc);
    free(pieces);
    if (!b) {
        larder__bigbuf_put(bytes);
        return rc;
    }
    larder__stripe_run_batch(b);
    size_t kept = 0;
    for (size_t i = 0; i < b->count; i++)
        kept += b->groups[i].result >= 0 ? b->groups[i].count : 0;
    struct larder__stripe_loan *loan =
        kept ? malloc(sizeof *loan + kept * sizeof *loan->kept) : NULL;
    if (loan) {
        loan->bytes = bytes;
        loan->count = 0;
        for (size_t i = 0; i < b->count; i++)
            if (b->groups[i].result >= 0)
                for (size_t j = 0; j < b->groups[i].count; j++)
                    loan->kept[loan->count++] = b->groups[i].extents[j];
        pthread_mutex_lock(&s->loans_lock);
        loan->next = s->loans;
        __atomic_store_n(&s->loans, loan, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&s->loans_lock);
    } else {
        larder__bigbuf_put(bytes);
        rc = kept ? -ENOMEM : 0;
    }
    larder__stripe_batch_release(b);
    free(joined);
    *out = loan;
    return rc;
}

int larder__source_stripe_borrow(struct larder__source *source, uint64_t offset, uint64_t length,
                                 unsigned flags, struct larder__stripe_loan **out)
{
    return borrow(source, offset, length, flags, NULL, out);
}

int larder__source_stripe_borrow_into(struct larder__source *source, uint64_t offset,
                                      uint64_t length, unsigned flags, void *base,
                                      struct larder__stripe_loan **out)
{
    *out = NULL;
    return base ? borrow(source, offset, length, flags, base, out) : -EINVAL;
}

int larder__source_stripe_borrow_via(struct larder__source *source, uint64_t offset,
                                     uint64_t length, unsigned flags, size_t relay,
                                     struct larder__stripe_loan **out, bool *from_relay)
{
    *out = NULL;
    *from_relay = false;
    struct larder__stripe *s = (struct larder__stripe *)source;
    bool striped = strcmp(source->ops->kind, "stripe") == 0 && length > 0 &&
                   offset + length > offset && relay < s->members;
    uint64_t chunk = striped ? offset / s->chunk_size : 0;
    size_t owner = striped ? s->owner(s->owner_context, s->shard, chunk) : 0;
    struct larder__source *peer = NULL, *by_owner = NULL;
    if (striped && (offset + length - 1) / s->chunk_size == chunk && owner != relay &&
        (by_owner = larder__stripe_owner_peer(s, owner)) != NULL && /* not this node's */
        s->links[owner].down_until_ms <= (int64_t)larder__now_ms())
        peer = larder__stripe_owner_peer(s, relay);
    if (peer && s->links[relay].down_until_ms <= (int64_t)larder__now_ms() && length <= SIZE_MAX) {
        struct larder__stripe_loan *loan = malloc(sizeof *loan + sizeof *loan->kept);
        uint8_t *bytes = loan ? larder__bigbuf_get((size_t)length) : NULL;
        struct larder__extent piece = {bytes, offset, (size_t)length};
        /* declined (not there yet) or failed: the owner is asked below */
        if (bytes && larder__source_readv(peer, &piece, 1,
                                          (flags & ~LARDER__READ_ORIGIN_ONLY) |
                                              LARDER__READ_CACHED_ONLY) >= 0) {
            loan->bytes = bytes;
            loan->count = 1;
            loan->kept[0] = piece;
            pthread_mutex_lock(&s->loans_lock);
            loan->next = s->loans;
            __atomic_store_n(&s->loans, loan, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&s->loans_lock);
            *out = loan;
            *from_relay = true;
            return 0;
        }
        larder__bigbuf_put(bytes);
        free(loan);
    }
    return larder__source_stripe_borrow(source, offset, length, flags, out);
}

void larder__source_stripe_return(struct larder__source *source, struct larder__stripe_loan *loan)
{
    if (!loan) return;
    struct larder__stripe *s = (struct larder__stripe *)source;
    pthread_mutex_lock(&s->loans_lock);
    for (struct larder__stripe_loan **at = &s->loans; *at; at = &(*at)->next)
        if (*at == loan) {
            __atomic_store_n(at, loan->next, __ATOMIC_RELEASE); /* s->loans is read unlocked */
            break;
        }
    pthread_mutex_unlock(&s->loans_lock);
    larder__bigbuf_put(loan->bytes);
    free(loan);
}
