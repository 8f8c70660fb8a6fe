/*
 * transport_ucx.c - the process's UCX hub (transport_ucx.h): the UCP
 * context and worker, the progress thread, and the READ and ANSWER
 * active messages.  The daemon's sessions and the borrower's links are
 * in transport_ucx_session.c.
 *
 * Threads: any thread sends, holding hub->worker_lock (a sleeping,
 * recursive mutex: the worker is UCS_THREAD_MODE_SERIALIZED); only the
 * progress thread progresses the worker, and every callback runs there,
 * under worker_lock.  A waiting thread sleeps on a condition of its own,
 * which only its completion signals (a broadcast to every waiter woke
 * all the node's readers at each answer).  The progress thread polls
 * the worker while events keep coming (and for POLL_US after the last
 * one, 0 by default), then arms the worker (ucp_worker_arm) and sleeps in epoll on the
 * worker's event fd and a wake eventfd that senders write: no timer
 * drives progress.
 *
 * Lock order: hub->conns_lock, then hub->worker_lock, then the mappings' lock
 * (transport_ucx_map.c), then hub->lock.
 * No UCX call is made with hub->lock held.
 */
#include "transport_ucx_internal.h"

#ifdef LARDER_HAVE_UCX

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#define SEND_TIMEOUT_MS 30000 /* an answer the borrower does not take in time is cancelled */
/* How long the progress thread keeps polling after the worker's last
 * event before it sleeps on the event fd (LARDER_UCX_POLL_US).  0 by
 * default: on 2 cores, polling 50 us took the CPU the copying threads
 * needed (serving over shm 2241 MB/s against 3386 without, medians of 4
 * alternated runs; over tcp no difference); a node with cores to spare
 * may trade some for latency. */
#define POLL_US 0
#define MAX_POLL_US 100000

int64_t larder__ucx_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t larder__ucx_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void larder__ucx_wait(struct larder__ucx *hub, pthread_cond_t *cond, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (ms < 1) ms = 1;
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cond, &hub->lock, &ts);
}

void larder__ucx_kick(struct larder__ucx *hub)
{
    uint64_t one = 1;
    if (write(hub->wake, &one, sizeof one) < 0) { /* the count is full: it is awake anyway */
    }
}

/* ---- ANSWER: the borrower's side ----------------------------------------------------- */

/* The pending READ with that id (hub->lock held), or NULL: it gave up. */
static struct larder__ucx_pending *find_pending(struct larder__ucx *hub, uint64_t id)
{
    for (struct larder__ucx_pending *p = hub->pending; p; p = p->next)
        if (p->id == id) return p;
    return NULL;
}

static void finish(struct larder__ucx *hub, struct larder__ucx_pending *p, int rc)
{
    (void)hub;
    p->rc = rc;
    p->state = PENDING_DONE;
    pthread_cond_signal(&p->wake);
}

static void received(void *request, ucs_status_t status, size_t length, void *user_data)
{
    struct larder__ucx_pending *p = user_data;
    struct larder__ucx *hub = p->hub;
    (void)length;
    pthread_mutex_lock(&hub->lock);
    hub->busy--;
    finish(hub, p, status == UCS_OK ? 0 : -ECONNRESET);
    pthread_mutex_unlock(&hub->lock);
    ucp_request_free(request);
}

/* An ANSWER arrived: header {id, code}, then the bytes (or the error's message). */
static ucs_status_t on_answer(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    struct larder__ucx *hub = arg;
    if (header_length != ANSWER_HEADER) return UCS_OK; /* not ours: dropped */
    uint64_t id = larder__le64(header);
    int32_t code = (int32_t)larder__le32((const uint8_t *)header + 8);
    bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
    pthread_mutex_lock(&hub->lock);
    struct larder__ucx_pending *p = find_pending(hub, id);
    if (!p || p->state != PENDING_WAITING) {
        pthread_mutex_unlock(&hub->lock);
        return UCS_OK; /* a READ given up on: its bytes are dropped */
    }
    __atomic_store_n(&p->link->answered_ms, larder__ucx_now_ms(), __ATOMIC_RELAXED);
    if (code < 0) { /* the daemon's error: its message is small, never rendezvous */
        size_t n = rndv ? 0 : length < sizeof p->message - 1 ? length : sizeof p->message - 1;
        memcpy(p->message, data, n);
        p->message[n] = '\0';
        p->answered = true;
        finish(hub, p, code > -1000000 ? code : LARDER_EPROTOCOL);
    } else if (length != p->length) {
        snprintf(p->message, sizeof p->message, "an answer of %zu bytes to a READ of %llu", length,
                 (unsigned long long)p->length);
        finish(hub, p, LARDER_EPROTOCOL);
    } else if (!rndv) {
        __atomic_add_fetch(&hub->stats.eager, 1, __ATOMIC_RELAXED);
        memcpy(p->buf, data, length);
        finish(hub, p, 0);
    } else { /* pulled straight into the reader's buffer, by the progress
              * thread once this callback has returned (UCX's pattern) */
        __atomic_add_fetch(&hub->stats.rendezvous, 1, __ATOMIC_RELAXED);
        p->state = PENDING_RECEIVING; /* the waiter waits on while it is */
        p->descriptor = data;
        p->arrived_us = larder__ucx_now_us();
        p->queued_next = hub->to_receive;
        __atomic_store_n(&hub->to_receive, p, __ATOMIC_RELEASE); /* (start_receives peeks) */
        hub->busy++;
        pthread_mutex_unlock(&hub->lock);
        return UCS_INPROGRESS;
    }
    pthread_mutex_unlock(&hub->lock);
    return UCS_OK;
}

/* Start the rendezvous receives on_answer queued (progress thread, outside
 * any callback, worker_lock held): whether there were any. */
static bool start_receives(struct larder__ucx *hub)
{
    /* a look without the lock first: this runs between every two progress calls */
    if (!__atomic_load_n(&hub->to_receive, __ATOMIC_ACQUIRE)) return false;
    pthread_mutex_lock(&hub->lock);
    struct larder__ucx_pending *list = hub->to_receive;
    __atomic_store_n(&hub->to_receive, NULL, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&hub->lock);
    bool any = list != NULL;
    int64_t now = any ? larder__ucx_now_us() : 0;
    while (list) {
        struct larder__ucx_pending *p = list;
        list = p->queued_next;
        __atomic_add_fetch(&hub->stats.receive_wait_us, (uint64_t)(now - p->arrived_us),
                           __ATOMIC_RELAXED);
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                  UCP_OP_ATTR_FIELD_USER_DATA |
                                                  UCP_OP_ATTR_FIELD_DATATYPE,
                                  .cb.recv_am = received,
                                  .user_data = p,
                                  .datatype = ucp_dt_make_contig(1)};
        ucs_status_ptr_t r =
            ucp_am_recv_data_nbx(hub->worker, p->descriptor, p->buf, p->length, &rp);
        if (r == NULL || UCS_PTR_IS_ERR(r)) { /* done at once, or failed: no callback */
            pthread_mutex_lock(&hub->lock);
            hub->busy--;
            finish(hub, p, r == NULL ? 0 : -ECONNRESET);
            pthread_mutex_unlock(&hub->lock);
        }
    }
    return any;
}

/* ---- READ: the daemon's side ---------------------------------------------------------- */

/* A READ arrived: header {token, id, the READ frame's payload}; no data. */
static ucs_status_t on_read(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    struct larder__ucx *hub = arg;
    (void)data, (void)param;
    if (header_length != READ_HEADER || length != 0) {
        hub->dropped++;
        return UCS_OK;
    }
    const uint8_t *h = header;
    struct larder__read read;
    struct larder__ucx_session *s = larder__ucx_session_find(hub, h);
    if (!s) { /* no session: an endpoint that never authenticated gets nothing */
        hub->dropped++;
        return UCS_OK;
    }
    uint64_t id = larder__le64(h + LARDER__UCX_TOKEN);
    if (larder__wire_read(h + LARDER__UCX_TOKEN + 8, READ_PAYLOAD, &read) < 0) {
        larder__ucx_answer(s, id, LARDER_EPROTOCOL, "a malformed READ", 16);
    } else if (hub->refusing) { /* larder__ucx_quiesce: what READs use is going away */
        __atomic_store_n(&hub->refused_ms, larder__ucx_now_ms(), __ATOMIC_RELAXED);
        larder__ucx_answer(s, id, -ESHUTDOWN, "the daemon is stopping", 22);
    } else if (hub->serve) {
        hub->serve(s->owner, s, id, &read);
    }
    larder__ucx_session_release(s); /* the callee took its own */
    return UCS_OK;
}

/* ---- sends ---------------------------------------------------------------------------- */

struct send_wait {
    struct larder__ucx *hub;
    bool done;
    ucs_status_t status;
    pthread_cond_t wake; /* signalled by `sent` */
};

static void sent(void *request, ucs_status_t status, void *user_data)
{
    struct send_wait *w = user_data;
    (void)request;
    pthread_mutex_lock(&w->hub->lock);
    w->hub->busy--;
    w->status = status;
    w->done = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->hub->lock);
}

/* A send from the progress thread itself (an error answer from on_read),
 * which must not wait: header and bytes copied, freed when UCX is done. */
static void sent_copy(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    free(user_data);
    ucp_request_free(request);
}

static int send_from_progress(struct larder__ucx *hub, ucp_ep_h ep, unsigned id, const void *header,
                              size_t header_length, const void *bytes, size_t length)
{
    /* worker_lock is held: this runs inside a callback */
    uint8_t *copy = malloc(header_length + length + 1);
    if (!copy) return -ENOMEM;
    memcpy(copy, header, header_length);
    if (length) memcpy(copy + header_length, bytes, length);
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                 UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_DATATYPE,
                                 .cb.send = sent_copy,
                                 .user_data = copy,
                                 .datatype = ucp_dt_make_contig(1)};
    ucs_status_ptr_t r =
        ucp_am_send_nbx(ep, id, copy, header_length, copy + header_length, length, &param);
    if (r == NULL || UCS_PTR_IS_ERR(r))
        free(copy);
    else
        larder__ucx_kick(hub); /* one more pass before the thread sleeps (transport_ucx_answer.c) */
    return UCS_PTR_IS_ERR(r) ? -ECONNRESET : 0;
}

void larder__ucx_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

int larder__ucx_send(struct larder__ucx *hub, ucp_ep_h ep, unsigned id, const void *header,
                     size_t header_length, const void *bytes, size_t length, void *memh,
                     const bool *live)
{
    if (hub->running && pthread_equal(pthread_self(), hub->thread))
        return send_from_progress(hub, ep, id, header, header_length, bytes, length);
    struct send_wait w = {.hub = hub};
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE,
        .cb.send = sent,
        .user_data = &w,
        .flags = 0, /* the header stays ours until the send is done: we wait for it */
        .datatype = ucp_dt_make_contig(1)};
    if (memh) { /* the bytes lie in memory registered once (transport_ucx_map.c) */
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh = memh;
    }
    larder__ucx_cond_init(&w.wake);
    pthread_mutex_lock(&hub->worker_lock);
    pthread_mutex_lock(&hub->lock);
    hub->busy++; /* the progress thread polls until it is done */
    pthread_mutex_unlock(&hub->lock);
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, header, header_length, bytes, length, &param);
    pthread_mutex_unlock(&hub->worker_lock);
    int rc = 0;
    pthread_mutex_lock(&hub->lock);
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        hub->busy--;
        if (UCS_PTR_IS_ERR(r)) rc = -ECONNRESET;
    } else {
        pthread_mutex_unlock(&hub->lock);
        larder__ucx_kick(hub); /* the progress thread may sleep: the rest is its */
        pthread_mutex_lock(&hub->lock);
        /* a borrower that stopped taking its answer (gone, on a transport
         * that cannot tell) is given SEND_TIMEOUT_MS, then cancelled: UCX
         * lets go of the bytes once the cancel completes */
        int64_t deadline = larder__ucx_now_ms() + SEND_TIMEOUT_MS;
        bool cancelled = false;
        while (!w.done) {
            larder__ucx_wait(hub, &w.wake, 100);
            /* or at once when its session was forgotten (the borrower's
             * connection closed: it died, and shared memory cannot tell) */
            if (!w.done && !cancelled && (larder__ucx_now_ms() > deadline || (live && !*live))) {
                cancelled = true;
                pthread_mutex_unlock(&hub->lock);
                pthread_mutex_lock(&hub->worker_lock);
                ucp_request_cancel(hub->worker, r);
                pthread_mutex_unlock(&hub->worker_lock);
                larder__ucx_kick(hub);
                pthread_mutex_lock(&hub->lock);
            }
        }
        if (w.status != UCS_OK) rc = -ECONNRESET;
    }
    pthread_mutex_unlock(&hub->lock);
    if (r && !UCS_PTR_IS_ERR(r)) {
        pthread_mutex_lock(&hub->worker_lock);
        ucp_request_free(r);
        pthread_mutex_unlock(&hub->worker_lock);
    }
    pthread_cond_destroy(&w.wake);
    return rc;
}

/* ---- the hub -------------------------------------------------------------------------- */

/* One pass over the worker (worker_lock held): whether anything happened.
 * The READs readers queued and the rendezvous receives on_answer asked
 * for are started between each two progress calls, not once the worker
 * ran dry: with 8 answers streaming it seldom does, and an answer whose
 * pull waited for that sat idle while others' bytes were copied. */
static bool progress_once(struct larder__ucx *hub)
{
    bool any = false;
    for (;;) {
        bool step = larder__ucx_outbox_post(hub);
        if (ucp_worker_progress(hub->worker)) step = true;
        if (start_receives(hub)) step = true;
        if (!step) return any;
        any = true;
    }
}

static void *progress_main(void *arg)
{
    struct larder__ucx *hub = arg;
    struct epoll_event events[2];
    int64_t last_event_us = larder__ucx_now_us();
    while (!__atomic_load_n(&hub->stopping, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&hub->worker_lock);
        bool any = progress_once(hub);
        pthread_mutex_unlock(&hub->worker_lock);
        if (__atomic_exchange_n(&hub->reap_conns, false, __ATOMIC_ACQ_REL))
            larder__ucx_conns_reap(hub);
        larder__ucx_answers_sweep(hub);
        __atomic_add_fetch(&hub->stats.passes, 1, __ATOMIC_RELAXED);
        int64_t now = larder__ucx_now_us();
        if (any) last_event_us = now;
        /* polled while the next step of a transfer is likely near */
        if (now - last_event_us < hub->poll_us) continue;
        pthread_mutex_lock(&hub->worker_lock);
        ucs_status_t armed = ucp_worker_arm(hub->worker);
        pthread_mutex_unlock(&hub->worker_lock);
        if (armed == UCS_ERR_BUSY) { /* events came meanwhile */
            last_event_us = now;
            continue;
        }
        /* asleep until the worker's event fd or a sender wakes it; the
         * timeout only bounds how late a reap of failed endpoints runs */
        __atomic_add_fetch(&hub->stats.sleeps, 1, __ATOMIC_RELAXED);
        int n = epoll_wait(hub->epoll, events, 2, 100);
        for (int i = 0; i < n; i++) {
            uint64_t count;
            if (events[i].data.fd == hub->wake && read(hub->wake, &count, sizeof count) < 0) {
            }
        }
        last_event_us = larder__ucx_now_us(); /* woken: poll a while again */
    }
    return NULL;
}

/* Which transports UCX would use, from UCX_TLS (UCX's own choice when unset). */
static void describe(struct larder__ucx *hub)
{
    const char *tls = getenv("UCX_TLS");
    snprintf(hub->transports, sizeof hub->transports, "%s", tls && *tls ? tls : "UCX's choice");
}

int larder__ucx_start(struct larder__ucx **out)
{
    static pthread_once_t log_once = PTHREAD_ONCE_INIT;
    pthread_once(&log_once, larder__ucx_log_install);
    struct larder__ucx *hub = calloc(1, sizeof *hub);
    if (!hub) return -ENOMEM;
    hub->epoll = hub->wake = -1;
    hub->poll_us = POLL_US;
    hub->num_lanes = larder__ucx_lanes_config();
    pthread_mutex_init(&hub->lanes_lock, NULL);
    const char *poll = getenv("LARDER_UCX_POLL_US");
    if (poll && *poll) {
        char *end;
        long us = strtol(poll, &end, 10);
        if (*end == '\0' && us >= 0 && us <= MAX_POLL_US) hub->poll_us = us;
    }
    pthread_mutexattr_t recursive;
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&hub->worker_lock, &recursive);
    pthread_mutexattr_destroy(&recursive);
    pthread_mutex_init(&hub->lock, NULL);
    pthread_mutex_init(&hub->conns_lock, NULL);
    /* mt_workers_shared: ucp_mem_map (transport_ucx_map.c) is called from
     * the daemon's workers, outside worker_lock */
    ucp_params_t params = {.field_mask =
                               UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                           .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                           .mt_workers_shared = 1};
    ucp_config_t *config = NULL;
    int rc = 0;
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK ||
        ucp_init(&params, config, &hub->context) != UCS_OK) {
        rc = larder__fail(-ENOTSUP, "UCX: no context (check UCX_TLS and UCX_NET_DEVICES)");
        hub->context = NULL;
    }
    if (config) ucp_config_release(config);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    if (rc == 0 && ucp_worker_create(hub->context, &wp, &hub->worker) != UCS_OK) {
        rc = larder__fail(-ENOTSUP, "UCX: no worker (no usable transport: check UCX_TLS)");
        hub->worker = NULL;
    }
    if (rc == 0 &&
        ucp_worker_get_address(hub->worker, &hub->address, &hub->address_length) != UCS_OK) {
        rc = larder__fail(-ENOTSUP, "UCX: the worker has no address");
        hub->address = NULL;
    }
    if (rc == 0 && hub->address_length > LARDER__UCX_MAX_ADDRESS)
        rc = larder__fail(-ENOTSUP, "UCX: a worker address of %zu bytes (at most %d)",
                          hub->address_length, LARDER__UCX_MAX_ADDRESS);
    int efd = -1;
    if (rc == 0 && ucp_worker_get_efd(hub->worker, &efd) != UCS_OK)
        rc = larder__fail(-ENOTSUP, "UCX: the worker has no event fd");
    if (rc == 0) {
        hub->epoll = epoll_create1(EPOLL_CLOEXEC);
        hub->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event a = {.events = EPOLLIN, .data.fd = efd};
        struct epoll_event b = {.events = EPOLLIN, .data.fd = hub->wake};
        if (hub->epoll < 0 || hub->wake < 0 || epoll_ctl(hub->epoll, EPOLL_CTL_ADD, efd, &a) < 0 ||
            epoll_ctl(hub->epoll, EPOLL_CTL_ADD, hub->wake, &b) < 0)
            rc = larder__fail(-errno, "UCX: epoll: %s", strerror(errno));
    }
    ucp_am_handler_param_t answer = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                                   UCP_AM_HANDLER_PARAM_FIELD_CB |
                                                   UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                     .id = AM_ANSWER,
                                     .cb = on_answer,
                                     .arg = hub};
    ucp_am_handler_param_t request = answer;
    request.id = AM_READ;
    request.cb = on_read;
    if (rc == 0 && (ucp_worker_set_am_recv_handler(hub->worker, &answer) != UCS_OK ||
                    ucp_worker_set_am_recv_handler(hub->worker, &request) != UCS_OK))
        rc = larder__fail(-ENOTSUP, "UCX: no active messages");
    if (rc == 0 && larder__ucx_mappings_new(hub) < 0) rc = larder__fail(-ENOMEM, "out of memory");
    if (rc == 0 && pthread_create(&hub->thread, NULL, progress_main, hub) != 0)
        rc = larder__fail(-EAGAIN, "UCX: no progress thread");
    if (rc < 0) {
        larder__ucx_stop(hub);
        return rc;
    }
    hub->running = true;
    describe(hub);
    *out = hub;
    return 0;
}

void larder__ucx_stop(struct larder__ucx *hub)
{
    if (!hub) return;
    larder__ucx_lanes_stop(hub); /* (their links were freed with this hub's) */
    if (hub->running) {
        __atomic_store_n(&hub->stopping, true, __ATOMIC_RELEASE);
        larder__ucx_kick(hub);
        pthread_join(hub->thread, NULL);
    }
    /* before their mappings go; an answer UCX still holds even so keeps
     * the whole hub (its completion would reach the mappings, the
     * endpoints and the worker): the process is ending */
    larder__ucx_outbox_drop(hub);
    /* the progress below may run on_read: no READ reaches its server now */
    hub->refusing = true;
    if (hub->worker && larder__ucx_answers_end(hub) > 0) {
        larder__log(LARDER_LOG_WARN, "UCX: answers still in flight at the stop: the hub is kept");
        return;
    }
    if (hub->parent)
        larder__ucx_lanes_add_stats(hub->parent, hub);
    else
        larder__ucx_log_stats(hub);
    larder__ucx_mappings_free(hub);
    if (hub->worker) larder__ucx_conns_close(hub);
    if (hub->address) ucp_worker_release_address(hub->worker, hub->address);
    if (hub->worker) ucp_worker_destroy(hub->worker);
    if (hub->context) ucp_cleanup(hub->context);
    if (hub->epoll >= 0) close(hub->epoll);
    if (hub->wake >= 0) close(hub->wake);
    pthread_mutex_destroy(&hub->worker_lock);
    pthread_mutex_destroy(&hub->lock);
    pthread_mutex_destroy(&hub->conns_lock);
    pthread_mutex_destroy(&hub->lanes_lock);
    free(hub);
}

const char *larder__ucx_transports(const struct larder__ucx *hub)
{
    return hub->transports;
}

void larder__ucx_address(const struct larder__ucx *hub, const void **address, size_t *length)
{
    *address = hub->address;
    *length = hub->address_length;
}

void larder__ucx_serve(struct larder__ucx *hub, larder__ucx_read_fn *fn)
{
    hub->serve = fn;
}

size_t larder__ucx_num_conns(struct larder__ucx *hub)
{
    pthread_mutex_lock(&hub->conns_lock);
    size_t n = hub->num_conns;
    pthread_mutex_unlock(&hub->conns_lock);
    return n;
}

#else /* built without UCX */

#include <errno.h>

int larder__ucx_start(struct larder__ucx **out)
{
    (void)out;
    return larder__fail(-ENOTSUP, "this larder was built without UCX (libucx-dev)");
}
void larder__ucx_stop(struct larder__ucx *hub)
{
    (void)hub;
}
const char *larder__ucx_transports(const struct larder__ucx *hub)
{
    (void)hub;
    return "";
}
void larder__ucx_address(const struct larder__ucx *hub, const void **address, size_t *length)
{
    (void)hub;
    *address = NULL;
    *length = 0;
}
void larder__ucx_serve(struct larder__ucx *hub, larder__ucx_read_fn *fn)
{
    (void)hub, (void)fn;
}
size_t larder__ucx_num_conns(struct larder__ucx *hub)
{
    (void)hub;
    return 0;
}

#endif
