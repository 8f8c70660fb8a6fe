/*
 * source.c - what every source shares: the helpers callers use, a stream
 * made of reads for sources without one of their own, opening an origin
 * by its URL's scheme, and the names an index gives its shards.
 */
#include "source.h"
#include "source_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define STREAM_CHUNK (1u << 20) /* bytes per read of a stream made of reads */

int larder__source_size(struct larder__source *source, uint64_t *size)
{
    return source->ops->size(source, size);
}

/* Which bytes of this thread's last read came from a peer, when only some did
 * (a stripe's read).  Past MAX_PEER_RANGES ranges the rest are taken as the
 * origin's: a block of its own taken for borrowed would be evicted first. */
#define MAX_PEER_RANGES 256
static _Thread_local struct {
    bool partial; /* false: all or none, as the read's answer says */
    size_t count;
    uint64_t offset[MAX_PEER_RANGES], length[MAX_PEER_RANGES];
} peer_ranges;

void larder__source_set_peer_ranges(const struct larder__extent *ranges, size_t count)
{
    peer_ranges.partial = true;
    peer_ranges.count = count < MAX_PEER_RANGES ? count : MAX_PEER_RANGES;
    for (size_t i = 0; i < peer_ranges.count; i++) {
        peer_ranges.offset[i] = ranges[i].offset;
        peer_ranges.length[i] = ranges[i].length;
    }
}

uint64_t larder__source_peer_bytes(uint64_t offset, uint64_t length)
{
    if (!peer_ranges.partial) return length;
    uint64_t bytes = 0, end = offset + length;
    for (size_t i = 0; i < peer_ranges.count; i++) {
        uint64_t lo = peer_ranges.offset[i], hi = lo + peer_ranges.length[i];
        if (lo < offset) lo = offset;
        if (hi > end) hi = end;
        if (hi > lo) bytes += hi - lo;
    }
    return bytes < length ? bytes : length;
}

int larder__source_readv(struct larder__source *source, const struct larder__extent *extents,
                         size_t count, unsigned flags)
{
    peer_ranges.partial = false; /* a stripe inside says otherwise when it returns */
    size_t nonempty = 0;
    for (size_t i = 0; i < count; i++)
        nonempty += extents[i].length > 0;
    if (nonempty == 0) return LARDER__FROM_ORIGIN;
    return source->ops->read(source, extents, count, flags);
}

int larder__source_read(struct larder__source *source, void *buf, size_t length, uint64_t offset,
                        unsigned flags)
{
    struct larder__extent extent = {.buf = buf, .offset = offset, .length = length};
    return larder__source_readv(source, &extent, 1, flags);
}

/* The whole object in STREAM_CHUNK reads, for sources that cannot stream. */
static int stream_by_reads(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    uint64_t size;
    int rc = larder__source_size(source, &size);
    if (rc < 0) return rc;
    uint8_t *buf = malloc(size < STREAM_CHUNK ? (size_t)size + 1 : STREAM_CHUNK);
    if (!buf) return -ENOMEM;
    for (uint64_t offset = 0; offset < size && rc >= 0; offset += STREAM_CHUNK) {
        size_t length = size - offset < STREAM_CHUNK ? (size_t)(size - offset) : STREAM_CHUNK;
        rc = larder__source_read(source, buf, length, offset, 0);
        if (rc >= 0) rc = sink(userdata, buf, length);
    }
    free(buf);
    return rc < 0 ? rc : 0;
}

int larder__source_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    if (source->ops->stream) return source->ops->stream(source, sink, userdata);
    return stream_by_reads(source, sink, userdata);
}

void larder__source_close(struct larder__source *source)
{
    if (source) source->ops->close(source);
}

int larder__source_open(struct larder__source **out, const char *url,
                        struct larder__hedge_budget *budget)
{
    /* HTTP and S3 hedge inside their own transfers (source_http.c), with the same policy */
    if (strncmp(url, "s3://", 5) == 0) return larder__source_s3_open(out, url, budget);
    if (larder__is_remote(url)) return larder__source_http_open(out, url, budget);
    struct larder__source *file;
    int rc = larder__source_file_open(&file, url);
    if (rc < 0) return rc;
    return larder__source_hedge_open(out, file, budget);
}

/* ---- names ------------------------------------------------------------------ */

bool larder__is_remote(const char *name)
{
    return strncmp(name, "http://", 7) == 0 || strncmp(name, "https://", 8) == 0 ||
           strncmp(name, "s3://", 5) == 0;
}

const char *larder__file_path(const char *url)
{
    return strncmp(url, "file://", 7) == 0 ? url + 7 : url;
}

char *larder__resolve(const char *index_url, const char *name)
{
    if (larder__is_remote(name) || name[0] == '/' || strncmp(name, "file://", 7) == 0)
        return strdup(name);
    /* the directory part of the index's location, never cutting into "scheme://host" */
    const char *host = larder__is_remote(index_url) ? strstr(index_url, "://") + 3 : index_url;
    const char *slash = strrchr(host, '/');
    size_t dir_length = slash ? (size_t)(slash - index_url + 1) : 0;
    const char *separator = "";
    if (!slash && host != index_url) { /* "http://host" alone */
        dir_length = strlen(index_url);
        separator = "/";
    }
    size_t length = dir_length + strlen(separator) + strlen(name) + 1;
    char *out = malloc(length);
    if (out) snprintf(out, length, "%.*s%s%s", (int)dir_length, index_url, separator, name);
    return out;
}

struct accumulator {
    uint8_t *buf;
    size_t used, capacity;
    uint64_t limit;   /* the most bytes taken */
    const char *url;  /* for the message */
    const char *what; /* "index" */
};

static int load_sink(void *userdata, const void *data, size_t length)
{
    struct accumulator *acc = userdata;
    if (length > acc->limit - acc->used)
        return larder__fail(-EFBIG,
                            "%s: %s of more than %llu bytes: refused, the most larder "
                            "loads into memory",
                            acc->url, acc->what, (unsigned long long)acc->limit);
    if (larder__reserve((void **)&acc->buf, &acc->capacity, acc->used + length, 1) < 0)
        return -ENOMEM;
    memcpy(acc->buf + acc->used, data, length);
    acc->used += length;
    return 0;
}

int larder__source_load(const char *url, uint64_t limit, const char *what, uint8_t **data,
                        uint64_t *size)
{
    return larder__source_load_confined(url, limit, what, NULL, data, size);
}

int larder__source_load_confined(const char *url, uint64_t limit, const char *what,
                                 const char *const *allow, uint8_t **data, uint64_t *size)
{
    struct larder__source *source;
    int rc = larder__source_open(&source, url, NULL);
    if (rc < 0) return rc;
    if (limit > SIZE_MAX / 2) limit = SIZE_MAX / 2;
    /* HTTP can refuse a larger object by its Content-Length, before any of it comes */
    if (larder__is_remote(url)) {
        larder__source_http_stream_limit(source, limit, what);
        larder__source_http_confine(source, allow);
    }
    struct accumulator acc = {.limit = limit, .url = url, .what = what};
    rc = larder__source_stream(source, load_sink, &acc);
    larder__source_close(source);
    if (rc < 0) {
        free(acc.buf);
        return rc;
    }
    *data = acc.buf;
    *size = acc.used;
    return 0;
}
