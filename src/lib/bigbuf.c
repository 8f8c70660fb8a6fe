/*
 * bigbuf.c - large buffers kept for reuse (bigbuf.h).  Measured on the
 * end-to-end borrow of bench/peer.sh (perf record on the borrowing
 * daemon): with a whole 4 MiB chunk borrowed into a fresh buffer and
 * filled through another, page faults and zeroing (exc_page_fault,
 * clear_page) were 26-38% of the daemon's CPU time.  glibc serves such
 * sizes from mmap and unmaps them on free, and a threaded process's
 * arenas give their tops back too; a few kept buffers whose pages stay
 * mapped avoid that.
 *
 * How many are kept depends on the process: a reader (liblarder in a
 * training job, whose memory is the job's) keeps READER_KEEP buffers and
 * READER_KEEP_BYTES at most; larderd, which borrows whole chunks on many
 * workers at once, raises that with larder__bigbuf_set_limits.
 * LARDER_BIGBUF_MAX (bytes, K/M/G suffixes; 0 keeps none) caps the bytes
 * kept in either.
 */
#include "bigbuf.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define KEEP_MOST 64                         /* buffers kept at most, whatever the limits */
#define READER_KEEP 2                        /* a reader process's buffers kept */
#define READER_KEEP_BYTES ((size_t)16 << 20) /* and bytes kept */
#define HEADER 64                            /* before the caller's bytes: the capacity */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *kept[KEEP_MOST]; /* each the start of an allocation (its header) */
static size_t num_kept, kept_bytes;
/* the limits (under lock); env_checked: LARDER_BIGBUF_MAX looked at */
static size_t keep_buffers = READER_KEEP, keep_bytes = READER_KEEP_BYTES;
static bool env_checked, env_set;
static size_t env_bytes;

static size_t capacity_of(const uint8_t *start)
{
    size_t capacity;
    memcpy(&capacity, start, sizeof capacity);
    return capacity;
}

int larder__bigbuf_parse_max(const char *text, size_t *bytes)
{
    if (!text || !*text) return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno || end == text || text[0] == '-') return -EINVAL;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10, end++;
    else if (*end == 'M' || *end == 'm')
        shift = 20, end++;
    else if (*end == 'G' || *end == 'g')
        shift = 30, end++;
    if (*end != '\0') return -EINVAL;
    if (shift && value > (SIZE_MAX >> shift)) return -EINVAL;
    if (value > SIZE_MAX) return -EINVAL;
    *bytes = (size_t)value << shift;
    return 0;
}

/* LARDER_BIGBUF_MAX over the bytes limit, once; call with lock held.  A
 * value that does not parse is ignored (the library never prints). */
static void check_env(void)
{
    if (env_checked) return;
    env_checked = true;
    if (larder__bigbuf_parse_max(getenv("LARDER_BIGBUF_MAX"), &env_bytes) == 0) {
        env_set = true;
        keep_bytes = env_bytes;
    }
}

/* Free kept buffers past the limits; call with lock held. */
static void trim(void)
{
    while (num_kept && (num_kept > keep_buffers || kept_bytes > keep_bytes)) {
        uint8_t *start = kept[--num_kept];
        kept_bytes -= capacity_of(start);
        free(start);
    }
}

void larder__bigbuf_set_limits(size_t buffers, size_t bytes)
{
    pthread_mutex_lock(&lock);
    check_env();
    keep_buffers = buffers < KEEP_MOST ? buffers : KEEP_MOST;
    keep_bytes = env_set ? env_bytes : bytes;
    trim();
    pthread_mutex_unlock(&lock);
}

size_t larder__bigbuf_kept(size_t *bytes)
{
    pthread_mutex_lock(&lock);
    size_t n = num_kept;
    if (bytes) *bytes = kept_bytes;
    pthread_mutex_unlock(&lock);
    return n;
}

void *larder__bigbuf_get(size_t length)
{
    if (length == 0) length = 1;
    if (length > SIZE_MAX - HEADER - LARDER__BIGBUF_MIN) return NULL;
    if (length >= LARDER__BIGBUF_MIN) {
        uint8_t *best = NULL;
        size_t at = 0;
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < num_kept; i++) /* the smallest that fits */
            if (capacity_of(kept[i]) >= length &&
                (!best || capacity_of(kept[i]) < capacity_of(best)))
                best = kept[i], at = i;
        if (best) {
            kept[at] = kept[--num_kept];
            kept_bytes -= capacity_of(best);
        }
        pthread_mutex_unlock(&lock);
        if (best) return best + HEADER;
        /* rounded up to a whole MiB, so that a slightly larger request reuses it */
        length = (length + LARDER__BIGBUF_MIN - 1) / LARDER__BIGBUF_MIN * LARDER__BIGBUF_MIN;
    }
    uint8_t *start = malloc(HEADER + length);
    if (!start) return NULL;
    memcpy(start, &length, sizeof length);
    return start + HEADER;
}

void larder__bigbuf_put(void *buffer)
{
    if (!buffer) return;
    uint8_t *start = (uint8_t *)buffer - HEADER;
    size_t capacity = capacity_of(start);
    if (capacity >= LARDER__BIGBUF_MIN) {
        pthread_mutex_lock(&lock);
        check_env();
        bool keep = num_kept < keep_buffers && kept_bytes <= keep_bytes &&
                    capacity <= keep_bytes - kept_bytes;
        if (keep) {
            kept[num_kept++] = start;
            kept_bytes += capacity;
        }
        pthread_mutex_unlock(&lock);
        if (keep) return;
    }
    free(start);
}

/* Every page of [p, p + length) backed by memory now: one madvise where
 * the kernel has MADV_POPULATE_WRITE (5.14), else a write to each page. */
static void populate(uint8_t *p, size_t length)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (page == 0 || page > length) page = 4096;
#ifdef MADV_POPULATE_WRITE
    uintptr_t first = ((uintptr_t)p + page - 1) / page * page;
    uintptr_t end = ((uintptr_t)p + length) / page * page;
    if (end > first && madvise((void *)first, end - first, MADV_POPULATE_WRITE) == 0) {
        p[0] = 0; /* the partial pages at either end */
        p[length - 1] = 0;
        return;
    }
#endif
    for (size_t at = 0; at < length; at += page)
        p[at] = 0;
    p[length - 1] = 0;
}

int larder__bigbuf_reserve(size_t count, size_t length)
{
    if (length < LARDER__BIGBUF_MIN) return -EINVAL;
    if (count > KEEP_MOST) count = KEEP_MOST;
    /* all taken at once, then all given back: taking and giving one at a
     * time would take the same kept buffer again every time */
    uint8_t *taken[KEEP_MOST];
    size_t made = 0;
    while (made < count && (taken[made] = larder__bigbuf_get(length)) != NULL) {
        uint8_t *start = taken[made] - HEADER;
        populate(start, HEADER + capacity_of(start));
        made++;
    }
    if (made == 0 && count > 0) return -ENOMEM;
    for (size_t i = 0; i < made; i++)
        larder__bigbuf_put(taken[i]);
    size_t fits = 0; /* of the kept ones, those large enough */
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < num_kept; i++)
        fits += capacity_of(kept[i]) >= length;
    pthread_mutex_unlock(&lock);
    return (int)(fits < made ? fits : made);
}
