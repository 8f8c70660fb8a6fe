/*
 * test_larderd_datasets.c - the daemon's dataset registry
 * (src/larderd/datasets.c): one entry per dataset however often and under
 * whichever name it is opened, found by id, never opened when the caller
 * may not open, refused outside the --allow prefixes or when the index is
 * not sound, and all closed at the end; entries closed while open (a
 * replaced publication) only when no connection holds them, their slots
 * reused.
 */
#include "daemon_fixture.h"
#include "test.h"

#include <errno.h>
#include <unistd.h>

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

/* close_unused_datasets' answer for the test: close the entries whose url ends in
 * "ds2/index.larder" or "ds3/index.larder", keep the rest. */
static bool closable_for_test(struct larderd *d, const struct dataset_entry *e)
{
    (void)d;
    size_t n = strlen(e->url);
    return n > 16 && (strcmp(e->url + n - 16, "ds2/index.larder") == 0 ||
                      strcmp(e->url + n - 16, "ds3/index.larder") == 0);
}

static bool never(struct larderd *d, const struct dataset_entry *e)
{
    (void)d, (void)e;
    return false;
}

/* Wait (10 s at most) until the daemon has closed `n` entries: their blocks
 * evicted on its pool, then freed by the next call, as the loop's sweep does. */
static void wait_closed(struct larderd *d, uint64_t n)
{
    for (int i = 0; i < 1000; i++) {
        close_unused_datasets(d, never);
        pthread_mutex_lock(&d->lock);
        uint64_t closed = d->datasets_closed;
        pthread_mutex_unlock(&d->lock);
        if (closed >= n) break;
        usleep(10000);
    }
    pthread_mutex_lock(&d->lock);
    CHECK_EQ(d->datasets_closed, n);
    pthread_mutex_unlock(&d->lock);
}

TEST(larderd_datasets_close_unused_and_reuse)
{
    char paths[3][4096];
    const char *names[3] = {"ds1", "ds2", "ds3"};
    for (int i = 0; i < 3; i++)
        snprintf(paths[i], sizeof paths[i], "%s", fixture_dataset(names[i], 4 + i, 1 << 20));
    struct larderd d;
    fixture_daemon(&d, 1);
    struct dataset_entry *e[3];
    int slot[3];
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(open_dataset(&d, paths[i], OPEN_NEW, &e[i], &slot[i]), 0);
        CHECK_EQ(slot[i], i);
    }
    uint64_t id2_low = e[1]->id_low, id2_high = e[1]->id_high;
    /* ds2 held by two connections (bits of c->opened), ds3 by none */
    e[1]->holders = 2;
    CHECK_EQ(close_unused_datasets(&d, closable_for_test), 1); /* ds3 alone */
    wait_closed(&d, 1);
    CHECK_EQ(d.num_datasets, 2); /* the last slot was closed: the count shrinks */
    int found;
    CHECK(find_dataset(&d, e[0]->id_low, e[0]->id_high, &found) == e[0]);
    CHECK(find_dataset(&d, id2_low, id2_high, &found) == e[1]);

    /* one holder freed: still held; both: closed, its slot (1) in the middle free */
    datasets_release_opened(&d, UINT64_C(1) << 1);
    CHECK_EQ(close_unused_datasets(&d, closable_for_test), 0);
    datasets_release_opened(&d, UINT64_C(1) << 1);
    CHECK_EQ(close_unused_datasets(&d, closable_for_test), 1);  /* ds1 is not closable */
    CHECK(find_dataset(&d, id2_low, id2_high, &found) == NULL); /* closing: found no more */
    wait_closed(&d, 2);
    CHECK(find_dataset(&d, id2_low, id2_high, &found) == NULL);
    CHECK_EQ(d.num_datasets, 1);

    /* reopened: a fresh entry in the first free slot; a closed slot's url matches nothing */
    struct dataset_entry *again;
    int again_slot;
    CHECK_EQ(open_dataset(&d, paths[1], 0, &again, &again_slot), LARDER_ENOTFOUND);
    CHECK_EQ(open_dataset(&d, paths[1], OPEN_NEW, &again, &again_slot), 0);
    CHECK_EQ(again_slot, 1);
    CHECK(again->id_low == id2_low && again->id_high == id2_high && again->holders == 0);
    CHECK_EQ(d.num_datasets, 2);
    larderd_free(&d);
}

/* While an entry is being closed (its blocks evicted on a worker), its url,
 * or another url of the same content, is not opened again on the same
 * cache files: the open says to retry (the review's scenario: a reader
 * reconnecting to a replaced generation as it is evicted would have been
 * sent punched holes by sendfile or UCX). */
TEST(larderd_datasets_no_reopen_while_closing)
{
    char path[4096], dir[4096], other[4096];
    snprintf(path, sizeof path, "%s", fixture_dataset("ds1", 4, 1 << 20));
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    snprintf(other, sizeof other, "%s", test_path("alias"));
    CHECK(symlink(dir, other) == 0);
    strncat(other, "/index.larder", sizeof other - strlen(other) - 1);
    struct larderd d;
    fixture_daemon(&d, 1);
    struct dataset_entry *e, *again;
    int slot, again_slot;
    CHECK_EQ(open_dataset(&d, path, OPEN_NEW, &e, &slot), 0);
    e->closing = true; /* as close_unused_datasets marks it, its eviction not done */
    CHECK_EQ(open_dataset(&d, path, OPEN_NEW, &again, &again_slot), -EAGAIN);
    CHECK_EQ(open_dataset(&d, other, OPEN_NEW, &again, &again_slot), -EAGAIN);
    CHECK_EQ(d.num_datasets, 1); /* no second entry */
    e->closing = false;          /* freed at the next sweep in the daemon; opened again then */
    CHECK_EQ(open_dataset(&d, other, OPEN_NEW, &again, &again_slot), 0);
    CHECK(again == e); /* the same content: one entry */
    larderd_free(&d);
}
