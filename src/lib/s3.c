/*
 * s3.c - s3://bucket/key objects: where they live (the endpoint, path or
 * virtual-host addressing, the region) and who asks for them (AWS
 * credentials from the environment or the shared credentials file).
 *
 * larder does not compute signatures itself: libcurl signs each request
 * (CURLOPT_AWS_SIGV4), and tests/unit/test_s3.c checks what libcurl
 * produces against AWS's published SigV4 vectors.  libcurl 7.88 signs
 * every header the request carries in CURLOPT_HTTPHEADER, and for the
 * "s3" service takes the payload hash from an x-amz-content-sha256
 * header when there is one, but does not add that header itself; S3
 * refuses SigV4 requests without it, so larder sends
 * "x-amz-content-sha256: UNSIGNED-PAYLOAD" (the bodies are empty GETs
 * and HEADs; the response, not the request, is what larder checks).
 */
#include "s3.h"
#include "sys.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* A shared credentials file larger than this is not one. */
#define CREDENTIALS_FILE_MAX (1 << 20)
#define REGION_MAX 63

struct larder__s3 {
    char *http_url;              /* what the HTTP origin fetches */
    char region[REGION_MAX + 1]; /* the SigV4 scope's region */
    char sigv4[REGION_MAX + 16]; /* "aws:amz:REGION:s3" for CURLOPT_AWS_SIGV4 */
    bool is_signed;              /* false: anonymous, unsigned requests */
    struct larder__s3_credentials credentials;
    struct curl_slist *headers; /* signed along with host and x-amz-date */
};

/* ---- s3:// URLs ---------------------------------------------------------- */

/* Characters a bucket name may have, leniently (S3-compatible stores allow
 * more than AWS); none of them needs escaping in a URL. */
static bool bucket_char(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

int larder__s3_parse_url(const char *url, struct larder__s3_location *out)
{
    if (strncmp(url, "s3://", 5) != 0)
        return larder__fail(LARDER_EUSAGE, "%s: not an s3://bucket/key URL", url);
    const char *bucket = url + 5;
    const char *slash = strchr(bucket, '/');
    size_t bucket_length = slash ? (size_t)(slash - bucket) : strlen(bucket);
    if (bucket_length == 0 || bucket_length > 255)
        return larder__fail(LARDER_EUSAGE, "%s: no bucket name (s3://bucket/key)", url);
    for (size_t i = 0; i < bucket_length; i++)
        if (!bucket_char(bucket[i]))
            return larder__fail(LARDER_EUSAGE,
                                "%s: '%c' cannot be in a bucket name (letters, digits, '.', "
                                "'-' and '_' can)",
                                url, bucket[i]);
    if (!slash || slash[1] == '\0')
        return larder__fail(LARDER_EUSAGE, "%s: names a bucket, not an object (s3://bucket/key)",
                            url);
    out->bucket = bucket;
    out->bucket_length = bucket_length;
    out->key = slash + 1;
    return 0;
}

/* ---- the shared credentials file ----------------------------------------- */

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Trim blanks (and a line's CR) from both ends of [*start, *start + *length). */
static void trim(const char **start, size_t *length)
{
    while (*length && blank(**start))
        (*start)++, (*length)--;
    while (*length && (blank((*start)[*length - 1]) || (*start)[*length - 1] == '\r'))
        (*length)--;
}

static bool name_is(const char *name, size_t length, const char *want)
{
    return length == strlen(want) && strncasecmp(name, want, length) == 0;
}

/*
 * Copy one credential value: printable ASCII without spaces (it goes
 * into headers), at most `capacity` bytes.  `where` starts messages,
 * which never quote the value.
 */
static int copy_value(char *to, size_t capacity, const char *value, size_t length,
                      const char *where, const char *name)
{
    if (length > capacity)
        return larder__fail(LARDER_EUSAGE, "%s: %s is longer than %zu bytes", where, name,
                            capacity);
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)value[i] < 0x21 || (unsigned char)value[i] > 0x7e)
            return larder__fail(LARDER_EUSAGE,
                                "%s: %s has a space or a character that is not printable ASCII",
                                where, name);
    memcpy(to, value, length);
    to[length] = '\0';
    return 0;
}

/*
 * One "name = value" line of the wanted profile, into `out` (the legacy
 * aws_security_token into `legacy_token`, of LARDER__S3_TOKEN_MAX + 1
 * bytes); other names are ignored.  0 or LARDER_EUSAGE.
 */
static int profile_setting(const char *name, size_t name_length, const char *value,
                           size_t value_length, size_t line, struct larder__s3_credentials *out,
                           char *legacy_token)
{
    char where[32];
    snprintf(where, sizeof where, "line %zu", line);
    if (name_is(name, name_length, "aws_access_key_id"))
        return copy_value(out->access_key_id, LARDER__S3_KEY_ID_MAX, value, value_length, where,
                          "aws_access_key_id");
    if (name_is(name, name_length, "aws_secret_access_key"))
        return copy_value(out->secret_access_key, LARDER__S3_SECRET_MAX, value, value_length, where,
                          "aws_secret_access_key");
    if (name_is(name, name_length, "aws_session_token"))
        return copy_value(out->session_token, LARDER__S3_TOKEN_MAX, value, value_length, where,
                          "aws_session_token");
    if (name_is(name, name_length, "aws_security_token"))
        return copy_value(legacy_token, LARDER__S3_TOKEN_MAX, value, value_length, where,
                          "aws_security_token");
    return 0;
}

static int parse_credentials(const char *text, size_t length, const char *profile,
                             struct larder__s3_credentials *out)
{
    char legacy_token[LARDER__S3_TOKEN_MAX + 1] = "";
    bool in_section = false; /* past the first [section] */
    bool in_profile = false; /* in a [profile] section */
    bool found = false;      /* saw [profile] */
    bool nested = false;     /* in the indented block under "name =" */
    size_t line = 0;
    for (size_t position = 0; position < length;) {
        const char *start = text + position;
        const char *newline = memchr(start, '\n', length - position);
        size_t n = newline ? (size_t)(newline - start) : length - position;
        position += n + (newline != NULL);
        line++;
        bool indented = n > 0 && blank(start[0]);
        trim(&start, &n);
        if (n == 0 || start[0] == '#' || start[0] == ';') continue;
        if (indented && nested) continue;
        nested = false;
        if (start[0] == '[') {
            if (start[n - 1] != ']')
                return larder__fail(LARDER_EUSAGE, "line %zu: a section header without ']'", line);
            const char *name = start + 1;
            size_t name_length = n - 2;
            trim(&name, &name_length);
            in_section = true;
            in_profile = name_length == strlen(profile) && memcmp(name, profile, name_length) == 0;
            found |= in_profile;
            continue;
        }
        /* "name = value" or "name: value", split at the first delimiter:
         * names never hold one, tokens may end in '=' padding */
        size_t delimiter = 0;
        while (delimiter < n && start[delimiter] != '=' && start[delimiter] != ':')
            delimiter++;
        if (delimiter == n)
            return larder__fail(LARDER_EUSAGE, "line %zu: neither '[profile]' nor 'name = value'",
                                line);
        const char *name = start, *value = start + delimiter + 1;
        size_t name_length = delimiter, value_length = n - delimiter - 1;
        trim(&name, &name_length);
        trim(&value, &value_length);
        if (name_length == 0)
            return larder__fail(LARDER_EUSAGE, "line %zu: no name before '='", line);
        if (!in_section)
            return larder__fail(LARDER_EUSAGE, "line %zu: a setting before any [profile] section",
                                line);
        if (value_length == 0) {
            nested = true; /* "s3 =" followed by indented settings */
            continue;
        }
        if (!in_profile) continue;
        int rc = profile_setting(name, name_length, value, value_length, line, out, legacy_token);
        if (rc < 0) return rc;
    }
    if (!found) return larder__fail(LARDER_ENOTFOUND, "no [%s] profile", profile);
    if (!out->access_key_id[0])
        return larder__fail(LARDER_EUNSUPPORTED,
                            "profile [%s] has no aws_access_key_id (role, SSO and process "
                            "credentials are not supported)",
                            profile);
    if (!out->secret_access_key[0])
        return larder__fail(LARDER_EUSAGE,
                            "profile [%s] has aws_access_key_id but no aws_secret_access_key",
                            profile);
    if (!out->session_token[0]) memcpy(out->session_token, legacy_token, sizeof legacy_token);
    return 0;
}

int larder__s3_parse_credentials(const char *text, size_t length, const char *profile,
                                 struct larder__s3_credentials *out)
{
    memset(out, 0, sizeof *out);
    int rc = parse_credentials(text, length, profile, out);
    if (rc < 0) memset(out, 0, sizeof *out);
    return rc;
}

/* ---- resolving an s3:// URL ---------------------------------------------- */

/* An environment variable, or NULL when unset or empty. */
static const char *env(const char *name)
{
    const char *value = getenv(name);
    return value && value[0] ? value : NULL;
}

static const char *first_of(const char *a, const char *b, const char *c, const char *d)
{
    return a ? a : b ? b : c ? c : d;
}

/* A growable string for building URLs. */
struct text {
    char *data;
    size_t used, capacity;
    bool failed;
};

static void append(struct text *t, const char *s, size_t length)
{
    if (t->failed) return;
    if (larder__reserve((void **)&t->data, &t->capacity, t->used + length + 1, 1) < 0) {
        t->failed = true;
        return;
    }
    memcpy(t->data + t->used, s, length);
    t->used += length;
    t->data[t->used] = '\0';
}

static void append_str(struct text *t, const char *s)
{
    append(t, s, strlen(s));
}

/* The key as S3 canonicalizes it: every byte but unreserved ones and '/'
 * percent-encoded, so the path libcurl signs is the one S3 checks. */
static void append_key(struct text *t, const char *key)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' || *p == '/') {
            append(t, (const char *)p, 1);
        } else {
            char escaped[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            append(t, escaped, 3);
        }
    }
}

/* An endpoint split into "scheme://", host[:port] and a path without its trailing '/'. */
struct endpoint {
    char scheme[9];
    const char *host;
    size_t host_length;
    const char *path;
    size_t path_length;
};

static int parse_endpoint(const char *endpoint, struct endpoint *out)
{
    const char *rest = endpoint;
    snprintf(out->scheme, sizeof out->scheme, "https://");
    if (strncasecmp(endpoint, "http://", 7) == 0)
        snprintf(out->scheme, sizeof out->scheme, "http://"), rest += 7;
    else if (strncasecmp(endpoint, "https://", 8) == 0)
        rest += 8;
    else if (strstr(endpoint, "://"))
        return larder__fail(LARDER_EUSAGE, "S3 endpoint '%s': only http:// and https:// work",
                            endpoint);
    for (const char *p = rest; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '?' || *p == '#' || *p == '@' || *p == 0x7f)
            return larder__fail(LARDER_EUSAGE,
                                "S3 endpoint '%s': spaces, '?', '#' and '@' cannot be in it",
                                endpoint);
    const char *slash = strchr(rest, '/');
    out->host = rest;
    out->host_length = slash ? (size_t)(slash - rest) : strlen(rest);
    if (out->host_length == 0)
        return larder__fail(LARDER_EUSAGE, "S3 endpoint '%s' has no host", endpoint);
    out->path = rest + out->host_length;
    out->path_length = strlen(out->path);
    while (out->path_length && out->path[out->path_length - 1] == '/')
        out->path_length--;
    return 0;
}

/* Whether a bucket name can be the first label of a host name (on AWS,
 * a dotted one would not match the certificate's wildcard). */
static bool dns_compatible(const struct larder__s3_location *location, bool allow_dots)
{
    if (location->bucket_length < 3 || location->bucket_length > 63) return false;
    for (size_t i = 0; i < location->bucket_length; i++) {
        char c = location->bucket[i];
        if (!(islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-' ||
              (allow_dots && c == '.')))
            return false;
    }
    return location->bucket[0] != '-' && location->bucket[location->bucket_length - 1] != '-';
}

static int addressing_from_env(enum larder__s3_addressing *out)
{
    const char *value = env("LARDER_S3_ADDRESSING");
    if (!value || strcasecmp(value, "auto") == 0)
        *out = LARDER__S3_ADDRESSING_AUTO;
    else if (strcasecmp(value, "path") == 0)
        *out = LARDER__S3_ADDRESSING_PATH;
    else if (strcasecmp(value, "virtual") == 0)
        *out = LARDER__S3_ADDRESSING_VIRTUAL;
    else
        return larder__fail(LARDER_EUSAGE,
                            "LARDER_S3_ADDRESSING='%s': use 'path', 'virtual' or 'auto'", value);
    return 0;
}

static int build_url(struct larder__s3 *s3, const char *url,
                     const struct larder__s3_location *location, const char *endpoint,
                     enum larder__s3_addressing addressing)
{
    char aws_endpoint[128];
    if (!endpoint) {
        /* AWS itself; the China regions live under another domain */
        snprintf(aws_endpoint, sizeof aws_endpoint, "https://s3.%s.amazonaws.com%s", s3->region,
                 strncmp(s3->region, "cn-", 3) == 0 ? ".cn" : "");
    }
    struct endpoint e;
    int rc = parse_endpoint(endpoint ? endpoint : aws_endpoint, &e);
    if (rc < 0) return rc;
    bool virtual_host;
    if (addressing == LARDER__S3_ADDRESSING_VIRTUAL) {
        if (!dns_compatible(location, true))
            return larder__fail(LARDER_EUSAGE,
                                "%s: bucket '%.*s' cannot be a host name, so virtual-host "
                                "addressing cannot reach it (LARDER_S3_ADDRESSING=path can)",
                                url, (int)location->bucket_length, location->bucket);
        virtual_host = true;
    } else if (addressing == LARDER__S3_ADDRESSING_PATH) {
        virtual_host = false;
    } else {
        virtual_host = !endpoint && dns_compatible(location, false);
    }
    struct text t = {0};
    append_str(&t, e.scheme);
    if (virtual_host) {
        append(&t, location->bucket, location->bucket_length);
        append_str(&t, ".");
    }
    append(&t, e.host, e.host_length);
    append(&t, e.path, e.path_length);
    append_str(&t, "/");
    if (!virtual_host) {
        append(&t, location->bucket, location->bucket_length);
        append_str(&t, "/");
    }
    append_key(&t, location->key);
    if (t.failed) {
        free(t.data);
        return -ENOMEM;
    }
    s3->http_url = t.data;
    return 0;
}

static int set_region(struct larder__s3 *s3, const char *region)
{
    size_t length = strlen(region);
    bool ok = length > 0 && length <= REGION_MAX;
    for (size_t i = 0; ok && i < length; i++)
        ok = isalnum((unsigned char)region[i]) || region[i] == '-';
    if (!ok)
        return larder__fail(LARDER_EUSAGE,
                            "S3 region '%s': letters, digits and '-' only, like 'us-east-1'",
                            region);
    memcpy(s3->region, region, length + 1);
    snprintf(s3->sigv4, sizeof s3->sigv4, "aws:amz:%s:s3", region);
    return 0;
}

/* Read a whole small file into a malloc'd buffer; -errno (message naming it) when it cannot. */
static int read_small_file(const char *path, char **data, size_t *size)
{
    int fd = larder__open(path, O_RDONLY, 0);
    if (fd < 0) return fd;
    uint64_t file_size = 0;
    int rc = larder__file_size(fd, &file_size, path);
    if (rc == 0 && file_size > CREDENTIALS_FILE_MAX)
        rc = larder__fail(LARDER_EUSAGE, "%s: %llu bytes is too large for a credentials file", path,
                          (unsigned long long)file_size);
    char *buf = NULL;
    if (rc == 0 && !(buf = malloc(file_size ? file_size : 1))) rc = -ENOMEM;
    if (rc == 0) rc = larder__pread_full(fd, buf, file_size, 0, path);
    larder__sys.close(fd);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *data = buf;
    *size = file_size;
    return 0;
}

/* Credentials from AWS_ACCESS_KEY_ID and friends: 1 when found, 0 when unset, or an error. */
static int credentials_from_env(struct larder__s3_credentials *c)
{
    const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
    const char *token = env("AWS_SESSION_TOKEN");
    if (!id && !secret) return 0;
    if (!id || !secret)
        return larder__fail(LARDER_EUSAGE, "%s is set but %s is not",
                            id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                            id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
    const char *where = "the environment";
    int rc = copy_value(c->access_key_id, LARDER__S3_KEY_ID_MAX, id, strlen(id), where,
                        "AWS_ACCESS_KEY_ID");
    if (rc == 0)
        rc = copy_value(c->secret_access_key, LARDER__S3_SECRET_MAX, secret, strlen(secret), where,
                        "AWS_SECRET_ACCESS_KEY");
    if (rc == 0 && token)
        rc = copy_value(c->session_token, LARDER__S3_TOKEN_MAX, token, strlen(token), where,
                        "AWS_SESSION_TOKEN");
    if (rc < 0) {
        memset(c, 0, sizeof *c);
        return rc;
    }
    return 1;
}

/*
 * Credentials from the shared credentials file: 1 when found, 0 when
 * there are none to be had (no file, no such profile, unless the profile
 * was asked for by name), or an error.  `source` gets a description.
 */
static int credentials_from_file(struct larder__s3_credentials *c,
                                 const struct larder__s3_options *options, char *source,
                                 size_t source_size)
{
    const char *profile_asked = options && options->profile ? options->profile : env("AWS_PROFILE");
    const char *profile = profile_asked ? profile_asked : "default";
    const char *path = options && options->credentials_file ? options->credentials_file
                                                            : env("AWS_SHARED_CREDENTIALS_FILE");
    char default_path[4096];
    if (!path) {
        const char *home = env("HOME");
        if (!home) {
            snprintf(source, source_size, "no credentials file ($HOME is not set)");
            return 0;
        }
        snprintf(default_path, sizeof default_path, "%s/.aws/credentials", home);
        path = default_path;
    }
    char *text = NULL;
    size_t size = 0;
    int rc = read_small_file(path, &text, &size);
    if (rc == -ENOENT && !profile_asked) {
        snprintf(source, source_size, "no %s", path);
        return 0;
    }
    if (rc == -ENOENT)
        return larder__fail(LARDER_ENOTFOUND,
                            "AWS profile '%s' was asked for, but %s does not exist", profile, path);
    if (rc < 0) return rc;
    rc = larder__s3_parse_credentials(text, size, profile, c);
    free(text);
    if (rc == LARDER_ENOTFOUND && !profile_asked) {
        snprintf(source, source_size, "no [%s] in %s", profile, path);
        return 0;
    }
    if (rc < 0) return larder__fail_context(rc, "%s", path);
    snprintf(source, source_size, "%s [%s]", path, profile);
    return 1;
}

static int make_headers(struct larder__s3 *s3)
{
    s3->headers = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!s3->headers) return -ENOMEM;
    if (s3->credentials.session_token[0]) {
        char header[LARDER__S3_TOKEN_MAX + 32];
        snprintf(header, sizeof header, "x-amz-security-token: %s", s3->credentials.session_token);
        struct curl_slist *more = curl_slist_append(s3->headers, header);
        if (!more) return -ENOMEM;
        s3->headers = more;
    }
    return 0;
}

int larder__s3_open(struct larder__s3 **out, const char *url,
                    const struct larder__s3_options *options)
{
    struct larder__s3_location location;
    int rc = larder__s3_parse_url(url, &location);
    if (rc < 0) return rc;
    struct larder__s3 *s3 = calloc(1, sizeof *s3);
    if (!s3) return -ENOMEM;

    const struct larder__s3_options none = {0};
    if (!options) options = &none;
    rc = set_region(
        s3, first_of(options->region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"), "us-east-1"));
    enum larder__s3_addressing addressing = options->addressing;
    if (rc == 0 && addressing == LARDER__S3_ADDRESSING_AUTO) rc = addressing_from_env(&addressing);
    const char *endpoint = first_of(options->endpoint, env("LARDER_S3_ENDPOINT"),
                                    env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"));
    if (rc == 0) rc = build_url(s3, url, &location, endpoint, addressing);

    char source[4200] = "the environment";
    if (rc == 0) rc = credentials_from_env(&s3->credentials);
    if (rc == 0) rc = credentials_from_file(&s3->credentials, options, source, sizeof source);
    if (rc > 0) {
        s3->is_signed = true;
        rc = make_headers(s3);
    }
    if (rc < 0) {
        larder__s3_close(s3);
        return rc;
    }
    if (s3->is_signed)
        larder__log(LARDER_LOG_DEBUG, "%s: %s, region %s, signed with the key id %s from %s", url,
                    s3->http_url, s3->region, s3->credentials.access_key_id, source);
    else
        larder__log(LARDER_LOG_DEBUG,
                    "%s: %s, anonymous requests: no AWS credentials in the environment, and %s",
                    url, s3->http_url, source);
    *out = s3;
    return 0;
}

void larder__s3_close(struct larder__s3 *s3)
{
    if (!s3) return;
    curl_slist_free_all(s3->headers);
    free(s3->http_url);
    /* the secret should not outlive its use in freed memory */
    memset(&s3->credentials, 0, sizeof s3->credentials);
    free(s3);
}

const char *larder__s3_http_url(const struct larder__s3 *s3)
{
    return s3->http_url;
}

const char *larder__s3_region(const struct larder__s3 *s3)
{
    return s3->region;
}

bool larder__s3_signed(const struct larder__s3 *s3)
{
    return s3->is_signed;
}

const struct curl_slist *larder__s3_headers(const struct larder__s3 *s3)
{
    return s3->headers;
}

void larder__s3_apply(const struct larder__s3 *s3, CURL *curl)
{
    curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
    if (!s3->is_signed) return;
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, s3->sigv4);
    curl_easy_setopt(curl, CURLOPT_USERNAME, s3->credentials.access_key_id);
    curl_easy_setopt(curl, CURLOPT_PASSWORD, s3->credentials.secret_access_key);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, s3->headers);
}
