/*
 * source_file.c - a file on a local or shared file system (a path or a
 * file:// URL), read with pread through the system call table (sys.h), so
 * tests can stall it or inject errors.  Hedging, when wanted, is the
 * wrapper's (source_hedge.c); this file only reads.
 */
#include "source.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define STREAM_CHUNK (1u << 20)

struct file_source {
    struct larder__source base;
    int fd;
    char *name; /* the path or URL as given: messages name it */
};

static int file_size(struct larder__source *source, uint64_t *size)
{
    struct file_source *f = (struct file_source *)source;
    return larder__file_size(f->fd, size, f->name);
}

/* Every extent exactly: short reads and EINTR retried, LARDER_ETRUNCATED past the end. */
static int file_read(struct larder__source *source, const struct larder__extent *extents,
                     size_t count, unsigned flags)
{
    struct file_source *f = (struct file_source *)source;
    (void)flags;
    for (size_t i = 0; i < count; i++) {
        const struct larder__extent *e = &extents[i];
        if (e->length > UINT64_MAX - e->offset || e->offset + e->length > (uint64_t)INT64_MAX)
            return larder__fail(LARDER_EUSAGE, "%s: %zu bytes at offset %llu is past any file",
                                f->name, e->length, (unsigned long long)e->offset);
        int rc = larder__pread_full(f->fd, e->buf, e->length, e->offset, f->name);
        if (rc < 0) return rc;
    }
    return LARDER__FROM_ORIGIN;
}

/* To the end of the file as it is now (not as large as it was at open). */
static int file_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    struct file_source *f = (struct file_source *)source;
    uint8_t *buf = malloc(STREAM_CHUNK);
    if (!buf) return -ENOMEM;
    int rc = 0;
    for (uint64_t offset = 0;;) {
        ssize_t n = larder__sys.pread(f->fd, buf, STREAM_CHUNK, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = larder__fail(-errno, "%s: read at offset %llu: %s", f->name,
                              (unsigned long long)offset, strerror(errno));
            break;
        }
        if (n == 0) break;
        if ((rc = sink(userdata, buf, (size_t)n)) < 0) break;
        offset += (uint64_t)n;
    }
    free(buf);
    return rc;
}

static void file_close(struct larder__source *source)
{
    struct file_source *f = (struct file_source *)source;
    if (f->fd >= 0) larder__sys.close(f->fd);
    free(f->name);
    free(f);
}

static const struct larder__source_ops file_ops = {
    .kind = "file",
    .size = file_size,
    .read = file_read,
    .stream = file_stream,
    .close = file_close,
};

int larder__source_file_open(struct larder__source **out, const char *path)
{
    struct file_source *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(path))) {
        free(f);
        return -ENOMEM;
    }
    f->base.ops = &file_ops;
    f->base.name = f->name;
    f->fd = larder__open(larder__file_path(path), O_RDONLY, 0);
    if (f->fd < 0) {
        int rc = f->fd;
        file_close(&f->base);
        return rc;
    }
    *out = &f->base;
    return 0;
}
