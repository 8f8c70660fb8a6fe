/*
 * test_larderd_transform.c - the daemon's transform parts without
 * sockets: the result cache never answers under another version or other
 * parameters and keeps to its capacity; placement switches after load
 * held for its time, returns with hysteresis, does not oscillate on load
 * that flickers or on its own work, and sheds requests its queue would
 * keep past their budget; a DEMAND transform runs before NEAR ones
 * queued earlier.
 */
#include "daemon_fixture.h"
#include "pool.h"
#include "transform.h"
#include "test.h"
#include "transform_cache.h"
#include "transform_place.h"
#include "wire.h"

#include <pthread.h>

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

TEST(larderd_transform_placement_proc_stat_lines)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    CPU_SET(3, &set);
    uint64_t busy = 0, total = 0;
    /* the aggregate line: its first number (user ticks) is no CPU, whether
     * it would name a CPU of the set or overflow an int */
    CHECK(!placement_cpu_line("cpu  3 0 0 0 0 0 0 0 0 0\n", &set, &busy, &total));
    CHECK(!placement_cpu_line("cpu  99999999999 1 2 3 4 5 6 7 0 0\n", &set, &busy, &total));
    CHECK_EQ(total, 0);
    /* cpu1 is not larderd's; intr is not a CPU */
    CHECK(!placement_cpu_line("cpu1 10 10 10 10 10 10 10 10 0 0\n", &set, &busy, &total));
    CHECK(!placement_cpu_line("intr 1 2 3 4 5 6 7 8 9\n", &set, &busy, &total));
    /* user nice system idle iowait irq softirq steal: busy is all but idle+iowait */
    CHECK(placement_cpu_line("cpu0 100 2 30 500 20 1 3 4 0 0\n", &set, &busy, &total));
    CHECK(placement_cpu_line("cpu3 1 1 1 1 1 1 1 1 0 0\n", &set, &busy, &total));
    CHECK_EQ(busy, 140 + 6);
    CHECK_EQ(total, 660 + 8);
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
    placement_note(&p, 0, 10000);
    CHECK(placement_admit(&p, 0, 150000, 100000, 2, 2, &shed) && !shed); /* waits 1.5x */
    CHECK(!placement_admit(&p, 0, 250000, 100000, 2, 2, &shed) && shed); /* 2.5x */
    CHECK(placement_admit(&p, 0, 250000, 100000, 1, 2, &shed) && !shed); /* a worker idles */
    for (int i = 0; i < 50; i++) /* very slow now: an idle worker still takes one */
        placement_note(&p, 0, 10000000);
    CHECK(placement_admit(&p, 0, 0, 100000, 0, 2, &shed) && !shed);
    CHECK(placement_admit(&p, 0, 0, 100000, 1, 2, &shed) && !shed);
    CHECK(!placement_admit(&p, 0, 0, 100000, 2, 2, &shed) && shed);
    CHECK_EQ(p.switches, 0); /* shedding is not a switch */
    placement_free(&p);
}

/*
 * The benchmark's offloaded run (bench/results/transform.md): one transform
 * job at 4.7 ms a JPEG, two DataLoader workers with 8 transformed reads in
 * flight each, 4.2 ms of CPU a JPEG at the reader.  Worked out by hand from
 * the rule (docs/transforms.md, "Placement"): a request finding q queued or
 * running on 1 job is predicted to finish in (q + 1) x 4.7 ms.
 */
TEST(larderd_transform_placement_step_budget)
{
    struct placement p;
    placement_init(&p, 100, 0);
    placement_note(&p, 0, 4700);
    bool shed;
    /* a reader's step budget: 8 reads in flight x 4.2 ms = 33.6 ms */
    uint32_t step = (uint32_t)larder__transform_step_budget(8, 4200);
    CHECK_EQ(step, 33600);
    /* q = 6: 7 x 4.7 = 32.9 ms <= 33.6: the daemon keeps it */
    for (uint64_t q = 0; q <= 6; q++)
        CHECK(placement_admit(&p, 0, 20000, step, q, 1, &shed) && !shed);
    /* q = 7: 8 x 4.7 = 37.6 ms > 33.6: shed */
    CHECK(!placement_admit(&p, 0, 20000, step, 7, 1, &shed) && shed);
    /* what the budget was, a sample's cost here (4.2 ms): the second of two
     * requests that arrive together (q = 1: 9.4 ms) was shed, with the
     * daemon's core otherwise idle: the half shed in the benchmark */
    CHECK(!placement_admit(&p, 0, 4000, 4200, 1, 1, &shed) && shed);
    /* the reader waiting more than twice its step budget (67.2 ms) a
     * sample: the queue is not keeping up, shed even a short queue */
    CHECK(placement_admit(&p, 0, 67000, step, 1, 1, &shed) && !shed);
    CHECK(!placement_admit(&p, 0, 68000, step, 1, 1, &shed) && shed);
    CHECK_EQ(p.switches, 0);
    placement_free(&p);
}

/* A task that holds a pool's one worker until the test opens it. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool holding, open;
};

static void gate_task(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    g->holding = true;
    pthread_cond_broadcast(&g->changed);
    while (!g->open)
        pthread_cond_wait(&g->changed, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_hold(struct larder__pool *pool, struct gate *g, bool wait)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    CHECK_EQ(larder__pool_submit(pool, gate_task, g, LARDER__DEMAND), 0);
    pthread_mutex_lock(&g->lock);
    while (wait && !g->holding)
        pthread_cond_wait(&g->changed, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_wait(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    while (!g->holding)
        pthread_cond_wait(&g->changed, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
}

static void send_transform(struct connection *c, const struct larder__opened *ds, uint64_t sample,
                           int priority)
{
    struct larder__transform_request r = {.id_low = ds->id_low,
                                          .id_high = ds->id_high,
                                          .sample = sample,
                                          .priority = (uint8_t)priority,
                                          .version = 1,
                                          .spec = "zstd_decompress",
                                          .spec_length = 15};
    uint8_t frame[LARDER__WIRE_HEADER + 128];
    int n = larder__wire_encode_transform(frame, sizeof frame, sample, &r);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
}

static int jobs_of(struct connection *c)
{
    pthread_mutex_lock(&c->lock);
    int n = c->jobs;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* Three NEAR transforms wait behind a held worker, then a DEMAND one: it
 * runs first.  The order is seen by a second gate queued behind the DEMAND
 * transform: when the worker holds it, the NEAR ones have not run. */
TEST(larderd_transform_demand_runs_before_prefetch)
{
    const char *index = fixture_dataset("ds", 8, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 2);
    d.config.transform_jobs = 1;
    d.config.transform_cpu_limit = 100; /* placement by CPU off: the machine's load is not ours */
    struct connection *near = fixture_connection(&d, false),
                      *demand = fixture_connection(&d, false);
    fixture_hello(near, false);
    fixture_hello(demand, false);
    uint8_t open[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_URL];
    struct larder__opened opened;
    struct connection *both[2] = {near, demand};
    for (int i = 0; i < 2; i++) {
        int n = larder__wire_encode_open(open, sizeof open, 7, index);
        CHECK(fixture_send(both[i], open, (size_t)n));
        struct output *o = fixture_answer(both[i], LARDER__OPENED);
        CHECK_EQ(larder__wire_opened(o->bytes + LARDER__WIRE_HEADER,
                                     (uint32_t)(o->length - LARDER__WIRE_HEADER), &opened),
                 0);
        free(o);
    }
    struct larder__pool *pool = transforms_pool(&d);
    CHECK(pool != NULL);
    struct gate first, second;
    gate_hold(pool, &first, true);
    for (uint64_t i = 0; i < 3; i++)
        send_transform(near, &opened, i, LARDER__NEAR);
    send_transform(demand, &opened, 5, LARDER__DEMAND);
    gate_hold(pool, &second, false); /* DEMAND, after the DEMAND transform */
    CHECK_EQ(larder__pool_queued(pool, LARDER__NEAR), 3);
    gate_open(&first);
    gate_wait(&second);
    CHECK_EQ(jobs_of(demand), 0); /* done */
    CHECK_EQ(jobs_of(near), 3);   /* not started */
    gate_open(&second);
    fixture_wait_jobs(near);
    /* each answered with its sample's own error: no field is zstd */
    char message[512];
    CHECK_EQ(fixture_error(demand, message, sizeof message), LARDER_ENOTFOUND);
    CHECK(strstr(message, "sample 5: transform zstd_decompress applies to none") != NULL);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(fixture_error(near, message, sizeof message), LARDER_ENOTFOUND);
    connection_release(near);
    connection_release(demand);
    larderd_free(&d);
}
