/*
 * cache_pin.c - pins: blocks a hint asked the node to keep (larder hint
 * hot/replicate, docs/cache.md "Pins").  A fifth bitmap in the shared
 * `blocks` file marks pinned blocks, and the header holds one time, the
 * end of the latest pin (CLOCK_REALTIME milliseconds, so that every
 * process of the node and a restarted daemon read it alike): while it is
 * in the future the eviction sweep passes pinned blocks by; once it is
 * past, the bits mean nothing and the next pin clears them.  The daemon
 * that set the pins keeps each hint's own time and unpins a hint's blocks
 * when that time is up (src/larderd/hints.c); the header's time is what
 * bounds them when no daemon is left to do it.
 *
 * Pinned blocks count against the capacity, and pins take at most 7/8 of
 * it, so that reads of anything else still find room in the cache.
 */
#include "cache_internal.h"

#include <time.h>

int64_t larder__cache_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t larder__cache_pin_limit(const struct larder__cache *c)
{
    uint64_t capacity = __atomic_load_n(&c->header->capacity, __ATOMIC_ACQUIRE);
    if (!capacity) return UINT64_MAX;
    uint64_t blocks = capacity >> c->block_shift;
    return blocks - blocks / 8;
}

/* The pins' time is up: clear every pinned bit (they protect nothing now). */
static void clear_stale_pins(struct larder__cache *c, int64_t now)
{
    if (pins_hold(c, now) || !atomic_load64(&c->header->pinned_blocks)) return;
    pthread_mutex_lock(&c->evict_lock);
    if (!pins_hold(c, now)) {
        uint64_t words = (c->shard_base[c->num_shards] + 63) / 64, cleared = 0;
        for (uint64_t w = 0; w < words; w++)
            cleared += (uint64_t)__builtin_popcountll(
                __atomic_exchange_n(&c->pinned[w], 0, __ATOMIC_ACQ_REL));
        __atomic_fetch_sub(&c->header->pinned_blocks, cleared, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&c->evict_lock);
}

uint64_t larder__cache_pin(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last,
                           int64_t expiry_ms)
{
    if (shard >= c->num_shards) return 0;
    uint64_t base = c->shard_base[shard], blocks = c->shard_base[shard + 1] - base;
    if (first >= blocks) return 0;
    if (last >= blocks) last = blocks - 1;
    int64_t now = larder__cache_clock_ms();
    clear_stale_pins(c, now);
    /* the time first, then the bits: a bit is never set under a time that is up */
    int64_t old = __atomic_load_n(&c->header->pin_expiry_ms, __ATOMIC_ACQUIRE);
    while (old < expiry_ms &&
           !__atomic_compare_exchange_n(&c->header->pin_expiry_ms, &old, expiry_ms, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
    uint64_t limit = larder__cache_pin_limit(c), pinned = 0;
    for (uint64_t b = base + first; b <= base + last; b++, pinned++) {
        if (bit_get(c->pinned, b)) continue;
        /* count first, so that racing pinners never pass the limit together */
        if (__atomic_add_fetch(&c->header->pinned_blocks, 1, __ATOMIC_ACQ_REL) > limit) {
            __atomic_fetch_sub(&c->header->pinned_blocks, 1, __ATOMIC_ACQ_REL);
            break;
        }
        uint64_t mask = UINT64_C(1) << (b % 64);
        if (__atomic_fetch_or(&c->pinned[b / 64], mask, __ATOMIC_ACQ_REL) & mask)
            __atomic_fetch_sub(&c->header->pinned_blocks, 1, __ATOMIC_ACQ_REL); /* a racer's */
    }
    return pinned;
}

void larder__cache_unpin(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    if (shard >= c->num_shards) return;
    uint64_t base = c->shard_base[shard], blocks = c->shard_base[shard + 1] - base;
    if (first >= blocks) return;
    if (last >= blocks) last = blocks - 1;
    uint64_t cleared = clear_bits(c->pinned, base + first, base + last);
    __atomic_fetch_sub(&c->header->pinned_blocks, cleared, __ATOMIC_RELAXED);
}

bool larder__cache_pinned(const struct larder__cache *c, uint32_t shard, uint64_t block)
{
    if (shard >= c->num_shards || block >= c->shard_base[shard + 1] - c->shard_base[shard])
        return false;
    return pins_hold(c, larder__cache_clock_ms()) &&
           bit_get(c->pinned, c->shard_base[shard] + block);
}

void larder__cache_set_pin_expiry(struct larder__cache *c, int64_t expiry_ms)
{
    __atomic_store_n(&c->header->pin_expiry_ms, expiry_ms, __ATOMIC_RELEASE);
}

uint64_t larder__cache_pinned_bytes(const struct larder__cache *c)
{
    if (!pins_hold(c, larder__cache_clock_ms())) return 0;
    return atomic_load64(&c->header->pinned_blocks) << c->block_shift;
}
