/*
 * test_hdf5.c - the HDF5 packing source (src/pack/input_hdf5.c and
 * the hdf5_*.c beside it): samples
 * enumerated in group and rows mode with their dtypes and shapes, field
 * bytes equal to numpy's little-endian `.tobytes()` for every dtype and
 * byte order, reads of any sub-range (the exact path for fields too big
 * to cache included) and from several threads, and the failures:
 * garbage, truncated, empty, unsupported and mismatched inputs.
 *
 * Fixtures are written by /usr/bin/python3 with h5py and numpy; a test
 * skips when those are missing.  Python also writes the expected bytes
 * of each field to NAME.bin files.
 */
#include "layout.h"
#include "test.h"

#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <unistd.h>

#define PY_PRELUDE                                                                                 \
    "import sys\n"                                                                                 \
    "try:\n"                                                                                       \
    "    import h5py, numpy as np\n"                                                               \
    "except ImportError:\n"                                                                        \
    "    sys.exit(3)\n"                                                                            \
    "def expect(name, a, dtype):\n"                                                                \
    "    open(name + '.bin', 'wb').write(np.ascontiguousarray(a).astype(dtype).tobytes())\n"

/* Run a python script (after PY_PRELUDE) in the test's directory. */
static void make_fixture(const char *script)
{
    size_t prelude = strlen(PY_PRELUDE), length = strlen(script);
    char *text = malloc(prelude + length);
    CHECK(text != NULL);
    memcpy(text, PY_PRELUDE, prelude);
    memcpy(text + prelude, script, length);
    test_write_file(test_path("fixture.py"), text, prelude + length);
    free(text);
    int rc = test_sh("cd '%s' && /usr/bin/python3 fixture.py >fixture.log 2>&1", test_dir());
    if (rc == 127) SKIP("no /usr/bin/python3");
    if (rc == 3) SKIP("python3 has no h5py or numpy");
    if (rc != 0) test_sh("cat '%s' >&2", test_path("fixture.log"));
    CHECK_EQ(rc, 0);
}

/* How many HDF5 files and objects in them (datasets, groups) are open. */
static long long open_handles(void)
{
    ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    CHECK(n >= 0);
    return (long long)n;
}

/* open_handles() before the last open_source. */
static long long handles_before;

/* Free the layout (closing the source) and check no HDF5 handle stayed open. */
static void free_layout(struct larder__pack_layout *layout)
{
    larder__pack_layout_free(layout);
    CHECK_EQ(open_handles(), handles_before);
}

/* Enumerate `file` (in the test directory) into a new layout. */
static int open_source(const char *file, const char *rows, int depth,
                       struct larder__pack_layout **layout, struct larder__pack_input **source)
{
    larder_pack_options options = {
        .version = LARDER_PACK_OPTIONS_VERSION, .hdf5_group_depth = depth, .hdf5_rows = rows};
    CHECK_EQ(larder__pack_layout_new(layout), 0);
    handles_before = open_handles();
    struct larder__pack_input *input;
    int rc = larder__pack_input_hdf5_open(test_path(file), &options, &input);
    CHECK(rc == 0 ? input != NULL : input == NULL);
    if (rc == 0) rc = larder__pack_layout_add_input(*layout, input); /* takes it either way */
    *source = rc == 0 ? input : NULL;
    return rc;
}

struct sample {
    const char *key;
    struct larder__pack_input *source;
    const struct larder__pack_field *fields;
    uint32_t num_fields;
};

static struct sample get_sample(const struct larder__pack_layout *layout, uint64_t i)
{
    struct sample s;
    CHECK(i < larder__pack_layout_num_samples(layout));
    larder__pack_layout_sample(layout, i, &s.key, &s.source, &s.fields, &s.num_fields);
    return s;
}

/* Read a whole field the way the writer does, in pieces of `piece`
 * bytes, the first `first` bytes long (0: same as the rest). */
static uint8_t *read_field(struct larder__pack_input *source,
                           const struct larder__pack_field *field, size_t first, size_t piece)
{
    uint8_t *data = malloc(field->size ? field->size : 1);
    CHECK(data != NULL);
    for (uint64_t done = 0; done < field->size;) {
        size_t n = done == 0 && first ? first : piece;
        if (n > field->size - done) n = (size_t)(field->size - done);
        int rc = source->ops->read(source, field, done, data + done, n);
        if (rc != 0) fprintf(stderr, "    %s\n", larder_errmsg());
        CHECK_EQ(rc, 0);
        done += n;
    }
    return data;
}

/* The field's bytes equal NAME.bin, read whole and in odd pieces. */
static void check_field_bytes(struct larder__pack_input *source,
                              const struct larder__pack_field *field, const char *expected)
{
    char name[256];
    snprintf(name, sizeof name, "%s.bin", expected);
    size_t size;
    uint8_t *want = test_read_file(test_path(name), &size);
    CHECK_EQ(field->size, size);
    const size_t pieces[][2] = {{0, (size_t)field->size}, {3, 7}, {1, 4096}, {5, 1}};
    for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
        if (pieces[p][1] == 0) continue;
        uint8_t *got = read_field(source, field, pieces[p][0], pieces[p][1]);
        CHECK(memcmp(got, want, size) == 0);
        free(got);
    }
    free(want);
}

static void check_shape(const struct larder__pack_field *field, const char *name, int dtype,
                        uint32_t ndim, const uint64_t *shape)
{
    CHECK(strcmp(field->name, name) == 0);
    CHECK_EQ(field->dtype, dtype);
    CHECK_EQ(field->ndim, ndim);
    uint64_t size = larder_dtype_size(dtype);
    for (uint32_t d = 0; d < ndim; d++) {
        CHECK_EQ(field->shape[d], shape[d]);
        size *= shape[d];
    }
    CHECK_EQ(field->size, size);
}

/* Run fn with stderr sent to a file; returns how many bytes it printed. */
static long stderr_bytes_during(int (*fn)(void *), void *arg, int *rc)
{
    fflush(stderr);
    int saved = dup(2);
    int fd = open(test_path("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    *rc = fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t size;
    free(test_read_file(test_path("stderr.txt"), &size));
    return (long)size;
}

TEST(hdf5_is_hdf5)
{
    make_fixture("h5py.File('a.h5', 'w').create_dataset('x', data=np.arange(3))\n"
                 "h5py.File('ub.h5', 'w', userblock_size=1024).create_dataset('x', data=[1])\n"
                 "open('garbage.h5', 'wb').write(b'\\x89HDF\\r\\n\\x1a' + bytes(600))\n");
    CHECK(larder__is_hdf5(test_path("a.h5")));
    CHECK(larder__is_hdf5(test_path("ub.h5")));
    CHECK(!larder__is_hdf5(test_path("garbage.h5")));
    CHECK(!larder__is_hdf5(test_path("fixture.py")));
    CHECK(!larder__is_hdf5(test_path("missing.h5")));
    CHECK(!larder__is_hdf5(test_dir()));
}

/* Two datasets per group (one chunked, gzip and shuffle), a nested one,
 * and things group mode must leave out. */
TEST(hdf5_group_mode)
{
    make_fixture("f = h5py.File('g.h5', 'w')\n"
                 "for i in (2, 0, 1):\n"
                 "    g = f.create_group('s%03d' % i)\n"
                 "    img = (np.arange(40, dtype='f4') * (i + 1.5)).reshape(4, 10)\n"
                 "    g.create_dataset('image', data=img, chunks=(3, 4), compression='gzip',\n"
                 "                     shuffle=True)\n"
                 "    g.create_dataset('label', data=np.int64(-7 * i))\n"
                 "    expect('s%03d.image' % i, img, '<f4')\n"
                 "    expect('s%03d.label' % i, np.int64(-7 * i), '<i8')\n"
                 "m = f['s001'].create_group('meta')\n"
                 "m.create_dataset('score', data=np.array([0.5, 2.25], dtype='>f8'))\n"
                 "expect('s001.meta.score', np.array([0.5, 2.25]), '<f8')\n"
                 "f.create_dataset('stray', data=np.arange(5))\n"
                 "f.create_group('zz_empty').create_group('inner')\n"
                 "f['s000/soft'] = h5py.SoftLink('/s001/image')\n");
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    CHECK_EQ(open_source("g.h5", NULL, 0, &layout, &source), 0);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 3);
    static const uint64_t image_shape[] = {4, 10}, score_shape[] = {2};
    for (uint64_t i = 0; i < 3; i++) {
        struct sample s = get_sample(layout, i);
        char key[16], expected[64];
        snprintf(key, sizeof key, "s%03d", (int)i);
        CHECK(strcmp(s.key, key) == 0);
        CHECK(s.source == source);
        CHECK_EQ(s.num_fields, i == 1 ? 3 : 2);
        check_shape(&s.fields[0], "image", LARDER_DTYPE_F32, 2, image_shape);
        snprintf(expected, sizeof expected, "%s.image", key);
        check_field_bytes(source, &s.fields[0], expected);
        check_shape(&s.fields[1], "label", LARDER_DTYPE_I64, 0, NULL);
        snprintf(expected, sizeof expected, "%s.label", key);
        check_field_bytes(source, &s.fields[1], expected);
        if (i == 1) {
            check_shape(&s.fields[2], "meta.score", LARDER_DTYPE_F64, 1, score_shape);
            check_field_bytes(source, &s.fields[2], "s001.meta.score");
        }
    }
    free_layout(layout);
}

TEST(hdf5_group_depth)
{
    make_fixture("f = h5py.File('d.h5', 'w')\n"
                 "for split, names in (('val', ['c']), ('train', ['b', 'a'])):\n"
                 "    for n in names:\n"
                 "        f.create_dataset('%s/%s/x' % (split, n), data=np.arange(3, dtype='u2'))\n"
                 "f.create_dataset('train/orphan', data=[1])\n");
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    CHECK_EQ(open_source("d.h5", NULL, 2, &layout, &source), 0);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 3);
    static const char *keys[] = {"train/a", "train/b", "val/c"};
    static const uint64_t shape[] = {3};
    for (uint64_t i = 0; i < 3; i++) {
        struct sample s = get_sample(layout, i);
        CHECK(strcmp(s.key, keys[i]) == 0);
        CHECK_EQ(s.num_fields, 1);
        check_shape(&s.fields[0], "x", LARDER_DTYPE_U16, 1, shape);
    }
    free_layout(layout);

    /* Depth 1: the groups "train" and "val", each with nested fields. */
    CHECK_EQ(open_source("d.h5", NULL, 1, &layout, &source), 0);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 2);
    struct sample s = get_sample(layout, 0);
    CHECK(strcmp(s.key, "train") == 0);
    CHECK_EQ(s.num_fields, 3);
    CHECK(strcmp(s.fields[0].name, "a.x") == 0);
    CHECK(strcmp(s.fields[1].name, "b.x") == 0);
    CHECK(strcmp(s.fields[2].name, "orphan") == 0);
    free_layout(layout);

    CHECK_EQ(open_source("d.h5", NULL, -1, &layout, &source), LARDER_EUSAGE);
    free_layout(layout);
}

TEST(hdf5_rows_mode)
{
    make_fixture("f = h5py.File('r.h5', 'w')\n"
                 "x = np.arange(10 * 3 * 2, dtype='f4').reshape(10, 3, 2) / 7\n"
                 "y = np.arange(10, dtype='i8') * -3\n"
                 "w = (np.arange(20) % 251).astype('u1').reshape(10, 2)\n"
                 "f.create_dataset('x', data=x, chunks=(4, 3, 2), compression='gzip')\n"
                 "f.create_dataset('y', data=y.astype('>i8'))\n"
                 "f.create_dataset('meta/w', data=w)\n"
                 "for r in range(10):\n"
                 "    expect('x%d' % r, x[r], '<f4')\n"
                 "    expect('y%d' % r, y[r], '<i8')\n"
                 "    expect('w%d' % r, w[r], 'u1')\n");
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    CHECK_EQ(open_source("r.h5", "x, y,/meta/w", 0, &layout, &source), 0);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 10);
    static const uint64_t x_shape[] = {3, 2}, w_shape[] = {2};
    for (uint64_t r = 0; r < 10; r++) {
        struct sample s = get_sample(layout, r);
        char key[16], expected[16];
        snprintf(key, sizeof key, "%08d", (int)r);
        CHECK(strcmp(s.key, key) == 0);
        CHECK_EQ(s.num_fields, 3);
        check_shape(&s.fields[0], "x", LARDER_DTYPE_F32, 2, x_shape);
        check_shape(&s.fields[1], "y", LARDER_DTYPE_I64, 0, NULL);
        check_shape(&s.fields[2], "meta.w", LARDER_DTYPE_U8, 1, w_shape);
        const char *prefixes[] = {"x", "y", "w"};
        for (int f = 0; f < 3; f++) {
            snprintf(expected, sizeof expected, "%s%d", prefixes[f], (int)r);
            check_field_bytes(source, &s.fields[f], expected);
        }
    }
    free_layout(layout);
}

/* Every dtype larder knows, stored in both byte orders, reads back as
 * numpy's little-endian bytes. */
TEST(hdf5_dtypes)
{
    make_fixture("f = h5py.File('t.h5', 'w')\n"
                 "a = np.array([[0, 1, 127], [3, 100, 42]])\n"
                 "for i, t in enumerate(['u1', 'i1', 'u2', 'i2', 'u4', 'i4', 'u8', 'i8',\n"
                 "                       'f2', 'f4', 'f8']):\n"
                 "    v = (a * (-1 if t[0] in 'if' else 1)).astype(t)\n"
                 "    if t[0] == 'f': v = v / 3\n"
                 "    for order in '<>':\n"
                 "        name = 'd/%02d%s%s' % (i, t, 'le' if order == '<' else 'be')\n"
                 "        f.create_dataset(name, data=v.astype(order + t))\n"
                 "        expect(name.replace('/', '.'), v, '<' + t)\n"
                 "f.create_dataset('d/12bool', data=np.array([True, False, True]))\n"
                 "expect('d.12bool', np.array([True, False, True]), '|b1')\n");
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    CHECK_EQ(open_source("t.h5", NULL, 0, &layout, &source), 0);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 1);
    struct sample s = get_sample(layout, 0);
    CHECK(strcmp(s.key, "d") == 0);
    CHECK_EQ(s.num_fields, 23);
    static const int dtypes[] = {LARDER_DTYPE_U8,  LARDER_DTYPE_I8,  LARDER_DTYPE_U16,
                                 LARDER_DTYPE_I16, LARDER_DTYPE_U32, LARDER_DTYPE_I32,
                                 LARDER_DTYPE_U64, LARDER_DTYPE_I64, LARDER_DTYPE_F16,
                                 LARDER_DTYPE_F32, LARDER_DTYPE_F64};
    static const uint64_t shape[] = {2, 3}, bool_shape[] = {3};
    for (uint32_t f = 0; f < 22; f++) {
        CHECK_EQ(s.fields[f].dtype, dtypes[f / 2]);
        check_shape(&s.fields[f], s.fields[f].name, dtypes[f / 2], 2, shape);
        char expected[64];
        snprintf(expected, sizeof expected, "d.%s", s.fields[f].name);
        check_field_bytes(source, &s.fields[f], expected);
    }
    check_shape(&s.fields[22], "12bool", LARDER_DTYPE_BOOL, 1, bool_shape);
    check_field_bytes(source, &s.fields[22], "d.12bool");
    free_layout(layout);
}

/* Element i of the big fixture below, as numpy computes it (in uint32,
 * whose wrap-around leaves the low 16 bits as they are here). */
static int16_t big_value(uint64_t i)
{
    return (int16_t)(uint16_t)(((i * 40503) ^ (i >> 7)) & 0xffff);
}

static void check_big_range(struct larder__pack_input *source,
                            const struct larder__pack_field *field, uint64_t base, uint64_t offset,
                            size_t length)
{
    uint8_t *got = malloc(length);
    CHECK(got != NULL);
    memset(got, 0xa5, length);
    CHECK_EQ(source->ops->read(source, field, offset, got, length), 0);
    for (size_t k = 0; k < length; k++) {
        uint64_t byte = offset + k;
        uint16_t v = (uint16_t)big_value(base + byte / 2);
        uint8_t want = (uint8_t)(byte % 2 ? v >> 8 : v);
        if (got[k] != want) {
            fprintf(stderr, "    byte %llu of read at %llu+%zu: %u, want %u\n",
                    (unsigned long long)byte, (unsigned long long)offset, length, got[k], want);
            CHECK(0);
        }
    }
    free(got);
}

/*
 * A field larger than the cache takes (64 MiB) is read exactly, any
 * sub-range of the flattened array being a union of hyperslabs: random
 * ranges, unaligned ones, and a writer-like pass must all agree with
 * numpy's values.  Big-endian and chunked, so HDF5 converts and
 * assembles chunks.  Rows mode reads sub-ranges of rows the same way.
 */
TEST(hdf5_read_ranges)
{
    make_fixture("i = np.arange(3 * 4100 * 2800, dtype='u4')\n"
                 "v = (((i * 40503) ^ (i >> 7)) & 0xffff).astype('u2').view('i2')\n"
                 "f = h5py.File('big.h5', 'w')\n"
                 "f.create_dataset('s/big', data=v.reshape(3, 4100, 2800).astype('>i2'),\n"
                 "                 chunks=(1, 300, 700))\n"
                 "f.create_dataset('rows', data=v[:5 * 7 * 11 * 13].reshape(5, 7, 11, 13))\n");
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    CHECK_EQ(open_source("big.h5", NULL, 0, &layout, &source), 0);
    struct sample s = get_sample(layout, 0);
    CHECK_EQ(s.num_fields, 1);
    static const uint64_t shape[] = {3, 4100, 2800};
    check_shape(&s.fields[0], "big", LARDER_DTYPE_I16, 3, shape);
    const struct larder__pack_field *big = &s.fields[0];
    uint64_t x = 12345;
    for (int k = 0; k < 250; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t length = (size_t)(x % (k < 200 ? 20000 : 1000000)) + 1;
        uint64_t offset = (x >> 24) % (big->size - length + 1);
        if (k % 3 == 0) offset &= ~(uint64_t)1; /* aligned */
        check_big_range(source, big, 0, offset, length);
    }
    check_big_range(source, big, 0, 0, 1);
    check_big_range(source, big, 0, big->size - 1, 1);
    check_big_range(source, big, 0, 2800 * 2 - 3, 8); /* across an axis-1 row */
    check_big_range(source, big, 0, 4100 * 2800 * 2 - 5, 4100 * 2800 * 2 + 10); /* axis 0 */
    /* As the writer reads: a short first piece, then 4 MiB pieces. */
    for (uint64_t done = 0; done < big->size;) {
        size_t n = done == 0 ? 1001 : 4u << 20;
        if (n > big->size - done) n = (size_t)(big->size - done);
        check_big_range(source, big, 0, done, n);
        done += n;
    }
    free_layout(layout);

    CHECK_EQ(open_source("big.h5", "rows", 0, &layout, &source), 0);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 5);
    for (uint64_t r = 0; r < 5; r++) {
        s = get_sample(layout, r);
        const struct larder__pack_field *row = &s.fields[0];
        CHECK_EQ(row->size, 7 * 11 * 13 * 2);
        for (uint64_t offset = 0; offset < row->size; offset += 97)
            for (size_t length = 1; length < 400 && offset + length <= row->size; length += 131)
                check_big_range(source, row, r * 7 * 11 * 13, offset, length);
    }
    free_layout(layout);
}

struct reader {
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    int thread;
    int failures;
};

static void *read_all(void *arg)
{
    struct reader *r = arg;
    uint64_t n = larder__pack_layout_num_samples(r->layout);
    for (uint64_t i = (uint64_t)r->thread; i < n * 4; i += 3) {
        const char *key;
        struct larder__pack_input *source;
        const struct larder__pack_field *fields;
        uint32_t num_fields;
        larder__pack_layout_sample(r->layout, i % n, &key, &source, &fields, &num_fields);
        const struct larder__pack_field *field = &fields[0];
        uint8_t *data = malloc(field->size);
        size_t piece = 1000 + (size_t)r->thread * 333;
        for (uint64_t done = 0; data && done < field->size;) {
            size_t m = piece < field->size - done ? piece : (size_t)(field->size - done);
            if (source->ops->read(source, field, done, data + done, m) != 0) r->failures++;
            done += m;
        }
        /* element j of sample k is k * 100000 + j, as float32 */
        const uint8_t *p = data;
        for (uint64_t j = 0; data && j < field->size / 4; j++) {
            float want = (float)((i % n) * 100000 + j), got;
            memcpy(&got, p + j * 4, 4);
            if (got != want) {
                r->failures++;
                break;
            }
        }
        free(data);
    }
    return NULL;
}

/* Several threads read fields piece by piece at once, as the writers do. */
TEST(hdf5_threads)
{
    make_fixture(
        "f = h5py.File('m.h5', 'w')\n"
        "for k in range(24):\n"
        "    a = (k * 100000 + np.arange(5000 + 700 * k)).astype('f4')\n"
        "    f.create_dataset('s%02d/a' % k, data=a, chunks=(999,), compression='gzip')\n");
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    CHECK_EQ(open_source("m.h5", NULL, 0, &layout, &source), 0);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 24);
    pthread_t threads[3];
    struct reader readers[3];
    for (int t = 0; t < 3; t++) {
        readers[t] = (struct reader){.layout = layout, .source = source, .thread = t};
        CHECK_EQ(pthread_create(&threads[t], NULL, read_all, &readers[t]), 0);
    }
    for (int t = 0; t < 3; t++) {
        pthread_join(threads[t], NULL);
        CHECK_EQ(readers[t].failures, 0);
    }
    free_layout(layout);
}

static int open_garbage(void *arg)
{
    struct larder__pack_layout **layout = arg;
    struct larder__pack_input *source;
    return open_source("x.h5", NULL, 0, layout, &source);
}

TEST(hdf5_unreadable)
{
    uint8_t garbage[4096];
    test_fill_random(garbage, sizeof garbage, 7);
    test_write_file(test_path("x.h5"), garbage, sizeof garbage);
    struct larder__pack_layout *layout;
    int rc;
    CHECK_EQ(stderr_bytes_during(open_garbage, &layout, &rc), 0);
    CHECK_EQ(rc, LARDER_EHDF5);
    CHECK(strstr(larder_errmsg(), "x.h5") != NULL);
    CHECK_EQ(larder__pack_layout_num_samples(layout), 0);
    free_layout(layout);

    /* A real file cut short: the superblock survives, the rest does not. */
    make_fixture("f = h5py.File('whole.h5', 'w')\n"
                 "for k in range(50):\n"
                 "    f.create_dataset('g%02d/a' % k, data=np.arange(1000) + k)\n"
                 "f.close()\n"
                 "open('cut.h5', 'wb').write(open('whole.h5', 'rb').read()[:3000])\n");
    struct larder__pack_input *source;
    rc = open_source("cut.h5", NULL, 0, &layout, &source);
    CHECK_EQ(rc, LARDER_EHDF5);
    CHECK(strstr(larder_errmsg(), "cut.h5") != NULL);
    free_layout(layout);

    CHECK_EQ(open_source("missing.h5", NULL, 0, &layout, &source), LARDER_EHDF5);
    CHECK(strstr(larder_errmsg(), "missing.h5") != NULL);
    free_layout(layout);
}

TEST(hdf5_rows_errors)
{
    make_fixture("f = h5py.File('e.h5', 'w')\n"
                 "f.create_dataset('x', data=np.arange(10))\n"
                 "f.create_dataset('y', data=np.arange(9))\n"
                 "f.create_dataset('z', data=np.zeros((0, 4)))\n"
                 "f.create_dataset('s', data=1.5)\n"
                 "f.create_group('g')\n");
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    CHECK_EQ(open_source("e.h5", "x,y", 0, &layout, &source), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "/y") != NULL && strstr(larder_errmsg(), "/x") != NULL);
    CHECK(strstr(larder_errmsg(), "e.h5") != NULL);
    free_layout(layout);
    const char *bad[] = {"x,nope", "x,g/deeper", "g", "s", "x,,y", "x,/x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ(open_source("e.h5", bad[i], 0, &layout, &source), LARDER_EUSAGE);
        CHECK(strstr(larder_errmsg(), "e.h5") != NULL);
        CHECK_EQ(larder__pack_layout_num_samples(layout), 0);
        free_layout(layout);
    }
    CHECK_EQ(open_source("e.h5", "z", 0, &layout, &source), LARDER_EEMPTY);
    free_layout(layout);
}

TEST(hdf5_empty)
{
    make_fixture("h5py.File('empty.h5', 'w')\n"
                 "f = h5py.File('flat.h5', 'w')\n"
                 "f.create_dataset('x', data=np.arange(4))\n"
                 "f.create_group('g').create_group('h')\n");
    struct larder__pack_layout *layout;
    struct larder__pack_input *source;
    CHECK_EQ(open_source("empty.h5", NULL, 0, &layout, &source), LARDER_EEMPTY);
    CHECK(strstr(larder_errmsg(), "empty.h5") != NULL);
    free_layout(layout);
    CHECK_EQ(open_source("flat.h5", NULL, 0, &layout, &source), LARDER_EEMPTY);
    free_layout(layout);
    CHECK_EQ(open_source("flat.h5", NULL, 3, &layout, &source), LARDER_EEMPTY);
    free_layout(layout);
}

TEST(hdf5_unsupported)
{
    make_fixture("f = h5py.File('u.h5', 'w')\n"
                 "f.create_dataset('a/ok', data=np.arange(3))\n"
                 "f.create_dataset('a/text', data='hello')\n"
                 "f.create_dataset('b/fixed', data=np.array([b'ab', b'cd']))\n"
                 "f.create_dataset('c/pair', data=np.zeros(2, dtype=[('p', 'i4'), ('q', 'f4')]))\n"
                 "f.create_dataset('d/empty', data=h5py.Empty('f4'))\n");
    const char *cases[][2] = {
        {"a", "/a/text"}, {"b", "/b/fixed"}, {"c", "/c/pair"}, {"d", "/d/empty"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char script[256];
        snprintf(script, sizeof script,
                 "f = h5py.File('u.h5', 'r')\n"
                 "g = h5py.File('one.h5', 'w')\n"
                 "f.copy('%s', g)\n",
                 cases[i][0]);
        make_fixture(script);
        struct larder__pack_layout *layout;
        struct larder__pack_input *source;
        CHECK_EQ(open_source("one.h5", NULL, 0, &layout, &source), LARDER_EUNSUPPORTED);
        CHECK(strstr(larder_errmsg(), "one.h5") != NULL);
        CHECK(strstr(larder_errmsg(), cases[i][1]) != NULL);
        free_layout(layout);
    }
}

/* Through larder_pack and back out of the dataset it writes. */
TEST(hdf5_pack_roundtrip)
{
    make_fixture("f = h5py.File('p.h5', 'w')\n"
                 "for k in range(5):\n"
                 "    a = np.arange(6 * 7, dtype='f4').reshape(6, 7) + k\n"
                 "    f.create_dataset('s%d/img' % k, data=a, chunks=(2, 7), compression='gzip')\n"
                 "    f.create_dataset('s%d/cls' % k, data=np.int64(k))\n"
                 "    expect('s%d.img' % k, a, '<f4')\n");
    const char *sources[] = {test_path("p.h5")};
    larder_pack_options options = {.version = LARDER_PACK_OPTIONS_VERSION, .jobs = 2};
    larder_pack_result result;
    int rc = larder_pack(sources, 1, test_path("out"), &options, &result);
    if (rc != 0) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    CHECK_EQ(result.num_samples, 5);
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("out/index.larder"), NULL), 0);
    for (int k = 0; k < 5; k++) {
        char key[8], expected[32];
        snprintf(key, sizeof key, "s%d", k);
        int64_t id = larder_find_key(d, key);
        CHECK(id >= 0);
        int f = larder_find_field(d, (uint64_t)id, "img");
        CHECK(f >= 0);
        larder_field_info info;
        CHECK_EQ(larder_field_info_get(d, (uint64_t)id, (uint32_t)f, &info), 0);
        CHECK_EQ(info.dtype, LARDER_DTYPE_F32);
        CHECK_EQ(info.ndim, 2);
        CHECK_EQ(info.shape[0], 6);
        CHECK_EQ(info.shape[1], 7);
        snprintf(expected, sizeof expected, "s%d.img.bin", k);
        size_t size;
        uint8_t *want = test_read_file(test_path(expected), &size);
        uint8_t buf[4096];
        CHECK_EQ(larder_read_field(d, (uint64_t)id, (uint32_t)f, buf, sizeof buf), size);
        CHECK(memcmp(buf, want, size) == 0);
        free(want);
        f = larder_find_field(d, (uint64_t)id, "cls");
        CHECK(f >= 0);
        int64_t cls = -1;
        CHECK_EQ(larder_read_field(d, (uint64_t)id, (uint32_t)f, &cls, sizeof cls), 8);
        CHECK_EQ(cls, k);
    }
    larder_close(d);
}
