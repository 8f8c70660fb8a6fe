/*
 * test_transport_ucx_answer.c - answers no thread waits on
 * (larder__ucx_answer_file_async, transport_ucx_answer.c): a "daemon" hub
 * answers each READ on its progress thread from a file the test wrote
 * (the bytes a formula of the offset), and a "borrower" hub reads them
 * from 8 threads at once.  Every answer arrives byte-exact, its `done`
 * runs once, with 0, on the progress thread; a range past the file's end
 * is not sent (1, no `done`) and the waiting path's error reaches the
 * borrower.  Skipped when UCX has no usable transport here.
 */
#include "test.h"

#include "transport_ucx.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FILE_BYTES (9u << 20)
#define THREADS 8
#define READS_EACH 12

static int file_fd;
static pthread_t progress_thread; /* the daemon hub's: where READs are served */
static int dones, done_errors, done_elsewhere, not_sent;

static uint8_t pattern(uint64_t at)
{
    return (uint8_t)((at * 11 + 5) % 253);
}

static void done(void *arg, int rc)
{
    (void)arg;
    __atomic_add_fetch(&dones, 1, __ATOMIC_RELAXED);
    if (rc != 0) __atomic_add_fetch(&done_errors, 1, __ATOMIC_RELAXED);
    if (!pthread_equal(pthread_self(), progress_thread))
        __atomic_add_fetch(&done_elsewhere, 1, __ATOMIC_RELAXED);
}

static void serve(void *owner, struct larder__ucx_session *s, uint64_t request,
                  const struct larder__read *read)
{
    (void)owner;
    progress_thread = pthread_self();
    int rc = larder__ucx_answer_file_async(s, request, file_fd, read->offset, (size_t)read->length,
                                           done, NULL);
    if (rc == 1) { /* not sent: the waiting path's error answer */
        __atomic_add_fetch(&not_sent, 1, __ATOMIC_RELAXED);
        larder__ucx_answer(s, request, -EIO, "the cache file ended early", 26);
    } else {
        CHECK_EQ(rc, 0);
    }
}

static struct larder__ucx_link *link_;

static uint64_t range_offset(int thread, int k)
{
    return ((uint64_t)thread * 997 + (uint64_t)k * 1048573) % (FILE_BYTES - (2u << 20));
}

static uint64_t range_length(int thread, int k)
{
    return k % 3 == 0 ? 100 + (uint64_t)thread : (1u << 20) + (uint64_t)(k * 4099 + thread);
}

static int mismatches;

static void *borrower_thread(void *arg)
{
    int thread = (int)(intptr_t)arg;
    uint8_t *buf = malloc(2u << 20);
    for (int k = 0; k < READS_EACH; k++) {
        uint64_t offset = range_offset(thread, k), length = range_length(thread, k);
        struct larder__read read = {
            .id_low = 1, .id_high = 2, .shard = 0, .offset = offset, .length = length};
        memset(buf, 0, length);
        bool fault = true;
        int rc = larder__ucx_link_read(link_, &read, buf, 10000, 10000, &fault);
        bool ok = rc == 0 && !fault;
        for (uint64_t i = 0; ok && i < length; i++)
            ok = buf[i] == pattern(offset + i);
        if (!ok) __atomic_add_fetch(&mismatches, 1, __ATOMIC_RELAXED);
    }
    free(buf);
    return NULL;
}

TEST(ucx_answers_without_a_waiter_many_in_flight_and_past_the_end)
{
    struct larder__ucx *daemon, *borrower;
    if (larder__ucx_start(&daemon) < 0) SKIP("UCX has no usable transport here");
    if (larder__ucx_start(&borrower) < 0) SKIP("UCX has no usable transport here");
    larder__ucx_serve(daemon, serve);
    dones = done_errors = done_elsewhere = not_sent = mismatches = 0;
    char path[] = "/tmp/larder-ucx-answer-XXXXXX";
    file_fd = mkstemp(path);
    CHECK(file_fd >= 0); /* linked while read: a deleted file's mapping is not kept */
    uint8_t block[4096];
    for (uint64_t at = 0; at < FILE_BYTES; at += sizeof block) {
        for (size_t i = 0; i < sizeof block; i++)
            block[i] = pattern(at + i);
        CHECK_EQ(pwrite(file_fd, block, sizeof block, (off_t)at), (ssize_t)sizeof block);
    }
    const void *address;
    size_t length;
    uint8_t token[LARDER__UCX_TOKEN];
    struct larder__ucx_session *session;
    larder__ucx_address(borrower, &address, &length);
    CHECK_EQ(larder__ucx_session_new(daemon, NULL, address, length, token, &session), 0);
    larder__ucx_address(daemon, &address, &length);
    CHECK_EQ(larder__ucx_link_new(borrower, address, length, token, &link_), 0);

    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        CHECK_EQ(pthread_create(&threads[t], NULL, borrower_thread, (void *)(intptr_t)t), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    CHECK_EQ(mismatches, 0);
    /* each answer's completion ran once, on the progress thread; the
     * borrower has its bytes, so each is done (or is about to be) */
    for (int i = 0; i < 200 && __atomic_load_n(&dones, __ATOMIC_RELAXED) < THREADS * READS_EACH;
         i++)
        usleep(10000);
    CHECK_EQ(__atomic_load_n(&dones, __ATOMIC_RELAXED), THREADS * READS_EACH);
    CHECK_EQ(done_errors, 0);
    CHECK_EQ(done_elsewhere, 0);
    CHECK_EQ(not_sent, 0);
    CHECK_EQ(larder__ucx_mapped_files(daemon), 1);

    /* past the file's end: not sent, no completion, the error reaches the borrower */
    uint8_t small[64];
    struct larder__read past = {
        .id_low = 1, .id_high = 2, .shard = 0, .offset = FILE_BYTES - 10, .length = sizeof small};
    bool fault = true;
    CHECK_EQ(larder__ucx_link_read(link_, &past, small, 10000, 10000, &fault), -EIO);
    CHECK(!fault);
    CHECK(strstr(larder_errmsg(), "ended early") != NULL);
    CHECK_EQ(not_sent, 1);
    CHECK_EQ(__atomic_load_n(&dones, __ATOMIC_RELAXED), THREADS * READS_EACH);

    larder__ucx_link_free(link_);
    larder__ucx_session_free(session);
    larder__ucx_stop(borrower);
    larder__ucx_stop(daemon);
    close(file_fd);
    unlink(path);
}
