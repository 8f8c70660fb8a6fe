/*
 * fs.c - the FUSE low-level operations of `larder mount` (mount.h).
 *
 * Metadata (lookup, getattr, readdir, open, release, statfs) is answered
 * from the tree alone; a read is one larder_file_pread through the
 * engine (a resident range: one pread of the cache file, no request to
 * anyone).  Content never changes while mounted, so every answer may be
 * kept: entries, negative entries and attributes for a day, and the
 * kernel's page cache across opens (keep_cache).  Everything that would
 * change the tree answers EROFS; the one writable name is the control
 * file LARDER__MOUNT_ORDER_FILE at the root (order.c), hidden from
 * readdir.
 */
#define FUSE_USE_VERSION 312
#include "mount.h"

#include "dataset.h"
#include "fill.h"
#include "index.h"
#include "priority.h"
#include "npy.h"
#include "passthrough.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#define FOREVER 86400.0                 /* seconds: nothing here changes while mounted */
#define CONTROL_INO (UINT64_C(1) << 62) /* the control file's inode, past any node */
#define STATS_INO (CONTROL_INO + 1)     /* the stats file's */
#define STATS_MAX 2048                  /* bytes the stats file reads back at most */
#define CONTROL_MAX 4096                /* bytes of one registration */

/* One open file. */
struct open_file {
    larder_file *file;
    const struct larder__mount_node *node;
    uint32_t shard;
    uint64_t base; /* the field's first byte in its shard */
    uint8_t header[LARDER__NPY_MAX_HEADER];
    struct larder__mount_stream stream;
    enum larder__mount_open_mode mode; /* passthrough.c's verdict, undone at release */
    /* op_open and the kernel's handle: the kernel may RELEASE the file on
     * another thread as soon as the OPEN reply is out, while op_open still
     * looks at it (open_file_put) */
    _Atomic int refs;
};

static struct larder__mount *mount_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* Drop a reference to f; the last one closes it (and undoes its mode). */
static void open_file_put(struct larder__mount *m, fuse_ino_t ino, struct open_file *f)
{
    if (atomic_fetch_sub(&f->refs, 1) != 1) return;
    larder__mount_passthrough_close(m, ino, f->mode);
    larder__mount_stream_clear(&f->stream);
    larder_file_close(f->file);
    free(f);
}

static void fill_attr(const struct larder__mount *m, fuse_ino_t ino,
                      const struct larder__mount_node *n, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_uid = m->uid, st->st_gid = m->gid;
    if (ino == CONTROL_INO || ino == STATS_INO) {
        st->st_mode = S_IFREG | (ino == CONTROL_INO ? 0644 : 0444), st->st_nlink = 1;
        return;
    }
    if (n->directory) {
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
    } else {
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)n->size;
        st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
    }
    st->st_blksize = 1 << 20; /* tells readers (stdio, cp) to read in large pieces */
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    /* max_pages is derived from max_write: 1 MiB requests both ways */
    conn->max_write = 1 << 20;
    conn->max_read = 1 << 20;
    if (conn->max_readahead > (1u << 20) || conn->max_readahead == 0) conn->max_readahead = 1 << 20;
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
    if (conn->capable & FUSE_CAP_ASYNC_READ) conn->want |= FUSE_CAP_ASYNC_READ;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct larder__mount *m = mount_of(req);
    struct fuse_entry_param e = {.attr_timeout = FOREVER, .entry_timeout = FOREVER};
    if (parent == LARDER__MOUNT_ROOT && strcmp(name, LARDER__MOUNT_ORDER_FILE) == 0) {
        e.ino = CONTROL_INO;
        e.attr_timeout = e.entry_timeout = 0; /* its size is what it reads back */
        fill_attr(m, CONTROL_INO, NULL, &e.attr);
        fuse_reply_entry(req, &e);
        return;
    }
    if (parent == LARDER__MOUNT_ROOT && strcmp(name, LARDER__MOUNT_STATS_FILE) == 0) {
        e.ino = STATS_INO;
        e.attr_timeout = e.entry_timeout = 0;
        fill_attr(m, STATS_INO, NULL, &e.attr);
        fuse_reply_entry(req, &e);
        return;
    }
    const struct larder__mount_node *dir = larder__mount_tree_node(m->tree, parent);
    if (!dir || !dir->directory) {
        fuse_reply_err(req, dir ? ENOTDIR : ENOENT);
        return;
    }
    uint64_t ino = larder__mount_tree_lookup(m->tree, parent, name, strlen(name));
    if (ino) { /* else a negative entry, kept as long */
        e.ino = ino;
        fill_attr(m, ino, larder__mount_tree_node(m->tree, ino), &e.attr);
    }
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct larder__mount *m = mount_of(req);
    const struct larder__mount_node *n = larder__mount_tree_node(m->tree, ino);
    if (!n && ino != CONTROL_INO && ino != STATS_INO) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct stat st;
    fill_attr(m, ino, n, &st);
    fuse_reply_attr(req, &st, ino == CONTROL_INO || ino == STATS_INO ? 0 : FOREVER);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                       struct fuse_file_info *fi)
{
    (void)fi;
    struct larder__mount *m = mount_of(req);
    const struct larder__mount_node *dir = larder__mount_tree_node(m->tree, ino);
    if (!dir || !dir->directory) {
        fuse_reply_err(req, dir ? ENOTDIR : ENOENT);
        return;
    }
    if (size > (1 << 20)) size = 1 << 20;
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    /* offsets: 1 ".", 2 "..", 3 + i the i-th child */
    for (uint64_t at = (uint64_t)offset; at < 2 + dir->num_children; at++) {
        struct stat st = {.st_mode = S_IFDIR};
        const char *name = at == 0 ? "." : "..";
        if (at == 0)
            st.st_ino = ino;
        else if (at == 1)
            st.st_ino = dir->parent;
        else {
            uint64_t child = dir->children[at - 2];
            const struct larder__mount_node *n = larder__mount_tree_node(m->tree, child);
            name = n->name;
            st.st_ino = child;
            st.st_mode = n->directory ? S_IFDIR : S_IFREG;
        }
        size_t need = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)at + 1);
        if (need > size - used) break;
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct larder__mount *m = mount_of(req);
    if (ino == STATS_INO && (fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EROFS);
        return;
    }
    if (ino == CONTROL_INO || ino == STATS_INO) { /* read back or written: never cached */
        fi->direct_io = 1;
        fi->fh = 0;
        fuse_reply_open(req, fi);
        return;
    }
    const struct larder__mount_node *n = larder__mount_tree_node(m->tree, ino);
    if (!n) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (n->directory) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_APPEND | O_CREAT))) {
        fuse_reply_err(req, EROFS);
        return;
    }
    struct open_file *f = calloc(1, sizeof *f);
    if (!f) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    f->node = n;
    larder_sample_info s;
    larder_field_info field = {0};
    int rc = larder_sample_info_get(m->dataset, n->sample, &s);
    if (rc == 0 && n->field >= 0)
        rc = larder_field_info_get(m->dataset, n->sample, (uint32_t)n->field, &field);
    if (rc == 0) rc = larder_file_open(&f->file, m->dataset, n->sample, n->field);
    if (rc == 0 && n->header_length)
        rc = larder__mount_npy_header(m->tree, n, f->header, sizeof f->header);
    if (rc < 0) {
        larder__mount_log(LARDER_LOG_ERROR, "open of sample %llu: %s",
                          (unsigned long long)n->sample, larder_errmsg());
        larder_file_close(f->file);
        free(f);
        fuse_reply_err(req, larder__mount_errno(rc));
        return;
    }
    f->shard = s.shard;
    f->base = s.offset + field.offset;
    uint64_t length = n->size - n->header_length;
    int32_t backing_id = 0;
    f->mode = larder__mount_passthrough_open(m, ino, n, f->shard, f->base, &backing_id);
    /* counted while between the first-open check and the job being listed:
     * another open of the same file meanwhile must not take it as staged
     * (larder__mount_stager_opened) */
    bool stageable = f->mode != LARDER__MOUNT_OPEN_PASSTHROUGH && m->staged_on_open;
    if (stageable) atomic_fetch_add(&m->stage_opening, 1);
    if (stageable && !atomic_exchange(&m->staged_on_open[ino - 1], 1) &&
        larder__mount_stage_file(m, f->shard, f->base, length, n->sample))
        larder__mount_log(LARDER_LOG_INFO, "staging sample %llu (%llu bytes) on its first open",
                          (unsigned long long)n->sample, (unsigned long long)length);
    if (stageable) atomic_fetch_sub(&m->stage_opening, 1);
    /* after INIT (which could only lower it): the kernel's read-ahead up to
     * max_read, or buffered reads arrive 128 KiB at a time -- but not while
     * a file is being staged (stager.c raises it when the last is) */
    larder__mount_stager_opened(m);
    larder__mount_stream_init(&f->stream);
    fi->fh = (uint64_t)(uintptr_t)f;
    /* immutable: what the kernel cached stays right (not with passthrough,
     * which the kernel refuses beside keep_cache: it reads the cache file) */
    fi->keep_cache = f->mode != LARDER__MOUNT_OPEN_PASSTHROUGH;
    fi->noflush = 1;
    atomic_init(&f->refs, 2);
    larder__mount_passthrough_arm(backing_id); /* the reply below carries it */
    int replied = fuse_reply_open(req, fi);
    /* f is still ours here: a RELEASE that came in meanwhile left it to us */
    if (!larder__mount_passthrough_disarm() && f->mode == LARDER__MOUNT_OPEN_PASSTHROUGH)
        f->mode = larder__mount_passthrough_demote(m, ino); /* never expected with libfuse 3.14 */
    if (replied < 0) /* the opener was interrupted (ENOENT), or the mount is going: no RELEASE */
        open_file_put(m, ino, f);
    open_file_put(m, ino, f);
}

/* What the stats file reads: the mount's counters and passthrough's state. */
static int describe_stats(struct larder__mount *m, char *text, size_t capacity)
{
    struct larder__mount_passthrough_stats pt;
    larder__mount_passthrough_stats(m->passthrough, &pt);
    int n = snprintf(text, capacity,
                     "reads %llu\nread_bytes %llu\nread_errors %llu\nreadahead_bytes %llu\n"
                     "passthrough %s\npassthrough_opens %llu\npassthrough_fallbacks %llu\n"
                     "passthrough_backing_ids %llu\npassthrough_pinned_files %llu\n"
                     "passthrough_kept_paged %llu\n",
                     (unsigned long long)atomic_load(&m->reads),
                     (unsigned long long)atomic_load(&m->read_bytes),
                     (unsigned long long)atomic_load(&m->read_errors),
                     (unsigned long long)atomic_load(&m->readahead_bytes), pt.state,
                     (unsigned long long)pt.opens, (unsigned long long)pt.fallbacks,
                     (unsigned long long)pt.backing_ids, (unsigned long long)pt.pinned,
                     (unsigned long long)pt.kept_paged);
    return n < 0 ? 0 : (size_t)n < capacity ? n : (int)capacity - 1;
}

static void read_control(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset)
{
    char text[CONTROL_MAX > STATS_MAX ? CONTROL_MAX : STATS_MAX];
    int length = ino == STATS_INO ? describe_stats(mount_of(req), text, sizeof text)
                                  : larder__mount_order_describe(mount_of(req), text, sizeof text);
    if (length < 0) length = 0;
    if (offset >= length) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    size_t n = (size_t)(length - offset) < size ? (size_t)(length - offset) : size;
    fuse_reply_buf(req, text + offset, n);
}

/*
 * A read of data bytes [at, at + n) of the file that the node cache holds
 * whole: answered straight from the cache's data file, with no request to
 * anyone and no copy here (the kernel splices the file's pages into the
 * answer) when the node's cache evicts nothing, else with one pread of it.
 * true when answered; false leaves the read to larder_file_pread (a miss,
 * no cache, or a range the engine must check first).
 */
static bool read_resident(struct larder__mount *m, struct open_file *f, fuse_req_t req, uint64_t at,
                          uint64_t n)
{
    if (!m->cached) return false;
    larder_dataset *d = m->dataset;
    uint64_t offset = f->base + at;
    if (!larder__fill_resident(larder__dataset_fill(d), f->shard, offset, n)) return false;
    larder__mount_readahead(m, &f->stream, f->shard, f->base, f->node->header_length, f->node->size,
                            at + f->node->header_length, n);
    int fd = -1;
    uint8_t *buf = NULL;
    if (larder__dataset_stage_range(d, f->shard, offset, n, &fd) != 0) {
        fd = -1;
        if (!(buf = malloc((size_t)n))) return false;
        if (larder__dataset_read_range(d, f->shard, offset, n, buf) < 0) {
            free(buf);
            return false; /* larder_file_pread says why */
        }
    }
    atomic_fetch_add(&m->reads, 1);
    atomic_fetch_add(&m->read_bytes, n);
    larder__mount_order_read(m, f->node->sample, f->node->field, at, n);
    /* nothing of f after the answer: the file may be released at once */
    if (fd >= 0) {
        struct fuse_bufvec bv = FUSE_BUFVEC_INIT((size_t)n);
        bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
        bv.buf[0].fd = fd;
        bv.buf[0].pos = (off_t)offset;
        fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE); /* answers, or frees req on failure */
    } else {
        fuse_reply_buf(req, (const char *)buf, (size_t)n);
        free(buf);
    }
    return true;
}

/* Whether a read of f must fail because the cache holds its sample wrong
 * (cache_check.c; answered here, EIO unless larder__mount_errno says otherwise). */
static bool cached_sample_bad(struct larder__mount *m, struct open_file *f, fuse_req_t req)
{
    int rc;
    if (!m->cached || (rc = larder__mount_check_cached(m, f->node->sample)) == 0) return false;
    atomic_fetch_add(&m->read_errors, 1);
    larder__mount_log(LARDER_LOG_ERROR, "read of sample %llu: %s",
                      (unsigned long long)f->node->sample, larder_errmsg());
    fuse_reply_err(req, larder__mount_errno(rc));
    return true;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                    struct fuse_file_info *fi)
{
    struct larder__mount *m = mount_of(req);
    if (ino == CONTROL_INO || ino == STATS_INO) {
        read_control(req, ino, size, offset);
        return;
    }
    struct open_file *f = (struct open_file *)(uintptr_t)fi->fh;
    uint64_t file_size = f->node->size, at = (uint64_t)offset;
    if (offset < 0 || at >= file_size || size == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    uint64_t n = file_size - at < size ? file_size - at : size;
    uint64_t header = f->node->header_length;
    if (m->paged_bytes) atomic_fetch_add(&m->paged_bytes[ino - 1], n); /* kept: keep_cache */
    if (cached_sample_bad(m, f, req)) return;
    if (at >= header && read_resident(m, f, req, at - header, n)) return;
    uint8_t *buf = malloc((size_t)n);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    uint64_t done = 0;
    if (at < header) { /* the .npy header, made at open */
        done = header - at < n ? header - at : n;
        memcpy(buf, f->header + at, (size_t)done);
    }
    int64_t got = 0;
    if (done < n) {
        larder__mount_readahead(m, &f->stream, f->shard, f->base, header, file_size, at, n);
        unsigned waiting = atomic_fetch_add(&m->demand_waiting, 1) + 1;
        unsigned staging = atomic_load(&m->stage_running);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        got = larder__mount_read_miss(m, f->file, f->shard, f->base, f->node->size - header,
                                      buf + done, n - done, at + done - header);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (m->trace)
            larder__mount_log(LARDER_LOG_INFO,
                              "trace: miss sample %llu at %llu, %llu bytes: %.1f ms (%u misses "
                              "waiting, %u staging reads in flight) at %.3f s",
                              (unsigned long long)f->node->sample,
                              (unsigned long long)(at + done - header),
                              (unsigned long long)(n - done), ms, waiting, staging,
                              (double)t1.tv_sec + (double)t1.tv_nsec / 1e9);
        /* the stager's signal: how long a reader waits, with its staging in the way or not */
        if (got >= 0) larder__mount_stager_miss(m, ms, staging > 0);
        if (atomic_fetch_sub(&m->demand_waiting, 1) == 1) larder__mount_stager_kick(m);
    }
    if (got < 0) {
        atomic_fetch_add(&m->read_errors, 1);
        larder__mount_log(LARDER_LOG_ERROR, "read of %llu bytes at %llu of sample %llu: %s",
                          (unsigned long long)(n - done), (unsigned long long)(at + done - header),
                          (unsigned long long)f->node->sample, larder_errmsg());
        fuse_reply_err(req, larder__mount_errno((int)got));
    } else {
        done += (uint64_t)got;
        atomic_fetch_add(&m->reads, 1);
        atomic_fetch_add(&m->read_bytes, done);
        if (header == 0 || at >= header)
            larder__mount_order_read(m, f->node->sample, f->node->field, at - header, done);
        fuse_reply_buf(req, (const char *)buf, (size_t)done);
    }
    free(buf);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct open_file *f = (struct open_file *)(uintptr_t)fi->fh;
    if (ino != CONTROL_INO && ino != STATS_INO && f) open_file_put(mount_of(req), ino, f);
    fuse_reply_err(req, 0);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t offset,
                     struct fuse_file_info *fi)
{
    (void)offset, (void)fi;
    if (ino != CONTROL_INO) {
        fuse_reply_err(req, EROFS);
        return;
    }
    if (size > CONTROL_MAX) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    int rc = larder__mount_order_register(mount_of(req), buf, size);
    if (rc < 0) {
        larder__mount_log(LARDER_LOG_WARN, "%s: %s", LARDER__MOUNT_ORDER_FILE, larder_errmsg());
        fuse_reply_err(req, rc == -ENOMEM ? ENOMEM : EINVAL);
        return;
    }
    fuse_reply_write(req, size);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    (void)fi;
    /* the control file takes the truncation of `>` (and nothing else) */
    if (ino == CONTROL_INO && (to_set & ~(FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MTIME |
                                          FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME)) == 0) {
        struct stat st;
        fill_attr(mount_of(req), ino, NULL, &st);
        (void)attr;
        fuse_reply_attr(req, &st, 0);
        return;
    }
    fuse_reply_err(req, EROFS);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct larder__mount *m = mount_of(req);
    uint64_t nodes, files, bytes;
    larder__mount_tree_counts(m->tree, &nodes, &files, &bytes);
    struct statvfs st = {.f_bsize = 1 << 20,
                         .f_frsize = 4096,
                         .f_blocks = (fsblkcnt_t)((bytes + 4095) / 4096),
                         .f_files = (fsfilcnt_t)nodes,
                         .f_namemax = LARDER__MOUNT_NAME_MAX,
                         .f_flag = ST_RDONLY};
    fuse_reply_statfs(req, &st);
}

/* Every operation that would change the tree. */
static void erofs_mknod(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t d)
{
    (void)p, (void)n, (void)m, (void)d;
    fuse_reply_err(req, EROFS);
}
static void erofs_mkdir(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m)
{
    (void)p, (void)n, (void)m;
    fuse_reply_err(req, EROFS);
}
static void erofs_unlink(fuse_req_t req, fuse_ino_t p, const char *n)
{
    (void)p, (void)n;
    fuse_reply_err(req, EROFS);
}
static void erofs_symlink(fuse_req_t req, const char *l, fuse_ino_t p, const char *n)
{
    (void)l, (void)p, (void)n;
    fuse_reply_err(req, EROFS);
}
static void erofs_rename(fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn,
                         unsigned int flags)
{
    (void)p, (void)n, (void)np, (void)nn, (void)flags;
    fuse_reply_err(req, EROFS);
}
static void erofs_link(fuse_req_t req, fuse_ino_t i, fuse_ino_t p, const char *n)
{
    (void)i, (void)p, (void)n;
    fuse_reply_err(req, EROFS);
}
static void erofs_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
                         struct fuse_file_info *fi)
{
    (void)p, (void)n, (void)m, (void)fi;
    fuse_reply_err(req, EROFS);
}
static void erofs_setxattr(fuse_req_t req, fuse_ino_t i, const char *n, const char *v, size_t s,
                           int f)
{
    (void)i, (void)n, (void)v, (void)s, (void)f;
    fuse_reply_err(req, EROFS);
}
static void erofs_removexattr(fuse_req_t req, fuse_ino_t i, const char *n)
{
    (void)i, (void)n;
    fuse_reply_err(req, EROFS);
}
static void erofs_fallocate(fuse_req_t req, fuse_ino_t i, int mode, off_t o, off_t l,
                            struct fuse_file_info *fi)
{
    (void)i, (void)mode, (void)o, (void)l, (void)fi;
    fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops larder__mount_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .readdir = op_readdir,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .write = op_write,
    .setattr = op_setattr,
    .statfs = op_statfs,
    .mknod = erofs_mknod,
    .mkdir = erofs_mkdir,
    .unlink = erofs_unlink,
    .rmdir = erofs_unlink,
    .symlink = erofs_symlink,
    .rename = erofs_rename,
    .link = erofs_link,
    .create = erofs_create,
    .setxattr = erofs_setxattr,
    .removexattr = erofs_removexattr,
    .fallocate = erofs_fallocate,
};
