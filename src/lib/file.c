/*
 * file.c - the file-like handle of larder.h ("files"): one sample, or one
 * field of a sample, read at any offset through the dataset's read engine,
 * so that torch.load, h5py or an image decoder can read a checkpoint or a
 * picture through the node cache without the whole sample copied out for
 * every small read.
 *
 * How a read is served depends on what the dataset reads through:
 *   - a node cache (CACHED): the engine's range path
 *     (larder__dataset_read_range).  Resident blocks are one pread of the
 *     cache file; a miss is a fill of the samples the bytes belong to, each
 *     read whole and checked, so one miss stages the file and the reads
 *     after it are resident.  With a node daemon, a miss is first asked of
 *     the daemon as a STAGE READ: it stages the blocks in the cache the
 *     reader shares and answers with no bytes, and the range is then one
 *     pread of the cache, like any resident range (no copy crosses the
 *     socket).  Where the daemon could not cache them it sends the bytes,
 *     which are handed out as they came (a daemon's bytes are trusted as
 *     resident blocks are: docs/security.md); a daemon that fails is
 *     passed over.
 *   - no cache, no checks, no daemon (DIRECT): the range straight from the
 *     shard's source, as larder_read_field reads a field then.
 *   - no cache, but checks or a daemon (WHOLE): the sample once, whole and
 *     checked (larder_read_sample, through the daemon when there is one),
 *     kept in the handle; every read after it is a copy from memory.  A
 *     part of a sample cannot be checked on its own, and without a cache
 *     the engine's range path would read the whole sample for every call.
 *     Samples over WHOLE_LIMIT go to the range path instead (RANGE), and
 *     so do, without a daemon, files whose shard has per-block checksums
 *     (`larder index --files` of a large file): the range path reads and
 *     checks only the checksum blocks a range covers.
 * Reads shorter than the read-ahead window go through it: one engine read
 * per WINDOW bytes instead of one per call; longer ones go straight into
 * the caller's buffer.
 */
#include "dataset.h"
#include "endpoint.h"
#include "fill.h"
#include "pool.h"
#include "wire.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define WINDOW (UINT64_C(256) << 10)      /* the read-ahead window */
#define WINDOW_ALIGN (UINT64_C(64) << 10) /* windows start on this boundary of the file */
#define WHOLE_LIMIT (UINT64_C(256) << 20) /* the largest sample WHOLE keeps in memory */
/* Reads longer than this go to the engine in pieces of it: what a fill
 * holds in memory besides the caller's buffer stays bounded, and each
 * piece is one READ the node daemon may answer. */
#define PIECE ((uint64_t)LARDER__WIRE_MAX_READ)

enum file_mode { CACHED, DIRECT, WHOLE, RANGE };

struct larder_file {
    larder_dataset *dataset;      /* borrowed */
    struct larder__sample sample; /* its record (key valid while the dataset is open) */
    uint64_t id;
    uint64_t start; /* the file's first byte, relative to the sample */
    uint64_t size;
    enum file_mode mode;
    int64_t position;                     /* of larder_file_read and larder_file_seek */
    pthread_mutex_t lock;                 /* guards the window */
    uint8_t *window;                      /* WINDOW bytes; in WHOLE mode the file, inside `whole` */
    uint64_t window_start, window_length; /* relative to the file; length 0: empty */
    uint8_t *whole;                       /* WHOLE: the sample, once read */
};

/* Ask the node daemon for bytes the cache lacks, to be staged in the
 * cache the reader shares: 0 when the daemon sent the bytes into buf
 * instead (done), 1 when they are to be read from the cache (staged
 * there, resident already, or the daemon not asked or failed).  A reader
 * whose cache is not the daemon's gets the bytes sent. */
static int ask_daemon(larder_file *f, uint64_t at, uint64_t length, void *buf)
{
    larder_dataset *d = f->dataset;
    struct larder__endpoint *daemon = larder__dataset_daemon(d);
    if (!daemon || larder__endpoint_down(daemon) ||
        larder__fill_resident(larder__dataset_fill(d), f->sample.shard, at, length))
        return 1;
    int rc = larder__dataset_daemon_stage(d, f->sample.shard, at, length, buf);
    if (rc < 0)
        larder__log(LARDER_LOG_WARN,
                    "sample %llu ('%s'): the node daemon did not serve bytes %llu+%llu (%s); "
                    "reading them directly",
                    (unsigned long long)f->id, f->sample.key, (unsigned long long)at,
                    (unsigned long long)length, larder_errmsg());
    return rc == 0 ? 0 : 1;
}

/*
 * A range of a sample through the engine's range path.  A sample too big
 * for the engine to check around a range (LARDER_EUNSUPPORTED: one
 * checksum over more than 256 MiB) is staged whole once, when there is a
 * cache to stage it in, and the range read from there.
 */
static int read_range(larder_file *f, uint64_t at, uint64_t length, void *buf)
{
    larder_dataset *d = f->dataset;
    int rc = larder__dataset_read_range(d, f->sample.shard, at, length, buf);
    if (rc != LARDER_EUNSUPPORTED || !larder__dataset_cached(d)) return rc;
    if ((rc = larder__dataset_stage(d, f->id)) < 0) return rc;
    return larder__dataset_read_range(d, f->sample.shard, at, length, buf);
}

/* Bytes [position, position + length) of the file (inside it) into buf. */
static int read_bytes(larder_file *f, uint64_t position, uint64_t length, void *buf)
{
    larder_dataset *d = f->dataset;
    uint64_t at = f->sample.offset + f->start + position;
    switch (f->mode) {
    case DIRECT:
        return larder__fill_direct(larder__dataset_fill(d), &f->sample, f->id, buf,
                                   f->start + position, length);
    case CACHED:
        if (ask_daemon(f, at, length, buf) == 0) return 0;
        return read_range(f, at, length, buf);
    case RANGE:
        return read_range(f, at, length, buf);
    case WHOLE:
        break;
    }
    return larder__fail(LARDER_EUSAGE, "file.c: a whole sample is not read by ranges");
}

/* The window over byte `position` of the file (call with f->lock held). */
static int fill_window(larder_file *f, uint64_t position)
{
    if (f->mode == WHOLE) { /* the whole sample, once */
        uint8_t *whole = malloc(f->sample.length ? (size_t)f->sample.length : 1);
        if (!whole) return -ENOMEM;
        int64_t n = larder_read_sample(f->dataset, f->id, whole, (size_t)f->sample.length);
        if (n < 0) {
            free(whole);
            return (int)n;
        }
        f->whole = whole;
        f->window = whole + f->start;
        f->window_start = 0, f->window_length = f->size;
        return 0;
    }
    if (!f->window && !(f->window = malloc((size_t)WINDOW))) return -ENOMEM;
    uint64_t start = position / WINDOW_ALIGN * WINDOW_ALIGN;
    uint64_t length = f->size - start < WINDOW ? f->size - start : WINDOW;
    f->window_length = 0; /* empty until the read succeeds */
    int rc = read_bytes(f, start, length, f->window);
    if (rc < 0) return rc;
    f->window_start = start, f->window_length = length;
    return 0;
}

static int open_at(larder_file **out, larder_dataset *d, uint64_t id,
                   const struct larder__sample *s, uint64_t start, uint64_t size)
{
    if (size > INT64_MAX)
        return larder__fail(LARDER_EBADINDEX, "sample %llu ('%s'): %llu bytes",
                            (unsigned long long)id, s->key, (unsigned long long)size);
    larder_file *f = calloc(1, sizeof *f);
    if (!f) return -ENOMEM;
    *f = (larder_file){.dataset = d, .sample = *s, .id = id, .start = start, .size = size};
    struct larder__shard shard;
    bool by_block = larder__index_shard(larder__dataset_index(d), s->shard, &shard) == 0 &&
                    shard.sum_shift != 0;
    bool daemon = larder__dataset_daemon(d) != NULL;
    if (larder__dataset_cached(d))
        f->mode = CACHED;
    else if (!larder__dataset_verifies(d) && !daemon)
        f->mode = DIRECT;
    else if (by_block && !daemon) /* checked by the blocks a range covers, read alone */
        f->mode = RANGE;
    else
        f->mode = s->length <= WHOLE_LIMIT ? WHOLE : RANGE;
    pthread_mutex_init(&f->lock, NULL);
    *out = f;
    return 0;
}

int larder_file_open(larder_file **out, larder_dataset *d, uint64_t id, int field)
{
    if (!out || !d) return larder__fail(LARDER_EUSAGE, "larder_file_open: NULL argument");
    *out = NULL;
    if (field < -1)
        return larder__fail(LARDER_EUSAGE, "larder_file_open: field %d (-1: the whole sample)",
                            field);
    const struct larder__index *ix = larder__dataset_index(d);
    struct larder__sample s;
    int rc = larder__index_sample(ix, id, &s);
    if (rc < 0) return rc;
    if (field == -1) return open_at(out, d, id, &s, 0, s.length);
    struct larder__field info;
    if ((rc = larder__index_field(ix, &s, id, (uint32_t)field, &info)) < 0) return rc;
    return open_at(out, d, id, &s, info.offset, info.length);
}

int larder_file_open_key(larder_file **out, larder_dataset *d, const char *key, const char *field)
{
    if (!out || !d || !key)
        return larder__fail(LARDER_EUSAGE, "larder_file_open_key: NULL argument");
    *out = NULL;
    const struct larder__index *ix = larder__dataset_index(d);
    int64_t id = larder__index_find_key(ix, key, strlen(key));
    if (id == LARDER_ENOTFOUND) return larder__fail(LARDER_ENOTFOUND, "no sample '%s'", key);
    if (id < 0) return (int)id;
    struct larder__sample s;
    int rc = larder__index_sample(ix, (uint64_t)id, &s);
    if (rc < 0) return rc;
    if (!field) return larder_file_open(out, d, (uint64_t)id, s.num_fields == 1 ? 0 : -1);
    for (uint32_t i = 0; i < s.num_fields; i++) {
        struct larder__field info;
        if ((rc = larder__index_field(ix, &s, (uint64_t)id, i, &info)) < 0) return rc;
        if (strcmp(info.name, field) == 0)
            return open_at(out, d, (uint64_t)id, &s, info.offset, info.length);
    }
    return larder__fail(LARDER_ENOTFOUND, "sample '%s' has no field '%s'", key, field);
}

int64_t larder_file_pread(larder_file *f, void *buf, size_t length, uint64_t offset)
{
    if (!f || (!buf && length))
        return larder__fail(LARDER_EUSAGE, "larder_file_pread: NULL argument");
    if (offset >= f->size || length == 0) return 0;
    uint64_t n = f->size - offset < length ? f->size - offset : length;
    uint8_t *out = buf;
    uint64_t done = 0;
    int rc = 0;
    if (f->mode != WHOLE && n >= WINDOW) {
        /* as much as a window or more: straight into the caller's buffer */
        while (rc == 0 && done < n) {
            uint64_t piece = n - done < PIECE ? n - done : PIECE;
            rc = read_bytes(f, offset + done, piece, out + done);
            done += piece;
        }
    } else {
        pthread_mutex_lock(&f->lock);
        while (rc == 0 && done < n) {
            uint64_t at = offset + done;
            if (at < f->window_start || at - f->window_start >= f->window_length)
                if ((rc = fill_window(f, at)) < 0) break;
            uint64_t have = f->window_start + f->window_length - at;
            uint64_t take = n - done < have ? n - done : have;
            memcpy(out + done, f->window + (at - f->window_start), (size_t)take);
            done += take;
        }
        pthread_mutex_unlock(&f->lock);
    }
    if (rc < 0) return rc;
    if (f->mode != WHOLE) /* (WHOLE: larder_read_sample counted the sample) */
        larder__cache_count(&larder__fill_counters(larder__dataset_fill(f->dataset))->bytes_served,
                            done);
    return (int64_t)done;
}

int64_t larder_file_read(larder_file *f, void *buf, size_t length)
{
    if (!f) return larder__fail(LARDER_EUSAGE, "larder_file_read: NULL file");
    int64_t n = larder_file_pread(f, buf, length, (uint64_t)f->position);
    if (n > 0) f->position += n;
    return n;
}

int64_t larder_file_seek(larder_file *f, int64_t offset, int whence)
{
    if (!f) return larder__fail(LARDER_EUSAGE, "larder_file_seek: NULL file");
    int64_t base;
    switch (whence) {
    case SEEK_SET:
        base = 0;
        break;
    case SEEK_CUR:
        base = f->position;
        break;
    case SEEK_END:
        base = (int64_t)f->size;
        break;
    default:
        return larder__fail(LARDER_EUSAGE, "larder_file_seek: whence %d", whence);
    }
    int64_t to;
    if (__builtin_add_overflow(base, offset, &to) || to < 0)
        return larder__fail(LARDER_EUSAGE,
                            "larder_file_seek: position %lld%+lld is outside 0 .. 2^63",
                            (long long)base, (long long)offset);
    return f->position = to;
}

uint64_t larder_file_size(const larder_file *f)
{
    return f ? f->size : 0;
}

void larder_file_close(larder_file *f)
{
    if (!f) return;
    if (f->whole)
        free(f->whole);
    else
        free(f->window);
    pthread_mutex_destroy(&f->lock);
    free(f);
}
