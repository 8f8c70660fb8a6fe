/*
 * origin.c - file and HTTP origins behind one small interface.
 */
#include "origin.h"
#include "hedge.h"
#include "s3.h"
#include "sys.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Retries of transient HTTP failures (5xx, timeouts, resets): this many
 * attempts in all, waiting about base * 2^attempt with full jitter. */
#define HTTP_ATTEMPTS 4
#define HTTP_BACKOFF_MS 50
#define HTTP_POOL 256 /* idle handles kept per origin */
/* Hedging: a range read still unanswered after the recent p95 latency of
 * this origin (over the last HEDGE_WINDOW reads, once HEDGE_MIN_SAMPLES
 * are known; HEDGE_COLD_MS before that) gets a second, identical request;
 * the first good answer wins and the other is cancelled. */
#define HEDGE_WINDOW 64
#define HEDGE_MIN_SAMPLES 16
#define HEDGE_COLD_MS 500.0
#define HEDGE_FLOOR_MS 2.0
/* A read refused a hedge by the budget (hedge.h) asks again this often:
 * credit comes with every read on the node, and the read may still stall. */
#define HEDGE_RETRY_MS 50

struct larder__origin {
    char *url;
    int fd;                /* files; -1 for HTTP */
    pthread_mutex_t lock;  /* guards idle[] and the size */
    CURL *idle[HTTP_POOL]; /* connections to reuse: one transfer at a time each */
    int num_idle;
    uint64_t size;
    bool have_size;
    struct larder__s3 *s3; /* s3:// objects: the http(s) URL and SigV4 signing; else NULL */
    double latency_ms[HEDGE_WINDOW]; /* recent range reads, a ring (under lock) */
    int latencies, next_latency;
    uint64_t hedges; /* second requests sent (under lock) */
};

static _Atomic uint64_t hedges_sent; /* by this process, all origins: for tests and statistics */

/*
 * Hedges are a budget, not a reflex: every read that may be hedged is
 * counted, and every hedge is asked for, in the budget of the node (or of
 * this process, until a dataset with a cache attaches the node's); the
 * rule, 5% of reads plus a start-up allowance, is in hedge.h.
 */
static void hedge_count_read(void)
{
    larder__hedge_count_read(larder__hedge_process());
}

/* Whether the budget grants one more hedge (counted when it does). */
static bool hedge_take(void)
{
    return larder__hedge_take(larder__hedge_process());
}

/* Give back a granted hedge that could not be sent (no memory, no thread). */
static void hedge_unused(void)
{
    larder__hedge_refund(larder__hedge_process());
}

/* Count a hedge sent for a read of `o`. */
static void hedge_sent(struct larder__origin *o)
{
    pthread_mutex_lock(&o->lock);
    o->hedges++;
    pthread_mutex_unlock(&o->lock);
    hedges_sent++;
}

uint64_t larder__origin_hedges(void)
{
    return hedges_sent;
}

bool larder__is_remote(const char *name)
{
    return strncmp(name, "http://", 7) == 0 || strncmp(name, "https://", 8) == 0 ||
           strncmp(name, "s3://", 5) == 0;
}

const char *larder__file_path(const char *url)
{
    return strncmp(url, "file://", 7) == 0 ? url + 7 : url;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int larder__origin_open(struct larder__origin **out, const char *url)
{
    struct larder__origin *o = calloc(1, sizeof *o);
    if (!o || !(o->url = strdup(url))) {
        free(o);
        return -ENOMEM;
    }
    o->fd = -1;
    pthread_mutex_init(&o->lock, NULL);
    if (larder__is_remote(url)) {
        pthread_once(&curl_once, curl_init_once);
        int rc = strncmp(url, "s3://", 5) == 0 ? larder__s3_open(&o->s3, url, NULL) : 0;
        if (rc < 0) {
            larder__origin_close(o);
            return rc;
        }
    } else {
        int fd = larder__open(larder__file_path(url), O_RDONLY, 0);
        if (fd < 0) {
            larder__origin_close(o);
            return fd;
        }
        o->fd = fd;
    }
    *out = o;
    return 0;
}

void larder__origin_close(struct larder__origin *o)
{
    if (!o) return;
    if (o->fd >= 0) larder__sys.close(o->fd);
    for (int i = 0; i < o->num_idle; i++)
        curl_easy_cleanup(o->idle[i]);
    larder__s3_close(o->s3);
    pthread_mutex_destroy(&o->lock);
    free(o->url);
    free(o);
}

const char *larder__origin_url(const struct larder__origin *o)
{
    return o->url;
}

/* ---- HTTP -------------------------------------------------------------- */

static CURL *handle_take(struct larder__origin *o)
{
    pthread_mutex_lock(&o->lock);
    CURL *curl = o->num_idle ? o->idle[--o->num_idle] : NULL;
    pthread_mutex_unlock(&o->lock);
    return curl ? curl : curl_easy_init();
}

static void handle_give(struct larder__origin *o, CURL *curl)
{
    pthread_mutex_lock(&o->lock);
    if (o->num_idle < HTTP_POOL) {
        o->idle[o->num_idle++] = curl;
        curl = NULL;
    }
    pthread_mutex_unlock(&o->lock);
    if (curl) curl_easy_cleanup(curl);
}

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

static void http_setup(CURL *curl, const struct larder__origin *o, struct body *b)
{
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, o->s3 ? larder__s3_http_url(o->s3) : o->url);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, b);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    long timeout = request_timeout_ms();
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout < 10000 ? timeout : 10000L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout);
    if (o->s3) larder__s3_apply(o->s3, curl); /* SigV4 signing and S3's headers */
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

static void backoff(int attempt)
{
    /* full jitter: uniform in [0, base * 2^attempt) */
    static _Thread_local unsigned seed;
    if (!seed) seed = (unsigned)(uintptr_t)&seed ^ (unsigned)getpid();
    unsigned range = HTTP_BACKOFF_MS << attempt;
    unsigned ms = (unsigned)rand_r(&seed) % range;
    struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&pause, &pause) < 0 && errno == EINTR) {
    }
}

/*
 * Run one request with retries.  `prepare` sets the request up on a
 * fresh body each attempt.  Maps transport and status errors to codes
 * with messages; 4xx are final at once (no retry storm).
 */
typedef void (*prepare_fn)(CURL *curl, struct body *b, void *arg);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* How long a range read may take before it is hedged. */
static double hedge_after_ms(struct larder__origin *o)
{
    double recent[HEDGE_WINDOW];
    pthread_mutex_lock(&o->lock);
    int n = o->latencies;
    memcpy(recent, o->latency_ms, (size_t)n * sizeof *recent);
    pthread_mutex_unlock(&o->lock);
    if (n < HEDGE_MIN_SAMPLES) return HEDGE_COLD_MS;
    qsort(recent, (size_t)n, sizeof *recent, compare_double);
    double p95 = recent[(int)(0.95 * (n - 1))];
    return p95 > HEDGE_FLOOR_MS ? p95 : HEDGE_FLOOR_MS;
}

static void record_latency(struct larder__origin *o, double ms)
{
    pthread_mutex_lock(&o->lock);
    o->latency_ms[o->next_latency] = ms;
    o->next_latency = (o->next_latency + 1) % HEDGE_WINDOW;
    if (o->latencies < HEDGE_WINDOW) o->latencies++;
    pthread_mutex_unlock(&o->lock);
}

/* Whether a finished range transfer delivered everything it should. */
static bool complete(CURL *curl, CURLcode cc, const struct body *b)
{
    long status = 0;
    if (cc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    return cc == CURLE_OK && status == 206 && !b->overflow && !b->ignored_range &&
           b->used == b->capacity;
}

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

/*
 * One attempt of a range read through a multi handle, hedged: returns the
 * handle whose answer counts (the caller reads its status) with its
 * CURLcode in *result, its body copied into *b.  The other transfer, if
 * any, is cancelled and its handle goes back to the pool.
 */
static CURL *perform_hedged(struct larder__origin *o, CURL *curl, struct body *b,
                            prepare_fn prepare, void *arg, CURLcode *result)
{
    CURLM *multi = thread_multi();
    if (!multi) {
        *result = curl_easy_perform(curl);
        return curl;
    }
    double start = now_ms(), after = hedge_after_ms(o);
    hedge_count_read();
    curl_multi_add_handle(multi, curl);
    CURL *second = NULL, *winner = NULL;
    struct body hedge_body;
    uint8_t *hedge_buf = NULL;
    int finished = 0;
    bool refused = false; /* the budget said no: ask again in HEDGE_RETRY_MS, not at once */
    while (!winner) {
        int running = 0;
        curl_multi_perform(multi, &running);
        CURLMsg *m;
        int left;
        while (!winner && (m = curl_multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            CURL *h = m->easy_handle;
            finished++;
            /* a good answer wins; a bad one counts only when nothing else is coming */
            if (complete(h, m->data.result, h == curl ? b : &hedge_body) ||
                finished == (second ? 2 : 1)) {
                winner = h;
                *result = m->data.result;
            }
        }
        if (winner) break;
        if (!second && now_ms() - start > after) {
            refused = !hedge_take();
            if (!refused && (hedge_buf = malloc(b->capacity)) && (second = handle_take(o))) {
                hedge_body =
                    (struct body){.buf = hedge_buf, .capacity = b->capacity, .range_request = true};
                http_setup(second, o, &hedge_body);
                prepare(second, &hedge_body, arg);
                curl_multi_add_handle(multi, second);
                hedge_sent(o);
                larder__log(LARDER_LOG_DEBUG, "%s: hedging a range read after %.1f ms", o->url,
                            now_ms() - start);
                continue;
            }
            if (!refused) { /* granted, but no memory or handle for it */
                free(hedge_buf);
                hedge_buf = NULL;
                hedge_unused();
                refused = true;
            }
        }
        double wait = second || refused ? HEDGE_RETRY_MS : after - (now_ms() - start);
        curl_multi_poll(multi, NULL, 0, wait < 1 ? 1 : wait > 50 ? 50 : (int)wait, NULL);
    }
    curl_multi_remove_handle(multi, curl);
    if (second) curl_multi_remove_handle(multi, second);
    if (winner == second) {
        /* the hedge won: its bytes and headers become the answer */
        uint8_t *buf = b->buf;
        memcpy(buf, hedge_buf, hedge_body.used);
        *b = hedge_body;
        b->buf = buf;
        handle_give(o, curl);
    } else if (second) {
        handle_give(o, second);
    }
    free(hedge_buf);
    if (*result == CURLE_OK && complete(winner, *result, b)) record_latency(o, now_ms() - start);
    return winner;
}

static int http_request(struct larder__origin *o, struct body *b, prepare_fn prepare, void *arg,
                        long *status)
{
    CURL *curl = handle_take(o);
    if (!curl) return -ENOMEM;
    struct body fresh = *b;
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        *b = fresh;
        http_setup(curl, o, b);
        prepare(curl, b, arg);
        CURLcode cc = CURLE_OK;
        if (b->range_request)
            curl = perform_hedged(o, curl, b, prepare, arg, &cc);
        else
            cc = curl_easy_perform(curl);
        *status = 0;
        b->content_length = -1;
        if (cc == CURLE_OK) {
            curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
            curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &b->content_length);
        }
        if (b->sink_error) {
            rc = b->sink_error;
            break;
        }
        if (b->ignored_range) {
            rc = larder__fail(LARDER_EHTTP,
                              "%s: answered 200 to a range request, not 206: the server does "
                              "not serve byte ranges",
                              o->url);
            break;
        }
        if (b->overflow) {
            rc = larder__fail(LARDER_EHTTP, "%s: server sent more bytes than requested", o->url);
            break;
        }
        if (cc == CURLE_OK && *status < 400) break;
        bool again = transient(cc, *status) && attempt + 1 < HTTP_ATTEMPTS &&
                     !(b->sink && b->used > 0); /* a stream cannot be replayed */
        if (!again) {
            if (cc != CURLE_OK)
                rc = larder__fail(LARDER_EHTTP, "%s: %s (after %d attempts)", o->url,
                                  curl_easy_strerror(cc), attempt + 1);
            else
                rc = larder__fail(*status == 404   ? -ENOENT
                                  : *status == 403 ? -EACCES
                                                   : LARDER_EHTTP,
                                  "%s: HTTP status %ld%s", o->url, *status,
                                  *status >= 500 ? " (after retries)" : "");
            break;
        }
        backoff(attempt);
    }
    handle_give(o, curl);
    return rc;
}

static void prepare_head(CURL *curl, struct body *b, void *arg)
{
    (void)b, (void)arg;
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
}

static int http_size(struct larder__origin *o)
{
    struct body b = {0};
    long status;
    int rc = http_request(o, &b, prepare_head, NULL, &status);
    if (rc < 0) return rc;
    if (b.content_length < 0)
        return larder__fail(LARDER_EHTTP, "%s: server gave no Content-Length", o->url);
    pthread_mutex_lock(&o->lock);
    o->size = (uint64_t)b.content_length;
    o->have_size = true;
    pthread_mutex_unlock(&o->lock);
    return 0;
}

static void prepare_range(CURL *curl, struct body *b, void *arg)
{
    (void)b;
    curl_easy_setopt(curl, CURLOPT_RANGE, (const char *)arg);
}

static int http_read(struct larder__origin *o, void *buf, size_t length, uint64_t offset)
{
    struct body b = {.buf = buf, .capacity = length, .range_request = true};
    char range[64];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)offset,
             (unsigned long long)(offset + length - 1));
    long status = 0;
    int rc = http_request(o, &b, prepare_range, range, &status);
    if (rc < 0) return rc;
    if (status != 206)
        return larder__fail(LARDER_EHTTP,
                            "%s: answered %ld to a range request (bytes %s), not 206: the "
                            "server does not serve byte ranges",
                            o->url, status, range);
    unsigned long long first = 0, last = 0;
    if (sscanf(b.content_range, " bytes %llu-%llu", &first, &last) != 2 || first != offset ||
        last != offset + length - 1)
        return larder__fail(LARDER_EHTTP, "%s: asked for bytes %s, Content-Range says '%s'", o->url,
                            range, b.content_range);
    if (b.used != length) {
        memset((uint8_t *)buf + b.used, 0, length - b.used);
        return larder__fail(LARDER_ETRUNCATED, "%s: short body: %zu of %zu bytes at offset %llu",
                            o->url, b.used, length, (unsigned long long)offset);
    }
    return 0;
}

static void prepare_get(CURL *curl, struct body *b, void *arg)
{
    (void)curl, (void)b, (void)arg;
}

/* ---- hedged file reads ------------------------------------------------------ */

/*
 * A shared file system has tails too (a stalled server thread, a busy
 * OST): a pread slower than the origin's recent p95 gets a second pread of
 * the same range on another thread, and the first to finish wins.  Each
 * attempt reads into a buffer of its own, so the loser can finish late
 * without touching the caller's memory.  An origin whose reads are fast
 * (p95 under FILE_HEDGE_MIN_MS, local disk or page cache) is read inline.
 */
#define FILE_HEDGE_MIN_MS 2.0

struct file_hedge {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int fd;
    size_t length;
    uint64_t offset;
    char url[512]; /* for messages: a copy, as a losing attempt may outlive the origin */
    uint8_t *buf[2];
    int rc[2];
    char message[2][256];
    int started, finished, winner, refs;
};

struct file_attempt {
    struct file_hedge *h;
    int index;
    int fd; /* its own descriptor: a losing attempt may outlive the origin's */
};

static void file_hedge_release(struct file_hedge *h)
{
    pthread_mutex_lock(&h->lock);
    bool last = --h->refs == 0;
    pthread_mutex_unlock(&h->lock);
    if (!last) return;
    free(h->buf[0]);
    free(h->buf[1]);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->changed);
    free(h);
}

static void *file_attempt(void *arg)
{
    struct file_attempt *a = arg;
    struct file_hedge *h = a->h;
    int i = a->index, a_fd = a->fd;
    free(a);
    int fd = a_fd;
    int rc = larder__pread_full(fd, h->buf[i], h->length, h->offset, h->url);
    close(fd);
    pthread_mutex_lock(&h->lock);
    h->rc[i] = rc;
    if (rc < 0) snprintf(h->message[i], sizeof h->message[i], "%s", larder_errmsg());
    h->finished++;
    if (rc == 0 && h->winner < 0) h->winner = i;
    pthread_cond_broadcast(&h->changed);
    pthread_mutex_unlock(&h->lock);
    file_hedge_release(h);
    return NULL;
}

static bool file_attempt_start(struct file_hedge *h)
{
    struct file_attempt *a = malloc(sizeof *a);
    int i = h->started;
    int fd = a ? dup(h->fd) : -1;
    if (fd < 0 || !(h->buf[i] = malloc(h->length ? h->length : 1))) {
        if (fd >= 0) close(fd);
        free(a);
        return false;
    }
    *a = (struct file_attempt){.h = h, .index = i, .fd = fd};
    h->refs++;
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool ok = pthread_create(&thread, &attr, file_attempt, a) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) {
        h->refs--;
        close(fd);
        free(a);
        return false;
    }
    h->started++;
    return true;
}

/* Whether this origin's reads are slow enough to be worth hedging. */
static bool file_reads_slow(struct larder__origin *o)
{
    pthread_mutex_lock(&o->lock);
    int n = o->latencies;
    pthread_mutex_unlock(&o->lock);
    return n < HEDGE_MIN_SAMPLES || hedge_after_ms(o) >= FILE_HEDGE_MIN_MS;
}

static int file_read(struct larder__origin *o, void *buf, size_t length, uint64_t offset)
{
    double start = now_ms();
    if (!file_reads_slow(o)) {
        int rc = larder__pread_full(o->fd, buf, length, offset, o->url);
        if (rc == 0) record_latency(o, now_ms() - start);
        return rc;
    }
    struct file_hedge *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->changed, NULL);
    h->fd = o->fd;
    h->length = length;
    h->offset = offset;
    snprintf(h->url, sizeof h->url, "%s", o->url);
    h->winner = -1;
    h->refs = 1;
    double after = hedge_after_ms(o);
    hedge_count_read();
    pthread_mutex_lock(&h->lock);
    if (!file_attempt_start(h)) {
        pthread_mutex_unlock(&h->lock);
        file_hedge_release(h);
        return larder__pread_full(o->fd, buf, length, offset, o->url);
    }
    double ask_at = after; /* ms after start: when to ask the budget for a hedge */
    bool may_hedge = true; /* false once a hedge could not be started (no thread) */
    while (h->winner < 0 && h->finished < h->started) {
        if (h->started == 1 && may_hedge) {
            double left = ask_at - (now_ms() - start);
            if (left <= 0 && !hedge_take()) { /* over the budget: credit may come later */
                ask_at = now_ms() - start + HEDGE_RETRY_MS;
                continue;
            }
            if (left <= 0) {
                if (file_attempt_start(h)) {
                    hedge_sent(o);
                    larder__log(LARDER_LOG_DEBUG, "%s: hedging a read after %.1f ms", o->url,
                                now_ms() - start);
                } else {
                    hedge_unused();
                    may_hedge = false;
                }
                continue;
            }
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            long nanos = until.tv_nsec + (long)(left * 1e6);
            until.tv_sec += nanos / 1000000000;
            until.tv_nsec = nanos % 1000000000;
            pthread_cond_timedwait(&h->changed, &h->lock, &until);
        } else {
            pthread_cond_wait(&h->changed, &h->lock);
        }
    }
    int rc;
    if (h->winner >= 0) {
        memcpy(buf, h->buf[h->winner], length);
        rc = 0;
    } else { /* every attempt failed: report the first (its buffer: what was read, then zeros) */
        rc = h->rc[0];
        memcpy(buf, h->buf[0], length);
        larder__fail(rc, "%s", h->message[0]);
    }
    pthread_mutex_unlock(&h->lock);
    file_hedge_release(h);
    if (rc == 0) record_latency(o, now_ms() - start);
    return rc;
}

/* ---- interface ---------------------------------------------------------- */

int larder__origin_size(struct larder__origin *o, uint64_t *size)
{
    pthread_mutex_lock(&o->lock);
    bool have = o->have_size;
    *size = o->size;
    pthread_mutex_unlock(&o->lock);
    if (have) return 0;
    int rc = o->fd < 0 ? http_size(o) : larder__file_size(o->fd, size, o->url);
    if (rc < 0) return rc;
    pthread_mutex_lock(&o->lock);
    if (o->fd >= 0) o->size = *size, o->have_size = true;
    *size = o->size;
    pthread_mutex_unlock(&o->lock);
    return 0;
}

int larder__origin_read(struct larder__origin *o, void *buf, size_t length, uint64_t offset)
{
    if (length == 0) return 0;
    if (o->fd >= 0) return file_read(o, buf, length, offset);
    return http_read(o, buf, length, offset);
}

int larder__origin_stream(struct larder__origin *o, larder__sink_fn sink, void *userdata)
{
    if (o->fd < 0) {
        struct body b = {.sink = sink, .userdata = userdata};
        long status = 0;
        int rc = http_request(o, &b, prepare_get, NULL, &status);
        if (rc == 0 && status != 200)
            rc = larder__fail(LARDER_EHTTP, "%s: HTTP status %ld", o->url, status);
        return rc;
    }
    size_t chunk = 1 << 20;
    uint8_t *buf = malloc(chunk);
    if (!buf) return -ENOMEM;
    int rc = 0;
    for (uint64_t offset = 0;;) {
        ssize_t n = larder__sys.pread(o->fd, buf, chunk, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = larder__fail(-errno, "%s: read at offset %llu: %s", o->url,
                              (unsigned long long)offset, strerror(errno));
            break;
        }
        if (n == 0) break;
        if ((rc = sink(userdata, buf, (size_t)n)) < 0) break;
        offset += (uint64_t)n;
    }
    free(buf);
    return rc;
}

char *larder__resolve(const char *index_url, const char *name)
{
    if (larder__is_remote(name) || name[0] == '/' || strncmp(name, "file://", 7) == 0)
        return strdup(name);
    /* the directory part of the index's location, never cutting into "scheme://host" */
    const char *host = larder__is_remote(index_url) ? strstr(index_url, "://") + 3 : index_url;
    const char *slash = strrchr(host, '/');
    size_t dir_length = slash ? (size_t)(slash - index_url + 1) : 0;
    const char *separator = "";
    if (!slash && host != index_url) { /* "http://host" alone */
        dir_length = strlen(index_url);
        separator = "/";
    }
    size_t length = dir_length + strlen(separator) + strlen(name) + 1;
    char *out = malloc(length);
    if (out) snprintf(out, length, "%.*s%s%s", (int)dir_length, index_url, separator, name);
    return out;
}

struct accumulator {
    uint8_t *buf;
    size_t used, capacity;
};

static int load_sink(void *userdata, const void *data, size_t length)
{
    struct accumulator *acc = userdata;
    if (larder__reserve((void **)&acc->buf, &acc->capacity, acc->used + length, 1) < 0)
        return -ENOMEM;
    memcpy(acc->buf + acc->used, data, length);
    acc->used += length;
    return 0;
}

int larder__origin_load(const char *url, uint8_t **data, uint64_t *size)
{
    struct larder__origin *o;
    int rc = larder__origin_open(&o, url);
    if (rc < 0) return rc;
    struct accumulator acc = {0};
    rc = larder__origin_stream(o, load_sink, &acc);
    larder__origin_close(o);
    if (rc < 0) {
        free(acc.buf);
        return rc;
    }
    *data = acc.buf;
    *size = acc.used;
    return 0;
}
