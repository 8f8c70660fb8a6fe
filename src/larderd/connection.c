/*
 * connection.c - a connection and its output queue.  handle() (requests.c)
 * answers into the queue, from the loop thread or from a worker.  An
 * answer with nothing queued before it is sent at once, by the thread
 * that made it, as far as the socket takes it without blocking; the loop
 * (loop.c) sends the rest, and whatever is queued behind it.  A unit test
 * makes a connection with fd -1 (nothing is sent) and reads its answers
 * with connection_take_output().
 *
 * The queue is ordered by class (priority.h): a DEMAND answer goes out
 * before HINTED ones queued earlier, once the frame being sent is whole.
 * Within a class, answers go in the order they were queued.
 *
 * What is queued is charged to the connection's memory budget until it is
 * sent (or dropped); an answer that could not be cached also holds its
 * share of the node-wide uncached budget until then.
 */
#include "larderd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>

struct connection *connection_new(struct larderd *d, int fd, bool tcp)
{
    struct connection *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->daemon = d;
    c->fd = fd;
    c->tcp = tcp;
    c->refs = 1;
    c->last_active_ms = now_ms();
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

struct output *output_new(size_t length)
{
    struct output *o = malloc(sizeof *o + length);
    if (o) *o = (struct output){.length = length, .file = -1};
    return o;
}

int output_push(int fd, struct output *o)
{
    while (o->sent < o->length || o->file_length) {
        ssize_t n;
        if (o->sent < o->length) /* the frame's header: with its file bytes, in one segment */
            n = send(fd, o->bytes + o->sent, o->length - o->sent,
                     MSG_NOSIGNAL | (o->file_length ? MSG_MORE : 0));
        else /* the bytes of the frame come straight from the cache file */
            n = sendfile(fd, o->file, &o->file_offset, o->file_length);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno == EAGAIN ? 0 : -1;
        if (n == 0 && o->sent == o->length) { /* the file ended early: a cut cache file */
            errno = EIO;
            return -1;
        }
        if (o->sent < o->length)
            o->sent += (size_t)n;
        else
            o->file_length -= (size_t)n;
    }
    return 1;
}

/*
 * Send o now, from this thread, when nothing is queued before it (c->lock
 * held): a worker's answer then goes out with no wake-up of the loop, no
 * hand-over of the connection's lock and no change to what the loop
 * watches.  When the loop sent every answer, a peer's 1 MiB READ cost
 * two eventfd writes, a loop pass and an epoll change beside its
 * sendfile, and a context switch on a busy node.  A connection the loop
 * has dropped (its fd closed under this lock) is not touched.  True when
 * o went whole: it is freed, and nothing is queued.
 */
static bool send_now_locked(struct connection *c, struct output *o)
{
    if (c->fd < 0 || c->dropped || c->head) return false;
    int rc = output_push(c->fd, o);
    if (rc <= 0) return false; /* the rest, or the error, is the loop's */
    __atomic_store_n(&c->last_active_ms, now_ms(), __ATOMIC_RELAXED); /* an answer went out whole */
    uncached_give(c, o->uncached);
    free(o);
    return true;
}

void enqueue_output(struct connection *c, struct output *o)
{
    o->charge = o->length + o->file_length;
    pthread_mutex_lock(&c->lock);
    if (c->dropped) { /* never to be sent (loop.c drop): its room back at once */
        pthread_mutex_unlock(&c->lock);
        uncached_give(c, o->uncached);
        free(o);
        return;
    }
    if (send_now_locked(c, o)) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (!c->tail || c->tail->priority <= o->priority) { /* the usual case: last */
        if (c->tail) {
            c->tail->next = o;
        } else {
            c->head = o;
            c->unsent_since_ms = now_ms(); /* the queue was empty */
        }
        c->tail = o;
    } else {
        /* before the first output of a lower class, but after the head
         * when its sending has begun (a frame is never cut) */
        struct output *before = NULL, *at = c->head;
        if (at->sent > 0) before = at, at = at->next;
        while (at && at->priority <= o->priority)
            before = at, at = at->next;
        o->next = at;
        if (before)
            before->next = o;
        else
            c->head = o;
        if (!at) c->tail = o; /* only behind a begun head */
    }
    c->charged += o->charge;
    pthread_mutex_unlock(&c->lock);
    larderd_wake(c->daemon);
}

void enqueue(struct connection *c, const void *bytes, size_t length)
{
    struct output *o = output_new(length);
    if (!o) return; /* the client times out and goes elsewhere */
    memcpy(o->bytes, bytes, length);
    enqueue_output(c, o);
}

#define PROGRESS_MS 1000

bool connection_progress(struct connection *c, int64_t now_ms)
{
    if (!c->peer || c->closing) return false;
    pthread_mutex_lock(&c->lock);
    /* an answer queued or being sent tells the peer as much; last_active_ms
     * (the READ's arrival, or the last answer sent) keeps a PROGRESS from
     * following an answer its job has not yet counted as ended */
    bool due = c->reads > 0 && !c->head &&
               now_ms - __atomic_load_n(&c->last_active_ms, __ATOMIC_RELAXED) >= PROGRESS_MS &&
               now_ms - c->progress_ms >= PROGRESS_MS;
    if (due) c->progress_ms = now_ms;
    pthread_mutex_unlock(&c->lock);
    if (!due) return false;
    uint8_t frame[LARDER__WIRE_HEADER];
    larder__wire_encode_header(frame, sizeof frame, LARDER__PROGRESS, 0, 0);
    enqueue(c, frame, sizeof frame); /* a control frame: DEMAND, before any answer queued */
    return true;
}

void send_error(struct connection *c, uint64_t request, int code, const char *message)
{
    uint8_t frame[LARDER__WIRE_HEADER + 4 + LARDER__WIRE_MAX_MESSAGE];
    int n = larder__wire_encode_error(frame, sizeof frame, request, code, message);
    if (n > 0) enqueue(c, frame, (size_t)n);
}

void refuse(struct connection *c, uint64_t request, int code, const char *message)
{
    send_error(c, request, code, message);
    c->closing = true;
    c->closing_since_ms = now_ms();
    larderd_wake(c->daemon); /* its ERROR may be gone already: the loop closes it (woken()) */
}

void output_free(struct connection *c, struct output *o)
{
    c->charged -= o->charge;
    uncached_give(c, o->uncached);
    free(o);
}

struct output *connection_take_output(struct connection *c)
{
    pthread_mutex_lock(&c->lock);
    struct output *o = c->head;
    if (o) {
        c->head = o->next;
        if (!c->head) c->tail = NULL;
        c->unsent_since_ms = c->head ? now_ms() : 0;
        o->next = NULL;
        c->charged -= o->charge;
        uncached_give(c, o->uncached);
        o->charge = o->uncached = 0;
    }
    pthread_mutex_unlock(&c->lock);
    return o;
}

void connection_release(struct connection *c)
{
    pthread_mutex_lock(&c->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (!last) return;
    datasets_release_opened(c->daemon, c->opened); /* its READs are over: none uses them */
    while (c->head) {
        struct output *next = c->head->next;
        output_free(c, c->head);
        c->head = next;
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}
