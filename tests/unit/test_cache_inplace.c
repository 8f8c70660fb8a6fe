/*
 * test_cache_inplace.c - blocks put in place (cache_inplace.c): a data
 * file replaced between the mapping and the store never has blocks marked
 * resident over a hole, and a file system refusing fallocate is no place
 * to put bytes in.
 */
#include "cache.h"
#include "dataset.h"
#include "larder_pack.h"
#include "sys.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#define BLOCK 65536

/* A dataset of one shard of a few MiB, opened with a cache of 64 KiB blocks. */
static larder_dataset *open_one(void)
{
    static uint8_t data[200000];
    char path[4096];
    for (int i = 0; i < 20; i++) {
        test_fill_random(data, sizeof data, (uint64_t)i + 1);
        snprintf(path, sizeof path, "%s/src/s%04d.bin", test_dir(), i);
        test_write_file(path, data, sizeof data);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options p = {
        .version = LARDER_PACK_OPTIONS_VERSION, .shard_size = 64 << 20, .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &p, NULL), 0);
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = test_path("cache"),
                             .block_size = BLOCK};
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &o), 0);
    return d;
}

/* Map blocks [first, last] of shard 0 in place and write `seed`'s bytes
 * through the mapping (what a splice into the file leaves there). */
static uint8_t *put_in_place(struct larder__cache *c, int fd, uint64_t first, uint64_t last,
                             uint64_t seed)
{
    size_t length = (size_t)(last - first + 1) * BLOCK;
    uint8_t *at = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(at != MAP_FAILED);
    CHECK_EQ(larder__cache_map_blocks(c, 0, fd, first, last, at), 0);
    test_fill_random(at, length, seed);
    return at;
}

TEST(cache_inplace_a_data_file_replaced_before_the_store_gets_the_bytes)
{
    larder_dataset *d = open_one();
    struct larder__cache *c = larder__dataset_cache(d);
    CHECK(c != NULL);
    int fd = larder__cache_data_fd(c, 0);
    CHECK(fd >= 0);
    int lock = larder__cache_lock(c, 0, 2, 5);
    CHECK(lock >= 0);
    uint8_t *at = put_in_place(c, fd, 2, 5, 77);
    /* the data file deleted underneath: the store opens a fresh one */
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    CHECK(n > 0);
    path[n] = 0;
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(larder__cache_store_placed(c, 0, 2, 5, at, fd, false, true), 0);
    larder__cache_unlock(c, lock);
    CHECK(larder__cache_data_fd(c, 0) != fd);
    /* resident, so they must read back as the bytes put in place: before,
     * the fresh file's hole (zeros) was marked resident */
    CHECK(larder__cache_resident(c, 0, 2, 5));
    static uint8_t want[4 * BLOCK], got[4 * BLOCK];
    test_fill_random(want, sizeof want, 77);
    CHECK_EQ(larder__cache_pread(c, 0, got, sizeof got, 2 * BLOCK), 0);
    CHECK(memcmp(got, want, sizeof got) == 0);
    munmap(at, 4 * BLOCK);
    larder_close(d);
}

TEST(cache_inplace_the_same_file_is_marked_not_written)
{
    larder_dataset *d = open_one();
    struct larder__cache *c = larder__dataset_cache(d);
    int fd = larder__cache_data_fd(c, 0);
    int lock = larder__cache_lock(c, 0, 1, 1);
    CHECK(lock >= 0);
    uint8_t *at = put_in_place(c, fd, 1, 1, 5);
    /* a different buffer than the mapping: were it written, the file would
     * hold these bytes, not the ones put in place */
    CHECK_EQ(larder__cache_store_placed(c, 0, 1, 1, at, fd, false, true), 0);
    larder__cache_unlock(c, lock);
    static uint8_t want[BLOCK], got[BLOCK];
    test_fill_random(want, sizeof want, 5);
    CHECK_EQ(pread(fd, got, sizeof got, BLOCK), (ssize_t)sizeof got);
    CHECK(memcmp(got, want, sizeof got) == 0);
    CHECK(larder__cache_resident(c, 0, 1, 1));
    munmap(at, BLOCK);
    larder_close(d);
}

TEST(cache_inplace_a_mapping_cut_short_marks_nothing)
{
    larder_dataset *d = open_one();
    struct larder__cache *c = larder__dataset_cache(d);
    int fd = larder__cache_data_fd(c, 0);
    int lock = larder__cache_lock(c, 0, 3, 3);
    CHECK(lock >= 0);
    uint8_t *at = put_in_place(c, fd, 3, 3, 9);
    CHECK_EQ(ftruncate(fd, 3 * BLOCK), 0); /* the mapping's page now past the end */
    CHECK_EQ(larder__cache_store_placed(c, 0, 3, 3, at, fd, false, true), -ESTALE);
    larder__cache_unlock(c, lock);
    CHECK(!larder__cache_present(c, 0, 3, 3));
    munmap(at, BLOCK);
    larder_close(d);
}

static int no_fallocate(int fd, int mode, off_t offset, off_t length)
{
    (void)fd, (void)mode, (void)offset, (void)length;
    errno = EOPNOTSUPP;
    return -1;
}

TEST(cache_inplace_no_fallocate_is_no_place)
{
    larder_dataset *d = open_one();
    struct larder__cache *c = larder__dataset_cache(d);
    int fd = larder__cache_data_fd(c, 0);
    uint8_t *at = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(at != MAP_FAILED);
    int (*real)(int, int, off_t, off_t) = larder__sys.fallocate;
    larder__sys.fallocate = no_fallocate;
    /* before: carried on, and a write through the mapping onto a full disk is a SIGBUS */
    int rc = larder__cache_map_blocks(c, 0, fd, 1, 1, at);
    larder__sys.fallocate = real;
    CHECK_EQ(rc, -EOPNOTSUPP);
    munmap(at, BLOCK);
    larder_close(d);
}
