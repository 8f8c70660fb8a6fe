/*
 * opens.c - OPEN (docs/protocol.md "OPEN and OPENED"): who may open what,
 * a dataset open here already answered on the loop thread, a new index
 * opened on the open pool (larderd.h, open_pool) while the loop serves
 * everyone else, and the connection's next frames held back until then.
 */
#include "larderd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * Whether this connection may open an index not yet open here (the
 * library still holds it to the --allow prefixes).  1: yes; 0: only
 * datasets already open; a negative code with a message: no OPEN at all.
 */
int may_open(const struct connection *c)
{
    if (c->peer) return c->proven ? 1 : 0;
    if (c->daemon->config.num_allow || c->own_user) return 1;
    return larder__fail(LARDER_EDENIED,
                        "uid %u may not open indexes on this daemon: its admin allows other users "
                        "only under prefixes given with larderd --allow PREFIX",
                        (unsigned)c->uid);
}

unsigned open_how(const struct connection *c, int allowed)
{
    return (allowed == 1 ? OPEN_NEW : 0) | (!c->peer && c->own_user ? OPEN_UNCHECKED : 0);
}

/* OPEN's answer on c: OPENED with the dataset's id and shards, or an ERROR. */
static void answer_open(struct connection *c, uint64_t request, int rc,
                        const struct dataset_entry *e, const char *url)
{
    if (rc < 0) {
        if (rc == LARDER_EDENIED) say("OPEN of %s refused: %s", url, larder_errmsg());
        send_error(c, request, rc, larder_errmsg());
        return;
    }
    struct larder__opened opened = {.id_low = e->id_low,
                                    .id_high = e->id_high,
                                    .num_shards = larder__dataset_num_shards(e->dataset)};
    uint8_t frame[LARDER__WIRE_HEADER + 20];
    int n = larder__wire_encode_opened(frame, sizeof frame, request, &opened);
    if (n > 0) enqueue(c, frame, (size_t)n);
}

/* An OPEN of an index not open here yet, on the open pool. */
struct open_job {
    struct connection *connection;
    uint64_t request;
    unsigned how;
    char url[];
};

static void open_job(void *arg)
{
    struct open_job *job = arg;
    struct connection *c = job->connection;
    struct larderd *d = c->daemon;
    struct dataset_entry *e = NULL;
    int slot = -1;
    /* c->opened is the loop's, but the loop reads none of c's frames until
     * c->opens is back to 0 (below, under c->lock, after this store) */
    int rc = open_dataset_held(d, job->url, job->how, &e, &slot, &c->opened);
    answer_open(c, job->request, rc, e, job->url);
    pthread_mutex_lock(&c->lock);
    c->jobs--;
    c->opens--;
    pthread_mutex_unlock(&c->lock);
    connection_release(c);
    free(job);
    larderd_wake(d); /* its answer to send, and its next frames to read */
}

/*
 * OPEN: a dataset open here already is answered at once; a new index is
 * opened on the open pool (fetched, hashed and validated whole: seconds for
 * a large one, or a slow origin's), so the loop serves everyone else
 * meanwhile.  The connection's next frames wait for the answer (c->opens:
 * process_input reads none of them), so a client that sends its READs
 * right after its OPEN finds the dataset opened.
 */
bool open_request(struct connection *c, const struct larder__frame *f, const uint8_t *payload)
{
    char url[LARDER__WIRE_MAX_URL + 1];
    memcpy(url, payload, f->length);
    url[f->length] = '\0';
    if (f->length == 0 || strlen(url) != f->length) return false;
    int allowed = may_open(c);
    struct dataset_entry *e = NULL;
    int slot = -1;
    unsigned how = allowed < 0 ? 0 : open_how(c, allowed);
    /* without OPEN_NEW: never blocks (an index being opened is not found) */
    int rc = allowed < 0
                 ? allowed
                 : open_dataset_held(c->daemon, url, how & ~OPEN_NEW, &e, &slot, &c->opened);
    if (rc == LARDER_ENOTFOUND && (how & OPEN_NEW)) {
        struct open_job *job = malloc(sizeof *job + f->length + 1);
        if (job) {
            job->connection = c, job->request = f->request, job->how = how;
            memcpy(job->url, url, f->length + 1);
            pthread_mutex_lock(&c->lock);
            c->refs++;
            c->jobs++;
            c->opens++;
            pthread_mutex_unlock(&c->lock);
            if (larder__pool_submit(c->daemon->open_pool, open_job, job, LARDER__DEMAND) == 0)
                return true;
            pthread_mutex_lock(&c->lock);
            c->jobs--;
            c->opens--;
            pthread_mutex_unlock(&c->lock);
            connection_release(c); /* ours: the loop still holds its own */
            free(job);
        }
        rc = larder__fail(-EAGAIN,
                          "%s could not be queued for opening (out of memory, or stopping)", url);
    }
    answer_open(c, f->request, rc, e, url);
    return true;
}
