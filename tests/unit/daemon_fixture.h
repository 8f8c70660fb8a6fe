/*
 * daemon_fixture.h - what the daemon's unit tests (test_larderd_*.c)
 * share: a daemon of the test's own (no socket, no listener: its parts
 * driven directly), a small packed dataset, frames to hand to handle(),
 * and the answers a connection queued.
 */
#ifndef LARDER_DAEMON_FIXTURE_H
#define LARDER_DAEMON_FIXTURE_H

#include "larderd.h"

/* d set up as main.c does, quiet, its cache in test_dir()/cache, `jobs`
 * workers; started (eventfd, epoll and pool, no socket).  larderd_free after. */
void fixture_daemon(struct larderd *d, int jobs);
/* A flat dataset of n samples (sizes 100 to 3100 bytes) in test_dir()/NAME,
 * shards of about shard_size bytes; the path of its index (a static
 * buffer, reused by the next call). */
const char *fixture_dataset(const char *name, int n, uint64_t shard_size);
/* A local reader's connection (fd -1) of the daemon's own uid, or a peer's (TCP). */
struct connection *fixture_connection(struct larderd *d, bool tcp);
/* Hand one frame to handle(), as process_input() would. */
bool fixture_send(struct connection *c, const uint8_t *frame, size_t length);
/* HELLO as a reader (or a peer); the WELCOME checked and dropped. */
void fixture_hello(struct connection *c, bool peer);
/* A peer connection c that proved the cluster secret (one given to its
 * daemon if it has none), as a PROVE that checked out leaves it. */
void fixture_prove(struct connection *c);
/* Wait until c's jobs (READs, OPENs of new indexes) have ended. */
void fixture_wait_jobs(struct connection *c);
/* The next answer queued on c (waited for up to 20 s: from a worker), of type
 * `type` (checked); free() it. */
struct output *fixture_answer(struct connection *c, int type);
/* An ERROR answer's code, its message copied into message (size bytes). */
int fixture_error(struct connection *c, char *message, size_t size);

#endif
