/*
 * test_cache_share_hostile.c - DIR/node-share and the other datasets'
 * `blocks` headers are shared, writable files: whatever they say, a
 * reader never damages another dataset's blocks, nor counts a dataset
 * twice or by a forged number.  The files are written here by this
 * test's own copy of their layout (docs/cache.md), the expected places
 * of blocks from the datasets' indexes (shard sizes), the expected bytes
 * from the data files as the reads left them.
 */
#include "cache.h"
#include "cache_internal.h"
#include "dataset.h"
#include "share_fixture.h"
#include "test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define SAMPLES 40

/* The layout of DIR/node-share, as docs/cache.md gives it. */
struct forged_victim {
    uint64_t use, global, offset;
    uint32_t shard, length;
};
struct forged_slot {
    uint64_t state, id_low, id_high, sequence;
    int64_t published_ms;
    uint64_t count, reserved[2];
    struct forged_victim victims[128];
};
struct forged_share {
    char magic[8];
    uint32_t version, slots;
    uint64_t capacity, reserved[6];
    struct forged_slot slot[32];
};

struct side {
    larder_dataset *d;
    struct larder__cache *cache;
    char dir[4096]; /* DIR/<id> */
    uint64_t id_low, id_high;
    uint32_t shards;
    uint64_t base[16], size[16]; /* from the index */
    uint64_t blocks;
};

static void make(const char *name, uint64_t seed)
{
    share_fixture_make(name, seed, SAMPLES, 8000, 60000);
}

/* Open a dataset and read it whole: every block resident. */
static void open_side(struct side *s, const char *name)
{
    s->d = share_fixture_open(name, BLOCK);
    s->cache = larder__dataset_cache(s->d);
    larder_dataset_info info;
    CHECK_EQ(larder_dataset_info_get(s->d, &info), 0);
    snprintf(s->dir, sizeof s->dir, "%s/%s", test_path("cache"), info.dataset_id);
    larder__dataset_id(s->d, &s->id_low, &s->id_high);
    s->shards = larder__dataset_num_shards(s->d);
    CHECK(s->shards >= 2 && s->shards <= 16);
    s->blocks = 0;
    for (uint32_t k = 0; k < s->shards; k++) {
        s->base[k] = s->blocks;
        s->size[k] = larder__dataset_shard_size(s->d, k);
        s->blocks += (s->size[k] + BLOCK - 1) / BLOCK;
    }
    static uint8_t buf[9000];
    for (uint64_t i = 0; i < SAMPLES; i++)
        CHECK(larder_read_sample(s->d, i, buf, sizeof buf) > 0);
}

/* Blocks of the dataset resident now, shard by shard. */
static uint64_t held(struct side *s)
{
    uint64_t n = 0;
    for (uint32_t k = 0; k < s->shards; k++) {
        uint64_t end = k + 1 < s->shards ? s->base[k + 1] : s->blocks;
        for (uint64_t g = s->base[k]; g < end; g++)
            if (larder__cache_present(s->cache, k, g - s->base[k], g - s->base[k])) n++;
    }
    return n;
}

static struct forged_share *map_share(void)
{
    int fd = open(test_path("cache/node-share"), O_RDWR);
    CHECK(fd >= 0);
    struct forged_share *f = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(f != MAP_FAILED);
    CHECK(memcmp(f->magic, "LARDERNS", 8) == 0 && f->slots == 32);
    return f;
}

static struct forged_slot *slot_of(struct forged_share *f, const struct side *s)
{
    for (int i = 0; i < 32; i++)
        if (f->slot[i].state == 2 && f->slot[i].id_low == s->id_low &&
            f->slot[i].id_high == s->id_high)
            return &f->slot[i];
    CHECK(!"the dataset has a slot");
    return NULL;
}

/* Publish victims in a slot, as a writer of the file would. */
static void publish(struct forged_slot *x, const struct forged_victim *v, uint64_t count)
{
    x->sequence += 1;
    memcpy(x->victims, v, count * sizeof *v);
    x->count = count;
    x->published_ms = larder__cache_clock_ms();
    x->sequence += 1;
}

/* The truth of s's shard 1, block 0 (at its own place), as a victim to publish. */
static struct forged_victim first_of_shard1(const struct side *s)
{
    uint64_t tail = s->size[1] < BLOCK ? s->size[1] : BLOCK;
    return (struct forged_victim){.use = UINT64_MAX - 1,
                                  .global = s->base[1],
                                  .offset = 0,
                                  .shard = 1,
                                  .length = (uint32_t)tail};
}

static void read_range(const struct side *s, uint32_t shard, uint64_t offset, uint8_t *out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%06u.data", s->dir, shard);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, out, BLOCK, (off_t)offset), BLOCK);
    close(fd);
}

static void setup(struct side *a, struct side *b)
{
    make("a", 100);
    make("b", 900);
    setenv("LARDER_NODE_CACHE_SIZE", "1G", 1); /* room for both, until the test says less */
    open_side(a, "a");
    open_side(b, "b");
    CHECK_EQ(held(a), a->blocks);
    CHECK_EQ(held(b), b->blocks);
}

static void teardown(struct side *a, struct side *b, struct forged_share *f)
{
    munmap(f, sizeof *f);
    larder_close(a->d);
    larder_close(b->d);
    unsetenv("LARDER_NODE_CACHE_SIZE");
}

/* Another process's view of dataset a (a handle of its own, nothing read)
 * whose LARDER_NODE_CACHE_SIZE is `blocks` blocks: it trims the node to
 * that.  Freed by the caller (larder_close). */
static larder_dataset *trimmer(uint64_t blocks)
{
    char size[32];
    snprintf(size, sizeof size, "%llu", (unsigned long long)(blocks * BLOCK));
    setenv("LARDER_NODE_CACHE_SIZE", size, 1);
    larder_dataset *d = share_fixture_open("a", BLOCK);
    CHECK(larder__dataset_cache(d)->share != NULL);
    setenv("LARDER_NODE_CACHE_SIZE", "1G", 1);
    return d;
}

static void trim(larder_dataset *d)
{
    larder__cache_trim(larder__dataset_cache(d));
}

TEST(share_victim_at_another_blocks_place_is_refused)
{
    struct side a, b;
    setup(&a, &b);
    struct forged_share *f = map_share();
    /* block 0 of b's shard 1 (resident), and its bytes as the read left them */
    static uint8_t before[BLOCK], after[BLOCK], zero[BLOCK];
    read_range(&b, 1, 0, before);
    CHECK(memcmp(before, zero, BLOCK) != 0);
    /* b's slot names its block 0 (shard 0) but the place of shard 1's block 0 */
    struct forged_victim lie = {
        .use = UINT64_MAX - 1, .global = 0, .offset = 0, .shard = 1, .length = BLOCK};
    publish(slot_of(f, &b), &lie, 1);
    larder_dataset *over = trimmer(a.blocks + b.blocks - 1); /* one block over */
    f->capacity = UINT64_C(1) << 50; /* the file's figure is not the process's */
    trim(over);
    read_range(&b, 1, 0, after);
    CHECK(memcmp(before, after, BLOCK) == 0); /* no hole in another block */
    CHECK(larder__cache_present(b.cache, 1, 0, 0));
    CHECK(larder__cache_present(b.cache, 0, 0, 0)); /* refused, not evicted elsewhere */
    /* a length past the block, and a shard past the last, are refused too */
    struct forged_victim longer = {.use = UINT64_MAX - 1,
                                   .global = b.base[1] - 1,
                                   .offset = (b.base[1] - 1) * BLOCK,
                                   .shard = 0,
                                   .length = 2 * BLOCK};
    publish(slot_of(f, &b), &longer, 1);
    trim(over);
    read_range(&b, 1, 0, after);
    CHECK(memcmp(before, after, BLOCK) == 0);
    CHECK_EQ(held(&b), b.blocks);
    /* the truth is taken: shard 1's block 0 at its own place */
    struct forged_victim truth = first_of_shard1(&b);
    uint64_t tail = truth.length;
    publish(slot_of(f, &b), &truth, 1);
    trim(over);
    CHECK(!larder__cache_present(b.cache, 1, 0, 0));
    CHECK_EQ(held(&b), b.blocks - 1);
    CHECK_EQ(held(&a), a.blocks);
    read_range(&b, 1, 0, after);
    CHECK(memcmp(after, zero, tail) == 0); /* its hole */
    larder_close(over);
    teardown(&a, &b, f);
}

TEST(share_forged_slots_and_counts_evict_nothing)
{
    struct side a, b;
    setup(&a, &b);
    struct forged_share *f = map_share();
    /* b's slot offers every block of b, each at its true place */
    static struct forged_victim all[128];
    CHECK(b.blocks <= 128);
    for (uint32_t k = 0; k < b.shards; k++)
        for (uint64_t g = b.base[k]; g < (k + 1 < b.shards ? b.base[k + 1] : b.blocks); g++) {
            uint64_t offset = (g - b.base[k]) * BLOCK, left = b.size[k] - offset;
            all[g] = (struct forged_victim){.use = UINT64_MAX - 1 - g,
                                            .global = g,
                                            .offset = offset,
                                            .shard = k,
                                            .length = (uint32_t)(left < BLOCK ? left : BLOCK)};
        }
    publish(slot_of(f, &b), all, b.blocks);
    larder_dataset *exact = trimmer(a.blocks + b.blocks); /* exactly what they hold */
    f->capacity = 0; /* the file's figure is not the process's */
    trim(exact);
    CHECK_EQ(held(&b), b.blocks); /* within the capacity: nothing goes */
    /* a second live slot claiming b's id: b is still counted once */
    struct forged_slot *twin = NULL;
    for (int i = 31; i >= 0 && !twin; i--)
        if (f->slot[i].state == 0) twin = &f->slot[i];
    CHECK(twin != NULL);
    twin->id_low = b.id_low, twin->id_high = b.id_high;
    twin->state = 2;
    trim(exact);
    CHECK_EQ(held(&b), b.blocks);
    CHECK_EQ(held(&a), a.blocks);
    twin->state = 0;
    /* b's header says it holds 2^30 blocks: the node's total is what its bitmap holds */
    char path[4200];
    snprintf(path, sizeof path, "%s/blocks", b.dir);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    uint64_t forged = UINT64_C(1) << 30, real;
    CHECK_EQ(pread(fd, &real, 8, 56), 8); /* resident_blocks, after the totals */
    CHECK_EQ(real, b.blocks);
    CHECK_EQ(pwrite(fd, &forged, 8, 56), 8);
    trim(exact);
    CHECK_EQ(held(&b), b.blocks);
    CHECK_EQ(held(&a), a.blocks);
    /* and a real excess is still evicted: three blocks over */
    larder_dataset *over = trimmer(a.blocks + b.blocks - 3);
    trim(over);
    larder_close(over);
    CHECK_EQ(held(&a) + held(&b), a.blocks + b.blocks - 3);
    CHECK_EQ(pwrite(fd, &real, 8, 56), 8);
    close(fd);
    larder_close(exact);
    teardown(&a, &b, f);
}

/* Every node-share slot left claimed (a claimer that died before it
 * published: a bare 1, or a claim word naming a process that is gone): a
 * dataset opened next still gets a slot; claims a live process made just
 * now are left alone. */
TEST(share_abandoned_claims_are_taken_back)
{
    make("a", 100);
    setenv("LARDER_NODE_CACHE_SIZE", "1G", 1);
    struct side a;
    open_side(&a, "a");
    larder_close(a.d);
    struct forged_share *f = map_share();
    for (int i = 0; i < 32; i++)
        f->slot[i].state = 1, f->slot[i].id_low = f->slot[i].id_high = 0;
    open_side(&a, "a");
    CHECK(a.cache->share != NULL);
    larder_close(a.d);
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    CHECK_EQ(waitpid(gone, NULL, 0), gone);
    uint64_t now = (uint64_t)time(NULL);
    for (int i = 0; i < 32; i++)
        f->slot[i].state = (now << 24) | ((uint64_t)gone << 2) | 1, f->slot[i].id_low = 0;
    open_side(&a, "a");
    CHECK(a.cache->share != NULL);
    larder_close(a.d);
    for (int i = 0; i < 32; i++)
        f->slot[i].state = (now << 24) | ((uint64_t)getpid() << 2) | 1, f->slot[i].id_low = 0;
    open_side(&a, "a");
    CHECK(a.cache->share == NULL); /* being claimed: it keeps to its own capacity */
    larder_close(a.d);
    /* words that are no state at all (a damaged file): free (before, never
     * taken, and with all 32 so no dataset was counted: found by review) */
    const uint64_t noise[] = {3, 4, 6, UINT64_MAX - 1, UINT64_C(1) << 40};
    for (int i = 0; i < 32; i++)
        f->slot[i].state = noise[i % 5], f->slot[i].id_low = 0;
    open_side(&a, "a");
    CHECK(a.cache->share != NULL);
    larder_close(a.d);
    munmap(f, sizeof *f);
    unsetenv("LARDER_NODE_CACHE_SIZE");
}

/* Every slot live: a dataset opened next takes back the one slot whose
 * dataset holds nothing (no cache files) and published nothing for 10 s,
 * passing over slots of datasets that hold blocks (whatever their
 * publication time says) and of ones that published lately; a slot just
 * claimed is not taken back at once by the next opener; a dataset whose
 * slot was taken back claims one anew before it caches more. */
TEST(share_slots_of_datasets_holding_nothing_are_given_back)
{
    struct side a, b;
    setup(&a, &b);
    larder_close(b.d);
    struct forged_share *f = map_share();
    struct forged_slot *a_slot = slot_of(f, &a), *b_slot = slot_of(f, &b);
    CHECK(a_slot < &f->slot[31] && b_slot < &f->slot[31]);
    a_slot->published_ms = b_slot->published_ms = 0; /* long ago: only their blocks keep them */
    int64_t now = larder__cache_clock_ms();
    for (int i = 0; i < 32; i++) {
        struct forged_slot *x = &f->slot[i];
        if (x == a_slot || x == b_slot) continue;
        x->state = 2, x->id_low = 1000 + (uint64_t)i, x->id_high = 77; /* no such cache dir */
        x->published_ms = i == 31 ? 0 : now;                           /* 31 alone: long ago */
        x->count = 0;
    }

    make("c", 5000);
    struct side c;
    open_side(&c, "c");
    CHECK(c.cache->share != NULL);
    CHECK(slot_of(f, &c) == &f->slot[31]);
    CHECK(a_slot->id_low == a.id_low && b_slot->id_low == b.id_low);
    larder_close(c.d);

    /* c's slot, claimed just now, is not the next opener's, though c holds
     * nothing once its blocks are gone: the other slots published lately */
    larder_dataset *c_again = share_fixture_open("c", BLOCK);
    larder__cache_evict_all(larder__dataset_cache(c_again));
    larder_close(c_again);
    make("d", 7000);
    larder_dataset *d = share_fixture_open("d", BLOCK);
    CHECK(larder__dataset_cache(d)->share == NULL); /* it keeps to its own capacity */
    larder_close(d);
    CHECK(slot_of(f, &c) == &f->slot[31]);

    /* once c's claim is old and c holds nothing, d takes its slot */
    f->slot[31].published_ms = 0;
    d = share_fixture_open("d", BLOCK);
    CHECK(larder__dataset_cache(d)->share != NULL);
    CHECK(f->slot[31].id_low != c.id_low);
    larder_close(d);

    /* a's slot taken under it (as if a held nothing): a claims one anew
     * before it caches more */
    a_slot->id_low = 4242, a_slot->id_high = 4242;
    a_slot->published_ms = larder__cache_clock_ms(); /* its new holder: lately */
    f->slot[30].published_ms = 0;                    /* one slot to take: a forged id, no files */
    larder__cache_evict_all(a.cache);
    CHECK(!larder__share_over(a.cache, BLOCK));
    CHECK(slot_of(f, &a) == &f->slot[30]);
    munmap(f, sizeof *f);
    larder_close(a.d);
    unsetenv("LARDER_NODE_CACHE_SIZE");
}

/* A process that mapped dataset b's `blocks` as another dataset's (to
 * evict from it) keeps that mapping; b's cache directory is then removed
 * and b opened again (a fresh cache).  A victim b's readers publish now
 * must be taken from b's live cache or not at all: before, the trim
 * cleared the bit in the stale mapping and punched the hole in the new
 * data file, under a bit still set (found by review), and b served zeros
 * as checked bytes.  Expected bytes: an uncached open of b. */
TEST(share_stale_mapping_of_a_removed_cache_punches_no_live_block)
{
    struct side a, b;
    setup(&a, &b);
    struct forged_share *f = map_share();
    larder_dataset *over = trimmer(a.blocks + b.blocks - 1);
    trim(over); /* maps b's blocks, as a peer */
    CHECK_EQ(held(&b), b.blocks);
    larder_close(b.d);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", b.dir);
    CHECK_EQ(system(cmd), 0);
    open_side(&b, "b"); /* a fresh cache, every block staged again */
    CHECK_EQ(held(&b), b.blocks);
    struct forged_victim truth = first_of_shard1(&b);
    uint64_t tail = truth.length;
    publish(slot_of(f, &b), &truth, 1);
    trim(over);
    trim(over);
    /* evicted from the live cache (bit and hole), or not at all */
    static uint8_t got[BLOCK], zero[BLOCK];
    read_range(&b, 1, 0, got);
    bool hole = memcmp(got, zero, tail) == 0;
    CHECK(hole != larder__cache_present(b.cache, 1, 0, 0));
    char index[4096];
    snprintf(index, sizeof index, "%s/b/index.larder", test_dir());
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION};
    larder_dataset *ref;
    CHECK_EQ(larder_open(&ref, index, &o), 0);
    static uint8_t x[9000], y[9000];
    for (uint64_t i = 0; i < SAMPLES; i++) {
        int64_t n = larder_read_sample(b.d, i, x, sizeof x);
        CHECK_EQ(n, larder_read_sample(ref, i, y, sizeof y));
        CHECK(n > 0 && memcmp(x, y, (size_t)n) == 0);
    }
    larder_close(ref);
    larder_close(over);
    teardown(&a, &b, f);
}

/* A publisher that died between making its slot's sequence odd and even
 * again: the next publication of the dataset takes the slot over once it
 * has been odd over 2 s, and its victims are read (before, every later
 * publication moved the sequence by two, odd for good, and the dataset was
 * never evicted from: found by review).  An odd sequence just written is
 * another writer's: that publication is skipped, nothing changed. */
TEST(share_sequence_left_odd_by_a_dead_writer_is_taken_over)
{
    struct side a, b;
    setup(&a, &b);
    struct forged_share *f = map_share();
    struct forged_slot *x = slot_of(f, &b);
    uint64_t block = b.base[1], use = UINT64_MAX - 1;
    /* a writer at work (odd, just now): b's publication waits its turn */
    x->sequence |= 1;
    uint64_t odd = x->sequence;
    x->published_ms = larder__cache_clock_ms();
    x->count = 0;
    larder__share_publish(b.cache, &block, &use, 1);
    CHECK_EQ(x->sequence, odd);
    CHECK_EQ(x->count, 0);
    /* that writer gone 3 s ago: taken over, published whole, even */
    x->published_ms = larder__cache_clock_ms() - 3000;
    larder__share_publish(b.cache, &block, &use, 1);
    CHECK_EQ(x->sequence, odd + 3);
    CHECK_EQ(x->count, 1);
    larder_dataset *over = trimmer(a.blocks + b.blocks - 1);
    trim(over);
    CHECK(!larder__cache_present(b.cache, 1, 0, 0));
    CHECK_EQ(held(&b), b.blocks - 1);
    CHECK_EQ(held(&a), a.blocks);
    larder_close(over);
    teardown(&a, &b, f);
}
