/*
 * source_shim.c - TEMPORARY: source.h over origin.c, until the source
 * implementations land (branch `sources`).  Deleted at that merge.
 */
#include "endpoint.h"
#include "origin.h"
#include "pool.h"
#include "source.h"

#include <errno.h>
#include <stdlib.h>

struct origin_source {
    struct larder__source base;
    struct larder__origin *origin;
};

static int o_size(struct larder__source *s, uint64_t *size)
{
    return larder__origin_size(((struct origin_source *)s)->origin, size);
}
static int o_read(struct larder__source *s, const struct larder__extent *e, size_t n, unsigned fl)
{
    (void)fl;
    for (size_t i = 0; i < n; i++) {
        int rc = larder__origin_read(((struct origin_source *)s)->origin, e[i].buf, e[i].length,
                                     e[i].offset);
        if (rc < 0) return rc;
    }
    return LARDER__FROM_ORIGIN;
}
static int o_stream(struct larder__source *s, larder__sink_fn sink, void *userdata)
{
    return larder__origin_stream(((struct origin_source *)s)->origin, sink, userdata);
}
static void o_destroy(struct larder__source *s)
{
    larder__origin_close(((struct origin_source *)s)->origin);
    free(s);
}
static const struct larder__source_ops origin_ops = {"origin", o_size, o_read, o_stream, o_destroy};

int larder__source_open(struct larder__source **out, const char *url,
                        struct larder__hedge_budget *budget)
{
    (void)budget;
    struct origin_source *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    int rc = larder__origin_open(&s->origin, url);
    if (rc < 0) {
        free(s);
        return rc;
    }
    s->base.ops = &origin_ops;
    s->base.name = larder__origin_url(s->origin);
    *out = &s->base;
    return 0;
}

int larder__source_size(struct larder__source *s, uint64_t *size)
{
    return s->ops->size(s, size);
}
int larder__source_read(struct larder__source *s, void *buf, size_t length, uint64_t offset,
                        unsigned flags)
{
    struct larder__extent e = {buf, offset, length};
    return s->ops->read(s, &e, 1, flags);
}
int larder__source_readv(struct larder__source *s, const struct larder__extent *e, size_t n,
                         unsigned flags)
{
    return s->ops->read(s, e, n, flags);
}
int larder__source_stream(struct larder__source *s, larder__sink_fn sink, void *userdata)
{
    return s->ops->stream(s, sink, userdata);
}
void larder__source_destroy(struct larder__source *s)
{
    if (s) s->ops->destroy(s);
}
int larder__source_load(const char *url, uint8_t **data, uint64_t *size)
{
    return larder__origin_load(url, data, size);
}

struct peer_source {
    struct larder__source base;
    struct larder__endpoint *e;
    uint64_t low, high;
    uint32_t shard;
};
static int p_size(struct larder__source *s, uint64_t *size)
{
    (void)s, (void)size;
    return LARDER_EUNSUPPORTED;
}
static int p_read(struct larder__source *s_, const struct larder__extent *e, size_t n, unsigned fl)
{
    struct peer_source *s = (struct peer_source *)s_;
    if (larder__endpoint_down(s->e)) return -EAGAIN;
    for (size_t i = 0; i < n; i++) {
        int rc = larder__endpoint_read(s->e, s->low, s->high, s->shard,
                                       fl & LARDER__READ_BACKGROUND ? LARDER__BACKGROUND
                                                                    : LARDER__DEMAND,
                                       e[i].offset, e[i].length, e[i].buf);
        if (rc < 0) return rc;
    }
    return LARDER__FROM_PEER;
}
static void p_destroy(struct larder__source *s)
{
    free(s);
}
static const struct larder__source_ops peer_ops = {"peer", p_size, p_read, NULL, p_destroy};

int larder__source_peer_new(struct larder__source **out, struct larder__endpoint *endpoint,
                            uint64_t id_low, uint64_t id_high, uint32_t shard)
{
    struct peer_source *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    *s = (struct peer_source){
        {&peer_ops, larder__endpoint_address(endpoint)}, endpoint, id_low, id_high, shard};
    *out = &s->base;
    return 0;
}

struct chain_source {
    struct larder__source base;
    struct larder__source *links[2];
    size_t count;
};
static int c_size(struct larder__source *s_, uint64_t *size)
{
    struct chain_source *s = (struct chain_source *)s_;
    return larder__source_size(s->links[s->count - 1], size);
}
static int c_read(struct larder__source *s_, const struct larder__extent *e, size_t n, unsigned fl)
{
    struct chain_source *s = (struct chain_source *)s_;
    for (size_t i = fl & LARDER__READ_ORIGIN_ONLY ? s->count - 1 : 0; i < s->count; i++) {
        int rc = s->links[i]->ops->read(s->links[i], e, n, fl);
        if (rc >= 0 || i + 1 == s->count) return rc;
        larder__log(LARDER_LOG_WARN, "%s did not answer (%s): reading %s", s->links[i]->name,
                    larder_errmsg(), s->links[i + 1]->name);
    }
    return LARDER_EUSAGE;
}
static int c_stream(struct larder__source *s_, larder__sink_fn sink, void *userdata)
{
    struct chain_source *s = (struct chain_source *)s_;
    return larder__source_stream(s->links[s->count - 1], sink, userdata);
}
static void c_destroy(struct larder__source *s_)
{
    struct chain_source *s = (struct chain_source *)s_;
    for (size_t i = 0; i < s->count; i++)
        larder__source_destroy(s->links[i]);
    free(s);
}
static const struct larder__source_ops chain_ops = {"chain", c_size, c_read, c_stream, c_destroy};

int larder__source_chain_new(struct larder__source **out, struct larder__source *const *links,
                             size_t count, int down_ms)
{
    (void)down_ms;
    struct chain_source *s = calloc(1, sizeof *s);
    if (!s || count > 2 || count == 0) {
        free(s);
        for (size_t i = 0; i < count; i++)
            larder__source_destroy(links[i]);
        return -ENOMEM;
    }
    s->base = (struct larder__source){&chain_ops, links[count - 1]->name};
    for (size_t i = 0; i < count; i++)
        s->links[i] = links[i];
    s->count = count;
    *out = &s->base;
    return 0;
}
