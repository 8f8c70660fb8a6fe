/*
 * transport_ucx.h - peer data over UCX (docs/protocol.md, "Transports").
 *
 * One hub per process: a UCP context and worker, driven by a progress
 * thread of its own, with two active messages on it: a READ (a borrower's
 * request, carrying the session token its daemon issued over the
 * authenticated TCP connection) and an ANSWER (the bytes, or an error
 * code and message).  The TCP connection stays the control path (HELLO,
 * the secret's challenge and response, OPEN); over it the two sides swap
 * their UCX worker addresses (frames UCX_OFFER and UCX_ACCEPT), and the
 * daemon makes the UCX endpoint it answers on from the address that came
 * over that authenticated connection.  A READ whose token names no live
 * session is dropped unanswered: an endpoint that never authenticated
 * gets nothing, and answers only ever go to an authenticated worker.
 *
 * Built without UCX (no libucx-dev), every function here fails with
 * -ENOTSUP and the daemon runs its peers over TCP.
 */
#ifndef LARDER_TRANSPORT_UCX_H
#define LARDER_TRANSPORT_UCX_H

#include "common.h"
#include "wire.h"

#define LARDER__UCX_TOKEN                                                                          \
    32 /* bytes of a session token (as a proof: compared in constant time)                         \
        */
/* The largest worker address either side takes in a UCX_OFFER or UCX_ACCEPT. */
#define LARDER__UCX_MAX_ADDRESS 4000

struct larder__ucx;         /* the process's hub */
struct larder__ucx_session; /* a daemon's side: one authenticated connection's UCX path */
struct larder__ucx_link;    /* a borrower's side: its endpoint to a daemon's worker */

/*
 * The hub: UCP's context and worker (UCX_TLS, UCX_NET_DEVICES and the rest
 * of UCX's environment apply) and its progress thread.  0, or -ENOTSUP
 * (no UCX in this build, or no transport that reaches another process)
 * with a message.  *out stays valid until larder__ucx_stop.
 */
LARDER__HIDDEN int larder__ucx_start(struct larder__ucx **out);
/* Stop the progress thread and free the hub (NULL: nothing).  Links and
 * sessions must be freed first.  Answers still in flight are cancelled
 * (2 s at most); when UCX holds on to some even so, the hub is left as it
 * is (the process is ending) rather than freed under their callbacks. */
LARDER__HIDDEN void larder__ucx_stop(struct larder__ucx *hub);
/* The transports UCX picked for this worker, as text ("tcp", "posix,sysv,cma"): valid while the hub
 * is. */
LARDER__HIDDEN const char *larder__ucx_transports(const struct larder__ucx *hub);
/* The endpoints the hub keeps to other workers: live ones, and failed ones
 * a link or session still holds (a failed one is closed and freed once
 * the last lets it go). */
LARDER__HIDDEN size_t larder__ucx_num_conns(struct larder__ucx *hub);
/* At most `most` endpoints (default 4096; for tests): when the list is
 * full, the endpoints no link or session holds are closed to make room. */
LARDER__HIDDEN void larder__ucx_set_max_conns(struct larder__ucx *hub, size_t most);
/* Send the worker at `address` an ANSWER to READ `id` carrying `bytes`, on
 * an endpoint of this hub's, as any worker that reached it could (for
 * tests: a stray or forged answer); 0 or a negative code. */
LARDER__HIDDEN int larder__ucx_answer_to(struct larder__ucx *hub, const void *address,
                                         size_t length, uint64_t id, const void *bytes, size_t n);
/* This worker's address (valid while the hub is), to send in a UCX_OFFER or UCX_ACCEPT. */
LARDER__HIDDEN void larder__ucx_address(const struct larder__ucx *hub, const void **address,
                                        size_t *length);

/* ---- a daemon's side ---------------------------------------------------------------- */

/*
 * Called on the progress thread for each READ of a live session: `read`
 * parsed and checked by wire.c; the callee takes a reference on the
 * session (larder__ucx_session_hold) for as long as it answers, and must
 * return soon (queue the work).
 */
typedef void larder__ucx_read_fn(void *owner, struct larder__ucx_session *session, uint64_t request,
                                 const struct larder__read *read);
/* Serve READs through `fn` (set once, before the first session). */
LARDER__HIDDEN void larder__ucx_serve(struct larder__ucx *hub, larder__ucx_read_fn *fn);
/*
 * A session for `owner` (the authenticated connection), answering on an
 * endpoint to the borrower's worker at `address`; *token gets the fresh
 * token to send back.  0, or a negative code with a message.
 */
LARDER__HIDDEN int larder__ucx_session_new(struct larder__ucx *hub, void *owner,
                                           const void *address, size_t length,
                                           uint8_t token[LARDER__UCX_TOKEN],
                                           struct larder__ucx_session **out);
/* Forget the session: its token names nothing from now on; answers in
 * flight still go out.  Drops the caller's reference (NULL: nothing). */
LARDER__HIDDEN void larder__ucx_session_free(struct larder__ucx_session *session);
/* Whether the session's token is still honoured (not freed). */
LARDER__HIDDEN bool larder__ucx_session_live(struct larder__ucx_session *session);
LARDER__HIDDEN void larder__ucx_session_hold(struct larder__ucx_session *session);
LARDER__HIDDEN void larder__ucx_session_release(struct larder__ucx_session *session);
/*
 * Answer READ `request`: `length` bytes at `bytes` (code 0), or an error
 * (code < 0, its message as the bytes).  Waits until UCX is done with the
 * bytes (for large answers, the borrower pulled them by rendezvous).
 * 0, or a negative code (the borrower is gone).
 */
LARDER__HIDDEN int larder__ucx_answer(struct larder__ucx_session *session, uint64_t request,
                                      int code, const void *bytes, size_t length);
/* Answer with `length` bytes of file `fd` from `offset`, sent from a
 * mapping of the whole file made at its first answer and kept for the
 * next (transport_ucx_map.c; no copy in larder).  A file shorter than
 * offset + length is answered -EIO ("the cache file ended early"). */
LARDER__HIDDEN int larder__ucx_answer_file(struct larder__ucx_session *session, uint64_t request,
                                           int fd, uint64_t offset, size_t length);

/* An answer sent without a waiter is done: rc 0 (the borrower took the
 * bytes) or a negative code (the borrower went away, or it was
 * cancelled).  Called on the progress thread, under the hub's worker
 * lock (or inside the call that posted it, when UCX was done at once, or
 * at the hub's stop): it must not wait, and may not send and wait
 * (larder__ucx_answer). */
typedef void larder__ucx_done_fn(void *arg, int rc);
/*
 * larder__ucx_answer_file without waiting: the send is posted, and `done`
 * runs once UCX is done with the bytes (transport_ucx_answer.c).  For the
 * progress thread, which may not wait: a READ whose bytes are in the
 * cache is answered there, with no handoff to another thread.  0: `done`
 * will run, or ran already; 1: nothing was sent and `done` will not run
 * (the file could not be mapped, or is shorter, or the session's endpoint
 * failed): answer the waiting way, which says why.
 */
LARDER__HIDDEN int larder__ucx_answer_file_async(struct larder__ucx_session *session,
                                                 uint64_t request, int fd, uint64_t offset,
                                                 size_t length, larder__ucx_done_fn *done,
                                                 void *arg);

/*
 * Stop serving, before what the answers are sent from goes (a daemon's
 * datasets): from now on every READ is answered -ESHUTDOWN ("the daemon
 * is stopping"; the borrower's link takes it as the path's failure), and
 * the answers in flight without a waiter (larder__ucx_answer_file_async)
 * are given up to 1 s to be taken, then cancelled; their `done` runs on
 * the progress thread meanwhile.  Returns once none is left and no READ
 * came for 50 ms (each borrower told), 3 s at most.  Returns how
 * many are still in flight: 0, unless UCX held on to some, whose `done`
 * may then still run (the caller keeps what it uses; larder__ucx_stop
 * keeps the hub).  The sends of waiting answerers are not touched: they
 * end as before (taken, cancelled when their session is forgotten, or
 * after 30 s).
 */
LARDER__HIDDEN size_t larder__ucx_quiesce(struct larder__ucx *hub);

/* How many files the hub keeps mapped for answers (for tests). */
LARDER__HIDDEN size_t larder__ucx_mapped_files(struct larder__ucx *hub);
/* At most `most` files kept mapped (default 1024; for tests): the least
 * recently used one no answer is sending from goes first. */
LARDER__HIDDEN void larder__ucx_set_max_mappings(struct larder__ucx *hub, size_t most);
/* At most `most` bytes of files kept mapped (default 4 GiB; for tests):
 * each is registered whole, which pins it on a fabric without on-demand
 * paging.  A file that does not fit is mapped for its answer alone. */
LARDER__HIDDEN void larder__ucx_set_max_mapped_bytes(struct larder__ucx *hub, size_t most);
/* The bytes of the files kept mapped, and how many files were mapped so far (for tests). */
LARDER__HIDDEN size_t larder__ucx_mapped_bytes(struct larder__ucx *hub);
LARDER__HIDDEN uint64_t larder__ucx_maps(struct larder__ucx *hub);

/* ---- a borrower's side --------------------------------------------------------------- */

/*
 * A borrower reads a peer over `larder__ucx_lanes` hubs at once, each with
 * its own worker and progress thread (transport_ucx_lanes.c): lane 0 is
 * the hub itself, the others are started at their first use and stopped
 * with it.  A lane that cannot start is the hub itself (no error).  Valid
 * while the hub is.
 */
#define LARDER__UCX_MAX_LANES 8
LARDER__HIDDEN int larder__ucx_lanes(struct larder__ucx *hub);
LARDER__HIDDEN struct larder__ucx *larder__ucx_lane(struct larder__ucx *hub, int lane);

/* A link to the daemon whose worker address and token came in a UCX_ACCEPT.  0 or a negative code.
 */
LARDER__HIDDEN int larder__ucx_link_new(struct larder__ucx *hub, const void *address, size_t length,
                                        const uint8_t token[LARDER__UCX_TOKEN],
                                        struct larder__ucx_link **out);
LARDER__HIDDEN void larder__ucx_link_free(struct larder__ucx_link *link);
/* Watch `fd`, the control connection the link's session lives on (open
 * while the link is): a READ waiting on the link fails (-ECONNRESET, a
 * fault) within 100 ms of its closing, for its session is gone and no
 * answer will come (over shared memory UCX cannot tell that a daemon
 * stopped or died). */
LARDER__HIDDEN void larder__ucx_link_watch(struct larder__ucx_link *link, int fd);
/* Whether the link failed (its daemon went away). */
LARDER__HIDDEN bool larder__ucx_link_broken(const struct larder__ucx_link *link);
/*
 * One READ over the link into buf (read->length bytes).  The answer must
 * start within wait_ms, longer (up to patience_ms in all) while the link
 * answers other READs meanwhile.  0; the daemon's error code with its
 * message; or a negative code with *fault set (no answer, the link broke,
 * or the answer was malformed).
 */
LARDER__HIDDEN int larder__ucx_link_read(struct larder__ucx_link *link,
                                         const struct larder__read *read, void *buf, int wait_ms,
                                         int patience_ms, bool *fault);

#endif
