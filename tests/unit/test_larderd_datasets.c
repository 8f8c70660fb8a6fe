/*
 * test_larderd_datasets.c - the daemon's dataset registry
 * (src/larderd/datasets.c): one entry per dataset however often and under
 * whichever name it is opened, found by id, never opened when the caller
 * may not open, refused outside the --allow prefixes or when the index is
 * not sound, and all closed at the end.
 */
#include "daemon_fixture.h"
#include "test.h"

#include <errno.h>

TEST(larderd_datasets_one_entry_per_dataset)
{
    const char *index = fixture_dataset("ds", 20, 1 << 20);
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", test_path("ds/copy.larder"));
    CHECK_EQ(test_sh("cp '%s' '%s'", index, copy), 0);
    struct larderd d;
    fixture_daemon(&d, 1);
    struct dataset_entry *e, *again, *same;
    int slot = -1, slot_again = -1, slot_same = -1;
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    CHECK_EQ(slot, 0);
    CHECK(strcmp(e->url, index) == 0 && e->members == NULL);
    CHECK_EQ(open_dataset(&d, index, false, &again, &slot_again), 0); /* open already */
    CHECK(again == e && slot_again == 0);
    CHECK_EQ(open_dataset(&d, copy, true, &same, &slot_same), 0); /* the same content */
    CHECK(same == e && slot_same == 0);
    CHECK_EQ(d.num_datasets, 1);

    int found_slot = -1;
    CHECK(find_dataset(&d, e->id_low, e->id_high, &found_slot) == e && found_slot == 0);
    CHECK(find_dataset(&d, e->id_low + 1, e->id_high, &found_slot) == NULL);

    const char *second = fixture_dataset("ds2", 5, 1 << 20);
    struct dataset_entry *e2;
    CHECK_EQ(open_dataset(&d, second, true, &e2, &slot), 0);
    CHECK(slot == 1 && e2 != e && d.num_datasets == 2);
    close_datasets(&d);
    CHECK_EQ(d.num_datasets, 0);
    CHECK(find_dataset(&d, e2->id_low, e2->id_high, &found_slot) == NULL);
    larderd_free(&d);
}

TEST(larderd_datasets_refusals)
{
    const char *index = fixture_dataset("ds", 5, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 1);
    struct dataset_entry *e = NULL;
    int slot = -1;
    CHECK_EQ(open_dataset(&d, index, false, &e, &slot), LARDER_ENOTFOUND);
    char want[4200];
    snprintf(want, sizeof want, "dataset %s is not open on this node", index);
    CHECK(strcmp(larder_errmsg(), want) == 0);

    /* outside every --allow prefix */
    d.config.allow[0] = "/nowhere/";
    d.config.num_allow = 1;
    CHECK(open_dataset(&d, index, true, &e, &slot) < 0);
    CHECK_EQ(d.num_datasets, 0);
    d.config.num_allow = 0;
    d.config.allow[0] = NULL;

    /* not an index; no index at all */
    char junk[4096];
    snprintf(junk, sizeof junk, "%s", test_path("junk.larder"));
    test_write_file(junk, "not an index, not at all, no", 28);
    CHECK(open_dataset(&d, junk, true, &e, &slot) < 0);
    CHECK(open_dataset(&d, test_path("missing.larder"), true, &e, &slot) < 0);
    CHECK_EQ(d.num_datasets, 0);

    /* after all that, it opens */
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    CHECK_EQ(d.num_datasets, 1);
    larderd_free(&d);
}

TEST(larderd_datasets_full_registry)
{
    const char *index = fixture_dataset("ds", 3, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 1);
    /* as if MAX_DATASETS were open: the registry refuses more */
    d.num_datasets = MAX_DATASETS;
    for (int i = 0; i < MAX_DATASETS; i++)
        d.datasets[i] = (struct dataset_entry){.url = "elsewhere"};
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), LARDER_EUSAGE);
    CHECK(strcmp(larder_errmsg(), "too many datasets open") == 0);
    d.num_datasets = 0; /* nothing of them to free */
    larderd_free(&d);
}
