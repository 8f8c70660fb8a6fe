/*
 * recv_window.h - memory that stands for a file's bytes, for receiving.
 *
 * A daemon staging a borrowed chunk in place (fill_inplace.c) maps the
 * cache data file's pages of the chunk's inner blocks into the span its
 * fill reads, and registers that mapping here as a window onto the file.
 * A peer's DATA answer bound for memory inside a window is then moved
 * from the socket into the file with splice (socket to pipe: the kernel's
 * own buffers, no copy; pipe to file: the one copy into the page cache)
 * instead of recv into the mapping, whose write faults cost node 1 more
 * than the pwrite they replaced (bench/results/peer-borrow.md, "Fourth
 * pass").  The fill then reads the bytes through the mapping.
 */
#ifndef LARDER_RECV_WINDOW_H
#define LARDER_RECV_WINDOW_H

#include "common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Register [addr, addr + length) as a window onto bytes [offset, offset +
 * length) of fd (which must stay open until the window is removed).
 * Returns a handle (>= 0) for larder__recv_window_remove, or -ENOSPC when
 * too many windows are open (the caller then receives into memory). */
LARDER__HIDDEN int larder__recv_window_add(void *addr, size_t length, int fd, uint64_t offset);
/* Remove a window (a negative handle: nothing); after this returns, no
 * receive writes through it any more. */
LARDER__HIDDEN void larder__recv_window_remove(int handle);
/* Whether any window overlaps [buf, buf + length): a receive there holds
 * the window owner's fill lock while it runs. */
LARDER__HIDDEN bool larder__recv_window_covers(const void *buf, size_t length);
/*
 * A receive into a window must end in time: the owner holds the fill lock
 * of its blocks meanwhile, which every other filler of them on the node
 * waits for.  So it has LARDER__RECV_WINDOW_MIN_MS, or the time its bytes
 * take at LARDER__RECV_WINDOW_MIN_RATE bytes a millisecond (50 MB/s) if
 * longer, in all, however the sender paces its bytes.
 */
#define LARDER__RECV_WINDOW_MIN_MS 2000
#define LARDER__RECV_WINDOW_MIN_RATE 50000
/*
 * Receive exactly length bytes from stream socket `sock` into buf: with
 * splice into the file where [buf, buf + length) lies inside a window,
 * else with recv.  0, or a negative code: -ETIMEDOUT on the socket's
 * receive timeout, or past the deadline above when any window overlaps
 * buf; -ECONNRESET at its end; LARDER_ELOCAL (with a message naming the
 * errno) when writing into the file failed (a full disk, EIO): this
 * node's failure, not the sender's.  After a failure the stream is out of
 * step, and what reached the file is the window owner's to discard.
 */
LARDER__HIDDEN int larder__recv_into(int sock, void *buf, size_t length);

#endif
