/*
 * test_larderd_config_hints.c - larderd --replicate-prefix PREFIX=MEMBERS
 * (src/larderd/config.c): repeatable on the command line and in a
 * configuration file, the command line's list replacing the file's,
 * malformed rules refused with a message naming them.
 */
#include "daemon_fixture.h"
#include "test.h"

#include <errno.h>

TEST(larderd_config_replicate_prefix)
{
    unsetenv("LARDER_SOCKET");
    struct larderd_config c;
    char error[CONFIG_ERROR_SIZE];
    char *argv[] = {"larderd",
                    "--cache",
                    "/c",
                    "--socket",
                    "/s",
                    "--replicate-prefix",
                    "ckpt/=a:1,b:2",
                    "--replicate-prefix",
                    "eval/=c:3",
                    NULL};
    larderd_config_defaults(&c);
    CHECK_EQ(larderd_config_parse(&c, 9, argv, error, sizeof error), LARDERD_CONFIG_RUN);
    CHECK_EQ(c.num_replicate, 2);
    CHECK(strcmp(c.replicate[0], "ckpt/=a:1,b:2") == 0 && strcmp(c.replicate[1], "eval/=c:3") == 0);
    CHECK(c.replicate[2] == NULL);

    const char *bad[] = {"noequals", "=a:1", "ckpt/="};
    for (int i = 0; i < 3; i++) {
        char *v[] = {"larderd",      "--cache", "/c", "--socket", "/s", "--replicate-prefix",
                     (char *)bad[i], NULL};
        larderd_config_defaults(&c);
        CHECK_EQ(larderd_config_parse(&c, 7, v, error, sizeof error), -EINVAL);
        CHECK(strstr(error, "bad --replicate-prefix") && strstr(error, bad[i]));
    }
    char *many[2 + 2 * 17 + 5] = {"larderd", "--cache", "/c", "--socket", "/s"};
    int n = 5;
    for (int i = 0; i < 17; i++)
        many[n++] = "--replicate-prefix", many[n++] = "p=h:1";
    larderd_config_defaults(&c);
    CHECK_EQ(larderd_config_parse(&c, n, many, error, sizeof error), -EINVAL);
    CHECK(strstr(error, "at most 16") != NULL);

    /* a file's rules, on as many lines as wanted; the command line's replace them */
    char text[] = "cache = /c\nsocket = /s\nreplicate-prefix = a/=h:1\nreplicate-prefix = b/=h:2\n";
    larderd_config_defaults(&c);
    CHECK_EQ(larderd_config_parse_text(&c, text, "larderd.conf", error, sizeof error), 0);
    CHECK_EQ(c.num_replicate, 2);
    CHECK(strcmp(c.replicate[1], "b/=h:2") == 0);
    char *over[] = {"larderd", "--replicate-prefix", "z/=h:9", NULL};
    CHECK_EQ(larderd_config_parse(&c, 3, over, error, sizeof error), LARDERD_CONFIG_RUN);
    CHECK(c.num_replicate == 1 && strcmp(c.replicate[0], "z/=h:9") == 0 && !c.replicate[1]);
}
