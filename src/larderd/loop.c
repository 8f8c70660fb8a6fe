/*
 * loop.c - the daemon's one event-loop thread: listeners, who may connect,
 * connections and their output queues, and the bounds that keep one
 * client from taking the node:
 *
 *   - at most --max-connections at once; more are accepted and closed at
 *     once, without touching the others;
 *   - per connection, a memory budget (--connection-memory) of READ lengths
 *     in flight plus queued output: over it, the connection is not read
 *     until its answers drain (backpressure, not an error);
 *   - a connection with no whole frame and nothing in flight for
 *     --idle-timeout, with output the client does not take for that long,
 *     or with a frame begun and not finished for 10 s, is dropped;
 *   - on the Unix socket, only the allowed uids and gids (SO_PEERCRED);
 *     without a cluster secret, peers only from loopback addresses unless
 *     --insecure-peers.
 *
 * A refused client gets one ERROR frame (LARDER_EDENIED) and is closed.
 */
#include "larderd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* epoll's data for the fds that are not connections */
static char unix_tag, tcp_tag, wake_tag;

/* ---- connections -------------------------------------------------------------------- */

/* Register what the loop waits for on c: input unless paused or closing,
 * output while some is queued (no system call when that is what it
 * waits for already: flush() runs after every event on c). */
static void watch(struct connection *c, bool pending)
{
    uint32_t events = (c->paused ? 0u : EPOLLIN) | (pending ? EPOLLOUT : 0u);
    if (events == c->watched) return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(c->daemon->epoll, EPOLL_CTL_MOD, c->fd, &ev) == 0) c->watched = events;
}

/* Send what the socket takes; false when the connection is broken. */
static bool flush(struct connection *c)
{
    pthread_mutex_lock(&c->lock);
    bool ok = true, progress = false, whole = false, had = c->head != NULL;
    while (c->head) {
        struct output *o = c->head;
        size_t left = o->length - o->sent + o->file_length;
        int rc = output_push(c->fd, o);
        progress = progress || o->length - o->sent + o->file_length < left;
        if (rc <= 0) {
            ok = rc == 0;
            break;
        }
        c->head = o->next;
        if (!c->head) c->tail = NULL;
        output_free(c, o);
        whole = true;
    }
    bool pending = c->head != NULL;
    if (whole) c->unsent_since_ms = pending ? now_ms() : 0;
    bool over = connection_held_back(c);
    pthread_mutex_unlock(&c->lock);
    int64_t now = now_ms();
    if (!pending && had) /* an answer went out whole */
        __atomic_store_n(&c->last_active_ms, now, __ATOMIC_RELAXED);
    if (!pending || progress)
        c->blocked_since_ms = pending ? now : 0;
    else if (!c->blocked_since_ms)
        c->blocked_since_ms = now;
    if (c->paused && !over) c->paused = false; /* drained: read it again */
    watch(c, pending);
    return ok;
}

/* Close a refused connection politely: what the client sent is read and
 * discarded first, so that closing does not reset the connection before
 * it reads its ERROR. */
static void drain_and_close(int fd)
{
    shutdown(fd, SHUT_WR);
    char sink[4096];
    for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {
    }
    close(fd);
}

/* Take c off the loop and close it; it is freed once the batch of events
 * that may still name it is handled (release_dropped). */
static void drop(struct connection *c)
{
    struct larderd *d = c->daemon;
    if (c->dropped) return;
    ucx_forget(c); /* its UCX session's token names nothing from now on */
    epoll_ctl(d->epoll, EPOLL_CTL_DEL, c->fd, NULL);
    /* under its lock: a worker sends an answer itself only to a connection
     * not yet dropped, holding the lock (connection.c), so never on an fd
     * closed here and perhaps taken again by another connection */
    pthread_mutex_lock(&c->lock);
    c->dropped = true;
    if (c->closing)
        drain_and_close(c->fd);
    else
        close(c->fd);
    /* what is queued will never be sent: its room goes back now, not with
     * the last reference, which READs parked for room in the node-wide
     * budget hold (requests.c, "Room"): answers of dropped clients filling
     * it waited on each other for good; and its READs parked for room end
     * unread, first, so that the room goes to others' */
    uncached_forget(c);
    while (c->head) {
        struct output *next = c->head->next;
        output_free(c, c->head);
        c->head = next;
    }
    c->tail = NULL;
    c->unsent_since_ms = 0;
    pthread_mutex_unlock(&c->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        d->connections = c->next;
    if (c->next) c->next->prev = c->prev;
    d->num_connections--;
    c->next = d->dropped;
    d->dropped = c;
}

/* Release the loop's reference to every dropped connection (jobs in flight
 * keep theirs until they end). */
static void release_dropped(struct larderd *d)
{
    while (d->dropped) {
        struct connection *c = d->dropped;
        d->dropped = c->next;
        connection_release(c);
    }
}

/* Handle the whole frames in c->in, as long as the connection stays
 * within its budget.  false: close at once. */
bool process_input(struct connection *c)
{
    size_t at = 0;
    bool ok = true;
    while (!c->closing) {
        pthread_mutex_lock(&c->lock);
        bool over = connection_held_back(c);
        pthread_mutex_unlock(&c->lock);
        if (over) {
            c->paused = true; /* flush() resumes it once its answers drain (or its OPEN ends) */
            break;
        }
        struct larder__frame f;
        int rc = larder__wire_header(c->in + at, c->in_used - at, &f);
        if (rc == LARDER_ETRUNCATED) break;
        if (rc < 0 || LARDER__WIRE_HEADER + (size_t)f.length > sizeof c->in) {
            say("malformed frame from a client (%s): closing",
                rc < 0 ? larder_errmsg() : "a frame no client sends");
            ok = false;
            break;
        }
        if (c->in_used - at < LARDER__WIRE_HEADER + f.length) break;
        __atomic_store_n(&c->last_active_ms, now_ms(), __ATOMIC_RELAXED);
        if (!handle(c, &f, c->in + at + LARDER__WIRE_HEADER)) {
            ok = false;
            break;
        }
        at += LARDER__WIRE_HEADER + f.length;
    }
    memmove(c->in, c->in + at, c->in_used - at);
    c->in_used -= at;
    /* a frame begun: the clock for finishing it starts with its first byte */
    if (!c->in_used || c->paused)
        c->partial_since_ms = 0;
    else if (at || !c->partial_since_ms)
        c->partial_since_ms = now_ms();
    return ok;
}

/* Read and handle what the client sent; false closes the connection.  A
 * refused connection's input is read and dropped: it is closed once the
 * client has sent its first frame and been sent the ERROR, so that the
 * client reads the ERROR rather than a reset. */
static bool receive(struct connection *c)
{
    if (c->closing) {
        char sink[4096];
        ssize_t n;
        while ((n = recv(c->fd, sink, sizeof sink, 0)) > 0) {
        }
        return n < 0 && (errno == EAGAIN || errno == EINTR);
    }
    while (!c->paused && !c->closing) {
        ssize_t n = recv(c->fd, c->in + c->in_used, sizeof c->in - c->in_used, 0);
        if (n < 0) return errno == EAGAIN || errno == EINTR;
        if (n == 0) return false;
        c->in_used += (size_t)n;
        if (!process_input(c)) return false;
    }
    return true;
}

/* Whether a local client's credentials are allowed on the socket: root,
 * the daemon's own uid and gid, --allow-uid and --allow-gid (the primary
 * gid or, where the kernel tells, a supplementary one). */
bool credentials_allowed(const struct larderd_config *config, int fd, const struct ucred *cred)
{
    if (cred->uid == 0 || cred->uid == config->uid || cred->gid == config->gid) return true;
    for (int i = 0; i < config->num_allow_uids; i++)
        if (cred->uid == config->allow_uids[i]) return true;
    for (int i = 0; i < config->num_allow_gids; i++)
        if (cred->gid == config->allow_gids[i]) return true;
#ifdef SO_PEERGROUPS
    gid_t groups[256];
    socklen_t size = sizeof groups;
    if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &size) == 0) {
        for (size_t g = 0; g < size / sizeof *groups; g++) {
            if (groups[g] == config->gid) return true;
            for (int i = 0; i < config->num_allow_gids; i++)
                if (groups[g] == config->allow_gids[i]) return true;
        }
    }
#else
    (void)fd;
#endif
    return false;
}

/* Whether a TCP client's address is a loopback one (127/8, ::1, or 127/8 mapped into IPv6). */
static bool from_loopback(int fd)
{
    struct sockaddr_storage a;
    socklen_t size = sizeof a;
    if (getpeername(fd, (struct sockaddr *)&a, &size) < 0) return false;
    if (a.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&a)->sin_addr.s_addr) >> 24) == 127;
    if (a.ss_family == AF_INET6) {
        const struct in6_addr *v6 = &((struct sockaddr_in6 *)&a)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(v6)) return true;
        return IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127;
    }
    return false;
}

/* A describable peer address for the log. */
static const char *peer_address(int fd, char *buf, size_t size)
{
    struct sockaddr_storage a;
    socklen_t length = sizeof a;
    char host[INET6_ADDRSTRLEN] = "?";
    if (getpeername(fd, (struct sockaddr *)&a, &length) == 0)
        getnameinfo((struct sockaddr *)&a, length, host, sizeof host, NULL, 0, NI_NUMERICHOST);
    snprintf(buf, size, "%s", host);
    return buf;
}

/* Who a new connection is: a local client's credentials checked against
 * the allowed ids, a peer's address against loopback; refused (an ERROR,
 * then closed) when not allowed. */
static void admit(struct connection *c)
{
    struct larderd *d = c->daemon;
    char text[300];
    if (!c->tcp) {
        struct ucred cred;
        socklen_t size = sizeof cred;
        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) < 0) {
            refuse(c, 0, LARDER_EDENIED, "no credentials on the socket");
        } else if (!credentials_allowed(&d->config, c->fd, &cred)) {
            say("refused uid %u gid %u on the socket (not allowed: see --allow-uid, "
                "--allow-gid)",
                (unsigned)cred.uid, (unsigned)cred.gid);
            snprintf(text, sizeof text,
                     "uid %u (gid %u) is not allowed on this larderd's socket: its admin can "
                     "add --allow-uid or --allow-gid",
                     (unsigned)cred.uid, (unsigned)cred.gid);
            refuse(c, 0, LARDER_EDENIED, text);
        } else {
            c->uid = cred.uid;
            c->pid = cred.pid;
            c->own_user = cred.uid == 0 || cred.uid == d->config.uid;
        }
    } else if (!d->secret && !d->config.insecure_peers && !from_loopback(c->fd)) {
        char host[INET6_ADDRSTRLEN + 8];
        say("refused a peer from %s: without --secret-file, peers connect only from "
            "loopback (or give --insecure-peers)",
            peer_address(c->fd, host, sizeof host));
        refuse(c, 0, LARDER_EDENIED,
               "this larderd has no cluster secret and takes peers only from loopback "
               "addresses");
    }
    if (c->closing) flush(c);
}

/* Accept every pending connection on a listener.  d->spare_fd is kept in
 * reserve, so that at the descriptor limit a connection can still be
 * accepted and closed rather than left to spin the loop. */
static void accept_all(struct larderd *d, int listener, bool tcp)
{
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && d->spare_fd >= 0) {
            close(d->spare_fd);
            fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) close(fd);
            d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            say("out of file descriptors: a connection was closed at once");
            continue;
        }
        if (fd < 0) return;
        struct connection *c = NULL;
        if (d->num_connections >= d->config.max_connections || !(c = connection_new(d, fd, tcp))) {
            close(fd); /* over --max-connections (or out of memory): the others carry on */
            continue;
        }
        int one = 1;
        if (tcp) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->next = d->connections;
        if (c->next) c->next->prev = c;
        d->connections = c;
        d->num_connections++;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(d->epoll, EPOLL_CTL_ADD, fd, &ev);
        c->watched = EPOLLIN;
        admit(c);
    }
}

_Static_assert(UNCACHED_STALL_MS == 5000, "the message below says 5 s");
static const char stalled_why[] =
    "a client that took no answer in 5 s holds room other users' READs wait for";

const char *sweep_reason(struct connection *c, int64_t now)
{
    int idle_timeout_ms = c->daemon->config.idle_timeout_ms;
    pthread_mutex_lock(&c->lock);
    bool busy = c->jobs > 0 || c->head;
    pthread_mutex_unlock(&c->lock);
    busy = busy || ucx_recently_used(c, now, idle_timeout_ms); /* READs over UCX */
    if (c->closing && now - c->closing_since_ms >= CLOSING_TIMEOUT_MS)
        return "a refused client did not take its answer";
    if (c->partial_since_ms && now - c->partial_since_ms >= PARTIAL_FRAME_TIMEOUT_MS)
        return "a frame begun and not finished in 10 s";
    if (c->blocked_since_ms && now - c->blocked_since_ms >= idle_timeout_ms)
        return "a client that does not take its answers";
    if (uncached_stalled(c, now)) return stalled_why;
    if (!busy && !c->in_used &&
        now - __atomic_load_n(&c->last_active_ms, __ATOMIC_RELAXED) >= idle_timeout_ms)
        return ""; /* idle: the ordinary end of a pooled connection, not worth a line */
    return NULL;
}

/* Drop the connections that have been idle, slow or stalled too long. */
static void sweep(struct larderd *d)
{
    int64_t now = now_ms();
    for (struct connection *c = d->connections, *next; c; c = next) {
        next = c->next;
        const char *why = sweep_reason(c, now);
        if (!why) {
            connection_progress(c, now); /* queued output wakes the loop, which sends it */
            continue;
        }
        if (why[0]) say("dropping a connection: %s", why);
        if (why == stalled_why) __atomic_add_fetch(&d->stalled_drops, 1, __ATOMIC_RELAXED);
        drop(c);
    }
    publications_sweep(d, now); /* RESOLVEs waiting for a name */
}

/* ---- listeners -------------------------------------------------------------------- */

int listen_unix(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) return -ENAMETOOLONG;
    /* bound and listening under a name of its own first, then renamed onto
     * PATH: a client that finds PATH (a script waiting for the file) can
     * connect at once, and a socket left by a daemon that died is replaced
     * in one step (bound on PATH itself, a connect between bind and listen
     * was refused: seen in tests starting daemons under load) */
    char staged[sizeof a.sun_path];
    int n = snprintf(staged, sizeof staged, "%s.%ld", path, (long)getpid());
    bool rename_after = n > 0 && (size_t)n < sizeof staged;
    strcpy(a.sun_path, rename_after ? staged : path);
    unlink(a.sun_path); /* a socket left by a daemon that died */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t old = umask(007); /* owner and group only */
    int rc = fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1024) < 0 ||
             (rename_after && rename(staged, path) < 0);
    umask(old);
    if (rc) {
        int err = errno;
        if (fd >= 0) close(fd);
        if (rename_after) unlink(staged);
        return -err;
    }
    return fd;
}

int listen_tcp(const char *address)
{
    const char *colon = strrchr(address, ':');
    if (!colon) return -EINVAL;
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(colon - address), address);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list;
    if (getaddrinfo(host, colon + 1, &hints, &list) != 0) return -EADDRNOTAVAIL;
    int fd = socket(list->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = fd < 0 || bind(fd, list->ai_addr, list->ai_addrlen) < 0 || listen(fd, 1024) < 0;
    int err = errno;
    freeaddrinfo(list);
    if (rc) {
        if (fd >= 0) close(fd);
        return -err;
    }
    return fd;
}

/* ---- the loop ------------------------------------------------------------------------ */

static void add(struct larderd *d, int fd, void *tag)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = tag};
    if (fd >= 0) epoll_ctl(d->epoll, EPOLL_CTL_ADD, fd, &ev);
}

/* After input, output or a wake-up on c: send, read again if it was paused
 * and has drained, and drop it when broken or done. */
static void after_event(struct connection *c, bool ok, bool was_paused)
{
    if (ok) ok = flush(c);
    /* drained below its budget: the frames it sent meanwhile */
    if (ok && was_paused && !c->paused) ok = process_input(c) && receive(c);
    pthread_mutex_lock(&c->lock);
    bool pending = c->head != NULL;
    pthread_mutex_unlock(&c->lock);
    if (!ok || (c->closing && !pending)) drop(c);
}

/* The wake eventfd: workers queued output or ended jobs, or answers sent
 * made room for READs parked for it (uncached_give). */
static void woken(struct larderd *d)
{
    uint64_t count;
    if (read(d->wake, &count, sizeof count) < 0) { /* nothing to do */
    }
    uncached_resume(d);
    for (struct connection *c = d->connections, *next; c; c = next) {
        next = c->next; /* drop() leaves c->next for this walk */
        pthread_mutex_lock(&c->lock);
        bool pending = c->head != NULL;
        pthread_mutex_unlock(&c->lock);
        /* closing: its last answer may have gone out from a worker */
        if (pending || c->paused || c->closing) after_event(c, true, c->paused);
    }
}

void run_loop(struct larderd *d, int unix_fd, int tcp_fd)
{
    d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    add(d, d->wake, &wake_tag);
    add(d, unix_fd, &unix_tag);
    add(d, tcp_fd, &tcp_tag);
    struct epoll_event events[128];
    int64_t last_sweep = now_ms();
    while (!d->stopping) {
        int n = epoll_wait(d->epoll, events, 128, 250);
        for (int i = 0; i < n; i++) {
            void *tag = events[i].data.ptr;
            if (tag == &unix_tag || tag == &tcp_tag) {
                accept_all(d, tag == &unix_tag ? unix_fd : tcp_fd, tag == &tcp_tag);
            } else if (tag == &wake_tag) {
                woken(d);
            } else {
                struct connection *c = tag;
                if (c->dropped) continue;
                bool was_paused = c->paused, ok = true;
                /* a paused connection (its OPEN under way, or over its
                 * budget) watches no input, but a hangup is reported
                 * anyway, every time: the client is gone, drop it now (its
                 * jobs hold their own reference) rather than spin */
                if (c->paused && (events[i].events & (EPOLLHUP | EPOLLERR)))
                    ok = false;
                else if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    ok = receive(c);
                after_event(c, ok, was_paused);
            }
        }
        if (now_ms() - last_sweep >= 250) {
            sweep(d);
            last_sweep = now_ms();
        }
        release_dropped(d);
    }
    while (d->connections)
        drop(d->connections);
    release_dropped(d);
    if (d->spare_fd >= 0) close(d->spare_fd);
    d->spare_fd = -1;
}
