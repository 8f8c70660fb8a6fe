/*
 * hdf5_listing.c - the reads of a listing of an HDF5 group's members
 * (mount.h, docs/mount.md "A registered row order for an HDF5 file").
 *
 * hdf5_order.c lists a group with libhdf5 before it can stage in the
 * sampler's order, and libhdf5 walks a version-1 group's index one node
 * at a time: a B-tree node, then each child it points to, each a round
 * trip to the origin.  Those nodes are spread through the whole file
 * (each written where the file ended when the group grew), so a group of
 * 12800 members is about 1600 symbol-table nodes and 100 B-tree nodes
 * over 3.7 GB.  Here the reads are served from the node cache where it
 * holds them, else from the origin by 16 KiB pages, unchecked (what the
 * listing finds only decides what to stage), and kept by page number; and
 * a B-tree node read brings the pages of the whole tree below it first, a
 * level at a time, FETCHERS reads in flight, so libhdf5 then finds them
 * kept.  One thread uses a listing.
 */
#include "mount.h"

#include "dataset.h"
#include "fill.h"
#include "priority.h"
#include "source.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PAGE (UINT64_C(16) << 10)      /* the listing's unchecked reads */
#define SLOTS 16384                    /* the kept pages' table (open addressing) */
#define KEPT_MAX 8192                  /* pages kept at most: 128 MiB while a listing runs */
#define FETCHERS 32                    /* reads ahead in flight: twice the slots of a busy origin */
#define PREFETCH_MAX 16384             /* children of a level of the tree read ahead */
#define BATCH_MAX (KEPT_MAX / 2)       /* pages one level's read ahead fetches at most (64 MiB) */
#define PREFETCH_BUDGET (4 * KEPT_MAX) /* pages read ahead in one listing at most (512 MiB) */
#define NODE_SPAN                                                                                  \
    512 /* bytes of a node read ahead: a symbol-table node of 8 entries (h5py's) is 328 */

/*
 * Pages are kept by page number, not direct-mapped by page % slots: with
 * 64 MiB direct-mapped over a 3.7 GB file a quarter of the ~3300 nodes
 * read ahead for 12800 members overwrote each other, and libhdf5 read them
 * again one round trip at a time (742 serial reads in the full
 * benchmark's 8.3 s listing).  Past KEPT_MAX the table is emptied and
 * filled again: a listing that large loses reads ahead, not correctness.
 */
static size_t slot_of(const struct larder__mount_listing *l, uint64_t page)
{
    size_t slot = (size_t)((page * UINT64_C(0x9E3779B97F4A7C15)) >> 50) & (SLOTS - 1);
    while (l->page_key[slot] != 0 && l->page_key[slot] != page + 1)
        slot = (slot + 1) & (SLOTS - 1);
    return slot;
}

/* The kept bytes of `page`, or NULL; valid until the next keep_page. */
static const uint8_t *kept_page(const struct larder__mount_listing *l, uint64_t page)
{
    size_t slot = slot_of(l, page);
    return l->page_key[slot] == page + 1 ? l->page_data[slot] : NULL;
}

/* Keep `data` (PAGE bytes, malloc'd; the table's after the call) as `page`. */
static void keep_page(struct larder__mount_listing *l, uint64_t page, uint8_t *data)
{
    size_t slot = slot_of(l, page);
    if (l->page_key[slot] == page + 1) {
        free(data);
        return;
    }
    if (l->kept >= KEPT_MAX) {
        for (size_t i = 0; i < SLOTS; i++) {
            free(l->page_data[i]);
            l->page_data[i] = NULL, l->page_key[i] = 0;
        }
        l->kept = 0;
        slot = slot_of(l, page);
    }
    l->page_key[slot] = page + 1, l->page_data[slot] = data;
    l->kept++;
}

int larder__mount_listing_begin(struct larder__mount_listing *l)
{
    l->page_key = calloc(SLOTS, sizeof *l->page_key);
    l->page_data = calloc(SLOTS, sizeof *l->page_data);
    l->kept = 0;
    if (l->page_key && l->page_data) return 0;
    larder__mount_listing_end(l);
    return -ENOMEM;
}

void larder__mount_listing_end(struct larder__mount_listing *l)
{
    for (size_t i = 0; l->page_data && i < SLOTS; i++)
        free(l->page_data[i]);
    free(l->page_key), free(l->page_data);
    l->page_key = NULL, l->page_data = NULL, l->kept = 0;
    free(l->symbols);
    l->symbols = NULL, l->symbols_count = l->symbols_capacity = 0;
}

/* Page `page` of the file from the cache where it is resident, else from
 * the origin (unchecked), into a new buffer, *out. */
static int read_page(struct larder__mount_listing *l, struct larder__source *source, uint64_t page,
                     uint8_t **out)
{
    uint64_t from = page * PAGE;
    uint64_t n = l->size - from < PAGE ? l->size - from : PAGE;
    uint8_t *data = malloc(PAGE);
    if (!data) return -ENOMEM;
    struct larder__fill *fill = larder__dataset_fill(l->m->dataset);
    int rc = larder__fill_resident(fill, l->shard, l->base + from, n)
                 ? larder__fill_range_at(fill, l->shard, l->base + from, n, LARDER__NEAR, data)
                 : larder__source_read(source, data, (size_t)n, l->base + from,
                                       larder__read_at(LARDER__NEAR));
    if (rc < 0) {
        free(data);
        return rc;
    }
    *out = data;
    return 0;
}

/* Whether the listing is to end: the unmount, or its owner gave it up (an
 * order replaced by the next epoch's waits for its listing to end). */
static bool stopped(const struct larder__mount_listing *l)
{
    return l->m->stopping || (l->stop && atomic_load(l->stop));
}

/* Pages read ahead by FETCHERS threads, each taking the next not yet taken:
 * no barrier every few reads, so one stalled read holds up one thread. */
struct fetch {
    struct larder__mount_listing *l;
    struct larder__source *source;
    const uint64_t *pages;
    uint8_t **data; /* pages[i]'s bytes, or NULL where the read failed */
    size_t count;
    _Atomic size_t next;
};

static void *run_fetcher(void *arg)
{
    struct fetch *f = arg;
    for (size_t i; (i = atomic_fetch_add(&f->next, 1)) < f->count && !stopped(f->l);) {
        atomic_fetch_add(&f->l->pages_prefetched, 1);
        read_page(f->l, f->source, f->pages[i], &f->data[i]); /* a failure: read later */
    }
    return NULL;
}

/* The child addresses of a group B-tree node ("TREE", type 0) in
 * node[0..length), at most `capacity`, within the file: how many. */
static size_t tree_children(const struct larder__mount_listing *l, const uint8_t *node,
                            size_t length, uint64_t *out, size_t capacity)
{
    if (length < 24 || memcmp(node, "TREE", 4) != 0 || node[4] != 0) return 0;
    size_t used = (size_t)node[6] | (size_t)node[7] << 8, count = 0;
    for (size_t i = 0; i < used && count < capacity; i++) {
        size_t at = 24 + 8 + i * 16; /* past the header and key i */
        if (at + 8 > length) break;
        uint64_t address = 0;
        for (int b = 7; b >= 0; b--)
            address = address << 8 | node[at + (size_t)b];
        if (address < l->size) out[count++] = address;
    }
    return count;
}

static int by_value(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* Read the pages of nodes at addresses[0..count) not kept yet. */
static void fetch_pages(struct larder__mount_listing *l, struct larder__source *source,
                        const uint64_t *addresses, size_t count)
{
    uint64_t *pages = malloc(2 * count * sizeof *pages);
    uint8_t **data = calloc(2 * count, sizeof *data);
    size_t n = 0;
    for (size_t i = 0; pages && data && i < 2 * count; i++) {
        /* each node's first page, and the next where the node may run into it */
        uint64_t at = addresses[i / 2] + (i % 2 ? NODE_SPAN - 1 : 0);
        if (at >= l->size) at = l->size - 1;
        if (!kept_page(l, at / PAGE)) pages[n++] = at / PAGE;
    }
    if (n > 0) qsort(pages, n, sizeof *pages, by_value);
    size_t unique = 0;
    for (size_t i = 0; i < n; i++)
        if (unique == 0 || pages[unique - 1] != pages[i]) pages[unique++] = pages[i];
    /* bounded: a crafted tree whose nodes point at thousands of pages
     * would otherwise hold 2 x PREFETCH_MAX fresh pages (512 MiB) at once
     * and empty the kept table while keeping them; the rest are read as
     * libhdf5 asks */
    if (unique > BATCH_MAX) unique = BATCH_MAX;
    struct fetch f = {.l = l, .source = source, .pages = pages, .data = data, .count = unique};
    pthread_t threads[FETCHERS];
    size_t started = 0;
    while (started < FETCHERS && started < unique &&
           pthread_create(&threads[started], NULL, run_fetcher, &f) == 0)
        started++;
    if (started == 0) run_fetcher(&f); /* no thread: in turn, here */
    for (size_t k = 0; k < started; k++)
        pthread_join(threads[k], NULL);
    for (size_t i = 0; i < unique; i++)
        if (data[i]) keep_page(l, pages[i], data[i]);
    free(pages), free(data);
}

/* Note the entries of a symbol-table node ("SNOD") at `address`, in
 * node[0..length), whose B-tree node is at `parent`: each names a member's
 * object header, which a reader's lookup of that member finds through
 * this node and that parent (hdf5_order.c stages them with the member). */
static void note_symbols(struct larder__mount_listing *l, uint64_t address, uint64_t parent,
                         const uint8_t *node, size_t length)
{
    if (length < 8 || memcmp(node, "SNOD", 4) != 0) return;
    size_t used = (size_t)node[6] | (size_t)node[7] << 8;
    for (size_t i = 0; i < used && 8 + (i + 1) * 40 <= length; i++) {
        if (l->symbols_count == l->symbols_capacity) {
            size_t capacity = l->symbols_capacity ? 2 * l->symbols_capacity : 4096;
            if (capacity > LARDER__MOUNT_LISTING_MAX_SYMBOLS) return; /* capped: staged without */
            void *grown = realloc(l->symbols, capacity * sizeof *l->symbols);
            if (!grown) return;
            l->symbols = grown, l->symbols_capacity = capacity;
        }
        uint64_t object = 0;
        for (int b = 7; b >= 0; b--) /* the entry's object header address, after its name's */
            object = object << 8 | node[8 + i * 40 + 8 + (size_t)b];
        if (object >= l->size) continue;
        l->symbols[l->symbols_count++] =
            (struct larder__mount_listing_symbol){object, address, parent};
    }
}

/*
 * When a read brings a group B-tree node, the pages of the whole tree
 * below it are read first, a level at a time.  The nodes are parsed as the
 * format lays them out (signature, type, level, entries used, two sibling
 * addresses, then key, child, key, ... with 8-byte offsets and lengths),
 * from the bytes of the page they start in; every field is the file's, so
 * the entries are bounded by those bytes, the addresses by the file's size
 * and their number by PREFETCH_MAX, and a wrong guess only reads other
 * pages of the same file.  The symbol-table nodes found at the bottom are
 * noted (note_symbols).
 */
static void prefetch_children(struct larder__mount_listing *l, struct larder__source *source,
                              uint64_t address, const uint8_t *node, size_t length)
{
    uint64_t *level = malloc(4 * PREFETCH_MAX * sizeof *level);
    if (!level) return;
    uint64_t *next = level + PREFETCH_MAX, *parent = next + PREFETCH_MAX,
             *next_parent = parent + PREFETCH_MAX;
    size_t count = tree_children(l, node, length, level, PREFETCH_MAX);
    for (size_t i = 0; i < count; i++)
        parent[i] = address;
    for (int depth = 0; depth < 8 && count > 0 && !stopped(l) &&
                        atomic_load(&l->pages_prefetched) < PREFETCH_BUDGET;
         depth++) {
        fetch_pages(l, source, level, count);
        size_t found = 0;
        for (size_t i = 0; i < count && found < PREFETCH_MAX; i++) {
            uint64_t page = level[i] / PAGE, in = level[i] % PAGE;
            const uint8_t *data = kept_page(l, page);
            if (!data) continue; /* its read failed, or the table started again */
            uint64_t kept = l->size - page * PAGE < PAGE ? l->size - page * PAGE : PAGE;
            if (in >= kept) continue;
            size_t children = tree_children(l, data + in, (size_t)(kept - in), next + found,
                                            PREFETCH_MAX - found);
            for (size_t k = 0; k < children; k++)
                next_parent[found + k] = level[i];
            if (children == 0) note_symbols(l, level[i], parent[i], data + in, (size_t)(kept - in));
            found += children;
        }
        uint64_t *swap = level;
        level = next, next = swap;
        swap = parent, parent = next_parent, next_parent = swap;
        count = found;
    }
    uint64_t *first = level;
    if (next < first) first = next;
    if (parent < first) first = parent;
    if (next_parent < first) first = next_parent;
    free(first);
}

int larder__mount_listing_read(void *context, uint64_t offset, void *buf, size_t length)
{
    struct larder__mount_listing *l = context;
    struct larder__mount *m = l->m;
    if (stopped(l)) return -EINTR;
    if (offset > l->size || length > l->size - offset) return LARDER_ETRUNCATED;
    struct larder__fill *fill = larder__dataset_fill(m->dataset);
    struct larder__source *source;
    int rc = larder__fill_source(fill, l->shard, &source);
    if (rc < 0) return rc;
    /* a node the cache holds (the head staged on open, the HDF5 scan's) is
     * read there, and the tree below it still read ahead: skipping that
     * made libhdf5 read its children one round trip at a time (with 64 KiB
     * checksum blocks, 379 pages in turn and a 5.7 s listing against 13 and
     * 2.3 s) */
    if (larder__fill_resident(fill, l->shard, l->base + offset, length)) {
        rc = larder__fill_range_at(fill, l->shard, l->base + offset, length, LARDER__NEAR, buf);
        if (rc == 0) prefetch_children(l, source, offset, buf, length);
        return rc;
    }
    uint8_t *out = buf;
    size_t total = length;
    while (length > 0) {
        uint64_t page = offset / PAGE, in = offset % PAGE;
        const uint8_t *data = kept_page(l, page);
        if (!data) {
            uint8_t *fresh;
            atomic_fetch_add(&l->pages_read, 1);
            if ((rc = read_page(l, source, page, &fresh)) < 0) return rc;
            keep_page(l, page, fresh);
            data = fresh;
        }
        size_t n = PAGE - in < length ? (size_t)(PAGE - in) : length;
        if (page * PAGE + in + n > l->size) return LARDER_ETRUNCATED;
        memcpy(out, data + in, n);
        out += n, offset += n, length -= n;
    }
    prefetch_children(l, source, offset - total, buf, total);
    return 0;
}
