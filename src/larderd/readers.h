/*
 * readers.h - READERS (docs/protocol.md): a daemon whose readers read the
 * shared origin tells its peers, and a peer told so starts no background
 * read of the origin for a moment (source_gate.c, larder__source_gate_hold).
 *
 * Why: each daemon's source gate keeps its own background staging out of
 * its own readers' way, but an origin is shared by the cluster: the trace
 * (trace.h) showed a training reader's 128 KiB reads on node 0 waiting
 * 15-50 ms each at the origin behind other nodes' hint staging, which
 * knew nothing of it.
 */
#ifndef LARDERD_READERS_H
#define LARDERD_READERS_H

#include "larderd.h"

/* How often at most a daemon tells its peers, and how long each word holds
 * them: one period, plus the quiet time a local reader gets after its last
 * read (source_gate.c's GATE_QUIET_MS), so that a reader reading without
 * pause holds the peers without a gap. */
#define READERS_EVERY_MS 10
#define READERS_HOLD_MS 30

/* Start telling the peers (a thread; nothing without peers or without a
 * cluster secret: a peer takes READERS only from a member that proved it).
 * 0 or a negative code. */
int readers_signal_start(struct larderd *d);
/* Stop telling them (joins the thread); safe when never started. */
void readers_signal_stop(struct larderd *d);
/* A READERS frame from c: only from a peer that proved the cluster secret
 * (a local user could otherwise stall every node's staging); answered with
 * an empty READERS.  false: the connection is to be closed. */
bool readers_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload);

#endif
