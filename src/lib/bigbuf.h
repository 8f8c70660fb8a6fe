/*
 * bigbuf.h - large byte buffers kept for reuse (a borrowed chunk, a fill's
 * span): a buffer of megabytes fresh from malloc is fresh from mmap, and
 * the first touch of each of its pages is a fault and a page of zeros;
 * filling a chunk borrowed from a peer into two such buffers cost more
 * than the copies themselves (bigbuf.c says what was measured).
 */
#ifndef LARDER_BIGBUF_H
#define LARDER_BIGBUF_H

#include "common.h"

#include <stddef.h>

/* Buffers at least this large are kept for reuse when given back. */
#define LARDER__BIGBUF_MIN (1u << 20)

/* A buffer of at least `length` bytes (1 when 0): a kept one that is
 * large enough, else a new one.  NULL when out of memory.  Give it back
 * with larder__bigbuf_put, never free(). */
LARDER__HIDDEN void *larder__bigbuf_get(size_t length);
/* Give back a buffer of larder__bigbuf_get (NULL: nothing): kept for the
 * next one when large and the pool has room, else freed. */
LARDER__HIDDEN void larder__bigbuf_put(void *buffer);

#endif
