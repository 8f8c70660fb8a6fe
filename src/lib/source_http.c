/*
 * source_http.c - an http(s):// object read with libcurl: range GETs for
 * reads, HEAD for the size, a plain GET for a stream.  Transient failures
 * (5xx, 429, timeouts, resets) are retried with jittered backoff; 4xx are
 * final at once (no retry storm).  A server that answers a range request
 * with the whole object (200, not 206), names another range, or sends
 * more or fewer bytes than asked is refused with a message, never
 * believed.  S3 (source_s3.c) is this source with a request signer.
 *
 * The extents of a vectored read run concurrently on the calling thread's
 * curl multi handle, each retried on its own.  HTTP hedges inside that
 * multi handle rather than through the hedge wrapper, because there the
 * losing transfer can be cancelled (a thread blocked in a read cannot);
 * the policy, latency window and budget are source_hedge.h's, shared with
 * the wrapper, and larder__source_open does not wrap HTTP again.
 */
#include "source_http.h"
#include "source_hedge.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Retries of transient failures: this many attempts in all, waiting about
 * base * 2^attempt with full jitter. */
#define HTTP_ATTEMPTS 4
#define HTTP_BACKOFF_MS 50
#define HTTP_POOL 256 /* idle handles kept per source */
#define HTTP_IN_FLIGHT                                                                             \
    32 /* transfers of one DEMAND vectored read at once; lower                                     \
          classes get their share (larder__priority_limit) */

struct http_source {
    struct larder__source base;
    struct larder__source_ops ops; /* http's, under the signer's kind */
    char *name;                    /* the URL as given: messages name it */
    char *escaped;                 /* the same with what curl refuses escaped (see escape_url) */
    struct larder__http_signer signer;
    pthread_mutex_t lock;  /* guards idle[] and the size */
    CURL *idle[HTTP_POOL]; /* connections to reuse: one transfer at a time each */
    int num_idle;
    uint64_t size;
    bool have_size;
    struct larder__hedge_policy policy;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static CURL *handle_take(struct http_source *h)
{
    pthread_mutex_lock(&h->lock);
    CURL *curl = h->num_idle ? h->idle[--h->num_idle] : NULL;
    pthread_mutex_unlock(&h->lock);
    return curl ? curl : curl_easy_init();
}

static void handle_give(struct http_source *h, CURL *curl)
{
    pthread_mutex_lock(&h->lock);
    if (h->num_idle < HTTP_POOL) {
        h->idle[h->num_idle++] = curl;
        curl = NULL;
    }
    pthread_mutex_unlock(&h->lock);
    if (curl) curl_easy_cleanup(curl);
}

/* ---- one request ------------------------------------------------------------ */

struct body {
    uint8_t *buf; /* fixed buffer (range reads), or NULL */
    size_t capacity;
    size_t used;
    larder__sink_fn sink; /* streaming */
    void *userdata;
    int sink_error;
    bool overflow;
    bool range_request; /* a 200 answer means the server ignored the range */
    long status_seen;   /* status of the response being received */
    bool ignored_range;
    char content_range[128];   /* the Content-Range header, if any */
    curl_off_t content_length; /* of the response, -1 when unknown */
};

static size_t on_body(char *data, size_t size, size_t count, void *userdata)
{
    struct body *b = userdata;
    size_t n = size * count;
    if (b->status_seen < 200 || b->status_seen >= 300) return n; /* an error page: not data */
    if (b->sink) {
        int rc = b->sink(b->userdata, data, n);
        if (rc < 0) {
            b->sink_error = rc;
            return 0;
        }
        b->used += n;
        return n;
    }
    if (b->range_request && b->status_seen == 200) {
        b->ignored_range = true; /* don't download a whole object into a range buffer */
        return 0;
    }
    if (n > b->capacity - b->used) {
        b->overflow = true;
        return 0;
    }
    memcpy(b->buf + b->used, data, n);
    b->used += n;
    return n;
}

static size_t on_header(char *data, size_t size, size_t count, void *userdata)
{
    struct body *b = userdata;
    size_t n = size * count;
    if (n > 9 && strncmp(data, "HTTP/", 5) == 0) {
        const char *space = memchr(data, ' ', n);
        b->status_seen = space ? strtol(space + 1, NULL, 10) : 0;
        b->content_range[0] = '\0';
    }
    if (n > 14 && strncasecmp(data, "content-range:", 14) == 0) {
        size_t k = n - 14 < sizeof b->content_range - 1 ? n - 14 : sizeof b->content_range - 1;
        memcpy(b->content_range, data + 14, k);
        b->content_range[k] = '\0';
    }
    return n;
}

/*
 * The longest one HTTP request may take, start to end (a timed-out
 * attempt is retried like a 5xx).  LARDER_HTTP_TIMEOUT in seconds
 * (fractions allowed) overrides the default of 60 s; read once.
 */
static long request_timeout_ms(void)
{
    static long cached;
    long t = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (t) return t;
    const char *text = getenv("LARDER_HTTP_TIMEOUT");
    double seconds = text ? strtod(text, NULL) : 0;
    t = seconds > 0 && seconds < 86400 ? (long)(seconds * 1000) : 60000;
    if (t < 1) t = 1;
    __atomic_store_n(&cached, t, __ATOMIC_RELAXED);
    return t;
}

static void http_setup(CURL *curl, const struct http_source *h, struct body *b)
{
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, h->signer.request_url);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, b);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    long timeout = request_timeout_ms();
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout < 10000 ? timeout : 10000L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout);
    if (h->signer.apply) h->signer.apply(h->signer.context, curl); /* e.g. SigV4 */
}

/* Whether a failed attempt may succeed if repeated. */
static bool transient(CURLcode cc, long status)
{
    if (cc != CURLE_OK)
        return cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_COULDNT_CONNECT ||
               cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR || cc == CURLE_GOT_NOTHING ||
               cc == CURLE_PARTIAL_FILE;
    return status >= 500 || status == 429;
}

/* How long to wait before attempt + 1: full jitter, uniform in [0, base * 2^attempt). */
static unsigned backoff_ms(int attempt)
{
    static _Thread_local unsigned seed;
    if (!seed) seed = (unsigned)(uintptr_t)&seed ^ (unsigned)getpid();
    unsigned range = HTTP_BACKOFF_MS << attempt;
    return (unsigned)rand_r(&seed) % range;
}

enum verdict { ANSWERED, AGAIN, FAILED };

/*
 * What a finished attempt means: answered (a status under 400: the caller
 * checks the rest), worth another attempt, or failed (*rc, with a message).
 */
static enum verdict judge(const struct http_source *h, CURLcode cc, long status,
                          const struct body *b, int attempt, int *rc)
{
    const char *url = h->name;
    if (b->sink_error) {
        *rc = b->sink_error;
        return FAILED;
    }
    if (b->ignored_range) {
        *rc = larder__fail(LARDER_EHTTP,
                           "%s: answered 200 to a range request, not 206: the server does "
                           "not serve byte ranges",
                           url);
        return FAILED;
    }
    if (b->overflow) {
        *rc = larder__fail(LARDER_EHTTP, "%s: server sent more bytes than requested", url);
        return FAILED;
    }
    if (cc == CURLE_OK && status < 400) return ANSWERED;
    if (transient(cc, status) && attempt + 1 < HTTP_ATTEMPTS && !(b->sink && b->used > 0))
        return AGAIN; /* a stream that has delivered bytes cannot be replayed */
    if (cc != CURLE_OK)
        *rc = larder__fail(LARDER_EHTTP, "%s: %s (after %d attempts)", url, curl_easy_strerror(cc),
                           attempt + 1);
    else
        *rc = larder__fail(status == 404   ? -ENOENT
                           : status == 403 ? -EACCES
                                           : LARDER_EHTTP,
                           "%s: HTTP status %ld%s", url, status,
                           status >= 500 ? " (after retries)" : "");
    return FAILED;
}

/* One request (HEAD or a whole GET), retried; `nobody`: HEAD. */
static int http_request(struct http_source *h, struct body *b, bool nobody, long *status)
{
    CURL *curl = handle_take(h);
    if (!curl) return -ENOMEM;
    struct body fresh = *b;
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        *b = fresh;
        http_setup(curl, h, b);
        if (nobody) curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
        CURLcode cc = curl_easy_perform(curl);
        *status = 0;
        b->content_length = -1;
        if (cc == CURLE_OK) {
            curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
            curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &b->content_length);
        }
        if (judge(h, cc, *status, b, attempt, &rc) != AGAIN) break;
        unsigned ms = backoff_ms(attempt);
        struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
        while (nanosleep(&pause, &pause) < 0 && errno == EINTR) {
        }
    }
    handle_give(h, curl);
    return rc;
}

/* ---- range reads on a multi handle ------------------------------------------------ */

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
    CURL *curl = handle_take(h);
    if (!curl) return false;
    r->body[which] =
        (struct body){.buf = buf, .capacity = r->extent->length, .range_request = true};
    http_setup(curl, h, &r->body[which]);
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
    handle_give(h, r->handle[which]);
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
    enum verdict v = judge(h, cc, status, &b, r->attempt, &rc);
    if (v == AGAIN) {
        r->not_before = now + backoff_ms(r->attempt++);
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

static int http_read(struct larder__source *source, const struct larder__extent *extents,
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

/* ---- size, stream, lifetime ------------------------------------------------------ */

static int http_size(struct larder__source *source, uint64_t *size)
{
    struct http_source *h = (struct http_source *)source;
    pthread_mutex_lock(&h->lock);
    bool have = h->have_size;
    *size = h->size;
    pthread_mutex_unlock(&h->lock);
    if (have) return 0;
    struct body b = {0};
    long status;
    int rc = http_request(h, &b, true, &status);
    if (rc < 0) return rc;
    if (b.content_length < 0)
        return larder__fail(LARDER_EHTTP, "%s: server gave no Content-Length", h->name);
    pthread_mutex_lock(&h->lock);
    h->size = *size = (uint64_t)b.content_length;
    h->have_size = true;
    pthread_mutex_unlock(&h->lock);
    return 0;
}

static int http_stream(struct larder__source *source, larder__sink_fn sink, void *userdata)
{
    struct http_source *h = (struct http_source *)source;
    struct body b = {.sink = sink, .userdata = userdata};
    long status = 0;
    int rc = http_request(h, &b, false, &status);
    if (rc == 0 && status != 200)
        rc = larder__fail(LARDER_EHTTP, "%s: HTTP status %ld", h->name, status);
    return rc;
}

static void http_close(struct larder__source *source)
{
    struct http_source *h = (struct http_source *)source;
    for (int i = 0; i < h->num_idle; i++)
        curl_easy_cleanup(h->idle[i]);
    if (h->signer.release) h->signer.release(h->signer.context);
    larder__hedge_policy_clear(&h->policy);
    pthread_mutex_destroy(&h->lock);
    free(h->name);
    free(h->escaped);
    free(h);
}

/*
 * `url` with the bytes a URL may not carry as they are percent-encoded:
 * spaces, control characters, bytes above 0x7f (UTF-8 names) and
 * "<>\"\\^`{|}", which curl refuses ("URL using bad/illegal format")
 * and a file's name may well hold.  '%' is left as it is: names under a
 * network base are URL paths, escapes included.  malloc'd; NULL when out
 * of memory.
 */
static char *escape_url(const char *url)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = malloc(strlen(url) * 3 + 1), *o = out;
    if (!out) return NULL;
    for (const unsigned char *p = (const unsigned char *)url; *p; p++) {
        if (*p <= 0x20 || *p >= 0x7f || strchr("<>\"\\^`{|}", *p)) {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        } else {
            *o++ = (char)*p;
        }
    }
    *o = '\0';
    return out;
}

static const struct larder__source_ops http_ops = {
    .kind = "http",
    .size = http_size,
    .read = http_read,
    .stream = http_stream,
    .close = http_close,
};

int larder__source_http_signed_open(struct larder__source **out, const char *url,
                                    const struct larder__http_signer *signer,
                                    struct larder__hedge_budget *budget)
{
    struct http_source *h = calloc(1, sizeof *h);
    if (!h || !(h->name = strdup(url))) {
        free(h);
        if (signer && signer->release) signer->release(signer->context);
        return -ENOMEM;
    }
    pthread_once(&curl_once, curl_init_once);
    h->ops = http_ops;
    if (signer) {
        h->signer = *signer;
        h->ops.kind = signer->kind;
    } else {
        if (!(h->escaped = escape_url(url))) {
            free(h->name);
            free(h);
            return -ENOMEM;
        }
        h->signer.request_url = h->escaped;
    }
    h->base.ops = &h->ops;
    h->base.name = h->name;
    pthread_mutex_init(&h->lock, NULL);
    larder__hedge_policy_init(&h->policy, budget);
    *out = &h->base;
    return 0;
}

int larder__source_http_open(struct larder__source **out, const char *url,
                             struct larder__hedge_budget *budget)
{
    return larder__source_http_signed_open(out, url, NULL, budget);
}
