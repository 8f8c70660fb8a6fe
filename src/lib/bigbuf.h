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

/* How many buffers, and bytes in all, are kept for reuse from now on
 * (extra kept ones are freed).  A process starts with a reader's limits
 * (2 buffers, 16 MiB: liblarder in a training job); larderd raises them.
 * LARDER_BIGBUF_MAX, when set to a size, replaces `bytes`. */
LARDER__HIDDEN void larder__bigbuf_set_limits(size_t buffers, size_t bytes);
/* Make `count` buffers of at least `length` bytes (>= LARDER__BIGBUF_MIN)
 * with every page backed by memory now, and keep them, as far as the
 * limits allow: a daemon that will borrow whole chunks pays their page
 * faults at its start instead of on its first borrows (a fresh buffer's
 * first touch is a fault and a zeroed page every 4 KiB).  Buffers taken
 * from the pool count too: a kept one that fits is populated and put back.
 * The number kept, or -EINVAL, -ENOMEM (none could be made). */
LARDER__HIDDEN int larder__bigbuf_reserve(size_t count, size_t length);
/* The number of buffers kept now, and their bytes in *bytes (may be NULL). */
LARDER__HIDDEN size_t larder__bigbuf_kept(size_t *bytes);
/* A LARDER_BIGBUF_MAX value: digits with an optional K, M or G (powers of
 * 1024).  0 with *bytes set, or -EINVAL. */
LARDER__HIDDEN int larder__bigbuf_parse_max(const char *text, size_t *bytes);

#endif
