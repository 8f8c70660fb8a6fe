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
 */
#include "endpoint.h"
#include "source.h"
#include "wire.h"

#include <errno.h>
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

static int peer_read(struct larder__source *source, const struct larder__extent *extents,
                     size_t count, unsigned flags)
{
    struct peer_source *p = (struct peer_source *)source;
    int priority = larder__read_class(flags); /* the peer queues and answers by it */
    if (larder__endpoint_down(p->endpoint))
        return larder__fail(-EHOSTUNREACH, "%s: down (failed recently), not asked", p->name);
    for (size_t i = 0; i < count; i++) {
        const struct larder__extent *e = &extents[i];
        /* a READ asks for at most LARDER__WIRE_MAX_READ bytes (a peer refuses more) */
        for (size_t done = 0; done < e->length;) {
            size_t n = e->length - done;
            if (n > LARDER__WIRE_MAX_READ) n = LARDER__WIRE_MAX_READ;
            int rc = larder__endpoint_read_flagged(
                p->endpoint, p->id_low, p->id_high, p->shard, priority,
                flags & LARDER__READ_CACHED_ONLY ? LARDER__READ_CACHED : 0, e->offset + done, n,
                (uint8_t *)e->buf + done);
            if (rc < 0) return larder__fail_context(rc, "%s", p->name);
            done += n;
        }
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
