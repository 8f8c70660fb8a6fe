/*
 * source.h - everything bytes come from, behind one ops table.
 *
 * A source is an object of a given size that can be read by byte range:
 * a file on a local or shared file system, an HTTP(S) object, an S3
 * object (HTTP with a request signer), a peer daemon serving one shard of
 * a dataset (the owner node of some of its chunks), and the wrappers that compose them:
 * a chain (try the owner, then the origin; a link that fails is left alone
 * for a while), a stripe (each chunk of a shard from its owner, owners at
 * once, source_stripe.c) and hedging (a read slower than the recent p95 gets a
 * second identical request, paid for from one shared budget, hedge.h).
 * The fill engine (fill.h) reads through a source and never asks which
 * kind it is.  A new transport or origin is one more file that fills in a
 * struct larder__source_ops, the way SQLite's VFS takes a new file system.
 *
 * Every operation is thread-safe: many fills read one source at once.
 * Errors are negative codes with a message (larder_errmsg()) that names
 * the source.
 */
#ifndef LARDER_SOURCE_H
#define LARDER_SOURCE_H

#include "common.h"
#include "priority.h"

struct larder__source;
struct larder__endpoint;
struct larder__hedge_budget;
struct larder__pool;

/* One range of a (vectored) read: bytes [offset, offset + length) into buf. */
struct larder__extent {
    void *buf;
    uint64_t offset;
    size_t length;
};

/* Where a read's bytes came from: a read returns one of these when it succeeds. */
enum larder__from {
    LARDER__FROM_ORIGIN = 0, /* the dataset's own origin (file, HTTP, S3) */
    LARDER__FROM_PEER = 1,   /* another node's cache (the shard's owner) */
};

/*
 * Flags of a read.  Bits 1-2 carry the read's class (priority.h), so a
 * source that queues or limits (a peer daemon's READ, the HTTP source's
 * transfers in flight) can put it behind higher classes: 0 is DEMAND, so
 * a read without a class is a blocked reader's.  Wrappers (chain, hedge)
 * pass the flags on unchanged.
 */
enum {
    LARDER__READ_ORIGIN_ONLY = 1u << 0, /* skip peers: a refetch after wrong bytes */
    LARDER__READ_CACHED_ONLY = 1u << 3, /* a peer answers from its cache or declines (a relay) */
    LARDER__READ_CLASS_SHIFT = 1,
    LARDER__READ_CLASS_MASK = 3u << 1, /* enum larder__priority << LARDER__READ_CLASS_SHIFT */
};

/* The flags of a read at class `priority` (out of range: WARM). */
static inline unsigned larder__read_at(int priority)
{
    if (priority < 0 || priority >= LARDER__CLASSES) priority = LARDER__WARM;
    return (unsigned)priority << LARDER__READ_CLASS_SHIFT;
}
/* The class a read's flags carry. */
static inline int larder__read_class(unsigned flags)
{
    return (int)((flags & LARDER__READ_CLASS_MASK) >> LARDER__READ_CLASS_SHIFT);
}

/* A whole object, in order, to a sink; a negative return from the sink stops it. */
typedef int (*larder__sink_fn)(void *userdata, const void *data, size_t length);

struct larder__source_ops {
    const char *kind; /* "file", "http", "s3", "peer", "chain", "stripe", "hedge", or a test's */
    /* The object's size in bytes. */
    int (*size)(struct larder__source *source, uint64_t *size);
    /*
     * Read every extent exactly (concurrently, where the source can):
     * returns a enum larder__from, or a negative code (LARDER_ETRUNCATED
     * when the object ends before an extent does).  On failure the
     * buffers' contents are unspecified.
     */
    int (*read)(struct larder__source *source, const struct larder__extent *extents, size_t count,
                unsigned flags);
    /* The whole object to `sink`; NULL: larder__source_stream reads it in chunks. */
    int (*stream)(struct larder__source *source, larder__sink_fn sink, void *userdata);
    /* Close the source and free it (and whatever it owns). */
    void (*close)(struct larder__source *source);
};

/* The common head of every source; implementations embed it first. */
struct larder__source {
    const struct larder__source_ops *ops;
    const char *name; /* for messages: the URL or path, "peer HOST:PORT shard N", ...;
                         owned by the source, valid until it is closed */
};

/* ---- using a source -------------------------------------------------------- */

LARDER__HIDDEN int larder__source_size(struct larder__source *source, uint64_t *size);
/* One extent: a enum larder__from or a negative code (length 0: nothing read, FROM_ORIGIN). */
LARDER__HIDDEN int larder__source_read(struct larder__source *source, void *buf, size_t length,
                                       uint64_t offset, unsigned flags);
LARDER__HIDDEN int larder__source_readv(struct larder__source *source,
                                        const struct larder__extent *extents, size_t count,
                                        unsigned flags);
LARDER__HIDDEN int larder__source_stream(struct larder__source *source, larder__sink_fn sink,
                                         void *userdata);
/*
 * After a read on this thread answered LARDER__FROM_PEER: how many of the
 * bytes [offset, offset + length) came from a peer.  All of them, unless
 * that read went through a stripe, which reads some of a read's bytes from
 * peers and the rest from the origin (the fill engine keeps and counts
 * each block as what it is).
 */
LARDER__HIDDEN uint64_t larder__source_peer_bytes(uint64_t offset, uint64_t length);
/* For a source that read only `ranges` from peers (its read answers
 * LARDER__FROM_PEER): what larder__source_peer_bytes tells on this thread. */
LARDER__HIDDEN void larder__source_set_peer_ranges(const struct larder__extent *ranges,
                                                   size_t count);
/* Accepts NULL. */
LARDER__HIDDEN void larder__source_close(struct larder__source *source);

/* ---- opening one ---------------------------------------------------------- */

/*
 * The origin at `url`, by its scheme: a path or file:// URL (opened at
 * once; errors name the path), http(s):// (contacted on first use), or
 * s3://bucket/key.  Hedged, drawing on `budget` (NULL: the process's
 * budget, larder__hedge_process(), looked up at each read so a later
 * larder__hedge_attach counts): a file through the hedge wrapper, HTTP
 * and S3 inside their own transfers (the same policy; never both).
 * 0, or a negative code with a message naming the URL.
 */
LARDER__HIDDEN int larder__source_open(struct larder__source **out, const char *url,
                                       struct larder__hedge_budget *budget);

/* A path or file:// URL, unhedged. */
/* An origin that could not be opened (source_missing.c): every call fails
 * with `code` and a message naming it, after `why` when not NULL. */
LARDER__HIDDEN int larder__source_missing_open(struct larder__source **out, const char *name,
                                               int code, const char *why);
LARDER__HIDDEN int larder__source_file_open(struct larder__source **out, const char *path);
/* An http(s):// object, hedged with `budget` (NULL: the process's) inside its transfers. */
LARDER__HIDDEN int larder__source_http_open(struct larder__source **out, const char *url,
                                            struct larder__hedge_budget *budget);
/* An s3://bucket/key object: HTTP with SigV4 (s3.h); hedged like HTTP. */
LARDER__HIDDEN int larder__source_s3_open(struct larder__source **out, const char *url,
                                          struct larder__hedge_budget *budget);
/*
 * Shard `shard` of dataset (id_low, id_high) as the daemon at `endpoint`
 * serves it (the endpoint is borrowed: it must outlive the source).
 * Reads answer LARDER__FROM_PEER; each READ carries the class of the
 * read's flags (larder__read_class), which the peer queues and answers
 * by; a read while the endpoint is marked down fails at once.  A peer does not know a shard's
 * size: size and stream fail with LARDER_EUNSUPPORTED (a chain takes
 * those from its last link).
 */
LARDER__HIDDEN int larder__source_peer_open(struct larder__source **out,
                                            struct larder__endpoint *endpoint, uint64_t id_low,
                                            uint64_t id_high, uint32_t shard);
/*
 * Try `links` in order (the chain owns them from now on, even when this
 * fails): a link that fails is logged (once) and skipped for `down_ms`,
 * and the next one read; the last is never skipped.
 * LARDER__READ_ORIGIN_ONLY reads only the last link.  The size, the
 * stream and the name are the last link's.
 */
LARDER__HIDDEN int larder__source_chain_open(struct larder__source **out,
                                             struct larder__source *const *links, size_t count,
                                             int down_ms);
/* The owner (a member index) of chunk `chunk` of shard `shard`: cluster.h's rule,
 * or a daemon's own (an index with no peer source reads the origin). */
typedef size_t (*larder__chunk_owner_fn)(void *context, uint32_t shard, uint64_t chunk);

/* Member `member`'s peer source of shard `shard`, opened when a stripe first
 * needs it: 0 and *out (NULL: that member has none, this node for one), or a
 * negative code (asked again later). */
typedef int (*larder__open_peer_fn)(void *context, size_t member, uint32_t shard,
                                    struct larder__source **out);

/* What a stripe reads one shard from. */
struct larder__stripe_config {
    struct larder__source *const *peers; /* per member, its peer source of this shard;
                                            NULL for this node and for members not asked
                                            (NULL array: open_peer opens them) */
    larder__open_peer_fn open_peer;      /* without peers: opens each on first use */
    void *peer_context;                  /* for open_peer; must outlive the stripe */
    size_t members;                      /* members in the cluster (entries in peers) */
    uint32_t shard;                      /* the shard, for `owner` */
    uint64_t chunk_size;                 /* bytes per chunk (LARDER__OWNER_CHUNK) */
    larder__chunk_owner_fn owner;        /* who owns a chunk */
    void *owner_context;                 /* for `owner`; must outlive the stripe */
    struct larder__pool *pool;           /* owners read at once there (borrowed, must outlive the
                                            stripe); NULL: one after another */
    int down_ms;                         /* how long a failed peer is left alone */
    bool borrow_ahead; /* reads never ask a peer: the other owners' pieces come from loans
                          (larder__source_stripe_borrow), the rest from the origin */
};
/*
 * A shard striped over the owners of its chunks (source_stripe.c): a read
 * is cut at chunk boundaries, each owner's pieces read as one vectored
 * read from its peer source (from `origin` for chunks without one: this
 * node's), owners at once on the pool; a failed peer is logged, left alone
 * for down_ms, and its pieces read from the origin.  Answers
 * LARDER__FROM_PEER when any byte came from a peer.  The stripe owns the
 * peer sources and `origin` from now on, even when this fails.  The size,
 * the stream and the name are the origin's.
 */
LARDER__HIDDEN int larder__source_stripe_open(struct larder__source **out,
                                              const struct larder__stripe_config *config,
                                              struct larder__source *origin);
/* Bytes of a stripe borrowed from the owners of their chunks, ahead of a read. */
struct larder__stripe_loan;
/*
 * Read the pieces of [offset, offset + length) that other members own from
 * their owners, at once (with no fill lock held: a borrow_ahead stripe's
 * reads never ask a peer), and keep them: until the loan is returned, reads
 * of the stripe take those pieces from it.  An owner that fails is logged
 * and left alone as in a read; its pieces are not kept (reads take them
 * from the origin).  *out is the loan (NULL: nothing kept, or `stripe` is
 * no stripe); 0 or -ENOMEM.
 */
LARDER__HIDDEN int larder__source_stripe_borrow(struct larder__source *stripe, uint64_t offset,
                                                uint64_t length, unsigned flags,
                                                struct larder__stripe_loan **out);
/*
 * The same, each piece received straight into its place in `base` (base[0]
 * is the byte at offset, length bytes): a whole chunk borrowed into the
 * buffer its fill will use as its span (larder__fill_offer_span), so that
 * the fill's read of the loan copies nothing.  The loan owns no bytes;
 * base must stay until it is given back.  0 or a negative code; -EINVAL
 * without base.
 */
LARDER__HIDDEN int larder__source_stripe_borrow_into(struct larder__source *stripe, uint64_t offset,
                                                     uint64_t length, unsigned flags, void *base,
                                                     struct larder__stripe_loan **out);
/*
 * The same, through a relay (storm: staging a hot file on every node): when
 * [offset, offset + length) lies in one chunk that neither this node nor
 * `relay` owns, first ask member `relay` for it from its cache
 * (LARDER__READ_CACHED_ONLY; a relay that declines, or fails, is not
 * marked down), and only then its owner, as larder__source_stripe_borrow.
 * relay SIZE_MAX: the owners only.  *from_relay says the relay lent it.
 */
LARDER__HIDDEN int larder__source_stripe_borrow_via(struct larder__source *stripe, uint64_t offset,
                                                    uint64_t length, unsigned flags, size_t relay,
                                                    struct larder__stripe_loan **out,
                                                    bool *from_relay);
/* Give a loan back (NULL: nothing); its bytes are freed. */
LARDER__HIDDEN void larder__source_stripe_return(struct larder__source *stripe,
                                                 struct larder__stripe_loan *loan);
/*
 * Hedge reads of `inner` (owned from now on, even when this fails) with
 * the budget `budget` (NULL: the process's): source_hedge.c says how.
 * Destroying the wrapper while a losing attempt is still reading is
 * safe: `inner` is closed when that attempt ends.
 */
LARDER__HIDDEN int larder__source_hedge_open(struct larder__source **out,
                                             struct larder__source *inner,
                                             struct larder__hedge_budget *budget);
/*
 * `inner` (owned from now on, even when this fails) behind the process's
 * gate (source_gate.c): its HINTED and WARM reads go in pieces of 256 KiB,
 * as many in flight for all gated sources as the origin's delay allows
 * (a LEDBAT-like window, larder__gate_window_update), at most 2 while
 * readers are active, and none while a DEMAND or NEAR read of a gated
 * source is in flight or ended under 20 ms ago; so background staging
 * leaves a shared origin to the readers.  0 or -ENOMEM.
 */
LARDER__HIDDEN int larder__source_gate_open(struct larder__source **out,
                                            struct larder__source *inner);
/* The gate's window of background pieces in flight, with no reader about:
 * LEDBAT-like (RFC 6817), from each piece's time at the origin. */
struct larder__gate_window {
    int slots;             /* pieces that may be in flight */
    int counted;           /* pieces since the window last grew by one */
    uint64_t base_us;      /* least piece time this epoch (UINT64_MAX: none yet) */
    uint64_t last_base_us; /* ... in the epoch before */
    uint64_t epoch_us;     /* when this epoch began */
    uint64_t decreased_us; /* when the window last halved (0: never) */
};
/* A window of 2 pieces (as while readers read), with no base yet. */
LARDER__HIDDEN void larder__gate_window_init(struct larder__gate_window *w);
/* A piece took piece_us (at now_us, monotonic): grow the window while the
 * piece's time stays within 25 ms of the base (doubling within 12.5 ms),
 * halve it (once a piece time, to 1 at least) past that.  The new size. */
LARDER__HIDDEN int larder__gate_window_update(struct larder__gate_window *w, uint64_t piece_us,
                                              uint64_t now_us);
/* A peer's readers read the shared origin now (its READERS frame): start
 * no background piece for hold_ms (at most 1000), and while a peer's
 * readers were heard from in the last second, keep one piece of 64 KiB at
 * most in flight, so that what their reads find ahead of them at the
 * origin is one small piece per node. */
LARDER__HIDDEN void larder__source_gate_hold(unsigned hold_ms);
/* Call watcher(context) at the start and at the end of each foreground
 * (DEMAND, NEAR) read through the gate, on the reading thread, without
 * the gate's lock: the daemon tells its peers (READERS).  It must not
 * block.  NULL: no watcher. */
LARDER__HIDDEN void larder__source_gate_watch(void (*watcher)(void *context), void *context);
/* Milliseconds left of a peer's hold (larder__source_gate_hold); 0: none. */
LARDER__HIDDEN int larder__source_gate_held_ms(void);
/* Background pieces that may be in flight now (this process's gate). */
LARDER__HIDDEN int larder__source_gate_slots(void);
/* Background pieces that waited for foreground reads so far (this process). */
LARDER__HIDDEN uint64_t larder__source_gate_waits(void);
/* What the calling thread's reads through gates did since its last take:
 * a request trace's breakdown (larderd's LARDERD_TRACE). */
struct larder__gate_trace {
    uint64_t wait_us;      /* its background pieces waiting at the gate */
    uint64_t origin_us;    /* in the origin's reads (the inner source) */
    uint64_t origin_bytes; /* read from the origin */
    uint32_t origin_reads; /* reads (pieces) of the origin */
    int background_ahead;  /* most background reads at the origin when a foreground one began */
};
/* The calling thread's figures since its last call into *out; starts over. */
LARDER__HIDDEN void larder__source_gate_trace_take(struct larder__gate_trace *out);
/* This process's gated reads in flight now: foreground (DEMAND, NEAR) and
 * background (HINTED, WARM, whole or in pieces). */
LARDER__HIDDEN void larder__source_gate_state(int *foreground, int *background);
/* Hedged second requests sent so far by this process (all sources). */
LARDER__HIDDEN uint64_t larder__source_hedges(void);

/* ---- names ------------------------------------------------------------------ */

/* The local path of a file URL ("file:///x" -> "/x"; a path as it is). */
LARDER__HIDDEN const char *larder__file_path(const char *url);
/* Whether `name` is a URL with a scheme larder reads over the network. */
LARDER__HIDDEN bool larder__is_remote(const char *name);
/*
 * Resolve `name` as the index at `index_url` refers to it: URLs and
 * absolute paths as they are, relative names against the index's
 * directory.  Returns a malloc'd string or NULL.
 */
LARDER__HIDDEN char *larder__resolve(const char *index_url, const char *name);
/*
 * The most larder__source_load takes into memory: an index read over the
 * network (a larger one is opened from a local file, which is mapped),
 * and a list of names or ids (--files-from, a deny list).  A hostile
 * server's endless body stops there (docs/security.md).
 */
#define LARDER__LOAD_INDEX_MAX (4ull << 30)
#define LARDER__LOAD_LIST_MAX (256ull << 20)
/*
 * Read a whole object into a malloc'd buffer (*data, *size; the caller
 * frees it).  An object of more than `limit` bytes fails with -EFBIG,
 * naming it as `what` ("an index"): over HTTP before its body when its
 * Content-Length says so, else once that many bytes came.
 */
LARDER__HIDDEN int larder__source_load(const char *url, uint64_t limit, const char *what,
                                       uint8_t **data, uint64_t *size);
/* The same, by a confined opener: over HTTP a redirect is followed only
 * under one of the NULL-terminated `allow` prefixes (NULL: anywhere on the
 * origin). */
LARDER__HIDDEN int larder__source_load_confined(const char *url, uint64_t limit, const char *what,
                                                const char *const *allow, uint8_t **data,
                                                uint64_t *size);

#endif
