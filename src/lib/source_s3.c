/*
 * source_s3.c - an s3://bucket/key object: the HTTP source (source_http.c)
 * asking for the object's http(s) URL on its endpoint, with every request
 * signed by SigV4 (s3.c resolves the URL and credentials and signs).
 */
#include "s3.h"
#include "source_http.h"

static void s3_sign(void *context, CURL *curl)
{
    larder__s3_apply(context, curl);
}

static void s3_release(void *context)
{
    larder__s3_close(context);
}

int larder__source_s3_open(struct larder__source **out, const char *url,
                           struct larder__hedge_budget *budget)
{
    struct larder__s3 *s3;
    int rc = larder__s3_open(&s3, url, NULL);
    if (rc < 0) return rc;
    struct larder__http_signer signer = {.kind = "s3",
                                         .request_url = larder__s3_http_url(s3),
                                         .apply = s3_sign,
                                         .release = s3_release,
                                         .context = s3};
    return larder__source_http_signed_open(out, url, &signer, budget);
}
