/*
 * test_mount_cache_check.c - the mount's check of a sample the node cache
 * holds whole (src/mount/cache_check.c, docs/mount.md "Cache hits are
 * checked once per sample"): bytes changed in the cache's data file fail
 * the index's checksum; a sample up to the repair limit is fetched again
 * and passes, and one over it stays wrong, which a reader must see as EIO
 * like any checksum error, not ENOMEM (a shortage it would retry).  The
 * limit is lowered for the test (struct larder__mount's repair_limit) so
 * that a sample of 70000 bytes stands for one over 256 MiB.
 */
#include "larder_pack.h"
#include "mount.h"
#include "test.h"

#include <errno.h>
#include <stdlib.h>

static larder_dataset *open_packed(void)
{
    larder_open_options oo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                              .cache_dir = test_path("cache")};
    larder_dataset *d;
    CHECK_EQ(larder_open(&d, test_path("packed/index.larder"), &oo), 0);
    return d;
}

/* Pack three samples of 70000 bytes, read them (now in the cache whole),
 * and change 16 bytes of sample 1 in the cache's data file; its info in *s. */
static void cache_a_changed_sample(larder_sample_info *s)
{
    static uint8_t data[70000];
    for (int i = 0; i < 3; i++) {
        char path[4096];
        test_fill_random(data, sizeof data, (uint64_t)i + 1);
        snprintf(path, sizeof path, "%s/src/s%d.bin", test_dir(), i);
        test_write_file(path, data, sizeof data);
    }
    const char *sources[] = {test_path("src")};
    larder_pack_options po = {.version = LARDER_PACK_OPTIONS_VERSION};
    CHECK_EQ(larder_pack(sources, 1, test_path("packed"), &po, NULL), 0);
    larder_dataset *d = open_packed();
    CHECK_EQ(larder_sample_info_get(d, 1, s), 0);
    CHECK(s->length >= 70000);
    /* every sample read: the blocks sample 1 shares with its neighbours are
     * trusted only once all the samples in them were checked */
    uint8_t *whole = malloc(2 * s->length);
    CHECK(whole != NULL);
    for (uint64_t id = 0; id < 3; id++)
        CHECK(larder_read_sample(d, id, whole, 2 * s->length) > 0);
    free(whole);
    larder_dataset_info info;
    CHECK_EQ(larder_dataset_info_get(d, &info), 0);
    CHECK_EQ(test_sh("printf 'XXXXXXXXXXXXXXXX' | dd of=%s/%s/%06u.data bs=1 seek=%llu "
                     "conv=notrunc 2>/dev/null",
                     test_path("cache"), info.dataset_id, s->shard,
                     (unsigned long long)(s->offset + 1000)),
             0);
    larder_close(d);
}

TEST(mount_cache_check_sample_over_the_repair_limit_is_a_checksum_error)
{
    larder_sample_info s;
    cache_a_changed_sample(&s);
    larder_dataset *d = open_packed();
    struct larder__mount m = {.dataset = d, .cached = true, .repair_limit = 1000};
    int rc = larder__mount_check_cached(&m, 1);
    CHECK_EQ(rc, LARDER_ECHECKSUM);
    CHECK_EQ(larder__mount_errno(rc), EIO);
    CHECK(!larder__mount_check_passed(&m, 1));
    CHECK_EQ(larder__mount_check_cached(&m, 0), 0); /* the others are as they were */
    free((void *)m.checked);
    /* under the default limit the same bytes are fetched again, and pass */
    struct larder__mount fresh = {.dataset = d, .cached = true};
    CHECK_EQ(larder__mount_check_cached(&fresh, 1), 0);
    CHECK(larder__mount_check_passed(&fresh, 1));
    free((void *)fresh.checked);
    larder_close(d);
}
