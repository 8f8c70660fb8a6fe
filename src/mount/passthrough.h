/*
 * passthrough.h - FUSE passthrough for files the node cache holds whole
 * (docs/mount.md "FUSE passthrough").  The kernel (6.9 and later, with
 * CONFIG_FUSE_PASSTHROUGH) can hand a FUSE file's reads to a backing file:
 * the server negotiates FUSE_PASSTHROUGH in INIT, registers the backing
 * file with the FUSE_DEV_IOC_BACKING_OPEN ioctl on /dev/fuse and answers
 * OPEN with FOPEN_PASSTHROUGH and the backing id.  Debian's libfuse 3.14
 * knows none of it, so this module speaks that part of the protocol
 * itself, through libfuse's custom I/O (fuse_session_custom_io): its read
 * sees each request as it arrives (the INIT request's flags, and which
 * request the thread is serving), its writev each reply before it leaves,
 * where the INIT reply gets FUSE_PASSTHROUGH and max_stack_depth and an
 * OPEN reply the backing id that its open handler chose.
 *
 * Which opens: a file whose bytes are its shard's whole data file at the
 * same offsets (a --files index, or plain files: not a sample inside a
 * packed shard, not a .npy field), all of it resident and trusted, its
 * checksum checked (cache_check.c), in a node cache that evicts nothing,
 * and not read through the mount already (64 MiB or more of it: the
 * kernel keeps those pages, and would drop them at a passthrough open).
 * While any passthrough open of a file lasts, the mount holds a shared
 * fill lock on its blocks (larder__cache_hold): eviction and repair take
 * that lock exclusively, so no hole is punched under the kernel's reads.
 * Everything else (and every open after the kernel or the privileges said
 * no) is served by the mount as before.
 *
 * The kernel's rules followed here (fs/fuse/iomode.c): an inode is open
 * either through passthrough (every open of it, with one backing file) or
 * through its page cache, never both, so the mode of an inode's first
 * open holds until its last release; FOPEN_KEEP_CACHE is not allowed with
 * FOPEN_PASSTHROUGH; the backing ioctl needs CAP_SYS_ADMIN.
 *
 * Locking: one mutex per mount guards the table of open inodes; the
 * request and reply hooks touch only thread-local state and atomics.
 */
#ifndef LARDER_MOUNT_PASSTHROUGH_H
#define LARDER_MOUNT_PASSTHROUGH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct larder__mount;
struct larder__mount_node;
struct larder__mount_passthrough;

/* How one open is served (struct open_file in fs.c keeps it). */
enum larder__mount_open_mode {
    LARDER__MOUNT_OPEN_PLAIN = 0,  /* not a passthrough candidate: nothing tracked */
    LARDER__MOUNT_OPEN_CACHED = 1, /* a candidate served by the mount (the kernel's page cache) */
    LARDER__MOUNT_OPEN_PASSTHROUGH = 2, /* reads go to the cache's data file in the kernel */
};

/* What the mount's stats file and log show. */
struct larder__mount_passthrough_stats {
    const char *state;    /* "active", "offered" (not used yet), or "off: WHY" */
    uint64_t opens;       /* opens answered with passthrough */
    uint64_t fallbacks;   /* opens of candidates served by the mount instead */
    uint64_t backing_ids; /* backing files registered with the kernel now */
    uint64_t pinned;      /* files whose blocks are held against eviction now */
    uint64_t kept_paged;  /* opens of files that qualified, served by the mount: read through it */
};

/*
 * A mount's passthrough state: `enabled` false (--no-passthrough) makes
 * every open fall back.  0 and *out, or -ENOMEM.  Free with
 * larder__mount_passthrough_free, which closes every backing id and pin
 * left (the kernel drops its own at unmount).
 */
int larder__mount_passthrough_new(struct larder__mount_passthrough **out, bool enabled);
void larder__mount_passthrough_free(struct larder__mount_passthrough *p);

/* Whether INIT should be watched and answered for passthrough (false:
 * --no-passthrough, no privileges, or p NULL). */
bool larder__mount_passthrough_wanted(const struct larder__mount_passthrough *p);

/* Once the mount's log is set up: say why passthrough is off, if it was
 * turned off from the start (--no-passthrough, no privileges). */
void larder__mount_passthrough_log(const struct larder__mount_passthrough *p);

/* The session's /dev/fuse descriptor, once mounted (the backing ioctls go there). */
void larder__mount_passthrough_set_fd(struct larder__mount_passthrough *p, int fuse_fd);

/* The custom I/O hooks: every request read (buf[0..length)) and every reply
 * before it is written.  Only look at and patch the messages; never fail. */
void larder__mount_passthrough_request(struct larder__mount_passthrough *p, const void *buf,
                                       size_t length);
void larder__mount_passthrough_reply(struct larder__mount_passthrough *p, struct iovec *iov,
                                     int count);

/*
 * Decide how the open of file node `ino` (n) is served, and count it:
 * LARDER__MOUNT_OPEN_PASSTHROUGH with *backing_id set (the open handler
 * calls larder__mount_passthrough_arm(backing_id) just before
 * fuse_reply_open, and must answer without keep_cache), or one of the
 * others.  Every mode but PLAIN is undone by larder__mount_passthrough_close.
 */
enum larder__mount_open_mode larder__mount_passthrough_open(struct larder__mount *m, uint64_t ino,
                                                            const struct larder__mount_node *n,
                                                            uint32_t shard, uint64_t base,
                                                            int32_t *backing_id);
/* The next OPEN reply this thread sends carries backing_id (0: none). */
void larder__mount_passthrough_arm(int32_t backing_id);
/* After that reply: whether it carried the backing id (false also when
 * none was armed). */
bool larder__mount_passthrough_disarm(void);
/* A passthrough open of `ino` whose reply went out without its backing id
 * (the kernel opened it through its page cache): counted so from now on.
 * The mode the open has now. */
enum larder__mount_open_mode larder__mount_passthrough_demote(struct larder__mount *m,
                                                              uint64_t ino);
/* The open of `ino` in `mode` has ended (released, or its reply never
 * reached the kernel): the last passthrough one closes the backing id and
 * the pin. */
void larder__mount_passthrough_close(struct larder__mount *m, uint64_t ino,
                                     enum larder__mount_open_mode mode);

void larder__mount_passthrough_stats(struct larder__mount_passthrough *p,
                                     struct larder__mount_passthrough_stats *out);

#endif
