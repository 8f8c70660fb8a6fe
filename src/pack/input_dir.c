/*
 * input_dir.c - a directory tree as a packing input: every regular file
 * with an extension is a field, files of one WebDataset key ("a/b.jpg",
 * "a/b.cls") one sample.
 *
 * A field's locator is {file number in the input's path table, 0}.  A
 * read opens the file anew each time: a tree may hold more files than a
 * process may keep open, and a field is read in few, large pieces.
 */
#include "input.h"
#include "sys.h"
#include "tar.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

struct dir_input {
    struct larder__pack_input base;
    char **paths; /* full path of each file a field was listed from */
    size_t num_paths, cap_paths;
};

static int dir_read(struct larder__pack_input *input, const struct larder__pack_field *field,
                    uint64_t offset, void *buf, size_t length)
{
    struct dir_input *dir = (struct dir_input *)input;
    const char *path = dir->paths[field->locator[0]];
    int fd = larder__open(path, O_RDONLY, 0);
    if (fd < 0) return fd;
    int rc = larder__pread_full(fd, buf, length, field->locator[1] + offset, path);
    larder__sys.close(fd);
    if (rc == LARDER_ETRUNCATED) return larder__fail(rc, "%s: file shrank while packing", path);
    return rc;
}

static void dir_close(struct larder__pack_input *input)
{
    struct dir_input *dir = (struct dir_input *)input;
    for (size_t i = 0; i < dir->num_paths; i++)
        free(dir->paths[i]);
    free(dir->paths);
    free(dir->base.name);
    free(dir);
}

static int64_t add_path(struct dir_input *dir, const char *path)
{
    if (larder__reserve((void **)&dir->paths, &dir->cap_paths, dir->num_paths + 1,
                        sizeof *dir->paths) < 0 ||
        !(dir->paths[dir->num_paths] = strdup(path)))
        return -ENOMEM;
    return (int64_t)dir->num_paths++;
}

/* ---- the walk ----------------------------------------------------------- */

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

/* Add the regular file or walk the directory at `full` ("root/child"). */
static int visit(struct dir_walk *w, const char *child, const char *full);

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
        rc = visit(w, child, full);
    }
    closedir(dir);
    return rc;
}

static int visit(struct dir_walk *w, const char *child, const char *full)
{
    struct stat st;
    if (lstat(full, &st) < 0) return larder__fail(-errno, "%s: %s", full, strerror(errno));
    if (S_ISLNK(st.st_mode)) {
        /* follow links to files, never to directories (no cycles) */
        if (stat(full, &st) < 0) return larder__fail(-errno, "%s: broken symbolic link", full);
        if (S_ISDIR(st.st_mode)) {
            w->skipped++;
            larder__log(LARDER_LOG_WARN, "%s: " LARDER_PACK_SKIPPED_DIRECTORY_LINK, full);
            return 0;
        }
    }
    if (S_ISDIR(st.st_mode)) return walk(w, child);
    if (!S_ISREG(st.st_mode))
        return larder__fail(LARDER_EUNSAFE, "%s: not a regular file (device, socket or fifo)",
                            full);
    if (larder__reserve((void **)&w->entries, &w->capacity, w->count + 1, sizeof *w->entries) < 0 ||
        !(w->entries[w->count].relative = strdup(child)))
        return -ENOMEM;
    w->entries[w->count++].size = (uint64_t)st.st_size;
    return 0;
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

/* Files without an extension have no WebDataset key: drop them, loudly;
 * sort the rest by key. */
static void keep_keyed(struct dir_walk *w)
{
    size_t kept = 0;
    for (size_t i = 0; i < w->count; i++) {
        size_t key_length;
        const char *ext;
        if (larder__split_key(w->entries[i].relative, &key_length, &ext)) {
            w->entries[kept++] = w->entries[i];
        } else {
            larder__log(LARDER_LOG_WARN, "%s/%s: " LARDER_PACK_SKIPPED_NO_KEY, w->root,
                        w->entries[i].relative);
            free(w->entries[i].relative);
        }
    }
    w->count = kept;
    if (w->count) qsort(w->entries, w->count, sizeof *w->entries, by_key);
}

/* ---- the listing -------------------------------------------------------- */

/* Pass the sample of the entries from `*at` on that share its key. */
static int list_one(struct dir_input *dir, struct dir_walk *w, size_t *at,
                    struct larder__pack_field **fields, size_t *cap_fields,
                    larder__pack_sample_fn on_sample, void *context)
{
    size_t i = *at, j = i, key_length;
    const char *ext;
    larder__split_key(w->entries[i].relative, &key_length, &ext);
    const char *key = w->entries[i].relative;
    uint32_t n = 0;
    int rc = 0;
    for (; j < w->count; j++, n++) {
        size_t kl;
        const char *e;
        larder__split_key(w->entries[j].relative, &kl, &e);
        if (kl != key_length || memcmp(w->entries[j].relative, key, kl) != 0) break;
        if ((rc = larder__reserve((void **)fields, cap_fields, n + 1, sizeof **fields)) < 0)
            return rc;
        char full[PATH_MAX];
        snprintf(full, sizeof full, "%s/%s", dir->base.name, w->entries[j].relative);
        int64_t file = add_path(dir, full);
        if (file < 0) return (int)file;
        (*fields)[n] = (struct larder__pack_field){
            .name = e, .size = w->entries[j].size, .locator = {(uint64_t)file, 0}};
    }
    *at = j;
    return on_sample(context, key, key_length, *fields, n);
}

static int dir_list(struct larder__pack_input *input, larder__pack_sample_fn on_sample,
                    void *context)
{
    struct dir_input *dir = (struct dir_input *)input;
    struct dir_walk w = {.root = dir->base.name};
    int rc = walk(&w, "");
    if (rc == 0) keep_keyed(&w);
    struct larder__pack_field *fields = NULL;
    size_t cap_fields = 0;
    for (size_t i = 0; rc == 0 && i < w.count;)
        rc = list_one(dir, &w, &i, &fields, &cap_fields, on_sample, context);
    free(fields);
    for (size_t i = 0; i < w.count; i++)
        free(w.entries[i].relative);
    free(w.entries);
    return rc;
}

static const struct larder__pack_input_ops dir_ops = {
    .list = dir_list, .read = dir_read, .close = dir_close};

int larder__pack_input_dir_open(const char *path, struct larder__pack_input **out)
{
    *out = NULL;
    struct dir_input *dir = calloc(1, sizeof *dir);
    if (!dir || !(dir->base.name = strdup(path))) {
        free(dir);
        return -ENOMEM;
    }
    dir->base.ops = &dir_ops;
    *out = &dir->base;
    return 0;
}
