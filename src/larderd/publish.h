/*
 * publish.h - what the two halves of the daemon's names share: the
 * requests (publish.c), the registry and the sweep (publish_registry.c) and the jobs on the pool
 * (publish_jobs.c: announcing a publication, learning one from a peer;
 * also the registry as JSON, and a publication opened by name for a
 * hint).  See publish.c for the whole.
 */
#ifndef LARDERD_PUBLISH_H
#define LARDERD_PUBLISH_H

#include "larderd.h"

#define MAX_PUBLICATIONS 4096         /* names a daemon keeps: a peer's flood is refused past it */
#define MAX_WAITERS 4096              /* RESOLVEs parked at once */
#define MAX_WAITERS_PER_CONNECTION 16 /* ... of them from one connection */
#define PEER_TIMEOUT_MS 5000          /* a member asked or told about a name */
#define NAME_CAPACITY (LARDER__WIRE_MAX_PUBLICATION + 1)
#define NAME_WORKERS 4              /* the registry's own workers: announcing, learning */
#define ANNOUNCE_TRIES 6            /* an announcement to a member, at most (5 pauses: 15.5 s) */
#define ANNOUNCE_FIRST_PAUSE_MS 500 /* before the second try; doubled for each one after */
#define MAX_RETIRED 256             /* replaced publications remembered (publish_retire.c) */
#define CLOSE_EVERY_MS 200          /* how often the sweep looks for replaced datasets to close */
/* a name unknown here while a RESOLVE waits for it: its members are asked again this often */
#define REASK_MS 1000
#define MAX_REASKS 16 /* names asked again in one sweep, at most */

enum state {
    LEARNING, /* unknown here: its members are being asked */
    FETCHING, /* announced (or published here): its index is being fetched or opened */
    READY,    /* local readers may open `local` */
};

struct publication {
    struct publication *next;
    char name[NAME_CAPACITY];
    enum state state;
    uint64_t id_low, id_high;
    uint64_t generation;    /* publications of the name it replaced (--replace); 0: the first */
    bool mine;              /* produced by this node */
    int64_t publisher_uid;  /* mine: the local client's uid that published it; -1: unknown */
    size_t producer_member; /* the producer's index in members; SIZE_MAX: this node alone */
    char *producer;         /* the producer's member name */
    char *location;         /* the index's path on the producer */
    char *origin;           /* the written-through index, or NULL */
    char *local;            /* what readers here open; NULL until fetched */
    bool replacing;         /* a --replace of it is being opened here: a second is refused */
};

struct waiter {
    struct waiter *next;
    struct connection *connection; /* holds a reference and a job of it */
    uint64_t request;
    uint32_t flags;
    int64_t deadline_ms;
    int64_t asked_ms; /* when its members were last asked for the name */
    char name[NAME_CAPACITY];
};

struct publications {
    pthread_mutex_t lock;
    struct publication *list;
    size_t count;
    struct waiter *waiters;
    size_t num_waiters;
    char *allowed; /* the cache's published/, added to --allow's prefixes when given; or NULL */
    struct larder__pool *jobs;   /* NAME_WORKERS workers for the name jobs: never the READ pool */
    struct name_job *retries;    /* announcements to try again (announce_due) */
    struct publication *retired; /* replaced here, newest first (publish_retire.c) */
    int64_t closed_ms;           /* when the sweep last closed replaced datasets */
    int opening;                 /* name jobs between opening a dataset and their last use of it */
};

/* A publication to announce or learn, copied for a job. */
struct name_job {
    struct name_job *next; /* on r->retries */
    struct larderd *d;
    char name[NAME_CAPACITY];
    uint64_t id_low, id_high; /* announced (learn: expected when `announced`) */
    uint64_t generation;      /* announced: the publication's generation */
    bool announced;
    size_t producer_member; /* whom to ask first; SIZE_MAX: every member */
    size_t target;          /* announce_job: the one member told */
    int attempts;           /* announce_job: tries that failed so far */
    int64_t due_ms;         /* on r->retries: when to try again */
    char *producer, *location, *origin;
};

/* publish_registry.c; find, forget, add, answer_waiters and send_publication with the
 * registry lock held */
/* d's registry, made on first use (see publish.c); NULL when out of memory. */
struct publications *registry(struct larderd *d);
struct publication *find(struct publications *r, const char *name, size_t length);
void forget(struct publications *r, struct publication *p);
struct publication *add(struct publications *r, const char *name, size_t length);
size_t member_named(const struct larderd *d, const char *name, size_t length);
void answer_waiters(struct publications *r, const struct publication *p);
/* Queue RESOLVED(p) to c (to a peer: the producer's path, and the index's bytes when
 * flags ask and there is no origin; to a local reader: what it opens here), or an ERROR. */
void send_publication(struct connection *c, uint64_t request, uint32_t flags,
                      const struct publication *p);

/* Free a publication (NULL-safe) that is on no list. */
void publication_free(struct publication *p);

/* publish_retire.c; publication_retire and find_retired with the registry lock held */
/* p is being replaced (READY, or FETCHING: opened or being opened here):
 * remember its id, so that its dataset is closed once no one uses it, and
 * where readers here open it when READY. */
void publication_retire(struct publications *r, const struct publication *p);
/* e was opened here for `name` and found to be another dataset than the
 * one announced: remember its id as replaced (no place to reopen it at),
 * so that the sweep closes it once no one uses it. */
void retire_opened(struct publications *r, const char *name, const struct dataset_entry *e);
/* The replaced publication whose index is at `local` here, or NULL. */
struct publication *find_retired(struct publications *r, const char *local);
/* From the sweep (loop thread): close the replaced publications' datasets
 * that no one uses, every CLOSE_EVERY_MS at most. */
void publications_close_replaced(struct larderd *d, int64_t now);

/* publish_jobs.c */
/* Queue the registry as JSON to c (RESOLVE with LARDER__RESOLVE_LIST), in a STATS frame:
 * to a peer the producers' paths, to a local client what it opens here. */
void send_names(struct connection *c, uint64_t request, struct publications *r);
/* The dataset id the index file at path claims (its bytes 16-31): false when unreadable. */
bool claimed_id(const char *path, uint64_t *low, uint64_t *high);
/* A whole index file (at most LARDER__WIRE_MAX_INDEX bytes) into a malloc'd buffer: 0, or a
 * negative code with a message. */
int read_file(const char *path, uint8_t **out, uint32_t *length);
/* Add this node's own publications of before a restart (the cache's
 * published/mine, whose index files still claim the same dataset) to r, READY. */
void publications_load(struct larderd *d, struct publications *r);
/* With --allow, the cache's published/ directory (made) is allowed too: the
 * daemon opens the indexes it keeps there.  Call with d->lock held or on
 * the loop thread before any job (config.allow is read under d->lock). */
void publications_allow(struct larderd *d, struct publications *r);
/* Append the publication `name` (this node's own, READY) to published/mine. */
void publication_remember(struct larderd *d, const char *name);
struct name_job *name_job_new(struct larderd *d, const char *name, size_t length);
void name_job_free(struct name_job *job);
/* Submit a job to the pool at background priority (freed when it cannot be): whether it was. */
bool submit(struct larderd *d, void (*run)(void *), struct name_job *job);
/* One announce_job per other member (a member that hangs delays no other),
 * copies of `job`, which is freed. */
void announce_all(struct larderd *d, struct name_job *job);
/* Tell member job->target of a publication (job: its fields); a failure is
 * tried again later (announce_later), ANNOUNCE_TRIES times at most. */
void announce_job(void *job);
/* Keep job (which failed) on r->retries for its next try, after a pause. */
void announce_later(struct larderd *d, struct name_job *job);
/* From the sweep: submit the retries whose time has come (dropped when the
 * name has moved on to another publication here, or stopping). */
void announce_due(struct larderd *d, int64_t now);
/* Learn job->name from its producer (announced) or any member that knows it. */
void learn_job(void *job);

#endif
