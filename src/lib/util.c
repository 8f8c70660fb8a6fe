/*
 * util.c - small helpers with no better home, declared in common.h:
 * growing an array, and a 128-bit id as hex.
 */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int larder__reserve(void **items, size_t *capacity, size_t need, size_t size)
{
    if (need <= *capacity) return 0;
    size_t cap = *capacity ? *capacity : 16;
    while (cap < need) {
        if (cap > SIZE_MAX / 2 / size) return -ENOMEM;
        cap *= 2;
    }
    void *grown = realloc(*items, cap * size);
    if (!grown) return -ENOMEM;
    *items = grown;
    *capacity = cap;
    return 0;
}

void larder__hex128(uint64_t high, uint64_t low, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)high, (unsigned long long)low);
}
