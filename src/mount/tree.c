/*
 * tree.c - the name tree of a mounted index (tree.h): nodes in one array
 * (node number - 1 is the slot), directories holding their children's
 * numbers, and one open-addressing hash table from (parent, name) to a
 * node for lookups.  Built once; read-only and lock-free afterwards.
 */
#include "tree.h"

#include "npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hash.h"

struct larder__mount_tree {
    larder_dataset *dataset; /* borrowed */
    struct larder__mount_node *nodes;
    size_t count, capacity;
    uint64_t *table; /* node numbers (0: empty), table_size slots, a power of two */
    size_t table_size;
    uint64_t files, bytes;
};

static uint64_t slot_hash(uint64_t parent, const char *name, size_t length)
{
    return XXH3_64bits_withSeed(name, length, parent);
}

static bool same_name(const struct larder__mount_node *n, const char *name, size_t length)
{
    return strlen(n->name) == length && memcmp(n->name, name, length) == 0;
}

uint64_t larder__mount_tree_lookup(const struct larder__mount_tree *t, uint64_t parent,
                                   const char *name, size_t length)
{
    if (!t->table_size) return 0;
    size_t mask = t->table_size - 1;
    for (size_t i = (size_t)slot_hash(parent, name, length) & mask;; i = (i + 1) & mask) {
        uint64_t ino = t->table[i];
        if (ino == 0) return 0;
        const struct larder__mount_node *n = &t->nodes[ino - 1];
        if (n->parent == parent && ino != LARDER__MOUNT_ROOT && same_name(n, name, length))
            return ino;
    }
}

static void table_put(struct larder__mount_tree *t, uint64_t ino)
{
    const struct larder__mount_node *n = &t->nodes[ino - 1];
    size_t mask = t->table_size - 1;
    size_t i = (size_t)slot_hash(n->parent, n->name, strlen(n->name)) & mask;
    while (t->table[i])
        i = (i + 1) & mask;
    t->table[i] = ino;
}

/* Keep the table at most half full. */
static int table_reserve(struct larder__mount_tree *t, size_t nodes)
{
    if (nodes * 2 <= t->table_size) return 0;
    size_t size = t->table_size ? t->table_size : 1024;
    while (size < nodes * 2)
        size *= 2;
    uint64_t *table = calloc(size, sizeof *table);
    if (!table) return -ENOMEM;
    free(t->table);
    t->table = table, t->table_size = size;
    for (uint64_t ino = 2; ino <= t->count; ino++) /* the root is never looked up by name */
        table_put(t, ino);
    return 0;
}

/* A new node named name[0..length) in directory `parent`: its number, or 0 for -ENOMEM. */
static uint64_t add_node(struct larder__mount_tree *t, uint64_t parent, const char *name,
                         size_t length, bool directory)
{
    if (t->count == t->capacity) {
        size_t capacity = t->capacity ? t->capacity * 2 : 256;
        struct larder__mount_node *nodes = realloc(t->nodes, capacity * sizeof *nodes);
        if (!nodes) return 0;
        t->nodes = nodes, t->capacity = capacity;
    }
    if (table_reserve(t, t->count + 1) < 0) return 0;
    struct larder__mount_node *dir = &t->nodes[parent - 1];
    if (dir->num_children == dir->children_capacity) {
        size_t capacity = dir->children_capacity ? dir->children_capacity * 2 : 8;
        uint64_t *children = realloc(dir->children, capacity * sizeof *children);
        if (!children) return 0;
        dir->children = children, dir->children_capacity = capacity;
    }
    char *copy = strndup(name, length);
    if (!copy) return 0;
    uint64_t ino = t->count + 1;
    t->nodes[t->count++] = (struct larder__mount_node){
        .name = copy, .parent = parent, .directory = directory, .field = -1};
    dir->children[dir->num_children++] = ino;
    table_put(t, ino);
    return ino;
}

/* Why `path` cannot be a file of the mount, or NULL. */
static const char *bad_path(const char *path)
{
    if (!path[0]) return "an empty name";
    for (const char *p = path;;) {
        const char *slash = strchr(p, '/');
        size_t length = slash ? (size_t)(slash - p) : strlen(p);
        if (length == 0) return "an empty path component (a leading, doubled or trailing '/')";
        if ((length == 1 && p[0] == '.') || (length == 2 && p[0] == '.' && p[1] == '.'))
            return "a '.' or '..' component";
        if (length > LARDER__MOUNT_NAME_MAX) return "a component over 255 bytes";
        if (!slash) return NULL;
        p = slash + 1;
    }
}

/*
 * Place file `path`: its directories made as needed.  The new node's
 * number, 0 when it was left out (*why says why), or a negative code.
 */
static int64_t place(struct larder__mount_tree *t, const char *path, const char **why)
{
    if ((*why = bad_path(path))) return 0;
    uint64_t dir = LARDER__MOUNT_ROOT;
    for (const char *p = path;;) {
        const char *slash = strchr(p, '/');
        size_t length = slash ? (size_t)(slash - p) : strlen(p);
        if (dir == LARDER__MOUNT_ROOT && ((length == strlen(LARDER__MOUNT_ORDER_FILE) &&
                                           memcmp(p, LARDER__MOUNT_ORDER_FILE, length) == 0) ||
                                          (length == strlen(LARDER__MOUNT_STATS_FILE) &&
                                           memcmp(p, LARDER__MOUNT_STATS_FILE, length) == 0))) {
            *why = "the name of the mount's control file"; /* it would be shadowed */
            return 0;
        }
        uint64_t ino = larder__mount_tree_lookup(t, dir, p, length);
        if (!slash) {
            if (ino) {
                *why = t->nodes[ino - 1].directory ? "a directory has that name"
                                                   : "another file has that name";
                return 0;
            }
            ino = add_node(t, dir, p, length, false);
            return ino ? (int64_t)ino : -ENOMEM;
        }
        if (ino && !t->nodes[ino - 1].directory) {
            *why = "a file has the name of one of its directories";
            return 0;
        }
        if (!ino && !(ino = add_node(t, dir, p, length, true))) return -ENOMEM;
        dir = ino;
        p = slash + 1;
    }
}

/* The extension of a key's last component (after its last '.'), or "data": the
 * field name `larder index --files` gives a file. */
static bool files_field_name(const char *key, const char *field)
{
    const char *base = strrchr(key, '/');
    base = base ? base + 1 : key;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base || !dot[1]) return strcmp(field, "data") == 0;
    return strcmp(dot + 1, field) == 0;
}

/* Bytes of the .npy header of an array field, or 0 when its record is no array numpy reads. */
static uint32_t npy_header_length(const larder_field_info *f)
{
    if (f->dtype <= LARDER_DTYPE_NONE || f->dtype >= LARDER_DTYPE_COUNT ||
        f->ndim > LARDER_MAX_DIMS)
        return 0;
    uint64_t elements = 1;
    for (uint32_t d = 0; d < f->ndim; d++)
        if (__builtin_mul_overflow(elements, f->shape[d], &elements)) return 0;
    uint64_t bytes;
    if (__builtin_mul_overflow(elements, (uint64_t)larder_dtype_size(f->dtype), &bytes) ||
        bytes != f->length)
        return 0;
    uint8_t header[LARDER__NPY_MAX_HEADER];
    return (uint32_t)larder__npy_write_header(header, f->dtype, f->ndim, f->shape);
}

struct building {
    larder__mount_skip_fn skip;
    void *userdata;
    uint64_t *skipped;
};

static int add_file(struct larder__mount_tree *t, struct building *b, const char *path,
                    uint64_t sample, int field, uint64_t size, uint32_t header)
{
    const char *why = NULL;
    int64_t ino = place(t, path, &why);
    if (ino < 0) return (int)ino;
    if (ino == 0) {
        if (b->skip) b->skip(b->userdata, path, why);
        (*b->skipped)++;
        return 0;
    }
    struct larder__mount_node *n = &t->nodes[ino - 1];
    n->sample = sample, n->field = field, n->size = size, n->header_length = header;
    t->files++, t->bytes += size;
    return 0;
}

static int add_sample(struct larder__mount_tree *t, struct building *b, uint64_t id,
                      larder_field_info **fields, uint32_t *capacity)
{
    larder_sample_info s;
    int rc = larder_sample_layout_get(t->dataset, id, &s, *fields, *capacity);
    if (rc == LARDER_ETOOSMALL) {
        larder_field_info *more = realloc(*fields, s.num_fields * sizeof *more);
        if (!more) return -ENOMEM;
        *fields = more, *capacity = s.num_fields;
        rc = larder_sample_layout_get(t->dataset, id, &s, *fields, *capacity);
    }
    if (rc < 0) return rc;
    larder_field_info *f = *fields;
    if (s.num_fields == 1 && f[0].offset == 0 && f[0].length == s.length &&
        f[0].dtype == LARDER_DTYPE_NONE && files_field_name(s.key, f[0].name))
        return add_file(t, b, s.key, id, 0, s.length, 0); /* a file of a --files index */
    size_t key_length = strlen(s.key);
    for (uint32_t i = 0; i < s.num_fields; i++) {
        uint32_t header = npy_header_length(&f[i]);
        size_t length = key_length + 1 + strlen(f[i].name) + 5;
        char *path = malloc(length);
        if (!path) return -ENOMEM;
        snprintf(path, length, "%s.%s%s", s.key, f[i].name, header ? ".npy" : "");
        rc = add_file(t, b, path, id, (int)i, f[i].length + header, header);
        free(path);
        if (rc < 0) return rc;
    }
    return 0;
}

int larder__mount_tree_new(struct larder__mount_tree **out, larder_dataset *dataset,
                           larder__mount_skip_fn skip, void *userdata, uint64_t *skipped)
{
    *out = NULL;
    uint64_t skipped_here = 0;
    struct building b = {skip, userdata, skipped ? skipped : &skipped_here};
    *b.skipped = 0;
    struct larder__mount_tree *t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    t->dataset = dataset;
    t->nodes = calloc(1, sizeof *t->nodes);
    int rc = t->nodes ? 0 : -ENOMEM;
    if (rc == 0) {
        t->capacity = t->count = 1;
        t->nodes[0] = (struct larder__mount_node){
            .name = strdup(""), .parent = LARDER__MOUNT_ROOT, .directory = true, .field = -1};
        if (!t->nodes[0].name) rc = -ENOMEM;
    }
    uint32_t capacity = 16;
    larder_field_info *fields = malloc(capacity * sizeof *fields);
    if (!fields) rc = -ENOMEM;
    uint64_t n = larder_num_samples(dataset);
    for (uint64_t id = 0; rc == 0 && id < n; id++)
        rc = add_sample(t, &b, id, &fields, &capacity);
    free(fields);
    if (rc < 0) {
        larder__mount_tree_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void larder__mount_tree_free(struct larder__mount_tree *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->count; i++) {
        free(t->nodes[i].name);
        free(t->nodes[i].children);
    }
    free(t->nodes);
    free(t->table);
    free(t);
}

const struct larder__mount_node *larder__mount_tree_node(const struct larder__mount_tree *t,
                                                         uint64_t ino)
{
    return ino >= 1 && ino <= t->count ? &t->nodes[ino - 1] : NULL;
}

uint64_t larder__mount_tree_resolve(const struct larder__mount_tree *t, const char *path)
{
    uint64_t ino = LARDER__MOUNT_ROOT;
    for (const char *p = path; *p;) {
        const char *slash = strchr(p, '/');
        size_t length = slash ? (size_t)(slash - p) : strlen(p);
        if (length && !(ino = larder__mount_tree_lookup(t, ino, p, length))) return 0;
        if (!slash) break;
        p = slash + 1;
    }
    return ino;
}

void larder__mount_tree_counts(const struct larder__mount_tree *t, uint64_t *nodes, uint64_t *files,
                               uint64_t *bytes)
{
    if (nodes) *nodes = t->count;
    if (files) *files = t->files;
    if (bytes) *bytes = t->bytes;
}

int larder__mount_npy_header(const struct larder__mount_tree *t, const struct larder__mount_node *n,
                             uint8_t *out, size_t capacity)
{
    if (!n->header_length) return 0;
    larder_field_info f;
    int rc = larder_field_info_get(t->dataset, n->sample, (uint32_t)n->field, &f);
    if (rc < 0) return rc;
    uint8_t header[LARDER__NPY_MAX_HEADER];
    size_t length = larder__npy_write_header(header, f.dtype, f.ndim, f.shape);
    if (length != n->header_length || length > capacity) return LARDER_EBADINDEX;
    memcpy(out, header, length);
    return (int)length;
}
