/*
 * transport_ucx_link.c - a borrower's end of a UCX data path
 * (transport_ucx.h): its link (the endpoint to the daemon's worker and
 * the session token), the READs it sends and waits on, and the outbox of
 * READs the progress thread posts when another thread holds the worker.
 */
#include "transport_ucx_internal.h"

#include <errno.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LARDER_HAVE_UCX

int larder__ucx_link_new(struct larder__ucx *hub, const void *address, size_t length,
                         const uint8_t token[LARDER__UCX_TOKEN], struct larder__ucx_link **out)
{
    if (length == 0 || length > LARDER__UCX_MAX_ADDRESS)
        return larder__fail(LARDER_EPROTOCOL, "a UCX worker address of %zu bytes", length);
    struct larder__ucx_link *l = calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    l->hub = hub;
    l->control_fd = -1;
    memcpy(l->token, token, LARDER__UCX_TOKEN);
    if (!(l->conn = larder__ucx_conn_get(hub, address, length))) {
        free(l);
        return LARDER_EUNSUPPORTED;
    }
    *out = l;
    return 0;
}

void larder__ucx_link_free(struct larder__ucx_link *l)
{
    if (!l) return;
    larder__ucx_conn_put(l->conn);
    memset(l->token, 0, sizeof l->token);
    free(l);
}

bool larder__ucx_link_broken(const struct larder__ucx_link *l)
{
    return larder__ucx_conn_broken(l->conn);
}

void larder__ucx_link_watch(struct larder__ucx_link *l, int fd)
{
    l->control_fd = fd;
}

/* Whether the watched control connection closed (its session with it). */
static bool control_closed(const struct larder__ucx_link *l)
{
    struct pollfd poll_fd = {.fd = l->control_fd, .events = POLLRDHUP};
    return l->control_fd >= 0 && poll(&poll_fd, 1, 0) == 1 &&
           poll_fd.revents & (POLLRDHUP | POLLHUP | POLLERR);
}

/* ---- READs sent without waiting on the worker --------------------------------------- */

/* A READ's active message, from its posting until UCX is done with its
 * header: it holds a reference on the endpoint's conn meanwhile. */
struct larder__ucx_outgoing {
    struct larder__ucx_conn *conn;
    uint64_t id; /* the pending READ's */
    uint8_t header[READ_HEADER];
    struct larder__ucx_outgoing *next; /* hub->outbox */
};

static void read_sent(void *request, ucs_status_t status, void *user_data)
{
    struct larder__ucx_outgoing *o = user_data;
    (void)status; /* a failed send: the endpoint's error handler fails the READ */
    larder__ucx_conn_put(o->conn);
    free(o);
    ucp_request_free(request);
}

/* Post o (worker_lock held); on an immediate failure, its READ fails now.
 * Whether the send is still in flight (the progress thread finishes it). */
static bool post_read(struct larder__ucx *hub, struct larder__ucx_outgoing *o)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                 UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_DATATYPE,
                                 .cb.send = read_sent,
                                 .user_data = o,
                                 .datatype = ucp_dt_make_contig(1)};
    ucs_status_ptr_t r =
        larder__ucx_conn_broken(o->conn)
            ? UCS_STATUS_PTR(UCS_ERR_CONNECTION_RESET)
            : ucp_am_send_nbx(o->conn->ep, AM_READ, o->header, sizeof o->header, NULL, 0, &param);
    if (r != NULL && !UCS_PTR_IS_ERR(r)) return true; /* read_sent frees it */
    if (UCS_PTR_IS_ERR(r)) {
        pthread_mutex_lock(&hub->lock);
        for (struct larder__ucx_pending *p = hub->pending; p; p = p->next)
            if (p->id == o->id && p->state == PENDING_WAITING) {
                p->rc = -ECONNRESET;
                p->state = PENDING_DONE;
                pthread_cond_signal(&p->wake);
            }
        pthread_mutex_unlock(&hub->lock);
    }
    larder__ucx_conn_put(o->conn);
    free(o);
    return false;
}

bool larder__ucx_outbox_post(struct larder__ucx *hub)
{
    /* a look without the lock first: this runs between every two progress calls */
    if (!__atomic_load_n(&hub->outbox, __ATOMIC_ACQUIRE)) return false;
    pthread_mutex_lock(&hub->lock);
    struct larder__ucx_outgoing *list = hub->outbox;
    __atomic_store_n(&hub->outbox, NULL, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&hub->lock);
    bool any = list != NULL;
    /* in the order they were queued: the list is newest first */
    struct larder__ucx_outgoing *ordered = NULL;
    while (list) {
        struct larder__ucx_outgoing *o = list;
        list = o->next;
        o->next = ordered;
        ordered = o;
    }
    while (ordered) {
        struct larder__ucx_outgoing *o = ordered;
        ordered = o->next;
        post_read(hub, o);
    }
    return any;
}

void larder__ucx_outbox_drop(struct larder__ucx *hub)
{
    pthread_mutex_lock(&hub->lock);
    struct larder__ucx_outgoing *list = hub->outbox;
    __atomic_store_n(&hub->outbox, NULL, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&hub->lock);
    while (list) {
        struct larder__ucx_outgoing *o = list;
        list = o->next;
        larder__ucx_conn_put(o->conn);
        free(o);
    }
}

/*
 * Send a READ without waiting on the worker: posted at once when no other
 * thread holds the worker, else queued for the progress thread, which is
 * then in a pass over the worker and posts it at its next (a reader
 * blocked on worker_lock while the progress thread copied an answer's
 * bytes: 1-2 context switches per READ).  0, or -ENOMEM.
 */
static int send_read(struct larder__ucx_link *l, uint64_t id, const uint8_t header[READ_HEADER])
{
    struct larder__ucx *hub = l->hub;
    struct larder__ucx_outgoing *o = malloc(sizeof *o);
    if (!o) return -ENOMEM;
    o->conn = l->conn;
    o->id = id;
    memcpy(o->header, header, READ_HEADER);
    __atomic_add_fetch(&o->conn->refs, 1, __ATOMIC_ACQ_REL); /* the link holds one already */
    bool kick = true;
    if (pthread_mutex_trylock(&hub->worker_lock) == 0) {
        kick = post_read(hub, o);
        pthread_mutex_unlock(&hub->worker_lock);
    } else {
        __atomic_add_fetch(&hub->stats.reads_queued, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&hub->lock);
        o->next = hub->outbox;
        __atomic_store_n(&hub->outbox, o, __ATOMIC_RELEASE); /* (outbox_post peeks) */
        pthread_mutex_unlock(&hub->lock);
    }
    /* queued, or still in flight: the progress thread may sleep, and the
     * rest is its (a READ sent whole needs nothing more from it: the
     * answer's arrival wakes it) */
    if (kick) larder__ucx_kick(hub);
    return 0;
}

int larder__ucx_link_read(struct larder__ucx_link *l, const struct larder__read *read, void *buf,
                          int wait_ms, int patience_ms, bool *fault)
{
    struct larder__ucx *hub = l->hub;
    *fault = true;
    if (larder__ucx_link_broken(l)) return -ECONNRESET;
    struct larder__ucx_pending p = {
        .hub = hub, .link = l, .buf = buf, .length = read->length, .state = PENDING_WAITING};
    larder__ucx_cond_init(&p.wake);
    uint8_t frame[LARDER__WIRE_HEADER + READ_PAYLOAD];
    int n = larder__wire_encode_read(frame, sizeof frame, 0, read);
    if (n != (int)sizeof frame) return n < 0 ? n : LARDER_EPROTOCOL;
    /* the answer is matched by this id alone, from whatever endpoint it
     * came: an unguessable one, so that another worker that reached this
     * one (any peer it offered a path to) cannot answer a READ it was not
     * sent.  Sequential ids let one complete READs to other members with
     * its own bytes or errors (found by review); 64 random bits make a
     * clash among the READs pending negligible. */
    uint64_t id = 0;
    while (id == 0)
        if (RAND_bytes((unsigned char *)&id, sizeof id) != 1) {
            pthread_mutex_lock(&hub->lock); /* no randomness: at least not 1, 2, 3... */
            id = ++hub->next_id * UINT64_C(0x9E3779B97F4A7C15);
            pthread_mutex_unlock(&hub->lock);
        }
    pthread_mutex_lock(&hub->lock);
    p.id = id;
    p.next = hub->pending;
    hub->pending = &p;
    pthread_mutex_unlock(&hub->lock);
    uint8_t header[READ_HEADER];
    memcpy(header, l->token, LARDER__UCX_TOKEN);
    larder__put_le64(header + LARDER__UCX_TOKEN, p.id);
    memcpy(header + LARDER__UCX_TOKEN + 8, frame + LARDER__WIRE_HEADER, READ_PAYLOAD);
    int rc = send_read(l, p.id, header);
    int64_t started = larder__ucx_now_ms(), deadline = started + wait_ms;
    pthread_mutex_lock(&hub->lock);
    if (rc < 0 && p.state == PENDING_WAITING) p.state = PENDING_DONE, p.rc = rc;
    while (p.state != PENDING_DONE) {
        int64_t now = larder__ucx_now_ms();
        if (now >= deadline && p.state == PENDING_WAITING) {
            /* a daemon answering others meanwhile is busy, not gone */
            int64_t answered = __atomic_load_n(&l->answered_ms, __ATOMIC_RELAXED);
            if (now - answered < wait_ms && now - started < patience_ms) {
                deadline = now + wait_ms;
            } else {
                p.state = PENDING_DONE;
                p.rc = -ETIMEDOUT;
                break;
            }
        }
        int64_t left = deadline - now;
        larder__ucx_wait(hub, &p.wake, left > 100 ? 100 : left);
        if (p.state == PENDING_WAITING && larder__ucx_now_ms() - now >= 100) {
            pthread_mutex_unlock(&hub->lock); /* a system call: not under the lock */
            bool closed = control_closed(l);
            pthread_mutex_lock(&hub->lock);
            if (closed && p.state == PENDING_WAITING) {
                p.state = PENDING_DONE;
                p.rc = -ECONNRESET;
                break;
            }
        }
    }
    for (struct larder__ucx_pending **q = &hub->pending; *q; q = &(*q)->next)
        if (*q == &p) {
            *q = p.next;
            break;
        }
    pthread_mutex_unlock(&hub->lock);
    pthread_cond_destroy(&p.wake);
    if (p.rc == 0) {
        *fault = false;
        return 0;
    }
    if (p.answered) { /* the daemon's answer, not the link's failure */
        /* a stopping daemon's (larder__ucx_quiesce) is the path's end too */
        *fault = p.rc == LARDER_EPROTOCOL || p.rc == -ESHUTDOWN;
        return larder__fail(p.rc, "larder daemon over UCX: %s", p.message);
    }
    if (p.rc == LARDER_EPROTOCOL)
        return larder__fail(p.rc, "larder daemon over UCX: %s", p.message);
    return p.rc;
}

#else /* built without UCX */

int larder__ucx_link_new(struct larder__ucx *hub, const void *address, size_t length,
                         const uint8_t token[LARDER__UCX_TOKEN], struct larder__ucx_link **out)
{
    (void)hub, (void)address, (void)length, (void)token, (void)out;
    return -ENOTSUP;
}
void larder__ucx_link_free(struct larder__ucx_link *l)
{
    (void)l;
}
void larder__ucx_link_watch(struct larder__ucx_link *l, int fd)
{
    (void)l, (void)fd;
}
bool larder__ucx_link_broken(const struct larder__ucx_link *l)
{
    (void)l;
    return true;
}
int larder__ucx_link_read(struct larder__ucx_link *l, const struct larder__read *read, void *buf,
                          int wait_ms, int patience_ms, bool *fault)
{
    (void)l, (void)read, (void)buf, (void)wait_ms, (void)patience_ms;
    *fault = true;
    return -ENOTSUP;
}

#endif
