/*
 * pack.c - larder_pack: plan, lay out, and write shards and their index
 * (the three steps are described in pack.h).  Directory and tar sources
 * live here too; HDF5 is in hdf5src.c.
 *
 * The output depends only on the input and the options (seed, format,
 * shard size): not on the number of writer threads, the time of day or
 * the file system order, so packing the same input twice gives the same
 * dataset id.
 */
#include "index.h"
#include "npy.h"
#include "pack.h"
#include "sys.h"
#include "tar.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define CHUNK (1u << 20) /* fits a core's L2 cache: a 4 MiB buffer was 2-3x slower under load */
#define ARENA_BLOCK (1u << 20)

/* ---- the plan ---------------------------------------------------------- */

struct arena_block {
    struct arena_block *next;
    size_t used, capacity;
    _Alignas(8) uint8_t data[];
};

struct plan_sample {
    const char *key;
    struct larder__pack_source *source;
    uint64_t first_field;
    uint32_t num_fields;
};

struct larder__pack_plan {
    struct arena_block *arena;
    struct plan_sample *samples;
    size_t num_samples, cap_samples;
    struct larder__pack_field *fields;
    size_t num_fields, cap_fields;
    struct larder__pack_source **sources;
    size_t num_sources, cap_sources;
};

static void *arena_alloc(struct larder__pack_plan *plan, size_t size)
{
    size = (size + 7) & ~(size_t)7;
    struct arena_block *b = plan->arena;
    if (!b || b->capacity - b->used < size) {
        size_t capacity = size > ARENA_BLOCK ? size : ARENA_BLOCK;
        b = malloc(sizeof *b + capacity);
        if (!b) return NULL;
        b->next = plan->arena;
        b->used = 0;
        b->capacity = capacity;
        plan->arena = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    return p;
}

static char *arena_strndup(struct larder__pack_plan *plan, const char *s, size_t n)
{
    char *p = arena_alloc(plan, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

int larder__pack_plan_new(struct larder__pack_plan **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -ENOMEM;
}

void larder__pack_plan_free(struct larder__pack_plan *plan)
{
    if (!plan) return;
    for (size_t i = 0; i < plan->num_sources; i++)
        plan->sources[i]->ops->close(plan->sources[i]);
    while (plan->arena) {
        struct arena_block *next = plan->arena->next;
        free(plan->arena);
        plan->arena = next;
    }
    free(plan->samples);
    free(plan->fields);
    free(plan->sources);
    free(plan);
}

int larder__pack_plan_add_source(struct larder__pack_plan *plan, struct larder__pack_source *source)
{
    if (larder__reserve((void **)&plan->sources, &plan->cap_sources, plan->num_sources + 1,
                        sizeof *plan->sources) < 0)
        return -ENOMEM;
    plan->sources[plan->num_sources++] = source;
    return 0;
}

uint64_t larder__pack_plan_num_samples(const struct larder__pack_plan *plan)
{
    return plan->num_samples;
}

void larder__pack_plan_sample(const struct larder__pack_plan *plan, uint64_t i, const char **key,
                              struct larder__pack_source **source,
                              const struct larder__pack_field **fields, uint32_t *num_fields)
{
    const struct plan_sample *s = &plan->samples[i];
    *key = s->key;
    *source = s->source;
    *fields = plan->fields + s->first_field;
    *num_fields = s->num_fields;
}

int larder__pack_add_sample(struct larder__pack_plan *plan, struct larder__pack_source *source,
                            const char *key, size_t key_length,
                            const struct larder__pack_field *fields, uint32_t num_fields)
{
    if (key_length == 0 || key_length >= LARDER_TAR_MAX_NAME || memchr(key, '\0', key_length))
        return larder__fail(LARDER_EUSAGE, "%s: empty or overlong sample key", source->name);
    for (uint32_t f = 0; f < num_fields; f++) {
        if (!fields[f].name[0] || strchr(fields[f].name, '/') || fields[f].ndim > LARDER_MAX_DIMS)
            return larder__fail(LARDER_EUSAGE, "%s: sample '%.*s': bad field name '%s'",
                                source->name, (int)key_length, key, fields[f].name);
        for (uint32_t g = 0; g < f; g++)
            if (strcmp(fields[f].name, fields[g].name) == 0)
                return larder__fail(LARDER_EDUPKEY, "%s: sample '%.*s' has field '%s' twice",
                                    source->name, (int)key_length, key, fields[f].name);
    }
    if (larder__reserve((void **)&plan->samples, &plan->cap_samples, plan->num_samples + 1,
                        sizeof *plan->samples) < 0 ||
        larder__reserve((void **)&plan->fields, &plan->cap_fields, plan->num_fields + num_fields,
                        sizeof *plan->fields) < 0)
        return -ENOMEM;
    struct plan_sample *s = &plan->samples[plan->num_samples];
    if (!(s->key = arena_strndup(plan, key, key_length))) return -ENOMEM;
    s->source = source;
    s->first_field = plan->num_fields;
    s->num_fields = num_fields;
    for (uint32_t f = 0; f < num_fields; f++) {
        struct larder__pack_field *copy = &plan->fields[plan->num_fields + f];
        *copy = fields[f];
        if (!(copy->name = arena_strndup(plan, fields[f].name, strlen(fields[f].name))))
            return -ENOMEM;
        if (fields[f].ndim) {
            uint64_t *shape = arena_alloc(plan, fields[f].ndim * sizeof *shape);
            if (!shape) return -ENOMEM;
            memcpy(shape, fields[f].shape, fields[f].ndim * sizeof *shape);
            copy->shape = shape;
        } else {
            copy->shape = NULL;
        }
    }
    plan->num_fields += num_fields;
    plan->num_samples++;
    return 0;
}

/* ---- files source (directory trees and tar members alike) -------------- */

/* A source whose fields are byte ranges of files: locator[0] = file
 * number, locator[1] = offset in that file.  A tree opens each file for
 * each read (a tree may hold more files than a process may keep open; a
 * field is read in few, large pieces); an archive keeps its one file open. */
struct files_source {
    struct larder__pack_source base;
    char **paths;
    size_t num_paths, cap_paths;
    int archive_fd; /* the open archive, or -1 for a tree */
};

static int files_read(struct larder__pack_source *source, const struct larder__pack_field *field,
                      uint64_t offset, void *buf, size_t length)
{
    struct files_source *fs = (struct files_source *)source;
    const char *path = fs->paths[field->locator[0]];
    int fd = fs->archive_fd >= 0 ? fs->archive_fd : larder__open(path, O_RDONLY, 0);
    if (fd < 0) return fd;
    int rc = larder__pread_full(fd, buf, length, field->locator[1] + offset, path);
    if (fd != fs->archive_fd) larder__sys.close(fd);
    if (rc == LARDER_ETRUNCATED) return larder__fail(rc, "%s: file shrank while packing", path);
    return rc;
}

static void files_close(struct larder__pack_source *source)
{
    struct files_source *fs = (struct files_source *)source;
    for (size_t i = 0; i < fs->num_paths; i++)
        free(fs->paths[i]);
    if (fs->archive_fd >= 0) larder__sys.close(fs->archive_fd);
    free(fs->paths);
    free(fs->base.name);
    free(fs);
}

static const struct larder__pack_source_ops files_ops = {.read = files_read, .close = files_close};

static struct files_source *files_source_new(const char *name)
{
    struct files_source *fs = calloc(1, sizeof *fs);
    if (!fs || !(fs->base.name = strdup(name))) {
        free(fs);
        return NULL;
    }
    fs->base.ops = &files_ops;
    fs->archive_fd = -1;
    return fs;
}

static int64_t files_add_path(struct files_source *fs, const char *path)
{
    if (larder__reserve((void **)&fs->paths, &fs->cap_paths, fs->num_paths + 1, sizeof *fs->paths) <
            0 ||
        !(fs->paths[fs->num_paths] = strdup(path)))
        return -ENOMEM;
    return (int64_t)fs->num_paths++;
}

/*
 * Look at the head of a field that might be an .npy array: sets the
 * dtype/shape the index will record.  Returns true when it is one.
 */
static bool sniff_npy(struct larder__pack_source *source, const struct larder__pack_field *field,
                      struct larder__npy *npy)
{
    if (field->dtype != LARDER_DTYPE_NONE || !larder__npy_bare_length(field->name) ||
        field->size < 10)
        return false;
    uint8_t head[4096];
    size_t length = field->size < sizeof head ? (size_t)field->size : sizeof head;
    if (source->ops->read(source, field, 0, head, length) < 0) return false;
    return larder__npy_parse(head, length, npy) == 0 &&
           npy->data_offset + npy->data_length == field->size;
}

/* ---- directory source --------------------------------------------------- */

struct dir_entry {
    char *relative; /* path below the root */
    uint64_t size;
};

struct dir_walk {
    const char *root;
    struct dir_entry *entries;
    size_t count, capacity;
    size_t skipped;
};

static int walk(struct dir_walk *w, const char *relative)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s%s", w->root, relative[0] ? "/" : "", relative);
    DIR *dir = opendir(path);
    if (!dir) return larder__fail(-errno, "%s: %s", path, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char child[PATH_MAX], full[PATH_MAX];
        int n =
            snprintf(child, sizeof child, "%s%s%s", relative, relative[0] ? "/" : "", e->d_name);
        if (n >= (int)sizeof child) {
            rc = larder__fail(-ENAMETOOLONG, "%s/%s: path too long", path, e->d_name);
            break;
        }
        if (snprintf(full, sizeof full, "%s/%s", w->root, child) >= (int)sizeof full) {
            rc = larder__fail(-ENAMETOOLONG, "%s/%s: path too long", w->root, child);
            break;
        }
        struct stat st;
        if (lstat(full, &st) < 0) {
            rc = larder__fail(-errno, "%s: %s", full, strerror(errno));
            break;
        }
        if (S_ISLNK(st.st_mode)) {
            /* follow links to files, never to directories (no cycles) */
            if (stat(full, &st) < 0) {
                rc = larder__fail(-errno, "%s: broken symbolic link", full);
                break;
            }
            if (S_ISDIR(st.st_mode)) {
                w->skipped++;
                larder__log(LARDER_LOG_WARN, "%s: symbolic link to a directory, not followed",
                            full);
                continue;
            }
        }
        if (S_ISDIR(st.st_mode)) {
            rc = walk(w, child);
        } else if (S_ISREG(st.st_mode)) {
            if (larder__reserve((void **)&w->entries, &w->capacity, w->count + 1,
                                sizeof *w->entries) < 0 ||
                !(w->entries[w->count].relative = strdup(child))) {
                rc = -ENOMEM;
                break;
            }
            w->entries[w->count++].size = (uint64_t)st.st_size;
        } else {
            rc = larder__fail(LARDER_EUNSAFE, "%s: not a regular file (device, socket or fifo)",
                              full);
        }
    }
    closedir(dir);
    return rc;
}

/* Order by (key, extension): files of one key become adjacent. */
static int by_key(const void *a, const void *b)
{
    const char *x = ((const struct dir_entry *)a)->relative;
    const char *y = ((const struct dir_entry *)b)->relative;
    size_t kx, ky;
    const char *ex, *ey;
    larder__split_key(x, &kx, &ex);
    larder__split_key(y, &ky, &ey);
    size_t k = kx < ky ? kx : ky;
    int c = memcmp(x, y, k);
    if (c) return c;
    if (kx != ky) return kx < ky ? -1 : 1;
    return strcmp(ex, ey);
}

int larder__dir_source_open(struct larder__pack_plan *plan, const char *path,
                            struct larder__pack_source **out)
{
    struct dir_walk w = {.root = path};
    int rc = walk(&w, "");
    struct files_source *fs = rc == 0 ? files_source_new(path) : NULL;
    if (rc == 0 && !fs) rc = -ENOMEM;
    size_t kept = 0;
    if (rc == 0) {
        /* files without an extension have no WebDataset key: skip them, loudly */
        for (size_t i = 0; i < w.count; i++) {
            size_t kl;
            const char *ext;
            if (larder__split_key(w.entries[i].relative, &kl, &ext)) {
                w.entries[kept++] = w.entries[i];
            } else {
                larder__log(LARDER_LOG_WARN, "%s/%s: no extension, so no sample key: skipped", path,
                            w.entries[i].relative);
                free(w.entries[i].relative);
            }
        }
        w.count = kept;
        if (w.count) qsort(w.entries, w.count, sizeof *w.entries, by_key);
    }
    uint64_t before = plan->num_samples;
    struct larder__pack_field *fields = NULL;
    size_t cap_fields = 0;
    for (size_t i = 0; rc == 0 && i < w.count;) {
        size_t key_length, j = i;
        const char *ext;
        larder__split_key(w.entries[i].relative, &key_length, &ext);
        const char *key = w.entries[i].relative;
        uint32_t n = 0;
        for (; j < w.count; j++, n++) {
            size_t kl;
            const char *e;
            larder__split_key(w.entries[j].relative, &kl, &e);
            if (kl != key_length || memcmp(w.entries[j].relative, key, kl) != 0) break;
            if ((rc = larder__reserve((void **)&fields, &cap_fields, n + 1, sizeof *fields)) < 0)
                break;
            char full[PATH_MAX];
            snprintf(full, sizeof full, "%s/%s", path, w.entries[j].relative);
            int64_t file = files_add_path(fs, full);
            if (file < 0) {
                rc = (int)file;
                break;
            }
            fields[n] = (struct larder__pack_field){
                .name = e, .size = w.entries[j].size, .locator = {(uint64_t)file, 0}};
        }
        if (rc == 0) rc = larder__pack_add_sample(plan, &fs->base, key, key_length, fields, n);
        i = j;
    }
    free(fields);
    for (size_t i = 0; i < w.count; i++)
        free(w.entries[i].relative);
    free(w.entries);
    if (rc == 0) rc = larder__pack_plan_add_source(plan, &fs->base);
    if (rc < 0) {
        plan->num_samples = before; /* its samples point at fs */
        if (fs) files_close(&fs->base);
        return rc;
    }
    *out = &fs->base;
    return 0;
}

/* ---- tar source (repacking) --------------------------------------------- */

/*
 * A tar made with plain `tar cf DIR` need not keep a key's members
 * together.  Repacking rewrites every byte anyway, so members are
 * regrouped by key here (samples in order of their key's first
 * appearance, fields in archive order); only `larder index`, which
 * keeps the archive as it is, needs them adjacent.
 */
struct tar_member {
    char *key; /* malloc'd */
    char *ext; /* points into key's allocation */
    uint64_t offset, size;
    uint64_t order; /* first appearance of the key, then archive order */
    uint64_t position;
};

struct tar_enumeration {
    struct tar_member *members;
    size_t count, capacity;
};

static int tar_on_sample(void *userdata, const struct larder__tar_sample *sample)
{
    struct tar_enumeration *e = userdata;
    if (larder__reserve((void **)&e->members, &e->capacity, e->count + sample->num_fields,
                        sizeof *e->members) < 0)
        return -ENOMEM;
    for (uint32_t f = 0; f < sample->num_fields; f++) {
        size_t ext_length = strlen(sample->fields[f].ext);
        char *key = malloc(sample->key_length + ext_length + 2);
        if (!key) return -ENOMEM;
        memcpy(key, sample->key, sample->key_length);
        key[sample->key_length] = '\0';
        memcpy(key + sample->key_length + 1, sample->fields[f].ext, ext_length + 1);
        e->members[e->count] = (struct tar_member){.key = key,
                                                   .ext = key + sample->key_length + 1,
                                                   .offset = sample->fields[f].member_offset,
                                                   .size = sample->fields[f].member_length,
                                                   .position = e->count};
        e->count++;
    }
    return 0;
}

static void tar_on_skip(void *userdata, const char *name, uint64_t offset)
{
    (void)userdata;
    larder__log(LARDER_LOG_WARN, "member '%s' at offset %llu has no extension: skipped", name,
                (unsigned long long)offset);
}

static int by_key_then_position(const void *a, const void *b)
{
    const struct tar_member *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return x->position < y->position ? -1 : x->position > y->position;
}

static int by_order(const void *a, const void *b)
{
    const struct tar_member *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Read the archive through the scanner into e. */
static int tar_scan(struct files_source *fs, const char *path, struct tar_enumeration *e)
{
    struct larder__tar_scanner *scanner = malloc(larder__tar_scanner_size());
    uint8_t *buf = malloc(CHUNK);
    int rc = scanner && buf ? 0 : -ENOMEM;
    int fd = fs->archive_fd;
    if (rc == 0) larder__tar_scanner_init(scanner, path, tar_on_sample, tar_on_skip, e);
    for (uint64_t offset = 0; rc == 0;) {
        ssize_t n = larder__sys.pread(fd, buf, CHUNK, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = larder__fail(-errno, "%s: %s", path, strerror(errno));
            break;
        }
        if (n == 0) {
            rc = larder__tar_scanner_finish(scanner);
            break;
        }
        rc = larder__tar_scanner_feed(scanner, buf, (size_t)n);
        offset += (uint64_t)n;
    }
    free(buf);
    free(scanner);
    return rc;
}

int larder__tar_source_open(struct larder__pack_plan *plan, const char *path,
                            struct larder__pack_source **out)
{
    struct files_source *fs = files_source_new(path);
    struct tar_enumeration e = {0};
    uint64_t before = plan->num_samples;
    int rc = fs ? 0 : -ENOMEM;
    if (rc == 0 && (rc = (int)files_add_path(fs, path)) >= 0)
        rc = fs->archive_fd = larder__open(path, O_RDONLY, 0);
    if (rc >= 0) rc = tar_scan(fs, path, &e);
    if (rc == 0 && e.count) {
        /* regroup: the order of a sample is its key's first appearance */
        qsort(e.members, e.count, sizeof *e.members, by_key_then_position);
        for (size_t i = 0; i < e.count; i++) {
            bool same = i > 0 && strcmp(e.members[i].key, e.members[i - 1].key) == 0;
            e.members[i].order = same ? e.members[i - 1].order : e.members[i].position << 20;
            if (same) e.members[i].order = e.members[i - 1].order + 1;
        }
        qsort(e.members, e.count, sizeof *e.members, by_order);
    }
    struct larder__pack_field fields[LARDER_TAR_MAX_FIELDS];
    for (size_t i = 0; rc == 0 && i < e.count;) {
        size_t j = i;
        uint32_t n = 0;
        for (; j < e.count && strcmp(e.members[j].key, e.members[i].key) == 0; j++) {
            if (n == LARDER_TAR_MAX_FIELDS) {
                rc = larder__fail(LARDER_EUNSUPPORTED, "%s: sample '%s' has too many members", path,
                                  e.members[i].key);
                break;
            }
            fields[n++] = (struct larder__pack_field){.name = e.members[j].ext,
                                                      .size = e.members[j].size,
                                                      .locator = {0, e.members[j].offset}};
        }
        if (rc == 0)
            rc = larder__pack_add_sample(plan, &fs->base, e.members[i].key,
                                         strlen(e.members[i].key), fields, n);
        i = j;
    }
    for (size_t i = 0; i < e.count; i++)
        free(e.members[i].key);
    free(e.members);
    if (rc == 0 && plan->num_samples == before)
        rc = larder__fail(LARDER_EEMPTY, "%s: no samples in this tar archive", path);
    if (rc == 0) rc = larder__pack_plan_add_source(plan, &fs->base);
    if (rc < 0) {
        plan->num_samples = before;
        if (fs) files_close(&fs->base);
        return rc;
    }
    *out = &fs->base;
    return 0;
}

/* ---- layout -------------------------------------------------------------- */

/* What one field becomes in the shard. */
struct out_field {
    const struct larder__pack_field *source;
    char *member;         /* tar member name (tar format) */
    uint64_t header_size; /* tar header blocks before the data */
    uint64_t npy_size;    /* npy header larder writes before raw array data (tar only) */
};

struct out_sample {
    uint64_t plan_index;
    uint64_t index_id;
    uint32_t shard;
    uint64_t offset, length;
    struct out_field *fields;
    uint32_t num_fields;
};

struct pack_job {
    const larder_pack_options *options;
    struct larder__pack_plan *plan;
    struct larder__index_builder *builder;
    const char *outdir;
    int format;
    struct out_sample *samples; /* in shard order */
    uint64_t num_samples;
    uint64_t *shard_first; /* first sample of each shard, plus an end marker */
    uint64_t *shard_bytes;
    uint32_t num_shards;
    atomic_uint next_shard;
    atomic_ullong bytes_done;
    uint64_t bytes_total;
    pthread_mutex_t lock; /* error and progress */
    int error;
    char error_message[1024];
};

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound) without modulo bias. */
static uint64_t random_below(uint64_t *state, uint64_t bound)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do
        x = splitmix64(state);
    while (x >= limit);
    return x % bound;
}

static void shard_name(char *out, size_t size, uint32_t shard, int format)
{
    snprintf(out, size, "shard-%06u.%s", shard, format == LARDER_FORMAT_FLAT ? "bin" : "tar");
}

/* Sizes and index records for every sample; no data is read except .npy heads. */
static int lay_out(struct pack_job *job)
{
    struct larder__pack_plan *plan = job->plan;
    uint64_t n = plan->num_samples;
    uint64_t *order = malloc(n * sizeof *order);
    job->samples = calloc(n, sizeof *job->samples);
    job->shard_first = malloc((n + 1) * sizeof *job->shard_first);
    job->shard_bytes = calloc(n + 1, sizeof *job->shard_bytes);
    if (!order || !job->samples || !job->shard_first || !job->shard_bytes) {
        free(order);
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    if (job->options->shuffle) {
        uint64_t state = job->options->shuffle_seed;
        for (uint64_t i = n; i > 1; i--) {
            uint64_t j = random_below(&state, i);
            uint64_t t = order[i - 1];
            order[i - 1] = order[j], order[j] = t;
        }
    }
    uint64_t shard_size = job->options->shard_size ? job->options->shard_size : (1ull << 30);
    uint64_t position = 0;
    int64_t shard = -1;
    uint64_t end_marker = job->format == LARDER_FORMAT_TAR ? 2 * LARDER_TAR_BLOCK : 0;
    int rc = 0;
    struct larder__field *index_fields = NULL;
    size_t cap_index_fields = 0;
    for (uint64_t k = 0; k < n && rc == 0; k++) {
        const char *key;
        struct larder__pack_source *source;
        const struct larder__pack_field *fields;
        uint32_t num_fields;
        larder__pack_plan_sample(plan, order[k], &key, &source, &fields, &num_fields);
        struct out_sample *s = &job->samples[k];
        s->plan_index = order[k];
        s->num_fields = num_fields;
        s->fields = calloc(num_fields ? num_fields : 1, sizeof *s->fields);
        if (!s->fields || larder__reserve((void **)&index_fields, &cap_index_fields,
                                          num_fields ? num_fields : 1, sizeof *index_fields) < 0) {
            rc = -ENOMEM;
            break;
        }
        /* sizes first, so the sample can go to the next shard when it would overflow */
        uint64_t length = 0;
        for (uint32_t f = 0; f < num_fields; f++) {
            struct out_field *of = &s->fields[f];
            const struct larder__pack_field *pf = &fields[f];
            struct larder__field *ixf = &index_fields[f];
            memset(ixf, 0, sizeof *ixf);
            of->source = pf;
            ixf->name = pf->name;
            ixf->dtype = pf->dtype;
            ixf->ndim = pf->dtype ? pf->ndim : 0;
            for (uint32_t d = 0; d < ixf->ndim; d++)
                ixf->shape[d] = pf->shape[d];
            uint64_t data_size = pf->size, data_offset = 0;
            if (pf->dtype != LARDER_DTYPE_NONE && job->format == LARDER_FORMAT_TAR) {
                uint8_t npy[LARDER_NPY_MAX_HEADER];
                of->npy_size = larder__npy_write_header(npy, pf->dtype, pf->ndim, pf->shape);
                data_offset = of->npy_size;
                data_size += of->npy_size;
            }
            struct larder__npy sniffed;
            ixf->length = pf->size;
            if (sniff_npy(source, pf, &sniffed)) {
                ixf->name = arena_strndup(plan, pf->name, larder__npy_bare_length(pf->name));
                if (!ixf->name) {
                    rc = -ENOMEM;
                    break;
                }
                ixf->dtype = sniffed.dtype;
                ixf->ndim = sniffed.ndim;
                memcpy(ixf->shape, sniffed.shape, sizeof sniffed.shape);
                data_offset = sniffed.data_offset;
                ixf->length = sniffed.data_length;
            }
            if (job->format == LARDER_FORMAT_TAR) {
                size_t member_length = strlen(key) + 1 + strlen(pf->name) + 5;
                of->member = malloc(member_length);
                if (!of->member) {
                    rc = -ENOMEM;
                    break;
                }
                snprintf(of->member, member_length, "%s.%s%s", key, pf->name,
                         of->npy_size ? ".npy" : "");
                if (strlen(of->member) >= LARDER_TAR_MAX_NAME) {
                    rc = larder__fail(LARDER_EUSAGE, "%s: member name '%.80s...' is too long",
                                      source->name, of->member);
                    break;
                }
                of->header_size = larder__tar_member_header_size(of->member, data_size);
            }
            ixf->offset = length + of->header_size + data_offset;
            length += of->header_size + data_size;
            if (job->format == LARDER_FORMAT_TAR) length += larder__tar_padding(data_size);
        }
        if (rc < 0) break;
        if (shard < 0 || (position > 0 && position + length > shard_size)) {
            if (shard >= 0) job->shard_bytes[shard] = position + end_marker;
            shard++;
            char name[64];
            shard_name(name, sizeof name, (uint32_t)shard, job->format);
            int64_t added =
                larder__index_builder_add_shard(job->builder, name, (uint32_t)job->format);
            if (added < 0) {
                rc = (int)added;
                break;
            }
            job->shard_first[shard] = k;
            position = 0;
        }
        s->shard = (uint32_t)shard;
        s->offset = position;
        s->length = length;
        int64_t id =
            larder__index_builder_add_sample(job->builder, (uint32_t)shard, position, length, 0,
                                             key, strlen(key), index_fields, num_fields);
        if (id == LARDER_EDUPKEY) {
            /* name both places the key comes from */
            const char *other = "?";
            for (uint64_t j = 0; j < k; j++) {
                const char *other_key;
                struct larder__pack_source *other_source;
                const struct larder__pack_field *other_fields;
                uint32_t other_count;
                larder__pack_plan_sample(plan, job->samples[j].plan_index, &other_key,
                                         &other_source, &other_fields, &other_count);
                if (strcmp(other_key, key) == 0) other = other_source->name;
            }
            rc = larder__fail(LARDER_EDUPKEY, "duplicate sample key '%s' in %s and %s", key, other,
                              source->name);
            break;
        }
        if (id < 0) {
            rc = (int)id;
            break;
        }
        s->index_id = (uint64_t)id;
        position += length;
        job->bytes_total += length;
    }
    free(index_fields);
    free(order);
    if (rc < 0) return rc;
    job->num_samples = n;
    job->num_shards = (uint32_t)(shard + 1);
    job->shard_bytes[shard] = position + end_marker;
    job->shard_first[shard + 1] = n;
    return 0;
}

/* ---- writing ------------------------------------------------------------- */

struct shard_writer {
    int fd;
    const char *path;
    uint64_t offset;
    XXH3_state_t shard_hash, sample_hash;
    uint8_t *buf; /* CHUNK bytes */
    size_t used;
};

static int writer_flush(struct shard_writer *w)
{
    int rc = larder__pwrite_full(w->fd, w->buf, w->used, w->offset, w->path);
    w->offset += w->used;
    w->used = 0;
    return rc;
}

static int writer_put(struct shard_writer *w, const void *data, size_t length)
{
    XXH3_64bits_update(&w->shard_hash, data, length);
    XXH3_64bits_update(&w->sample_hash, data, length);
    const uint8_t *p = data;
    while (length) {
        size_t n = CHUNK - w->used < length ? CHUNK - w->used : length;
        memcpy(w->buf + w->used, p, n);
        w->used += n, p += n, length -= n;
        if (w->used == CHUNK) {
            int rc = writer_flush(w);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

/* Read a field's data from its source straight into the write buffer. */
static int writer_copy(struct shard_writer *w, struct larder__pack_source *source,
                       const struct larder__pack_field *field)
{
    for (uint64_t done = 0; done < field->size;) {
        if (w->used == CHUNK) {
            int rc = writer_flush(w);
            if (rc < 0) return rc;
        }
        size_t n = CHUNK - w->used;
        if (n > field->size - done) n = (size_t)(field->size - done);
        int rc = source->ops->read(source, field, done, w->buf + w->used, n);
        if (rc < 0) return rc;
        XXH3_64bits_update(&w->shard_hash, w->buf + w->used, n);
        XXH3_64bits_update(&w->sample_hash, w->buf + w->used, n);
        w->used += n;
        done += n;
    }
    return 0;
}

static int write_sample(struct pack_job *job, struct shard_writer *w, const struct out_sample *s)
{
    static const uint8_t zeros[LARDER_TAR_BLOCK];
    const char *key;
    struct larder__pack_source *source;
    const struct larder__pack_field *fields;
    uint32_t num_fields;
    larder__pack_plan_sample(job->plan, s->plan_index, &key, &source, &fields, &num_fields);
    XXH3_64bits_reset(&w->sample_hash);
    uint64_t start = w->offset + w->used;
    int rc = 0;
    for (uint32_t f = 0; f < s->num_fields && rc == 0; f++) {
        const struct out_field *of = &s->fields[f];
        uint64_t data_size = of->source->size + of->npy_size;
        if (job->format == LARDER_FORMAT_TAR) {
            uint8_t header[LARDER_TAR_BLOCK * 3 + LARDER_TAR_MAX_NAME * 2];
            int n = larder__tar_member_header(header, sizeof header, of->member, data_size);
            if (n < 0) return n;
            rc = writer_put(w, header, (size_t)n);
        }
        if (rc == 0 && of->npy_size) {
            uint8_t npy[LARDER_NPY_MAX_HEADER];
            size_t n = larder__npy_write_header(npy, of->source->dtype, of->source->ndim,
                                                of->source->shape);
            rc = writer_put(w, npy, n);
        }
        if (rc == 0) rc = writer_copy(w, source, of->source);
        if (rc == 0 && job->format == LARDER_FORMAT_TAR)
            rc = writer_put(w, zeros, (size_t)larder__tar_padding(data_size));
    }
    if (rc < 0) return rc;
    if (w->offset + w->used - start != s->length)
        return larder__fail(LARDER_EUSAGE, "%s: sample '%s' changed size while packing",
                            source->name, key);
    larder__index_builder_set_checksum(job->builder, s->index_id,
                                       XXH3_64bits_digest(&w->sample_hash));
    return 0;
}

static int write_shard(struct pack_job *job, uint32_t shard, uint8_t *buf)
{
    char name[64], path[PATH_MAX], tmp[PATH_MAX];
    shard_name(name, sizeof name, shard, job->format);
    if (snprintf(path, sizeof path, "%s/%s", job->outdir, name) >= (int)sizeof path - 4)
        return larder__fail(-ENAMETOOLONG, "%s: path too long", job->outdir);
    memcpy(tmp, path, strlen(path));
    strcpy(tmp + strlen(path), ".tmp");
    int fd = larder__open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fd;
    struct shard_writer w = {.fd = fd, .path = tmp, .buf = buf};
    XXH3_64bits_reset(&w.shard_hash);
    int rc = 0;
    for (uint64_t k = job->shard_first[shard]; k < job->shard_first[shard + 1] && rc == 0; k++) {
        rc = write_sample(job, &w, &job->samples[k]);
        uint64_t before = atomic_fetch_add(&job->bytes_done, job->samples[k].length);
        if (rc == 0 && job->options->progress) {
            pthread_mutex_lock(&job->lock);
            job->options->progress(job->options->progress_userdata, before + job->samples[k].length,
                                   job->bytes_total);
            pthread_mutex_unlock(&job->lock);
        }
    }
    if (rc == 0 && job->format == LARDER_FORMAT_TAR) {
        static const uint8_t end[2 * LARDER_TAR_BLOCK];
        rc = writer_put(&w, end, sizeof end);
    }
    if (rc == 0) rc = writer_flush(&w);
    if (rc == 0 && larder__sys.fsync(fd) < 0)
        rc = larder__fail(-errno, "%s: fsync: %s", tmp, strerror(errno));
    larder__sys.close(fd);
    if (rc == 0 && larder__sys.rename(tmp, path) < 0)
        rc = larder__fail(-errno, "%s: %s", path, strerror(errno));
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    larder__index_builder_set_shard(job->builder, shard, w.offset,
                                    XXH3_64bits_digest(&w.shard_hash));
    return 0;
}

static void *writer_thread(void *arg)
{
    struct pack_job *job = arg;
    uint8_t *buf = malloc(CHUNK);
    for (;;) {
        pthread_mutex_lock(&job->lock);
        int stop = job->error;
        pthread_mutex_unlock(&job->lock);
        if (stop) break;
        unsigned shard = atomic_fetch_add(&job->next_shard, 1);
        if (shard >= job->num_shards) break;
        int rc = buf ? write_shard(job, shard, buf) : -ENOMEM;
        if (rc < 0) {
            pthread_mutex_lock(&job->lock);
            if (!job->error) {
                job->error = rc;
                snprintf(job->error_message, sizeof job->error_message, "%s", larder_errmsg());
            }
            pthread_mutex_unlock(&job->lock);
            break;
        }
    }
    free(buf);
    return NULL;
}

/* ---- larder_pack ----------------------------------------------------------- */

static int add_source(struct larder__pack_plan *plan, const char *path,
                      const larder_pack_options *options)
{
    struct stat st;
    if (stat(path, &st) < 0) return larder__fail(-errno, "%s: %s", path, strerror(errno));
    struct larder__pack_source *source;
    uint64_t before = plan->num_samples;
    int rc;
    if (S_ISDIR(st.st_mode))
        rc = larder__dir_source_open(plan, path, &source);
    else if (!S_ISREG(st.st_mode))
        return larder__fail(LARDER_EUSAGE, "%s: not a directory, tar archive or HDF5 file", path);
    else if (larder__is_hdf5(path))
        rc = larder__hdf5_source_open(plan, path, options, &source);
    else
        rc = larder__tar_source_open(plan, path, &source);
    if (rc == 0 && plan->num_samples == before)
        rc = larder__fail(LARDER_EEMPTY, "%s: source holds no samples", path);
    if (rc < 0) plan->num_samples = before; /* what a failed source added is not packed */
    return rc;
}

static int make_dir(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return larder__fail(-errno, "%s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return larder__fail(-errno, "%s: %s", buf, strerror(errno));
    return 0;
}

int larder_pack(const char *const *sources, size_t num_sources, const char *outdir,
                const larder_pack_options *options, larder_pack_result *result)
{
    larder_pack_options defaults = {.version = LARDER_PACK_OPTIONS_VERSION, .shuffle = 1};
    if (!options) options = &defaults;
    if (options->version != LARDER_PACK_OPTIONS_VERSION)
        return larder__fail(LARDER_EUSAGE, "larder_pack: options version %d, expected %d",
                            options->version, LARDER_PACK_OPTIONS_VERSION);
    if (num_sources == 0) return larder__fail(LARDER_EUSAGE, "no sources to pack");
    int format = options->format ? options->format : LARDER_FORMAT_TAR;
    if (format != LARDER_FORMAT_TAR && format != LARDER_FORMAT_FLAT)
        return larder__fail(LARDER_EUSAGE, "unknown shard format %d", options->format);

    struct pack_job job = {.options = options, .outdir = outdir, .format = format};
    pthread_mutex_init(&job.lock, NULL);
    int rc = larder__pack_plan_new(&job.plan);
    if (rc == 0) rc = larder__index_builder_new(&job.builder, options->block_size);
    for (size_t i = 0; rc == 0 && i < num_sources; i++)
        rc = add_source(job.plan, sources[i], options);
    if (rc == 0) rc = lay_out(&job);
    if (rc == 0) rc = make_dir(outdir);
    if (rc == 0) {
        int jobs = options->jobs > 0 ? options->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (jobs < 1) jobs = 1;
        if ((unsigned)jobs > job.num_shards) jobs = (int)job.num_shards;
        pthread_t threads[256];
        if (jobs > 256) jobs = 256;
        int started = 0;
        for (; started < jobs - 1; started++)
            if (pthread_create(&threads[started], NULL, writer_thread, &job) != 0) break;
        writer_thread(&job);
        for (int t = 0; t < started; t++)
            pthread_join(threads[t], NULL);
        if (job.error) rc = larder__fail(job.error, "%s", job.error_message);
    }
    char index_path[PATH_MAX], id[33] = "";
    snprintf(index_path, sizeof index_path, "%s/index.larder", outdir);
    if (rc == 0) rc = larder__index_builder_write(job.builder, index_path, id);
    if (rc == 0 && result) {
        result->num_samples = job.num_samples;
        result->num_shards = job.num_shards;
        result->bytes_written = 0;
        for (uint32_t i = 0; i < job.num_shards; i++)
            result->bytes_written += job.shard_bytes[i];
        memcpy(result->dataset_id, id, sizeof id);
    }
    for (uint64_t k = 0; job.samples && k < job.plan->num_samples; k++) {
        for (uint32_t f = 0; job.samples[k].fields && f < job.samples[k].num_fields; f++)
            free(job.samples[k].fields[f].member);
        free(job.samples[k].fields);
    }
    free(job.samples);
    free(job.shard_first);
    free(job.shard_bytes);
    larder__index_builder_free(job.builder);
    larder__pack_plan_free(job.plan);
    pthread_mutex_destroy(&job.lock);
    return rc;
}
