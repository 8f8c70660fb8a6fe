/*
 * cache_share_slots.c - the node share's slots (cache_share.c): who holds
 * one, a dataset's count read from its own bitmap, and slots given back by
 * datasets that hold nothing.
 */
#include "cache_share_internal.h"
#include "sys.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void larder__share_peer_drop(struct peer *p)
{
    if (p->header) munmap(p->header, p->size);
    free(p->shard_base);
    free(p->shard_size);
    memset(p, 0, sizeof *p);
}

/* Whether slot i is the first live slot naming its dataset: only that one
 * is its dataset's (a later one claiming the same id is ignored, so no
 * dataset is counted twice nor published for by two slots). */
bool larder__share_first_of_its_id(const struct share_file *f, int i)
{
    if (__atomic_load_n(&f->slot[i].state, __ATOMIC_ACQUIRE) != 2) return false;
    for (int j = 0; j < i; j++)
        if (__atomic_load_n(&f->slot[j].state, __ATOMIC_ACQUIRE) == 2 &&
            f->slot[j].id_low == f->slot[i].id_low && f->slot[j].id_high == f->slot[i].id_high)
            return false;
    return true;
}

/* Map the `blocks` of the dataset in slot i (checked against its own header). */
struct peer *larder__share_peer_of(struct larder__share *s, int i)
{
    struct share_slot *x = &s->file->slot[i];
    struct peer *p = &s->peers[i];
    int64_t now = larder__cache_clock_ms();
    if (p->header && p->id_low == x->id_low && p->id_high == x->id_high) {
        /* still the file at the path?  Asked once per COUNT_FOR_MS: a cache
         * removed under a kept mapping is counted no longer than that
         * (evictions check it every time, evict_other) */
        if (now >= p->checked_ms && now - p->checked_ms < COUNT_FOR_MS) return p;
        if (larder__share_peer_current(p)) {
            p->checked_ms = now;
            return p;
        }
    }
    larder__share_peer_drop(p);
    char id[33], path[PATH_MAX];
    larder__hex128(x->id_high, x->id_low, id);
    snprintf(p->dir, sizeof p->dir, "%s/%s", s->root, id);
    snprintf(path, sizeof path, "%s/blocks", p->dir);
    int fd = larder__sys.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    struct stat st;
    if (fd < 0) return NULL;
    if (larder__sys.fstat(fd, &st) < 0 || (uint64_t)st.st_size < LARDER__CACHE_HEADER_SIZE) {
        larder__sys.close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    larder__sys.close(fd);
    if (map == MAP_FAILED) return NULL;
    struct shared_header *h = map;
    /* read once: the mapping is shared and writable, so every later use
     * goes by this value, checked here against the file's size */
    uint64_t total = __atomic_load_n(&h->total_blocks, __ATOMIC_RELAXED);
    uint32_t block_size = __atomic_load_n(&h->block_size, __ATOMIC_RELAXED);
    uint64_t words = (total + 63) / 64;
    if (memcmp(h->magic, LARDER__CACHE_MAGIC, 8) != 0 || h->version != LARDER__CACHE_VERSION ||
        h->id_low != x->id_low || h->id_high != x->id_high || total > (UINT64_C(1) << 36) ||
        block_size < 512 || block_size > (UINT32_C(1) << 30) ||
        (block_size & (block_size - 1)) != 0 ||
        (uint64_t)st.st_size != LARDER__CACHE_HEADER_SIZE + 5 * words * 8) {
        munmap(map, (size_t)st.st_size);
        return NULL;
    }
    p->id_low = x->id_low, p->id_high = x->id_high;
    p->dev = st.st_dev, p->ino = st.st_ino;
    p->checked_ms = now;
    p->header = h;
    p->total_blocks = total;
    p->block_size = block_size;
    while ((UINT32_C(1) << p->block_shift) < block_size)
        p->block_shift++;
    p->size = (size_t)st.st_size;
    p->resident = (uint64_t *)((uint8_t *)map + LARDER__CACHE_HEADER_SIZE);
    p->borrowed = p->resident + 2 * words;
    p->suspect = p->resident + 3 * words;
    return p;
}

bool larder__share_peer_current(const struct peer *p)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/blocks", p->dir);
    return p->header && stat(path, &st) == 0 && st.st_dev == p->dev && st.st_ino == p->ino;
}

/* A dataset's resident blocks, from its bitmap: its published counter
 * moves this count only within its slack of the last popcount (a
 * counter written by anyone else can shift the node's total by no more). */
uint64_t larder__share_peer_count(struct peer *p, int64_t now)
{
    uint64_t published = atomic_load64(&p->header->resident_blocks);
    int64_t moved = (int64_t)(published - p->published_at_count);
    int64_t slack = (int64_t)(p->total_blocks >> COUNT_SLACK_SHIFT);
    if (slack < COUNT_SLACK) slack = COUNT_SLACK;
    if (!p->ever_counted || moved > slack || moved < -slack ||
        now - p->counted_ms >= COUNT_FOR_MS || now < p->counted_ms) {
        uint64_t words = p->total_blocks / 64, count = 0;
        for (uint64_t w = 0; w < words; w++)
            count += (uint64_t)__builtin_popcountll(atomic_load64(&p->resident[w]));
        if (p->total_blocks % 64) /* bits past the last block are no block's */
            count += (uint64_t)__builtin_popcountll(atomic_load64(&p->resident[words]) &
                                                    ((UINT64_C(1) << (p->total_blocks % 64)) - 1));
        p->counted = count;
        p->published_at_count = published;
        p->counted_ms = now;
        p->ever_counted = true;
        moved = 0;
    }
    if (moved < 0 && (uint64_t)-moved > p->counted) return 0;
    uint64_t count = p->counted + (uint64_t)moved;
    return count < p->total_blocks ? count : p->total_blocks;
}

/* Whether a slot's publication time is within PUBLISHED_FOR_MS of now (a
 * time from the shared file: one in the future, or forged, is not). */
bool larder__share_published_lately(int64_t published, int64_t now)
{
    return published > 0 && published <= now && now - published <= PUBLISHED_FOR_MS;
}

/* Whether the dataset slot i names holds nothing (no resident block, or
 * no cache files any more) and published nothing for PUBLISHED_FOR_MS,
 * whatever the slot's state (live, or claimed by this process to take it
 * back).  Call with s->lock held. */
static bool holds_nothing(struct larder__share *s, int i, int64_t now)
{
    const struct share_slot *x = &s->file->slot[i];
    if (larder__share_published_lately(x->published_ms, now)) return false;
    struct peer *p = larder__share_peer_of(s, i);
    if (p && !larder__share_peer_current(p)) { /* its cache removed since it was mapped */
        larder__share_peer_drop(p);
        p = larder__share_peer_of(s, i);
    }
    if (!p) return true;
    p->ever_counted = false; /* a popcount now, not the published counter */
    return larder__share_peer_count(p, now) == 0;
}

/* Whether live slot i may go to another dataset: a second slot of an id
 * (counted for nothing), or one whose dataset holds nothing.  Call with
 * s->lock held. */
static bool slot_reclaimable(struct larder__share *s, int i, int64_t now)
{
    if (__atomic_load_n(&s->file->slot[i].state, __ATOMIC_ACQUIRE) != 2) return false;
    return !larder__share_first_of_its_id(s->file, i) || holds_nothing(s, i, now);
}

/*
 * A slot for s's dataset: a free one, one whose claimer died before it
 * published, else one slot_reclaimable gives back; its index, or -1.  A
 * slot is taken by compare-and-swap to a claim word, named, then made
 * live, so two openers never take the same one.  A live slot taken back
 * is checked again once claimed (another may have claimed and named it
 * between the check and the swap: it is handed back as it was).  A new
 * slot counts as published now, so that a dataset just opened, not yet
 * caching, is not taken back at once.  Call with s->lock held.
 */
int larder__share_claim_slot(struct larder__share *s)
{
    struct share_file *f = s->file;
    int64_t now = larder__cache_clock_ms();
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < SHARE_SLOTS; i++) {
            struct share_slot *x = &f->slot[i];
            uint64_t expected = __atomic_load_n(&x->state, __ATOMIC_ACQUIRE);
            uint64_t low = x->id_low, high = x->id_high;
            bool dup = pass == 1 && !larder__share_first_of_its_id(f, i);
            /* free, abandoned, or no state at all (neither live nor a
             * claim: a damaged file's word, which else would hold the slot
             * for good) */
            bool takable = pass == 0 ? expected == 0 || larder__claim_abandoned(expected) ||
                                           (expected != 2 && (expected & 3) != 1)
                                     : slot_reclaimable(s, i, now);
            if (!takable) continue;
            uint64_t claim = larder__claim_word();
            if (!__atomic_compare_exchange_n(&x->state, &expected, claim, false, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE))
                continue;
            if (pass == 1 &&
                (x->id_low != low || x->id_high != high || (!dup && !holds_nothing(s, i, now)))) {
                uint64_t mine = claim; /* not the slot judged: hand it back, live */
                __atomic_compare_exchange_n(&x->state, &mine, 2, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE);
                continue;
            }
            x->id_low = s->id_low;
            x->id_high = s->id_high;
            x->count = 0;
            x->published_ms = now;
            if (__atomic_compare_exchange_n(&x->state, &claim, 2, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE))
                return i;
        }
    return -1;
}

/* s's dataset has a live slot, claimed anew when another took its slot
 * back while it held nothing; a failed claim is tried again at most every
 * COUNT_FOR_MS (each looks at every other dataset's bitmap).  Call with
 * s->lock held. */
void larder__share_keep_slot(struct larder__share *s)
{
    const struct share_slot *x = s->slot >= 0 ? &s->file->slot[s->slot] : NULL;
    if (x && x->id_low == s->id_low && x->id_high == s->id_high &&
        larder__share_first_of_its_id(s->file, s->slot))
        return; /* the usual case: where it was */
    for (int i = 0; i < SHARE_SLOTS; i++)
        if (larder__share_first_of_its_id(s->file, i) && s->file->slot[i].id_low == s->id_low &&
            s->file->slot[i].id_high == s->id_high) {
            s->slot = i;
            return;
        }
    int64_t now = larder__cache_clock_ms();
    if (s->claim_tried_ms && now >= s->claim_tried_ms && now - s->claim_tried_ms < COUNT_FOR_MS)
        return;
    s->claim_tried_ms = now;
    int slot = larder__share_claim_slot(s);
    if (slot >= 0) s->slot = slot;
}
