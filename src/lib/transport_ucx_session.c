/*
 * transport_ucx_session.c - a daemon's end of a UCX data path
 * (transport_ucx.h): its session (an authenticated connection's token,
 * and the endpoint it answers on, made from the worker address that came
 * over that connection), and the endpoints (conns) sessions and links
 * share.  A borrower's link is in transport_ucx_link.c.
 */
#include "transport_ucx_internal.h"
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef LARDER_HAVE_UCX

bool larder__ucx_conn_broken(const struct larder__ucx_conn *c)
{
    return __atomic_load_n(&c->broken, __ATOMIC_ACQUIRE);
}

/* UCX's error handler: every READ waiting on the endpoint fails now. */
static void conn_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct larder__ucx_conn *c = arg;
    struct larder__ucx *hub = c->hub;
    (void)ep, (void)status;
    __atomic_store_n(&c->broken, true, __ATOMIC_RELEASE);
    __atomic_store_n(&hub->reap_conns, true, __ATOMIC_RELEASE); /* freed once let go */
    pthread_mutex_lock(&hub->lock);
    for (struct larder__ucx_pending *p = hub->pending; p; p = p->next)
        if (p->link->conn == c && p->state == PENDING_WAITING) {
            p->rc = -ECONNRESET;
            p->state = PENDING_DONE;
            pthread_cond_signal(&p->wake);
        }
    pthread_mutex_unlock(&hub->lock);
}

/* An endpoint to the worker at `address` that reports its failures where
 * every transport can (UCX's shared-memory transports cannot: then one
 * that does not).  UCS_OK or UCX's status. */
static ucs_status_t make_ep(struct larder__ucx *hub, const void *address,
                            struct larder__ucx_conn *c, ucp_ep_h *ep)
{
    ucp_ep_params_t params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                            UCP_EP_PARAM_FIELD_ERR_HANDLER,
                              .address = address,
                              .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                              .err_handler = {.cb = conn_failed, .arg = c}};
    /* once refused (shared memory), not asked again: UCX logs each refusal */
    ucs_status_t status = UCS_ERR_UNSUPPORTED;
    pthread_mutex_lock(&hub->worker_lock);
    if (!__atomic_load_n(&hub->no_peer_errors, __ATOMIC_RELAXED)) {
        /* a refusal here is expected: UCX's error about it is not logged */
        larder__ucx_quiet_refusal = true;
        status = ucp_ep_create(hub->worker, &params, ep);
        larder__ucx_quiet_refusal = false;
        if (status != UCS_OK) __atomic_store_n(&hub->no_peer_errors, true, __ATOMIC_RELAXED);
    }
    if (status != UCS_OK) {
        params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        status = ucp_ep_create(hub->worker, &params, ep);
    }
    pthread_mutex_unlock(&hub->worker_lock);
    return status;
}

#define MAX_CONNS 4096 /* remote workers this hub keeps an endpoint to */

/* The live endpoint to the worker at `address`, made if there is none.  NULL with a message. */
struct larder__ucx_conn *larder__ucx_conn_get(struct larder__ucx *hub, const void *address,
                                              size_t length)
{
    size_t most = hub->max_conns ? hub->max_conns : MAX_CONNS;
    pthread_mutex_lock(&hub->conns_lock);
    struct larder__ucx_conn *c = NULL;
    for (int attempt = 0;; attempt++) {
        for (c = hub->conns; c; c = c->next)
            if (!larder__ucx_conn_broken(c) && c->length == length &&
                memcmp(c->address, address, length) == 0)
                break;
        if (c || hub->num_conns < most || attempt == 1000) break;
        /* full: the progress thread closes the endpoints no link or session
         * holds (failed ones, and idle ones to workers gone quiet); up to 1 s */
        __atomic_store_n(&hub->reap_idle, true, __ATOMIC_RELEASE);
        __atomic_store_n(&hub->reap_conns, true, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&hub->conns_lock);
        larder__ucx_kick(hub);
        usleep(1000);
        pthread_mutex_lock(&hub->conns_lock);
    }
    if (c) __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    if (!c && hub->num_conns >= most) {
        larder__fail(LARDER_EUSAGE, "UCX: endpoints to %zu workers in use already", most);
    } else if (!c) {
        c = calloc(1, sizeof *c);
        uint8_t *copy = malloc(length);
        ucs_status_t status = UCS_ERR_NO_MEMORY;
        if (c && copy) {
            memcpy(copy, address, length); /* aligned, and ours while UCX reads it */
            c->hub = hub;
            c->address = copy;
            c->length = length;
            status = make_ep(hub, copy, c, &c->ep);
        }
        if (status != UCS_OK) {
            larder__fail(-ECONNREFUSED, "UCX: no endpoint to the peer's worker: %s",
                         ucs_status_string(status));
            free(copy);
            free(c);
            c = NULL;
        } else {
            c->refs = 1;
            c->next = hub->conns;
            hub->conns = c;
            hub->num_conns++;
        }
    }
    pthread_mutex_unlock(&hub->conns_lock);
    if (c) larder__ucx_kick(hub);
    return c;
}

/* A link or session lets its endpoint go: a broken one goes once none
 * holds it.  Without conns_lock: a session's last reference may go inside
 * a callback, under worker_lock, which conn_get takes under conns_lock. */
void larder__ucx_conn_put(struct larder__ucx_conn *c)
{
    struct larder__ucx *hub = c->hub;
    bool last = __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0;
    if (last && larder__ucx_conn_broken(c)) {
        __atomic_store_n(&hub->reap_conns, true, __ATOMIC_RELEASE);
        larder__ucx_kick(hub);
    }
}

/* Close endpoints UCX knows (forced: their peers may be gone) and free
 * them; without conns_lock (the progress this takes may run callbacks
 * that let a session go). */
static void conns_free(struct larder__ucx *hub, struct larder__ucx_conn *list)
{
    while (list) {
        struct larder__ucx_conn *c = list;
        list = c->next;
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
        pthread_mutex_lock(&hub->worker_lock);
        ucs_status_ptr_t r = ucp_ep_close_nbx(c->ep, &p);
        while (r && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
            ucp_worker_progress(hub->worker);
        if (r && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
        pthread_mutex_unlock(&hub->worker_lock);
        free(c->address);
        free(c);
    }
}

void larder__ucx_conns_reap(struct larder__ucx *hub)
{
    struct larder__ucx_conn *gone = NULL;
    bool idle_too = __atomic_exchange_n(&hub->reap_idle, false, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&hub->conns_lock);
    for (struct larder__ucx_conn **at = &hub->conns; *at;) {
        struct larder__ucx_conn *c = *at;
        if (__atomic_load_n(&c->refs, __ATOMIC_ACQUIRE) > 0 ||
            (!larder__ucx_conn_broken(c) && !idle_too)) {
            at = &c->next;
            continue;
        }
        *at = c->next;
        hub->num_conns--;
        c->next = gone;
        gone = c;
    }
    pthread_mutex_unlock(&hub->conns_lock);
    conns_free(hub, gone);
}

void larder__ucx_set_max_conns(struct larder__ucx *hub, size_t most)
{
    hub->max_conns = most;
}

int larder__ucx_answer_to(struct larder__ucx *hub, const void *address, size_t length, uint64_t id,
                          const void *bytes, size_t n)
{
    struct larder__ucx_conn *c = larder__ucx_conn_get(hub, address, length);
    if (!c) return -ECONNREFUSED;
    uint8_t header[ANSWER_HEADER] = {0};
    larder__put_le64(header, id);
    return larder__ucx_send(hub, c->ep, AM_ANSWER, header, sizeof header, bytes, n, NULL, NULL);
}

void larder__ucx_conns_close(struct larder__ucx *hub)
{
    pthread_mutex_lock(&hub->conns_lock);
    struct larder__ucx_conn *all = hub->conns;
    hub->conns = NULL;
    hub->num_conns = 0;
    pthread_mutex_unlock(&hub->conns_lock);
    conns_free(hub, all);
}

/* ---- sessions ------------------------------------------------------------------------- */

int larder__ucx_session_new(struct larder__ucx *hub, void *owner, const void *address,
                            size_t length, uint8_t token[LARDER__UCX_TOKEN],
                            struct larder__ucx_session **out)
{
    if (length == 0 || length > LARDER__UCX_MAX_ADDRESS)
        return larder__fail(LARDER_EPROTOCOL, "a UCX worker address of %zu bytes", length);
    struct larder__ucx_session *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    int rc = larder__auth_nonce(s->token);
    if (rc < 0) {
        free(s);
        return larder__fail(rc, "no random session token");
    }
    s->hub = hub;
    s->owner = owner;
    s->refs = 1;
    if (!(s->conn = larder__ucx_conn_get(hub, address, length))) {
        free(s);
        return LARDER_EUNSUPPORTED;
    }
    memcpy(token, s->token, LARDER__UCX_TOKEN);
    pthread_mutex_lock(&hub->lock);
    s->live = true;
    s->refs++; /* the table's */
    s->next = hub->sessions;
    hub->sessions = s;
    pthread_mutex_unlock(&hub->lock);
    larder__ucx_kick(hub);
    *out = s;
    return 0;
}

struct larder__ucx_session *larder__ucx_session_find(struct larder__ucx *hub,
                                                     const uint8_t token[LARDER__UCX_TOKEN])
{
    struct larder__ucx_session *found = NULL;
    pthread_mutex_lock(&hub->lock);
    /* every live token compared whole, in constant time */
    for (struct larder__ucx_session *s = hub->sessions; s; s = s->next)
        if (larder__auth_equal(s->token, token) && !larder__ucx_conn_broken(s->conn)) found = s;
    if (found) found->refs++;
    pthread_mutex_unlock(&hub->lock);
    return found;
}

bool larder__ucx_session_live(struct larder__ucx_session *s)
{
    pthread_mutex_lock(&s->hub->lock);
    bool live = s->live;
    pthread_mutex_unlock(&s->hub->lock);
    return live;
}

void larder__ucx_session_hold(struct larder__ucx_session *s)
{
    pthread_mutex_lock(&s->hub->lock);
    s->refs++;
    pthread_mutex_unlock(&s->hub->lock);
}

void larder__ucx_session_release(struct larder__ucx_session *s)
{
    if (!s) return;
    struct larder__ucx *hub = s->hub;
    pthread_mutex_lock(&hub->lock);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&hub->lock);
    if (!last) return;
    larder__ucx_conn_put(s->conn);
    memset(s->token, 0, sizeof s->token);
    free(s);
}

void larder__ucx_session_free(struct larder__ucx_session *s)
{
    if (!s) return;
    struct larder__ucx *hub = s->hub;
    pthread_mutex_lock(&hub->lock);
    if (s->live) {
        for (struct larder__ucx_session **p = &hub->sessions; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
        s->live = false;
        s->refs--; /* the table's */
    }
    pthread_mutex_unlock(&hub->lock);
    larder__ucx_session_release(s);
}

int larder__ucx_answer(struct larder__ucx_session *s, uint64_t request, int code, const void *bytes,
                       size_t length)
{
    uint8_t header[ANSWER_HEADER] = {0};
    larder__put_le64(header, request);
    larder__put_le32(header + 8, (uint32_t)(int32_t)code);
    if (larder__ucx_conn_broken(s->conn)) return -ECONNRESET;
    return larder__ucx_send(s->hub, s->conn->ep, AM_ANSWER, header, sizeof header, bytes, length,
                            NULL, &s->live);
}

int larder__ucx_answer_file(struct larder__ucx_session *s, uint64_t request, int fd,
                            uint64_t offset, size_t length)
{
    if (length == 0) return larder__ucx_answer(s, request, 0, "", 0);
    struct larder__ucx *hub = s->hub;
    struct larder__ucx_mapping *m;
    const void *bytes;
    void *memh;
    int rc = larder__ucx_mapping_get(hub, fd, offset, length, &m, &bytes, &memh);
    if (rc == -EIO) {
        larder__ucx_answer(s, request, -EIO, "the cache file ended early", 26);
        return rc;
    }
    if (rc < 0) {
        char message[128];
        int n = snprintf(message, sizeof message, "cannot map the cache file: %s", strerror(-rc));
        larder__ucx_answer(s, request, rc, message, (size_t)n);
        return rc;
    }
    uint8_t header[ANSWER_HEADER] = {0};
    larder__put_le64(header, request);
    rc = larder__ucx_conn_broken(s->conn)
             ? -ECONNRESET
             : larder__ucx_send(hub, s->conn->ep, AM_ANSWER, header, sizeof header, bytes, length,
                                memh, &s->live);
    larder__ucx_mapping_put(hub, m);
    if (rc == 0) {
        __atomic_add_fetch(&hub->stats.answers, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&hub->stats.answer_bytes, length, __ATOMIC_RELAXED);
    }
    return rc;
}

#else /* built without UCX */

void larder__ucx_set_max_conns(struct larder__ucx *hub, size_t most)
{
    (void)hub, (void)most;
}

int larder__ucx_answer_to(struct larder__ucx *hub, const void *address, size_t length, uint64_t id,
                          const void *bytes, size_t n)
{
    (void)hub, (void)address, (void)length, (void)id, (void)bytes, (void)n;
    return LARDER_EUNSUPPORTED;
}

int larder__ucx_session_new(struct larder__ucx *hub, void *owner, const void *address,
                            size_t length, uint8_t token[LARDER__UCX_TOKEN],
                            struct larder__ucx_session **out)
{
    (void)hub, (void)owner, (void)address, (void)length, (void)token, (void)out;
    return -ENOTSUP;
}
void larder__ucx_session_free(struct larder__ucx_session *s)
{
    (void)s;
}
bool larder__ucx_session_live(struct larder__ucx_session *s)
{
    (void)s;
    return false;
}
void larder__ucx_session_hold(struct larder__ucx_session *s)
{
    (void)s;
}
void larder__ucx_session_release(struct larder__ucx_session *s)
{
    (void)s;
}
int larder__ucx_answer(struct larder__ucx_session *s, uint64_t request, int code, const void *bytes,
                       size_t length)
{
    (void)s, (void)request, (void)code, (void)bytes, (void)length;
    return -ENOTSUP;
}
int larder__ucx_answer_file(struct larder__ucx_session *s, uint64_t request, int fd,
                            uint64_t offset, size_t length)
{
    (void)s, (void)request, (void)fd, (void)offset, (void)length;
    return -ENOTSUP;
}
#endif
