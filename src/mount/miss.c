/*
 * miss.c - how much a reader's miss brings (mount.h): split out of fs.c,
 * which answers the FUSE requests and times the miss around this.
 */
#include "mount.h"

#include "bigbuf.h"
#include "dataset.h"
#include "fill.h"
#include "index.h"
#include "priority.h"

#include <stdlib.h>
#include <string.h>

/*
 * A miss of data bytes [at, at + n): larder_file_pread, except in a file
 * that is being staged whole (stager.c), where a small miss brings
 * larder__mount_miss_span bytes from `at` on at DEMAND: staging would fetch
 * them anyway, and a reader that reads a record in several requests (the
 * kernel sends a page, then the rest) waits on one round trip to the
 * origin, not on one per request.  Not through a daemon: its misses are
 * the daemon's to fetch.
 */
int64_t larder__mount_read_miss(struct larder__mount *m, larder_file *file, uint32_t shard,
                                uint64_t base, uint64_t size, uint8_t *buf, uint64_t n, uint64_t at)
{
    if (m->staged_on_open && m->cached && !m->daemon && n < LARDER__MOUNT_MISS_SPAN && at < size) {
        struct larder__shard s;
        unsigned shift = larder__index_shard(larder__dataset_index(m->dataset), shard, &s) == 0
                             ? s.sum_shift
                             : 0;
        uint64_t span = larder__mount_miss_span(base + at, n, size - at, shift);
        uint8_t *big = span > n ? larder__bigbuf_get((size_t)span) : NULL;
        if (big && larder__fill_range_at(larder__dataset_fill(m->dataset), shard, base + at, span,
                                         LARDER__DEMAND, big) == 0) {
            memcpy(buf, big, (size_t)n);
            larder__bigbuf_put(big);
            return (int64_t)n;
        }
        larder__bigbuf_put(big); /* larder_file_pread tries again, and says why */
    }
    return larder_file_pread(file, buf, (size_t)n, at);
}
