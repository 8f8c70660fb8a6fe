/*
 * metrics.h - the daemon's counters as Prometheus text (exposition format
 * 0.0.4): one HELP and TYPE pair per metric, then one line per dataset,
 * labelled with its id (a histogram: its buckets, sum and count).  Pure:
 * no I/O, no allocation, no lock.
 *
 * Two kinds of figures: what this daemon answered (struct served, counted
 * where requests.c answers a READ, kept in memory: they start at zero
 * when the daemon starts), and the node cache's (larder_stats: counted by
 * the read engine in the cache's shared header, by every process using
 * the cache, across restarts).
 */
#ifndef LARDERD_METRICS_H
#define LARDERD_METRICS_H

#include "larder.h"

#include "pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upper bounds of the READ latency histogram's buckets, in microseconds
 * (Prometheus' le, in seconds); one more bucket holds the rest. */
#define READ_LATENCY_BUCKETS 16
extern const uint64_t read_latency_bounds_us[READ_LATENCY_BUCKETS];

/* What the daemon answered to READs of one dataset.  Updated with atomic
 * adds by the workers; read with atomic loads (served_copy). */
struct served {
    uint64_t hits;           /* answered from the cache, no source read for it */
    uint64_t misses;         /* needed a fill: read from the origin or the shard's owner */
    uint64_t borrowed;       /* of the misses: filled (at least partly) from the owner node */
    uint64_t errors;         /* answered with an ERROR */
    uint64_t bytes;          /* bytes READs were answered for (sent, or staged: below) */
    uint64_t peer_reads;     /* of the answered READs: those of other nodes' daemons */
    uint64_t peer_bytes;     /* and their bytes */
    uint64_t inplace_blocks; /* blocks of borrowed chunks received straight into the cache file */
    uint64_t staged_reads;   /* of the answered READs: STAGE ones, answered with no bytes */
    uint64_t staged_bytes;   /* and their bytes (in `bytes` too): read from the cache */
    uint64_t latency_sum_us; /* time to answer, summed */
    uint64_t latency[READ_LATENCY_BUCKETS + 1]; /* READs by time to answer (not cumulative) */
};

/* Count one READ answered (error: with an ERROR) after `microseconds`. */
void served_count(struct served *s, bool hit, bool borrowed, bool error, bool to_peer,
                  uint64_t bytes, uint64_t microseconds);
/* A consistent-enough copy of s (each field loaded atomically). */
void served_copy(const struct served *s, struct served *out);
/* The upper bound (us) of the bucket holding the fraction-th READ, 0 when none;
 * UINT64_MAX: beyond the last bound. */
uint64_t served_percentile(const struct served *s, double fraction);

/* One dataset's figures. */
struct metrics_row {
    char dataset_id[33];   /* 32 hex digits */
    larder_stats stats;    /* the node cache's */
    struct served served;  /* this daemon's answers */
    uint64_t pinned_bytes; /* the node cache's bytes pinned by hints now (cache_pin.c) */
};

/*
 * The text of rows[0 .. count) into out (capacity bytes, NUL-terminated
 * when capacity > 0): its length.  Whole lines only: what does not fit is
 * left out, never cut in the middle of a line.
 */
size_t metrics_format(const struct metrics_row *rows, size_t count, char *out, size_t capacity);

/*
 * The daemon's work queue by class (priority.h): READs and warm staging
 * queued, started and running, and the time started tasks waited in the
 * queue (summed, longest).  As Prometheus lines, one per class and
 * series, appended to out[0 .. capacity) at *used (whole lines only);
 * and as the JSON object {"demand": {...}, "near": ..., "hinted": ...,
 * "warm": ...} (its length; 0 when it does not fit).
 */
void metrics_format_classes(const struct larder__pool_stats *stats, char *out, size_t capacity,
                            size_t *used);
size_t metrics_classes_json(const struct larder__pool_stats *stats, char *out, size_t capacity);

#endif
