/*
 * test_file.c - the file-like handle (larder_file_*): preads at random
 * offsets and lengths, sequential reads and seeks, through a node cache,
 * without one (unchecked and checked), and from several threads at once;
 * small sequential reads cost one origin read per read-ahead window, not
 * one per call; wrong bytes at the origin are refused; missing keys and
 * fields and bad arguments get a clear error.  Expected bytes are the
 * source files the test wrote; expected request counts are arithmetic.
 */
#include "larder_pack.h"
#include "test.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#define NUM_FILES 5
/* file i's size: a few bytes, one block, around a window, several windows */
static const size_t sizes[NUM_FILES] = {7, 65536, 300001, 3 << 20, 1000};

/* DIR/src/fNNN.bin (random bytes), packed into DIR/packed as tar shards. */
static void make_files(void)
{
    char path[4096];
    for (int i = 0; i < NUM_FILES; i++) {
        uint8_t *data = malloc(sizes[i]);
        test_fill_random(data, sizes[i], (uint64_t)i + 100);
        snprintf(path, sizeof path, "%s/src/f%03d.bin", test_dir(), i);
        test_write_file(path, data, sizes[i]);
        free(data);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_TAR,
                             .shard_size = 8 << 20,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
}

/* The dataset, with a cache ("cache") or none (""), checked or not. */
static larder_dataset *open_dataset(const char *cache, int verify)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = cache[0] ? test_path(cache) : "",
                             .verify_checksums = verify,
                             .daemon_socket = ""};
    larder_dataset *d = NULL;
    int rc = larder_open(&d, test_path("packed/index.larder"), &o);
    if (rc) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    return d;
}

static uint8_t *reference(int i, size_t *size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/src/f%03d.bin", test_dir(), i);
    return test_read_file(path, size);
}

static larder_file *open_file(larder_dataset *d, int i)
{
    char key[16];
    snprintf(key, sizeof key, "f%03d", i);
    larder_file *f = NULL;
    int rc = larder_file_open_key(&f, d, key, NULL);
    if (rc) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    return f;
}

static uint64_t next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005u + 1442695040888963407u;
    return *state >> 17;
}

/* `count` preads at random offsets (some past the end) and lengths (some
 * longer than a window) of every file, against the files' own bytes. */
static void random_preads(larder_dataset *d, int count, uint64_t seed)
{
    uint8_t *buf = malloc(1 << 20);
    for (int i = 0; i < NUM_FILES; i++) {
        size_t size;
        uint8_t *want = reference(i, &size);
        larder_file *f = open_file(d, i);
        CHECK_EQ(larder_file_size(f), size);
        uint64_t state = seed + (uint64_t)i;
        for (int k = 0; k < count; k++) {
            uint64_t offset = next_random(&state) % (size + size / 8 + 2);
            size_t length = (size_t)(next_random(&state) % (k % 4 == 0 ? (1 << 20) : 9000));
            int64_t expect =
                offset >= size ? 0 : (int64_t)(size - offset < length ? size - offset : length);
            memset(buf, 0xAB, length);
            int64_t got = larder_file_pread(f, buf, length, offset);
            if (got != expect)
                fprintf(stderr, "    file %d: pread(%zu at %llu): %lld (%s)\n", i, length,
                        (unsigned long long)offset, (long long)got, larder_errmsg());
            CHECK_EQ(got, expect);
            CHECK(memcmp(buf, want + (offset < size ? offset : 0), (size_t)expect) == 0);
        }
        /* the whole file in one read */
        CHECK_EQ(larder_file_pread(f, buf, 1 << 20, 0), size < (1 << 20) ? size : (1 << 20));
        CHECK(memcmp(buf, want, size < (1 << 20) ? size : (1 << 20)) == 0);
        larder_file_close(f);
        free(want);
    }
    free(buf);
}

TEST(file_pread_random_through_a_cache)
{
    make_files();
    larder_dataset *d = open_dataset("cache", 0);
    random_preads(d, 300, 1);
    /* once more, everything resident now */
    random_preads(d, 100, 2);
    larder_close(d);
}

TEST(file_pread_random_without_a_cache)
{
    make_files();
    larder_dataset *d = open_dataset("", 0);
    random_preads(d, 300, 3);
    larder_close(d);
}

TEST(file_pread_random_without_a_cache_checked)
{
    make_files();
    larder_dataset *d = open_dataset("", 1);
    random_preads(d, 300, 4);
    larder_close(d);
}

/* Sequential reads of `chunk` bytes through larder_file_read, to the end. */
static void read_sequentially(larder_dataset *d, int i, size_t chunk)
{
    size_t size;
    uint8_t *want = reference(i, &size);
    uint8_t *got = malloc(size + 1), *buf = malloc(chunk);
    larder_file *f = open_file(d, i);
    size_t done = 0;
    int64_t n;
    while ((n = larder_file_read(f, buf, chunk)) > 0) {
        CHECK(done + (size_t)n <= size);
        memcpy(got + done, buf, (size_t)n);
        done += (size_t)n;
    }
    CHECK_EQ(n, 0);
    CHECK_EQ(done, size);
    CHECK(memcmp(got, want, size) == 0);
    CHECK_EQ(larder_file_read(f, buf, chunk), 0); /* still at the end */
    larder_file_close(f);
    free(got), free(buf), free(want);
}

TEST(file_small_sequential_reads_cost_one_origin_read_per_window)
{
    make_files();
    /* no cache, no checks: every window is one read of the shard */
    larder_dataset *d = open_dataset("", 0);
    larder_stats before, after;
    CHECK_EQ(larder_stats_get(d, &before), 0);
    read_sequentially(d, 3, 4096);
    CHECK_EQ(larder_stats_get(d, &after), 0);
    /* 3 MiB in 256 KiB windows: 12 reads, where 4 KiB calls are 768 */
    CHECK_EQ(after.origin_requests - before.origin_requests, 12);
    CHECK_EQ(after.origin_bytes - before.origin_bytes, 3 << 20);
    larder_close(d);

    /* through a cache: the first miss stages the file (the sample is
     * checked whole); every read after it is resident */
    d = open_dataset("cache", 0);
    CHECK_EQ(larder_stats_get(d, &before), 0);
    read_sequentially(d, 3, 4096);
    CHECK_EQ(larder_stats_get(d, &after), 0);
    CHECK_EQ(after.origin_requests - before.origin_requests, 1);
    CHECK(after.origin_bytes - before.origin_bytes >= (3 << 20));
    CHECK(after.origin_bytes - before.origin_bytes < (3 << 20) + (128 << 10));
    read_sequentially(d, 3, 1000);
    larder_stats again;
    CHECK_EQ(larder_stats_get(d, &again), 0);
    CHECK_EQ(again.origin_requests, after.origin_requests);
    CHECK_EQ(again.bytes_served - after.bytes_served, 3 << 20);
    larder_close(d);

    /* no cache, checked: the sample once, whole */
    d = open_dataset("", 1);
    CHECK_EQ(larder_stats_get(d, &before), 0);
    read_sequentially(d, 3, 4096);
    CHECK_EQ(larder_stats_get(d, &after), 0);
    CHECK_EQ(after.origin_requests - before.origin_requests, 1);
    larder_close(d);
}

TEST(file_read_and_seek)
{
    make_files();
    larder_dataset *d = open_dataset("cache", 0);
    for (size_t chunk = 1; chunk <= (1 << 20); chunk *= 37)
        read_sequentially(d, 2, chunk);
    size_t size;
    uint8_t *want = reference(2, &size);
    larder_file *f = open_file(d, 2);
    uint8_t buf[64];
    CHECK_EQ(larder_file_seek(f, -10, SEEK_END), size - 10);
    CHECK_EQ(larder_file_read(f, buf, sizeof buf), 10);
    CHECK(memcmp(buf, want + size - 10, 10) == 0);
    CHECK_EQ(larder_file_read(f, buf, sizeof buf), 0);
    CHECK_EQ(larder_file_seek(f, 100, SEEK_SET), 100);
    CHECK_EQ(larder_file_seek(f, 50, SEEK_CUR), 150);
    CHECK_EQ(larder_file_read(f, buf, 20), 20);
    CHECK(memcmp(buf, want + 150, 20) == 0);
    CHECK_EQ(larder_file_seek(f, 0, SEEK_CUR), 170);
    /* before the start, or an unknown whence: refused, the position kept */
    CHECK_EQ(larder_file_seek(f, -171, SEEK_CUR), LARDER_EUSAGE);
    CHECK_EQ(larder_file_seek(f, -1, SEEK_SET), LARDER_EUSAGE);
    CHECK_EQ(larder_file_seek(f, INT64_MAX, SEEK_END), LARDER_EUSAGE);
    CHECK_EQ(larder_file_seek(f, 0, 7), LARDER_EUSAGE);
    CHECK_EQ(larder_file_seek(f, 0, SEEK_CUR), 170);
    /* past the end: allowed, reads nothing */
    CHECK_EQ(larder_file_seek(f, (int64_t)size + 5000, SEEK_SET), size + 5000);
    CHECK_EQ(larder_file_read(f, buf, sizeof buf), 0);
    CHECK_EQ(larder_file_pread(f, buf, sizeof buf, UINT64_MAX), 0);
    CHECK_EQ(larder_file_pread(f, buf, 0, 0), 0);
    larder_file_close(f);
    free(want);
    larder_close(d);
}

TEST(file_whole_sample_and_fields)
{
    make_files();
    larder_dataset *d = open_dataset("cache", 0);
    int64_t id = larder_find_key(d, "f002");
    CHECK(id >= 0);
    larder_sample_info s;
    CHECK_EQ(larder_sample_info_get(d, (uint64_t)id, &s), 0);
    /* field -1: the sample's bytes, tar header and padding included */
    larder_file *f = NULL;
    CHECK_EQ(larder_file_open(&f, d, (uint64_t)id, -1), 0);
    CHECK_EQ(larder_file_size(f), s.length);
    uint8_t *sample = malloc(s.length), *got = malloc(s.length);
    CHECK_EQ(larder_read_sample(d, (uint64_t)id, sample, s.length), s.length);
    CHECK_EQ(larder_file_pread(f, got, s.length, 0), s.length);
    CHECK(memcmp(got, sample, s.length) == 0);
    larder_file_close(f);
    /* by name: the same bytes as by number */
    size_t size;
    uint8_t *want = reference(2, &size);
    CHECK_EQ(larder_file_open_key(&f, d, "f002", "bin"), 0);
    CHECK_EQ(larder_file_size(f), size);
    CHECK_EQ(larder_file_pread(f, got, size, 0), size);
    CHECK(memcmp(got, want, size) == 0);
    larder_file_close(f);
    CHECK_EQ(larder_file_open(&f, d, (uint64_t)id, 0), 0);
    CHECK_EQ(larder_file_pread(f, got, 1000, size - 500), 500);
    CHECK(memcmp(got, want + size - 500, 500) == 0);
    larder_file_close(f);
    free(sample), free(got), free(want);
    larder_close(d);
}

TEST(file_open_errors_name_what_is_missing)
{
    make_files();
    larder_dataset *d = open_dataset("", 0);
    larder_file *f = (larder_file *)d; /* must be reset on failure */
    CHECK_EQ(larder_file_open_key(&f, d, "no/such/key", NULL), LARDER_ENOTFOUND);
    CHECK(f == NULL);
    CHECK(strstr(larder_errmsg(), "no/such/key") != NULL);
    CHECK_EQ(larder_file_open_key(&f, d, "f001", "jpg"), LARDER_ENOTFOUND);
    CHECK(strstr(larder_errmsg(), "jpg") != NULL && strstr(larder_errmsg(), "f001") != NULL);
    CHECK_EQ(larder_file_open(&f, d, NUM_FILES, -1), LARDER_ENOTFOUND);
    CHECK_EQ(larder_file_open(&f, d, 0, 1), LARDER_ENOTFOUND);
    CHECK_EQ(larder_file_open(&f, d, 0, -2), LARDER_EUSAGE);
    CHECK_EQ(larder_file_open(&f, d, UINT64_MAX, 0), LARDER_ENOTFOUND);
    CHECK_EQ(larder_file_open(NULL, d, 0, 0), LARDER_EUSAGE);
    CHECK_EQ(larder_file_open(&f, NULL, 0, 0), LARDER_EUSAGE);
    CHECK_EQ(larder_file_open_key(&f, d, NULL, NULL), LARDER_EUSAGE);
    CHECK_EQ(larder_file_pread(NULL, NULL, 1, 0), LARDER_EUSAGE);
    f = open_file(d, 0);
    CHECK_EQ(larder_file_pread(f, NULL, 1, 0), LARDER_EUSAGE);
    larder_file_close(f);
    larder_file_close(NULL);
    CHECK_EQ(larder_file_size(NULL), 0);
    larder_close(d);
}

TEST(file_refuses_wrong_bytes_from_the_origin)
{
    make_files();
    /* one byte changed in file 3's bytes in the shard */
    larder_dataset *d = open_dataset("", 0);
    int64_t id = larder_find_key(d, "f003");
    larder_sample_info s;
    larder_field_info field;
    CHECK_EQ(larder_sample_info_get(d, (uint64_t)id, &s), 0);
    CHECK_EQ(larder_field_info_get(d, (uint64_t)id, 0, &field), 0);
    uint64_t at = s.offset + field.offset + 2000000;
    char shard[4096];
    snprintf(shard, sizeof shard, "%s/packed/%s", test_dir(), s.shard_name);
    larder_close(d);
    CHECK_EQ(test_sh("printf 'Z' | dd of=%s bs=1 seek=%llu conv=notrunc 2>/dev/null", shard,
                     (unsigned long long)at),
             0);
    static uint8_t buf[4096];
    const char *caches[] = {"cache", ""};
    for (int k = 0; k < 2; k++) {
        d = open_dataset(caches[k], 1);
        larder_file *f = open_file(d, 3);
        /* far from the changed byte, the file is still one checksum */
        CHECK_EQ(larder_file_pread(f, buf, sizeof buf, 10), LARDER_ECHECKSUM);
        CHECK(strstr(larder_errmsg(), "f003") != NULL);
        larder_file_close(f);
        larder_close(d);
    }
    /* the other files are untouched, and read */
    d = open_dataset("cache", 1);
    for (int i = 0; i < NUM_FILES; i++) {
        if (i == 3) continue;
        size_t size;
        uint8_t *want = reference(i, &size), *got = malloc(size);
        larder_file *f = open_file(d, i);
        CHECK_EQ(larder_file_pread(f, got, size, 0), size);
        CHECK(memcmp(got, want, size) == 0);
        larder_file_close(f);
        free(want), free(got);
    }
    larder_close(d);
}

struct reader {
    larder_file *file;
    const uint8_t *want;
    size_t size;
    uint64_t seed;
    int failures;
};

static void *read_randomly(void *arg)
{
    struct reader *r = arg;
    uint8_t *buf = malloc(400000);
    uint64_t state = r->seed;
    for (int k = 0; k < 300; k++) {
        uint64_t offset = next_random(&state) % r->size;
        size_t length = (size_t)(next_random(&state) % (k % 3 ? 5000 : 400000));
        size_t expect = r->size - offset < length ? r->size - offset : length;
        if (larder_file_pread(r->file, buf, length, offset) != (int64_t)expect ||
            memcmp(buf, r->want + offset, expect) != 0)
            r->failures++;
    }
    free(buf);
    return NULL;
}

TEST(file_pread_from_several_threads)
{
    make_files();
    const char *caches[] = {"cache", ""};
    for (int k = 0; k < 2; k++) {
        larder_dataset *d = open_dataset(caches[k], 0);
        size_t size;
        uint8_t *want = reference(3, &size);
        larder_file *f = open_file(d, 3);
        struct reader readers[4];
        pthread_t threads[4];
        for (int t = 0; t < 4; t++) {
            readers[t] = (struct reader){f, want, size, (uint64_t)t * 77 + 1, 0};
            CHECK_EQ(pthread_create(&threads[t], NULL, read_randomly, &readers[t]), 0);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(threads[t], NULL);
            CHECK_EQ(readers[t].failures, 0);
        }
        larder_file_close(f);
        free(want);
        larder_close(d);
    }
}

TEST(file_reads_a_sample_over_256_mib)
{
    /* one checksum over more than the engine checks around a range (256
     * MiB): through a cache the sample is staged whole once, then read by
     * ranges; without a cache and unchecked it is read by ranges */
    const uint64_t size = (UINT64_C(272) << 20) + 12345;
    char path[4096];
    snprintf(path, sizeof path, "%s/big/huge.bin", test_dir());
    test_write_file(path, "", 0);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ(ftruncate(fd, (off_t)size), 0);
    uint8_t marks[4096];
    for (int k = 0; k < 40; k++) { /* random bytes here and there; zeros between */
        test_fill_random(marks, sizeof marks, (uint64_t)k + 900);
        CHECK_EQ(pwrite(fd, marks, sizeof marks, (off_t)((size - sizeof marks) / 39 * k)),
                 sizeof marks);
    }
    close(fd);
    const char *sources[] = {test_path("big")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_TAR,
                             .shard_size = 1 << 30,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
    int want = open(path, O_RDONLY);
    CHECK(want >= 0);
    uint8_t *a = malloc(1 << 20), *b = malloc(1 << 20);
    const char *caches[] = {"cache", ""};
    for (int c = 0; c < 2; c++) {
        larder_dataset *d = open_dataset(caches[c], 0);
        larder_file *f = NULL;
        CHECK_EQ(larder_file_open_key(&f, d, "huge", NULL), 0);
        CHECK_EQ(larder_file_size(f), size);
        uint64_t state = 42;
        for (int k = 0; k < 60; k++) {
            uint64_t offset = k == 0 ? size - 100 : next_random(&state) % size;
            size_t length = (size_t)(next_random(&state) % (k % 2 ? 5000 : (1 << 20)));
            size_t expect = size - offset < length ? (size_t)(size - offset) : length;
            int64_t got = larder_file_pread(f, a, length, offset);
            if (got < 0) fprintf(stderr, "    %s\n", larder_errmsg());
            CHECK_EQ(got, expect);
            CHECK_EQ(pread(want, b, expect, (off_t)offset), expect);
            CHECK(memcmp(a, b, expect) == 0);
        }
        /* one read of 150 MiB: more than one piece (64 MiB) for the engine */
        size_t length = (150 << 20) + 1;
        uint64_t offset = (100 << 20) - 7;
        uint8_t *x = malloc(length), *y = malloc(length);
        CHECK_EQ(larder_file_pread(f, x, length, offset), length);
        CHECK_EQ(pread(want, y, length, (off_t)offset), length);
        CHECK(memcmp(x, y, length) == 0);
        free(x), free(y);
        larder_file_close(f);
        larder_close(d);
    }
    close(want);
    free(a), free(b);
}

/* A file of `size` random bytes in DIR/tree, indexed in place with
 * checksums per 1 MiB block (larder_index_files); the file's bytes. */
static uint8_t *index_one_file(size_t size)
{
    uint8_t *data = malloc(size);
    test_fill_random(data, size, 77);
    test_write_file(test_path("tree/weights.bin"), data, size);
    larder_index_files_options o = {
        .struct_size = sizeof o, .checksum_block = 1 << 20, .large_file = 4 << 20};
    CHECK_EQ(larder_index_files(test_path("tree"), test_path("tree/index.larder"), &o, NULL), 0);
    return data;
}

static larder_dataset *open_tree(const char *cache, int verify)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = cache[0] ? test_path(cache) : "",
                             .verify_checksums = verify,
                             .daemon_socket = ""};
    larder_dataset *d = NULL;
    CHECK_EQ(larder_open(&d, test_path("tree/index.larder"), &o), 0);
    return d;
}

TEST(file_of_an_indexed_file_reads_only_the_checksum_blocks_asked_for)
{
    const size_t size = (12 << 20) + 777;
    uint8_t *want = index_one_file(size);
    static uint8_t buf[8192];
    const char *caches[] = {"cache", ""};
    for (int c = 0; c < 2; c++) {
        larder_dataset *d = open_tree(caches[c], 1);
        larder_file *f = NULL;
        CHECK_EQ(larder_file_open_key(&f, d, "weights.bin", NULL), 0);
        CHECK_EQ(larder_file_size(f), size);
        larder_stats before, after;
        CHECK_EQ(larder_stats_get(d, &before), 0);
        uint64_t at = (7 << 20) + (512 << 10);
        CHECK_EQ(larder_file_pread(f, buf, 4096, at), 4096);
        CHECK(memcmp(buf, want + at, 4096) == 0);
        CHECK_EQ(larder_stats_get(d, &after), 0);
        /* the 256 KiB window lies in one 1 MiB checksum block: that block alone */
        CHECK_EQ(after.origin_bytes - before.origin_bytes, 1 << 20);
        CHECK_EQ(larder_file_pread(f, buf, 8192, size - 100), 100);
        CHECK(memcmp(buf, want + size - 100, 100) == 0);
        larder_file_close(f);
        larder_close(d);
    }
    /* a wrong byte in block 10: that block is refused, the others read */
    CHECK_EQ(test_sh("printf 'Z' | dd of=%s bs=1 seek=%llu conv=notrunc 2>/dev/null",
                     test_path("tree/weights.bin"), (unsigned long long)(10 << 20) + 5),
             0);
    for (int c = 0; c < 2; c++) {
        larder_dataset *d = open_tree(c ? "" : "cache2", 1);
        larder_file *f = NULL;
        CHECK_EQ(larder_file_open_key(&f, d, "weights.bin", NULL), 0);
        CHECK_EQ(larder_file_pread(f, buf, 4096, (10 << 20) + 300000), LARDER_ECHECKSUM);
        CHECK_EQ(larder_file_pread(f, buf, 4096, 3 << 20), 4096);
        CHECK(memcmp(buf, want + (3 << 20), 4096) == 0);
        larder_file_close(f);
        larder_close(d);
    }
    free(want);
}
