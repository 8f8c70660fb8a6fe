/*
 * source_http_range.c - the HTTP source's vectored read (design in
 * source_http.c): each extent a range GET, all of them at once on the
 * calling thread's curl multi handle, each retried on its own, hedged
 * inside the multi handle (a losing transfer is cancelled), and every
 * answer checked: 206, the range asked for, every byte.
 */
#include "source_http_internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define HTTP_IN_FLIGHT                                                                             \
    32 /* transfers of one DEMAND vectored read at once; lower                                     \
          classes get their share (larder__priority_limit) */

/* Each thread's multi handle, cleaned up when the thread exits. */
static pthread_key_t multi_key;
static pthread_once_t multi_once = PTHREAD_ONCE_INIT;

static void multi_free(void *multi)
{
    curl_multi_cleanup(multi);
}

static void multi_key_init(void)
{
    pthread_key_create(&multi_key, multi_free);
}

static CURLM *thread_multi(void)
{
    pthread_once(&multi_once, multi_key_init);
    CURLM *multi = pthread_getspecific(multi_key);
    if (!multi && (multi = curl_multi_init())) pthread_setspecific(multi_key, multi);
    return multi;
}

/* One extent of a vectored read: its transfers (primary, hedge), retried. */
struct range {
    const struct larder__extent *extent;
    char text[64];          /* "first-last", as CURLOPT_RANGE takes it */
    struct body body[2];    /* the primary's (into extent->buf) and the hedge's */
    uint8_t *hedge_buf;     /* the hedge's own buffer: a loser never writes the caller's */
    CURL *handle[2];        /* in the multi handle, or NULL */
    int attempt, running;   /* attempts made before this one; transfers in the multi */
    double started, ask_at; /* this attempt; when to ask the budget for a hedge */
    double not_before;      /* a waiting retry starts then */
    enum { WAITING, RUNNING, DONE } state;
    int rc;
};

/* Whether a finished transfer delivered everything it should. */
static bool complete(CURL *curl, CURLcode cc, const struct body *b)
{
    long status = 0;
    if (cc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    return cc == CURLE_OK && status == 206 && !b->overflow && !b->ignored_range &&
           b->used == b->capacity;
}

/* Add transfer `which` of `r` to the multi; false when no handle could be had. */
static bool transfer_add(struct http_source *h, CURLM *multi, struct range *r, int which,
                         uint8_t *buf)
{
    CURL *curl = larder__http_handle_take(h);
    if (!curl) return false;
    r->body[which] =
        (struct body){.buf = buf, .capacity = r->extent->length, .range_request = true};
    larder__http_setup(curl, h, &r->body[which]);
    curl_easy_setopt(curl, CURLOPT_RANGE, r->text);
    curl_easy_setopt(curl, CURLOPT_PRIVATE, (char *)r);
    curl_multi_add_handle(multi, curl);
    r->handle[which] = curl;
    r->running++;
    return true;
}

static void transfer_remove(struct http_source *h, CURLM *multi, struct range *r, int which)
{
    if (!r->handle[which]) return;
    curl_multi_remove_handle(multi, r->handle[which]);
    larder__http_handle_give(h, r->handle[which]);
    r->handle[which] = NULL;
}

static void range_start(struct http_source *h, CURLM *multi, struct range *r)
{
    double now = larder__now_ms();
    if (!transfer_add(h, multi, r, 0, r->extent->buf)) {
        r->rc = larder__fail(-ENOMEM, "%s: no memory for a request", h->name);
        r->state = DONE;
        return;
    }
    r->started = now;
    r->ask_at = INFINITY; /* a large read is not hedged (LARDER__HEDGE_MAX_READ) */
    if (larder__hedge_policy_sized(r->extent->length)) {
        larder__hedge_policy_count_read(&h->policy);
        r->ask_at = now + larder__hedge_policy_delay_ms(&h->policy);
    }
    r->state = RUNNING;
}

static void range_hedge(struct http_source *h, CURLM *multi, struct range *r, double now)
{
    if (!larder__hedge_policy_take(&h->policy)) { /* over budget: credit may come */
        r->ask_at = now + LARDER__HEDGE_RETRY_MS;
        return;
    }
    r->ask_at = INFINITY; /* one hedge per attempt */
    if (!(r->hedge_buf = malloc(r->extent->length)) ||
        !transfer_add(h, multi, r, 1, r->hedge_buf)) {
        free(r->hedge_buf);
        r->hedge_buf = NULL;
        larder__hedge_policy_refund(&h->policy);
        return;
    }
    larder__hedge_policy_sent(&h->policy, h->name, now - r->started);
}

/* The checks of an answered range request: 206, the right range, every byte. */
static int range_check(const struct http_source *h, const struct range *r, const struct body *b,
                       long status)
{
    const struct larder__extent *e = r->extent;
    if (status != 206)
        return larder__fail(LARDER_EHTTP,
                            "%s: answered %ld to a range request (bytes %s), not 206: the "
                            "server does not serve byte ranges",
                            h->name, status, r->text);
    unsigned long long first = 0, last = 0;
    if (sscanf(b->content_range, " bytes %llu-%llu", &first, &last) != 2 || first != e->offset ||
        last != e->offset + e->length - 1)
        return larder__fail(LARDER_EHTTP, "%s: asked for bytes %s, Content-Range says '%s'",
                            h->name, r->text, b->content_range);
    if (b->used != e->length) {
        memset((uint8_t *)e->buf + b->used, 0, e->length - b->used);
        return larder__fail(LARDER_ETRUNCATED, "%s: short body: %zu of %zu bytes at offset %llu",
                            h->name, b->used, e->length, (unsigned long long)e->offset);
    }
    return 0;
}

/* Transfer `which` of `r` ended with `cc`: settle the attempt when its answer counts. */
static void range_transfer_done(struct http_source *h, CURLM *multi, struct range *r, int which,
                                CURLcode cc)
{
    CURL *curl = r->handle[which];
    r->running--;
    bool good = complete(curl, cc, &r->body[which]);
    if (!good && r->running > 0) { /* a bad answer counts only when nothing else is coming */
        transfer_remove(h, multi, r, which);
        return;
    }
    double now = larder__now_ms();
    long status = 0;
    if (cc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    struct body b = r->body[which];
    if (which == 1) { /* the hedge won: its bytes and headers become the answer */
        memcpy(r->extent->buf, r->hedge_buf, b.used);
        b.buf = r->extent->buf;
    }
    if (good && larder__hedge_policy_sized(r->extent->length))
        larder__hedge_policy_record(&h->policy, now - r->started);
    transfer_remove(h, multi, r, 0); /* the loser, if any, is cancelled */
    transfer_remove(h, multi, r, 1);
    free(r->hedge_buf);
    r->hedge_buf = NULL;
    r->running = 0;
    int rc = 0;
    enum verdict v = larder__http_judge(h, cc, status, &b, r->attempt, &rc);
    if (v == AGAIN) {
        r->not_before = now + larder__http_backoff_ms(r->attempt++);
        r->state = WAITING;
        return;
    }
    r->state = DONE;
    r->rc = v == FAILED ? rc : range_check(h, r, &b, status);
}

/* Finished transfers, settled; the first range to fail, or NULL. */
static struct range *collect(struct http_source *h, CURLM *multi)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        char *private = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &private);
        struct range *r = (struct range *)private;
        int which = m->easy_handle == r->handle[0] ? 0 : m->easy_handle == r->handle[1] ? 1 : -1;
        if (which < 0) continue; /* a transfer cancelled already */
        range_transfer_done(h, multi, r, which, m->data.result);
        if (r->state == DONE && r->rc < 0) return r;
    }
    return NULL;
}

/*
 * Start what is due, hedge what is slow; returns how long to wait for the
 * next of those (ms), or -1 once every range is done.  A range that fails
 * to start is returned in *failed.  At most `limit` transfers run at once.
 */
static int schedule(struct http_source *h, CURLM *multi, struct range *ranges, size_t count,
                    size_t limit, struct range **failed)
{
    double now = larder__now_ms(), next = now + 50;
    size_t done = 0, in_flight = 0;
    for (size_t i = 0; i < count; i++)
        in_flight += ranges[i].state == RUNNING;
    for (size_t i = 0; i < count; i++) {
        struct range *r = &ranges[i];
        if (r->state == WAITING && r->not_before <= now && in_flight < limit) {
            range_start(h, multi, r);
            in_flight += r->state == RUNNING;
        }
        if (r->state == RUNNING && !r->handle[1] && r->ask_at <= now) range_hedge(h, multi, r, now);
        if (r->state == RUNNING && !r->handle[1] && r->ask_at < next) next = r->ask_at;
        /* a waiting range is due when its backoff ends, if a slot is free
         * then; with none free, the transfers' own activity wakes the poll */
        if (r->state == WAITING && r->not_before < next && in_flight < limit) next = r->not_before;
        if (r->state == DONE && r->rc < 0) *failed = r;
        done += r->state == DONE;
    }
    if (done == count) return -1;
    return next - now < 1 ? 1 : (int)(next - now);
}

int larder__http_read(struct larder__source *source, const struct larder__extent *extents,
                      size_t count, unsigned flags)
{
    struct http_source *h = (struct http_source *)source;
    /* a lower class's read keeps fewer transfers open at once, leaving
     * the origin's (and the network's) capacity to blocked readers */
    size_t limit = (size_t)larder__priority_limit(HTTP_IN_FLIGHT, larder__read_class(flags));
    CURLM *multi = thread_multi();
    struct range *ranges = calloc(count, sizeof *ranges);
    if (!multi || !ranges) {
        free(ranges);
        return larder__fail(-ENOMEM, "%s: no memory for a read", h->name);
    }
    struct range *failed = NULL;
    for (size_t i = 0; i < count && !failed; i++) {
        const struct larder__extent *e = &extents[i];
        ranges[i].extent = e;
        if (e->length == 0) {
            ranges[i].state = DONE;
        } else if (e->length - 1 > UINT64_MAX - e->offset) {
            ranges[i].rc = larder__fail(LARDER_EUSAGE, "%s: %zu bytes at offset %llu overflow",
                                        h->name, e->length, (unsigned long long)e->offset);
            ranges[i].state = DONE;
            failed = &ranges[i];
        } else {
            snprintf(ranges[i].text, sizeof ranges[i].text, "%llu-%llu",
                     (unsigned long long)e->offset,
                     (unsigned long long)(e->offset + e->length - 1));
        }
    }
    for (int wait;
         !failed && (wait = schedule(h, multi, ranges, count, limit, &failed)) >= 0 && !failed;) {
        int running;
        curl_multi_poll(multi, NULL, 0, wait, NULL);
        curl_multi_perform(multi, &running);
        failed = collect(h, multi);
    }
    for (size_t i = 0; i < count; i++) { /* after a failure: cancel the rest */
        transfer_remove(h, multi, &ranges[i], 0);
        transfer_remove(h, multi, &ranges[i], 1);
        free(ranges[i].hedge_buf);
    }
    int rc = failed ? failed->rc : LARDER__FROM_ORIGIN;
    free(ranges);
    return rc;
}
