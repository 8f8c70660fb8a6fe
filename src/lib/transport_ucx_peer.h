/*
 * transport_ucx_peer.h - a peer endpoint's READs over UCX (endpoint.c's
 * hook): the control connection that asked for the data path, the link
 * it gave, and the fallback to TCP for a peer that has no UCX.
 */
#ifndef LARDER_TRANSPORT_UCX_PEER_H
#define LARDER_TRANSPORT_UCX_PEER_H

#include "common.h"
#include "wire.h"

struct larder__ucx;
struct larder__endpoint;
struct larder__ucx_peer;

/* larder__ucx_peer_read's answer: this peer has no UCX data path, read over TCP. */
#define LARDER__UCX_USE_TCP 1

/* UCX state for endpoint (which outlives it) on hub.  0 or -ENOMEM. */
LARDER__HIDDEN int larder__ucx_peer_new(struct larder__ucx *hub, struct larder__endpoint *endpoint,
                                        struct larder__ucx_peer **out);
LARDER__HIDDEN void larder__ucx_peer_free(struct larder__ucx_peer *peer);
/* "ucx", "tcp" (the peer has no UCX), or "ucx?" (not asked yet). */
LARDER__HIDDEN const char *larder__ucx_peer_transport(struct larder__ucx_peer *peer);
/* Make the UCX path now if there is none (the control connection, the
 * offer, the link), as the first READ would, by deadline_ms (the monotonic
 * clock; 0: the endpoint's own bounds): connect-ahead
 * (larder__endpoint_prepare).  0; LARDER__UCX_USE_TCP: READs go over TCP;
 * or the peer's failure (a negative code with a message), recorded as a
 * READ's failed path is: READs go over TCP for a while. */
LARDER__HIDDEN int larder__ucx_peer_prepare(struct larder__ucx_peer *peer, int64_t deadline_ms);
/*
 * One READ over UCX (larder__ucx_link_read's waits): 0, a negative code
 * (*fault: the peer's failure, not its answer), or LARDER__UCX_USE_TCP.
 */
LARDER__HIDDEN int larder__ucx_peer_read(struct larder__ucx_peer *peer,
                                         const struct larder__read *read, void *buf, int wait_ms,
                                         int patience_ms, bool *fault);

#endif
