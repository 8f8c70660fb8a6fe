/*
 * cache_share.c - one capacity for every dataset of a cache directory
 * (LARDER_NODE_CACHE_SIZE), shared by the rule of next use: when the
 * datasets together hold more than it, the block read farthest in the
 * future goes, whichever dataset it belongs to.
 *
 * DIR/node-share is a small shared file: the node capacity (the last
 * opener's, for tools: each process goes by its own setting) and one slot
 * per dataset (its id, and the blocks its evicting processes would drop
 * first, with their next use, published after each candidate scan under
 * a sequence counter).  A process whose dataset pushes the node over the
 * capacity compares its own farthest block with the farthest block other
 * datasets published, and evicts whichever is farther: its own through
 * the usual path, another's by taking that block's fill lock in the other
 * dataset's `locks`, clearing its bit in the other's `blocks` and
 * punching the hole in the other's data file.  The file is writable by
 * whoever may write the cache directory, so a publication is only a
 * choice: the block's place (shard, offset, length) is worked out from
 * the other dataset's own geometry (its data files, each its shard's
 * size, checked against its header's totals), a victim that names
 * another place is refused, and the hole goes into the data file whose
 * size the geometry came from.  A dataset's slot is the first live one
 * naming it, its id checked against the `blocks` header it points to (a
 * later slot claiming the same id is ignored: no dataset counts twice).
 * The node's total is the sum of the datasets' resident blocks, counted
 * in their bitmaps: a header's published counter only moves a count
 * within COUNT_SLACK blocks (or 1/4096 of the dataset's) of the last
 * popcount, which is taken again when it moves farther, and every
 * COUNT_FOR_MS.  A dataset with no live plan publishes nothing and is
 * never taken from by others; a publication older than PUBLISHED_FOR_MS
 * (its readers gone) counts as never used.
 *
 * Slots are given back: a dataset opened when all SHARE_SLOTS are live
 * takes the slot of one that holds nothing (no resident block, or no cache
 * files any more: a replaced checkpoint evicted whole) and published
 * nothing for PUBLISHED_FOR_MS, so a long-lived cache directory that has
 * seen many datasets (a checkpoint per hour) keeps admitting new ones.  A
 * dataset whose slot was taken so, and that caches again, claims a slot
 * anew when it next weighs the node's total (larder__share_over: before it
 * admits more, or under LARDER_EVICT=clock when it next evicts); the blocks
 * it stored meanwhile are missing from the others' total until then.
 */
#include "cache_internal.h"
#include "cache_share_internal.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t parse_size(const char *text)
{
    char *end;
    unsigned long long value = strtoull(text, &end, 10);
    uint64_t unit = 1;
    if (*end == 'K' || *end == 'k') unit = UINT64_C(1) << 10;
    if (*end == 'M' || *end == 'm') unit = UINT64_C(1) << 20;
    if (*end == 'G' || *end == 'g') unit = UINT64_C(1) << 30;
    if (*end == 'T' || *end == 't') unit = UINT64_C(1) << 40;
    return value > UINT64_MAX / unit ? 0 : value * unit;
}

void larder__share_open(struct larder__cache *c, const char *root, uint64_t id_low,
                        uint64_t id_high)
{
    const char *size = getenv("LARDER_NODE_CACHE_SIZE");
    uint64_t capacity = size ? parse_size(size) : 0;
    if (!capacity) return;
    struct larder__share *s = calloc(1, sizeof *s);
    if (!s) return;
    if (strlen(root) >= sizeof s->root) {
        free(s);
        return;
    }
    snprintf(s->root, sizeof s->root, "%s", root);
    s->id_low = id_low, s->id_high = id_high;
    s->capacity = capacity;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/node-share", root);
    int fd =
        larder__sys.open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, LARDER__CACHE_FILE_MODE);
    struct stat st;
    if (fd < 0 || larder__sys.fstat(fd, &st) < 0 ||
        ((uint64_t)st.st_size < sizeof(struct share_file) &&
         larder__sys.ftruncate(fd, sizeof(struct share_file)) < 0)) {
        if (fd >= 0) larder__sys.close(fd);
        free(s);
        return;
    }
    s->file = mmap(NULL, sizeof *s->file, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    larder__sys.close(fd);
    if (s->file == MAP_FAILED) {
        free(s);
        return;
    }
    struct share_file *f = s->file;
    if (memcmp(f->magic, SHARE_MAGIC, 8) != 0) { /* new: two creators write the same */
        f->version = SHARE_VERSION;
        f->slots = SHARE_SLOTS;
        memcpy(f->magic, SHARE_MAGIC, 8);
    }
    s->slot = -1;
    pthread_mutex_init(&s->lock, NULL);
    if (f->version == SHARE_VERSION && f->slots == SHARE_SLOTS) {
        __atomic_store_n(&f->capacity, capacity, __ATOMIC_RELEASE);
        for (int i = 0; i < SHARE_SLOTS && s->slot < 0; i++) { /* its slot, if it has one */
            struct share_slot *x = &f->slot[i];
            if (__atomic_load_n(&x->state, __ATOMIC_ACQUIRE) == 2 && x->id_low == id_low &&
                x->id_high == id_high)
                s->slot = i;
        }
        if (s->slot < 0) {
            pthread_mutex_lock(&s->lock);
            s->slot = larder__share_claim_slot(s);
            pthread_mutex_unlock(&s->lock);
        }
    }
    if (s->slot < 0) {
        larder__log(LARDER_LOG_WARN,
                    "%s: no room for this dataset (%d at most); it keeps to its "
                    "own capacity",
                    path, SHARE_SLOTS);
        munmap(s->file, sizeof *s->file);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return;
    }
    c->share = s;
}

void larder__share_close(struct larder__share *s)
{
    if (!s) return;
    for (int i = 0; i < SHARE_SLOTS; i++)
        larder__share_peer_drop(&s->peers[i]);
    munmap(s->file, sizeof *s->file);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Bytes every dataset of the directory holds. */
static uint64_t node_bytes(struct larder__share *s)
{
    uint64_t total = 0;
    int64_t now = larder__cache_clock_ms();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SHARE_SLOTS; i++) {
        if (!larder__share_first_of_its_id(s->file, i)) continue;
        struct peer *p = larder__share_peer_of(s, i);
        if (p) total += larder__share_peer_count(p, now) << p->block_shift;
    }
    pthread_mutex_unlock(&s->lock);
    return total;
}

/* Work out a dataset's shards from its data files (each the shard's full
 * size, made before its `blocks`), checked against its header's totals;
 * false (for good) when they disagree. */
static bool peer_geometry(struct peer *p)
{
    if (p->geometry) return p->geometry > 0;
    p->geometry = -1;
    uint64_t shards = __atomic_load_n(&p->header->num_shards, __ATOMIC_RELAXED);
    uint64_t bytes = __atomic_load_n(&p->header->total_bytes, __ATOMIC_RELAXED);
    if (shards == 0 || shards > MAX_SHARDS) return false;
    p->shard_base = malloc((shards + 1) * sizeof *p->shard_base);
    p->shard_size = malloc(shards * sizeof *p->shard_size);
    if (!p->shard_base || !p->shard_size) return false;
    uint64_t base = 0, sum = 0;
    for (uint64_t i = 0; i < shards; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%06llu.data", p->dir, (unsigned long long)i);
        int fd = larder__sys.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
        struct stat st;
        bool sound = fd >= 0 && larder__sys.fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                     st.st_size >= 0 && ((uint64_t)st.st_size >> p->block_shift) <= p->total_blocks;
        if (fd >= 0) larder__sys.close(fd);
        if (!sound) return false;
        p->shard_base[i] = base;
        p->shard_size[i] = (uint64_t)st.st_size;
        base += (p->shard_size[i] + p->block_size - 1) >> p->block_shift;
        sum += p->shard_size[i];
        if (base > p->total_blocks) return false;
    }
    p->shard_base[shards] = base;
    if (base != p->total_blocks || sum != bytes) return false;
    p->num_shards = shards;
    p->geometry = 1;
    return true;
}

/* The shard, offset and length of block `global` of a peer whose geometry is known. */
static void peer_locate(const struct peer *p, uint64_t global, struct share_victim *where)
{
    uint64_t low = 0, high = p->num_shards - 1; /* the last shard starting at or before it */
    while (low < high) {
        uint64_t mid = (low + high + 1) / 2;
        if (p->shard_base[mid] <= global)
            low = mid;
        else
            high = mid - 1;
    }
    uint64_t block = global - p->shard_base[low];
    uint64_t offset = block << p->block_shift, left = p->shard_size[low] - offset;
    where->shard = (uint32_t)low;
    where->offset = offset;
    where->length = (uint32_t)(left < p->block_size ? left : p->block_size);
}

/* Whether a published victim is a resident block of the peer, at the
 * place its geometry puts that block (a victim naming another place is
 * refused: its hole would fall in another block). */
static bool victim_sound(struct peer *p, const struct share_victim *v)
{
    if (v->global >= p->total_blocks || !bit_get(p->resident, v->global) || !peer_geometry(p))
        return false;
    struct share_victim at;
    peer_locate(p, v->global, &at);
    return at.shard == v->shard && at.offset == v->offset && at.length == v->length;
}

void larder__share_publish(struct larder__cache *c, const uint64_t *blocks, const uint64_t *uses,
                           size_t count)
{
    struct larder__share *s = c->share;
    if (!s) return;
    /* this dataset's slot is the first live one with its id (another may
     * have taken that place since it was opened) */
    int slot = -1;
    for (int i = 0; i < SHARE_SLOTS && slot < 0; i++)
        if (larder__share_first_of_its_id(s->file, i) && s->file->slot[i].id_low == s->id_low &&
            s->file->slot[i].id_high == s->id_high)
            slot = i;
    if (slot < 0) return; /* freed under it: it publishes nothing, so nothing is taken from it */
    s->slot = slot;
    struct share_slot *x = &s->file->slot[slot];
    if (count > LARDER__SHARE_VICTIMS) count = LARDER__SHARE_VICTIMS;
    /* odd while being written, taken by compare-and-swap: an odd sequence is
     * another writer's (this publication is skipped: the next one comes with
     * the next pick), or one that died writing, whose odd value every later
     * whole publication kept odd, its victims never read again (found by
     * review): one odd for more than WRITER_GONE_MS (its publication time is
     * the last whole one's, or the dead writer's own) is taken over, moving
     * by two so that the one it took it from, were it only slow, ends
     * nothing of this one */
    int64_t now = larder__cache_clock_ms();
    uint64_t seq = __atomic_load_n(&x->sequence, __ATOMIC_ACQUIRE);
    uint64_t mine = seq + ((seq & 1) ? 2 : 1);
    if ((seq & 1) && now >= x->published_ms && now - x->published_ms < WRITER_GONE_MS) return;
    if (!__atomic_compare_exchange_n(&x->sequence, &seq, mine, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    for (size_t i = 0; i < count; i++) {
        uint32_t shard = larder__cache_shard_of(c, blocks[i]);
        uint64_t block = blocks[i] - c->shard_base[shard];
        x->victims[i] =
            (struct share_victim){.use = uses[i],
                                  .global = blocks[i],
                                  .offset = block << c->block_shift,
                                  .shard = shard,
                                  .length = (uint32_t)larder__cache_span(c, shard, block, block)};
    }
    x->count = count;
    x->published_ms = larder__cache_clock_ms();
    /* even again, unless another took it over meanwhile: then it is theirs */
    __atomic_compare_exchange_n(&x->sequence, &mine, mine + 1, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
}

/* The farthest victim another dataset published that is still resident. */
static bool farthest_other(struct larder__share *s, struct share_victim *out, int *slot)
{
    bool found = false;
    int64_t now = larder__cache_clock_ms();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SHARE_SLOTS; i++) {
        struct share_slot *x = &s->file->slot[i];
        if (!larder__share_first_of_its_id(s->file, i) ||
            (x->id_low == s->id_low && x->id_high == s->id_high))
            continue;
        struct peer *p = larder__share_peer_of(s, i);
        if (!p) continue;
        struct share_victim copy[LARDER__SHARE_VICTIMS];
        uint64_t before = __atomic_load_n(&x->sequence, __ATOMIC_ACQUIRE);
        uint64_t count = x->count < LARDER__SHARE_VICTIMS ? x->count : LARDER__SHARE_VICTIMS;
        memcpy(copy, x->victims, sizeof copy);
        bool stale = !larder__share_published_lately(x->published_ms, now);
        if ((before & 1) || __atomic_load_n(&x->sequence, __ATOMIC_ACQUIRE) != before) continue;
        for (uint64_t k = 0; k < count; k++) {
            struct share_victim v = copy[k];
            if (stale) v.use = UINT64_MAX; /* its readers are gone */
            if (!victim_sound(p, &v)) continue;
            if (!found || v.use > out->use) {
                *out = v;
                *slot = i;
                found = true;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

/* Evict another dataset's block (its fill lock, bit, count and hole), at
 * the place its own geometry puts it, in the data file of that size. */
static bool evict_other(struct larder__share *s, int slot, const struct share_victim *v)
{
    pthread_mutex_lock(&s->lock);
    struct peer *p = larder__share_peer_of(s, slot);
    bool evicted = false;
    int lock_fd = -1, data = -1;
    char path[PATH_MAX];
    struct stat st;
    if (!p || !victim_sound(p, v)) goto out;
    snprintf(path, sizeof path, "%s/%06u.data", p->dir, v->shard);
    data = larder__sys.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    if (data < 0 || larder__sys.fstat(data, &st) < 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != p->shard_size[v->shard])
        goto out; /* not the file its geometry came from */
    snprintf(path, sizeof path, "%s/locks", p->dir);
    lock_fd = larder__open(path, O_RDWR | O_CREAT | O_NOFOLLOW, LARDER__CACHE_FILE_MODE);
    if (lock_fd < 0) goto out;
    struct flock lock = {
        .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)v->global, .l_len = 1};
    if (fcntl(lock_fd, F_OFD_SETLK, &lock) == 0) {
        /* the bit cleared and the hole punched must be of one cache: the
         * mapping may be of a blocks file removed since (with its data
         * files, and the dataset opened again), whose bit is no longer
         * the data file's; then the mapping is dropped, and a later
         * eviction maps the cache that is there now */
        if (!larder__share_peer_current(p)) {
            lock.l_type = F_UNLCK;
            fcntl(lock_fd, F_OFD_SETLK, &lock);
            larder__share_peer_drop(p);
            goto out;
        }
        if (clear_bits(p->resident, v->global, v->global)) {
            __atomic_fetch_add(&p->header->generation, 1, __ATOMIC_ACQ_REL);
            __atomic_fetch_sub(&p->header->resident_blocks, 1, __ATOMIC_RELAXED);
            if (clear_bits(p->borrowed, v->global, v->global))
                __atomic_fetch_sub(&p->header->borrowed_blocks, 1, __ATOMIC_RELAXED);
            clear_bits(p->suspect, v->global, v->global);
            larder__cache_count(&p->header->counters.evictions, 1);
            larder__sys.fallocate(data, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                  (off_t)v->offset, (off_t)v->length);
            evicted = true;
        }
        lock.l_type = F_UNLCK;
        fcntl(lock_fd, F_OFD_SETLK, &lock);
    }
out:
    if (lock_fd >= 0) larder__sys.close(lock_fd);
    if (data >= 0) larder__sys.close(data);
    pthread_mutex_unlock(&s->lock);
    return evicted;
}

bool larder__share_over(struct larder__cache *c, uint64_t more_bytes)
{
    struct larder__share *s = c->share;
    if (!s) return false;
    pthread_mutex_lock(&s->lock);
    larder__share_keep_slot(s); /* about to hold more: counted from now on */
    pthread_mutex_unlock(&s->lock);
    return node_bytes(s) + more_bytes > s->capacity;
}

bool larder__share_farthest(struct larder__cache *c, uint64_t *use)
{
    struct share_victim v;
    int slot;
    if (!c->share || !farthest_other(c->share, &v, &slot)) return false;
    *use = v.use;
    return true;
}

void larder__share_trim(struct larder__cache *c, int lock_fd, bool pins)
{
    struct larder__share *s = c->share;
    if (!s) return;
    for (int round = 0; round < 4096 && node_bytes(s) > s->capacity; round++) {
        uint64_t mine = 0;
        uint64_t block = larder__nextuse_farthest(c, pins, &mine);
        struct share_victim other;
        int slot;
        bool theirs = farthest_other(s, &other, &slot);
        if (block == UINT64_MAX && !theirs) return; /* nothing known to take */
        if (theirs && (block == UINT64_MAX || other.use > mine)) {
            if (!evict_other(s, slot, &other)) return;
        } else if (!larder__nextuse_evict_farthest(c, lock_fd, block)) {
            return;
        }
    }
}
