/*
 * transport_ucx_lanes.c - a borrower's lanes: more hubs (UCP workers, each
 * with its progress thread) in one process, so that a peer's answers are
 * received by more than one thread at once (transport_ucx.h,
 * larder__ucx_lane).
 *
 * A worker is driven by one thread, and a large answer's bytes are copied
 * into the reader's buffer inside that thread's progress: over shared
 * memory (cma, one process_vm_readv per answer) that copy is the whole
 * cost, and one thread copying was the ceiling of a borrower reading a
 * peer (serving over shm: the client's progress thread at 100% of a core
 * in _copy_to_iter, the other core 43% idle; two clients of 4 threads
 * read 7585-8612 MB/s where one of 8 read 5644-6145).  So a borrower's
 * peer paths are made one per lane (transport_ucx_peer.c): each lane
 * offers its own worker's address over a control connection of its own,
 * and the daemon answers it as any other session.  Nothing changes on
 * the daemon's side or in the protocol.
 *
 * Lanes are made at their first use, so that a daemon that never borrows
 * over UCX runs one worker; LARDER_UCX_LANES sets how many (1-8, default
 * 2; 1: the hub alone; a number out of that range is clamped into it, and
 * one that is not a number gives the default, each with a warning, once).  Each lane is a whole hub
 * (its own UCP context too): simple, and a lane's failure to start leaves the others as they are
 * (its READs go over the hub itself).
 */
#include "transport_ucx_internal.h"

#include <errno.h>
#include <stdlib.h>

#ifdef LARDER_HAVE_UCX

#define DEFAULT_LANES 2

int larder__ucx_lanes_config(void)
{
    static bool warned; /* once per process (atomic) */
    const char *want = getenv("LARDER_UCX_LANES");
    if (!want || !*want) return DEFAULT_LANES;
    char *end;
    errno = 0;
    long n = strtol(want, &end, 10);
    int lanes = DEFAULT_LANES;
    if (end == want || *end != '\0') { /* not a number: the default */
    } else if (errno == ERANGE || n > LARDER__UCX_MAX_LANES) {
        lanes = LARDER__UCX_MAX_LANES;
    } else if (n < 1) {
        lanes = 1;
    } else {
        return (int)n;
    }
    if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
        larder__log(LARDER_LOG_WARN, "LARDER_UCX_LANES=%.32s is not 1 to %d: %d lanes", want,
                    LARDER__UCX_MAX_LANES, lanes);
    return lanes;
}

int larder__ucx_lanes(struct larder__ucx *hub)
{
    return hub->num_lanes;
}

struct larder__ucx *larder__ucx_lane(struct larder__ucx *hub, int lane)
{
    if (lane <= 0 || lane >= hub->num_lanes || hub->parent) return hub;
    pthread_mutex_lock(&hub->lanes_lock);
    struct larder__ucx *found = hub->lanes[lane - 1];
    if (!found && !hub->lanes_failed) {
        if (larder__ucx_start(&found) == 0) {
            found->parent = hub;
            hub->lanes[lane - 1] = found;
        } else {
            larder__log(LARDER_LOG_WARN, "UCX: lane %d did not start (%s): reading over fewer",
                        lane, larder_errmsg());
            hub->lanes_failed = true;
            found = NULL;
        }
    }
    pthread_mutex_unlock(&hub->lanes_lock);
    return found ? found : hub;
}

void larder__ucx_lanes_stop(struct larder__ucx *hub)
{
    _Static_assert(sizeof hub->stats % sizeof(uint64_t) == 0, "the counters are uint64_t");
    for (int i = 0; i < LARDER__UCX_MAX_LANES - 1; i++) {
        pthread_mutex_lock(&hub->lanes_lock);
        struct larder__ucx *lane = hub->lanes[i];
        hub->lanes[i] = NULL;
        pthread_mutex_unlock(&hub->lanes_lock);
        if (!lane) continue;
        larder__ucx_stop(lane);
    }
}

void larder__ucx_lanes_add_stats(struct larder__ucx *hub, const struct larder__ucx *lane)
{
    uint64_t *to = (uint64_t *)&hub->stats;
    const uint64_t *from = (const uint64_t *)&lane->stats;
    for (size_t i = 0; i < sizeof hub->stats / sizeof(uint64_t); i++)
        __atomic_add_fetch(&to[i], __atomic_load_n(&from[i], __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

#else /* built without UCX */

int larder__ucx_lanes(struct larder__ucx *hub)
{
    (void)hub;
    return 1;
}

struct larder__ucx *larder__ucx_lane(struct larder__ucx *hub, int lane)
{
    (void)lane;
    return hub;
}

#endif
