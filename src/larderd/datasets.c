/*
 * datasets.c - the daemon's dataset registry: one entry per validated
 * dataset id, opened on request (through the --allow prefixes when given,
 * never trusting an index's shard names beyond its base), and found again
 * by URL or id; in a cluster, each entry reads each 4 MiB chunk of a
 * shard from the chunk's owner node (a stripe, source_stripe.c, over the
 * shard's origin: the owners of a read's chunks at once, a failed owner's
 * chunks from the origin), and this node's own chunks from the origin.
 * No thread waits on a peer while it holds a fill lock: a local reader's
 * READ borrows what it needs of other owners' chunks before its fill
 * (borrow_ahead), and the fill takes those bytes from the loan; a READ
 * from a peer is filled from the origin only (serving_peer), so a read
 * never travels on from daemon to daemon, whatever each one thinks the
 * members are, and two daemons filling at once never wait on each other.
 * Every shard's source is wrapped in one that notes, for the thread
 * reading it, that it read and from where (take_source_reads).  Opening
 * an entry (open_dataset) is opens.c's.
 */
#include "larderd.h"
#include "cache.h"
#include "fill.h"
#include "index.h"
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long a chunk's owner that failed is left alone before it is asked again. */
#define OWNER_DOWN_MS 10000

/* What the calling thread's shard sources read since take_source_reads. */
static _Thread_local unsigned source_reads;
/* The calling thread serves a peer's READ: its fills read the origin only. */
static _Thread_local bool for_peer;

void serving_peer(bool on)
{
    for_peer = on;
}

unsigned take_source_reads(void)
{
    unsigned reads = source_reads;
    source_reads = 0;
    return reads;
}

/* A shard's source (the origin, or the owner-then-origin chain), noting its reads. */
struct noted_source {
    struct larder__source base;
    struct larder__source *inner;
};

static int noted_read(struct larder__source *source, const struct larder__extent *extents,
                      size_t count, unsigned flags)
{
    if (for_peer) flags |= LARDER__READ_ORIGIN_ONLY; /* never passed on to another member */
    int rc = larder__source_readv(((struct noted_source *)source)->inner, extents, count, flags);
    if (rc >= 0) source_reads |= rc == LARDER__FROM_PEER ? SOURCE_READ_PEER : SOURCE_READ_ORIGIN;
    return rc;
}

static int noted_size(struct larder__source *source, uint64_t *size)
{
    return larder__source_size(((struct noted_source *)source)->inner, size);
}

static int noted_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    return larder__source_stream(((struct noted_source *)source)->inner, sink, userdata);
}

static void noted_close(struct larder__source *source)
{
    larder__source_close(((struct noted_source *)source)->inner);
    free(source);
}

static const struct larder__source_ops noted_ops = {
    .kind = "noted",
    .size = noted_size,
    .read = noted_read,
    .stream = noted_stream,
    .close = noted_close,
};

/* `inner` behind a noted source (which owns it from now on, even when this fails). */
static int noted_open(struct larder__source *inner, struct larder__source **out)
{
    struct noted_source *n = malloc(sizeof *n);
    if (!n) {
        larder__source_close(inner);
        return -ENOMEM;
    }
    *n = (struct noted_source){.base = {.ops = &noted_ops, .name = inner->name}, .inner = inner};
    *out = &n->base;
    return 0;
}

/*
 * The member that owns chunk `chunk` (bytes [chunk * LARDER__OWNER_CHUNK,
 * ...)) of `shard` of e's dataset: rendezvous hashing over the members
 * (cluster.h), or, for a publication, its producer (publish.c) for every
 * chunk.  Every decision of who owns what goes through here.
 */
static size_t chunk_owner(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    /* set once, owner first, then the flag with release (publish.c): read
     * here on fill and pool threads without the registry's lock */
    if (__atomic_load_n(&e->fixed, __ATOMIC_ACQUIRE) && e->fixed_owner < e->daemon->members.count)
        return e->fixed_owner;
    return larder__owner_chunk(&e->daemon->members, e->id_low, e->id_high, shard, chunk);
}

static size_t stripe_owner(void *context, uint32_t shard, uint64_t chunk)
{
    return chunk_owner(context, shard, chunk);
}

bool owns_chunk(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    return e->daemon->members.count <= 1 || chunk_owner(e, shard, chunk) == e->daemon->self;
}

/* Member m's peer source of a shard, opened when the stripe first needs it
 * (members x shards of them would be too many to open ahead in a large
 * cluster); none for this node. */
static int open_peer(void *context, size_t m, uint32_t shard, struct larder__source **out)
{
    struct dataset_entry *e = context;
    *out = NULL;
    if (m == e->daemon->self || !e->members[m]) return 0;
    return larder__source_peer_open(out, e->members[m], e->id_low, e->id_high, shard);
}

/*
 * The source of a shard this daemon reads (each entry's source wrapper):
 * in a cluster, a stripe over the shard's origin that reads each chunk of
 * another member from that member's peer source (through a loan borrowed
 * ahead, borrow_ahead) and this node's from the origin; the origin alone on
 * a node without peers.
 */
int dataset_striped_source(void *context, uint32_t shard, struct larder__source *origin,
                           struct larder__source **out)
{
    struct dataset_entry *e = context;
    /* background reads of the origin yield to the readers' (source_gate.c) */
    int rc = larder__source_gate_open(&origin, origin);
    if (rc < 0) return rc;
    if (!e->members) return noted_open(origin, out);
    struct larder__stripe_config c = {.open_peer = open_peer,
                                      .peer_context = e,
                                      .members = e->daemon->members.count,
                                      .shard = shard,
                                      .chunk_size = LARDER__OWNER_CHUNK,
                                      .owner = stripe_owner,
                                      .owner_context = e,
                                      .pool = e->stripe_pool,
                                      .down_ms = OWNER_DOWN_MS,
                                      .borrow_ahead = true};
    struct larder__source *stripe;
    rc = larder__source_stripe_open(&stripe, &c, origin); /* owns origin from now on */
    return rc < 0 ? rc : noted_open(stripe, out);
}

uint64_t dataset_pinned_bytes(larder_dataset *dataset)
{
    struct larder__cache *cache = larder__dataset_cache(dataset);
    return cache ? larder__cache_pinned_bytes(cache) : 0;
}

size_t owner_of_chunk(const struct dataset_entry *e, uint32_t shard, uint64_t chunk)
{
    return e->daemon->members.count <= 1 ? e->daemon->self : chunk_owner(e, shard, chunk);
}

struct larder__stripe_loan *borrow_ahead(struct dataset_entry *e, uint32_t shard, uint64_t offset,
                                         uint64_t length, int priority,
                                         struct larder__source **stripe)
{
    bool from_relay;
    return borrow_ahead_via(e, shard, offset, length, priority, SIZE_MAX, stripe, &from_relay);
}

struct larder__stripe_loan *borrow_ahead_via(struct dataset_entry *e, uint32_t shard,
                                             uint64_t offset, uint64_t length, int priority,
                                             size_t relay, struct larder__source **stripe,
                                             bool *from_relay)
{
    *from_relay = false;
    *stripe = NULL;
    if (!e->members || shard >= larder__dataset_num_shards(e->dataset)) return NULL;
    struct larder__fill *fill = larder__dataset_fill(e->dataset);
    struct larder__source *source;
    uint64_t lo, hi;
    if (larder__fill_source(fill, shard, &source) < 0 || source->ops != &noted_ops ||
        larder__fill_range_scope(fill, shard, offset, length, &lo, &hi) != 0)
        return NULL; /* no source (the fill says why), resident already, or outside the shard */
    struct larder__source *inner = ((struct noted_source *)source)->inner;
    struct larder__stripe_loan *loan = NULL;
    /* a failure leaves no loan: the fill reads those chunks from the origin */
    if (larder__source_stripe_borrow_via(inner, lo, hi - lo, larder__read_at(priority), relay,
                                         &loan, from_relay) == 0 &&
        loan)
        *stripe = inner;
    return loan;
}

struct larder__stripe_loan *borrow_range_into(struct dataset_entry *e, uint32_t shard,
                                              uint64_t offset, uint64_t length, int priority,
                                              void *base, struct larder__source **stripe)
{
    *stripe = NULL;
    if (!e->members || shard >= larder__dataset_num_shards(e->dataset)) return NULL;
    struct larder__source *source;
    if (larder__fill_source(larder__dataset_fill(e->dataset), shard, &source) < 0 ||
        source->ops != &noted_ops)
        return NULL;
    struct larder__source *inner = ((struct noted_source *)source)->inner;
    struct larder__stripe_loan *loan = NULL;
    if (larder__source_stripe_borrow_into(inner, offset, length, larder__read_at(priority), base,
                                          &loan) == 0 &&
        loan)
        *stripe = inner;
    return loan;
}

void borrow_return(struct larder__source *stripe, struct larder__stripe_loan *loan)
{
    if (stripe) larder__source_stripe_return(stripe, loan);
}

/* The entry at url, with its slot; NULL: not open.  Call with d->lock held. */
struct dataset_entry *datasets_find_url(struct larderd *d, const char *url, int *slot)
{
    for (int i = 0; i < d->num_datasets; i++)
        if (d->datasets[i].url && !d->datasets[i].closing && strcmp(d->datasets[i].url, url) == 0) {
            *slot = i;
            return &d->datasets[i];
        }
    return NULL;
}

/* The entry with that id other than `except`, with its slot; NULL: none.
 * Call with d->lock held. */
struct dataset_entry *datasets_find_id(struct larderd *d, uint64_t low, uint64_t high,
                                       const struct dataset_entry *except, int *slot)
{
    for (int i = 0; i < d->num_datasets; i++) {
        struct dataset_entry *e = &d->datasets[i];
        if (e != except && e->url && !e->closing && e->id_low == low && e->id_high == high) {
            *slot = i;
            return e;
        }
    }
    return NULL;
}

/* Whether an entry being closed (its blocks evicted on a worker) has this
 * url, or this id (url NULL): a second entry on the same cache files would
 * pass its resident bits to sendfile and UCX while the eviction punches
 * holes under them.  Call with d->lock held. */
bool datasets_closing(const struct larderd *d, const char *url, uint64_t low, uint64_t high)
{
    for (int i = 0; i < d->num_datasets; i++) {
        const struct dataset_entry *e = &d->datasets[i];
        if (e->url && e->closing &&
            (url ? strcmp(e->url, url) == 0 : e->id_low == low && e->id_high == high))
            return true;
    }
    return false;
}

/* A slot for a new entry: one closed before (its url NULL), else the
 * next; -1 when all MAX_DATASETS are open.  Call with d->lock held. */
int datasets_free_slot(const struct larderd *d)
{
    for (int i = 0; i < d->num_datasets; i++)
        if (!d->datasets[i].url) return i;
    return d->num_datasets < MAX_DATASETS ? d->num_datasets : -1;
}

/* Free what an entry holds (the dataset, the peer endpoints, the URL). */
void dataset_entry_free(struct larderd *d, struct dataset_entry *e)
{
    larder_close(e->dataset);
    for (size_t m = 0; e->members && m < d->members.count; m++)
        larder__endpoint_free(e->members[m]);
    free(e->members);
    free(e->peer_url);
    free(e->url);
    memset(e, 0, sizeof *e);
}

struct dataset_entry *find_dataset(struct larderd *d, uint64_t low, uint64_t high, int *slot)
{
    pthread_mutex_lock(&d->lock);
    struct dataset_entry *found = datasets_find_id(d, low, high, NULL, slot);
    pthread_mutex_unlock(&d->lock);
    return found;
}

void close_datasets(struct larderd *d)
{
    for (int i = 0; i < d->num_datasets; i++)
        dataset_entry_free(d, &d->datasets[i]);
    d->num_datasets = 0;
}

void datasets_release_opened(struct larderd *d, uint64_t opened)
{
    for (int i = 0; opened && i < MAX_DATASETS; i++)
        if (opened & (UINT64_C(1) << i)) {
            __atomic_sub_fetch(&d->datasets[i].holders, 1, __ATOMIC_RELEASE);
            opened &= ~(UINT64_C(1) << i);
        }
}

/* A closing entry's cached blocks evicted, on a pool worker (no lock held:
 * a few system calls per block); the loop frees the entry after. */
static void close_job(void *arg)
{
    struct dataset_entry *e = arg;
    /* read before the store below: from then on the loop may free e */
    struct larderd *d = (struct larderd *)e->daemon;
    struct larder__cache *cache = larder__dataset_cache(e->dataset);
    uint64_t evicted = cache ? larder__cache_evict_all(cache) : 0;
    say("closing %s (replaced, and no one reads it any more): %llu cached blocks evicted", e->url,
        (unsigned long long)evicted);
    __atomic_store_n(&e->evicted, true, __ATOMIC_RELEASE);
    larderd_wake(d);
}

size_t close_unused_datasets(struct larderd *d,
                             bool (*closable)(struct larderd *d, const struct dataset_entry *e))
{
    size_t closing = 0;
    pthread_mutex_lock(&d->lock);
    /* freed here, on the loop thread, as every entry was before: the
     * loop's own readers of the registry (STATS' transports) take no lock */
    for (int i = 0; i < d->num_datasets; i++) {
        struct dataset_entry *e = &d->datasets[i];
        if (!e->url || !e->closing || !__atomic_load_n(&e->evicted, __ATOMIC_ACQUIRE)) continue;
        dataset_entry_free(d, e); /* the slot is free for the next dataset opened */
        d->datasets_closed++;
    }
    while (d->num_datasets > 0 && !d->datasets[d->num_datasets - 1].url)
        d->num_datasets--;
    for (int i = 0; i < d->num_datasets; i++) {
        struct dataset_entry *e = &d->datasets[i];
        /* holders are added under d->lock only (open_dataset_held), held here */
        if (!e->url || e->closing || __atomic_load_n(&e->holders, __ATOMIC_ACQUIRE) > 0 ||
            !closable(d, e))
            continue;
        e->closing = true; /* found no more: a new OPEN of its url opens it anew */
        e->daemon = d;
        if (larder__pool_submit(d->pool, close_job, e, LARDER__WARM) < 0)
            e->closing = false; /* tried again at the next sweep */
        else
            closing++;
    }
    pthread_mutex_unlock(&d->lock);
    return closing;
}
