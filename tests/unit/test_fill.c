/*
 * test_fill.c - the fill engine keeps only checked bytes: raw ranges (what
 * a daemon serves and borrows) are checked against the checksums of the
 * samples they belong to, a corrupt origin stages nothing, blocks shared
 * with unread samples are checked later without a second fetch, a reboot
 * makes every resident block suspect, and overlapping samples are refused.
 * Staging (a NULL buffer) keeps checked bytes and copies none out, also
 * from several threads into one file at once.  Expected bytes come from
 * the source files written by the test.
 */
#include "larder_pack.h"
#include "dataset.h"
#include "fill.h"
#include "index.h"
#include "priority.h"
#include "sys.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

/* A flat dataset of n samples of varied sizes, unshuffled, in DIR/packed. */
static void make_flat(int n, uint64_t shard_size)
{
    char path[4096];
    for (int i = 0; i < n; i++) {
        static uint8_t data[200000];
        size_t size = (size_t)(i * 7919 % 90000) + 100;
        test_fill_random(data, size, (uint64_t)i + 7);
        snprintf(path, sizeof path, "%s/src/s%04d.bin", test_dir(), i);
        test_write_file(path, data, size);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = LARDER_FORMAT_FLAT,
                             .shard_size = shard_size,
                             .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
}

static larder_dataset *open_with_cache(void)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = test_path("cache")};
    larder_dataset *d = NULL;
    int rc = larder_open(&d, test_path("packed/index.larder"), &o);
    if (rc) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    return d;
}

/* The bytes of shard `shard` of the packed dataset, as the test wrote them. */
static uint8_t *shard_bytes(larder_dataset *d, uint32_t shard, size_t *size)
{
    larder_sample_info s;
    for (uint64_t i = 0; i < larder_num_samples(d); i++) {
        CHECK_EQ(larder_sample_info_get(d, i, &s), 0);
        if (s.shard == shard) break;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/packed/%s", test_dir(), s.shard_name);
    return test_read_file(path, size);
}

static larder_stats stats_of(larder_dataset *d)
{
    larder_stats s;
    CHECK_EQ(larder_stats_get(d, &s), 0);
    return s;
}

TEST(fill_raw_ranges_are_checked)
{
    make_flat(40, 1 << 20);
    larder_dataset *d = open_with_cache();
    size_t size;
    uint8_t *want = shard_bytes(d, 0, &size);
    larder_sample_info s;
    CHECK_EQ(larder_sample_info_get(d, 5, &s), 0);
    CHECK_EQ(s.shard, 0);
    /* one wrong byte at the origin, inside sample 5 */
    CHECK_EQ(test_sh("printf 'Z' | dd of=%s/packed/%s bs=1 seek=%llu conv=notrunc 2>/dev/null",
                     test_dir(), s.shard_name, (unsigned long long)(s.offset + s.length / 2)),
             0);
    static uint8_t buf[1 << 20];
    /* a block-aligned run around it (what a peer borrows), and a few bytes inside it */
    uint64_t block = s.offset / 65536 * 65536;
    CHECK_EQ(larder__dataset_read_range(d, 0, block, 65536, buf), LARDER_ECHECKSUM);
    CHECK(strstr(larder_errmsg(), s.key) != NULL);
    CHECK_EQ(larder__dataset_read_range(d, 0, s.offset + 1, 10, buf), LARDER_ECHECKSUM);
    /* nothing of it was kept */
    int fd = -1;
    CHECK(larder__dataset_stage_range(d, 0, s.offset, s.length, &fd) < 0);
    larder_close(d);
    d = open_with_cache();
    CHECK(!larder__dataset_staged(d, 5));
    /* once the origin is right again, so are the ranges, and they are kept */
    CHECK_EQ(test_sh("printf '%c' | dd of=%s/packed/%s bs=1 seek=%llu conv=notrunc 2>/dev/null",
                     want[s.offset + s.length / 2], test_dir(), s.shard_name,
                     (unsigned long long)(s.offset + s.length / 2)),
             0);
    CHECK_EQ(larder__dataset_read_range(d, 0, s.offset + 1, 10, buf), 0);
    CHECK(memcmp(buf, want + s.offset + 1, 10) == 0);
    CHECK(larder__dataset_staged(d, 5));
    CHECK_EQ(larder__dataset_read_range(d, 0, block, 65536, buf), 0);
    CHECK(memcmp(buf, want + block, 65536) == 0);
    free(want);
    larder_close(d);
}

TEST(fill_reads_each_byte_once)
{
    make_flat(60, 4 << 20);
    larder_dataset *d = open_with_cache();
    size_t size;
    uint8_t *want = shard_bytes(d, 0, &size);
    /* every 64 KiB block once, as a peer would borrow them, in a scattered order */
    static uint8_t buf[65536];
    uint64_t blocks = (size + 65535) / 65536;
    for (uint64_t k = 0; k < blocks; k++) {
        uint64_t b = k * 7 % blocks;
        uint64_t length = size - b * 65536 < 65536 ? size - b * 65536 : 65536;
        CHECK_EQ(larder__dataset_read_range(d, 0, b * 65536, length, buf), 0);
        CHECK(memcmp(buf, want + b * 65536, length) == 0);
    }
    /* blocks shared with samples not yet read were kept suspect and
     * checked later from the cache: the origin gave each byte once */
    larder_stats st = stats_of(d);
    if (st.origin_bytes > size)
        fprintf(stderr, "    origin %llu bytes for a %zu-byte shard\n",
                (unsigned long long)st.origin_bytes, size);
    CHECK(st.origin_bytes <= size);
    uint64_t requests = st.origin_requests;
    for (uint64_t id = 0; id < larder_num_samples(d); id++)
        CHECK(larder__dataset_staged(d, id));
    static uint8_t whole[4 << 20];
    CHECK_EQ(larder__dataset_read_range(d, 0, 0, size, whole), 0);
    CHECK(memcmp(whole, want, size) == 0);
    CHECK_EQ(stats_of(d).origin_requests, requests); /* all of it from the cache */
    free(want);
    larder_close(d);
}

/* A boot id of the test's choosing, for the cache's reboot check. */
static const char *fake_boot_id;
static int (*real_open)(const char *, int, mode_t);

static int open_with_boot_id(const char *path, int flags, mode_t mode)
{
    if (fake_boot_id && strcmp(path, "/proc/sys/kernel/random/boot_id") == 0)
        return real_open(fake_boot_id, flags, mode);
    return real_open(path, flags, mode);
}

TEST(fill_power_loss_leaves_nothing_trusted)
{
    make_flat(30, 1 << 20);
    real_open = larder__sys.open;
    larder__sys.open = open_with_boot_id;
    test_write_file(test_path("boot-a"), "aaaa-boot\n", 10);
    test_write_file(test_path("boot-b"), "bbbb-boot\n", 10);
    fake_boot_id = test_path("boot-a");
    larder_dataset *d = open_with_cache();
    size_t size;
    uint8_t *want = shard_bytes(d, 0, &size);
    static uint8_t buf[1 << 20];
    CHECK_EQ(larder__dataset_read_range(d, 0, 0, size, buf), 0); /* all staged */
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    larder_close(d);
    /* the power fails: the bits reached the disk, the data of a block did not */
    CHECK_EQ(test_sh("fallocate --punch-hole --offset 65536 --length 65536 %s/cache/%s/000000.data",
                     test_dir(), info.dataset_id),
             0);
    fake_boot_id = test_path("boot-b"); /* and the machine comes back */
    d = open_with_cache();
    int fd = -1;
    /* neither a raw range, nor zero-copy, nor a sample serves the hole */
    CHECK_EQ(larder__dataset_read_range(d, 0, 65536, 65536, buf), 0);
    CHECK(memcmp(buf, want + 65536, 65536) == 0);
    CHECK_EQ(larder__dataset_stage_range(d, 0, 0, size, &fd), 0);
    uint8_t *sent = malloc(size);
    CHECK_EQ(pread(fd, sent, size, 0), (ssize_t)size);
    CHECK(memcmp(sent, want, size) == 0);
    for (uint64_t id = 0; id < larder_num_samples(d); id++)
        CHECK(larder_read_sample(d, id, buf, sizeof buf) > 0);
    CHECK(stats_of(d).origin_bytes > 0); /* the hole was fetched again */
    free(sent);
    free(want);
    larder_close(d);
    larder__sys.open = real_open;
}

TEST(fill_refuses_overlapping_samples)
{
    /* two samples sharing bytes 50-99 of one flat shard */
    test_write_file(test_path("shard.bin"),
                    "0123456789012345678901234567890123456789"
                    "0123456789012345678901234567890123456789"
                    "01234567890123456789",
                    100);
    struct larder__index_builder *b;
    CHECK_EQ(larder__index_builder_new(&b, 0), 0);
    CHECK_EQ(larder__index_builder_add_shard(b, "shard.bin", LARDER_FORMAT_FLAT), 0);
    larder__index_builder_set_shard(b, 0, 100, 0);
    CHECK_EQ(larder__index_builder_add_sample(b, 0, 0, 100, 0, "a", 1, NULL, 0), 0);
    CHECK_EQ(larder__index_builder_add_sample(b, 0, 50, 50, 0, "b", 1, NULL, 0), 1);
    CHECK_EQ(test_sh("mkdir -p %s/packed", test_dir()), 0);
    CHECK_EQ(larder__index_builder_write(b, test_path("packed/index.larder"), NULL), 0);
    larder__index_builder_free(b);
    CHECK_EQ(test_sh("mv %s %s/packed/", test_path("shard.bin"), test_dir()), 0);
    larder_dataset *d = open_with_cache();
    uint8_t buf[100];
    CHECK_EQ(larder_read_sample(d, 1, buf, sizeof buf), LARDER_EBADINDEX);
    CHECK(strstr(larder_errmsg(), "overlap") != NULL);
    CHECK_EQ(larder__dataset_read_range(d, 0, 0, 10, buf), LARDER_EBADINDEX);
    CHECK_EQ(larder_validate(d), LARDER_EBADINDEX);
    larder_close(d);
}

TEST(fill_an_index_claiming_another_id_never_reaches_its_cache)
{
    make_flat(20, 1 << 20);
    larder_dataset *d = open_with_cache();
    static uint8_t buf[1 << 20];
    for (uint64_t id = 0; id < larder_num_samples(d); id++)
        CHECK(larder_read_sample(d, id, buf, sizeof buf) > 0);
    uint64_t resident = stats_of(d).resident_bytes;
    larder_close(d);
    /* the same index with one sample record changed, its id kept, its
     * header checksum made right again */
    size_t size;
    uint8_t *image = test_read_file(test_path("packed/index.larder"), &size);
    image[128 + 32 + 16] ^= 0xff; /* sample 0's checksum (after the one shard record) */
    extern uint64_t larder_test_header_checksum(const uint8_t *);
    larder__put_le64(image + 120, larder_test_header_checksum(image));
    test_write_file(test_path("packed/stolen.larder"), image, size);
    free(image);
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .cache_dir = test_path("cache")};
    larder_dataset *stolen = NULL;
    CHECK_EQ(larder_open(&stolen, test_path("packed/stolen.larder"), &o), LARDER_ECHECKSUM);
    CHECK(strstr(larder_errmsg(), "content hash") != NULL);
    /* without a cache it opens (its records are read as they are used) */
    o.cache_dir = "";
    CHECK_EQ(larder_open(&stolen, test_path("packed/stolen.larder"), &o), 0);
    larder_close(stolen);
    d = open_with_cache();
    CHECK_EQ(stats_of(d).resident_bytes, resident); /* the real cache is as it was */
    larder_close(d);
}

struct stager {
    larder_dataset *d;
    uint64_t from, to;
    int rc;
};

static void *stage_part(void *arg)
{
    struct stager *s = arg;
    struct larder__fill *fill = larder__dataset_fill(s->d);
    for (uint64_t at = s->from; at < s->to && s->rc == 0; at += 3 * 65536) {
        uint64_t n = s->to - at < 3 * 65536 ? s->to - at : 3 * 65536;
        s->rc = larder__fill_range_at(fill, 0, at, n, LARDER__WARM, NULL);
    }
    return NULL;
}

TEST(fill_staging_keeps_checked_bytes_and_copies_none_out)
{
    make_flat(120, 2 << 20); /* shards of ~2 MB */
    larder_dataset *d = open_with_cache();
    struct larder__fill *fill = larder__dataset_fill(d);
    size_t size;
    uint8_t *want = shard_bytes(d, 0, &size);
    /* shard 0 staged by 8 threads at once, each its own part of the one
     * data file (their writes into it take turns: larder__writing) */
    struct stager parts[8];
    pthread_t threads[8];
    uint64_t part = (size / 8 + 65535) / 65536 * 65536;
    for (int i = 0; i < 8; i++) {
        uint64_t from = part * (uint64_t)i < size ? part * (uint64_t)i : size;
        uint64_t to = from + part < size ? from + part : size;
        parts[i] = (struct stager){d, from, to, 0};
        CHECK_EQ(pthread_create(&threads[i], NULL, stage_part, &parts[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(pthread_join(threads[i], NULL), 0);
        CHECK_EQ(parts[i].rc, 0);
    }
    larder_sample_info s;
    for (uint64_t id = 0; id < larder_num_samples(d); id++) {
        CHECK_EQ(larder_sample_info_get(d, id, &s), 0);
        if (s.shard == 0) CHECK(larder__dataset_staged(d, id));
    }
    /* staged again: resident, nothing fetched; then read, all from the cache */
    uint64_t requests = stats_of(d).origin_requests;
    CHECK_EQ(larder__fill_range_at(fill, 0, 0, size, LARDER__WARM, NULL), 0);
    static uint8_t whole[4 << 20];
    CHECK_EQ(larder__dataset_read_range(d, 0, 0, size, whole), 0);
    CHECK(memcmp(whole, want, size) == 0);
    CHECK_EQ(stats_of(d).origin_requests, requests);
    /* a wrong byte at the origin: staging fails and keeps nothing of it */
    uint64_t id = 0;
    do
        CHECK_EQ(larder_sample_info_get(d, id++, &s), 0);
    while (s.shard != 1);
    CHECK_EQ(test_sh("printf 'Z' | dd of=%s/packed/%s bs=1 seek=%llu conv=notrunc 2>/dev/null",
                     test_dir(), s.shard_name, (unsigned long long)(s.offset + s.length / 2)),
             0);
    CHECK_EQ(larder__fill_range_at(fill, 1, s.offset, s.length, LARDER__WARM, NULL),
             LARDER_ECHECKSUM);
    CHECK(!larder__dataset_staged(d, id - 1));
    larder_close(d);
    /* with no cache there is nowhere to stage */
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = ""};
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &o), 0);
    CHECK_EQ(larder__fill_range_at(larder__dataset_fill(d), 0, 0, 100, LARDER__WARM, NULL),
             LARDER_EUSAGE);
    larder_close(d);
    free(want);
}
