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
 * reading it, that it read and from where (take_source_reads).
 */
#include "larderd.h"
#include "cache.h"
#include "fill.h"
#include "index.h"
#include "source.h"

#include <errno.h>
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
static int striped_source(void *context, uint32_t shard, struct larder__source *origin,
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
static struct dataset_entry *find_by_url(struct larderd *d, const char *url, int *slot)
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
static struct dataset_entry *find_by_id(struct larderd *d, uint64_t low, uint64_t high,
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
static bool being_closed(const struct larderd *d, const char *url, uint64_t low, uint64_t high)
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
static int free_slot(const struct larderd *d)
{
    for (int i = 0; i < d->num_datasets; i++)
        if (!d->datasets[i].url) return i;
    return d->num_datasets < MAX_DATASETS ? d->num_datasets : -1;
}

/* Free what an entry holds (the dataset, the peer endpoints, the URL). */
static void entry_free(struct larderd *d, struct dataset_entry *e)
{
    larder_close(e->dataset);
    for (size_t m = 0; e->members && m < d->members.count; m++)
        larder__endpoint_free(e->members[m]);
    free(e->members);
    free(e->peer_url);
    free(e->url);
    memset(e, 0, sizeof *e);
}

/* The refusal of an unchecked index to an opener without OPEN_UNCHECKED. */
static int refuse_unchecked(const char *url)
{
    return larder__fail(LARDER_EDENIED,
                        "%s: index marked unchecked (no checksums): this daemon opens it only for "
                        "its own user, whose bytes it cannot check for anyone else",
                        url);
}

/* Whether the index at url (refused by larder_open) is one marked
 * unchecked: asked again with the flag allowed, nothing kept. */
static bool is_marked_unchecked(const char *url, const struct larderd *d)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = "",
                             .daemon_socket = "",
                             .allow_prefixes = d->config.num_allow ? d->config.allow : NULL,
                             .allow_unchecked = 1};
    larder_dataset *probe = NULL;
    bool marked = larder_open(&probe, url, &o) == 0 && larder__dataset_index(probe)->unchecked;
    larder_close(probe);
    return marked;
}

/*
 * Open url into e (zeroed first) and check all of it, with no lock held:
 * the slow part of an OPEN (the index fetched, hashed and validated whole).
 * larder_open checks the index's content against the id it claims before
 * it touches the cache of that id (an index claiming another's id would
 * otherwise reset that dataset's cache state); then larder_validate checks
 * the whole index, before any of it is served: records, keys and overlaps.
 * So no index stands in for another in this registry or the cache.
 */
static int open_entry(struct larderd *d, struct dataset_entry *e, const char *url, bool unchecked)
{
    /* never trust_index: an index from anywhere names only shards under
     * its own base, and with --allow, under one of those prefixes */
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = d->config.cache_dir,
                             .cache_capacity = d->config.cache_capacity,
                             .max_inflight = d->config.jobs,
                             .daemon_socket = "",
                             .borrow_capacity = d->config.borrow_capacity,
                             .trust_index = 0,
                             .allow_prefixes = d->config.num_allow ? d->config.allow : NULL,
                             .allow_unchecked = unchecked};
    memset(e, 0, sizeof *e);
    int rc = larder_open(&e->dataset, url, &o);
    if (rc == LARDER_EBADINDEX && !unchecked && is_marked_unchecked(url, d))
        rc = refuse_unchecked(url);
    if (rc == 0) e->unchecked = larder__dataset_index(e->dataset)->unchecked;
    if (rc == 0) rc = larder_validate(e->dataset);
    if (rc == 0) larder__dataset_id(e->dataset, &e->id_low, &e->id_high);
    return rc;
}

/* An entry in its slot (d->lock held), before any READ can find it: every
 * shard's source is the entry's (the wrapper's context is the slot). */
static void entry_attach(struct larderd *d, struct dataset_entry *e)
{
    e->daemon = d;
    /* the owners of a read's chunks are read at once on the dataset's pool
     * (none: one after another) */
    if (larder__dataset_pool_get(e->dataset, &e->stripe_pool) < 0) e->stripe_pool = NULL;
    larder__dataset_set_source_wrapper(e->dataset, striped_source, e);
}

/* The endpoints of the other members, which the wrapper reads each chunk
 * of a shard through (its owner's). */
static int connect_members(struct larderd *d, struct dataset_entry *e, const char *url)
{
    int rc = 0;
    e->members = calloc(d->members.count, sizeof *e->members);
    if (!e->members) rc = -ENOMEM;
    for (size_t m = 0; rc == 0 && m < d->members.count; m++)
        if (m != d->self)
            rc = larder__endpoint_new(&e->members[m], d->members.names[m], LARDER__ROLE_PEER,
                                      d->secret, url, 5000);
    for (size_t m = 0; rc == 0 && m < d->members.count; m++)
        if (e->members[m]) ucx_adopt_endpoint(d, e->members[m]); /* --transport ucx|auto */
    return rc;
}

/* Whether an OPEN of url is under way (d->opening).  Call with d->lock held. */
static bool being_opened(const struct larderd *d, const char *url)
{
    for (int i = 0; i < MAX_OPENING; i++)
        if (d->opening[i] && strcmp(d->opening[i], url) == 0) return true;
    return false;
}

/* Note url as being opened: its place in d->opening, or -1 when all
 * MAX_OPENING are taken.  Call with d->lock held. */
static int opening_add(struct larderd *d, const char *url)
{
    for (int i = 0; i < MAX_OPENING; i++)
        if (!d->opening[i]) {
            d->opening[i] = url;
            return i;
        }
    return -1;
}

/* The caller holds e (slot) for its connection: one holder per connection
 * (bit `slot` of *held).  Call with d->lock held. */
static void hold(struct dataset_entry *e, int slot, uint64_t *held)
{
    if (!held || (*held & (UINT64_C(1) << slot))) return;
    __atomic_add_fetch(&e->holders, 1, __ATOMIC_ACQ_REL);
    *held |= UINT64_C(1) << slot;
}

/*
 * Registered under d->lock, opened without it: the index is fetched,
 * hashed and validated by open_entry with the lock released, so the loop's
 * find_dataset (every READ) and other openers go on meanwhile.  A second
 * opener of the same url waits for the first (d->opened) rather than open
 * it beside it; so does one past MAX_OPENING opens at once.  Only callers
 * with OPEN_NEW ever wait: the loop thread asks without it, and is told
 * LARDER_ENOTFOUND for a url not open yet (requests.c opens it on a worker).
 */
int open_dataset_held(struct larderd *d, const char *url, unsigned how, struct dataset_entry **out,
                      int *slot, uint64_t *held)
{
    bool unchecked = (how & OPEN_UNCHECKED) != 0;
    struct dataset_entry opened, *e, *same;
    int rc = 0, mark = -1;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        if ((e = find_by_url(d, url, slot))) {
            if (e->unchecked && !unchecked) {
                rc = refuse_unchecked(url);
            } else {
                hold(e, *slot, held);
                *out = e;
            }
            goto done;
        }
        if (!(how & OPEN_NEW)) {
            rc = larder__fail(LARDER_ENOTFOUND, "dataset %s is not open on this node", url);
            goto done;
        }
        if (being_closed(d, url, 0, 0)) {
            rc = larder__fail(-EAGAIN,
                              "dataset %s is being closed here (a replaced publication no one "
                              "read): open it again in a moment",
                              url);
            goto done;
        }
        if (free_slot(d) < 0) {
            rc = larder__fail(LARDER_EUSAGE, "too many datasets open");
            goto done;
        }
        if (!being_opened(d, url) && (mark = opening_add(d, url)) >= 0) break;
        pthread_cond_wait(&d->opened, &d->lock); /* another's OPEN of it, or too many at once */
    }
    pthread_mutex_unlock(&d->lock);
    rc = open_entry(d, &opened, url, unchecked);
    pthread_mutex_lock(&d->lock);
    d->opening[mark] = NULL;
    pthread_cond_broadcast(&d->opened);
    if (rc == 0 && being_closed(d, NULL, opened.id_low, opened.id_high))
        rc = larder__fail(-EAGAIN,
                          "dataset %s is being closed here under another name (a "
                          "replaced publication): open it again in a moment",
                          url);
    if (rc == 0 && (same = find_by_id(d, opened.id_low, opened.id_high, NULL, slot))) {
        entry_free(d, &opened); /* the same content under another name: one entry */
        hold(same, *slot, held);
        *out = same;
        goto done;
    }
    int free = rc == 0 ? free_slot(d) : -1;
    if (rc == 0 && free < 0) rc = larder__fail(LARDER_EUSAGE, "too many datasets open");
    if (rc < 0) {
        entry_free(d, &opened);
        goto done;
    }
    e = &d->datasets[free];
    *e = opened;
    entry_attach(d, e);
    if (!(e->url = strdup(url))) rc = -ENOMEM;
    if (rc == 0) publication_adopt(d, e, url); /* a publication's owner is its producer */
    /* an unchecked dataset is read from its origin only: no peer is asked
     * for it (nor may a peer OPEN it) */
    if (rc == 0 && d->members.count > 1 && !e->unchecked)
        rc = connect_members(d, e, e->peer_url ? e->peer_url : url);
    if (rc == 0) {
        *slot = free;
        if (free == d->num_datasets) d->num_datasets++;
        hold(e, free, held);
        *out = e;
        say("opened %s", url);
        if (d->config.warm) warm_owned(d, e);
    } else {
        entry_free(d, e);
    }
done:
    pthread_mutex_unlock(&d->lock);
    return rc;
}

int open_dataset(struct larderd *d, const char *url, unsigned how, struct dataset_entry **out,
                 int *slot)
{
    return open_dataset_held(d, url, how, out, slot, NULL);
}

struct dataset_entry *find_dataset(struct larderd *d, uint64_t low, uint64_t high, int *slot)
{
    pthread_mutex_lock(&d->lock);
    struct dataset_entry *found = find_by_id(d, low, high, NULL, slot);
    pthread_mutex_unlock(&d->lock);
    return found;
}

void close_datasets(struct larderd *d)
{
    for (int i = 0; i < d->num_datasets; i++)
        entry_free(d, &d->datasets[i]);
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
        entry_free(d, e); /* the slot is free for the next dataset opened */
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
