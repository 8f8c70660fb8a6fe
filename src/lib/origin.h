/*
 * origin.h - where shard and index bytes come from: a local or shared
 * file system path (or file://), or an http(s):// URL read with range
 * GETs.  This is the minimal origin the format tools need; the cache
 * layer puts its own concurrency and retry policy on top.
 */
#ifndef LARDER_ORIGIN_H
#define LARDER_ORIGIN_H

#include "common.h"

struct larder__origin;

/* Open `url`.  Files are opened at once (errors name the path); HTTP
 * objects are contacted on first use. */
LARDER_HIDDEN int larder__origin_open(struct larder__origin **out, const char *url);
LARDER_HIDDEN void larder__origin_close(struct larder__origin *origin);
LARDER_HIDDEN const char *larder__origin_url(const struct larder__origin *origin);
/* Object size in bytes. */
LARDER_HIDDEN int larder__origin_size(struct larder__origin *origin, uint64_t *size);
/* Read exactly `length` bytes at `offset`; 0 or a negative code
 * (LARDER_ETRUNCATED when the object is shorter).  Thread-safe. */
LARDER_HIDDEN int larder__origin_read(struct larder__origin *origin, void *buf, size_t length,
                                      uint64_t offset);
/* Pass the whole object, in order, to `sink`; a negative return from sink stops it. */
typedef int (*larder__sink_fn)(void *userdata, const void *data, size_t length);
LARDER_HIDDEN int larder__origin_stream(struct larder__origin *origin, larder__sink_fn sink,
                                        void *userdata);

/* Hedged second requests sent so far by this process (all origins). */
LARDER_HIDDEN uint64_t larder__origin_hedges(void);

/* The local path of a file URL ("file:///x" -> "/x"; a path as it is). */
LARDER_HIDDEN const char *larder__file_path(const char *url);

/* Whether `name` is a URL with a scheme larder reads over the network. */
LARDER_HIDDEN bool larder__is_remote(const char *name);
/*
 * Resolve `name` as the index at `index_url` refers to it: URLs and
 * absolute paths as they are, relative names against the index's
 * directory.  Returns a malloc'd string or NULL.
 */
LARDER_HIDDEN char *larder__resolve(const char *index_url, const char *name);
/* Read a whole object into a malloc'd buffer. */
LARDER_HIDDEN int larder__origin_load(const char *url, uint8_t **data, uint64_t *size);

#endif
