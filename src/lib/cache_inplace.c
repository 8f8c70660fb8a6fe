/*
 * cache_inplace.c - blocks received straight into their data file's pages
 * (cache.h, "In place"): a daemon borrowing a whole chunk maps the
 * chunk's blocks of the data file and has the peer's bytes spliced into
 * the file there (recv_window.h), checks them through the mapping, and only then marks them
 * resident (larder__cache_store with no data).  Until then the bytes sit in the page cache under
 * blocks whose resident bit is clear, which no reader of the cache reads (sendfile to peers and
 * readers, UCX answers, the mount's passthrough and direct reads, `larder cache check` all go by
 * the resident bits), and under the fill lock of those blocks, which no
 * other fill can take to store or publish them meanwhile.  Blocks that
 * are not published are punched out before the lock is let go.
 */
#include "cache_internal.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int larder__cache_lock_more(struct larder__cache *c, int lock, uint32_t shard, uint64_t first,
                            uint64_t last)
{
    struct flock more = {.l_type = F_WRLCK,
                         .l_whence = SEEK_SET,
                         .l_start = (off_t)(c->shard_base[shard] + first),
                         .l_len = (off_t)(last - first + 1)};
    while (fcntl(lock, F_OFD_SETLKW, &more) < 0) { /* the same description: one lock, grown */
        if (errno == EINTR) continue;
        int err = errno;
        return larder__fail(-err, "%s: lock: %s", c->locks_path, strerror(err));
    }
    return 0;
}

bool larder__cache_any_present(const struct larder__cache *c, uint32_t shard, uint64_t first,
                               uint64_t last)
{
    uint64_t base = c->shard_base[shard];
    for (uint64_t b = first; b <= last; b++)
        if (bit_get(c->resident, base + b)) return true;
    return false;
}

int larder__cache_map_blocks(struct larder__cache *c, uint32_t shard, int fd, uint64_t first,
                             uint64_t last, void *at)
{
    if (shard >= c->num_shards || first > last || fd < 0 ||
        last >= c->shard_base[shard + 1] - c->shard_base[shard])
        return -EINVAL;
    struct stat st;
    uint64_t offset = first << c->block_shift;
    size_t length = (size_t)larder__cache_span(c, shard, first, last);
    /* data files are made at the shard's full size: a shorter one was cut
     * underneath (a store reconciles it), a deleted one replaced; a
     * mapping past the end would fault on the first byte received */
    if (larder__sys.fstat(fd, &st) < 0 || st.st_nlink == 0 ||
        (uint64_t)st.st_size < offset + length)
        return -ESTALE;
    /* the disk's room first: a store through the mapping into a hole the
     * disk has no room for would be a SIGBUS, fallocate's refusal is a
     * code.  A file system without fallocate (EOPNOTSUPP) gives no such
     * promise: not in place there, like any other refusal */
    if (larder__sys.fallocate(fd, 0, (off_t)offset, (off_t)length) < 0)
        return errno == EOPNOTSUPP ? -EOPNOTSUPP : -errno;
    /* not populated: the bytes arrive by splice into the page cache
     * (recv_window.h), and the fill's reads map them then; writing pages
     * populated here cost more than the pwrite they replace */
    void *mapped = larder__sys.mmap(at, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                                    (off_t)offset);
    if (mapped == MAP_FAILED) return -errno;
    return 0;
}

int larder__cache_placed_in(int fd, int placed_fd, uint64_t end)
{
    struct stat now, then;
    if (larder__sys.fstat(placed_fd, &then) < 0) return -errno;
    /* the mapping reaches past the mapped file's end: those bytes are gone
     * (and reading them would be a SIGBUS) */
    if ((uint64_t)then.st_size < end) return -ESTALE;
    if (fd < 0) return 0;
    if (fd == placed_fd && then.st_nlink > 0) return 1;
    if (larder__sys.fstat(fd, &now) < 0) return -errno;
    return now.st_dev == then.st_dev && now.st_ino == then.st_ino && now.st_nlink > 0 &&
           then.st_nlink > 0;
}

void larder__cache_punch_absent(struct larder__cache *c, uint32_t shard, uint64_t first,
                                uint64_t last)
{
    int fd = larder__cache_data_fd(c, shard);
    if (fd < 0) return;
    uint64_t base = c->shard_base[shard];
    for (uint64_t b = first; b <= last;) {
        if (bit_get(c->resident, base + b)) {
            b++;
            continue;
        }
        uint64_t end = b; /* a run of blocks never published: their bytes unchecked */
        while (end < last && !bit_get(c->resident, base + end + 1))
            end++;
        (void)larder__sys.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                    (off_t)(b << c->block_shift),
                                    (off_t)larder__cache_span(c, shard, b, end));
        b = end + 1;
    }
}
