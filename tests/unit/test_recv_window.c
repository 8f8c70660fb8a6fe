/* recv_window.c: a stream's bytes spliced into a file where the buffer is
 * a window onto it, received into memory elsewhere (recv_window.h). */
#include "test.h"

#include "recv_window.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

struct sender {
    int fd;
    const uint8_t *bytes;
    size_t length;
};

static void *send_all(void *arg)
{
    struct sender *s = arg;
    for (size_t sent = 0; sent < s->length;) {
        ssize_t n = send(s->fd, s->bytes + sent, s->length - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += (size_t)n;
    }
    return NULL;
}

/* A pattern no byte of which repeats within 251 (a prime): a byte out of place shows. */
static void pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i + seed) % 251);
}

TEST(recv_window_splices_the_window_and_receives_the_rest)
{
    /* a file of 8 pages, and 6 pages of memory whose pages 1-4 are
     * registered as a window onto the file's pages 2-5.  The memory is not
     * the file's mapping (in a daemon it is): bytes that went into the
     * file by splice leave it untouched, so which way each went shows */
    int file = open(test_path("data"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(file >= 0);
    CHECK(ftruncate(file, 8 * PAGE) == 0);
    uint8_t *room = calloc(6, PAGE);
    CHECK(room != NULL);
    int window = larder__recv_window_add(room + PAGE, 4 * PAGE, file, 2 * PAGE);
    CHECK(window >= 0);
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    /* 5.5 pages from the middle of page 0 on: memory, window, memory */
    size_t length = 5 * PAGE + PAGE / 2, at = PAGE / 2, into_window = PAGE - at;
    uint8_t *want = malloc(length);
    pattern(want, length, 7);
    struct sender s = {pair[0], want, length};
    pthread_t sending;
    CHECK(pthread_create(&sending, NULL, send_all, &s) == 0);
    CHECK_EQ(larder__recv_into(pair[1], room + at, length), 0);
    pthread_join(sending, NULL);
    uint8_t *file_bytes = malloc(8 * PAGE);
    CHECK_EQ(pread(file, file_bytes, 8 * PAGE, 0), 8 * PAGE);
    /* the window's part: in the file at its offsets, not in memory */
    CHECK(memcmp(file_bytes + 2 * PAGE, want + into_window, 4 * PAGE) == 0);
    for (size_t i = 0; i < 4 * PAGE; i++)
        CHECK(room[PAGE + i] == 0);
    /* the rest: in memory, and nothing else of the file written */
    CHECK(memcmp(room + at, want, into_window) == 0);
    CHECK(memcmp(room + 5 * PAGE, want + into_window + 4 * PAGE, PAGE / 2) == 0);
    for (size_t i = 0; i < 2 * PAGE; i++)
        CHECK(file_bytes[i] == 0 && file_bytes[6 * PAGE + i] == 0);
    /* removed: all of it goes into memory, the file is left alone */
    larder__recv_window_remove(window);
    pattern(want, length, 11);
    CHECK(pthread_create(&sending, NULL, send_all, &s) == 0);
    CHECK_EQ(larder__recv_into(pair[1], room + at, length), 0);
    pthread_join(sending, NULL);
    CHECK(memcmp(room + at, want, length) == 0);
    uint8_t *again = malloc(8 * PAGE);
    CHECK_EQ(pread(file, again, 8 * PAGE, 0), 8 * PAGE);
    CHECK(memcmp(again, file_bytes, 8 * PAGE) == 0);
    free(again);
    free(file_bytes);
    free(want);
    free(room);
    close(pair[0]);
    close(pair[1]);
    close(file);
}

TEST(recv_window_a_stream_that_ends_early_is_an_error)
{
    int file = open(test_path("data"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(file >= 0);
    CHECK(ftruncate(file, 4 * PAGE) == 0);
    uint8_t *room = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    CHECK(room != MAP_FAILED);
    int window = larder__recv_window_add(room, 4 * PAGE, file, 0);
    CHECK(window >= 0);
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    uint8_t half[2 * PAGE];
    pattern(half, sizeof half, 3);
    CHECK_EQ(send(pair[0], half, sizeof half, 0), (long long)sizeof half);
    close(pair[0]); /* the sender goes after half of what it owed */
    CHECK_EQ(larder__recv_into(pair[1], room, 4 * PAGE), -ECONNRESET);
    larder__recv_window_remove(window);
    close(pair[1]);
    munmap(room, 4 * PAGE);
    close(file);
}

TEST(recv_window_bad_windows_are_refused)
{
    uint8_t byte;
    CHECK_EQ(larder__recv_window_add(NULL, 10, 0, 0), -EINVAL);
    CHECK_EQ(larder__recv_window_add(&byte, 0, 0, 0), -EINVAL);
    CHECK_EQ(larder__recv_window_add(&byte, 1, -1, 0), -EINVAL);
    larder__recv_window_remove(-1); /* nothing */
    larder__recv_window_remove(1 << 20);
    /* the table is bounded: past it, -ENOSPC (the caller receives into memory) */
    int handles[64], n = 0;
    for (; n < 64; n++)
        if ((handles[n] = larder__recv_window_add(&byte, 1, 0, 0)) < 0) break;
    CHECK(n < 64);
    CHECK_EQ(handles[n], -ENOSPC);
    for (int i = 0; i < n; i++)
        larder__recv_window_remove(handles[i]);
}

struct trickler {
    int fd;
    volatile int stop;
};

/* One byte every 300 ms (well within the receiver's 1 s socket timeout),
 * for at most 8 s, then the end: a sender pacing bytes to hold a lock. */
static void *trickle(void *arg)
{
    struct trickler *t = arg;
    for (int i = 0; i < 8000 / 300 && !t->stop; i++) {
        uint8_t byte = (uint8_t)i;
        if (send(t->fd, &byte, 1, MSG_NOSIGNAL) != 1) break;
        usleep(300 * 1000);
    }
    shutdown(t->fd, SHUT_WR);
    return NULL;
}

TEST(recv_window_a_trickling_sender_runs_into_the_deadline)
{
    int file = open(test_path("data"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(file >= 0);
    CHECK(ftruncate(file, 4 * PAGE) == 0);
    uint8_t *room = calloc(4, PAGE);
    int window = larder__recv_window_add(room, 4 * PAGE, file, 0);
    CHECK(window >= 0);
    CHECK(larder__recv_window_covers(room + PAGE, 10));
    CHECK(larder__recv_window_covers(room - 10, 11)); /* starts before, reaches in */
    CHECK(!larder__recv_window_covers(room - 10, 10));
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    struct timeval second = {.tv_sec = 1};
    CHECK(setsockopt(pair[1], SOL_SOCKET, SO_RCVTIMEO, &second, sizeof second) == 0);
    struct trickler t = {.fd = pair[0]};
    pthread_t sending;
    CHECK(pthread_create(&sending, NULL, trickle, &t) == 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    /* 4 pages at 50 MB/s take far less than the 2 s floor: that floor is
     * the bound.  Before the deadline, only the sender's end (8 s) ended it,
     * as -ECONNRESET */
    CHECK_EQ(larder__recv_into(pair[1], room, 4 * PAGE), -ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    CHECK(took < LARDER__RECV_WINDOW_MIN_MS / 1000.0 + 1.5);
    t.stop = 1;
    pthread_join(sending, NULL);
    /* into memory (no window): the socket's own timeout only, as before */
    larder__recv_window_remove(window);
    CHECK(!larder__recv_window_covers(room, 4 * PAGE));
    free(room);
    close(pair[0]);
    close(pair[1]);
    close(file);
}

TEST(recv_window_a_failed_write_into_the_file_is_local)
{
    /* a window onto a file opened read-only: the splice into it fails as a
     * full disk would, and that is this node's failure (LARDER_ELOCAL), not
     * the sender's; the thread's pipe, left holding bytes, is replaced */
    int good = open(test_path("good"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(good >= 0);
    CHECK(ftruncate(good, 4 * PAGE) == 0);
    int file = open(test_path("good"), O_RDONLY);
    CHECK(file >= 0);
    uint8_t *room = calloc(4, PAGE);
    int window = larder__recv_window_add(room, 4 * PAGE, file, 0);
    CHECK(window >= 0);
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    uint8_t *want = malloc(4 * PAGE);
    pattern(want, 4 * PAGE, 5);
    struct sender s = {pair[0], want, 4 * PAGE};
    pthread_t sending;
    CHECK(pthread_create(&sending, NULL, send_all, &s) == 0);
    CHECK_EQ(larder__recv_into(pair[1], room, 4 * PAGE), LARDER_ELOCAL);
    CHECK(strstr(larder_errmsg(), "Bad file descriptor") != NULL);
    close(pair[1]); /* out of step: the sender's rest goes nowhere */
    pthread_join(sending, NULL);
    close(pair[0]);
    larder__recv_window_remove(window);
    /* the same thread's next splice, into a writable file, is whole and right */
    window = larder__recv_window_add(room, 4 * PAGE, good, 0);
    CHECK(window >= 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    pattern(want, 4 * PAGE, 9);
    s = (struct sender){pair[0], want, 4 * PAGE};
    CHECK(pthread_create(&sending, NULL, send_all, &s) == 0);
    CHECK_EQ(larder__recv_into(pair[1], room, 4 * PAGE), 0);
    pthread_join(sending, NULL);
    uint8_t *got = malloc(4 * PAGE);
    CHECK_EQ(pread(good, got, 4 * PAGE, 0), 4 * PAGE);
    CHECK(memcmp(got, want, 4 * PAGE) == 0);
    larder__recv_window_remove(window);
    free(got);
    free(want);
    free(room);
    close(pair[0]);
    close(pair[1]);
    close(file);
    close(good);
}
