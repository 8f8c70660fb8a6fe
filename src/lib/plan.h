/*
 * plan.h - the sample order: a keyed bijection over [0, n) per (seed,
 * epoch) built from a Feistel network with cycle walking, the shuffle
 * modes layered on it (global, locality, none), the deny-list, and the
 * step / rank / worker arithmetic.  docs/plan.md specifies every
 * constant so that another implementation reproduces the order bit for
 * bit.  The public face is the "plans" section of larder.h; these
 * internals are exposed for tests and for front ends without a dataset.
 */
#ifndef LARDER_PLAN_H
#define LARDER_PLAN_H

#include "common.h"

/*
 * Feistel rounds for a domain of 2^k values: 32 for k <= 6, 16 for
 * k <= 12, else 8.  Tiny halves carry little key per round, so small
 * domains need more rounds to approach a uniform choice of permutation
 * (docs/plan.md has the measurements).  Changing this changes every order.
 */
#define LARDER__PLAN_MAX_ROUNDS 32

/* What a permutation orders; part of its key derivation. */
enum larder__plan_purpose {
    LARDER__PURPOSE_SAMPLES = 1, /* global mode: positions to dense sample indices */
    LARDER__PURPOSE_SHARDS = 2,  /* locality mode: positions to shards */
    LARDER__PURPOSE_WINDOW = 3,  /* locality mode: order inside one window */
};

/* The splitmix64 finalizer: a bijection of 64-bit words with full avalanche. */
static inline uint64_t larder__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/*
 * A keyed permutation of [0, n): an alternating Feistel network over the
 * smallest power of two >= n, split into a high half of floor(k/2) bits
 * and a low half of ceil(k/2) bits, with cycle walking back into [0, n).
 * O(1) memory; each step of the walk costs one mix per round and the
 * walk averages fewer than 2 steps because the domain is < 2n.
 */
struct larder__perm {
    uint64_t n;         /* size of the permuted range */
    unsigned low_bits;  /* bits of the half changed by even rounds */
    unsigned high_bits; /* bits of the half changed by odd rounds */
    unsigned rounds;    /* by the domain's size, see above */
    uint64_t keys[LARDER__PLAN_MAX_ROUNDS];
};

/* Key `p` for permuting [0, n) on behalf of (seed, epoch, purpose, index). */
LARDER__HIDDEN void larder__perm_init(struct larder__perm *p, uint64_t n, uint64_t seed,
                                      uint64_t epoch, uint64_t purpose, uint64_t index);
/* The image of x < n; x itself when n <= 1. */
LARDER__HIDDEN uint64_t larder__perm_forward(const struct larder__perm *p, uint64_t x);
/* The preimage of y < n: larder__perm_forward(p, larder__perm_inverse(p, y)) == y. */
LARDER__HIDDEN uint64_t larder__perm_inverse(const struct larder__perm *p, uint64_t y);

/*
 * The deny-list file parser.  No I/O and no allocation: it calls `entry`
 * once per entry with the 1-based line number and the entry's text (not
 * NUL-terminated), after stripping comments ('#' at the start of a line
 * or after a space or tab, to the end of the line) and blanks at both
 * ends; blank and comment-only lines produce no call.  Lines end at LF
 * (a CR before it is a blank).  Returns 0 or the first negative value
 * `entry` returns.  The text may hold any bytes, NUL included.
 */
typedef int (*larder__deny_entry_fn)(void *userdata, uint64_t line, const char *text,
                                     size_t length);
LARDER__HIDDEN int larder__deny_parse(const char *text, size_t length, larder__deny_entry_fn entry,
                                      void *userdata);

/*
 * Where a plan's samples come from when there is no open dataset (tests,
 * other front ends).  larder_plan_create() fills one from a dataset.
 */
struct larder__plan_source {
    uint64_t num_samples;
    /* Locality mode only: the number of shards, and the shard (< num_shards)
     * of sample `id`, 0 or a negative code. */
    uint64_t num_shards;
    int (*shard_of)(void *userdata, uint64_t id, uint32_t *shard);
    /* Deny-list keys: the id of `key` (NUL-terminated), or LARDER_ENOTFOUND.
     * NULL: every entry that is not an id is an unknown key. */
    int64_t (*find_key)(void *userdata, const char *key);
    void *userdata;
};

/* larder_plan_create() over `source` instead of a dataset. */
LARDER__HIDDEN int larder__plan_create(larder_plan **out, const struct larder__plan_source *source,
                                       const larder_plan_options *options);

/*
 * The integers that name a plan (what the node cache's plan registry
 * keeps so that another process can rebuild the order: cache_plans.c).
 * A plan with denied samples cannot be rebuilt from them: `denied` says
 * how many it has.
 */
struct larder__plan_params {
    uint64_t seed, epoch, global_batch, start_step;
    uint64_t num_samples; /* N, the dataset's samples */
    uint32_t world, rank, workers, worker;
    uint32_t mode, locality_window;
    bool pad;
    uint64_t denied;
};
LARDER__HIDDEN int larder__plan_params_get(const larder_plan *plan,
                                           struct larder__plan_params *out);

#endif
