/*
 * source_plain.h - what `larder mount` opens: an index as it is, or a
 * directory (or s3:// prefix) of plain files indexed at mount time from a
 * listing alone (names and sizes; no file read, so no checksums: the
 * index is marked unchecked, docs/mount.md).  The listing's index lives
 * in a private (0700) temporary directory until the mount ends, where a
 * node daemon of the same user, reading for the mount, can open it too;
 * one left by a killed mount is removed by the next.
 */
#ifndef LARDER_MOUNT_SOURCE_PLAIN_H
#define LARDER_MOUNT_SOURCE_PLAIN_H

#include "larder.h"

#include <stdbool.h>

struct larder__plain;

/*
 * Open `source` with `options` into *dataset: plain files when `plain` is
 * set, when it is a local directory, or when it is an s3:// prefix ending
 * in '/'; else an index.  *out is the listing's temporary index (NULL for
 * an index), removed by larder__plain_close after the dataset is closed.
 * 0, or a negative code with larder_errmsg() saying why.
 */
int larder__plain_open(struct larder__plain **out, larder_dataset **dataset, const char *source,
                       larder_open_options *options, bool plain);
void larder__plain_close(struct larder__plain *plain);

#endif
