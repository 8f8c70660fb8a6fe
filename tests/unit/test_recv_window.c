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
