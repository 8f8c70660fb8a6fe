/*
 * test_hedge.c - the hedging budget: its rule worked out by hand, its
 * bound under threads and under processes sharing one budget file, its
 * file taken as hostile, and the read paths drawing on the node's budget.
 *
 * Expected values come from the documented rule (hedge.h, docs/cache.md),
 * restated here: over any stretch, hedges <= 5% of reads + 16, with a new
 * budget holding the 16 (the start-up allowance) and never saving more.
 * Credit is counted in reads: a read adds 1, a hedge costs 20, cap 320.
 */
#include "larder_pack.h"
#include "hedge.h"
#include "source.h"
#include "sys.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READS_PER_HEDGE 20 /* 5% */
#define SPARE 16

_Static_assert(LARDER__HEDGE_READS_PER_HEDGE == READS_PER_HEDGE, "the rule the tests check");
_Static_assert(LARDER__HEDGE_SPARE == SPARE, "the rule the tests check");

static struct larder__hedge_stats stats_of(const struct larder__hedge_budget *b)
{
    struct larder__hedge_stats s;
    larder__hedge_stats_get(b, &s);
    return s;
}

/* Take hedges until refused; returns how many were granted. */
static uint64_t drain(struct larder__hedge_budget *b)
{
    uint64_t n = 0;
    while (larder__hedge_take(b))
        n++;
    return n;
}

static void count_reads(struct larder__hedge_budget *b, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        larder__hedge_count_read(b);
}

TEST(hedge_budget_rule)
{
    struct larder__hedge_budget *b;
    CHECK_EQ(larder__hedge_open_local(&b), 0);
    /* a cold start may cut its first 16 stalls before any read paid for them */
    CHECK_EQ(stats_of(b).credit, 320);
    CHECK_EQ(drain(b), 16);
    CHECK(!larder__hedge_take(b));
    /* then one hedge per 20 reads, not one sooner */
    count_reads(b, 19);
    CHECK(!larder__hedge_take(b));
    count_reads(b, 1);
    CHECK(larder__hedge_take(b));
    CHECK(!larder__hedge_take(b));
    /* reads that ask for a hedge each time: 10,000 reads earn 10,000 / 20 */
    uint64_t granted = 0;
    for (int i = 0; i < 10000; i++) {
        larder__hedge_count_read(b);
        granted += larder__hedge_take(b);
    }
    CHECK_EQ(granted, 500);
    CHECK_EQ(stats_of(b).credit, 0);
    /* a window, not a lifetime total: a million quiet reads save 16 hedges,
     * where the old lifetime rule (5% of all reads + spare) would allow 50,000 */
    count_reads(b, 1000000);
    CHECK_EQ(stats_of(b).credit, 320);
    CHECK_EQ(drain(b), 16);
    /* 999 reads would pay for 49 hedges, but no more than 16 are saved */
    count_reads(b, 999);
    CHECK_EQ(stats_of(b).credit, 320);
    CHECK_EQ(drain(b), 16);
    /* under the cap, what reads paid is kept, to the read */
    count_reads(b, 299);
    CHECK_EQ(drain(b), 14); /* 299 / 20 = 14.95 */
    CHECK_EQ(stats_of(b).credit, 19);
    /* a hedge granted but never sent is given back, within the cap */
    count_reads(b, 1);
    CHECK(larder__hedge_take(b));
    CHECK_EQ(stats_of(b).credit, 0);
    larder__hedge_refund(b);
    CHECK_EQ(stats_of(b).credit, 20);
    count_reads(b, 1000);
    larder__hedge_refund(b); /* even a stray refund cannot lift it over the cap */
    CHECK_EQ(stats_of(b).credit, 320);
    /* the totals: every read counted; hedges granted less the two refunds */
    struct larder__hedge_stats s = stats_of(b);
    CHECK_EQ(s.reads, 19 + 1 + 10000 + 1000000 + 999 + 299 + 1 + 1000);
    CHECK_EQ(s.hedges, 16 + 1 + 500 + 16 + 16 + 14 + 1 - 2);
    larder__hedge_close(b);
    larder__hedge_close(NULL);
}

/* ---- many threads on one budget ------------------------------------------ */

struct racer {
    struct larder__hedge_budget *budget;
    pthread_barrier_t *start;
    int reads; /* 0: only ask for hedges, `asks` times */
    int asks;
    uint64_t granted;
};

/* Ask for a hedge, then count a read, `reads` times (or only ask): a
 * reader that wants a hedge for every read, the greediest there is. */
static void *race(void *arg)
{
    struct racer *r = arg;
    pthread_barrier_wait(r->start);
    if (r->reads == 0) {
        for (int i = 0; i < r->asks; i++)
            r->granted += larder__hedge_take(r->budget);
        return NULL;
    }
    for (int i = 0; i < r->reads; i++) {
        r->granted += larder__hedge_take(r->budget);
        larder__hedge_count_read(r->budget);
    }
    return NULL;
}

/* Run `threads` racers on `b`; returns the hedges they were granted. */
static uint64_t run_racers(struct larder__hedge_budget *b, int threads, int reads, int asks)
{
    pthread_t ids[16];
    struct racer racers[16];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        racers[i] = (struct racer){.budget = b, .start = &start, .reads = reads, .asks = asks};
        CHECK_EQ(pthread_create(&ids[i], NULL, race, &racers[i]), 0);
    }
    uint64_t granted = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        granted += racers[i].granted;
    }
    pthread_barrier_destroy(&start);
    return granted;
}

TEST(hedge_budget_threads)
{
    /* the last hedges of a full budget, raced for by 8 threads at once:
     * exactly 16 go out, never a 17th (a check, then a count, would let
     * several threads past the same check) */
    for (int round = 0; round < 200; round++) {
        char name[64];
        snprintf(name, sizeof name, "burst-%d", round);
        struct larder__hedge_budget *b;
        CHECK_EQ(larder__hedge_open_file(&b, test_path(name)), 0);
        CHECK_EQ(run_racers(b, 8, 0, 5), SPARE);
        larder__hedge_close(b);
    }
    /*
     * 8 threads each ask for a hedge before every one of 12,347 reads.
     * Credit in: 320 + 98,776 reads (never over the cap: every read
     * follows an ask, so credit cannot pile up); a hedge costs 20.  So
     * with what is left taken afterwards, exactly 16 + 98,776 / 20 =
     * 16 + 4,938 hedges, and 98,776 + 320 - 20 * 4,954 = 16 reads' credit
     * left: one hedge more than that is an overshoot.
     */
    struct larder__hedge_budget *b;
    CHECK_EQ(larder__hedge_open_file(&b, test_path(LARDER__HEDGE_FILE)), 0);
    uint64_t granted = run_racers(b, 8, 12347, 0);
    granted += drain(b);
    CHECK_EQ(granted, SPARE + 8 * 12347 / READS_PER_HEDGE);
    CHECK_EQ(granted, 4954);
    struct larder__hedge_stats s = stats_of(b);
    CHECK_EQ(s.credit, 16);
    CHECK_EQ(s.reads, 8 * 12347);
    CHECK_EQ(s.hedges, granted);
    larder__hedge_close(b);
}

/* ---- processes sharing one budget file ------------------------------------- */

/*
 * Fork `children` processes that wait for the parent, open the budget
 * file themselves (the first of them creates it), run `reads`/`asks` as
 * one racer thread would, and report what they were granted through a
 * pipe.  Returns the sum.
 */
static uint64_t run_processes(const char *path, int children, int reads, int asks)
{
    int go[2], report[2];
    CHECK_EQ(pipe(go), 0);
    CHECK_EQ(pipe(report), 0);
    pid_t pids[16];
    for (int i = 0; i < children; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            close(go[1]);
            char byte;
            if (read(go[0], &byte, 1) != 0) _exit(2); /* released when the parent closes it */
            struct larder__hedge_budget *b;
            if (larder__hedge_open_file(&b, path) < 0) _exit(3);
            uint64_t granted = 0;
            if (reads == 0) {
                for (int k = 0; k < asks; k++)
                    granted += larder__hedge_take(b);
            } else {
                for (int k = 0; k < reads; k++) {
                    granted += larder__hedge_take(b);
                    larder__hedge_count_read(b);
                }
            }
            larder__hedge_close(b);
            _exit(write(report[1], &granted, sizeof granted) == sizeof granted ? 0 : 4);
        }
    }
    close(go[0]);
    close(go[1]); /* all start at once */
    close(report[1]);
    uint64_t sum = 0, one;
    int reported = 0;
    while (read(report[0], &one, sizeof one) == sizeof one)
        sum += one, reported++;
    close(report[0]);
    for (int i = 0; i < children; i++) {
        int status;
        CHECK_EQ(waitpid(pids[i], &status, 0), pids[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    CHECK_EQ(reported, children);
    return sum;
}

TEST(hedge_budget_processes)
{
    const char *path = test_path(LARDER__HEDGE_FILE);
    /* 6 processes create the file at once and race for its allowance: one
     * file (never one each), so 16 hedges in all, not 6 * 16 */
    CHECK_EQ(run_processes(path, 6, 0, 20), SPARE);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_size, 4096);
    /*
     * Then, from no credit at all, 6 processes ask before each of 5,003
     * reads: 30,018 reads buy 30,018 / 20 = 1,500 hedges (1,500.9), 18
     * reads' credit left over -- across processes as exactly as threads.
     */
    uint64_t granted = run_processes(path, 6, 5003, 0);
    struct larder__hedge_budget *b;
    CHECK_EQ(larder__hedge_open_file(&b, path), 0);
    granted += drain(b);
    CHECK_EQ(granted, 6 * 5003 / READS_PER_HEDGE);
    CHECK_EQ(granted, 1500);
    struct larder__hedge_stats s = stats_of(b);
    CHECK_EQ(s.credit, 18);
    CHECK_EQ(s.reads, 6 * 5003);
    CHECK_EQ(s.hedges, 16 + 1500);
    larder__hedge_close(b);
}

/* ---- the file is hostile --------------------------------------------------- */

/* A sound budget file image: the layout of hedge.c's header, written here
 * from the documentation of the format, not from its code. */
struct image {
    char magic[8];
    uint32_t version, header_size, reads_per_hedge, spare;
    uint64_t credit, reads, hedges;
};

static void write_image(const char *path, const struct image *h, size_t size)
{
    static uint8_t page[8192];
    memset(page, 0, sizeof page);
    memcpy(page, h, sizeof *h);
    test_write_file(path, page, size);
}

static struct image sound_image(void)
{
    struct image h = {.version = 1,
                      .header_size = sizeof h,
                      .reads_per_hedge = READS_PER_HEDGE,
                      .spare = SPARE,
                      .credit = 320};
    memcpy(h.magic, "LARDERHB", 8);
    return h;
}

/* Opening `path` is refused with `code`, and leaves the file as it was. */
static void refused(const char *path, int code)
{
    size_t before_size, after_size;
    uint8_t *before = test_read_file(path, &before_size);
    struct larder__hedge_budget *b = NULL;
    CHECK_EQ(larder__hedge_open_file(&b, path), code);
    CHECK(b == NULL);
    CHECK(strstr(larder_errmsg(), path) != NULL);
    uint8_t *after = test_read_file(path, &after_size);
    CHECK_EQ(after_size, before_size);
    CHECK(memcmp(before, after, before_size) == 0);
    free(before);
    free(after);
}

TEST(hedge_budget_file_hostile)
{
    const char *path = test_path("budget");
    struct image h = sound_image();
    /* our own image is taken: the layout above is the real one */
    write_image(path, &h, 4096);
    struct larder__hedge_budget *b;
    CHECK_EQ(larder__hedge_open_file(&b, path), 0);
    CHECK_EQ(drain(b), SPARE);
    larder__hedge_close(b);

    h = sound_image();
    memcpy(h.magic, "LARDERCB", 8); /* another larder file */
    write_image(path, &h, 4096);
    refused(path, LARDER_ECACHE);
    h = sound_image();
    h.version = 2;
    write_image(path, &h, 4096);
    refused(path, LARDER_ECACHE);
    h = sound_image();
    h.spare = 1000; /* another rule: must not mix its counting with ours */
    write_image(path, &h, 4096);
    refused(path, LARDER_ECACHE);
    h = sound_image();
    h.header_size = 4000;
    write_image(path, &h, 4096);
    refused(path, LARDER_ECACHE);
    h = sound_image();
    write_image(path, &h, 100); /* cut short: mapping it would fault past its end */
    refused(path, LARDER_ECACHE);
    write_image(path, &h, 8192); /* longer than a budget */
    refused(path, LARDER_ECACHE);
    write_image(path, &h, 0);
    refused(path, LARDER_ECACHE);

    /* not a regular file, or a link elsewhere: not followed, not replaced */
    CHECK_EQ(mkdir(test_path("a-dir"), 0755), 0);
    CHECK(larder__hedge_open_file(&b, test_path("a-dir")) < 0);
    h = sound_image();
    write_image(test_path("elsewhere"), &h, 4096);
    CHECK_EQ(symlink(test_path("elsewhere"), test_path("link")), 0);
    CHECK_EQ(larder__hedge_open_file(&b, test_path("link")), -ELOOP);

    /* a credit damaged to anything at all buys at most the cap */
    h = sound_image();
    h.credit = UINT64_MAX;
    write_image(path, &h, 4096);
    CHECK_EQ(larder__hedge_open_file(&b, path), 0);
    CHECK_EQ(stats_of(b).credit, 320);
    CHECK_EQ(drain(b), SPARE);
    /* ... and damage while mapped too, by someone writing the file */
    uint64_t huge = (uint64_t)1 << 62;
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, &huge, sizeof huge, offsetof(struct image, credit)), sizeof huge);
    close(fd);
    CHECK_EQ(drain(b), SPARE);
    count_reads(b, 20);
    CHECK_EQ(drain(b), 1);
    larder__hedge_close(b);

    /* a new file: one page, 0640, full */
    umask(022);
    const char *fresh = test_path("fresh");
    CHECK_EQ(larder__hedge_open_file(&b, fresh), 0);
    larder__hedge_close(b);
    struct stat st;
    CHECK_EQ(stat(fresh, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0640);
    CHECK_EQ(st.st_size, 4096);
    size_t size;
    uint8_t *bytes = test_read_file(fresh, &size);
    struct image want = sound_image();
    CHECK(memcmp(bytes, &want, sizeof want) == 0);
    free(bytes);
    /* a directory where the file cannot be made */
    CHECK(larder__hedge_open_file(&b, test_path("no/such/dir/budget")) < 0);
}

/* ---- the process's budget, and the read paths on it -------------------------- */

TEST(hedge_attach_falls_back)
{
    /* a damaged node budget: the process hedges on its own budget, and
     * the file is left for a person to look at */
    CHECK_EQ(mkdir(test_path("cache"), 0755), 0);
    struct image h = sound_image();
    h.version = 99;
    write_image(test_path("cache/hedge-budget"), &h, 4096);
    struct larder__hedge_budget *own = larder__hedge_process();
    CHECK_EQ(larder__hedge_attach(test_path("cache")), LARDER_ECACHE);
    CHECK(larder__hedge_process() == own);
    CHECK(larder__hedge_take(own));
    /* a sound one is shared from then on; the first attached stays */
    CHECK_EQ(mkdir(test_path("cache2"), 0755), 0);
    CHECK_EQ(larder__hedge_attach(test_path("cache2")), 0);
    struct larder__hedge_budget *node = larder__hedge_process();
    CHECK(node != own);
    CHECK_EQ(larder__hedge_attach(test_path("cache")), 0);
    CHECK(larder__hedge_process() == node);
    struct larder__hedge_budget *other;
    CHECK_EQ(larder__hedge_open_file(&other, test_path("cache2/hedge-budget")), 0);
    CHECK(larder__hedge_take(node));
    CHECK_EQ(stats_of(other).hedges, 1); /* another mapping sees it: one budget */
    larder__hedge_close(other);
}

static ssize_t (*real_pread)(int, void *, size_t, off_t);

/* Every read of the origin file takes 800 ms: past the 500 ms a read
 * waits before it is hedged while its origin's latencies are unknown. */
static ssize_t slow_pread(int fd, void *buf, size_t count, off_t offset)
{
    struct timespec pause = {0, 800 * 1000000L};
    nanosleep(&pause, NULL);
    return real_pread(fd, buf, count, offset);
}

TEST(hedge_origin_reads_draw_on_the_node_budget)
{
    char data[8192];
    test_fill_random(data, sizeof data, 5);
    test_write_file(test_path("origin.bin"), data, sizeof data);
    CHECK_EQ(mkdir(test_path("cache"), 0755), 0);
    CHECK_EQ(larder__hedge_attach(test_path("cache")), 0);
    /* another process on the node has spent the budget but 1 hedge */
    struct larder__hedge_budget *node;
    CHECK_EQ(larder__hedge_open_file(&node, test_path("cache/hedge-budget")), 0);
    CHECK_EQ(drain(node), SPARE);
    count_reads(node, 20);
    struct larder__source *o;
    CHECK_EQ(larder__source_open(&o, test_path("origin.bin"), NULL), 0);
    real_pread = larder__sys.pread;
    larder__sys.pread = slow_pread;
    uint64_t hedges = larder__source_hedges();
    char buf[4096];
    /* the first slow read takes the last hedge; the second is refused one */
    CHECK_EQ(larder__source_read(o, buf, sizeof buf, 100, 0), LARDER__FROM_ORIGIN);
    CHECK(memcmp(buf, data + 100, sizeof buf) == 0);
    CHECK_EQ(larder__source_hedges(), hedges + 1);
    CHECK_EQ(larder__source_read(o, buf, sizeof buf, 2000, 0), LARDER__FROM_ORIGIN);
    CHECK(memcmp(buf, data + 2000, sizeof buf) == 0);
    CHECK_EQ(larder__source_hedges(), hedges + 1);
    /* pread stays slow: a losing attempt may still be on its way in (this
     * test's process ends with it) */
    struct larder__hedge_stats s = stats_of(node);
    CHECK_EQ(s.reads, 20 + 2); /* both reads were counted on the node */
    CHECK_EQ(s.hedges, SPARE + 1);
    CHECK_EQ(s.credit, 2);
    larder__source_close(o);
    larder__hedge_close(node);
}

TEST(hedge_dataset_with_cache_attaches)
{
    const char *sources[] = {test_path("src")};
    char one[1000];
    test_fill_random(one, sizeof one, 3);
    test_write_file(test_path("src/a.bin"), one, sizeof one);
    larder_pack_options po = {.version = LARDER_PACK_OPTIONS_VERSION, .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &po, NULL), 0);
    /* without a cache: the process's own budget, no file anywhere */
    unsetenv("LARDER_CACHE");
    struct larder__hedge_budget *own = larder__hedge_process();
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), NULL), 0);
    larder_close(d);
    CHECK(larder__hedge_process() == own);
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = test_path("c")};
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &o), 0);
    CHECK(larder__hedge_process() != own);
    struct stat st;
    CHECK_EQ(stat(test_path("c/hedge-budget"), &st), 0);
    CHECK_EQ(st.st_size, 4096);
    larder_close(d);
}
