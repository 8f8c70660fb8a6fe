/*
 * test_index_files.c - plain files as datasets (larder_index_files) and
 * the per-block checksums of index version 3: the table as written
 * (each checksum computed here over the file's bytes), the reader's
 * refusal of bad counts, shifts and truncated tables, and fills of a
 * large file that read and check only the checksum blocks covering what
 * was asked (counted through larder_stats), failing only where a block
 * is wrong.
 */
#include "dataset.h"
#include "fill.h"
#include "index_internal.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MiB (UINT64_C(1) << 20)
#define KiB64 (UINT64_C(64) << 10)
#define BIG (80 * MiB) /* more than the 64 MiB a whole-sample fill takes at a time */

/* A sparse 80 MiB file with distinct 4 KiB patches every 3 MiB (so blocks differ). */
static void make_big(const char *path)
{
    test_write_file(path, "", 0);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (off_t)BIG) == 0);
    uint8_t patch[4096];
    for (uint64_t at = 100, k = 0; at + sizeof patch <= BIG; at += 3 * MiB, k++) {
        test_fill_random(patch, sizeof patch, k + 1);
        CHECK(pwrite(fd, patch, sizeof patch, (off_t)at) == (ssize_t)sizeof patch);
    }
    close(fd);
}

static void index_tree(const char *root, const char *index, uint64_t checksum_block,
                       uint64_t large_file, uint32_t block_size)
{
    larder_index_files_options o = {.struct_size = sizeof o,
                                    .block_size = block_size,
                                    .checksum_block = checksum_block,
                                    .large_file = large_file};
    larder_pack_result result;
    int rc = larder_index_files(root, index, &o, &result);
    if (rc < 0) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
}

TEST(index_files_block_sums_match_the_file)
{
    char root[512], index[512];
    snprintf(root, sizeof root, "%s", test_path("tree"));
    snprintf(index, sizeof index, "%s", test_path("tree/index.larder"));
    make_big(test_path("tree/big.bin"));
    test_write_file(test_path("tree/small.txt"), "hello\n", 6);
    index_tree(root, index, 0, 0, 0);

    size_t size, big_size;
    uint8_t *image = test_read_file(index, &size);
    uint8_t *big = test_read_file(test_path("tree/big.bin"), &big_size);
    CHECK_EQ(big_size, BIG);
    struct larder__index ix;
    CHECK_EQ(larder__index_parse(&ix, image, size, "index"), 0);
    CHECK_EQ(ix.version, 3);
    CHECK_EQ(ix.num_shards, 2);
    CHECK_EQ(ix.num_block_sums, BIG / MiB); /* 1 MiB blocks by default, only for big.bin */
    struct larder__shard shard;
    CHECK_EQ(larder__index_shard(&ix, 0, &shard), 0); /* names sorted: big.bin first */
    CHECK(strcmp(shard.name, "big.bin") == 0);
    CHECK_EQ(shard.sum_shift, 20);
    CHECK_EQ(shard.checksum, XXH3_64bits(big, big_size));
    for (uint64_t i = 0; i < BIG / MiB; i++)
        CHECK_EQ(larder__index_block_sum(&ix, i), XXH3_64bits(big + i * MiB, MiB));
    CHECK_EQ(larder__index_shard(&ix, 1, &shard), 0);
    CHECK(strcmp(shard.name, "small.txt") == 0);
    CHECK_EQ(shard.sum_shift, 0); /* small files: the whole checksum only */
    CHECK_EQ(shard.checksum, XXH3_64bits("hello\n", 6));
    free(image);
    free(big);
}

TEST(index_files_without_large_files_stays_version_1)
{
    test_write_file(test_path("tree/a.txt"), "a", 1);
    test_write_file(test_path("tree/b/c.bin"), "bc", 2);
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("tree"));
    index_tree(root, test_path("tree/index.larder"), 0, 0, 0);
    size_t size;
    uint8_t *image = test_read_file(test_path("tree/index.larder"), &size);
    CHECK_EQ(larder__le32(image + H_VERSION), 1); /* older readers keep reading it */
    CHECK_EQ(larder__le64(image + H_NUM_BLOCK_SUMS), 0);
    free(image);
}

/* ---- the reader's checks of the table -------------------------------------- */

/* A small version 3 index: one 10000-byte file in 4 KiB checksum blocks (3 of them). */
static uint8_t *small_v3(size_t *size)
{
    uint8_t data[10000];
    test_fill_random(data, sizeof data, 7);
    test_write_file(test_path("tree/f.bin"), data, sizeof data);
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("tree"));
    index_tree(root, test_path("tree/index.larder"), 4096, 1, 4096);
    return test_read_file(test_path("tree/index.larder"), size);
}

/* Parse `image` after fixing its header checksum; expect `code` and `needle` in the message. */
static void expect_parse_error(uint8_t *image, size_t size, int code, const char *needle)
{
    larder__put_le64(image + H_CHECKSUM, XXH3_64bits(image, H_CHECKSUM));
    struct larder__index ix;
    int rc = larder__index_parse(&ix, image, size, "v3.larder");
    if (rc != code || !strstr(larder_errmsg(), needle))
        fprintf(stderr, "    got %d: %s\n", rc, larder_errmsg());
    CHECK_EQ(rc, code);
    CHECK(strstr(larder_errmsg(), needle) != NULL);
}

TEST(index_block_sums_good_small_index_parses)
{
    size_t size;
    uint8_t *image = small_v3(&size);
    struct larder__index ix;
    CHECK_EQ(larder__index_parse(&ix, image, size, "v3.larder"), 0);
    CHECK_EQ(ix.num_block_sums, 3);
    struct larder__shard shard;
    CHECK_EQ(larder__index_shard(&ix, 0, &shard), 0);
    CHECK_EQ(shard.sum_shift, 12);
    free(image);
}

TEST(index_block_sums_count_must_match_the_shards)
{
    size_t size;
    uint8_t *image = small_v3(&size);
    /* 8 KiB blocks: the shard has 2, the table 3 */
    larder__put_le32(image + LARDER__INDEX_HEADER_SIZE + 28, 13);
    expect_parse_error(image, size, LARDER_EBADINDEX,
                       "2 checksum blocks, the block checksum table 3");
    /* one more entry announced than the file holds: the sizes disagree */
    larder__put_le32(image + LARDER__INDEX_HEADER_SIZE + 28, 12);
    larder__put_le64(image + H_NUM_BLOCK_SUMS, 4);
    expect_parse_error(image, size, LARDER_EBADINDEX, "truncated or corrupt");
    /* a count that overflows the layout */
    larder__put_le64(image + H_NUM_BLOCK_SUMS, UINT64_MAX / 4);
    expect_parse_error(image, size, LARDER_EBADINDEX, "overflow");
    free(image);
}

TEST(index_block_sums_truncated_table_refused)
{
    size_t size;
    uint8_t *image = small_v3(&size);
    /* the file cut inside the table (header untouched): counts give more bytes */
    struct larder__index ix;
    CHECK_EQ(larder__index_parse(&ix, image, size - 8, "v3.larder"), LARDER_EBADINDEX);
    CHECK(strstr(larder_errmsg(), "truncated or corrupt") != NULL);
    /* the table's last entry taken out and the header made to agree:
     * the shard has one block too many */
    uint64_t strings = size - larder__le64(image + H_STRINGS_SIZE);
    memmove(image + strings - 8, image + strings, size - strings);
    larder__put_le64(image + H_NUM_BLOCK_SUMS, 2);
    larder__put_le64(image + H_FILE_SIZE, size - 8);
    expect_parse_error(image, size - 8, LARDER_EBADINDEX, "more checksum blocks than the 2");
    free(image);
}

TEST(index_block_sums_bad_shift_refused)
{
    size_t size;
    uint8_t *image = small_v3(&size);
    larder__put_le32(image + LARDER__INDEX_HEADER_SIZE + 28, 40);
    expect_parse_error(image, size, LARDER_EBADINDEX, "checksum blocks of 2^40 bytes");
    larder__put_le32(image + LARDER__INDEX_HEADER_SIZE + 28, 11); /* below the 4 KiB blocks */
    expect_parse_error(image, size, LARDER_EBADINDEX, "checksum blocks of 2^11 bytes");
    free(image);
}

TEST(index_block_sums_need_version_3_and_the_flag)
{
    size_t size;
    uint8_t *image = small_v3(&size);
    larder__put_le32(image + H_VERSION, 2); /* a version 2 reader's view: flag 2 is unknown */
    expect_parse_error(image, size, LARDER_EBADINDEX, "unknown flags 0x2");
    larder__put_le32(image + H_VERSION, 3);
    larder__put_le32(image + H_FLAGS, 0); /* a count without the flag */
    expect_parse_error(image, size, LARDER_EBADINDEX, "without the flag");
    free(image);
}

/* ---- fills of a large file ------------------------------------------------------ */

static larder_dataset *open_big(const char *cache)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = cache};
    larder_dataset *d = NULL;
    int rc = larder_open(&d, test_path("tree/index.larder"), &o);
    if (rc < 0) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    return d;
}

static void setup_big(void)
{
    make_big(test_path("tree/big.bin"));
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("tree"));
    index_tree(root, test_path("tree/index.larder"), 0, 0, 0);
}

static uint64_t origin_bytes(larder_dataset *d)
{
    larder_stats stats;
    CHECK_EQ(larder_stats_get(d, &stats), 0);
    return stats.origin_bytes;
}

static uint64_t origin_requests(larder_dataset *d)
{
    larder_stats stats;
    CHECK_EQ(larder_stats_get(d, &stats), 0);
    return stats.origin_requests;
}

/* Read bytes [offset, offset + length) of big.bin through `d` and compare them with the file. */
static void read_and_compare(larder_dataset *d, const uint8_t *big, uint64_t offset,
                             uint64_t length)
{
    uint8_t *buf = malloc(length);
    CHECK(buf);
    int rc = larder__dataset_read_range(d, 0, offset, length, buf);
    if (rc < 0) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    CHECK(memcmp(buf, big + offset, length) == 0);
    free(buf);
}

TEST(index_files_range_reads_only_its_checksum_blocks)
{
    setup_big();
    size_t big_size;
    uint8_t *big = test_read_file(test_path("tree/big.bin"), &big_size);
    char cache[512];
    snprintf(cache, sizeof cache, "%s", test_path("cache"));
    larder_dataset *d = open_big(cache);
    /* 1 MiB on a checksum block's edge: that block alone */
    read_and_compare(d, big, 33 * MiB, MiB);
    CHECK_EQ(origin_bytes(d), MiB);
    /* 1 MiB across an edge: the two blocks it touches, not the 64 MiB file */
    read_and_compare(d, big, 40 * MiB + 12345, MiB);
    CHECK_EQ(origin_bytes(d), 3 * MiB);
    /* read again: from the cache, checked when kept */
    read_and_compare(d, big, 40 * MiB + 12345, MiB);
    read_and_compare(d, big, 33 * MiB + 1, 1000);
    CHECK_EQ(origin_bytes(d), 3 * MiB);
    /* a neighbouring range: only the block not yet cached */
    read_and_compare(d, big, 41 * MiB, 2 * MiB);
    CHECK_EQ(origin_bytes(d), 4 * MiB);
    larder_close(d);

    /* without a cache: still only the covering blocks, and checked */
    d = open_big("");
    read_and_compare(d, big, 7 * MiB + 5, 100);
    CHECK_EQ(origin_bytes(d), MiB);
    read_and_compare(d, big, BIG - 10, 10); /* the last block */
    CHECK_EQ(origin_bytes(d), 2 * MiB);
    larder_close(d);
    free(big);
}

TEST(index_files_whole_large_file_reads_through_blocks)
{
    setup_big();
    size_t big_size;
    uint8_t *big = test_read_file(test_path("tree/big.bin"), &big_size);
    char cache[512];
    snprintf(cache, sizeof cache, "%s", test_path("cache"));
    larder_dataset *d = open_big(cache);
    uint8_t *buf = malloc(BIG);
    CHECK_EQ(larder_read_sample(d, 0, buf, BIG), (int64_t)BIG);
    CHECK(memcmp(buf, big, BIG) == 0);
    CHECK_EQ(origin_bytes(d), BIG);
    CHECK_EQ(larder_read_sample(d, 0, buf, BIG), (int64_t)BIG); /* resident now */
    CHECK_EQ(origin_bytes(d), BIG);
    larder_close(d);
    /* staged (as the prefetcher and the daemon's warming do) in a fresh cache */
    snprintf(cache, sizeof cache, "%s", test_path("cache2"));
    d = open_big(cache);
    CHECK(!larder__fill_staged(larder__dataset_fill(d), 0));
    CHECK_EQ(larder__fill_stage(larder__dataset_fill(d), 0), 0);
    CHECK(larder__fill_staged(larder__dataset_fill(d), 0));
    CHECK_EQ(origin_bytes(d), BIG);
    memset(buf, 0, BIG);
    CHECK_EQ(larder_read_sample(d, 0, buf, BIG), (int64_t)BIG);
    CHECK(memcmp(buf, big, BIG) == 0);
    CHECK_EQ(origin_bytes(d), BIG);
    larder_close(d);
    free(buf);
    free(big);
}

TEST(index_files_corrupt_block_fails_only_its_range)
{
    setup_big();
    size_t big_size;
    uint8_t *big = test_read_file(test_path("tree/big.bin"), &big_size);
    /* damage the origin after indexing: one byte inside block 20 */
    int fd = open(test_path("tree/big.bin"), O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "!", 1, (off_t)(20 * MiB + 777)) == 1);
    close(fd);
    char cache[512];
    snprintf(cache, sizeof cache, "%s", test_path("cache"));
    larder_dataset *d = open_big(cache);
    uint8_t buf[4096];
    /* a range inside the bad block: refetched from the origin once, then refused */
    CHECK_EQ(larder__dataset_read_range(d, 0, 20 * MiB + 4096, sizeof buf, buf), LARDER_ECHECKSUM);
    const char *message = larder_errmsg();
    if (!strstr(message, "big.bin") || !strstr(message, "bytes 20971520+1048576"))
        fprintf(stderr, "    %s\n", message);
    CHECK(strstr(message, "big.bin") != NULL);
    CHECK(strstr(message, "bytes 20971520+1048576") != NULL);
    larder_stats stats;
    CHECK_EQ(larder_stats_get(d, &stats), 0);
    CHECK(stats.refetches >= 1);
    /* the blocks on either side read, and match the file */
    read_and_compare(d, big, 19 * MiB, MiB);
    read_and_compare(d, big, 21 * MiB, MiB);
    /* the whole file cannot be read right */
    uint8_t *whole = malloc(BIG);
    CHECK_EQ(larder_read_sample(d, 0, whole, BIG), LARDER_ECHECKSUM);
    free(whole);
    larder_close(d);

    /* without a cache, the same */
    d = open_big("");
    CHECK_EQ(larder__dataset_read_range(d, 0, 20 * MiB, 10, buf), LARDER_ECHECKSUM);
    CHECK(strstr(larder_errmsg(), "bytes 20971520+1048576") != NULL);
    read_and_compare(d, big, 22 * MiB, 10);
    larder_close(d);
    free(big);
}

static void count_problem(void *userdata, uint64_t id, int error, const char *message)
{
    (void)id, (void)error;
    int *n = userdata;
    if (strstr(message, "checksum block 20 (bytes 20971520+1048576)")) (*n)++;
}

TEST(index_files_verify_names_the_bad_block)
{
    setup_big();
    int fd = open(test_path("tree/big.bin"), O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "!", 1, (off_t)(20 * MiB + 777)) == 1);
    close(fd);
    larder_dataset *d = open_big("");
    int named = 0;
    /* the block, the sample and the shard */
    CHECK_EQ(larder_verify(d, count_problem, NULL, &named), 3);
    CHECK_EQ(named, 1);
    larder_close(d);
}

TEST(index_files_cache_blocks_larger_than_checksum_blocks)
{
    setup_big();
    size_t big_size;
    uint8_t *big = test_read_file(test_path("tree/big.bin"), &big_size);
    /* damage checksum block 21; blocks 20-23 share one 4 MiB cache block */
    int fd = open(test_path("tree/big.bin"), O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "!", 1, (off_t)(21 * MiB + 5)) == 1);
    close(fd);
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = test_path("cache"),
                             .block_size = 4u << 20};
    larder_dataset *d = NULL;
    CHECK_EQ(larder_open(&d, test_path("tree/index.larder"), &o), 0);
    /* 1 MiB inside a sound 4 MiB cache block: that cache block is read */
    read_and_compare(d, big, 8 * MiB + 100, MiB);
    CHECK_EQ(origin_bytes(d), 4 * MiB);
    /* block 20 is sound and served, though its cache block holds bad block 21 ... */
    read_and_compare(d, big, 20 * MiB, MiB);
    /* ... which is not kept: reading block 20 again goes back to the origin */
    uint64_t before = origin_bytes(d);
    read_and_compare(d, big, 20 * MiB, MiB);
    CHECK(origin_bytes(d) > before);
    uint8_t buf[16];
    CHECK_EQ(larder__dataset_read_range(d, 0, 21 * MiB, sizeof buf, buf), LARDER_ECHECKSUM);
    CHECK(strstr(larder_errmsg(), "checksum block 21 (bytes 22020096+1048576)") != NULL);
    larder_close(d);
    free(big);
}

/* 64 KiB checksum blocks (--checksum-block 64K): a small range costs the
 * origin the 64 KiB around it; an h5py row's 286000 bytes, the five blocks
 * it touches in one origin read (a fill reads its run of missing blocks at
 * once), not five; and a damaged byte fails its 64 KiB block alone, named
 * with its bytes, the blocks beside it still read. */
TEST(index_files_64k_blocks_read_at_once_and_fail_alone)
{
    make_big(test_path("tree/big.bin"));
    char root[512];
    snprintf(root, sizeof root, "%s", test_path("tree"));
    index_tree(root, test_path("tree/index.larder"), KiB64, 0, 0);
    size_t big_size;
    uint8_t *big = test_read_file(test_path("tree/big.bin"), &big_size);
    char cache[512];
    snprintf(cache, sizeof cache, "%s", test_path("cache"));
    larder_dataset *d = open_big(cache);
    read_and_compare(d, big, 33 * MiB + 1, 1000);
    CHECK_EQ(origin_bytes(d), KiB64);
    CHECK_EQ(origin_requests(d), 1);
    /* 286000 bytes from 7 MiB + 100: up to 7 MiB + 286100, blocks 112-116 */
    read_and_compare(d, big, 7 * MiB + 100, 286000);
    CHECK_EQ(origin_bytes(d), KiB64 + 5 * KiB64);
    CHECK_EQ(origin_requests(d), 2);
    /* across three blocks, the middle one resident: the two either side */
    read_and_compare(d, big, 33 * MiB - KiB64, 3 * KiB64);
    CHECK_EQ(origin_bytes(d), 6 * KiB64 + 2 * KiB64);
    larder_close(d);

    int fd = open(test_path("tree/big.bin"), O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "!", 1, (off_t)(20 * MiB + 70000)) == 1); /* in block 321 */
    close(fd);
    snprintf(cache, sizeof cache, "%s", test_path("cache2"));
    d = open_big(cache);
    uint8_t buf[100];
    CHECK_EQ(larder__dataset_read_range(d, 0, 20 * MiB + 65536, sizeof buf, buf), LARDER_ECHECKSUM);
    if (!strstr(larder_errmsg(), "checksum block 321 (bytes 21037056+65536)"))
        fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK(strstr(larder_errmsg(), "checksum block 321 (bytes 21037056+65536)") != NULL);
    read_and_compare(d, big, 20 * MiB, KiB64);
    read_and_compare(d, big, 20 * MiB + 2 * KiB64, KiB64);
    larder_close(d);
    free(big);
}
