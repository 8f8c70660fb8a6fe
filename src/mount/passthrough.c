/*
 * passthrough.c - FUSE passthrough for files the node cache holds whole,
 * spoken through libfuse 3.14's custom I/O (passthrough.h says what and
 * why): which opens, the per-inode modes, the backing ids and the holds.
 * The messages themselves are passthrough_proto.c's.
 */
#include "passthrough.h"
#include "passthrough_proto.h"

#include "mount.h"

#include "cache.h"
#include "dataset.h"
#include "fill.h"
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* the backing-file ioctls of FUSE 7.40 (include/uapi/linux/fuse.h of Linux 6.9) */
struct pt_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PT_IOC_BACKING_OPEN _IOW(229, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

enum state {
    STATE_OFF = -1, /* why_off says why */
    STATE_NONE = 0, /* INIT not seen yet */
    STATE_OFFERED,  /* the INIT reply asked for passthrough */
    STATE_ACTIVE,   /* a backing file was registered */
};

/* One inode open as a passthrough candidate (counts under the mutex). */
struct entry {
    uint64_t ino;
    uint32_t cached;      /* opens served by the mount (page cache mode) */
    uint32_t passthrough; /* opens served by the kernel from backing_fd */
    int32_t backing_id;   /* while passthrough > 0 */
    int backing_fd;       /* a read-only descriptor of the cache's data file */
    int hold;             /* larder__cache_hold's lock on the file's blocks */
    struct entry *next;
};

#define BUCKETS 256
/* Bytes of a file the mount answered reads of past which it stays served
 * by the mount: dropping fewer pages costs the opener ~10 ms or less. */
#define PAGED_KEEP (UINT64_C(64) << 20)

struct larder__mount_passthrough {
    bool enabled;
    int fuse_fd;
    _Atomic int state;
    char why_off[200]; /* "off: WHY", set once, before state turns STATE_OFF */
    pthread_mutex_t lock;
    struct entry *buckets[BUCKETS];
    _Atomic uint64_t opens, fallbacks, ids, pinned, kept_paged;
};

static struct entry *find(struct larder__mount_passthrough *p, uint64_t ino, bool create);

/* The request this thread is serving (libfuse's workers read a request and
 * answer it in the same thread), and the backing id its OPEN reply takes. */
static _Thread_local struct {
    uint32_t opcode;
    uint64_t unique;
    int32_t backing_id;
    bool patched; /* the OPEN reply carried backing_id */
} current;

/* Whether this process may register backing files (CAP_SYS_ADMIN, bit 21 of CapEff). */
static bool may_register(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return geteuid() == 0;
    char line[256];
    unsigned long long caps = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "CapEff: %llx", &caps) == 1;
    fclose(f);
    return found ? (caps >> 21) & 1 : geteuid() == 0;
}

/* Turn passthrough off for the rest of the mount, saying why once (at
 * start, before the mount's log is set up: larder__mount_passthrough_log says it). */
static void turn_off(struct larder__mount_passthrough *p, const char *why, bool log)
{
    int state = atomic_load(&p->state);
    if (state == STATE_OFF) return;
    snprintf(p->why_off, sizeof p->why_off, "off: %s", why);
    atomic_store(&p->state, STATE_OFF);
    if (log)
        larder__mount_log(LARDER_LOG_INFO,
                          "FUSE passthrough not used: %s; every read is served by the mount", why);
}

void larder__mount_passthrough_log(const struct larder__mount_passthrough *p)
{
    if (p && atomic_load(&p->state) == STATE_OFF)
        larder__mount_log(LARDER_LOG_INFO,
                          "FUSE passthrough not used: %s; every read is served by the mount",
                          p->why_off + strlen("off: "));
}

int larder__mount_passthrough_new(struct larder__mount_passthrough **out, bool enabled)
{
    struct larder__mount_passthrough *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->enabled = enabled;
    p->fuse_fd = -1;
    pthread_mutex_init(&p->lock, NULL);
    if (!enabled)
        turn_off(p, "--no-passthrough", false);
    else if (!may_register())
        turn_off(p, "registering backing files with the kernel needs CAP_SYS_ADMIN (mount as root)",
                 false);
    *out = p;
    return 0;
}

static void drop_backing(struct larder__mount_passthrough *p, struct entry *e)
{
    uint32_t id = (uint32_t)e->backing_id;
    if (e->backing_id > 0 && p->fuse_fd >= 0 && ioctl(p->fuse_fd, PT_IOC_BACKING_CLOSE, &id) < 0)
        larder__mount_log(LARDER_LOG_WARN, "FUSE passthrough: closing backing id %d: %s",
                          e->backing_id, strerror(errno));
    if (e->backing_id > 0) atomic_fetch_sub(&p->ids, 1);
    if (e->backing_fd >= 0) close(e->backing_fd);
    if (e->hold >= 0) {
        close(e->hold); /* the shared fill lock goes with it */
        atomic_fetch_sub(&p->pinned, 1);
    }
    e->backing_id = 0, e->backing_fd = -1, e->hold = -1;
}

void larder__mount_passthrough_free(struct larder__mount_passthrough *p)
{
    if (!p) return;
    for (int i = 0; i < BUCKETS; i++)
        for (struct entry *e = p->buckets[i], *next; e; e = next) {
            next = e->next;
            drop_backing(p, e);
            free(e);
        }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

bool larder__mount_passthrough_wanted(const struct larder__mount_passthrough *p)
{
    return p && atomic_load(&p->state) == STATE_NONE;
}

void larder__mount_passthrough_set_fd(struct larder__mount_passthrough *p, int fuse_fd)
{
    if (p) p->fuse_fd = fuse_fd;
}

void larder__mount_passthrough_request(struct larder__mount_passthrough *p, const void *buf,
                                       size_t length)
{
    struct larder__fuse_request r;
    if (larder__fuse_parse_request(buf, length, &r) < 0) return;
    current.opcode = r.opcode, current.unique = r.unique;
    if (p && r.init && !r.offers_passthrough && atomic_load(&p->state) == STATE_NONE)
        turn_off(p,
                 "the kernel does not offer FUSE passthrough (Linux 6.9 or later with "
                 "CONFIG_FUSE_PASSTHROUGH)",
                 true);
}

void larder__mount_passthrough_reply(struct larder__mount_passthrough *p, struct iovec *iov,
                                     int count)
{
    if (!p) return;
    if (current.opcode == FUSE_OPEN) {
        if (current.backing_id > 0 &&
            larder__fuse_patch_open_reply(iov, count, current.unique, current.backing_id) ==
                LARDER__FUSE_PATCH_DONE)
            current.patched = true;
        return;
    }
    if (current.opcode != FUSE_INIT || atomic_load(&p->state) != STATE_NONE) return;
    switch (larder__fuse_patch_init_reply(iov, count, current.unique)) {
    case LARDER__FUSE_PATCH_DONE:
        atomic_store(&p->state, STATE_OFFERED);
        break;
    case LARDER__FUSE_PATCH_WRITEBACK:
        turn_off(p, "the kernel refuses passthrough beside the writeback cache", true);
        break;
    default: /* an old kernel's INIT (or the 7.x renegotiation): left as it is */
        break;
    }
}

void larder__mount_passthrough_arm(int32_t backing_id)
{
    current.backing_id = backing_id;
    current.patched = false;
}

bool larder__mount_passthrough_disarm(void)
{
    bool patched = current.patched;
    current.backing_id = 0, current.patched = false;
    return patched;
}

enum larder__mount_open_mode larder__mount_passthrough_demote(struct larder__mount *m, uint64_t ino)
{
    struct larder__mount_passthrough *p = m->passthrough;
    larder__mount_log(LARDER_LOG_WARN,
                      "FUSE passthrough: an open reply went out without its backing id; that "
                      "open is served by the mount");
    pthread_mutex_lock(&p->lock);
    struct entry *e = find(p, ino, false);
    if (e && e->passthrough > 0 && --e->passthrough == 0) drop_backing(p, e);
    if (e) e->cached++;
    pthread_mutex_unlock(&p->lock);
    atomic_fetch_sub(&p->opens, 1);
    atomic_fetch_add(&p->fallbacks, 1);
    return e ? LARDER__MOUNT_OPEN_CACHED : LARDER__MOUNT_OPEN_PLAIN;
}

/* The entry of `ino` (made when `create`), under the lock. */
static struct entry *find(struct larder__mount_passthrough *p, uint64_t ino, bool create)
{
    struct entry **slot = &p->buckets[ino % BUCKETS];
    for (struct entry *e = *slot; e; e = e->next)
        if (e->ino == ino) return e;
    if (!create) return NULL;
    struct entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    *e = (struct entry){.ino = ino, .backing_fd = -1, .hold = -1, .next = *slot};
    *slot = e;
    return e;
}

static void forget(struct larder__mount_passthrough *p, struct entry *gone)
{
    for (struct entry **slot = &p->buckets[gone->ino % BUCKETS]; *slot; slot = &(*slot)->next)
        if (*slot == gone) {
            *slot = gone->next;
            free(gone);
            return;
        }
}

/*
 * The first passthrough open of a file: hold its blocks, look again that
 * they are all there (nothing can take them now), and register the data
 * file with the kernel.  0, or a negative code after which the open falls
 * back (and, where the kernel or the privileges refused, so does every
 * later one).  Under the lock.
 */
static int start_backing(struct larder__mount *m, struct entry *e, uint32_t shard, uint64_t size)
{
    struct larder__mount_passthrough *p = m->passthrough;
    struct larder__cache *cache = larder__dataset_cache(m->dataset);
    uint64_t first, last;
    larder__cache_blocks(cache, 0, size, &first, &last);
    if ((e->hold = larder__cache_hold(cache, shard, first, last)) < 0) {
        int rc = e->hold;
        e->hold = -1;
        return rc; /* a fill or an eviction holds some of them: next open */
    }
    atomic_fetch_add(&p->pinned, 1);
    int rc = -ESTALE;
    if (!larder__fill_resident(larder__dataset_fill(m->dataset), shard, 0, size)) goto fail;
    int data = larder__cache_data_fd(cache, shard);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", data);
    /* read-only: the kernel's file for passthrough reads can never write the cache */
    if (data < 0 || (e->backing_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = data < 0 ? data : -errno;
        goto fail;
    }
    struct stat st;
    /* bytes past the FUSE file's size would be read from the data file as they are */
    if (fstat(e->backing_fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)
        goto fail;
    struct pt_backing_map map = {.fd = e->backing_fd};
    int id = ioctl(p->fuse_fd, PT_IOC_BACKING_OPEN, &map);
    if (id <= 0) {
        int err = id < 0 ? errno : EINVAL;
        rc = -err;
        char why[160];
        snprintf(why, sizeof why,
                 "the kernel refused a backing file (FUSE_DEV_IOC_BACKING_OPEN: %s)",
                 strerror(err));
        if (err == EPERM || err == ENOTTY || err == ELOOP || err == EOPNOTSUPP)
            turn_off(p, why, true);
        else
            larder__mount_log(LARDER_LOG_WARN, "FUSE passthrough: %s", why);
        goto fail;
    }
    e->backing_id = id;
    atomic_fetch_add(&p->ids, 1);
    if (atomic_exchange(&p->state, STATE_ACTIVE) != STATE_ACTIVE)
        larder__mount_log(LARDER_LOG_INFO,
                          "FUSE passthrough in use: files the node cache holds whole are read "
                          "by the kernel from the cache's data files");
    return 0;
fail:
    drop_backing(p, e);
    return rc;
}

/*
 * Whether anyone may evict from this cache: its capacity (node-wide, in the
 * shared header), this opener's borrowed share, or a node-wide capacity
 * over all the datasets of the directory (LARDER_NODE_CACHE_SIZE in some
 * process, which leaves DIR/node-share behind: cache_share.c).
 */
static bool evicting(const struct larder__mount *m, const struct larder__cache *cache)
{
    if (larder__cache_evicts(cache)) return true;
    if (!m->cache_root) return false;
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/node-share", m->cache_root);
    return getenv("LARDER_NODE_CACHE_SIZE") || stat(path, &st) == 0;
}

enum larder__mount_open_mode larder__mount_passthrough_open(struct larder__mount *m, uint64_t ino,
                                                            const struct larder__mount_node *n,
                                                            uint32_t shard, uint64_t base,
                                                            int32_t *backing_id)
{
    struct larder__mount_passthrough *p = m->passthrough;
    int state = p ? atomic_load(&p->state) : STATE_OFF;
    larder_dataset *d = m->dataset;
    /* a candidate: the file is its shard's data file byte for byte */
    if (state < STATE_OFFERED || !m->cached || n->header_length || base != 0 || n->size == 0 ||
        larder__dataset_shard_size(d, shard) != n->size)
        return LARDER__MOUNT_OPEN_PLAIN;
    struct larder__cache *cache = larder__dataset_cache(d);
    /* what can be looked at without the lock: whole, trusted, checked, and
     * in a cache that evicts nothing (a mapping of a passthrough file
     * outlives its release, and with it the hold) */
    uint64_t first, last;
    larder__cache_blocks(cache, 0, n->size, &first, &last);
    bool eligible = !evicting(m, cache) &&
                    larder__fill_resident(larder__dataset_fill(d), shard, 0, n->size) &&
                    !larder__cache_any_borrowed(cache, shard, first, last);
    /* read through the mount already: the kernel keeps those pages, and a
     * passthrough open would have it drop them all first, under the inode's
     * lock, while the file's other opens wait (650 ms of the opener's CPU
     * for 3.7 GB; the warm epoch's first step of bench/mount.sh waited 1.5
     * s on it).  Served by the mount, the pages stay and serve the reads. */
    bool paged = m->paged_bytes && atomic_load(&m->paged_bytes[ino - 1]) >= PAGED_KEEP;
    if (eligible && !paged && !larder__dataset_index(d)->unchecked) /* not needed if paged */
        eligible = larder__mount_check_cached(m, n->sample) == 0 &&
                   larder__mount_check_passed(m, n->sample);
    pthread_mutex_lock(&p->lock);
    struct entry *e = find(p, ino, true);
    enum larder__mount_open_mode mode = LARDER__MOUNT_OPEN_PLAIN;
    if (!e) {
        /* no memory to track it: served by the mount, and not counted */
    } else if (e->passthrough > 0) { /* the kernel wants every open of it so */
        e->passthrough++;
        *backing_id = e->backing_id;
        mode = LARDER__MOUNT_OPEN_PASSTHROUGH;
    } else if (e->cached == 0 && eligible && !paged && atomic_load(&p->state) >= STATE_OFFERED &&
               start_backing(m, e, shard, n->size) == 0) {
        e->passthrough = 1;
        *backing_id = e->backing_id;
        mode = LARDER__MOUNT_OPEN_PASSTHROUGH;
    } else {
        e->cached++;
        mode = LARDER__MOUNT_OPEN_CACHED;
    }
    pthread_mutex_unlock(&p->lock);
    atomic_fetch_add(mode == LARDER__MOUNT_OPEN_PASSTHROUGH ? &p->opens : &p->fallbacks, 1);
    if (mode == LARDER__MOUNT_OPEN_CACHED && eligible && paged) atomic_fetch_add(&p->kept_paged, 1);
    return mode;
}

void larder__mount_passthrough_close(struct larder__mount *m, uint64_t ino,
                                     enum larder__mount_open_mode mode)
{
    struct larder__mount_passthrough *p = m->passthrough;
    if (!p || mode == LARDER__MOUNT_OPEN_PLAIN) return;
    pthread_mutex_lock(&p->lock);
    struct entry *e = find(p, ino, false);
    if (e && mode == LARDER__MOUNT_OPEN_CACHED && e->cached > 0) e->cached--;
    if (e && mode == LARDER__MOUNT_OPEN_PASSTHROUGH && e->passthrough > 0 && --e->passthrough == 0)
        drop_backing(p, e);
    if (e && e->cached == 0 && e->passthrough == 0) forget(p, e);
    pthread_mutex_unlock(&p->lock);
}

void larder__mount_passthrough_stats(struct larder__mount_passthrough *p,
                                     struct larder__mount_passthrough_stats *out)
{
    memset(out, 0, sizeof *out);
    int state = p ? atomic_load(&p->state) : STATE_OFF;
    out->state = state == STATE_ACTIVE    ? "active"
                 : state == STATE_OFFERED ? "offered (no file opened through it yet)"
                 : state == STATE_NONE    ? "not negotiated yet"
                 : p                      ? p->why_off
                                          : "off";
    if (!p) return;
    out->opens = atomic_load(&p->opens);
    out->fallbacks = atomic_load(&p->fallbacks);
    out->backing_ids = atomic_load(&p->ids);
    out->pinned = atomic_load(&p->pinned);
    out->kept_paged = atomic_load(&p->kept_paged);
}
