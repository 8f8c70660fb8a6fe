/*
 * cache_admit.c - admission by next use (a fetched block that would be
 * the next to go is read through), the prefetch window's share of the
 * capacity, next uses for tests and the benchmark, and what deciding cost
 * (LARDER_EVICT_TRACE).  The state is cache_nextuse.c's.
 */
#include "cache_nextuse.h"

#include <stdio.h>
#include <unistd.h>

/* All prefetch windows together hold at most 1/WINDOW_SHARE of the
 * capacity (and each at least one step): a block staged ahead takes the
 * place of a block kept for reuse until it is read, so windows cost
 * refetches (measured: bench/results/eviction.md, docs/cache.md). */
#define WINDOW_SHARE 8

void larder__nextuse_trace_costs(struct larder__cache *c)
{
    if (!c || c->trace_fd < 0) return;
    pthread_mutex_lock(&c->evict_lock);
    struct larder__nextuse *n = c->nextuse;
    if (!n || (!n->scans && !n->admits)) {
        pthread_mutex_unlock(&c->evict_lock);
        return;
    }
    char line[160];
    int length = snprintf(
        line, sizeof line, "# pid %ld scans %llu scan_cpu_us %llu admits %llu admit_wait_us %llu\n",
        (long)getpid(), (unsigned long long)n->scans, (unsigned long long)(n->scan_cpu_ns / 1000),
        (unsigned long long)n->admits, (unsigned long long)(n->admit_wait_ns / 1000));
    n->scans = n->scan_cpu_ns = n->admits = n->admit_wait_ns = 0; /* reported */
    pthread_mutex_unlock(&c->evict_lock);
    if (length > 0 && write(c->trace_fd, line, (size_t)length) < 0) return;
}

/* Whether the cache (or the node) is full with `more` blocks more. */
static void fullness(struct larder__cache *c, uint64_t more, bool *full, bool *node_full)
{
    uint64_t capacity = __atomic_load_n(&c->header->capacity, __ATOMIC_ACQUIRE);
    *full =
        capacity && atomic_load64(&c->header->resident_blocks) + more > capacity >> c->block_shift;
    *node_full = larder__share_over(c, more << c->block_shift);
}

/* Take evict_lock for an admission decision, counting the wait. */
static struct larder__nextuse *lock_for_admission(struct larder__cache *c)
{
    uint64_t asked = larder__nextuse_now_ns();
    pthread_mutex_lock(&c->evict_lock);
    struct larder__nextuse *n = c->nextuse;
    if (n) {
        n->admits++;
        n->admit_wait_ns += larder__nextuse_now_ns() - asked;
    }
    return n;
}

/* The weighed next use of the resident block that would go next (here,
 * or with a node capacity in another dataset); false when none would.
 * With evict_lock held and the candidates current. */
static bool next_to_go(struct larder__cache *c, struct larder__nextuse *n, bool node_full,
                       uint64_t *farthest)
{
    bool found = false;
    *farthest = LARDER__NEXTUSE_NEVER;
    for (size_t i = n->next_candidate; i < n->num_candidates && !found; i++)
        if (bit_get(c->resident, n->candidates[i].block)) {
            *farthest = n->candidates[i].use;
            found = true;
        }
    uint64_t other; /* with a node capacity, another dataset's may go instead */
    if (node_full && larder__share_farthest(c, &other) && (!found || other > *farthest)) {
        *farthest = other;
        found = true;
    }
    return found;
}

bool larder__cache_admit(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    if (c->evict_clock || shard >= c->num_shards) return true;
    bool full, node_full;
    fullness(c, last - first + 1, &full, &node_full);
    if (!full && !node_full) return true;
    bool admit = true;
    struct larder__nextuse *n = lock_for_admission(c);
    bool pins = pins_hold(c, larder__cache_clock_ms());
    uint64_t farthest;
    if (n && larder__nextuse_listed(c, n, pins) && next_to_go(c, n, node_full, &farthest)) {
        uint64_t nearest = LARDER__NEXTUSE_NEVER;
        for (uint64_t b = first; b <= last && nearest >= farthest; b++) {
            uint64_t d = larder__nextuse_block_distance(c, n, shard, b);
            if (d < nearest) nearest = d;
        }
        admit = nearest < farthest;
    }
    pthread_mutex_unlock(&c->evict_lock);
    return admit;
}

void larder__cache_admit_each(struct larder__cache *c, uint32_t shard, uint64_t first,
                              uint64_t last, bool *admit)
{
    for (uint64_t b = first; b <= last; b++)
        admit[b - first] = true;
    if (c->evict_clock || shard >= c->num_shards) return;
    bool full, node_full;
    fullness(c, 1, &full, &node_full);
    if (!full && !node_full) return;
    struct larder__nextuse *n = lock_for_admission(c);
    bool pins = pins_hold(c, larder__cache_clock_ms());
    uint64_t farthest;
    if (n && larder__nextuse_listed(c, n, pins) && next_to_go(c, n, node_full, &farthest))
        for (uint64_t b = first; b <= last; b++)
            admit[b - first] = larder__nextuse_block_distance(c, n, shard, b) < farthest;
    pthread_mutex_unlock(&c->evict_lock);
}

uint64_t larder__cache_next_use(struct larder__cache *c, uint32_t shard, uint64_t block)
{
    uint64_t d = LARDER__NEXTUSE_NEVER;
    pthread_mutex_lock(&c->evict_lock);
    struct larder__nextuse *n = c->nextuse;
    if (n && shard < c->num_shards && larder__nextuse_readers(c, n)) {
        larder__nextuse_positions(c, n);
        d = larder__nextuse_block_distance(c, n, shard, block);
    }
    pthread_mutex_unlock(&c->evict_lock);
    return d;
}

uint64_t larder__cache_window_bytes(struct larder__cache *c, int readers)
{
    uint64_t capacity = __atomic_load_n(&c->header->capacity, __ATOMIC_ACQUIRE);
    if (c->evict_clock || !capacity) return 0;
    return capacity / (WINDOW_SHARE * (uint64_t)(readers > 0 ? readers : 1));
}
