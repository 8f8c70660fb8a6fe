/*
 * cache_share_internal.h - the node share's shared file and what a process
 * knows of the other datasets in it (cache_share.c, cache_share_slots.c).
 */
#ifndef LARDER_CACHE_SHARE_INTERNAL_H
#define LARDER_CACHE_SHARE_INTERNAL_H

#include "cache_internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SHARE_MAGIC "LARDERNS"
#define SHARE_VERSION 1
#define SHARE_SLOTS 32
#define PUBLISHED_FOR_MS 10000
/* a slot's sequence left odd this long: its writer died writing (a
 * publication takes microseconds) */
#define WRITER_GONE_MS 2000
/* blocks a dataset's published count may move between popcounts: 64, or
 * 1/4096 of its blocks when more (a popcount reads one word per 64 blocks:
 * about 64 word reads per block moved, whatever the dataset's size) */
#define COUNT_SLACK 64
#define COUNT_SLACK_SHIFT 12
#define COUNT_FOR_MS 1000    /* a popcount is taken again at least this often */
#define MAX_SHARDS (1 << 20) /* another dataset with more shards is never evicted from */

struct share_victim {
    uint64_t use;    /* weighed steps to its next use; UINT64_MAX: never */
    uint64_t global; /* block number in its dataset */
    uint64_t offset; /* in its shard's data file */
    uint32_t shard, length;
};

struct share_slot {
    uint64_t state; /* atomic: 0 free, 2 live, or a claim (larder__claim_word) */
    uint64_t id_low, id_high;
    uint64_t sequence; /* atomic: odd while the victims are written */
    int64_t published_ms;
    uint64_t count;
    uint64_t reserved[2];
    struct share_victim victims[LARDER__SHARE_VICTIMS];
};

struct share_file {
    char magic[8];
    uint32_t version, slots;
    uint64_t capacity;
    uint64_t reserved[6];
    struct share_slot slot[SHARE_SLOTS];
};

/* Another dataset's `blocks`, mapped to read its count and bits, and its
 * geometry, worked out from its own files (never from a publication). */
struct peer {
    uint64_t id_low, id_high;
    struct shared_header *header;
    /* the mapped blocks file: the path may name another since (the
     * dataset's directory removed and made again), whose bits these are not */
    dev_t dev;
    ino_t ino;
    int64_t checked_ms; /* when the path was last found to name it */
    uint64_t *resident, *borrowed, *suspect;
    /* the header's, as checked against the file at mapping: the mapping is
     * shared and writable, its header may change */
    uint64_t total_blocks;
    uint32_t block_size;
    unsigned block_shift;
    size_t size;
    /* its resident count: the bitmap's popcount, taken again when the
     * published counter moved by more than its slack or COUNT_FOR_MS
     * passed; in between, the counter's moves are added */
    uint64_t counted, published_at_count;
    int64_t counted_ms;
    bool ever_counted;
    /* shards: 0 not worked out yet, 1 known, -1 refused (never evicted from) */
    int geometry;
    uint64_t num_shards;
    uint64_t *shard_base; /* first global block of each shard, plus the total */
    uint64_t *shard_size; /* its data file's size, the shard's */
    char dir[PATH_MAX - 64];
};

struct larder__share {
    struct share_file *file;
    uint64_t capacity; /* this process's LARDER_NODE_CACHE_SIZE: the file's is only shown */
    int slot;
    uint64_t id_low, id_high;
    int64_t claim_tried_ms; /* its last failed claim of a slot anew (keep_slot); 0: none */
    pthread_mutex_t lock;   /* guards peers[], slot (admission runs outside evict_lock) */
    struct peer peers[SHARE_SLOTS];
    char root[PATH_MAX - 128]; /* DIR */
};

/* Whether slot i is live and the first naming its dataset (only that one
 * is its dataset's). */
LARDER__HIDDEN bool larder__share_first_of_its_id(const struct share_file *f, int i);
/* The `blocks` of the dataset in slot i, mapped and checked against its
 * own header; NULL when it has none that makes sense.  s->lock held. */
LARDER__HIDDEN struct peer *larder__share_peer_of(struct larder__share *s, int i);
/* Whether the peer's mapping is still of the file at its blocks path
 * (false: the dataset's cache was removed, and perhaps made again). */
LARDER__HIDDEN bool larder__share_peer_current(const struct peer *p);
/* Unmap and forget what peer_of mapped. */
LARDER__HIDDEN void larder__share_peer_drop(struct peer *p);
/* A dataset's resident blocks, from its bitmap and published counter. */
LARDER__HIDDEN uint64_t larder__share_peer_count(struct peer *p, int64_t now);
/* Whether a slot's publication time is within PUBLISHED_FOR_MS of now. */
LARDER__HIDDEN bool larder__share_published_lately(int64_t published, int64_t now);
/* A slot for s's dataset (free, abandoned, or given back); -1: none.  s->lock held. */
LARDER__HIDDEN int larder__share_claim_slot(struct larder__share *s);
/* s's dataset keeps a live slot, claimed anew when taken back.  s->lock held. */
LARDER__HIDDEN void larder__share_keep_slot(struct larder__share *s);

#endif
