/*
 * test_plan.c - the sample order: the keyed permutation is a bijection
 * and shuffles well, the global sequence never depends on world size or
 * loader workers, resuming on another world size continues it exactly,
 * every sample comes once per epoch (minus the deny-list and the dropped
 * tail), padding and locality windows behave as docs/plan.md says, and
 * the deny-list file parses and fails as specified.
 */
#include "larder_pack.h"
#include "plan.h"
#include "test.h"

#include <errno.h>
#include <math.h>

/* ---- helpers ---------------------------------------------------------- */

/* A synthetic dataset: n samples, sample i in shard shards[i]. */
struct fake {
    uint64_t n, num_shards;
    uint32_t *shards;
};

static int fake_shard_of(void *userdata, uint64_t id, uint32_t *shard)
{
    struct fake *f = userdata;
    *shard = f->shards[id];
    return 0;
}

/* Keys are "k<id>"; "7" is also a key, of sample 3, to test that keys win. */
static int64_t fake_find_key(void *userdata, const char *key)
{
    struct fake *f = userdata;
    if (strcmp(key, "7") == 0 && f->n > 3) return 3;
    if (key[0] != 'k' || key[1] < '0' || key[1] > '9') return LARDER_ENOTFOUND;
    char *end;
    unsigned long long id = strtoull(key + 1, &end, 10);
    if (*end || id >= f->n) return LARDER_ENOTFOUND;
    return (int64_t)id;
}

/* n samples over `shards` shards of uneven sizes whose ids interleave. */
static struct fake fake_new(uint64_t n, uint64_t shards)
{
    struct fake f = {.n = n, .num_shards = shards, .shards = malloc((n ? n : 1) * 4)};
    for (uint64_t i = 0; i < n; i++) {
        uint64_t h = larder__mix64(i + 99);
        /* skew: low shard numbers get more samples */
        f.shards[i] = (uint32_t)((h % shards) * ((h >> 32) % shards) / shards);
    }
    return f;
}

static struct larder__plan_source fake_source(struct fake *f)
{
    return (struct larder__plan_source){.num_samples = f->n,
                                        .num_shards = f->num_shards,
                                        .shard_of = fake_shard_of,
                                        .find_key = fake_find_key,
                                        .userdata = f};
}

static larder_plan_options plan_options(uint64_t seed, uint64_t epoch, uint64_t batch,
                                        uint32_t world, uint32_t rank)
{
    return (larder_plan_options){.version = LARDER_PLAN_OPTIONS_VERSION,
                                 .seed = seed,
                                 .epoch = epoch,
                                 .global_batch = batch,
                                 .world = world,
                                 .rank = rank};
}

static larder_plan *make_plan(struct fake *f, const larder_plan_options *o)
{
    struct larder__plan_source s = fake_source(f);
    larder_plan *p = NULL;
    int rc = larder__plan_create(&p, &s, o);
    if (rc < 0) fprintf(stderr, "plan: %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    return p;
}

/*
 * The global sequence of steps [from, steps) as world W with K workers per
 * rank read it, reassembled by position: out[t*G + r*G/W + i] for every
 * step t a worker produced.  Every slot must be written exactly once.
 */
static void gather(struct fake *f, larder_plan_options o, uint32_t world, uint32_t workers,
                   uint64_t from, uint64_t to, uint64_t *out)
{
    uint64_t batch = o.global_batch, local = batch / world;
    uint8_t *seen = calloc((size_t)((to - from) * batch) + 1, 1);
    uint64_t *ids = malloc((size_t)local * sizeof *ids);
    o.world = world;
    o.workers = workers;
    o.start_step = from;
    for (uint32_t r = 0; r < world; r++) {
        for (uint32_t w = 0; w < workers; w++) {
            o.rank = r;
            o.worker = w;
            larder_plan *p = make_plan(f, &o);
            for (uint64_t i = 0;; i++) {
                int64_t t = larder_plan_worker_step(p, i);
                if (t < 0) {
                    CHECK_EQ(t, LARDER_ENOTFOUND);
                    break;
                }
                CHECK_EQ((t - (int64_t)from) % workers, w);
                if ((uint64_t)t >= to) break;
                CHECK_EQ(larder_plan_batch(p, (uint64_t)t, ids, (size_t)local), local);
                for (uint64_t k = 0; k < local; k++) {
                    uint64_t slot = ((uint64_t)t - from) * batch + r * local + k;
                    CHECK(!seen[slot]);
                    seen[slot] = 1;
                    out[slot] = ids[k];
                }
            }
            larder_plan_destroy(p);
        }
    }
    for (uint64_t s = 0; s < (to - from) * batch; s++)
        CHECK(seen[s]);
    free(seen);
    free(ids);
}

/* ---- the keyed permutation -------------------------------------------- */

static void check_bijection(uint64_t n, uint64_t seed, uint64_t epoch)
{
    struct larder__perm p;
    larder__perm_init(&p, n, seed, epoch, LARDER__PURPOSE_SAMPLES, 0);
    uint8_t *hit = calloc((size_t)n + 1, 1);
    for (uint64_t x = 0; x < n; x++) {
        uint64_t y = larder__perm_forward(&p, x);
        CHECK(y < n);
        CHECK(!hit[y]);
        hit[y] = 1;
        CHECK_EQ(larder__perm_inverse(&p, y), x);
    }
    free(hit);
}

TEST(plan_permutation_is_a_bijection)
{
    static const uint64_t sizes[] = {1,    2,    3,    4,    5,     7,     8,     9,     15,
                                     16,   17,   31,   33,   100,   255,   256,   257,   1000,
                                     1023, 1024, 1025, 4097, 10007, 65535, 65536, 65537, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (uint64_t seed = 0; seed < 3; seed++)
            check_bijection(sizes[i], seed * 7919, seed + 1);
    check_bijection((1u << 20) + 3, 42, 0);
    check_bijection(1u << 20, 42, 1);
    /* an empty range permutes nothing; a huge one still inverts */
    struct larder__perm p;
    larder__perm_init(&p, 0, 1, 2, LARDER__PURPOSE_SAMPLES, 0);
    larder__perm_init(&p, UINT64_MAX, 1, 2, LARDER__PURPOSE_SAMPLES, 0);
    for (uint64_t x = UINT64_MAX - 5; x < UINT64_MAX; x++) {
        uint64_t y = larder__perm_forward(&p, x);
        CHECK(y < UINT64_MAX);
        CHECK_EQ(larder__perm_inverse(&p, y), x);
    }
    larder__perm_init(&p, (UINT64_C(1) << 40) + 17, 5, 6, LARDER__PURPOSE_SAMPLES, 0);
    for (uint64_t x = 0; x < 1000; x++) {
        uint64_t v = x * 1234567891 % p.n;
        CHECK_EQ(larder__perm_inverse(&p, larder__perm_forward(&p, v)), v);
    }
}

TEST(plan_permutation_is_keyed)
{
    const uint64_t n = 1000;
    struct larder__perm a, b;
    uint64_t same_seed = 0, other_epoch = 0, other_seed = 0, other_purpose = 0, other_index = 0;
    larder__perm_init(&a, n, 7, 3, LARDER__PURPOSE_SAMPLES, 0);
    larder__perm_init(&b, n, 7, 3, LARDER__PURPOSE_SAMPLES, 0);
    for (uint64_t x = 0; x < n; x++)
        same_seed += larder__perm_forward(&a, x) == larder__perm_forward(&b, x);
    CHECK_EQ(same_seed, n);
    struct {
        uint64_t seed, epoch, purpose, index, *agree;
    } variants[] = {{7, 4, LARDER__PURPOSE_SAMPLES, 0, &other_epoch},
                    {8, 3, LARDER__PURPOSE_SAMPLES, 0, &other_seed},
                    {7, 3, LARDER__PURPOSE_SHARDS, 0, &other_purpose},
                    {7, 3, LARDER__PURPOSE_SAMPLES, 1, &other_index}};
    for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
        larder__perm_init(&b, n, variants[v].seed, variants[v].epoch, variants[v].purpose,
                          variants[v].index);
        for (uint64_t x = 0; x < n; x++)
            *variants[v].agree += larder__perm_forward(&a, x) == larder__perm_forward(&b, x);
    }
    /* two unrelated permutations agree at about one position in n */
    CHECK(other_epoch < 10);
    CHECK(other_seed < 10);
    CHECK(other_purpose < 10);
    CHECK(other_index < 10);
}

/* The published vectors of docs/plan.md: an implementation elsewhere that
 * matches these matches the order. */
TEST(plan_reference_vectors)
{
    struct larder__perm p;
    larder__perm_init(&p, 10, 3, 0, LARDER__PURPOSE_SAMPLES, 0);
    static const uint64_t ten[10] = {6, 9, 1, 0, 2, 8, 5, 4, 7, 3};
    for (uint64_t x = 0; x < 10; x++)
        CHECK_EQ(larder__perm_forward(&p, x), ten[x]);
    CHECK(p.keys[0] == UINT64_C(0x1cb0477813f30f79));
    CHECK(p.keys[1] == UINT64_C(0x346440cf7f933a0f));
    CHECK(larder__mix64(1) == UINT64_C(0x5692161d100b05e5));
    larder__perm_init(&p, 1000003, 42, 7, LARDER__PURPOSE_SAMPLES, 0);
    static const uint64_t big[8] = {719945, 471777, 568467, 837189, 598593, 460537, 921977, 877296};
    for (uint64_t x = 0; x < 8; x++)
        CHECK_EQ(larder__perm_forward(&p, x), big[x]);
    CHECK(p.keys[0] == UINT64_C(0x16c71015d950e4c8));
}

/* A chi-square statistic over `cells` counts with the given expectation. */
static double chi_square(const uint64_t *counts, size_t cells, double expected)
{
    double sum = 0;
    for (size_t i = 0; i < cells; i++)
        sum += ((double)counts[i] - expected) * ((double)counts[i] - expected) / expected;
    return sum;
}

TEST(plan_permutation_shuffles_well)
{
    /* Deterministic: these bounds hold for these seeds, with a wide margin
     * over what a uniformly random permutation would give. */
    const uint64_t n = 100000;
    struct larder__perm e0, e1;
    larder__perm_init(&e0, n, 1234, 0, LARDER__PURPOSE_SAMPLES, 0);
    larder__perm_init(&e1, n, 1234, 1, LARDER__PURPOSE_SAMPLES, 0);
    uint64_t table[100] = {0}, fixed = 0, neighbours = 0;
    double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    uint64_t previous = 0;
    for (uint64_t x = 0; x < n; x++) {
        uint64_t y = larder__perm_forward(&e0, x), z = larder__perm_forward(&e1, x);
        table[(x * 10 / n) * 10 + y * 10 / n]++; /* position decile x sample decile */
        fixed += y == x;
        if (x && (y == previous + 1 || previous == y + 1)) neighbours++;
        previous = y;
        sx += (double)y, sy += (double)z;
        sxx += (double)y * (double)y, syy += (double)z * (double)z, sxy += (double)y * (double)z;
    }
    /* 81 degrees of freedom: mean 81, standard deviation 12.7 */
    double chi = chi_square(table, 100, n / 100.0);
    CHECK(chi < 180);
    CHECK(fixed < 10);      /* expected 1 */
    CHECK(neighbours < 20); /* expected 2 */
    double cov = sxy / n - (sx / n) * (sy / n);
    double r = cov / sqrt((sxx / n - (sx / n) * (sx / n)) * (syy / n - (sy / n) * (sy / n)));
    CHECK(fabs(r) < 0.02); /* one standard deviation is 0.003 */

    /* small ranges: over many seeds each permutation is about as likely
     * (this is what the extra rounds for small domains buy) */
    for (uint64_t small = 3; small <= 7; small++) {
        static uint64_t counts[5040];
        uint64_t factorial = 1;
        for (uint64_t i = 2; i <= small; i++)
            factorial *= i;
        const uint64_t per_cell = small <= 5 ? 400 : 100, trials = factorial * per_cell;
        memset(counts, 0, sizeof counts);
        for (uint64_t seed = 0; seed < trials; seed++) {
            struct larder__perm p;
            larder__perm_init(&p, small, seed, 0, LARDER__PURPOSE_SAMPLES, 0);
            /* Lehmer code of the permutation */
            uint64_t order[7], code = 0;
            for (uint64_t x = 0; x < small; x++)
                order[x] = larder__perm_forward(&p, x);
            for (uint64_t x = 0; x < small; x++) {
                uint64_t smaller = 0;
                for (uint64_t y = x + 1; y < small; y++)
                    smaller += order[y] < order[x];
                code = code * (small - x) + smaller;
            }
            counts[code]++;
        }
        /* df = k! - 1: mean df, standard deviation sqrt(2 df); allow 6 of them */
        double df = (double)factorial - 1;
        CHECK(chi_square(counts, (size_t)factorial, (double)per_cell) < df + 6 * sqrt(2 * df));
        for (uint64_t c = 0; c < factorial; c++)
            CHECK(counts[c] > 0);
    }
    /* mid-sized ranges: the images of three fixed inputs are about uniform
     * over the n (n-1) (n-2) possible triples */
    static const uint64_t mid[] = {9, 16, 33};
    for (size_t i = 0; i < 3; i++) {
        uint64_t n3 = mid[i], cells = n3 * n3 * n3, valid = n3 * (n3 - 1) * (n3 - 2);
        uint64_t *counts = calloc((size_t)cells, sizeof *counts), trials = valid * 40;
        for (uint64_t seed = 0; seed < trials; seed++) {
            struct larder__perm p;
            larder__perm_init(&p, n3, seed, 99, LARDER__PURPOSE_SAMPLES, 0);
            uint64_t a = larder__perm_forward(&p, 0), b = larder__perm_forward(&p, 1);
            counts[(a * n3 + b) * n3 + larder__perm_forward(&p, 2)]++;
        }
        double sum = 0, e = 40;
        for (uint64_t a = 0; a < n3; a++)
            for (uint64_t b = 0; b < n3; b++)
                for (uint64_t c = 0; c < n3; c++) {
                    uint64_t got = counts[(a * n3 + b) * n3 + c];
                    if (a == b || b == c || a == c)
                        CHECK_EQ(got, 0);
                    else
                        sum += ((double)got - e) * ((double)got - e) / e;
                }
        double df = (double)valid - 1;
        CHECK(sum < df + 6 * sqrt(2 * df));
        free(counts);
    }
}

/* ---- ranks, workers, resumption ---------------------------------------- */

TEST(plan_global_sequence_independent_of_world_and_workers)
{
    struct fake f = fake_new(1003, 17);
    static const int modes[] = {LARDER_PLAN_GLOBAL, LARDER_PLAN_LOCALITY, LARDER_PLAN_NONE};
    for (size_t m = 0; m < 3; m++) {
        for (int pad = 0; pad <= 1; pad++) {
            larder_plan_options o = plan_options(5, 2, 24, 1, 0);
            o.mode = modes[m];
            o.pad = pad;
            o.locality_window = 3;
            larder_plan *one = make_plan(&f, &o);
            uint64_t steps = larder_plan_steps(one);
            CHECK_EQ(steps, pad ? (1003 + 23) / 24 : 1003 / 24);
            uint64_t *want = malloc((size_t)(steps * 24) * sizeof *want);
            for (uint64_t pos = 0; pos < steps * 24; pos++) {
                int64_t id = larder_plan_sample_at(one, pos);
                CHECK(id >= 0);
                want[pos] = (uint64_t)id;
            }
            larder_plan_destroy(one);
            uint64_t *got = malloc((size_t)(steps * 24) * sizeof *got);
            static const uint32_t worlds[] = {1, 2, 4, 8};
            static const uint32_t workers[] = {1, 2, 3, 5};
            for (size_t w = 0; w < 4; w++)
                for (size_t k = 0; k < 4; k++) {
                    memset(got, 0xff, (size_t)(steps * 24) * sizeof *got);
                    gather(&f, o, worlds[w], workers[k], 0, steps, got);
                    CHECK(memcmp(got, want, (size_t)(steps * 24) * sizeof *got) == 0);
                }
            free(want);
            free(got);
        }
    }
    free(f.shards);
}

TEST(plan_resume_on_another_world_size)
{
    struct fake f = fake_new(5000, 40);
    for (int mode = LARDER_PLAN_GLOBAL; mode <= LARDER_PLAN_LOCALITY; mode++) {
        larder_plan_options o = plan_options(77, 9, 64, 1, 0);
        o.mode = mode;
        larder_plan *one = make_plan(&f, &o);
        uint64_t steps = larder_plan_steps(one);
        CHECK_EQ(steps, 5000 / 64);
        uint64_t *want = malloc((size_t)(steps * 64) * sizeof *want);
        gather(&f, o, 1, 1, 0, steps, want);
        larder_plan_destroy(one);

        const uint64_t stop = 31;
        uint64_t *got = malloc((size_t)(steps * 64) * sizeof *got);
        gather(&f, o, 4, 2, 0, stop, got); /* first part on 4 ranks, 2 workers */
        static const uint32_t resume_worlds[] = {2, 8};
        for (size_t r = 0; r < 2; r++) {
            memset(got + stop * 64, 0, (size_t)((steps - stop) * 64) * sizeof *got);
            gather(&f, o, resume_worlds[r], 3, stop, steps, got + stop * 64);
            CHECK(memcmp(got, want, (size_t)(steps * 64) * sizeof *got) == 0);
        }
        free(want);
        free(got);
    }
    free(f.shards);
}

TEST(plan_every_sample_once_per_epoch)
{
    struct fake f = fake_new(2000, 13);
    uint64_t deny[] = {0, 5, 5, 1999, 1000, 1001, 77, 3};
    for (int mode = LARDER_PLAN_GLOBAL; mode <= LARDER_PLAN_NONE; mode++) {
        larder_plan_options o = plan_options(1, 4, 30, 3, 0);
        o.mode = mode;
        o.deny_ids = deny;
        o.num_deny_ids = sizeof deny / sizeof *deny;
        larder_plan *p = make_plan(&f, &o);
        larder_plan_info info;
        CHECK_EQ(larder_plan_info_get(p, &info), 0);
        CHECK_EQ(info.num_denied, 7);
        CHECK_EQ(info.num_samples, 1993);
        CHECK_EQ(info.steps, 1993 / 30);
        CHECK_EQ(info.dropped, 1993 % 30);
        CHECK_EQ(info.padded, 0);
        CHECK_EQ(info.local_batch, 10);
        uint8_t *seen = calloc(2000, 1);
        for (uint64_t pos = 0; pos < info.num_samples; pos++) {
            int64_t id = larder_plan_sample_at(p, pos);
            CHECK(id >= 0 && id < 2000);
            CHECK(!seen[id]);
            seen[id] = 1;
            CHECK_EQ(larder_plan_position_of(p, (uint64_t)id), pos);
        }
        for (size_t d = 0; d < sizeof deny / sizeof *deny; d++) {
            CHECK(!seen[deny[d]]);
            CHECK_EQ(larder_plan_position_of(p, deny[d]), LARDER_ENOTFOUND);
        }
        CHECK_EQ(larder_plan_sample_at(p, info.num_samples), LARDER_ENOTFOUND);
        CHECK_EQ(larder_plan_position_of(p, 2000), LARDER_ENOTFOUND);
        if (mode == LARDER_PLAN_NONE) { /* index order, skipping the denied */
            CHECK_EQ(larder_plan_sample_at(p, 0), 1);
            CHECK_EQ(larder_plan_sample_at(p, 2), 4);
        }
        free(seen);
        /* the steps read exactly the positions before the dropped tail */
        uint64_t *all = malloc((size_t)(info.steps * 30) * sizeof *all);
        gather(&f, o, 3, 1, 0, info.steps, all);
        seen = calloc(2000, 1);
        for (uint64_t i = 0; i < info.steps * 30; i++) {
            CHECK(!seen[all[i]]);
            seen[all[i]] = 1;
        }
        for (uint64_t pos = info.steps * 30; pos < info.num_samples; pos++)
            CHECK(!seen[larder_plan_sample_at(p, pos)]);
        free(seen);
        free(all);
        larder_plan_destroy(p);
    }
    /* with a batch that divides the allowed samples, nothing is dropped */
    larder_plan_options o = plan_options(1, 0, 1993, 1, 0);
    o.deny_ids = deny;
    o.num_deny_ids = sizeof deny / sizeof *deny;
    larder_plan *p = make_plan(&f, &o);
    uint64_t *ids = malloc(1993 * sizeof *ids);
    CHECK_EQ(larder_plan_batch(p, 0, ids, 1993), 1993);
    uint8_t *seen = calloc(2000, 1);
    for (int i = 0; i < 1993; i++)
        seen[ids[i]]++;
    uint64_t total = 0;
    for (int i = 0; i < 2000; i++)
        total += seen[i];
    CHECK_EQ(total, 1993);
    free(seen);
    free(ids);
    larder_plan_destroy(p);
    free(f.shards);
}

TEST(plan_pad_gives_equal_batches)
{
    struct fake f = fake_new(1001, 5);
    larder_plan_options o = plan_options(3, 1, 40, 4, 0);
    o.pad = 1;
    larder_plan *p = make_plan(&f, &o);
    larder_plan_info info;
    larder_plan_info_get(p, &info);
    CHECK_EQ(info.steps, 26); /* ceil(1001 / 40) */
    CHECK_EQ(info.padded, 26 * 40 - 1001);
    CHECK_EQ(info.dropped, 0);
    /* the padding repeats the start of the same epoch's order */
    for (uint64_t pos = 1001; pos < 26 * 40; pos++)
        CHECK_EQ(larder_plan_sample_at(p, pos), larder_plan_sample_at(p, pos - 1001));
    CHECK_EQ(larder_plan_sample_at(p, 26 * 40), LARDER_ENOTFOUND);
    larder_plan_destroy(p);
    /* every rank gets the same number of full batches */
    uint64_t ids[10];
    for (uint32_t r = 0; r < 4; r++) {
        o.rank = r;
        p = make_plan(&f, &o);
        uint64_t batches = 0;
        for (uint64_t t = 0; larder_plan_batch(p, t, ids, 10) == 10; t++)
            batches++;
        CHECK_EQ(batches, 26);
        CHECK_EQ(larder_plan_batch(p, 26, ids, 10), 0);
        larder_plan_destroy(p);
    }
    /* a global batch larger than the epoch wraps around more than once */
    struct fake tiny = fake_new(3, 1);
    o = plan_options(3, 1, 8, 2, 1);
    o.pad = 1;
    p = make_plan(&tiny, &o);
    CHECK_EQ(larder_plan_steps(p), 1);
    CHECK_EQ(larder_plan_batch(p, 0, ids, 10), 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(ids[i], larder_plan_sample_at(p, (uint64_t)(4 + i) % 3));
    larder_plan_destroy(p);
    o.pad = 0;
    p = make_plan(&tiny, &o);
    CHECK_EQ(larder_plan_steps(p), 0);
    CHECK_EQ(larder_plan_batch(p, 0, ids, 10), 0);
    CHECK_EQ(larder_plan_worker_step(p, 0), LARDER_ENOTFOUND);
    larder_plan_destroy(p);
    free(tiny.shards);
    free(f.shards);
}

/* ---- locality mode ------------------------------------------------------ */

TEST(plan_locality_windows_stay_within_k_shards)
{
    const uint64_t n = 6000, shards = 37;
    struct fake f = fake_new(n, shards);
    uint64_t deny[] = {1, 2, 3, 500, 5999};
    for (uint32_t k = 1; k <= 5; k++) {
        larder_plan_options o = plan_options(11, k, 8, 1, 0);
        o.mode = LARDER_PLAN_LOCALITY;
        o.locality_window = k;
        o.deny_ids = deny;
        o.num_deny_ids = 5;
        larder_plan *p = make_plan(&f, &o);
        uint64_t m = n - 5, first[37], last[37], used = 0;
        memset(first, 0xff, sizeof first);
        memset(last, 0, sizeof last);
        uint8_t *seen = calloc(n, 1);
        uint64_t changes = 0;
        for (uint64_t pos = 0; pos < m; pos++) {
            int64_t id = larder_plan_sample_at(p, pos);
            CHECK(id >= 0 && (uint64_t)id < n);
            CHECK(!seen[id]);
            seen[id] = 1;
            CHECK_EQ(larder_plan_position_of(p, (uint64_t)id), pos);
            uint32_t s = f.shards[id];
            if (first[s] == UINT64_MAX) first[s] = pos, used++;
            last[s] = pos;
            if (pos && f.shards[larder_plan_sample_at(p, pos - 1)] != s) changes++;
        }
        for (int d = 0; d < 5; d++)
            CHECK(!seen[deny[d]]);
        /* Shards whose position ranges overlap share a window, and a window
         * holds at most k shards: group overlapping ranges and count. */
        uint8_t grouped[37] = {0};
        uint64_t groups = 0;
        for (uint64_t pos = 0; pos < m;) {
            uint64_t end = pos, members = 0;
            for (bool grew = true; grew;) {
                grew = false;
                for (uint32_t s = 0; s < shards; s++)
                    if (!grouped[s] && first[s] != UINT64_MAX && first[s] <= end) {
                        grouped[s] = 1, members++, grew = true;
                        if (last[s] > end) end = last[s];
                    }
            }
            CHECK(members >= 1 && members <= k);
            groups++;
            pos = end + 1;
        }
        CHECK(groups >= (used + k - 1) / k);
        if (k == 1) CHECK_EQ(changes, used - 1); /* shard after shard */
        if (k >= 3) CHECK(changes > m / 3);      /* samples interleave */
        free(seen);
        larder_plan_destroy(p);
    }
    free(f.shards);
}

TEST(plan_set_epoch_matches_a_new_plan)
{
    struct fake f = fake_new(777, 9);
    for (int mode = LARDER_PLAN_GLOBAL; mode <= LARDER_PLAN_LOCALITY; mode++) {
        larder_plan_options o = plan_options(2, 0, 7, 1, 0);
        o.mode = mode;
        larder_plan *a = make_plan(&f, &o);
        o.epoch = 5;
        larder_plan *b = make_plan(&f, &o);
        uint64_t differ = 0;
        for (uint64_t pos = 0; pos < 777; pos++)
            differ += larder_plan_sample_at(a, pos) != larder_plan_sample_at(b, pos);
        CHECK(differ > 700);
        CHECK_EQ(larder_plan_set_epoch(a, 5), 0);
        for (uint64_t pos = 0; pos < 777; pos++)
            CHECK_EQ(larder_plan_sample_at(a, pos), larder_plan_sample_at(b, pos));
        larder_plan_info info;
        larder_plan_info_get(a, &info);
        CHECK_EQ(info.epoch, 5);
        larder_plan_destroy(a);
        larder_plan_destroy(b);
    }
    free(f.shards);
}

/* ---- options and errors ------------------------------------------------- */

TEST(plan_rejects_inconsistent_options)
{
    struct fake f = fake_new(100, 4);
    struct larder__plan_source s = fake_source(&f);
    larder_plan *p = (larder_plan *)&f;
    larder_plan_options o = plan_options(0, 0, 10, 4, 0);
    CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "world size 4 does not divide the global batch 10"));
    CHECK(p == (larder_plan *)&f); /* untouched on failure */
    o = plan_options(0, 0, 8, 4, 4);
    CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "rank 4"));
    o = plan_options(0, 0, 8, 4, 0);
    o.workers = 2, o.worker = 2;
    CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "worker 2"));
    o = plan_options(0, 0, 8, 4, 0);
    o.mode = 9;
    CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_EUSAGE);
    o = plan_options(0, 0, 8, 4, 0);
    o.version = 99;
    CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_EUSAGE);
    uint64_t bad_deny = 100;
    o = plan_options(0, 0, 8, 4, 0);
    o.deny_ids = &bad_deny, o.num_deny_ids = 1;
    CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_EUSAGE);
    CHECK(strstr(larder_errmsg(), "past the end"));
    /* locality needs the shards */
    s.shard_of = NULL;
    o = plan_options(0, 0, 8, 4, 0);
    o.mode = LARDER_PLAN_LOCALITY;
    CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_EUSAGE);
    /* zeroed batch, world and workers mean 1 */
    s = fake_source(&f);
    o = (larder_plan_options){.version = LARDER_PLAN_OPTIONS_VERSION};
    CHECK_EQ(larder__plan_create(&p, &s, &o), 0);
    CHECK_EQ(larder_plan_steps(p), 100);
    uint64_t id;
    CHECK_EQ(larder_plan_batch(p, 0, &id, 0), LARDER_ETOOSMALL);
    CHECK_EQ(larder_plan_batch(p, 99, &id, 1), 1);
    CHECK_EQ(larder_plan_batch(p, 100, &id, 1), 0);
    CHECK_EQ(larder_plan_worker_step(p, 99), 99);
    CHECK_EQ(larder_plan_worker_step(p, 100), LARDER_ENOTFOUND);
    larder_plan_destroy(p);
    larder_plan_destroy(NULL);
    /* workers split from the start step */
    o.start_step = 10, o.workers = 4, o.worker = 3;
    CHECK_EQ(larder__plan_create(&p, &s, &o), 0);
    CHECK_EQ(larder_plan_worker_step(p, 0), 13);
    CHECK_EQ(larder_plan_worker_step(p, 1), 17);
    CHECK_EQ(larder_plan_worker_step(p, 21), 97);
    CHECK_EQ(larder_plan_worker_step(p, 22), LARDER_ENOTFOUND);
    CHECK_EQ(larder_plan_worker_step(p, UINT64_MAX), LARDER_ENOTFOUND);
    larder_plan_destroy(p);
    free(f.shards);
}

/* ---- the deny-list ------------------------------------------------------ */

struct parsed {
    char text[16][64];
    uint64_t line[16];
    int count;
};

static int collect(void *userdata, uint64_t line, const char *text, size_t length)
{
    struct parsed *p = userdata;
    CHECK(p->count < 16 && length < 64);
    memcpy(p->text[p->count], text, length);
    p->text[p->count][length] = '\0';
    p->line[p->count++] = line;
    return 0;
}

TEST(plan_deny_parse)
{
    static const char text[] = "# bad samples\n"
                               "12\n"
                               "\n"
                               "  shard-a/img 001  \t# blurry\n"
                               "a#b\n"
                               "\t#only a comment\r\n"
                               "7\r\n"
                               "   \n"
                               "last";
    struct parsed p = {0};
    CHECK_EQ(larder__deny_parse(text, sizeof text - 1, collect, &p), 0);
    CHECK_EQ(p.count, 5);
    CHECK(strcmp(p.text[0], "12") == 0);
    CHECK_EQ(p.line[0], 2);
    CHECK(strcmp(p.text[1], "shard-a/img 001") == 0);
    CHECK_EQ(p.line[1], 4);
    CHECK(strcmp(p.text[2], "a#b") == 0);
    CHECK_EQ(p.line[2], 5);
    CHECK(strcmp(p.text[3], "7") == 0);
    CHECK_EQ(p.line[3], 7);
    CHECK(strcmp(p.text[4], "last") == 0);
    CHECK_EQ(p.line[4], 9);
    memset(&p, 0, sizeof p);
    CHECK_EQ(larder__deny_parse("", 0, collect, &p), 0);
    CHECK_EQ(p.count, 0);
}

static int stop_at_second(void *userdata, uint64_t line, const char *text, size_t length)
{
    (void)userdata, (void)text, (void)length;
    return line == 2 ? -EIO : 0;
}

TEST(plan_deny_file)
{
    struct fake f = fake_new(50, 3);
    struct larder__plan_source s = fake_source(&f);
    CHECK_EQ(larder__deny_parse("1\n2\n3\n", 6, stop_at_second, NULL), -EIO);
    const char *good = "# ids and keys\n10\nk20\nk20\n7   # key '7' is sample 3, not id 7\n"
                       "49\n";
    test_write_file(test_path("good.deny"), good, strlen(good));
    larder_plan_options o = plan_options(0, 0, 1, 1, 0);
    o.deny_path = test_path("good.deny");
    uint64_t extra = 11;
    o.deny_ids = &extra, o.num_deny_ids = 1;
    larder_plan *p;
    CHECK_EQ(larder__plan_create(&p, &s, &o), 0);
    larder_plan_info info;
    larder_plan_info_get(p, &info);
    CHECK_EQ(info.num_denied, 5); /* 3, 10, 11, 20, 49 */
    CHECK_EQ(info.num_samples, 45);
    static const uint64_t denied[] = {3, 10, 11, 20, 49};
    for (int i = 0; i < 5; i++)
        CHECK_EQ(larder_plan_position_of(p, denied[i]), LARDER_ENOTFOUND);
    CHECK(larder_plan_position_of(p, 7) >= 0);
    larder_plan_destroy(p);

    static const struct {
        const char *text, *message;
    } bad[] = {
        {"1\n2\nno-such-key\n", "bad.deny: line 3: no sample with key 'no-such-key'"},
        {"# x\n\n50\n", "bad.deny: line 3: no sample with id or key '50' (the dataset has 50"},
        {"99999999999999999999999\n", "line 1: no sample with key '99999999999999999999999'"},
        {"k1\nk 2\n", "line 2: no sample with key 'k 2'"},
        {"1\n2\x00x\n", "line 2: NUL byte"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t length = strlen(bad[i].text);
        if (i == 4) length = 6; /* past the NUL */
        test_write_file(test_path("bad.deny"), bad[i].text, length);
        o.deny_path = test_path("bad.deny");
        CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_ENOTFOUND);
        if (!strstr(larder_errmsg(), bad[i].message)) fprintf(stderr, "%s\n", larder_errmsg());
        CHECK(strstr(larder_errmsg(), bad[i].message));
    }
    /* without a key resolver only ids are entries */
    s.find_key = NULL;
    test_write_file(test_path("ids.deny"), "k1\n", 3);
    o.deny_path = test_path("ids.deny");
    CHECK_EQ(larder__plan_create(&p, &s, &o), LARDER_ENOTFOUND);
    o.deny_path = test_path("missing.deny");
    CHECK_EQ(larder__plan_create(&p, &s, &o), -ENOENT);
    CHECK(strstr(larder_errmsg(), "missing.deny"));
    free(f.shards);
}

/* ---- through a real dataset ---------------------------------------------- */

TEST(plan_over_a_packed_dataset)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", test_path("src"));
    for (int i = 0; i < 90; i++) {
        char path[600], data[3000];
        test_fill_random(data, sizeof data, (uint64_t)i);
        snprintf(path, sizeof path, "%s/s%03d.bin", dir, i);
        test_write_file(path, data, (size_t)(i * 31 % 2999) + 1);
    }
    const char *sources[] = {dir};
    larder_pack_options po = {.version = LARDER_PACK_OPTIONS_VERSION,
                              .shard_size = 16 * 1024,
                              .shuffle = 1,
                              .shuffle_seed = 5,
                              .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("out"), &po, NULL), 0);
    char index[600], deny[600];
    snprintf(index, sizeof index, "%s/index.larder", test_path("out"));
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, index, NULL), 0);
    larder_dataset_info di;
    larder_dataset_info_get(d, &di);
    CHECK(di.num_shards >= 4);

    CHECK_EQ(larder_plan_default_deny(index, deny, sizeof deny), 0);
    test_write_file(strcat(strcpy(deny, index), ".deny"), "s007\n3\n", 7);
    char found[600];
    CHECK_EQ(larder_plan_default_deny(index, found, sizeof found), 1);
    CHECK(strcmp(found, deny) == 0);
    char small[10];
    CHECK_EQ(larder_plan_default_deny(index, small, sizeof small), LARDER_ETOOSMALL);
    CHECK_EQ(larder_plan_default_deny("http://example.invalid/index.larder", small, 10), 0);

    larder_plan_options o = plan_options(9, 1, 4, 2, 1);
    o.mode = LARDER_PLAN_LOCALITY;
    o.locality_window = 2;
    o.deny_path = found;
    larder_plan *p;
    CHECK_EQ(larder_plan_create(&p, d, &o), 0);
    larder_plan_info info;
    larder_plan_info_get(p, &info);
    CHECK_EQ(info.num_denied, 2);
    CHECK_EQ(info.num_samples, 88);
    CHECK_EQ(larder_plan_position_of(p, (uint64_t)larder_find_key(d, "s007")), LARDER_ENOTFOUND);
    CHECK_EQ(larder_plan_position_of(p, 3), LARDER_ENOTFOUND);
    uint8_t seen[90] = {0};
    for (uint64_t pos = 0; pos < 88; pos++) {
        int64_t id = larder_plan_sample_at(p, pos);
        CHECK(id >= 0 && id < 90 && !seen[id]);
        seen[id] = 1;
    }
    larder_plan_destroy(p);
    larder_close(d); /* the plan does not need the dataset afterwards */
    CHECK_EQ(larder_plan_create(&p, NULL, &o), LARDER_EUSAGE);
}
