/*
 * bigbuf.c - large buffers kept for reuse (bigbuf.h).  Measured on the
 * end-to-end borrow of bench/peer.sh (perf record on the borrowing
 * daemon): with a whole 4 MiB chunk borrowed into a fresh buffer and
 * filled through another, page faults and zeroing (exc_page_fault,
 * clear_page) were 26-38% of the daemon's CPU time.  glibc serves such
 * sizes from mmap and unmaps them on free, and a threaded process's
 * arenas give their tops back too; a few kept buffers whose pages stay
 * mapped avoid that.  At most KEEP buffers and KEEP_BYTES in all are kept.
 */
#include "bigbuf.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define KEEP 16                       /* buffers kept at most */
#define KEEP_BYTES ((size_t)96 << 20) /* bytes kept at most */
#define HEADER 64                     /* before the caller's bytes: the capacity */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *kept[KEEP]; /* each the start of an allocation (its header) */
static size_t num_kept, kept_bytes;

static size_t capacity_of(const uint8_t *start)
{
    size_t capacity;
    memcpy(&capacity, start, sizeof capacity);
    return capacity;
}

void *larder__bigbuf_get(size_t length)
{
    if (length == 0) length = 1;
    if (length > SIZE_MAX - HEADER - LARDER__BIGBUF_MIN) return NULL;
    if (length >= LARDER__BIGBUF_MIN) {
        uint8_t *best = NULL;
        size_t at = 0;
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < num_kept; i++) /* the smallest that fits */
            if (capacity_of(kept[i]) >= length &&
                (!best || capacity_of(kept[i]) < capacity_of(best)))
                best = kept[i], at = i;
        if (best) {
            kept[at] = kept[--num_kept];
            kept_bytes -= capacity_of(best);
        }
        pthread_mutex_unlock(&lock);
        if (best) return best + HEADER;
        /* rounded up to a whole MiB, so that a slightly larger request reuses it */
        length = (length + LARDER__BIGBUF_MIN - 1) / LARDER__BIGBUF_MIN * LARDER__BIGBUF_MIN;
    }
    uint8_t *start = malloc(HEADER + length);
    if (!start) return NULL;
    memcpy(start, &length, sizeof length);
    return start + HEADER;
}

void larder__bigbuf_put(void *buffer)
{
    if (!buffer) return;
    uint8_t *start = (uint8_t *)buffer - HEADER;
    size_t capacity = capacity_of(start);
    if (capacity >= LARDER__BIGBUF_MIN) {
        pthread_mutex_lock(&lock);
        bool keep = num_kept < KEEP && kept_bytes + capacity <= KEEP_BYTES;
        if (keep) {
            kept[num_kept++] = start;
            kept_bytes += capacity;
        }
        pthread_mutex_unlock(&lock);
        if (keep) return;
    }
    free(start);
}
