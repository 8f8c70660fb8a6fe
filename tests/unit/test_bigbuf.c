/* bigbuf.c: large buffers kept for reuse (bigbuf.h). */
#include "test.h"

#include "bigbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

TEST(bigbuf_reuses_a_large_buffer_that_fits)
{
    uint8_t *a = larder__bigbuf_get(2u << 20);
    CHECK(a != NULL);
    memset(a, 1, 2u << 20); /* all of it is the caller's */
    larder__bigbuf_put(a);
    uint8_t *b = larder__bigbuf_get((3u << 20) / 2); /* smaller: the kept one */
    CHECK(b == a);
    uint8_t *c = larder__bigbuf_get(3u << 20); /* larger than any kept: a new one */
    CHECK(c != NULL && c != a);
    memset(c, 2, 3u << 20);
    larder__bigbuf_put(b);
    larder__bigbuf_put(c);
    /* of two kept, the smallest that fits */
    uint8_t *d = larder__bigbuf_get(1u << 20);
    CHECK(d == a);
    larder__bigbuf_put(d);
}

TEST(bigbuf_small_and_empty_buffers)
{
    uint8_t *a = larder__bigbuf_get(0);
    CHECK(a != NULL);
    a[0] = 7;
    uint8_t *b = larder__bigbuf_get(100);
    CHECK(b != NULL && b != a);
    memset(b, 3, 100);
    larder__bigbuf_put(a); /* freed, not kept: below LARDER__BIGBUF_MIN */
    larder__bigbuf_put(b);
    larder__bigbuf_put(NULL);
    CHECK(larder__bigbuf_get((size_t)-1) == NULL); /* no overflow of the header */
}

/* Get `many` buffers of `size` bytes at once (their pages touched), give
 * them all back: how many the pool keeps then.  (Not told by marks left in
 * the bytes: after glibc frees an mmap'd buffer, the next ones may come
 * from its heap and carry old bytes too.) */
static int kept_after_round_of(int many, size_t size)
{
    uint8_t *bufs[64];
    for (int i = 0; i < many; i++) {
        bufs[i] = larder__bigbuf_get(size);
        CHECK(bufs[i] != NULL);
        memset(bufs[i], 0xA5, size);
    }
    for (int i = 0; i < many; i++)
        larder__bigbuf_put(bufs[i]);
    return (int)larder__bigbuf_kept(NULL);
}

/* The same with buffers of 4 MiB. */
static int kept_after_round(int many)
{
    return kept_after_round_of(many, 4u << 20);
}

TEST(bigbuf_a_reader_process_keeps_two)
{
    /* a reader process (liblarder in a training job): 2 buffers at most
     * (and 16 MiB), whatever it used at once */
    CHECK(kept_after_round(10) == 2);
    size_t bytes = 0;
    CHECK(larder__bigbuf_kept(&bytes) == 2);
    CHECK(bytes == (size_t)8 << 20);
}

TEST(bigbuf_the_daemon_keeps_more)
{
    larder__bigbuf_set_limits(16, (size_t)96 << 20); /* what larderd's main sets */
    CHECK(kept_after_round(40) == 16);               /* 16 of 4 MiB: 64 MiB, within 96 */
    larder__bigbuf_set_limits(3, (size_t)96 << 20);  /* lowered: the extra ones freed */
    CHECK(larder__bigbuf_kept(NULL) == 3);
    larder__bigbuf_set_limits(16, (size_t)10 << 20); /* by bytes: two of 4 MiB fit in 10 */
    CHECK(larder__bigbuf_kept(NULL) == 2);
    CHECK(kept_after_round(5) == 2);
}

TEST(bigbuf_max_from_the_environment)
{
    /* LARDER_BIGBUF_MAX caps the bytes, in a reader and in the daemon alike */
    setenv("LARDER_BIGBUF_MAX", "9M", 1);
    CHECK(kept_after_round(6) == 2); /* the reader's 2 buffers, 8 MiB <= 9 MiB */
    larder__bigbuf_set_limits(16, (size_t)96 << 20);
    CHECK(kept_after_round(6) == 2);     /* 9 MiB still: a third 4 MiB does not fit */
    setenv("LARDER_BIGBUF_MAX", "0", 1); /* read once: no change now */
    CHECK(kept_after_round(6) == 2);
}

TEST(bigbuf_max_zero_keeps_none)
{
    setenv("LARDER_BIGBUF_MAX", "0", 1);
    CHECK(kept_after_round(3) == 0);
    CHECK(larder__bigbuf_kept(NULL) == 0);
}

TEST(bigbuf_parse_max)
{
    size_t v = 7;
    CHECK(larder__bigbuf_parse_max("0", &v) == 0 && v == 0);
    CHECK(larder__bigbuf_parse_max("4096", &v) == 0 && v == 4096);
    CHECK(larder__bigbuf_parse_max("3K", &v) == 0 && v == 3 * 1024);
    CHECK(larder__bigbuf_parse_max("5m", &v) == 0 && v == (size_t)5 * 1024 * 1024);
    CHECK(larder__bigbuf_parse_max("2G", &v) == 0 && v == (size_t)2 * 1024 * 1024 * 1024);
    v = 7;
    CHECK(larder__bigbuf_parse_max("", &v) == -EINVAL && v == 7);
    CHECK(larder__bigbuf_parse_max(NULL, &v) == -EINVAL);
    CHECK(larder__bigbuf_parse_max("-1", &v) == -EINVAL);
    CHECK(larder__bigbuf_parse_max("12X", &v) == -EINVAL);
    CHECK(larder__bigbuf_parse_max("1MB", &v) == -EINVAL);
    CHECK(larder__bigbuf_parse_max("M", &v) == -EINVAL);
    CHECK(larder__bigbuf_parse_max("99999999999999999999", &v) == -EINVAL);
    CHECK(larder__bigbuf_parse_max("99999999999999G", &v) == -EINVAL);
    CHECK(v == 7);
}

TEST(bigbuf_a_bad_max_is_ignored)
{
    setenv("LARDER_BIGBUF_MAX", "lots", 1);
    CHECK(kept_after_round(4) == 2); /* the reader's default */
}

TEST(bigbuf_keeps_a_bounded_number)
{
    /* never more than KEEP_MOST (64) buffers, however high the limits */
    larder__bigbuf_set_limits(1000, (size_t)1 << 40);
    CHECK(kept_after_round_of(64, 1u << 20) == 64);
    uint8_t *extra = larder__bigbuf_get(1u << 20); /* a 65th: not kept */
    uint8_t *more[64];
    for (int i = 0; i < 64; i++)
        more[i] = larder__bigbuf_get(1u << 20);
    CHECK(larder__bigbuf_kept(NULL) == 0);
    larder__bigbuf_put(extra);
    for (int i = 0; i < 64; i++)
        larder__bigbuf_put(more[i]);
    CHECK(larder__bigbuf_kept(NULL) == 64);
}

/* Minor page faults of this process so far. */
static long minor_faults(void)
{
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

TEST(bigbuf_reserve_backs_the_pages_of_kept_buffers)
{
    larder__bigbuf_set_limits(16, (size_t)96 << 20); /* what larderd's main sets */
    CHECK(larder__bigbuf_reserve(3, 5u << 20) == 3);
    size_t bytes = 0;
    CHECK(larder__bigbuf_kept(&bytes) == 3);
    CHECK(bytes == (size_t)15 << 20); /* 5 MiB is whole MiB already */
    /* a reserved buffer's pages are there: writing all 5 MiB of it takes
     * few faults, where 5 MiB of fresh 4 KiB pages take 1280 (a quarter of
     * that at most: under ASan, its shadow's pages fault in, 160 here) */
    uint8_t *a = larder__bigbuf_get(5u << 20);
    long before = minor_faults();
    memset(a, 0x5A, 5u << 20);
    CHECK(minor_faults() - before < 1280 / 4);
    /* the control: a fresh buffer (larger than any kept) does fault, unless
     * the kernel backs it with huge pages (then there is nothing to compare) */
    uint8_t *b = larder__bigbuf_get(9u << 20);
    before = minor_faults();
    memset(b, 0x5A, 9u << 20);
    long fresh = minor_faults() - before;
    CHECK(fresh >= 2304 / 2 || fresh < 1280 / 4); /* 9 MiB of 4 KiB pages: 2304 */
    larder__bigbuf_put(a);
    larder__bigbuf_put(b);
}

TEST(bigbuf_reserve_within_the_limits)
{
    /* a reader process's limits: 2 buffers, 16 MiB */
    CHECK(larder__bigbuf_reserve(4, 4u << 20) == 2);
    CHECK(larder__bigbuf_kept(NULL) == 2);
    CHECK(larder__bigbuf_reserve(1, 1000) == -EINVAL); /* below LARDER__BIGBUF_MIN */
    larder__bigbuf_set_limits(16, (size_t)96 << 20);
    /* the two kept ones count: two more make four, not six */
    CHECK(larder__bigbuf_reserve(4, 4u << 20) == 4);
    CHECK(larder__bigbuf_kept(NULL) == 4);
    /* kept ones too small for the length do not count */
    CHECK(larder__bigbuf_reserve(1, 8u << 20) == 1);
    CHECK(larder__bigbuf_kept(NULL) == 5);
}
