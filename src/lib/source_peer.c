/*
 * source_peer.c - one shard of a dataset as a peer daemon (the shard's
 * owner) serves it from its cache, over the endpoint's pooled connections
 * (endpoint.h), each READ at the class its read's flags carry (a
 * HINTED fill asks the owner at HINTED, behind its readers' DEMAND
 * reads).  Reads answer LARDER__FROM_PEER.  A peer does not tell a
 * shard's size: size() fails with LARDER_EUNSUPPORTED, and so does a
 * stream (made of reads up to the size); a chain asks its last link, the
 * origin, for those.  A peer the endpoint has marked down is not asked:
 * the read fails at once, so a chain goes on to the next link.
 *
 * A large read over TCP (a whole 4 MiB chunk borrowed ahead of a fill,
 * borrow.c) goes in up to STREAMS pieces at once, each a READ on a pooled
 * connection of its own, the first on the calling thread and the others
 * on short-lived threads: one connection's answer is one sendfile on the
 * owner's loop and one receiving thread here, and pieces in flight on
 * several let the owner's workers, its sends and this side's receives of
 * one chunk overlap (bench/results/peer-borrow.md says what it gave).
 * LARDER_PEER_STREAMS=N (1-16) sets how many; the default is 1, one READ:
 * on the 2-core machine it was measured on, 4 cost the borrower more CPU
 * (threads, connections, wakeups) than they saved in wall time.
 */
#include "endpoint.h"
#include "source.h"
#include "wire.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct peer_source {
    struct larder__source base;
    struct larder__endpoint *endpoint; /* borrowed */
    uint64_t id_low, id_high;
    uint32_t shard;
    char name[160]; /* "peer HOST:PORT shard N" */
};

static int peer_size(struct larder__source *source, uint64_t *size)
{
    (void)size;
    return larder__fail(LARDER_EUNSUPPORTED, "%s: a peer does not tell a shard's size",
                        source->name);
}

#define STREAMS_DEFAULT 1
#define STREAMS_MOST 16
#define STREAM_PIECE_MIN ((size_t)1 << 20) /* pieces no smaller: a READ's own costs */

/* One piece of a read, on one connection. */
struct piece {
    struct peer_source *peer;
    int priority;        /* its class */
    unsigned wire_flags; /* the READ's flags (wire.h) */
    uint64_t offset;     /* in the shard */
    size_t length;
    uint8_t *buf;
    int rc;            /* 0, or its failure */
    char message[256]; /* the failure's message (larder_errmsg is per thread) */
};

static pthread_once_t streams_once = PTHREAD_ONCE_INIT;
static int streams = STREAMS_DEFAULT;

static void read_streams(void)
{
    const char *text = getenv("LARDER_PEER_STREAMS");
    char *end;
    long value = text ? strtol(text, &end, 10) : 0;
    if (text && *text && *end == '\0' && value >= 1 && value <= STREAMS_MOST) streams = (int)value;
}

/* The piece's READs (each at most LARDER__WIRE_MAX_READ bytes: a peer
 * refuses more): 0, or the first failure, its message kept in the piece. */
static int read_piece(struct piece *x)
{
    struct peer_source *p = x->peer;
    for (size_t done = 0; done < x->length;) {
        size_t n = x->length - done;
        if (n > LARDER__WIRE_MAX_READ) n = LARDER__WIRE_MAX_READ;
        int rc =
            larder__endpoint_read_flagged(p->endpoint, p->id_low, p->id_high, p->shard, x->priority,
                                          x->wire_flags, x->offset + done, n, x->buf + done);
        if (rc < 0) {
            snprintf(x->message, sizeof x->message, "%s", larder_errmsg());
            return x->rc = rc;
        }
        done += n;
    }
    return x->rc = 0;
}

static void *piece_thread(void *arg)
{
    read_piece(arg);
    return NULL;
}

/* How many pieces a read of `length` bytes goes in (1: one stream). */
static size_t pieces_for(const struct peer_source *p, size_t length)
{
    pthread_once(&streams_once, read_streams);
    /* UCX paths have their own pipelining (transport_ucx_peer.c) */
    if (streams <= 1 || strcmp(larder__endpoint_transport(p->endpoint), "tcp") != 0) return 1;
    size_t n = length / STREAM_PIECE_MIN;
    return n < 2 ? 1 : n > (size_t)streams ? (size_t)streams : n;
}

/* One extent: in pieces at once (pieces_for), or in one stream.  0, or
 * the first failure with its message. */
static int read_extent(struct peer_source *p, int priority, unsigned wire_flags,
                       const struct larder__extent *e)
{
    struct piece pieces[STREAMS_MOST];
    pthread_t threads[STREAMS_MOST];
    bool started[STREAMS_MOST] = {false};
    size_t n = pieces_for(p, e->length);
    /* pieces of whole pages, the last one taking the rest */
    size_t each = (e->length / n + 4095) & ~(size_t)4095;
    for (size_t i = 0; i < n; i++) {
        size_t at = i * each, left = at < e->length ? e->length - at : 0;
        pieces[i] = (struct piece){.peer = p,
                                   .priority = priority,
                                   .wire_flags = wire_flags,
                                   .offset = e->offset + at,
                                   .length = i + 1 == n ? left : (left < each ? left : each),
                                   .buf = (uint8_t *)e->buf + (at < e->length ? at : 0)};
    }
    for (size_t i = 1; i < n; i++)
        started[i] =
            pieces[i].length && pthread_create(&threads[i], NULL, piece_thread, &pieces[i]) == 0;
    int rc = read_piece(&pieces[0]);
    const char *message = pieces[0].message;
    for (size_t i = 1; i < n; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else if (pieces[i].length)
            read_piece(&pieces[i]); /* no thread to be had: here, after the rest */
        if (rc == 0 && pieces[i].rc < 0) rc = pieces[i].rc, message = pieces[i].message;
    }
    return rc < 0 ? larder__fail(rc, "%s: %s", p->name, message) : 0;
}

static int peer_read(struct larder__source *source, const struct larder__extent *extents,
                     size_t count, unsigned flags)
{
    struct peer_source *p = (struct peer_source *)source;
    int priority = larder__read_class(flags); /* the peer queues and answers by it */
    if (larder__endpoint_down(p->endpoint))
        return larder__fail(-EHOSTUNREACH, "%s: down (failed recently), not asked", p->name);
    unsigned wire_flags = flags & LARDER__READ_CACHED_ONLY ? LARDER__READ_CACHED : 0;
    for (size_t i = 0; i < count; i++) {
        int rc = read_extent(p, priority, wire_flags, &extents[i]);
        if (rc < 0) return rc;
    }
    return LARDER__FROM_PEER;
}

static void peer_close(struct larder__source *source)
{
    free(source);
}

static const struct larder__source_ops peer_ops = {
    .kind = "peer",
    .size = peer_size,
    .read = peer_read,
    .stream = NULL,
    .close = peer_close,
};

int larder__source_peer_open(struct larder__source **out, struct larder__endpoint *endpoint,
                             uint64_t id_low, uint64_t id_high, uint32_t shard)
{
    struct peer_source *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->base.ops = &peer_ops;
    p->base.name = p->name;
    p->endpoint = endpoint;
    p->id_low = id_low;
    p->id_high = id_high;
    p->shard = shard;
    snprintf(p->name, sizeof p->name, "peer %s shard %u", larder__endpoint_address(endpoint),
             shard);
    *out = &p->base;
    return 0;
}
