/*
 * cache.c - the node-local block cache (design in cache.h): opening and
 * mapping the shared state, the data files, fill locks, storing and
 * forgetting blocks.  Eviction is cache_evict.c, the counters and the
 * listing of caches cache_stats.c; cache_internal.h is what they share.
 */
#include "cache_internal.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR_MODE 0750
/* The most blocks one dataset's cache tracks: 2^36 (4 PiB in 64 KiB
 * blocks) keeps the bitmaps within 32 GiB of sparse mapping. */
#define MAX_BLOCKS (UINT64_C(1) << 36)

static uint64_t words_for(uint64_t bits)
{
    return (bits + 63) / 64;
}

static int make_dir(const char *path)
{
    if (mkdir(path, DIR_MODE) < 0 && errno != EEXIST)
        return larder__fail(-errno, "%s: %s", path, strerror(errno));
    return 0;
}

/* Give a data file its shard's full size, as a sparse file (no-op when it has it). */
static void grow(const struct larder__cache *c, uint32_t shard, int fd)
{
    struct stat st;
    if (larder__sys.fstat(fd, &st) == 0 && (uint64_t)st.st_size < c->shard_size[shard])
        larder__sys.ftruncate(fd, (off_t)c->shard_size[shard]);
}

/* This boot's id (a fixed string where the kernel does not say). */
static void boot_id(char out[40])
{
    memset(out, 0, 40);
    int fd = larder__sys.open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC, 0);
    ssize_t n = fd >= 0 ? larder__sys.pread(fd, out, 39, 0) : -1;
    if (fd >= 0) larder__sys.close(fd);
    if (n <= 0) snprintf(out, 40, "unknown");
    for (int i = 0; i < 40; i++)
        if (out[i] == '\n') out[i] = '\0';
}

/* Create the blocks file whole under a temporary name of this call's own
 * (another thread of this process may be making one too) and link it into
 * place, or with `replace` rename it over the one there; losing the race to
 * link is fine: the other file is used. */
static int create_blocks(const struct larder__cache *c, const char *path,
                         const struct larder__index *ix, size_t map_size, bool replace)
{
    static unsigned long made;
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.%d.%lu.tmp", path, (int)getpid(),
                 __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED)) >= (int)sizeof tmp)
        return larder__fail(-ENAMETOOLONG, "%s: path too long", path);
    int fd = larder__open(tmp, O_RDWR | O_CREAT | O_EXCL, LARDER__CACHE_FILE_MODE);
    if (fd < 0) return fd;
    struct shared_header h = {.version = LARDER__CACHE_VERSION,
                              .block_size = c->block_size,
                              .id_low = ix->id_low,
                              .id_high = ix->id_high,
                              .num_shards = c->num_shards,
                              .total_blocks = c->shard_base[c->num_shards]};
    memcpy(h.magic, LARDER__CACHE_MAGIC, 8);
    boot_id(h.boot_id);
    for (uint64_t i = 0; i < c->num_shards; i++)
        h.total_bytes += c->shard_size[i];
    int rc = 0;
    if (larder__sys.ftruncate(fd, (off_t)map_size) < 0)
        rc = larder__fail(-errno, "%s: %s", tmp, strerror(errno));
    if (rc == 0) rc = larder__pwrite_full(fd, &h, sizeof h, 0, tmp);
    if (rc == 0 && larder__sys.fsync(fd) < 0)
        rc = larder__fail(-errno, "%s: fsync: %s", tmp, strerror(errno));
    larder__sys.close(fd);
    /* the data files exist before the state that refers to them: from then
     * on a missing data file means one deleted underneath */
    for (uint64_t i = 0; rc == 0 && i < c->num_shards; i++) {
        char data[PATH_MAX];
        snprintf(data, sizeof data, "%s/%06llu.data", c->dir, (unsigned long long)i);
        int dfd = larder__open(data, O_RDWR | O_CREAT, LARDER__CACHE_FILE_MODE);
        if (dfd < 0) {
            rc = dfd;
        } else {
            grow(c, (uint32_t)i, dfd);
            larder__sys.close(dfd);
        }
    }
    if (rc == 0 && (replace ? rename(tmp, path) : link(tmp, path)) < 0 && errno != EEXIST)
        rc = larder__fail(-errno, "%s: %s", path, strerror(errno));
    unlink(tmp); /* after a rename: gone already */
    return rc;
}

/*
 * Replacing a blocks file found unsound (cut short, or of another larder
 * version) happens under a lock: an exclusive fcntl lock on DIR/blocks.lock
 * between processes, and this mutex between the threads of one (fcntl's
 * record locks are a process's; unlike OFD locks and flock, a child forked
 * while one is held does not hold it, and the atfork handlers keep the
 * mutex out of a fork).  Two openers that each judged the same file unsound
 * and each replaced whatever was at the path then would map different
 * files: one would keep trusting bits the other's evictions no longer
 * clear, and serve the holes punched under them.  Under the lock the file
 * is judged again, so only the first replaces it.
 */
static pthread_mutex_t replacing = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t replacing_once = PTHREAD_ONCE_INIT;
static void replacing_lock(void)
{
    pthread_mutex_lock(&replacing);
}
static void replacing_unlock(void)
{
    pthread_mutex_unlock(&replacing);
}
static void replacing_init(void)
{
    pthread_atfork(replacing_lock, replacing_unlock, replacing_unlock);
}

/* Lock out other replacers of c's blocks file: the lock file's descriptor
 * (release with replace_end), or a negative code. */
static int replace_begin(const struct larder__cache *c)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/blocks.lock", c->dir);
    pthread_once(&replacing_once, replacing_init);
    replacing_lock();
    int fd = larder__open(path, O_RDWR | O_CREAT | O_NOFOLLOW, LARDER__CACHE_FILE_MODE);
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    int rc = fd;
    while (fd >= 0 && (rc = fcntl(fd, F_SETLKW, &lock)) < 0 && errno == EINTR)
        ;
    if (fd >= 0 && rc < 0) {
        rc = larder__fail(-errno, "%s: lock: %s", path, strerror(errno));
        larder__sys.close(fd);
    }
    if (rc < 0) {
        replacing_unlock();
        return rc;
    }
    return fd;
}

static void replace_end(int fd)
{
    larder__sys.close(fd); /* drops the fcntl lock */
    replacing_unlock();
}

/*
 * After a reboot, every resident block becomes suspect: what reached the
 * disk before the machine went down is not known.  The first opener of
 * this boot marks them, under an exclusive lock on the blocks file so
 * that no other process is between the check and the stamp.
 */
static void distrust_after_reboot(struct larder__cache *c, uint64_t words, const char *path)
{
    char now[40];
    boot_id(now);
    if (memcmp(c->header->boot_id, now, sizeof now) == 0) return;
    int fd = larder__open(path, O_RDWR, 0);
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    while (fd >= 0 && fcntl(fd, F_OFD_SETLKW, &lock) < 0 && errno == EINTR)
        ;
    if (memcmp(c->header->boot_id, now, sizeof now) != 0) {
        uint64_t marked = 0;
        for (uint64_t w = 0; w < words; w++) {
            uint64_t bits = atomic_load64(&c->resident[w]);
            __atomic_fetch_or(&c->suspect[w], bits, __ATOMIC_RELEASE);
            marked += (uint64_t)__builtin_popcountll(bits);
        }
        disturbed(c);
        memcpy(c->header->boot_id, now, sizeof now);
        if (marked)
            larder__log(LARDER_LOG_INFO,
                        "%s: the machine restarted since these %llu blocks were staged; each is "
                        "checked again before it is served",
                        c->dir, (unsigned long long)marked);
    }
    if (fd >= 0) larder__sys.close(fd); /* drops the lock */
}

/* Map the blocks file, creating it if absent; check it is ours. */
static int map_blocks(struct larder__cache *c, const struct larder__index *ix)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/blocks", c->dir);
    uint64_t words = words_for(c->shard_base[c->num_shards]);
    c->map_size = LARDER__CACHE_HEADER_SIZE + 5 * words * 8;
    int locked = -1; /* the replace lock's descriptor, once taken */
    for (int attempt = 0; attempt < 3; attempt++) {
        if (access(path, F_OK) != 0) {
            int rc = create_blocks(c, path, ix, c->map_size, false);
            if (rc < 0) {
                if (locked >= 0) replace_end(locked);
                return rc;
            }
        }
        int fd = larder__open(path, O_RDWR, 0);
        if (fd < 0) {
            if (locked >= 0) replace_end(locked);
            return fd;
        }
        uint64_t size;
        int rc = larder__file_size(fd, &size, path);
        struct shared_header h;
        if (rc == 0 && size >= sizeof h) rc = larder__pread_full(fd, &h, sizeof h, 0, path);
        bool known = rc == 0 && size >= sizeof h && memcmp(h.magic, LARDER__CACHE_MAGIC, 8) == 0 &&
                     h.version == LARDER__CACHE_VERSION;
        if (known && h.block_size != c->block_size) {
            larder__sys.close(fd);
            if (locked >= 0) replace_end(locked);
            return larder__fail(LARDER_ECACHE,
                                "%s: this cache was made with %u-byte blocks; asked for %u "
                                "(use another cache directory, or the same block size)",
                                c->dir, h.block_size, c->block_size);
        }
        if (known && (h.id_low != ix->id_low || h.id_high != ix->id_high)) {
            larder__sys.close(fd);
            if (locked >= 0) replace_end(locked);
            return larder__fail(LARDER_ECACHE, "%s: this cache belongs to another dataset", c->dir);
        }
        bool sound = known && size == c->map_size && h.total_blocks == c->shard_base[c->num_shards];
        if (rc == 0 && !sound && locked < 0) {
            /* judged again under the lock: another may have replaced it */
            larder__sys.close(fd);
            locked = replace_begin(c);
            if (locked < 0) return locked;
            continue;
        }
        if (rc == 0 && !sound) {
            /* damaged (for example cut short): start this dataset's cache
             * afresh, a whole file renamed over it */
            larder__sys.close(fd);
            bool older = rc == 0 && size >= sizeof h &&
                         memcmp(h.magic, LARDER__CACHE_MAGIC, 8) == 0 &&
                         h.version != LARDER__CACHE_VERSION;
            larder__log(LARDER_LOG_WARN, "%s: %s, starting it afresh", path,
                        older ? "cache state of another larder version" : "damaged cache state");
            rc = create_blocks(c, path, ix, c->map_size, true);
            if (rc < 0) {
                replace_end(locked);
                return rc;
            }
            continue;
        }
        if (locked >= 0) replace_end(locked);
        if (rc < 0) {
            larder__sys.close(fd);
            return rc;
        }
        void *map = mmap(NULL, c->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        larder__sys.close(fd);
        if (map == MAP_FAILED) return larder__fail(-errno, "%s: mmap: %s", path, strerror(errno));
        c->header = map;
        c->resident = (uint64_t *)((uint8_t *)map + LARDER__CACHE_HEADER_SIZE);
        c->referenced = c->resident + words;
        c->borrowed = c->referenced + words;
        c->suspect = c->borrowed + words;
        c->pinned = c->suspect + words;
        distrust_after_reboot(c, words, path);
        return 0;
    }
    if (locked >= 0) replace_end(locked);
    return larder__fail(LARDER_ECACHE, "%s: cannot set up the cache state", path);
}

int larder__cache_open(struct larder__cache **out, const char *dir, const struct larder__index *ix,
                       uint32_t block_size, uint64_t capacity, uint64_t borrow_capacity)
{
    if (block_size == 0) block_size = ix->block_size;
    if (block_size < 512 || (block_size & (block_size - 1)))
        return larder__fail(LARDER_EUSAGE, "cache block size %u is not a power of two >= 512",
                            block_size);
    struct larder__cache *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->trace_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->evict_lock, NULL);
    c->trace_fd = -1;
    const char *policy = getenv("LARDER_EVICT");
    c->evict_clock = policy && strcmp(policy, "clock") == 0;
    if (policy && strcmp(policy, "clock") != 0 && strcmp(policy, "plan") != 0)
        larder__log(LARDER_LOG_WARN, "LARDER_EVICT=%s: not clock or plan; evicting by plan",
                    policy);
    c->block_size = block_size;
    while ((1u << c->block_shift) < block_size)
        c->block_shift++;
    c->num_shards = ix->num_shards;
    c->borrow_capacity = borrow_capacity;
    char id[33];
    larder__hex128(ix->id_high, ix->id_low, id);
    size_t length = strlen(dir) + 40;
    c->dir = malloc(length);
    c->locks_path = malloc(length + 8);
    c->shard_base = malloc((c->num_shards + 1) * sizeof *c->shard_base);
    c->shard_size = malloc((c->num_shards + 1) * sizeof *c->shard_size);
    c->data_fds = malloc((c->num_shards + 1) * sizeof *c->data_fds);
    int rc = c->dir && c->locks_path && c->shard_base && c->shard_size && c->data_fds ? 0 : -ENOMEM;
    if (rc == 0) {
        snprintf(c->dir, length, "%s/%s", dir, id);
        snprintf(c->locks_path, length + 8, "%s/locks", c->dir);
        uint64_t base = 0;
        for (uint64_t i = 0; i < c->num_shards; i++) {
            struct larder__shard shard;
            larder__index_shard(ix, i, &shard); /* validated when the index was parsed */
            c->shard_base[i] = base;
            c->shard_size[i] = shard.size;
            c->data_fds[i] = -1;
            base += (shard.size + block_size - 1) >> c->block_shift;
        }
        c->shard_base[c->num_shards] = base;
        if (base > MAX_BLOCKS)
            rc = larder__fail(LARDER_ECACHE,
                              "%s: %llu blocks of %u bytes is more than one cache tracks (2^36); "
                              "use larger blocks",
                              dir, (unsigned long long)base, block_size);
        if (rc == 0) rc = make_dir(dir);
    }
    if (rc == 0) rc = make_dir(c->dir);
    if (rc == 0) rc = map_blocks(c, ix);
    if (rc < 0) {
        larder__cache_close(c);
        return rc;
    }
    /* the capacity is the node's: an opener that sets one sets it for every
     * process sharing this cache (the daemon's --cache-size); one that
     * sets none follows it */
    if (capacity) __atomic_store_n(&c->header->capacity, capacity, __ATOMIC_RELEASE);
    larder__share_open(c, dir, ix->id_low, ix->id_high); /* LARDER_NODE_CACHE_SIZE */
    const char *trace = getenv("LARDER_EVICT_TRACE");
    if (trace && trace[0])
        c->trace_fd = larder__sys.open(trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    *out = c;
    return 0;
}

void larder__cache_close(struct larder__cache *c)
{
    if (!c) return;
    larder__nextuse_trace_costs(c); /* LARDER_EVICT_TRACE: what eviction decisions cost */
    larder__nextuse_free(c->nextuse);
    larder__share_close(c->share);
    larder__cache_plans_detach(c);
    if (c->trace_fd >= 0) larder__sys.close(c->trace_fd);
    if (c->header) munmap(c->header, c->map_size);
    if (c->data_fds)
        for (uint64_t i = 0; i < c->num_shards; i++)
            if (c->data_fds[i] >= 0) larder__sys.close(c->data_fds[i]);
    for (size_t i = 0; i < c->num_retired; i++)
        larder__sys.close(c->retired[i]);
    free(c->retired);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->evict_lock);
    free(c->data_fds);
    free(c->shard_base);
    free(c->shard_size);
    free(c->locks_path);
    free(c->dir);
    free(c);
}

uint32_t larder__cache_block_size(const struct larder__cache *c)
{
    return c->block_size;
}

void larder__cache_blocks(const struct larder__cache *c, uint64_t offset, uint64_t length,
                          uint64_t *first, uint64_t *last)
{
    *first = offset >> c->block_shift;
    *last = (offset + (length ? length : 1) - 1) >> c->block_shift;
}

uint64_t larder__cache_block_offset(const struct larder__cache *c, uint64_t block)
{
    return block << c->block_shift;
}

uint64_t larder__cache_span(const struct larder__cache *c, uint32_t shard, uint64_t first,
                            uint64_t last)
{
    uint64_t start = first << c->block_shift, end = (last + 1) << c->block_shift;
    if (end > c->shard_size[shard]) end = c->shard_size[shard];
    return end > start ? end - start : 0;
}

bool larder__cache_resident(const struct larder__cache *c, uint32_t shard, uint64_t first,
                            uint64_t last)
{
    uint64_t base = c->shard_base[shard];
    for (uint64_t b = first; b <= last; b++)
        if (!bit_get(c->resident, base + b) || bit_get(c->suspect, base + b)) return false;
    return true;
}

bool larder__cache_present(const struct larder__cache *c, uint32_t shard, uint64_t first,
                           uint64_t last)
{
    uint64_t base = c->shard_base[shard];
    for (uint64_t b = first; b <= last; b++)
        if (!bit_get(c->resident, base + b)) return false;
    return true;
}

bool larder__cache_any_borrowed(const struct larder__cache *c, uint32_t shard, uint64_t first,
                                uint64_t last)
{
    uint64_t base = c->shard_base[shard];
    for (uint64_t b = first; b <= last; b++)
        if (bit_get(c->borrowed, base + b)) return true;
    return false;
}

static void set_bits(uint64_t *bits, uint64_t from, uint64_t to, uint64_t *newly)
{
    for (uint64_t b = from; b <= to; b++) {
        uint64_t mask = UINT64_C(1) << (b % 64);
        uint64_t old = __atomic_fetch_or(&bits[b / 64], mask, __ATOMIC_RELEASE);
        if (newly && !(old & mask)) (*newly)++;
    }
}

uint64_t larder__cache_generation(const struct larder__cache *c)
{
    return atomic_load64(&c->header->generation);
}

/*
 * Make the bitmap of a shard agree with its data file as found: a file
 * that is new (the old one was deleted) holds nothing; a shorter one
 * holds nothing past its end.  Call with c->lock held.
 */
static void reconcile(struct larder__cache *c, uint32_t shard, int fd, bool created)
{
    uint64_t blocks = c->shard_base[shard + 1] - c->shard_base[shard];
    if (blocks == 0) return;
    /* data files are made at the shard's full size (sparse), so stores
     * never change it: a shorter file was cut underneath */
    uint64_t keep = 0; /* blocks wholly inside the file */
    struct stat st;
    if (!created && larder__sys.fstat(fd, &st) == 0) {
        uint64_t size = (uint64_t)st.st_size;
        keep = size >= c->shard_size[shard] ? blocks : size >> c->block_shift;
    }
    if (keep >= blocks) return;
    uint64_t base = c->shard_base[shard];
    uint64_t cleared = clear_bits(c->resident, base + keep, base + blocks - 1);
    if (cleared) {
        __atomic_fetch_sub(&c->header->resident_blocks, cleared, __ATOMIC_RELAXED);
        disturbed(c);
        larder__log(LARDER_LOG_WARN,
                    "%s/%06u.data: %s underneath; %llu blocks will be fetched "
                    "again",
                    c->dir, shard, created ? "deleted" : "truncated", (unsigned long long)cleared);
    }
    grow(c, shard, fd);
}

/* Open (creating if needed) a shard's data file and reconcile the bitmap with it. */
static int open_data(struct larder__cache *c, uint32_t shard)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%06u.data", c->dir, shard);
    bool created = false;
    int fd = larder__sys.open(path, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0 && errno == ENOENT) {
        fd = larder__sys.open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, LARDER__CACHE_FILE_MODE);
        created = fd >= 0;
        if (fd < 0 && errno == EEXIST) fd = larder__sys.open(path, O_RDWR | O_CLOEXEC, 0);
    }
    if (fd < 0) return larder__fail(-errno, "%s: %s", path, strerror(errno));
    reconcile(c, shard, fd, created);
    return fd;
}

/* The data file of a shard, opened on first use. */
static int data_fd(struct larder__cache *c, uint32_t shard)
{
    int open_fd = __atomic_load_n(&c->data_fds[shard], __ATOMIC_ACQUIRE);
    if (open_fd >= 0) return open_fd; /* the read path takes no lock */
    pthread_mutex_lock(&c->lock);
    int fd = c->data_fds[shard];
    if (fd < 0) {
        fd = open_data(c, shard);
        if (fd >= 0) __atomic_store_n(&c->data_fds[shard], fd, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&c->lock);
    return fd;
}

/*
 * Before storing: a data file deleted underneath is replaced (the old
 * descriptor stays open until the end, for readers still using it), and
 * one cut short has its lost blocks forgotten.  Returns the descriptor
 * to write to.
 */
static int data_fd_for_store(struct larder__cache *c, uint32_t shard)
{
    int fd = data_fd(c, shard);
    if (fd < 0) return fd;
    struct stat st;
    if (larder__sys.fstat(fd, &st) < 0) return fd;
    pthread_mutex_lock(&c->lock);
    if (st.st_nlink == 0 && c->data_fds[shard] == fd &&
        larder__reserve((void **)&c->retired, &c->cap_retired, c->num_retired + 1,
                        sizeof *c->retired) == 0) {
        int fresh = open_data(c, shard);
        if (fresh >= 0) {
            c->retired[c->num_retired++] = fd;
            __atomic_store_n(&c->data_fds[shard], fresh, __ATOMIC_RELEASE);
            fd = fresh;
        }
    } else if (st.st_nlink > 0) {
        reconcile(c, shard, fd, false);
    }
    pthread_mutex_unlock(&c->lock);
    return fd;
}

int larder__cache_data_fd(struct larder__cache *c, uint32_t shard)
{
    return data_fd(c, shard);
}

int larder__cache_pread(struct larder__cache *c, uint32_t shard, void *buf, size_t length,
                        uint64_t offset)
{
    int fd = data_fd(c, shard);
    if (fd < 0) return fd;
    return larder__pread_full(fd, buf, length, offset, c->dir);
}

/* The fill lock's bytes of `locks` for blocks [first, last] of a shard. */
static struct flock blocks_lock(const struct larder__cache *c, uint32_t shard, uint64_t first,
                                uint64_t last)
{
    return (struct flock){.l_type = F_WRLCK,
                          .l_whence = SEEK_SET,
                          .l_start = (off_t)(c->shard_base[shard] + first),
                          .l_len = (off_t)(last - first + 1)};
}

int larder__cache_lock(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    /* a descriptor of its own: OFD locks of one open file description never conflict */
    int fd = larder__open(c->locks_path, O_RDWR | O_CREAT, LARDER__CACHE_FILE_MODE);
    if (fd < 0) return fd;
    struct flock lock = blocks_lock(c, shard, first, last);
    while (fcntl(fd, F_OFD_SETLKW, &lock) < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        larder__sys.close(fd);
        return larder__fail(-err, "%s: lock: %s", c->locks_path, strerror(err));
    }
    return fd;
}

bool larder__cache_try_lock(struct larder__cache *c, int lock, uint32_t shard, uint64_t first,
                            uint64_t last)
{
    struct flock more = blocks_lock(c, shard, first, last);
    return fcntl(lock, F_OFD_SETLK, &more) == 0; /* the same description: one lock, grown */
}

int larder__cache_hold(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    if (shard >= c->num_shards || first > last ||
        last >= c->shard_base[shard + 1] - c->shard_base[shard])
        return -EINVAL;
    int fd = larder__open(c->locks_path, O_RDWR | O_CREAT, LARDER__CACHE_FILE_MODE);
    if (fd < 0) return fd;
    struct flock lock = blocks_lock(c, shard, first, last);
    lock.l_type = F_RDLCK; /* shared: holders never wait on each other */
    if (fcntl(fd, F_OFD_SETLK, &lock) < 0) {
        int err = errno;
        larder__sys.close(fd);
        return err == EACCES ? -EAGAIN : -err;
    }
    return fd;
}

void larder__cache_unlock(struct larder__cache *c, int lock)
{
    (void)c;
    if (lock >= 0) larder__sys.close(lock); /* closing drops the OFD lock */
}

void larder__cache_trust(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    uint64_t base = c->shard_base[shard];
    for (uint64_t b = base + first; b <= base + last; b++)
        if (bit_get(c->suspect, b)) clear_bits(c->suspect, b, b);
}

void larder__cache_forget(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    uint64_t base = c->shard_base[shard];
    clear_bits(c->suspect, base + first, base + last);
    uint64_t cleared = clear_bits(c->resident, base + first, base + last);
    __atomic_fetch_sub(&c->header->resident_blocks, cleared, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&c->header->borrowed_blocks,
                       clear_bits(c->borrowed, base + first, base + last), __ATOMIC_RELAXED);
    disturbed(c);
}

/* placed_fd >= 0: data maps placed_fd's file at the blocks' offsets (cache_inplace.c) */
static int store(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last,
                 const void *data, int placed_fd, bool borrowed, bool checked)
{
    uint64_t length = larder__cache_span(c, shard, first, last);
    /* before the file is reconciled, which would grow one cut short again */
    int whole = placed_fd >= 0
                    ? larder__cache_placed_in(-1, placed_fd, (first << c->block_shift) + length)
                    : 0;
    if (whole < 0) return whole;
    int fd = data_fd_for_store(c, shard);
    if (fd < 0) return fd;
    if (placed_fd >= 0) { /* the same live file: marked only; another: written from the mapping */
        int same = larder__cache_placed_in(fd, placed_fd, (first << c->block_shift) + length);
        if (same < 0) return same;
        if (same) data = NULL;
    }
    int rc = 0; /* data NULL: put in place already (cache_inplace.c) */
    if (data) {
        pthread_mutex_t *writing = larder__writing(fd);
        pthread_mutex_lock(writing);
        rc = larder__pwrite_full(fd, data, (size_t)length, first << c->block_shift, c->dir);
        pthread_mutex_unlock(writing);
    }
    if (rc < 0) {
        if (!c->warned_full) {
            c->warned_full = true;
            larder__log(LARDER_LOG_WARN,
                        "%s: cannot store fetched blocks (%s); serving them "
                        "from the origin without caching",
                        c->dir, larder_errmsg());
        }
        larder__cache_count(&c->header->counters.uncached_fills, 1);
        return rc;
    }
    uint64_t base = c->shard_base[shard], newly = 0;
    set_bits(c->referenced, base + first, base + last, NULL);
    uint64_t newly_borrowed = 0;
    if (borrowed) set_bits(c->borrowed, base + first, base + last, &newly_borrowed);
    if (checked)
        clear_bits(c->suspect, base + first, base + last);
    else /* suspect before resident: never a moment of trust */
        set_bits(c->suspect, base + first, base + last, NULL);
    set_bits(c->resident, base + first, base + last, &newly); /* only after the data */
    __atomic_fetch_add(&c->header->resident_blocks, newly, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->header->borrowed_blocks, newly_borrowed, __ATOMIC_RELAXED);
    larder__cache_trim(c);
    return 0;
}

int larder__cache_store(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last,
                        const void *data, bool borrowed, bool checked)
{
    return store(c, shard, first, last, data, -1, borrowed, checked);
}

int larder__cache_store_placed(struct larder__cache *c, uint32_t shard, uint64_t first,
                               uint64_t last, const void *mapped, int placed_fd, bool borrowed,
                               bool checked)
{
    if (!mapped || placed_fd < 0) return -EINVAL;
    return store(c, shard, first, last, mapped, placed_fd, borrowed, checked);
}
