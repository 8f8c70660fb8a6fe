/*
 * test_larderd_publish_mine.c - this node's own names across a restart
 * (src/larderd/publish_mine.c): the cache's published/mine, read when the
 * registry is made, keeps the uid of the local user who published each
 * name (who may replace it after the restart); a line written before the
 * uid was kept loads with no known publisher; a line whose generation or
 * uid is not plain decimal digits (a sign, a space, too large, empty, one
 * field too many) is dropped, never half taken.
 */
#include "daemon_fixture.h"
#include "test.h"

#include "publish.h"

#include <stdio.h>

/* The publisher's uid of the name loaded, -1 when unknown; -2: not loaded. */
static int64_t uid_of(struct publications *r, const char *name)
{
    struct publication *p = find(r, name, strlen(name));
    return p ? p->publisher_uid : -2;
}

TEST(larderd_publish_mine_uid)
{
    char index[4096];
    snprintf(index, sizeof index, "%s", fixture_dataset("ckpt", 6, 8000));
    struct larderd d;
    fixture_daemon(&d, 1);
    uint64_t low, high;
    CHECK(claimed_id(index, &low, &high));
    char id[33];
    larder__hex128(high, low, id);
    CHECK_EQ(test_sh("mkdir -p '%s/published'", d.config.cache_dir), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/published/mine", d.config.cache_dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    const char *tails[][2] = {
        {"with-uid", "\t0\t1000"},
        {"root", "\t0\t0"},
        {"legacy", ""},
        {"legacy-replaced", "\t2"},
        {"replaced-uid", "\t3\t4242"},
        {"gen0-no-uid", "\t0"},
        {"negative", "\t0\t-5"},
        {"plus", "\t0\t+5"},
        {"space", "\t0\t 5"},
        {"too-large", "\t0\t4294967296"},
        {"letters", "\t0\t12a"},
        {"empty-uid", "\t0\t"},
        {"extra-field", "\t1\t7\tmore"},
        {"huge", "\t0\t123456789012345678901234"},
        {"bad-generation", "\t-1\t5"},
    };
    size_t count = sizeof tails / sizeof tails[0];
    for (size_t i = 0; i < count; i++)
        fprintf(f, "%s\t%s\t%s\t-%s\n", tails[i][0], id, index, tails[i][1]);
    fclose(f);
    struct publications *r = registry(&d); /* loads published/mine */
    CHECK(r != NULL);
    pthread_mutex_lock(&r->lock);
    CHECK_EQ(uid_of(r, "with-uid"), 1000);
    CHECK_EQ(uid_of(r, "root"), 0);
    CHECK_EQ(uid_of(r, "legacy"), -1);
    CHECK_EQ(uid_of(r, "legacy-replaced"), -1);
    CHECK_EQ(uid_of(r, "replaced-uid"), 4242);
    CHECK_EQ(find(r, "replaced-uid", 12)->generation, 3);
    const char *dropped[] = {"gen0-no-uid", "negative",  "plus",        "space", "too-large",
                             "letters",     "empty-uid", "extra-field", "huge",  "bad-generation"};
    for (size_t i = 0; i < sizeof dropped / sizeof dropped[0]; i++)
        CHECK_EQ(uid_of(r, dropped[i]), -2);
    CHECK_EQ(r->count, 5);
    pthread_mutex_unlock(&r->lock);

    /* what publication_remember appends is read back the same */
    pthread_mutex_lock(&r->lock);
    find(r, "legacy", 6)->publisher_uid = 777; /* as a --replace by uid 777 leaves it */
    find(r, "legacy", 6)->generation = 1;
    pthread_mutex_unlock(&r->lock);
    publication_remember(&d, "legacy");
    publications_free(&d);
    r = registry(&d);
    pthread_mutex_lock(&r->lock);
    CHECK_EQ(uid_of(r, "legacy"), 777); /* the later line, a generation up, stands */
    CHECK_EQ(find(r, "legacy", 6)->generation, 1);
    CHECK_EQ(uid_of(r, "with-uid"), 1000);
    pthread_mutex_unlock(&r->lock);
    larderd_free(&d);
}
