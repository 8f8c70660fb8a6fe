/*
 * borrow_read.c - a reader that reads only what its node borrows
 * (bench/peer.sh, bench/peer_borrow_ab.sh; issue 16).
 *
 *   larder_bench_borrow_read INDEX CACHE MEMBERS SELF [IN_FLIGHT]
 *
 * Reads, as `larder warm INDEX --cache CACHE` does with LARDER_SOCKET set
 * (the public API: a resident sample is read from the cache file and
 * checked, a miss is staged by the node's daemon first), only the samples
 * whose bytes all lie in chunks that another member than SELF owns
 * (MEMBERS as larderd's --peers, SELF this node's name in it; the owners
 * are cluster.h's, the daemons'), so that every byte read was borrowed
 * from a peer.  `larder warm` reads the samples of the chunks its node
 * owns too, from the origin or already staged, which is not borrowing.
 * Two lanes, each reading batches of IN_FLIGHT / 2 (default 64 in all)
 * samples in id order into buffers it keeps, as `larder warm` does.
 * Prints "SAMPLES BYTES SECONDS"; exits 1 if any read failed.
 */
#include "larder.h"

#include "cluster.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static larder_dataset *dataset;
static uint64_t *chosen, num_chosen; /* the samples to read, in id order */
static size_t batch;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next, total;
static int failures;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *lane(void *arg)
{
    (void)arg;
    uint64_t *ids = calloc(batch, sizeof *ids);
    void **bufs = calloc(batch, sizeof *bufs);
    size_t *caps = calloc(batch, sizeof *caps);
    int64_t *results = calloc(batch, sizeof *results);
    if (!ids || !bufs || !caps || !results) {
        fprintf(stderr, "borrow_read: out of memory\n");
        exit(1);
    }
    pthread_mutex_lock(&lock);
    while (next < num_chosen) {
        size_t n = num_chosen - next < batch ? (size_t)(num_chosen - next) : batch;
        memcpy(ids, chosen + next, n * sizeof *ids);
        next += n;
        pthread_mutex_unlock(&lock);
        for (size_t i = 0; i < n; i++) {
            larder_sample_info s;
            if (larder_sample_info_get(dataset, ids[i], &s) == 0 && s.length > caps[i]) {
                free(bufs[i]);
                bufs[i] = malloc(s.length ? s.length : 1);
                caps[i] = bufs[i] ? s.length : 0;
            }
        }
        larder_read_samples(dataset, ids, n, bufs, caps, results);
        pthread_mutex_lock(&lock);
        for (size_t i = 0; i < n; i++) {
            if (results[i] >= 0) {
                total += (uint64_t)results[i];
            } else {
                fprintf(stderr, "borrow_read: sample %llu: %s\n", (unsigned long long)ids[i],
                        larder_strerror((int)results[i]));
                failures++;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < batch; i++)
        free(bufs[i]);
    free(ids), free(bufs), free(caps), free(results);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: %s INDEX CACHE MEMBERS SELF [IN_FLIGHT]\n", argv[0]);
        return 2;
    }
    int in_flight = argc > 5 ? atoi(argv[5]) : 64;
    if (in_flight < 2 || in_flight > 1024) {
        fprintf(stderr, "borrow_read: IN_FLIGHT must be 2-1024\n");
        return 2;
    }
    batch = (size_t)in_flight / 2;
    struct larder__members members = {0};
    if (larder__members_parse_list(&members, argv[3], LARDER__DEFAULT_PORT) < 0) {
        fprintf(stderr, "borrow_read: members: %s\n", larder_errmsg());
        larder__members_clear(&members);
        return 2;
    }
    size_t self = SIZE_MAX;
    for (size_t m = 0; m < members.count; m++)
        if (strcmp(members.names[m], argv[4]) == 0) self = m;
    if (self == SIZE_MAX) {
        fprintf(stderr, "borrow_read: %s is not among the members\n", argv[4]);
        larder__members_clear(&members);
        return 2;
    }
    larder_open_options o = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .max_inflight = in_flight, .cache_dir = argv[2]};
    if (larder_open(&dataset, argv[1], &o) != 0) {
        fprintf(stderr, "borrow_read: %s: %s\n", argv[1], larder_errmsg());
        larder__members_clear(&members);
        return 1;
    }
    larder_dataset_info info;
    larder_dataset_info_get(dataset, &info);
    /* the dataset id's 32 hex digits: the high half first (as a READ names it) */
    char hex[17];
    memcpy(hex, info.dataset_id + 16, 16), hex[16] = 0;
    uint64_t id_low = strtoull(hex, NULL, 16);
    memcpy(hex, info.dataset_id, 16), hex[16] = 0;
    uint64_t id_high = strtoull(hex, NULL, 16);
    chosen = malloc((info.num_samples ? info.num_samples : 1) * sizeof *chosen);
    if (!chosen) return 1;
    for (uint64_t id = 0; id < info.num_samples; id++) {
        larder_sample_info s;
        if (larder_sample_info_get(dataset, id, &s) != 0 || s.length == 0) continue;
        bool borrowed = true;
        uint64_t last = (s.offset + s.length - 1) / LARDER__OWNER_CHUNK;
        for (uint64_t c = s.offset / LARDER__OWNER_CHUNK; c <= last && borrowed; c++)
            borrowed = larder__owner_chunk(&members, id_low, id_high, s.shard, c) != self;
        if (borrowed) chosen[num_chosen++] = id;
    }
    double start = now();
    pthread_t t[2];
    int running = 0;
    while (running < 2 && pthread_create(&t[running], NULL, lane, NULL) == 0)
        running++;
    if (running == 0) lane(NULL);
    for (int i = 0; i < running; i++)
        pthread_join(t[i], NULL);
    printf("%llu %llu %.3f\n", (unsigned long long)num_chosen, (unsigned long long)total,
           now() - start);
    larder_close(dataset);
    larder__members_clear(&members);
    free(chosen);
    return failures ? 1 : 0;
}
