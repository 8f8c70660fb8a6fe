/*
 * hdf5_order.c - a registered row order over one HDF5 file of the mount
 * (mount.h, docs/mount.md "A registered row order for an HDF5 file").
 *
 * A training script that reads one HDF5 file with h5py, one member group
 * per sample, in the order of PyTorch's DistributedSampler, writes
 *
 *     file=samples.h5 sampler=torch seed=1 epoch=0 rank=0 world=2 batch=64
 *
 * to MOUNT/.larder-order.  A thread then lists the members of the file's
 * root group (or group=PATH) with libhdf5 (hdf5.c), reading only the
 * group's index -- from the cache where it is resident, else straight from
 * the origin, unchecked, since what it finds is only where to stage and is
 * bounded like everything from the file -- and takes member i's bytes to
 * be those from its object header to the next member's (members written
 * one after another keep their datasets between).  The rank's order is
 * torch's (sampler.c); the mount stages the next `window` steps of it
 * (batch / world samples a step) at NEAR, and moves on as the reader's
 * reads land in the members it expects next.  Nothing here is trusted for
 * correctness: a wrong address stages the wrong bytes of the same file,
 * and every byte a reader gets is still checked.
 */
#include "mount.h"

#include "dataset.h"
#include "fill.h"
#include "hdf5_layout.h"
#include "priority.h"
#include "sampler.h"
#include "source.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE_ORDERS 64
#define MEMBER_SPAN_MAX (UINT64_C(64) << 20) /* one member's bytes staged at most */
#define PAGE (UINT64_C(16) << 10)            /* the listing's unchecked reads */
#define SLOTS 16384         /* the listing's kept pages: an open-addressed table of page numbers */
#define KEPT_MAX 8192       /* pages kept at most (128 MiB while a listing runs, one at a time) */
#define PREFETCH_AT_ONCE 64 /* B-tree nodes' children read at once */
#define PREFETCH_MAX 16384  /* children a level of the tree read ahead */
#define NODE_SPAN                                                                                  \
    512 /* bytes of a node read ahead: a symbol-table node of 8 entries (h5py's) is 328 */

struct file_order {
    struct larder__mount *m;
    struct larder__mount_file_orders *registry;
    char file[256], group[256],
        dataset[256]; /* dataset: its rows are the samples, else group's members */
    uint64_t sample;  /* the file's sample in the index */
    uint32_t shard;
    uint64_t base, size; /* the file: shard bytes [base, base + size) */
    uint64_t seed, epoch, batch, window;
    uint32_t rank, world;
    pthread_t thread;
    /* set by the listing thread, then read under lock */
    pthread_mutex_t lock;
    bool ready;
    int error;
    size_t members;
    uint64_t *address;     /* member -> its object header's offset (clipped: < size) */
    uint64_t *end;         /* member -> the end of its bytes */
    uint64_t *sorted;      /* the addresses, ascending */
    uint32_t *sorted_of;   /* ... and whose */
    uint32_t *list;        /* the rank's order of members */
    size_t length;         /* of list */
    int64_t *position_of;  /* member -> its first place in list, -1 */
    uint8_t *seen;         /* list place -> some of its member's bytes were read */
    size_t position;       /* list[0..position) read: the lowest place not seen */
    size_t staged_until;   /* list[0..staged_until) asked */
    uint64_t staged_bytes; /* queued */
    double listed_s;
    /* the listing's page cache (its thread only) */
    _Atomic uint64_t pages_read, pages_prefetched; /* from the origin: by libhdf5's reads, ahead */
    uint64_t *page_key;  /* slot -> its page + 1, 0 empty (SLOTS of them) */
    uint8_t **page_data; /* slot -> its PAGE bytes (malloc'd) */
    size_t kept;         /* slots used */
};

struct larder__mount_file_orders {
    pthread_mutex_t listing; /* one listing at a time, so that the next can reuse it */
    pthread_mutex_t lock;    /* the array */
    struct file_order *orders[MAX_FILE_ORDERS];
    size_t count;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * The listing's pages are kept by page number in an open-addressed table,
 * not direct-mapped by page % slots: the nodes of a large group are spread
 * through the whole file (each written where the file ended when it
 * split), and with 64 MiB direct-mapped over a 3.7 GB file a quarter of
 * the ~3000 nodes read ahead for 12800 members overwrote each other, so
 * libhdf5 read them again one round trip at a time (742 serial reads in
 * the full benchmark's 8.3 s listing).  Past KEPT_MAX pages the table is
 * emptied and filled again: a listing that large only loses its reads
 * ahead, never its correctness.
 */
static size_t slot_of(const struct file_order *o, uint64_t page)
{
    size_t slot = (size_t)((page * UINT64_C(0x9E3779B97F4A7C15)) >> 50) & (SLOTS - 1);
    while (o->page_key[slot] != 0 && o->page_key[slot] != page + 1)
        slot = (slot + 1) & (SLOTS - 1);
    return slot;
}

/* The kept bytes of `page`, or NULL. */
static const uint8_t *kept_page(const struct file_order *o, uint64_t page)
{
    size_t slot = slot_of(o, page);
    return o->page_key[slot] == page + 1 ? o->page_data[slot] : NULL;
}

/* Keep `data` (PAGE bytes, malloc'd; owned by the table after the call) as `page`. */
static void keep_page(struct file_order *o, uint64_t page, uint8_t *data)
{
    size_t slot = slot_of(o, page);
    if (o->page_key[slot] == page + 1) { /* kept meanwhile */
        free(data);
        return;
    }
    if (o->kept >= KEPT_MAX) { /* full: start again */
        for (size_t i = 0; i < SLOTS; i++) {
            free(o->page_data[i]);
            o->page_data[i] = NULL, o->page_key[i] = 0;
        }
        o->kept = 0;
        slot = slot_of(o, page);
    }
    o->page_key[slot] = page + 1, o->page_data[slot] = data;
    o->kept++;
}

static void pages_free(struct file_order *o)
{
    for (size_t i = 0; o->page_data && i < SLOTS; i++)
        free(o->page_data[i]);
    free(o->page_key), free(o->page_data);
    o->page_key = NULL, o->page_data = NULL, o->kept = 0;
}

/* Page `page` of the file from the origin (unchecked), into a new buffer in *out. */
static int read_page(struct file_order *o, struct larder__source *source, uint64_t page,
                     uint8_t **out)
{
    uint64_t from = page * PAGE;
    uint64_t n = o->size - from < PAGE ? o->size - from : PAGE;
    uint8_t *data = malloc(PAGE);
    if (!data) return -ENOMEM;
    int rc =
        larder__source_read(source, data, (size_t)n, o->base + from, larder__read_at(LARDER__NEAR));
    if (rc < 0) {
        free(data);
        return rc;
    }
    *out = data;
    return 0;
}

struct prefetch {
    struct file_order *o;
    struct larder__source *source;
    uint64_t page;
    uint8_t *data; /* what was read, or NULL */
};

static void *run_prefetch(void *arg)
{
    struct prefetch *p = arg;
    atomic_fetch_add(&p->o->pages_prefetched, 1);
    p->data = NULL;
    read_page(p->o, p->source, p->page, &p->data); /* a failure keeps nothing: read later */
    return NULL;
}

/* The child addresses of a group B-tree node ("TREE", type 0) in
 * node[0..length), at most `capacity`, within the file: how many. */
static size_t tree_children(const struct file_order *o, const uint8_t *node, size_t length,
                            uint64_t *out, size_t capacity)
{
    if (length < 24 || memcmp(node, "TREE", 4) != 0 || node[4] != 0) return 0;
    size_t used = (size_t)node[6] | (size_t)node[7] << 8, count = 0;
    for (size_t i = 0; i < used && count < capacity; i++) {
        size_t at = 24 + 8 + i * 16; /* past the header and key i */
        if (at + 8 > length) break;
        uint64_t address = 0;
        for (int b = 7; b >= 0; b--)
            address = address << 8 | node[at + (size_t)b];
        if (address < o->size) out[count++] = address;
    }
    return count;
}

/* Read the pages of addresses[0..count) not kept yet, PREFETCH_AT_ONCE at a time. */
static void fetch_pages(struct file_order *o, struct larder__source *source,
                        const uint64_t *addresses, size_t count)
{
    uint64_t pages[PREFETCH_AT_ONCE];
    size_t n = 0;
    /* each node's first page, and the next where a node may run into it */
    for (size_t i = 0; i <= 2 * count; i++) {
        if (i < 2 * count) {
            uint64_t at = addresses[i / 2] + (i % 2 ? NODE_SPAN - 1 : 0);
            if (at >= o->size) at = o->size - 1;
            uint64_t page = at / PAGE;
            bool dup = kept_page(o, page) != NULL;
            for (size_t k = 0; k < n && !dup; k++)
                dup = pages[k] == page;
            if (!dup) pages[n++] = page;
        }
        if (n == PREFETCH_AT_ONCE || (i == 2 * count && n > 0)) {
            struct prefetch jobs[PREFETCH_AT_ONCE];
            pthread_t threads[PREFETCH_AT_ONCE];
            bool started[PREFETCH_AT_ONCE] = {false};
            for (size_t k = 0; k < n; k++) {
                jobs[k] = (struct prefetch){o, source, pages[k], NULL};
                started[k] = pthread_create(&threads[k], NULL, run_prefetch, &jobs[k]) == 0;
            }
            for (size_t k = 0; k < n; k++)
                if (started[k]) {
                    pthread_join(threads[k], NULL);
                    if (jobs[k].data) keep_page(o, jobs[k].page, jobs[k].data);
                }
            n = 0;
        }
    }
}

/*
 * libhdf5 reads a group's version-1 B-tree node, then each child it
 * points to (symbol-table nodes, or nodes a level down) one at a time, each
 * a round trip to the origin: 800 of them, serially, for a group of 12800
 * members.  So when a read brings a group B-tree node, the pages of the
 * whole tree below it are read here first, a level at a time, each level's
 * PREFETCH_AT_ONCE at once: a few round trips a level, then libhdf5 finds
 * them kept.  The nodes are parsed as the format lays them out (signature,
 * type, level, entries used, two sibling addresses, then key, child, key,
 * ... with the usual 8-byte offsets and lengths), from the bytes of the
 * page they start in; every field is the file's, so the entries are
 * bounded by those bytes, the addresses by the file's size and their
 * number by PREFETCH_MAX, and a wrong guess only reads other pages of the
 * same file.
 */
static void prefetch_children(struct file_order *o, struct larder__source *source,
                              const uint8_t *node, size_t length)
{
    uint64_t *level = malloc(2 * PREFETCH_MAX * sizeof *level);
    if (!level) return;
    uint64_t *next = level + PREFETCH_MAX;
    size_t count = tree_children(o, node, length, level, PREFETCH_MAX);
    for (int depth = 0; depth < 8 && count > 0 && !o->m->stopping; depth++) {
        fetch_pages(o, source, level, count);
        size_t found = 0;
        for (size_t i = 0; i < count && found < PREFETCH_MAX; i++) {
            uint64_t page = level[i] / PAGE, in = level[i] % PAGE;
            const uint8_t *data = kept_page(o, page);
            if (!data) continue; /* not read, or the table started again */
            uint64_t kept = o->size - page * PAGE < PAGE ? o->size - page * PAGE : PAGE;
            if (in >= kept) continue;
            found += tree_children(o, data + in, (size_t)(kept - in), next + found,
                                   PREFETCH_MAX - found);
        }
        uint64_t *swap = level;
        level = next, next = swap, count = found;
    }
    free(level < next ? level : next);
}

/* The listing's reads: the cache's where resident, else the origin's, unchecked, by pages. */
static int read_listing(void *context, uint64_t offset, void *buf, size_t length)
{
    struct file_order *o = context;
    struct larder__mount *m = o->m;
    if (m->stopping) return -EINTR;
    if (offset > o->size || length > o->size - offset) return LARDER_ETRUNCATED;
    struct larder__fill *fill = larder__dataset_fill(m->dataset);
    if (larder__fill_resident(fill, o->shard, o->base + offset, length))
        return larder__fill_range_at(fill, o->shard, o->base + offset, length, LARDER__NEAR, buf);
    struct larder__source *source;
    int rc = larder__fill_source(fill, o->shard, &source);
    if (rc < 0) return rc;
    uint8_t *out = buf;
    size_t total = length;
    while (length > 0) {
        uint64_t page = offset / PAGE, in = offset % PAGE;
        const uint8_t *data = kept_page(o, page);
        if (!data) {
            uint8_t *fresh;
            atomic_fetch_add(&o->pages_read, 1);
            if ((rc = read_page(o, source, page, &fresh)) < 0) return rc;
            keep_page(o, page, fresh);
            data = fresh;
        }
        size_t n = PAGE - in < length ? (size_t)(PAGE - in) : length;
        if (page * PAGE + in + n > o->size) return LARDER_ETRUNCATED;
        memcpy(out, data + in, n);
        out += n, offset += n, length -= n;
    }
    prefetch_children(o, source, buf, total);
    return 0;
}

struct placed {
    uint64_t address;
    uint32_t member;
};

static int by_address(const void *x, const void *y)
{
    const struct placed *a = x, *b = y;
    return (a->address > b->address) - (a->address < b->address);
}

/* Stage the list up to `window` steps past the position (o->lock held). */
static void pump_locked(struct file_order *o)
{
    if (!o->ready) return;
    size_t ahead = (size_t)(o->window * (o->batch / o->world));
    if (o->staged_until < o->position) o->staged_until = o->position;
    while (o->staged_until < o->length && o->staged_until < o->position + ahead &&
           !o->m->stopping) {
        uint32_t member = o->list[o->staged_until++];
        uint64_t from = o->address[member], to = o->end[member];
        if (to > from)
            o->staged_bytes +=
                larder__mount_stage(o->m, o->shard, o->base + from, to - from, LARDER__NEAR);
    }
}

/* The members' addresses another registration over the same file and group
 * listed already (the ranks of one job register the same file): a copy in
 * *out, or NULL. */
static uint64_t *listed_before(struct file_order *o, size_t *n)
{
    uint64_t *copy = NULL;
    struct larder__mount_file_orders *r = o->registry;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->count && !copy; i++) {
        struct file_order *other = r->orders[i];
        if (other == o || other->sample != o->sample || strcmp(other->group, o->group) != 0 ||
            other->dataset[0] || o->dataset[0])
            continue;
        pthread_mutex_lock(&other->lock);
        if (other->ready && (copy = malloc(other->members * sizeof *copy))) {
            memcpy(copy, other->address, other->members * sizeof *copy);
            *n = other->members;
        }
        pthread_mutex_unlock(&other->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return copy;
}

static int list_members(struct file_order *o)
{
    uint64_t *addresses = NULL, *row_end = NULL; /* row_end: a dataset's rows' own ends */
    size_t n = 0;
    int rc = 0;
    if (o->dataset[0]) {
        struct larder__mount_hdf5_extent *rows;
        rc = larder__mount_hdf5_rows(read_listing, o, o->size, o->dataset, &rows, &n);
        if (rc < 0) return rc;
        addresses = malloc(n * sizeof *addresses), row_end = malloc(n * sizeof *row_end);
        for (size_t i = 0; addresses && row_end && i < n; i++) {
            addresses[i] = rows[i].offset;
            /* hostile: a wrapping length ends at the file's end */
            row_end[i] = rows[i].offset + rows[i].length < rows[i].offset
                             ? o->size
                             : rows[i].offset + rows[i].length;
        }
        free(rows);
        if (!addresses || !row_end) {
            free(addresses), free(row_end);
            return -ENOMEM;
        }
    } else if (!(addresses = listed_before(o, &n))) {
        rc = larder__mount_hdf5_members(read_listing, o, o->size, o->group, &addresses, &n);
        if (rc < 0) return rc;
    }
    if (n == 0 || n > UINT32_MAX) {
        free(addresses), free(row_end);
        return larder__fail(LARDER_EEMPTY, "%s: %s has no %s to order", o->file,
                            o->dataset[0] ? o->dataset : o->group,
                            o->dataset[0] ? "rows" : "members");
    }
    size_t length = larder__mount_torch_distributed_length((uint32_t)n, o->world);
    uint64_t *end = calloc(n, sizeof *end), *sorted = calloc(n, sizeof *sorted);
    uint32_t *sorted_of = calloc(n, sizeof *sorted_of), *list = calloc(length, sizeof *list);
    uint32_t *scratch = calloc(n, sizeof *scratch);
    int64_t *position_of = malloc(n * sizeof *position_of);
    struct placed *placed = malloc(n * sizeof *placed);
    uint8_t *seen = calloc(length, 1);
    if (!end || !sorted || !sorted_of || !list || !scratch || !position_of || !placed || !seen) {
        free(addresses), free(end), free(sorted), free(sorted_of), free(list), free(scratch);
        free(position_of), free(placed), free(seen), free(row_end);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (addresses[i] >= o->size) addresses[i] = o->size; /* hostile: past the end, empty */
        placed[i] = (struct placed){addresses[i], (uint32_t)i};
        position_of[i] = -1;
    }
    qsort(placed, n, sizeof *placed, by_address);
    uint64_t next = o->size; /* the next distinct address above, walking down */
    for (size_t k = n; k-- > 0;) {
        uint32_t i = placed[k].member;
        sorted[k] = placed[k].address, sorted_of[k] = i;
        if (k + 1 < n && placed[k + 1].address > placed[k].address) next = placed[k + 1].address;
        uint64_t to = row_end ? row_end[i] : next; /* a row's own end, or the next member's */
        if (to > o->size) to = o->size;
        if (to < addresses[i]) to = addresses[i];
        end[i] = to - addresses[i] > MEMBER_SPAN_MAX ? addresses[i] + MEMBER_SPAN_MAX : to;
    }
    free(placed), free(row_end);
    length = larder__mount_torch_distributed(o->seed, o->epoch, o->rank, o->world, (uint32_t)n,
                                             scratch, list);
    for (size_t k = length; k-- > 0;)
        position_of[list[k]] = (int64_t)k;
    free(scratch);
    pthread_mutex_lock(&o->lock);
    o->members = n, o->address = addresses, o->end = end, o->sorted = sorted;
    o->sorted_of = sorted_of, o->list = list, o->length = length, o->position_of = position_of;
    o->seen = seen;
    o->ready = true;
    pump_locked(o);
    pthread_mutex_unlock(&o->lock);
    return 0;
}

static void *run_listing(void *arg)
{
    struct file_order *o = arg;
    double began = now_s();
    /* one listing at a time, until it is ready: a second registration of
     * the same file then copies it (listed_before) */
    pthread_mutex_lock(&o->registry->listing);
    o->page_key = calloc(SLOTS, sizeof *o->page_key); /* one listing's pages at a time */
    o->page_data = calloc(SLOTS, sizeof *o->page_data);
    int rc = o->page_key && o->page_data ? list_members(o) : -ENOMEM;
    pages_free(o);
    pthread_mutex_unlock(&o->registry->listing);
    o->listed_s = now_s() - began;
    if (rc < 0) {
        pthread_mutex_lock(&o->lock);
        o->error = rc;
        pthread_mutex_unlock(&o->lock);
        if (!o->m->stopping)
            larder__mount_log(LARDER_LOG_WARN, "order for %s: %s", o->file, larder_errmsg());
    } else {
        larder__mount_log(LARDER_LOG_INFO,
                          "order for %s: %zu %s of %s listed in %.2f s (%" PRIu64
                          " pages of the origin read in turn, %" PRIu64 " ahead); rank %u of %u "
                          "reads %zu, staged %" PRIu64 " steps ahead",
                          o->file, o->members, o->dataset[0] ? "rows" : "members",
                          o->dataset[0] ? o->dataset : o->group, o->listed_s,
                          atomic_load(&o->pages_read), atomic_load(&o->pages_prefetched), o->rank,
                          o->world, o->length, o->window);
    }
    return NULL;
}

static void order_free(struct file_order *o)
{
    if (!o) return;
    pthread_join(o->thread, NULL);
    free(o->address), free(o->end), free(o->sorted), free(o->sorted_of), free(o->list);
    free(o->position_of), free(o->seen);
    pages_free(o);
    pthread_mutex_destroy(&o->lock);
    free(o);
}

int larder__mount_file_orders_new(struct larder__mount_file_orders **out)
{
    struct larder__mount_file_orders *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->listing, NULL);
    *out = r;
    return 0;
}

void larder__mount_file_orders_free(struct larder__mount_file_orders *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->count; i++)
        order_free(r->orders[i]);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->listing);
    free(r);
}

int larder__mount_file_order_register(struct larder__mount *m, struct larder__mount_file_orders *r,
                                      const struct larder__mount_file_order_spec *spec)
{
    if (!m->cached)
        return larder__fail(LARDER_EUSAGE, "a registered order needs a node cache (--cache)");
    if (strlen(spec->file) >= sizeof((struct file_order *)0)->file ||
        strlen(spec->group) >= sizeof((struct file_order *)0)->group ||
        (spec->dataset && strlen(spec->dataset) >= sizeof((struct file_order *)0)->dataset))
        return larder__fail(LARDER_EUSAGE, "file=, group= or dataset= over 255 bytes");
    uint64_t ino = larder__mount_tree_resolve(m->tree, spec->file);
    const struct larder__mount_node *n = ino ? larder__mount_tree_node(m->tree, ino) : NULL;
    if (!n || n->directory || n->header_length)
        return larder__fail(LARDER_EUSAGE, "file=%s: not a file of the mount shown as it is",
                            spec->file);
    larder_sample_info s;
    larder_field_info field = {0};
    int rc = larder_sample_info_get(m->dataset, n->sample, &s);
    if (rc == 0 && n->field >= 0)
        rc = larder_field_info_get(m->dataset, n->sample, (uint32_t)n->field, &field);
    if (rc < 0) return rc;
    struct file_order *o = calloc(1, sizeof *o);
    if (!o) return -ENOMEM;
    o->m = m, o->registry = r;
    snprintf(o->file, sizeof o->file, "%s", spec->file);
    snprintf(o->group, sizeof o->group, "%s", spec->group);
    snprintf(o->dataset, sizeof o->dataset, "%s", spec->dataset ? spec->dataset : "");
    o->sample = n->sample, o->shard = s.shard, o->base = s.offset + field.offset, o->size = n->size;
    o->seed = spec->seed, o->epoch = spec->epoch, o->batch = spec->batch;
    o->window = spec->window, o->rank = spec->rank, o->world = spec->world;
    pthread_mutex_init(&o->lock, NULL);
    pthread_mutex_lock(&r->lock);
    size_t i = 0;
    while (i < r->count && !(r->orders[i]->rank == o->rank && r->orders[i]->world == o->world &&
                             strcmp(r->orders[i]->file, o->file) == 0))
        i++;
    if (i == r->count && r->count == MAX_FILE_ORDERS) {
        pthread_mutex_unlock(&r->lock);
        pthread_mutex_destroy(&o->lock);
        free(o);
        return larder__fail(LARDER_EUSAGE, "%d file orders registered already", MAX_FILE_ORDERS);
    }
    if (pthread_create(&o->thread, NULL, run_listing, o) != 0) {
        pthread_mutex_unlock(&r->lock);
        pthread_mutex_destroy(&o->lock);
        free(o);
        return -EAGAIN;
    }
    struct file_order *old = i < r->count ? r->orders[i] : NULL;
    r->orders[i] = o;
    if (i == r->count) r->count++;
    pthread_mutex_unlock(&r->lock);
    order_free(old); /* the previous epoch's: its listing ends, its staging stays queued */
    return 0;
}

/* Data bytes [offset, offset + length) were read (o->lock held): every
 * member they touch is seen, and the position is the lowest place in the
 * list not seen.  The kernel sends each byte of the file once (it keeps
 * the pages), in pieces of its read-ahead that span several members, and
 * a member's bytes may hold another's metadata: so members are seen as
 * they are touched, in any order, and the reader is where the first one
 * not yet touched is (never past it: a count of places seen ahead, with
 * the kernel's 1 MiB read-ahead touching three or four members a read,
 * ran past the reader).  The sampler's order gives every place of the
 * rank's list once an epoch, so each is touched; only the padding at the
 * end (a member repeated) is not, and nothing follows it. */
static void seen_locked(struct file_order *o, uint64_t offset, uint64_t length)
{
    if (length == 0 || offset >= o->size || offset + length < o->sorted[0]) return;
    size_t lo = 0, hi = o->members; /* the last member at or below offset */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (o->sorted[mid] <= offset)
            lo = mid;
        else
            hi = mid;
    }
    uint64_t end = offset + length > o->size ? o->size : offset + length;
    for (size_t k = lo; k < o->members && o->sorted[k] < end; k++) {
        uint32_t member = o->sorted_of[k];
        if (o->end[member] <= offset) continue; /* its bytes end before the read */
        int64_t at = o->position_of[member];
        if (at < 0 || (size_t)at < o->position || o->seen[at]) continue;
        o->seen[at] = 1;
    }
    while (o->position < o->length && o->seen[o->position])
        o->position++;
}

void larder__mount_file_orders_read(struct larder__mount_file_orders *r, uint64_t sample,
                                    uint64_t offset, uint64_t length)
{
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->count; i++) {
        struct file_order *o = r->orders[i];
        if (o->sample != sample) continue;
        pthread_mutex_lock(&o->lock);
        if (o->ready && o->members > 0) {
            seen_locked(o, offset, length);
            pump_locked(o);
        }
        pthread_mutex_unlock(&o->lock);
    }
    pthread_mutex_unlock(&r->lock);
}

int larder__mount_file_orders_describe(struct larder__mount_file_orders *r, char *buf,
                                       size_t capacity)
{
    size_t used = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->count && used < capacity; i++) {
        struct file_order *o = r->orders[i];
        pthread_mutex_lock(&o->lock);
        int n =
            snprintf(buf + used, capacity - used,
                     "file=%s %s=%s sampler=torch seed=%" PRIu64 " epoch=%" PRIu64
                     " rank=%u world=%u batch=%" PRIu64 " window=%" PRIu64
                     " members=%zu read=%zu staged=%zu staged_bytes=%" PRIu64 "%s\n",
                     o->file, o->dataset[0] ? "dataset" : "group",
                     o->dataset[0] ? o->dataset : o->group, o->seed, o->epoch, o->rank, o->world,
                     o->batch, o->window, o->members, o->position, o->staged_until, o->staged_bytes,
                     o->error   ? " failed"
                     : o->ready ? ""
                                : " listing");
        pthread_mutex_unlock(&o->lock);
        if (n < 0 || (size_t)n >= capacity - used) break;
        used += (size_t)n;
    }
    pthread_mutex_unlock(&r->lock);
    return (int)used;
}
