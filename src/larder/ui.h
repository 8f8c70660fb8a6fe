/*
 * ui.h - what the command-line tool shows a person: a progress bar on a
 * terminal (nothing when stderr is not one), sizes in human units, and
 * JSON string escaping.
 */
#ifndef LARDER_UI_H
#define LARDER_UI_H

#include <stdint.h>
#include <stdio.h>

struct progress {
    const char *label;
    int enabled;
    double started, last_draw;
    int drawn;
};

void progress_start(struct progress *p, const char *label);
/* total 0: unknown, show bytes and rate only. Thread-safe enough: callers serialize. */
void progress_update(struct progress *p, uint64_t done, uint64_t total);
void progress_end(struct progress *p);

double now_seconds(void);
/* "286.0 KB", "1.2 GB" (decimal units) into buf. */
const char *human_bytes(uint64_t bytes, char buf[32]);
/* Write s as a JSON string literal. */
void json_string(FILE *out, const char *s);

#endif
