/*
 * test_sys_mkdir.c - larder__mkdir_p (src/lib/sys.c): a new path made
 * whole, an existing one left alone, only the first `length` bytes taken,
 * and a file in the way refused with a message naming that component.
 */
#include "sys.h"
#include "test.h"

#include <string.h>
#include <sys/stat.h>

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(sys_mkdir_p)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/a/b/c", test_dir());
    CHECK_EQ(larder__mkdir_p(path, strlen(path), 0755), 0);
    CHECK(is_dir(path));
    CHECK_EQ(larder__mkdir_p(path, strlen(path), 0755), 0); /* there already */

    /* only the first length bytes: the directory above "file.bin" */
    snprintf(path, sizeof path, "%s/d/e/file.bin", test_dir());
    CHECK_EQ(larder__mkdir_p(path, strlen(path) - strlen("/file.bin"), 0755), 0);
    CHECK(is_dir(test_path("d/e")));
    CHECK(!is_dir(path));

    /* a file where a directory must go: refused, naming it */
    test_write_file(test_path("f"), "x", 1);
    snprintf(path, sizeof path, "%s/f/g/h", test_dir());
    CHECK(larder__mkdir_p(path, strlen(path), 0755) < 0);
    char want[4096];
    snprintf(want, sizeof want, "%s/f/g", test_dir());
    CHECK(strstr(larder_errmsg(), want) != NULL);
    CHECK(!is_dir(test_path("f/g")));
}
