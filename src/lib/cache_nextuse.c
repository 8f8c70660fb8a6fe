/*
 * cache_nextuse.c - eviction by next use: the block read farthest in the
 * future goes first (Belady's rule), computed online and exactly from the
 * plans the node's readers registered (cache_plans.c).
 *
 * Time is counted in global steps.  A reader (rank r of W, worker w of K,
 * pass starting at step T) that has consumed c of its own steps is at step
 * cur = T + w + c*K.  Sample s, at position p of its epoch's order, is
 * that reader's at step t = p / G when (p mod G) / (G/W) = r and
 * (t - T) mod K = w; it is read next in t - cur steps when t >= cur, else
 * in the next epoch (whose order the reader will take from step 0) at
 * steps - cur + t' when it is the reader's there, else never by this
 * reader.  A block's next use is the earliest over the samples overlapping
 * it (the shard map) and over every live reader of the node.  Blocks of
 * no reader's sample (read this epoch and not in the next one's share of
 * this node, or of no sample at all) are next used "never" and go first.
 * A borrowed block (a peer owns and holds it) counts as BORROWED_WEIGHT
 * times farther: it comes back from the peer, not the origin.
 *
 * Cost: the order's inverse (position_of: a Feistel walk, about 16 mixes)
 * once per sample and epoch group, then integer arithmetic per reader.
 * Picking victims scans the resident bitmap and keeps the farthest
 * `candidates` blocks (a heap); the list serves evictions until a reader
 * moves on a step (or a plan changes), and a scan is skipped while the
 * last one cost more than a twentieth of the time since it, so eviction
 * spends at most about 5% of one core.  A scan runs without evict_lock,
 * over a copy of the readers, so admission never waits for one (pick).
 * Memory: 16 bytes a candidate (twice: the list and the one being
 * picked), and per epoch group what the plan needs (O(1) in global mode).
 */
#include "cache_nextuse.h"
#include "shardmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define BORROWED_WEIGHT 4
/* A reader that leaves at the end of its epoch (a DataLoader worker's
 * pass ends, its process exits) still counts its next epoch's reads for
 * this long, or until its successor registers: otherwise, between the
 * first worker's exit and the next pass's start, its share of the next
 * epoch was next used "never" and went first. */
#define GHOST_NS (30ull * 1000000000u)
/* Scans cheaper than this are never put off (small caches stay exact). */
#define CHEAP_SCAN_NS 1000000

uint64_t larder__nextuse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* This thread's CPU time: what a scan costs, without the time the
 * thread waited to run on a busy machine. */
static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int index_shard_of(void *userdata, uint64_t id, uint32_t *shard)
{
    struct larder__sample s;
    int rc = larder__index_sample_range(userdata, id, &s);
    if (rc == 0) *shard = s.shard;
    return rc;
}

void larder__nextuse_free(struct larder__nextuse *n)
{
    if (!n) return;
    for (int g = 0; g < LARDER__NEXTUSE_GROUPS; g++)
        larder_plan_destroy(n->groups[g].plan);
    free(n->candidates);
    free(n->scratch);
    free(n->view);
    pthread_cond_destroy(&n->scanned);
    free(n);
}

void larder__cache_set_layout(struct larder__cache *c, const struct larder__index *ix,
                              const struct larder__shard_map *map)
{
    pthread_mutex_lock(&c->evict_lock);
    if (!ix || !map) {
        while (c->nextuse && c->nextuse->scanning) /* its scan reads the orders */
            pthread_cond_wait(&c->nextuse->scanned, &c->evict_lock);
        larder__nextuse_free(c->nextuse);
        c->nextuse = NULL;
    } else if (!c->nextuse) {
        c->nextuse = calloc(1, sizeof *c->nextuse);
        if (c->nextuse) {
            c->nextuse->ix = ix;
            c->nextuse->map = map;
            pthread_cond_init(&c->nextuse->scanned, NULL);
        }
    }
    pthread_mutex_unlock(&c->evict_lock);
}

/* The group of (seed, epoch, mode, window), made when missing; -1 when none fits. */
static int group_of(struct larder__nextuse *n, const struct larder__plan_params *p, uint64_t epoch)
{
    int free_slot = -1;
    for (int g = 0; g < LARDER__NEXTUSE_GROUPS; g++) {
        struct larder__nextuse_group *x = &n->groups[g];
        if (x->plan && x->seed == p->seed && x->epoch == epoch && x->mode == p->mode &&
            x->window == p->locality_window) {
            x->used = true;
            return g;
        }
        if (!x->plan && free_slot < 0) free_slot = g;
    }
    if (free_slot < 0) return -1;
    struct larder__plan_source source = {.num_samples = n->ix->num_samples,
                                         .num_shards = n->ix->num_shards,
                                         .shard_of = index_shard_of,
                                         .userdata = (void *)n->ix};
    larder_plan_options o = {.version = LARDER_PLAN_OPTIONS_VERSION,
                             .mode = (int)p->mode,
                             .seed = p->seed,
                             .epoch = epoch,
                             .locality_window = p->locality_window};
    struct larder__nextuse_group *x = &n->groups[free_slot];
    if (larder__plan_create(&x->plan, &source, &o) < 0) return -1;
    x->seed = p->seed;
    x->epoch = epoch;
    x->mode = p->mode;
    x->window = p->locality_window;
    x->used = true;
    return free_slot;
}

/* Whether live plan q continues ghost g's reads in the next epoch. */
static bool succeeds(const struct larder__plan_params *q, const struct larder__plan_params *g)
{
    return q->seed == g->seed && q->epoch == g->epoch + 1 && q->mode == g->mode &&
           q->locality_window == g->locality_window && q->global_batch == g->global_batch &&
           q->world == g->world && q->rank == g->rank && q->workers == g->workers &&
           q->worker == g->worker;
}

static bool same_plan(const struct larder__plan_params *a, const struct larder__plan_params *b)
{
    return a->seed == b->seed && a->epoch == b->epoch && a->mode == b->mode &&
           a->locality_window == b->locality_window && a->global_batch == b->global_batch &&
           a->world == b->world && a->rank == b->rank && a->workers == b->workers &&
           a->worker == b->worker && a->start_step == b->start_step;
}

/* The readers that left at their epoch's end and still count (ghosts): of
 * the readers known before, those gone from `live` that had reached their
 * last step (or were ghosts already), within GHOST_NS, with no successor. */
static int keep_ghosts(const struct larder__nextuse *n, const struct larder__cache_plan *live,
                       int count, uint64_t now, struct larder__nextuse_reader *ghosts)
{
    int kept = 0;
    for (int i = 0; i < n->num_readers && kept < LARDER__CACHE_PLAN_SLOTS; i++) {
        const struct larder__nextuse_reader *o = &n->readers[i];
        bool here = false, successor = false;
        for (int j = 0; j < count; j++) {
            here = here || (o->slot >= 0 && live[j].slot == o->slot &&
                            same_plan(&live[j].params, &o->params));
            successor = successor || succeeds(&live[j].params, &o->params);
        }
        bool ended = o->ghost_until ? now < o->ghost_until : o->cur + o->workers >= o->steps;
        if (here || successor || !ended) continue;
        ghosts[kept] = *o;
        ghosts[kept].slot = -1;
        ghosts[kept].ghost_until = o->ghost_until ? o->ghost_until : now + GHOST_NS;
        ghosts[kept].cur = o->steps; /* done with its epoch */
        kept++;
    }
    return kept;
}

/* Read the registry again when it changed (or a ghost's time is up);
 * false when no reader counts. */
bool larder__nextuse_readers(struct larder__cache *c, struct larder__nextuse *n)
{
    uint64_t generation = larder__cache_plans_generation(c);
    uint64_t now = larder__nextuse_now_ns();
    if (n->known && generation == n->generation && (!n->ghost_deadline || now < n->ghost_deadline))
        return n->num_readers > 0;
    /* a scan without the lock walks the orders as they are: the readers
     * are read again when it is done (a scan's time late) */
    if (n->known && n->scanning) return n->num_readers > 0;
    struct larder__cache_plan live[2 * LARDER__CACHE_PLAN_SLOTS];
    int count = larder__cache_plans_live(c, n->ix->num_samples, live, LARDER__CACHE_PLAN_SLOTS);
    struct larder__nextuse_reader ghosts[LARDER__CACHE_PLAN_SLOTS];
    int num_ghosts = count < 0 ? 0 : keep_ghosts(n, live, count, now, ghosts);
    for (int i = 0; i < num_ghosts && count >= 0; i++) /* a ghost's next epoch stays needed */
        live[count + i] = (struct larder__cache_plan){
            .slot = -1, .params = ghosts[i].params, .window = ghosts[i].window};
    int plans = count < 0 ? 0 : count + num_ghosts;
    /* first free the orders no plan needs any more, so that they cannot
     * keep out the ones that are needed now */
    for (int g = 0; g < LARDER__NEXTUSE_GROUPS; g++) {
        struct larder__nextuse_group *x = &n->groups[g];
        bool needed = false;
        for (int i = 0; i < plans && x->plan && !needed; i++) {
            const struct larder__plan_params *p = &live[i].params;
            needed = x->seed == p->seed && x->mode == p->mode && x->window == p->locality_window &&
                     (x->epoch == p->epoch || x->epoch == p->epoch + 1);
        }
        if (x->plan && !needed) {
            larder_plan_destroy(x->plan);
            x->plan = NULL;
        }
        x->used = false;
    }
    n->num_readers = 0;
    n->ghost_deadline = 0;
    for (int i = 0; i < plans; i++) {
        const struct larder__plan_params *p = &live[i].params;
        struct larder__nextuse_reader *r = &n->readers[n->num_readers];
        bool ghost = i >= count;
        *r = (struct larder__nextuse_reader){.slot = live[i].slot,
                                             .ghost_until =
                                                 ghost ? ghosts[i - count].ghost_until : 0,
                                             .params = *p,
                                             .window = live[i].window,
                                             .global_batch = p->global_batch,
                                             .local_batch = p->global_batch / p->world,
                                             .start_step = p->start_step,
                                             .rank = p->rank,
                                             .workers = p->workers,
                                             .worker = p->worker};
        uint64_t samples = n->ix->num_samples;
        r->steps = p->pad ? samples / p->global_batch + (samples % p->global_batch != 0)
                          : samples / p->global_batch;
        r->head = larder__nextuse_head(r->steps, p->workers, live[i].window);
        r->cur = ghost ? r->steps : 0;
        r->now = ghost ? -1 : group_of(n, p, p->epoch); /* a ghost is done with its epoch */
        r->next = group_of(n, p, p->epoch + 1);
        if (r->now >= 0 || r->next >= 0) {
            n->num_readers++;
            if (ghost && (!n->ghost_deadline || r->ghost_until < n->ghost_deadline))
                n->ghost_deadline = r->ghost_until;
        }
    }
    for (int g = 0; g < LARDER__NEXTUSE_GROUPS; g++)
        if (!n->groups[g].used) {
            larder_plan_destroy(n->groups[g].plan);
            n->groups[g].plan = NULL;
        }
    n->generation = generation;
    n->known = true;
    n->candidates_valid = false;
    return n->num_readers > 0;
}

/* Where every reader is now; returns the sum of their positions (changes when one moves). */
uint64_t larder__nextuse_positions(struct larder__cache *c, struct larder__nextuse *n)
{
    uint64_t sum = 0;
    for (int i = 0; i < n->num_readers; i++) {
        struct larder__nextuse_reader *r = &n->readers[i];
        if (r->slot < 0) continue; /* a ghost: done with its epoch */
        uint64_t consumed = larder__cache_plan_consumed(c, r->slot);
        sum += consumed;
        /* the slot is written by another process: bound it before multiplying */
        uint64_t cur = r->start_step + r->worker;
        if (cur >= r->steps || consumed > (r->steps - cur) / r->workers)
            r->cur = r->steps; /* done with the epoch */
        else
            r->cur =
                cur + consumed * r->workers < r->steps ? cur + consumed * r->workers : r->steps;
    }
    return sum;
}

/* Steps until reader r reads sample id, at positions p_now / p_next (-1: not in that epoch). */
static uint64_t reader_distance(const struct larder__nextuse_reader *r, uint64_t id, int64_t p_now,
                                int64_t p_next)
{
    uint64_t g = r->global_batch, b = r->local_batch;
    if (p_now >= 0) {
        uint64_t p = (uint64_t)p_now, t = p / g;
        if (t < r->steps && (p % g) / b == r->rank && t >= r->start_step &&
            (t - r->start_step) % r->workers == r->worker && t >= r->cur)
            return t - r->cur;
    }
    if (p_next >= 0) {
        uint64_t p = (uint64_t)p_next, t = p / g;
        if (t < r->steps && (p % g) / b == r->rank && t % r->workers == r->worker)
            return r->steps - r->cur + larder__nextuse_step(r->steps, r->head, t, id);
    }
    return LARDER__NEXTUSE_NEVER;
}

static uint64_t sample_distance(const struct larder__nextuse *n, uint64_t id)
{
    int64_t position[LARDER__NEXTUSE_GROUPS];
    for (int g = 0; g < LARDER__NEXTUSE_GROUPS; g++)
        position[g] = n->groups[g].plan ? larder_plan_position_of(n->groups[g].plan, id) : -1;
    uint64_t best = LARDER__NEXTUSE_NEVER;
    for (int i = 0; i < n->num_readers; i++) {
        const struct larder__nextuse_reader *r = &n->readers[i];
        uint64_t d = reader_distance(r, id, r->now >= 0 ? position[r->now] : -1,
                                     r->next >= 0 ? position[r->next] : -1);
        if (d < best) best = d;
    }
    return best;
}

/* Steps until global block b (of `shard`) is read next by any live reader. */
uint64_t larder__nextuse_block_distance(struct larder__cache *c, struct larder__nextuse *n,
                                        uint32_t shard, uint64_t block)
{
    uint64_t start = block << c->block_shift;
    uint64_t end = start + larder__cache_span(c, shard, block, block);
    uint64_t first, last;
    larder__shard_map_overlapping(n->map, shard, start, end, &first, &last);
    uint64_t best = LARDER__NEXTUSE_NEVER;
    for (uint64_t i = first; i < last; i++) {
        uint64_t d = sample_distance(n, larder__shard_map_id(n->map, i));
        if (d < best) best = d;
    }
    return best;
}

static uint64_t weighed(const struct larder__cache *c, uint64_t global, uint64_t use)
{
    if (use == LARDER__NEXTUSE_NEVER || !bit_get(c->borrowed, global)) return use;
    return use > LARDER__NEXTUSE_NEVER / BORROWED_WEIGHT ? LARDER__NEXTUSE_NEVER - 1
                                                         : use * BORROWED_WEIGHT;
}

/* Farther first; among equals, the lower block number first. */
static bool goes_before(const struct larder__nextuse_candidate *a,
                        const struct larder__nextuse_candidate *b)
{
    return a->use != b->use ? a->use > b->use : a->block < b->block;
}

/* Sift the heap (its root: the candidate that goes last) down from i. */
static void sift_down(struct larder__nextuse_candidate *h, size_t count, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < count && goes_before(&h[m], &h[l])) m = l;
        if (r < count && goes_before(&h[m], &h[r])) m = r;
        if (m == i) return;
        struct larder__nextuse_candidate t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static int compare_candidates(const void *x, const void *y)
{
    const struct larder__nextuse_candidate *a = x, *b = y;
    return goes_before(a, b) ? -1 : goes_before(b, a) ? 1 : 0;
}

/* The farthest `want` resident blocks into h, in the order they go; how
 * many.  Reads only `view` (a copy of the state), the geometry and the
 * bitmaps: runs without evict_lock. */
static size_t scan(struct larder__cache *c, const struct larder__nextuse *view, bool pins,
                   struct larder__nextuse_candidate *h, size_t want)
{
    /* a heap whose root is the kept candidate that would go last */
    size_t count = 0;
    for (uint32_t shard = 0; shard < c->num_shards; shard++) {
        uint64_t base = c->shard_base[shard], blocks = c->shard_base[shard + 1] - base;
        for (uint64_t block = 0; block < blocks; block++) {
            uint64_t b = base + block;
            uint64_t word = atomic_load64(&c->resident[b / 64]) >> (b % 64);
            if (!word) { /* skip to the next word */
                block += 63 - b % 64;
                continue;
            }
            if (!(word & 1) || (pins && bit_get(c->pinned, b))) continue;
            struct larder__nextuse_candidate x = {
                .use = weighed(c, b,
                               larder__nextuse_block_distance(c, (struct larder__nextuse *)view,
                                                              shard, block)),
                .block = b};
            if (count < want) {
                size_t i = count++;
                h[i] = x;
                while (i > 0 && goes_before(&h[(i - 1) / 2], &h[i])) { /* sift up */
                    struct larder__nextuse_candidate t = h[i];
                    h[i] = h[(i - 1) / 2];
                    h[(i - 1) / 2] = t;
                    i = (i - 1) / 2;
                }
            } else if (goes_before(&x, &h[0])) {
                h[0] = x;
                sift_down(h, count, 0);
            }
        }
    }
    qsort(h, count, sizeof *h, compare_candidates);
    return count;
}

/*
 * Pick the resident blocks to go first: the farthest of them, in order.
 * With evict_lock held; the scan itself runs without it, over a copy of
 * the readers and their positions (the registry is not read again until
 * it is done, so the orders the copy names stay), so admission decides
 * against the list as it was while a scan runs; the new list is swapped
 * in under the lock.  A thread that needs a pick while another thread's
 * scan runs waits for that one instead.
 */
static bool pick(struct larder__cache *c, struct larder__nextuse *n, bool pins)
{
    if (n->scanning) {
        while (n->scanning)
            pthread_cond_wait(&n->scanned, &c->evict_lock);
        return n->candidates_valid;
    }
    uint64_t started = cpu_ns(), wall = larder__nextuse_now_ns();
    uint64_t resident = atomic_load64(&c->header->resident_blocks);
    size_t want = (size_t)(resident / 32);
    if (want < 64) want = 64;
    if (want > 65536) want = 65536;
    if (want > n->cap_scratch) {
        struct larder__nextuse_candidate *more = realloc(n->scratch, want * sizeof *more);
        if (!more) return false;
        n->scratch = more;
        n->cap_scratch = want;
    }
    if (!n->view && !(n->view = malloc(sizeof *n->view))) return false;
    *n->view = *n; /* the readers where they are now, and their orders */
    struct larder__nextuse_candidate *h = n->scratch;
    __atomic_store_n(&n->scanning, true, __ATOMIC_RELEASE); /* tests look without the lock */
    pthread_mutex_unlock(&c->evict_lock);
    size_t count = scan(c, n->view, pins, h, want);
    uint64_t cost = cpu_ns() - started;
    pthread_mutex_lock(&c->evict_lock);
    n->scratch = n->candidates; /* swap the lists */
    n->candidates = h;
    size_t cap = n->cap_scratch;
    n->cap_scratch = n->cap_candidates;
    n->cap_candidates = cap;
    __atomic_store_n(&n->scanning, false, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&n->scanned);
    if (c->share) { /* what the other datasets of the node may take from this one */
        uint64_t blocks[LARDER__SHARE_VICTIMS], uses[LARDER__SHARE_VICTIMS];
        size_t k = 0;
        for (; k < count && k < LARDER__SHARE_VICTIMS; k++)
            blocks[k] = h[k].block, uses[k] = h[k].use;
        larder__share_publish(c, blocks, uses, k);
    }
    n->num_candidates = count;
    n->next_candidate = 0;
    n->candidates_valid = true;
    n->last_scan_ns = larder__nextuse_now_ns();
    n->scan_cost_ns = cost;
    n->scans++;
    n->scan_cpu_ns += n->scan_cost_ns;
    n->scan_wall_ns = n->last_scan_ns - wall; /* on a busy machine much more than its CPU */
    n->resident_at_pick = atomic_load64(&c->header->resident_blocks);
    return true;
}

/* Make the candidate list current: false when there is no live plan. */
bool larder__nextuse_current(struct larder__cache *c, struct larder__nextuse *n, bool pins)
{
    if (!larder__nextuse_readers(c, n)) return false;
    uint64_t positions = larder__nextuse_positions(c, n);
    /* with a node capacity, other datasets take from what this one
     * publishes: blocks stored since the last pick may be farther */
    bool moved = positions != n->positions ||
                 (c->share && atomic_load64(&c->header->resident_blocks) != n->resident_at_pick);
    /* a reader moved on: rescan, unless the last scan cost more than
     * CHEAP_SCAN_NS of CPU and a twentieth of the time since it (a scan
     * holds no lock: what it costs is CPU) */
    bool due = !n->candidates_valid || n->next_candidate >= n->num_candidates ||
               (moved && (n->scan_cost_ns < CHEAP_SCAN_NS ||
                          larder__nextuse_now_ns() - n->last_scan_ns >= 20 * n->scan_cost_ns));
    if (due && n->scanning && n->candidates_valid && n->next_candidate < n->num_candidates)
        return true; /* another thread's scan is coming: the list serves until then */
    if (due) {
        n->positions = positions;
        if (!pick(c, n, pins)) return false;
    }
    return true;
}

bool larder__nextuse_trim(struct larder__cache *c, int lock_fd, uint64_t limit, bool pins,
                          struct larder__evict_batch *batch)
{
    struct larder__nextuse *n = c->nextuse;
    if (!n || !larder__nextuse_current(c, n, pins)) return false;
    for (int round = 0; round < 2 && atomic_load64(&c->header->resident_blocks) > limit; round++) {
        while (n->next_candidate < n->num_candidates &&
               atomic_load64(&c->header->resident_blocks) > limit) {
            uint64_t b = n->candidates[n->next_candidate++].block;
            if (!bit_get(c->resident, b) || (pins && bit_get(c->pinned, b))) continue;
            larder__cache_evict_claim(c, lock_fd, b, batch);
        }
        if (atomic_load64(&c->header->resident_blocks) > limit && !pick(c, n, pins)) break;
    }
    return true;
}

uint64_t larder__nextuse_farthest(struct larder__cache *c, bool pins, uint64_t *use)
{
    struct larder__nextuse *n = c->nextuse;
    if (!n || !larder__nextuse_current(c, n, pins)) return UINT64_MAX;
    for (int round = 0; round < 2; round++) {
        for (; n->next_candidate < n->num_candidates; n->next_candidate++) {
            const struct larder__nextuse_candidate *x = &n->candidates[n->next_candidate];
            if (bit_get(c->resident, x->block) && !(pins && bit_get(c->pinned, x->block))) {
                *use = x->use;
                return x->block;
            }
        }
        if (round == 0 && !pick(c, n, pins)) break;
    }
    return UINT64_MAX;
}

bool larder__nextuse_evict_farthest(struct larder__cache *c, int lock_fd, uint64_t block)
{
    struct larder__nextuse *n = c->nextuse;
    if (!n || n->next_candidate >= n->num_candidates ||
        n->candidates[n->next_candidate].block != block)
        return false;
    n->next_candidate++; /* gone, or being filled: either way not next any more */
    larder__cache_evict_one(c, lock_fd, block);
    return true;
}

void larder__nextuse_refresh(struct larder__cache *c, bool pins)
{
    if (c->nextuse) larder__nextuse_current(c, c->nextuse, pins);
}

bool larder__nextuse_listed(struct larder__cache *c, struct larder__nextuse *n, bool pins)
{
    if (!larder__nextuse_readers(c, n)) return false;
    if (!n->candidates_valid || n->next_candidate >= n->num_candidates)
        return larder__nextuse_current(c, n, pins);
    larder__nextuse_positions(c, n); /* the block asked about, at where the readers are */
    return true;
}
