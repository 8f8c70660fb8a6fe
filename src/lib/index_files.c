/*
 * index_files.c - larder_index_files: a tree of plain files as a dataset,
 * each file one sample and one flat shard, read once where it is for its
 * checksums (the whole file, and every checksum block of a large one, so
 * that a range of a checkpoint is checked by the blocks covering it).
 * Nothing is copied or rewritten.
 *
 * Two steps: the names (a walk of a local directory, or a list of names
 * under a local or http(s) root), then each file streamed through its
 * source into the hashes, and the index written.  The walk never follows
 * a symbolic link, so nothing outside the root gets in.
 */
#include "confine.h"
#include "index.h"
#include "s3_list.h"
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "hash.h"

#define DEFAULT_LARGE_FILE (UINT64_C(4) << 20)

/* What a listing says of a file: its size (UINT64_MAX: not listed) and a
 * stamp of its version (local files: file_stamp; S3: its ETag and
 * LastModified), which a listing-only index records in place of the
 * checksum it cannot have, so a file changed at the same size gives
 * another dataset id (and so another cache) at the next listing. */
struct listed {
    uint64_t size, stamp;
};

/* The names to index, relative to the root, and what the walk needs. */
struct names {
    char **items;
    struct listed *listed; /* each item's size and version as listed */
    size_t count, capacity, listed_capacity;
    uint64_t total_bytes; /* sizes seen while listing (local roots) */
    const char *root;     /* local: absolute, without a trailing '/' */
    const char *index;    /* the index's absolute path: skipped */
    size_t index_length;
};

/* Whether `s` is well-formed UTF-8 (the format's strings are). */
static bool utf8_ok(const unsigned char *s)
{
    while (*s) {
        unsigned char c = *s;
        size_t n = c < 0x80             ? 0
                   : (c & 0xe0) == 0xc0 ? 1
                   : (c & 0xf0) == 0xe0 ? 2
                   : (c & 0xf8) == 0xf0 ? 3
                                        : 4;
        if (n == 4 || (n == 1 && c < 0xc2) || (n == 3 && c > 0xf4)) return false;
        for (size_t i = 1; i <= n; i++)
            if ((s[i] & 0xc0) != 0x80) return false;
        if (n == 2 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))) return false;
        if (n == 3 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))) return false;
        s += n + 1;
    }
    return true;
}

/* Why a file named `name` (relative) cannot be indexed, or NULL. */
static const char *refused(const char *name)
{
    /* names are checked as a network base would check them: the tree and
     * its index may be served over HTTP as they are */
    const char *why = larder__unconfined_reason(name, true);
    if (why) return why;
    /* a '%' would be read as an escape in a URL ("50%.txt", "a%41") */
    if (strchr(name, '%')) return "a '%' (an escape in a URL)";
    if (!utf8_ok((const unsigned char *)name)) return "a name that is not UTF-8";
    return NULL;
}

static void skip(const char *name, const char *why)
{
    larder__log(LARDER_LOG_WARN, "%s: skipped, %s", name, why);
}

/* A local file's version: what changes when it is written or replaced
 * (its modification and change times to the nanosecond, the change time
 * being one no user can set back; its inode and device). */
static uint64_t file_stamp(const struct stat *st)
{
    uint64_t v[6] = {(uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec,
                     (uint64_t)st->st_ctim.tv_sec, (uint64_t)st->st_ctim.tv_nsec,
                     (uint64_t)st->st_ino,         (uint64_t)st->st_dev};
    return XXH3_64bits(v, sizeof v);
}

static int add_name(struct names *n, const char *name, size_t length, uint64_t size, uint64_t stamp)
{
    if (larder__reserve((void **)&n->items, &n->capacity, n->count + 1, sizeof *n->items) < 0 ||
        larder__reserve((void **)&n->listed, &n->listed_capacity, n->count + 1, sizeof *n->listed) <
            0)
        return -ENOMEM;
    if (!(n->items[n->count] = strndup(name, length))) return -ENOMEM;
    n->listed[n->count] = (struct listed){.size = size, .stamp = stamp};
    n->count++;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether `full` is the index being written or one of its writer's temporary files. */
static bool is_own_index(const struct names *n, const char *full)
{
    if (!n->index || strncmp(full, n->index, n->index_length) != 0) return false;
    const char *rest = full + n->index_length;
    if (!*rest) return true;
    if (strncmp(rest, ".tmp", 4) != 0 || !rest[4]) return false;
    for (rest += 4; *rest; rest++)
        if (*rest < '0' || *rest > '9') return false;
    return true;
}

/* The entries of directory `rel` ("" for the root), in byte order, depth first. */
static int walk(struct names *n, const char *rel)
{
    size_t full_length = strlen(n->root) + 1 + strlen(rel) + 1;
    char *full = malloc(full_length);
    if (!full) return -ENOMEM;
    snprintf(full, full_length, "%s%s%s", n->root, rel[0] ? "/" : "", rel);
    DIR *dir = opendir(full);
    if (!dir) {
        int rc = larder__fail(-errno, "%s: %s", full, strerror(errno));
        free(full);
        return rc;
    }
    char **entries = NULL;
    size_t count = 0, capacity = 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (errno = 0, e = readdir(dir));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (larder__reserve((void **)&entries, &capacity, count + 1, sizeof *entries) < 0 ||
            !(entries[count] = strdup(e->d_name)))
            rc = -ENOMEM;
        else
            count++;
    }
    if (rc == 0 && errno) rc = larder__fail(-errno, "%s: %s", full, strerror(errno));
    if (count) qsort(entries, count, sizeof *entries, by_name);
    for (size_t i = 0; rc == 0 && i < count; i++) {
        size_t length = strlen(rel) + 1 + strlen(entries[i]) + 1;
        char *child = malloc(length), *path = malloc(full_length + strlen(entries[i]) + 1);
        if (!child || !path) {
            free(child), free(path);
            rc = -ENOMEM;
            break;
        }
        snprintf(child, length, "%s%s%s", rel, rel[0] ? "/" : "", entries[i]);
        snprintf(path, full_length + strlen(entries[i]) + 1, "%s/%s", full, entries[i]);
        struct stat st;
        const char *why = NULL;
        if (fstatat(dirfd(dir), entries[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
            rc = larder__fail(-errno, "%s: %s", path, strerror(errno));
        else if (S_ISLNK(st.st_mode))
            skip(child, "a symbolic link (not followed)");
        else if (S_ISDIR(st.st_mode) && (why = refused(child)))
            skip(child, why);
        else if (S_ISDIR(st.st_mode))
            rc = walk(n, child);
        else if (!S_ISREG(st.st_mode))
            skip(child, "not a regular file");
        else if (is_own_index(n, path))
            ; /* the index itself, or its writer's temporary file */
        else if ((why = refused(child)))
            skip(child, why);
        else if ((rc = add_name(n, child, strlen(child), (uint64_t)st.st_size, file_stamp(&st))) ==
                 0)
            n->total_bytes += (uint64_t)st.st_size;
        free(child), free(path);
    }
    for (size_t i = 0; i < count; i++)
        free(entries[i]);
    free(entries);
    closedir(dir);
    free(full);
    return rc;
}

/*
 * The names a list file holds, one a line (empty lines ignored).  Under
 * a local root each must be a regular file reached without a symbolic
 * link; a network root is taken at its word.
 */
static int read_list(struct names *n, const char *list, bool local)
{
    uint8_t *data;
    uint64_t size;
    int rc = larder__source_load(list, LARDER__LOAD_LIST_MAX, "a list of names", &data, &size);
    if (rc < 0) return rc;
    for (uint64_t at = 0; rc == 0 && at < size;) {
        const uint8_t *newline = memchr(data + at, '\n', (size_t)(size - at));
        size_t length = newline ? (size_t)(newline - (data + at)) : (size_t)(size - at);
        char *name = strndup((const char *)data + at, length);
        at += length + 1;
        if (!name) {
            rc = -ENOMEM;
            break;
        }
        if (length && name[length - 1] == '\r') name[--length] = '\0';
        const char *why = NULL;
        if (length == 0)
            ;
        else if (strlen(name) != length)
            skip("(a listed name)", "a NUL byte in its name");
        else if ((why = refused(name)))
            skip(name, why);
        else if (local) {
            size_t full_length = strlen(n->root) + 1 + length + 1;
            char *full = malloc(full_length);
            char resolved[PATH_MAX];
            struct stat st;
            if (!full) {
                rc = -ENOMEM;
            } else {
                snprintf(full, full_length, "%s/%s", n->root, name);
                if (lstat(full, &st) < 0)
                    rc = larder__fail(-errno, "%s: %s", full, strerror(errno));
                else if (!S_ISREG(st.st_mode))
                    skip(name, "not a regular file");
                else if (!realpath(full, resolved) || strcmp(resolved, full) != 0)
                    skip(name, "a symbolic link, '.' or '//' on its path");
                else if (!is_own_index(n, full) &&
                         (rc = add_name(n, name, length, (uint64_t)st.st_size, file_stamp(&st))) ==
                             0)
                    n->total_bytes += (uint64_t)st.st_size;
            }
            free(full);
        } else {
            rc = add_name(n, name, length, UINT64_MAX, 0);
        }
        free(name);
    }
    free(data);
    return rc;
}

/* An object S3 listed: indexed unless its name is refused (or it is a folder marker). */
static int on_object(void *userdata, const char *name, size_t length, uint64_t size, uint64_t stamp)
{
    struct names *n = userdata;
    if (length && name[length - 1] == '/' && size == 0) return 0;
    char *copy = strndup(name, length);
    if (!copy) return -ENOMEM;
    const char *why = strlen(copy) != length ? "a NUL byte in its name" : refused(copy);
    int rc = 0;
    if (why)
        skip(copy, why);
    else if ((rc = add_name(n, name, length, size, stamp)) == 0)
        n->total_bytes += size;
    free(copy);
    return rc;
}

/* ---- one file ------------------------------------------------------------- */

struct hashing {
    XXH3_state_t whole, block;
    uint64_t size;
    uint32_t shift; /* checksum blocks of 2^shift bytes */
    uint64_t *sums; /* one per finished block */
    size_t count, capacity;
    uint64_t *done, total; /* progress, across files */
    larder_progress_fn progress;
    void *userdata;
};

static int hash_sink(void *userdata, const void *data, size_t length)
{
    struct hashing *h = userdata;
    const uint8_t *p = data;
    XXH3_64bits_update(&h->whole, p, length);
    *h->done += length;
    uint64_t block = UINT64_C(1) << h->shift;
    while (length) {
        uint64_t room = block - (h->size & (block - 1));
        size_t n = room < length ? (size_t)room : length;
        XXH3_64bits_update(&h->block, p, n);
        h->size += n, p += n, length -= n;
        if ((h->size & (block - 1)) == 0) {
            if (larder__reserve((void **)&h->sums, &h->capacity, h->count + 1, 8) < 0)
                return -ENOMEM;
            h->sums[h->count++] = XXH3_64bits_digest(&h->block);
            XXH3_64bits_reset(&h->block);
        }
    }
    if (h->progress) h->progress(h->userdata, *h->done, h->total);
    return 0;
}

/* The field a file's bytes are: its extension (after the last '.' of its name), or "data". */
static const char *field_name(const char *name, char *buf, size_t capacity)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base || !dot[1]) return "data";
    snprintf(buf, capacity, "%s", dot + 1);
    return buf;
}

/*
 * Stream `location` once, and add it as shard and sample `key` named
 * `name`: a checksum of the whole file, and block checksums when it is
 * larger than `large_file`.
 */
static int index_file(struct larder__index_builder *b, const char *location, const char *name,
                      const char *key, uint64_t large_file, struct hashing *h, uint64_t *bytes)
{
    int64_t shard = larder__index_builder_add_shard(b, name, LARDER_FORMAT_FLAT);
    if (shard < 0) return (int)shard;
    struct larder__source *source;
    int rc = larder__source_open(&source, location, NULL);
    if (rc < 0) return rc;
    XXH3_64bits_reset(&h->whole);
    XXH3_64bits_reset(&h->block);
    h->size = 0, h->count = 0;
    rc = larder__source_stream(source, hash_sink, h);
    larder__source_close(source);
    if (rc < 0) return larder__fail_context(rc, "%s", location);
    if (h->size & ((UINT64_C(1) << h->shift) - 1)) { /* the last, shorter block */
        if (larder__reserve((void **)&h->sums, &h->capacity, h->count + 1, 8) < 0) return -ENOMEM;
        h->sums[h->count++] = XXH3_64bits_digest(&h->block);
    }
    uint64_t checksum = XXH3_64bits_digest(&h->whole);
    larder__index_builder_set_shard(b, (uint32_t)shard, h->size, checksum);
    if (h->size > large_file && (rc = larder__index_builder_set_block_sums(
                                     b, (uint32_t)shard, h->shift, h->sums, h->count)) < 0)
        return rc;
    char buf[256];
    struct larder__field field = {.name = field_name(key, buf, sizeof buf), .length = h->size};
    int64_t id = larder__index_builder_add_sample(b, (uint32_t)shard, 0, h->size, checksum, key,
                                                  strlen(key), &field, 1);
    *bytes += h->size;
    return id < 0 ? (int)id : 0;
}

/*
 * Add `name` as shard and sample `key` as listed, nothing read
 * (listing_only): no checksum, the index marked unchecked; the sample's
 * checksum field holds the listing's stamp of the file's version instead
 * (docs/format.md, flag 4), never checked, so that the dataset id (a hash
 * of the whole index) changes when a file does.
 */
static int list_file(struct larder__index_builder *b, const char *name, const char *key,
                     struct listed listed, uint64_t *bytes)
{
    uint64_t size = listed.size;
    if (size == UINT64_MAX)
        return larder__fail(LARDER_EUNSUPPORTED,
                            "%s: no size listed (a network list of names): cannot index it "
                            "from the listing only",
                            key);
    int64_t shard = larder__index_builder_add_shard(b, name, LARDER_FORMAT_FLAT);
    if (shard < 0) return (int)shard;
    larder__index_builder_set_shard(b, (uint32_t)shard, size, 0);
    char buf[256];
    struct larder__field field = {.name = field_name(key, buf, sizeof buf), .length = size};
    int64_t id = larder__index_builder_add_sample(b, (uint32_t)shard, 0, size, listed.stamp, key,
                                                  strlen(key), &field, 1);
    *bytes += size;
    return id < 0 ? (int)id : 0;
}

/* ---- the whole tree ------------------------------------------------------- */

/* The options with their defaults filled in; 0 or LARDER_EUSAGE. */
static int take_options(const larder_index_files_options *given, larder_index_files_options *o,
                        uint32_t *shift)
{
    memset(o, 0, sizeof *o);
    if (given) {
        size_t size = given->struct_size < sizeof *o ? given->struct_size : sizeof *o;
        memcpy(o, given, size);
    }
    if (o->block_size == 0) o->block_size = LARDER__DEFAULT_BLOCK_SIZE;
    if (o->checksum_block == 0) /* the default, or the block size when that is larger */
        o->checksum_block =
            o->block_size > LARDER__DEFAULT_SUM_BLOCK ? o->block_size : LARDER__DEFAULT_SUM_BLOCK;
    if (o->checksum_block < o->block_size)
        return larder__fail(LARDER_EUSAGE,
                            "checksum block of %llu bytes is smaller than the block size (%u)",
                            (unsigned long long)o->checksum_block, o->block_size);
    if (o->large_file == 0) o->large_file = DEFAULT_LARGE_FILE;
    *shift = 0;
    while (*shift < 63 && (UINT64_C(1) << *shift) < o->checksum_block)
        (*shift)++;
    if ((UINT64_C(1) << *shift) != o->checksum_block || *shift < LARDER__MIN_SUM_SHIFT ||
        *shift > LARDER__MAX_SUM_SHIFT)
        return larder__fail(LARDER_EUSAGE,
                            "checksum block of %llu bytes: a power of two from %u bytes to %u MiB "
                            "is needed",
                            (unsigned long long)o->checksum_block, 1u << LARDER__MIN_SUM_SHIFT,
                            (1u << LARDER__MAX_SUM_SHIFT) >> 20);
    return 0;
}

/* The index's directory, absolute, into *out, and its file name; 0 or a negative code. */
static int index_directory(const char *index_path, char **out, const char **base_name)
{
    char directory[PATH_MAX], resolved[PATH_MAX];
    snprintf(directory, sizeof directory, "%s", index_path);
    char *slash = strrchr(directory, '/');
    *base_name = slash ? index_path + (slash - directory) + 1 : index_path;
    if (slash == directory)
        snprintf(directory, sizeof directory, "/");
    else if (slash)
        *slash = '\0';
    else
        snprintf(directory, sizeof directory, ".");
    if (!realpath(directory, resolved))
        return larder__fail(-errno, "%s: %s", directory, strerror(errno));
    return (*out = strdup(resolved)) ? 0 : -ENOMEM;
}

/*
 * How the files are named in the index: `prefix` + their name under the
 * root, relative to the index's directory when the root lies under it
 * (*base NULL), else relative to the root, recorded as the base.
 */
static int naming(const char *root_abs, bool local, const char *index_dir, char **base,
                  char **prefix)
{
    size_t dir_length = strcmp(index_dir, "/") == 0 ? 0 : strlen(index_dir);
    *base = NULL;
    if (local && strncmp(root_abs, index_dir, dir_length) == 0 &&
        (root_abs[dir_length] == '/' || root_abs[dir_length] == '\0')) {
        const char *rest = root_abs + dir_length + (root_abs[dir_length] == '/');
        size_t length = strlen(rest) + 2;
        if (!(*prefix = malloc(length))) return -ENOMEM;
        snprintf(*prefix, length, "%s%s", rest, rest[0] ? "/" : "");
        return 0;
    }
    size_t length = strlen(root_abs) + 2;
    if (!(*base = malloc(length)) || !(*prefix = strdup(""))) return -ENOMEM;
    snprintf(*base, length, "%s%s", root_abs, root_abs[strlen(root_abs) - 1] == '/' ? "" : "/");
    return 0;
}

int larder_index_files(const char *root, const char *index_path,
                       const larder_index_files_options *options, larder_pack_result *result)
{
    larder_index_files_options o;
    uint32_t shift = 0;
    int rc = take_options(options, &o, &shift);
    if (rc < 0) return rc;
    bool local = !larder__is_remote(root) && strncmp(root, "s3://", 5) != 0;
    bool s3 = strncmp(root, "s3://", 5) == 0;
    if (s3 && root[strlen(root) - 1] != '/')
        return larder__fail(LARDER_EUSAGE, "%s: an s3:// root ends in '/' (s3://bucket/prefix/)",
                            root);
    if (!local && !s3 && !o.files_from)
        return larder__fail(LARDER_EUNSUPPORTED,
                            "%s: a network root cannot be listed; name its files with a list "
                            "(--files-from)",
                            root);
    const char *index_name;
    char *index_dir = NULL, *root_abs = NULL, *index_abs = NULL, *base = NULL, *prefix = NULL;
    struct names n = {0};
    char resolved[PATH_MAX];
    rc = index_directory(index_path, &index_dir, &index_name);
    size_t length = index_dir ? strlen(index_dir) + 1 + strlen(index_name) + 1 : 0;
    if (rc == 0 && (index_abs = malloc(length)))
        snprintf(index_abs, length, "%s%s%s", index_dir, strcmp(index_dir, "/") ? "/" : "",
                 index_name);
    if (rc == 0 && !index_abs)
        rc = -ENOMEM;
    else if (rc == 0 && local && !realpath(larder__file_path(root), resolved))
        rc = larder__fail(-errno, "%s: %s", root, strerror(errno));
    else if (rc == 0 && !(root_abs = strdup(local ? resolved : root)))
        rc = -ENOMEM;
    if (rc == 0) rc = naming(root_abs, local, index_dir, &base, &prefix);
    n.root = root_abs;
    n.index = index_abs;
    n.index_length = index_abs ? strlen(index_abs) : 0;
    if (rc == 0)
        rc = o.files_from ? read_list(&n, o.files_from, local)
             : s3         ? larder__s3_list(root, on_object, &n)
                          : walk(&n, "");
    struct larder__index_builder *b = NULL;
    if (rc == 0 && n.count == 0) rc = larder__fail(LARDER_EEMPTY, "%s: no files to index", root);
    if (rc == 0) rc = larder__index_builder_new(&b, o.block_size);
    if (rc == 0 && base) rc = larder__index_builder_set_base(b, base);
    if (rc == 0 && o.listing_only) larder__index_builder_set_unchecked(b);
    uint64_t done = 0, bytes = 0;
    struct hashing h = {.shift = shift,
                        .done = &done,
                        .total = n.total_bytes,
                        .progress = o.progress,
                        .userdata = o.userdata};
    for (size_t i = 0; rc == 0 && i < n.count; i++) {
        const char *key = n.items[i];
        size_t name_length = strlen(prefix) + strlen(key) + 1;
        size_t location_length = strlen(root_abs) + 1 + strlen(key) + 1;
        char *name = malloc(name_length), *location = malloc(location_length);
        const char *why = NULL;
        if (!name || !location) {
            rc = -ENOMEM;
        } else {
            snprintf(name, name_length, "%s%s", prefix, key);
            snprintf(location, location_length, "%s%s%s", root_abs,
                     root_abs[strlen(root_abs) - 1] == '/' ? "" : "/", key);
            if ((why = refused(name)))
                rc = larder__fail(LARDER_EUSAGE, "%s: cannot be named in an index: %s", name, why);
            else if (o.listing_only)
                rc = list_file(b, name, key, n.listed[i], &bytes);
            else
                rc = index_file(b, location, name, key, o.large_file, &h, &bytes);
        }
        free(name), free(location);
    }
    char id[33] = "";
    if (rc == 0) rc = larder__index_builder_write(b, index_path, id);
    if (rc == 0 && result) {
        result->num_samples = n.count;
        result->num_shards = n.count;
        result->bytes_written = bytes;
        memcpy(result->dataset_id, id, sizeof id);
    }
    larder__index_builder_free(b);
    for (size_t i = 0; i < n.count; i++)
        free(n.items[i]);
    free(n.items);
    free(n.listed);
    free(h.sums);
    free(root_abs), free(index_abs), free(index_dir), free(base), free(prefix);
    return rc;
}
