/*
 * test_sample_layout.c - larder_sample_layout_get: a sample's info and all
 * its fields in one call, checked against what the packer was given (the
 * source files' sizes, the arrays' dtypes and shapes, their bytes at the
 * reported offsets) for tar and flat shards, and its refusals.
 */
#include "larder_pack.h"
#include "npy.h"
#include "test.h"

#define SAMPLES 24

/* What sample i's source files hold. */
struct expected {
    size_t txt_size;
    uint8_t txt[600];
    bool has_cls;
    char cls[8];
    int dtype;
    uint32_t ndim;
    uint64_t shape[3];
    size_t data_size;
    uint8_t data[8 * 4 * 3 * 2];
};

static struct expected want[SAMPLES];

static const int DTYPES[] = {LARDER_DTYPE_F32, LARDER_DTYPE_I16, LARDER_DTYPE_U8, LARDER_DTYPE_F64};

/* SAMPLES samples under DIR/src: s00NN.txt (random, varied length),
 * s00NN.cls (all but every fifth sample) and s00NN.arr.npy (an array of
 * 0 to 3 dimensions). */
static void make_sources(void)
{
    char path[4096];
    for (int i = 0; i < SAMPLES; i++) {
        struct expected *e = &want[i];
        e->txt_size = (size_t)(i * 37 % 500) + 1;
        test_fill_random(e->txt, e->txt_size, (uint64_t)i + 1);
        snprintf(path, sizeof path, "%s/src/s%04d.txt", test_dir(), i);
        test_write_file(path, e->txt, e->txt_size);
        e->has_cls = i % 5 != 0;
        snprintf(e->cls, sizeof e->cls, "%d\n", i % 10);
        if (e->has_cls) {
            snprintf(path, sizeof path, "%s/src/s%04d.cls", test_dir(), i);
            test_write_file(path, e->cls, strlen(e->cls));
        }
        e->dtype = DTYPES[i % 4];
        e->ndim = (uint32_t)(i % 4);
        const uint64_t dims[3] = {(uint64_t)(i % 3) + 1, 4, 2};
        size_t elements = 1;
        for (uint32_t k = 0; k < e->ndim; k++)
            elements *= (size_t)(e->shape[k] = dims[k]);
        e->data_size = elements * larder_dtype_size(e->dtype);
        test_fill_random(e->data, e->data_size, (uint64_t)i + 1000);
        uint8_t npy[LARDER__NPY_MAX_HEADER + sizeof e->data];
        size_t header = larder__npy_write_header(npy, e->dtype, e->ndim, e->shape);
        memcpy(npy + header, e->data, e->data_size);
        snprintf(path, sizeof path, "%s/src/s%04d.arr.npy", test_dir(), i);
        test_write_file(path, npy, header + e->data_size);
    }
}

static larder_dataset *pack_and_open(int format, const char *out)
{
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = format,
                             .shard_size = 4096,
                             .shuffle = 1,
                             .shuffle_seed = 3,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path(out), &o, NULL), 0);
    char index[4096];
    snprintf(index, sizeof index, "%s/index.larder", test_path(out));
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, index, NULL), 0);
    CHECK_EQ(larder_num_samples(d), SAMPLES);
    return d;
}

/* One field of sample `e` as the layout call reported it, against the
 * sources, the sample's bytes and larder_field_info_get. */
static void check_field(larder_dataset *d, uint64_t id, uint32_t index, const larder_field_info *f,
                        const struct expected *e, const uint8_t *bytes, uint64_t sample_length)
{
    CHECK(f->offset + f->length <= sample_length);
    const void *data;
    size_t size;
    if (strcmp(f->name, "txt") == 0) {
        data = e->txt, size = e->txt_size;
        CHECK_EQ(f->dtype, LARDER_DTYPE_NONE);
        CHECK_EQ(f->ndim, 0);
    } else if (strcmp(f->name, "cls") == 0) {
        CHECK(e->has_cls);
        data = e->cls, size = strlen(e->cls);
        CHECK_EQ(f->dtype, LARDER_DTYPE_NONE);
    } else {
        CHECK(strcmp(f->name, "arr") == 0);
        data = e->data, size = e->data_size;
        CHECK_EQ(f->dtype, e->dtype);
        CHECK_EQ(f->ndim, e->ndim);
        for (uint32_t k = 0; k < e->ndim; k++)
            CHECK_EQ(f->shape[k], e->shape[k]);
    }
    CHECK_EQ(f->length, size);
    CHECK(memcmp(bytes + f->offset, data, size) == 0);
    larder_field_info one;
    CHECK_EQ(larder_field_info_get(d, id, index, &one), 0);
    CHECK(strcmp(one.name, f->name) == 0);
    CHECK_EQ(one.offset, f->offset);
    CHECK_EQ(one.length, f->length);
    CHECK_EQ(one.dtype, f->dtype);
    CHECK_EQ(one.ndim, f->ndim);
    CHECK(memcmp(one.shape, f->shape, sizeof one.shape) == 0);
}

static void check_dataset(larder_dataset *d)
{
    static uint8_t bytes[1 << 16];
    for (uint64_t id = 0; id < SAMPLES; id++) {
        larder_sample_info info, one;
        larder_field_info fields[4];
        int n = larder_sample_layout_get(d, id, &info, fields, 4);
        CHECK_EQ(larder_sample_info_get(d, id, &one), 0);
        CHECK(info.id == id && info.offset == one.offset && info.length == one.length);
        CHECK(info.checksum == one.checksum && info.shard == one.shard);
        CHECK(strcmp(info.key, one.key) == 0 && strcmp(info.shard_name, one.shard_name) == 0);
        int i;
        CHECK_EQ(sscanf(info.key, "s%04d", &i), 1);
        CHECK(i >= 0 && i < SAMPLES);
        const struct expected *e = &want[i];
        CHECK_EQ(n, e->has_cls ? 3 : 2);
        CHECK_EQ(info.num_fields, n);
        CHECK(info.length <= sizeof bytes);
        CHECK_EQ(larder_read_sample(d, id, bytes, sizeof bytes), (int64_t)info.length);
        int txt = 0, cls = 0, arr = 0;
        for (int k = 0; k < n; k++) {
            check_field(d, id, (uint32_t)k, &fields[k], e, bytes, info.length);
            txt += strcmp(fields[k].name, "txt") == 0;
            cls += strcmp(fields[k].name, "cls") == 0;
            arr += strcmp(fields[k].name, "arr") == 0;
        }
        CHECK(txt == 1 && arr == 1 && cls == e->has_cls);
        /* no info wanted: the same fields */
        larder_field_info again[4];
        CHECK_EQ(larder_sample_layout_get(d, id, NULL, again, 4), n);
        for (int k = 0; k < n; k++)
            CHECK(strcmp(again[k].name, fields[k].name) == 0 &&
                  again[k].offset == fields[k].offset);
        /* too little room: nothing written to fields, but info says how many */
        larder_field_info small[2];
        memset(small, 0x5a, sizeof small);
        memset(&info, 0, sizeof info);
        CHECK_EQ(larder_sample_layout_get(d, id, &info, small, (uint32_t)n - 1), LARDER_ETOOSMALL);
        CHECK_EQ(info.num_fields, n);
        const uint8_t *raw = (const uint8_t *)small;
        for (size_t b = 0; b < sizeof small; b++)
            CHECK_EQ(raw[b], 0x5a);
        memset(&info, 0, sizeof info);
        CHECK_EQ(larder_sample_layout_get(d, id, &info, NULL, 0), LARDER_ETOOSMALL);
        CHECK_EQ(info.num_fields, n);
    }
    larder_sample_info info;
    larder_field_info fields[4];
    CHECK_EQ(larder_sample_layout_get(d, SAMPLES, &info, fields, 4), LARDER_ENOTFOUND);
    CHECK_EQ(larder_sample_layout_get(d, 0, &info, NULL, 4), LARDER_EUSAGE);
    CHECK_EQ(larder_sample_layout_get(NULL, 0, &info, fields, 4), LARDER_EUSAGE);
}

TEST(sample_layout_matches_the_packer_input)
{
    make_sources();
    larder_dataset *tar = pack_and_open(LARDER_FORMAT_TAR, "tar");
    check_dataset(tar);
    larder_close(tar);
    larder_dataset *flat = pack_and_open(LARDER_FORMAT_FLAT, "flat");
    check_dataset(flat);
    larder_close(flat);
}
