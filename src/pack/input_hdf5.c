/*
 * input_hdf5.c - HDF5 files as a packing input (input.h says how a file
 * becomes samples: one per group, or one per row of named datasets).
 * The listing is in hdf5_walk.c, element types and shapes in
 * hdf5_types.c; here are the input itself, its reads and its field cache.
 *
 * Every field is a typed array: HDF5 converts on read to the
 * little-endian memory type hdf5_types.c chooses, so the bytes a field
 * yields are numpy's `.astype('<xN').tobytes()`.  Chunked and filtered
 * (gzip, shuffle...) datasets decode inside HDF5.
 *
 * Threads.  Writer threads call the read op concurrently.  Debian's HDF5
 * is built threadsafe, which means one global lock inside the library;
 * a non-threadsafe build has no lock at all.  So every HDF5 call of the
 * input is made under one process-wide mutex, taken by the ops here,
 * which costs nothing extra with the threadsafe build and keeps a
 * non-threadsafe one safe against larder's own threads; it also guards
 * each input's field cache.
 *
 * Errors.  HDF5 prints its error stack by default, and in a threadsafe
 * build that setting is per thread, so every op switches the calling
 * thread's printing off and restores it on the way out (the library
 * never prints).  The innermost HDF5 message is quoted in ours.
 */
#include "hdf5_input.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads of part of a field (the writer asks for up to 4 MiB at a time)
 * decode the whole field once into a cache slot when it is at most
 * CACHE_FIELD_MAX bytes and the slots hold at most CACHE_BUDGET bytes in
 * all; a slot is freed once its last byte has been handed out, so the
 * cache holds about one field per writer thread.  Larger fields, or a
 * full cache, are read exactly, block by block. */
#define CACHE_FIELD_MAX ((uint64_t)64 << 20)
#define CACHE_BUDGET ((uint64_t)256 << 20)
/* A slot untouched for this many reads was abandoned (a writer failed). */
#define CACHE_STALE_READS 4096

static pthread_mutex_t hdf5_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- HDF5 error handling ---------------------------------------------- */

struct quiet_errors {
    H5E_auto2_t func;
    void *data;
    bool saved;
};

static void errors_off(struct quiet_errors *quiet)
{
    quiet->saved = H5Eget_auto2(H5E_DEFAULT, &quiet->func, &quiet->data) >= 0;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void errors_restore(const struct quiet_errors *quiet)
{
    if (quiet->saved) H5Eset_auto2(H5E_DEFAULT, quiet->func, quiet->data);
}

static void enter(struct quiet_errors *quiet)
{
    pthread_mutex_lock(&hdf5_lock);
    errors_off(quiet);
}

static void leave(const struct quiet_errors *quiet)
{
    errors_restore(quiet);
    pthread_mutex_unlock(&hdf5_lock);
}

static herr_t keep_innermost(unsigned n, const H5E_error2_t *error, void *data)
{
    if (n == 0 && error->desc) snprintf(data, 256, "%s", error->desc);
    return 0;
}

/* Fail with LARDER_EHDF5: "file: object: what (HDF5: innermost message)". */
int larder__hdf5_fail(const char *file, const char *object, const char *what)
{
    char detail[256] = "";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, detail);
    return larder__fail(LARDER_EHDF5, "%s: %s: %s (HDF5: %s)", file, object, what,
                        detail[0] ? detail : "no detail");
}

/* ---- the input's tables ---------------------------------------------- */

const char *larder__hdf5_dataset_path(const struct larder__hdf5_input *source, uint64_t dataset)
{
    return source->paths + source->datasets[dataset].path;
}

/* Append a dataset to the table; its number, or -ENOMEM. */
int64_t larder__hdf5_add_dataset(struct larder__hdf5_input *source, const char *path)
{
    size_t length = strlen(path) + 1;
    int rc = larder__reserve((void **)&source->paths, &source->paths_capacity,
                             source->paths_length + length, 1);
    if (rc == 0)
        rc = larder__reserve((void **)&source->datasets, &source->datasets_capacity,
                             source->num_datasets + 1, sizeof *source->datasets);
    if (rc < 0) return larder__fail(rc, "%s: out of memory", source->base.name);
    memcpy(source->paths + source->paths_length, path, length);
    source->datasets[source->num_datasets] =
        (struct larder__hdf5_dataset){.path = source->paths_length,
                                      .handle = H5I_INVALID_HID,
                                      .memory_type = H5I_INVALID_HID,
                                      .space = H5I_INVALID_HID};
    source->paths_length += length;
    return (int64_t)source->num_datasets++;
}

static void cache_drop(struct larder__hdf5_input *source, struct larder__hdf5_cache_slot *slot)
{
    source->cache_bytes -= slot->size;
    free(slot->data);
    memset(slot, 0, sizeof *slot);
}

/* Called with hdf5_lock held. */
static void source_close_locked(struct larder__hdf5_input *source)
{
    for (size_t i = 0; i < source->num_datasets; i++) {
        const struct larder__hdf5_dataset *entry = &source->datasets[i];
        if (entry->space >= 0) H5Sclose(entry->space);
        if (entry->memory_type >= 0) H5Tclose(entry->memory_type);
        if (entry->handle >= 0) H5Dclose(entry->handle);
    }
    if (source->file >= 0) H5Fclose(source->file);
    for (size_t i = 0; i < LARDER__HDF5_CACHE_SLOTS; i++)
        cache_drop(source, &source->cache[i]);
    free(source->datasets);
    free(source->paths);
    free(source->rows);
    free(source->base.name);
    free(source);
}

static void hdf5_close(struct larder__pack_input *base)
{
    struct quiet_errors quiet;
    enter(&quiet);
    source_close_locked((struct larder__hdf5_input *)base);
    leave(&quiet);
}

/* ---- reading ---------------------------------------------------------- */

/* A union of hyperslab blocks being built on a dataspace. */
struct flat_selection {
    hid_t space;
    int rank;
    const hsize_t *dims;
    hsize_t start[H5S_MAX_RANK], count[H5S_MAX_RANK];
    bool any;
};

/*
 * Select the C-order elements [low, high) of the sub-array at `axis`
 * whose outer indices are fixed in start[0..axis): a partial run at
 * each end recurses one axis deeper, the whole rows between are one
 * block.  At most 2 * rank - 1 blocks in all, and HDF5 visits a
 * hyperslab union in C order, so the elements arrive in flat order.
 */
static int select_flat(struct flat_selection *selection, int axis, hsize_t low, hsize_t high)
{
    if (low >= high) return 0;
    hsize_t inner = 1;
    for (int d = axis + 1; d < selection->rank; d++)
        inner *= selection->dims[d];
    hsize_t first = low / inner, last = high / inner;
    hsize_t low_rest = low % inner, high_rest = high % inner;
    if (first == last) {
        selection->start[axis] = first, selection->count[axis] = 1;
        return select_flat(selection, axis + 1, low_rest, high_rest);
    }
    if (low_rest != 0) {
        selection->start[axis] = first, selection->count[axis] = 1;
        if (select_flat(selection, axis + 1, low_rest, inner) < 0) return -1;
        first++;
    }
    if (last > first) {
        selection->start[axis] = first, selection->count[axis] = last - first;
        for (int d = axis + 1; d < selection->rank; d++)
            selection->start[d] = 0, selection->count[d] = selection->dims[d];
        H5S_seloper_t op = selection->any ? H5S_SELECT_OR : H5S_SELECT_SET;
        if (H5Sselect_hyperslab(selection->space, op, selection->start, NULL, selection->count,
                                NULL) < 0)
            return -1;
        selection->any = true;
    }
    if (high_rest != 0) {
        selection->start[axis] = last, selection->count[axis] = 1;
        if (select_flat(selection, axis + 1, 0, high_rest) < 0) return -1;
    }
    return 0;
}

/*
 * Read elements [first, first + count) of a field (counted in the
 * field's own C order) into `out`.  Called with hdf5_lock held.  A
 * dataset opened anew is checked against what enumeration saw, so a
 * file changed since cannot make HDF5 write past `out`.
 */
static int read_elements(struct larder__hdf5_input *source, const struct larder__pack_field *field,
                         uint64_t first, uint64_t count, void *out)
{
    const char *file = source->base.name;
    const char *path = larder__hdf5_dataset_path(source, field->locator[0]);
    const struct larder__hdf5_dataset *entry = &source->datasets[field->locator[0]];
    bool kept = entry->handle >= 0;
    hid_t dataset = kept ? entry->handle : H5Dopen2(source->file, path, H5P_DEFAULT);
    if (dataset < 0) return larder__hdf5_fail(file, path, "cannot open the dataset");

    /* The dataset's extent: rows mode adds axis 0 in front of the field's shape. */
    hsize_t dims[H5S_MAX_RANK];
    int rank = 0;
    uint64_t base = 0, row_elements = 1;
    if (source->rows_mode) dims[rank++] = source->num_rows;
    for (uint32_t d = 0; d < field->ndim; d++) {
        dims[rank++] = field->shape[d];
        row_elements *= field->shape[d];
    }
    if (source->rows_mode) base = field->locator[1] * row_elements;

    hid_t memory_type = entry->memory_type, file_space = entry->space;
    hid_t memory_space = H5I_INVALID_HID;
    int rc = 0;
    if (!kept) {
        struct larder__hdf5_shape seen;
        rc = larder__hdf5_describe_dataset(dataset, file, path, &seen, &memory_type);
        bool same = rc == 0 && seen.dtype == field->dtype && seen.ndim == (uint32_t)rank;
        for (int d = 0; same && d < rank; d++)
            same = seen.shape[d] == dims[d];
        if (rc == 0 && !same)
            rc = larder__fail(LARDER_EHDF5, "%s: dataset %s: changed since the file was scanned",
                              file, path);
        if (rc == 0 && (file_space = H5Dget_space(dataset)) < 0)
            rc = larder__hdf5_fail(file, path, "cannot read the dataspace");
    }
    if (rc == 0) {
        hsize_t count_dims[1] = {count};
        memory_space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, count_dims, NULL);
        if (memory_space < 0) rc = larder__hdf5_fail(file, path, "cannot make a dataspace");
    }
    if (rc == 0 && rank > 0) {
        struct flat_selection selection = {.space = file_space, .rank = rank, .dims = dims};
        if (select_flat(&selection, 0, base + first, base + first + count) < 0 ||
            H5Sget_select_npoints(file_space) != (hssize_t)count)
            rc = larder__hdf5_fail(file, path, "cannot select the elements to read");
    }
    if (rc == 0 && H5Dread(dataset, memory_type, memory_space, file_space, H5P_DEFAULT, out) < 0) {
        char what[128];
        snprintf(what, sizeof what, "read failed (elements %llu..%llu)",
                 (unsigned long long)(base + first), (unsigned long long)(base + first + count));
        rc = larder__hdf5_fail(file, path, what);
    }
    if (memory_space >= 0) H5Sclose(memory_space);
    if (!kept) {
        if (file_space >= 0) H5Sclose(file_space);
        if (memory_type >= 0) H5Tclose(memory_type);
        H5Dclose(dataset);
    }
    return rc;
}

/* Read bytes [offset, offset + length) of a field exactly.  Lock held. */
static int read_bytes(struct larder__hdf5_input *source, const struct larder__pack_field *field,
                      uint64_t offset, void *buf, size_t length)
{
    uint64_t element = larder_dtype_size(field->dtype);
    uint64_t first = offset / element;
    uint64_t end = (offset + length + element - 1) / element;
    if (offset % element == 0 && length % element == 0)
        return read_elements(source, field, first, end - first, buf);
    /* An unaligned range: read the elements it touches, copy the part asked for. */
    uint8_t *elements = malloc((end - first) * element);
    if (!elements) return larder__fail(-ENOMEM, "%s: out of memory", source->base.name);
    int rc = read_elements(source, field, first, end - first, elements);
    if (rc == 0) memcpy(buf, elements + (offset - first * element), length);
    free(elements);
    return rc;
}

/* Serve part of a field through the cache (see CACHE_FIELD_MAX).  Lock held. */
static int read_cached(struct larder__hdf5_input *source, const struct larder__pack_field *field,
                       uint64_t offset, void *buf, size_t length)
{
    uint64_t now = ++source->clock;
    struct larder__hdf5_cache_slot *slot = NULL, *free_slot = NULL;
    for (size_t i = 0; i < LARDER__HDF5_CACHE_SLOTS; i++) {
        struct larder__hdf5_cache_slot *s = &source->cache[i];
        if (s->data && s->dataset == field->locator[0] && s->row == field->locator[1] &&
            s->size == field->size)
            slot = s;
        else if (s->data && now - s->last_use > CACHE_STALE_READS)
            cache_drop(source, s);
        if (!s->data && !free_slot) free_slot = s;
    }
    if (!slot && free_slot && field->size <= CACHE_FIELD_MAX &&
        source->cache_bytes + field->size <= CACHE_BUDGET) {
        uint8_t *data = malloc(field->size);
        if (data) {
            int rc = read_bytes(source, field, 0, data, field->size);
            if (rc < 0) {
                free(data);
                return rc;
            }
            slot = free_slot;
            *slot = (struct larder__hdf5_cache_slot){.data = data,
                                                     .dataset = field->locator[0],
                                                     .row = field->locator[1],
                                                     .size = field->size};
            source->cache_bytes += field->size;
        }
    }
    if (!slot) return read_bytes(source, field, offset, buf, length);
    memcpy(buf, slot->data + offset, length);
    slot->last_use = now;
    /* The writer reads a field front to back: after its last byte the
     * field is not asked for again. */
    if (offset + length == field->size) cache_drop(source, slot);
    return 0;
}

static int hdf5_read(struct larder__pack_input *base, const struct larder__pack_field *field,
                     uint64_t offset, void *buf, size_t length)
{
    struct larder__hdf5_input *source = (struct larder__hdf5_input *)base;
    if (length == 0) return 0;
    if (field->locator[0] >= source->num_datasets || larder_dtype_size(field->dtype) == 0 ||
        offset > field->size || length > field->size - offset)
        return larder__fail(LARDER_EUSAGE,
                            "%s: field %s: read of %zu bytes at %llu is out of range", base->name,
                            field->name, length, (unsigned long long)offset);
    struct quiet_errors quiet;
    enter(&quiet);
    int rc = offset == 0 && length == field->size ? read_bytes(source, field, 0, buf, length)
                                                  : read_cached(source, field, offset, buf, length);
    leave(&quiet);
    return rc;
}

static int hdf5_list(struct larder__pack_input *base, larder__pack_sample_fn on_sample,
                     void *context)
{
    struct larder__hdf5_input *source = (struct larder__hdf5_input *)base;
    struct quiet_errors quiet;
    enter(&quiet);
    int rc = source->rows_mode ? larder__hdf5_list_rows(source, on_sample, context)
                               : larder__hdf5_list_groups(source, on_sample, context);
    leave(&quiet);
    return rc;
}

static const struct larder__pack_input_ops hdf5_ops = {
    .list = hdf5_list, .read = hdf5_read, .close = hdf5_close};

/* ---- entry points ----------------------------------------------------- */

/* Open the file read-only, with locking where the file system can. */
static int open_file(struct larder__hdf5_input *source, const char *path)
{
    int rc = 0;
    hid_t access = H5Pcreate(H5P_FILE_ACCESS);
    if (access < 0) rc = larder__hdf5_fail(path, "/", "cannot make a file access property list");
#if (H5_VERSION_GE(1, 10, 7) && !H5_VERSION_GE(1, 12, 0)) || H5_VERSION_GE(1, 12, 1)
    /* Lock where the file system can; shared storage often cannot. */
    if (rc == 0) H5Pset_file_locking(access, true, true);
#endif
    if (rc == 0) {
        source->file = H5Fopen(path, H5F_ACC_RDONLY, access);
        if (source->file < 0) {
            char detail[256] = "";
            H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, detail);
            rc = larder__fail(LARDER_EHDF5,
                              "%s: cannot open as HDF5 (not an HDF5 file, or corrupt): %s", path,
                              detail[0] ? detail : "no detail");
        }
    }
    if (access >= 0) H5Pclose(access);
    return rc;
}

int larder__pack_input_hdf5_open(const char *path, const larder_pack_options *options,
                                 struct larder__pack_input **out)
{
    *out = NULL;
    int depth = options ? options->hdf5_group_depth : 0;
    const char *rows = options ? options->hdf5_rows : NULL;
    if (depth == 0) depth = 1;
    if (depth < 0 || depth > LARDER__HDF5_MAX_NESTING)
        return larder__fail(LARDER_EUSAGE, "%s: hdf5_group_depth %d is not in 1..%d", path, depth,
                            LARDER__HDF5_MAX_NESTING);

    struct larder__hdf5_input *source = calloc(1, sizeof *source);
    char *name = strdup(path);
    char *rows_copy = rows && rows[0] ? strdup(rows) : NULL;
    if (!source || !name || (rows && rows[0] && !rows_copy)) {
        free(source);
        free(name);
        free(rows_copy);
        return larder__fail(-ENOMEM, "%s: out of memory", path);
    }
    source->base.ops = &hdf5_ops;
    source->base.name = name;
    source->file = H5I_INVALID_HID;
    source->rows_mode = rows_copy != NULL;
    source->rows = rows_copy;
    source->group_depth = depth;

    struct quiet_errors quiet;
    enter(&quiet);
    int rc = open_file(source, path);
    if (rc < 0) source_close_locked(source);
    leave(&quiet);
    if (rc < 0) return rc;
    *out = &source->base;
    return 0;
}

bool larder__is_hdf5(const char *path)
{
    static const uint8_t signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    int fd;
    do {
        fd = larder__sys.open(path, O_RDONLY | O_CLOEXEC, 0);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return false;
    struct stat st;
    bool found = false;
    if (larder__sys.fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        /* The superblock sits at 0, or after a user block at 512, 1024, 2048... */
        for (uint64_t at = 0; !found && at + sizeof signature <= (uint64_t)st.st_size;
             at = at ? at * 2 : 512) {
            uint8_t head[sizeof signature];
            ssize_t n;
            do {
                n = larder__sys.pread(fd, head, sizeof head, (off_t)at);
            } while (n < 0 && errno == EINTR);
            if (n != (ssize_t)sizeof head) break;
            found = memcmp(head, signature, sizeof signature) == 0;
        }
    }
    larder__sys.close(fd);
    return found;
}
