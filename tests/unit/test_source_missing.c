/*
 * test_source_missing.c - an origin that could not be opened, standing in
 * behind the daemon's wrapper (src/lib/source_missing.c): every call fails
 * with the open's code, naming the origin and, when given, why.
 */
#include "source.h"
#include "test.h"

#include <errno.h>

TEST(source_missing_fails_with_its_code_and_why)
{
    struct larder__source *s;
    CHECK_EQ(
        larder__source_missing_open(&s, "/cache/published/model.bin", -ENOENT,
                                    "ckpt/1 has no origin: its producer n1:7461 did not serve it"),
        0);
    char buf[16];
    struct larder__extent e = {.offset = 0, .length = sizeof buf, .buf = buf};
    CHECK_EQ(larder__source_readv(s, &e, 1, 0), -ENOENT);
    CHECK(strstr(larder_errmsg(), "its producer n1:7461 did not serve it") != NULL);
    CHECK(strstr(larder_errmsg(), "/cache/published/model.bin") != NULL);
    uint64_t size = 1;
    CHECK_EQ(larder__source_size(s, &size), -ENOENT);
    larder__source_close(s);

    /* no why: the name and the code's text; a code that is not one: EIO */
    CHECK_EQ(larder__source_missing_open(&s, "/x/y", 0, NULL), 0);
    CHECK_EQ(larder__source_readv(s, &e, 1, 0), -EIO);
    CHECK(strncmp(larder_errmsg(), "/x/y: ", 6) == 0);
    larder__source_close(s);
}
