/*
 * sys.h - the table the file I/O of liblarder goes through, so tests can
 * inject faults: EIO, ENOSPC, EINTR, short transfers, stalls.  The helpers
 * below retry EINTR and partial transfers and never leave a buffer's tail
 * undefined.
 *
 * Through the table: the file I/O of the cache (cache*.c), the index
 * (dataset.c, index_builder.c), file sources (source_file.c), s3 (its
 * credentials file), the hedge budget file (hedge.c) and the packer
 * (src/pack/: its inputs and shard writer): open, close, pread, pwrite,
 * fstat, fsync, rename, ftruncate, fallocate, mmap.  Tests that swap
 * entries: test_cache.c, test_fill.c, test_hedge.c, test_index.c,
 * test_pack.c, test_prefetch.c, test_source.c, and runner.c's
 * test_slow_origin().
 *
 * Calling the system directly, not faked in tests: sockets (endpoint.c;
 * its failures are tested against real and misbehaving daemons instead),
 * HTTP through curl (source_http.c), HDF5 through its library
 * (src/pack/input_hdf5.c, hdf5_walk.c), getrandom (auth.c), and the calls
 * that are not file transfers: mkdir, stat, unlink of temporary files,
 * fcntl's OFD locks, munmap.
 */
#ifndef LARDER_SYS_H
#define LARDER_SYS_H

#include "common.h"

#include <pthread.h>
#include <sys/stat.h>
#include <sys/types.h>

struct larder__sys_ops {
    int (*open)(const char *path, int flags, mode_t mode);
    int (*close)(int fd);
    ssize_t (*pread)(int fd, void *buf, size_t count, off_t offset);
    ssize_t (*pwrite)(int fd, const void *buf, size_t count, off_t offset);
    int (*fstat)(int fd, struct stat *st);
    int (*fsync)(int fd);
    int (*rename)(const char *from, const char *to);
    int (*ftruncate)(int fd, off_t length);
    int (*fallocate)(int fd, int mode, off_t offset, off_t length);
    void *(*mmap)(void *address, size_t length, int protection, int flags, int fd, off_t offset);
};

/* The table in use; tests swap entries and restore them. */
extern LARDER__HIDDEN struct larder__sys_ops larder__sys;

/* Open `path`; returns a descriptor or -errno (with a message naming path). */
LARDER__HIDDEN int larder__open(const char *path, int flags, mode_t mode);
/*
 * Read exactly `count` bytes at `offset`.  Returns 0, -errno, or
 * LARDER_ETRUNCATED when the file ends first; in that case the unread
 * tail of `buf` is zero-filled.  `what` names the file in messages.
 */
LARDER__HIDDEN int larder__pread_full(int fd, void *buf, size_t count, uint64_t offset,
                                      const char *what);
/* Write exactly `count` bytes at `offset`, or return -errno. */
LARDER__HIDDEN int larder__pwrite_full(int fd, const void *buf, size_t count, uint64_t offset,
                                       const char *what);
/*
 * The lock a writer of the file open as `fd` holds while it writes, so
 * that this process's writers of one file take turns asleep.  Every Linux
 * file system takes the inode's lock exclusively for a buffered write
 * (ext4, XFS, btrfs, tmpfs), so writes into one file run one after another
 * whatever is done here; but the kernel's waiters spin on that lock while
 * its owner copies, and with more writers than cores they spin on the
 * cores the owner and everyone else need.  Staging one 3.7 GB file through
 * `larder mount` from a local emulator with no delays: the mount's CPU
 * 6.2-8.9 s (rwsem_spin_on_owner and its kin ~10% of the machine's), and
 * 4.5-5.1 s with this lock and no copy out of the staged bytes
 * (bench/mount/stage_cpu.sh; bench/results/mount.md, mount9).  Striped by
 * descriptor: the node cache keeps one per data file, and two files rarely
 * share a stripe.
 */
LARDER__HIDDEN pthread_mutex_t *larder__writing(int fd);
/* Size of an open file, or -errno. */
LARDER__HIDDEN int larder__file_size(int fd, uint64_t *size, const char *what);
/* mkdir -p of path[0, length): that directory and those above it (`mode`
 * for the new ones); 0, or -errno with a message naming the one that
 * failed.  Not through the table. */
LARDER__HIDDEN int larder__mkdir_p(const char *path, size_t length, mode_t mode);

#endif
