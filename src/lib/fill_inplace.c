/*
 * fill_inplace.c - a fill's span offered by its caller (fill.h,
 * larder__fill_offer_span), and a borrowed chunk received straight into
 * the cache file (larder__fill_inplace_begin): the daemon staging a whole
 * chunk takes the fill lock of the chunk's inner blocks first, maps their
 * pages of the data file into the middle of the span it offers the fill,
 * registers them as windows the peer's answer is spliced into
 * (recv_window.h: the one copy, into the page cache; a recv into the
 * mapping faulted its pages in at a higher cost than the pwrite it saved),
 * and hands that lock to the fill,
 * which checks the bytes where they lie and publishes the blocks that
 * checked out without writing them again (cache_inplace.c says why no one
 * reads them before).  What is not published is punched out before the
 * lock goes.
 *
 * Only the inner blocks: those holding no byte of a sample that crosses
 * the chunk's edges.  The lock is held while the owner sends, and an
 * owner serving a neighbouring chunk locks the blocks of the samples
 * crossing into it; were those held here while that owner waited on this
 * node's locks for another chunk, two nodes could wait on each other.
 * The edges go through the span's anonymous memory and are stored as
 * ever, under the fill's own lock.
 */
#include "fill_internal.h"
#include "recv_window.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * Rooms.  A room is anonymous memory around the data file's pages mapped
 * into its middle; its edges (the samples crossing the chunk's edges, the
 * neighbours a fill reads from the cache) are received or read into it.
 * A fresh mmap per chunk made each of those pages a fault and a page of
 * zeros: 20-25% of the borrowing daemon's CPU (perf, bench/results/peer-
 * borrow.md "Fifth pass").  So rooms are kept: at the end of a chunk the
 * file's pages are replaced by anonymous memory again (MAP_FIXED), and
 * the room waits for the next chunk, its edges' pages still backed.
 */
#define KEPT_ROOMS 8 /* as many as chunks staged at once (borrow.c), and some */
/* Rooms are laid out alike: the chunk's first inner block (the first page
 * mapped to the file) ROOM_LEAD bytes in, so that the edge before it, the
 * samples crossing the chunk's start and the span's slack (borrow.c:
 * about 1.3 MiB for 256 KiB samples), lands on pages the last chunk
 * backed; and sizes are rounded to ROOM_ROUND, so that a kept room fits
 * the next chunk. */
#define ROOM_LEAD ((size_t)2 << 20)
#define ROOM_ROUND ((size_t)2 << 20)
static pthread_mutex_t rooms_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint8_t *room; /* NULL: none kept here */
    size_t mapped;
} kept_rooms[KEPT_ROOMS];

/* A room of at least `mapped` bytes (whole pages), its size in *got; NULL
 * when out of memory. */
static uint8_t *room_get(size_t mapped, size_t *got)
{
    int best = -1;
    pthread_mutex_lock(&rooms_lock);
    for (int i = 0; i < KEPT_ROOMS; i++)
        if (kept_rooms[i].room && kept_rooms[i].mapped >= mapped &&
            (best < 0 || kept_rooms[i].mapped < kept_rooms[best].mapped))
            best = i;
    uint8_t *room = NULL;
    if (best >= 0) {
        room = kept_rooms[best].room;
        *got = kept_rooms[best].mapped;
        kept_rooms[best].room = NULL;
    }
    pthread_mutex_unlock(&rooms_lock);
    if (room) return room;
    room = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *got = mapped;
    return room == MAP_FAILED ? NULL : room;
}

/* Keep a room of room_get's (anonymous memory only by now) for the next
 * chunk, or unmap it when KEPT_ROOMS are kept already. */
static void room_put(uint8_t *room, size_t mapped)
{
    pthread_mutex_lock(&rooms_lock);
    for (int i = 0; room && i < KEPT_ROOMS; i++)
        if (!kept_rooms[i].room) {
            kept_rooms[i].room = room;
            kept_rooms[i].mapped = mapped;
            room = NULL;
        }
    pthread_mutex_unlock(&rooms_lock);
    if (room) munmap(room, mapped);
}

/* The span larder__fill_offer_span offered this thread's next fill. */
static _Thread_local struct {
    uint8_t *buf;
    uint32_t shard;
    uint64_t start, length;
} offered;

/* The fill lock of blocks put in place, offered with the span: lock -1
 * none; taken: a fill merged it into its own, and settles it (punches out
 * what it did not publish, lets it go) when done: then settled. */
static _Thread_local struct {
    int lock;
    bool taken, settled;
    struct larder__cache *cache;
    uint32_t shard;
    uint64_t first, last;
    const uint8_t *map_lo, *map_hi; /* the inner blocks' place in the span */
    const uint64_t *in_file;        /* which of them are the file's pages */
    uint64_t block_size;
    int fd; /* the data file mapped */
} held = {.lock = -1};

void larder__fill_offer_span(uint32_t shard, uint64_t start, uint64_t length, void *buf)
{
    offered.buf = buf;
    offered.shard = shard;
    offered.start = start;
    offered.length = length;
}

uint8_t *larder__fill_take_offered_span(uint32_t shard, uint64_t start, uint64_t length)
{
    uint8_t *buf = offered.buf;
    offered.buf = NULL;
    return buf && offered.shard == shard && start >= offered.start && length <= offered.length &&
                   start - offered.start <= offered.length - length
               ? buf + (start - offered.start)
               : NULL;
}

int larder__fill_lock_blocks(struct larder__cache *c, uint32_t shard, uint64_t first, uint64_t last)
{
    if (held.lock < 0 || held.taken || held.cache != c || held.shard != shard ||
        held.last < first || held.first > last)
        return larder__cache_lock(c, shard, first, last);
    /* the blocks put in place are this thread's already: the rest around
     * them, waiting (no other fill holds some of its blocks while it waits
     * for more, so this cannot close a circle) */
    if (held.first < first || held.last > last)
        return larder__fail(-EDEADLK,
                            "a fill of blocks %llu-%llu of shard %u cuts into the "
                            "blocks %llu-%llu put in place",
                            (unsigned long long)first, (unsigned long long)last, shard,
                            (unsigned long long)held.first, (unsigned long long)held.last);
    int rc = 0;
    if (first < held.first)
        rc = larder__cache_lock_more(c, held.lock, shard, first, held.first - 1);
    if (rc == 0 && last > held.last)
        rc = larder__cache_lock_more(c, held.lock, shard, held.last + 1, last);
    if (rc < 0) return rc; /* the lock stays the offerer's, who settles it */
    held.taken = true;
    return held.lock;
}

void larder__fill_unlock_blocks(struct larder__cache *c, int lock)
{
    if (held.taken && lock == held.lock) {
        larder__cache_punch_absent(c, held.shard, held.first, held.last);
        held.lock = -1;
        held.taken = false;
        held.settled = true;
        held.map_lo = held.map_hi = NULL;
    }
    larder__cache_unlock(c, lock);
}

bool larder__fill_in_place(const void *data, uint64_t length)
{
    const uint8_t *p = data;
    if (!held.taken || p < held.map_lo || p >= held.map_hi || length == 0 ||
        length > (uint64_t)(held.map_hi - p))
        return false;
    uint64_t from = (uint64_t)(p - held.map_lo), to = from + length - 1;
    if (from % held.block_size) return false;
    for (uint64_t i = from / held.block_size; i <= to / held.block_size; i++)
        if (!((held.in_file[i / 64] >> (i % 64)) & 1)) return false;
    return true;
}

/* The blocks of chunk [lo, hi) of shard holding no byte of a sample that
 * crosses its edges: [*first, *last]; false when there are none. */
static bool inner_blocks(struct larder__fill *f, uint32_t shard, uint64_t lo, uint64_t hi,
                         uint64_t *first, uint64_t *last)
{
    struct larder__shard_map *map;
    struct larder__fill_scope p;
    uint64_t start, end, a = lo, b = hi;
    if (hi <= lo || larder__fill_shard_map(f, &map) < 0) return false;
    if (larder__fill_scope_needed(f->ix, f->sums, map, shard, lo, lo + 1, &p, &start, &end) < 0)
        return false;
    if (start < lo) a = end; /* a sample (or checksum block) crossing lo ends at end */
    if (larder__fill_scope_needed(f->ix, f->sums, map, shard, hi - 1, hi, &p, &start, &end) < 0)
        return false;
    if (end > hi) b = start;
    uint64_t size = larder__index_shard_size(f->ix, shard);
    uint64_t block = larder__cache_block_size(f->cache);
    uint64_t from = (a + block - 1) / block, to = b >= size ? (b + block - 1) / block : b / block;
    if (b <= a || to <= from) return false;
    *first = from;
    *last = to - 1;
    return true;
}

/* The room's `runs` file mappings (at[i], length[i]; length 0: none) put
 * back to anonymous memory, and the room kept; unmapped instead when one
 * cannot be (it must never reach the next chunk with a file's pages in it). */
static void room_restore(uint8_t *room, size_t mapped, uint8_t *const *at, const size_t *length,
                         int runs)
{
    for (int i = 0; i < runs && i < LARDER__INPLACE_RUNS; i++)
        if (length[i] && mmap(at[i], length[i], PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
            munmap(room, mapped);
            return;
        }
    room_put(room, mapped);
}

int larder__fill_inplace_begin(struct larder__fill *f, uint32_t shard, uint64_t lo, uint64_t hi,
                               uint64_t room_start, uint64_t room_length,
                               struct larder__fill_inplace *in)
{
    *in = (struct larder__fill_inplace){.lock = -1};
    struct larder__cache *c = f->cache;
    uint64_t first, last, page = (uint64_t)sysconf(_SC_PAGESIZE);
    if (!c || larder__cache_evicts(c) || shard >= f->ix->num_shards ||
        !inner_blocks(f, shard, lo, hi, &first, &last))
        return 1;
    uint64_t at = larder__cache_block_offset(c, first);
    uint64_t length = larder__cache_span(c, shard, first, last);
    /* inside the span, at a page of its own (the mapping's offset and
     * address agree modulo the page) */
    if (last - first >= LARDER__INPLACE_BLOCKS || at < room_start ||
        at - room_start > room_length || length > room_length - (at - room_start) ||
        (at - room_start) % page || room_length > SIZE_MAX - page)
        return 1;
    if (room_length > SIZE_MAX / 4) return 1;
    int lock = larder__cache_lock(c, shard, first, last); /* waits holding nothing */
    if (lock < 0) return 1;
    /* the first inner block at ROOM_LEAD into the room (or further, when
     * more comes before it), whatever the chunk: the pages before it stay
     * anonymous from one chunk to the next */
    size_t left = (size_t)(at - room_start), lead = left > ROOM_LEAD ? left : ROOM_LEAD;
    size_t mapped = lead + (size_t)(room_length - left);
    mapped = (mapped + ROOM_ROUND - 1) / ROOM_ROUND * ROOM_ROUND;
    uint8_t *base = room_get(mapped, &mapped);
    if (!base) {
        larder__cache_unlock(c, lock);
        return 1;
    }
    uint8_t *room = base + (lead - left);
    uint8_t *mapped_at[LARDER__INPLACE_RUNS];
    size_t mapped_length[LARDER__INPLACE_RUNS] = {0};
    /* the runs of blocks not in the cache (a lone READ of the chunk's
     * first sample kept its blocks, most often): never overwrite kept
     * bytes, which readers may be reading now */
    uint64_t in_file[LARDER__INPLACE_BLOCKS / 64] = {0};
    int windows[LARDER__INPLACE_RUNS], runs = 0, rc = 0, fd = larder__cache_data_fd(c, shard);
    for (uint64_t b = first; rc == 0 && fd >= 0 && b <= last && runs < LARDER__INPLACE_RUNS; b++) {
        if (larder__cache_present(c, shard, b, b)) continue;
        uint64_t end = b;
        while (end < last && !larder__cache_present(c, shard, end + 1, end + 1))
            end++;
        uint64_t offset = larder__cache_block_offset(c, b);
        uint8_t *place = room + (offset - room_start);
        rc = larder__cache_map_blocks(c, shard, fd, b, end, place);
        /* the file mapped there (or, failed, maybe partly): put back at the end */
        mapped_at[runs] = place;
        mapped_length[runs] = (size_t)larder__cache_span(c, shard, b, end);
        for (uint64_t i = b - first; rc == 0 && i <= end - first; i++)
            in_file[i / 64] |= UINT64_C(1) << (i % 64);
        if (rc == 0) /* no window left: received through the mapping, dearer */
            windows[runs++] = larder__recv_window_add(
                place, (size_t)larder__cache_span(c, shard, b, end), fd, offset);
        b = end;
    }
    if (rc < 0 || runs == 0) {
        for (int i = 0; i < runs; i++)
            larder__recv_window_remove(windows[i]);
        if (rc < 0) larder__cache_punch_absent(c, shard, first, last); /* the room fallocate took */
        larder__cache_unlock(c, lock);
        room_restore(base, mapped, mapped_at, mapped_length, runs + (rc < 0));
        return 1;
    }
    *in = (struct larder__fill_inplace){.room = room,
                                        .base = base,
                                        .mapped = mapped,
                                        .room_start = room_start,
                                        .room_length = room_length,
                                        .cache = c,
                                        .shard = shard,
                                        .first = first,
                                        .last = last,
                                        .lock = lock,
                                        .fd = fd};
    memcpy(in->in_file, in_file, sizeof in_file);
    for (int i = 0; i < LARDER__INPLACE_RUNS; i++) {
        in->windows[i] = i < runs ? windows[i] : -1;
        in->mapped_at[i] = i < runs ? mapped_at[i] : NULL;
        in->mapped_length[i] = i < runs ? mapped_length[i] : 0;
    }
    return 0;
}

void larder__fill_inplace_offer(struct larder__fill_inplace *in)
{
    in->offered = true;
    larder__fill_offer_span(in->shard, in->room_start, in->room_length, in->room);
    uint8_t *map_lo =
        in->room + (larder__cache_block_offset(in->cache, in->first) - in->room_start);
    held.lock = in->lock;
    held.taken = held.settled = false;
    held.cache = in->cache;
    held.shard = in->shard;
    held.first = in->first;
    held.last = in->last;
    held.map_lo = map_lo;
    held.map_hi = map_lo + larder__cache_span(in->cache, in->shard, in->first, in->last);
    held.in_file = in->in_file;
    held.block_size = larder__cache_block_size(in->cache);
    held.fd = in->fd;
}

int larder__fill_store_in_place(struct larder__cache *c, uint32_t shard, uint64_t first,
                                uint64_t last, const void *data, bool borrowed, bool checked)
{
    return larder__cache_store_placed(c, shard, first, last, data, held.fd, borrowed, checked);
}

uint64_t larder__fill_inplace_end(struct larder__fill_inplace *in)
{
    if (!in->room) return 0;
    uint64_t received = 0;
    if (in->offered)
        for (size_t i = 0; i < LARDER__INPLACE_BLOCKS / 64; i++)
            received += (uint64_t)__builtin_popcountll(in->in_file[i]);
    larder__fill_offer_span(0, 0, 0, NULL);
    if (held.settled) in->lock = -1; /* a fill took it, and settled it before letting it go */
    held.lock = -1;
    held.taken = held.settled = false;
    held.map_lo = held.map_hi = NULL;
    for (int i = 0; i < LARDER__INPLACE_RUNS; i++)
        larder__recv_window_remove(in->windows[i]);
    if (in->lock >= 0) { /* no fill took it: nothing of it was published */
        larder__cache_punch_absent(in->cache, in->shard, in->first, in->last);
        larder__cache_unlock(in->cache, in->lock);
    }
    room_restore(in->base, in->mapped, in->mapped_at, in->mapped_length, LARDER__INPLACE_RUNS);
    *in = (struct larder__fill_inplace){.lock = -1};
    return received;
}
