/*
 * test_larderd_transform.c - the daemon's transform parts without
 * sockets: the result cache never answers under another version or other
 * parameters and keeps to its capacity; placement switches after load
 * held for its time, returns with hysteresis, does not oscillate on load
 * that flickers or on its own work, and sheds requests its queue would
 * keep past their budget.
 */
#include "test.h"
#include "transform_cache.h"
#include "transform_place.h"

TEST(larderd_transform_cache_keys)
{
    struct transform_cache *c = transform_cache_new(1000);
    struct transform_key k = {1, 2, 7, 1, "jpeg_decode_resize:224"};
    transform_cache_put(c, &k, "v1-224", 6);
    char out[64];
    CHECK_EQ(transform_cache_get(c, &k, out, sizeof out), 6);
    CHECK(memcmp(out, "v1-224", 6) == 0);
    struct transform_key other = k;
    other.version = 2; /* another version */
    CHECK_EQ(transform_cache_get(c, &other, out, sizeof out), 0);
    other = k, other.canonical = "jpeg_decode_resize:225"; /* other parameters */
    CHECK_EQ(transform_cache_get(c, &other, out, sizeof out), 0);
    other = k, other.canonical = "jpeg_decode_resize"; /* a prefix of them */
    CHECK_EQ(transform_cache_get(c, &other, out, sizeof out), 0);
    other = k, other.sample = 8;
    CHECK_EQ(transform_cache_get(c, &other, out, sizeof out), 0);
    other = k, other.id_high = 3; /* another dataset */
    CHECK_EQ(transform_cache_get(c, &other, out, sizeof out), 0);
    other = k, other.version = 2;
    transform_cache_put(c, &other, "v2-224!", 7);
    CHECK_EQ(transform_cache_get(c, &k, out, sizeof out), 6);
    CHECK(memcmp(out, "v1-224", 6) == 0);
    CHECK_EQ(transform_cache_get(c, &other, out, sizeof out), 7);
    CHECK(memcmp(out, "v2-224!", 7) == 0);
    CHECK_EQ(transform_cache_get(c, &k, out, 5), 0); /* does not fit: not found */
    transform_cache_free(c);
}

TEST(larderd_transform_cache_capacity)
{
    struct transform_cache *c = transform_cache_new(1000);
    char result[300];
    memset(result, 'x', sizeof result);
    char canonical[16][8];
    for (int i = 0; i < 16; i++) {
        snprintf(canonical[i], sizeof canonical[i], "t:%d", i);
        struct transform_key k = {1, 1, (uint64_t)i, 1, canonical[i]};
        transform_cache_put(c, &k, result, sizeof result);
        uint64_t bytes, entries;
        transform_cache_usage(c, &bytes, &entries);
        CHECK(bytes <= 1000);
        CHECK_EQ(bytes, entries * sizeof result);
    }
    /* the three newest are there, the oldest are not */
    char out[300];
    for (int i = 0; i < 16; i++) {
        struct transform_key k = {1, 1, (uint64_t)i, 1, canonical[i]};
        CHECK_EQ(transform_cache_get(c, &k, out, sizeof out) != 0, i >= 13);
    }
    struct transform_key big = {1, 1, 99, 1, "big"};
    char huge[2000] = {0};
    transform_cache_put(c, &big, huge, sizeof huge); /* over the capacity: not kept */
    CHECK_EQ(transform_cache_length(c, &big), 0);
    transform_cache_free(c);
    struct transform_cache *none = transform_cache_new(0);
    transform_cache_put(none, &big, "a", 1);
    CHECK_EQ(transform_cache_length(none, &big), 0);
    transform_cache_free(none);
}

/* Feed `seconds` of samples every 250 ms (busy, self); the switches. */
static uint64_t feed(struct placement *p, int64_t *now, double seconds, double busy, double self)
{
    uint64_t before = p->switches;
    for (int64_t end = *now + (int64_t)(seconds * 1000); *now < end; *now += PLACE_SAMPLE_MS) {
        struct place_sample s = {.busy = busy, .self = self};
        placement_decide(p, *now, &s);
    }
    return p->switches - before;
}

TEST(larderd_transform_placement_hysteresis)
{
    struct placement p;
    int64_t now = 1000;
    placement_init(&p, 80, now);
    CHECK(!p.at_reader);
    /* the daemon's own work on all of its CPUs: not a reason to leave */
    CHECK_EQ(feed(&p, &now, 10, 1.0, 1.0), 0);
    CHECK_EQ(feed(&p, &now, 10, 0.6, 0.55), 0);
    /* a burner beside it: others take what it leaves (0.5 of the 0.5 left) */
    CHECK_EQ(feed(&p, &now, 0.5, 1.0, 0.5), 0); /* not yet: 1 s */
    CHECK_EQ(feed(&p, &now, 1.5, 1.0, 0.5), 1);
    CHECK(p.at_reader);
    /* at the readers, the burner alone: stays */
    CHECK_EQ(feed(&p, &now, 20, 1.0, 0.0), 0);
    /* the burner stops: back after 3 s, not before */
    CHECK_EQ(feed(&p, &now, 2.5, 0.05, 0.0), 0);
    CHECK_EQ(feed(&p, &now, 1.5, 0.05, 0.0), 1);
    CHECK(!p.at_reader);
    /* load that flickers above and below the limit every sample: no switch */
    for (int i = 0; i < 40; i++) {
        CHECK_EQ(feed(&p, &now, 0.25, 1.0, 0.0), 0);
        CHECK_EQ(feed(&p, &now, 0.25, 0.1, 0.0), 0);
    }
    /* between the limit and limit - band: stays where it is, either way */
    CHECK_EQ(feed(&p, &now, 5, 0.7, 0.0), 0);
    CHECK_EQ(feed(&p, &now, 2, 1.0, 0.0), 1);
    CHECK_EQ(feed(&p, &now, 30, 0.7, 0.0), 0);
    CHECK(p.at_reader);
    placement_free(&p);
    /* 0: always the reader; 100: CPU never counts */
    placement_init(&p, 0, now);
    CHECK(p.at_reader);
    CHECK_EQ(feed(&p, &now, 5, 0.0, 0.0), 0);
    placement_free(&p);
    placement_init(&p, 100, now);
    CHECK_EQ(feed(&p, &now, 5, 1.0, 0.0), 0);
    CHECK(!p.at_reader);
    placement_free(&p);
}

TEST(larderd_transform_placement_sheds_past_the_budget)
{
    struct placement p;
    placement_init(&p, 100, 0);   /* CPU never counts: only the queue */
    placement_note(&p, 0, 10000); /* 10 ms a transform */
    bool shed;
    CHECK(placement_admit(&p, 0, 0, 100000, 0, 2, &shed) && !shed);
    CHECK(placement_admit(&p, 0, 0, 100000, 10, 2, &shed) && !shed); /* 60 ms < 100 */
    CHECK(!placement_admit(&p, 0, 0, 100000, 40, 2, &shed) && shed); /* 210 ms > 100 */
    CHECK(placement_admit(&p, 0, 0, 0, 40, 2, &shed)); /* no budget: the default, 1 s */
    CHECK_EQ(p.switches, 0);                           /* shedding is not a switch */
    placement_free(&p);
}
