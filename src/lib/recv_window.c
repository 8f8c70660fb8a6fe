/*
 * recv_window.c - windows onto files for receiving (recv_window.h).  A
 * small table under one mutex: a daemon stages at most a few chunks at
 * once, and a lookup per DATA answer is cheap beside its megabytes.  Each
 * receiving thread keeps one pipe for splice, made on first use and
 * closed at its end.
 */
#include "recv_window.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define WINDOWS 32
#define PIPE_BYTES (1 << 20) /* F_SETPIPE_SZ asks this much; what is granted is used */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint8_t *addr; /* NULL: free */
    size_t length;
    int fd;
    uint64_t offset;
} windows[WINDOWS];
static int open_windows; /* how many are registered (read without the lock: a process with none
                            never takes it) */

int larder__recv_window_add(void *addr, size_t length, int fd, uint64_t offset)
{
    if (!addr || length == 0 || fd < 0) return -EINVAL;
    pthread_mutex_lock(&lock);
    int handle = -ENOSPC;
    for (int i = 0; i < WINDOWS && handle < 0; i++)
        if (!windows[i].addr) {
            windows[i].addr = addr;
            windows[i].length = length;
            windows[i].fd = fd;
            windows[i].offset = offset;
            __atomic_add_fetch(&open_windows, 1, __ATOMIC_RELEASE);
            handle = i;
        }
    pthread_mutex_unlock(&lock);
    return handle;
}

void larder__recv_window_remove(int handle)
{
    if (handle < 0 || handle >= WINDOWS) return;
    pthread_mutex_lock(&lock);
    if (windows[handle].addr) __atomic_sub_fetch(&open_windows, 1, __ATOMIC_RELEASE);
    windows[handle].addr = NULL;
    pthread_mutex_unlock(&lock);
}

/*
 * The first piece of [buf, buf + length) alike: *inside, the bytes from
 * buf on that one window covers (its file and offset in *fd, *offset);
 * else the bytes before the next window starts.  Its length.
 */
static size_t piece(const void *buf, size_t length, bool *inside, int *fd, uint64_t *offset)
{
    const uint8_t *p = buf;
    size_t size = length;
    *inside = false;
    /* a window is registered before the receive it is for starts */
    if (__atomic_load_n(&open_windows, __ATOMIC_ACQUIRE) == 0) return length;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < WINDOWS; i++) {
        const uint8_t *a = windows[i].addr;
        if (!a) continue;
        if (p >= a && p < a + windows[i].length) {
            /* the file stays open while the window is registered, and the
             * window stays while its owner's receive runs (it removes it
             * after the loan the receive writes for is returned) */
            size_t left = windows[i].length - (size_t)(p - a);
            *inside = true;
            *fd = windows[i].fd;
            *offset = windows[i].offset + (uint64_t)(p - a);
            size = length < left ? length : left;
            break;
        }
        if (a > p && (size_t)(a - p) < size) size = (size_t)(a - p);
    }
    pthread_mutex_unlock(&lock);
    return size;
}

bool larder__recv_window_covers(const void *buf, size_t length)
{
    bool inside;
    int fd;
    uint64_t offset;
    /* the first piece is the whole span only when no window starts in it */
    return length && (piece(buf, length, &inside, &fd, &offset) < length || inside);
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Wait for sock to have bytes before deadline (0: none, the socket's own
 * timeout only): 0, or -ETIMEDOUT. */
static int readable_by(int sock, int64_t deadline)
{
    if (!deadline) return 0;
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) return -ETIMEDOUT;
        struct pollfd p = {.fd = sock, .events = POLLIN};
        int n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (n > 0) return 0; /* bytes, an end or an error: the receive says which */
        if (n < 0 && errno != EINTR) return -errno;
    }
}

/* This thread's pipe for splice: [0] its read end; closed at the thread's end. */
static pthread_key_t pipe_key;
static pthread_once_t pipe_once = PTHREAD_ONCE_INIT;
struct thread_pipe {
    int fds[2];
    size_t capacity;
};

static void close_pipe(void *value)
{
    struct thread_pipe *p = value;
    close(p->fds[0]);
    close(p->fds[1]);
    free(p);
}

static void make_key(void)
{
    (void)pthread_key_create(&pipe_key, close_pipe);
}

static struct thread_pipe *thread_pipe(void)
{
    pthread_once(&pipe_once, make_key);
    struct thread_pipe *p = pthread_getspecific(pipe_key);
    if (p) return p;
    if (!(p = malloc(sizeof *p))) return NULL;
    if (pipe2(p->fds, O_CLOEXEC) < 0) {
        free(p);
        return NULL;
    }
    int granted = fcntl(p->fds[1], F_SETPIPE_SZ, PIPE_BYTES);
    if (granted < 0) granted = fcntl(p->fds[1], F_GETPIPE_SZ);
    p->capacity = granted > 0 ? (size_t)granted : 65536;
    if (pthread_setspecific(pipe_key, p) != 0) {
        close_pipe(p);
        return NULL;
    }
    return p;
}

/* The thread's pipe is left holding bytes after a failure: a fresh one next time. */
static void drop_pipe(struct thread_pipe *p)
{
    pthread_setspecific(pipe_key, NULL);
    close_pipe(p);
}

static int recv_memory(int sock, uint8_t *p, size_t length, int64_t deadline)
{
    while (length) {
        int rc = readable_by(sock, deadline);
        if (rc < 0) return rc;
        ssize_t n = recv(sock, p, length, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -(errno == EAGAIN ? ETIMEDOUT : errno);
        if (n == 0) return -ECONNRESET;
        p += n, length -= (size_t)n;
    }
    return 0;
}

/* length bytes from the socket into fd at offset, through the thread's pipe. */
static int splice_into(int sock, struct thread_pipe *p, int fd, uint64_t offset, size_t length,
                       int64_t deadline)
{
    loff_t at = (loff_t)offset;
    while (length) {
        int rc = readable_by(sock, deadline);
        if (rc < 0) return rc;
        ssize_t in = splice(sock, NULL, p->fds[1], NULL,
                            length < p->capacity ? length : p->capacity, SPLICE_F_MOVE);
        if (in < 0 && errno == EINTR) continue;
        if (in <= 0) /* the pipe is empty: nothing moved out of the socket */
            return -(in == 0 ? ECONNRESET : errno == EAGAIN ? ETIMEDOUT : errno);
        for (ssize_t left = in; left > 0;) {
            ssize_t out = splice(p->fds[0], NULL, fd, &at, (size_t)left, SPLICE_F_MOVE);
            if (out < 0 && errno == EINTR) continue;
            if (out <= 0) { /* ENOSPC, EIO: the stream is out of step anyway */
                int err = out == 0 ? EIO : errno;
                drop_pipe(p);
                /* this node's disk, not the sender: it must not count as the peer's fault */
                return larder__fail(LARDER_ELOCAL, "writing a received chunk into the cache: %s",
                                    strerror(err));
            }
            left -= out;
        }
        length -= (size_t)in;
    }
    return 0;
}

int larder__recv_into(int sock, void *buf, size_t length)
{
    uint8_t *at = buf;
    int rc = 0;
    /* into a window: a deadline for all of it (recv_window.h), measured
     * from now, when the answer's header is in */
    int64_t deadline = 0;
    if (larder__recv_window_covers(buf, length)) {
        uint64_t ms = length / LARDER__RECV_WINDOW_MIN_RATE;
        deadline =
            now_ms() + (int64_t)(ms > LARDER__RECV_WINDOW_MIN_MS ? ms : LARDER__RECV_WINDOW_MIN_MS);
    }
    while (rc == 0 && length) {
        bool inside;
        int fd;
        uint64_t offset;
        size_t n = piece(at, length, &inside, &fd, &offset);
        struct thread_pipe *p = inside ? thread_pipe() : NULL;
        rc = p ? splice_into(sock, p, fd, offset, n, deadline) : recv_memory(sock, at, n, deadline);
        at += n, length -= n;
    }
    return rc;
}
