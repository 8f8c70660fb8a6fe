/*
 * transform_place.h - where the daemon's transforms run (docs/transforms.md,
 * "Placement"): the measurements (the CPUs larderd may use, from
 * /proc/stat; its own CPU time, from getrusage; its transform queue's wait
 * and run times; the readers' reported waits and budgets) and the
 * decision, with hysteresis:
 *
 *   contention = CPU time others took / CPU time larderd left unused, on
 *   larderd's CPUs, smoothed over about a second;
 *   daemon -> reader when contention stays above the limit for 1 s (a
 *   limit of 0: always the reader);
 *   reader -> daemon when it stays below (limit - 20 points) for 3 s;
 *   and while at the daemon, one request that finds every worker busy and
 *   whose predicted queue wait plus run time exceeds its reader's budget,
 *   or whose reader reports waiting more than twice its budget, is
 *   answered raw (shed), without changing the mode.
 *
 * Measuring the others' share of what the daemon leaves, not the total,
 * keeps the daemon's own transforms from switching it off (which would
 * then switch it back on: an oscillation).  placement_decide is pure, so
 * a unit test feeds it samples.
 */
#ifndef LARDERD_TRANSFORM_PLACE_H
#define LARDERD_TRANSFORM_PLACE_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#define PLACE_SAMPLE_MS 250             /* CPU is sampled at most this often */
#define PLACE_ENTER_MS 1000             /* contention above the limit this long: to the reader */
#define PLACE_LEAVE_MS 3000             /* below the limit less the band this long: back */
#define PLACE_BAND 20                   /* percentage points of hysteresis */
#define PLACE_DEFAULT_BUDGET_US 1000000 /* a reader that gives no budget */

/* One CPU sample: the fractions (0..1) of larderd's CPUs over the last interval. */
struct place_sample {
    double busy; /* all work on them */
    double self; /* larderd's own */
};

struct placement {
    pthread_mutex_t lock;
    int limit;           /* --transform-cpu-limit, percent */
    bool at_reader;      /* the mode: transforms left to the readers */
    int64_t since_ms;    /* in this mode since */
    int64_t crossing_ms; /* when contention crossed toward the other mode; 0: it did not */
    uint64_t switches;
    double contention; /* smoothed, 0..1 */
    struct place_sample last;
    /* sampling state */
    int64_t sampled_ms;
    uint64_t cpu_busy, cpu_total; /* /proc/stat ticks of larderd's CPUs */
    uint64_t self_us;             /* larderd's CPU time */
    int ncpu;                     /* larderd's CPUs */
    /* the transform queue: smoothed, microseconds */
    double wait_us, run_us;
    /* the readers, as last reported */
    uint32_t reader_wait_us, reader_budget_us;
    bool trace; /* LARDERD_TRACE_PLACEMENT set: each admission's inputs to stderr */
};

void placement_init(struct placement *p, int limit, int64_t now_ms);
void placement_free(struct placement *p);
/* Feed one sample at now_ms (lock held or single-threaded): updates the
 * contention and the mode. */
void placement_decide(struct placement *p, int64_t now_ms, const struct place_sample *s);
/* Sample the CPUs when PLACE_SAMPLE_MS passed, and decide (takes the lock). */
void placement_tick(struct placement *p, int64_t now_ms);
/*
 * Whether a request of a reader (its wait and budget, microseconds) is
 * transformed here: false in the reader mode, or when `queued` transforms
 * ahead of it on `jobs` workers would keep it past its budget (*shed).
 */
bool placement_admit(struct placement *p, int64_t now_ms, uint32_t reader_wait_us,
                     uint32_t reader_budget_us, uint64_t queued, int jobs, bool *shed);
/*
 * One line of /proc/stat: when it is a "cpuN" line of a CPU in `set`, add
 * its busy and total ticks to *busy and *total and return true; any other
 * line (the aggregate "cpu ", intr, ...) is false and adds nothing.
 */
bool placement_cpu_line(const char *line, const cpu_set_t *set, uint64_t *busy, uint64_t *total);
/* A transform's queue wait and run time, microseconds. */
void placement_note(struct placement *p, uint64_t wait_us, uint64_t run_us);

#endif
