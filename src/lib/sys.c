/*
 * sys.c - the system call table and the retrying wrappers over it.
 */
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int sys_open(const char *path, int flags, mode_t mode)
{
    return open(path, flags, mode);
}

struct larder__sys_ops larder__sys = {
    .open = sys_open,
    .close = close,
    .pread = pread,
    .pwrite = pwrite,
    .fstat = fstat,
    .fsync = fsync,
    .rename = rename,
    .ftruncate = ftruncate,
    .fallocate = fallocate,
    .mmap = mmap,
};

int larder__open(const char *path, int flags, mode_t mode)
{
    int fd;
    do {
        fd = larder__sys.open(path, flags | O_CLOEXEC, mode);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int err = errno;
        return larder__fail(-err, "%s: %s", path, strerror(err));
    }
    return fd;
}

int larder__pread_full(int fd, void *buf, size_t count, uint64_t offset, const char *what)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < count) {
        ssize_t n = larder__sys.pread(fd, p + done, count - done, (off_t)(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            int err = errno;
            memset(p + done, 0, count - done);
            return larder__fail(-err, "%s: read at offset %llu: %s", what,
                                (unsigned long long)(offset + done), strerror(err));
        }
        if (n == 0) {
            memset(p + done, 0, count - done);
            return larder__fail(
                LARDER_ETRUNCATED, "%s: file ends at offset %llu, wanted %zu bytes at %llu", what,
                (unsigned long long)(offset + done), count, (unsigned long long)offset);
        }
        done += (size_t)n;
    }
    return 0;
}

int larder__pwrite_full(int fd, const void *buf, size_t count, uint64_t offset, const char *what)
{
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < count) {
        ssize_t n = larder__sys.pwrite(fd, p + done, count - done, (off_t)(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            int err = errno;
            return larder__fail(-err, "%s: write at offset %llu: %s", what,
                                (unsigned long long)(offset + done), strerror(err));
        }
        if (n == 0) return larder__fail(-EIO, "%s: write made no progress", what);
        done += (size_t)n;
    }
    return 0;
}

#define WRITING_STRIPES 64
#define STRIPE_1 PTHREAD_MUTEX_INITIALIZER
#define STRIPE_4 STRIPE_1, STRIPE_1, STRIPE_1, STRIPE_1
#define STRIPE_16 STRIPE_4, STRIPE_4, STRIPE_4, STRIPE_4
static pthread_mutex_t writing[WRITING_STRIPES] = {STRIPE_16, STRIPE_16, STRIPE_16, STRIPE_16};

pthread_mutex_t *larder__writing(int fd)
{
    return &writing[(unsigned)fd % WRITING_STRIPES];
}

int larder__file_size(int fd, uint64_t *size, const char *what)
{
    struct stat st;
    if (larder__sys.fstat(fd, &st) < 0) {
        int err = errno;
        return larder__fail(-err, "%s: stat: %s", what, strerror(err));
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

int larder__mkdir_p(const char *path, size_t length, mode_t mode)
{
    char buf[PATH_MAX];
    if (length >= sizeof buf)
        return larder__fail(-ENAMETOOLONG, "%.*s...: path too long", 64, path);
    memcpy(buf, path, length);
    buf[length] = '\0';
    /* the usual case, the directory there already or only it missing: one
     * call (a unit test's fixture writes thousands of files into one) */
    if (length == 0 || mkdir(buf, mode) == 0 || errno == EEXIST) return 0;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return larder__fail(-errno, "%s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return larder__fail(-errno, "%s: %s", buf, strerror(errno));
    return 0;
}
