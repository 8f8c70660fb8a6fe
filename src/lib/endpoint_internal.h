/*
 * endpoint_internal.h - what endpoint.c (the pools, the requests) and
 * endpoint_wire.c (one connection: dialling, the handshake, frames in and
 * out) share: the endpoint itself and the connection-level helpers.  Not
 * for other modules: they use endpoint.h.
 */
#ifndef LARDER_ENDPOINT_INTERNAL_H
#define LARDER_ENDPOINT_INTERNAL_H

#include "endpoint.h"

#include <pthread.h>
#include <stdint.h>

#define POOL 64              /* idle connections kept per group of classes */
#define PEER_DOWN_MS 10000   /* a peer that failed is left alone this long */
#define READER_DOWN_MS 2000  /* a node daemon that failed: short, it may be restarting */
#define DENIED_DOWN_MS 60000 /* a daemon that refused us will refuse again */
#define READER_TIMEOUT_MS 1000
#define OPEN_TIMEOUT_MS 10000 /* opening an index may read it from a remote origin */
/* How long a HINTED or WARM READ waits for its answer to start (the daemon
 * queues it behind its higher-class READs: busy, not dead), and a DEMAND or
 * NEAR READ at most while the member or node daemon shows life (await_answer). */
#define QUEUED_TIMEOUT_MS 60000

/* Whether a negative code is -errno (larder's own range starts at -1000),
 * whose message is then worth adding the daemon's address to. */
static inline bool larder__endpoint_is_errno(int rc)
{
    return rc < 0 && rc > -1000;
}

struct larder__endpoint {
    char *address, *token, *index_url;
    enum larder__role role;
    int timeout_ms, down_ms;
    pthread_mutex_t lock;
    /* Idle connections by group of classes: [0] DEMAND and NEAR, [1]
     * HINTED and WARM.  A connection carries one request at a time, and
     * the groups never share one, so a reader's READ is never sent on a
     * socket a bulk transfer was last using (whose tail the daemon may
     * still be pushing through the kernel's buffers). */
    int idle[2][POOL];
    int num_idle[2];
    int64_t down_until_ms;
    int64_t answered_ms; /* when any connection last got an answer's header (atomic) */
    int64_t greeted_ms;  /* when a reader's probe was last greeted (atomic; daemon_alive) */
    bool probing;        /* a reader's thread is probing the daemon (atomic) */
    bool no_stage;       /* the node daemon closed on a STAGE READ: it predates the flag (atomic) */
    struct larder__ucx_peer *ucx; /* READ answers over UCX (transport_ucx_peer.c); NULL: TCP */
};

/* The monotonic clock in milliseconds. */
LARDER__HIDDEN int64_t larder__endpoint_now_ms(void);
/* Send all of buf: 0, or -errno (EPIPE when the other end is gone; ETIMEDOUT
 * past the socket's send timeout). */
LARDER__HIDDEN int larder__endpoint_send_all(int fd, const void *buf, size_t length);
/* Receive exactly length bytes (the socket has a receive timeout): 0 or -errno. */
LARDER__HIDDEN int larder__endpoint_recv_all(int fd, void *buf, size_t length);
/* The same, all of it by deadline_ms (the monotonic clock; 0: none), however
 * slowly it trickles in (-ETIMEDOUT past it). */
LARDER__HIDDEN int larder__endpoint_recv_until(int fd, void *buf, size_t length,
                                               int64_t deadline_ms);
/* Wait up to timeout_ms for an answer to start, then receive its header:
 * 0; -ETIMEDOUT when nothing came in time; another -errno with *answered
 * false when the connection ended before any byte of it, true inside it. */
LARDER__HIDDEN int larder__endpoint_recv_header(int fd, uint8_t header[LARDER__WIRE_HEADER],
                                                int timeout_ms, bool *answered);
/* One frame: header into *frame, payload (up to capacity) into payload.  0 or a negative code. */
LARDER__HIDDEN int larder__endpoint_recv_frame(int fd, struct larder__frame *frame, void *payload,
                                               size_t capacity, int timeout_ms);
/* The same, the whole frame by deadline_ms as well (0: none). */
LARDER__HIDDEN int larder__endpoint_recv_frame_until(int fd, struct larder__frame *frame,
                                                     void *payload, size_t capacity, int timeout_ms,
                                                     int64_t deadline_ms);
/* The daemon's ERROR frame (its payload in hand) as our failure: its code and message. */
LARDER__HIDDEN int larder__endpoint_error_answer(const struct larder__endpoint *e,
                                                 const uint8_t *payload, uint32_t length);
/* A connected socket to the endpoint (blocking, with send and receive
 * timeouts), or -errno; deadline_ms (0: none) bounds the connect too. */
LARDER__HIDDEN int larder__endpoint_dial(const struct larder__endpoint *e, int64_t deadline_ms);
/* The CPU time (clock ticks) of the process at the other end of Unix
 * socket fd (SO_PEERCRED, /proc/PID/stat); -1 when it is stopped, traced,
 * a zombie or gone, or when /proc does not say (another PID namespace,
 * hidepid, a TCP socket). */
LARDER__HIDDEN int64_t larder__endpoint_peer_ticks(int fd);
/* Whether a process whose CPU time went from `before` to `after` ticks
 * (peer_ticks; -1: unknown) ran over waited_ms: it used a tenth of that
 * time or more.  A node daemon in a storm runs; a stopped or deadlocked one
 * does not. */
LARDER__HIDDEN bool larder__endpoint_ran(int64_t before, int64_t after, int64_t waited_ms);
/* HELLO, WELCOME and, where the daemon asks for it, the proof of the
 * cluster secret on fd, all by deadline_ms (0: none; each answer still
 * within wait_ms, 0: the endpoint's timeout).  0, or a negative code with
 * a message.  A reader's connect (wait_ms 0) waits on for a WELCOME past
 * its timeout while the node daemon runs (peer_ticks), up to
 * QUEUED_TIMEOUT_MS: a busy daemon's loop thread may take seconds to be
 * scheduled on cores a storm keeps busy. */
LARDER__HIDDEN int larder__endpoint_greet(struct larder__endpoint *e, int fd, int64_t deadline_ms,
                                          int wait_ms);

#endif
