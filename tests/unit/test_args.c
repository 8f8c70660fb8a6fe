/*
 * test_args.c - the command-line values both programs parse
 * (src/common/args.c): counts, sizes with units, decimals; malformed text
 * and values past 64 bits are refused and leave the output untouched.
 */
#include "args.h"
#include "test.h"

#include <errno.h>

static uint64_t size_of(const char *text)
{
    uint64_t v = 12345;
    int rc = args_parse_size(text, &v);
    if (rc != 0) fprintf(stderr, "    '%s': %d\n", text, rc);
    CHECK_EQ(rc, 0);
    return v;
}

static int size_error(const char *text)
{
    uint64_t v = 12345;
    int rc = args_parse_size(text, &v);
    CHECK_EQ(v, 12345); /* untouched */
    return rc;
}

TEST(args_sizes)
{
    CHECK(size_of("0") == 0);
    CHECK(size_of("1000") == 1000);
    CHECK(size_of("64K") == 65536);
    CHECK(size_of("64k") == 65536);
    CHECK(size_of("64KiB") == 65536);
    CHECK(size_of("64Ki") == 65536);
    CHECK(size_of("64KB") == 64000);
    CHECK(size_of("256M") == 256ull << 20);
    CHECK(size_of("10G") == 10ull << 30);
    CHECK(size_of("1GB") == 1000000000ull);
    CHECK(size_of("2T") == 2ull << 40);
    CHECK(size_of("3P") == 3ull << 50);
    CHECK(size_of("1.5G") == 3ull << 29);
    CHECK(size_of(".5K") == 512);
    CHECK(size_of("7B") == 7);
    CHECK(size_of("10 G") == 10ull << 30);
    CHECK(size_of("1.9") == 1); /* a fraction of a byte is dropped */
    /* exact to the last byte, not through a double */
    CHECK(size_of("18446744073709551615") == UINT64_MAX);
    CHECK(size_of("9007199254740993") == 9007199254740993ull);
    CHECK(size_of("16383P") == 16383ull << 50);
}

TEST(args_bad_sizes)
{
    CHECK_EQ(size_error(""), -EINVAL);
    CHECK_EQ(size_error("lots"), -EINVAL);
    CHECK_EQ(size_error("G"), -EINVAL);
    CHECK_EQ(size_error("."), -EINVAL);
    CHECK_EQ(size_error("-1"), -EINVAL);
    CHECK_EQ(size_error("+1"), -EINVAL);
    CHECK_EQ(size_error(" 1"), -EINVAL);
    CHECK_EQ(size_error("1X"), -EINVAL);
    CHECK_EQ(size_error("1GG"), -EINVAL);
    CHECK_EQ(size_error("1BB"), -EINVAL);
    CHECK_EQ(size_error("1Bi"), -EINVAL);
    CHECK_EQ(size_error("1e9"), -EINVAL);
    CHECK_EQ(size_error("0x10"), -EINVAL);
    CHECK_EQ(size_error("inf"), -EINVAL);
    CHECK_EQ(size_error("nan"), -EINVAL);
    /* overflow: refused, never wrapped */
    CHECK_EQ(size_error("99999999999999999999G"), -ERANGE);
    CHECK_EQ(size_error("99999999999999999999"), -ERANGE);
    CHECK_EQ(size_error("18446744073709551616"), -ERANGE);
    CHECK_EQ(size_error("16384P"), -ERANGE);
    CHECK_EQ(size_error("17179869184G"), -ERANGE);
    CHECK_EQ(size_error("18446744073709551615.5K"), -ERANGE);
    CHECK_EQ(size_error("15.9999999999999999999E"), -EINVAL); /* no exa unit */
    CHECK(args_parse_size(NULL, &(uint64_t){0}) == -EINVAL);
}

TEST(args_counts)
{
    uint64_t v = 7;
    CHECK_EQ(args_parse_u64("0", &v), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(args_parse_u64("18446744073709551615", &v), 0);
    CHECK(v == UINT64_MAX);
    v = 7;
    CHECK_EQ(args_parse_u64("18446744073709551616", &v), -ERANGE);
    CHECK_EQ(args_parse_u64("99999999999999999999999", &v), -ERANGE);
    CHECK_EQ(args_parse_u64("", &v), -EINVAL);
    CHECK_EQ(args_parse_u64("-1", &v), -EINVAL);
    CHECK_EQ(args_parse_u64(" 1", &v), -EINVAL);
    CHECK_EQ(args_parse_u64("1 ", &v), -EINVAL);
    CHECK_EQ(args_parse_u64("12k", &v), -EINVAL);
    CHECK_EQ(args_parse_u64("0x1", &v), -EINVAL);
    CHECK_EQ(v, 7);

    uint32_t w = 9;
    CHECK_EQ(args_parse_u32("4294967295", &w), 0);
    CHECK(w == UINT32_MAX);
    w = 9;
    CHECK_EQ(args_parse_u32("4294967296", &w), -ERANGE);
    CHECK_EQ(args_parse_u32("x", &w), -EINVAL);
    CHECK_EQ(w, 9);
}

TEST(args_decimals)
{
    double v = -1;
    CHECK_EQ(args_parse_decimal("60", &v), 0);
    CHECK(v == 60);
    CHECK_EQ(args_parse_decimal("0.3", &v), 0);
    CHECK(v > 0.2999999 && v < 0.3000001);
    CHECK_EQ(args_parse_decimal(".5", &v), 0);
    CHECK(v == 0.5);
    CHECK_EQ(args_parse_decimal("2.", &v), 0);
    CHECK(v == 2);
    CHECK_EQ(args_parse_decimal("0", &v), 0);
    CHECK(v == 0);
    v = -1;
    CHECK_EQ(args_parse_decimal("", &v), -EINVAL);
    CHECK_EQ(args_parse_decimal(".", &v), -EINVAL);
    CHECK_EQ(args_parse_decimal("-1", &v), -EINVAL);
    CHECK_EQ(args_parse_decimal("1e3", &v), -EINVAL);
    CHECK_EQ(args_parse_decimal("inf", &v), -EINVAL);
    CHECK_EQ(args_parse_decimal("nan", &v), -EINVAL);
    CHECK_EQ(args_parse_decimal("1s", &v), -EINVAL);
    CHECK(v == -1);
    char huge[400];
    memset(huge, '9', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    CHECK_EQ(args_parse_decimal(huge, &v), -ERANGE);
}
