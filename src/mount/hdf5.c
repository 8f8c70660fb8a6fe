/*
 * hdf5.c - the scan of hdf5_layout.h: libhdf5 opens the file through a read-only
 * file driver of our own whose reads are the caller's callback (for the
 * mount: its checked reads through the node cache, at NEAR), visits
 * every object once, and records each dataset's raw-data extents:
 *
 *   contiguous  H5Dget_offset, H5Dget_storage_size (nothing if unallocated);
 *   chunked     H5Dget_num_chunks, then H5Dget_chunk_info per chunk (its
 *               address and stored size; compressed chunks are raw data
 *               too, counted in `compressed`);
 *   compact     nothing: the data lives in the object header (metadata).
 *
 * What libhdf5 reports is bounded here (hdf5_layout.h's caps) and in
 * hdf5_extents.c (clipped to the file); the driver refuses reads past the
 * file's size, so a file that points outside itself fails its scan
 * instead of reading anything else.  libhdf5's own error printing is
 * turned off for the scan (its stack goes to larder_errmsg()'s caller as
 * one line).
 */
#include "hdf5_layout.h"

#include "common.h"

#include <errno.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if H5_VERSION_GE(1, 12, 0)
#define LARDER__HDF5_SCAN_SUPPORTED 0 /* the driver below is 1.10's H5FD_class_t */
#else
#define LARDER__HDF5_SCAN_SUPPORTED 1
#endif

static pthread_mutex_t scan_lock = PTHREAD_MUTEX_INITIALIZER;

/* The scan in progress (under scan_lock): what the driver's open picks up. */
struct scan {
    larder__mount_hdf5_read_fn read;
    void *context;
    uint64_t file_size;
    int read_error; /* the first failed read's code (LARDER_ETRUNCATED: one past the end) */
    struct larder__mount_hdf5_layout *layout;
    size_t raw_capacity;
    uint64_t objects;
    int error; /* -ENOMEM while collecting */
    /* larder__mount_hdf5_members: the addresses, in name order */
    uint64_t *members;
    size_t member_count, member_capacity;
};

#if LARDER__HDF5_SCAN_SUPPORTED

static struct scan *current; /* under scan_lock */

struct driver_file {
    H5FD_t pub; /* first: libhdf5 casts */
    struct scan *scan;
    haddr_t eoa;
};

static H5FD_t *driver_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)name, (void)fapl, (void)maxaddr;
    if (!current || (flags & (H5F_ACC_RDWR | H5F_ACC_TRUNC | H5F_ACC_CREAT))) return NULL;
    struct driver_file *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->scan = current;
    return &f->pub;
}

static herr_t driver_close(H5FD_t *file)
{
    free(file);
    return 0;
}

static herr_t driver_query(const H5FD_t *file, unsigned long *flags)
{
    (void)file;
    /* metadata aggregated in the driver's reads: fewer, larger reads */
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
    return 0;
}

static haddr_t driver_get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const struct driver_file *)file)->eoa;
}

static herr_t driver_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((struct driver_file *)file)->eoa = addr;
    return 0;
}

static haddr_t driver_get_eof(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return (haddr_t)((const struct driver_file *)file)->scan->file_size;
}

static herr_t driver_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                          void *buffer)
{
    (void)type, (void)dxpl;
    struct scan *s = ((struct driver_file *)file)->scan;
    if (addr == HADDR_UNDEF || addr > s->file_size || size > s->file_size - addr) {
        if (!s->read_error) s->read_error = LARDER_ETRUNCATED; /* the file points past its end */
        return -1;
    }
    if (size == 0) return 0;
    int rc = s->read(s->context, (uint64_t)addr, buffer, size);
    if (rc < 0) {
        if (!s->read_error) s->read_error = rc;
        return -1;
    }
    return 0;
}

static herr_t driver_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                           const void *buffer)
{
    (void)file, (void)type, (void)dxpl, (void)addr, (void)size, (void)buffer;
    return -1; /* read-only */
}

static const H5FD_class_t driver_class = {
    .name = "larder-mount",
    .maxaddr = ((haddr_t)1 << 62) - 1,
    .fc_degree = H5F_CLOSE_WEAK,
    .open = driver_open,
    .close = driver_close,
    .query = driver_query,
    .get_eoa = driver_get_eoa,
    .set_eoa = driver_set_eoa,
    .get_eof = driver_get_eof,
    .read = driver_read,
    .write = driver_write,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

static hid_t driver_id = -1; /* registered once, under scan_lock */

/* One raw extent, kept while under the cap. */
static void add_extent(struct scan *s, uint64_t offset, uint64_t length)
{
    struct larder__mount_hdf5_layout *l = s->layout;
    if (length == 0 || s->error) return;
    if (l->raw_count >= LARDER__MOUNT_HDF5_MAX_EXTENTS) {
        l->dropped++;
        l->truncated = true;
        return;
    }
    if (larder__reserve((void **)&l->raw, &s->raw_capacity, l->raw_count + 1, sizeof l->raw[0])) {
        s->error = -ENOMEM;
        return;
    }
    l->raw[l->raw_count++] = (struct larder__mount_hdf5_extent){offset, length};
}

static void dataset_extents(struct scan *s, hid_t dataset)
{
    struct larder__mount_hdf5_layout *l = s->layout;
    hid_t create = H5Dget_create_plist(dataset);
    if (create < 0) return;
    H5D_layout_t layout = H5Pget_layout(create);
    int filters = H5Pget_nfilters(create);
    H5Pclose(create);
    l->datasets++;
    if (layout == H5D_CONTIGUOUS) {
        haddr_t offset = H5Dget_offset(dataset);
        if (offset != HADDR_UNDEF) add_extent(s, (uint64_t)offset, H5Dget_storage_size(dataset));
    } else if (layout == H5D_CHUNKED) {
        if (filters > 0) l->compressed++;
        hid_t space = H5Dget_space(dataset);
        hsize_t chunks = 0;
        if (space >= 0 && H5Dget_num_chunks(dataset, space, &chunks) >= 0) {
            if (chunks > LARDER__MOUNT_HDF5_MAX_CHUNKS) {
                l->dropped += chunks - LARDER__MOUNT_HDF5_MAX_CHUNKS;
                l->truncated = true;
                chunks = LARDER__MOUNT_HDF5_MAX_CHUNKS;
            }
            hsize_t coords[H5S_MAX_RANK];
            for (hsize_t i = 0; i < chunks && !s->error; i++) {
                unsigned mask;
                haddr_t address;
                hsize_t size;
                if (H5Dget_chunk_info(dataset, space, i, coords, &mask, &address, &size) < 0) break;
                if (address != HADDR_UNDEF) add_extent(s, (uint64_t)address, (uint64_t)size);
            }
        }
        if (space >= 0) H5Sclose(space);
    }
}

static herr_t visit(hid_t object, const char *name, const H5O_info_t *info, void *data)
{
    struct scan *s = data;
    if (++s->objects > LARDER__MOUNT_HDF5_MAX_OBJECTS) {
        s->layout->truncated = true;
        return 1; /* stop */
    }
    if (s->read_error && s->read_error != LARDER_ETRUNCATED) return -1; /* the reader gave up */
    if (info->type != H5O_TYPE_DATASET) return 0;
    hid_t dataset = H5Dopen2(object, name, H5P_DEFAULT);
    if (dataset < 0) return 0; /* a dataset libhdf5 cannot open: its bytes stay "metadata" */
    dataset_extents(s, dataset);
    H5Dclose(dataset);
    return s->error ? -1 : 0;
}

/* The file opened through the driver, or a negative code (scan_lock held). */
static hid_t open_locked(struct scan *s)
{
    if (driver_id < 0 && (driver_id = H5FDregister(&driver_class)) < 0)
        return larder__fail(LARDER_EHDF5, "cannot register the mount's HDF5 file driver");
    hid_t access = H5Pcreate(H5P_FILE_ACCESS);
    if (access < 0 || H5Pset_driver(access, driver_id, NULL) < 0) {
        if (access >= 0) H5Pclose(access);
        return larder__fail(LARDER_EHDF5, "cannot set the mount's HDF5 file driver");
    }
    current = s;
    hid_t file = H5Fopen("larder-mount", H5F_ACC_RDONLY, access);
    H5Pclose(access);
    if (file >= 0) return file;
    current = NULL;
    return s->read_error ? larder__fail(s->read_error, "HDF5 scan: a read of the file failed")
                         : larder__fail(LARDER_EHDF5, "HDF5 scan: libhdf5 cannot open the file");
}

static herr_t member(hid_t group, const char *name, const H5L_info_t *info, void *data)
{
    (void)group, (void)name;
    struct scan *s = data;
    if (s->read_error && s->read_error != LARDER_ETRUNCATED) return -1;
    if (info->type != H5L_TYPE_HARD) return 0;
    if (s->member_count >= LARDER__MOUNT_HDF5_MAX_EXTENTS) return 1;
    if (larder__reserve((void **)&s->members, &s->member_capacity, s->member_count + 1,
                        sizeof s->members[0])) {
        s->error = -ENOMEM;
        return -1;
    }
    s->members[s->member_count++] = (uint64_t)info->u.address;
    return 0;
}

static int members_locked(struct scan *s, const char *path)
{
    hid_t file = open_locked(s);
    if (file < 0) return (int)file;
    int rc = 0;
    hid_t group = H5Gopen2(file, path, H5P_DEFAULT);
    if (group < 0) {
        rc = larder__fail(LARDER_ENOTFOUND, "HDF5 scan: no group %s", path);
    } else {
        hsize_t position = 0;
        herr_t listed = H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &position, member, s);
        if (s->error)
            rc = larder__fail(s->error, "HDF5 scan: out of memory");
        else if (listed < 0)
            rc = s->read_error
                     ? larder__fail(s->read_error, "HDF5 scan: a read of the file failed")
                     : larder__fail(LARDER_EHDF5, "HDF5 scan: cannot list the group %s", path);
        H5Gclose(group);
    }
    H5Fclose(file);
    current = NULL;
    return rc;
}

/* Rows of an open dataset (scan_lock held). */
static int rows_of(struct scan *s, hid_t dataset, const char *path,
                   struct larder__mount_hdf5_extent **out, size_t *count)
{
    hid_t space = H5Dget_space(dataset), type = H5Dget_type(dataset);
    hid_t create = H5Dget_create_plist(dataset);
    hsize_t dims[H5S_MAX_RANK], chunk[H5S_MAX_RANK];
    int rank = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : -1;
    size_t item = type >= 0 ? H5Tget_size(type) : 0;
    H5D_layout_t layout = create >= 0 ? H5Pget_layout(create) : H5D_LAYOUT_ERROR;
    int filters = create >= 0 ? H5Pget_nfilters(create) : -1;
    int chunk_rank = layout == H5D_CHUNKED ? H5Pget_chunk(create, H5S_MAX_RANK, chunk) : 0;
    int rc = 0;
    uint64_t row_bytes = item;
    for (int d = 1; d < rank && rc == 0; d++)
        if (dims[d] && row_bytes > UINT64_MAX / dims[d])
            rc = larder__fail(LARDER_EUNSUPPORTED, "%s: rows too large", path);
        else
            row_bytes *= dims[d];
    if (rc == 0 && (rank < 1 || item == 0 || filters < 0))
        rc = larder__fail(LARDER_EHDF5, "%s: cannot read its shape", path);
    else if (rc == 0 && filters > 0)
        rc = larder__fail(LARDER_EUNSUPPORTED, "%s: compressed: its rows are no byte ranges", path);
    else if (rc == 0 && layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED)
        rc = larder__fail(LARDER_EUNSUPPORTED, "%s: neither contiguous nor chunked", path);
    else if (rc == 0 && (dims[0] == 0 || dims[0] > LARDER__MOUNT_HDF5_MAX_ROWS))
        rc = larder__fail(LARDER_EUNSUPPORTED, "%s: %llu rows (1 to %llu)", path,
                          (unsigned long long)dims[0],
                          (unsigned long long)LARDER__MOUNT_HDF5_MAX_ROWS);
    else if (rc == 0 && layout == H5D_CHUNKED && (chunk_rank != rank || chunk[0] == 0))
        rc = larder__fail(LARDER_EHDF5, "%s: cannot read its chunks", path);
    struct larder__mount_hdf5_extent *rows = NULL;
    if (rc == 0 && !(rows = calloc((size_t)dims[0], sizeof *rows))) rc = -ENOMEM;
    if (rc == 0 && layout == H5D_CONTIGUOUS) {
        haddr_t offset = H5Dget_offset(dataset);
        if (offset == HADDR_UNDEF) rc = larder__fail(LARDER_EEMPTY, "%s: no data written", path);
        for (hsize_t i = 0; rc == 0 && i < dims[0]; i++) /* wraps only past any file: clipped */
            rows[i] =
                (struct larder__mount_hdf5_extent){(uint64_t)offset + i * row_bytes, row_bytes};
    } else if (rc == 0) {
        bool whole_rows = true; /* chunks span every dimension but the first */
        for (int d = 1; d < rank; d++)
            whole_rows = whole_rows && chunk[d] >= dims[d];
        hsize_t chunks = 0;
        if (H5Dget_num_chunks(dataset, space, &chunks) < 0) chunks = 0;
        if (chunks > LARDER__MOUNT_HDF5_MAX_CHUNKS) chunks = LARDER__MOUNT_HDF5_MAX_CHUNKS;
        hsize_t coords[H5S_MAX_RANK];
        for (hsize_t k = 0; k < chunks; k++) {
            unsigned mask;
            haddr_t address;
            hsize_t size;
            if (H5Dget_chunk_info(dataset, space, k, coords, &mask, &address, &size) < 0) break;
            if (address == HADDR_UNDEF || coords[0] >= dims[0]) continue;
            for (hsize_t r = coords[0]; r < dims[0] && r < coords[0] + chunk[0]; r++) {
                struct larder__mount_hdf5_extent *e = &rows[r];
                if (!whole_rows) { /* the row is spread over chunks: take them all */
                    uint64_t end = e->length ? e->offset + e->length : 0;
                    uint64_t start = e->length ? e->offset : address;
                    if (address < start) start = address;
                    if (address + size > end) end = address + size;
                    *e = (struct larder__mount_hdf5_extent){start, end - start};
                } else {
                    *e = (struct larder__mount_hdf5_extent){
                        (uint64_t)address + (r - coords[0]) * row_bytes, row_bytes};
                }
            }
        }
    }
    (void)s;
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    if (create >= 0) H5Pclose(create);
    if (rc < 0) {
        free(rows);
        return rc;
    }
    *out = rows, *count = (size_t)dims[0];
    return 0;
}

static int rows_locked(struct scan *s, const char *path, struct larder__mount_hdf5_extent **out,
                       size_t *count)
{
    hid_t file = open_locked(s);
    if (file < 0) return (int)file;
    int rc;
    hid_t dataset = H5Dopen2(file, path, H5P_DEFAULT);
    if (dataset < 0) {
        rc = s->read_error ? larder__fail(s->read_error, "HDF5 scan: a read of the file failed")
                           : larder__fail(LARDER_ENOTFOUND, "HDF5 scan: no dataset %s", path);
    } else {
        rc = rows_of(s, dataset, path, out, count);
        H5Dclose(dataset);
    }
    H5Fclose(file);
    current = NULL;
    return rc;
}

static int scan_locked(struct scan *s)
{
    hid_t file = open_locked(s);
    int rc = 0;
    if (file < 0) {
        rc = (int)file;
    } else {
        herr_t visited = H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit, s, H5O_INFO_BASIC);
        if (s->error)
            rc = larder__fail(s->error, "HDF5 scan: out of memory");
        else if (s->read_error && s->read_error != LARDER_ETRUNCATED)
            rc = larder__fail(s->read_error, "HDF5 scan: a read of the file failed");
        else if (visited < 0 && s->layout->datasets == 0)
            rc = s->read_error ? larder__fail(s->read_error, "HDF5 scan: a read of the file failed")
                               : larder__fail(LARDER_EHDF5, "HDF5 scan: cannot visit the file");
        else if (visited < 0)
            s->layout->truncated =
                true; /* part of the file could not be visited: what was, stays */
        H5Fclose(file);
    }
    current = NULL;
    return rc;
}
#endif

/* What a public entry asks of libhdf5. */
struct job {
    enum { JOB_SCAN, JOB_MEMBERS, JOB_ROWS } kind;
    const char *path; /* the group's or the dataset's */
    struct larder__mount_hdf5_extent **rows;
    size_t *count;
};

/* Run a job under scan_lock with libhdf5's error printing off (the mount
 * says what failed itself), or say the scan is not built. */
static int run_quietly(struct scan *s, const struct job *job)
{
#if LARDER__HDF5_SCAN_SUPPORTED
    pthread_mutex_lock(&scan_lock);
    H5E_auto2_t old_func;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int rc = job->kind == JOB_SCAN      ? scan_locked(s)
             : job->kind == JOB_MEMBERS ? members_locked(s, job->path)
                                        : rows_locked(s, job->path, job->rows, job->count);
    H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
    pthread_mutex_unlock(&scan_lock);
    return rc;
#else
    (void)s, (void)job;
    return larder__fail(LARDER_EUNSUPPORTED, "HDF5 scan: built for libhdf5 1.10's file drivers");
#endif
}

int larder__mount_hdf5_scan(larder__mount_hdf5_read_fn read, void *context, uint64_t file_size,
                            struct larder__mount_hdf5_layout **out)
{
    *out = NULL;
    struct larder__mount_hdf5_layout *l = calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    l->file_size = file_size;
    struct scan s = {.read = read, .context = context, .file_size = file_size, .layout = l};
    int rc = run_quietly(&s, &(struct job){JOB_SCAN, NULL, NULL, NULL});
    if (rc < 0) {
        larder__mount_hdf5_layout_free(l);
        return rc;
    }
    l->raw_count = larder__mount_hdf5_normalize(l->raw, l->raw_count, file_size);
    size_t gaps = larder__mount_hdf5_complement(l->raw, l->raw_count, file_size, NULL, 0);
    l->metadata = calloc(gaps ? gaps : 1, sizeof l->metadata[0]);
    if (!l->metadata) {
        larder__mount_hdf5_layout_free(l);
        return -ENOMEM;
    }
    l->metadata_count =
        larder__mount_hdf5_complement(l->raw, l->raw_count, file_size, l->metadata, gaps);
    for (size_t i = 0; i < l->metadata_count; i++)
        l->metadata_bytes += l->metadata[i].length;
    *out = l;
    return 0;
}

int larder__mount_hdf5_members(larder__mount_hdf5_read_fn read, void *context, uint64_t file_size,
                               const char *group, uint64_t **addresses, size_t *count)
{
    *addresses = NULL, *count = 0;
    struct larder__mount_hdf5_layout unused = {0};
    struct scan s = {.read = read, .context = context, .file_size = file_size, .layout = &unused};
    int rc = run_quietly(&s, &(struct job){JOB_MEMBERS, group, NULL, NULL});
    if (rc < 0) {
        free(s.members);
        return rc;
    }
    *addresses = s.members, *count = s.member_count;
    return 0;
}

int larder__mount_hdf5_rows(larder__mount_hdf5_read_fn read, void *context, uint64_t file_size,
                            const char *path, struct larder__mount_hdf5_extent **rows,
                            size_t *count)
{
    *rows = NULL, *count = 0;
    struct larder__mount_hdf5_layout unused = {0};
    struct scan s = {.read = read, .context = context, .file_size = file_size, .layout = &unused};
    return run_quietly(&s, &(struct job){JOB_ROWS, path, rows, count});
}

void larder__mount_hdf5_layout_free(struct larder__mount_hdf5_layout *l)
{
    if (!l) return;
    free(l->raw);
    free(l->metadata);
    free(l);
}
