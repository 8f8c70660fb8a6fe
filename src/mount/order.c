/*
 * order.c - sample orders registered with a mount (mount.h), so that the
 * plan's prefetcher stages ahead of programs that read files, not larder's
 * API.
 *
 * A reader (one rank of a job) writes one line to MOUNT/.larder-order:
 *
 *     seed=1 epoch=0 rank=0 world=2 batch=64 [mode=global] [window=8]
 *
 * naming the order it reads the mounted index's samples in: the plan of
 * docs/plan.md for that seed and epoch, global batch `batch` split over
 * `world` ranks.  The mount then runs larder_prefetch over that plan.  The
 * reader never says where it is: each read of a sample's file is placed
 * in the plan (larder_plan_position_of), and a rank's prefetcher is told
 * that the steps before the one that sample belongs to are consumed.  A
 * new line for the same rank and world (the next epoch) replaces its
 * registration; reading the file back lists the registrations and what
 * each staged.  At most MAX_ORDERS at once; a cache is needed (the
 * prefetcher stages into it).
 */
#include "mount.h"

#include "common.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ORDERS 64

struct registration {
    larder_plan *plan;
    larder_prefetch *prefetch;
    uint64_t seed, epoch, batch, window;
    uint32_t rank, world;
    int mode;
    uint64_t consumed; /* the rank's steps passed so far */
};

struct larder__mount_order {
    pthread_mutex_t lock; /* guards everything below */
    struct registration orders[MAX_ORDERS];
    size_t count;
    _Atomic size_t live; /* count, read without the lock on every read */
    struct larder__mount_file_orders
        *files;            /* orders over one HDF5 file's members (hdf5_order.c) */
    atomic_bool any_files; /* one was registered */
};

int larder__mount_order_new(struct larder__mount_order **out)
{
    struct larder__mount_order *o = calloc(1, sizeof *o);
    if (!o) return -ENOMEM;
    if (larder__mount_file_orders_new(&o->files) < 0) {
        free(o);
        return -ENOMEM;
    }
    pthread_mutex_init(&o->lock, NULL);
    *out = o;
    return 0;
}

static void end_registration(struct registration *r)
{
    larder_prefetch_stop(r->prefetch);
    larder_plan_destroy(r->plan);
    r->prefetch = NULL, r->plan = NULL;
}

void larder__mount_order_free(struct larder__mount_order *o)
{
    if (!o) return;
    for (size_t i = 0; i < o->count; i++)
        end_registration(&o->orders[i]);
    larder__mount_file_orders_free(o->files);
    pthread_mutex_destroy(&o->lock);
    free(o);
}

/*
 * The value of `name=` in the words of text, copied into value: 1, 0 when
 * absent (value untouched), or LARDER_EUSAGE when it does not fit.  Too
 * long is not absent: taken so, rank= of 32 digits registered rank 0, a
 * long mode= the global plan, and a file= of 256 bytes a sample order of
 * the whole index (found by review).
 */
static int word(const char *text, const char *name, char *value, size_t capacity)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)); p += n) {
        if ((p == text || p[-1] == ' ' || p[-1] == '\t') && p[n] == '=') {
            size_t length = strcspn(p + n + 1, " \t\r\n");
            if (length >= capacity)
                return larder__fail(LARDER_EUSAGE,
                                    "%s=: a value of %zu bytes, over the %zu allowed", name, length,
                                    capacity - 1);
            memcpy(value, p + n + 1, length);
            value[length] = '\0';
            return 1;
        }
    }
    return 0;
}

/* The number after `name=`: 0, 1 when absent (*v untouched), or LARDER_EUSAGE. */
static int number(const char *text, const char *name, uint64_t *v)
{
    char value[32];
    int rc = word(text, name, value, sizeof value);
    if (rc <= 0) return rc < 0 ? rc : 1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(value, &end, 10);
    if (!value[0] || *end || errno || value[0] == '-')
        return larder__fail(LARDER_EUSAGE, "%s=%s: not a number", name, value);
    *v = x;
    return 0;
}

int larder__mount_order_register(struct larder__mount *m, const char *text, size_t length)
{
    struct larder__mount_order *o = m->order;
    char line[4097];
    if (length >= sizeof line) return larder__fail(LARDER_EUSAGE, "a registration over 4 KiB");
    memcpy(line, text, length);
    line[length] = '\0';
    if (strlen(line) != length) return larder__fail(LARDER_EUSAGE, "a NUL byte in the text");
    uint64_t seed = 0, epoch = 0, rank = 0, world = 1, batch = 0, window = 8;
    int rc = 0;
    const char *names[] = {"seed", "epoch", "rank", "world", "batch", "window"};
    uint64_t *values[] = {&seed, &epoch, &rank, &world, &batch, &window};
    for (size_t i = 0; i < 6 && rc >= 0; i++)
        rc = number(line, names[i], values[i]);
    if (rc < 0) return rc;
    char mode_name[16] = "global";
    if ((rc = word(line, "mode", mode_name, sizeof mode_name)) < 0) return rc;
    int mode = strcmp(mode_name, "global") == 0     ? LARDER_PLAN_GLOBAL
               : strcmp(mode_name, "locality") == 0 ? LARDER_PLAN_LOCALITY
               : strcmp(mode_name, "none") == 0     ? LARDER_PLAN_NONE
                                                    : -1;
    if (mode < 0)
        return larder__fail(LARDER_EUSAGE, "mode=%s: global, locality or none", mode_name);
    if (batch == 0) return larder__fail(LARDER_EUSAGE, "no batch=G (the global batch)");
    if (world == 0 || world > UINT32_MAX || rank >= world || batch % world)
        return larder__fail(LARDER_EUSAGE,
                            "rank=%llu world=%llu batch=%llu: a rank below world, "
                            "world dividing batch",
                            (unsigned long long)rank, (unsigned long long)world,
                            (unsigned long long)batch);
    if (window == 0 || window > 1024)
        return larder__fail(LARDER_EUSAGE, "window=%llu: 1 to 1024 steps",
                            (unsigned long long)window);
    if (!m->cached)
        return larder__fail(LARDER_EUSAGE, "a registered order needs a node cache (--cache)");
    char file[256], group[256] = "/", dataset[256] = "", sampler[16] = "";
    if ((rc = word(line, "file", file, sizeof file)) < 0) return rc;
    if (rc == 1) { /* the members or rows of one HDF5 file */
        if ((rc = word(line, "group", group, sizeof group)) < 0 ||
            (rc = word(line, "dataset", dataset, sizeof dataset)) < 0 ||
            (rc = word(line, "sampler", sampler, sizeof sampler)) < 0)
            return rc;
        if (strcmp(sampler, "torch") != 0)
            return larder__fail(LARDER_EUSAGE,
                                "file=%s: sampler=torch (PyTorch's "
                                "DistributedSampler) is the order known for a file",
                                file);
        struct larder__mount_file_order_spec spec = {.file = file,
                                                     .group = group,
                                                     .dataset = dataset[0] ? dataset : NULL,
                                                     .seed = seed,
                                                     .epoch = epoch,
                                                     .batch = batch,
                                                     .window = window,
                                                     .rank = (uint32_t)rank,
                                                     .world = (uint32_t)world};
        if ((rc = larder__mount_file_order_register(m, o->files, &spec)) < 0) return rc;
        atomic_store(&o->any_files, true);
        larder__mount_log(LARDER_LOG_INFO, "order registered: %s", line);
        return 0;
    }
    /* A plan's epoch is whole global batches (no padding here): a batch over
     * the samples has no step at all, and one of 2^64 - 1 over a world of
     * 2^32 - 1 had the prefetcher allocate its batch of 2^32 + 1 ids (found by
     * review: the mount died).  The world divides the batch, so a world over
     * the samples is refused with it. */
    uint64_t samples = larder_num_samples(m->dataset);
    if (batch > samples || world > samples)
        return larder__fail(LARDER_EUSAGE,
                            "batch=%llu world=%llu: a global batch (and world) of at most the "
                            "index's %llu samples",
                            (unsigned long long)batch, (unsigned long long)world,
                            (unsigned long long)samples);
    larder_plan_options po = {.version = LARDER_PLAN_OPTIONS_VERSION,
                              .mode = mode,
                              .seed = seed,
                              .epoch = epoch,
                              .global_batch = batch,
                              .world = (uint32_t)world,
                              .rank = (uint32_t)rank};
    struct registration r = {.seed = seed,
                             .epoch = epoch,
                             .batch = batch,
                             .window = window,
                             .rank = (uint32_t)rank,
                             .world = (uint32_t)world,
                             .mode = mode};
    if ((rc = larder_plan_create(&r.plan, m->dataset, &po)) < 0) return rc;
    larder_prefetch_options fo = {.version = LARDER_PREFETCH_OPTIONS_VERSION,
                                  .window_steps = window};
    if ((rc = larder_prefetch_start(&r.prefetch, m->dataset, r.plan, &fo)) < 0) {
        larder_plan_destroy(r.plan);
        return rc;
    }
    pthread_mutex_lock(&o->lock);
    size_t i = 0;
    while (i < o->count && !(o->orders[i].rank == r.rank && o->orders[i].world == r.world))
        i++;
    struct registration old = {0};
    if (i < o->count)
        old = o->orders[i];
    else if (o->count == MAX_ORDERS)
        i = MAX_ORDERS;
    if (i < MAX_ORDERS) {
        o->orders[i] = r;
        if (i == o->count) o->count++;
        atomic_store(&o->live, o->count);
    }
    pthread_mutex_unlock(&o->lock);
    if (i == MAX_ORDERS) {
        end_registration(&r);
        return larder__fail(LARDER_EUSAGE, "%d orders registered already", MAX_ORDERS);
    }
    end_registration(&old);
    larder__mount_log(LARDER_LOG_INFO, "order registered: %s", line);
    return 0;
}

void larder__mount_order_read(struct larder__mount *m, uint64_t id, int field, uint64_t offset,
                              uint64_t length)
{
    struct larder__mount_order *o = m->order;
    if (o && atomic_load(&o->any_files))
        larder__mount_file_orders_read(o->files, id, field, offset, length);
    if (!o || atomic_load(&o->live) == 0) return;
    pthread_mutex_lock(&o->lock);
    for (size_t i = 0; i < o->count; i++) {
        struct registration *r = &o->orders[i];
        int64_t position = larder_plan_position_of(r->plan, id);
        if (position < 0) continue;
        uint64_t step = (uint64_t)position / r->batch, in_step = (uint64_t)position % r->batch;
        uint64_t local = r->batch / r->world;
        if (in_step / local != r->rank) continue; /* another rank's sample */
        if (step > r->consumed) {
            r->consumed = step; /* the steps before this one are read */
            larder_prefetch_advance(r->prefetch, step);
        }
    }
    pthread_mutex_unlock(&o->lock);
}

int larder__mount_order_describe(struct larder__mount *m, char *buf, size_t capacity)
{
    struct larder__mount_order *o = m->order;
    size_t used = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&o->lock);
    for (size_t i = 0; i < o->count && used < capacity; i++) {
        struct registration *r = &o->orders[i];
        uint64_t fills = 0, failures = 0;
        larder_prefetch_stats_get(r->prefetch, &fills, &failures);
        static const char *const modes[] = {"global", "locality", "none"};
        int n = snprintf(buf + used, capacity - used,
                         "seed=%" PRIu64 " epoch=%" PRIu64 " rank=%u world=%u batch=%" PRIu64
                         " mode=%s window=%" PRIu64 " consumed=%" PRIu64 " fills=%" PRIu64
                         " failures=%" PRIu64 "\n",
                         r->seed, r->epoch, r->rank, r->world, r->batch, modes[r->mode], r->window,
                         r->consumed, fills, failures);
        if (n < 0 || (size_t)n >= capacity - used) break;
        used += (size_t)n;
    }
    pthread_mutex_unlock(&o->lock);
    if (used < capacity) {
        int n = larder__mount_file_orders_describe(o->files, buf + used, capacity - used);
        if (n > 0) used += (size_t)n;
    }
    return (int)used;
}
