/*
 * dataset_internal.h - the public dataset handle's layout, shared by its
 * files: dataset.c (open, close, questions about the index, what other
 * modules ask of it) and dataset_read.c (reads).  Private to them;
 * everyone else goes through larder.h or dataset.h.
 */
#ifndef LARDER_DATASET_INTERNAL_H
#define LARDER_DATASET_INTERNAL_H

#include "dataset.h"
#include "index.h"

/* The handle larder_open makes (dataset.c says what it holds). */
struct larder_dataset {
    char *url;
    uint8_t *image;
    uint64_t image_size;
    bool mapped;
    struct larder__index ix;
    larder_open_options options;
    char **locations;                /* where each shard is, resolved and checked at open */
    struct larder__cache *cache;     /* NULL: reads go to the sources */
    struct larder__fill *fill;       /* the read engine */
    struct larder__endpoint *daemon; /* the node daemon, when one is configured */
    larder__wrap_source_fn wrap;     /* in a daemon: the shard owners before the origin */
    void *wrap_context;
    char *missing_origin; /* in a daemon: why a shard's origin may not exist, or NULL */
    char **allow;         /* a copy of the allowed prefixes (NULL-terminated), or NULL: what an
                           * HTTP origin's redirects must stay under (source_http.h) */
};

#endif
