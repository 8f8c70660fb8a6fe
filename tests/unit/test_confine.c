/*
 * test_confine.c - shard names stay under their index's base unless the
 * opener trusts the index; allowed prefixes confine whatever is opened.
 * Expected outcomes follow docs/security.md's rules, case by case.
 */
#include "confine.h"
#include "index.h"
#include "test.h"

#include <unistd.h>

/* Write an index at `path` with one flat shard named `name` (and `base`). */
static void write_index(const char *path, const char *name, const char *base)
{
    struct larder__index_builder *b;
    CHECK_EQ(larder__index_builder_new(&b, 0), 0);
    if (base) CHECK_EQ(larder__index_builder_set_base(b, base), 0);
    CHECK_EQ(larder__index_builder_add_shard(b, name, LARDER_FORMAT_FLAT), 0);
    larder__index_builder_set_shard(b, 0, 4, 0);
    CHECK_EQ(larder__index_builder_add_sample(b, 0, 0, 4, 0, "k", 1, NULL, 0), 0);
    CHECK_EQ(larder__index_builder_write(b, path, NULL), 0);
    larder__index_builder_free(b);
}

/* Open an index naming its shard `name` (under `base`), trusting it or not. */
static int open_named(const char *name, const char *base, int trust)
{
    write_index(test_path("index.larder"), name, base);
    larder_open_options o = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = "", .trust_index = trust};
    larder_dataset *d = NULL;
    int rc = larder_open(&d, test_path("index.larder"), &o);
    larder_close(d);
    return rc;
}

TEST(confine_refuses_names_leaving_the_base)
{
    const char *bad[] = {"/etc/passwd",
                         "../secret.tar",
                         "a/../../b.tar",
                         "..",
                         "file:///etc/passwd",
                         "http://169.254.169.254/latest",
                         "https://other.example/x.tar",
                         "s3://bucket/x.tar",
                         "a\\..\\b",
                         "x\ny"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = open_named(bad[i], NULL, 0);
        if (rc != LARDER_EBADINDEX) fprintf(stderr, "    '%s' gave %d\n", bad[i], rc);
        CHECK_EQ(rc, LARDER_EBADINDEX);
        CHECK(strstr(larder_errmsg(), "shard 0") != NULL);
    }
    /* trusted: taken as they are (opening reads nothing yet) */
    CHECK_EQ(open_named("/etc/passwd", NULL, 1), 0);
    CHECK_EQ(open_named("../secret.tar", NULL, 1), 0);
    /* names that stay inside are fine, dots and all */
    CHECK_EQ(open_named("shards/a..b.tar", NULL, 0), 0);
    CHECK_EQ(open_named("./x/.hidden.tar", NULL, 0), 0);
}

TEST(confine_base_rules)
{
    /* a local index may record an absolute base, and names stay under it */
    CHECK_EQ(open_named("a.tar", "/data/shards/", 0), 0);
    CHECK_EQ(open_named("a.tar", "https://h/shards/", 0), 0);
    CHECK_EQ(open_named("../a.tar", "/data/shards/", 0), LARDER_EBADINDEX);
    CHECK_EQ(open_named("a%2e%2e/x.tar", "https://h/shards/", 0), LARDER_EBADINDEX);
    CHECK_EQ(open_named("a.tar?x=1", "https://h/shards/", 0), LARDER_EBADINDEX);
    /* a base must be absolute and end in '/' */
    CHECK_EQ(open_named("a.tar", "relative/", 0), LARDER_EBADINDEX);
    CHECK_EQ(open_named("a.tar", "/data/shards", 0), LARDER_EBADINDEX);
}

TEST(confine_allowed_prefixes)
{
    const char *data[] = {"/data/train", "https://Store.example/sets/", NULL};
    CHECK_EQ(larder__allowed("/data/train/a.tar", data, "shard"), 0);
    CHECK_EQ(larder__allowed("/data/train", data, "shard"), 0);
    CHECK_EQ(larder__allowed("/data/train/x/../b.tar", data, "shard"), 0);
    CHECK_EQ(larder__allowed("/data/trainer/a.tar", data, "shard"), LARDER_EDENIED);
    CHECK_EQ(larder__allowed("/data/train/../secret", data, "shard"), LARDER_EDENIED);
    CHECK_EQ(larder__allowed("/etc/passwd", data, "shard"), LARDER_EDENIED);
    CHECK(strstr(larder_errmsg(), "/etc/passwd") != NULL);
    CHECK_EQ(larder__allowed("file:///data/train/a.tar", data, "shard"), 0);
    CHECK_EQ(larder__allowed("https://store.example/sets/a/index.larder", data, "index"), 0);
    CHECK_EQ(larder__allowed("https://store.example/other/x", data, "index"), LARDER_EDENIED);
    CHECK_EQ(larder__allowed("https://store.example/sets/%2e%2e/x", data, "index"), LARDER_EDENIED);
    CHECK_EQ(larder__allowed("https://store.example.evil/sets/x", data, "index"), LARDER_EDENIED);
    /* a symbolic link inside an allowed directory does not lead out of it */
    CHECK_EQ(
        test_sh("mkdir -p %s/allowed && ln -s /etc/passwd %s/allowed/link", test_dir(), test_dir()),
        0);
    char allowed[4096], link[4096];
    snprintf(allowed, sizeof allowed, "%s/allowed", test_dir());
    snprintf(link, sizeof link, "%s/allowed/link", test_dir());
    const char *mine[] = {allowed, NULL};
    CHECK_EQ(larder__allowed(link, mine, "shard"), LARDER_EDENIED);
    /* no list: everything */
    CHECK_EQ(larder__allowed("/etc/passwd", NULL, "shard"), 0);
}

TEST(confine_open_checks_index_and_shards)
{
    write_index(test_path("index.larder"), "a.tar", NULL);
    test_write_file(test_path("a.tar"), "abcd", 4);
    const char *elsewhere[] = {"/nonexistent-prefix", NULL};
    const char *here[] = {test_dir(), NULL};
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = ""};
    larder_dataset *d = NULL;
    o.allow_prefixes = elsewhere;
    CHECK_EQ(larder_open(&d, test_path("index.larder"), &o), LARDER_EDENIED);
    CHECK(strstr(larder_errmsg(), "index") != NULL);
    o.allow_prefixes = here;
    CHECK_EQ(larder_open(&d, test_path("index.larder"), &o), 0);
    larder_close(d);
    /* a trusted index naming a file outside the prefixes is still refused */
    write_index(test_path("index.larder"), "/etc/passwd", NULL);
    o.trust_index = 1;
    CHECK_EQ(larder_open(&d, test_path("index.larder"), &o), LARDER_EDENIED);
    CHECK(strstr(larder_errmsg(), "shard 0") != NULL);
}
