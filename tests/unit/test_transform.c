/*
 * test_transform.c - transforms (transform.h): parsing specs, the float16
 * rounding against values worked out from IEEE 754 by hand, zstd frames
 * built here byte by byte (one that claims a terabyte, one that lies about
 * its size), hostile results, loadable shared objects, and the wire
 * frames.  The built-ins against PIL, numpy and the zstd tool, and the
 * daemon's answers, are in tests/python/test_transform.py.
 */
#include "test.h"
#include "transform.h"
#include "wire.h"

#include <errno.h>
#include <math.h>
#include <turbojpeg.h>

static int parse(const char *spec, struct larder__transform *t)
{
    return larder__transform_parse(spec, strlen(spec), t);
}

TEST(transform_spec_parse)
{
    struct larder__transform t;
    CHECK_EQ(parse("jpeg_decode_resize:224", &t), 0);
    CHECK(strcmp(t.canonical, "jpeg_decode_resize:224") == 0);
    CHECK_EQ(parse("npy_cast:f2", &t), 0);
    CHECK(strcmp(t.canonical, "npy_cast:float16") == 0); /* canonical: one key per meaning */
    CHECK_EQ(parse("zstd_decompress", &t), 0);
    CHECK(strcmp(t.canonical, "zstd_decompress") == 0);
    CHECK_EQ(parse("zstd_decompress:", &t), 0); /* empty parameters are none */
    /* not NUL-terminated: only `length` bytes count */
    CHECK_EQ(larder__transform_parse("npy_cast:float32XYZ", 16, &t), 0);
    CHECK(strcmp(t.canonical, "npy_cast:float32") == 0);
    CHECK_EQ(parse("jpeg_decode_resize:0", &t), LARDER_EUSAGE);
    CHECK_EQ(parse("jpeg_decode_resize:007", &t), LARDER_EUSAGE);
    CHECK_EQ(parse("jpeg_decode_resize:-4", &t), LARDER_EUSAGE);
    CHECK_EQ(parse("jpeg_decode_resize:4097", &t), LARDER_EUSAGE);
    CHECK_EQ(parse("jpeg_decode_resize:99999999999999999999", &t), LARDER_EUSAGE);
    CHECK_EQ(parse("npy_cast:int8", &t), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "float16, float32 or float64"));
    CHECK_EQ(parse("no_such", &t), LARDER_ENOTFOUND);
    CHECK_EQ(parse("", &t), LARDER_EUSAGE);
    CHECK_EQ(parse(":224", &t), LARDER_EUSAGE);
    CHECK_EQ(parse("JPEG:1", &t), LARDER_EUSAGE);
    CHECK_EQ(parse("jpeg_decode_resize:2\n", &t), LARDER_EUSAGE);
    char name[300];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    CHECK_EQ(parse(name, &t), LARDER_EUSAGE); /* a spec too long */
    name[LARDER_TRANSFORM_MAX_NAME] = '\0';
    CHECK_EQ(parse(name, &t), LARDER_EUSAGE); /* a name too long */
    CHECK(strstr(larder_errmsg(), "1 to 63"));
    uint32_t version = 0;
    CHECK_EQ(larder_transform_check("npy_cast:float64", &version), 0);
    CHECK_EQ(version, 1);
    CHECK_EQ(larder_transform_check(NULL, NULL), LARDER_EUSAGE);
}

static uint32_t float_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static uint64_t double_bits(double d)
{
    uint64_t b;
    memcpy(&b, &d, 8);
    return b;
}

/* Expected halves worked out from IEEE 754 binary16 (1 + 5 + 10 bits). */
TEST(transform_half_rounding)
{
    static const struct {
        double value;
        uint16_t half;
    } cases[] = {
        {1.0, 0x3c00},
        {-2.0, 0xc000},
        {65504.0, 0x7bff},                 /* the largest half */
        {65519.0, 0x7bff},                 /* below the midpoint to 65536 */
        {65520.0, 0x7c00},                 /* the midpoint: even is infinity */
        {1e10, 0x7c00},                    /* overflow */
        {-1e10, 0xfc00},                   /* to signed infinity */
        {0x1p-24, 0x0001},                 /* the smallest subnormal */
        {0x1p-25, 0x0000},                 /* halfway to it: even is zero */
        {0x1.8p-25, 0x0001},               /* above halfway */
        {0x1.8p-24, 0x0002},               /* 1.5 subnormal steps: even is 2 */
        {0x1.4p-24, 0x0001},               /* 1.25: down */
        {0x1p-14, 0x0400},                 /* the smallest normal */
        {0x1.ff8p-15, 0x03ff},             /* the largest subnormal */
        {0x1.ffcp-15, 0x0400},             /* halfway above it, odd: up into the normals */
        {1.0 + 0x1p-11, 0x3c00},           /* halfway between 1 and 1+2^-10: even, down */
        {1.0 + 3 * 0x1p-11, 0x3c02},       /* halfway, odd below: up */
        {1.0 + 0x1p-11 + 0x1p-20, 0x3c01}, /* just above halfway */
        {-0.0, 0x8000},
        {0.0, 0x0000},
        {0x1p-30, 0x0000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double v = cases[i].value;
        CHECK_EQ(larder__half_from_double_bits(double_bits(v)), cases[i].half);
        if ((double)(float)v == v)
            CHECK_EQ(larder__half_from_float_bits(float_bits((float)v)), cases[i].half);
    }
    CHECK_EQ(larder__half_from_float_bits(0x7f800000u), 0x7c00);
    CHECK_EQ(larder__half_from_float_bits(0xff800000u), 0xfc00);
    CHECK_EQ(larder__half_from_float_bits(0x7fc00000u), 0x7e00); /* a quiet NaN stays one */
    CHECK_EQ(larder__half_from_float_bits(0x7f800001u), 0x7c01); /* a payload below half's bits */
    CHECK_EQ(larder__half_from_double_bits(UINT64_C(0x7ff8000000000000)), 0x7e00);
    CHECK_EQ(larder__half_from_double_bits(UINT64_C(0xfff0000000000001)), 0xfc01);
    /* every half value survives a trip through float and back */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m / 1024.0, -14);
        if (h & 0x8000) v = -v;
        CHECK_EQ(larder__half_from_float_bits(float_bits((float)v)), h);
        CHECK_EQ(larder__half_from_double_bits(double_bits(v)), h);
    }
}

/* A zstd frame by hand (RFC 8878): single segment, content size in `fcs_bytes`
 * bytes, one raw block of `payload` bytes. */
static size_t zstd_frame(uint8_t *out, uint64_t content_size, int fcs_flag, const char *payload)
{
    size_t n = 0, length = strlen(payload);
    static const int fcs_bytes[] = {1, 2, 4, 8};
    out[n++] = 0x28, out[n++] = 0xb5, out[n++] = 0x2f, out[n++] = 0xfd;
    out[n++] = (uint8_t)(fcs_flag << 6 | 0x20); /* single segment */
    uint64_t fcs = fcs_flag == 1 ? content_size - 256 : content_size;
    for (int i = 0; i < fcs_bytes[fcs_flag]; i++)
        out[n++] = (uint8_t)(fcs >> (8 * i));
    uint32_t block = 1 | (uint32_t)length << 3; /* last, raw */
    out[n++] = (uint8_t)block, out[n++] = (uint8_t)(block >> 8), out[n++] = (uint8_t)(block >> 16);
    memcpy(out + n, payload, length);
    return n + length;
}

static int run_one(const char *spec, const char *field, const uint8_t *bytes, size_t length,
                   larder_transformed **out)
{
    struct larder__transform t;
    int rc = parse(spec, &t);
    if (rc < 0) return rc;
    larder_field_info f = {.name = field, .offset = 0, .length = length};
    uint8_t *result = NULL;
    size_t result_length = 0;
    rc = larder__transform_run(&t, 9, &f, 1, bytes, length, &result, &result_length);
    if (rc == 0) rc = larder__transform_decode(result, result_length, out);
    free(result);
    return rc;
}

TEST(transform_zstd_hostile_frames)
{
    uint8_t frame[64];
    larder_transformed *out = NULL;
    size_t n = zstd_frame(frame, 5, 0, "hello");
    CHECK_EQ(run_one("zstd_decompress", "txt.zst", frame, n, &out), 0);
    CHECK_EQ(out->num_fields, 1);
    CHECK(strcmp(out->fields[0].name, "txt") == 0);
    CHECK_EQ(out->fields[0].length, 5);
    CHECK(memcmp(out->data + out->fields[0].offset, "hello", 5) == 0);
    larder_transformed_free(out);
    /* a terabyte claimed: refused before anything is allocated */
    n = zstd_frame(frame, UINT64_C(1) << 40, 3, "hello");
    CHECK_EQ(run_one("zstd_decompress", "zst", frame, n, &out), LARDER_EUNSUPPORTED);
    CHECK(strstr(larder_errmsg(), "may decompress to 1099511627776 bytes"));
    CHECK(strstr(larder_errmsg(), "sample 9 field 'zst': transform zstd_decompress"));
    /* claims 10, holds 5; claims 3, holds 5 */
    n = zstd_frame(frame, 10, 0, "hello");
    CHECK_EQ(run_one("zstd_decompress", "zst", frame, n, &out), LARDER_EUNSUPPORTED);
    CHECK(strstr(larder_errmsg(), "corrupt zstd data"));
    n = zstd_frame(frame, 3, 0, "hello");
    CHECK_EQ(run_one("zstd_decompress", "zst", frame, n, &out), LARDER_EUNSUPPORTED);
    /* every truncation: an error, never a crash or a read past the field */
    n = zstd_frame(frame, 5, 0, "hello");
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, frame, cut);
        CHECK(run_one("zstd_decompress", "zst", copy, cut, &out) < 0);
        free(copy);
    }
    /* a field it does not apply to: nothing to do is an error too */
    CHECK_EQ(run_one("zstd_decompress", "txt", frame, n, &out), LARDER_ENOTFOUND);
}

TEST(transform_jpeg_hostile)
{
    larder_transformed *out = NULL;
    static const uint8_t not_jpeg[] = "GIF89a this is not a JPEG at all";
    CHECK_EQ(run_one("jpeg_decode_resize:8", "jpg", not_jpeg, sizeof not_jpeg, &out),
             LARDER_EUNSUPPORTED);
    CHECK(strstr(larder_errmsg(), "field 'jpg': transform jpeg_decode_resize:8"));
    /* a header claiming 65500 x 65500 pixels, and nothing after it */
    static const uint8_t huge[] = {0xff, 0xd8, 0xff, 0xc0, 0x00, 0x11, 0x08, 0xff,
                                   0xdc, 0xff, 0xdc, 0x03, 0x01, 0x11, 0x00, 0x02,
                                   0x11, 0x01, 0x03, 0x11, 0x01, 0xff, 0xd9};
    CHECK(run_one("jpeg_decode_resize:8", "jpg", huge, sizeof huge, &out) < 0);
    CHECK(run_one("jpeg_decode_resize:8", "jpg", huge, 3, &out) < 0);
}

/* A progressive JPEG whose header says 8192 x 8192 pixels, 3 components
 * (its coefficients would take 384 MiB; at most 96 MiB are let through,
 * docs/transforms.md): made by libturbojpeg at 16 x 16, its frame's size
 * then written over.  In *length, its bytes; with `tem`, a TEM marker (FF
 * 01, no length field) right after SOI, which libjpeg passes over. */
static uint8_t *progressive_jpeg_claiming_8192(bool tem, size_t *length)
{
    tjhandle tj = tjInitCompress();
    uint8_t pixels[16 * 16 * 3], *jpeg = NULL;
    for (size_t i = 0; i < sizeof pixels; i++)
        pixels[i] = (uint8_t)(i * 7);
    unsigned long size = 0;
    CHECK_EQ(tjCompress2(tj, pixels, 16, 0, 16, TJPF_RGB, &jpeg, &size, TJSAMP_444, 90,
                         TJFLAG_PROGRESSIVE),
             0);
    tjDestroy(tj);
    uint8_t *out = malloc(size + 2);
    size_t at = 0;
    out[at++] = 0xff, out[at++] = 0xd8;
    if (tem) out[at++] = 0xff, out[at++] = 0x01;
    memcpy(out + at, jpeg + 2, size - 2);
    *length = at + size - 2;
    tjFree(jpeg);
    bool found = false;
    for (size_t i = 2; i + 9 < *length && !found; i++)
        if (out[i] == 0xff && out[i + 1] == 0xc2) { /* SOF2: P, height, width */
            out[i + 5] = 0x20, out[i + 6] = 0x00, out[i + 7] = 0x20, out[i + 8] = 0x00;
            found = true;
        }
    CHECK(found);
    return out;
}

/* The coefficient bound holds whatever comes between SOI and the frame:
 * a TEM marker made the marker walk fail and the bound was skipped (the
 * JPEG decoded with its coefficients whole, 447 MiB at 8192 x 8192: found
 * by review).  Both forms are refused, before libjpeg decodes anything. */
TEST(transform_jpeg_progressive_bound_holds_past_parameterless_markers)
{
    larder_transformed *out = NULL;
    for (int tem = 0; tem < 2; tem++) {
        size_t n;
        uint8_t *jpeg = progressive_jpeg_claiming_8192(tem, &n);
        CHECK_EQ(run_one("jpeg_decode_resize:8", "jpg", jpeg, n, &out), LARDER_EUNSUPPORTED);
        CHECK(strstr(larder_errmsg(), "coefficients would take 402653184 bytes"));
        free(jpeg);
    }
    /* a JPEG whose markers cannot be walked to its first scan is refused */
    static const uint8_t cut[] = {0xff, 0xd8, 0xff, 0xc2, 0x00, 0x11, 0x08, 0x20, 0x00};
    CHECK_EQ(run_one("jpeg_decode_resize:8", "jpg", cut, sizeof cut, &out), LARDER_EUNSUPPORTED);
}

TEST(transform_result_decode_hostile)
{
    /* a good result: npy_cast of an int16 field of shape (2, 3) */
    struct larder__transform t;
    CHECK_EQ(parse("npy_cast:float32", &t), 0);
    int16_t values[6] = {-3, 0, 7, 32767, -32768, 1};
    larder_field_info f = {.name = "a",
                           .length = sizeof values,
                           .dtype = LARDER_DTYPE_I16,
                           .ndim = 2,
                           .shape = {2, 3}};
    uint8_t *result;
    size_t length;
    CHECK_EQ(larder__transform_run(&t, 0, &f, 1, (const uint8_t *)values, sizeof values, &result,
                                   &length),
             0);
    larder_transformed *out;
    CHECK_EQ(larder__transform_decode(result, length, &out), 0);
    CHECK_EQ(out->fields[0].dtype, LARDER_DTYPE_F32);
    CHECK_EQ(out->fields[0].shape[1], 3);
    float got[6];
    memcpy(got, out->data + out->fields[0].offset, sizeof got);
    for (int i = 0; i < 6; i++)
        CHECK(got[i] == (float)values[i]);
    larder_transformed_free(out);
    /* every cut and every single-byte change: rejected or still consistent */
    for (size_t cut = 0; cut < length; cut++)
        CHECK_EQ(larder__transform_decode(result, cut, &out), LARDER_EPROTOCOL);
    uint8_t *copy = malloc(length);
    for (size_t i = 0; i < length; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(copy, result, length);
            copy[i] ^= (uint8_t)(1u << bit);
            if (larder__transform_decode(copy, length, &out) == 0) {
                for (uint32_t k = 0; k < out->num_fields; k++)
                    CHECK(out->fields[k].offset + out->fields[k].length <= out->length);
                larder_transformed_free(out);
            }
        }
    free(copy);
    free(result);
}

TEST(transform_wire_frames)
{
    struct larder__transform_request r = {.id_low = 1,
                                          .id_high = 2,
                                          .sample = 77,
                                          .priority = 1,
                                          .version = 3,
                                          .wait_us = 5,
                                          .budget_us = 6,
                                          .spec_length = 17,
                                          .spec = "npy_cast:float16"};
    r.spec_length = (uint16_t)strlen(r.spec);
    uint8_t frame[512];
    int n = larder__wire_encode_transform(frame, sizeof frame, 9, &r);
    CHECK(n > 0);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(frame, (size_t)n, &f), 0);
    CHECK_EQ(f.type, LARDER__TRANSFORM);
    struct larder__transform_request back;
    CHECK_EQ(larder__wire_transform(frame + LARDER__WIRE_HEADER, f.length, &back), 0);
    CHECK_EQ(back.sample, 77);
    CHECK_EQ(back.budget_us, 6);
    CHECK(back.spec_length == r.spec_length && memcmp(back.spec, r.spec, r.spec_length) == 0);
    for (uint32_t cut = 0; cut < f.length; cut++)
        CHECK_EQ(larder__wire_transform(frame + LARDER__WIRE_HEADER, cut, &back), LARDER_EPROTOCOL);
    frame[LARDER__WIRE_HEADER + 24] = 4; /* no such class */
    CHECK_EQ(larder__wire_transform(frame + LARDER__WIRE_HEADER, f.length, &back),
             LARDER_EPROTOCOL);
    r.spec_length = LARDER_TRANSFORM_MAX_SPEC; /* too long to send */
    CHECK_EQ(larder__wire_encode_transform(frame, sizeof frame, 9, &r), LARDER_ETOOSMALL);
    uint32_t flags;
    n = larder__wire_encode_transformed(frame, sizeof frame, 9, LARDER__TRANSFORMED_RAW, 100);
    CHECK_EQ(n, LARDER__WIRE_HEADER + LARDER__TRANSFORMED_FIXED);
    CHECK_EQ(larder__wire_transformed(frame + LARDER__WIRE_HEADER, 108, &flags), 0);
    CHECK_EQ(flags, LARDER__TRANSFORMED_RAW);
    frame[LARDER__WIRE_HEADER] = 0x80;
    CHECK_EQ(larder__wire_transformed(frame + LARDER__WIRE_HEADER, 108, &flags), LARDER_EPROTOCOL);
    CHECK_EQ(larder__wire_transformed(frame + LARDER__WIRE_HEADER, 7, &flags), LARDER_EPROTOCOL);
}

static const char plugin[] =
    "#include <larder.h>\n"
    "static int parse(const char *p, void *s, char *c, char *e, size_t n)\n"
    "{ (void)p, (void)s, (void)c, (void)e, (void)n; return 0; }\n"
    "static int applies(const void *s, const larder_field_info *f) { (void)s, (void)f; return 1; "
    "}\n"
    "static int64_t bound(const void *s, const larder_field_info *f, const void *d, char *e,\n"
    "                     size_t n) { (void)s, (void)d, (void)e, (void)n; return 1; }\n"
    "static int64_t run(const void *s, const larder_field_info *f, const void *d, void *o,\n"
    "                   size_t c, larder_field_info *r, char *name, char *e, size_t n)\n"
    "{ (void)s, (void)d, (void)c, (void)r, (void)name, (void)e, (void)n;\n"
    "  *(unsigned char *)o = (unsigned char)f->length; return LENGTH; }\n"
    "static const larder_transform_ops ops = {ABI, NAME, 1, parse, applies, bound, run};\n"
    "const larder_transform_ops *larder_transform_entry(unsigned abi)\n"
    "{ return abi == LARDER_TRANSFORM_ABI ? &ops : 0; }\n";

static void build_plugin(const char *dir, const char *defines)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/p.c", dir);
    test_write_file(path, plugin, sizeof plugin - 1);
    if (test_sh("cc -shared -fPIC %s -I'%s/include' -o '%s/p.so' '%s/p.c' 2>&1", defines,
                LARDER_SOURCE_DIR, dir, dir) != 0)
        SKIP("no C compiler to build a transform");
}

TEST(transform_loadable)
{
    build_plugin(test_path("good"), "-DABI=1 -DNAME='\"count_bytes\"' -DLENGTH=1");
    CHECK_EQ(larder_transform_load_dir(test_path("good")), 1);
    larder_transformed *out;
    const uint8_t bytes[7] = {0};
    CHECK_EQ(run_one("count_bytes", "x", bytes, 7, &out), 0);
    CHECK_EQ(out->data[out->fields[0].offset], 7);
    larder_transformed_free(out);
    CHECK_EQ(larder_transform_load_dir(test_path("good")), -EEXIST); /* the name is taken */
    /* a transform that writes past its own bound: refused, not trusted */
    build_plugin(test_path("liar"), "-DABI=1 -DNAME='\"liar\"' -DLENGTH=2");
    CHECK_EQ(larder_transform_load_dir(test_path("liar")), 1);
    CHECK_EQ(run_one("liar", "x", bytes, 7, &out), LARDER_EUNSUPPORTED);
    CHECK(strstr(larder_errmsg(), "broke its contract"));
    build_plugin(test_path("abi"), "-DABI=99 -DNAME='\"old\"' -DLENGTH=1");
    CHECK_EQ(larder_transform_load_dir(test_path("abi")), LARDER_EUNSUPPORTED);
    CHECK(strstr(larder_errmsg(), "ABI 99"));
    build_plugin(test_path("name"), "-DABI=1 -DNAME='\"Bad Name\"' -DLENGTH=1");
    CHECK_EQ(larder_transform_load_dir(test_path("name")), LARDER_EUNSUPPORTED);
    build_plugin(test_path("builtin"), "-DABI=1 -DNAME='\"npy_cast\"' -DLENGTH=1");
    CHECK_EQ(larder_transform_load_dir(test_path("builtin")), -EEXIST);
    CHECK(larder_transform_load_dir(test_path("missing")) == -ENOENT);
}

/* A reader's default budget: its transformed reads in flight, made here one
 * after another (docs/transforms.md, "Placement"). */
TEST(transform_step_budget)
{
    CHECK_EQ(larder__transform_step_budget(8, 4200), 33600);
    CHECK_EQ(larder__transform_step_budget(1, 4200), 4200);
    CHECK_EQ(larder__transform_step_budget(0, 4200), 4200); /* at least the read asking */
    CHECK_EQ(larder__transform_step_budget(16, 0), 0);      /* not measured yet: run here */
    CHECK_EQ(larder__transform_step_budget(UINT32_MAX, UINT32_MAX),
             (uint64_t)UINT32_MAX * UINT32_MAX); /* no overflow; the frame clamps it */
}

/* The area resize's division by multiplication (transform.h) against the
 * divide instruction: every divisor a JPEG's side can be, the numerators
 * at both ends of each quotient up to its range's end (256 d - 1). */
TEST(transform_divide_by_reciprocal)
{
    uint64_t wrong = 0;
    for (uint32_t d = 1; d < 65536; d++) {
        uint64_t m = larder__reciprocal(d);
        for (uint32_t q = 0; q < 256; q++) {
            uint32_t low = q * d, high = q * d + d - 1;
            wrong += larder__divide(low, m) != low / d;
            wrong += larder__divide(high, m) != high / d;
        }
    }
    CHECK_EQ(wrong, 0);
    /* and every numerator for a few divisors: the largest, primes, powers of 2 */
    const uint32_t some[] = {1, 2, 3, 7, 224, 299, 400, 4096, 65521, 65535};
    for (size_t k = 0; k < sizeof some / sizeof *some; k++) {
        uint64_t m = larder__reciprocal(some[k]);
        for (uint32_t n = 0; n < 256 * some[k]; n++)
            wrong += larder__divide(n, m) != n / some[k];
    }
    CHECK_EQ(wrong, 0);
}
