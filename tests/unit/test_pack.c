/*
 * test_pack.c - larder_pack and larder_index_shards end to end through
 * the public API: every byte comes back, output is deterministic, bad
 * sources fail before anything is written, and injected I/O faults
 * surface as errors (or are retried) without leaving debris.
 */
#include "larder_pack.h"
#include "sys.h"
#include "test.h"

#include <errno.h>
#include <unistd.h>

/* A tree of n samples: KEY.jpg (random, varied size) and KEY.cls. */
static void make_tree(const char *dir, int n)
{
    for (int i = 0; i < n; i++) {
        char path[512], data[20000];
        size_t size = (size_t)(i * 337 % 19000) + 1;
        test_fill_random(data, size, (uint64_t)i);
        snprintf(path, sizeof path, "%s/part%d/s%04d.jpg", dir, i % 3, i);
        test_write_file(path, data, size);
        int len = snprintf(data, sizeof data, "%d\n", i);
        snprintf(path, sizeof path, "%s/part%d/s%04d.cls", dir, i % 3, i);
        test_write_file(path, data, (size_t)len);
    }
}

/* Every field of every sample equals its source file. */
static void check_against_tree(const char *index, const char *dir, int n)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .verify_checksums = 1};
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, index, &o), 0);
    CHECK_EQ(larder_num_samples(d), n);
    CHECK_EQ(larder_verify(d, NULL, NULL, NULL), 0);
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "part%d/s%04d", i % 3, i);
        int64_t id = larder_find_key(d, key);
        CHECK(id >= 0);
        const char *exts[] = {"jpg", "cls"};
        for (int e = 0; e < 2; e++) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s.%s", dir, key, exts[e]);
            size_t size;
            uint8_t *want = test_read_file(path, &size);
            int f = larder_find_field(d, (uint64_t)id, exts[e]);
            CHECK(f >= 0);
            uint8_t buf[20000];
            CHECK_EQ(larder_read_field(d, (uint64_t)id, (uint32_t)f, buf, sizeof buf), size);
            CHECK(memcmp(buf, want, size) == 0);
            free(want);
        }
        larder_sample_info s;
        CHECK_EQ(larder_sample_info_get(d, (uint64_t)id, &s), 0);
        uint8_t small[4];
        if (s.length > sizeof small)
            CHECK_EQ(larder_read_sample(d, (uint64_t)id, small, sizeof small), LARDER_ETOOSMALL);
    }
    larder_close(d);
}

static larder_pack_options options(int format, uint64_t shard_size, int jobs)
{
    larder_pack_options o = {.version = LARDER_PACK_OPTIONS_VERSION,
                             .format = format,
                             .shard_size = shard_size,
                             .shuffle = 1,
                             .shuffle_seed = 11,
                             .jobs = jobs};
    return o;
}

TEST(pack_tree_tar_and_flat)
{
    make_tree(test_path("src"), 60);
    const char *sources[] = {test_path("src")};
    larder_pack_options o = options(LARDER_FORMAT_TAR, 64 * 1024, 2);
    larder_pack_result r;
    CHECK_EQ(larder_pack(sources, 1, test_path("tar"), &o, &r), 0);
    CHECK_EQ(r.num_samples, 60);
    CHECK(r.num_shards > 5);
    check_against_tree(test_path("tar/index.larder"), test_path("src"), 60);
    /* GNU tar lists the members by their WebDataset names */
    CHECK_EQ(test_sh("cd %s && for s in shard-*.tar; do tar tf $s; done | sort > ../list.txt && "
                     "cd ../src && find . -type f | sed 's|^./||' | sort > ../want.txt && "
                     "cmp ../list.txt ../want.txt",
                     test_path("tar")),
             0);
    o.format = LARDER_FORMAT_FLAT;
    CHECK_EQ(larder_pack(sources, 1, test_path("flat"), &o, &r), 0);
    check_against_tree(test_path("flat/index.larder"), test_path("src"), 60);
    CHECK_EQ(access(test_path("flat/shard-000000.bin"), R_OK), 0);
}

TEST(pack_is_deterministic)
{
    make_tree(test_path("src"), 40);
    const char *sources[] = {test_path("src")};
    larder_pack_result a, b, c, d;
    larder_pack_options o = options(LARDER_FORMAT_TAR, 50000, 1);
    CHECK_EQ(larder_pack(sources, 1, test_path("a"), &o, &a), 0);
    o.jobs = 4;
    CHECK_EQ(larder_pack(sources, 1, test_path("b"), &o, &b), 0);
    CHECK(strcmp(a.dataset_id, b.dataset_id) == 0);
    CHECK_EQ(
        test_sh("cmp -s %s/shard-000001.tar %s/shard-000001.tar", test_path("a"), test_path("b")),
        0);
    o.shuffle_seed = 12;
    CHECK_EQ(larder_pack(sources, 1, test_path("c"), &o, &c), 0);
    CHECK(strcmp(a.dataset_id, c.dataset_id) != 0);
    o.shuffle = 0;
    CHECK_EQ(larder_pack(sources, 1, test_path("d"), &o, &d), 0);
    larder_dataset *ds;
    CHECK_EQ(larder_open(&ds, test_path("d/index.larder"), NULL), 0);
    larder_sample_info s0, s1;
    CHECK_EQ(larder_sample_info_get(ds, 0, &s0), 0);
    CHECK_EQ(larder_sample_info_get(ds, 1, &s1), 0);
    CHECK(strcmp(s0.key, "part0/s0000") == 0); /* no shuffle: sorted source order */
    CHECK(strcmp(s1.key, "part0/s0003") == 0);
    larder_close(ds);
}

TEST(pack_repacks_tar_sources_and_indexes_in_place)
{
    make_tree(test_path("src"), 30);
    /* plain `tar cf DIR` does not keep a key's members together: pack regroups them */
    CHECK_EQ(test_sh("cd %s && tar cf ../one.tar part0 part1 && tar cf ../two.tar part2 && "
                     "tar --sort=name -cf ../one-sorted.tar part0 part1 && "
                     "tar --sort=name -cf ../two-sorted.tar part2",
                     test_path("src")),
             0);
    char one[4096], two[4096];
    snprintf(one, sizeof one, "%s", test_path("one.tar"));
    snprintf(two, sizeof two, "%s", test_path("two.tar"));
    const char *tars[] = {one, two};
    larder_pack_options o = options(LARDER_FORMAT_TAR, 0, 0);
    larder_pack_result r;
    CHECK_EQ(larder_pack(tars, 2, test_path("re"), &o, &r), 0);
    CHECK_EQ(r.num_samples, 30);
    check_against_tree(test_path("re/index.larder"), test_path("src"), 30);
    /* indexing the same tars in place, from another directory */
    CHECK_EQ(test_sh("mkdir -p %s", test_path("idx")), 0);
    const char *sorted[] = {test_path("one-sorted.tar"), test_path("two-sorted.tar")};
    CHECK_EQ(larder_index_shards(sorted, 2, test_path("idx/index.larder"), 0, NULL, NULL, &r), 0);
    CHECK_EQ(r.num_shards, 2);
    check_against_tree(test_path("idx/index.larder"), test_path("src"), 30);
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("idx/index.larder"), NULL), 0);
    larder_sample_info s;
    CHECK_EQ(larder_sample_info_get(d, 0, &s), 0);
    /* outside the index's directory: the index records their directory
     * as its base (version 2), since no name may climb out with ".." */
    CHECK(strcmp(s.shard_name, "one-sorted.tar") == 0);
    larder_dataset_info info;
    CHECK_EQ(larder_dataset_info_get(d, &info), 0);
    CHECK_EQ(info.version, 2);
    larder_close(d);
    /* in place, scattered members are an error that says why */
    CHECK_EQ(larder_index_shards(tars, 1, test_path("idx/bad.larder"), 0, NULL, NULL, &r),
             LARDER_EDUPKEY);
    CHECK(strstr(larder_errmsg(), "together") != NULL);
    CHECK(access(test_path("idx/bad.larder"), F_OK) != 0);
}

TEST(pack_bad_sources_write_nothing)
{
    make_tree(test_path("src"), 5);
    CHECK_EQ(test_sh("cd %s && tar cf ../a.tar part0 && tar cf ../b.tar part0 && mkdir ../empty",
                     test_path("src")),
             0);
    larder_pack_options o = options(LARDER_FORMAT_TAR, 0, 0);
    const char *dup[] = {test_path("a.tar"), test_path("b.tar")};
    CHECK_EQ(larder_pack(dup, 2, test_path("out"), &o, NULL), LARDER_EDUPKEY);
    CHECK(strstr(larder_errmsg(), "a.tar") != NULL);
    CHECK(strstr(larder_errmsg(), "b.tar") != NULL);
    CHECK(strstr(larder_errmsg(), "part0/s000") != NULL);
    CHECK(access(test_path("out"), F_OK) != 0); /* nothing written */
    const char *empty[] = {test_path("empty")};
    CHECK_EQ(larder_pack(empty, 1, test_path("out"), &o, NULL), LARDER_EEMPTY);
    CHECK(strstr(larder_errmsg(), "empty") != NULL);
    const char *missing[] = {test_path("nope")};
    CHECK_EQ(larder_pack(missing, 1, test_path("out"), &o, NULL), -ENOENT);
    CHECK(strstr(larder_errmsg(), "nope") != NULL);
    test_write_file(test_path("junk.bin"), "this is not a tar", 17);
    const char *junk[] = {test_path("junk.bin")};
    CHECK(larder_pack(junk, 1, test_path("out"), &o, NULL) < 0);
    CHECK(strstr(larder_errmsg(), "junk.bin") != NULL);
    CHECK(access(test_path("out"), F_OK) != 0);
    CHECK_EQ(larder_pack(NULL, 0, test_path("out"), &o, NULL), LARDER_EUSAGE);
    o.version = 99;
    CHECK_EQ(larder_pack(empty, 1, test_path("out"), &o, NULL), LARDER_EUSAGE);
}

/* ---- fault injection ---------------------------------------------------- */

static int faults_left;
static int fault_errno;
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);

static ssize_t failing_pwrite(int fd, const void *buf, size_t count, off_t offset)
{
    if (faults_left > 0 && count > 1000) {
        faults_left--;
        errno = fault_errno;
        return -1;
    }
    return real_pwrite(fd, buf, count, offset);
}

/* EINTR, then short transfers: must be retried to the same result. */
static ssize_t choppy_pwrite(int fd, const void *buf, size_t count, off_t offset)
{
    static int n;
    if (n++ % 3 == 0) {
        errno = EINTR;
        return -1;
    }
    return real_pwrite(fd, buf, count > 100 ? count / 2 : count, offset);
}

static ssize_t choppy_pread(int fd, void *buf, size_t count, off_t offset)
{
    static int n;
    if (n++ % 3 == 0) {
        errno = EINTR;
        return -1;
    }
    return real_pread(fd, buf, count > 100 ? count / 3 : count, offset);
}

TEST(pack_disk_full_fails_cleanly)
{
    make_tree(test_path("src"), 20);
    const char *sources[] = {test_path("src")};
    larder_pack_options o = options(LARDER_FORMAT_TAR, 20000, 2);
    real_pwrite = larder__sys.pwrite;
    larder__sys.pwrite = failing_pwrite;
    faults_left = 1;
    fault_errno = ENOSPC;
    CHECK_EQ(larder_pack(sources, 1, test_path("out"), &o, NULL), -ENOSPC);
    larder__sys.pwrite = real_pwrite;
    CHECK(strstr(larder_errmsg(), "No space left") != NULL);
    CHECK(strstr(larder_errmsg(), "shard-") != NULL);
    CHECK(access(test_path("out/index.larder"), F_OK) != 0);
    CHECK_EQ(test_sh("ls %s | grep -q tmp", test_path("out")), 1); /* no temporary files left */
}

TEST(pack_and_read_survive_eintr_and_short_io)
{
    make_tree(test_path("src"), 20);
    const char *sources[] = {test_path("src")};
    larder_pack_options o = options(LARDER_FORMAT_TAR, 30000, 1);
    larder_pack_result clean, choppy;
    CHECK_EQ(larder_pack(sources, 1, test_path("clean"), &o, &clean), 0);
    real_pwrite = larder__sys.pwrite;
    real_pread = larder__sys.pread;
    larder__sys.pwrite = choppy_pwrite;
    larder__sys.pread = choppy_pread;
    CHECK_EQ(larder_pack(sources, 1, test_path("choppy"), &o, &choppy), 0);
    CHECK(strcmp(clean.dataset_id, choppy.dataset_id) == 0);
    check_against_tree(test_path("choppy/index.larder"), test_path("src"), 20);
    larder__sys.pwrite = real_pwrite;
    larder__sys.pread = real_pread;
}

TEST(read_reports_shard_damage)
{
    make_tree(test_path("src"), 10);
    const char *sources[] = {test_path("src")};
    larder_pack_options o = options(LARDER_FORMAT_TAR, 0, 1);
    CHECK_EQ(larder_pack(sources, 1, test_path("out"), &o, NULL), 0);
    /* flip a byte in the middle of the shard: one sample goes bad */
    CHECK_EQ(test_sh("cd %s && printf 'Z' | dd of=shard-000000.tar bs=1 seek=30000 conv=notrunc "
                     "2>/dev/null",
                     test_path("out")),
             0);
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION, .verify_checksums = 1};
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("out/index.larder"), &oo), 0);
    int bad = 0;
    for (uint64_t i = 0; i < larder_num_samples(d); i++) {
        uint8_t buf[65536];
        int64_t n = larder_read_sample(d, i, buf, sizeof buf);
        if (n == LARDER_ECHECKSUM) {
            bad++;
            CHECK(strstr(larder_errmsg(), "checksum") != NULL);
        } else {
            CHECK(n > 0);
        }
    }
    CHECK_EQ(bad, 1);
    CHECK_EQ(larder_verify(d, NULL, NULL, NULL), 2); /* the sample and the shard checksum */
    larder_close(d);
    /* a truncated shard: the samples past the cut are reported */
    CHECK_EQ(test_sh("truncate -s 20000 %s", test_path("out/shard-000000.tar")), 0);
    CHECK_EQ(larder_open(&d, test_path("out/index.larder"), &oo), 0);
    CHECK(larder_verify(d, NULL, NULL, NULL) >= 2);
    uint8_t buf[65536];
    larder_sample_info s;
    uint64_t last = larder_num_samples(d) - 1;
    CHECK_EQ(larder_sample_info_get(d, last, &s), 0);
    CHECK_EQ(larder_read_sample(d, last, buf, sizeof buf), LARDER_ETRUNCATED);
    CHECK(strstr(larder_errmsg(), s.key) != NULL);
    larder_close(d);
}
