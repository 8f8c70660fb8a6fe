/*
 * borrow_stream.c - whether a reader streams through a chunk, for
 * borrow.c's read ahead ("Pieces").  A reader is a local client process
 * (SO_PEERCRED's pid; its READs come on the library's pooled connections
 * in any order), or one connection when its pid is unknown; each has the
 * chunks its READs reached lately.  Never node-wide: one reader's
 * streaming must not make another reader's lone sample or jump stream
 * (a review of borrow6: each such READ staged up to 4 MiB).  Only hints:
 * a reader the table forgot (256 readers, 16 chunks each, the oldest
 * replaced: 8 GPUs' DataLoader workers are 64 processes, and a reader may
 * read a few shards at once) reads in pieces until it streams again.
 */
#include "larderd.h"
#include "borrow_stream.h"

#include <pthread.h>

/* Whether `pieces` holds `run` pieces in a row. */
static bool in_a_row(uint64_t pieces, int run)
{
    uint64_t m = pieces;
    for (int i = 1; i < run; i++)
        m &= pieces >> i;
    return m != 0;
}

/* One chunk a reader's READs reached lately. */
struct borrow_stream {
    const struct dataset_entry *entry; /* NULL: a free entry */
    uint32_t shard;
    uint64_t chunk;
    uint64_t pieces;           /* bit k: a READ reached piece k of it */
    unsigned reads;            /* READs that reached it (one large READ alone is no stream) */
    uint64_t last_lo, last_hi; /* the pieces the last note reached */
    uint64_t used;             /* when used last (`uses`): the oldest is replaced */
    bool
        streaming; /* read in order through it, into it from one it streamed, or its read ahead's */
};

/* A reader: a local client process (its READs come on several pooled
 * connections, in whatever order their workers take them), or, pid
 * unknown, one connection; the chunks its READs reached lately. */
#define READERS 256
#define READER_CHUNKS 16
static struct borrow_reader {
    uid_t uid;
    pid_t pid;                     /* 0: keyed by connection */
    const struct connection *conn; /* when pid is 0; NULL with pid 0: a free reader */
    uint64_t used;
    struct borrow_stream chunks[READER_CHUNKS];
} readers[READERS];
static uint64_t uses; /* readers and their chunks used, for `used` */
static pthread_mutex_t readers_lock = PTHREAD_MUTEX_INITIALIZER; /* readers, uses */

/* c's reader's entry for that chunk, made afresh (in place of the oldest
 * reader and the oldest chunk) when it has none; call with readers_lock held. */
static struct borrow_stream *stream_entry(const struct connection *c, const struct dataset_entry *e,
                                          uint32_t shard, uint64_t chunk,
                                          struct borrow_reader **reader_out)
{
    struct borrow_reader *r = NULL, *oldest_reader = &readers[0];
    const struct connection *key = c->pid ? NULL : c;
    for (int i = 0; i < READERS && !r; i++) {
        struct borrow_reader *t = &readers[i];
        if ((t->pid || t->conn) && t->pid == c->pid && t->uid == c->uid && t->conn == key) r = t;
        if (t->used < oldest_reader->used) oldest_reader = t;
    }
    if (!r) {
        r = oldest_reader;
        *r = (struct borrow_reader){.uid = c->uid, .pid = c->pid, .conn = key};
    }
    r->used = ++uses;
    struct borrow_stream *a = NULL, *oldest = &r->chunks[0];
    for (int i = 0; i < READER_CHUNKS && !a; i++) {
        struct borrow_stream *t = &r->chunks[i];
        if (t->entry == e && t->shard == shard && t->chunk == chunk) a = t;
        if (t->used < oldest->used) oldest = t;
    }
    if (!a) {
        a = oldest;
        *a = (struct borrow_stream){.entry = e, .shard = shard, .chunk = chunk};
    }
    a->used = ++uses;
    *reader_out = r;
    return a;
}

/*
 * Note that a READ of connection c's reached pieces [k_lo, k_hi] of that
 * chunk; whether its reader (c's process) streams through it: its READs reached
 * STREAM_AFTER + 1 pieces of it in a row (in whatever order: a reader
 * with many READs in flight has them answered out of order), or one at
 * its start just after a chunk it streamed through.  Per reader: a
 * node-wide mark made any reader's lone sample in a chunk another
 * streamed through stream.
 */
bool borrow_stream_note(const struct connection *c, const struct dataset_entry *e, uint32_t shard,
                        uint64_t chunk, uint64_t k_lo, uint64_t k_hi)
{
    struct borrow_reader *r;
    pthread_mutex_lock(&readers_lock);
    struct borrow_stream *a = stream_entry(c, e, shard, chunk, &r);
    for (uint64_t k = k_lo; k <= k_hi && k < 64; k++)
        a->pieces |= UINT64_C(1) << k;
    if (k_hi >= 64) a->pieces |= UINT64_C(1) << 63;
    /* borrow.c notes a READ twice when it stages for it (borrow_whole_chunks,
     * then borrow_next_piece after the answer), with the same pieces: once */
    if (!a->reads || a->last_lo != k_lo || a->last_hi != k_hi) a->reads++;
    a->last_lo = k_lo, a->last_hi = k_hi;
    if (!a->streaming && a->reads > 1 && in_a_row(a->pieces, STREAM_AFTER + 1)) a->streaming = true;
    /* entering it at its start from one it streamed through (the chunks
     * between: resident, which a reader sharing the cache reads without
     * a READ) */
    for (int i = 0; i < READER_CHUNKS && !a->streaming && k_lo == 0; i++) {
        const struct borrow_stream *t = &r->chunks[i];
        if (t != a && t->entry == e && t->streaming &&
            ((t->shard == shard && chunk > t->chunk && chunk - t->chunk <= STREAM_BEHIND) ||
             (shard == t->shard + 1 && chunk < STREAM_BEHIND)))
            a->streaming = true;
    }
    bool streaming = a->streaming;
    pthread_mutex_unlock(&readers_lock);
    return streaming;
}

void borrow_stream_mark(const struct connection *c, const struct dataset_entry *e, uint32_t shard,
                        uint64_t chunk)
{
    struct borrow_reader *r;
    pthread_mutex_lock(&readers_lock);
    stream_entry(c, e, shard, chunk, &r)->streaming = true;
    pthread_mutex_unlock(&readers_lock);
}
