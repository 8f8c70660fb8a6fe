/*
 * test_index.c - the index builder and reader: round trips, lookups, and
 * every kind of corruption the reader must turn into a clear error.
 */
#include "index.h"
#include "sys.h"
#include "test.h"

#include <errno.h>
#include <sys/mman.h>

/* An index of `n` samples with two fields each over 3 shards. */
static void build_index(const char *path, uint64_t n, char id[33])
{
    struct larder__index_builder *b;
    CHECK_EQ(larder__index_builder_new(&b, 0), 0);
    for (int s = 0; s < 3; s++) {
        char name[32];
        snprintf(name, sizeof name, "shard-%d.tar", s);
        CHECK_EQ(larder__index_builder_add_shard(b, name, LARDER_FORMAT_TAR), s);
        larder__index_builder_set_shard(b, (uint32_t)s, 1000000, 42 + (uint64_t)s);
    }
    for (uint64_t i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "dir/sample%06llu", (unsigned long long)i);
        struct larder__field fields[2] = {
            {.name = "jpg", .offset = 512, .length = 100},
            {.name = "label",
             .offset = 1124,
             .length = 12,
             .dtype = LARDER_DTYPE_I32,
             .ndim = 2,
             .shape = {3, 1}},
        };
        int64_t id64 = larder__index_builder_add_sample(b, (uint32_t)(i % 3), i * 2000, 1536, i * 7,
                                                        key, strlen(key), fields, 2);
        CHECK_EQ(id64, (int64_t)i);
    }
    CHECK_EQ(larder__index_builder_write(b, path, id), 0);
    larder__index_builder_free(b);
}

TEST(index_roundtrip)
{
    char id[33];
    build_index(test_path("index.larder"), 300, id);
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("index.larder"), NULL), 0);
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    CHECK_EQ(info.num_samples, 300);
    CHECK_EQ(info.num_shards, 3);
    CHECK_EQ(info.total_bytes, 300 * 1536);
    CHECK_EQ(info.block_size, 65536);
    CHECK(strcmp(info.dataset_id, id) == 0);
    for (uint64_t i = 0; i < 300; i++) {
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(d, i, &s), 0);
        CHECK_EQ(s.offset, i * 2000);
        CHECK_EQ(s.length, 1536);
        CHECK_EQ(s.checksum, i * 7);
        CHECK_EQ(s.shard, i % 3);
        CHECK_EQ(s.num_fields, 2);
        char key[64];
        snprintf(key, sizeof key, "dir/sample%06llu", (unsigned long long)i);
        CHECK(strcmp(s.key, key) == 0);
        CHECK_EQ(larder_find_key(d, key), (int64_t)i);
        larder_field_info f;
        CHECK_EQ(larder_field_info_get(d, i, 1, &f), 0);
        CHECK(strcmp(f.name, "label") == 0);
        CHECK_EQ(f.dtype, LARDER_DTYPE_I32);
        CHECK_EQ(f.ndim, 2);
        CHECK_EQ(f.shape[0], 3);
        CHECK_EQ(larder_find_field(d, i, "jpg"), 0);
    }
    CHECK_EQ(larder_find_key(d, "dir/nope"), LARDER_ENOTFOUND);
    larder_sample_info s;
    CHECK_EQ(larder_sample_info_get(d, 300, &s), LARDER_ENOTFOUND);
    CHECK_EQ(larder_find_field(d, 0, "png"), LARDER_ENOTFOUND);
    larder_close(d);
}

TEST(index_same_input_same_id)
{
    char a[33], b[33];
    build_index(test_path("a.larder"), 50, a);
    build_index(test_path("b.larder"), 50, b);
    CHECK(strcmp(a, b) == 0);
    build_index(test_path("c.larder"), 51, b);
    CHECK(strcmp(a, b) != 0);
}

TEST(index_duplicate_key_rejected)
{
    struct larder__index_builder *b;
    CHECK_EQ(larder__index_builder_new(&b, 0), 0);
    CHECK_EQ(larder__index_builder_add_shard(b, "s.tar", LARDER_FORMAT_TAR), 0);
    larder__index_builder_set_shard(b, 0, 100, 0);
    CHECK_EQ(larder__index_builder_add_sample(b, 0, 0, 10, 0, "k", 1, NULL, 0), 0);
    CHECK_EQ(larder__index_builder_add_sample(b, 0, 10, 10, 0, "k2", 2, NULL, 0), 1);
    CHECK_EQ(larder__index_builder_add_sample(b, 0, 20, 10, 0, "k", 1, NULL, 0), LARDER_EDUPKEY);
    CHECK(strstr(larder_errmsg(), "'k'") != NULL);
    /* a field past the sample's end is refused before it reaches the file */
    struct larder__field f = {.name = "x", .offset = 5, .length = 6};
    CHECK_EQ(larder__index_builder_add_sample(b, 0, 30, 10, 0, "k3", 2, &f, 1), LARDER_EUSAGE);
    larder__index_builder_free(b);
}

TEST(index_empty_refused)
{
    struct larder__index_builder *b;
    CHECK_EQ(larder__index_builder_new(&b, 0), 0);
    CHECK_EQ(larder__index_builder_write(b, test_path("x.larder"), NULL), LARDER_EEMPTY);
    larder__index_builder_free(b);
    CHECK_EQ(larder__index_builder_new(&b, 1000), LARDER_EUSAGE);
}

TEST(index_many_keys_grow_table)
{
    char id[33];
    build_index(test_path("big.larder"), 20000, id);
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("big.larder"), NULL), 0);
    CHECK_EQ(larder_find_key(d, "dir/sample019999"), 19999);
    CHECK_EQ(larder_find_key(d, "dir/sample000000"), 0);
    CHECK_EQ(larder_verify(d, NULL, NULL, NULL) > 0, 1); /* shards don't exist */
    larder_close(d);
}

/* Corrupt byte `at` of a good index (set it to `value`) and expect `code` at open. */
static void expect_open_error(size_t at, const uint8_t *value, size_t length, int code,
                              const char *needle, int fix_header_checksum)
{
    char id[33];
    build_index(test_path("good.larder"), 20, id);
    size_t size;
    uint8_t *data = test_read_file(test_path("good.larder"), &size);
    memcpy(data + at, value, length);
    if (fix_header_checksum) {
        /* recompute the header checksum so the corruption reaches deeper checks */
        extern uint64_t larder_test_header_checksum(const uint8_t *);
        larder__put_le64(data + 120, larder_test_header_checksum(data));
    }
    test_write_file(test_path("bad.larder"), data, size);
    free(data);
    larder_dataset *d = NULL;
    int rc = larder_open(&d, test_path("bad.larder"), NULL);
    if (rc != code) fprintf(stderr, "    got %d (%s)\n", rc, larder_errmsg());
    CHECK_EQ(rc, code);
    CHECK(strstr(larder_errmsg(), "bad.larder") != NULL);
    if (needle && !strstr(larder_errmsg(), needle)) fprintf(stderr, "    %s\n", larder_errmsg());
    if (needle) CHECK(strstr(larder_errmsg(), needle) != NULL);
    CHECK(d == NULL);
}

#include <xxhash.h>
uint64_t larder_test_header_checksum(const uint8_t *);
uint64_t larder_test_header_checksum(const uint8_t *header)
{
    return XXH3_64bits(header, 120);
}

TEST(index_bad_magic)
{
    expect_open_error(0, (const uint8_t *)"NOTANIDX", 8, LARDER_EBADINDEX, "magic", 0);
}

TEST(index_bad_version)
{
    uint8_t v[4] = {4, 0, 0, 0};
    expect_open_error(8, v, 4, LARDER_EVERSION, "version 4", 1);
}

TEST(index_bad_header_checksum)
{
    uint8_t v[1] = {0x55};
    expect_open_error(40, v, 1, LARDER_EBADINDEX, "header checksum", 0);
}

TEST(index_bad_counts)
{
    uint8_t v[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f};
    expect_open_error(40, v, 8, LARDER_EBADINDEX, NULL, 1); /* num_samples huge */
    uint8_t w[8] = {21, 0, 0, 0, 0, 0, 0, 0};
    expect_open_error(40, w, 8, LARDER_EBADINDEX, "truncated or corrupt", 1);
}

TEST(index_truncated)
{
    char id[33];
    build_index(test_path("good.larder"), 20, id);
    size_t size;
    uint8_t *data = test_read_file(test_path("good.larder"), &size);
    size_t cuts[] = {0, 7, 64, 127, 128, 500, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        test_write_file(test_path("cut.larder"), data, cuts[i]);
        larder_dataset *d = NULL;
        int rc = larder_open(&d, test_path("cut.larder"), NULL);
        CHECK(rc == LARDER_EBADINDEX);
        CHECK(strstr(larder_errmsg(), "cut.larder") != NULL);
    }
    free(data);
    larder_dataset *d = NULL;
    CHECK_EQ(larder_open(&d, test_path("missing.larder"), NULL), -ENOENT);
    CHECK(strstr(larder_errmsg(), "missing.larder") != NULL);
}

/* Records are checked when read: damage one and see the error name it. */
TEST(index_bad_records)
{
    char id[33];
    build_index(test_path("good.larder"), 20, id);
    size_t size;
    uint8_t *good = test_read_file(test_path("good.larder"), &size);
    uint64_t samples_at = 128 + 3 * 32;
    struct {
        uint64_t at;
        uint64_t value;
        const char *needle;
    } cases[] = {
        {samples_at + 5 * 48 + 0, 999999, "past the end of shard"}, /* offset */
        {samples_at + 5 * 48 + 8, UINT64_MAX, "past the end"},      /* length overflows */
        {samples_at + 5 * 48 + 24, 1u << 30, "key string"},         /* key offset */
        {samples_at + 5 * 48 + 32, 1u << 30, "field table"},        /* field_first */
        {samples_at + 5 * 48 + 40, 7, "shard 7"},                   /* shard (and fields) */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint8_t *data = malloc(size);
        memcpy(data, good, size);
        if (cases[c].at == samples_at + 5 * 48 + 40)
            larder__put_le32(data + cases[c].at, (uint32_t)cases[c].value);
        else
            larder__put_le64(data + cases[c].at, cases[c].value);
        test_write_file(test_path("bad.larder"), data, size);
        free(data);
        larder_dataset *d;
        CHECK_EQ(larder_open(&d, test_path("bad.larder"), NULL), 0);
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(d, 4, &s), 0);
        CHECK_EQ(larder_sample_info_get(d, 5, &s), LARDER_EBADINDEX);
        if (!strstr(larder_errmsg(), cases[c].needle)) fprintf(stderr, "    %s\n", larder_errmsg());
        CHECK(strstr(larder_errmsg(), cases[c].needle) != NULL);
        CHECK(strstr(larder_errmsg(), "sample 5") != NULL);
        char buf[4096];
        CHECK_EQ(larder_read_sample(d, 5, buf, sizeof buf), LARDER_EBADINDEX);
        /* verify reports it and the content hash mismatch */
        CHECK(larder_verify(d, NULL, NULL, NULL) >= 2);
        larder_close(d);
    }
    /* a field whose shape does not match its length */
    uint64_t fields_at = samples_at + 20 * 48;
    uint8_t *data = malloc(size);
    memcpy(data, good, size);
    larder__put_le64(data + fields_at + 40 + 16, 13); /* label length 12 -> 13 */
    test_write_file(test_path("bad.larder"), data, size);
    free(data);
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("bad.larder"), NULL), 0);
    larder_field_info f;
    CHECK_EQ(larder_field_info_get(d, 0, 0, &f), 0);
    CHECK_EQ(larder_field_info_get(d, 0, 1, &f), LARDER_EBADINDEX);
    CHECK(strstr(larder_errmsg(), "shape") != NULL);
    larder_close(d);
    free(good);
}

struct problems {
    int hash, records;
};

static void count_problem(void *userdata, uint64_t id, int error, const char *message)
{
    struct problems *p = userdata;
    (void)message;
    if (id == LARDER_NO_SAMPLE && error == LARDER_ECHECKSUM) p->hash++;
    if (id != LARDER_NO_SAMPLE && error == LARDER_EBADINDEX) p->records++;
}

TEST(index_damage_found_by_verify)
{
    char id[33];
    build_index(test_path("good.larder"), 20, id);
    size_t size;
    uint8_t *data = test_read_file(test_path("good.larder"), &size);
    data[size - 3] ^= 1; /* inside the string table: the last key changes */
    test_write_file(test_path("bad.larder"), data, size);
    free(data);
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("bad.larder"), NULL), 0);
    struct problems p = {0};
    CHECK(larder_verify(d, count_problem, NULL, &p) >= 2);
    CHECK_EQ(p.hash, 1);    /* content hash no longer matches the dataset id */
    CHECK_EQ(p.records, 1); /* the changed key no longer leads back to its sample */
    larder_close(d);
}

static void *no_mmap(void *address, size_t length, int protection, int flags, int fd, off_t offset)
{
    (void)address, (void)length, (void)protection, (void)flags, (void)fd, (void)offset;
    errno = ENODEV;
    return MAP_FAILED;
}

/* File systems that cannot map files (FUSE with direct I/O) still open. */
TEST(index_opens_without_mmap)
{
    char id[33];
    build_index(test_path("index.larder"), 50, id);
    void *(*real_mmap)(void *, size_t, int, int, int, off_t) = larder__sys.mmap;
    larder__sys.mmap = no_mmap;
    larder_dataset *d;
    int rc = larder_open(&d, test_path("index.larder"), NULL);
    larder__sys.mmap = real_mmap;
    CHECK_EQ(rc, 0);
    CHECK_EQ(larder_find_key(d, "dir/sample000042"), 42);
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    CHECK(strcmp(info.dataset_id, id) == 0);
    larder_close(d);
}
