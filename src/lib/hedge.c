/*
 * hedge.c - the node-wide hedging budget (the rule and the file in hedge.h).
 *
 * Everything here is lock-free: the credit word is changed only by
 * compare-and-swap, which works across processes on a MAP_SHARED page as
 * it does across threads.  The file's contents are trusted no further
 * than needed: the header is checked once when mapped, and the credit is
 * clamped to the cap every time it is read, since any process of the
 * user may write anything there at any moment.
 */
#include "hedge.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BUDGET_MAGIC "LARDERHB"
#define BUDGET_VERSION 1
#define BUDGET_FILE_SIZE 4096 /* one page: the mapping covers the whole file */
/* Credit is counted in reads; a hedge costs this much, and no more is kept. */
#define HEDGE_COST ((uint64_t)LARDER__HEDGE_READS_PER_HEDGE)
#define CREDIT_CAP ((uint64_t)LARDER__HEDGE_SPARE * HEDGE_COST)

/* The budget file (native byte order: it never leaves the node). */
struct budget_file {
    char magic[8];            /* BUDGET_MAGIC */
    uint32_t version;         /* BUDGET_VERSION */
    uint32_t header_size;     /* sizeof(struct budget_file) */
    uint32_t reads_per_hedge; /* the rule this file was made for: a process with */
    uint32_t spare;           /* another rule must not mix its counting in */
    uint64_t credit;          /* atomic, compare-and-swap only: reads' worth, <= CREDIT_CAP */
    uint64_t reads, hedges;   /* atomic: totals since the file was made (statistics) */
};

_Static_assert(sizeof(struct budget_file) <= BUDGET_FILE_SIZE, "the budget fits its page");
_Static_assert(__atomic_always_lock_free(sizeof(uint64_t), 0),
               "shared counters need lock-free 64-bit atomics (no lock spans processes)");

struct larder__hedge_budget {
    struct budget_file *state; /* the mapping, or &local */
    bool mapped;
    struct budget_file local; /* a process's own budget */
};

static void budget_init(struct budget_file *f)
{
    memset(f, 0, sizeof *f);
    memcpy(f->magic, BUDGET_MAGIC, 8);
    f->version = BUDGET_VERSION;
    f->header_size = sizeof *f;
    f->reads_per_hedge = LARDER__HEDGE_READS_PER_HEDGE;
    f->spare = LARDER__HEDGE_SPARE;
    f->credit = CREDIT_CAP; /* the start-up allowance */
}

int larder__hedge_open_local(struct larder__hedge_budget **out)
{
    struct larder__hedge_budget *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    budget_init(&b->local);
    b->state = &b->local;
    *out = b;
    return 0;
}

/* Create a full budget file at `path` unless one is there: written whole
 * under a temporary name and linked into place, so no process ever maps
 * a half-written one; losing the race to another creator is fine. */
static int create_file(const char *path)
{
    /* a name no other creator uses: threads of one process, and processes
     * in other pid namespaces (containers) sharing the directory */
    static unsigned attempts;
    unsigned n = __atomic_fetch_add(&attempts, 1, __ATOMIC_RELAXED);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.%d.%u.%ld.tmp", path, (int)getpid(), n, now.tv_nsec) >=
        (int)sizeof tmp)
        return larder__fail(-ENAMETOOLONG, "%s: path too long", path);
    int fd = larder__open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0640);
    if (fd < 0) return fd;
    static const uint8_t zeros[BUDGET_FILE_SIZE];
    struct budget_file h;
    budget_init(&h);
    int rc = larder__pwrite_full(fd, zeros, sizeof zeros, 0, tmp);
    if (rc == 0) rc = larder__pwrite_full(fd, &h, sizeof h, 0, tmp);
    if (rc == 0 && larder__sys.fsync(fd) < 0)
        rc = larder__fail(-errno, "%s: fsync: %s", tmp, strerror(errno));
    larder__sys.close(fd);
    if (rc == 0 && link(tmp, path) < 0 && errno != EEXIST)
        rc = larder__fail(-errno, "%s: %s", path, strerror(errno));
    unlink(tmp);
    return rc;
}

/* Whether a header read from the file is one of ours, for this rule. */
static bool header_sound(const struct budget_file *h)
{
    return memcmp(h->magic, BUDGET_MAGIC, 8) == 0 && h->version == BUDGET_VERSION &&
           h->header_size == sizeof *h && h->reads_per_hedge == LARDER__HEDGE_READS_PER_HEDGE &&
           h->spare == LARDER__HEDGE_SPARE;
}

int larder__hedge_open_file(struct larder__hedge_budget **out, const char *path)
{
    int fd = larder__open(path, O_RDWR | O_NOFOLLOW, 0);
    if (fd == -ENOENT) {
        int rc = create_file(path);
        if (rc < 0) return rc;
        fd = larder__open(path, O_RDWR | O_NOFOLLOW, 0);
    }
    if (fd < 0) return fd;
    struct stat st;
    int rc = 0;
    if (larder__sys.fstat(fd, &st) < 0)
        rc = larder__fail(-errno, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode) || st.st_size != BUDGET_FILE_SIZE)
        rc = larder__fail(LARDER_ECACHE, "%s: not a hedge budget (%lld bytes, want %d)", path,
                          (long long)st.st_size, BUDGET_FILE_SIZE);
    struct budget_file h;
    if (rc == 0) rc = larder__pread_full(fd, &h, sizeof h, 0, path);
    if (rc == 0 && !header_sound(&h))
        rc = larder__fail(LARDER_ECACHE,
                          "%s: not a hedge budget of this version and rule (damaged? delete it "
                          "to start afresh)",
                          path);
    struct larder__hedge_budget *b = NULL;
    if (rc == 0 && !(b = calloc(1, sizeof *b))) rc = -ENOMEM;
    if (rc == 0) {
        void *map =
            larder__sys.mmap(NULL, BUDGET_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
            rc = larder__fail(-errno, "%s: mmap: %s", path, strerror(errno));
        else
            b->state = map, b->mapped = true;
    }
    larder__sys.close(fd);
    if (rc < 0) {
        free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void larder__hedge_close(struct larder__hedge_budget *b)
{
    if (!b) return;
    if (b->mapped) munmap(b->state, BUDGET_FILE_SIZE);
    free(b);
}

/* The credit now, as the rule allows it to be: more than the cap (a
 * damaged or hostile file) counts as the cap. */
static uint64_t credit_of(uint64_t raw)
{
    return raw < CREDIT_CAP ? raw : CREDIT_CAP;
}

/* Add `amount` to the credit, up to the cap, in one compare-and-swap step. */
static void credit_add(struct budget_file *f, uint64_t amount)
{
    uint64_t seen = __atomic_load_n(&f->credit, __ATOMIC_ACQUIRE);
    for (;;) {
        uint64_t credit = credit_of(seen);
        uint64_t next = credit + amount < CREDIT_CAP ? credit + amount : CREDIT_CAP;
        if (next == seen) return; /* full already: no write, no cache line bouncing */
        if (__atomic_compare_exchange_n(&f->credit, &seen, next, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return;
    }
}

void larder__hedge_count_read(struct larder__hedge_budget *b)
{
    __atomic_fetch_add(&b->state->reads, 1, __ATOMIC_RELAXED);
    credit_add(b->state, 1);
}

bool larder__hedge_take(struct larder__hedge_budget *b)
{
    struct budget_file *f = b->state;
    uint64_t seen = __atomic_load_n(&f->credit, __ATOMIC_ACQUIRE);
    for (;;) {
        uint64_t credit = credit_of(seen);
        if (credit < HEDGE_COST) return false; /* a refusal writes nothing */
        if (__atomic_compare_exchange_n(&f->credit, &seen, credit - HEDGE_COST, true,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
    }
    __atomic_fetch_add(&f->hedges, 1, __ATOMIC_RELAXED);
    return true;
}

void larder__hedge_refund(struct larder__hedge_budget *b)
{
    __atomic_fetch_sub(&b->state->hedges, 1, __ATOMIC_RELAXED);
    credit_add(b->state, HEDGE_COST);
}

void larder__hedge_stats_get(const struct larder__hedge_budget *b, struct larder__hedge_stats *s)
{
    const struct budget_file *f = b->state;
    s->reads = __atomic_load_n(&f->reads, __ATOMIC_RELAXED);
    s->hedges = __atomic_load_n(&f->hedges, __ATOMIC_RELAXED);
    s->credit = credit_of(__atomic_load_n(&f->credit, __ATOMIC_ACQUIRE));
}

/* ---- the budget of this process ------------------------------------------ */

static struct larder__hedge_budget process_own = {
    .state = &process_own.local,
    .local = {.magic = BUDGET_MAGIC,
              .version = BUDGET_VERSION,
              .header_size = sizeof(struct budget_file),
              .reads_per_hedge = LARDER__HEDGE_READS_PER_HEDGE,
              .spare = LARDER__HEDGE_SPARE,
              .credit = CREDIT_CAP},
};
static struct larder__hedge_budget *process_node; /* atomic: set once, never freed */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

struct larder__hedge_budget *larder__hedge_process(void)
{
    struct larder__hedge_budget *node = __atomic_load_n(&process_node, __ATOMIC_ACQUIRE);
    return node ? node : &process_own;
}

int larder__hedge_attach(const char *cache_dir)
{
    if (__atomic_load_n(&process_node, __ATOMIC_ACQUIRE)) return 0;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", cache_dir, LARDER__HEDGE_FILE) >= (int)sizeof path)
        return larder__fail(-ENAMETOOLONG, "%s: path too long", cache_dir);
    pthread_mutex_lock(&attach_lock);
    int rc = 0;
    if (!process_node) {
        struct larder__hedge_budget *b;
        rc = larder__hedge_open_file(&b, path);
        if (rc == 0)
            __atomic_store_n(&process_node, b, __ATOMIC_RELEASE);
        else
            larder__log(LARDER_LOG_WARN, "%s; hedging within this process's own budget",
                        larder_errmsg());
    }
    pthread_mutex_unlock(&attach_lock);
    return rc;
}
