/*
 * cache_plans.c - the plans registered with a node cache: which readers
 * of this dataset run on the node, in which order they read, and how far
 * each has got.  Next-use eviction (cache_nextuse.c) computes from them,
 * in whichever process evicts, when each cached block is read next.
 *
 * DIR/<dataset id>/plans is one small shared file (8 KiB), mapped by
 * every process that registers or evicts: a header with a generation
 * (bumped whenever a plan comes, goes or changes) and 64 slots.  A slot
 * holds the integers that name a plan (larder__plan_params: seed, epoch,
 * global batch, world, rank, workers, worker, start step, mode), the
 * registering process's pid and start time, and the reader's position
 * (its own steps consumed), which the reader stores atomically as it
 * goes: no request per step, no lock.
 *
 * A slot is claimed with a compare-and-swap of its state word (free ->
 * claimed, with the claimer's pid and the claim's time in the same word),
 * written, then published (that exact claim -> live).  A claim whose
 * process is gone, or older than CLAIM_FOR_S seconds (or in the future),
 * is freed by the next registration: a claimer killed before publishing
 * leaks nothing.  A process that dies leaves its slot live; readers of
 * the registry pass over (and free) slots whose process is gone or whose
 * pid now names another process (the start time in /proc/PID/stat
 * differs).  Everything in the file is checked before use:
 * a slot whose fields make no sense (world 0, rank past it, ...) is
 * ignored, so a damaged or hostile file costs the plan order, never
 * memory or a crash.
 */
#include "cache_internal.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PLANS_MAGIC "LARDERPL"
#define PLANS_VERSION 1
#define SLOT_FREE 0
#define SLOT_CLAIMED 1 /* the low 2 bits; a claim also holds its pid and time: */
#define SLOT_LIVE 2
#define CLAIM_PID_BITS 22   /* bits 2-23: the claimer's pid (Linux's pids are below 2^22) */
#define CLAIM_TIME_SHIFT 24 /* bits 24-63: when it claimed, CLOCK_REALTIME seconds */
#define CLAIM_FOR_S 10      /* a claim not published by then is abandoned */

struct plan_slot {
    uint64_t state; /* atomic: SLOT_FREE, SLOT_LIVE, or a claim (larder__claim_word) */
    int64_t pid;
    uint64_t start_time; /* the process's start, in clock ticks after boot */
    uint64_t seed, epoch, global_batch, start_step, num_samples;
    uint32_t world, rank, workers, worker;
    uint32_t mode, locality_window, pad;
    uint32_t window;   /* the reader's prefetch window, its own steps (0: not said) */
    uint64_t consumed; /* atomic: the reader's own steps done */
    uint64_t reserved[3];
};

struct plans_file {
    char magic[8];
    uint32_t version;
    uint32_t slots;
    uint64_t generation; /* atomic: bumped when a plan comes, goes or changes */
    uint64_t reserved[5];
    struct plan_slot slot[LARDER__CACHE_PLAN_SLOTS];
};

_Static_assert(sizeof(struct plan_slot) == 128, "slot layout");
_Static_assert(offsetof(struct plan_slot, window) == 92, "docs/cache.md names its offset");

/* When process `pid` started (clock ticks after boot), or 0 when it is gone. */
static uint64_t process_start(int64_t pid)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    int fd = larder__sys.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0) return 0;
    ssize_t n = larder__sys.pread(fd, text, sizeof text - 1, 0);
    larder__sys.close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    /* "pid (comm) state ..." : comm may hold anything, so count from its last ')' */
    char *at = strrchr(text, ')');
    if (!at) return 0;
    at++;                                          /* the blank before field 3 */
    for (int field = 3; field < 22 && at; field++) /* starttime is field 22 */
        at = strchr(at + 1, ' ');
    return at ? strtoull(at + 1, NULL, 10) : 0;
}

/*
 * Make the registry at `path` whole under a temporary name, then link it
 * into place (`replace`: rename it over one cut short or without its
 * header).  Processes that made it in place at the same moment each zeroed
 * it, wiping another's header or a slot it had just taken
 * (tests/unit/test_cache_nextuse_race.c); a lock on the file instead hung
 * a PyTorch job, whose DataLoader forked while a thread held it (the child
 * keeps the descriptor, and the lock with it).  Losing the race to another
 * maker is fine: its file is used.  0 or a negative code.
 */
static int make_registry(const char *path, bool replace)
{
    static unsigned made; /* tell this process's threads' names apart */
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.%d.%u.tmp", path, (int)getpid(),
                 __atomic_fetch_add(&made, 1, __ATOMIC_RELAXED)) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    int fd = larder__sys.open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                              LARDER__CACHE_FILE_MODE);
    if (fd < 0) return -errno;
    struct plans_file *f = calloc(1, sizeof *f);
    int rc = f ? 0 : -ENOMEM;
    if (f) {
        memcpy(f->magic, PLANS_MAGIC, 8);
        f->version = PLANS_VERSION;
        f->slots = LARDER__CACHE_PLAN_SLOTS;
        rc = larder__pwrite_full(fd, f, sizeof *f, 0, tmp);
        free(f);
    }
    larder__sys.close(fd);
    if (rc == 0 && (replace ? rename(tmp, path) : link(tmp, path)) < 0 &&
        (replace || errno != EEXIST))
        rc = -errno;
    unlink(tmp); /* after a rename: gone already */
    return rc;
}

/* DIR/plans mapped, or NULL (*rc: why; -ENOENT: none, or not whole). */
static struct plans_file *map_registry(const char *path, int *rc)
{
    int fd = larder__sys.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
    struct stat st;
    struct plans_file *map = NULL;
    if (fd < 0) {
        *rc = -errno;
    } else if (larder__sys.fstat(fd, &st) < 0) {
        *rc = -errno;
    } else if ((uint64_t)st.st_size < sizeof(struct plans_file)) {
        *rc = -ENOENT; /* cut short */
    } else if ((map = mmap(NULL, sizeof *map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
               MAP_FAILED) {
        map = NULL;
        *rc = -errno;
    } else if (memcmp(map->magic, PLANS_MAGIC, 8) != 0) {
        munmap(map, sizeof *map);
        map = NULL;
        *rc = -ENOENT;
    }
    if (fd >= 0) larder__sys.close(fd);
    return map;
}

/* Map DIR/plans, creating it when `create`; 0, or a negative code (then no registry). */
static int attach(struct larder__cache *c, bool create)
{
    if (__atomic_load_n(&c->plans, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    if (!c->plans) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/plans", c->dir);
        struct plans_file *map = map_registry(path, &rc);
        /* none yet: made and linked into place; then, if the one there is
         * still not whole (cut short, no header), one renamed over it */
        for (int replace = 0; !map && rc == -ENOENT && create && replace < 2; replace++)
            if ((rc = make_registry(path, replace)) == 0) map = map_registry(path, &rc);
        if (map && (map->version != PLANS_VERSION || map->slots != LARDER__CACHE_PLAN_SLOTS)) {
            larder__log(LARDER_LOG_WARN,
                        "%s: a plan registry of another larder version; "
                        "eviction by next use is off for this dataset",
                        path);
            munmap(map, sizeof *map);
            map = NULL;
            rc = LARDER_ECACHE;
        }
        if (map) {
            rc = 0;
            __atomic_store_n(&c->plans, map, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static void bump(struct plans_file *f)
{
    __atomic_fetch_add(&f->generation, 1, __ATOMIC_ACQ_REL);
}

uint64_t larder__claim_word(void)
{
    uint64_t pid = (uint64_t)getpid();
    if (pid >> CLAIM_PID_BITS) pid = 0; /* not on Linux: the claim's time alone frees it */
    return ((uint64_t)time(NULL) << CLAIM_TIME_SHIFT) | (pid << 2) | SLOT_CLAIMED;
}

static bool process_alive(int64_t pid)
{
    return pid > 0 && pid <= INT_MAX && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

bool larder__claim_abandoned(uint64_t word)
{
    if ((word & 3) != SLOT_CLAIMED) return false;
    int64_t pid = (int64_t)((word >> 2) & ((UINT64_C(1) << CLAIM_PID_BITS) - 1));
    int64_t at = (int64_t)(word >> CLAIM_TIME_SHIFT), now = (int64_t)time(NULL);
    return !process_alive(pid) || at > now || now - at > CLAIM_FOR_S;
}

/* Free slot i if its process is gone, or its claim abandoned; true when it is free now. */
static bool reap(struct plans_file *f, int i)
{
    struct plan_slot *s = &f->slot[i];
    uint64_t state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    if (state == SLOT_FREE) return true;
    if (state == SLOT_LIVE) {
        int64_t pid = s->pid;
        if (process_alive(pid) && process_start(pid) == s->start_time) return false;
    } else if ((state & 3) == SLOT_CLAIMED) {
        /* being written right now, unless its claimer is gone or it is too old */
        if (!larder__claim_abandoned(state)) return false;
    } /* any other word is no state: freed */
    if (__atomic_compare_exchange_n(&s->state, &state, SLOT_FREE, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        bump(f);
    return true;
}

int larder__cache_plan_register(struct larder__cache *c, const struct larder__plan_params *p)
{
    if (p->denied)
        return larder__fail(LARDER_EUNSUPPORTED, "a plan with denied samples is not registered "
                                                 "(the cache evicts by the clock for it)");
    int rc = attach(c, true);
    if (rc < 0) return rc;
    struct plans_file *f = c->plans;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < LARDER__CACHE_PLAN_SLOTS; i++) {
            uint64_t expected = SLOT_FREE;
            if (pass > 0) reap(f, i); /* then: take over the slots of dead processes */
            struct plan_slot *s = &f->slot[i];
            uint64_t claim = larder__claim_word();
            if (!__atomic_compare_exchange_n(&s->state, &expected, claim, false, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE))
                continue;
            s->pid = 0;
            s->start_time = process_start(getpid());
            s->seed = p->seed;
            s->epoch = p->epoch;
            s->global_batch = p->global_batch;
            s->start_step = p->start_step;
            s->num_samples = p->num_samples;
            s->world = p->world;
            s->rank = p->rank;
            s->workers = p->workers;
            s->worker = p->worker;
            s->mode = p->mode;
            s->locality_window = p->locality_window;
            s->pad = p->pad;
            s->window = 0;
            __atomic_store_n(&s->consumed, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&s->pid, (int64_t)getpid(), __ATOMIC_RELEASE);
            /* live only if still our claim (one held past CLAIM_FOR_S may have
             * been freed and taken: then look again) */
            if (!__atomic_compare_exchange_n(&s->state, &claim, SLOT_LIVE, false, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE))
                continue;
            bump(f);
            return i;
        }
    return larder__fail(-EAGAIN, "%s: all %d plan slots are taken by live readers", c->dir,
                        LARDER__CACHE_PLAN_SLOTS);
}

void larder__cache_plan_advance(struct larder__cache *c, int slot, uint64_t consumed)
{
    if (!c || !c->plans || slot < 0 || slot >= LARDER__CACHE_PLAN_SLOTS) return;
    __atomic_store_n(&c->plans->slot[slot].consumed, consumed, __ATOMIC_RELEASE);
}

void larder__cache_plan_unregister(struct larder__cache *c, int slot)
{
    if (!c || !c->plans || slot < 0 || slot >= LARDER__CACHE_PLAN_SLOTS) return;
    struct plan_slot *s = &c->plans->slot[slot];
    if (s->pid != (int64_t)getpid()) return; /* not ours (any more) */
    __atomic_store_n(&s->state, SLOT_FREE, __ATOMIC_RELEASE);
    bump(c->plans);
}

void larder__cache_plan_set_window(struct larder__cache *c, int slot, uint32_t window)
{
    if (!c || !c->plans || slot < 0 || slot >= LARDER__CACHE_PLAN_SLOTS) return;
    struct plan_slot *s = &c->plans->slot[slot];
    if (s->pid != (int64_t)getpid()) return; /* not ours (any more) */
    __atomic_store_n(&s->window, window, __ATOMIC_RELEASE);
    bump(c->plans); /* the evicting processes read it again */
}

uint64_t larder__cache_plans_generation(struct larder__cache *c)
{
    if (attach(c, false) < 0) return 0;
    return __atomic_load_n(&c->plans->generation, __ATOMIC_ACQUIRE);
}

/* Whether a slot's fields describe a plan this dataset can have. */
static bool sane(const struct plan_slot *s, uint64_t num_samples)
{
    return s->world >= 1 && s->rank < s->world && s->workers >= 1 && s->workers <= 65536 &&
           s->worker < s->workers && s->global_batch >= 1 && s->global_batch % s->world == 0 &&
           s->global_batch <= (UINT64_C(1) << 40) && s->mode <= LARDER_PLAN_NONE &&
           s->num_samples == num_samples && s->epoch < (UINT64_C(1) << 48) &&
           s->start_step < (UINT64_C(1) << 48) && s->locality_window <= (1u << 20);
}

int larder__cache_plans_live(struct larder__cache *c, uint64_t num_samples,
                             struct larder__cache_plan *out, int max)
{
    if (attach(c, false) < 0) return 0;
    struct plans_file *f = c->plans;
    int n = 0;
    for (int i = 0; i < LARDER__CACHE_PLAN_SLOTS && n < max; i++) {
        struct plan_slot *s = &f->slot[i];
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SLOT_LIVE) continue;
        if (reap(f, i)) continue;
        struct plan_slot copy = *s;
        if (!sane(&copy, num_samples)) continue;
        out[n++] =
            (struct larder__cache_plan){.slot = i,
                                        .params = {.seed = copy.seed,
                                                   .epoch = copy.epoch,
                                                   .global_batch = copy.global_batch,
                                                   .start_step = copy.start_step,
                                                   .num_samples = copy.num_samples,
                                                   .world = copy.world,
                                                   .rank = copy.rank,
                                                   .workers = copy.workers,
                                                   .worker = copy.worker,
                                                   .mode = copy.mode,
                                                   .locality_window = copy.locality_window,
                                                   .pad = copy.pad != 0},
                                        /* a window past 2^20 steps says nothing */
                                        .window = copy.window <= (1u << 20) ? copy.window : 0};
    }
    return n;
}

uint64_t larder__cache_plan_consumed(struct larder__cache *c, int slot)
{
    if (!c->plans || slot < 0 || slot >= LARDER__CACHE_PLAN_SLOTS) return 0;
    return __atomic_load_n(&c->plans->slot[slot].consumed, __ATOMIC_ACQUIRE);
}

void larder__cache_plans_detach(struct larder__cache *c)
{
    if (c->plans) munmap(c->plans, sizeof *c->plans);
    c->plans = NULL;
}

void larder__cache_trace(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    if (c->trace_fd < 0 || shard >= c->num_shards) return;
    char line[64];
    int length = snprintf(line, sizeof line, "%llu %llu\n",
                          (unsigned long long)(c->shard_base[shard] + first),
                          (unsigned long long)(c->shard_base[shard] + last));
    /* one write of a short line to an O_APPEND file: lines of several processes never mix */
    if (write(c->trace_fd, line, (size_t)length) < 0) return;
}
