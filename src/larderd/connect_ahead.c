/*
 * connect_ahead.c - peer connections made before the first READ needs them
 * (docs/protocol.md, "Peer connections").  A peer connection costs a
 * dial, the handshake with its proofs, and an OPEN of the dataset on the
 * member, which, for an index the member has not opened yet, fetches and
 * validates it there: tens of milliseconds on loopback, more on a loaded
 * node.  Made by a reader's first borrow toward each member, that cost
 * was a whole step's wait at the start of every epoch after a restart.
 *
 * So when this daemon opens a new index, in two phases, both on the open
 * pool at NEAR (never on the loop thread, never blocking the OPENED
 * answer, never holding d->lock while they connect):
 *   - early, while this daemon fetches and checks the index itself: one
 *     connection to each member on a temporary endpoint, closed after,
 *     so that the members open the index at the same time as this daemon
 *     rather than after it;
 *   - once the entry is placed: LARDERD_CONNECT_AHEAD connections (default
 *     2; 0 turns both phases off) of the DEMAND and NEAR group into each
 *     member endpoint's pool (larder__endpoint_prepare), which the first
 *     READs take.  The job holds the entry (its holders) while it runs.
 * A member that is down or slow costs a worker of the open pool for its
 * connect timeout and a debug line, and nothing else: it is not marked
 * down here, so a READ toward it fails, is marked and logged as ever
 * (source_stripe.c: "skipped for ... ms").  Over UCX the UCX path is made ahead first
 * (larder__ucx_peer_prepare), then the TCP connections, for READs that
 * fall back to TCP.
 */
#include "larderd.h"
#include "endpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AHEAD_DEFAULT 2
#define AHEAD_MAX 16
#define AHEAD_TIMEOUT_MS 5000 /* a member endpoint's own (opens.c, connect_members) */

/* LARDERD_CONNECT_AHEAD: the connections per member made ahead (0: none). */
static int ahead_count(void)
{
    const char *text = getenv("LARDERD_CONNECT_AHEAD");
    char *end;
    long value = text ? strtol(text, &end, 10) : -1;
    if (!text || *text == '\0' || *end != '\0' || value < 0) return AHEAD_DEFAULT;
    return value > AHEAD_MAX ? AHEAD_MAX : (int)value;
}

struct ahead_job {
    struct larderd *d;
    struct dataset_entry *entry;     /* late: held (its holders) until the job ends */
    struct larder__endpoint *own;    /* early: a temporary endpoint, freed at the end */
    struct larder__endpoint *target; /* the endpoint connected */
    int count;
};

static void ahead_job(void *arg)
{
    struct ahead_job *job = arg;
    struct larderd *d = job->d;
    if (!d->stopping) {
        int rc = larder__endpoint_prepare(job->target, job->count);
        if (rc > 0 && job->entry) __atomic_add_fetch(&d->connected_ahead, rc, __ATOMIC_RELAXED);
        if (rc < 0)
            larder__log(LARDER_LOG_DEBUG, "connecting ahead to %s: %s",
                        larder__endpoint_address(job->target), larder_errmsg());
    }
    if (job->entry) __atomic_sub_fetch(&job->entry->holders, 1, __ATOMIC_RELEASE);
    larder__endpoint_free(job->own);
    free(job);
}

/* Queue one job; false (nothing queued) when out of memory or stopping. */
static bool submit(struct larderd *d, struct ahead_job *job)
{
    if (d->open_pool && larder__pool_submit(d->open_pool, ahead_job, job, LARDER__NEAR) == 0)
        return true;
    larder__endpoint_free(job->own);
    free(job);
    return false;
}

/* Whether there are members to connect to ahead at all. */
static bool wanted(const struct larderd *d)
{
    return d->members.count > 1 && d->self < d->members.count && !d->stopping && ahead_count() > 0;
}

void connect_ahead_url(struct larderd *d, const char *url)
{
    if (!wanted(d)) return;
    for (size_t m = 0; m < d->members.count; m++) {
        if (m == d->self) continue;
        struct ahead_job *job = calloc(1, sizeof *job);
        if (!job) return;
        job->d = d, job->count = 1;
        if (larder__endpoint_new(&job->own, d->members.names[m], LARDER__ROLE_PEER, d->secret, url,
                                 AHEAD_TIMEOUT_MS) < 0) {
            free(job);
            return;
        }
        job->target = job->own;
        if (!submit(d, job)) return;
    }
}

void connect_ahead_entry(struct larderd *d, struct dataset_entry *e)
{
    if (!e->members || !wanted(d)) return;
    int count = ahead_count();
    for (size_t m = 0; m < d->members.count; m++) {
        if (m == d->self || !e->members[m]) continue;
        struct ahead_job *job = calloc(1, sizeof *job);
        if (!job) return;
        *job = (struct ahead_job){.d = d, .entry = e, .target = e->members[m], .count = count};
        __atomic_add_fetch(&e->holders, 1, __ATOMIC_ACQ_REL); /* under d->lock: see holders */
        if (!submit(d, job)) {
            __atomic_sub_fetch(&e->holders, 1, __ATOMIC_RELEASE);
            return;
        }
    }
}
