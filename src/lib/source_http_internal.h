/*
 * source_http_internal.h - what the HTTP source's files (source_http.c,
 * source_http_range.c) share: the source, the state of one response, and
 * the request helpers both kinds of request go through.  Private to
 * them; S3 goes through source_http.h.
 */
#ifndef LARDER_SOURCE_HTTP_INTERNAL_H
#define LARDER_SOURCE_HTTP_INTERNAL_H

#include "source_hedge.h"
#include "source_http.h"

#include <pthread.h>

#define LARDER__HTTP_POOL 256 /* idle handles kept per source */

/* One http(s):// object as a source (source_http.c says how it reads). */
struct http_source {
    struct larder__source base;
    struct larder__source_ops ops; /* http's, under the signer's kind */
    char *name;                    /* the URL as given: messages name it */
    char *escaped;                 /* the same with what curl refuses escaped (see escape_url) */
    char origin[320];              /* "scheme://host:port" of the URL requested (see origin_of) */
    struct larder__http_signer signer;
    pthread_mutex_t lock;          /* guards idle[] and the size */
    CURL *idle[LARDER__HTTP_POOL]; /* connections to reuse: one transfer at a time each */
    int num_idle;
    uint64_t size;
    bool have_size;
    uint64_t stream_limit;         /* see larder__source_http_stream_limit; 0: none */
    const char *stream_limit_what; /* names the object in that message */
    const char *const *allow;      /* redirects only under these (larder__source_http_confine) */
    struct larder__hedge_policy policy;
};

/* Where one response goes, and what was seen of it. */
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
    uint64_t limit;            /* a stream's most bytes by Content-Length (0: any) */
    curl_off_t too_large;      /* a Content-Length over limit, else 0 */
    /* Redirects (source_http.c, "Redirects"): set up by larder__http_setup */
    CURL *curl;               /* the handle making the request: valid during it only */
    const char *origin;       /* the source's origin, which every request must stay on */
    char location[256];       /* the Location header of the latest response, if any */
    char refused[256];        /* a URL a redirect led to and that was not requested */
    bool refused_allow;       /* ... on the origin, but outside the allowed prefixes */
    const char *const *allow; /* the source's (larder__source_http_confine), or NULL */
    const char *asked;        /* the URL requested (its first hop) */
};

/* A connection from the source's idle ones (or a new one); NULL when out of memory. */
LARDER__HIDDEN CURL *larder__http_handle_take(struct http_source *h);
/* Back to the idle ones (or cleaned up when they are full). */
LARDER__HIDDEN void larder__http_handle_give(struct http_source *h, CURL *curl);
/* A handle reset for one request of `h`'s object, answering into `b`. */
LARDER__HIDDEN void larder__http_setup(CURL *curl, const struct http_source *h, struct body *b);
/* How long to wait before attempt + 1 (ms, jittered). */
LARDER__HIDDEN unsigned larder__http_backoff_ms(int attempt);

enum verdict { ANSWERED, AGAIN, FAILED };

/* What a finished attempt means (source_http.c says how it is judged). */
LARDER__HIDDEN enum verdict larder__http_judge(const struct http_source *h, CURLcode cc,
                                               long status, const struct body *b, int attempt,
                                               int *rc);

/* The source's vectored read: its extents at once on the thread's multi handle. */
LARDER__HIDDEN int larder__http_read(struct larder__source *source,
                                     const struct larder__extent *extents, size_t count,
                                     unsigned flags);

#endif
