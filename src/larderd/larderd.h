/*
 * larderd.h - what the daemon's parts share: its state (struct larderd,
 * passed to every part), connections and their output queues, and the
 * open datasets.  Each part is a file with a unit test of its own
 * (tests/unit/test_larderd_*.c), none of which needs a socket:
 *
 *   main.c        start-up: signals, limits, listeners, the loop
 *   config.c      options into struct larderd_config, checked (config.h);
 *                 the secret and the members they name
 *   state.c       struct larderd's set-up and tear-down, say(), now_ms()
 *   connection.c  a connection and its output queue: what handle() answers
 *                 into, from the loop or a worker
 *   loop.c        the epoll loop: listeners, who may connect, frames out of
 *                 a connection's input, bounds (connections, memory per
 *                 connection, idle time)
 *   requests.c    one whole frame at a time: the handshake, OPEN and who may
 *                 open what, READ (staged by the worker pool), STAT
 *   datasets.c    the dataset registry, and borrowing each chunk of a
 *                 shard from its owner
 *   borrow.c      borrowing another owner's chunk whole, once, for the
 *                 READs that read it
 *   publish*.c    names: PUBLISH/RESOLVE/ANNOUNCE (publish.c), the registry and
 *                 RESOLVEs waiting (_registry), announcing and learning (_jobs),
 *                 this node's own across restarts (_mine), replaced ones closed (_retire)
 *   warm.c        warm staging of the chunks this node owns
 *   hints.c       HINT requests: who may hint, which members stage, the answer
 *   hints_pins.c  this node's pins: their staging, their expiry, the list
 *   metrics.c     the Prometheus text of the counters, and its HTTP endpoint
 *                 (a thread of its own)
 *
 * Threads: the loop thread owns the connection list, each connection's
 * input and its epoll registration; workers only queue output (under the
 * connection's lock) and wake the loop.  The metrics port has a thread of
 * its own (metrics.c), which reads the counters as the workers do (d->lock,
 * atomic loads) and touches no connection.
 */
#ifndef LARDERD_H
#define LARDERD_H

#include "larder.h"

#include "config.h"
#include "metrics.h"

#include "endpoint.h"
#include "cluster.h"
#include "dataset.h"
#include "pool.h"
#include "wire.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* a connection's input holds one whole request: an OPEN's URL, or a HINT */
#define IN_CAPACITY                                                                                \
    (LARDER__WIRE_HEADER + (LARDER__WIRE_MAX_URL + 64 > LARDER__WIRE_MAX_HINT                      \
                                ? LARDER__WIRE_MAX_URL + 64                                        \
                                : LARDER__WIRE_MAX_HINT))
#define MAX_DATASETS 64 /* a connection's opened datasets are a 64-bit mask */
#define MAX_OPENING 16  /* indexes fetched and checked at once (open_dataset), off d->lock */
#define OPEN_WORKERS MAX_OPENING       /* the workers OPENs of new indexes run on (opens.c) */
#define PARTIAL_FRAME_TIMEOUT_MS 10000 /* a frame begun and not finished this long */
#define CLOSING_TIMEOUT_MS 5000        /* a refused client that does not take its ERROR */
/* Charged per READ besides its length, so that a flood of tiny READs is
 * bounded by the budget too (the job and the queue entry it costs). */
#define REQUEST_OVERHEAD 4096

struct output {
    struct output *next;
    size_t length, sent;
    int file;           /* then file_length bytes of this file (sendfile), or -1 */
    off_t file_offset;  /* advanced as they are sent */
    size_t file_length; /* left to send */
    size_t charge;      /* bytes charged to the connection's budget while queued */
    size_t uncached;    /* bytes of the node-wide uncached budget it holds */
    uint8_t priority;   /* a READ answer's class (priority.h): queued behind higher ones */
    uint8_t bytes[];
};

struct connection {
    struct larderd *daemon; /* whose connection it is */
    int fd;                 /* -1 in a unit test: nothing is sent */
    bool tcp;               /* a peer's TCP connection, else a local reader's Unix socket */
    bool greeted;           /* HELLO came */
    bool peer;              /* HELLO said peer (TCP only) */
    bool proven;            /* the peer proved the cluster secret (PROVE) */
    bool own_user;          /* a local client of the daemon's own uid, or root */
    bool closing;           /* refused or done: send what is queued, then close */
    bool paused;            /* over its memory budget: not read until it drains */
    bool dropped;           /* closed (set under lock); freed after the current batch of events */
    uint32_t watched;       /* the epoll events the loop registered for it */
    uid_t uid;              /* a local client's, from SO_PEERCRED */
    uint8_t client_nonce[LARDER__WIRE_NONCE], server_nonce[LARDER__WIRE_NONCE];
    uint64_t opened; /* bit i: datasets[i] was opened on this connection */
    uint8_t in[IN_CAPACITY];
    size_t in_used;
    int64_t last_active_ms;   /* last whole frame, or last answer fully sent (atomic) */
    int64_t partial_since_ms; /* a frame begun, not yet whole; 0: none */
    int64_t blocked_since_ms; /* output waiting on a socket that takes none; 0: none */
    int64_t unsent_since_ms;  /* since when no whole answer went out with some queued:
                               * queued into an empty queue, or the last one sent whole
                               * with more behind it; 0: none queued (c->lock) */
    int64_t closing_since_ms;
    struct connection *prev, *next; /* the loop's list */
    pthread_mutex_t lock;           /* guards the output queue, charged, jobs and refs */
    struct output *head, *tail;
    size_t charged;      /* READ lengths in flight plus queued output, in bytes */
    int jobs;            /* READs in flight (and OPENs, HINTs, RESOLVEs) */
    int opens;           /* an OPEN on the open pool: its next frames wait for its answer */
    int reads;           /* of those, READs (the rest: HINTs, RESOLVEs waiting) */
    int64_t progress_ms; /* when a PROGRESS was last queued (connection_progress) */
    int refs;            /* the loop's, plus one per job in flight */
    /* ucx.c: the UCX data path this (authenticated peer's) connection asked
     * for, forgotten when it is dropped; NULL: none */
    struct larder__ucx_session *ucx;
    int64_t ucx_used_ms; /* when a READ last came over it (atomic): not idle */
    /* a local client's process, from SO_PEERCRED (0: unknown, or a
     * peer): whose READs they are, for borrow.c's read ahead (a reader's
     * READs come on several pooled connections) */
    pid_t pid;
};

struct larder__stripe_loan;
struct larder__source;
struct opening;

struct dataset_entry {
    larder_dataset *dataset;
    char *url;
    uint64_t id_low, id_high;
    struct larder__endpoint **members; /* one per member; NULL for this node */
    bool unchecked; /* its index is marked unchecked: only for OPEN_UNCHECKED openers */
    const struct larderd *daemon;     /* whose members these are */
    struct served served;             /* what the daemon answered to READs of it */
    struct larder__pool *stripe_pool; /* the dataset's pool, where the owners of a read's
                                         chunks are read at once (NULL: in turn) */
    /* a publication (publish.c): every shard is fixed_owner's (its
     * producer), whose daemon peers OPEN it at peer_url (NULL: url) */
    bool fixed;         /* fixed_owner overrides the rendezvous owner */
    size_t fixed_owner; /* an index in members */
    char *peer_url;     /* the index's path on the producer; owned */
    /* connections alive with it opened (bit `slot` of c->opened): added by
     * OPEN under d->lock (open_dataset_held), taken off as such a connection is freed
     * (any thread; atomic).  A READ in flight holds its connection, so 0
     * means no request of a client or peer is using the entry. */
    int holders;
    bool closing; /* being closed (close_unused_datasets): found no more, its slot not yet free */
    bool evicted; /* closing: its cached blocks evicted (atomic); the loop frees it next */
    bool ahead_done; /* a local reader's OPEN had it connect ahead (connect_ahead.c; d->lock) */
};

struct larderd {
    struct larderd_config config; /* the options (config.c) */
    char *config_text;            /* --config's file: config's strings may point into it */
    /* what the options name (larderd_config_load) */
    char *secret;          /* the cluster's shared secret; NULL: none */
    const char *self_name; /* this member's name: --self, else --listen; NULL: neither */
    struct larder__members members;
    size_t self; /* index in members, or SIZE_MAX */
    /* run time (larderd_start) */
    int epoll, wake; /* the loop's epoll; an eventfd that wakes it; -1: none */
    struct larder__pool *pool;
    /* peers' READs (requests.c), on workers of their own: they read only the
     * origin, so they always finish, while this node's readers' READs may
     * wait on other members; in one queue, a member's READs would wait
     * behind those of its readers that wait on the member (docs/scale.md) */
    struct larder__pool *peer_pool;
    /* OPENs of indexes not open yet: fetched and checked on workers of
     * their own, never on the loop thread (requests.c) nor under d->lock */
    struct larder__pool *open_pool;
    pthread_mutex_t lock;                 /* datasets[], opening[] */
    pthread_cond_t opened;                /* an entry of opening[] was cleared */
    struct opening *opening[MAX_OPENING]; /* OPENs under way (datasets.c); NULL: free */
    struct dataset_entry datasets[MAX_DATASETS];
    int num_datasets;         /* slots in use or closed below it (a closed one: url NULL) */
    uint64_t datasets_closed; /* entries closed since start: replaced publications (d->lock) */
    struct connection *connections; /* the loop's list */
    int num_connections;
    struct connection *dropped;    /* closed, freed after the current batch of events */
    int spare_fd;                  /* kept for accepting and closing at the descriptor limit */
    pthread_mutex_t uncached_lock; /* what follows, to uncached_closed (requests.c, "Room") */
    uint64_t uncached_bytes;       /* malloc'ed for answers that could not be cached */
    struct uncached_user {         /* those bytes by who asked for them (uncached_key) */
        int64_t key;
        uint64_t bytes;
        struct read_job *parked, *parked_tail; /* its READs waiting for room, oldest first */
    } * uncached_users;                        /* those holding room or waiting for it */
    size_t uncached_users_count, uncached_users_capacity;
    uint64_t parked_count;      /* READs waiting for room, all users */
    uint64_t parked_seq;        /* READs parked since the start: their order across users */
    struct read_job *resumable; /* given room, for the loop to queue (uncached_resume) */
    bool uncached_closed;       /* stopping: no READ parks any more */
    pthread_mutex_t warm_lock;  /* warm_next_start */
    double warm_next_start;     /* when the next warm chunk may start (--warm-rate) */
    volatile sig_atomic_t stopping;
    struct hints *hints;   /* hints.c: pins and their expiry; NULL until the first hint */
    bool ucx_answers_left; /* ucx_daemon_quiesce: answers UCX kept; the datasets stay to exit */
    struct publications *publications; /* publish.c's name registry; NULL: none yet */
    struct larder__ucx *ucx;       /* ucx.c: the UCX hub peers' data goes over; NULL: TCP only */
    struct transforms *transforms; /* transform.c: made on the first TRANSFORM; NULL: none */
    uint64_t peer_opens;           /* OPENs from peers answered OPENED (opens.c; atomic; STAT) */
    uint64_t connected_ahead;    /* peer connections made ahead of need (connect_ahead.c; atomic) */
    uint64_t stalled_drops;      /* clients dropped by uncached_stalled (loop.c's sweep; atomic) */
    struct connect_ahead *ahead; /* connect_ahead.c's jobs and workers; NULL: none */
    struct metrics_server *metrics; /* metrics.c: --metrics' thread and clients; NULL: none */
};

/* The process's daemon: main.c's (and fuzz_daemon.c's).  The parts take
 * theirs as an argument; only main.c's signal handler reads this. */
extern struct larderd daemon_state;

/* state.c */
/* Zero d, with config's defaults, no fds, self SIZE_MAX and its locks ready. */
void larderd_init(struct larderd *d);
/* The loop's epoll and wake eventfd, and the pool of config.jobs workers: 0 or -errno. */
int larderd_start(struct larderd *d);
/* Both pools' counters by class, summed (STAT's and the metrics' "classes"). */
void larderd_classes_get(struct larderd *d, struct larder__pool_stats *out);
/* Finish the reads in flight, close the datasets, free the members and
 * the secret, close the fds.  d can be init'ed again after. */
void larderd_free(struct larderd *d);
/* Wake the loop (a worker queued output or ended a job). */
void larderd_wake(struct larderd *d);
/* Print one line to stderr, prefixed "larderd: " (nothing when quiet). */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* say() prints nothing from now on (quiet) or again: a harness that drives the parts. */
void say_quietly(bool quiet);
/* Milliseconds on the monotonic clock. */
int64_t now_ms(void);

/* connection.c */
/* A connection of d over fd (refs 1, the caller's); NULL when out of memory. */
struct connection *connection_new(struct larderd *d, int fd, bool tcp);
/* Drop one reference (the loop's or a job's); the last frees the connection. */
void connection_release(struct connection *c);
/* Whether c's next frames wait (c->lock held): over its memory budget
 * until its answers drain, or an OPEN of it under way (c->opens). */
static inline bool connection_held_back(const struct connection *c)
{
    return c->charged >= c->daemon->config.connection_budget || c->opens > 0;
}
/* An output buffer for a frame of `length` bytes, to fill and then queue; NULL when out of memory.
 */
struct output *output_new(size_t length);
/* Send a filled output (from any thread; it is the connection's after the
 * call): at once, as far as the socket takes it without blocking, when
 * nothing is queued before it; the rest, or all of it, is queued, charged,
 * and the loop woken.  It goes after every queued output of its class or a
 * higher one (control frames are DEMAND), before lower ones, never before
 * one already begun. */
void enqueue_output(struct connection *c, struct output *o);
/* Send what fd takes of o without blocking: 1 when o went whole, 0 when
 * the socket took no more, -1 (errno) when the connection is broken. */
int output_push(int fd, struct output *o);
/* Queue a copy of a whole frame. */
void enqueue(struct connection *c, const void *bytes, size_t length);
/* A peer's connection with READs in flight (not a HINT or RESOLVE, whose
 * answers their callers wait for as such) and nothing sent on it for
 * PROGRESS_MS (1 s): queue a PROGRESS frame, so that the peer, which gives
 * up on a member that sends nothing for its timeout (5 s), waits on for an
 * answer that a busy origin delays (docs/protocol.md).  Whether one was queued. */
bool connection_progress(struct connection *c, int64_t now_ms);
/* Queue an ERROR frame. */
void send_error(struct connection *c, uint64_t request, int code, const char *message);
/* Queue an ERROR frame, then close the connection once it is sent. */
void refuse(struct connection *c, uint64_t request, int code, const char *message);
/* Free a sent (or abandoned) output and uncharge it; call with c->lock held. */
void output_free(struct connection *c, struct output *o);
/* The first queued output, taken off the queue and uncharged (as if sent);
 * the caller free()s it.  NULL: none queued. */
struct output *connection_take_output(struct connection *c);

/* loop.c */
/* Handle the whole frames in c->in while the connection stays within its
 * budget (over it, c->paused); false: close at once (malformed input). */
bool process_input(struct connection *c);
/* Why c should be dropped at `now`: a line for the log, "" (idle: no line), or NULL: keep it. */
const char *sweep_reason(struct connection *c, int64_t now);
struct ucred;
/* Whether a local client's credentials may use the socket (fd: for its
 * supplementary groups, where the kernel tells; -1: none). */
bool credentials_allowed(const struct larderd_config *config, int fd, const struct ucred *cred);
/* Listen on the Unix socket / a TCP address: the listening fd, or -errno. */
int listen_unix(const char *path);
int listen_tcp(const char *address);
/* Run the loop until d->stopping. */
void run_loop(struct larderd *d, int unix_fd, int tcp_fd);

/* requests.c */
/* Bytes of uncacheable answers held in memory at once, node-wide (a cache
 * that evicts answers every READ so: fill_raw.c); beyond it, READs park
 * until others' answers are sent.  One user (a local uid; the peers
 * together) holds at most UNCACHED_SHARE of it, so that clients that never
 * read their answers hold up their own user's READs, not everyone's. */
#define UNCACHED_BUDGET (256u << 20)
#define UNCACHED_SHARE (UNCACHED_BUDGET / 2)
/* Take length bytes of that budget for c's user without waiting: false,
 * and nothing taken, when they do not fit (a transform's answer: the
 * reader runs it).  One answer alone always fits. */
bool uncached_try_take(const struct connection *c, uint64_t length);
/* A client whose queued answers hold room of the budget and of which none
 * went out whole for UNCACHED_STALL_MS while another user's READ waits for
 * room (the sweep drops it): the per-user share bounds one user, this
 * bounds any number of them working together (requests.c, "Room"). */
#define UNCACHED_STALL_MS 5000
bool uncached_stalled(struct connection *c, int64_t now);
/* c was dropped: its parked READs go to their workers to end unread. */
void uncached_forget(struct connection *c);
/* Now: bytes of the budget held, and READs parked for room. */
void uncached_figures(struct larderd *d, uint64_t *bytes, uint64_t *parked);
/* Give back what c's user took; READs parked for room that now fit go to
 * their workers again.  Takes no connection's lock (called under one). */
void uncached_give(const struct connection *c, uint64_t length);
/* The loop (woken by uncached_give): queue the READs given room on their workers. */
void uncached_resume(struct larderd *d);
/* Stopping: answer every parked READ with an error, and park none after
 * (larderd_free, before the pools end). */
void uncached_close(struct larderd *d);
/* Handle one whole frame from c (of c->daemon): the answers go to c's
 * output queue, at once or from a worker (READ).  false closes the
 * connection at once (malformed input). */
bool handle(struct connection *c, const struct larder__frame *f, const uint8_t *payload);

/* opens.c: OPEN from c (handle()'s case): false closes at once. */
bool open_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload);
/* Whether c may open an index not yet open here: 1 yes; 0 only datasets
 * already open; a negative code with a message: no OPEN at all. */
int may_open(const struct connection *c);
/* open_dataset's `how` for c, given may_open's answer: OPEN_UNCHECKED only
 * for a local client of the daemon's own uid or root. */
unsigned open_how(const struct connection *c, int allowed);
/* Whether every index being opened here (open_dataset: OPEN, PUBLISH, a
 * HINT's) is done, waiting ms at most: at shutdown, so that an index
 * still coming from a slow origin does not hold the daemon up (main.c). */
bool opens_ended_within(struct larderd *d, int ms);

/* publish.c: names (publish and consume), docs/protocol.md "Names" */
/* PUBLISH, RESOLVE and ANNOUNCE from c (handle()'s cases): false closes at once. */
bool publish_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload);
bool resolve_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload);
bool announce_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload);
/* From the loop's sweep: answer the RESOLVEs whose wait is over, drop those of closed clients. */
void publications_sweep(struct larderd *d, int64_t now);
/* From open_dataset, with d->lock held, for a dataset just opened at url:
 * when url is a publication's index here, fix its owner and peer URL. */
void publication_adopt(struct larderd *d, struct dataset_entry *e, const char *url);
/* The dataset published here as `name` (a NUL-terminated valid name),
 * opened with open_dataset's `how`: a name still being fetched, or unknown
 * here and then asked of the members, is waited for up to wait_ms.  0 and
 * *out, or a negative code with a message (LARDER_ENOTFOUND: no such name
 * in time).  It may block: never on the loop thread (publish_jobs.c). */
int publication_open(struct larderd *d, const char *name, unsigned how, int wait_ms,
                     struct dataset_entry **out);
/* Make the registry (this node's publications from before a restart):
 * larderd_start, before any thread may reach it.  0, or -ENOMEM. */
int publications_start(struct larderd *d);
/* End the name jobs (announcing, learning) on the registry's own workers:
 * first thing in larderd_free, while what they use is still there. */
void publications_stop(struct larderd *d);
/* Free the registry and its parked requests (larderd_free). */
void publications_free(struct larderd *d);
/* hints.c: a publication was registered on this node (e: its dataset, open here). */
void hints_on_publish(struct larderd *d, const char *name, struct dataset_entry *e);

/* datasets.c */
/* open_dataset's `how`: */
#define OPEN_NEW 1u /* open the index when it is not open yet */
/* an index marked unchecked (flag 4, no checksums) may be taken: only for a
 * local client of the daemon's own uid (or root), who could read its
 * files itself (docs/security.md) */
#define OPEN_UNCHECKED 2u
/* with OPEN_NEW, on the loop thread: -EAGAIN rather than wait for another
 * OPEN of the same url (or for a free place among MAX_OPENING) */
#define OPEN_NOWAIT 4u
/* a reader's OPEN (not a peer's, not a hint's): connect to the members
 * ahead of its first borrows (connect_ahead.c) */
#define OPEN_AHEAD 8u
/*
 * Find the dataset at `url`, or open it when `how` has OPEN_NEW (through
 * the --allow prefixes, when given); one marked unchecked only when `how`
 * has OPEN_UNCHECKED, else LARDER_EDENIED.  0 and *out and *slot (its
 * index in datasets[]), or a negative code with a message.
 */
int open_dataset(struct larderd *d, const char *url, unsigned how, struct dataset_entry **out,
                 int *slot);
/* open_dataset, and the entry held for a connection whose c->opened is
 * *held (NULL: none): one holder per connection, taken under d->lock so
 * that close_unused_datasets never closes it in between.  With OPEN_NEW it
 * fetches the index, or waits for another's OPEN of it (not with
 * OPEN_NOWAIT): never on the loop thread (OPEN and PUBLISH open new
 * indexes on the open pool). */
int open_dataset_held(struct larderd *d, const char *url, unsigned how, struct dataset_entry **out,
                      int *slot, uint64_t *held);
/* The registry's parts for opens.c (each with d->lock held): the entry at
 * url, or with that id other than `except`, and its slot (NULL: none);
 * whether an entry being closed has this url or (url NULL) this id; a free
 * slot (-1: MAX_DATASETS open); an entry's dataset, endpoints and url freed
 * (the entry zeroed). */
struct dataset_entry *datasets_find_url(struct larderd *d, const char *url, int *slot);
struct dataset_entry *datasets_find_id(struct larderd *d, uint64_t low, uint64_t high,
                                       const struct dataset_entry *except, int *slot);
bool datasets_closing(const struct larderd *d, const char *url, uint64_t low, uint64_t high);
int datasets_free_slot(const struct larderd *d);
void dataset_entry_free(struct larderd *d, struct dataset_entry *e);
/* The source wrapper of entry `context`'s shards (source.h's wrapper):
 * each chunk from its owner node, this node's from the origin. */
int dataset_striped_source(void *context, uint32_t shard, struct larder__source *origin,
                           struct larder__source **out);
/* The open dataset with that id and its slot, or NULL. */
struct dataset_entry *find_dataset(struct larderd *d, uint64_t low, uint64_t high, int *slot);
/* Close every dataset and its peer endpoints. */
void close_datasets(struct larderd *d);
/* A connection with these datasets opened (c->opened) is freed: each one's holders, one less. */
void datasets_release_opened(struct larderd *d, uint64_t opened);
/* On the loop thread: close every open entry that no connection holds and
 * that closable() (called with d->lock held) says may go: found no more at
 * once, its cached blocks evicted on a pool worker (WARM), then freed by
 * the next call, its slot free again (counted in d->datasets_closed then).
 * How many began closing. */
size_t close_unused_datasets(struct larderd *d,
                             bool (*closable)(struct larderd *d, const struct dataset_entry *e));
/* Where the reads of the calling thread's shard sources came from since
 * the last call (bits: SOURCE_READ_ORIGIN, SOURCE_READ_PEER; 0: none, the
 * fill was served from the cache), and start over.  The read engine reads
 * a fill's sources on the thread that asked for it: this is how a READ's
 * worker tells a hit from a miss, and a borrowed miss. */
enum { SOURCE_READ_ORIGIN = 1, SOURCE_READ_PEER = 2 };
unsigned take_source_reads(void);
/* Whether this node owns chunk `chunk` (LARDER__OWNER_CHUNK bytes) of shard
 * `shard` of e (always, without peers): what warm staging stages. */
bool owns_chunk(const struct dataset_entry *e, uint32_t shard, uint64_t chunk);
/* The calling thread serves a peer's READ from now on (on) or no longer:
 * while it does, its fills read the origin only, so a READ never travels
 * on from daemon to daemon (docs/protocol.md, "Ownership"). */
void serving_peer(bool on);
/*
 * Before a local reader's READ of [offset, offset + length) of `shard` is
 * filled: what the fill will read of chunks other members own, borrowed
 * from those owners at once, at class `priority`, with no fill lock held
 * (the fill then takes it from the loan, and reads the rest from the origin).  Returns the loan,
 * and in *stripe whose it is, for borrow_return after the fill; NULL when
 * nothing was borrowed (no peers, resident already, owners down).
 */
struct larder__stripe_loan *borrow_ahead(struct dataset_entry *e, uint32_t shard, uint64_t offset,
                                         uint64_t length, int priority,
                                         struct larder__source **stripe);
/* The same, asking member `relay` first for what it holds in its cache
 * (storm: hint staging on every node, hints_pins.c), then the owners;
 * relay SIZE_MAX: the owners only.  *from_relay: the relay lent it. */
struct larder__stripe_loan *borrow_ahead_via(struct dataset_entry *e, uint32_t shard,
                                             uint64_t offset, uint64_t length, int priority,
                                             size_t relay, struct larder__source **stripe,
                                             bool *from_relay);
/* Bytes of the dataset's node cache pinned by hints now (0: none, or no cache). */
uint64_t dataset_pinned_bytes(larder_dataset *dataset);
/* The member that owns chunk `chunk` of shard (this node's index alone). */
size_t owner_of_chunk(const struct dataset_entry *e, uint32_t shard, uint64_t chunk);
/* Borrow exactly [offset, offset + length) of the shard (a fill's span:
 * larder__fill_range_scope) from the other owners, each piece received at
 * its place in base (base[0]: the byte at offset), as larder__fill_offer_span
 * takes it; NULL as borrow_ahead.  base outlives the loan. */
struct larder__stripe_loan *borrow_range_into(struct dataset_entry *e, uint32_t shard,
                                              uint64_t offset, uint64_t length, int priority,
                                              void *base, struct larder__source **stripe);
/* Give back what borrow_ahead lent (NULL: nothing). */
void borrow_return(struct larder__source *stripe, struct larder__stripe_loan *loan);

/* borrow.c */
/* Before a local reader's READ of [offset, offset + length) of shard: each
 * chunk of another member's that it needs part of, that the cache lacks
 * and that a READ asked for lately too, borrowed whole in one transfer
 * and staged (checked and kept) once, by the first READ to claim it; the
 * others wait for it.  Nothing when the cache evicts (a capacity): then
 * each READ borrows its own bytes.  true when it staged some and all of
 * the READ's bytes are resident now (nothing left to borrow_ahead).  c:
 * the READ's connection: its process's READs say whether its reader
 * streams (borrow_stream.c). */
bool borrow_whole_chunks(struct dataset_entry *e, struct connection *c, uint32_t shard,
                         uint64_t offset, uint64_t length, int priority);
/* After a local reader's DEMAND or NEAR READ of [offset, offset + length)
 * was answered, from a chunk it reads in turn: the pieces after its end
 * that the cache lacks, a few, staged now in order on the calling worker
 * (borrow.c, "Pieces"), so that the reader's next READs find them
 * resident or in flight.  Call with the READ's connection still held. */
void borrow_next_piece(struct dataset_entry *e, struct connection *c, uint32_t shard,
                       uint64_t offset, uint64_t length, int priority);
/* In a cluster whose cache evicts nothing, the buffers of the chunks
 * borrowed whole at once (borrow.c) made and their pages backed now, at
 * the daemon's start, rather than faulted in by its first borrows. */
void borrow_reserve_buffers(const struct larderd *d);

/* The ERROR message (LARDER_EUSAGE) to a peer's READ with STAGE, over TCP
 * or UCX: another node's cache is not this one's. */
#define STAGE_REFUSED "STAGE is a flag of a local reader's READ"

/* requests.c: queue a READ of c's on the workers (via: it came over UCX
 * and is answered there; NULL: on c) */
struct larder__ucx_session;
void read_submit(struct connection *c, const struct larder__read *read, uint64_t request,
                 struct larder__ucx_session *via);

/* requests.c: answer a READ that came over UCX on the calling thread (UCX's
 * progress thread, which may not wait) when its bytes are all in the cache:
 * the send is posted and the READ counted once the borrower took them.
 * false: not answered (refused, or not resident): read_submit it. */
bool read_answer_resident(struct connection *c, const struct larder__read *read, uint64_t request,
                          struct larder__ucx_session *via);
/* ucx.c: peers' data over UCX (docs/protocol.md, "Transports") */
/* Start the hub per --transport, and say which transport peers use: 0, or
 * -1 once the failure is said (--transport ucx without a usable UCX). */
int ucx_daemon_start(struct larderd *d);
/* Stop it (after the pools: no READ answers any more). */
/* Before larderd_free: READs over UCX refused from now on, and the answers
 * the progress thread sent from the cache taken or cancelled, so that no
 * READ job ends after the datasets closed (sets ucx_answers_left when UCX
 * kept some even so). */
void ucx_daemon_quiesce(struct larderd *d);
void ucx_daemon_stop(struct larderd *d);
/* UCX_OFFER from c (handle()'s case): false closes the connection at once. */
bool ucx_offer(struct connection *c, const struct larder__frame *f, const uint8_t *payload);
/* c is being dropped: its session's token names nothing from now on. */
void ucx_forget(struct connection *c);
/* Whether c's UCX path carried a READ within the last `idle_ms`. */
bool ucx_recently_used(struct connection *c, int64_t now, int idle_ms);
/* ", \"transport\": ..., \"peers\": [...]" for STATS: how each member is read. */
size_t ucx_stats_json(struct larderd *d, char *out, size_t capacity);
/* Each member's transport as Prometheus lines (metrics.c). */
size_t ucx_metrics_text(struct larderd *d, char *out, size_t capacity);
/* The transport of the endpoints of new datasets' members (datasets.c). */
void ucx_adopt_endpoint(struct larderd *d, struct larder__endpoint *endpoint);

/* warm.c */
#define WARM_CHUNK (4u << 20) /* bytes staged by one background job: an owner chunk */
/* Queue the background staging of every chunk of e this node owns; the number of jobs queued. */
size_t warm_owned(struct larderd *d, struct dataset_entry *e);
/* Seconds a warm job of `length` bytes starting at `now` (seconds) waits
 * to keep to --warm-rate (a token bucket of one chunk); 0 when unpaced. */
double warm_pace(struct larderd *d, double now, uint64_t length);

/* hints.c, hints_pins.c (docs/protocol.md "Hints") */
/* A HINT frame from c: checked, then run on a thread of its own (staging at
 * the pool's background class, forwarding to members) and answered with
 * HINTED or ERROR.  false: malformed, close the connection. */
bool hints_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload);
/* The --replicate-prefix policy: a publication `name` of dataset e is staged
 * and pinned on the members of every rule whose prefix it starts with.
 * Called by the publish code as a name is registered; returns at once. */
void hints_on_publish(struct larderd *d, const char *name, struct dataset_entry *e);
/* What is pinned, as the JSON text of a HINT list (malloc'd; NULL when out of memory). */
char *hints_list_json(struct larderd *d);
/* Stop taking hints and wait (10 s at most) for the hint threads to end:
 * before the pool stops.  Then, after it, hints_free stops the expiry
 * thread and forgets the hints (their pins stay in the cache until the
 * latest one's time). */
void hints_stop(struct larderd *d);
/* Wait (timeout_ms at most) while this node stages bytes of e's shard that
 * overlap [offset, offset + length) for a hint; whether it waited.  For a
 * relay's READ (requests.c): the bytes it asks for are on their way. */
bool hints_staging_wait(struct larderd *d, const struct dataset_entry *e, uint32_t shard,
                        uint64_t offset, uint64_t length, int timeout_ms);
void hints_free(struct larderd *d);
/* Whether connection c may open an index not open here (requests.c): 1
 * yes, 0 only those open already, or a negative code with a message. */
int may_open(const struct connection *c);
/* open_dataset's `how` for c, given may_open's answer: OPEN_UNCHECKED only
 * for a local client of the daemon's own uid or root. */
unsigned open_how(const struct connection *c, int allowed);

/* connect_ahead.c: peer connections made before the first READ needs them */
/* Its queue and workers (larderd_start; none without members): 0 or -ENOMEM. */
int connect_ahead_start(struct larderd *d);
/* Drop the queued jobs and join the workers (each running job ends by its
 * deadline, 5 s): first thing in larderd_free.  NULL-safe, idempotent. */
void connect_ahead_stop(struct larderd *d);
/* Jobs running now (opens_ended_within waits for them too). */
int connect_ahead_running(const struct larderd *d);
/* Once this daemon has fetched a new index at url for a local reader and
 * found it allowed and not unchecked (no lock held): the OPEN sent to each
 * member, not waited for, so they open it meanwhile (not for a
 * publication).  Returns at once. */
void connect_ahead_url(struct larderd *d, const char *url);
/* A local reader's OPEN has e (in `slot`; d->lock held), on any path: the
 * first time, LARDERD_CONNECT_AHEAD (default 2) connections of the DEMAND
 * and NEAR group into each member endpoint's pool (a publication's: its
 * producer's only), e held while each job runs.  Returns at once. */
void connect_ahead_entry(struct larderd *d, struct dataset_entry *e, int slot);
/* publish_registry.c: whether url is a publication's index here (this
 * node's copy of a name's index), current or replaced. */
bool publication_local(struct larderd *d, const char *url);

/* transform.c (docs/transforms.md) */
/* A TRANSFORM frame from c: answered from the result cache, run on the
 * transform pool, or answered raw for the reader to run.  false: malformed. */
bool transform_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload);
/* The transforms' placement, inputs and counters as a JSON object (STATS), and as metrics. */
size_t transforms_json(struct larderd *d, char *out, size_t capacity);
size_t transforms_metrics(struct larderd *d, char *out, size_t capacity);
/* Set up the transforms and the sampler of their placement (main.c): 0 or -errno.
 * Without it (unit tests), they are set up on the first request, unsampled. */
int transforms_start(struct larderd *d);
/* The pool transforms run on (made on first use; NULL when out of memory). */
struct larder__pool *transforms_pool(struct larderd *d);
/* Finish the transforms in flight and free them (after the READ pool stopped). */
void transforms_free(struct larderd *d);

/* metrics.c */
/* The Prometheus text of every open dataset's counters (metrics.h formats it). */
size_t metrics_text(struct larderd *d, char *out, size_t capacity);
/* Serve that text over HTTP on `listener`, to any request, one a connection,
 * on a thread of its own (which owns the listener once started): 0 or -errno.
 * No client of it can hold up the loop: each has a deadline, and a few at
 * once are served (more are closed at once). */
int metrics_start(struct larderd *d, int listener);
/* Close its clients and the listener and join its thread, before the
 * datasets go (larderd_free does too).  Nothing when not started. */
void metrics_stop(struct larderd *d);

#endif
