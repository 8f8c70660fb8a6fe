/*
 * transport_ucx_peer.c - a peer endpoint's UCX data path (docs/protocol.md,
 * "Transports").  The first READ opens a control connection of its own
 * (dialled, HELLO and the secret's proofs, OPEN: endpoint.c's), sends
 * UCX_OFFER with this process's worker address, and takes the daemon's
 * address and session token from its UCX_ACCEPT; every READ then goes
 * over the link, from any number of threads at once.  There is one such
 * path per lane of the hub (transport_ucx_lanes.c: each its own worker,
 * control connection and session), made at the first READ sent over
 * it, and READs take the lanes in turn, so that more than one thread
 * receives their answers.  The session lives as long as the control
 * connection: one the daemon closed (or a link that broke) is replaced at
 * the next READ.  A daemon that answers the offer with an ERROR (it runs
 * --transport tcp), or does not know the frame (an older build closes the
 * connection), is read over TCP, and asked again after TCP_RETRY_MS.
 *
 * Lanes fail one by one.  A path is made without the peer's lock (the
 * lane marked as being made; READs meanwhile take another lane's path, or
 * wait for one being made when no lane has one); a lane whose path could
 * not be made is not tried again for UCX_RETRY_MS (its READs take another
 * lane); a lane whose control connection closed under a READ is dropped
 * alone; a lane whose hub did not start is never made (its READs take the
 * others: no second session for the same worker).  A READ is the peer's
 * fault only when no lane has a path and none can be made; a failure of
 * the protocol (-ESHUTDOWN, a malformed answer, no answer) drops every
 * lane: READs over TCP for UCX_RETRY_MS.
 */
#include "transport_ucx_peer.h"
#include "endpoint.h"
#include "transport_ucx.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TCP_RETRY_MS 60000 /* a peer without UCX is asked again after this */
#define UCX_RETRY_MS 10000 /* after the UCX path failed, READs go over TCP this long */
#define NEVER INT64_MAX    /* a lane's retry time when its hub did not start */
#define LANE_NONE 2        /* make_path: the lane's hub did not start (it is the peer's own) */

enum { STATE_UNKNOWN, STATE_UCX, STATE_TCP };

struct path {
    struct larder__ucx_link *link;
    int fd;   /* the control connection: its session lives while it does */
    int refs; /* READs on it, plus the peer's while it is current */
};

struct larder__ucx_peer {
    struct larder__ucx *hub;
    struct larder__endpoint *endpoint;
    pthread_mutex_t lock; /* all below but next_lane; never held while a path is made */
    pthread_cond_t made;  /* a lane's path was made, or failed to be */
    int state;
    int lanes;                                    /* larder__ucx_lanes(hub) */
    struct path *paths[LARDER__UCX_MAX_LANES];    /* one per lane, made at its first READ */
    bool making[LARDER__UCX_MAX_LANES];           /* the lane's path is being made */
    int64_t lane_retry_ms[LARDER__UCX_MAX_LANES]; /* a lane that failed: not made before */
    unsigned next_lane;                           /* the next READ's (atomic) */
    int64_t retry_ms;                             /* STATE_TCP, or failed: when to ask again */
    bool failed;                                  /* the UCX path failed: TCP until retry_ms */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int larder__ucx_peer_new(struct larder__ucx *hub, struct larder__endpoint *endpoint,
                         struct larder__ucx_peer **out)
{
    struct larder__ucx_peer *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->hub = hub;
    p->endpoint = endpoint;
    p->lanes = larder__ucx_lanes(hub);
    if (p->lanes < 1) p->lanes = 1;
    if (p->lanes > LARDER__UCX_MAX_LANES) p->lanes = LARDER__UCX_MAX_LANES;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->made, NULL);
    *out = p;
    return 0;
}

static void path_release(struct path *path)
{
    if (!path || --path->refs > 0) return; /* under the peer's lock */
    larder__ucx_link_free(path->link);
    close(path->fd);
    free(path);
}

void larder__ucx_peer_free(struct larder__ucx_peer *p)
{
    if (!p) return;
    for (int lane = 0; lane < p->lanes; lane++)
        path_release(p->paths[lane]);
    pthread_cond_destroy(&p->made);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

const char *larder__ucx_peer_transport(struct larder__ucx_peer *p)
{
    /* without the lock (a STAT must not wait) */
    int state = __atomic_load_n(&p->state, __ATOMIC_RELAXED);
    return state == STATE_UCX ? "ucx" : state == STATE_TCP ? "tcp" : "ucx?";
}

static int send_all(int fd, const void *buf, size_t length)
{
    const uint8_t *b = buf;
    while (length) {
        ssize_t n = send(fd, b, length, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 && errno != EAGAIN ? -errno : -ETIMEDOUT;
        b += n, length -= (size_t)n;
    }
    return 0;
}

static int recv_all(int fd, void *buf, size_t length)
{
    uint8_t *b = buf;
    while (length) {
        ssize_t n = recv(fd, b, length, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno == EAGAIN ? -ETIMEDOUT : -errno;
        if (n == 0) return -ECONNRESET;
        b += n, length -= (size_t)n;
    }
    return 0;
}

/*
 * Ask for the lane's UCX path on a fresh control connection (without the
 * peer's lock): 0 with *out; a negative code (the peer failed);
 * LARDER__UCX_USE_TCP; or LANE_NONE (the lane's hub did not start).
 */
static int make_path(struct larder__ucx_peer *p, int lane, struct path **out, int64_t deadline_ms)
{
    struct larder__ucx *hub = larder__ucx_lane(p->hub, lane); /* may start it: slow */
    if (lane > 0 && hub == p->hub) return LANE_NONE;
    int timeout_ms;
    int fd = larder__endpoint_connect(p->endpoint, &timeout_ms, deadline_ms);
    if (fd < 0) return fd;
    if (deadline_ms) { /* the whole path by the deadline: the offer's answer too */
        int64_t left = deadline_ms - now_ms();
        if (left < timeout_ms) timeout_ms = left > 0 ? (int)left : 0;
    }
    const void *address;
    size_t length;
    larder__ucx_address(hub, &address, &length);
    uint8_t *frame = malloc(LARDER__WIRE_HEADER + LARDER__WIRE_PROOF + LARDER__WIRE_MAX_UCX);
    int rc = frame ? 0 : -ENOMEM;
    if (rc == 0) {
        larder__wire_encode_header(frame, LARDER__WIRE_HEADER, LARDER__UCX_OFFER, (uint32_t)length,
                                   4);
        memcpy(frame + LARDER__WIRE_HEADER, address, length);
        rc = send_all(fd, frame, LARDER__WIRE_HEADER + length);
    }
    struct larder__frame answer;
    struct pollfd poll_fd = {.fd = fd, .events = POLLIN};
    if (rc == 0 && poll(&poll_fd, 1, timeout_ms) != 1) rc = -ETIMEDOUT;
    if (rc == 0) rc = recv_all(fd, frame, LARDER__WIRE_HEADER);
    if (rc == 0) rc = larder__wire_header(frame, LARDER__WIRE_HEADER, &answer);
    /* only the offer's answer (its request), and only what this buffer
     * holds: the header's check bounds a length by the frame's type, and a
     * DATA or STATS frame may be megabytes (one was received past this
     * buffer: found by review) */
    if (rc == 0 && (answer.request != 4 ||
                    (answer.type != LARDER__UCX_ACCEPT && answer.type != LARDER__ERROR) ||
                    answer.length > LARDER__WIRE_PROOF + LARDER__WIRE_MAX_UCX))
        rc = larder__fail(LARDER_EPROTOCOL,
                          "a frame of type %u and %u bytes for request %llu "
                          "answered UCX_OFFER",
                          answer.type, answer.length, (unsigned long long)answer.request);
    if (rc == 0) rc = recv_all(fd, frame + LARDER__WIRE_HEADER, answer.length);
    if (rc == -ETIMEDOUT) { /* a hung peer: its failure */
        free(frame);
        close(fd);
        return rc;
    }
    struct path *path = NULL;
    if (rc == 0 && answer.type == LARDER__UCX_ACCEPT && answer.length > LARDER__WIRE_PROOF) {
        path = calloc(1, sizeof *path);
        const uint8_t *payload = frame + LARDER__WIRE_HEADER;
        rc = path ? larder__ucx_link_new(hub, payload + LARDER__WIRE_PROOF,
                                         answer.length - LARDER__WIRE_PROOF, payload, &path->link)
                  : -ENOMEM;
    } else if (rc == 0) {
        rc = LARDER_EUNSUPPORTED; /* an ERROR: this daemon has no UCX path */
    }
    free(frame);
    if (rc < 0) { /* no UCX here (or a build that does not know the frame): TCP */
        larder__log(LARDER_LOG_INFO, "peer %s: no UCX data path (%s): reading it over TCP",
                    larder__endpoint_address(p->endpoint), larder_strerror(rc));
        free(path);
        close(fd);
        return LARDER__UCX_USE_TCP;
    }
    path->fd = fd;
    path->refs = 1;
    larder__ucx_link_watch(path->link, fd); /* its READs fail once it closes */
    *out = path;
    return 0;
}

/* Whether the control connection was closed (the daemon's idle timeout, or it went away). */
static bool hung_up(int fd)
{
    struct pollfd poll_fd = {.fd = fd, .events = POLLRDHUP};
    return poll(&poll_fd, 1, 0) == 1 && poll_fd.revents & (POLLRDHUP | POLLHUP | POLLERR);
}

/* Let go of every lane's path (p->lock held). */
static void drop_paths(struct larder__ucx_peer *p)
{
    for (int lane = 0; lane < p->lanes; lane++) {
        path_release(p->paths[lane]);
        p->paths[lane] = NULL;
    }
}

/* The UCX path failed, not necessarily the peer (p->lock held): every
 * lane's path goes, and READs go over TCP (whose failure is the peer's)
 * for UCX_RETRY_MS rather than each make a path again. */
static void mark_failed(struct larder__ucx_peer *p)
{
    drop_paths(p);
    p->retry_ms = now_ms() + UCX_RETRY_MS;
    p->failed = true;
}

/* Let go of the lane's path if its link broke or its control connection closed (p->lock held). */
static void drop_if_gone(struct larder__ucx_peer *p, int lane)
{
    struct path *path = p->paths[lane];
    if (path && (larder__ucx_link_broken(path->link) || hung_up(path->fd))) {
        path_release(path);
        p->paths[lane] = NULL;
    }
}

/* Whether the lane's path may be made now (p->lock held). */
static bool can_make(const struct larder__ucx_peer *p, int lane)
{
    return !p->paths[lane] && !p->making[lane] && now_ms() >= p->lane_retry_ms[lane];
}

static bool any_live(const struct larder__ucx_peer *p)
{
    for (int lane = 0; lane < p->lanes; lane++)
        if (p->paths[lane]) return true;
    return false;
}

static bool any_making(const struct larder__ucx_peer *p)
{
    for (int lane = 0; lane < p->lanes; lane++)
        if (p->making[lane]) return true;
    return false;
}

/*
 * Make the lane's path (p->lock held, and let go meanwhile): 0 with
 * p->paths[lane]; LARDER__UCX_USE_TCP (the peer has no UCX path); or the
 * lane has none for now (LANE_NONE, or the negative code of its failure):
 * it waits for its own retry time while the others are used.
 */
static int make_lane(struct larder__ucx_peer *p, int lane, int64_t deadline_ms)
{
    p->making[lane] = true;
    pthread_mutex_unlock(&p->lock);
    struct path *path = NULL;
    int rc = make_path(p, lane, &path, deadline_ms);
    pthread_mutex_lock(&p->lock);
    p->making[lane] = false;
    pthread_cond_broadcast(&p->made);
    if (rc == 0) {
        p->paths[lane] = path;
        p->lane_retry_ms[lane] = 0;
        p->failed = false;
        __atomic_store_n(&p->state, STATE_UCX, __ATOMIC_RELAXED);
    } else if (rc == LANE_NONE) {
        p->lane_retry_ms[lane] = NEVER;
    } else if (rc == LARDER__UCX_USE_TCP && any_live(p)) {
        p->lane_retry_ms[lane] = now_ms() + TCP_RETRY_MS; /* refused on this lane only */
        rc = LANE_NONE;
    } else if (rc == LARDER__UCX_USE_TCP) {
        __atomic_store_n(&p->state, STATE_TCP, __ATOMIC_RELAXED);
        p->retry_ms = now_ms() + TCP_RETRY_MS;
    } else {
        p->lane_retry_ms[lane] = now_ms() + UCX_RETRY_MS;
        larder__log(LARDER_LOG_INFO, "peer %s: no UCX path on lane %d (%s): not tried for %d s",
                    larder__endpoint_address(p->endpoint), lane, larder_strerror(rc),
                    UCX_RETRY_MS / 1000);
    }
    return rc;
}

/*
 * The path of a READ that would take lane `first` (p->lock held, let go
 * while a path is made): that lane's if it has one or can make one, else
 * another lane's, else one being made is waited for.  0 with *out (the
 * lane); LARDER__UCX_USE_TCP; or the failure of the last lane tried, when
 * no lane has a path and none can be made.
 */
static int pick_path(struct larder__ucx_peer *p, int first, int64_t deadline_ms, int *out)
{
    int failure = 0;
    for (;;) {
        if ((p->state == STATE_TCP || p->failed) && now_ms() < p->retry_ms)
            return LARDER__UCX_USE_TCP;
        drop_if_gone(p, first);
        if (can_make(p, first)) {
            int rc = make_lane(p, first, deadline_ms);
            if (rc == LARDER__UCX_USE_TCP) return rc;
            if (rc < 0) failure = rc;
        }
        for (int i = 0; i < p->lanes; i++) {
            int lane = (first + i) % p->lanes;
            if (lane != first) drop_if_gone(p, lane);
            if (p->paths[lane]) {
                *out = lane;
                return 0;
            }
        }
        if (any_making(p)) {
            pthread_cond_wait(&p->made, &p->lock);
            continue;
        }
        int other = -1; /* none live: one whose retry time has come? */
        for (int lane = 0; lane < p->lanes && other < 0; lane++)
            if (can_make(p, lane)) other = lane;
        if (other < 0) return failure < 0 ? failure : LARDER__UCX_USE_TCP;
        first = other;
    }
}

int larder__ucx_peer_prepare(struct larder__ucx_peer *p, int64_t deadline_ms)
{
    pthread_mutex_lock(&p->lock);
    int rc = 0, failure = 0;
    for (int lane = 0; lane < p->lanes && rc == 0; lane++) {
        if ((p->state == STATE_TCP || p->failed) && now_ms() < p->retry_ms) {
            rc = LARDER__UCX_USE_TCP;
            break;
        }
        drop_if_gone(p, lane);
        if (!can_make(p, lane)) continue;
        int made = make_lane(p, lane, deadline_ms);
        if (made == LARDER__UCX_USE_TCP) rc = made;
        if (made < 0) failure = made;
    }
    while (rc == 0 && any_making(p)) /* a READ's: its outcome is ours */
        pthread_cond_wait(&p->made, &p->lock);
    if (rc == 0 && !any_live(p)) rc = failure < 0 ? failure : LARDER__UCX_USE_TCP;
    if (rc < 0) mark_failed(p); /* as a READ's failed path is */
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int larder__ucx_peer_read(struct larder__ucx_peer *p, const struct larder__read *read, void *buf,
                          int wait_ms, int patience_ms, bool *fault)
{
    *fault = false;
    int lane = (int)(__atomic_fetch_add(&p->next_lane, 1, __ATOMIC_RELAXED) % (unsigned)p->lanes);
    pthread_mutex_lock(&p->lock);
    int rc = pick_path(p, lane, 0, &lane);
    if (rc != 0) { /* a fault only when no lane has a path and none could be made */
        pthread_mutex_unlock(&p->lock);
        *fault = rc != LARDER__UCX_USE_TCP;
        return rc;
    }
    struct path *path = p->paths[lane];
    path->refs++;
    pthread_mutex_unlock(&p->lock);
    rc = larder__ucx_link_read(path->link, read, buf, wait_ms, patience_ms, fault);
    pthread_mutex_lock(&p->lock);
    if (*fault && p->paths[lane] == path && rc == -ECONNRESET) {
        /* this lane's control connection closed, or its link broke: the
         * lane alone goes (made again at its next READ); the others stay */
        larder__log(LARDER_LOG_INFO, "peer %s: UCX lane %d closed: this READ over TCP",
                    larder__endpoint_address(p->endpoint), lane);
        path_release(path);
        p->paths[lane] = NULL;
    } else if (*fault && p->paths[lane] == path) {
        /* a failure of the protocol (-ESHUTDOWN, a malformed answer, no
         * answer): this READ and those of the next UCX_RETRY_MS over TCP */
        larder__log(LARDER_LOG_WARN, "peer %s: the UCX path failed (%s): over TCP for %d s",
                    larder__endpoint_address(p->endpoint), larder_strerror(rc),
                    UCX_RETRY_MS / 1000);
        mark_failed(p);
    }
    path_release(path);
    pthread_mutex_unlock(&p->lock);
    if (*fault) {
        *fault = false;
        return LARDER__UCX_USE_TCP;
    }
    return rc;
}
