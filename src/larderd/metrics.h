/*
 * metrics.h - the daemon's counters as Prometheus text (exposition format
 * 0.0.4): one HELP and TYPE pair per metric, then one line per dataset,
 * labelled with its id.  Pure: no I/O, no allocation, no lock.
 */
#ifndef LARDERD_METRICS_H
#define LARDERD_METRICS_H

#include "larder.h"

#include <stddef.h>

/* One dataset's figures. */
struct metrics_row {
    char dataset_id[33]; /* 32 hex digits */
    larder_stats stats;
};

/*
 * The text of rows[0 .. count) into out (capacity bytes, NUL-terminated
 * when capacity > 0): its length.  Whole lines only: what does not fit is
 * left out, never cut in the middle of a line.
 */
size_t metrics_format(const struct metrics_row *rows, size_t count, char *out, size_t capacity);

#endif
