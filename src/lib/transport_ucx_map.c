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
 * kept for the next answers from it, at most MAX_MAPPINGS files; the
 * least recently used mapping no answer is using goes when the table is
 * full.  The table holds a node's whole set of shard files, not a
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

struct larder__ucx_mapping {
    dev_t dev;
    ino_t ino;
    uint8_t *base; /* the whole file as it was when mapped, PROT_READ */
    size_t length;
    ucp_mem_h memh; /* its registration; NULL: none (UCX registers per send) */
    int refs;       /* answers sending from it */
    bool kept;      /* in the table (false: unmapped once refs is 0) */
    uint64_t used;  /* the table's clock at its last use: the oldest goes first */
    struct larder__ucx_mapping *next;
};

struct larder__ucx_mappings {
    pthread_mutex_t lock;
    struct larder__ucx_mapping *list; /* the kept ones */
    size_t count;
    size_t most; /* 0: MAX_MAPPINGS (larder__ucx_set_max_mappings, for tests) */
    uint64_t clock;
};

int larder__ucx_mappings_new(struct larder__ucx *hub)
{
    struct larder__ucx_mappings *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    pthread_mutex_init(&t->lock, NULL);
    hub->mappings = t;
    return 0;
}

/* Unmap m (mappings->lock held, no answer on it). */
static void unmap(struct larder__ucx *hub, struct larder__ucx_mapping *m)
{
    if (m->memh) ucp_mem_unmap(hub->context, m->memh);
    munmap(m->base, m->length);
    free(m);
}

/* Take m out of the table (mappings->lock held); unmapped now if unused. */
static void drop(struct larder__ucx *hub, struct larder__ucx_mapping *m)
{
    struct larder__ucx_mappings *t = hub->mappings;
    for (struct larder__ucx_mapping **at = &t->list; *at; at = &(*at)->next)
        if (*at == m) {
            *at = m->next;
            t->count--;
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
    while (t->list)
        drop(hub, t->list); /* every answer is done: the hub's users are gone */
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_destroy(&t->lock);
    free(t);
    hub->mappings = NULL;
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
    struct larder__ucx_mapping *m = NULL, *oldest = NULL;
    for (struct larder__ucx_mapping *e = t->list; e; e = e->next) {
        if (e->dev == st.st_dev && e->ino == st.st_ino) m = e;
        if (e->refs == 0 && (!oldest || e->used < oldest->used)) oldest = e;
    }
    if (m && m->length < offset + length) { /* the file grew: mapped again */
        if (oldest == m) oldest = NULL;
        drop(hub, m);
        m = NULL;
    }
    if (!m) {
        if (t->count >= (t->most ? t->most : MAX_MAPPINGS) && oldest) drop(hub, oldest);
        if (!(m = map_file(hub, fd, &st))) {
            int err = -errno;
            pthread_mutex_unlock(&t->lock);
            return err;
        }
        m->kept = true;
        m->next = t->list;
        t->list = m;
        t->count++;
    }
    m->refs++;
    if (st.st_nlink == 0) drop(hub, m); /* a deleted file: unmapped once this answer is sent */
    m->used = ++t->clock;
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

size_t larder__ucx_mapped_files(struct larder__ucx *hub)
{
    (void)hub;
    return 0;
}

#endif
