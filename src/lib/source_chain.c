/*
 * source_chain.c - links tried in order: the shard's owner (a peer), then
 * the origin.  A link whose read fails is logged once and skipped for
 * down_ms, so a dead peer costs one failed read per down_ms, not one per
 * read (a link that declines without asking, -EHOSTUNREACH: a peer its
 * endpoint already knows to be down, is passed over quietly); the last link (the origin) is never
 * skipped, as nothing comes after it.  LARDER__READ_ORIGIN_ONLY reads only the last link: a refetch
 * after wrong bytes must not ask the peer that may have sent them.  The
 * size and the stream are the last link's.
 */
#include "source.h"
#include "source_hedge.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

struct chain_link {
    struct larder__source *source;
    _Atomic int64_t down_until_ms; /* skipped until then (monotonic ms); 0: never failed */
};

struct chain_source {
    struct larder__source base;
    int down_ms;
    size_t count;
    struct chain_link links[];
};

static struct larder__source *last_link(struct larder__source *source)
{
    struct chain_source *c = (struct chain_source *)source;
    return c->links[c->count - 1].source;
}

/* Leave link `l` alone for down_ms; the first to mark it down logs why. */
static void link_failed(struct chain_source *c, struct chain_link *l, int64_t now)
{
    int64_t until = l->down_until_ms;
    if (until > now) return; /* another reader marked it down already */
    if (!atomic_compare_exchange_strong(&l->down_until_ms, &until, now + c->down_ms)) return;
    larder__log(LARDER_LOG_WARN, "%s; skipped for %d ms, reading the next source", larder_errmsg(),
                c->down_ms);
}

static int chain_read(struct larder__source *source, const struct larder__extent *extents,
                      size_t count, unsigned flags)
{
    struct chain_source *c = (struct chain_source *)source;
    size_t first = flags & LARDER__READ_ORIGIN_ONLY ? c->count - 1 : 0;
    for (size_t i = first; i < c->count - 1; i++) {
        struct chain_link *l = &c->links[i];
        int64_t now = (int64_t)larder__now_ms();
        if (l->down_until_ms > now) continue;
        int rc = larder__source_readv(l->source, extents, count, flags);
        if (rc >= 0) return rc;
        if (rc != -EHOSTUNREACH) /* declined unasked (a peer known down): nothing to mark */
            link_failed(c, l, (int64_t)larder__now_ms());
    }
    return larder__source_readv(last_link(source), extents, count, flags);
}

static int chain_size(struct larder__source *source, uint64_t *size)
{
    return larder__source_size(last_link(source), size);
}

static int chain_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    return larder__source_stream(last_link(source), sink, userdata);
}

static void chain_close(struct larder__source *source)
{
    struct chain_source *c = (struct chain_source *)source;
    for (size_t i = 0; i < c->count; i++)
        larder__source_close(c->links[i].source);
    free(c);
}

static const struct larder__source_ops chain_ops = {
    .kind = "chain",
    .size = chain_size,
    .read = chain_read,
    .stream = chain_stream,
    .close = chain_close,
};

int larder__source_chain_open(struct larder__source **out, struct larder__source *const *links,
                              size_t count, int down_ms)
{
    struct chain_source *c = NULL;
    if (count > 0) c = calloc(1, sizeof *c + count * sizeof *c->links);
    if (!c) {
        for (size_t i = 0; i < count; i++)
            larder__source_close(links[i]);
        return count ? -ENOMEM : larder__fail(LARDER_EUSAGE, "a chain of no sources");
    }
    c->base.ops = &chain_ops;
    c->base.name = links[count - 1]->name; /* the origin's */
    c->down_ms = down_ms;
    c->count = count;
    for (size_t i = 0; i < count; i++)
        c->links[i].source = links[i];
    *out = &c->base;
    return 0;
}
