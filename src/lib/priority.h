/*
 * priority.h - the four classes every fetch carries (DESIGN.md,
 * "Priority"), highest first:
 *
 *   DEMAND  a reader is blocked on it;
 *   NEAR    the plan needs it within the prefetch window;
 *   HINTED  hints and replication (hot files, a publication's readers);
 *   WARM    background staging of the shards a node owns.
 *
 * A higher class never waits behind a lower one: the pool (pool.h) takes
 * the highest class first and keeps slots that lower classes may not
 * fill, a source reads with the class in its flags (source.h), a peer is
 * asked with it in the READ frame (docs/protocol.md) and the daemon
 * queues, runs and answers by it.  The numbers are the wire's.
 */
#ifndef LARDER_PRIORITY_H
#define LARDER_PRIORITY_H

enum larder__priority {
    LARDER__DEMAND = 0,
    LARDER__NEAR = 1,
    LARDER__HINTED = 2,
    LARDER__WARM = 3,
    LARDER__CLASSES = 4,
};

/* The class's name for messages and metrics ("demand", ...; "?" out of range). */
static inline const char *larder__priority_name(int priority)
{
    static const char *const names[LARDER__CLASSES] = {"demand", "near", "hinted", "warm"};
    return priority >= 0 && priority < LARDER__CLASSES ? names[priority] : "?";
}

/*
 * Of `limit` slots (workers, requests in flight), how many a class and
 * every class below it may hold together: all of them for DEMAND, 3/4
 * for NEAR, 1/2 for HINTED, 1/4 for WARM, and at least one, so that each
 * class makes progress.  So a quarter of the slots is always kept for
 * each class above (with limit >= 4), and a DEMAND fetch starts at once
 * however much lower-class work is running or queued.
 */
static inline int larder__priority_limit(int limit, int priority)
{
    if (priority <= LARDER__DEMAND || limit <= 1) return limit;
    int share = priority >= LARDER__WARM ? 1 : LARDER__WARM + 1 - priority; /* quarters */
    int n = (int)((long long)limit * share / 4);
    return n > 0 ? n : 1;
}

#endif
