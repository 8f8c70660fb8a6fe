/*
 * slowfs.c - an emulated slow shared file system: a read-only FUSE mirror
 * of a directory that delays every read the way a busy Lustre or NFS
 * server would.  Benchmarks mount it over a dataset so that every reader,
 * larder or a plain PyTorch DataLoader, pays the same cost.
 *
 * A read goes through four stages:
 *   1. its seeded delay is drawn (model.c) from (seed, path, offset,
 *      length, occurrence), so it never depends on thread scheduling;
 *   2. it queues FIFO for one of max_concurrent service slots;
 *   3. holding the slot, it waits out the drawn delay times the congestion
 *      factor of the moment, then its transfer on the shared link;
 *   4. it releases the slot and returns the source's bytes.
 * Metadata operations wait a fixed, smaller latency and take no slot.
 *
 * Every file is opened with direct_io, so the kernel page cache never
 * answers a read: a second read of the same bytes pays again, as it would
 * from a cold shared server (see README.md for why).  Counters are served
 * as JSON by the virtual file `.slowfs-stats` at the mount root and
 * printed to stderr at unmount.
 */
#define FUSE_USE_VERSION 312

#include "model.h"
#include "stats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define STATS_NAME ".slowfs-stats"
#define STATS_PATH "/" STATS_NAME
#define DEFAULT_THREADS 128

/* How often each (path, offset, length) has been read: an open-addressing
 * table keyed by slowfs_range_key (0 stands in for a free slot). */
struct occurrences {
    uint64_t *keys;
    uint64_t *counts;
    size_t capacity; /* a power of two */
    size_t used;
};

/* The mounted file system.  One instance, reached through fuse_get_context. */
struct slowfs {
    struct slowfs_params params;
    int source_fd;     /* the mirrored directory */
    uint64_t mount_ns; /* monotonic time at mount: the congestion clock's zero */

    /* One lock for the queue, the link, the occurrence table and the
     * counters: each holds it for well under a microsecond, against
     * delays in milliseconds. */
    pthread_mutex_t lock;
    pthread_cond_t turn;     /* signalled whenever a slot frees or a reader enters */
    uint64_t next_ticket;    /* FIFO ticket the next arriving read gets */
    uint64_t serving_ticket; /* the ticket whose turn it is to take a slot */
    uint64_t link_free_ns;   /* when the shared link finishes its last transfer */
    struct occurrences seen;
    struct slowfs_stats stats;
};

/* An open file: the source descriptor, or the stats snapshot taken at open
 * so a reader sees one consistent report however it splits its reads. */
struct handle {
    int fd;
    char *snapshot;
    size_t snapshot_len;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static struct slowfs *get_fs(void)
{
    return fuse_get_context()->private_data;
}

/* The source-relative path of a mount path: "/" is ".", "/a/b" is "a/b". */
static const char *relative(const char *path)
{
    while (*path == '/')
        path++;
    return *path ? path : ".";
}

/* Count one more read of `key` and return how many came before it.
 * Called with the lock held.  On allocation failure the count restarts
 * from 0 for new keys, which only weakens determinism, never correctness. */
static uint64_t occurrence_next(struct occurrences *seen, uint64_t key)
{
    if (key == 0) key = 1;
    if (2 * (seen->used + 1) > seen->capacity) {
        size_t capacity = seen->capacity ? 2 * seen->capacity : 4096;
        uint64_t *keys = calloc(capacity, sizeof *keys);
        uint64_t *counts = calloc(capacity, sizeof *counts);
        if (keys && counts) {
            for (size_t i = 0; i < seen->capacity; i++) {
                if (!seen->keys[i]) continue;
                size_t j = seen->keys[i] & (capacity - 1);
                while (keys[j])
                    j = (j + 1) & (capacity - 1);
                keys[j] = seen->keys[i];
                counts[j] = seen->counts[i];
            }
            free(seen->keys);
            free(seen->counts);
            seen->keys = keys;
            seen->counts = counts;
            seen->capacity = capacity;
        } else {
            free(keys);
            free(counts);
            if (seen->used + 1 >= seen->capacity) return 0;
        }
    }
    size_t i = key & (seen->capacity - 1);
    while (seen->keys[i] && seen->keys[i] != key)
        i = (i + 1) & (seen->capacity - 1);
    if (!seen->keys[i]) {
        seen->keys[i] = key;
        seen->used++;
    }
    return seen->counts[i]++;
}

/* Metadata latency: fixed, scaled by congestion (the metadata server is
 * as busy as the rest), and outside the read slots (a separate server). */
static void meta_delay(struct slowfs *fs)
{
    if (!(fs->params.meta_latency_ms > 0)) {
        pthread_mutex_lock(&fs->lock);
        fs->stats.meta_ops++;
        pthread_mutex_unlock(&fs->lock);
        return;
    }
    uint64_t start = now_ns();
    double factor = slowfs_congestion(&fs->params, start - fs->mount_ns);
    uint64_t delay = (uint64_t)(fs->params.meta_latency_ms * factor * 1e6);
    pthread_mutex_lock(&fs->lock);
    fs->stats.meta_ops++;
    fs->stats.meta_delay_ns += delay;
    pthread_mutex_unlock(&fs->lock);
    sleep_until(start + delay);
}

/* Wait, FIFO, for a service slot; with no cap, just count the reader in.
 * Called with the lock held. */
static void slot_acquire(struct slowfs *fs)
{
    struct slowfs_stats *s = &fs->stats;
    unsigned cap = fs->params.max_concurrent;
    if (cap) {
        uint64_t ticket = fs->next_ticket++;
        if (ticket != fs->serving_ticket || s->in_flight >= cap) {
            s->queued++;
            if (s->queued > s->max_queue_depth) s->max_queue_depth = s->queued;
            while (ticket != fs->serving_ticket || s->in_flight >= cap)
                pthread_cond_wait(&fs->turn, &fs->lock);
            s->queued--;
        }
        fs->serving_ticket++;
        /* the next in line may find a slot free too */
        pthread_cond_broadcast(&fs->turn);
    }
    s->in_flight++;
    if (s->in_flight > s->max_in_flight) s->max_in_flight = s->in_flight;
}

/* Called with the lock held. */
static void slot_release(struct slowfs *fs)
{
    fs->stats.in_flight--;
    if (fs->params.max_concurrent) pthread_cond_broadcast(&fs->turn);
}

/* The bytes of [offset, offset + size) the source file holds now: up to
 * its end (it may grow), 0 past it, or -errno. */
static int bytes_at(int fd, size_t size, off_t offset)
{
    struct stat st;
    if (fstat(fd, &st) < 0) return -errno;
    if (offset < 0 || offset >= st.st_size) return 0;
    off_t left = st.st_size - offset;
    return (int)((off_t)size < left ? (off_t)size : left);
}

/* A bufvec of one buffer of n bytes (the caller fills it), or NULL. */
static struct fuse_bufvec *bufvec(size_t n)
{
    struct fuse_bufvec *bv = malloc(sizeof *bv);
    if (bv) *bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(n);
    return bv;
}

/*
 * A read is answered with the source file's descriptor and offset, not
 * with its bytes: libfuse splices them from the page cache into the
 * kernel's answer.  The emulator runs on the cores of the machine it
 * emulates a remote server for, and reading into a buffer of its own
 * cost it most of a core while a benchmark's origin read 250 MB/s
 * (bench/mount.sh's cold epoch on 2 cores: a fresh buffer per read, a
 * page fault per 4 KiB of it, then a copy out): CPU the readers under
 * test then lacked, which a real server's work never takes from them.
 * The copy now happens after the delay rather than inside it; at memory
 * speed it is a fraction of a millisecond per MiB against the delays.
 */
static int op_read_buf(const char *path, struct fuse_bufvec **bufp, size_t size, off_t offset,
                       struct fuse_file_info *fi)
{
    struct slowfs *fs = get_fs();
    struct handle *h = (struct handle *)(uintptr_t)fi->fh;
    if (h->snapshot) {
        size_t n = (size_t)offset >= h->snapshot_len ? 0 : h->snapshot_len - (size_t)offset;
        if (n > size) n = size;
        struct fuse_bufvec *bv = bufvec(n);
        if (!bv || (n && !(bv->buf[0].mem = malloc(n)))) {
            free(bv);
            return -ENOMEM;
        }
        if (n) memcpy(bv->buf[0].mem, h->snapshot + offset, n);
        *bufp = bv;
        return 0;
    }

    uint64_t arrival = now_ns();
    /* A read at end of file is answered at once, as a client that knows
     * the file's size would (otherwise every reader that reads until a 0
     * return would pay one read more). */
    int result = bytes_at(h->fd, size, offset);
    struct fuse_bufvec *bv = bufvec(result > 0 ? (size_t)result : 0);
    if (!bv) return -ENOMEM;
    if (result == 0) {
        pthread_mutex_lock(&fs->lock);
        fs->stats.eof_reads++;
        pthread_mutex_unlock(&fs->lock);
        *bufp = bv;
        return 0;
    }
    pthread_mutex_lock(&fs->lock);
    uint64_t occurrence =
        occurrence_next(&fs->seen, slowfs_range_key(path, (uint64_t)offset, size));
    pthread_mutex_unlock(&fs->lock);
    /* drawn outside the lock: a pure function, the same whenever it runs */
    struct slowfs_draw draw = slowfs_draw(&fs->params, path, (uint64_t)offset, size, occurrence);

    pthread_mutex_lock(&fs->lock);
    slot_acquire(fs);
    pthread_mutex_unlock(&fs->lock);

    uint64_t admitted = now_ns();
    double factor = slowfs_congestion(&fs->params, admitted - fs->mount_ns);
    uint64_t deadline = admitted + (uint64_t)((double)draw.body_ns * factor) + draw.stall_ns;
    sleep_until(deadline);
    if (result > 0 && fs->params.bandwidth_mbps > 0) {
        /* One link shared by every reader: a transfer takes its place on
         * it when its latency has passed (reserving earlier would make a
         * fast read wait behind a slow one's future transfer), then takes
         * bytes / bandwidth after whatever is ahead of it. */
        uint64_t transfer = slowfs_transfer_ns(&fs->params, (uint64_t)result);
        pthread_mutex_lock(&fs->lock);
        uint64_t now = now_ns();
        uint64_t start = now > fs->link_free_ns ? now : fs->link_free_ns;
        fs->link_free_ns = start + transfer;
        uint64_t end = fs->link_free_ns;
        pthread_mutex_unlock(&fs->lock);
        sleep_until(end);
    }
    uint64_t done = now_ns();

    pthread_mutex_lock(&fs->lock);
    slot_release(fs);
    struct slowfs_stats *s = &fs->stats;
    if (result < 0) {
        s->read_errors++;
    } else {
        s->reads++;
        s->bytes += (uint64_t)result;
    }
    s->drawn_delay_ns += draw.body_ns + draw.stall_ns;
    if (draw.stall_ns) s->tail_stalls++;
    if (factor > 1) s->congested_reads++;
    slowfs_hist_add(&s->read_wait, done - arrival);
    slowfs_hist_add(&s->queue_wait, admitted - arrival);
    slowfs_hist_add(&s->service, done - admitted);
    pthread_mutex_unlock(&fs->lock);
    if (result < 0) {
        free(bv);
        return result;
    }
    bv->buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    bv->buf[0].fd = h->fd;
    bv->buf[0].pos = offset;
    *bufp = bv;
    return 0;
}

/* The JSON report, malloc'd; NULL when out of memory. */
static char *stats_report(struct slowfs *fs, size_t *len)
{
    pthread_mutex_lock(&fs->lock);
    struct slowfs_stats snapshot = fs->stats;
    pthread_mutex_unlock(&fs->lock);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        snapshot.cpu_user_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
        snapshot.cpu_system_s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        snapshot.page_faults = (uint64_t)(ru.ru_minflt + ru.ru_majflt);
    }
    double uptime = (double)(now_ns() - fs->mount_ns) / 1e9;
    size_t need = slowfs_stats_json(NULL, 0, &snapshot, &fs->params, uptime);
    char *text = malloc(need + 1);
    if (!text) return NULL;
    *len = slowfs_stats_json(text, need + 1, &snapshot, &fs->params, uptime);
    return text;
}

static int op_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    struct slowfs *fs = get_fs();
    if (strcmp(path, STATS_PATH) == 0) {
        /* Size 0: the report's length changes with every read, and
         * direct_io reads go on to end of file whatever st_size says. */
        memset(st, 0, sizeof *st);
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_uid = getuid();
        st->st_gid = getgid();
        return 0;
    }
    (void)fi; /* by path even when open: the mirror is read-only, paths never move */
    meta_delay(fs);
    return fstatat(fs->source_fd, relative(path), st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

static int op_open(const char *path, struct fuse_file_info *fi)
{
    struct slowfs *fs = get_fs();
    if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
    struct handle *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->fd = -1;
    if (strcmp(path, STATS_PATH) == 0) {
        h->snapshot = stats_report(fs, &h->snapshot_len);
        if (!h->snapshot) {
            free(h);
            return -ENOMEM;
        }
    } else {
        meta_delay(fs);
        h->fd = openat(fs->source_fd, relative(path), O_RDONLY | O_CLOEXEC);
        if (h->fd < 0) {
            int err = errno;
            free(h);
            return -err;
        }
    }
    /* bypass the page cache: every read reaches op_read and pays */
    fi->direct_io = 1;
    fi->keep_cache = 0;
    fi->fh = (uint64_t)(uintptr_t)h;
    return 0;
}

static int op_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    struct handle *h = (struct handle *)(uintptr_t)fi->fh;
    if (h->fd >= 0) close(h->fd);
    free(h->snapshot);
    free(h);
    return 0;
}

static int op_opendir(const char *path, struct fuse_file_info *fi)
{
    struct slowfs *fs = get_fs();
    int fd = openat(fs->source_fd, relative(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    DIR *dir = fdopendir(fd);
    if (!dir) {
        int err = errno;
        close(fd);
        return -err;
    }
    fi->fh = (uint64_t)(uintptr_t)dir;
    return 0;
}

/* The whole listing in one call (offsets 0): the high-level library buffers
 * it, so one listing pays one metadata latency.  The stats file is not
 * listed, so a mirrored tree lists exactly like its source. */
static int op_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t offset,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)path, (void)offset, (void)flags;
    struct slowfs *fs = get_fs();
    DIR *dir = (DIR *)(uintptr_t)fi->fh;
    meta_delay(fs);
    rewinddir(dir);
    struct dirent *entry;
    errno = 0;
    while ((entry = readdir(dir)) != NULL) {
        struct stat st = {.st_ino = entry->d_ino, .st_mode = (mode_t)DTTOIF(entry->d_type)};
        if (fill(buf, entry->d_name, &st, 0, 0)) break;
    }
    return errno ? -errno : 0;
}

static int op_releasedir(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    closedir((DIR *)(uintptr_t)fi->fh);
    return 0;
}

static int op_readlink(const char *path, char *buf, size_t size)
{
    struct slowfs *fs = get_fs();
    meta_delay(fs);
    ssize_t n = readlinkat(fs->source_fd, relative(path), buf, size - 1);
    if (n < 0) return -errno;
    buf[n] = '\0';
    return 0;
}

static int op_statfs(const char *path, struct statvfs *st)
{
    (void)path;
    return fstatvfs(get_fs()->source_fd, st) < 0 ? -errno : 0;
}

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    /* No page cache, no readahead: the kernel must pass each read through
     * at the size the reader asked for, so each read pays exactly once. */
    cfg->direct_io = 1;
    cfg->kernel_cache = 0;
    cfg->auto_cache = 0;
    conn->max_readahead = 0;
    /* answers spliced from the source's page cache (op_read_buf) */
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
    return get_fs();
}

static const struct fuse_operations operations = {
    .init = op_init,
    .getattr = op_getattr,
    .open = op_open,
    .read_buf = op_read_buf,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .readlink = op_readlink,
    .statfs = op_statfs,
};

/* ---- command line ---- */

enum {
    OPT_PROFILE = 256,
    OPT_SEED,
    OPT_MAX_CONCURRENT,
    OPT_THREADS,
    OPT_HELP,
    OPT_NUMBER, /* the plain numeric parameters: OPT_NUMBER + index in numbers[] */
};

/* The parameters that are just a number, by option name. */
static const struct {
    const char *name;
    size_t offset; /* of the double in struct slowfs_params */
} numbers[] = {
    {"floor-ms", offsetof(struct slowfs_params, floor_ms)},
    {"latency-ms", offsetof(struct slowfs_params, latency_ms)},
    {"sigma", offsetof(struct slowfs_params, sigma)},
    {"tail-prob", offsetof(struct slowfs_params, tail_prob)},
    {"tail-scale-ms", offsetof(struct slowfs_params, tail_scale_ms)},
    {"tail-alpha", offsetof(struct slowfs_params, tail_alpha)},
    {"tail-max-ms", offsetof(struct slowfs_params, tail_max_ms)},
    {"bandwidth", offsetof(struct slowfs_params, bandwidth_mbps)},
    {"congestion-every", offsetof(struct slowfs_params, congestion_every_s)},
    {"congestion-for", offsetof(struct slowfs_params, congestion_for_s)},
    {"congestion-factor", offsetof(struct slowfs_params, congestion_factor)},
    {"meta-latency-ms", offsetof(struct slowfs_params, meta_latency_ms)},
};
#define NUMBERS (sizeof numbers / sizeof numbers[0])

/* getopt's table: the fixed options, then one per entry of numbers[]. */
static struct option long_options[5 + NUMBERS + 1] = {
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"max-concurrent", required_argument, NULL, OPT_MAX_CONCURRENT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"help", no_argument, NULL, OPT_HELP},
};

static void fill_long_options(void)
{
    for (size_t i = 0; i < NUMBERS; i++)
        long_options[5 + i] =
            (struct option){numbers[i].name, required_argument, NULL, OPT_NUMBER + (int)i};
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: slowfs SOURCE_DIR MOUNTPOINT [options]\n"
            "Mirror SOURCE_DIR read-only at MOUNTPOINT, delaying every read like a busy\n"
            "shared file system.  Unmount with `fusermount3 -u MOUNTPOINT`.\n"
            "\n"
            "  --profile NAME            start from a named profile (default none)\n"
            "  --seed N                  seed of the per-read delays (default 1)\n"
            "  --floor-ms X              fixed cost of every read\n"
            "  --latency-ms X            median of the lognormal body on top of the floor\n"
            "  --sigma S                 lognormal shape (0: every read takes the median)\n"
            "  --tail-prob P             chance a read also stalls, 0..1\n"
            "  --tail-scale-ms X         Pareto scale x_m: the shortest stall\n"
            "  --tail-alpha A            Pareto shape: near 1 heavy, above 2 mild\n"
            "  --tail-max-ms X           cap on one stall (0: none)\n"
            "  --max-concurrent N        reads served at once, the rest queue FIFO (0: no cap)\n"
            "  --bandwidth MBPS          shared link in 10^6 bytes/s (0: unlimited)\n"
            "  --congestion-every S      start a congestion episode every S seconds (0: none)\n"
            "  --congestion-for S        each episode lasts S seconds\n"
            "  --congestion-factor M     latencies are multiplied by M during one\n"
            "  --meta-latency-ms X       delay of getattr, open, readdir, readlink\n"
            "  --threads N               FUSE worker threads (default %d)\n"
            "  -f                        stay in the foreground\n"
            "  -d                        FUSE debug output (implies -f)\n"
            "  -o OPTIONS                extra FUSE mount options\n"
            "  --help                    this text\n"
            "\n"
            "Counters: cat MOUNTPOINT/" STATS_NAME " (JSON; also printed to stderr at unmount).\n"
            "\nprofiles:\n",
            DEFAULT_THREADS);
    for (const struct slowfs_profile *p = slowfs_profiles; p->name; p++) {
        const struct slowfs_params *q = &p->params;
        fprintf(out, "  %-17s %s\n", p->name, p->emulates);
        if (strcmp(p->name, "none") == 0) continue;
        fprintf(out,
                "  %-17s floor %g ms, median %g ms, sigma %g, tail %g x Pareto(%g ms, %g) "
                "<= %g ms,\n  %-17s cap %u, %g MB/s, congestion every %g s for %g s x%g, "
                "meta %g ms\n",
                "", q->floor_ms, q->latency_ms, q->sigma, q->tail_prob, q->tail_scale_ms,
                q->tail_alpha, q->tail_max_ms, "", q->max_concurrent, q->bandwidth_mbps,
                q->congestion_every_s, q->congestion_for_s, q->congestion_factor,
                q->meta_latency_ms);
    }
}

static int bad_usage(const char *fmt, const char *what)
{
    fprintf(stderr, "slowfs: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\nTry 'slowfs --help'.\n");
    return 2;
}

/* Parse a number into *value; false if `text` is not one, whole. */
static bool parse_number(const char *text, double *value)
{
    char *end;
    errno = 0;
    *value = strtod(text, &end);
    return end != text && *end == '\0' && errno == 0;
}

struct options {
    struct slowfs_params params;
    const char *source;
    const char *mountpoint;
    bool foreground, debug;
    unsigned threads;
    char extra[1024]; /* -o options, comma-joined */
};

/* Parse a whole unsigned integer no larger than `max`; false if it is not. */
static bool parse_unsigned(const char *text, unsigned long long max, unsigned long long *value)
{
    char *end;
    errno = 0;
    *value = strtoull(text, &end, 0);
    return end != text && *end == '\0' && errno == 0 && text[0] != '-' && *value <= max;
}

/* Two passes over argv: the profile first, then every override on top of
 * it, so `--latency-ms 5 --profile nfs-flash` means what it says.  Returns
 * -1 to go on, or the exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
    fill_long_options();
    const char *profile = "none";
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "fdo:h", long_options, NULL)) != -1) {
        if (opt == OPT_HELP || opt == 'h') {
            usage(stdout);
            return 0;
        }
        if (opt == OPT_PROFILE) profile = optarg;
    }
    const struct slowfs_profile *p = slowfs_profile_find(profile);
    if (!p) return bad_usage("unknown profile '%s' (see --help)", profile);
    o->params = p->params;
    o->params.seed = 1;
    o->threads = DEFAULT_THREADS;

    optind = 0; /* GNU: rescan from the start */
    opterr = 1;
    while ((opt = getopt_long(argc, argv, "fdo:", long_options, NULL)) != -1) {
        unsigned long long whole;
        if (opt >= OPT_NUMBER && opt < OPT_NUMBER + (int)NUMBERS) {
            double *field = (double *)((char *)&o->params + numbers[opt - OPT_NUMBER].offset);
            if (!parse_number(optarg, field)) return bad_usage("not a number: '%s'", optarg);
        } else if (opt == 'f') {
            o->foreground = true;
        } else if (opt == 'd') {
            o->debug = o->foreground = true;
        } else if (opt == 'o') {
            if (strlen(o->extra) + strlen(optarg) + 2 > sizeof o->extra)
                return bad_usage("too many -o options at '%s'", optarg);
            if (o->extra[0]) strcat(o->extra, ",");
            strcat(o->extra, optarg);
        } else if (opt == OPT_SEED) {
            if (!parse_unsigned(optarg, UINT64_MAX, &whole))
                return bad_usage("bad --seed '%s'", optarg);
            o->params.seed = whole;
        } else if (opt == OPT_MAX_CONCURRENT) {
            if (!parse_unsigned(optarg, 1000000, &whole))
                return bad_usage("bad --max-concurrent '%s'", optarg);
            o->params.max_concurrent = (unsigned)whole;
        } else if (opt == OPT_THREADS) {
            if (!parse_unsigned(optarg, 100000, &whole) || whole < 1)
                return bad_usage("bad --threads '%s'", optarg);
            o->threads = (unsigned)whole;
        } else if (opt != OPT_PROFILE) {
            return bad_usage("%s", "bad option");
        }
    }
    if (o->params.congestion_every_s > 0 && o->params.congestion_factor == 0)
        return bad_usage("%s", "--congestion-every needs --congestion-factor");
    const char *problem = slowfs_params_check(&o->params);
    if (problem) return bad_usage("%s", problem);
    if (argc - optind != 2) return bad_usage("%s", "need SOURCE_DIR and MOUNTPOINT");
    o->source = argv[optind];
    o->mountpoint = argv[optind + 1];
    return -1;
}

/* allow_other lets other users (a benchmark's worker running as someone
 * else) read the mount; fusermount3 refuses it for non-root users unless
 * /etc/fuse.conf says user_allow_other, so ask only when it will work. */
static bool allow_other_available(void)
{
    if (geteuid() == 0) return true;
    FILE *conf = fopen("/etc/fuse.conf", "r");
    if (!conf) return false;
    char line[256];
    bool found = false;
    while (!found && fgets(line, sizeof line, conf)) {
        const char *p = line + strspn(line, " \t");
        found = strncmp(p, "user_allow_other", 16) == 0;
    }
    fclose(conf);
    return found;
}

int main(int argc, char **argv)
{
    struct options options = {0};
    int status = parse_options(argc, argv, &options);
    if (status >= 0) return status;

    /* libfuse splices an answer only when its pipe holds it whole; a pipe
     * grows to /proc/sys/fs/pipe-max-size (1 MiB) at most without
     * CAP_SYS_RESOURCE, so a 1 MiB read is answered from a buffer libfuse
     * mallocs and frees per read.  glibc served each from a fresh mmap:
     * a page fault per 4 KiB, 940 k faults in one cold epoch of
     * bench/mount.sh (24-126 k since), on the cores of the machine under
     * test.  Kept in the heap instead: */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);

    static struct slowfs fs; /* static: reachable from the callbacks, zeroed */
    fs.params = options.params;
    pthread_mutex_init(&fs.lock, NULL);
    pthread_cond_init(&fs.turn, NULL);
    fs.source_fd = open(options.source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fs.source_fd < 0) {
        fprintf(stderr, "slowfs: %s: %s\n", options.source, strerror(errno));
        return 1;
    }

    char mount_options[1400];
    snprintf(mount_options, sizeof mount_options, "ro,default_permissions,fsname=slowfs%s%s%s",
             allow_other_available() ? ",allow_other" : "", options.extra[0] ? "," : "",
             options.extra);
    char *fuse_argv[] = {argv[0], "-o", mount_options, "-d", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(options.debug ? 4 : 3, fuse_argv);
    struct fuse *fuse = fuse_new(&args, &operations, sizeof operations, &fs);
    if (!fuse) return 1; /* libfuse has said why */
    /* Absolute, because the daemon changes to / and must still find the
     * mount point to unmount it on SIGTERM. */
    char *mountpoint = realpath(options.mountpoint, NULL);
    if (!mountpoint) {
        fprintf(stderr, "slowfs: %s: %s\n", options.mountpoint, strerror(errno));
        fuse_destroy(fuse);
        return 1;
    }
    fs.mount_ns = now_ns();
    if (fuse_mount(fuse, mountpoint) != 0) {
        free(mountpoint);
        fuse_destroy(fuse);
        return 1;
    }
    struct fuse_session *session = fuse_get_session(fuse);
    if (fuse_set_signal_handlers(session) != 0 || fuse_daemonize(options.foreground) != 0) {
        fuse_unmount(fuse);
        fuse_destroy(fuse);
        free(mountpoint);
        return 1;
    }
    fprintf(stderr, "slowfs: %s mounted at %s, profile %s, seed %llu\n", options.source, mountpoint,
            fs.params.profile, (unsigned long long)fs.params.seed);

    struct fuse_loop_config *loop = fuse_loop_cfg_create();
    /* Enough workers that reads queue in slowfs's FIFO, where they are
     * counted, rather than in the kernel. */
    fuse_loop_cfg_set_max_threads(loop, options.threads);
    /* and kept once started: libfuse's default of 10 idle workers let the
     * ones past it exit and new ones start (a stack's pages faulted in
     * each time) as reads came and went in bursts */
    fuse_loop_cfg_set_idle_threads(loop, options.threads);
    int loop_status = fuse_loop_mt(fuse, loop);
    fuse_loop_cfg_destroy(loop);

    size_t len = 0;
    char *report = stats_report(&fs, &len);
    if (report) fprintf(stderr, "slowfs: unmounted; counters:\n%s", report);
    free(report);
    fuse_remove_signal_handlers(session);
    fuse_unmount(fuse);
    fuse_destroy(fuse);
    fuse_opt_free_args(&args);
    free(mountpoint);
    close(fs.source_fd);
    /* A positive status is the signal that stopped the loop: SIGTERM or
     * SIGINT is how one stops slowfs, so that counts as a clean exit. */
    return loop_status >= 0 ? 0 : 1;
}
