/*
 * test_tar.c - the tar header parser, writer and push scanner, against
 * archives made by GNU tar and Python's tarfile, and against damaged ones.
 */
#include "tar.h"
#include "test.h"

#include <xxhash.h>

struct collected {
    int count;
    char keys[16][512];
    uint64_t offset[64], length[64], checksum[64];
    uint32_t num_fields[64];
    char field_names[64][4][64];
    uint64_t field_offset[64][4], field_length[64][4];
    int dtype[64][4];
    int skipped;
};

static int collect(void *userdata, const struct larder__tar_sample *s)
{
    struct collected *c = userdata;
    if (c->count == 16) return 0;
    int i = c->count++;
    snprintf(c->keys[i], sizeof c->keys[i], "%s", s->key);
    c->offset[i] = s->offset;
    c->length[i] = s->length;
    c->checksum[i] = s->checksum;
    c->num_fields[i] = s->num_fields;
    for (uint32_t f = 0; f < s->num_fields && f < 4; f++) {
        snprintf(c->field_names[i][f], 64, "%s", s->fields[f].field.name);
        c->field_offset[i][f] = s->fields[f].field.offset;
        c->field_length[i][f] = s->fields[f].field.length;
        c->dtype[i][f] = s->fields[f].field.dtype;
    }
    return 0;
}

static void skipped(void *userdata, const char *name, uint64_t offset)
{
    (void)name, (void)offset;
    ((struct collected *)userdata)->skipped++;
}

/* Scan a whole file, pushing it `piece` bytes at a time. */
static int scan_file(const char *path, size_t piece, struct collected *c)
{
    size_t size;
    uint8_t *data = test_read_file(path, &size);
    struct larder__tar_scanner *s = malloc(larder__tar_scanner_size());
    memset(c, 0, sizeof *c);
    larder__tar_scanner_init(s, path, collect, skipped, c);
    int rc = 0;
    for (size_t at = 0; at < size && rc == 0; at += piece)
        rc = larder__tar_scanner_feed(s, data + at, size - at < piece ? size - at : piece);
    if (rc == 0) rc = larder__tar_scanner_finish(s);
    free(s);
    free(data);
    return rc;
}

/* The same bytes every run: the tests below must not depend on luck (b.jpg's
 * last block is one data byte and 511 of padding, which random data would
 * leave all zero one run in 256). */
static void make_tree(void)
{
    uint8_t a[1000], b[513];
    test_fill_random(a, sizeof a, 11);
    test_fill_random(b, sizeof b, 12);
    b[sizeof b - 1] |= 1; /* never a zero block, whatever the generator */
    test_write_file("tree/a.jpg", a, sizeof a);
    test_write_file("tree/a.cls", "1\n", 2);
    test_write_file("tree/b.jpg", b, sizeof b);
    test_write_file("tree/b.cls", "22\n", 3);
    test_write_file("tree/sub/c.seg.png", "", 0);
    test_write_file("tree/sub/c.txt", "x\n", 2);
}

TEST(tar_scan_gnu_tar_archive)
{
    make_tree();
    CHECK_EQ(test_sh("cd tree && tar cf ../t.tar a.jpg a.cls b.jpg b.cls sub"), 0);
    size_t size;
    uint8_t *data = test_read_file("t.tar", &size);
    size_t pieces[] = {1, 7, 512, 1 << 20};
    for (size_t p = 0; p < 4; p++) {
        struct collected c;
        CHECK_EQ(scan_file("t.tar", pieces[p], &c), 0);
        CHECK_EQ(c.count, 3);
        CHECK(strcmp(c.keys[0], "a") == 0);
        CHECK(strcmp(c.keys[1], "b") == 0);
        CHECK(strcmp(c.keys[2], "sub/c") == 0);
        CHECK_EQ(c.num_fields[0], 2);
        CHECK(strcmp(c.field_names[0][0], "jpg") == 0);
        CHECK(strcmp(c.field_names[2][0], "seg.png") == 0);
        CHECK_EQ(c.field_length[2][0], 0);
        CHECK_EQ(c.offset[0], 0);
        /* samples are contiguous, and the checksum is of exactly their bytes */
        for (int i = 0; i < c.count; i++) {
            if (i > 0) CHECK(c.offset[i] >= c.offset[i - 1] + c.length[i - 1]);
            CHECK_EQ(XXH3_64bits(data + c.offset[i], c.length[i]), c.checksum[i]);
        }
        /* field spans hold the files' bytes */
        size_t n;
        uint8_t *jpg = test_read_file("tree/a.jpg", &n);
        CHECK_EQ(c.field_length[0][0], n);
        CHECK(memcmp(data + c.offset[0] + c.field_offset[0][0], jpg, n) == 0);
        free(jpg);
        uint8_t *b = test_read_file("tree/b.jpg", &n);
        CHECK(memcmp(data + c.offset[1] + c.field_offset[1][0], b, n) == 0);
        free(b);
    }
    free(data);
}

TEST(tar_scan_long_names_gnu_and_pax)
{
    const char *longdir = "d123456789/d123456789/d123456789/d123456789/d123456789/"
                          "d123456789/d123456789/d123456789/d123456789/d123456789/"
                          "d123456789/d123456789/d123456789/d123456789/d123456789";
    CHECK_EQ(test_sh("mkdir -p %s && echo hello > %s/sample_with_a_long_name.txt && "
                     "echo 5 > %s/sample_with_a_long_name.cls",
                     longdir, longdir, longdir),
             0);
    const char *formats[] = {"gnu", "pax", "oldgnu"};
    for (int f = 0; f < 3; f++) {
        CHECK_EQ(test_sh("tar --format=%s -cf long.tar %s/sample_with_a_long_name.cls "
                         "%s/sample_with_a_long_name.txt",
                         formats[f], longdir, longdir),
                 0);
        struct collected c;
        int rc = scan_file("long.tar", 100, &c);
        if (rc) fprintf(stderr, "    %s: %s\n", formats[f], larder_errmsg());
        CHECK_EQ(rc, 0);
        CHECK_EQ(c.count, 1);
        char key[512];
        snprintf(key, sizeof key, "%s/sample_with_a_long_name", longdir);
        CHECK(strcmp(c.keys[0], key) == 0);
        CHECK_EQ(c.num_fields[0], 2);
        CHECK(strcmp(c.field_names[0][1], "txt") == 0);
        CHECK_EQ(c.field_length[0][1], 6);
    }
}

TEST(tar_scan_refuses_links_and_devices)
{
    make_tree();
    CHECK_EQ(test_sh("cd tree && ln -s a.jpg link.jpg && tar cf ../sym.tar a.jpg link.jpg"), 0);
    struct collected c;
    CHECK_EQ(scan_file("sym.tar", 4096, &c), LARDER_EUNSAFE);
    CHECK(strstr(larder_errmsg(), "link.jpg") != NULL);
    CHECK(strstr(larder_errmsg(), "sym.tar") != NULL);
    CHECK_EQ(test_sh("cd tree && ln a.cls hard.cls && tar cf ../hard.tar a.cls hard.cls"), 0);
    CHECK_EQ(scan_file("hard.tar", 4096, &c), LARDER_EUNSAFE);
    if (test_sh("cd tree && mknod dev.null c 1 3 2>/dev/null && tar cf ../dev.tar dev.null") == 0) {
        CHECK_EQ(scan_file("dev.tar", 4096, &c), LARDER_EUNSAFE);
        CHECK(strstr(larder_errmsg(), "device") != NULL);
    }
}

TEST(tar_scan_refuses_unsafe_names)
{
    int rc = test_sh("/usr/bin/python3 - <<'PY'\n"
                     "import io, tarfile\n"
                     "for name, member in (('dots.tar', '../evil.txt'), ('abs.tar', '/etc/x.txt'),"
                     " ('mid.tar', 'a/../../b.txt')):\n"
                     "    with tarfile.open(name, 'w', format=tarfile.USTAR_FORMAT) as t:\n"
                     "        ti = tarfile.TarInfo(member); ti.size = 3\n"
                     "        t.addfile(ti, io.BytesIO(b'abc'))\n"
                     "PY");
    if (rc != 0) SKIP("no /usr/bin/python3");
    const char *files[] = {"dots.tar", "abs.tar", "mid.tar"};
    for (int i = 0; i < 3; i++) {
        struct collected c;
        CHECK_EQ(scan_file(files[i], 4096, &c), LARDER_EUNSAFE);
        CHECK(strstr(larder_errmsg(), files[i]) != NULL);
    }
}

TEST(tar_scan_damaged_archives)
{
    make_tree();
    CHECK_EQ(test_sh("cd tree && tar cf ../t.tar a.jpg a.cls b.jpg b.cls"), 0);
    size_t size;
    uint8_t *data = test_read_file("t.tar", &size);
    struct collected c;

    /* a flipped byte in the second member's header */
    uint8_t *bad = malloc(size);
    memcpy(bad, data, size);
    size_t second = 512 + 1024; /* a.jpg: header + 1000 bytes padded to 1024 */
    bad[second + 10] ^= 0x20;
    test_write_file("badsum.tar", bad, size);
    CHECK_EQ(scan_file("badsum.tar", 4096, &c), LARDER_EBADTAR);
    CHECK(strstr(larder_errmsg(), "checksum") != NULL);
    CHECK(strstr(larder_errmsg(), "offset 1536") != NULL);

    /* a size field that is not octal */
    memcpy(bad, data, size);
    memcpy(bad + second + 124, "9999", 4);
    test_write_file("badsize.tar", bad, size);
    CHECK_EQ(scan_file("badsize.tar", 4096, &c), LARDER_EBADTAR);

    /* cut inside a member's data: its size runs past the end */
    test_write_file("cut.tar", data, 512 + 700);
    CHECK_EQ(scan_file("cut.tar", 4096, &c), LARDER_ETRUNCATED);
    CHECK(strstr(larder_errmsg(), "a.jpg") != NULL);
    CHECK(strstr(larder_errmsg(), "past the end") != NULL);

    /* cut inside a header block */
    test_write_file("cuthdr.tar", data, second + 100);
    CHECK_EQ(scan_file("cuthdr.tar", 4096, &c), LARDER_ETRUNCATED);

    /* missing end-of-archive blocks are tolerated: the samples are whole.
     * The end is where the four members' headers and padded data stop, not
     * the first zero block, which could lie inside a member's data. */
    size_t end = (512 + 1024) + (512 + 512) + (512 + 1024) + (512 + 512);
    CHECK(size >= end + 1024);
    CHECK(larder__tar_zero_block(data + end));
    test_write_file("noend.tar", data, end);
    CHECK_EQ(scan_file("noend.tar", 4096, &c), 0);
    CHECK_EQ(c.count, 2);

    /* the same field twice in one sample */
    if (test_sh("/usr/bin/python3 -c \"import io, tarfile\n"
                "with tarfile.open('dup.tar', 'w') as t:\n"
                "    for _ in range(2):\n"
                "        ti = tarfile.TarInfo('a.jpg'); ti.size = 1; t.addfile(ti, "
                "io.BytesIO(b'x'))\"") == 0) {
        CHECK_EQ(scan_file("dup.tar", 4096, &c), LARDER_EDUPKEY);
        CHECK(strstr(larder_errmsg(), "a.jpg") != NULL);
    }

    /* not a tar at all */
    uint8_t junk[2048];
    test_fill_random(junk, sizeof junk, 3);
    test_write_file("junk.tar", junk, sizeof junk);
    CHECK_EQ(scan_file("junk.tar", 4096, &c), LARDER_EBADTAR);
    free(bad);
    free(data);
}

TEST(tar_scan_skips_members_without_extension)
{
    make_tree();
    CHECK_EQ(test_sh("cd tree && echo r > README && tar cf ../t.tar a.jpg README a.cls b.jpg"), 0);
    struct collected c;
    CHECK_EQ(scan_file("t.tar", 4096, &c), 0);
    CHECK_EQ(c.skipped, 1);
    CHECK_EQ(c.count, 2); /* README ends nothing: a.cls still joins sample a */
    CHECK_EQ(c.num_fields[0], 2);
}

TEST(tar_writer_roundtrip_with_gnu_tar)
{
    char longname[400];
    memset(longname, 'x', 300);
    strcpy(longname + 300, ".bin");
    const char *names[] = {"plain.txt", "a/b/c.jpg", longname};
    FILE *f = fopen("w.tar", "wb");
    for (int i = 0; i < 3; i++) {
        uint8_t header[LARDER__TAR_BLOCK * 4 + LARDER__TAR_MAX_NAME];
        int n = larder__tar_member_header(header, sizeof header, names[i], 5);
        CHECK(n > 0);
        CHECK_EQ((size_t)n, larder__tar_member_header_size(names[i], 5));
        fwrite(header, 1, (size_t)n, f);
        uint8_t data[512] = "hello";
        fwrite(data, 1, 512, f);
    }
    uint8_t zeros[1024] = {0};
    fwrite(zeros, 1, sizeof zeros, f);
    fclose(f);
    CHECK_EQ(test_sh("tar tf w.tar > list.txt"), 0);
    size_t n;
    char *list = (char *)test_read_file("list.txt", &n);
    list[n] = '\0';
    CHECK(strstr(list, "plain.txt\n") != NULL);
    CHECK(strstr(list, "a/b/c.jpg\n") != NULL);
    CHECK(strstr(list, longname) != NULL);
    free(list);
    struct collected c;
    CHECK_EQ(scan_file("w.tar", 777, &c), 0);
    CHECK_EQ(c.count, 3);
    CHECK_EQ(strlen(c.keys[2]), 300);
}

/* Members over 8 GiB need base-256 or PAX sizes: no 4 GiB or 8 GiB limit. */
TEST(tar_scan_huge_member)
{
    uint64_t size = (UINT64_C(9) << 30) + 3;
    uint8_t header[LARDER__TAR_BLOCK * 4 + LARDER__TAR_MAX_NAME];
    int n = larder__tar_member_header(header, sizeof header, "big.bin", size);
    CHECK(n > LARDER__TAR_BLOCK); /* PAX size record */
    struct collected c;
    memset(&c, 0, sizeof c);
    struct larder__tar_scanner *s = malloc(larder__tar_scanner_size());
    larder__tar_scanner_init(s, "huge", collect, NULL, &c);
    CHECK_EQ(larder__tar_scanner_feed(s, header, (size_t)n), 0);
    static uint8_t zeros[1 << 20];
    for (uint64_t left = size + larder__tar_padding(size); left;) {
        size_t k = left < sizeof zeros ? (size_t)left : sizeof zeros;
        CHECK_EQ(larder__tar_scanner_feed(s, zeros, k), 0);
        left -= k;
    }
    CHECK_EQ(larder__tar_scanner_feed(s, zeros, 1024), 0);
    CHECK_EQ(larder__tar_scanner_finish(s), 0);
    CHECK_EQ(c.count, 1);
    CHECK_EQ(c.field_length[0][0], size);
    /* base-256 in the ustar block too, for readers without PAX */
    struct larder__tar_header h;
    CHECK_EQ(larder__tar_parse_header(header + n - LARDER__TAR_BLOCK, &h), 0);
    CHECK_EQ(h.size, size);
    free(s);
}

TEST(tar_npy_members_become_arrays)
{
    int rc = test_sh("/usr/bin/python3 -c \"import numpy as np; "
                     "np.save('s1.image.npy', np.arange(6, dtype='<f4').reshape(2, 3)); "
                     "np.save('s1.npy', np.arange(4, dtype='<i8'))\" 2>/dev/null");
    if (rc != 0) SKIP("numpy for /usr/bin/python3 is not installed");
    CHECK_EQ(test_sh("echo x > s1.txt && tar cf n.tar s1.image.npy s1.npy s1.txt"), 0);
    struct collected c;
    CHECK_EQ(scan_file("n.tar", 4096, &c), 0);
    CHECK_EQ(c.count, 1);
    CHECK(strcmp(c.field_names[0][0], "image") == 0);
    CHECK_EQ(c.dtype[0][0], LARDER_DTYPE_F32);
    CHECK_EQ(c.field_length[0][0], 24);
    CHECK(strcmp(c.field_names[0][1], "npy") == 0);
    CHECK_EQ(c.dtype[0][1], LARDER_DTYPE_I64);
    CHECK_EQ(c.dtype[0][2], LARDER_DTYPE_NONE);
    size_t size;
    uint8_t *tar = test_read_file("n.tar", &size);
    float *values = (float *)(tar + c.offset[0] + c.field_offset[0][0]);
    CHECK(values[0] == 0.0f && values[5] == 5.0f);
    free(tar);
}
