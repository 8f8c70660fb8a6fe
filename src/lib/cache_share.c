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
 * anew before it grows (larder__share_over); until then it holds nothing,
 * so the node's total misses nothing.
 */
#include "cache_internal.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARE_MAGIC "LARDERNS"
#define SHARE_VERSION 1
#define SHARE_SLOTS 32
#define PUBLISHED_FOR_MS 10000
/* blocks a dataset's published count may move between popcounts: 64, or
 * 1/4096 of its blocks when more (a popcount reads one word per 64 blocks:
 * about 64 word reads per block moved, whatever the dataset's size) */
#define COUNT_SLACK 64
#define COUNT_SLACK_SHIFT 12
#define COUNT_FOR_MS 1000    /* a popcount is taken again at least this often */
#define MAX_SHARDS (1 << 20) /* another dataset with more shards is never evicted from */

struct share_victim {
    uint64_t use;    /* weighed steps to its next use; UINT64_MAX: never */
    uint64_t global; /* block number in its dataset */
    uint64_t offset; /* in its shard's data file */
    uint32_t shard, length;
};

struct share_slot {
    uint64_t state; /* atomic: 0 free, 2 live, or a claim (larder__claim_word) */
    uint64_t id_low, id_high;
    uint64_t sequence; /* atomic: odd while the victims are written */
    int64_t published_ms;
    uint64_t count;
    uint64_t reserved[2];
    struct share_victim victims[LARDER__SHARE_VICTIMS];
};

struct share_file {
    char magic[8];
    uint32_t version, slots;
    uint64_t capacity;
    uint64_t reserved[6];
    struct share_slot slot[SHARE_SLOTS];
};

/* Another dataset's `blocks`, mapped to read its count and bits, and its
 * geometry, worked out from its own files (never from a publication). */
struct peer {
    uint64_t id_low, id_high;
    struct shared_header *header;
    uint64_t *resident, *borrowed, *suspect;
    /* the header's, as checked against the file at mapping: the mapping is
     * shared and writable, its header may change */
    uint64_t total_blocks;
    uint32_t block_size;
    unsigned block_shift;
    size_t size;
    /* its resident count: the bitmap's popcount, taken again when the
     * published counter moved by more than its slack or COUNT_FOR_MS
     * passed; in between, the counter's moves are added */
    uint64_t counted, published_at_count;
    int64_t counted_ms;
    bool ever_counted;
    /* shards: 0 not worked out yet, 1 known, -1 refused (never evicted from) */
    int geometry;
    uint64_t num_shards;
    uint64_t *shard_base; /* first global block of each shard, plus the total */
    uint64_t *shard_size; /* its data file's size, the shard's */
    char dir[PATH_MAX - 64];
};

struct larder__share {
    struct share_file *file;
    uint64_t capacity; /* this process's LARDER_NODE_CACHE_SIZE: the file's is only shown */
    int slot;
    uint64_t id_low, id_high;
    pthread_mutex_t lock; /* guards peers[] (admission runs outside evict_lock) */
    struct peer peers[SHARE_SLOTS];
    char root[PATH_MAX - 128]; /* DIR */
};

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

static int claim_slot(struct larder__share *s);

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
            s->slot = claim_slot(s);
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

static void peer_drop(struct peer *p)
{
    if (p->header) munmap(p->header, p->size);
    free(p->shard_base);
    free(p->shard_size);
    memset(p, 0, sizeof *p);
}

void larder__share_close(struct larder__share *s)
{
    if (!s) return;
    for (int i = 0; i < SHARE_SLOTS; i++)
        peer_drop(&s->peers[i]);
    munmap(s->file, sizeof *s->file);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Whether slot i is the first live slot naming its dataset: only that one
 * is its dataset's (a later one claiming the same id is ignored, so no
 * dataset is counted twice nor published for by two slots). */
static bool first_of_its_id(const struct share_file *f, int i)
{
    if (__atomic_load_n(&f->slot[i].state, __ATOMIC_ACQUIRE) != 2) return false;
    for (int j = 0; j < i; j++)
        if (__atomic_load_n(&f->slot[j].state, __ATOMIC_ACQUIRE) == 2 &&
            f->slot[j].id_low == f->slot[i].id_low && f->slot[j].id_high == f->slot[i].id_high)
            return false;
    return true;
}

/* Map the `blocks` of the dataset in slot i (checked against its own header). */
static struct peer *peer_of(struct larder__share *s, int i)
{
    struct share_slot *x = &s->file->slot[i];
    struct peer *p = &s->peers[i];
    if (p->header && p->id_low == x->id_low && p->id_high == x->id_high) return p;
    peer_drop(p);
    char id[33], path[PATH_MAX];
    larder__hex128(x->id_high, x->id_low, id);
    snprintf(p->dir, sizeof p->dir, "%s/%s", s->root, id);
    snprintf(path, sizeof path, "%s/blocks", p->dir);
    int fd = larder__sys.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    struct stat st;
    if (fd < 0) return NULL;
    if (larder__sys.fstat(fd, &st) < 0 || (uint64_t)st.st_size < LARDER__CACHE_HEADER_SIZE) {
        larder__sys.close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    larder__sys.close(fd);
    if (map == MAP_FAILED) return NULL;
    struct shared_header *h = map;
    /* read once: the mapping is shared and writable, so every later use
     * goes by this value, checked here against the file's size */
    uint64_t total = __atomic_load_n(&h->total_blocks, __ATOMIC_RELAXED);
    uint32_t block_size = __atomic_load_n(&h->block_size, __ATOMIC_RELAXED);
    uint64_t words = (total + 63) / 64;
    if (memcmp(h->magic, LARDER__CACHE_MAGIC, 8) != 0 || h->version != LARDER__CACHE_VERSION ||
        h->id_low != x->id_low || h->id_high != x->id_high || total > (UINT64_C(1) << 36) ||
        block_size < 512 || block_size > (UINT32_C(1) << 30) ||
        (block_size & (block_size - 1)) != 0 ||
        (uint64_t)st.st_size != LARDER__CACHE_HEADER_SIZE + 5 * words * 8) {
        munmap(map, (size_t)st.st_size);
        return NULL;
    }
    p->id_low = x->id_low, p->id_high = x->id_high;
    p->header = h;
    p->total_blocks = total;
    p->block_size = block_size;
    while ((UINT32_C(1) << p->block_shift) < block_size)
        p->block_shift++;
    p->size = (size_t)st.st_size;
    p->resident = (uint64_t *)((uint8_t *)map + LARDER__CACHE_HEADER_SIZE);
    p->borrowed = p->resident + 2 * words;
    p->suspect = p->resident + 3 * words;
    return p;
}

/* A dataset's resident blocks, from its bitmap: its published counter
 * moves this count only within its slack of the last popcount (a
 * counter written by anyone else can shift the node's total by no more). */
static uint64_t peer_count(struct peer *p, int64_t now)
{
    uint64_t published = atomic_load64(&p->header->resident_blocks);
    int64_t moved = (int64_t)(published - p->published_at_count);
    int64_t slack = (int64_t)(p->total_blocks >> COUNT_SLACK_SHIFT);
    if (slack < COUNT_SLACK) slack = COUNT_SLACK;
    if (!p->ever_counted || moved > slack || moved < -slack ||
        now - p->counted_ms >= COUNT_FOR_MS || now < p->counted_ms) {
        uint64_t words = p->total_blocks / 64, count = 0;
        for (uint64_t w = 0; w < words; w++)
            count += (uint64_t)__builtin_popcountll(atomic_load64(&p->resident[w]));
        if (p->total_blocks % 64) /* bits past the last block are no block's */
            count += (uint64_t)__builtin_popcountll(atomic_load64(&p->resident[words]) &
                                                    ((UINT64_C(1) << (p->total_blocks % 64)) - 1));
        p->counted = count;
        p->published_at_count = published;
        p->counted_ms = now;
        p->ever_counted = true;
        moved = 0;
    }
    if (moved < 0 && (uint64_t)-moved > p->counted) return 0;
    uint64_t count = p->counted + (uint64_t)moved;
    return count < p->total_blocks ? count : p->total_blocks;
}

/* Whether live slot i may go to another dataset: a second slot of an id
 * (counted for nothing), or one whose dataset holds no block (or has no
 * cache files any more) and published nothing for PUBLISHED_FOR_MS.  Call
 * with s->lock held. */
static bool slot_reclaimable(struct larder__share *s, int i, int64_t now)
{
    const struct share_slot *x = &s->file->slot[i];
    if (__atomic_load_n(&x->state, __ATOMIC_ACQUIRE) != 2) return false;
    if (!first_of_its_id(s->file, i)) return true;
    int64_t published = x->published_ms;
    if (published && now >= published && now - published <= PUBLISHED_FOR_MS) return false;
    struct peer *p = peer_of(s, i);
    if (!p) return true;
    p->ever_counted = false; /* a popcount now, not the published counter */
    return peer_count(p, now) == 0;
}

/*
 * A slot for s's dataset: a free one, one whose claimer died before it
 * published, else one slot_reclaimable gives back; its index, or -1.  A
 * slot is taken by compare-and-swap to a claim word, named, then made
 * live, so two openers never take the same one.  Call with s->lock held.
 */
static int claim_slot(struct larder__share *s)
{
    struct share_file *f = s->file;
    int64_t now = larder__cache_clock_ms();
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < SHARE_SLOTS; i++) {
            struct share_slot *x = &f->slot[i];
            uint64_t expected = __atomic_load_n(&x->state, __ATOMIC_ACQUIRE);
            bool takable = pass == 0 ? expected == 0 || larder__claim_abandoned(expected)
                                     : slot_reclaimable(s, i, now);
            if (!takable) continue;
            uint64_t claim = larder__claim_word();
            if (!__atomic_compare_exchange_n(&x->state, &expected, claim, false, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE))
                continue;
            x->id_low = s->id_low;
            x->id_high = s->id_high;
            x->count = 0;
            x->published_ms = 0;
            if (__atomic_compare_exchange_n(&x->state, &claim, 2, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE))
                return i;
        }
    return -1;
}

/* s's dataset has a live slot, claimed anew when another took its slot
 * back while it held nothing.  Call with s->lock held. */
static void keep_slot(struct larder__share *s)
{
    for (int i = 0; i < SHARE_SLOTS; i++)
        if (first_of_its_id(s->file, i) && s->file->slot[i].id_low == s->id_low &&
            s->file->slot[i].id_high == s->id_high)
            return;
    int slot = claim_slot(s);
    if (slot >= 0) s->slot = slot;
}

/* Bytes every dataset of the directory holds. */
static uint64_t node_bytes(struct larder__share *s)
{
    uint64_t total = 0;
    int64_t now = larder__cache_clock_ms();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SHARE_SLOTS; i++) {
        if (!first_of_its_id(s->file, i)) continue;
        struct peer *p = peer_of(s, i);
        if (p) total += peer_count(p, now) << p->block_shift;
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
        if (first_of_its_id(s->file, i) && s->file->slot[i].id_low == s->id_low &&
            s->file->slot[i].id_high == s->id_high)
            slot = i;
    if (slot < 0) return; /* freed under it: it publishes nothing, so nothing is taken from it */
    s->slot = slot;
    struct share_slot *x = &s->file->slot[slot];
    if (count > LARDER__SHARE_VICTIMS) count = LARDER__SHARE_VICTIMS;
    __atomic_fetch_add(&x->sequence, 1, __ATOMIC_ACQ_REL); /* odd: being written */
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
    __atomic_fetch_add(&x->sequence, 1, __ATOMIC_ACQ_REL);
}

/* The farthest victim another dataset published that is still resident. */
static bool farthest_other(struct larder__share *s, struct share_victim *out, int *slot)
{
    bool found = false;
    int64_t now = larder__cache_clock_ms();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SHARE_SLOTS; i++) {
        struct share_slot *x = &s->file->slot[i];
        if (!first_of_its_id(s->file, i) || (x->id_low == s->id_low && x->id_high == s->id_high))
            continue;
        struct peer *p = peer_of(s, i);
        if (!p) continue;
        struct share_victim copy[LARDER__SHARE_VICTIMS];
        uint64_t before = __atomic_load_n(&x->sequence, __ATOMIC_ACQUIRE);
        uint64_t count = x->count < LARDER__SHARE_VICTIMS ? x->count : LARDER__SHARE_VICTIMS;
        memcpy(copy, x->victims, sizeof copy);
        bool stale = now - x->published_ms > PUBLISHED_FOR_MS;
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
    struct peer *p = peer_of(s, slot);
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
    keep_slot(s); /* about to hold more: counted from now on */
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
