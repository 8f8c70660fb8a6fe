/*
 * A dataset's `blocks` file found unsound (here: of another larder
 * version) by two openers at once: the first replaces it, the second,
 * judging it again under the replace lock (cache.c), maps the first's
 * file instead of replacing that too.  Before the lock each unlinked what
 * was at the path: the two mapped different files, and blocks the second
 * evicted (holes punched) the first still served as resident and checked.
 */
#include "cache.h"
#include "cache_internal.h"
#include "dataset.h"
#include "share_fixture.h"
#include "sys.h"
#include "test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 4096
#define SAMPLES 40

static int (*real_close)(int);
static bool armed;
static larder_dataset *first; /* the opener that comes in between */

/* At the second opener's close of the old-version `blocks` it judged
 * unsound, the first opener opens the dataset (and replaces the file). */
static int close_then_open_first(int fd)
{
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (armed && n > 7 && (target[n] = 0, strcmp(target + n - 7, "/blocks") == 0)) {
        struct shared_header h;
        if (pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && h.version != LARDER__CACHE_VERSION) {
            armed = false;
            first = share_fixture_open("a", BLOCK);
        }
    }
    return real_close(fd);
}

/* Samples of `d` whose bytes differ from an uncached open's. */
static int wrong_samples(larder_dataset *d)
{
    char index[4096];
    snprintf(index, sizeof index, "%s/a/index.larder", test_dir());
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION};
    larder_dataset *ref;
    CHECK_EQ(larder_open(&ref, index, &o), 0);
    static uint8_t x[9000], y[9000];
    int wrong = 0;
    for (uint64_t i = 0; i < SAMPLES; i++) {
        int64_t n = larder_read_sample(d, i, x, sizeof x);
        int64_t m = larder_read_sample(ref, i, y, sizeof y);
        if (n != m || m < 0 || memcmp(x, y, (size_t)m) != 0) wrong++;
    }
    larder_close(ref);
    return wrong;
}

TEST(cache_blocks_of_another_version_replaced_once_by_two_openers)
{
    share_fixture_make("a", 100, SAMPLES, 8000, 60000);
    larder_dataset *d = share_fixture_open("a", BLOCK);
    larder_dataset_info info;
    CHECK_EQ(larder_dataset_info_get(d, &info), 0);
    larder_close(d);
    char path[4300];
    snprintf(path, sizeof path, "%s/%s/blocks", test_path("cache"), info.dataset_id);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    uint32_t old = LARDER__CACHE_VERSION - 1; /* a cache of the larder before */
    CHECK_EQ(pwrite(fd, &old, sizeof old, offsetof(struct shared_header, version)),
             (ssize_t)sizeof old);
    close(fd);

    real_close = larder__sys.close;
    larder__sys.close = close_then_open_first;
    armed = true;
    larder_dataset *second = share_fixture_open("a", BLOCK);
    larder__sys.close = real_close;
    CHECK(first != NULL);
    CHECK(!armed);
    struct larder__cache *c1 = larder__dataset_cache(first), *c2 = larder__dataset_cache(second);
    static uint8_t buf[9000];
    for (uint64_t i = 0; i < SAMPLES; i++) /* the first stages and checks every sample */
        CHECK(larder_read_sample(first, i, buf, sizeof buf) > 0);
    uint64_t staged = __atomic_load_n(&c1->header->resident_blocks, __ATOMIC_RELAXED);
    CHECK(staged > 0);
    /* one file: what the first staged, the second sees */
    CHECK_EQ(__atomic_load_n(&c2->header->resident_blocks, __ATOMIC_RELAXED), staged);
    /* the second evicts everything (holes punched): the first sees it go,
     * and reads every sample right again */
    c2->header->capacity = 0;
    CHECK_EQ(larder__cache_evict_all(c2), staged);
    CHECK_EQ(__atomic_load_n(&c1->header->resident_blocks, __ATOMIC_RELAXED), 0);
    CHECK_EQ(wrong_samples(first), 0);
    larder_close(first);
    larder_close(second);
    first = NULL;
}
