/*
 * test_larderd_warm.c - warm staging (src/larderd/warm.c): the pace of
 * --warm-rate, every chunk of every shard staged on a node alone, and in
 * a cluster only the chunks this node owns.
 */
#include "daemon_fixture.h"
#include "test.h"

#include <time.h>

TEST(larderd_warm_pace)
{
    struct larderd d;
    larderd_init(&d);
    CHECK(warm_pace(&d, 100.0, WARM_CHUNK) == 0); /* unpaced */
    d.config.warm_rate = 4;                       /* MB/s: a 4 MB chunk a second */
    CHECK(warm_pace(&d, 100.0, 4000000) == 0);    /* the first starts at once */
    double wait = warm_pace(&d, 100.0, 4000000);  /* the next a second later */
    CHECK(wait > 0.999 && wait < 1.001);
    wait = warm_pace(&d, 100.5, 2000000); /* after both: 2 s from the first, 1.5 s from now */
    CHECK(wait > 1.499 && wait < 1.501);
    CHECK(warm_pace(&d, 200.0, 4000000) == 0); /* idle meanwhile: no debt carried */
    larderd_free(&d);
}

/* Wait until the dataset is all in the cache. */
static void wait_resident(larder_dataset *dataset)
{
    for (int i = 0; i < 20000; i++) {
        larder_stats s;
        CHECK_EQ(larder_stats_get(dataset, &s), 0);
        if (s.resident_bytes == s.total_bytes) return;
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    CHECK(!"the dataset was not staged in 20 s");
}

TEST(larderd_warm_alone)
{
    const char *index = fixture_dataset("ds", 40, 16 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    uint32_t shards = larder__dataset_num_shards(e->dataset);
    CHECK(shards >= 3);
    CHECK_EQ(warm_owned(&d, e), shards); /* shards under WARM_CHUNK: one job each */
    wait_resident(e->dataset);
    larderd_free(&d);
}

TEST(larderd_warm_owned_chunks_only)
{
    const char *index = fixture_dataset("ds", 60, 8 * 1024);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct dataset_entry *e;
    int slot;
    /* opened alone (no endpoints to other members: no socket), then as member 1 of 3 */
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    CHECK_EQ(larder__members_parse_list(&d.members, "n0:7461,n1:7461,n2:7461", 7461), 0);
    d.self = 1;
    uint32_t shards = larder__dataset_num_shards(e->dataset), owned = 0;
    CHECK(shards >= 6);
    for (uint32_t s = 0; s < shards; s++) /* shards under a chunk: chunk 0 each */
        owned += larder__owner_chunk(&d.members, e->id_low, e->id_high, s, 0) == 1;
    CHECK(owned > 0 && owned < shards);
    CHECK_EQ(warm_owned(&d, e), owned);
    larderd_free(&d); /* the jobs finish first */
}
