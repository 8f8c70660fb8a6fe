/*
 * source_http.h - the hook an HTTP-based source (S3) uses to make the HTTP
 * source sign its requests.  Private to source_http.c and source_s3.c.
 */
#ifndef LARDER_SOURCE_HTTP_H
#define LARDER_SOURCE_HTTP_H

#include "source.h"

#include <curl/curl.h>

/* How requests to the object are made and signed. */
struct larder__http_signer {
    const char *kind;        /* the source's kind, e.g. "s3" */
    const char *request_url; /* the http(s) URL asked for; valid until release */
    /* Decorate a handle for one request, after curl_easy_reset and the URL. */
    void (*apply)(void *context, CURL *curl);
    /* Free the context (when the source is destroyed, or its creation fails). */
    void (*release)(void *context);
    void *context;
};

/*
 * An HTTP source for the object named `url` in messages, requests made as
 * `signer` says (NULL: plain requests for `url` itself), hedged with
 * `budget` (NULL: the process's).  The source owns the signer's context
 * from now on, even when this fails.  0, or -ENOMEM.
 */
LARDER__HIDDEN int larder__source_http_signed_open(struct larder__source **out, const char *url,
                                                   const struct larder__http_signer *signer,
                                                   struct larder__hedge_budget *budget);

/*
 * Have `source` (one that larder__source_http_signed_open or
 * larder__source_s3_open made) refuse a stream whose Content-Length is
 * over `limit` bytes before its body (-EFBIG, naming it as `what`).  The
 * sink still counts what comes: a body may have no Content-Length.
 */
LARDER__HIDDEN void larder__source_http_stream_limit(struct larder__source *source, uint64_t limit,
                                                     const char *what);

/*
 * Have `source` (an HTTP source) follow a redirect only to a URL under one
 * of the NULL-terminated `prefixes` (larder__allowed, confine.h), besides
 * staying on the origin: a confined opener's (the daemon's --allow) reads
 * stay inside its prefixes, not only on their hosts.  The array and its
 * strings must outlive the source.  NULL: no such limit.
 */
LARDER__HIDDEN void larder__source_http_confine(struct larder__source *source,
                                                const char *const *prefixes);

/* libcurl's (and OpenSSL's) global set-up, once per process; done on the
 * first HTTP source's open otherwise.  A program with worker threads calls
 * it first thing on its main thread: OpenSSL's set-up on a worker leaves
 * state of that thread's that is never freed (larderd_start does). */
LARDER__HIDDEN void larder__http_global_init(void);

#endif
