/*
 * hdf5src.c - HDF5 files as a packing source (see pack.h for the two
 * ways a file becomes samples: one sample per group, or one per row of
 * named datasets).
 *
 * Enumeration opens the file once, walks it in name order (so the plan
 * is the same on every run) and records each dataset's path in a table;
 * a field's locator is {dataset number in that table, row}.  Every field
 * is a typed array: HDF5 converts on read to the little-endian memory
 * type chosen here, so the bytes a field yields are numpy's
 * `.astype('<xN').tobytes()`.  Chunked and filtered (gzip, shuffle...)
 * datasets decode inside HDF5.
 *
 * Threads.  Writer threads call the read op concurrently.  Debian's HDF5
 * is built threadsafe, which means one global lock inside the library;
 * a non-threadsafe build has no lock at all.  So every HDF5 call in this
 * file is made under one process-wide mutex, which costs nothing extra
 * with the threadsafe build and keeps a non-threadsafe one safe against
 * larder's own threads; it also guards each source's field cache.
 *
 * Errors.  HDF5 prints its error stack by default, and in a threadsafe
 * build that setting is per thread, so every entry point switches the
 * calling thread's printing off and restores it on the way out (the
 * library never prints).  The innermost HDF5 message is quoted in ours.
 */
#include "pack.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Group nesting beyond this is treated as a link cycle. */
#define MAX_NESTING 64
/* Reads of part of a field (the writer asks for up to 4 MiB at a time)
 * decode the whole field once into a cache slot when it is at most
 * CACHE_FIELD_MAX bytes and the slots hold at most CACHE_BUDGET bytes in
 * all; a slot is freed once its last byte has been handed out, so the
 * cache holds about one field per writer thread.  Larger fields, or a
 * full cache, are read exactly, block by block. */
#define CACHE_SLOTS 64
#define CACHE_FIELD_MAX ((uint64_t)64 << 20)
#define CACHE_BUDGET ((uint64_t)256 << 20)
/* A slot untouched for this many reads was abandoned (a writer failed). */
#define CACHE_STALE_READS 4096
/* Rows mode keeps its datasets open; a chunk cache this large lets
 * neighbouring rows share a decoded chunk.  Slots: a prime, as HDF5 asks. */
#define ROWS_CHUNK_CACHE_BYTES ((size_t)32 << 20)
#define ROWS_CHUNK_CACHE_SLOTS 12421

#if H5_VERSION_GE(1, 12, 0)
typedef H5L_info2_t link_info;
#else
typedef H5L_info_t link_info;
#endif

static pthread_mutex_t hdf5_lock = PTHREAD_MUTEX_INITIALIZER;

struct dataset_entry {
    size_t path; /* offset of its absolute path ("/a/b") in source->paths */
    /* Rows mode keeps the dataset open for the source's life, with the
     * type to read it with and its dataspace (reselected on each read);
     * group mode opens it per read and these are H5I_INVALID_HID. */
    hid_t handle, memory_type, space;
};

struct cache_slot {
    uint8_t *data; /* the whole field; NULL: slot free */
    uint64_t dataset, row, size;
    uint64_t last_use; /* source->clock at the last hit */
};

struct hdf5_source {
    struct larder__pack_source base;
    hid_t file;
    bool rows_mode;
    uint64_t num_rows; /* rows mode: length of axis 0 */
    char *paths;       /* NUL-terminated dataset paths, back to back */
    size_t paths_length, paths_capacity;
    struct dataset_entry *datasets;
    size_t num_datasets, datasets_capacity;
    struct cache_slot cache[CACHE_SLOTS];
    uint64_t cache_bytes, clock;
};

/* A dataset's element type and extent as a field records them. */
struct dataset_shape {
    int dtype;
    uint32_t ndim;
    uint64_t shape[LARDER_MAX_DIMS];
    uint64_t size; /* bytes */
};

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
static int fail_hdf5(const char *file, const char *object, const char *what)
{
    char detail[256] = "";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, detail);
    return larder__fail(LARDER_EHDF5, "%s: %s: %s (HDF5: %s)", file, object, what,
                        detail[0] ? detail : "no detail");
}

/* ---- the source's tables ---------------------------------------------- */

static const char *dataset_path(const struct hdf5_source *source, uint64_t dataset)
{
    return source->paths + source->datasets[dataset].path;
}

/* Append a dataset to the table; its number, or -ENOMEM. */
static int64_t add_dataset(struct hdf5_source *source, const char *path)
{
    size_t length = strlen(path) + 1;
    int rc = larder__reserve((void **)&source->paths, &source->paths_capacity,
                             source->paths_length + length, 1);
    if (rc == 0)
        rc = larder__reserve((void **)&source->datasets, &source->datasets_capacity,
                             source->num_datasets + 1, sizeof *source->datasets);
    if (rc < 0) return larder__fail(rc, "%s: out of memory", source->base.name);
    memcpy(source->paths + source->paths_length, path, length);
    source->datasets[source->num_datasets] = (struct dataset_entry){.path = source->paths_length,
                                                                    .handle = H5I_INVALID_HID,
                                                                    .memory_type = H5I_INVALID_HID,
                                                                    .space = H5I_INVALID_HID};
    source->paths_length += length;
    return (int64_t)source->num_datasets++;
}

static void cache_drop(struct hdf5_source *source, struct cache_slot *slot)
{
    source->cache_bytes -= slot->size;
    free(slot->data);
    memset(slot, 0, sizeof *slot);
}

/* Called with hdf5_lock held. */
static void source_close_locked(struct hdf5_source *source)
{
    for (size_t i = 0; i < source->num_datasets; i++) {
        const struct dataset_entry *entry = &source->datasets[i];
        if (entry->space >= 0) H5Sclose(entry->space);
        if (entry->memory_type >= 0) H5Tclose(entry->memory_type);
        if (entry->handle >= 0) H5Dclose(entry->handle);
    }
    if (source->file >= 0) H5Fclose(source->file);
    for (size_t i = 0; i < CACHE_SLOTS; i++)
        cache_drop(source, &source->cache[i]);
    free(source->datasets);
    free(source->paths);
    free(source->base.name);
    free(source);
}

static void hdf5_close(struct larder__pack_source *base)
{
    struct quiet_errors quiet;
    enter(&quiet);
    source_close_locked((struct hdf5_source *)base);
    leave(&quiet);
}

/* ---- types and shapes ------------------------------------------------- */

static int unsupported_type(const char *file, const char *path, const char *what)
{
    return larder__fail(LARDER_EUNSUPPORTED,
                        "%s: dataset %s: %s elements are not supported (only integer, float "
                        "and bool arrays)",
                        file, path, what);
}

/* The larder dtype of an integer type and the little-endian type that reads it. */
static int integer_type(hid_t type, int *dtype, hid_t *standard)
{
    bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    switch (H5Tget_size(type)) {
    case 1:
        *dtype = is_signed ? LARDER_DTYPE_I8 : LARDER_DTYPE_U8;
        *standard = is_signed ? H5T_STD_I8LE : H5T_STD_U8LE;
        return 0;
    case 2:
        *dtype = is_signed ? LARDER_DTYPE_I16 : LARDER_DTYPE_U16;
        *standard = is_signed ? H5T_STD_I16LE : H5T_STD_U16LE;
        return 0;
    case 4:
        *dtype = is_signed ? LARDER_DTYPE_I32 : LARDER_DTYPE_U32;
        *standard = is_signed ? H5T_STD_I32LE : H5T_STD_U32LE;
        return 0;
    case 8:
        *dtype = is_signed ? LARDER_DTYPE_I64 : LARDER_DTYPE_U64;
        *standard = is_signed ? H5T_STD_I64LE : H5T_STD_U64LE;
        return 0;
    default:
        return -1;
    }
}

/* Whether an enum type is h5py's bool: int8 base, FALSE = 0, TRUE = 1. */
static bool is_h5py_bool(hid_t type)
{
    if (H5Tget_size(type) != 1 || H5Tget_nmembers(type) != 2) return false;
    bool ok = true;
    for (unsigned i = 0; i < 2 && ok; i++) {
        char *name = H5Tget_member_name(type, i);
        unsigned char value = 0xff;
        ok = name && H5Tget_member_value(type, i, &value) >= 0 &&
             strcmp(name, i == 0 ? "FALSE" : "TRUE") == 0 && value == i;
        if (name) H5free_memory(name);
    }
    return ok;
}

/* Whether a 2-byte float type has IEEE binary16's layout (any byte order). */
static bool is_ieee_half(hid_t type)
{
    size_t sign_position, exponent_position, exponent_size, mantissa_position, mantissa_size;
    if (H5Tget_fields(type, &sign_position, &exponent_position, &exponent_size, &mantissa_position,
                      &mantissa_size) < 0)
        return false;
    return H5Tget_precision(type) == 16 && H5Tget_offset(type) == 0 && sign_position == 15 &&
           exponent_position == 10 && exponent_size == 5 && mantissa_position == 0 &&
           mantissa_size == 10 && H5Tget_ebias(type) == 15;
}

/*
 * The larder dtype of a dataset's file type, and in *memory_type (the
 * caller closes it) the type whose little-endian bytes a read yields.
 * Integers and floats of 1..8 bytes map to their dtype; h5py's bool enum
 * to BOOL; other enums to their integer base type (values kept, names
 * dropped).  Everything else -- strings (fixed or variable length),
 * compounds, arrays, references, opaque, bitfields, variable-length
 * sequences, long doubles -- fails with LARDER_EUNSUPPORTED: a field
 * must be an array numpy can describe with one of larder's dtypes, and
 * storing fixed-length strings as raw bytes while variable-length ones
 * (h5py's default for str) fail would be a trap.
 */
static int element_type(hid_t type, const char *file, const char *path, int *dtype,
                        hid_t *memory_type)
{
    *memory_type = H5I_INVALID_HID;
    hid_t standard = H5I_INVALID_HID;
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        if (integer_type(type, dtype, &standard) < 0)
            return unsupported_type(file, path, "integer of unusual size");
        *memory_type = H5Tcopy(standard);
        break;
    case H5T_FLOAT:
        switch (H5Tget_size(type)) {
        case 2:
            if (!is_ieee_half(type)) return unsupported_type(file, path, "non-IEEE 2-byte float");
            *dtype = LARDER_DTYPE_F16;
            /* HDF5 1.10 has no predefined half type: the file's own
             * layout, made little-endian, is one. */
            *memory_type = H5Tcopy(type);
            if (*memory_type >= 0 && H5Tset_order(*memory_type, H5T_ORDER_LE) < 0) {
                H5Tclose(*memory_type);
                *memory_type = H5I_INVALID_HID;
            }
            break;
        case 4:
            *dtype = LARDER_DTYPE_F32;
            *memory_type = H5Tcopy(H5T_IEEE_F32LE);
            break;
        case 8:
            *dtype = LARDER_DTYPE_F64;
            *memory_type = H5Tcopy(H5T_IEEE_F64LE);
            break;
        default:
            return unsupported_type(file, path, "float of unusual size (long double?)");
        }
        break;
    case H5T_ENUM: {
        hid_t base = H5Tget_super(type);
        if (base < 0) return fail_hdf5(file, path, "cannot read the enum's base type");
        int rc = H5Tget_class(base) == H5T_INTEGER ? integer_type(base, dtype, &standard) : -1;
        H5T_order_t order = H5Tget_order(base);
        H5Tclose(base);
        if (rc < 0) return unsupported_type(file, path, "enum with an unusual base type");
        if (is_h5py_bool(type)) *dtype = LARDER_DTYPE_BOOL;
        /* HDF5 converts enums only to enums, so read with the file's own
         * type; its bytes are little-endian when it is. */
        if (H5Tget_size(type) > 1 && order != H5T_ORDER_LE)
            return unsupported_type(file, path, "big-endian enum");
        *memory_type = H5Tcopy(type);
        break;
    }
    case H5T_STRING:
        return unsupported_type(file, path,
                                H5Tis_variable_str(type) > 0 ? "variable-length string"
                                                             : "fixed-length string");
    case H5T_COMPOUND:
        return unsupported_type(file, path, "compound");
    case H5T_VLEN:
        return unsupported_type(file, path, "variable-length");
    case H5T_REFERENCE:
        return unsupported_type(file, path, "reference");
    case H5T_OPAQUE:
        return unsupported_type(file, path, "opaque");
    case H5T_ARRAY:
        return unsupported_type(file, path, "array-typed");
    case H5T_BITFIELD:
        return unsupported_type(file, path, "bitfield");
    case H5T_TIME:
        return unsupported_type(file, path, "time");
    default:
        return fail_hdf5(file, path, "cannot read the element type");
    }
    if (*memory_type < 0) return fail_hdf5(file, path, "cannot make the memory type");
    return 0;
}

/* Fill a dataset's shape and byte size (out->dtype already set). */
static int describe_space(hid_t dataset, const char *file, const char *path,
                          struct dataset_shape *out)
{
    hid_t space = H5Dget_space(dataset);
    if (space < 0) return fail_hdf5(file, path, "cannot read the dataspace");
    H5S_class_t class = H5Sget_simple_extent_type(space);
    hsize_t dims[H5S_MAX_RANK];
    int ndim = class == H5S_SIMPLE ? H5Sget_simple_extent_dims(space, dims, NULL) : 0;
    H5Sclose(space);
    if (class == H5S_NULL)
        return larder__fail(LARDER_EUNSUPPORTED, "%s: dataset %s: has no data (null dataspace)",
                            file, path);
    if ((class != H5S_SIMPLE && class != H5S_SCALAR) || ndim < 0)
        return fail_hdf5(file, path, "cannot read the dataspace");
    if (ndim > LARDER_MAX_DIMS)
        return larder__fail(LARDER_EUNSUPPORTED, "%s: dataset %s: %d dimensions, at most %d", file,
                            path, ndim, LARDER_MAX_DIMS);
    uint64_t bytes = larder_dtype_size(out->dtype);
    out->ndim = (uint32_t)ndim;
    for (int d = 0; d < ndim; d++) {
        out->shape[d] = dims[d];
        if (!larder__mul_ok(bytes, dims[d], &bytes))
            return larder__fail(LARDER_EUNSUPPORTED, "%s: dataset %s: too large", file, path);
    }
    out->size = bytes;
    return 0;
}

/*
 * Read a dataset's dtype, shape and byte size, and when `memory_type` is
 * not NULL the type to read it with (the caller closes it on success).
 */
static int describe_dataset(hid_t dataset, const char *file, const char *path,
                            struct dataset_shape *out, hid_t *memory_type)
{
    memset(out, 0, sizeof *out);
    hid_t type = H5Dget_type(dataset);
    if (type < 0) return fail_hdf5(file, path, "cannot read the element type");
    hid_t reader;
    int rc = element_type(type, file, path, &out->dtype, &reader);
    H5Tclose(type);
    if (rc < 0) return rc;
    rc = describe_space(dataset, file, path, out);
    if (rc < 0 || !memory_type)
        H5Tclose(reader);
    else
        *memory_type = reader;
    return rc;
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
static int read_elements(struct hdf5_source *source, const struct larder__pack_field *field,
                         uint64_t first, uint64_t count, void *out)
{
    const char *file = source->base.name;
    const char *path = dataset_path(source, field->locator[0]);
    const struct dataset_entry *entry = &source->datasets[field->locator[0]];
    bool kept = entry->handle >= 0;
    hid_t dataset = kept ? entry->handle : H5Dopen2(source->file, path, H5P_DEFAULT);
    if (dataset < 0) return fail_hdf5(file, path, "cannot open the dataset");

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
        struct dataset_shape seen;
        rc = describe_dataset(dataset, file, path, &seen, &memory_type);
        bool same = rc == 0 && seen.dtype == field->dtype && seen.ndim == (uint32_t)rank;
        for (int d = 0; same && d < rank; d++)
            same = seen.shape[d] == dims[d];
        if (rc == 0 && !same)
            rc = larder__fail(LARDER_EHDF5, "%s: dataset %s: changed since the file was scanned",
                              file, path);
        if (rc == 0 && (file_space = H5Dget_space(dataset)) < 0)
            rc = fail_hdf5(file, path, "cannot read the dataspace");
    }
    if (rc == 0) {
        hsize_t count_dims[1] = {count};
        memory_space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, count_dims, NULL);
        if (memory_space < 0) rc = fail_hdf5(file, path, "cannot make a dataspace");
    }
    if (rc == 0 && rank > 0) {
        struct flat_selection selection = {.space = file_space, .rank = rank, .dims = dims};
        if (select_flat(&selection, 0, base + first, base + first + count) < 0 ||
            H5Sget_select_npoints(file_space) != (hssize_t)count)
            rc = fail_hdf5(file, path, "cannot select the elements to read");
    }
    if (rc == 0 && H5Dread(dataset, memory_type, memory_space, file_space, H5P_DEFAULT, out) < 0) {
        char what[128];
        snprintf(what, sizeof what, "read failed (elements %llu..%llu)",
                 (unsigned long long)(base + first), (unsigned long long)(base + first + count));
        rc = fail_hdf5(file, path, what);
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
static int read_bytes(struct hdf5_source *source, const struct larder__pack_field *field,
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
static int read_cached(struct hdf5_source *source, const struct larder__pack_field *field,
                       uint64_t offset, void *buf, size_t length)
{
    uint64_t now = ++source->clock;
    struct cache_slot *slot = NULL, *free_slot = NULL;
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        struct cache_slot *s = &source->cache[i];
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
            *slot = (struct cache_slot){.data = data,
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

static int hdf5_read(struct larder__pack_source *base, const struct larder__pack_field *field,
                     uint64_t offset, void *buf, size_t length)
{
    struct hdf5_source *source = (struct hdf5_source *)base;
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

static const struct larder__pack_source_ops hdf5_ops = {.read = hdf5_read, .close = hdf5_close};

/* ---- group mode ------------------------------------------------------- */

/* Names of a group's hard links, in name order. */
struct link_list {
    char **names;
    size_t count, capacity;
    size_t skipped; /* soft and external links */
    int error;
};

static void link_list_free(struct link_list *list)
{
    for (size_t i = 0; i < list->count; i++)
        free(list->names[i]);
    free(list->names);
    memset(list, 0, sizeof *list);
}

static herr_t collect_link(hid_t group, const char *name, const link_info *info, void *data)
{
    (void)group;
    struct link_list *list = data;
    /* Soft and external links are not followed: they may point outside
     * the sample's group, into another file, or round in a cycle. */
    if (info->type != H5L_TYPE_HARD) {
        list->skipped++;
        return 0;
    }
    char *copy = strdup(name);
    if (!copy ||
        larder__reserve((void **)&list->names, &list->capacity, list->count + 1, sizeof(char *))) {
        free(copy);
        list->error = -ENOMEM;
        return -1;
    }
    list->names[list->count++] = copy;
    return 0;
}

static int list_links(const char *file, hid_t group, const char *group_path, struct link_list *list)
{
    memset(list, 0, sizeof *list);
    hsize_t position = 0;
    if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &position, collect_link, list) < 0) {
        int rc = list->error
                     ? larder__fail(list->error, "%s: out of memory", file)
                     : fail_hdf5(file, group_path[0] ? group_path : "/", "cannot list the group");
        link_list_free(list);
        return rc;
    }
    if (list->skipped)
        larder__log(LARDER_LOG_WARN, "%s: %s: skipped %zu soft or external links", file,
                    group_path[0] ? group_path : "/", list->skipped);
    return 0;
}

/* "a" + "/" + "b" in a new string, or NULL. */
static char *join(const char *a, char separator, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *joined = malloc(la + lb + 2);
    if (!joined) return NULL;
    memcpy(joined, a, la);
    joined[la] = separator;
    memcpy(joined + la + 1, b, lb + 1);
    return joined;
}

/* The fields of the sample being collected. */
struct pending_field {
    char *name;
    uint64_t dataset;
    struct dataset_shape shape;
};

struct sample_builder {
    struct pending_field *fields;
    size_t count, capacity;
    struct larder__pack_field *packed; /* scratch for larder__pack_add_sample */
    size_t packed_capacity;
};

static void builder_reset(struct sample_builder *builder)
{
    for (size_t i = 0; i < builder->count; i++)
        free(builder->fields[i].name);
    builder->count = 0;
}

static void builder_free(struct sample_builder *builder)
{
    builder_reset(builder);
    free(builder->fields);
    free(builder->packed);
}

/*
 * Add every dataset below `group` (absolute path `group_path`) to the
 * builder, depth first in name order; `prefix` is the field name of
 * `group` relative to the sample ("" for the sample's own group).
 */
static int collect_fields(struct hdf5_source *source, hid_t group, const char *group_path,
                          const char *prefix, int nesting, struct sample_builder *builder)
{
    const char *file = source->base.name;
    if (nesting > MAX_NESTING)
        return larder__fail(LARDER_EUNSUPPORTED,
                            "%s: group %s: nested more than %d deep (a link cycle?)", file,
                            group_path, MAX_NESTING);
    struct link_list links;
    int rc = list_links(file, group, group_path, &links);
    for (size_t i = 0; rc == 0 && i < links.count; i++) {
        const char *name = links.names[i];
        char *path = join(group_path, '/', name);
        char *field_name = prefix[0] ? join(prefix, '.', name) : strdup(name);
        hid_t object = H5I_INVALID_HID;
        if (!path || !field_name) rc = larder__fail(-ENOMEM, "%s: out of memory", file);
        if (rc == 0) {
            object = H5Oopen(group, name, H5P_DEFAULT);
            if (object < 0) rc = fail_hdf5(file, path, "cannot open the object");
        }
        H5I_type_t type = rc == 0 ? H5Iget_type(object) : H5I_BADID;
        if (rc == 0 && type == H5I_GROUP) {
            rc = collect_fields(source, object, path, field_name, nesting + 1, builder);
        } else if (rc == 0 && type == H5I_DATASET) {
            struct dataset_shape shape;
            rc = describe_dataset(object, file, path, &shape, NULL);
            if (rc == 0 && larder__reserve((void **)&builder->fields, &builder->capacity,
                                           builder->count + 1, sizeof *builder->fields) < 0)
                rc = larder__fail(-ENOMEM, "%s: out of memory", file);
            int64_t number = rc == 0 ? add_dataset(source, path) : rc;
            if (rc == 0 && number < 0) rc = (int)number;
            if (rc == 0) {
                builder->fields[builder->count++] = (struct pending_field){
                    .name = field_name, .dataset = (uint64_t)number, .shape = shape};
                field_name = NULL;
            }
        } /* committed datatypes are not data */
        if (object >= 0) H5Oclose(object);
        free(field_name);
        free(path);
    }
    link_list_free(&links);
    return rc;
}

/* Add the sample of group `path`, unless no dataset lies below it. */
static int add_group_sample(struct hdf5_source *source, struct larder__pack_plan *plan, hid_t group,
                            const char *path, struct sample_builder *builder)
{
    builder_reset(builder);
    int rc = collect_fields(source, group, path, "", 1, builder);
    if (rc < 0 || builder->count == 0) return rc;
    if (builder->count > UINT32_MAX)
        return larder__fail(LARDER_EUNSUPPORTED, "%s: group %s: too many datasets",
                            source->base.name, path);
    rc = larder__reserve((void **)&builder->packed, &builder->packed_capacity, builder->count,
                         sizeof *builder->packed);
    if (rc < 0) return larder__fail(rc, "%s: out of memory", source->base.name);
    for (size_t i = 0; i < builder->count; i++) {
        const struct pending_field *pending = &builder->fields[i];
        builder->packed[i] = (struct larder__pack_field){
            .name = pending->name,
            .size = pending->shape.size,
            .dtype = pending->shape.dtype,
            .ndim = pending->shape.ndim,
            .shape = pending->shape.shape,
            .locator = {pending->dataset, 0},
        };
    }
    const char *key = path + 1; /* without the leading '/' */
    rc = larder__pack_add_sample(plan, &source->base, key, strlen(key), builder->packed,
                                 (uint32_t)builder->count);
    /* pack.c's messages name the file and key; -ENOMEM comes bare. */
    if (rc == -ENOMEM) return larder__fail(rc, "%s: out of memory", source->base.name);
    return rc;
}

/*
 * Walk down to the groups at depth `target` (the root's children are at
 * depth 1) and make each a sample.  Datasets met above that depth are
 * not part of any sample and are ignored, as are committed datatypes.
 */
static int walk_groups(struct hdf5_source *source, struct larder__pack_plan *plan, hid_t group,
                       const char *group_path, int depth, int target,
                       struct sample_builder *builder)
{
    const char *file = source->base.name;
    struct link_list links;
    int rc = list_links(file, group, group_path, &links);
    for (size_t i = 0; rc == 0 && i < links.count; i++) {
        char *path = join(group_path, '/', links.names[i]);
        if (!path) {
            rc = larder__fail(-ENOMEM, "%s: out of memory", file);
            break;
        }
        hid_t object = H5Oopen(group, links.names[i], H5P_DEFAULT);
        if (object < 0) {
            rc = fail_hdf5(file, path, "cannot open the object");
        } else if (H5Iget_type(object) == H5I_GROUP) {
            rc = depth + 1 == target
                     ? add_group_sample(source, plan, object, path, builder)
                     : walk_groups(source, plan, object, path, depth + 1, target, builder);
        }
        if (object >= 0) H5Oclose(object);
        free(path);
    }
    link_list_free(&links);
    return rc;
}

static int open_groups(struct hdf5_source *source, struct larder__pack_plan *plan, int target)
{
    struct sample_builder builder = {0};
    int rc = walk_groups(source, plan, source->file, "", 0, target, &builder);
    builder_free(&builder);
    if (rc == 0 && source->num_datasets == 0)
        rc = larder__fail(LARDER_EEMPTY,
                          "%s: no group at depth %d holds a dataset (to make one sample per "
                          "row of datasets, name them with hdf5_rows)",
                          source->base.name, target);
    return rc;
}

/* ---- rows mode -------------------------------------------------------- */

/*
 * Parse one entry of hdf5_rows, "a/b", "/a/b" or " a//b/ ", into the
 * path "/a/b" and the field name "a.b".
 */
static int parse_row_dataset(const char *file, const char *text, size_t length, char **path,
                             char **field_name)
{
    while (length > 0 && (*text == ' ' || *text == '\t'))
        text++, length--;
    while (length > 0 && (text[length - 1] == ' ' || text[length - 1] == '\t'))
        length--;
    *path = malloc(length + 2);
    *field_name = malloc(length + 1);
    if (!*path || !*field_name) return larder__fail(-ENOMEM, "%s: out of memory", file);
    size_t n = 0;
    for (size_t i = 0; i < length; i++) {
        if (text[i] == '/' && (n == 0 || (*path)[n] == '/')) continue;
        (*path)[++n] = text[i];
    }
    if (n > 0 && (*path)[n] == '/') n--;
    (*path)[0] = '/';
    (*path)[n + 1] = '\0';
    if (n == 0)
        return larder__fail(LARDER_EUSAGE, "%s: hdf5_rows: empty dataset name in \"%.*s\"", file,
                            (int)length, text);
    for (size_t i = 0; i <= n; i++)
        (*field_name)[i] = (*path)[i + 1] == '/' ? '.' : (*path)[i + 1];
    return 0;
}

static int open_rows(struct hdf5_source *source, struct larder__pack_plan *plan, const char *rows)
{
    const char *file = source->base.name;
    struct row_dataset {
        char *field_name;
        struct dataset_shape shape;
        uint64_t row_size;
    } *columns = NULL;
    size_t num_columns = 0, capacity = 0;
    hid_t access = H5Pcreate(H5P_DATASET_ACCESS);
    int rc =
        access < 0 || H5Pset_chunk_cache(access, ROWS_CHUNK_CACHE_SLOTS, ROWS_CHUNK_CACHE_BYTES,
                                         H5D_CHUNK_CACHE_W0_DEFAULT) < 0
            ? fail_hdf5(file, "/", "cannot make a dataset access property list")
            : 0;
    for (const char *at = rows; rc == 0;) {
        const char *comma = strchr(at, ',');
        size_t length = comma ? (size_t)(comma - at) : strlen(at);
        char *path = NULL, *field_name = NULL;
        rc = parse_row_dataset(file, at, length, &path, &field_name);
        if (rc == 0)
            rc = larder__reserve((void **)&columns, &capacity, num_columns + 1, sizeof *columns);
        for (size_t i = 0; rc == 0 && i < num_columns; i++)
            if (strcmp(columns[i].field_name, field_name) == 0)
                rc = larder__fail(LARDER_EUSAGE, "%s: hdf5_rows names %s twice", file, path);
        hid_t dataset = H5I_INVALID_HID;
        if (rc == 0) {
            /* H5Lexists fails on a missing parent, so let the open tell. */
            dataset = H5Dopen2(source->file, path, access);
            if (dataset < 0)
                rc = larder__fail(LARDER_EUSAGE, "%s: hdf5_rows: no dataset %s in the file", file,
                                  path);
        }
        int64_t number = -1;
        if (rc == 0) {
            number = add_dataset(source, path);
            if (number < 0) {
                H5Dclose(dataset);
                rc = (int)number;
            }
        }
        if (rc == 0) {
            struct dataset_entry *entry = &source->datasets[number];
            entry->handle = dataset; /* closed with the source from here on */
            struct row_dataset *column = &columns[num_columns++];
            column->field_name = field_name;
            field_name = NULL;
            rc = describe_dataset(dataset, file, path, &column->shape, &entry->memory_type);
            if (rc == 0 && (entry->space = H5Dget_space(dataset)) < 0)
                rc = fail_hdf5(file, path, "cannot read the dataspace");
            if (rc == 0 && column->shape.ndim == 0)
                rc = larder__fail(LARDER_EUSAGE,
                                  "%s: hdf5_rows: dataset %s is a scalar, with no rows to split",
                                  file, path);
            /* With no rows the source fails as empty below. */
            if (rc == 0 && column->shape.shape[0] > 0)
                column->row_size = column->shape.size / column->shape.shape[0];
            if (rc == 0 && num_columns > 1 && column->shape.shape[0] != columns[0].shape.shape[0])
                rc = larder__fail(LARDER_EUSAGE,
                                  "%s: hdf5_rows: %s has %llu rows but %s has %llu; all must have "
                                  "the same length on axis 0",
                                  file, path, (unsigned long long)column->shape.shape[0],
                                  dataset_path(source, 0),
                                  (unsigned long long)columns[0].shape.shape[0]);
        }
        free(path);
        free(field_name);
        if (!comma) break;
        at = comma + 1;
    }
    if (access >= 0) H5Pclose(access);

    if (rc == 0) source->num_rows = columns[0].shape.shape[0];
    if (rc == 0 && source->num_rows == 0)
        rc = larder__fail(LARDER_EEMPTY, "%s: hdf5_rows: the datasets have no rows", file);
    struct larder__pack_field *fields = rc == 0 ? calloc(num_columns, sizeof *fields) : NULL;
    if (rc == 0 && !fields) rc = larder__fail(-ENOMEM, "%s: out of memory", file);
    for (size_t i = 0; rc == 0 && i < num_columns; i++)
        fields[i] = (struct larder__pack_field){
            .name = columns[i].field_name,
            .size = columns[i].row_size,
            .dtype = columns[i].shape.dtype,
            .ndim = columns[i].shape.ndim - 1,
            .shape = columns[i].shape.shape + 1,
            .locator = {i, 0},
        };
    for (uint64_t row = 0; rc == 0 && row < source->num_rows; row++) {
        char key[32];
        int key_length = snprintf(key, sizeof key, "%08llu", (unsigned long long)row);
        for (size_t i = 0; i < num_columns; i++)
            fields[i].locator[1] = row;
        rc = larder__pack_add_sample(plan, &source->base, key, (size_t)key_length, fields,
                                     (uint32_t)num_columns);
        if (rc == -ENOMEM) rc = larder__fail(rc, "%s: out of memory", file);
    }
    free(fields);
    for (size_t i = 0; i < num_columns; i++)
        free(columns[i].field_name);
    free(columns);
    return rc;
}

/* ---- entry points ----------------------------------------------------- */

int larder__hdf5_source_open(struct larder__pack_plan *plan, const char *path,
                             const larder_pack_options *options, struct larder__pack_source **out)
{
    *out = NULL;
    int depth = options ? options->hdf5_group_depth : 0;
    const char *rows = options ? options->hdf5_rows : NULL;
    if (depth == 0) depth = 1;
    if (depth < 0 || depth > MAX_NESTING)
        return larder__fail(LARDER_EUSAGE, "%s: hdf5_group_depth %d is not in 1..%d", path, depth,
                            MAX_NESTING);

    struct hdf5_source *source = calloc(1, sizeof *source);
    char *name = strdup(path);
    if (!source || !name) {
        free(source);
        free(name);
        return larder__fail(-ENOMEM, "%s: out of memory", path);
    }
    source->base.ops = &hdf5_ops;
    source->base.name = name;
    source->file = H5I_INVALID_HID;
    source->rows_mode = rows && rows[0];

    uint64_t samples_before = larder__pack_plan_num_samples(plan);
    struct quiet_errors quiet;
    enter(&quiet);
    int rc = 0;
    hid_t access = H5Pcreate(H5P_FILE_ACCESS);
    if (access < 0) rc = fail_hdf5(path, "/", "cannot make a file access property list");
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
    if (rc == 0)
        rc = source->rows_mode ? open_rows(source, plan, rows) : open_groups(source, plan, depth);
    if (rc < 0 && larder__pack_plan_num_samples(plan) == samples_before) {
        source_close_locked(source);
        leave(&quiet);
        return rc;
    }
    leave(&quiet);

    /* After a failure part way, samples already in the plan point at this
     * source and pack.h offers no way to take them out, so the plan gets
     * the source too (it closes it) rather than a dangling pointer. */
    int added = larder__pack_plan_add_source(plan, &source->base);
    if (added < 0) {
        hdf5_close(&source->base);
        return rc < 0 ? rc : larder__fail(added, "%s: out of memory", path);
    }
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
