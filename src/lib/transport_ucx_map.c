/*
 * transport_ucx_map.c - the cache files a daemon answers from over UCX,
 * each mapped once and kept (transport_ucx_internal.h).
 *
 * An answer used to map its range, send, and unmap: 256 page faults per
 * MiB on the first touch of every answer, a fresh address each time
 * (which misses UCX's registration cache on a fabric that registers),
 * and two system calls.  Now a shard's data file is mapped whole, read
 * only, at its first answer, registered with ucp_mem_map once (on tcp and
 * shared memory a formality; on InfiniBand the pages a send needs), and
 * kept for the next answers from it, at most MAX_MAPPINGS files and
 * MAX_MAPPED_BYTES of them; the least recently used mappings no answer is
 * using go when the table is full.  The byte bound is the fabric's: a
 * whole file's registration pins it on InfiniBand without on-demand
 * paging, so 1024 shard files of a few GiB each could pin more than the
 * node's memory; a file that does not fit (larger than the bound, or every
 * kept one in use) is mapped for its answer alone, as answers were before.
 * The table holds a node's whole set of shard files, not a
 * window of them: a pass over a dataset of more files than it holds maps
 * every file again at each pass (least recently used is the worst choice
 * for a cyclic order), and 64 was just short of bench/peer.sh's 65 files
 * (260 mmaps for 2068 answers in 4 passes).  A kept mapping costs an
 * address range and the page tables of the pages sent from it, no memory
 * of its own.  A file that grew past its mapping is mapped again (the old
 * one goes once its answers are done); one whose last name is gone
 * (nlink 0: the dataset's cache was removed) is not kept, so a mapping
 * never holds a deleted file's blocks.
 *
 * The table is a hash on (dev, ino) for the lookup of each answer, and a
 * list in the order of use (the oldest at its tail) for the evictions.
 *
 * Locking: mappings->lock guards the table and each entry's refs;
 * ucp_mem_map and ucp_mem_unmap are called under it, and not under
 * hub->worker_lock: the context is made for workers on several threads
 * (mt_workers_shared), so UCX guards its registrations itself, and the
 * progress thread takes mappings->lock with worker_lock held when it
 * answers (transport_ucx_answer.c): taking them the other way round here
 * deadlocked the two.
 */
#include "transport_ucx_internal.h"

#ifdef LARDER_HAVE_UCX

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define MAX_MAPPINGS 1024 /* cache files kept mapped at once (larder__ucx_set_max_mappings) */
/* bytes of the files kept mapped (larder__ucx_set_max_mapped_bytes): each
 * is registered whole, which pins it on a fabric without on-demand paging */
#define MAX_MAPPED_BYTES ((size_t)4 << 30)
#define BUCKETS 256 /* of the table's hash on (dev, ino) */

struct larder__ucx_mapping {
    dev_t dev;
    ino_t ino;
    uint8_t *base; /* the whole file as it was when mapped, PROT_READ */
    size_t length;
    ucp_mem_h memh; /* its registration; NULL: none (UCX registers per send) */
    int refs;       /* answers sending from it */
    bool kept;      /* in the table (false: unmapped once refs is 0) */
    struct larder__ucx_mapping *same_bucket;
    struct larder__ucx_mapping *newer, *older; /* the order of use: the oldest goes first */
};

struct larder__ucx_mappings {
    pthread_mutex_t lock;
    struct larder__ucx_mapping *buckets[BUCKETS]; /* the kept ones */
    struct larder__ucx_mapping *newest, *oldest;  /* the kept ones, by their last use */
    size_t count, bytes;                          /* kept, and their lengths' sum */
    size_t most;       /* 0: MAX_MAPPINGS (larder__ucx_set_max_mappings, for tests) */
    size_t most_bytes; /* 0: MAX_MAPPED_BYTES (larder__ucx_set_max_mapped_bytes) */
};

int larder__ucx_mappings_new(struct larder__ucx *hub)
{
    struct larder__ucx_mappings *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    pthread_mutex_init(&t->lock, NULL);
    hub->mappings = t;
    return 0;
}

static struct larder__ucx_mapping **bucket(struct larder__ucx_mappings *t, dev_t dev, ino_t ino)
{
    uint64_t key = ((uint64_t)dev * 0x9e3779b97f4a7c15u) ^ (uint64_t)ino;
    key *= 0xff51afd7ed558ccdu;
    return &t->buckets[(key >> 32) % BUCKETS];
}

/* Unmap m (mappings->lock held, no answer on it). */
static void unmap(struct larder__ucx *hub, struct larder__ucx_mapping *m)
{
    if (m->memh) ucp_mem_unmap(hub->context, m->memh);
    munmap(m->base, m->length);
    free(m);
}

/* Take m out of the order of use (mappings->lock held). */
static void unlink_use(struct larder__ucx_mappings *t, struct larder__ucx_mapping *m)
{
    if (m->newer)
        m->newer->older = m->older;
    else
        t->newest = m->older;
    if (m->older)
        m->older->newer = m->newer;
    else
        t->oldest = m->newer;
    m->newer = m->older = NULL;
}

/* m, kept, used now (mappings->lock held). */
static void touch(struct larder__ucx_mappings *t, struct larder__ucx_mapping *m)
{
    if (t->newest == m) return;
    if (m->newer) unlink_use(t, m); /* in the list already (a new one is not) */
    m->older = t->newest;
    if (t->newest) t->newest->newer = m;
    t->newest = m;
    if (!t->oldest) t->oldest = m;
}

/* Take m out of the table (mappings->lock held); unmapped now if unused. */
static void drop(struct larder__ucx *hub, struct larder__ucx_mapping *m)
{
    struct larder__ucx_mappings *t = hub->mappings;
    for (struct larder__ucx_mapping **at = bucket(t, m->dev, m->ino); *at; at = &(*at)->same_bucket)
        if (*at == m) {
            *at = m->same_bucket;
            unlink_use(t, m);
            t->count--;
            t->bytes -= m->length;
            break;
        }
    m->kept = false;
    if (m->refs == 0) unmap(hub, m);
}

void larder__ucx_mappings_free(struct larder__ucx *hub)
{
    struct larder__ucx_mappings *t = hub->mappings;
    if (!t) return;
    pthread_mutex_lock(&t->lock);
    while (t->newest)
        drop(hub, t->newest); /* every answer is done: the hub's users are gone */
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_destroy(&t->lock);
    free(t);
    hub->mappings = NULL;
}

/* Room for `length` more bytes in the table (mappings->lock held): the
 * least recently used mappings no answer is using go.  Whether there is. */
static bool make_room(struct larder__ucx *hub, size_t length)
{
    struct larder__ucx_mappings *t = hub->mappings;
    size_t most = t->most ? t->most : MAX_MAPPINGS;
    size_t most_bytes = t->most_bytes ? t->most_bytes : MAX_MAPPED_BYTES;
    if (length > most_bytes) return false;
    struct larder__ucx_mapping *m = t->oldest;
    while (m && (t->count >= most || t->bytes + length > most_bytes)) {
        struct larder__ucx_mapping *newer = m->newer;
        if (m->refs == 0) drop(hub, m);
        m = newer;
    }
    return t->count < most && t->bytes + length <= most_bytes;
}

/* A new mapping of the whole file (mappings->lock held).  NULL with errno set. */
static struct larder__ucx_mapping *map_file(struct larder__ucx *hub, int fd, const struct stat *st)
{
    struct larder__ucx_mapping *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->length = (size_t)st->st_size;
    void *base = mmap(NULL, m->length, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        int err = errno;
        free(m);
        errno = err;
        return NULL;
    }
    __atomic_add_fetch(&hub->stats.maps, 1, __ATOMIC_RELAXED);
    m->base = base;
    m->dev = st->st_dev;
    m->ino = st->st_ino;
    /* registered once for every answer from it; NONBLOCK: pages are not
     * faulted in (or pinned) ahead of the answers that need them */
    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_PROT,
        .address = base,
        .length = m->length,
        .flags = UCP_MEM_MAP_NONBLOCK,
        .prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_REMOTE_READ};
    if (ucp_mem_map(hub->context, &params, &m->memh) != UCS_OK) m->memh = NULL;
    return m;
}

int larder__ucx_mapping_get(struct larder__ucx *hub, int fd, uint64_t offset, size_t length,
                            struct larder__ucx_mapping **out, const void **bytes, void **memh)
{
    struct stat st;
    if (fstat(fd, &st) < 0) return -errno;
    /* a cache file cut under us would fault the sender: the size is checked first */
    if ((uint64_t)st.st_size < offset + length || offset + length < offset) return -EIO;
    struct larder__ucx_mappings *t = hub->mappings;
    pthread_mutex_lock(&t->lock);
    struct larder__ucx_mapping *m = *bucket(t, st.st_dev, st.st_ino);
    while (m && (m->dev != st.st_dev || m->ino != st.st_ino))
        m = m->same_bucket;
    if (m && m->length < offset + length) { /* the file grew: mapped again */
        drop(hub, m);
        m = NULL;
    }
    if (!m) {
        /* kept when there is room for it, else unmapped once its answer is sent */
        bool room = st.st_nlink > 0 && make_room(hub, (size_t)st.st_size);
        if (!(m = map_file(hub, fd, &st))) {
            int err = -errno;
            pthread_mutex_unlock(&t->lock);
            return err;
        }
        if (room) {
            struct larder__ucx_mapping **at = bucket(t, st.st_dev, st.st_ino);
            m->kept = true;
            m->same_bucket = *at;
            *at = m;
            t->count++;
            t->bytes += m->length;
        }
    }
    if (m->kept) touch(t, m);
    m->refs++;
    if (st.st_nlink == 0 && m->kept) drop(hub, m); /* deleted: unmapped once this answer is sent */
    pthread_mutex_unlock(&t->lock);
    *out = m;
    *bytes = m->base + offset;
    *memh = m->memh;
    return 0;
}

void larder__ucx_mapping_put(struct larder__ucx *hub, struct larder__ucx_mapping *m)
{
    if (!m) return;
    struct larder__ucx_mappings *t = hub->mappings;
    pthread_mutex_lock(&t->lock);
    if (--m->refs == 0 && !m->kept) unmap(hub, m);
    pthread_mutex_unlock(&t->lock);
}

void larder__ucx_set_max_mappings(struct larder__ucx *hub, size_t most)
{
    struct larder__ucx_mappings *t = hub->mappings;
    pthread_mutex_lock(&t->lock);
    t->most = most;
    pthread_mutex_unlock(&t->lock);
}

void larder__ucx_set_max_mapped_bytes(struct larder__ucx *hub, size_t most)
{
    struct larder__ucx_mappings *t = hub->mappings;
    pthread_mutex_lock(&t->lock);
    t->most_bytes = most;
    pthread_mutex_unlock(&t->lock);
}

size_t larder__ucx_mapped_bytes(struct larder__ucx *hub)
{
    struct larder__ucx_mappings *t = hub->mappings;
    pthread_mutex_lock(&t->lock);
    size_t n = t->bytes;
    pthread_mutex_unlock(&t->lock);
    return n;
}

uint64_t larder__ucx_maps(struct larder__ucx *hub)
{
    return __atomic_load_n(&hub->stats.maps, __ATOMIC_RELAXED);
}

size_t larder__ucx_mapped_files(struct larder__ucx *hub)
{
    struct larder__ucx_mappings *t = hub->mappings;
    pthread_mutex_lock(&t->lock);
    size_t n = t->count;
    pthread_mutex_unlock(&t->lock);
    return n;
}

#else /* built without UCX */

void larder__ucx_set_max_mappings(struct larder__ucx *hub, size_t most)
{
    (void)hub, (void)most;
}

void larder__ucx_set_max_mapped_bytes(struct larder__ucx *hub, size_t most)
{
    (void)hub, (void)most;
}

size_t larder__ucx_mapped_bytes(struct larder__ucx *hub)
{
    (void)hub;
    return 0;
}

uint64_t larder__ucx_maps(struct larder__ucx *hub)
{
    (void)hub;
    return 0;
}

size_t larder__ucx_mapped_files(struct larder__ucx *hub)
{
    (void)hub;
    return 0;
}

#endif
