/*
 * transform_cache.c - the result cache of transforms (transform_cache.h):
 * a chained hash table over the whole key, and a list in order of use.
 */
#include "transform_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 4096

struct entry {
    struct entry *chain;         /* the bucket's next */
    struct entry *newer, *older; /* the use list */
    uint64_t id_low, id_high, sample;
    uint32_t version;
    char *canonical;
    size_t length;
    uint8_t *bytes;
};

struct transform_cache {
    pthread_mutex_t lock;
    uint64_t capacity, bytes, entries;
    struct entry *newest, *oldest;
    struct entry *buckets[BUCKETS];
};

static uint64_t hash_key(const struct transform_key *k)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    const uint64_t words[4] = {k->id_low, k->id_high, k->sample, k->version};
    const uint8_t *p = (const uint8_t *)words;
    for (size_t i = 0; i < sizeof words; i++)
        h = (h ^ p[i]) * 1099511628211u;
    for (const char *c = k->canonical; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211u;
    return h;
}

static bool same(const struct entry *e, const struct transform_key *k)
{
    return e->id_low == k->id_low && e->id_high == k->id_high && e->sample == k->sample &&
           e->version == k->version && strcmp(e->canonical, k->canonical) == 0;
}

struct transform_cache *transform_cache_new(uint64_t capacity)
{
    struct transform_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->capacity = capacity;
    return c;
}

static void unlink_use(struct transform_cache *c, struct entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void push_newest(struct transform_cache *c, struct entry *e)
{
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest) c->newest->newer = e;
    c->newest = e;
    if (!c->oldest) c->oldest = e;
}

/* Take e out of its bucket and the list, and free it (lock held). */
static void drop(struct transform_cache *c, struct entry *e, uint64_t hash)
{
    struct entry **p = &c->buckets[hash % BUCKETS];
    while (*p != e)
        p = &(*p)->chain;
    *p = e->chain;
    unlink_use(c, e);
    c->bytes -= e->length;
    c->entries--;
    free(e->canonical), free(e->bytes), free(e);
}

static struct entry *find(struct transform_cache *c, const struct transform_key *k, uint64_t hash)
{
    for (struct entry *e = c->buckets[hash % BUCKETS]; e; e = e->chain)
        if (same(e, k)) return e;
    return NULL;
}

void transform_cache_free(struct transform_cache *c)
{
    if (!c) return;
    while (c->oldest) {
        struct entry *e = c->oldest;
        struct transform_key k = {e->id_low, e->id_high, e->sample, e->version, e->canonical};
        drop(c, e, hash_key(&k));
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

size_t transform_cache_get(struct transform_cache *c, const struct transform_key *k, void *out,
                           size_t capacity)
{
    uint64_t hash = hash_key(k);
    size_t n = 0;
    pthread_mutex_lock(&c->lock);
    struct entry *e = find(c, k, hash);
    if (e && e->length <= capacity) {
        memcpy(out, e->bytes, e->length);
        n = e->length;
        unlink_use(c, e);
        push_newest(c, e);
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}

size_t transform_cache_length(struct transform_cache *c, const struct transform_key *k)
{
    uint64_t hash = hash_key(k);
    pthread_mutex_lock(&c->lock);
    struct entry *e = find(c, k, hash);
    size_t n = e ? e->length : 0;
    pthread_mutex_unlock(&c->lock);
    return n;
}

void transform_cache_put(struct transform_cache *c, const struct transform_key *k,
                         const void *result, size_t length)
{
    if (!length || length > c->capacity) return;
    struct entry *e = calloc(1, sizeof *e);
    char *canonical = strdup(k->canonical);
    uint8_t *bytes = malloc(length);
    if (!e || !canonical || !bytes) {
        free(e), free(canonical), free(bytes);
        return; /* a cache: nothing is lost but time */
    }
    *e = (struct entry){.id_low = k->id_low,
                        .id_high = k->id_high,
                        .sample = k->sample,
                        .version = k->version,
                        .canonical = canonical,
                        .length = length,
                        .bytes = bytes};
    memcpy(bytes, result, length);
    uint64_t hash = hash_key(k);
    pthread_mutex_lock(&c->lock);
    struct entry *old = find(c, k, hash);
    if (old) drop(c, old, hash);
    while (c->oldest && c->bytes + length > c->capacity) {
        struct entry *victim = c->oldest;
        struct transform_key vk = {victim->id_low, victim->id_high, victim->sample, victim->version,
                                   victim->canonical};
        drop(c, victim, hash_key(&vk));
    }
    e->chain = c->buckets[hash % BUCKETS];
    c->buckets[hash % BUCKETS] = e;
    push_newest(c, e);
    c->bytes += length;
    c->entries++;
    pthread_mutex_unlock(&c->lock);
}

void transform_cache_usage(struct transform_cache *c, uint64_t *bytes, uint64_t *entries)
{
    pthread_mutex_lock(&c->lock);
    *bytes = c->bytes;
    *entries = c->entries;
    pthread_mutex_unlock(&c->lock);
}
