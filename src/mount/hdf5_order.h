/*
 * hdf5_order.h - what hdf5_order.c (a registered row order over one HDF5
 * file: its listing and resolvers) and hdf5_order_position.c (where the
 * reader is in it) share; internal to the mount.
 */
#ifndef LARDER_MOUNT_HDF5_ORDER_H
#define LARDER_MOUNT_HDF5_ORDER_H

#include "mount.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define LARDER__MOUNT_FILE_ORDERS_MAX 64
#define LARDER__MOUNT_ORDER_RESOLVERS 16 /* members followed at once, each staging in turn */
#define LARDER__MOUNT_EARLY_SHIFT 12     /* a unit of the early bitmap: the kernel's page */

struct larder__mount_file_order {
    struct larder__mount *m;
    struct larder__mount_file_orders *registry;
    char file[256], group[256],
        dataset[256]; /* dataset: its rows are the samples, else group's members */
    uint64_t sample;  /* the file's sample in the index */
    int field;        /* ... and field (the mount node's), -1 the whole sample */
    uint32_t shard;
    uint64_t base, size; /* the file: shard bytes [base, base + size) */
    uint64_t seed, epoch, batch, window;
    uint32_t rank, world;
    pthread_t thread;    /* lists the members, then stages ahead of the reader */
    pthread_cond_t wake; /* the position moved, or stop */
    _Atomic bool stop;   /* set under lock, read by resolvers without it */
    /* set by the listing thread, then read under lock */
    pthread_mutex_t lock;
    bool ready;
    int error;
    size_t members;
    uint64_t *address;       /* member -> its object header's offset (clipped: < size) */
    uint64_t *end;           /* member -> the end of its bytes */
    uint64_t *sorted;        /* the addresses, ascending */
    uint32_t *sorted_of;     /* ... and whose */
    uint32_t *list;          /* the rank's order of members */
    size_t length;           /* of list */
    int64_t *position_of;    /* member -> its first place in list, -1 */
    uint8_t *seen;           /* list place -> some of its member's bytes were read */
    uint64_t *lookup;        /* member -> [2]: its symbol-table node, that node's B-tree node
                                (where a reader's lookup of it reads; UINT64_MAX unknown), or NULL */
    size_t lookup_known;     /* members whose lookup nodes are known */
    _Atomic size_t followed; /* members whose own extents were found */
    uint8_t *asked;          /* a bit per 64 KiB of the file: a stage of it was asked */
    uint8_t *early;          /* a bit per 4 KiB page read before the listing was ready, or NULL:
                                set by the mount's readers under lock, size / 32 KiB bytes (calloc'd,
                                touched only where read), freed when replayed or the listing fails */
    size_t position;         /* list[0..position) read: the lowest place not seen */
    size_t staged_until;     /* list[0..staged_until) asked */
    uint64_t staged_bytes;   /* queued */
    double listed_s;
    struct larder__mount_listing listing; /* its reads (the listing thread's) */
};

struct larder__mount_file_orders {
    pthread_mutex_t listing; /* one listing at a time, so that the next can reuse it */
    pthread_mutex_t lock;    /* the array */
    struct larder__mount_file_order *orders[LARDER__MOUNT_FILE_ORDERS_MAX];
    size_t count;
};

/* Data bytes [offset, offset + length) of the file were read (o->lock held,
 * o->ready): the members they touch are seen, the position moves on.
 * Returns the places it moved. */
size_t larder__mount_hdf5_order_seen_locked(struct larder__mount_file_order *o, uint64_t offset,
                                            uint64_t length);
/* The reads noted in o->early before the listing was ready, counted now
 * (o->lock held, o->ready just set); frees o->early. */
void larder__mount_hdf5_order_replay_early_locked(struct larder__mount_file_order *o);

#endif
