/*
 * hdf5_walk.c - the HDF5 input's listing: one sample per group at a
 * depth, or one per row of named datasets (input.h says what each
 * sample and field is).  The file is walked in name order, so the
 * listing is the same on every run; each dataset a field comes from is
 * recorded in the input's table, and a field's locator is {its number
 * there, row}.
 */
#include "hdf5_input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Rows mode keeps its datasets open; a chunk cache this large lets
 * neighbouring rows share a decoded chunk.  Slots: a prime, as HDF5 asks. */
#define ROWS_CHUNK_CACHE_BYTES ((size_t)32 << 20)
#define ROWS_CHUNK_CACHE_SLOTS 12421

#if H5_VERSION_GE(1, 12, 0)
typedef H5L_info2_t link_info;
#else
typedef H5L_info_t link_info;
#endif

/* Where listed samples go. */
struct sink {
    larder__pack_sample_fn on_sample;
    void *context;
};

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
        int rc = list->error ? larder__fail(list->error, "%s: out of memory", file)
                             : larder__hdf5_fail(file, group_path[0] ? group_path : "/",
                                                 "cannot list the group");
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
    struct larder__hdf5_shape shape;
};

struct sample_builder {
    struct pending_field *fields;
    size_t count, capacity;
    struct larder__pack_field *packed; /* scratch for on_sample */
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
static int collect_fields(struct larder__hdf5_input *source, hid_t group, const char *group_path,
                          const char *prefix, int nesting, struct sample_builder *builder)
{
    const char *file = source->base.name;
    if (nesting > LARDER__HDF5_MAX_NESTING)
        return larder__fail(LARDER_EUNSUPPORTED,
                            "%s: group %s: nested more than %d deep (a link cycle?)", file,
                            group_path, LARDER__HDF5_MAX_NESTING);
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
            if (object < 0) rc = larder__hdf5_fail(file, path, "cannot open the object");
        }
        H5I_type_t type = rc == 0 ? H5Iget_type(object) : H5I_BADID;
        if (rc == 0 && type == H5I_GROUP) {
            rc = collect_fields(source, object, path, field_name, nesting + 1, builder);
        } else if (rc == 0 && type == H5I_DATASET) {
            struct larder__hdf5_shape shape;
            rc = larder__hdf5_describe_dataset(object, file, path, &shape, NULL);
            if (rc == 0 && larder__reserve((void **)&builder->fields, &builder->capacity,
                                           builder->count + 1, sizeof *builder->fields) < 0)
                rc = larder__fail(-ENOMEM, "%s: out of memory", file);
            int64_t number = rc == 0 ? larder__hdf5_add_dataset(source, path) : rc;
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
static int add_group_sample(struct larder__hdf5_input *source, const struct sink *sink, hid_t group,
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
    rc =
        sink->on_sample(sink->context, key, strlen(key), builder->packed, (uint32_t)builder->count);
    /* layout.c's messages name the file and key; -ENOMEM comes bare. */
    if (rc == -ENOMEM) return larder__fail(rc, "%s: out of memory", source->base.name);
    return rc;
}

/*
 * Walk down to the groups at depth `target` (the root's children are at
 * depth 1) and make each a sample.  Datasets met above that depth are
 * not part of any sample and are ignored, as are committed datatypes.
 */
static int walk_groups(struct larder__hdf5_input *source, const struct sink *sink, hid_t group,
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
            rc = larder__hdf5_fail(file, path, "cannot open the object");
        } else if (H5Iget_type(object) == H5I_GROUP) {
            rc = depth + 1 == target
                     ? add_group_sample(source, sink, object, path, builder)
                     : walk_groups(source, sink, object, path, depth + 1, target, builder);
        }
        if (object >= 0) H5Oclose(object);
        free(path);
    }
    link_list_free(&links);
    return rc;
}

int larder__hdf5_list_groups(struct larder__hdf5_input *source, larder__pack_sample_fn on_sample,
                             void *context)
{
    const struct sink sink = {.on_sample = on_sample, .context = context};
    int target = source->group_depth;
    struct sample_builder builder = {0};
    int rc = walk_groups(source, &sink, source->file, "", 0, target, &builder);
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

/* One dataset of hdf5_rows. */
struct row_column {
    char *field_name;
    struct larder__hdf5_shape shape;
    uint64_t row_size;
};

struct row_columns {
    struct row_column *columns;
    size_t count, capacity;
};

/* Check and describe the dataset at `path`, opened as `dataset`, now in
 * the input's table as number `number`, into a new column. */
static int describe_column(struct larder__hdf5_input *source, hid_t dataset, int64_t number,
                           const char *path, char *field_name, struct row_columns *columns)
{
    const char *file = source->base.name;
    struct larder__hdf5_dataset *entry = &source->datasets[number];
    entry->handle = dataset; /* closed with the source from here on */
    struct row_column *column = &columns->columns[columns->count++];
    column->field_name = field_name;
    int rc =
        larder__hdf5_describe_dataset(dataset, file, path, &column->shape, &entry->memory_type);
    if (rc == 0 && (entry->space = H5Dget_space(dataset)) < 0)
        rc = larder__hdf5_fail(file, path, "cannot read the dataspace");
    if (rc == 0 && column->shape.ndim == 0)
        rc = larder__fail(LARDER_EUSAGE,
                          "%s: hdf5_rows: dataset %s is a scalar, with no rows to split", file,
                          path);
    /* With no rows the source fails as empty below. */
    if (rc == 0 && column->shape.shape[0] > 0)
        column->row_size = column->shape.size / column->shape.shape[0];
    const struct row_column *first = &columns->columns[0];
    if (rc == 0 && columns->count > 1 && column->shape.shape[0] != first->shape.shape[0])
        rc = larder__fail(LARDER_EUSAGE,
                          "%s: hdf5_rows: %s has %llu rows but %s has %llu; all must have "
                          "the same length on axis 0",
                          file, path, (unsigned long long)column->shape.shape[0],
                          larder__hdf5_dataset_path(source, 0),
                          (unsigned long long)first->shape.shape[0]);
    return rc;
}

/* Add the column of one entry of hdf5_rows, `length` bytes at `text`. */
static int add_column(struct larder__hdf5_input *source, hid_t access, const char *text,
                      size_t length, struct row_columns *columns)
{
    const char *file = source->base.name;
    char *path = NULL, *field_name = NULL;
    int rc = parse_row_dataset(file, text, length, &path, &field_name);
    if (rc == 0)
        rc = larder__reserve((void **)&columns->columns, &columns->capacity, columns->count + 1,
                             sizeof *columns->columns);
    for (size_t i = 0; rc == 0 && i < columns->count; i++)
        if (strcmp(columns->columns[i].field_name, field_name) == 0)
            rc = larder__fail(LARDER_EUSAGE, "%s: hdf5_rows names %s twice", file, path);
    hid_t dataset = H5I_INVALID_HID;
    if (rc == 0) {
        /* H5Lexists fails on a missing parent, so let the open tell. */
        dataset = H5Dopen2(source->file, path, access);
        if (dataset < 0)
            rc =
                larder__fail(LARDER_EUSAGE, "%s: hdf5_rows: no dataset %s in the file", file, path);
    }
    int64_t number = -1;
    if (rc == 0) {
        number = larder__hdf5_add_dataset(source, path);
        if (number < 0) {
            H5Dclose(dataset);
            rc = (int)number;
        }
    }
    if (rc == 0) {
        rc = describe_column(source, dataset, number, path, field_name, columns);
        field_name = NULL; /* the column's now */
    }
    free(path);
    free(field_name);
    return rc;
}

/* Pass one sample per row of the columns. */
static int list_row_samples(struct larder__hdf5_input *source, const struct row_columns *columns,
                            const struct sink *sink)
{
    const char *file = source->base.name;
    source->num_rows = columns->columns[0].shape.shape[0];
    if (source->num_rows == 0)
        return larder__fail(LARDER_EEMPTY, "%s: hdf5_rows: the datasets have no rows", file);
    struct larder__pack_field *fields = calloc(columns->count, sizeof *fields);
    if (!fields) return larder__fail(-ENOMEM, "%s: out of memory", file);
    for (size_t i = 0; i < columns->count; i++) {
        const struct row_column *column = &columns->columns[i];
        fields[i] = (struct larder__pack_field){
            .name = column->field_name,
            .size = column->row_size,
            .dtype = column->shape.dtype,
            .ndim = column->shape.ndim - 1,
            .shape = column->shape.shape + 1,
            .locator = {i, 0},
        };
    }
    int rc = 0;
    for (uint64_t row = 0; rc == 0 && row < source->num_rows; row++) {
        char key[32];
        int key_length = snprintf(key, sizeof key, "%08llu", (unsigned long long)row);
        for (size_t i = 0; i < columns->count; i++)
            fields[i].locator[1] = row;
        rc = sink->on_sample(sink->context, key, (size_t)key_length, fields,
                             (uint32_t)columns->count);
        if (rc == -ENOMEM) rc = larder__fail(rc, "%s: out of memory", file);
    }
    free(fields);
    return rc;
}

int larder__hdf5_list_rows(struct larder__hdf5_input *source, larder__pack_sample_fn on_sample,
                           void *context)
{
    const struct sink sink = {.on_sample = on_sample, .context = context};
    struct row_columns columns = {0};
    hid_t access = H5Pcreate(H5P_DATASET_ACCESS);
    int rc =
        access < 0 || H5Pset_chunk_cache(access, ROWS_CHUNK_CACHE_SLOTS, ROWS_CHUNK_CACHE_BYTES,
                                         H5D_CHUNK_CACHE_W0_DEFAULT) < 0
            ? larder__hdf5_fail(source->base.name, "/",
                                "cannot make a dataset access property list")
            : 0;
    for (const char *at = source->rows; rc == 0;) {
        const char *comma = strchr(at, ',');
        size_t length = comma ? (size_t)(comma - at) : strlen(at);
        rc = add_column(source, access, at, length, &columns);
        if (!comma) break;
        at = comma + 1;
    }
    if (access >= 0) H5Pclose(access);
    if (rc == 0) rc = list_row_samples(source, &columns, &sink);
    for (size_t i = 0; i < columns.count; i++)
        free(columns.columns[i].field_name);
    free(columns.columns);
    return rc;
}
