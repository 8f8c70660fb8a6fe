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
/*
 * Receive exactly length bytes from stream socket `sock` into buf: with
 * splice into the file when [buf, buf + length) lies inside one window,
 * else with recv.  0, or -errno (-ETIMEDOUT on the socket's receive
 * timeout, -ECONNRESET at its end); after a failure the stream is out of
 * step, and what reached the file is the window owner's to discard.
 */
LARDER__HIDDEN int larder__recv_into(int sock, void *buf, size_t length);

#endif
