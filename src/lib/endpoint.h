/*
 * endpoint.h - blocking clients of a larder daemon (docs/protocol.md): a
 * reader talking to its node's daemon over a Unix socket, or a daemon
 * talking to a peer over TCP.  An endpoint keeps a pool of connections,
 * each used by one request at a time; a peer that fails is marked down
 * for a while, and callers then go to the origin instead.
 */
#ifndef LARDER_ENDPOINT_H
#define LARDER_ENDPOINT_H

#include "common.h"
#include "wire.h"

#include <signal.h>

struct larder__endpoint;

/*
 * An endpoint at `address`: a Unix socket path (containing '/'), or
 * host:port, that this process talks to as `role`; `token` is the cluster's
 * shared secret for peers (may be NULL): it is never sent, only proofs
 * over the handshake's nonces, and a daemon must prove it first.
 * `index_url` is opened on every new connection.  timeout_ms bounds the
 * connect, the wait for each answer to start and each stall inside one;
 * 0 takes LARDER_DAEMON_TIMEOUT_MS from the environment (default 1000),
 * which is what readers of a node daemon use.  0, or -ENOMEM.
 */
LARDER__HIDDEN int larder__endpoint_new(struct larder__endpoint **out, const char *address,
                                        enum larder__role role, const char *token,
                                        const char *index_url, int timeout_ms);
LARDER__HIDDEN void larder__endpoint_free(struct larder__endpoint *endpoint);
LARDER__HIDDEN const char *larder__endpoint_address(const struct larder__endpoint *endpoint);
/* Whether the endpoint failed recently (and is left alone for a while). */
LARDER__HIDDEN bool larder__endpoint_down(struct larder__endpoint *endpoint);

/*
 * Read bytes [offset, offset + length) of a shard of dataset (id_low,
 * id_high) through the endpoint, into buf, at class `priority`
 * (priority.h, carried in the READ; DEMAND and NEAR use other pooled
 * connections than HINTED and WARM, whose answers may take up to 60 s to
 * start: the daemon serves them after its other work).  0, or a negative code with a
 * message (the endpoint is then marked down for a while when the failure
 * was the connection's, not an answer's).  A pooled connection found
 * closed before any byte of the answer is not a failure: the request is
 * sent once more on a fresh connection.
 */
LARDER__HIDDEN int larder__endpoint_read(struct larder__endpoint *endpoint, uint64_t id_low,
                                         uint64_t id_high, uint32_t shard, int priority,
                                         uint64_t offset, uint64_t length, void *buf);

/* The same READ with the wire's READ flags (wire.h: LARDER__READ_CACHED asks
 * a relay for what its cache holds; it answers an ERROR, LARDER_ENOTFOUND,
 * otherwise, which is an answer and leaves the endpoint up).
 * LARDER__READ_STAGE (a reader sharing its node daemon's cache): 1 when
 * the daemon answered that the bytes are in the cache now (buf untouched;
 * read them there), 0 when it sent the bytes into buf instead (it could
 * not cache them, or predates the flag: a daemon that closes the
 * connection on the flag is asked without it from then on). */
LARDER__HIDDEN int larder__endpoint_read_flagged(struct larder__endpoint *endpoint, uint64_t id_low,
                                                 uint64_t id_high, uint32_t shard, int priority,
                                                 unsigned flags, uint64_t offset, uint64_t length,
                                                 void *buf);

/*
 * Send one whole request frame (header included) and receive its answer
 * on a pooled connection: 0 with the answer's header in *frame and its
 * payload (at most `capacity` bytes) in `payload`; an ERROR answer comes
 * back as its code, with the daemon's message.  timeout_ms bounds the wait
 * for the answer to start (0: the endpoint's own), for requests that
 * answer when their work is done (a HINT that waits).
 */
LARDER__HIDDEN int larder__endpoint_call(struct larder__endpoint *endpoint, const void *request,
                                         size_t length, struct larder__frame *frame, void *payload,
                                         size_t capacity, int timeout_ms);

/*
 * Connect ahead of need (larderd's connect-ahead, docs/protocol.md "Peer
 * connections"): make fresh connections of the DEMAND and NEAR group
 * (dialled, greeted, the dataset opened) and pool them, until `count`
 * sit idle, so that the first READs find them up; over UCX, the UCX path
 * first.  Blocks until deadline_ms (the monotonic clock, as
 * larder__endpoint_now_ms) at most, however slowly the daemon answers:
 * call it off any thread that serves requests.  Stops early once *stop
 * (NULL: never) is set.  Nothing is made for an endpoint marked down.
 * The number made (0 when enough were pooled already), or the first
 * connect's failure when none was made, which marks nothing down: the
 * first READ tries for itself, and its failure is marked and logged as
 * ever.
 */
LARDER__HIDDEN int larder__endpoint_prepare(struct larder__endpoint *endpoint, int count,
                                            int64_t deadline_ms, const volatile sig_atomic_t *stop);

/*
 * Have the daemon open the endpoint's index without waiting for it: one
 * fresh connection, dialled and greeted by deadline_ms, the OPEN sent, and
 * closed at once (the daemon opens it all the same).  0, or a negative
 * code with a message (nothing marked down).
 */
LARDER__HIDDEN int larder__endpoint_open_ahead(struct larder__endpoint *endpoint,
                                               int64_t deadline_ms);

/* The daemon's statistics as JSON text (malloc'd; the caller frees it). */
LARDER__HIDDEN int larder__endpoint_stats(struct larder__endpoint *endpoint, char **json);

/*
 * One request on a fresh connection of an endpoint made without an
 * index_url (no OPEN; LARDER_EUSAGE otherwise): send the whole frame `request` (length bytes), wait
 * up to wait_ms (plus the endpoint's timeout) for the answer to start, and return its type and
 * payload (malloc'd, *payload; the caller frees it). An ERROR answer is returned as its code and
 * message.  For the frames of the names (publish.c, names.c).  0, or a negative code with a
 * message.
 */
LARDER__HIDDEN int larder__endpoint_ask(struct larder__endpoint *endpoint, const void *request,
                                        size_t length, int wait_ms, uint8_t *type,
                                        uint8_t **payload, uint32_t *payload_length);

/* ---- ucx (transport_ucx_peer.c) ---- */
struct larder__ucx;
/* From now on, READs of this peer endpoint ask for the UCX data path on
 * a connection of their own (docs/protocol.md, "Transports"), and go over
 * TCP when the peer has none.  0, or -ENOMEM. */
LARDER__HIDDEN int larder__endpoint_use_ucx(struct larder__endpoint *endpoint,
                                            struct larder__ucx *hub);
/* "ucx" or "tcp": how this endpoint's READs travel now; "ucx?" before the
 * first READ has asked the peer. */
LARDER__HIDDEN const char *larder__endpoint_transport(const struct larder__endpoint *endpoint);
/* A fresh connection, greeted and with the dataset opened (the UCX path's
 * control connection), all by deadline_ms (0: the endpoint's own bounds),
 * and the endpoint's timeout.  The fd, or a negative code. */
LARDER__HIDDEN int larder__endpoint_connect(struct larder__endpoint *endpoint, int *timeout_ms,
                                            int64_t deadline_ms);

#endif
