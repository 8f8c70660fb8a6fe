/*
 * source_missing.c - an origin that could not be opened, standing in for
 * it behind a daemon's wrapper: the shard's owner node may still serve
 * the shard (a publication read from its producer, whose files exist
 * nowhere else), and only when the chain comes to this link does the
 * origin's failure show, with the code it had at open (and the daemon's
 * word on why, when it has one).
 */
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct missing_source {
    struct larder__source base;
    int code;          /* the open's failure */
    char message[512]; /* and its message */
    char name[];
};

static int missing_fail(struct larder__source *source)
{
    struct missing_source *m = (struct missing_source *)source;
    return larder__fail(m->code, "%s", m->message);
}

static int missing_size(struct larder__source *source, uint64_t *size)
{
    *size = 0;
    return missing_fail(source);
}

static int missing_read(struct larder__source *source, const struct larder__extent *extents,
                        size_t count, unsigned flags)
{
    (void)extents, (void)count, (void)flags;
    return missing_fail(source);
}

static int missing_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    (void)sink, (void)userdata;
    return missing_fail(source);
}

static void missing_close(struct larder__source *source)
{
    free(source);
}

static const struct larder__source_ops missing_ops = {
    .kind = "missing",
    .size = missing_size,
    .read = missing_read,
    .stream = missing_stream,
    .close = missing_close,
};

int larder__source_missing_open(struct larder__source **out, const char *name, int code,
                                const char *why)
{
    size_t n = strlen(name);
    struct missing_source *m = calloc(1, sizeof *m + n + 1);
    if (!m) return -ENOMEM;
    memcpy(m->name, name, n + 1);
    m->code = code < 0 ? code : -EIO;
    if (why)
        snprintf(m->message, sizeof m->message, "%s (%s: %s)", why, name, larder_strerror(m->code));
    else
        snprintf(m->message, sizeof m->message, "%s: %s", name, larder_strerror(m->code));
    m->base.ops = &missing_ops;
    m->base.name = m->name;
    *out = &m->base;
    return 0;
}
