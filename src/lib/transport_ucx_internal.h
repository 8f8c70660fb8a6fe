/*
 * transport_ucx_internal.h - what transport_ucx.c (the hub) and
 * transport_ucx_session.c (sessions and links) share.  The active
 * messages' layouts (little-endian, docs/protocol.md "Transports"):
 *
 *   READ   (id 1): header = session token (32) | request id (8) | the READ
 *                  frame's 40-byte payload; no data
 *   ANSWER (id 2): header = request id (8) | code (4, signed: 0 or a
 *                  negative larder code) | 4 zero bytes; data = the bytes
 *                  asked for (code 0), or the error's message
 */
#ifndef LARDER_TRANSPORT_UCX_INTERNAL_H
#define LARDER_TRANSPORT_UCX_INTERNAL_H

#include "transport_ucx.h"

#ifdef LARDER_HAVE_UCX
#include <pthread.h>
#include <ucp/api/ucp.h>

enum { AM_READ = 1, AM_ANSWER = 2 };
#define READ_PAYLOAD 40
#define READ_HEADER (LARDER__UCX_TOKEN + 8 + READ_PAYLOAD)
#define ANSWER_HEADER 16

enum { PENDING_WAITING, PENDING_RECEIVING, PENDING_DONE };

/* A borrower's READ waiting for its ANSWER (on the waiting thread's stack). */
struct larder__ucx_pending {
    struct larder__ucx *hub;
    struct larder__ucx_link *link;
    uint64_t id;
    void *buf;
    uint64_t length;
    int state;           /* PENDING_*, under hub->lock */
    pthread_cond_t wake; /* signalled (under hub->lock) when state turns PENDING_DONE */
    int rc;
    bool answered;     /* rc is the daemon's own answer, not the link's failure */
    char message[256]; /* the daemon's error message */
    struct larder__ucx_pending *next;
    void *descriptor;                        /* a rendezvous answer's, until received */
    int64_t arrived_us;                      /* when it arrived (stats.receive_wait_us) */
    struct larder__ucx_pending *queued_next; /* in hub->to_receive */
};

/* The one endpoint of this worker to another worker, shared by every link
 * to it and every session answering it: UCX pairs the endpoints two
 * workers make to each other (over its tcp transport, a second pair for
 * another purpose was taken for the first and timed out), so there is
 * one per remote worker, kept until the hub stops or it fails.  A failed
 * one is closed and freed on the progress thread once no link or session
 * holds it (larder__ucx_conns_reap); so are idle ones (live, unheld)
 * when the list is full. */
struct larder__ucx_answer;
struct larder__ucx_outgoing;

struct larder__ucx_conn {
    struct larder__ucx *hub;
    ucp_ep_h ep;
    bool broken; /* its error handler ran (atomic) */
    int refs;    /* links and sessions on it (atomic; taken under hub->conns_lock) */
    size_t length;
    uint8_t *address; /* the remote worker's */
    struct larder__ucx_conn *next;
};

struct larder__ucx {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_length;
    char transports[128];
    pthread_t thread;
    bool running, stopping;
    bool no_peer_errors; /* UCX refused an endpoint that reports peer failures (atomic) */
    struct larder__ucx_mappings
        *mappings;                      /* cache files mapped for answers (transport_ucx_map.c) */
    struct {                            /* counters (atomic), for LARDER_UCX_STATS */
        uint64_t passes;                /* the progress thread's passes over the worker */
        uint64_t sleeps;                /* ... after which it slept on the event fd */
        uint64_t answers, answer_bytes; /* ANSWERs sent with bytes, and those bytes */
        uint64_t maps;                  /* mmap calls for them (a file's mapping is kept) */
        uint64_t eager, rendezvous;     /* ANSWERs received by each protocol */
        uint64_t unwaited;     /* ANSWERs posted with no thread waiting (transport_ucx_answer.c) */
        uint64_t reads_queued; /* READs that found the worker held: posted by the progress thread */
        uint64_t
            receive_wait_us; /* from a rendezvous ANSWER's arrival to its pull's start, summed */
    } stats;
    int epoll, wake;
    /* Every call on the worker, from any thread, is made with worker_lock
     * held (recursive: callbacks run under it and may send).  The worker
     * is UCS_THREAD_MODE_SERIALIZED: UCX's own multi-thread mode guards it
     * with spin locks, which on a node with fewer cores than threads spun
     * away the time of the thread that held them. */
    pthread_mutex_t worker_lock;
    pthread_mutex_t lock; /* pending, sessions, busy, next_id; each waiter has its own condition */
    struct larder__ucx_pending *pending;
    struct larder__ucx_pending *to_receive; /* rendezvous answers to pull (progress thread) */
    struct larder__ucx_session *sessions;
    pthread_mutex_t conns_lock;     /* conns */
    struct larder__ucx_conn *conns; /* live, and broken ones still held */
    size_t num_conns;
    bool reap_conns;  /* a conn broke or was let go: reap on the progress thread (atomic) */
    bool reap_idle;   /* the list is full: reap the unheld live ones too (atomic) */
    size_t max_conns; /* 0: MAX_CONNS (larder__ucx_set_max_conns, for tests) */
    uint64_t next_id;
    int busy;         /* sends and receives in flight (the progress thread polls a while) */
    int64_t poll_us;  /* polling after the last event before sleeping (LARDER_UCX_POLL_US) */
    uint64_t dropped; /* READs with no session or malformed (progress thread only) */
    larder__ucx_read_fn *serve;
    bool refusing;      /* larder__ucx_quiesce: READs answered -ESHUTDOWN (under worker_lock) */
    int64_t refused_ms; /* when the last was (atomic) */
    struct larder__ucx_outgoing *outbox; /* READs for the progress thread to post (under lock) */
    struct larder__ucx_answer *answers;  /* sent without a waiter (transport_ucx_answer.c) */
    size_t num_answers;
    int64_t next_sweep_ms; /* when the progress thread looks at them next (its own) */
    /* transport_ucx_lanes.c: a borrower's further hubs, made at first use */
    int num_lanes;              /* this hub and its lanes (LARDER_UCX_LANES) */
    struct larder__ucx *parent; /* the hub this is a lane of (NULL: none): its counters go there */
    bool lanes_failed;          /* a lane did not start: none is tried again (under lanes_lock) */
    pthread_mutex_t lanes_lock;
    struct larder__ucx *lanes[LARDER__UCX_MAX_LANES - 1]; /* under lanes_lock */
};

struct larder__ucx_session {
    struct larder__ucx *hub;
    void *owner;
    struct larder__ucx_conn *conn; /* to the borrower's worker (from its UCX_OFFER) */
    uint8_t token[LARDER__UCX_TOKEN];
    int refs;  /* under hub->lock */
    bool live; /* in hub->sessions: its token is honoured */
    struct larder__ucx_session *next;
};

struct larder__ucx_link {
    struct larder__ucx *hub;
    struct larder__ucx_conn *conn;
    uint8_t token[LARDER__UCX_TOKEN];
    int64_t answered_ms; /* when an ANSWER last came on it (atomic) */
    int control_fd;      /* larder__ucx_link_watch's; -1: none */
};

int64_t larder__ucx_now_ms(void);
int64_t larder__ucx_now_us(void);
/* Wait on `cond` (with hub->lock held) until signalled or at most ms milliseconds. */
void larder__ucx_wait(struct larder__ucx *hub, pthread_cond_t *cond, int64_t ms);
/* Wake the progress thread. */
void larder__ucx_kick(struct larder__ucx *hub);
/* A condition on CLOCK_MONOTONIC (larder__ucx_wait's clock). */
void larder__ucx_cond_init(pthread_cond_t *cond);
/* Send an active message and wait until UCX is done with header and bytes:
 * 0 or -ECONNRESET.  memh: the bytes' registration (NULL: UCX's own).
 * Cancelled after SEND_TIMEOUT_MS, or once *live (read under hub->lock;
 * NULL: none) turns false. */
int larder__ucx_send(struct larder__ucx *hub, ucp_ep_h ep, unsigned id, const void *header,
                     size_t header_length, const void *bytes, size_t length, void *memh,
                     const bool *live);
/* Post the READs borrowers queued while the worker was busy (progress
 * thread, worker_lock held): whether there were any. */
bool larder__ucx_outbox_post(struct larder__ucx *hub);
/* Forget the READs still queued (larder__ucx_stop, the thread ended). */
void larder__ucx_outbox_drop(struct larder__ucx *hub);
/* transport_ucx_session.c: the endpoint to the worker at `address`, shared
 * (a reference taken; made if there is none): NULL with a message. */
struct larder__ucx_conn *larder__ucx_conn_get(struct larder__ucx *hub, const void *address,
                                              size_t length);
/* Let go of a reference (any thread; a broken conn goes once none holds it). */
void larder__ucx_conn_put(struct larder__ucx_conn *c);
/* Whether its error handler ran. */
bool larder__ucx_conn_broken(const struct larder__ucx_conn *c);
/* Close every endpoint (larder__ucx_stop). */
void larder__ucx_conns_close(struct larder__ucx *hub);
/* Close and free the broken endpoints no link or session holds any more
 * (on the progress thread, where their error handlers run). */
void larder__ucx_conns_reap(struct larder__ucx *hub);
/* ---- transport_ucx_answer.c: answers no thread waits on ---- */
/* Cancel the answers whose session was forgotten or whose borrower has not
 * taken them in time (the progress thread, every pass: it looks every
 * 100 ms). */
void larder__ucx_answers_sweep(struct larder__ucx *hub);
/* Cancel every answer still in flight and progress until their
 * completions ran (the hub's stop, after the progress thread ended; 2 s
 * at most): how many are left. */
size_t larder__ucx_answers_end(struct larder__ucx *hub);
/* ---- transport_ucx_map.c: the cache files answers are sent from ---- */
struct larder__ucx_mapping;
int larder__ucx_mappings_new(struct larder__ucx *hub);
/* Unmap every file (no answer may be in flight). */
void larder__ucx_mappings_free(struct larder__ucx *hub);
/*
 * Bytes [offset, offset + length) of file fd, from its mapping (made at
 * the first answer from the file, kept for the next): *bytes, and *memh
 * its registration (NULL: none).  They stay valid until
 * larder__ucx_mapping_put(*out).  0; -EIO when the file is shorter (cut
 * underneath); or -errno.
 */
int larder__ucx_mapping_get(struct larder__ucx *hub, int fd, uint64_t offset, size_t length,
                            struct larder__ucx_mapping **out, const void **bytes, void **memh);
void larder__ucx_mapping_put(struct larder__ucx *hub, struct larder__ucx_mapping *mapping);
/* Set while this thread makes an endpoint UCX may refuse: its log line about it is dropped. */
extern _Thread_local bool larder__ucx_quiet_refusal;
/* ---- transport_ucx_lanes.c ---- */
/* LARDER_UCX_LANES, for a hub being started. */
int larder__ucx_lanes_config(void);
/* Stop and free the hub's lanes (larder__ucx_stop, before its own thread). */
void larder__ucx_lanes_stop(struct larder__ucx *hub);
/* A lane's counters into its hub's (larder__ucx_stop of the lane, its thread ended). */
void larder__ucx_lanes_add_stats(struct larder__ucx *hub, const struct larder__ucx *lane);
/* ---- transport_ucx_log.c ---- */
/* Route UCX's warnings and errors to larder__log (once per process). */
void larder__ucx_log_install(void);
/* With LARDER_UCX_STATS set, log the hub's counters. */
void larder__ucx_log_stats(struct larder__ucx *hub);

/* The live session with that token, with a reference taken; NULL: none. */
struct larder__ucx_session *larder__ucx_session_find(struct larder__ucx *hub,
                                                     const uint8_t token[LARDER__UCX_TOKEN]);
#endif

#endif
