/*
 * borrow_stream.h - a reader's streaming through chunks (borrow_stream.c),
 * for borrow.c's read ahead.
 */
#ifndef LARDERD_BORROW_STREAM_H
#define LARDERD_BORROW_STREAM_H

#include "larderd.h"

#include <stdbool.h>
#include <stdint.h>

/* moves to the next piece in order that make a reader streaming (its
 * READs reaching STREAM_AFTER + 1 pieces of a chunk in a row) */
#define STREAM_AFTER 2
/* a reader's READ at a chunk's start streams when one of the
 * STREAM_BEHIND chunks before it (or the first ones of the next shard) was
 * streamed by it (the chunks between: resident, which a reader sharing the
 * cache reads without a READ) */
#define STREAM_BEHIND 3

/* Note that a READ on c reached pieces [k_lo, k_hi] of that chunk;
 * whether c's reader streams through it. */
bool borrow_stream_note(const struct connection *c, const struct dataset_entry *e, uint32_t shard,
                        uint64_t chunk, uint64_t k_lo, uint64_t k_hi);
/* Mark that chunk streamed for c's reader: its read ahead staged it. */
void borrow_stream_mark(const struct connection *c, const struct dataset_entry *e, uint32_t shard,
                        uint64_t chunk);

#endif
