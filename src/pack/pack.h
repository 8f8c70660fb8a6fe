/*
 * pack.h - the packing driver's internal entry point: write what a
 * layout holds.  larder_pack (larder_pack.h) opens an input per path and
 * calls it; tests call it with inputs of their own.
 */
#ifndef LARDER_PACK_PACK_H
#define LARDER_PACK_PACK_H

#include "layout.h"

/*
 * Place the layout's samples (larder__pack_layout_place) and write the
 * shards and outdir/index.larder, from options->jobs writer threads.
 * `options` may be NULL (tar, shuffled with seed 0); `result` may be
 * NULL.  The layout stays the caller's.  0 or a negative code; a shard
 * that failed is not left behind under its name.
 */
LARDER__HIDDEN int larder__pack_write(struct larder__pack_layout *layout, const char *outdir,
                                      const larder_pack_options *options,
                                      larder_pack_result *result);

#endif
