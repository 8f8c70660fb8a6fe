/*
 * test_cache_plans_claim.c - a plan registry slot claimed by a process
 * that never published it (killed in between, or a damaged file) is
 * taken back: claims hold their claimer's pid and time in the state word
 * (the layout docs/cache.md gives, written here by the test's own code),
 * and a claim whose process is gone, or older than 10 s, is freed.
 */
#include "cache.h"
#include "dataset.h"
#include "larder_pack.h"
#include "sys.h"
#include "test.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 64

static larder_dataset *dataset;
static struct larder__cache *cache;
static char plans_path[4096];

static void setup(void)
{
    static uint8_t data[3000];
    for (int i = 0; i < 8; i++) {
        char path[4096];
        test_fill_random(data, sizeof data, (uint64_t)i);
        snprintf(path, sizeof path, "%s/src/s%d.bin", test_dir(), i);
        test_write_file(path, data, sizeof data);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options o = {
        .version = LARDER_PACK_OPTIONS_VERSION, .format = LARDER_FORMAT_FLAT, .jobs = 1};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &o, NULL), 0);
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                              .cache_dir = test_path("cache")};
    CHECK_EQ(larder_open(&dataset, test_path("packed/index.larder"), &oo), 0);
    cache = larder__dataset_cache(dataset);
    larder_dataset_info info;
    CHECK_EQ(larder_dataset_info_get(dataset, &info), 0);
    snprintf(plans_path, sizeof plans_path, "%s/%s/plans", test_path("cache"), info.dataset_id);
}

static struct larder__plan_params plan(uint32_t rank)
{
    return (struct larder__plan_params){
        .seed = 1, .global_batch = 4, .world = 4, .rank = rank, .workers = 1, .num_samples = 8};
}

/* Every slot's state word set to `word` and its pid to 0, as a claimer
 * leaves them before it publishes (slot i at 64 + 128 i: state, pid). */
static void set_all_states(uint64_t word)
{
    FILE *f = fopen(plans_path, "r+b");
    CHECK(f != NULL);
    for (int i = 0; i < SLOTS; i++) {
        int64_t pid = 0;
        fseek(f, 64 + 128 * i, SEEK_SET);
        CHECK_EQ(fwrite(&word, 8, 1, f), 1);
        CHECK_EQ(fwrite(&pid, 8, 1, f), 1);
    }
    fclose(f);
}

static uint64_t state_of(int slot)
{
    size_t length;
    uint8_t *bytes = test_read_file(plans_path, &length);
    CHECK(length >= 64 + 128 * SLOTS);
    uint64_t word;
    memcpy(&word, bytes + 64 + 128 * slot, 8);
    free(bytes);
    return word;
}

/* A claim word: state 1, pid in bits 2-23, CLOCK_REALTIME seconds from bit 24. */
static uint64_t claim(uint64_t pid, uint64_t seconds)
{
    return (seconds << 24) | (pid << 2) | 1;
}

static pid_t dead_pid(void)
{
    pid_t child = fork();
    if (child == 0) _exit(0);
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    return child;
}

TEST(plans_abandoned_claims_are_taken_back)
{
    setup();
    struct larder__plan_params p = plan(1);
    int slot = larder__cache_plan_register(cache, &p); /* makes the file */
    CHECK(slot >= 0);
    larder__cache_plan_unregister(cache, slot);
    uint64_t now = (uint64_t)time(NULL);
    /* claims in progress by a live process (this one), just made: nothing to take */
    set_all_states(claim((uint64_t)getpid(), now));
    CHECK_EQ(larder__cache_plan_register(cache, &p), -EAGAIN);
    /* a claimer that died before writing anything but the claim (the old
     * format's bare "claimed", pid 0): every slot was lost for good */
    set_all_states(1);
    slot = larder__cache_plan_register(cache, &p);
    CHECK(slot >= 0 && slot < SLOTS);
    larder__cache_plan_unregister(cache, slot);
    /* claims by a process that is gone, made just now */
    set_all_states(claim((uint64_t)dead_pid(), now));
    slot = larder__cache_plan_register(cache, &p);
    CHECK(slot >= 0 && slot < SLOTS);
    larder__cache_plan_unregister(cache, slot);
    /* claims by a live pid (a reused one) made a minute ago, or in the future */
    set_all_states(claim((uint64_t)getpid(), now - 60));
    slot = larder__cache_plan_register(cache, &p);
    CHECK(slot >= 0 && slot < SLOTS);
    larder__cache_plan_unregister(cache, slot);
    set_all_states(claim((uint64_t)getpid(), now + 3600));
    slot = larder__cache_plan_register(cache, &p);
    CHECK(slot >= 0 && slot < SLOTS);
    larder__cache_plan_unregister(cache, slot);
    larder_close(dataset);
}

/* In the child: killed as it looks up its own start time, after claiming. */
static int open_and_die(const char *path, int flags, mode_t mode)
{
    (void)flags, (void)mode;
    if (strncmp(path, "/proc/", 6) == 0) raise(SIGKILL);
    errno = ENOENT;
    return -1;
}

TEST(plans_claimer_killed_before_publishing_leaks_no_slot)
{
    setup();
    struct larder__plan_params p = plan(0);
    CHECK_EQ(larder__cache_plan_register(cache, &p), 0); /* makes the file */
    larder__cache_plan_unregister(cache, 0);
    pid_t child = fork();
    if (child == 0) {
        larder__sys.open = open_and_die; /* the registry is mapped already */
        larder__cache_plan_register(cache, &p);
        _exit(0);
    }
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    uint64_t left = state_of(0); /* its claim, never published */
    CHECK_EQ(left & 3, 1);
    CHECK_EQ((left >> 2) & ((1u << 22) - 1), (uint64_t)child);
    /* all 64 slots can be registered again: the dead claim is taken back */
    int slots[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        struct larder__plan_params q = plan((uint32_t)(i % 4));
        slots[i] = larder__cache_plan_register(cache, &q);
        CHECK(slots[i] >= 0);
    }
    struct larder__cache_plan live[SLOTS];
    CHECK_EQ(larder__cache_plans_live(cache, 8, live, SLOTS), SLOTS);
    for (int i = 0; i < SLOTS; i++)
        larder__cache_plan_unregister(cache, slots[i]);
    larder_close(dataset);
}

/* Reopen the dataset: a fresh cache handle, which maps the registry anew. */
static void reopen(void)
{
    larder_close(dataset);
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                              .cache_dir = test_path("cache")};
    CHECK_EQ(larder_open(&dataset, test_path("packed/index.larder"), &oo), 0);
    cache = larder__dataset_cache(dataset);
}

/* A registry file found cut short, or without its header, is replaced by a
 * whole one and used; one whose header names another version is left as it
 * is, and no plan is registered in it. */
TEST(plans_damaged_registry_is_replaced_another_version_refused)
{
    setup();
    struct larder__plan_params p = plan(0);
    CHECK_EQ(larder__cache_plan_register(cache, &p), 0); /* a whole registry: its size */
    larder__cache_plan_unregister(cache, 0);
    size_t whole;
    free(test_read_file(plans_path, &whole));
    CHECK(whole >= 64 + 128 * SLOTS);
    static uint8_t bytes[64 + 128 * SLOTS + 64];
    CHECK(whole <= sizeof bytes);
    struct larder__cache_plan live[SLOTS];

    test_fill_random(bytes, 10, 5); /* cut short */
    test_write_file(plans_path, bytes, 10);
    reopen();
    CHECK_EQ(larder__cache_plan_register(cache, &p), 0);
    CHECK_EQ(larder__cache_plans_live(cache, 8, live, SLOTS), 1);
    size_t now;
    free(test_read_file(plans_path, &now));
    CHECK_EQ(now, whole);

    test_fill_random(bytes, whole, 6); /* whole, but noise where the header goes */
    test_write_file(plans_path, bytes, whole);
    reopen();
    CHECK_EQ(larder__cache_plan_register(cache, &p), 0);
    CHECK_EQ(larder__cache_plans_live(cache, 8, live, SLOTS), 1);

    uint8_t *file = test_read_file(plans_path, &now); /* another version's header */
    CHECK_EQ(memcmp(file, "LARDERPL", 8), 0);
    uint32_t other = 99;
    memcpy(file + 8, &other, sizeof other);
    test_write_file(plans_path, file, now);
    reopen();
    CHECK_EQ(larder__cache_plan_register(cache, &p), LARDER_ECACHE);
    CHECK_EQ(larder__cache_plans_live(cache, 8, live, SLOTS), 0);
    uint8_t *after = test_read_file(plans_path, &now);
    CHECK_EQ(memcmp(after, file, now), 0); /* left as it was */
    free(after), free(file);
    larder_close(dataset);
}
