/*
 * cache_evict.c - keeping the node cache within its capacity: the
 * referenced bits readers set for the clock, and the clock sweep that
 * evicts borrowed blocks first, then blocks not read since its last pass
 * (design in cache.h).  With readers' plans registered, next use
 * (cache_nextuse.c) chooses instead of the clock.  Stores call
 * larder__cache_trim as they go.
 */
#include "cache_internal.h"
#include "sys.h"

#include <fcntl.h>

static uint64_t capacity_of(const struct larder__cache *c)
{
    return __atomic_load_n(&c->header->capacity, __ATOMIC_ACQUIRE);
}

void larder__cache_touch(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    if (!capacity_of(c)) return; /* nothing is evicted: no use for the clock's marks */
    uint64_t base = c->shard_base[shard];
    for (uint64_t b = base + first; b <= base + last; b++)
        if (!bit_get(c->referenced, b)) /* no cache-line write when already set */
            __atomic_fetch_or(&c->referenced[b / 64], UINT64_C(1) << (b % 64), __ATOMIC_RELAXED);
}

bool larder__cache_evicts(const struct larder__cache *c)
{
    return capacity_of(c) || c->borrow_capacity;
}

/* Shard of a global block number. */
uint32_t larder__cache_shard_of(const struct larder__cache *c, uint64_t global)
{
    uint64_t low = 0, high = c->num_shards; /* shard_base[low] <= global < shard_base[high] */
    while (high - low > 1) {
        uint64_t mid = (low + high) / 2;
        if (c->shard_base[mid] <= global)
            low = mid;
        else
            high = mid;
    }
    return (uint32_t)low;
}

/* The hole of global block b (its bits already cleared, its fill lock held). */
static void punch(struct larder__cache *c, uint64_t b)
{
    uint32_t shard = larder__cache_shard_of(c, b);
    int data = larder__cache_data_fd(c, shard);
    uint64_t block = b - c->shard_base[shard];
    if (data >= 0)
        larder__sys.fallocate(data, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                              (off_t)(block << c->block_shift),
                              (off_t)larder__cache_span(c, shard, block, block));
}

static void unlock_block(int lock_fd, uint64_t b)
{
    struct flock lock = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = (off_t)b, .l_len = 1};
    fcntl(lock_fd, F_OFD_SETLK, &lock);
}

bool larder__cache_evict_claim(struct larder__cache *c, int lock_fd, uint64_t b,
                               struct larder__evict_batch *batch)
{
    for (size_t i = 0; batch && i < batch->count; i++)
        if (batch->blocks[i] == b) return false; /* claimed already: the lock is ours */
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)b, .l_len = 1};
    if (fcntl(lock_fd, F_OFD_SETLK, &lock) < 0) return false; /* being filled */
    bool evicted = false;
    if (clear_bits(c->resident, b, b)) {
        disturbed(c); /* before the hole: a reader that raced it will look again */
        __atomic_fetch_sub(&c->header->resident_blocks, 1, __ATOMIC_RELAXED);
        if (clear_bits(c->borrowed, b, b))
            __atomic_fetch_sub(&c->header->borrowed_blocks, 1, __ATOMIC_RELAXED);
        clear_bits(c->suspect, b, b);
        larder__cache_count(&c->header->counters.evictions, 1);
        evicted = true;
        if (batch && batch->count < LARDER__EVICT_BATCH) {
            batch->blocks[batch->count++] = b; /* the hole and the unlock come later */
            return true;
        }
        punch(c, b);
    }
    unlock_block(lock_fd, b);
    return evicted;
}

bool larder__cache_evict_one(struct larder__cache *c, int lock_fd, uint64_t b)
{
    return larder__cache_evict_claim(c, lock_fd, b, NULL);
}

void larder__cache_evict_finish(struct larder__cache *c, int lock_fd,
                                struct larder__evict_batch *batch)
{
    for (size_t i = 0; i < batch->count; i++) {
        punch(c, batch->blocks[i]);
        unlock_block(lock_fd, batch->blocks[i]);
    }
    batch->count = 0;
}

/* Evict one resident block if the clock allows; true when it did. */
static bool evict_block(struct larder__cache *c, int lock_fd, uint64_t b, bool borrowed_only,
                        bool pins)
{
    if (!bit_get(c->resident, b)) return false;
    if (pins && bit_get(c->pinned, b)) return false; /* a hint keeps it (cache_pin.c) */
    bool borrowed = bit_get(c->borrowed, b);
    if (borrowed_only && !borrowed) return false;
    if (!borrowed && bit_get(c->referenced, b)) { /* borrowed blocks get no second chance */
        clear_bits(c->referenced, b, b);
        return false;
    }
    return larder__cache_evict_one(c, lock_fd, b);
}

/* Borrowed blocks only, by the clock's hand, while `more` says so. */
static void evict_borrowed(struct larder__cache *c, int fd, uint64_t total, bool pins,
                           uint64_t limit, uint64_t borrow_limit, bool for_capacity)
{
    for (uint64_t steps = 0;
         steps < total && atomic_load64(&c->header->borrowed_blocks) > 0 &&
         ((for_capacity && atomic_load64(&c->header->resident_blocks) > limit) ||
          atomic_load64(&c->header->borrowed_blocks) > borrow_limit);
         steps++)
        evict_block(c, fd, __atomic_fetch_add(&c->header->clock_hand, 1, __ATOMIC_RELAXED) % total,
                    true, pins);
}

/*
 * Keep the cache within its limits: borrowed blocks within their own
 * share, all blocks within the capacity.  With plans registered, next use
 * picks what goes (borrowed blocks weighed as cheaper to get back:
 * cache_nextuse.c).  Otherwise borrowed blocks go first (the owner node
 * still has them); then a clock sweep spares blocks read since its last
 * pass.  Blocks whose fill lock is held (a fill, or the caller's own
 * store) are never evicted, nor pinned blocks while their pins hold.
 */
void larder__cache_trim(struct larder__cache *c)
{
    uint64_t total = c->shard_base[c->num_shards];
    uint64_t capacity = capacity_of(c);
    uint64_t limit = capacity ? capacity >> c->block_shift : UINT64_MAX;
    uint64_t borrow_limit = c->borrow_capacity ? c->borrow_capacity >> c->block_shift : UINT64_MAX;
    if (total == 0 || (atomic_load64(&c->header->resident_blocks) <= limit &&
                       atomic_load64(&c->header->borrowed_blocks) <= borrow_limit && !c->share))
        return;
    bool pins = pins_hold(c, larder__cache_clock_ms());
    int fd = larder__open(c->locks_path, O_RDWR | O_CREAT, LARDER__CACHE_FILE_MODE);
    struct larder__evict_batch batch = {.count = 0};
    pthread_mutex_lock(&c->evict_lock);
    if (fd >= 0) {
        /* borrowed blocks past their own share go first in any case */
        evict_borrowed(c, fd, total, pins, limit, borrow_limit, false);
        bool by_plan = atomic_load64(&c->header->resident_blocks) > limit && !c->evict_clock &&
                       larder__nextuse_trim(c, fd, limit, pins, &batch);
        if (!by_plan) evict_borrowed(c, fd, total, pins, limit, borrow_limit, true);
        /* the clock: without plans, or for what next use could not evict */
        for (uint64_t steps = 0;
             steps < 2 * total && atomic_load64(&c->header->resident_blocks) > limit; steps++)
            evict_block(c, fd,
                        __atomic_fetch_add(&c->header->clock_hand, 1, __ATOMIC_RELAXED) % total,
                        false, pins);
        if (c->share && c->evict_clock) { /* the node's capacity: by the clock, from this dataset */
            for (uint64_t steps = 0; steps < 2 * total && larder__share_over(c, 0); steps++)
                evict_block(c, fd,
                            __atomic_fetch_add(&c->header->clock_hand, 1, __ATOMIC_RELAXED) % total,
                            false, pins);
        } else if (c->share) {                /* by next use, across the datasets (cache_share.c) */
            larder__nextuse_refresh(c, pins); /* keeps what it publishes fresh */
            larder__share_trim(c, fd, pins);
        }
    }
    pthread_mutex_unlock(&c->evict_lock);
    if (fd >= 0) {
        larder__cache_evict_finish(c, fd, &batch); /* the holes, outside the lock */
        larder__sys.close(fd);
    }
}

uint64_t larder__cache_evict_all(struct larder__cache *c)
{
    uint64_t total = c->shard_base[c->num_shards], evicted = 0;
    bool pins = pins_hold(c, larder__cache_clock_ms());
    int fd = larder__open(c->locks_path, O_RDWR | O_CREAT, LARDER__CACHE_FILE_MODE);
    if (fd < 0) return 0;
    pthread_mutex_lock(&c->evict_lock);
    for (uint64_t b = 0; b < total; b++)
        if (bit_get(c->resident, b) && !(pins && bit_get(c->pinned, b)) &&
            larder__cache_evict_one(c, fd, b))
            evicted++;
    pthread_mutex_unlock(&c->evict_lock);
    larder__sys.close(fd);
    return evicted;
}
