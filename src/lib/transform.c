/*
 * transform.c - the registry of transforms (the built-ins, then shared
 * objects loaded from a directory), the parsing of a spec, running a
 * transform over one sample and the result's layout (transform.h).  The
 * daemon (src/larderd/transform*.c) and a reader (transform_read.c) both
 * come here, so a result is the same bytes wherever it is made.
 */
#include "transform.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static const larder_transform_ops *loaded[LARDER__TRANSFORM_MAX_LOADED];
static size_t num_loaded; /* entries of loaded[] are never removed: lookups read them unlocked */

static const larder_transform_ops *builtin(size_t i)
{
    switch (i) {
    case 0:
        return larder__transform_jpeg_ops();
    case 1:
        return larder__transform_cast_ops();
    case 2:
        return larder__transform_zstd_ops();
    default:
        return NULL;
    }
}

static const larder_transform_ops *lookup(const char *name, size_t length)
{
    for (size_t i = 0; builtin(i); i++)
        if (strlen(builtin(i)->name) == length && memcmp(builtin(i)->name, name, length) == 0)
            return builtin(i);
    size_t n = __atomic_load_n(&num_loaded, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++)
        if (strlen(loaded[i]->name) == length && memcmp(loaded[i]->name, name, length) == 0)
            return loaded[i];
    return NULL;
}

static bool valid_name(const char *name, size_t length)
{
    if (length == 0 || length >= LARDER_TRANSFORM_MAX_NAME) return false;
    for (size_t i = 0; i < length; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
    }
    return true;
}

int larder__transform_error(char *error, size_t size, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (size) vsnprintf(error, size, fmt, ap);
    va_end(ap);
    return code;
}

int larder__transform_parse(const char *spec, size_t length, struct larder__transform *out)
{
    if (length >= LARDER_TRANSFORM_MAX_SPEC)
        return larder__fail(LARDER_EUSAGE, "transform spec of %zu bytes: at most %d", length,
                            LARDER_TRANSFORM_MAX_SPEC - 1);
    const char *colon = memchr(spec, ':', length);
    size_t name_length = colon ? (size_t)(colon - spec) : length;
    if (!valid_name(spec, name_length))
        return larder__fail(
            LARDER_EUSAGE, "transform name '%.*s': 1 to %d of a-z, 0-9 and _ before any ':'",
            (int)(name_length < 80 ? name_length : 80), spec, LARDER_TRANSFORM_MAX_NAME - 1);
    char params[LARDER_TRANSFORM_MAX_SPEC] = "";
    if (colon) {
        size_t n = length - name_length - 1;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)colon[1 + i] < 0x20 || (unsigned char)colon[1 + i] > 0x7e)
                return larder__fail(LARDER_EUSAGE,
                                    "transform '%.*s': parameters must be printable ASCII",
                                    (int)name_length, spec);
        memcpy(params, colon + 1, n);
        params[n] = '\0';
    }
    const larder_transform_ops *ops = lookup(spec, name_length);
    if (!ops)
        return larder__fail(LARDER_ENOTFOUND,
                            "no transform named '%.*s' (built-ins: jpeg_decode_resize:N, "
                            "npy_cast:DTYPE, zstd_decompress; more with a transform directory)",
                            (int)name_length, spec);
    memset(out, 0, sizeof *out);
    out->ops = ops;
    char canonical[LARDER_TRANSFORM_MAX_SPEC] = "", error[256] = "";
    int rc = ops->parse(params, out->state, canonical, error, sizeof error);
    if (rc < 0)
        return larder__fail(rc, "transform '%s': %s", ops->name,
                            error[0] ? error : "bad parameters");
    canonical[sizeof canonical - 1] = '\0';
    int n = snprintf(out->canonical, sizeof out->canonical, "%s%s%s", ops->name,
                     canonical[0] ? ":" : "", canonical);
    if (n < 0 || (size_t)n >= sizeof out->canonical)
        return larder__fail(LARDER_EUSAGE, "transform '%s': parameters too long", ops->name);
    return 0;
}

int larder_transform_check(const char *spec, uint32_t *version)
{
    if (!spec) return larder__fail(LARDER_EUSAGE, "no transform spec");
    struct larder__transform t;
    int rc = larder__transform_parse(spec, strlen(spec), &t);
    if (rc == 0 && version) *version = t.ops->version;
    return rc;
}

/* Register one loaded table (with registry_lock held). */
static int add_loaded(const larder_transform_ops *ops, const char *path)
{
    if (!ops)
        return larder__fail(LARDER_EUNSUPPORTED,
                            "%s: larder_transform_entry(%d) gave no table "
                            "(built for another ABI?)",
                            path, LARDER_TRANSFORM_ABI);
    if (ops->abi != LARDER_TRANSFORM_ABI || !ops->name || !ops->parse || !ops->applies ||
        !ops->bound || !ops->run)
        return larder__fail(LARDER_EUNSUPPORTED, "%s: table of ABI %u or with functions missing",
                            path, ops->abi);
    if (!valid_name(ops->name, strnlen(ops->name, LARDER_TRANSFORM_MAX_NAME)))
        return larder__fail(LARDER_EUNSUPPORTED, "%s: transform name is not [a-z0-9_]{1,63}", path);
    if (lookup(ops->name, strlen(ops->name)))
        return larder__fail(-EEXIST, "%s: a transform named '%s' is loaded already", path,
                            ops->name);
    if (num_loaded == LARDER__TRANSFORM_MAX_LOADED)
        return larder__fail(-ENOSPC, "%s: %d transforms are loaded already", path,
                            LARDER__TRANSFORM_MAX_LOADED);
    loaded[num_loaded] = ops;
    __atomic_store_n(&num_loaded, num_loaded + 1, __ATOMIC_RELEASE);
    return 0;
}

int larder_transform_load_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return larder__fail(-errno, "transform directory %s: %s", dir, strerror(errno));
    int count = 0, first_error = 0;
    char message[512] = "";
    pthread_mutex_lock(&registry_lock);
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, ".so") != 0 || e->d_name[0] == '.') continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        int rc;
        void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            rc = larder__fail(LARDER_EUNSUPPORTED, "%s: %s", path, dlerror());
        } else {
            larder_transform_entry_fn entry;
            *(void **)&entry = dlsym(handle, "larder_transform_entry");
            rc = entry ? add_loaded(entry(LARDER_TRANSFORM_ABI), path)
                       : larder__fail(LARDER_EUNSUPPORTED, "%s: no symbol larder_transform_entry",
                                      path);
            if (rc < 0) dlclose(handle); /* kept open for the process's life otherwise */
        }
        if (rc == 0) {
            count++;
        } else if (!first_error) {
            first_error = rc;
            snprintf(message, sizeof message, "%s", larder_errmsg());
        }
    }
    pthread_mutex_unlock(&registry_lock);
    closedir(d);
    if (first_error) return larder__fail(first_error, "%s", message);
    return count;
}

/* ---- running over one sample -------------------------------------------- */

static uint64_t align8(uint64_t n)
{
    return (n + 7) & ~(uint64_t)7;
}

/* One output field of a run, before the result is laid out. */
struct out_field {
    larder_field_info info;                  /* offset: into the data area */
    const char *name;                        /* the input's name, or renamed */
    size_t name_length;                      /* of name: may keep a prefix of the input's */
    char renamed[LARDER_TRANSFORM_MAX_NAME]; /* the op's name buffer (the ABI's size) */
};

static size_t description_size(const struct out_field *f)
{
    return (size_t)align8(24 + 8 * (uint64_t)f->info.ndim + f->name_length);
}

/*
 * The op's name buffer holds 63 bytes, the ABI's; a field name from an
 * index can be longer (a packed HDF5 dataset's path).  A long name is
 * shown to the op as its last 63 bytes (where a suffix is); the op
 * leaving them alone keeps the whole name, cutting a suffix from them
 * cuts it from the whole name, and any other name replaces it.
 */
static void name_preset(struct out_field *o, const char *name)
{
    size_t length = strlen(name), keep = sizeof o->renamed - 1;
    o->name = name;
    o->name_length = length;
    snprintf(o->renamed, sizeof o->renamed, "%s", length > keep ? name + length - keep : name);
}

static void name_after_run(struct out_field *o)
{
    size_t keep = sizeof o->renamed - 1, length = strlen(o->renamed);
    const char *preset = o->name_length > keep ? o->name + o->name_length - keep : o->name;
    size_t preset_length = o->name_length > keep ? keep : o->name_length;
    if (length <= preset_length && memcmp(o->renamed, preset, length) == 0)
        o->name_length -= preset_length - length; /* the same, or a suffix cut */
    else
        o->name = o->renamed, o->name_length = length;
}

/* A field's description at most: its dims all used, a name of an op's. */
#define MAX_DESCRIPTION (24 + 8 * LARDER_MAX_DIMS + LARDER_TRANSFORM_MAX_NAME + 8)
/* The descriptions of a result at most: LARDER__TRANSFORM_MAX_RESULT's room
 * beside the data (long field names take it, not the data's). */
#define MAX_HEAD (LARDER__TRANSFORM_MAX_RESULT - LARDER_TRANSFORM_MAX_OUTPUT)

uint64_t larder__transform_result_max(const struct larder__transform *t, uint32_t num_fields,
                                      uint64_t sample_length)
{
    /* what the built-ins can write, known from their parameters; an
     * untransformed field is copied (at most the sample's bytes) */
    uint64_t data = LARDER_TRANSFORM_MAX_OUTPUT;
    if (t->ops == larder__transform_jpeg_ops())
        data = sample_length + num_fields * align8(larder__transform_jpeg_max_output(t->state)) +
               8 * num_fields;
    else if (t->ops == larder__transform_cast_ops()) /* elements of >= 1 byte to <= 8 */
        data = 8 * sample_length + 8 * (uint64_t)num_fields;
    if (data > LARDER_TRANSFORM_MAX_OUTPUT) data = LARDER_TRANSFORM_MAX_OUTPUT;
    uint64_t head = 16 + (uint64_t)num_fields * MAX_DESCRIPTION;
    if (head > MAX_HEAD) head = MAX_HEAD; /* run_at refuses more */
    return head + data;
}

int larder__transform_run(const struct larder__transform *t, uint64_t id,
                          const larder_field_info *fields, uint32_t num_fields,
                          const uint8_t *sample, uint64_t sample_length, uint8_t **result,
                          size_t *result_length)
{
    return larder__transform_run_at(t, id, fields, num_fields, sample, sample_length, 0, result,
                                    result_length);
}

int larder__transform_run_at(const struct larder__transform *t, uint64_t id,
                             const larder_field_info *fields, uint32_t num_fields,
                             const uint8_t *sample, uint64_t sample_length, size_t headroom,
                             uint8_t **buffer, size_t *result_length)
{
    const larder_transform_ops *ops = t->ops;
    if (num_fields > LARDER__TRANSFORM_MAX_FIELDS)
        return larder__fail(LARDER_EUNSUPPORTED, "sample %llu: %u fields, at most %d",
                            (unsigned long long)id, num_fields, LARDER__TRANSFORM_MAX_FIELDS);
    struct out_field *out = calloc(num_fields ? num_fields : 1, sizeof *out);
    uint64_t *bounds = calloc(num_fields ? num_fields : 1, sizeof *bounds);
    if (!out || !bounds) {
        free(out), free(bounds);
        return -ENOMEM;
    }
    char error[256];
    uint64_t data_bound = 0, head_max = 16;
    bool any = false;
    int rc = 0;
    /* the bound of every field first: one allocation, checked against the limit */
    for (uint32_t i = 0; i < num_fields && rc == 0; i++) {
        const larder_field_info *f = &fields[i];
        if (f->offset > sample_length || f->length > sample_length - f->offset) {
            rc = larder__fail(LARDER_EBADINDEX, "sample %llu: field %u past the sample",
                              (unsigned long long)id, i);
            break;
        }
        size_t name_length = f->name ? strlen(f->name) : 0;
        if (name_length >= LARDER__TRANSFORM_MAX_FIELD_NAME) {
            rc = larder__fail(LARDER_EUNSUPPORTED,
                              "sample %llu field '%.60s...': a name of %zu bytes, at most %d",
                              (unsigned long long)id, f->name, name_length,
                              LARDER__TRANSFORM_MAX_FIELD_NAME - 1);
            break;
        }
        head_max += align8(
            24 + 8 * LARDER_MAX_DIMS +
            (name_length > LARDER_TRANSFORM_MAX_NAME ? name_length : LARDER_TRANSFORM_MAX_NAME));
        int64_t bound = (int64_t)f->length;
        error[0] = '\0';
        if (ops->applies(t->state, f)) {
            any = true;
            bound = ops->bound(t->state, f, sample + f->offset, error, sizeof error);
        }
        if (bound >= 0) bounds[i] = (uint64_t)bound;
        if (bound < 0)
            rc = larder__fail((int)bound, "sample %llu field '%s': transform %s: %s",
                              (unsigned long long)id, f->name, t->canonical, error);
        else if (!larder__add_ok(data_bound, align8((uint64_t)bound), &data_bound) ||
                 data_bound > LARDER_TRANSFORM_MAX_OUTPUT)
            rc = larder__fail(
                LARDER_ETOOSMALL, "sample %llu field '%s': transform %s: output over %u bytes",
                (unsigned long long)id, f->name, t->canonical, LARDER_TRANSFORM_MAX_OUTPUT);
    }
    if (rc == 0 && !any)
        rc = larder__fail(LARDER_ENOTFOUND,
                          "sample %llu: transform %s applies to none of its %u fields",
                          (unsigned long long)id, t->canonical, num_fields);
    /* one buffer: headroom, then room for the longest descriptions, then
     * the data; the descriptions' real size is known only after the run,
     * and the data moves down to meet them (no second copy of it) */
    uint8_t *r = rc == 0 ? malloc(headroom + (size_t)head_max + (size_t)data_bound) : NULL;
    if (rc == 0 && !r) rc = -ENOMEM;
    uint8_t *data = r ? r + headroom + head_max : NULL;
    uint64_t used = 0;
    for (uint32_t i = 0; i < num_fields && rc == 0; i++) {
        const larder_field_info *f = &fields[i];
        struct out_field *o = &out[i];
        o->info = *f;
        name_preset(o, f->name ? f->name : "");
        int64_t n = (int64_t)f->length;
        if (ops->applies(t->state, f)) {
            error[0] = '\0';
            n = ops->run(t->state, f, sample + f->offset, data + used, (size_t)(data_bound - used),
                         &o->info, o->renamed, error, sizeof error);
            o->renamed[sizeof o->renamed - 1] = '\0';
            name_after_run(o);
            if (n < 0) {
                rc = larder__fail((int)n, "sample %llu field '%s': transform %s: %s",
                                  (unsigned long long)id, f->name, t->canonical,
                                  error[0] ? error : larder_strerror((int)n));
                break;
            }
            if ((uint64_t)n > bounds[i] || o->info.ndim > LARDER_MAX_DIMS || o->info.dtype < 0 ||
                o->info.dtype >= LARDER_DTYPE_COUNT) {
                rc = larder__fail(LARDER_EUNSUPPORTED,
                                  "sample %llu field '%s': transform %s broke its contract "
                                  "(size past its bound, or a bad dtype or shape)",
                                  (unsigned long long)id, f->name, t->canonical);
                break;
            }
        } else {
            memcpy(data + used, sample + f->offset, (size_t)f->length);
        }
        o->info.offset = used;
        o->info.length = (uint64_t)n;
        memset(data + used + n, 0, (size_t)(align8((uint64_t)n) - (uint64_t)n));
        used += align8((uint64_t)n);
    }
    free(bounds);
    /* two fields of one name would come back as one (bin beside bin.zst) */
    for (uint32_t i = 0; i < num_fields && rc == 0; i++)
        for (uint32_t k = 0; k < i && rc == 0; k++)
            if (out[i].name_length == out[k].name_length &&
                memcmp(out[i].name, out[k].name, out[i].name_length) == 0)
                rc = larder__fail(LARDER_EUNSUPPORTED,
                                  "sample %llu: transform %s gives fields '%s' and '%s' one name, "
                                  "'%.*s'",
                                  (unsigned long long)id, t->canonical, fields[k].name,
                                  fields[i].name, (int)out[i].name_length, out[i].name);
    if (rc < 0) {
        free(r), free(out);
        return rc;
    }
    size_t head = 16;
    for (uint32_t i = 0; i < num_fields; i++)
        head += description_size(&out[i]);
    if (head > MAX_HEAD) { /* what a reader takes: LARDER__TRANSFORM_MAX_RESULT */
        free(r), free(out);
        return larder__fail(LARDER_EUNSUPPORTED,
                            "sample %llu: its %u fields' names and shapes take %zu bytes, "
                            "at most %u",
                            (unsigned long long)id, num_fields, head, (unsigned)MAX_HEAD);
    }
    uint8_t *start = r + headroom;
    memset(start, 0, head);
    larder__put_le32(start, LARDER__TRANSFORM_MAGIC);
    larder__put_le32(start + 4, num_fields);
    larder__put_le64(start + 8, used);
    uint8_t *p = start + 16;
    for (uint32_t i = 0; i < num_fields; i++) {
        const struct out_field *o = &out[i];
        size_t name_length = o->name_length;
        larder__put_le16(p, (uint16_t)name_length);
        p[2] = (uint8_t)o->info.dtype;
        p[3] = (uint8_t)o->info.ndim;
        larder__put_le64(p + 8, o->info.offset);
        larder__put_le64(p + 16, o->info.length);
        for (uint32_t k = 0; k < o->info.ndim; k++)
            larder__put_le64(p + 24 + 8 * k, o->info.shape[k]);
        memcpy(p + 24 + 8 * o->info.ndim, o->name, name_length);
        p += description_size(o);
    }
    memmove(p, data, (size_t)used);
    free(out);
    /* give back what the bound held beyond the result */
    size_t total = headroom + head + (size_t)used;
    uint8_t *shrunk = realloc(r, total ? total : 1);
    *buffer = shrunk ? shrunk : r;
    *result_length = head + (size_t)used;
    return 0;
}

/* ---- decoding a result -------------------------------------------------- */

int larder__transform_decode(const uint8_t *b, size_t length, larder_transformed **out)
{
#define BAD(...) larder__fail(LARDER_EPROTOCOL, "transform result: " __VA_ARGS__)
    if (length < 16 || larder__le32(b) != LARDER__TRANSFORM_MAGIC) return BAD("no LTR1 header");
    uint32_t n = larder__le32(b + 4);
    uint64_t data_length = larder__le64(b + 8);
    if (n > LARDER__TRANSFORM_MAX_FIELDS) return BAD("%u fields", n);
    if (data_length > length - 16)
        return BAD("data of %llu bytes past the end", (unsigned long long)data_length);
    size_t head_end = length - (size_t)data_length, pos = 16;
    /* one allocation: the struct, the field table, the names, the data */
    size_t names = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (head_end - pos < 24) return BAD("field %u's description past the end", i);
        const uint8_t *p = b + pos;
        size_t name_length = larder__le16(p);
        uint32_t ndim = p[3];
        if (p[2] >= LARDER_DTYPE_COUNT || ndim > LARDER_MAX_DIMS || larder__le32(p + 4))
            return BAD("field %u: dtype %u, ndim %u", i, p[2], ndim);
        if (name_length >= LARDER__TRANSFORM_MAX_FIELD_NAME)
            return BAD("field %u: name too long", i);
        uint64_t size = align8(24 + 8 * (uint64_t)ndim + name_length);
        if (size > head_end - pos) return BAD("field %u's description past the end", i);
        uint64_t offset = larder__le64(p + 8), field_length = larder__le64(p + 16);
        if (offset % 8 || offset > data_length || field_length > data_length - offset)
            return BAD("field %u: bytes [%llu, +%llu) outside the data", i,
                       (unsigned long long)offset, (unsigned long long)field_length);
        uint64_t elements = 1, bytes;
        for (uint32_t k = 0; k < ndim; k++)
            if (!larder__mul_ok(elements, larder__le64(p + 24 + 8 * k), &elements))
                return BAD("field %u: shape overflows", i);
        if (p[2] != LARDER_DTYPE_NONE &&
            (!larder__mul_ok(elements, larder_dtype_size(p[2]), &bytes) || bytes != field_length))
            return BAD("field %u: shape and dtype say other than %llu bytes", i,
                       (unsigned long long)field_length);
        names += name_length + 1;
        pos += (size_t)size;
    }
    if (pos != head_end) return BAD("%zu stray bytes after the descriptions", head_end - pos);
    size_t total = sizeof(larder_transformed) + n * sizeof(larder_field_info) + names + 8 +
                   (size_t)data_length;
    larder_transformed *t = calloc(1, total);
    if (!t) return -ENOMEM;
    t->num_fields = n;
    t->fields = (larder_field_info *)(t + 1);
    char *name = (char *)(t->fields + n);
    uint8_t *data = (uint8_t *)(((uintptr_t)(name + names) + 7) & ~(uintptr_t)7);
    pos = 16;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = b + pos;
        larder_field_info *f = &t->fields[i];
        size_t name_length = larder__le16(p);
        f->dtype = p[2];
        f->ndim = p[3];
        f->offset = larder__le64(p + 8);
        f->length = larder__le64(p + 16);
        for (uint32_t k = 0; k < f->ndim; k++)
            f->shape[k] = larder__le64(p + 24 + 8 * k);
        memcpy(name, p + 24 + 8 * f->ndim, name_length);
        name[name_length] = '\0';
        f->name = name;
        name += name_length + 1;
        pos += (size_t)align8(24 + 8 * (uint64_t)f->ndim + name_length);
    }
    memcpy(data, b + head_end, (size_t)data_length);
    t->data = data;
    t->length = data_length;
    *out = t;
    return 0;
#undef BAD
}

void larder_transformed_free(larder_transformed *result)
{
    free(result);
}
