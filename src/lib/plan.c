/*
 * plan.c - the sample order of an epoch (docs/plan.md is the
 * specification; keep the two in step).
 *
 * Everything derives from one primitive, a keyed permutation of [0, n)
 * (a Feistel network with cycle walking), so position -> sample and
 * sample -> position are O(1) in time and memory and a job can start at
 * any step.  The deny-list removes samples by renumbering: the order
 * permutes the n = N - d "dense" indices, and dense index j is the j-th
 * sample id that is not denied (a binary search over the sorted denied
 * ids).  Ranks and loader workers only cut the one global sequence into
 * pieces, so it never depends on them.  The permutation itself is
 * plan_perm.c.
 */
#include "plan.h"
#include "source.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define DEFAULT_LOCALITY_WINDOW 8

/* ---- the deny-list file --------------------------------------------------- */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int larder__deny_parse(const char *text, size_t length, larder__deny_entry_fn entry, void *userdata)
{
    uint64_t line = 0;
    size_t at = 0;
    while (at < length) {
        line++;
        const char *start = text + at;
        const char *newline = memchr(start, '\n', length - at);
        size_t line_length = newline ? (size_t)(newline - start) : length - at;
        at += line_length + (newline ? 1 : 0);
        /* cut the comment: '#' first on the line or after a blank */
        for (size_t i = 0; i < line_length; i++)
            if (start[i] == '#' && (i == 0 || start[i - 1] == ' ' || start[i - 1] == '\t')) {
                line_length = i;
                break;
            }
        size_t first = 0;
        while (first < line_length && is_blank(start[first]))
            first++;
        while (line_length > first && is_blank(start[line_length - 1]))
            line_length--;
        if (line_length == first) continue;
        int rc = entry(userdata, line, start + first, line_length - first);
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- plans ---------------------------------------------------------------- */

struct larder_plan {
    int mode;
    uint64_t seed, epoch;
    uint64_t dataset_samples; /* N */
    uint64_t n;               /* samples per epoch, N minus the denied */
    uint64_t *denied;         /* sorted, distinct */
    uint64_t num_denied;
    uint64_t global_batch, local_batch, steps;
    uint32_t world, rank, workers, worker;
    uint64_t start_step;
    bool pad;
    struct larder__perm perm; /* global mode: samples; locality mode: shards */

    /* Locality mode.  The samples that are not denied, grouped by shard
     * (ascending ids within a shard): shard s holds
     * by_shard[shard_start[s] .. shard_start[s+1]).  Per epoch, shard_at[q]
     * is the shard at permuted position q and pos_start[q] the position
     * where its samples begin in the shard-permuted concatenation. */
    uint64_t num_shards, window;
    uint64_t *by_shard, *shard_start, *pos_start;
    uint32_t *shard_of, *shard_at;
};

/* Dense index j (< n) to its sample id: j plus the number of denied ids
 * D[i] with D[i] - i <= j (D[i] - i counts the allowed ids below D[i],
 * which never decreases, so a binary search finds it). */
static uint64_t dense_to_id(const larder_plan *p, uint64_t j)
{
    uint64_t lo = 0, hi = p->num_denied;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (p->denied[mid] - mid <= j)
            lo = mid + 1;
        else
            hi = mid;
    }
    return j + lo;
}

/* Sample id to dense index, or false when it is denied. */
static bool id_to_dense(const larder_plan *p, uint64_t id, uint64_t *j)
{
    uint64_t lo = 0, hi = p->num_denied;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (p->denied[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < p->num_denied && p->denied[lo] == id) return false;
    *j = id - lo;
    return true;
}

/* The largest q in [lo, hi) with pos_start[q] <= x (pos_start[lo] <= x). */
static uint64_t shard_position(const larder_plan *p, uint64_t lo, uint64_t hi, uint64_t x)
{
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (p->pos_start[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The window holding shard position q: its first position `start`, its
 * number of samples, and the permutation of its samples. */
static void window_of(const larder_plan *p, uint64_t q, uint64_t *first_q, uint64_t *end_q,
                      struct larder__perm *perm)
{
    uint64_t w = q / p->window;
    *first_q = w * p->window;
    *end_q = p->num_shards - *first_q < p->window ? p->num_shards : *first_q + p->window;
    uint64_t size = p->pos_start[*end_q] - p->pos_start[*first_q];
    larder__perm_init(perm, size, p->seed, p->epoch, LARDER__PURPOSE_WINDOW, w);
}

/* Sample at position x < n. */
static uint64_t sample_at(const larder_plan *p, uint64_t x)
{
    switch (p->mode) {
    case LARDER_PLAN_NONE:
        return dense_to_id(p, x);
    case LARDER_PLAN_GLOBAL:
        return dense_to_id(p, larder__perm_forward(&p->perm, x));
    default: {
        uint64_t first_q, end_q;
        struct larder__perm perm;
        uint64_t q = shard_position(p, 0, p->num_shards, x);
        window_of(p, q, &first_q, &end_q, &perm);
        uint64_t start = p->pos_start[first_q];
        uint64_t g = start + larder__perm_forward(&perm, x - start);
        q = shard_position(p, first_q, end_q, g);
        uint32_t s = p->shard_at[q];
        return p->by_shard[p->shard_start[s] + (g - p->pos_start[q])];
    }
    }
}

/* Position of an allowed sample with dense index j. */
static uint64_t position_of(const larder_plan *p, uint64_t id, uint64_t j)
{
    switch (p->mode) {
    case LARDER_PLAN_NONE:
        return j;
    case LARDER_PLAN_GLOBAL:
        return larder__perm_inverse(&p->perm, j);
    default: {
        uint32_t s = p->shard_of[id];
        const uint64_t *list = p->by_shard + p->shard_start[s];
        uint64_t lo = 0, hi = p->shard_start[s + 1] - p->shard_start[s];
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo) / 2;
            if (list[mid] < id)
                lo = mid + 1;
            else
                hi = mid;
        }
        uint64_t q = larder__perm_inverse(&p->perm, s), first_q, end_q;
        struct larder__perm perm;
        window_of(p, q, &first_q, &end_q, &perm);
        uint64_t start = p->pos_start[first_q];
        return start + larder__perm_inverse(&perm, p->pos_start[q] + lo - start);
    }
    }
}

/* Key the plan for its current epoch. */
static void key_epoch(larder_plan *p)
{
    if (p->mode == LARDER_PLAN_GLOBAL)
        larder__perm_init(&p->perm, p->n, p->seed, p->epoch, LARDER__PURPOSE_SAMPLES, 0);
    if (p->mode != LARDER_PLAN_LOCALITY) return;
    larder__perm_init(&p->perm, p->num_shards, p->seed, p->epoch, LARDER__PURPOSE_SHARDS, 0);
    p->pos_start[0] = 0;
    for (uint64_t q = 0; q < p->num_shards; q++) {
        uint32_t s = (uint32_t)larder__perm_forward(&p->perm, q);
        p->shard_at[q] = s;
        p->pos_start[q + 1] = p->pos_start[q] + (p->shard_start[s + 1] - p->shard_start[s]);
    }
}

/* Collects deny-list entries while the file is parsed. */
struct deny_reader {
    const struct larder__plan_source *source;
    const char *path;
    uint64_t *ids;
    size_t count, capacity;
};

static int add_denied(struct deny_reader *r, uint64_t id)
{
    if (larder__reserve((void **)&r->ids, &r->capacity, r->count + 1, sizeof *r->ids) < 0)
        return -ENOMEM;
    r->ids[r->count++] = id;
    return 0;
}

/* An entry is a key of the dataset, else a decimal sample id. */
static int deny_entry(void *userdata, uint64_t line, const char *text, size_t length)
{
    struct deny_reader *r = userdata;
    const struct larder__plan_source *src = r->source;
    int shown = length > 200 ? 200 : (int)length;
    if (memchr(text, '\0', length))
        return larder__fail(LARDER_ENOTFOUND, "%s: line %" PRIu64 ": NUL byte in entry", r->path,
                            line);
    if (src->find_key) {
        char *key = malloc(length + 1);
        if (!key) return -ENOMEM;
        memcpy(key, text, length);
        key[length] = '\0';
        int64_t id = src->find_key(src->userdata, key);
        free(key);
        if (id >= 0) return add_denied(r, (uint64_t)id);
        if (id != LARDER_ENOTFOUND) return (int)id;
    }
    bool digits = length <= 20;
    uint64_t id = 0;
    for (size_t i = 0; i < length && digits; i++) {
        unsigned d = (unsigned)(text[i] - '0');
        digits = d <= 9 && larder__mul_ok(id, 10, &id) && larder__add_ok(id, d, &id);
    }
    if (!digits)
        return larder__fail(LARDER_ENOTFOUND,
                            "%s: line %" PRIu64 ": no sample with key '%.*s'%s (an entry is a "
                            "sample key or a decimal sample id)",
                            r->path, line, shown, text, shown < (int)length ? "..." : "");
    if (id >= src->num_samples)
        return larder__fail(LARDER_ENOTFOUND,
                            "%s: line %" PRIu64 ": no sample with id or key '%.*s' (the dataset "
                            "has %" PRIu64 " samples)",
                            r->path, line, shown, text, src->num_samples);
    return add_denied(r, id);
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Gather the denied ids of the options into p->denied, sorted and distinct. */
static int load_deny_list(larder_plan *p, const struct larder__plan_source *source,
                          const larder_plan_options *o)
{
    struct deny_reader r = {.source = source, .path = o->deny_path};
    int rc = 0;
    for (size_t i = 0; i < o->num_deny_ids && rc == 0; i++) {
        if (o->deny_ids[i] >= source->num_samples)
            rc = larder__fail(LARDER_EUSAGE,
                              "larder_plan_create: deny_ids[%zu] = %" PRIu64
                              " is past the end of the dataset (%" PRIu64 " samples)",
                              i, o->deny_ids[i], source->num_samples);
        else
            rc = add_denied(&r, o->deny_ids[i]);
    }
    if (rc == 0 && o->deny_path) {
        uint8_t *text = NULL;
        uint64_t size = 0;
        rc = larder__source_load(o->deny_path, LARDER__LOAD_LIST_MAX, "a deny list", &text, &size);
        if (rc < 0)
            larder__fail_context(rc, "deny-list");
        else
            rc = larder__deny_parse((const char *)text, (size_t)size, deny_entry, &r);
        free(text);
    }
    if (rc < 0) {
        free(r.ids);
        return rc;
    }
    if (r.count) qsort(r.ids, r.count, sizeof *r.ids, compare_u64);
    size_t distinct = 0;
    for (size_t i = 0; i < r.count; i++)
        if (distinct == 0 || r.ids[distinct - 1] != r.ids[i]) r.ids[distinct++] = r.ids[i];
    p->denied = r.ids;
    p->num_denied = distinct;
    return 0;
}

/* Group the allowed samples by shard (locality mode). */
static int build_shards(larder_plan *p, const struct larder__plan_source *source)
{
    uint64_t shards = source->num_shards, total = source->num_samples;
    if (!source->shard_of)
        return larder__fail(LARDER_EUSAGE, "larder_plan_create: locality mode needs the shards");
    if (shards > UINT32_MAX || total > SIZE_MAX / sizeof(uint64_t))
        return larder__fail(LARDER_EUSAGE, "larder_plan_create: too many samples or shards");
    p->num_shards = shards;
    p->shard_of = malloc((total ? total : 1) * sizeof *p->shard_of);
    p->by_shard = malloc((p->n ? p->n : 1) * sizeof *p->by_shard);
    p->shard_start = calloc(shards + 2, sizeof *p->shard_start);
    p->pos_start = calloc(shards + 1, sizeof *p->pos_start);
    p->shard_at = calloc(shards ? shards : 1, sizeof *p->shard_at);
    if (!p->shard_of || !p->by_shard || !p->shard_start || !p->pos_start || !p->shard_at)
        return -ENOMEM;
    /* count into shard_start[s + 2], prefix-sum so that shard_start[s + 1]
     * is where shard s's samples begin, then fill by bumping it: afterwards
     * shard_start[s] .. shard_start[s + 1] is shard s */
    uint64_t next_denied = 0;
    for (uint64_t id = 0; id < total; id++) {
        uint32_t s;
        int rc = source->shard_of(source->userdata, id, &s);
        if (rc < 0) return rc;
        if (s >= shards)
            return larder__fail(LARDER_EBADINDEX,
                                "sample %" PRIu64 ": shard %" PRIu32 " of %" PRIu64, id, s, shards);
        p->shard_of[id] = s;
        if (next_denied < p->num_denied && p->denied[next_denied] == id) {
            next_denied++;
            continue;
        }
        p->shard_start[s + 2]++;
    }
    for (uint64_t s = 2; s < shards + 2; s++)
        p->shard_start[s] += p->shard_start[s - 1];
    next_denied = 0;
    for (uint64_t id = 0; id < total; id++) {
        if (next_denied < p->num_denied && p->denied[next_denied] == id) {
            next_denied++;
            continue;
        }
        p->by_shard[p->shard_start[p->shard_of[id] + 1]++] = id;
    }
    return 0;
}

int larder__plan_create(larder_plan **out, const struct larder__plan_source *source,
                        const larder_plan_options *o)
{
    if (!out || !source || !o) return larder__fail(LARDER_EUSAGE, "larder_plan_create: NULL");
    if (o->version != LARDER_PLAN_OPTIONS_VERSION)
        return larder__fail(LARDER_EUSAGE, "larder_plan_create: options version %d, expected %d",
                            o->version, LARDER_PLAN_OPTIONS_VERSION);
    if (o->mode != LARDER_PLAN_GLOBAL && o->mode != LARDER_PLAN_LOCALITY &&
        o->mode != LARDER_PLAN_NONE)
        return larder__fail(LARDER_EUSAGE, "larder_plan_create: unknown mode %d", o->mode);
    uint64_t batch = o->global_batch ? o->global_batch : 1;
    uint32_t world = o->world ? o->world : 1, workers = o->workers ? o->workers : 1;
    if (batch % world)
        return larder__fail(LARDER_EUSAGE,
                            "world size %" PRIu32 " does not divide the global batch %" PRIu64
                            ": every rank takes an equal slice of each global batch, so choose "
                            "a global batch that is a multiple of the world size",
                            world, batch);
    if (o->rank >= world)
        return larder__fail(LARDER_EUSAGE, "rank %" PRIu32 " is not below the world size %" PRIu32,
                            o->rank, world);
    if (o->worker >= workers)
        return larder__fail(LARDER_EUSAGE,
                            "worker %" PRIu32 " is not below the number of workers %" PRIu32,
                            o->worker, workers);
    if (o->num_deny_ids && !o->deny_ids)
        return larder__fail(LARDER_EUSAGE, "larder_plan_create: num_deny_ids without deny_ids");

    larder_plan *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->mode = o->mode;
    p->seed = o->seed;
    p->epoch = o->epoch;
    p->dataset_samples = source->num_samples;
    p->global_batch = batch;
    p->local_batch = batch / world;
    p->world = world;
    p->rank = o->rank;
    p->workers = workers;
    p->worker = o->worker;
    p->start_step = o->start_step;
    p->pad = o->pad != 0;
    p->window = o->locality_window ? o->locality_window : DEFAULT_LOCALITY_WINDOW;
    int rc = load_deny_list(p, source, o);
    if (rc == 0) {
        p->n = source->num_samples - p->num_denied;
        p->steps = p->pad ? p->n / batch + (p->n % batch != 0) : p->n / batch;
        uint64_t end;
        if (!larder__mul_ok(p->steps, batch, &end))
            rc = larder__fail(LARDER_EUSAGE, "global batch %" PRIu64 " is too large", batch);
    }
    if (rc == 0 && p->mode == LARDER_PLAN_LOCALITY) rc = build_shards(p, source);
    if (rc < 0) {
        larder_plan_destroy(p);
        return rc;
    }
    key_epoch(p);
    *out = p;
    return 0;
}

void larder_plan_destroy(larder_plan *p)
{
    if (!p) return;
    free(p->denied);
    free(p->by_shard);
    free(p->shard_start);
    free(p->pos_start);
    free(p->shard_of);
    free(p->shard_at);
    free(p);
}

/* The dataset behind larder_plan_create(). */
static int dataset_shard_of(void *userdata, uint64_t id, uint32_t *shard)
{
    larder_sample_info info;
    int rc = larder_sample_info_get(userdata, id, &info);
    if (rc == 0) *shard = info.shard;
    return rc;
}

static int64_t dataset_find_key(void *userdata, const char *key)
{
    return larder_find_key(userdata, key);
}

int larder_plan_create(larder_plan **out, const larder_dataset *dataset,
                       const larder_plan_options *options)
{
    if (!dataset) return larder__fail(LARDER_EUSAGE, "larder_plan_create: NULL dataset");
    larder_dataset_info info;
    int rc = larder_dataset_info_get(dataset, &info);
    if (rc < 0) return rc;
    struct larder__plan_source source = {.num_samples = info.num_samples,
                                         .num_shards = info.num_shards,
                                         .shard_of = dataset_shard_of,
                                         .find_key = dataset_find_key,
                                         .userdata = (void *)dataset};
    return larder__plan_create(out, &source, options);
}

int larder_plan_set_epoch(larder_plan *p, uint64_t epoch)
{
    if (!p) return larder__fail(LARDER_EUSAGE, "larder_plan_set_epoch: NULL plan");
    p->epoch = epoch;
    key_epoch(p);
    return 0;
}

int larder_plan_info_get(const larder_plan *p, larder_plan_info *info)
{
    if (!p || !info) return larder__fail(LARDER_EUSAGE, "larder_plan_info_get: NULL");
    uint64_t covered = p->steps * p->global_batch;
    *info = (larder_plan_info){.num_samples = p->n,
                               .num_denied = p->num_denied,
                               .steps = p->steps,
                               .global_batch = p->global_batch,
                               .local_batch = p->local_batch,
                               .padded = covered > p->n ? covered - p->n : 0,
                               .dropped = covered < p->n ? p->n - covered : 0,
                               .epoch = p->epoch};
    return 0;
}

uint64_t larder_plan_steps(const larder_plan *p)
{
    return p ? p->steps : 0;
}

int64_t larder_plan_sample_at(const larder_plan *p, uint64_t position)
{
    if (!p) return larder__fail(LARDER_EUSAGE, "larder_plan_sample_at: NULL plan");
    if (position < p->n) return (int64_t)sample_at(p, position);
    if (p->pad && position < p->steps * p->global_batch)
        return (int64_t)sample_at(p, position % p->n);
    return larder__fail(LARDER_ENOTFOUND,
                        "position %" PRIu64 " is past the end of the epoch (%" PRIu64 " samples%s)",
                        position, p->n, p->pad ? " and padding" : "");
}

int64_t larder_plan_position_of(const larder_plan *p, uint64_t id)
{
    if (!p) return larder__fail(LARDER_EUSAGE, "larder_plan_position_of: NULL plan");
    uint64_t j;
    if (id >= p->dataset_samples)
        return larder__fail(LARDER_ENOTFOUND, "no sample %" PRIu64 ": the dataset has %" PRIu64, id,
                            p->dataset_samples);
    if (!id_to_dense(p, id, &j))
        return larder__fail(LARDER_ENOTFOUND, "sample %" PRIu64 " is denied", id);
    return (int64_t)position_of(p, id, j);
}

int64_t larder_plan_batch(const larder_plan *p, uint64_t step, uint64_t *ids, size_t capacity)
{
    if (!p || (!ids && capacity)) return larder__fail(LARDER_EUSAGE, "larder_plan_batch: NULL");
    if (step >= p->steps) return 0;
    if (capacity < p->local_batch)
        return larder__fail(LARDER_ETOOSMALL,
                            "larder_plan_batch: room for %zu ids, the batch has %" PRIu64, capacity,
                            p->local_batch);
    uint64_t first = step * p->global_batch + (uint64_t)p->rank * p->local_batch;
    for (uint64_t i = 0; i < p->local_batch; i++) {
        uint64_t position = first + i;
        ids[i] = sample_at(p, position < p->n ? position : position % p->n);
    }
    return (int64_t)p->local_batch;
}

int64_t larder_plan_worker_step(const larder_plan *p, uint64_t i)
{
    if (!p) return larder__fail(LARDER_EUSAGE, "larder_plan_worker_step: NULL plan");
    uint64_t step;
    if (!larder__mul_ok(i, p->workers, &step) || !larder__add_ok(step, p->worker, &step) ||
        !larder__add_ok(step, p->start_step, &step) || step >= p->steps)
        return LARDER_ENOTFOUND;
    return (int64_t)step;
}

int larder_plan_default_deny(const char *index_url, char *path, size_t capacity)
{
    if (!index_url || (!path && capacity))
        return larder__fail(LARDER_EUSAGE, "larder_plan_default_deny: NULL");
    if (larder__is_remote(index_url)) return 0;
    const char *local = strncmp(index_url, "file://", 7) == 0 ? index_url + 7 : index_url;
    int length = snprintf(path, capacity, "%s.deny", local);
    if (length < 0 || (size_t)length >= capacity)
        return larder__fail(LARDER_ETOOSMALL, "larder_plan_default_deny: path too long");
    return access(path, F_OK) == 0 ? 1 : 0;
}

/* ---- what the node cache's next-use eviction needs (cache_plans.c) ------- */

int larder__plan_params_get(const larder_plan *p, struct larder__plan_params *out)
{
    if (!p || !out) return larder__fail(LARDER_EUSAGE, "larder__plan_params_get: NULL");
    *out = (struct larder__plan_params){.seed = p->seed,
                                        .epoch = p->epoch,
                                        .global_batch = p->global_batch,
                                        .start_step = p->start_step,
                                        .num_samples = p->dataset_samples,
                                        .world = p->world,
                                        .rank = p->rank,
                                        .workers = p->workers,
                                        .worker = p->worker,
                                        .mode = (uint32_t)p->mode,
                                        .locality_window = (uint32_t)p->window,
                                        .pad = p->pad,
                                        .denied = p->num_denied};
    return 0;
}
