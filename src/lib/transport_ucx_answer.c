/*
 * transport_ucx_answer.c - answers sent without a thread waiting on them
 * (transport_ucx.h, larder__ucx_answer_file_async).
 *
 * A worker answering with larder__ucx_answer_file waits until UCX is done
 * with the bytes: the READ's arrival wakes the progress thread, the pool
 * hands it to a worker, the worker's send wakes the progress thread for
 * the rendezvous, and the completion wakes the worker again.  When the
 * bytes lie in the cache already, the daemon answers on the progress
 * thread itself instead (larderd's requests.c): the send is posted there,
 * and its completion, on the progress thread too, lets go of the mapping
 * and the session and calls the caller's `done`.  No thread waits.
 *
 * What the waiting sender did by waiting is done here by the progress
 * thread (larder__ucx_answers_sweep): an answer whose session was
 * forgotten (the borrower's connection closed: on shared memory UCX cannot
 * tell that a process died) or that the borrower has not taken within
 * SEND_TIMEOUT_MS is cancelled, and its completion runs with an error.
 */
#include "transport_ucx_internal.h"

#ifdef LARDER_HAVE_UCX

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEND_TIMEOUT_MS 30000 /* as larder__ucx_send's */
#define SWEEP_EVERY_MS 100

struct larder__ucx_answer {
    struct larder__ucx *hub;
    struct larder__ucx_session *session; /* a reference, until done */
    struct larder__ucx_mapping *mapping; /* the bytes' file, until done */
    uint8_t header[ANSWER_HEADER];       /* UCX reads it until the send is done */
    size_t length;
    void *request;       /* UCX's, while in flight (progress thread) */
    int64_t deadline_ms; /* cancelled when not taken by then */
    bool cancelled;
    larder__ucx_done_fn *done;
    void *arg;
    struct larder__ucx_answer *prev, *next; /* hub->answers, under hub->lock */
};

static void unlink_answer(struct larder__ucx *hub, struct larder__ucx_answer *a)
{
    pthread_mutex_lock(&hub->lock);
    if (a->prev)
        a->prev->next = a->next;
    else
        hub->answers = a->next;
    if (a->next) a->next->prev = a->prev;
    hub->num_answers--;
    pthread_mutex_unlock(&hub->lock);
}

static void finish(struct larder__ucx_answer *a, int rc)
{
    struct larder__ucx *hub = a->hub;
    larder__ucx_mapping_put(hub, a->mapping);
    if (rc == 0) {
        __atomic_add_fetch(&hub->stats.answers, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&hub->stats.answer_bytes, a->length, __ATOMIC_RELAXED);
    }
    larder__ucx_session_release(a->session);
    a->done(a->arg, rc);
    free(a);
}

/* UCX is done with the answer (progress thread, worker_lock held). */
static void answer_sent(void *request, ucs_status_t status, void *user_data)
{
    struct larder__ucx_answer *a = user_data;
    unlink_answer(a->hub, a);
    ucp_request_free(request);
    finish(a, status == UCS_OK ? 0 : -ECONNRESET);
}

int larder__ucx_answer_file_async(struct larder__ucx_session *s, uint64_t request, int fd,
                                  uint64_t offset, size_t length, larder__ucx_done_fn *done,
                                  void *arg)
{
    struct larder__ucx *hub = s->hub;
    if (length == 0 || __atomic_load_n(&s->conn->broken, __ATOMIC_ACQUIRE)) return 1;
    struct larder__ucx_answer *a = calloc(1, sizeof *a);
    if (!a) return 1;
    const void *bytes;
    void *memh;
    if (larder__ucx_mapping_get(hub, fd, offset, length, &a->mapping, &bytes, &memh) < 0) {
        free(a); /* the waiting path answers the error */
        return 1;
    }
    a->hub = hub;
    a->session = s;
    a->length = length;
    a->done = done;
    a->arg = arg;
    a->deadline_ms = larder__ucx_now_ms() + SEND_TIMEOUT_MS;
    larder__put_le64(a->header, request);
    larder__ucx_session_hold(s);
    __atomic_add_fetch(&hub->stats.unwaited, 1, __ATOMIC_RELAXED);
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                 UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_DATATYPE,
                                 .cb.send = answer_sent,
                                 .user_data = a,
                                 .datatype = ucp_dt_make_contig(1)};
    if (memh) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh = memh;
    }
    /* the callback runs only under worker_lock, on the progress thread:
     * not before the answer is listed and its request noted */
    pthread_mutex_lock(&hub->worker_lock);
    pthread_mutex_lock(&hub->lock);
    a->next = hub->answers;
    if (a->next) a->next->prev = a;
    hub->answers = a;
    hub->num_answers++;
    pthread_mutex_unlock(&hub->lock);
    ucs_status_ptr_t r =
        ucp_am_send_nbx(s->conn->ep, AM_ANSWER, a->header, sizeof a->header, bytes, length, &param);
    if (r == NULL || UCS_PTR_IS_ERR(r)) { /* done at once, or failed: no callback */
        pthread_mutex_unlock(&hub->worker_lock);
        unlink_answer(hub, a);
        finish(a, r == NULL ? 0 : -ECONNRESET);
        return 0;
    }
    a->request = r;
    pthread_mutex_unlock(&hub->worker_lock);
    /* the rest of the rendezvous is the progress thread's, and it takes one
     * more pass after this send even when it posted it itself: without
     * that, an answer posted inside on_read over UCX's tcp transport
     * could wait for epoll's 100 ms timeout (READs of 250-300 ms, 18 of
     * 1085 over 50 ms, where the waiting path had none) */
    larder__ucx_kick(hub);
    return 0;
}

/* Cancel what `all`, or else an answer whose session was forgotten or
 * whose deadline passed, asks (progress thread, or the hub's stop after
 * it ended): their callbacks run with an error at the next progress. */
static void sweep(struct larder__ucx *hub, bool all)
{
    int64_t now = larder__ucx_now_ms();
    pthread_mutex_lock(&hub->worker_lock);
    pthread_mutex_lock(&hub->lock);
    struct larder__ucx_answer *a = hub->answers;
    while (a) {
        struct larder__ucx_answer *next = a->next;
        if (!a->cancelled && (all || !a->session->live || now > a->deadline_ms)) {
            a->cancelled = true;
            void *r = a->request;
            /* no UCX call under hub->lock; a is not freed meanwhile: its
             * callback needs worker_lock, which this thread holds */
            pthread_mutex_unlock(&hub->lock);
            ucp_request_cancel(hub->worker, r);
            pthread_mutex_lock(&hub->lock);
            next = hub->answers; /* the list may have changed: from the top */
        }
        a = next;
    }
    pthread_mutex_unlock(&hub->lock);
    pthread_mutex_unlock(&hub->worker_lock);
}

void larder__ucx_answers_sweep(struct larder__ucx *hub)
{
    int64_t now = larder__ucx_now_ms();
    if (now < hub->next_sweep_ms) return;
    hub->next_sweep_ms = now + SWEEP_EVERY_MS;
    pthread_mutex_lock(&hub->lock);
    bool any = hub->answers != NULL;
    pthread_mutex_unlock(&hub->lock);
    if (any) sweep(hub, false);
}

static size_t in_flight(struct larder__ucx *hub)
{
    pthread_mutex_lock(&hub->lock);
    size_t n = hub->num_answers;
    pthread_mutex_unlock(&hub->lock);
    return n;
}

size_t larder__ucx_answers_end(struct larder__ucx *hub)
{
    int64_t deadline = larder__ucx_now_ms() + 2000;
    for (;;) {
        size_t left = in_flight(hub);
        if (left == 0 || larder__ucx_now_ms() > deadline) return left;
        sweep(hub, true);
        pthread_mutex_lock(&hub->worker_lock);
        ucp_worker_progress(hub->worker);
        pthread_mutex_unlock(&hub->worker_lock);
    }
}

#define QUIESCE_TAKE_MS 1000   /* answers in flight may be taken this long */
#define QUIESCE_CANCEL_MS 2000 /* then cancelled, and their completions waited for */
/* Refused READs are awaited until none came for this long: each borrower's
 * thread whose READ was answered just before sends its next one at once,
 * and it must find the hub still refusing (over shared memory a READ sent
 * once the process is gone waits out the borrower's whole timeout). */
#define QUIESCE_QUIET_MS 50

size_t larder__ucx_quiesce(struct larder__ucx *hub)
{
    if (!hub) return 0; /* (a daemon under --transport tcp) */
    /* on_read runs under worker_lock: no READ is served after this */
    pthread_mutex_lock(&hub->worker_lock);
    hub->refusing = true;
    pthread_mutex_unlock(&hub->worker_lock);
    /* the progress thread runs on: it progresses the sends and runs their
     * completions; this thread only watches the list, and cancels */
    int64_t start = larder__ucx_now_ms();
    bool cancelled = false;
    for (;;) {
        size_t left = in_flight(hub);
        int64_t now = larder__ucx_now_ms(), waited = now - start;
        int64_t refused = __atomic_load_n(&hub->refused_ms, __ATOMIC_RELAXED);
        int64_t quiet = now - (refused > start ? refused : start);
        if ((left == 0 && quiet >= QUIESCE_QUIET_MS) ||
            waited > QUIESCE_TAKE_MS + QUIESCE_CANCEL_MS)
            return left;
        if (waited > QUIESCE_TAKE_MS && !cancelled) {
            sweep(hub, true);
            cancelled = true;
        }
        larder__ucx_kick(hub);
        usleep(1000);
    }
}

#else /* built without UCX */

#include <errno.h>

size_t larder__ucx_quiesce(struct larder__ucx *hub)
{
    (void)hub;
    return 0;
}

int larder__ucx_answer_file_async(struct larder__ucx_session *s, uint64_t request, int fd,
                                  uint64_t offset, size_t length, larder__ucx_done_fn *done,
                                  void *arg)
{
    (void)s, (void)request, (void)fd, (void)offset, (void)length, (void)done, (void)arg;
    return 1;
}

#endif
