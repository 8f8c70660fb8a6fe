/*
 * cache_nextstep.c - where the next epoch's reads count for eviction by
 * next use (cache_nextuse.c, docs/cache.md "Next use").
 */
#include "cache_internal.h"

#include <stdio.h>
#include <unistd.h>

/*
 * Where in the next pass a sample counts as read, for eviction.  Which of
 * the blocks needed next pass are kept does not change how many that pass
 * fetches (each at most once either way), but it decides when: keeping
 * those it reads first (Belady's choice among equals) left the first
 * quarter of every later pass without a fetch and its second half
 * fetching at the first pass's full rate, so the origin's stalls showed
 * as waits.  So a sample read in the head of the next pass counts at its
 * step there: the pass starts from the cache while the readers' read-ahead
 * and prefetch fill up, and those reads find room among blocks already
 * read.  The head is what the readers read or stage as the pass starts:
 * each worker's first step and its prefetch window, so K * (window + 1)
 * global steps (a fixed eighth was one step of a 10-step epoch: its first
 * steps' staging then evicted blocks the epoch still needed, 0.56x-0.59x
 * the dataset per epoch at half of it against 0.52x-0.54x).  Any later one counts at a
 * fixed step of its own among the rest (splitmix64 of its id), the same
 * pass after pass, so the pass's fetches fall evenly over it
 * (bench/results/eviction.md, docs/cache.md).
 */
uint64_t larder__nextuse_spread(uint64_t id)
{
    uint64_t z = id + UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t larder__nextuse_head(uint64_t steps, uint64_t workers, uint64_t window)
{
    uint64_t head = steps / 8;
    if (window && workers && window < steps && workers <= steps)
        head = workers * (window + 1); /* < steps * (steps + 1): no overflow for sane steps */
    else if (window && workers)
        head = steps;
    if (head > steps) head = steps;
    return head ? head : 1;
}

uint64_t larder__nextuse_step(uint64_t steps, uint64_t head, uint64_t step, uint64_t id)
{
    if (head < 1) head = 1;
    if (step < head || steps <= head) return step;
    return head + larder__nextuse_spread(id) % (steps - head);
}

void larder__cache_trace_window(struct larder__cache *c, uint64_t window, uint32_t workers)
{
    if (c->trace_fd < 0) return;
    char line[80];
    int length = snprintf(line, sizeof line, "# window %llu workers %u\n",
                          (unsigned long long)window, workers);
    if (length > 0 && write(c->trace_fd, line, (size_t)length) < 0) return;
}

void larder__cache_trace_miss(struct larder__cache *c, uint32_t shard, uint64_t first,
                              uint64_t last)
{
    if (c->trace_fd < 0 || shard >= c->num_shards) return;
    char line[80];
    int length = snprintf(line, sizeof line, "# miss %llu %llu\n",
                          (unsigned long long)(c->shard_base[shard] + first),
                          (unsigned long long)(c->shard_base[shard] + last));
    /* one short write to an O_APPEND file: lines of several processes never mix */
    if (length > 0 && write(c->trace_fd, line, (size_t)length) < 0) return;
}
