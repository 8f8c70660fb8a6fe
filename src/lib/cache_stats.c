/*
 * cache_stats.c - the counters every process sharing a cache adds to
 * (in the shared header, updated atomically), the statistics made from
 * them, and larder_cache_list, which reads them from every cache in a
 * directory without opening any.
 */
#include "cache_internal.h"
#include "sys.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>

void larder__cache_count(uint64_t *counter, uint64_t amount)
{
    __atomic_fetch_add(counter, amount, __ATOMIC_RELAXED);
}

struct larder__cache_counters *larder__cache_counters(struct larder__cache *c)
{
    return &c->header->counters;
}

void larder__cache_record_fill(struct larder__cache *c, uint64_t microseconds)
{
    int bucket = 0;
    while (bucket + 1 < LARDER_FILL_BUCKETS && microseconds >= (UINT64_C(2) << bucket))
        bucket++;
    larder__cache_count(&c->header->counters.fill_latency[bucket], 1);
}

void larder__counters_copy(const struct larder__cache_counters *k, larder_stats *out)
{
    out->hits = __atomic_load_n(&k->hits, __ATOMIC_RELAXED);
    out->misses = __atomic_load_n(&k->misses, __ATOMIC_RELAXED);
    out->origin_requests = __atomic_load_n(&k->origin_requests, __ATOMIC_RELAXED);
    out->origin_bytes = __atomic_load_n(&k->origin_bytes, __ATOMIC_RELAXED);
    out->bytes_served = __atomic_load_n(&k->bytes_served, __ATOMIC_RELAXED);
    out->refetches = __atomic_load_n(&k->refetches, __ATOMIC_RELAXED);
    out->evictions = __atomic_load_n(&k->evictions, __ATOMIC_RELAXED);
    out->uncached_fills = __atomic_load_n(&k->uncached_fills, __ATOMIC_RELAXED);
    for (int i = 0; i < LARDER_FILL_BUCKETS; i++)
        out->fill_latency[i] = __atomic_load_n(&k->fill_latency[i], __ATOMIC_RELAXED);
    out->peer_requests = __atomic_load_n(&k->peer_requests, __ATOMIC_RELAXED);
    out->peer_bytes = __atomic_load_n(&k->peer_bytes, __ATOMIC_RELAXED);
}

/* Copy the shared counters and usage of a mapped header into stats. */
static void header_stats(const struct shared_header *h, larder_stats *out)
{
    memset(out, 0, sizeof *out);
    larder__counters_copy(&h->counters, out);
    out->cached = 1;
    out->block_size = h->block_size;
    out->resident_bytes = __atomic_load_n(&h->resident_blocks, __ATOMIC_RELAXED) * h->block_size;
    if (out->resident_bytes > h->total_bytes) out->resident_bytes = h->total_bytes;
    out->total_bytes = h->total_bytes;
    out->borrowed_bytes = __atomic_load_n(&h->borrowed_blocks, __ATOMIC_RELAXED) * h->block_size;
}

void larder__cache_stats(const struct larder__cache *c, larder_stats *out)
{
    header_stats(c->header, out);
}

int larder_cache_list(const char *dir, larder_cache_entry_fn fn, void *userdata)
{
    DIR *d = opendir(dir);
    if (!d) return larder__fail(-errno, "%s: %s", dir, strerror(errno));
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strlen(e->d_name) != 32 || strspn(e->d_name, "0123456789abcdef") != 32) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s/blocks", dir, e->d_name);
        int fd = larder__open(path, O_RDONLY, 0);
        if (fd < 0) continue;
        uint64_t size = 0;
        if (larder__file_size(fd, &size, path) == 0 && size >= LARDER__CACHE_HEADER_SIZE) {
            void *map = mmap(NULL, LARDER__CACHE_HEADER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
            if (map != MAP_FAILED) {
                const struct shared_header *h = map;
                if (memcmp(h->magic, LARDER__CACHE_MAGIC, 8) == 0 &&
                    h->version == LARDER__CACHE_VERSION) {
                    larder_stats stats;
                    header_stats(h, &stats);
                    if (fn) fn(userdata, e->d_name, &stats);
                    count++;
                }
                munmap(map, LARDER__CACHE_HEADER_SIZE);
            }
        }
        larder__sys.close(fd);
    }
    closedir(d);
    return count;
}
