/*
 * s3.h - s3://bucket/key objects for the HTTP origin.  An s3:// URL is
 * turned into what a plain range GET needs: the http(s) URL of the
 * object on the endpoint (path-style or virtual-host style), and the
 * libcurl settings that make libcurl sign every request with SigV4
 * (CURLOPT_AWS_SIGV4) using credentials from the standard AWS
 * environment variables or the shared credentials file.  No credentials
 * at all means unsigned (anonymous) requests, for public buckets.
 * docs/s3.md describes the configuration a person sets.
 */
#ifndef LARDER_S3_H
#define LARDER_S3_H

#include "common.h"

#include <curl/curl.h>
#include <stddef.h>

/* The parts of an s3:// URL; pointers into the URL string, valid as long as it is. */
struct larder__s3_location {
    const char *bucket; /* not NUL-terminated: bucket_length bytes */
    size_t bucket_length;
    const char *key; /* the rest of the URL after "s3://bucket/", never empty */
};

/*
 * Split `url` ("s3://bucket/key") into bucket and key.  Returns 0, or
 * LARDER_EUSAGE with a message naming the URL when it is not an s3://
 * URL, the bucket name has characters no bucket name can have, or the
 * key is empty.  No I/O, no allocation.
 */
LARDER__HIDDEN int larder__s3_parse_url(const char *url, struct larder__s3_location *out);

/* Limits of the credential fields; longer values are refused, never cut. */
#define LARDER__S3_KEY_ID_MAX 128
#define LARDER__S3_SECRET_MAX 128
#define LARDER__S3_TOKEN_MAX 4096

struct larder__s3_credentials {
    char access_key_id[LARDER__S3_KEY_ID_MAX + 1];
    char secret_access_key[LARDER__S3_SECRET_MAX + 1];
    char session_token[LARDER__S3_TOKEN_MAX + 1]; /* "" when there is none */
};

/*
 * Find `profile` in the text of an AWS shared credentials file (INI:
 * "[profile]" sections of "name = value" lines; '#' and ';' start
 * comment lines; names are case-insensitive; indented lines under a
 * name with an empty value are a nested block and skipped).  Reads
 * aws_access_key_id, aws_secret_access_key and aws_session_token (or its
 * older name aws_security_token).  `text` need not be NUL-terminated.
 *
 * Returns 0 with *out filled when the profile has a key id and a secret;
 * LARDER_ENOTFOUND when there is no such section; LARDER_EUNSUPPORTED
 * when the section has no key id (a role, SSO or process profile);
 * LARDER_EUSAGE for a malformed file (the message names the line).  *out
 * is always left with NUL-terminated strings, empty on failure.  No I/O,
 * no allocation: safe to fuzz.
 */
LARDER__HIDDEN int larder__s3_parse_credentials(const char *text, size_t length,
                                                const char *profile,
                                                struct larder__s3_credentials *out);

/* How the bucket goes into the URL. */
enum larder__s3_addressing {
    LARDER__S3_ADDRESSING_AUTO = 0, /* path-style with an endpoint, virtual-host style for AWS */
    LARDER__S3_ADDRESSING_PATH,     /* ENDPOINT/bucket/key */
    LARDER__S3_ADDRESSING_VIRTUAL,  /* bucket.ENDPOINT-HOST/key */
};

/*
 * Settings that override the environment; NULL or zero fields (and a
 * NULL options pointer) mean "from the environment, else the default".
 */
struct larder__s3_options {
    const char *endpoint;         /* e.g. "http://127.0.0.1:9000"; else $LARDER_S3_ENDPOINT,
                                     $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, AWS's own */
    const char *region;           /* else $AWS_REGION, $AWS_DEFAULT_REGION, "us-east-1" */
    const char *profile;          /* else $AWS_PROFILE, "default" */
    const char *credentials_file; /* else $AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials */
    enum larder__s3_addressing addressing; /* AUTO: else $LARDER_S3_ADDRESSING */
};

/* One s3:// object, resolved: its http(s) URL, region and credentials. */
struct larder__s3;

/*
 * Resolve `url` with `options` (may be NULL) and the environment, and
 * read the credentials (environment first, then the shared credentials
 * file; none at all means anonymous requests, said in a debug log).
 * Returns 0 and a handle the caller frees with larder__s3_close, or a
 * negative code with a message: LARDER_EUSAGE for a bad URL, endpoint
 * or setting, LARDER_ENOTFOUND for a profile named explicitly but
 * missing, errors reading the credentials file.
 */
LARDER__HIDDEN int larder__s3_open(struct larder__s3 **out, const char *url,
                                   const struct larder__s3_options *options);
LARDER__HIDDEN void larder__s3_close(struct larder__s3 *s3);

/* The object's http(s) URL, key percent-encoded; valid until larder__s3_close. */
LARDER__HIDDEN const char *larder__s3_http_url(const struct larder__s3 *s3);
/* The SigV4 region, e.g. "us-east-1"; valid until larder__s3_close. */
LARDER__HIDDEN const char *larder__s3_region(const struct larder__s3 *s3);
/* Whether requests are signed (false: anonymous). */
LARDER__HIDDEN bool larder__s3_signed(const struct larder__s3 *s3);

/*
 * Decorate an easy handle for one request to this object, after
 * curl_easy_reset and the URL: SigV4 signing (CURLOPT_AWS_SIGV4
 * "aws:amz:REGION:s3", CURLOPT_USERNAME/PASSWORD), the headers S3 wants
 * signed (x-amz-content-sha256: UNSIGNED-PAYLOAD, x-amz-security-token
 * for session credentials) as CURLOPT_HTTPHEADER, and
 * CURLOPT_PATH_AS_IS (keys are opaque: no dot-segment squashing).
 * Nothing for anonymous access.  The handle refers to memory owned by
 * `s3`: it must not be used after larder__s3_close.
 */
LARDER__HIDDEN void larder__s3_apply(const struct larder__s3 *s3, CURL *curl);
/*
 * The header list larder__s3_apply sets (NULL for anonymous access);
 * owned by `s3`.  For callers that send headers of their own: they pass
 * a list holding these and theirs.
 */
LARDER__HIDDEN const struct curl_slist *larder__s3_headers(const struct larder__s3 *s3);

#endif
