/*
 * connection.c - a connection and its output queue.  handle() (requests.c)
 * answers into the queue, from the loop thread or from a worker; the loop
 * (loop.c) sends what is queued.  Nothing here touches the socket, so a
 * unit test makes a connection with fd -1 and reads its answers with
 * connection_take_output().
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

#include <stdlib.h>
#include <string.h>

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

void enqueue_output(struct connection *c, struct output *o)
{
    o->charge = o->length + o->file_length;
    pthread_mutex_lock(&c->lock);
    if (!c->tail || c->tail->priority <= o->priority) { /* the usual case: last */
        if (c->tail)
            c->tail->next = o;
        else
            c->head = o;
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
    bool due = c->reads > 0 && !c->head && now_ms - c->last_active_ms >= PROGRESS_MS &&
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
}

void output_free(struct connection *c, struct output *o)
{
    c->charged -= o->charge;
    uncached_give(c->daemon, o->uncached);
    free(o);
}

struct output *connection_take_output(struct connection *c)
{
    pthread_mutex_lock(&c->lock);
    struct output *o = c->head;
    if (o) {
        c->head = o->next;
        if (!c->head) c->tail = NULL;
        o->next = NULL;
        c->charged -= o->charge;
        uncached_give(c->daemon, o->uncached);
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
