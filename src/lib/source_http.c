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
 *
 * Redirects: an origin is asked for one URL, the one confinement
 * (confine.h, --allow) let through, and its answer must not send larder
 * elsewhere: to another host or port (an internal service, the cloud's
 * metadata address), to another scheme (https down to http, ftp), or
 * round a loop.  So a redirect is followed only to the same scheme, host
 * and port as the URL requested, at most HTTP_MAX_REDIRECTS times; each
 * hop is checked before curl connects for it and again before it sends
 * the request (a connection kept from earlier is reused without
 * connecting).  A confined opener's source (larder__source_http_confine:
 * the daemon's --allow) follows one only to a URL under its prefixes too,
 * so a redirect within an allowed origin cannot lead to its other paths.
 * A signed request (S3) is never redirected: its signature and
 * x-amz-security-token would go along.  A redirect refused fails at once,
 * naming where it led.
 *
 * This file holds the source itself: its handles, one request (HEAD, a
 * whole GET) with its retries and the verdict on an answer, size, stream
 * and lifetime.  The vectored range read is source_http_range.c's.
 */
#include "source_http_internal.h"

#include "confine.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Retries of transient failures: this many attempts in all, waiting about
 * base * 2^attempt with full jitter. */
#define HTTP_ATTEMPTS 4
#define HTTP_BACKOFF_MS 50
/* Redirects followed for one request, all on the origin (see above):
 * enough for a server's own rewrites, few enough that a loop fails fast. */
#define HTTP_MAX_REDIRECTS 5

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

void larder__http_global_init(void)
{
    pthread_once(&curl_once, curl_init_once);
}

CURL *larder__http_handle_take(struct http_source *h)
{
    pthread_mutex_lock(&h->lock);
    CURL *curl = h->num_idle ? h->idle[--h->num_idle] : NULL;
    pthread_mutex_unlock(&h->lock);
    return curl ? curl : curl_easy_init();
}

void larder__http_handle_give(struct http_source *h, CURL *curl)
{
    pthread_mutex_lock(&h->lock);
    if (h->num_idle < LARDER__HTTP_POOL) {
        h->idle[h->num_idle++] = curl;
        curl = NULL;
    }
    pthread_mutex_unlock(&h->lock);
    if (curl) curl_easy_cleanup(curl);
}

/* ---- one request ------------------------------------------------------------ */

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
        b->location[0] = '\0';
    }
    if (n > 14 && strncasecmp(data, "content-range:", 14) == 0) {
        size_t k = n - 14 < sizeof b->content_range - 1 ? n - 14 : sizeof b->content_range - 1;
        memcpy(b->content_range, data + 14, k);
        b->content_range[k] = '\0';
    }
    if (b->limit && b->status_seen >= 200 && b->status_seen < 300 && n > 15 &&
        strncasecmp(data, "content-length:", 15) == 0) {
        unsigned long long announced = strtoull(data + 15, NULL, 10);
        if (announced > b->limit) {
            b->too_large = announced > INT64_MAX ? INT64_MAX : (curl_off_t)announced;
            return 0; /* refused before the body (curl: CURLE_WRITE_ERROR) */
        }
    }
    if (n > 9 && strncasecmp(data, "location:", 9) == 0) { /* for messages only */
        const char *value = data + 9;
        size_t k = n - 9;
        while (k && (*value == ' ' || *value == '\t'))
            value++, k--;
        while (k && (value[k - 1] == '\r' || value[k - 1] == '\n' || value[k - 1] == ' '))
            k--;
        snprintf(b->location, sizeof b->location, "%.*s", (int)k, value);
    }
    return n;
}

/*
 * `url`'s origin as "scheme://host:port", lower-cased, the port written
 * out even when it is the scheme's default (curl's own parser, so it
 * reads the URL as curl will request it).  false when it cannot be parsed
 * or does not fit.
 */
static bool origin_of(const char *url, char *out, size_t capacity)
{
    CURLU *parsed = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    bool ok = parsed && curl_url_set(parsed, CURLUPART_URL, url, 0) == CURLUE_OK &&
              curl_url_get(parsed, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(parsed, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
              curl_url_get(parsed, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
    if (ok) {
        int length = snprintf(out, capacity, "%s://%s:%s", scheme, host, port);
        ok = length > 0 && (size_t)length < capacity;
    }
    for (char *c = out; ok && *c; c++)
        *c = (char)tolower((unsigned char)*c);
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(parsed);
    return ok;
}

/* Whether the request curl is about to make (the first, or a redirect's)
 * stays on the origin; else the URL is kept in b->refused for the message. */
static bool stays_on_origin(struct body *b)
{
    char *url = NULL, origin[sizeof((struct http_source *)0)->origin];
    curl_easy_getinfo(b->curl, CURLINFO_EFFECTIVE_URL, &url);
    if (url && b->origin[0] && origin_of(url, origin, sizeof origin) &&
        strcmp(origin, b->origin) == 0) {
        /* a hop (not the URL asked for, which the opener checked) of a
         * confined source; larder__allowed writes this thread's message
         * only when it refuses, and then the transfer fails with its own */
        if (!b->allow || strcmp(url, b->asked) == 0 ||
            larder__allowed(url, b->allow, "a redirect") == 0)
            return true;
        b->refused_allow = true;
    }
    snprintf(b->refused, sizeof b->refused, "%s", url ? url : "(unknown)");
    return false;
}

/* Before curl connects for a request: a hop off the origin gets no socket
 * (the transfer fails with CURLE_COULDNT_CONNECT; b->refused says why). */
static curl_socket_t open_socket(void *userdata, curlsocktype purpose,
                                 struct curl_sockaddr *address)
{
    (void)purpose;
    if (!stays_on_origin(userdata)) return CURL_SOCKET_BAD;
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

/* Before curl sends a request, also on a connection kept from earlier. */
static int before_request(void *userdata, char *remote_ip, char *local_ip, int remote_port,
                          int local_port)
{
    (void)remote_ip, (void)local_ip, (void)remote_port, (void)local_port;
    return stays_on_origin(userdata) ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
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

void larder__http_setup(CURL *curl, const struct http_source *h, struct body *b)
{
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, h->signer.request_url);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, b);
    b->curl = curl;
    b->origin = h->origin;
    b->allow = h->allow;
    b->asked = h->signer.request_url;
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, b);
    curl_easy_setopt(curl, CURLOPT_PREREQFUNCTION, before_request);
    curl_easy_setopt(curl, CURLOPT_PREREQDATA, b);
    if (!h->signer.apply) { /* a signed request is never redirected (see the top) */
        curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(curl, CURLOPT_MAXREDIRS, (long)HTTP_MAX_REDIRECTS);
        /* the origin check refuses another scheme too; this is the second lock */
        curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR,
                         strncmp(h->origin, "https:", 6) == 0 ? "https" : "http,https");
    }
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
unsigned larder__http_backoff_ms(int attempt)
{
    static _Thread_local unsigned seed;
    if (!seed) seed = (unsigned)(uintptr_t)&seed ^ (unsigned)getpid();
    unsigned range = HTTP_BACKOFF_MS << attempt;
    return (unsigned)rand_r(&seed) % range;
}

/*
 * What a finished attempt means: answered (a status under 400: the caller
 * checks the rest), worth another attempt, or failed (*rc, with a message).
 */
enum verdict larder__http_judge(const struct http_source *h, CURLcode cc, long status,
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
    if (b->too_large) {
        *rc = larder__fail(-EFBIG,
                           "%s: %s of %lld bytes (its Content-Length): refused, more than "
                           "the %llu larder loads into memory",
                           url, h->stream_limit_what, (long long)b->too_large,
                           (unsigned long long)h->stream_limit);
        return FAILED;
    }
    if (b->refused[0] && !h->origin[0]) {
        *rc = larder__fail(LARDER_EHTTP, "%s: not a URL that can be parsed", url);
        return FAILED;
    }
    if (b->refused[0] && b->refused_allow) {
        *rc = larder__fail(LARDER_EDENIED,
                           "%s: redirected to %s, outside the allowed prefixes (--allow): "
                           "refused",
                           url, b->refused);
        return FAILED;
    }
    if (b->refused[0]) {
        *rc = larder__fail(LARDER_EDENIED,
                           "%s: redirected to %s, off the origin %s: refused (redirects are "
                           "followed only to the same scheme, host and port)",
                           url, b->refused, h->origin);
        return FAILED;
    }
    if (cc == CURLE_TOO_MANY_REDIRECTS) {
        *rc = larder__fail(LARDER_EHTTP, "%s: more than %d redirects (a loop?), the last to %s",
                           url, HTTP_MAX_REDIRECTS, b->location);
        return FAILED;
    }
    if (cc == CURLE_UNSUPPORTED_PROTOCOL) {
        *rc = larder__fail(LARDER_EDENIED,
                           "%s: redirected to %s: refused (only http and https are followed, "
                           "and https only to https)",
                           url, b->location[0] ? b->location : "another scheme");
        return FAILED;
    }
    if (cc == CURLE_OK && status >= 300 && status < 400) { /* not followed */
        *rc = larder__fail(LARDER_EHTTP, "%s: HTTP status %ld%s%s%s", url, status,
                           b->location[0] ? ", redirected to " : " (a redirect without a Location)",
                           b->location,
                           b->location[0] && h->signer.apply
                               ? ": not followed (a signed request is never redirected: its "
                                 "signature and token would go along)"
                               : "");
        return FAILED;
    }
    if (cc == CURLE_OK && status < 300) return ANSWERED;
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
    CURL *curl = larder__http_handle_take(h);
    if (!curl) return -ENOMEM;
    struct body fresh = *b;
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        *b = fresh;
        larder__http_setup(curl, h, b);
        if (nobody) curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
        CURLcode cc = curl_easy_perform(curl);
        *status = 0;
        b->content_length = -1;
        if (cc == CURLE_OK) {
            curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
            curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &b->content_length);
        }
        if (larder__http_judge(h, cc, *status, b, attempt, &rc) != AGAIN) break;
        unsigned ms = larder__http_backoff_ms(attempt);
        struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
        while (nanosleep(&pause, &pause) < 0 && errno == EINTR) {
        }
    }
    larder__http_handle_give(h, curl);
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
    struct body b = {.sink = sink, .userdata = userdata, .limit = h->stream_limit};
    long status = 0;
    int rc = http_request(h, &b, false, &status);
    if (rc == 0 && status != 200)
        rc = larder__fail(LARDER_EHTTP, "%s: HTTP status %ld", h->name, status);
    return rc;
}

void larder__source_http_stream_limit(struct larder__source *source, uint64_t limit,
                                      const char *what)
{
    struct http_source *h = (struct http_source *)source;
    h->stream_limit = limit;
    h->stream_limit_what = what;
}

void larder__source_http_confine(struct larder__source *source, const char *const *prefixes)
{
    struct http_source *h = (struct http_source *)source;
    h->allow = prefixes;
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
    .read = larder__http_read,
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
    /* unparsable: no origin, and every request is refused with a message */
    if (!origin_of(h->signer.request_url, h->origin, sizeof h->origin)) h->origin[0] = '\0';
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
