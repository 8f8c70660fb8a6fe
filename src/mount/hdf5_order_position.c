/*
 * hdf5_order_position.c - where the reader is in a registered row order
 * over one HDF5 file (hdf5_order.h, docs/mount.md "A registered row order
 * for an HDF5 file"): the reads the mount answers mark the members they
 * touch, and the order stages `window` steps past the first place not yet
 * touched.  Reads made before the order's listing is ready are noted by
 * page and counted when it is.  Also the control file's read-back.
 */
#include "hdf5_order.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Data bytes [offset, offset + length) were read (o->lock held): every
 * member they touch is seen, and the position is the lowest place in the
 * list not seen.  The kernel sends each byte of the file once (it keeps
 * the pages), in pieces of its read-ahead that span several members, and
 * a member's bytes may hold another's metadata: so members are seen as
 * they are touched, in any order, and the reader is where the first one
 * not yet touched is (never past it: a count of places seen ahead, with
 * the kernel's 1 MiB read-ahead touching three or four members a read,
 * ran past the reader).  The sampler's order gives every place of the
 * rank's list once an epoch, so each is touched; only the padding at the
 * end (a member repeated) is not, and nothing follows it. */
size_t larder__mount_hdf5_order_seen_locked(struct larder__mount_file_order *o, uint64_t offset,
                                            uint64_t length)
{
    if (length == 0 || offset >= o->size || offset + length < o->sorted[0]) return 0;
    size_t lo = 0, hi = o->members; /* the last member at or below offset */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (o->sorted[mid] <= offset)
            lo = mid;
        else
            hi = mid;
    }
    while (lo > 0 && o->sorted[lo - 1] == o->sorted[lo]) /* members at one address (links) */
        lo--;
    uint64_t end = offset + length > o->size ? o->size : offset + length;
    for (size_t k = lo; k < o->members && o->sorted[k] < end; k++) {
        uint32_t member = o->sorted_of[k];
        if (o->end[member] <= offset) continue; /* its bytes end before the read */
        int64_t at = o->position_of[member];
        if (at < 0 || (size_t)at < o->position || o->seen[at]) continue;
        o->seen[at] = 1;
    }
    size_t before = o->position;
    while (o->position < o->length && o->seen[o->position])
        o->position++;
    if (o->m->trace && o->position / 32 != before / 32)
        larder__mount_log(LARDER_LOG_INFO, "trace: order rank %u read to place %zu at %.3f s",
                          o->rank, o->position, now_s());
    return o->position - before;
}

void larder__mount_file_orders_read(struct larder__mount_file_orders *r, uint64_t sample, int field,
                                    uint64_t offset, uint64_t length)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->count; i++) {
        struct larder__mount_file_order *o = r->orders[i];
        if (o->sample != sample || o->field != field) continue; /* another file */
        pthread_mutex_lock(&o->lock);
        if (o->ready && o->members > 0) {
            /* the resolvers stage on: one woken per place the window moved.
             * Not all of them on every read: with 16 resolvers a rank and
             * both ranks' orders over one file, each of the cold epoch's
             * ~47,000 reads woke 32 threads to find nothing to do, 1.5
             * million context switches, the mount's CPU on 2 cores. */
            size_t moved = larder__mount_hdf5_order_seen_locked(o, offset, length);
            for (size_t k = 0; k < moved && k < LARDER__MOUNT_ORDER_RESOLVERS; k++)
                pthread_cond_signal(&o->wake);
        } else if (!o->ready && o->early && length > 0 && offset < o->size) {
            uint64_t last = (offset + length > o->size ? o->size : offset + length) - 1;
            for (uint64_t page = offset >> LARDER__MOUNT_EARLY_SHIFT;
                 page <= last >> LARDER__MOUNT_EARLY_SHIFT; page++)
                o->early[page / 8] |= (uint8_t)(1u << page % 8);
        }
        pthread_mutex_unlock(&o->lock);
    }
    pthread_mutex_unlock(&r->lock);
}

int larder__mount_file_orders_describe(struct larder__mount_file_orders *r, char *buf,
                                       size_t capacity)
{
    size_t used = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->count && used < capacity; i++) {
        struct larder__mount_file_order *o = r->orders[i];
        pthread_mutex_lock(&o->lock);
        int n =
            snprintf(buf + used, capacity - used,
                     "file=%s %s=%s sampler=torch seed=%" PRIu64 " epoch=%" PRIu64
                     " rank=%u world=%u batch=%" PRIu64 " window=%" PRIu64
                     " members=%zu read=%zu staged=%zu staged_bytes=%" PRIu64 "%s\n",
                     o->file, o->dataset[0] ? "dataset" : "group",
                     o->dataset[0] ? o->dataset : o->group, o->seed, o->epoch, o->rank, o->world,
                     o->batch, o->window, o->members, o->position, o->staged_until, o->staged_bytes,
                     o->error   ? " failed"
                     : o->ready ? ""
                                : " listing");
        pthread_mutex_unlock(&o->lock);
        if (n < 0 || (size_t)n >= capacity - used) break;
        used += (size_t)n;
    }
    pthread_mutex_unlock(&r->lock);
    return (int)used;
}

/* The reads made before the listing was ready (o->lock held, o->ready just
 * set): their members are seen as if read now.  Without it a reader that
 * started before the listing ended (the ranks' first reads came 0.4 s
 * before it in a quiet run) left its first places unseen for good, and
 * the order stopped staging a window past them. */
void larder__mount_hdf5_order_replay_early_locked(struct larder__mount_file_order *o)
{
    if (!o->early) return;
    uint64_t pages = (o->size >> LARDER__MOUNT_EARLY_SHIFT) + 1, run = 0;
    for (uint64_t page = 0; page <= pages; page++) {
        /* 64 pages unread at once: a large file's table is mostly zero,
         * and the mount's readers wait for the order's lock meanwhile */
        uint64_t word;
        if (run == 0 && page % 64 == 0 && page + 64 <= pages) {
            memcpy(&word, o->early + page / 8, sizeof word);
            if (word == 0) {
                page += 63;
                continue;
            }
        }
        bool read = page < pages && o->early[page / 8] & (1u << page % 8);
        if (read) {
            run++;
            continue;
        }
        if (run > 0)
            larder__mount_hdf5_order_seen_locked(o, (page - run) << LARDER__MOUNT_EARLY_SHIFT,
                                                 run << LARDER__MOUNT_EARLY_SHIFT);
        run = 0;
    }
    free(o->early);
    o->early = NULL;
}
