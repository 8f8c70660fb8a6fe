/*
 * test_source_stripe.c - the striping source: a read cut at chunk
 * boundaries, each owner's pieces as one read of its peer (this node's
 * from the origin), owners at once on a pool, a failed owner's pieces from
 * the origin.  Fake sources write bytes that are a function of the shard
 * offset and note every range they were asked for, so each test checks
 * both the bytes and who read them against arithmetic done here.
 */
#include "pool.h"
#include "source.h"
#include "source_hedge.h"
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define MAX_RANGES 64

struct fake {
    struct larder__source base;
    int answer; /* enum larder__from */
    int fail;   /* a negative code to fail with; 0: answer */
    int delay_ms;
    pthread_mutex_t lock;
    int reads;
    size_t ranges;
    uint64_t range_offset[MAX_RANGES], range_length[MAX_RANGES];
    pthread_t thread; /* of the last read */
};

static uint8_t pattern(uint64_t offset)
{
    return (uint8_t)(offset * 131 + (offset >> 8));
}

static void pause_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

static int fake_read(struct larder__source *source, const struct larder__extent *extents,
                     size_t count, unsigned flags)
{
    (void)flags;
    struct fake *f = (struct fake *)source;
    if (f->delay_ms) pause_ms(f->delay_ms);
    pthread_mutex_lock(&f->lock);
    f->reads++;
    f->thread = pthread_self();
    for (size_t i = 0; i < count && f->ranges < MAX_RANGES; i++) {
        f->range_offset[f->ranges] = extents[i].offset;
        f->range_length[f->ranges++] = extents[i].length;
    }
    pthread_mutex_unlock(&f->lock);
    if (f->fail) return larder__fail(f->fail, "%s: broken", f->base.name);
    for (size_t i = 0; i < count; i++)
        for (size_t b = 0; b < extents[i].length; b++)
            ((uint8_t *)extents[i].buf)[b] = pattern(extents[i].offset + b);
    return f->answer;
}

static int fake_size(struct larder__source *source, uint64_t *size)
{
    (void)source;
    *size = 1000000;
    return 0;
}

static void fake_close(struct larder__source *source)
{
    (void)source; /* the test owns its fakes */
}

static const struct larder__source_ops fake_ops = {
    .kind = "fake", .size = fake_size, .read = fake_read, .close = fake_close};

static void fake_init(struct fake *f, const char *name, int answer)
{
    memset(f, 0, sizeof *f);
    f->base.ops = &fake_ops;
    f->base.name = name;
    f->answer = answer;
    pthread_mutex_init(&f->lock, NULL);
}

static void fake_forget(struct fake *f)
{
    pthread_mutex_lock(&f->lock);
    f->reads = 0;
    f->ranges = 0;
    pthread_mutex_unlock(&f->lock);
}

/* Four members, this node member 0; chunks of 1000 bytes; chunk c owned by c % 4. */
enum { MEMBERS = 4, CHUNK = 1000 };
struct setup {
    struct fake origin, peer[MEMBERS];
    struct larder__source *stripe;
};

static size_t owner_mod4(void *context, uint32_t shard, uint64_t chunk)
{
    CHECK_EQ(*(uint32_t *)context, shard);
    return (size_t)(chunk % MEMBERS);
}

static uint32_t shard_seven = 7;

static void setup_open(struct setup *s, struct larder__pool *pool, larder__chunk_owner_fn owner)
{
    fake_init(&s->origin, "fake origin", LARDER__FROM_ORIGIN);
    struct larder__source *peers[MEMBERS] = {NULL};
    static const char *names[MEMBERS] = {"self", "peer 1", "peer 2", "peer 3"};
    for (int i = 0; i < MEMBERS; i++) {
        fake_init(&s->peer[i], names[i], LARDER__FROM_PEER);
        if (i > 0) peers[i] = &s->peer[i].base;
    }
    struct larder__stripe_config c = {.peers = peers,
                                      .members = MEMBERS,
                                      .shard = 7,
                                      .chunk_size = CHUNK,
                                      .owner = owner,
                                      .owner_context = &shard_seven,
                                      .pool = pool,
                                      .down_ms = 300};
    CHECK_EQ(larder__source_stripe_open(&s->stripe, &c, &s->origin.base), 0);
    CHECK(strcmp(s->stripe->ops->kind, "stripe") == 0);
    CHECK(strcmp(s->stripe->name, "fake origin") == 0);
}

static bool right_bytes(const uint8_t *buf, uint64_t offset, size_t length)
{
    for (size_t i = 0; i < length; i++)
        if (buf[i] != pattern(offset + i)) return false;
    return true;
}

static bool has_range(struct fake *f, uint64_t offset, uint64_t length)
{
    for (size_t i = 0; i < f->ranges; i++)
        if (f->range_offset[i] == offset && f->range_length[i] == length) return true;
    return false;
}

TEST(source_stripe_cuts_at_chunks_and_reads_each_owner_once)
{
    struct setup s;
    setup_open(&s, NULL, owner_mod4);
    static uint8_t a[3200], b[100];
    /* [500, 3700) spans chunks 0-3; [5000, 5100) is in chunk 5 (owner 1) */
    struct larder__extent extents[] = {{a, 500, sizeof a}, {b, 5000, sizeof b}};
    CHECK_EQ(larder__source_readv(s.stripe, extents, 2, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 500, sizeof a));
    CHECK(right_bytes(b, 5000, sizeof b));
    /* chunk 0 is this node's: the origin; each peer asked once, for its own chunks only */
    CHECK_EQ(s.origin.reads, 1);
    CHECK_EQ(s.origin.ranges, 1);
    CHECK(has_range(&s.origin, 500, 500));
    CHECK_EQ(s.peer[1].reads, 1);
    CHECK_EQ(s.peer[1].ranges, 2);
    CHECK(has_range(&s.peer[1], 1000, 1000) && has_range(&s.peer[1], 5000, 100));
    CHECK_EQ(s.peer[2].reads, 1);
    CHECK(has_range(&s.peer[2], 2000, 1000));
    CHECK_EQ(s.peer[3].reads, 1);
    CHECK(has_range(&s.peer[3], 3000, 700));
    CHECK_EQ(s.peer[0].reads, 0);

    /* only this node's chunks: one origin read of the extents as asked */
    fake_forget(&s.origin);
    static uint8_t c[300], d[200];
    struct larder__extent mine[] = {{c, 4100, sizeof c}, {d, 8000, sizeof d}};
    CHECK_EQ(larder__source_readv(s.stripe, mine, 2, 0), LARDER__FROM_ORIGIN);
    CHECK(right_bytes(c, 4100, sizeof c) && right_bytes(d, 8000, sizeof d));
    CHECK_EQ(s.origin.reads, 1);
    CHECK(has_range(&s.origin, 4100, 300) && has_range(&s.origin, 8000, 200));

    /* ORIGIN_ONLY: no peer, whatever the owners */
    fake_forget(&s.origin);
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 500, LARDER__READ_ORIGIN_ONLY),
             LARDER__FROM_ORIGIN);
    CHECK(right_bytes(a, 500, sizeof a));
    CHECK_EQ(s.origin.reads, 1);
    CHECK(has_range(&s.origin, 500, sizeof a));
    CHECK_EQ(s.peer[1].reads + s.peer[2].reads + s.peer[3].reads, 3);
    uint64_t size;
    CHECK_EQ(larder__source_size(s.stripe, &size), 0);
    CHECK_EQ(size, 1000000);
    larder__source_close(s.stripe);
}

static size_t owner_pairs(void *context, uint32_t shard, uint64_t chunk)
{
    (void)context, (void)shard;
    return (size_t)(chunk / 2 % MEMBERS); /* chunks 2 and 3 both owner 1, ... */
}

TEST(source_stripe_joins_adjacent_chunks_of_one_owner)
{
    struct setup s;
    setup_open(&s, NULL, owner_pairs);
    static uint8_t a[6000];
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 1500, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 1500, sizeof a));
    CHECK(has_range(&s.origin, 1500, 500));   /* chunk 1 */
    CHECK(has_range(&s.peer[1], 2000, 2000)); /* chunks 2-3, one extent */
    CHECK(has_range(&s.peer[2], 4000, 2000)); /* chunks 4-5 */
    CHECK(has_range(&s.peer[3], 6000, 1500)); /* chunk 6 and part of 7 */
    CHECK_EQ(s.peer[1].ranges + s.peer[2].ranges + s.peer[3].ranges + s.origin.ranges, 4);
    larder__source_close(s.stripe);
}

TEST(source_stripe_reads_owners_at_once_on_the_pool)
{
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 4), 0);
    struct setup s;
    setup_open(&s, pool, owner_mod4);
    for (int i = 1; i < MEMBERS; i++)
        s.peer[i].delay_ms = 200;
    static uint8_t a[4000];
    double start = larder__now_ms();
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    double took = larder__now_ms() - start;
    CHECK(right_bytes(a, 0, sizeof a));
    /* three owners of 200 ms each, at once: well under 600 ms */
    if (took >= 450) fprintf(stderr, "    took %.0f ms\n", took);
    CHECK(took < 450);
    CHECK(!pthread_equal(s.peer[1].thread, s.peer[2].thread) ||
          !pthread_equal(s.peer[2].thread, s.peer[3].thread));
    /* one after another without a pool: the control */
    larder__source_close(s.stripe);
    setup_open(&s, NULL, owner_mod4);
    for (int i = 1; i < MEMBERS; i++)
        s.peer[i].delay_ms = 200;
    start = larder__now_ms();
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK(larder__now_ms() - start >= 590);
    larder__source_close(s.stripe);
    larder__pool_free(pool);
}

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t open;
    bool opened;
};

static void blocker(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->opened)
        pthread_cond_wait(&g->open, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

TEST(source_stripe_never_waits_on_a_busy_pool)
{
    /* the pool's one worker is busy until the read is done: the caller runs every group */
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 1), 0);
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    CHECK_EQ(larder__pool_submit(pool, blocker, &g, LARDER__DEMAND), 0);
    pause_ms(20);
    struct setup s;
    setup_open(&s, pool, owner_mod4);
    static uint8_t a[4000];
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK(pthread_equal(s.peer[1].thread, pthread_self()));
    CHECK(pthread_equal(s.peer[3].thread, pthread_self()));
    pthread_mutex_lock(&g.lock);
    g.opened = true;
    pthread_cond_broadcast(&g.open);
    pthread_mutex_unlock(&g.lock);
    larder__pool_free(pool); /* runs the queued tasks, which find their groups taken */
    larder__source_close(s.stripe);
}

TEST(source_stripe_reads_a_failed_owners_chunks_from_the_origin)
{
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 4), 0);
    struct setup s;
    setup_open(&s, pool, owner_mod4);
    s.peer[2].fail = -EIO;
    static uint8_t a[4000];
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK(has_range(&s.origin, 2000, 1000)); /* peer 2's chunk, after it failed */
    CHECK_EQ(s.peer[2].reads, 1);
    /* left alone for down_ms: not asked again meanwhile */
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK_EQ(s.peer[2].reads, 1);
    CHECK_EQ(s.peer[1].reads, 2);
    /* asked again after it, and it answers */
    s.peer[2].fail = 0;
    pause_ms(350);
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK_EQ(s.peer[2].reads, 2);
    /* a peer that declines unasked (known down) is not marked: asked on the next read */
    s.peer[3].fail = -EHOSTUNREACH;
    int before = s.peer[3].reads;
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK_EQ(s.peer[3].reads, before + 2);
    CHECK(right_bytes(a, 0, sizeof a));
    /* every peer failing: the origin serves it all, FROM_ORIGIN */
    for (int i = 1; i < MEMBERS; i++)
        s.peer[i].fail = -ECONNRESET;
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_ORIGIN);
    CHECK(right_bytes(a, 0, sizeof a));
    /* the origin failing on a worker: the error and its message reach the caller */
    pause_ms(350);
    s.origin.fail = -EIO;
    for (int i = 1; i < MEMBERS; i++)
        s.peer[i].fail = 0;
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), -EIO);
    CHECK(strstr(larder_errmsg(), "fake origin: broken") != NULL);
    larder__source_close(s.stripe);
    larder__pool_free(pool);
}

TEST(source_stripe_refuses_a_bad_config)
{
    struct fake origin;
    fake_init(&origin, "fake origin", LARDER__FROM_ORIGIN);
    struct larder__stripe_config c = {.chunk_size = 0, .owner = owner_mod4};
    struct larder__source *stripe = NULL;
    CHECK_EQ(larder__source_stripe_open(&stripe, &c, &origin.base), LARDER_EUSAGE);
    CHECK(stripe == NULL);
}

/* A borrow_ahead stripe (a daemon's): reads never ask a peer; what was
 * borrowed ahead comes from the loan, the rest from the origin. */
static void setup_open_ahead(struct setup *s, struct larder__pool *pool)
{
    fake_init(&s->origin, "fake origin", LARDER__FROM_ORIGIN);
    struct larder__source *peers[MEMBERS] = {NULL};
    static const char *names[MEMBERS] = {"self", "peer 1", "peer 2", "peer 3"};
    for (int i = 0; i < MEMBERS; i++) {
        fake_init(&s->peer[i], names[i], LARDER__FROM_PEER);
        if (i > 0) peers[i] = &s->peer[i].base;
    }
    struct larder__stripe_config c = {.peers = peers,
                                      .members = MEMBERS,
                                      .shard = 7,
                                      .chunk_size = CHUNK,
                                      .owner = owner_mod4,
                                      .owner_context = &shard_seven,
                                      .pool = pool,
                                      .down_ms = 300,
                                      .borrow_ahead = true};
    CHECK_EQ(larder__source_stripe_open(&s->stripe, &c, &s->origin.base), 0);
}

TEST(source_stripe_borrows_ahead_and_reads_from_the_loan)
{
    struct larder__pool *pool;
    CHECK_EQ(larder__pool_new(&pool, 4), 0);
    struct setup s;
    setup_open_ahead(&s, pool);
    static uint8_t a[4000];
    /* nothing borrowed: everything from the origin, no peer asked */
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_ORIGIN);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK_EQ(s.peer[1].reads + s.peer[2].reads + s.peer[3].reads, 0);
    /* borrow [500, 3500): peers 1, 2, 3 asked at once for their pieces, not this node's */
    struct larder__stripe_loan *loan;
    CHECK_EQ(larder__source_stripe_borrow(s.stripe, 500, 3000, 0, &loan), 0);
    CHECK(loan != NULL);
    CHECK(has_range(&s.peer[1], 1000, 1000) && has_range(&s.peer[2], 2000, 1000) &&
          has_range(&s.peer[3], 3000, 500));
    CHECK_EQ(s.origin.reads, 1); /* the read above only */
    /* a read of [0, 4000): the loan's parts from it, the gaps from the origin */
    fake_forget(&s.origin);
    memset(a, 0, sizeof a);
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK_EQ(s.peer[1].reads + s.peer[2].reads + s.peer[3].reads, 3); /* none asked again */
    CHECK(has_range(&s.origin, 0, 1000));                             /* this node's chunk */
    CHECK(has_range(&s.origin, 3500, 500)); /* peer 3's chunk past the loan */
    CHECK_EQ(s.origin.ranges, 2);
    /* which bytes came from peers, as the fill engine asks */
    CHECK_EQ(larder__source_peer_bytes(0, 4000), 2500);
    CHECK_EQ(larder__source_peer_bytes(0, 1000), 0);
    CHECK_EQ(larder__source_peer_bytes(1000, 1000), 1000);
    CHECK_EQ(larder__source_peer_bytes(3400, 200), 100);
    /* returned: the origin again */
    larder__source_stripe_return(s.stripe, loan);
    fake_forget(&s.origin);
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_ORIGIN);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK_EQ(s.origin.reads, 1); /* no loan: one read of the origin, as asked */
    /* another source's FROM_PEER reads on this thread are all the peer's again */
    CHECK_EQ(larder__source_read(&s.peer[1].base, a, 10, 0, 0), LARDER__FROM_PEER);
    CHECK_EQ(larder__source_peer_bytes(0, 10), 10);
    larder__source_close(s.stripe);
    larder__pool_free(pool);
}

TEST(source_stripe_borrows_into_the_callers_buffer)
{
    struct setup s;
    setup_open_ahead(&s, NULL);
    static uint8_t span[3000], a[4000];
    struct larder__stripe_loan *loan = NULL;
    CHECK_EQ(larder__source_stripe_borrow_into(s.stripe, 500, 3000, 0, NULL, &loan), -EINVAL);
    CHECK(loan == NULL);
    /* [500, 3500) into span: each peer's piece at its place, this node's left alone */
    memset(span, 0xEE, sizeof span);
    CHECK_EQ(larder__source_stripe_borrow_into(s.stripe, 500, 3000, 0, span, &loan), 0);
    CHECK(loan != NULL);
    CHECK(right_bytes(span + 500, 1000, 2500));
    for (size_t i = 0; i < 500; i++)
        CHECK(span[i] == 0xEE);
    CHECK_EQ(s.origin.reads, 0);
    /* the fill's read into that same span: only this node's bytes come in
     * (from the origin), the peers' are where they belong */
    CHECK_EQ(larder__source_read(s.stripe, span, sizeof span, 500, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(span, 500, sizeof span));
    CHECK(has_range(&s.origin, 500, 500));
    CHECK_EQ(s.origin.ranges, 1);
    CHECK_EQ(larder__source_peer_bytes(500, 3000), 2500);
    /* another buffer: copied from the loan, the rest from the origin */
    fake_forget(&s.origin);
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK_EQ(s.peer[1].reads + s.peer[2].reads + s.peer[3].reads, 3); /* none asked again */
    larder__source_stripe_return(s.stripe, loan);                     /* owns no bytes */
    larder__source_close(s.stripe);
}

TEST(source_stripe_borrow_leaves_out_a_failed_owner)
{
    struct setup s;
    setup_open_ahead(&s, NULL);
    s.peer[2].fail = -ECONNRESET;
    struct larder__stripe_loan *loan, *none;
    CHECK_EQ(larder__source_stripe_borrow(s.stripe, 0, 4000, 0, &loan), 0);
    CHECK(loan != NULL);
    CHECK_EQ(s.peer[2].reads, 1);
    static uint8_t a[4000];
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK(has_range(&s.origin, 2000, 1000)); /* peer 2's chunk, from the origin */
    CHECK_EQ(larder__source_peer_bytes(0, 4000), 2000);
    /* peer 2 is left alone: a second borrow does not ask it */
    CHECK_EQ(larder__source_stripe_borrow(s.stripe, 0, 4000, 0, &none), 0);
    CHECK_EQ(s.peer[2].reads, 1);
    larder__source_stripe_return(s.stripe, none);
    /* only this node's chunks: nothing to borrow */
    CHECK_EQ(larder__source_stripe_borrow(s.stripe, 4000, 1000, 0, &none), 0);
    CHECK(none == NULL);
    /* not a stripe: nothing */
    CHECK_EQ(larder__source_stripe_borrow(&s.origin.base, 0, 10, 0, &none), 0);
    CHECK(none == NULL);
    larder__source_close(s.stripe); /* frees the loan not returned */
}

TEST(source_stripe_overlapping_loans_count_once)
{
    struct setup s;
    setup_open_ahead(&s, NULL);
    struct larder__stripe_loan *one, *two;
    CHECK_EQ(larder__source_stripe_borrow(s.stripe, 1000, 1500, 0, &one), 0);
    CHECK_EQ(larder__source_stripe_borrow(s.stripe, 1200, 1000, 0, &two), 0);
    static uint8_t a[2000];
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 1000, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 1000, sizeof a));
    /* [1000, 2500) lent (twice over in part), [2500, 3000) from the origin */
    CHECK_EQ(larder__source_peer_bytes(1000, 2000), 1500);
    CHECK(has_range(&s.origin, 2500, 500));
    CHECK_EQ(s.origin.ranges, 1);
    larder__source_stripe_return(s.stripe, two);
    larder__source_stripe_return(s.stripe, one);
    larder__source_close(s.stripe);
}

/* Peers opened on first use (a daemon's way: members x shards of them are too many ahead). */
struct lazy {
    struct setup *setup;
    int opened[MEMBERS];
    bool fail_once; /* member 3's first open fails */
};

static int open_lazily(void *context, size_t member, uint32_t shard, struct larder__source **out)
{
    struct lazy *z = context;
    CHECK_EQ(shard, 7);
    *out = NULL;
    if (member == 0) return 0; /* this node: none */
    if (member == 3 && z->fail_once) {
        z->fail_once = false;
        return -ENOMEM;
    }
    __atomic_add_fetch(&z->opened[member], 1, __ATOMIC_SEQ_CST);
    *out = &z->setup->peer[member].base;
    return 0;
}

TEST(source_stripe_opens_peers_on_first_use)
{
    struct setup s;
    struct lazy z = {.setup = &s, .fail_once = true};
    fake_init(&s.origin, "fake origin", LARDER__FROM_ORIGIN);
    for (int i = 0; i < MEMBERS; i++)
        fake_init(&s.peer[i], "peer", LARDER__FROM_PEER);
    struct larder__stripe_config c = {.open_peer = open_lazily,
                                      .peer_context = &z,
                                      .members = MEMBERS,
                                      .shard = 7,
                                      .chunk_size = CHUNK,
                                      .owner = owner_mod4,
                                      .owner_context = &shard_seven,
                                      .down_ms = 300};
    CHECK_EQ(larder__source_stripe_open(&s.stripe, &c, &s.origin.base), 0);
    CHECK_EQ(z.opened[1] + z.opened[2] + z.opened[3], 0); /* nothing opened ahead */
    static uint8_t a[3000];
    /* chunks 0-2: members 1 and 2 opened; member 3 not needed yet */
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 0, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 0, sizeof a));
    CHECK(z.opened[1] == 1 && z.opened[2] == 1 && z.opened[3] == 0);
    /* chunk 3: member 3's open fails once (its chunk from the origin), then works */
    CHECK_EQ(larder__source_read(s.stripe, a, 1000, 3000, 0), LARDER__FROM_ORIGIN);
    CHECK(right_bytes(a, 3000, 1000));
    CHECK_EQ(larder__source_read(s.stripe, a, 1000, 3000, 0), LARDER__FROM_PEER);
    CHECK_EQ(z.opened[3], 1);
    /* read again: no peer opened twice */
    CHECK_EQ(larder__source_read(s.stripe, a, sizeof a, 4000, 0), LARDER__FROM_PEER);
    CHECK(right_bytes(a, 4000, sizeof a));
    CHECK(z.opened[1] == 1 && z.opened[2] == 1 && z.opened[3] == 1);
    larder__source_close(s.stripe);
}
