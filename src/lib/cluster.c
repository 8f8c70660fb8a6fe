/*
 * cluster.c - membership parsing and rendezvous ownership (cluster.h).
 */
#include "cluster.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "hash.h"

void larder__members_clear(struct larder__members *m)
{
    for (size_t i = 0; i < m->count; i++)
        free(m->names[i]);
    free(m->names);
    free(m->weights);
    memset(m, 0, sizeof *m);
}

int larder__members_add(struct larder__members *m, const char *name, size_t length,
                        int default_port)
{
    if (length == 0 || length > 255)
        return larder__fail(LARDER_EUSAGE, "member name of %zu bytes", length);
    for (size_t i = 0; i < length; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr(".-_:[]", name[i]))
            return larder__fail(LARDER_EUSAGE, "member '%.*s': unexpected character '%c'",
                                (int)length, name, name[i]);
    char full[300];
    const char *colon = memchr(name, ':', length);
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (colon + 1 == name + length || end != name + length || port < 1 || port > 65535)
            return larder__fail(LARDER_EUSAGE, "member '%.*s': bad port", (int)length, name);
        snprintf(full, sizeof full, "%.*s", (int)length, name);
    } else {
        snprintf(full, sizeof full, "%.*s:%d", (int)length, name, default_port);
    }
    for (size_t i = 0; i < m->count; i++)
        if (strcmp(m->names[i], full) == 0) return 0;
    if (m->count == LARDER__MAX_MEMBERS)
        return larder__fail(LARDER_EUSAGE, "more than %d members", LARDER__MAX_MEMBERS);
    char **names = realloc(m->names, (m->count + 1) * sizeof *names);
    if (!names) return -ENOMEM;
    m->names = names;
    uint64_t *weights = realloc(m->weights, (m->count + 1) * sizeof *weights);
    if (!weights) return -ENOMEM;
    m->weights = weights;
    if (!(m->names[m->count] = strdup(full))) return -ENOMEM;
    m->weights[m->count] = XXH3_64bits(full, strlen(full));
    m->count++;
    return 0;
}

int larder__members_parse_list(struct larder__members *m, const char *text, int default_port)
{
    for (const char *p = text; *p;) {
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        const char *start = p;
        while (*p && *p != ',' && !isspace((unsigned char)*p))
            p++;
        if (p > start) {
            int rc = larder__members_add(m, start, (size_t)(p - start), default_port);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

int larder__members_parse_hostfile(struct larder__members *m, const char *text, size_t length,
                                   int default_port)
{
    size_t line = 1;
    for (size_t at = 0; at < length; line++) {
        size_t end = at;
        while (end < length && text[end] != '\n')
            end++;
        size_t stop = at;
        while (stop < end && text[stop] != '#')
            stop++;
        /* trim; a line holds one name (extra words, like Slurm's "slots=4", are ignored) */
        size_t a = at;
        while (a < stop && isspace((unsigned char)text[a]))
            a++;
        size_t b = a;
        while (b < stop && !isspace((unsigned char)text[b]))
            b++;
        if (b > a) {
            int rc = larder__members_add(m, text + a, b - a, default_port);
            if (rc < 0) return larder__fail_context(rc, "hostfile line %zu", line);
        }
        at = end + 1;
    }
    return 0;
}

/* Expand one hostlist item like "gpu[01-03,7]-ib" (at most one bracket). */
static int expand_item(struct larder__members *m, const char *item, size_t length, int default_port)
{
    const char *open = memchr(item, '[', length);
    if (!open) return larder__members_add(m, item, length, default_port);
    const char *close = memchr(open, ']', (size_t)(item + length - open));
    if (!close) return larder__fail(LARDER_EUSAGE, "hostlist '%.*s': no ']'", (int)length, item);
    size_t prefix = (size_t)(open - item), suffix = (size_t)(item + length - close - 1);
    for (const char *p = open + 1; p < close;) {
        const char *range_end = p;
        while (range_end < close && *range_end != ',')
            range_end++;
        char *dash;
        unsigned long low = strtoul(p, &dash, 10), high = low;
        int width = (int)(dash - p);
        if (dash == p)
            return larder__fail(LARDER_EUSAGE, "hostlist '%.*s': bad range", (int)length, item);
        if (*dash == '-') high = strtoul(dash + 1, &dash, 10);
        if (dash != range_end || high < low || high - low >= LARDER__MAX_MEMBERS)
            return larder__fail(LARDER_EUSAGE, "hostlist '%.*s': bad range", (int)length, item);
        for (unsigned long n = low; n <= high; n++) {
            char name[300];
            int k = snprintf(name, sizeof name, "%.*s%0*lu%.*s", (int)prefix, item, width, n,
                             (int)suffix, close + 1);
            if (k < 0 || k >= (int)sizeof name)
                return larder__fail(LARDER_EUSAGE, "hostlist name too long");
            int rc = larder__members_add(m, name, (size_t)k, default_port);
            if (rc < 0) return rc;
        }
        p = range_end < close ? range_end + 1 : close;
    }
    return 0;
}

int larder__members_parse_slurm(struct larder__members *m, const char *hostlist, int default_port)
{
    const char *p = hostlist;
    while (*p) {
        while (*p == ',')
            p++;
        const char *start = p;
        int depth = 0;
        while (*p && (depth > 0 || *p != ',')) { /* commas inside brackets belong to the item */
            if (*p == '[') depth++;
            if (*p == ']') depth--;
            p++;
        }
        if (p > start) {
            int rc = expand_item(m, start, (size_t)(p - start), default_port);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

size_t larder__owner(const struct larder__members *m, uint64_t id_low, uint64_t id_high,
                     uint32_t shard)
{
    uint64_t key[3] = {id_low, id_high, shard};
    uint64_t best = 0;
    size_t owner = 0;
    for (size_t i = 0; i < m->count; i++) {
        uint64_t score = XXH3_64bits_withSeed(key, sizeof key, m->weights[i]);
        if (i == 0 || score > best || (score == best && strcmp(m->names[i], m->names[owner]) < 0))
            best = score, owner = i;
    }
    return owner;
}

size_t larder__owner_chunk(const struct larder__members *m, uint64_t id_low, uint64_t id_high,
                           uint32_t shard, uint64_t chunk)
{
    uint8_t key[32]; /* little-endian whatever the host's order, as docs/protocol.md says */
    larder__put_le64(key, id_low);
    larder__put_le64(key + 8, id_high);
    larder__put_le64(key + 16, shard);
    larder__put_le64(key + 24, chunk);
    uint64_t best = 0;
    size_t owner = 0;
    for (size_t i = 0; i < m->count; i++) {
        uint64_t score = XXH3_64bits_withSeed(key, sizeof key, m->weights[i]);
        if (i == 0 || score > best || (score == best && strcmp(m->names[i], m->names[owner]) < 0))
            best = score, owner = i;
    }
    return owner;
}
