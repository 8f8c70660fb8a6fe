/*
 * fuzz_open.c - larder_open on arbitrary index bytes, with a node cache:
 * the parsed values (shard names and sizes, sample ranges, field spans,
 * the block size hint) reach the cache and the fill path, not only the
 * parser.  Each input is written as index.larder into a directory that
 * also holds two small fixed shards, shard-0.bin and shard-1.bin, so a
 * well-formed index can name them (tests/tools/craft_index.py writes such
 * indexes: the seeds in fuzz/corpus/open); it is opened with a fresh cache
 * directory, every sample (the first 64) and every field (the first 64)
 * is read twice -- a fill, then from the cache -- and its key looked up,
 * then the dataset is closed and the cache removed.
 *
 * The dataset id and header checksum are made right before the open, so
 * mutations reach the checks behind them.  Any crash, sanitizer report or
 * hang is a bug; errors are the expected outcome.
 *
 * Bounds of the harness, not of larder: files the process writes stop at
 * 1 GiB (SIGXFSZ ignored, so a larger write fails with EFBIG) -- a cache
 * sized by a crafted shard size of 2^56 bytes would otherwise fill the
 * disk of whoever replays the corpus before larder refused it; block size
 * hints above 1 MiB are replaced by 64 KiB, and samples or fields above
 * 1 MiB are not read, so one input cannot allocate gigabytes; HTTP shard
 * names time out after 0.2 s.
 */
#include "larder.h"

#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

int larder_fuzz_open(const uint8_t *data, size_t size);

enum { MAX_SAMPLES = 64, MAX_FIELDS = 64, MAX_READ = 1 << 20 };

static char root[256]; /* the directory with the shards, for the whole process */
static uint8_t *buffer;

/* Shard `shard` of the fuzz layout: byte i is the top byte of the (i+1)-th
 * step of a 64-bit LCG from shard + 1 (craft_index.py's fuzz_bytes). */
static int write_shard(int shard, size_t size)
{
    char path[300];
    snprintf(path, sizeof path, "%s/shard-%d.bin", root, shard);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t x = (uint64_t)shard + 1;
    for (size_t i = 0; i < size; i++) {
        x = x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        fputc((int)(x >> 56), f);
    }
    return fclose(f);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_root(void)
{
    if (root[0]) remove_tree(root);
}

static int setup(void)
{
    if (root[0]) return 0;
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/larder-fuzz-open-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(root) || write_shard(0, 6000) < 0 || write_shard(1, 9000) < 0 ||
        !(buffer = malloc(MAX_READ))) {
        fprintf(stderr, "fuzz_open: cannot set up %s\n", root);
        abort();
    }
    atexit(remove_root);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {1 << 30, 1 << 30};
    setrlimit(RLIMIT_FSIZE, &limit);
    setenv("LARDER_HTTP_TIMEOUT", "0.2", 0);
    return 0;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The input with its dataset id (XXH3-128 of the file with the id and the
 * checksum zeroed) and header checksum (XXH3-64 of bytes 0-119) made right,
 * and an outsized block size hint replaced. */
static void repair(uint8_t *image, size_t size)
{
    if (size < 128) return;
    uint32_t block = (uint32_t)image[96] | (uint32_t)image[97] << 8 | (uint32_t)image[98] << 16 |
                     (uint32_t)image[99] << 24;
    if (block > MAX_READ) {
        image[96] = image[97] = image[99] = 0;
        image[98] = 1; /* 65536 */
    }
    memset(image + 16, 0, 16);
    memset(image + 120, 0, 8);
    XXH128_hash_t id = XXH3_128bits(image, size);
    put_le64(image + 16, id.low64);
    put_le64(image + 24, id.high64);
    put_le64(image + 120, XXH3_64bits(image, 120));
}

static void read_all(larder_dataset *d)
{
    uint64_t n = larder_num_samples(d);
    for (uint64_t id = 0; id < n && id < MAX_SAMPLES; id++) {
        larder_sample_info s;
        if (larder_sample_info_get(d, id, &s) < 0) continue;
        larder_find_key(d, s.key);
        for (int pass = 0; pass < 2 && s.length <= MAX_READ; pass++)
            larder_read_sample(d, id, buffer, MAX_READ);
        for (uint32_t f = 0; f < s.num_fields && f < MAX_FIELDS; f++) {
            larder_field_info fi;
            if (larder_field_info_get(d, id, f, &fi) < 0 || fi.length > MAX_READ) continue;
            larder_find_field(d, id, fi.name);
            larder_read_field(d, id, f, buffer, MAX_READ);
        }
    }
}

int larder_fuzz_open(const uint8_t *data, size_t size)
{
    setup();
    uint8_t *image = malloc(size ? size : 1);
    if (!image) return 0;
    memcpy(image, data, size);
    repair(image, size);
    char index[300], cache[300];
    snprintf(index, sizeof index, "%s/index.larder", root);
    snprintf(cache, sizeof cache, "%s/cache", root);
    FILE *f = fopen(index, "wb");
    int written = f && fwrite(image, 1, size, f) == size;
    if (f && fclose(f) != 0) written = 0;
    free(image);
    if (!written) return 0;
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .verify_checksums = 1,
                             .cache_dir = cache,
                             .cache_capacity = 256 * 1024, /* evictions too */
                             .max_inflight = 4,
                             .daemon_socket = ""};
    larder_dataset *d;
    if (larder_open(&d, index, &o) == 0) {
        read_all(d);
        larder_close(d);
    }
    remove_tree(cache);
    return 0;
}

#ifndef LARDER_FUZZ_REPLAY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return larder_fuzz_open(data, size);
}
#endif
