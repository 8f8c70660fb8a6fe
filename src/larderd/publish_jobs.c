/*
 * publish_jobs.c - the names' work on the daemon's pool (publish.c has the
 * whole): announcing a publication to every member, and learning one
 * (announced, or asked for and unknown here) from its producer or any
 * member: its index fetched and kept in the cache directory, or taken
 * from the written-through origin, then opened with the producer as the
 * owner of every shard.  Also the registry as JSON (RESOLVE's list) and a
 * publication opened by name (a hint by name, which may wait for the name).
 *
 * These jobs run on the registry's own few workers (r->jobs), never on the
 * READ pool: an announcement or a lookup is a few small frames, and on the
 * READ pool it waited behind every blocked READ (a node whose readers hold
 * all its workers at a slow origin learned no name until they were done).
 * An announcement that fails (the member busy past the timeout, or down)
 * is tried again by the loop's sweep, a few times with a growing pause,
 * so that a member that knew the replaced generation does not keep it.
 */
#include "publish.h"
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- jobs on the pool: announcing, learning ---------------------------------- */

void name_job_free(struct name_job *job)
{
    free(job->producer);
    free(job->location);
    free(job->origin);
    free(job);
}

/* The answer of member m to a frame: RESOLVED parsed into *out (its
 * payload in *payload, which the caller frees).  0, or a negative code. */
static int ask_member(struct larderd *d, size_t m, const uint8_t *frame, size_t length,
                      uint8_t **payload, struct larder__publication *out)
{
    struct larder__endpoint *e;
    *payload = NULL; /* the caller frees it, whatever happens */
    int rc = larder__endpoint_new(&e, d->members.names[m], LARDER__ROLE_PEER, d->secret, NULL,
                                  PEER_TIMEOUT_MS);
    if (rc < 0) return rc;
    uint8_t type = 0;
    uint32_t answer_length = 0;
    rc = larder__endpoint_ask(e, frame, length, 0, &type, payload, &answer_length);
    larder__endpoint_free(e);
    if (rc == 0 && type != LARDER__RESOLVED)
        rc = larder__fail(LARDER_EPROTOCOL, "%s answered type %u", d->members.names[m], type);
    if (rc == 0) rc = larder__wire_publication(LARDER__RESOLVED, *payload, answer_length, out);
    return rc;
}

void announce_job(void *arg)
{
    struct name_job *job = arg;
    struct larderd *d = job->d;
    struct larder__publication m = {
        .id_low = job->id_low,
        .id_high = job->id_high,
        .flags = job->origin ? LARDER__PUBLISHED_ORIGIN : 0,
        .generation = job->generation,
        .name_length = (uint32_t)strlen(job->name),
        .name = job->name,
        .producer_length = (uint32_t)strlen(job->producer),
        .producer = job->producer,
        .location_length = (uint32_t)strlen(job->location),
        .location = job->location,
        .origin_length = job->origin ? (uint32_t)strlen(job->origin) : 0,
        .origin = job->origin,
    };
    size_t size = larder__wire_publication_size(LARDER__ANNOUNCE, &m);
    uint8_t *frame = size ? malloc(size) : NULL;
    if (!frame || larder__wire_encode_publication(frame, size, LARDER__ANNOUNCE, 1, &m) < 0) {
        say("%s: not announced (%s)", job->name, size ? "out of memory" : "too long a location");
        free(frame);
        name_job_free(job);
        return;
    }
    uint8_t *payload = NULL;
    struct larder__publication ack;
    int rc = job->target < d->members.count && !d->stopping
                 ? ask_member(d, job->target, frame, size, &payload, &ack)
                 : 0;
    free(payload);
    free(frame);
    /* refused for what it says (another dataset under that name there, or
     * not taken from this node): no use saying it again */
    bool again = rc < 0 && rc != -EEXIST && rc != LARDER_EDENIED && rc != LARDER_EPROTOCOL &&
                 job->attempts + 1 < ANNOUNCE_TRIES;
    if (rc < 0)
        say("%s: announcing to %s failed: %s%s", job->name, d->members.names[job->target],
            larder_errmsg(), again ? " (tried again later)" : "");
    if (again)
        announce_later(d, job);
    else
        name_job_free(job);
}

void announce_later(struct larderd *d, struct name_job *job)
{
    struct publications *r = d->publications;
    job->attempts++;
    int64_t pause = ANNOUNCE_FIRST_PAUSE_MS << (job->attempts - 1);
    job->due_ms = now_ms() + pause;
    pthread_mutex_lock(&r->lock);
    job->next = r->retries;
    r->retries = job;
    pthread_mutex_unlock(&r->lock);
}

void announce_due(struct larderd *d, int64_t now)
{
    struct publications *r = d->publications;
    struct name_job *due = NULL;
    pthread_mutex_lock(&r->lock);
    for (struct name_job **at = &r->retries; *at;) {
        struct name_job *job = *at;
        if (now < job->due_ms && !d->stopping) {
            at = &job->next;
            continue;
        }
        *at = job->next;
        /* still the publication of the name here: a newer one has its own announcements */
        struct publication *p = find(r, job->name, strlen(job->name));
        if (d->stopping || !p || p->state != READY || p->generation != job->generation ||
            p->id_low != job->id_low || p->id_high != job->id_high) {
            name_job_free(job);
            continue;
        }
        job->next = due;
        due = job;
    }
    pthread_mutex_unlock(&r->lock);
    while (due) {
        struct name_job *job = due;
        due = job->next;
        job->next = NULL;
        submit(d, announce_job, job);
    }
}

/* Where this node keeps a publication's index: the cache's published/ID.index. */
static int keep_index(struct larderd *d, const struct larder__publication *m, char **path)
{
    char id[33], dir[PATH_MAX], file[PATH_MAX + 64], temporary[PATH_MAX + 64];
    larder__hex128(m->id_high, m->id_low, id);
    if (!d->config.cache_dir)
        return larder__fail(LARDER_EUSAGE, "no cache directory to keep a published index in");
    if ((size_t)snprintf(dir, sizeof dir, "%s/published", d->config.cache_dir) >= sizeof dir)
        return larder__fail(-ENAMETOOLONG, "%s: too long a path", d->config.cache_dir);
    /* the cache directory itself is made by the first dataset opened in it */
    if ((mkdir(d->config.cache_dir, 0750) < 0 && errno != EEXIST) ||
        (mkdir(dir, 0750) < 0 && errno != EEXIST))
        return larder__fail(-errno, "%s: %s", dir, strerror(errno));
    /* absolute: readers name it so (they give the daemon a real path) */
    char absolute[PATH_MAX];
    if (!realpath(dir, absolute)) return larder__fail(-errno, "%s: %s", dir, strerror(errno));
    snprintf(file, sizeof file, "%s/%s.index", absolute, id);
    /* a name of its own: two name workers may keep the same id at once */
    if ((size_t)snprintf(temporary, sizeof temporary, "%s/.%s.index.XXXXXX", absolute, id) >=
        sizeof temporary)
        return larder__fail(-ENAMETOOLONG, "%s: name too long", absolute);
    int fd = mkostemp(temporary, O_CLOEXEC);
    if (fd < 0) return larder__fail(-errno, "%s: %s", temporary, strerror(errno));
    if (fchmod(fd, 0640) < 0) { /* mkostemp makes it 0600 */
        int err = errno;
        close(fd);
        unlink(temporary);
        return larder__fail(-err, "%s: %s", temporary, strerror(err));
    }
    size_t done = 0;
    int rc = 0;
    while (rc == 0 && done < m->index_length) {
        ssize_t n = write(fd, m->index + done, m->index_length - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) rc = larder__fail(-errno, "%s: %s", temporary, strerror(errno));
        done += n > 0 ? (size_t)n : 0;
    }
    if (close(fd) < 0 && rc == 0) rc = larder__fail(-errno, "%s: %s", temporary, strerror(errno));
    if (rc == 0 && rename(temporary, file) < 0)
        rc = larder__fail(-errno, "%s: %s", file, strerror(errno));
    if (rc < 0) {
        unlink(temporary);
        return rc;
    }
    return (*path = strdup(file)) ? 0 : -ENOMEM;
}

/*
 * What a member told of `name` (m, with its payload): checked against the
 * job (the announced id), its index kept or its origin taken, opened with
 * the producer as every shard's owner, and made READY.  0, or a negative
 * code with a message (the caller forgets the publication).
 */
static int ready(struct name_job *job, const struct larder__publication *m, struct dataset_entry *e,
                 size_t owner);

static int take_publication(struct name_job *job, const struct larder__publication *m)
{
    struct larderd *d = job->d;
    struct publications *r = d->publications;
    if (strlen(job->name) != m->name_length || memcmp(job->name, m->name, m->name_length) != 0)
        return larder__fail(LARDER_EPROTOCOL, "asked for %s, told of %.*s", job->name,
                            (int)m->name_length, m->name);
    if (job->announced && (m->id_low != job->id_low || m->id_high != job->id_high))
        return larder__fail(LARDER_EPROTOCOL, "%s: the producer's index is not the announced one",
                            job->name);
    size_t producer = member_named(d, m->producer, m->producer_length);
    bool mine = producer != SIZE_MAX && producer == d->self;
    if (producer == SIZE_MAX)
        return larder__fail(LARDER_EDENIED, "%s: producer %.*s is not a member of this cluster",
                            job->name, (int)m->producer_length, m->producer);
    char *local = NULL, *location = strndup(m->location, m->location_length);
    char *origin = m->origin_length ? strndup(m->origin, m->origin_length) : NULL;
    char *producer_name = strndup(m->producer, m->producer_length);
    int rc = location && producer_name && (origin || !m->origin_length) ? 0 : -ENOMEM;
    if (rc == 0 && mine) /* this node made it before a restart: its own files */
        local = strdup(location);
    else if (rc == 0 && origin)
        local = strdup(origin);
    else if (rc == 0 && m->index_length == 0)
        rc = larder__fail(LARDER_EPROTOCOL, "%s: no index bytes and no origin", job->name);
    else if (rc == 0 && (m->index_length < 32 || larder__le64(m->index + 16) != m->id_low ||
                         larder__le64(m->index + 24) != m->id_high))
        rc = larder__fail(LARDER_EPROTOCOL, "%s: index bytes of another dataset", job->name);
    else if (rc == 0) /* its content is checked against that id when it is opened */
        rc = keep_index(d, m, &local);
    if (rc == 0 && !local) rc = -ENOMEM;
    pthread_mutex_lock(&r->lock);
    struct publication *p = find(r, job->name, strlen(job->name));
    if (rc == 0 && !p) rc = larder__fail(LARDER_ENOTFOUND, "%s: forgotten meanwhile", job->name);
    if (rc == 0 && p->state == FETCHING && job->announced == false &&
        (p->id_low != m->id_low || p->id_high != m->id_high))
        rc = larder__fail(LARDER_EPROTOCOL, "%s: announced as another dataset", job->name);
    if (rc == 0 && m->generation < p->generation) /* a newer one came meanwhile */
        rc = larder__fail(LARDER_EPROTOCOL, "%s: told of generation %llu after %llu", job->name,
                          (unsigned long long)m->generation, (unsigned long long)p->generation);
    if (rc == 0) {
        if (p->id_low != m->id_low || p->id_high != m->id_high)
            publication_retire(r, p); /* closed once its readers here are done */
        p->id_low = m->id_low, p->id_high = m->id_high;
        p->generation = m->generation;
        p->mine = mine;
        p->producer_member = producer;
        free(p->producer), free(p->location), free(p->origin), free(p->local);
        p->producer = producer_name, p->location = location, p->origin = origin, p->local = local;
        producer_name = location = origin = local = NULL;
        p->state = FETCHING;
    }
    char *url = rc == 0 ? strdup(p->local) : NULL;
    pthread_mutex_unlock(&r->lock);
    free(producer_name), free(location), free(origin), free(local);
    if (rc < 0) return rc;
    if (!url) return -ENOMEM;
    /* opened here (the owner fixed by publication_adopt): what a reader
     * will open, checked to be the dataset the producer announced */
    struct dataset_entry *e = NULL;
    int slot;
    pthread_mutex_lock(&d->lock);
    bool open_before = datasets_find_url(d, url, &slot) != NULL;
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_lock(&r->lock);
    r->opening++; /* e is not closed under this job (publish_retire.c) until it is done */
    pthread_mutex_unlock(&r->lock);
    rc = open_dataset(d, url, OPEN_NEW, &e, &slot);
    free(url);
    /* (its entry may keep the announced producer as the first source of its
     * shards: bytes from there are checked like any others) */
    bool another = rc == 0 && (e->id_low != m->id_low || e->id_high != m->id_high);
    if (another)
        rc =
            larder__fail(LARDER_EPROTOCOL, "%s: its index is not the dataset announced", job->name);
    if (rc == 0) rc = ready(job, m, e, mine ? d->self : producer);
    pthread_mutex_lock(&r->lock);
    /* opened here for this name alone (its owner fixed to the producer as
     * it opened): closed once no one reads it, like a replaced one, not
     * left open until the daemon stops (found by review) */
    if (another && !open_before) retire_opened(r, job->name, e);
    r->opening--;
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* take_publication's end: e (opened, the dataset m announced) owned by
 * member `owner`, and the name READY unless a newer one came meanwhile. */
static int ready(struct name_job *job, const struct larder__publication *m, struct dataset_entry *e,
                 size_t owner)
{
    struct larderd *d = job->d;
    struct publications *r = d->publications;
    struct publication *p;
    pthread_mutex_lock(&d->lock);
    if (owner < d->members.count && !e->fixed) /* open before it was announced */
        e->fixed_owner = owner, __atomic_store_n(&e->fixed, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_lock(&r->lock);
    p = find(r, job->name, strlen(job->name));
    /* (not when a newer publication of the name was announced meanwhile: its own job ends it) */
    if (p && (p->id_low != m->id_low || p->id_high != m->id_high)) p = NULL;
    if (p) {
        p->state = READY;
        answer_waiters(r, p);
    }
    pthread_mutex_unlock(&r->lock);
    if (p) hints_on_publish(d, job->name, e);
    return 0;
}

/* Learn a name from its producer (announced) or from any member that knows it. */
void learn_job(void *arg)
{
    struct name_job *job = arg;
    struct larderd *d = job->d;
    struct larder__resolve ask = {.wait_ms = 0,
                                  .flags = LARDER__RESOLVE_INDEX | LARDER__RESOLVE_LOCAL,
                                  .name_length = (uint32_t)strlen(job->name),
                                  .name = job->name};
    uint8_t frame[LARDER__WIRE_HEADER + 8 + LARDER__WIRE_MAX_PUBLICATION];
    int n = larder__wire_encode_resolve(frame, sizeof frame, 1, &ask);
    int rc = n < 0 ? n : LARDER_ENOTFOUND;
    if (rc == LARDER_ENOTFOUND && job->announced && job->origin) {
        /* written through: the origin's copy is the index (checked when opened) */
        struct larder__publication m = {
            .id_low = job->id_low,
            .id_high = job->id_high,
            .flags = LARDER__PUBLISHED_ORIGIN,
            .generation = job->generation,
            .name_length = (uint32_t)strlen(job->name),
            .name = job->name,
            .producer_length = (uint32_t)strlen(job->producer),
            .producer = job->producer,
            .location_length = (uint32_t)strlen(job->location),
            .location = job->location,
            .origin_length = (uint32_t)strlen(job->origin),
            .origin = job->origin,
        };
        rc = take_publication(job, &m);
        if (rc < 0) say("%s: %s", job->name, larder_errmsg());
    }
    for (size_t i = 0; rc < 0 && n > 0 && i < d->members.count && !d->stopping; i++) {
        /* the producer first, when announced; then the others */
        size_t m = job->producer_member < d->members.count ? (i == 0 ? job->producer_member
                                                              : i == job->producer_member ? 0
                                                                                          : i)
                                                           : i;
        if (m == d->self) continue;
        uint8_t *payload = NULL;
        struct larder__publication told;
        rc = ask_member(d, m, frame, (size_t)n, &payload, &told);
        if (rc == 0) rc = take_publication(job, &told);
        if (rc < 0 && rc != LARDER_ENOTFOUND)
            say("%s: from %s: %s", job->name, d->members.names[m], larder_errmsg());
        free(payload);
        if (job->announced && rc < 0) break; /* only the producer has it yet */
    }
    if (rc < 0) { /* forget it; waiters wait on for an ANNOUNCE until their timeout */
        struct publications *r = d->publications;
        pthread_mutex_lock(&r->lock);
        struct publication *p = find(r, job->name, strlen(job->name));
        /* only what this job stands for: an ANNOUNCE may have come meanwhile */
        if (p && (job->announced ? p->state == FETCHING && p->id_low == job->id_low &&
                                       p->id_high == job->id_high
                                 : p->state == LEARNING))
            forget(r, p);
        pthread_mutex_unlock(&r->lock);
    }
    name_job_free(job);
}

/* A job for `name` (announcing it, learning it: a few small frames that a
 * consumer may be waiting on), submitted to the registry's own workers
 * (one class: in order); false when none could be. */
bool submit(struct larderd *d, void (*run)(void *), struct name_job *job)
{
    struct publications *r = d->publications;
    if (r && r->jobs && !d->stopping && larder__pool_submit(r->jobs, run, job, LARDER__DEMAND) == 0)
        return true;
    name_job_free(job);
    return false;
}

struct name_job *name_job_new(struct larderd *d, const char *name, size_t length)
{
    struct name_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    job->d = d;
    memcpy(job->name, name, length);
    job->producer_member = SIZE_MAX;
    return job;
}

/* ---- the registry as JSON ------------------------------------------------------ */

/* The registry as JSON (RESOLVE with LARDER__RESOLVE_LIST), in a STATS frame. */
void send_names(struct connection *c, uint64_t request, struct publications *r)
{
    size_t capacity = LARDER__WIRE_MAX_STATS, used = 0;
    char *frame = malloc(LARDER__WIRE_HEADER + capacity);
    if (!frame) {
        send_error(c, request, -ENOMEM, "out of memory");
        return;
    }
    char *text = frame + LARDER__WIRE_HEADER;
    used += (size_t)snprintf(text, capacity, "{\"names\": [");
    pthread_mutex_lock(&r->lock);
    for (struct publication *p = r->list; p && used < capacity - 20000; p = p->next) {
        if (p->state != READY) continue;
        char id[33];
        larder__hex128(p->id_high, p->id_low, id);
        /* names are plain by construction; locations are quoted with \" and \\ escaped */
        used +=
            (size_t)snprintf(text + used, capacity - used,
                             "%s{\"name\": \"%s\", \"dataset_id\": \"%s\", \"producer\": \"%s\", "
                             "\"index\": \"",
                             used > 11 ? ", " : "", p->name, id, p->producer);
        const char *fields[2] = {c->peer ? p->location : p->local, p->origin ? p->origin : ""};
        for (int k = 0; k < 2; k++) {
            for (const char *s = fields[k]; *s && used < capacity - 16; s++) {
                if (*s == '"' || *s == '\\') text[used++] = '\\';
                text[used++] = *s;
            }
            used +=
                (size_t)snprintf(text + used, capacity - used, k ? "\"}" : "\", \"origin\": \"");
        }
    }
    pthread_mutex_unlock(&r->lock);
    used += (size_t)snprintf(text + used, capacity - used, "]}");
    larder__wire_encode_header((uint8_t *)frame, LARDER__WIRE_HEADER, LARDER__STATS, (uint32_t)used,
                               request);
    enqueue(c, frame, LARDER__WIRE_HEADER + used);
    free(frame);
}

/* ---- a publication opened by name (hints by name) ------------------------------ */

#define NAME_POLL_MS 20 /* how often publication_open looks at the registry again */

int publication_open(struct larderd *d, const char *name, unsigned how, int wait_ms,
                     struct dataset_entry **out)
{
    struct publications *r = registry(d);
    if (!r) return -ENOMEM;
    size_t length = strlen(name);
    int64_t deadline = now_ms() + (wait_ms > 0 ? wait_ms : 0);
    bool asked = false; /* a learn job was started for it by this call */
    char *local = NULL;
    int rc = 0;
    for (;;) {
        struct name_job *job = NULL;
        pthread_mutex_lock(&r->lock);
        struct publication *p = find(r, name, length);
        if (p && p->state == READY && !(local = strdup(p->local))) rc = -ENOMEM;
        if (!p && !asked && d->members.count > 1) { /* unknown here: ask the members */
            asked = true;
            if ((job = name_job_new(d, name, length)) && !add(r, name, length))
                name_job_free(job), job = NULL;
        }
        /* unknown, and not being learned (any more): no wait brings it */
        bool gone = !p && !job;
        pthread_mutex_unlock(&r->lock);
        if (job && !submit(d, learn_job, job)) { /* forget what we added (submit freed job) */
            pthread_mutex_lock(&r->lock);
            struct publication *q = find(r, name, length);
            if (q && q->state == LEARNING) forget(r, q);
            pthread_mutex_unlock(&r->lock);
        }
        if (local || rc < 0) break;
        if (gone || d->stopping || now_ms() >= deadline) {
            rc = larder__fail(LARDER_ENOTFOUND, "no publication named %s on this node%s", name,
                              d->members.count > 1 ? " or its members" : "");
            break;
        }
        struct timespec pause = {0, NAME_POLL_MS * 1000000L};
        nanosleep(&pause, NULL);
    }
    if (rc < 0) return rc;
    int slot;
    rc = open_dataset(d, local, how, out, &slot);
    free(local);
    return rc;
}

void announce_all(struct larderd *d, struct name_job *job)
{
    for (size_t m = 0; m < d->members.count; m++) {
        if (m == d->self) continue;
        struct name_job *copy = name_job_new(d, job->name, strlen(job->name));
        if (!copy) break;
        copy->id_low = job->id_low, copy->id_high = job->id_high;
        copy->generation = job->generation;
        copy->target = m;
        copy->producer = strdup(job->producer);
        copy->location = strdup(job->location);
        copy->origin = job->origin ? strdup(job->origin) : NULL;
        if (!copy->producer || !copy->location || (job->origin && !copy->origin)) {
            name_job_free(copy);
            break;
        }
        submit(d, announce_job, copy);
    }
    name_job_free(job);
}
