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
 * bounded like everything from the file -- and follows each member to its
 * bytes (hdf5_member.c).  The rank's order is torch's (sampler.c); the
 * mount stages the next `window` steps of it at NEAR, and moves on as the
 * reader's reads touch the members it expects (hdf5_order_position.c).
 * Nothing here is trusted for correctness: a wrong address stages the
 * wrong bytes of the same file, and every byte a reader gets is still
 * checked.
 */
#include "hdf5_order.h"

#include "common.h"
#include "dataset.h"
#include "fill.h"
#include "hdf5_layout.h"
#include "index.h"
#include "priority.h"
#include "sampler.h"
#include "source.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMBER_SPAN_MAX (UINT64_C(64) << 20) /* one member's bytes staged at most */
/* Bytes of a lookup's nodes staged: what libhdf5 reads of a symbol-table
 * node and of a group B-tree node, the format's sizes with the K of 4 and
 * 16 every h5py file has (8 + 2K x 40; 24 + 2K x 8 + (2K + 1) x 8). */
static const uint64_t lookup_node_span[2] = {8 + 2 * 4 * 40, 24 + 2 * 16 * 8 + (2 * 16 + 1) * 8};
#define ASK_SHIFT 16                      /* a unit of the asked bitmap: the cache's 64 KiB block */
#define STAGE_RUN_MAX (UINT64_C(1) << 20) /* one fill of the order's at most */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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

/* The reader moved on (o->lock held): the staging thread stages on. */
static void pump_locked(struct larder__mount_file_order *o)
{
    pthread_cond_broadcast(&o->wake);
}

/*
 * Reads of a member's own metadata for larder__mount_hdf5_member.  The
 * part in the checksum block holding `offset` goes through the cache,
 * checked: a reader's lookup of the member reads these same bytes, and in
 * h5py's files a member's header, heap, B-tree, symbol-table node and its
 * datasets' headers lie together, so the first read fills the block (1 MiB
 * by default) and the next few find it resident.  Read unchecked from the
 * origin instead (as the listing reads), every one of the ~6 reads of a
 * member was a round trip of its own, and its block was fetched again by
 * the staging after them: the ordered cold epoch's members took 235-298 ms
 * each to stage at the median in its first steps, 141-256 ms through the
 * cache (bench/results/mount.md, mount7).  The rest of a read that runs
 * past that block (the walk reads 4 KiB from a node's start; a header is
 * 300-1000 bytes), a shard without block checksums (a fill there checks
 * the whole sample), and reads through a daemon stay as before: the
 * cache's where resident, else the origin's, unchecked (what they find
 * decides only what to stage).
 */
static int read_member(void *context, uint64_t offset, void *buf, size_t length)
{
    struct larder__mount_file_order *o = context;
    struct larder__fill *fill = larder__dataset_fill(o->m->dataset);
    /* replaced by the next epoch's order: register() waits for this walk */
    if (o->m->stopping || atomic_load(&o->stop)) return -EINTR;
    if (offset > o->size || length > o->size - offset) return LARDER_ETRUNCATED;
    struct larder__shard s;
    uint64_t checked = 0; /* bytes from offset through the cache, checked */
    if (!o->m->daemon &&
        larder__index_shard(larder__dataset_index(o->m->dataset), o->shard, &s) == 0 &&
        s.sum_shift > 0 && s.sum_shift <= 40) {
        uint64_t block = UINT64_C(1) << s.sum_shift, at = o->base + offset;
        checked = block - at % block < length ? block - at % block : length;
        int rc = larder__fill_range_at(fill, o->shard, at, checked, LARDER__NEAR, buf);
        if (rc < 0) return rc;
    }
    uint8_t *rest = (uint8_t *)buf + checked;
    uint64_t at = o->base + offset + checked, left = length - checked;
    if (left == 0) return 0;
    if (larder__fill_resident(fill, o->shard, at, left))
        return larder__fill_range_at(fill, o->shard, at, left, LARDER__NEAR, rest);
    struct larder__source *source;
    int rc = larder__fill_source(fill, o->shard, &source);
    if (rc < 0) return rc;
    rc = larder__source_read(source, rest, left, at, larder__read_at(LARDER__NEAR));
    return rc < 0 ? rc : 0;
}

/* Bytes [from, to) at NEAR: here, in one fill (one origin read of the runs
 * of blocks it lacks) into the cache, copied nowhere; through a daemon, queued. */
static uint64_t stage_run(struct larder__mount_file_order *o, uint64_t from, uint64_t to)
{
    struct larder__fill *fill = larder__dataset_fill(o->m->dataset);
    if (o->m->daemon)
        return larder__mount_stage(o->m, o->shard, o->base + from, to - from, LARDER__NEAR);
    return larder__fill_range_at(fill, o->shard, o->base + from, to - from, LARDER__NEAR, NULL) == 0
               ? to - from
               : 0;
}

/*
 * Stage [at, at + length) of the file at NEAR, but not the 64 KiB units of
 * it asked before or resident, adjacent units in one fill (stage_run).
 * With a cache of our own, on the resolver's thread: no more than RESOLVERS
 * of the order's reads at the origin at once (queued on the pool's 48 NEAR
 * workers, a reader's miss waited 100-500 ms behind them in the cold
 * epoch's first steps).  Units of the cache's block, not of the checksum
 * block: a MiB marked as a unit hid the other extents of that MiB in an
 * index of 64 KiB checksum blocks (a lookup node's MiB asked, the member's
 * data beside it never staged); a larger checksum block is brought whole by
 * the first fill, and the next finds it resident.
 */
static uint64_t stage_once(struct larder__mount_file_order *o, uint64_t at, uint64_t length)
{
    struct larder__fill *fill = larder__dataset_fill(o->m->dataset);
    if (at >= o->size || length == 0) return 0;
    uint64_t end = length > o->size - at ? o->size : at + length, queued = 0;
    uint64_t run_from = 0, run_to = 0; /* the run of units to stage, empty when equal */
    for (uint64_t unit = at >> ASK_SHIFT; unit <= (end - 1) >> ASK_SHIFT && !o->stop; unit++) {
        uint64_t from = unit << ASK_SHIFT > at ? unit << ASK_SHIFT : at;
        uint64_t to = (unit + 1) << ASK_SHIFT < end ? (unit + 1) << ASK_SHIFT : end;
        pthread_mutex_lock(&o->lock);
        bool asked = o->asked && o->asked[unit / 8] & (1u << unit % 8);
        if (o->asked) o->asked[unit / 8] |= (uint8_t)(1u << unit % 8);
        pthread_mutex_unlock(&o->lock);
        bool skip = asked || larder__fill_resident(fill, o->shard, o->base + from, to - from);
        if (!skip && run_to == from && run_to > run_from && to - run_from <= STAGE_RUN_MAX) {
            run_to = to; /* the run goes on */
            continue;
        }
        if (run_to > run_from) queued += stage_run(o, run_from, run_to);
        run_from = from, run_to = skip ? from : to;
    }
    if (run_to > run_from) queued += stage_run(o, run_from, run_to);
    return queued;
}

#define MEMBER_EXTENTS 64 /* of one member staged at most */
#define RESOLVERS LARDER__MOUNT_ORDER_RESOLVERS

/* Stage `member`: the index nodes a lookup of it reads, then its own
 * extents where its header can be followed, else its bytes up to the next
 * member's (a dataset's rows: their own bytes).  Bytes queued. */
static uint64_t stage_member(struct larder__mount_file_order *o, uint32_t member,
                             struct larder__mount_hdf5_extent *extents)
{
    uint64_t staged = 0;
    for (int k = 0; o->lookup && k < 2; k++) {
        uint64_t at = o->lookup[2 * (size_t)member + (size_t)k];
        if (at < o->size) staged += stage_once(o, at, lookup_node_span[k]);
    }
    size_t n = o->dataset[0]
                   ? 0
                   : larder__mount_hdf5_member(read_member, o, o->size, o->address[member], extents,
                                               MEMBER_EXTENTS);
    if (n == 0) {
        extents[0] = (struct larder__mount_hdf5_extent){o->address[member],
                                                        o->end[member] - o->address[member]};
        n = 1;
    } else {
        atomic_fetch_add(&o->followed, 1);
    }
    for (size_t k = 0; k < n && !o->stop; k++) /* hostile: bounded like its span */
        staged +=
            stage_once(o, extents[k].offset,
                       extents[k].length < MEMBER_SPAN_MAX ? extents[k].length : MEMBER_SPAN_MAX);
    return staged;
}

/* One of the order's RESOLVERS: takes the next member of the list not yet
 * asked (the nearest first) while the list is staged less than `window`
 * steps past the reader's position, and waits for the reader to move on
 * otherwise.  No batches: when the resolvers took 32 members at a time and
 * waited for all of them, one member's chain meeting an origin stall (a
 * 100 ms-2 s one on 1% of reads) held all 16 resolvers, and the next
 * step's members behind it. */
static void *run_resolver(void *arg)
{
    struct larder__mount_file_order *o = arg;
    struct larder__mount_hdf5_extent extents[MEMBER_EXTENTS];
    pthread_mutex_lock(&o->lock);
    while (!o->stop && !o->m->stopping) {
        /* a torch batch may exceed the members (one short batch): the
         * window is then the whole list, not a product that wraps */
        uint64_t ahead;
        if (!larder__mul_ok(o->window, o->batch / o->world, &ahead)) ahead = UINT64_MAX;
        size_t target = ahead < o->length - o->position ? o->position + (size_t)ahead : o->length;
        if (o->staged_until < o->position) o->staged_until = o->position;
        if (o->staged_until >= o->length) break; /* every member asked: done for good */
        if (o->staged_until >= target) {
            pthread_cond_wait(&o->wake, &o->lock);
            continue;
        }
        size_t place = o->staged_until;
        uint32_t member = o->list[o->staged_until++];
        pthread_mutex_unlock(&o->lock);
        double began = o->m->trace ? now_s() : 0;
        uint64_t staged = stage_member(o, member, extents);
        if (o->m->trace)
            larder__mount_log(LARDER_LOG_INFO,
                              "trace: order rank %u place %zu member %u staged %" PRIu64
                              " bytes in %.1f ms at %.3f s",
                              o->rank, place, member, staged, (now_s() - began) * 1e3, now_s());
        pthread_mutex_lock(&o->lock);
        o->staged_bytes += staged;
    }
    pthread_mutex_unlock(&o->lock);
    return NULL;
}

/* The listing thread's second life: the resolvers, until stopped or all asked. */
static void stage_ahead(struct larder__mount_file_order *o)
{
    pthread_t threads[RESOLVERS];
    size_t started = 0;
    while (started < RESOLVERS && pthread_create(&threads[started], NULL, run_resolver, o) == 0)
        started++;
    if (started == 0) run_resolver(o);
    for (size_t k = 0; k < started; k++)
        pthread_join(threads[k], NULL);
}

/* The members' addresses another registration over the same file and group
 * listed already (the ranks of one job register the same file): a copy in
 * *out, or NULL. */
static uint64_t *listed_before(struct larder__mount_file_order *o, size_t *n, uint64_t **lookup)
{
    uint64_t *copy = NULL;
    struct larder__mount_file_orders *r = o->registry;
    if (atomic_load(&o->stop) || o->m->stopping) return NULL; /* its listing fails at once */
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->count && !copy; i++) {
        struct larder__mount_file_order *other = r->orders[i];
        if (other == o || other->sample != o->sample || other->field != o->field ||
            strcmp(other->group, o->group) != 0 || other->dataset[0] || o->dataset[0])
            continue;
        pthread_mutex_lock(&other->lock);
        if (other->ready && (copy = malloc(other->members * sizeof *copy))) {
            memcpy(copy, other->address, other->members * sizeof *copy);
            *n = other->members;
            if (other->lookup && (*lookup = malloc(2 * other->members * sizeof **lookup)))
                memcpy(*lookup, other->lookup, 2 * other->members * sizeof **lookup);
        }
        pthread_mutex_unlock(&other->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return copy;
}

static int by_object(const void *x, const void *y)
{
    const struct larder__mount_listing_symbol *a = x, *b = y;
    return (a->object > b->object) - (a->object < b->object);
}

/* member -> [2] the symbol-table node and B-tree node the listing saw its
 * entry in (UINT64_MAX where it saw none), or NULL. */
static uint64_t *lookup_nodes(struct larder__mount_listing *listing, const uint64_t *addresses,
                              size_t n)
{
    struct larder__mount_listing_symbol *symbols = listing->symbols;
    size_t count = listing->symbols_count;
    uint64_t *lookup = count ? malloc(2 * n * sizeof *lookup) : NULL;
    if (!lookup) return NULL;
    qsort(symbols, count, sizeof *symbols, by_object);
    for (size_t i = 0; i < n; i++) {
        size_t lo = 0, hi = count; /* the first symbol at or above the member's address */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (symbols[mid].object < addresses[i])
                lo = mid + 1;
            else
                hi = mid;
        }
        bool found = lo < count && symbols[lo].object == addresses[i];
        lookup[2 * i] = found ? symbols[lo].node : UINT64_MAX;
        lookup[2 * i + 1] = found ? symbols[lo].parent : UINT64_MAX;
    }
    return lookup;
}

static int list_members(struct larder__mount_file_order *o)
{
    uint64_t *addresses = NULL, *row_end = NULL; /* row_end: a dataset's rows' own ends */
    size_t n = 0;
    int rc = 0;
    if (o->dataset[0]) {
        struct larder__mount_hdf5_extent *rows;
        rc = larder__mount_hdf5_rows(larder__mount_listing_read, &o->listing, o->size, o->dataset,
                                     &rows, &n);
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
    } else if (!(addresses = listed_before(o, &n, &o->lookup))) {
        rc = larder__mount_hdf5_members(larder__mount_listing_read, &o->listing, o->size, o->group,
                                        &addresses, &n);
        if (rc < 0) return rc;
        o->lookup = lookup_nodes(&o->listing, addresses, n);
    }
    for (size_t i = 0; o->lookup && i < n; i++)
        o->lookup_known += o->lookup[2 * i] != UINT64_MAX;
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
    o->asked = calloc((size_t)(o->size >> (ASK_SHIFT + 3)) + 1, 1);
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
    larder__mount_hdf5_order_replay_early_locked(o);
    pump_locked(o);
    pthread_mutex_unlock(&o->lock);
    return 0;
}

static void *run_listing(void *arg)
{
    struct larder__mount_file_order *o = arg;
    double began = now_s();
    /* one listing at a time, until it is ready: a second registration of
     * the same file then copies it (listed_before) */
    pthread_mutex_lock(&o->registry->listing);
    o->listing = (struct larder__mount_listing){
        .m = o->m, .stop = &o->stop, .shard = o->shard, .base = o->base, .size = o->size};
    /* stopped while it waited its turn (replaced, or the unmount): nothing to list */
    int rc = atomic_load(&o->stop) || o->m->stopping ? -EINTR : 0;
    if (rc == 0) rc = larder__mount_listing_begin(&o->listing); /* one listing's pages at a time */
    if (rc == 0) rc = list_members(o);
    larder__mount_listing_end(&o->listing);
    pthread_mutex_unlock(&o->registry->listing);
    o->listed_s = now_s() - began;
    if (rc < 0) {
        pthread_mutex_lock(&o->lock);
        o->error = rc;
        free(o->early); /* never replayed: later reads note nothing */
        o->early = NULL;
        pthread_mutex_unlock(&o->lock);
        if (!o->m->stopping && !atomic_load(&o->stop)) /* else given up, not failed */
            larder__mount_log(LARDER_LOG_WARN, "order for %s: %s", o->file, larder_errmsg());
    } else {
        larder__mount_log(
            LARDER_LOG_INFO,
            "order for %s: %zu %s of %s listed in %.2f s (%" PRIu64
            " pages of the origin read in turn, %" PRIu64 " ahead); rank %u of %u "
            "reads %zu, staged %" PRIu64 " steps ahead, with the index nodes a lookup reads "
            "for %zu of them",
            o->file, o->members, o->dataset[0] ? "rows" : "members",
            o->dataset[0] ? o->dataset : o->group, o->listed_s, atomic_load(&o->listing.pages_read),
            atomic_load(&o->listing.pages_prefetched), o->rank, o->world, o->length, o->window,
            o->lookup_known);
        if (o->m->trace)
            larder__mount_log(LARDER_LOG_INFO,
                              "trace: order rank %u listed at %.3f s (began %.3f s)", o->rank,
                              now_s(), began);
        stage_ahead(o);
    }
    return NULL;
}

/* Tell o's listing and resolvers to stop (they see it at their next read or wait). */
static void order_stop(struct larder__mount_file_order *o)
{
    pthread_mutex_lock(&o->lock);
    o->stop = true;
    pthread_cond_broadcast(&o->wake);
    pthread_mutex_unlock(&o->lock);
}

/* Stop o, wait for its thread, free it.  o must be out of the registry's
 * array already: another order's listing reads the orders there
 * (listed_before). */
static void order_free(struct larder__mount_file_order *o)
{
    if (!o) return;
    order_stop(o);
    pthread_join(o->thread, NULL);
    free(o->address), free(o->end), free(o->sorted), free(o->sorted_of), free(o->list);
    free(o->position_of), free(o->seen), free(o->lookup), free(o->asked), free(o->early);
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->wake);
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
    /* Every order stopped first, and all of them out of the array before
     * any is freed: freed one by one in place, the listings still waiting
     * their turn (one at a time) then looked through the array for one
     * listed before and read the orders freed (found by review; ASan,
     * tests/cli/mount_hdf5_order_unmount.sh).  Stopped first, the waiting
     * listings end at their turn instead of each listing in turn. */
    struct larder__mount_file_order *orders[LARDER__MOUNT_FILE_ORDERS_MAX];
    pthread_mutex_lock(&r->lock);
    size_t count = r->count;
    for (size_t i = 0; i < count; i++) {
        orders[i] = r->orders[i];
        r->orders[i] = NULL;
        order_stop(orders[i]);
    }
    r->count = 0;
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < count; i++)
        order_free(orders[i]);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->listing);
    free(r);
}

int larder__mount_file_order_register(struct larder__mount *m, struct larder__mount_file_orders *r,
                                      const struct larder__mount_file_order_spec *spec)
{
    if (!m->cached)
        return larder__fail(LARDER_EUSAGE, "a registered order needs a node cache (--cache)");
    if (strlen(spec->file) >= sizeof((struct larder__mount_file_order *)0)->file ||
        strlen(spec->group) >= sizeof((struct larder__mount_file_order *)0)->group ||
        (spec->dataset &&
         strlen(spec->dataset) >= sizeof((struct larder__mount_file_order *)0)->dataset))
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
    struct larder__mount_file_order *o = calloc(1, sizeof *o);
    if (!o) return -ENOMEM;
    o->m = m, o->registry = r;
    snprintf(o->file, sizeof o->file, "%s", spec->file);
    snprintf(o->group, sizeof o->group, "%s", spec->group);
    snprintf(o->dataset, sizeof o->dataset, "%s", spec->dataset ? spec->dataset : "");
    o->sample = n->sample, o->field = n->field, o->shard = s.shard,
    o->base = s.offset + field.offset, o->size = n->size;
    o->seed = spec->seed, o->epoch = spec->epoch, o->batch = spec->batch;
    o->window = spec->window, o->rank = spec->rank, o->world = spec->world;
    o->early =
        calloc((size_t)(o->size >> (LARDER__MOUNT_EARLY_SHIFT + 3)) + 1, 1); /* NULL: not noted */
    pthread_mutex_init(&o->lock, NULL);
    pthread_cond_init(&o->wake, NULL);
    pthread_mutex_lock(&r->lock);
    size_t i = 0;
    while (i < r->count && !(r->orders[i]->rank == o->rank && r->orders[i]->world == o->world &&
                             strcmp(r->orders[i]->file, o->file) == 0))
        i++;
    if (i == r->count && r->count == LARDER__MOUNT_FILE_ORDERS_MAX) {
        pthread_mutex_unlock(&r->lock);
        pthread_mutex_destroy(&o->lock), pthread_cond_destroy(&o->wake);
        free(o->early), free(o);
        return larder__fail(LARDER_EUSAGE, "%d file orders registered already",
                            LARDER__MOUNT_FILE_ORDERS_MAX);
    }
    if (pthread_create(&o->thread, NULL, run_listing, o) != 0) {
        pthread_mutex_unlock(&r->lock);
        pthread_mutex_destroy(&o->lock), pthread_cond_destroy(&o->wake);
        free(o->early), free(o);
        return -EAGAIN;
    }
    struct larder__mount_file_order *old = i < r->count ? r->orders[i] : NULL;
    r->orders[i] = o;
    if (i == r->count) r->count++;
    pthread_mutex_unlock(&r->lock);
    order_free(old); /* the previous epoch's: its listing and resolvers stop at the MiB at hand */
    return 0;
}
