/*
 * mount.h - `larder mount` (docs/mount.md): an index, or a directory or
 * URL prefix of plain files, shown read-only through FUSE, every read
 * going through liblarder's engine (node cache, node daemon, peers,
 * origin, checksums).  The parts:
 *
 *   tree.c       the names, sizes and directories, from the index alone;
 *   fs.c         the FUSE low-level operations over the tree; miss.c how
 *                much a reader's miss brings;
 *   readahead.c  per open file: sequential reads stage the blocks ahead
 *                (an adaptive window), random reads do not;
 *   stager.c     whole files staged in the background on their first
 *                open, a few large reads at a time, below the readers;
 *   adapt.c      how many: the limit grown and cut by the readers' misses;
 *   hdf5*.c      an HDF5 file's metadata (all but its datasets' raw data)
 *                found with libhdf5 and staged first (hdf5_layout.h);
 *                hdf5_order.c a registered row order over one file, its
 *                group listed through hdf5_listing.c and each member
 *                followed to its bytes by hdf5_member.c;
 *   order.c      a reader's registered sample order (the control file
 *                .larder-order), driving the plan's prefetcher;
 *   passthrough.c  FUSE passthrough: files the node cache holds whole read
 *                by the kernel from the cache's data files (passthrough.h);
 *   session.c    start-up: the source opened, a stale mount point found or
 *                cleared, the mount, daemonizing once ready, the loop,
 *                a clean unmount on SIGTERM/SIGINT/SIGHUP.
 *
 * Only src/larder/cmd_mount.c calls in, through larder__mount_run.
 */
#ifndef LARDER_MOUNT_H
#define LARDER_MOUNT_H

#include "larder.h"
#include "adapt.h"
#include "tree.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct larder__mount_options {
    const char *source;       /* an index (path or URL), or a directory / s3:// prefix of files */
    const char *mountpoint;   /* an existing directory */
    const char *cache_dir;    /* the node cache (NULL: LARDER_CACHE's; "" none) */
    const char *socket;       /* the node daemon (NULL: LARDER_SOCKET's; "" none) */
    const char *log_path;     /* where the mount's log goes once in the background (NULL: syslog) */
    bool foreground;          /* stay attached, log to stderr */
    bool force_unmount_stale; /* unmount a dead mount's mount point first */
    bool allow_other;         /* let other users read (FUSE's allow_other) */
    bool trust_index;         /* larder_open's trust_index */
    bool plain;               /* SOURCE is a tree of plain files even if it looks like an index */
    int threads;              /* FUSE worker threads at most; 0: 16 */
    uint64_t readahead_max;   /* the sequential window's largest size; 0: 32 MiB */
    int stage_on_open;        /* a file's first open stages all of it in the background:
                                 1 yes, 0 no, -1 (auto) where the cache evicts nothing */
    int stage_inflight;       /* staging reads in flight at most; 0: adaptive (stager.c) */
    bool no_passthrough;      /* never FUSE passthrough (passthrough.c), even where it could be */
};

/* What one mount keeps: set up by session.c, read by every FUSE thread. */
struct larder__mount {
    larder_dataset *dataset;
    struct larder__mount_tree *tree;
    bool cached;            /* the dataset reads through a node cache */
    bool daemon;            /* ... and/or a node daemon */
    uint64_t readahead_max; /* bytes */
    /* --stage-on-open: one flag per node, set by the open that staged the file */
    _Atomic unsigned char *staged_on_open;
    /* one counter per node: bytes of it the mount answered reads of, which
     * the kernel keeps as the FUSE file's pages (keep_cache); a file with
     * many is not given to passthrough (passthrough.c), whose first open
     * would have the kernel drop them all */
    _Atomic uint64_t *paged_bytes;
    _Atomic unsigned stage_opening; /* opens between the first-open check and the job's listing */
    /* stager.c: files being staged (under lock), pieces in flight, the limit */
    struct larder__mount_stage_job *stage_jobs;
    _Atomic unsigned stage_running;
    unsigned stage_inflight;          /* a fixed limit (--stage-inflight); 0: adaptive */
    struct larder__mount_adapt adapt; /* the adaptive limit (adapt.h), under lock */
    bool stopping;                    /* unmounting: nothing more is staged */
    _Atomic unsigned demand_waiting;  /* readers waiting on a miss now */
    bool trace;                       /* LARDER_MOUNT_TRACE: every miss logged with its time */
    unsigned dev_major, dev_minor;    /* the mount's device (its bdi's name); 0:0 unknown */
    atomic_bool readahead_raised;     /* the kernel's read-ahead was set (or tried) */
    uint32_t uid, gid;                /* the owner shown on every file */
    /* staging tasks queued or running (readahead, order prefetch): waited for at unmount */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    uint64_t staging;
    struct larder__mount_order *order;             /* the registered sample orders (order.c) */
    struct larder__mount_passthrough *passthrough; /* FUSE passthrough (passthrough.h) */
    const char *cache_root; /* the node cache's directory (absolute), or NULL */
    /* one bit per sample that passed larder__mount_check_cached; made on
     * first use, freed with the mount */
    _Atomic uint64_t *_Atomic checked;
    /* the largest sample that cache_check.c fetches again whole when its
     * cached bytes fail; 0: REPAIR_LIMIT, 256 MiB (tests set less) */
    uint64_t repair_limit;
    /* counters, for the log line at unmount */
    _Atomic uint64_t reads, read_bytes, read_errors, readahead_bytes;
};

/* Run `larder mount`: its exit status (0 once unmounted cleanly, 1 a
 * failure, whose message is printed or logged). */
int larder__mount_run(const struct larder__mount_options *options);

/* The mount's log: stderr in the foreground, the --log file or syslog
 * in the background; one line, with the time. */
void larder__mount_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * cache_check.c: before the mount hands out sample `id`'s bytes from the
 * node cache, the first time in this process that the cache holds it
 * whole, check them against its checksum (what larder_read_sample does
 * on its first read of a sample); bytes that fail are fetched again,
 * checked.  0: nothing wrong (or nothing to check: no checksums, or the
 * sample only partly cached); a negative code with larder_errmsg(): the
 * bytes are wrong and could not be put right.
 */
int larder__mount_check_cached(struct larder__mount *m, uint64_t id);
/* Whether sample `id` passed larder__mount_check_cached in this mount (its
 * bytes in the cache were hashed and matched). */
bool larder__mount_check_passed(struct larder__mount *m, uint64_t id);

/*
 * The errno a failed open or read answers for larder's code rc: ENOMEM
 * and EINTR as they are (a reader may retry, or knows it is not the
 * data), anything else EIO (larder_errmsg() and the log say what).
 */
static inline int larder__mount_errno(int rc)
{
    return rc == -ENOMEM ? ENOMEM : rc == -EINTR ? EINTR : EIO;
}

/*
 * session.c: raise the kernel's read-ahead for the mount (its bdi's
 * read_ahead_kb, which FUSE's INIT can only lower from the 128 KiB
 * default) to `kb`, so that buffered reads come as requests of up to
 * max_read rather than 128 KiB.  Once per mount, after INIT (fs.c calls
 * it on the first open); needs root (or a writable sysfs): otherwise it
 * logs what stays and how to raise it.
 */
void larder__mount_raise_readahead(struct larder__mount *m, unsigned kb);

/* The FUSE low-level operations (fs.c). */
struct fuse_lowlevel_ops;
extern const struct fuse_lowlevel_ops larder__mount_ops;

/* ---- readahead.c ---- */
/* One open file's sequential-read state (guarded by its own lock). */
struct larder__mount_stream {
    pthread_mutex_t lock;
    uint64_t next;         /* where a sequential read would start next */
    uint64_t window;       /* bytes staged ahead; 0 while reads are random */
    uint64_t staged_until; /* file offset up to which staging was asked */
};
void larder__mount_stream_init(struct larder__mount_stream *s);
void larder__mount_stream_clear(struct larder__mount_stream *s);
/*
 * A read of [offset, offset + length) of a file whose data bytes begin at
 * `header` (a .npy header before them) and lie at shard `shard` from
 * `base` on, `size` bytes of file in all: sequential reads widen the
 * window (1 MiB doubling up to readahead_max) and stage what it covers
 * that is not resident, on the engine's pool at NEAR priority; a random
 * read closes the window.
 */
void larder__mount_readahead(struct larder__mount *m, struct larder__mount_stream *s,
                             uint32_t shard, uint64_t base, uint64_t header, uint64_t size,
                             uint64_t offset, uint64_t length);
/* Stage shard bytes [offset, offset + length) in the background at `priority`, in
 * 1 MiB pieces, what is resident left out.  Bytes queued (0: nothing to do). */
uint64_t larder__mount_stage(struct larder__mount *m, uint32_t shard, uint64_t offset,
                             uint64_t length, int priority);
/* Wait until no staging task is queued or running. */
void larder__mount_stage_wait(struct larder__mount *m);
/* One staging task for shard bytes [offset, offset + length), resident or
 * not; `job` (stager.c's, or NULL) is told when it ends.  length, or 0
 * when none could be queued. */
struct larder__mount_stage_job;
uint64_t larder__mount_stage_piece(struct larder__mount *m, uint32_t shard, uint64_t offset,
                                   uint64_t length, int priority,
                                   struct larder__mount_stage_job *job);

/* ---- stager.c ---- */
/* Queue a file (shard bytes [base, base + length), sample `sample`) for
 * staging whole in the background: its head and tail at once at NEAR, the
 * rest in 4 MiB pieces at WARM, at most m->stage_inflight in flight for
 * the whole mount (half while a reader waits on a miss).  false: nothing
 * to stage into (no cache, no daemon) or no memory. */
bool larder__mount_stage_file(struct larder__mount *m, uint32_t shard, uint64_t base,
                              uint64_t length, uint64_t sample);
/* A staging piece of `job` has ended: start the next ones. */
void larder__mount_stager_done(struct larder__mount *m, struct larder__mount_stage_job *job);
/* A reader's miss has ended: staging may use all its slots again. */
/* A file was opened: the kernel's read-ahead raised unless a file is being staged. */
void larder__mount_stager_opened(struct larder__mount *m);
void larder__mount_stager_kick(struct larder__mount *m);
/* A reader's miss took `ms` milliseconds, with staging pieces in flight
 * when it began or not: the adaptive limit grows while misses stay near
 * their latency without staging, and halves when they rise (stager.c). */
void larder__mount_stager_miss(struct larder__mount *m, double ms, bool staging);
/* Unmounting: stage nothing more (pieces running end on their own). */
void larder__mount_stager_stop(struct larder__mount *m);

/* ---- miss.c ---- */
/* A reader's miss of n bytes at data offset `at` of `file` (data bytes
 * [base, base + size) of shard `shard`) into buf: bytes read, or a
 * negative code (larder_errmsg says why). */
int64_t larder__mount_read_miss(struct larder__mount *m, larder_file *file, uint32_t shard,
                                uint64_t base, uint64_t size, uint8_t *buf, uint64_t n,
                                uint64_t at);

/* ---- hdf5_stage.c ---- */
/* A file staged on open (shard bytes [base, base + length), sample
 * `sample`): if it is HDF5, a background thread scans it through the
 * cache at NEAR (hdf5_layout.h) and stages the blocks holding its metadata at
 * NEAR, unless they are spread through most of the file; the log says
 * what it found (every metadata extent with LARDER_MOUNT_TRACE).  Needs
 * a node cache; waited for at unmount like a staging task. */
void larder__mount_hdf5_stage(struct larder__mount *m, uint32_t shard, uint64_t base,
                              uint64_t length, uint64_t sample);

/* ---- order.c ---- */
struct larder__mount_order;
/* The control file's name at the mount's root: LARDER__MOUNT_ORDER_FILE (tree.h). */
int larder__mount_order_new(struct larder__mount_order **out);
void larder__mount_order_free(struct larder__mount_order *order);
/*
 * A registration written to the control file: "seed=S epoch=E rank=R
 * world=W batch=G [mode=global|locality|none] [window=STEPS]" (docs/mount.md).
 * 0, or a negative code with larder_errmsg() saying what was wrong.
 */
int larder__mount_order_register(struct larder__mount *m, const char *text, size_t length);
/* Data bytes [offset, offset + length) of sample `id` were read, of its
 * field `field` (-1: the whole sample): the registered orders that hold it
 * move on. */
void larder__mount_order_read(struct larder__mount *m, uint64_t id, int field, uint64_t offset,
                              uint64_t length);
/* What the control file reads back: the registrations and their progress. */
int larder__mount_order_describe(struct larder__mount *m, char *buf, size_t capacity);

/* ---- hdf5_order.c: registered orders over the members of one HDF5 file ---- */
struct larder__mount_file_orders;
struct larder__mount_file_order_spec {
    const char *file;    /* the file's path under the mount */
    const char *group;   /* whose members are the samples, "/" by default */
    const char *dataset; /* or NULL: whose rows are the samples (its first dimension) */
    uint64_t seed, epoch, batch, window;
    uint32_t rank, world;
};
int larder__mount_file_orders_new(struct larder__mount_file_orders **out);
void larder__mount_file_orders_free(struct larder__mount_file_orders *orders);
/* Register (or replace, for the same file, rank and world) the order of
 * torch's DistributedSampler over the group's members: 0, or a negative
 * code with larder_errmsg().  The members are listed in the background. */
int larder__mount_file_order_register(struct larder__mount *m,
                                      struct larder__mount_file_orders *orders,
                                      const struct larder__mount_file_order_spec *spec);
/* Data bytes [offset, offset + length) of the file that is sample
 * `sample`'s field `field` (-1: the whole sample) were read: the orders
 * over that file move on, and stage what comes next. */
void larder__mount_file_orders_read(struct larder__mount_file_orders *orders, uint64_t sample,
                                    int field, uint64_t offset, uint64_t length);
int larder__mount_file_orders_describe(struct larder__mount_file_orders *orders, char *buf,
                                       size_t capacity);

/* ---- hdf5_listing.c: reading an HDF5 group's index ahead, for a listing ---- */
/*
 * The reads of one listing of a file's group (hdf5_order.c): from the node
 * cache where resident, else from the origin, unchecked, by 16 KiB pages
 * kept for the listing; a group B-tree node read brings the whole tree
 * below it, a level at a time, many reads at once.  Used by one thread.
 */
/* A member's entry in its group's index: where a lookup of it reads. */
struct larder__mount_listing_symbol {
    uint64_t object; /* the member's object header (file offset) */
    uint64_t node;   /* the symbol-table node holding its entry */
    uint64_t parent; /* the B-tree node pointing to that node */
};
#define LARDER__MOUNT_LISTING_MAX_SYMBOLS (UINT64_C(1) << 22) /* noted at most */
struct larder__mount_listing {
    struct larder__mount *m;
    const _Atomic bool *stop; /* set when its owner gives it up (reads then fail), or NULL */
    uint32_t shard;
    uint64_t base, size;                           /* the file: shard bytes [base, base + size) */
    _Atomic uint64_t pages_read, pages_prefetched; /* from the origin: in turn, ahead */
    uint64_t *page_key;                            /* slot -> its page + 1, 0 empty */
    uint8_t **page_data;                           /* slot -> its page's bytes (malloc'd) */
    size_t kept;                                   /* slots used */
    /* the symbol-table nodes' entries met while reading ahead (duplicates
     * possible); larder__mount_listing_end frees them: take them before */
    struct larder__mount_listing_symbol *symbols;
    size_t symbols_count, symbols_capacity;
};
/* Ready to read the file's bytes: 0 or -ENOMEM; larder__mount_listing_end frees what it holds. */
int larder__mount_listing_begin(struct larder__mount_listing *listing);
void larder__mount_listing_end(struct larder__mount_listing *listing);
/* A larder__mount_hdf5_read_fn over a struct larder__mount_listing. */
int larder__mount_listing_read(void *listing, uint64_t offset, void *buf, size_t length);

#endif
