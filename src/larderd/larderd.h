/*
 * larderd.h - what the daemon's parts share: its configuration and state,
 * connections and their output queues, and the open datasets.
 *
 *   main.c      options and start-up
 *   state.c     the globals: daemon_state, say(), now_ms()
 *   loop.c      the epoll loop: listeners, who may connect, connections,
 *               bounds (connections, memory per connection, idle time)
 *   requests.c  one whole frame at a time: the handshake, OPEN and who may
 *               open what, READ (staged by the worker pool), STAT
 *   datasets.c  the dataset registry, borrowing from owners, warm staging,
 *               the metrics endpoint
 *
 * Threads: the loop thread owns the connection list, each connection's
 * input and its epoll registration; workers only queue output (under the
 * connection's lock) and wake the loop.
 */
#ifndef LARDERD_H
#define LARDERD_H

#include "larder.h"

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

#define IN_CAPACITY (LARDER_WIRE_HEADER + LARDER_WIRE_MAX_URL + 64)
#define MAX_DATASETS 64 /* a connection's opened datasets are a 64-bit mask */
#define MAX_ALLOWED_IDS 64
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
    uint8_t bytes[];
};

struct connection {
    int fd;
    bool tcp;      /* a peer's TCP connection, else a local reader's Unix socket */
    bool greeted;  /* HELLO came */
    bool peer;     /* HELLO said peer (TCP only) */
    bool proven;   /* the peer proved the cluster secret (PROVE) */
    bool own_user; /* a local client of the daemon's own uid, or root */
    bool closing;  /* refused or done: send what is queued, then close */
    bool paused;   /* over its memory budget: not read until it drains */
    bool dropped;  /* closed; freed after the current batch of events */
    uid_t uid;     /* a local client's, from SO_PEERCRED */
    uint8_t client_nonce[LARDER_WIRE_NONCE], server_nonce[LARDER_WIRE_NONCE];
    uint64_t opened; /* bit i: datasets[i] was opened on this connection */
    uint8_t in[IN_CAPACITY];
    size_t in_used;
    int64_t last_active_ms;   /* last whole frame, or last answer fully sent */
    int64_t partial_since_ms; /* a frame begun, not yet whole; 0: none */
    int64_t blocked_since_ms; /* output waiting on a socket that takes none; 0: none */
    int64_t closing_since_ms;
    struct connection *prev, *next; /* the loop's list */
    pthread_mutex_t lock;           /* guards the output queue, charged, jobs and refs */
    struct output *head, *tail;
    size_t charged; /* READ lengths in flight plus queued output, in bytes */
    int jobs;       /* READs in flight */
    int refs;       /* the loop's, plus one per job in flight */
};

struct dataset_entry {
    larder_dataset *dataset;
    char *url;
    uint64_t id_low, id_high;
    struct larder__endpoint **members; /* one per member; NULL for this node */
};

struct daemon_state {
    const char *cache_dir, *socket_path, *listen_address, *self_name, *secret, *metrics_address;
    int jobs;
    uint64_t borrow_capacity; /* bytes of a dataset's cache for borrowed blocks */
    uint64_t cache_capacity;  /* --cache-size: the node cache's bytes, 0: no limit */
    bool warm;                /* stage owned shards in the background */
    double warm_rate;         /* MB/s for that, 0: unpaced */
    bool insecure_peers;      /* without a secret, take peers from any address */
    const char **allow;       /* --allow prefixes, NULL-terminated; NULL: none given */
    int num_allow;
    uid_t allow_uids[MAX_ALLOWED_IDS]; /* --allow-uid, besides our own uid and root */
    int num_allow_uids;
    gid_t allow_gids[MAX_ALLOWED_IDS]; /* --allow-gid, besides our own gid */
    int num_allow_gids;
    uid_t uid;
    gid_t gid;
    int max_connections;        /* --max-connections */
    int idle_timeout_ms;        /* --idle-timeout */
    uint64_t connection_budget; /* --connection-memory: bytes per connection */
    struct larder__members members;
    size_t self; /* index in members, or SIZE_MAX */
    int epoll, wake;
    struct larder__pool *pool;
    pthread_mutex_t lock; /* datasets[] */
    struct dataset_entry datasets[MAX_DATASETS];
    int num_datasets;
    struct connection *connections; /* the loop's list */
    int num_connections;
    pthread_mutex_t uncached_lock; /* uncached_bytes */
    pthread_cond_t uncached_freed;
    uint64_t uncached_bytes; /* malloc'ed for answers that could not be cached */
    volatile sig_atomic_t stopping;
    bool quiet; /* say() prints nothing: a harness that drives the parts */
};

extern struct daemon_state daemon_state;

/* state.c */
/* Print one line to stderr, prefixed "larderd: " (nothing when quiet). */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Milliseconds on the monotonic clock. */
int64_t now_ms(void);

/* loop.c */
/* An output buffer for a frame of `length` bytes, to fill and then queue; NULL when out of memory.
 */
struct output *output_new(size_t length);
/* Queue a filled output (from any thread; the queue owns it), charge it and wake the loop. */
void enqueue_output(struct connection *c, struct output *o);
/* Queue a copy of a whole frame. */
void enqueue(struct connection *c, const void *bytes, size_t length);
/* Queue an ERROR frame. */
void send_error(struct connection *c, uint64_t request, int code, const char *message);
/* Queue an ERROR frame, then close the connection once it is sent. */
void refuse(struct connection *c, uint64_t request, int code, const char *message);
/* Drop one reference (the loop's or a job's); the last frees the connection. */
void connection_release(struct connection *c);
/* Listen on the Unix socket / a TCP address: the listening fd, or -errno. */
int listen_unix(const char *path);
int listen_tcp(const char *address);
/* Run the loop until a signal stops it. */
void run_loop(int unix_fd, int tcp_fd, int metrics_fd);

/* requests.c */
/* Bytes of uncacheable answers held in memory at once, node-wide: beyond
 * it, workers wait for others' answers to be sent. */
#define UNCACHED_BUDGET (256u << 20)
/* Take length bytes of that budget, waiting while others hold it (one
 * answer alone always fits); give them back. */
void uncached_take(uint64_t length);
void uncached_give(uint64_t length);
/* Handle one whole frame; false closes the connection at once (malformed input). */
bool handle(struct connection *c, const struct larder__frame *f, const uint8_t *payload);

/* datasets.c */
/*
 * Find the dataset at `url`, or open it when `may_open` (through the
 * --allow prefixes, when given).  0 and *out and *slot (its index in
 * datasets[]), or a negative code with a message.
 */
int open_dataset(const char *url, bool may_open, struct dataset_entry **out, int *slot);
/* The open dataset with that id and its slot, or NULL. */
struct dataset_entry *find_dataset(uint64_t low, uint64_t high, int *slot);
/* Answer one HTTP request on the metrics port, whatever it asks, and close. */
void serve_metrics(int listener);
/* Close every dataset and its peer endpoints. */
void close_datasets(void);

#endif
