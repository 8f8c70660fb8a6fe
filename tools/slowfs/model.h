/*
 * model.h - slowfs's delay model: the named profiles, the per-read seeded
 * delay draw and the congestion clock.  Pure functions with no I/O, no
 * locking and no clock reads of their own, so the FUSE layer in slowfs.c
 * decides when things happen and this file only decides how long.
 */
#ifndef SLOWFS_MODEL_H
#define SLOWFS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every knob of the emulated server.  Times in milliseconds, as on the
 * command line; 0 switches a feature off unless said otherwise. */
struct slowfs_params {
    const char *profile;       /* name of the profile these started from */
    uint64_t seed;             /* keys every random draw (see slowfs_draw) */
    double floor_ms;           /* fixed cost of every read: RPC round trip */
    double latency_ms;         /* median of the lognormal body on top of the floor */
    double sigma;              /* lognormal shape; 0 makes the body constant */
    double tail_prob;          /* chance that a read also stalls (0..1) */
    double tail_scale_ms;      /* Pareto x_m: the shortest stall */
    double tail_alpha;         /* Pareto shape; near 1 is heavy, 3 is mild */
    double tail_max_ms;        /* stalls are cut here (a client-side timeout) */
    unsigned max_concurrent;   /* reads served at once; beyond it FIFO queue; 0 = no cap */
    double bandwidth_mbps;     /* shared link, 10^6 bytes per second; 0 = unlimited */
    double congestion_every_s; /* one episode starts every this many seconds; 0 = none */
    double congestion_for_s;   /* each episode lasts this long */
    double congestion_factor;  /* latencies are multiplied by this inside one */
    double meta_latency_ms;    /* getattr, open, opendir/readdir, readlink */
};

/* A named profile: its parameters and one line on what it stands for. */
struct slowfs_profile {
    const char *name;
    const char *emulates;
    struct slowfs_params params;
};

/* The built-in profiles, terminated by an entry with a NULL name.  Static
 * storage, valid for the life of the process. */
extern const struct slowfs_profile slowfs_profiles[];

/* The profile called `name`, or NULL when there is none. */
const struct slowfs_profile *slowfs_profile_find(const char *name);

/* An error message for parameters that make no sense, or NULL when they
 * are usable.  The message is a static string. */
const char *slowfs_params_check(const struct slowfs_params *params);

/* One read's seeded service delay, before congestion, queueing and the
 * bandwidth cost are added. */
struct slowfs_draw {
    uint64_t body_ns;  /* floor + lognormal body: what congestion multiplies */
    uint64_t stall_ns; /* the Pareto stall, 0 when the tail did not fire */
};

/* Draw the delay of the `occurrence`-th read (0 for the first) of
 * `length` bytes at `offset` of the file at `path` (its path inside the
 * mount, starting with '/').  A pure function of its arguments and the
 * seed in `params`: the same read gets the same delay whatever else is
 * going on. */
struct slowfs_draw slowfs_draw(const struct slowfs_params *params, const char *path,
                               uint64_t offset, uint64_t length, uint64_t occurrence);

/* 64-bit key of (path, offset, length), for counting repeated reads. */
uint64_t slowfs_range_key(const char *path, uint64_t offset, uint64_t length);

/* The latency multiplier at `since_mount_ns` after the mount: the
 * congestion factor inside an episode, 1 elsewhere.  Episodes start at
 * phase + k * every, where the phase is drawn from the seed in
 * [0, every - for), so different seeds put them at different times. */
double slowfs_congestion(const struct slowfs_params *params, uint64_t since_mount_ns);

/* That phase: the first episode's start after the mount, in ns; UINT64_MAX
 * when there are no episodes.  The stats report it (congestion_phase_s),
 * so that a benchmark can say where the episodes fell in what it timed. */
uint64_t slowfs_congestion_phase_ns(const struct slowfs_params *params);

/* The bytes-per-second cost of `bytes` on the shared link, in ns; 0 when
 * bandwidth is unlimited. */
uint64_t slowfs_transfer_ns(const struct slowfs_params *params, uint64_t bytes);

#endif
