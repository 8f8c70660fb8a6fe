/*
 * test_transport_ucx_map.c - answers sent from cache files over UCX
 * (larder__ucx_answer_file, transport_ucx_map.c): a "daemon" hub answers
 * each READ from a file the test wrote (the bytes a formula of the
 * offset), on a thread of its own as the daemon's workers do, and a
 * "borrower" hub reads them.  The file is mapped once for many answers;
 * one that grew is mapped again and its new bytes read; one cut short
 * is answered -EIO; a deleted one is not kept mapped; a pass after
 * pass over 70 files maps each once; with the table set to 64 files, no
 * more than 64 stay mapped, and set to 80 KiB no more than 80 KiB (a file
 * larger than that is mapped for its answer alone).  Skipped when UCX has no usable transport here.
 */
#include "test.h"

#include "transport_ucx.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FILES 70
static int fds[FILES]; /* the READ's shard names the file it is answered from */

static uint8_t pattern(uint64_t at, int generation)
{
    return (uint8_t)((at * 7 + 3 + (uint64_t)generation * 101) % 251);
}

/* Write bytes [from, to) of the formula into fd. */
static void write_pattern(int fd, uint64_t from, uint64_t to, int generation)
{
    uint8_t block[4096];
    for (uint64_t at = from; at < to;) {
        size_t n = to - at < sizeof block ? (size_t)(to - at) : sizeof block;
        for (size_t i = 0; i < n; i++)
            block[i] = pattern(at + i, generation);
        CHECK_EQ(pwrite(fd, block, n, (off_t)at), (ssize_t)n);
        at += n;
    }
}

struct job {
    struct larder__ucx_session *session;
    uint64_t request;
    struct larder__read read;
};

static void *answer(void *arg)
{
    struct job *job = arg;
    larder__ucx_answer_file(job->session, job->request, fds[job->read.shard], job->read.offset,
                            (size_t)job->read.length);
    larder__ucx_session_release(job->session);
    free(job);
    return NULL;
}

/* On the progress thread: the answer goes from a thread of its own, which
 * waits until UCX is done with the mapped bytes. */
static void serve(void *owner, struct larder__ucx_session *s, uint64_t request,
                  const struct larder__read *read)
{
    (void)owner;
    struct job *job = malloc(sizeof *job);
    *job = (struct job){.session = s, .request = request, .read = *read};
    larder__ucx_session_hold(s);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, answer, job), 0);
    pthread_detach(t);
}

struct pair {
    struct larder__ucx *daemon, *borrower;
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
};

static void start(struct pair *p)
{
    if (larder__ucx_start(&p->daemon) < 0) SKIP("UCX has no usable transport here");
    if (larder__ucx_start(&p->borrower) < 0) SKIP("UCX has no usable transport here");
    larder__ucx_serve(p->daemon, serve);
    const void *address;
    size_t length;
    uint8_t token[LARDER__UCX_TOKEN];
    larder__ucx_address(p->borrower, &address, &length);
    CHECK_EQ(larder__ucx_session_new(p->daemon, NULL, address, length, token, &p->session), 0);
    larder__ucx_address(p->daemon, &address, &length);
    CHECK_EQ(larder__ucx_link_new(p->borrower, address, length, token, &p->link), 0);
}

static void stop(struct pair *p)
{
    larder__ucx_link_free(p->link);
    larder__ucx_session_free(p->session);
    larder__ucx_stop(p->borrower);
    larder__ucx_stop(p->daemon);
}

/* READ [offset, offset + length) of file `shard`; 0 or the answer's code. */
static int read_file(struct pair *p, uint32_t shard, uint64_t offset, uint64_t length, uint8_t *buf)
{
    struct larder__read read = {
        .id_low = 1, .id_high = 2, .shard = shard, .offset = offset, .length = length};
    bool fault = true;
    int rc = larder__ucx_link_read(p->link, &read, buf, 10000, 10000, &fault);
    CHECK(!fault); /* answered, whatever the answer */
    return rc;
}

/* Whether buf holds the formula's bytes [offset, offset + length). */
static bool matches(const uint8_t *buf, uint64_t offset, uint64_t length, int generation)
{
    for (uint64_t i = 0; i < length; i++)
        if (buf[i] != pattern(offset + i, generation)) return false;
    return true;
}

static int temp_file(char *path, size_t size)
{
    snprintf(path, size, "/tmp/larder-ucx-map-XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    return fd;
}

TEST(ucx_answers_from_one_kept_mapping_grown_cut_and_deleted_files)
{
    struct pair p;
    start(&p);
    char path[64];
    fds[0] = temp_file(path, sizeof path);
    write_pattern(fds[0], 0, 4u << 20, 0);
    uint8_t *buf = malloc(2u << 20);
    /* ranges at page and odd offsets, small (eager) and large (rendezvous) */
    uint64_t ranges[][2] = {{0, 1u << 20},          {4097, 100},     {(1u << 20) + 3, 1u << 20},
                            {(3u << 20), 1u << 20}, {12345, 777777}, {(4u << 20) - 10, 10}};
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
        memset(buf, 0, ranges[k][1]);
        CHECK_EQ(read_file(&p, 0, ranges[k][0], ranges[k][1], buf), 0);
        CHECK(matches(buf, ranges[k][0], ranges[k][1], 0));
    }
    CHECK_EQ(larder__ucx_mapped_files(p.daemon), 1); /* one mapping for six answers */

    /* the file grows past its mapping, and its first bytes change: both read anew */
    write_pattern(fds[0], 4u << 20, 5u << 20, 1);
    write_pattern(fds[0], 0, 4096, 1);
    CHECK_EQ(read_file(&p, 0, (4u << 20) + 5, 1000000, buf), 0);
    CHECK(matches(buf, (4u << 20) + 5, 1000000, 1));
    CHECK_EQ(read_file(&p, 0, 0, 4096, buf), 0);
    CHECK(matches(buf, 0, 4096, 1));
    CHECK_EQ(larder__ucx_mapped_files(p.daemon), 1);

    /* cut short under the daemon: an error answer, never a fault */
    CHECK_EQ(ftruncate(fds[0], 1u << 20), 0);
    CHECK_EQ(read_file(&p, 0, (2u << 20), 4096, buf), -EIO);
    CHECK(strstr(larder_errmsg(), "ended early") != NULL);
    CHECK_EQ(read_file(&p, 0, 100, 4096, buf), 0); /* what is left still reads */
    CHECK(matches(buf, 100, 3996, 1) && matches(buf + 3996, 4096, 100, 0));

    /* deleted (its dataset's cache removed): answered, then not kept mapped */
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(read_file(&p, 0, 8192, 65536, buf), 0);
    CHECK(matches(buf, 8192, 65536, 0));
    size_t kept = larder__ucx_mapped_files(p.daemon);
    CHECK_EQ(kept, 0);
    close(fds[0]);
    free(buf);
    stop(&p);
}

/* Files 0..FILES-1 made, each with its own pattern; their paths in paths. */
static void make_files(char paths[FILES][64])
{
    for (int i = 0; i < FILES; i++) {
        fds[i] = temp_file(paths[i], sizeof paths[i]);
        write_pattern(fds[i], 0, 8192, i);
    }
}

static void remove_files(char paths[FILES][64])
{
    for (int i = 0; i < FILES; i++) {
        close(fds[i]);
        unlink(paths[i]);
    }
}

/* A dataset of 70 shard files read pass after pass (bench/peer.sh's order):
 * every file stays mapped, none is mapped again at the next pass (a table
 * of 64 mapped all 70 anew at each). */
TEST(ucx_passes_over_70_files_map_each_once)
{
    struct pair p;
    start(&p);
    char paths[FILES][64];
    make_files(paths);
    uint8_t buf[8192];
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < FILES; i++) {
            CHECK_EQ(read_file(&p, (uint32_t)i, 0, sizeof buf, buf), 0);
            CHECK(matches(buf, 0, sizeof buf, i));
        }
    CHECK_EQ(larder__ucx_mapped_files(p.daemon), FILES);
    CHECK_EQ(larder__ucx_maps(p.daemon), FILES); /* none mapped twice */
    CHECK_EQ(larder__ucx_mapped_bytes(p.daemon), FILES * 8192);
    remove_files(paths);
    stop(&p);
}

/* The table bounded by bytes too (on a fabric each kept file is pinned
 * whole): at most 10 files of 8 KiB fit in 80 KiB; a file larger than the
 * bound is answered from a mapping of its own, not kept. */
TEST(ucx_mapped_bytes_stay_under_their_bound)
{
    struct pair p;
    start(&p);
    larder__ucx_set_max_mapped_bytes(p.daemon, 10 * 8192);
    char paths[FILES][64];
    make_files(paths);
    uint8_t buf[8192];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < FILES; i++) {
            CHECK_EQ(read_file(&p, (uint32_t)i, 0, sizeof buf, buf), 0);
            CHECK(matches(buf, 0, sizeof buf, i));
            CHECK(larder__ucx_mapped_bytes(p.daemon) <= 10 * 8192);
        }
    CHECK_EQ(larder__ucx_mapped_files(p.daemon), 10);
    CHECK_EQ(larder__ucx_mapped_bytes(p.daemon), 10 * 8192);
    CHECK_EQ(larder__ucx_maps(p.daemon), 2 * FILES); /* a cyclic pass: each mapped anew */
    /* the last ten read are kept: read again, none is mapped */
    for (int i = FILES - 10; i < FILES; i++)
        CHECK_EQ(read_file(&p, (uint32_t)i, 0, sizeof buf, buf), 0);
    CHECK_EQ(larder__ucx_maps(p.daemon), 2 * FILES);
    /* file 0 grown past the bound: answered right, from a mapping not kept */
    write_pattern(fds[0], 0, 12 * 8192, 0);
    uint8_t *big = malloc(12 * 8192);
    CHECK_EQ(read_file(&p, 0, 0, 12 * 8192, big), 0);
    CHECK(matches(big, 0, 12 * 8192, 0));
    CHECK_EQ(read_file(&p, 0, 5, 11 * 8192, big), 0);
    CHECK(matches(big, 5, 11 * 8192, 0));
    free(big);
    CHECK_EQ(larder__ucx_maps(p.daemon), 2 * FILES + 2);
    CHECK_EQ(larder__ucx_mapped_files(p.daemon), 10);
    CHECK(larder__ucx_mapped_bytes(p.daemon) <= 10 * 8192);
    remove_files(paths);
    stop(&p);
}

TEST(ucx_at_most_64_files_stay_mapped)
{
    struct pair p;
    start(&p);
    larder__ucx_set_max_mappings(p.daemon, 64);
    char path[64];
    for (int i = 0; i < FILES; i++) {
        fds[i] = temp_file(path, sizeof path);
        unlink(path); /* gone with the test; only 64 would be kept anyway */
        write_pattern(fds[i], 0, 8192, i);
    }
    uint8_t buf[8192];
    for (int i = 0; i < FILES; i++) {
        CHECK_EQ(read_file(&p, (uint32_t)i, 0, sizeof buf, buf), 0);
        CHECK(matches(buf, 0, sizeof buf, i));
    }
    CHECK_EQ(larder__ucx_mapped_files(p.daemon), 0); /* deleted files: none kept */
    for (int i = 0; i < FILES; i++)
        close(fds[i]);
    char paths[FILES][64];
    make_files(paths);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < FILES; i++) {
            CHECK_EQ(read_file(&p, (uint32_t)i, 0, sizeof buf, buf), 0);
            CHECK(matches(buf, 0, sizeof buf, i));
            CHECK(larder__ucx_mapped_files(p.daemon) <= 64);
        }
    CHECK_EQ(larder__ucx_mapped_files(p.daemon), 64);
    remove_files(paths);
    stop(&p);
}
