/*
 * test_larderd_priority.c - the daemon answers by class (priority.h):
 * READs queued by their class in the worker pool, so a DEMAND READ sent
 * after a queue full of HINTED ones is answered first, on a reader's
 * connection and on a peer's; and a connection's output queue sends a
 * DEMAND answer before HINTED answers queued earlier, never cutting into
 * a frame already begun.  Order is checked, never time.
 */
#include "daemon_fixture.h"
#include "fill.h"
#include "test.h"

#include <pthread.h>

/* A task that holds the daemon's one worker until the test opens the gate. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool holding, open;
};

static void gate_task(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    g->holding = true;
    pthread_cond_broadcast(&g->changed);
    while (!g->open)
        pthread_cond_wait(&g->changed, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

/* Queue a gate at DEMAND on a pool; gate_wait: until a worker holds it. */
static void gate_queue(struct larder__pool *pool, struct gate *g)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    CHECK_EQ(larder__pool_submit(pool, gate_task, g, LARDER__DEMAND), 0);
}

static void gate_wait(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    while (!g->holding)
        pthread_cond_wait(&g->changed, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void gate_close(struct larder__pool *pool, struct gate *g)
{
    gate_queue(pool, g);
    gate_wait(g);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
}

static struct larder__opened open_dataset_on(struct connection *c, const char *url)
{
    uint8_t frame[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_URL];
    int n = larder__wire_encode_open(frame, sizeof frame, 7, url);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
    struct output *o = fixture_answer(c, LARDER__OPENED);
    struct larder__opened opened;
    CHECK_EQ(larder__wire_opened(o->bytes + LARDER__WIRE_HEADER,
                                 (uint32_t)(o->length - LARDER__WIRE_HEADER), &opened),
             0);
    free(o);
    return opened;
}

static void send_read_at(struct connection *c, const struct larder__opened *dataset,
                         uint64_t request, int priority, uint64_t offset)
{
    struct larder__read r = {.id_low = dataset->id_low,
                             .id_high = dataset->id_high,
                             .shard = 0,
                             .priority = (uint8_t)priority,
                             .offset = offset,
                             .length = 500};
    uint8_t frame[LARDER__WIRE_HEADER + 64];
    int n = larder__wire_encode_read(frame, sizeof frame, request, &r);
    CHECK(n > 0);
    CHECK(fixture_send(c, frame, (size_t)n));
}

/* The request id of the next answer on c, a DATA frame. */
static uint64_t next_data(struct connection *c)
{
    struct output *o = fixture_answer(c, LARDER__DATA);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(o->bytes, o->length, &f), 0);
    free(o);
    return f.request;
}

/* Eight HINTED READs wait in the pool behind a held worker; then one DEMAND READ. */
static void demand_overtakes(bool peer)
{
    const char *index = fixture_dataset("ds", 40, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 1);
    struct connection *local = fixture_connection(&d, false);
    fixture_hello(local, false);
    struct larder__opened opened = open_dataset_on(local, index);
    struct connection *c = local;
    if (peer) { /* a peer (no cluster secret) reads what is open on this node */
        c = fixture_connection(&d, true);
        fixture_hello(c, true);
        open_dataset_on(c, index);
    }
    /* a peer's READs run on the peers' own workers (larderd.h, peer_pool) */
    struct larder__pool *pool = peer ? d.peer_pool : d.pool;
    struct gate g;
    gate_close(pool, &g);
    for (uint64_t i = 0; i < 8; i++)
        send_read_at(c, &opened, 10 + i, LARDER__HINTED, i * 4000);
    send_read_at(c, &opened, 99, LARDER__DEMAND, 50000);
    CHECK_EQ(larder__pool_queued(pool, LARDER__HINTED), 8);
    gate_open(&g);
    fixture_wait_jobs(c);
    CHECK_EQ(next_data(c), 99); /* first, though sent last */
    for (uint64_t i = 0; i < 8; i++)
        CHECK_EQ(next_data(c), 10 + i); /* the HINTED ones in their order */
    struct larder__pool_stats stats;
    larder__pool_stats_get(pool, &stats);
    CHECK_EQ(stats.started[LARDER__HINTED], 8);
    CHECK_EQ(stats.started[LARDER__DEMAND], 2); /* the gate and the READ */
    CHECK_EQ(stats.running[LARDER__HINTED] + stats.running[LARDER__DEMAND], 0);

    /* the same counts in STAT's JSON and the Prometheus text */
    uint8_t stat[LARDER__WIRE_HEADER];
    larder__wire_encode_header(stat, sizeof stat, LARDER__STAT, 0, 3);
    CHECK(fixture_send(local, stat, sizeof stat));
    struct output *o = fixture_answer(local, LARDER__STATS);
    char *text = strndup((char *)o->bytes + LARDER__WIRE_HEADER, o->length - LARDER__WIRE_HEADER);
    free(o);
    CHECK(strstr(text, "], \"classes\": {\"demand\": {\"queued\": 2, \"started\": 2, "
                       "\"running\": 0, \"wait_us\": ") != NULL);
    CHECK(strstr(text, "\"hinted\": {\"queued\": 8, \"started\": 8, \"running\": 0, ") != NULL);
    CHECK(strstr(text,
                 "\"warm\": {\"queued\": 0, \"started\": 0, \"running\": 0, "
                 "\"wait_us\": 0, \"wait_max_us\": 0, \"cpu_us\": 0}}, \"transforms\": {") != NULL);
    free(text);
    char metrics[64 * 1024];
    CHECK(metrics_text(&d, metrics, sizeof metrics) > 0);
    CHECK(strstr(metrics, "\nlarder_queue_started_total{class=\"hinted\"} 8\n") != NULL);
    CHECK(strstr(metrics, "\nlarder_queue_submitted_total{class=\"demand\"} 2\n") != NULL);
    CHECK(strstr(metrics, "\nlarder_queue_running{class=\"near\"} 0\n") != NULL);
    CHECK(strstr(metrics, "# TYPE larder_queue_wait_seconds_total counter\n") != NULL);
    if (peer) connection_release(c);
    connection_release(local);
    larderd_free(&d);
}

TEST(larderd_priority_demand_read_overtakes_hinted_reads)
{
    demand_overtakes(false);
}

TEST(larderd_priority_demand_read_overtakes_hinted_reads_from_a_peer)
{
    demand_overtakes(true);
}

/* An output carrying a frame header with this request id, of a class. */
static struct output *answer(uint64_t request, int priority)
{
    struct output *o = output_new(LARDER__WIRE_HEADER + 8);
    CHECK(o != NULL);
    larder__wire_encode_header(o->bytes, LARDER__WIRE_HEADER, LARDER__DATA, 8, request);
    memset(o->bytes + LARDER__WIRE_HEADER, 0, 8);
    o->priority = (uint8_t)priority;
    return o;
}

TEST(larderd_priority_output_queue_sends_by_class)
{
    struct larderd d;
    fixture_daemon(&d, 1);
    struct connection *c = fixture_connection(&d, true);
    enqueue_output(c, answer(1, LARDER__WARM));
    enqueue_output(c, answer(2, LARDER__HINTED));
    enqueue_output(c, answer(3, LARDER__HINTED));
    enqueue_output(c, answer(4, LARDER__DEMAND));
    enqueue_output(c, answer(5, LARDER__NEAR));
    enqueue_output(c, answer(6, LARDER__DEMAND));
    enqueue_output(c, answer(7, LARDER__WARM));
    uint64_t want[] = {4, 6, 5, 2, 3, 1, 7};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK_EQ(next_data(c), want[i]);
    CHECK(connection_take_output(c) == NULL);
    CHECK_EQ(c->charged, 0);

    /* a frame whose first bytes went out is finished first, whatever comes */
    enqueue_output(c, answer(10, LARDER__HINTED));
    enqueue_output(c, answer(11, LARDER__HINTED));
    pthread_mutex_lock(&c->lock);
    c->head->sent = 5; /* as flush() leaves a frame the socket took part of */
    pthread_mutex_unlock(&c->lock);
    enqueue_output(c, answer(12, LARDER__DEMAND));
    uint64_t after[] = {10, 12, 11};
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ(next_data(c), after[i]);
    /* and behind a begun head that is also the tail, a new answer is last */
    enqueue_output(c, answer(20, LARDER__WARM));
    c->head->sent = 1;
    enqueue_output(c, answer(21, LARDER__DEMAND));
    enqueue_output(c, answer(22, LARDER__HINTED));
    uint64_t last[] = {20, 21, 22};
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ(next_data(c), last[i]);
    CHECK(connection_take_output(c) == NULL);
    connection_release(c);
    larderd_free(&d);
}

TEST(larderd_priority_warm_staging_is_warm_and_goes_after_a_read)
{
    const char *index = fixture_dataset("ds", 40, 16 * 1024);
    struct larderd d;
    fixture_daemon(&d, 1);
    struct connection *c = fixture_connection(&d, false);
    fixture_hello(c, false);
    struct larder__opened opened = open_dataset_on(c, index);
    struct gate first, second;
    gate_close(d.pool, &first);
    size_t jobs = warm_owned(&d, &d.datasets[0]);
    CHECK(jobs >= 3);
    CHECK_EQ(larder__pool_queued(d.pool, LARDER__WARM), jobs);
    send_read_at(c, &opened, 99, LARDER__DEMAND, 0);
    /* a second gate queued at DEMAND after the READ: when the one worker
     * holds it, it has run the READ and nothing else */
    gate_queue(d.pool, &second);
    gate_open(&first);
    gate_wait(&second);
    struct larder__pool_stats stats;
    larder__pool_stats_get(d.pool, &stats);
    CHECK_EQ(stats.submitted[LARDER__WARM], jobs);
    CHECK_EQ(stats.started[LARDER__WARM], 0);
    CHECK_EQ(stats.started[LARDER__DEMAND], 3); /* two gates and the READ */
    fixture_wait_jobs(c);
    CHECK_EQ(next_data(c), 99);
    gate_open(&second);
    connection_release(c);
    larderd_free(&d); /* runs the warm jobs */
    larder__pool_stats_get(NULL, &stats);
    CHECK_EQ(stats.started[LARDER__WARM], 0); /* a NULL pool: zeros */
}

/*
 * A peer's READ is never queued behind this node's readers' READs: those
 * may wait on other members (borrowing ahead), and in a restart storm every
 * member's readers wait on the others' answers, so one queue made each
 * member's READs wait behind READs that wait on them (seconds of queue,
 * owners passed over for the origin: docs/scale.md).  With every worker of
 * the readers' pool held, a peer's DEMAND READ is answered, and a reader's
 * waits for the held worker.
 */
TEST(larderd_priority_peer_read_not_queued_behind_local_reads)
{
    const char *index = fixture_dataset("ds", 40, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct connection *local = fixture_connection(&d, false);
    fixture_hello(local, false);
    struct larder__opened opened = open_dataset_on(local, index);
    struct connection *peer = fixture_connection(&d, true);
    fixture_hello(peer, true);
    open_dataset_on(peer, index);
    struct gate a, b; /* both workers of the readers' pool, held */
    gate_close(d.pool, &a);
    gate_close(d.pool, &b);
    send_read_at(local, &opened, 5, LARDER__DEMAND, 0);
    send_read_at(peer, &opened, 6, LARDER__DEMAND, 4000);
    fixture_wait_jobs(peer);
    CHECK_EQ(next_data(peer), 6);
    CHECK_EQ(larder__pool_queued(d.pool, LARDER__DEMAND), 1); /* the reader's, still held */
    gate_open(&a);
    gate_open(&b);
    fixture_wait_jobs(local);
    CHECK_EQ(next_data(local), 5);
    connection_release(peer);
    connection_release(local);
    larderd_free(&d);
}

/* A peer's connection with a READ in flight and nothing sent for 1 s gets a
 * PROGRESS frame (no payload, request 0), then no other for 1 s; a reader's
 * connection, or one with no READ in flight, gets none. */
TEST(larderd_priority_progress_for_a_peer_read_in_hand)
{
    const char *index = fixture_dataset("ds", 40, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 1);
    struct connection *local = fixture_connection(&d, false);
    fixture_hello(local, false);
    struct larder__opened opened = open_dataset_on(local, index);
    struct connection *peer = fixture_connection(&d, true);
    fixture_hello(peer, true);
    open_dataset_on(peer, index);
    struct gate a, b;
    gate_close(d.pool, &a);
    gate_close(d.peer_pool, &b);
    int64_t t = peer->last_active_ms;
    CHECK(!connection_progress(peer, t + 5000)); /* nothing in flight */
    /* a job that is not a READ (a HINT that waits, as hints.c counts one):
     * its caller waits for the HINT's own answer, and gets nothing else */
    pthread_mutex_lock(&peer->lock);
    peer->jobs++;
    pthread_mutex_unlock(&peer->lock);
    CHECK(!connection_progress(peer, t + 5000));
    pthread_mutex_lock(&peer->lock);
    peer->jobs--;
    pthread_mutex_unlock(&peer->lock);
    send_read_at(local, &opened, 5, LARDER__DEMAND, 0);
    send_read_at(peer, &opened, 6, LARDER__DEMAND, 4000);
    t = peer->last_active_ms > local->last_active_ms ? peer->last_active_ms : local->last_active_ms;
    CHECK(!connection_progress(peer, t + 999));
    CHECK(!connection_progress(local, t + 1000));
    CHECK(connection_progress(peer, t + 1000));
    struct output *o = fixture_answer(peer, LARDER__PROGRESS);
    struct larder__frame f;
    CHECK_EQ(larder__wire_header(o->bytes, o->length, &f), 0);
    CHECK_EQ(f.length, 0);
    CHECK_EQ(f.request, 0);
    CHECK_EQ(o->length, LARDER__WIRE_HEADER);
    free(o);
    CHECK(!connection_progress(peer, t + 1999));
    CHECK(connection_progress(peer, t + 2000));
    free(fixture_answer(peer, LARDER__PROGRESS));
    gate_open(&a);
    gate_open(&b);
    fixture_wait_jobs(peer);
    fixture_wait_jobs(local);
    CHECK_EQ(next_data(peer), 6);
    CHECK_EQ(next_data(local), 5);
    CHECK(!connection_progress(peer, t + 10000)); /* answered: nothing in flight */
    connection_release(peer);
    connection_release(local);
    larderd_free(&d);
}

/* A relay's READ (flag CACHED, docs/protocol.md): what the node holds is
 * answered; what it does not is declined (ERROR, not found) without a
 * fill, so a relay never reads the origin for another node. */
TEST(larderd_priority_relay_read_answers_only_from_the_cache)
{
    const char *index = fixture_dataset("ds", 40, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 2);
    struct connection *local = fixture_connection(&d, false);
    fixture_hello(local, false);
    struct larder__opened opened = open_dataset_on(local, index);
    struct connection *peer = fixture_connection(&d, true);
    fixture_hello(peer, true);
    open_dataset_on(peer, index);
    struct larder__read r = {.id_low = opened.id_low,
                             .id_high = opened.id_high,
                             .priority = LARDER__HINTED,
                             .flags = LARDER__READ_CACHED,
                             .offset = 0,
                             .length = 500};
    uint8_t frame[LARDER__WIRE_HEADER + 64];
    int n = larder__wire_encode_read(frame, sizeof frame, 8, &r);
    CHECK(fixture_send(peer, frame, (size_t)n));
    fixture_wait_jobs(peer);
    char message[256];
    CHECK_EQ(fixture_error(peer, message, sizeof message), LARDER_ENOTFOUND);
    CHECK(strstr(message, "not in this node's cache") != NULL);
    uint64_t lo, hi; /* still to be filled: the decline read nothing */
    CHECK_EQ(
        larder__fill_range_scope(larder__dataset_fill(d.datasets[0].dataset), 0, 0, 500, &lo, &hi),
        0);
    send_read_at(local, &opened, 9, LARDER__DEMAND, 0); /* the node stages it */
    fixture_wait_jobs(local);
    CHECK_EQ(next_data(local), 9);
    CHECK(fixture_send(peer, frame, (size_t)n));
    fixture_wait_jobs(peer);
    CHECK_EQ(next_data(peer), 8);
    connection_release(peer);
    connection_release(local);
    larderd_free(&d);
}
