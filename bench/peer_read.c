/*
 * peer_read.c - how fast a daemon serves its peers: read every shard of a
 * dataset from one daemon over TCP as a peer would (HELLO as a peer, OPEN,
 * READs of CHUNK bytes, THREADS requests in flight), discarding the bytes.
 * The daemon must hold the dataset staged (or be its shards' owner).
 *
 *   larder_bench_peer HOST:PORT INDEX SECRET [THREADS] [CHUNK_KB] [PASSES]
 *
 * PASSES (default 1) reads the dataset that many times over, so that a
 * small dataset still moves enough bytes to amortize the path's setup
 * (connection, handshake, UCX's wire-up) as ucx_perftest's ceiling does.
 *
 * With LARDER_BENCH_TRANSPORT=ucx the READs go over UCX (the daemon runs
 * --transport ucx; UCX_TLS chooses UCX's transport), as a UCX peer's do;
 * the transport the READs took is printed on stderr (and, with
 * LARDER_UCX_STATS=1, the UCX hub's counters).
 * LARDER_BENCH_READ_FLAGS=N sends every READ with those wire flags (wire.h;
 * tests/cli/daemon.sh: a peer's STAGE, 2, is refused over either transport).
 * Prints bytes and MB/s.  bench/peer.sh compares it with a plain TCP copy.
 */
#include "larder.h"

#include "endpoint.h"
#include "transport_ucx.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct larder__endpoint *endpoint;
static uint64_t id_low, id_high, chunk;
static unsigned read_flags; /* LARDER_BENCH_READ_FLAGS */
static uint64_t *shard_sizes;
static uint32_t num_shards;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_shard;
static int passes_left = 1;
static uint64_t next_offset, total;
static int failures;
static uint64_t slowest_us, over_50ms; /* the slowest READ, and READs over 50 ms (stalls) */

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* The library's warnings (UCX's among them, and LARDER_UCX_STATS's counters) on stderr. */
static void log_line(void *userdata, int level, const char *message)
{
    (void)userdata, (void)level;
    fprintf(stderr, "%s\n", message);
}

static void *reader(void *arg)
{
    (void)arg;
    uint8_t *buf = malloc(chunk);
    for (;;) {
        pthread_mutex_lock(&lock);
        while (next_shard < num_shards && next_offset >= shard_sizes[next_shard])
            next_shard++, next_offset = 0;
        if (next_shard >= num_shards && --passes_left > 0) { /* the next pass */
            next_shard = 0, next_offset = 0;
            while (next_shard < num_shards && next_offset >= shard_sizes[next_shard])
                next_shard++;
        }
        if (next_shard >= num_shards) {
            pthread_mutex_unlock(&lock);
            break;
        }
        uint32_t shard = next_shard;
        uint64_t offset = next_offset, length = shard_sizes[shard] - offset;
        if (length > chunk) length = chunk;
        next_offset += length;
        pthread_mutex_unlock(&lock);
        uint64_t started = now_us();
        int rc = larder__endpoint_read_flagged(endpoint, id_low, id_high, shard, 0, read_flags,
                                               offset, length, buf);
        uint64_t took = now_us() - started;
        pthread_mutex_lock(&lock);
        if (took > slowest_us) slowest_us = took;
        if (took > 50000) over_50ms++;
        pthread_mutex_unlock(&lock);
        if (rc < 0) {
            fprintf(stderr, "read: %s\n", larder_errmsg());
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
            break;
        }
        __atomic_fetch_add(&total, length, __ATOMIC_RELAXED);
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s HOST:PORT INDEX SECRET [THREADS] [CHUNK_KB]\n", argv[0]);
        return 2;
    }
    larder_set_log(log_line, NULL, LARDER_LOG_WARN);
    int threads = argc > 4 ? atoi(argv[4]) : 8;
    chunk = (uint64_t)(argc > 5 ? atoi(argv[5]) : 1024) * 1024;
    passes_left = argc > 6 && atoi(argv[6]) > 0 ? atoi(argv[6]) : 1;
    const char *flags = getenv("LARDER_BENCH_READ_FLAGS");
    read_flags = flags ? (unsigned)strtoul(flags, NULL, 0) : 0;
    larder_dataset *d;
    if (larder_open(&d, argv[2], NULL) < 0) {
        fprintf(stderr, "%s\n", larder_errmsg());
        return 1;
    }
    larder_dataset_info info;
    larder_dataset_info_get(d, &info);
    num_shards = (uint32_t)info.num_shards;
    shard_sizes = calloc(num_shards, sizeof *shard_sizes);
    /* shard sizes: the end of each shard's last sample is enough to read */
    for (uint64_t i = 0; i < info.num_samples; i++) {
        larder_sample_info s;
        larder_sample_info_get(d, i, &s);
        if (s.offset + s.length > shard_sizes[s.shard]) shard_sizes[s.shard] = s.offset + s.length;
    }
    char hex[17];
    memcpy(hex, info.dataset_id + 16, 16), hex[16] = 0;
    id_low = strtoull(hex, NULL, 16);
    memcpy(hex, info.dataset_id, 16), hex[16] = 0;
    id_high = strtoull(hex, NULL, 16);
    char absolute[4096];
    if (!realpath(argv[2], absolute)) return 1;
    if (larder__endpoint_new(&endpoint, argv[1], LARDER__ROLE_PEER, argv[3], absolute, 30000) < 0)
        return 1;
    struct larder__ucx *hub = NULL;
    const char *transport = getenv("LARDER_BENCH_TRANSPORT");
    if (transport && strcmp(transport, "ucx") == 0) {
        if (larder__ucx_start(&hub) < 0 || larder__endpoint_use_ucx(endpoint, hub) < 0) {
            fprintf(stderr, "UCX: %s\n", larder_errmsg());
            return 77;
        }
    }
    pthread_t t[256];
    if (threads > 256) threads = 256;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, reader, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%llu %.1f\n", (unsigned long long)total, (double)total / seconds / 1e6);
    fprintf(stderr, "slowest READ: %.1f ms; READs over 50 ms: %llu\n", (double)slowest_us / 1000,
            (unsigned long long)over_50ms);
    fprintf(stderr, "transport: %s\n", larder__endpoint_transport(endpoint));
    larder__endpoint_free(endpoint);
    larder__ucx_stop(hub);
    larder_close(d);
    free(shard_sizes);
    return failures ? 1 : 0;
}
