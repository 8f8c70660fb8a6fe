/*
 * test_origin.c - shard name resolution and file origins (HTTP origins are
 * exercised against nginx in tests/cli/index_http.sh).
 */
#include "origin.h"
#include "sys.h"
#include "test.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

static void expect_resolve(const char *index, const char *name, const char *want)
{
    char *got = larder__resolve(index, name);
    if (strcmp(got, want) != 0) fprintf(stderr, "    resolve(%s, %s) = %s\n", index, name, got);
    CHECK(strcmp(got, want) == 0);
    free(got);
}

TEST(origin_resolve_names)
{
    expect_resolve("/data/set/index.larder", "shard-0.tar", "/data/set/shard-0.tar");
    expect_resolve("/data/set/index.larder", "../raw/a.tar", "/data/set/../raw/a.tar");
    expect_resolve("/data/set/index.larder", "/abs/a.tar", "/abs/a.tar");
    expect_resolve("index.larder", "a.tar", "a.tar");
    expect_resolve("http://h:8/d/index.larder", "a.tar", "http://h:8/d/a.tar");
    expect_resolve("https://h/index.larder", "x/a.tar", "https://h/x/a.tar");
    expect_resolve("http://h", "a.tar", "http://h/a.tar");
    expect_resolve("/d/index.larder", "https://cdn/a.tar", "https://cdn/a.tar");
    expect_resolve("file:///d/index.larder", "a.tar", "file:///d/a.tar");
}

TEST(origin_file_reads)
{
    test_write_file(test_path("f.bin"), "0123456789", 10);
    struct larder__origin *o;
    CHECK_EQ(larder__origin_open(&o, test_path("f.bin")), 0);
    uint64_t size;
    CHECK_EQ(larder__origin_size(o, &size), 0);
    CHECK_EQ(size, 10);
    char buf[16];
    CHECK_EQ(larder__origin_read(o, buf, 4, 3), 0);
    CHECK(memcmp(buf, "3456", 4) == 0);
    memset(buf, 'x', sizeof buf);
    CHECK_EQ(larder__origin_read(o, buf, 6, 7), LARDER_ETRUNCATED);
    CHECK(memcmp(buf, "789\0\0\0", 6) == 0); /* the unread tail is zeroed */
    CHECK(strstr(larder_errmsg(), "f.bin") != NULL);
    larder__origin_close(o);
    CHECK_EQ(larder__origin_open(&o, test_path("none.bin")), -ENOENT);
    CHECK(strstr(larder_errmsg(), "none.bin") != NULL);
    larder__origin_close(NULL);
}

static ssize_t (*real_pread)(int, void *, size_t, off_t);
static int stalls_left;

/* The first read of the file stalls for 3 s; the rest are quick. */
static ssize_t stalling_pread(int fd, void *buf, size_t count, off_t offset)
{
    if (__atomic_fetch_sub(&stalls_left, 1, __ATOMIC_RELAXED) > 0) sleep(3);
    return real_pread(fd, buf, count, offset);
}

TEST(origin_file_reads_are_hedged)
{
    char data[8192];
    test_fill_random(data, sizeof data, 9);
    test_write_file(test_path("stall.bin"), data, sizeof data);
    struct larder__origin *o;
    CHECK_EQ(larder__origin_open(&o, test_path("stall.bin")), 0);
    real_pread = larder__sys.pread;
    larder__sys.pread = stalling_pread;
    stalls_left = 1;
    uint64_t hedges = larder__origin_hedges();
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    char buf[4096];
    CHECK_EQ(larder__origin_read(o, buf, sizeof buf, 1000), 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    larder__sys.pread = real_pread;
    CHECK(memcmp(buf, data + 1000, sizeof buf) == 0);
    CHECK_EQ(larder__origin_hedges(), hedges + 1);
    /* the hedge answered long before the stalled read would have */
    CHECK((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9 < 2.5);
    larder__origin_close(o);
}
