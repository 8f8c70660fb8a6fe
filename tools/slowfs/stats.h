/*
 * stats.h - slowfs's counters: log-linear latency histograms and the JSON
 * report that `.slowfs-stats` and the unmount message show.  No locking
 * here; slowfs.c holds its stats lock around every call.
 */
#ifndef SLOWFS_STATS_H
#define SLOWFS_STATS_H

#include <stddef.h>
#include <stdint.h>

/* 16 buckets per power of two of microseconds (under 6.25% error), from
 * 1 us up to 2^40 us; anything longer lands in the last bucket. */
#define SLOWFS_HIST_SUB 16
#define SLOWFS_HIST_BUCKETS (SLOWFS_HIST_SUB + 36 * SLOWFS_HIST_SUB)

struct slowfs_hist {
    uint64_t count;                        /* values recorded */
    uint64_t sum_ns;                       /* their sum, for the mean */
    uint64_t max_ns;                       /* the largest, exactly */
    uint64_t buckets[SLOWFS_HIST_BUCKETS]; /* counts by log-linear bucket */
};

/* Add one value in nanoseconds. */
void slowfs_hist_add(struct slowfs_hist *hist, uint64_t ns);

/* The value at quantile q (0..1) in nanoseconds: the middle of the bucket
 * holding it, never above the recorded maximum; 0 when empty. */
uint64_t slowfs_hist_quantile(const struct slowfs_hist *hist, double q);

/* Everything slowfs counts.  Times are monotonic nanoseconds. */
struct slowfs_stats {
    uint64_t reads;                /* reads served (stats file excluded) */
    uint64_t bytes;                /* bytes they returned */
    uint64_t read_errors;          /* reads the source failed (delayed all the same) */
    uint64_t eof_reads;            /* reads at end of file: answered at once, not counted */
    uint64_t tail_stalls;          /* reads the Pareto tail hit */
    uint64_t congested_reads;      /* reads served inside a congestion episode */
    uint64_t drawn_delay_ns;       /* sum of the seeded draws (see model.h) */
    uint64_t in_flight;            /* reads holding a service slot now */
    uint64_t max_in_flight;        /* the most that ever did at once */
    uint64_t queued;               /* reads waiting for a slot now */
    uint64_t max_queue_depth;      /* the most that ever waited at once */
    uint64_t meta_ops;             /* getattr, open, readdir, readlink served */
    uint64_t meta_delay_ns;        /* the delay they were given */
    struct slowfs_hist read_wait;  /* arrival to reply: what a reader sees */
    struct slowfs_hist queue_wait; /* arrival to a slot */
    struct slowfs_hist service;    /* drawn delay x congestion + transfer */
    /* the emulator's own cost (getrusage at the report): CPU it takes from
     * the machine it runs on, which a remote server would not */
    double cpu_user_s, cpu_system_s;
    uint64_t page_faults;
};

struct slowfs_params;

/* Write the JSON report into buf (NUL-terminated, cut at size - 1) and
 * return the length it needed, like snprintf. */
size_t slowfs_stats_json(char *buf, size_t size, const struct slowfs_stats *stats,
                         const struct slowfs_params *params, double uptime_s);

#endif
