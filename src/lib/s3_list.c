/*
 * s3_list.c - the objects under an s3:// prefix (s3_list.h).
 *
 * The endpoint is hostile like any origin: a page that says "truncated"
 * with any token would have the lister ask again forever, its callers
 * keeping every name.  So the listing must advance: a token repeated, a
 * page that does not start after every key listed before it (S3 lists in
 * byte order), more than EMPTY_PAGES_MAX truncated pages in a row without
 * a key, or more than KEYS_MAX keys in all end it with LARDER_EPROTOCOL.
 */
#include "s3_list.h"
#include "s3.h"
#include "source.h"
#include "source_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "hash.h"

#define KEY_MAX 1024        /* S3 keys are at most 1024 bytes */
#define TOKEN_MAX 4096      /* continuation tokens are opaque, and short in practice */
#define PAGE_MAX (16 << 20) /* a page of 1000 keys is well under 1 MiB */
/* S3 may answer a truncated page with no key (many deleted objects in a
 * row), but not page after page of them. */
#define EMPTY_PAGES_MAX 32
/* Keys in one listing: 16 Mi names are some GiB in the caller's memory
 * (docs/security.md); more files than that are indexed by parts. */
#define KEYS_MAX (1u << 24)

/* The text of the first element `name` in [p, end), or NULL; *length its bytes. */
static const char *element(const char *p, const char *end, const char *name, size_t *length,
                           const char **after)
{
    char open[64], close[64];
    int n = snprintf(open, sizeof open, "<%s>", name);
    int m = snprintf(close, sizeof close, "</%s>", name);
    for (const char *at = p; end - at >= n; at++) {
        at = memchr(at, '<', (size_t)(end - at));
        if (!at || end - at < n) return NULL;
        if (memcmp(at, open, (size_t)n) != 0) continue;
        const char *text = at + n;
        for (const char *c = text; end - c >= m; c++) {
            c = memchr(c, '<', (size_t)(end - c));
            if (!c || end - c < m) break;
            if (memcmp(c, close, (size_t)m) == 0) {
                *length = (size_t)(c - text);
                if (after) *after = c + m;
                return text;
            }
        }
        *length = SIZE_MAX; /* opened and never closed */
        return text;
    }
    return NULL;
}

/* Decode XML character references of text[0..length) into out; its length, or -1. */
static ssize_t decode(const char *text, size_t length, char *out, size_t capacity)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
    size_t o = 0;
    for (size_t i = 0; i < length;) {
        if (o + 4 >= capacity) return -1;
        if (text[i] != '&') {
            out[o++] = text[i++];
            continue;
        }
        bool done = false;
        for (size_t k = 0; k < sizeof named / sizeof named[0] && !done; k++) {
            size_t n = strlen(named[k].name);
            if (length - i - 1 >= n && memcmp(text + i + 1, named[k].name, n) == 0)
                out[o++] = named[k].c, i += 1 + n, done = true;
        }
        if (done) continue;
        /* &#N; or &#xH; as UTF-8 */
        if (length - i < 4 || text[i + 1] != '#') return -1;
        size_t j = i + 2;
        int base = 10;
        if (text[j] == 'x') base = 16, j++;
        uint32_t cp = 0;
        size_t digits = 0;
        for (; j < length && text[j] != ';'; j++, digits++) {
            int d = text[j] >= '0' && text[j] <= '9'                 ? text[j] - '0'
                    : base == 16 && text[j] >= 'a' && text[j] <= 'f' ? text[j] - 'a' + 10
                    : base == 16 && text[j] >= 'A' && text[j] <= 'F' ? text[j] - 'A' + 10
                                                                     : -1;
            if (d < 0 || digits >= 8) return -1;
            cp = cp * (uint32_t)base + (uint32_t)d;
        }
        if (j >= length || digits == 0 || cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
            return -1;
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else if (cp < 0x800) {
            out[o++] = (char)(0xc0 | cp >> 6), out[o++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out[o++] = (char)(0xe0 | cp >> 12), out[o++] = (char)(0x80 | (cp >> 6 & 0x3f));
            out[o++] = (char)(0x80 | (cp & 0x3f));
        } else {
            out[o++] = (char)(0xf0 | cp >> 18), out[o++] = (char)(0x80 | (cp >> 12 & 0x3f));
            out[o++] = (char)(0x80 | (cp >> 6 & 0x3f)), out[o++] = (char)(0x80 | (cp & 0x3f));
        }
        i = j + 1;
    }
    out[o] = '\0';
    return (ssize_t)o;
}

/* The stamp of an object's version: XXH3-64 of its <ETag> and
 * <LastModified> texts as listed (either may be absent). */
static uint64_t version_stamp(const char *contents, const char *contents_end)
{
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    static const char *const names[] = {"ETag", "LastModified"};
    for (int i = 0; i < 2; i++) {
        size_t length;
        const char *text = element(contents, contents_end, names[i], &length, NULL);
        if (text && length != SIZE_MAX) XXH3_64bits_update(&state, text, length);
        XXH3_64bits_update(&state, "\n", 1); /* the fields kept apart */
    }
    return XXH3_64bits_digest(&state);
}

int larder__s3_list_parse(const char *xml, size_t length, const char *prefix, char *key,
                          size_t key_capacity, larder__s3_object_fn fn, void *userdata,
                          bool *truncated, char *token, size_t token_capacity)
{
    const char *end = xml + length, *after = xml;
    size_t n;
    *truncated = false;
    token[0] = '\0';
    const char *text = element(xml, end, "IsTruncated", &n, NULL);
    if (text && n == SIZE_MAX)
        return larder__fail(LARDER_EPROTOCOL, "S3 listing: <IsTruncated> not closed");
    if (text && n == 4 && memcmp(text, "true", 4) == 0) {
        *truncated = true;
        text = element(xml, end, "NextContinuationToken", &n, NULL);
        if (!text || n == SIZE_MAX || decode(text, n, token, token_capacity) <= 0)
            return larder__fail(LARDER_EPROTOCOL,
                                "S3 listing: truncated, without a continuation token S3 would "
                                "take back");
    }
    for (const char *contents; (contents = element(after, end, "Contents", &n, &after));) {
        if (n == SIZE_MAX)
            return larder__fail(LARDER_EPROTOCOL, "S3 listing: <Contents> not closed");
        const char *contents_end = contents + n;
        size_t key_length, size_length;
        const char *k = element(contents, contents_end, "Key", &key_length, NULL);
        const char *s = element(contents, contents_end, "Size", &size_length, NULL);
        ssize_t decoded;
        if (!k || key_length == SIZE_MAX ||
            (decoded = decode(k, key_length, key, key_capacity)) < 0)
            return larder__fail(LARDER_EPROTOCOL,
                                "S3 listing: an object without a key S3 could have (at most "
                                "%zu bytes)",
                                key_capacity - 5);
        size_t prefix_length = strlen(prefix);
        if ((size_t)decoded < prefix_length || memcmp(key, prefix, prefix_length) != 0 ||
            memchr(key, '\0', (size_t)decoded))
            return larder__fail(LARDER_EPROTOCOL,
                                "S3 listing: key '%.200s' is not under the prefix listed", key);
        uint64_t size = 0;
        if (!s || size_length == SIZE_MAX || size_length == 0 || size_length > 19)
            return larder__fail(LARDER_EPROTOCOL, "S3 listing: key '%.200s' has no size", key);
        for (size_t i = 0; i < size_length; i++) {
            if (s[i] < '0' || s[i] > '9')
                return larder__fail(LARDER_EPROTOCOL,
                                    "S3 listing: key '%.200s' has size '%.*s', not a number", key,
                                    (int)size_length, s);
            size = size * 10 + (uint64_t)(s[i] - '0');
        }
        if ((size_t)decoded == prefix_length) continue; /* the prefix itself: a folder marker */
        int rc = fn(userdata, key + prefix_length, (size_t)decoded - prefix_length, size,
                    version_stamp(contents, contents_end));
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- asking S3 ------------------------------------------------------------------ */

struct page_request {
    struct larder__s3 *s3;
    char *url; /* the bucket's URL with the query */
};

static void page_sign(void *context, CURL *curl)
{
    larder__s3_apply(((struct page_request *)context)->s3, curl);
}

static void page_release(void *context)
{
    struct page_request *r = context;
    larder__s3_close(r->s3);
    free(r->url);
    free(r);
}

struct page {
    char *data;
    size_t length, capacity;
};

static int page_sink(void *userdata, const void *data, size_t length)
{
    struct page *p = userdata;
    if (p->length + length > PAGE_MAX)
        return larder__fail(LARDER_EPROTOCOL, "S3 listing: a page of more than %d bytes", PAGE_MAX);
    if (larder__reserve((void **)&p->data, &p->capacity, p->length + length + 1, 1) < 0)
        return -ENOMEM;
    memcpy(p->data + p->length, data, length);
    p->length += length;
    return 0;
}

/* Append s to out, every byte but unreserved ones percent-encoded (a query value). */
static size_t put_escaped(char *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' || *p == '~';
        if (plain) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%', out[o++] = hex[*p >> 4], out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
    return o;
}

/* One page of the listing of `prefix` in the bucket of `s3_url`, after
 * `token` (may be ""); messages name `listed`. */
static int fetch_page(const char *bucket_url, const char *s3_url, const char *listed,
                      const char *prefix, const char *token, struct page *page)
{
    struct page_request *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    int rc = larder__s3_open(&r->s3, s3_url, NULL);
    if (rc < 0) {
        free(r);
        return rc;
    }
    size_t length = strlen(bucket_url) + 3 * strlen(prefix) + 3 * strlen(token) + 64;
    if (!(r->url = malloc(length))) {
        page_release(r);
        return -ENOMEM;
    }
    /* the parameters in the order SigV4 sorts them */
    size_t at = (size_t)snprintf(r->url, length, "%s?", bucket_url);
    if (token[0]) {
        at += (size_t)snprintf(r->url + at, length - at, "continuation-token=");
        at += put_escaped(r->url + at, token);
        r->url[at++] = '&';
    }
    at += (size_t)snprintf(r->url + at, length - at, "list-type=2&");
    /* LARDER_S3_LIST_PAGE: keys per page (S3's default, and most, is 1000); tests ask for few */
    const char *page_size = getenv("LARDER_S3_LIST_PAGE");
    long keys = page_size ? strtol(page_size, NULL, 10) : 0;
    if (keys > 0 && keys < 1000)
        at += (size_t)snprintf(r->url + at, length - at, "max-keys=%ld&", keys);
    at += (size_t)snprintf(r->url + at, length - at, "prefix=");
    put_escaped(r->url + at, prefix);
    struct larder__http_signer signer = {.kind = "s3",
                                         .request_url = r->url,
                                         .apply = page_sign,
                                         .release = page_release,
                                         .context = r};
    struct larder__source *source;
    if ((rc = larder__source_http_signed_open(&source, listed, &signer, NULL)) < 0) return rc;
    page->length = 0;
    rc = larder__source_stream(source, page_sink, page);
    larder__source_close(source);
    if (rc == 0 && page_sink(page, "", 1) == 0) page->length--; /* NUL-terminated */
    return rc;
}

/* What the lister knows of the listing so far, to see that it advances. */
struct progress {
    larder__s3_object_fn fn; /* the caller's */
    void *userdata;
    char *greatest; /* the greatest key so far (relative), KEY_MAX + 8 bytes */
    size_t greatest_length;
    uint64_t keys, page_keys; /* in all, in the page being parsed */
};

/* S3's order: bytes compared, a key before the keys it begins. */
static int key_order(const char *a, size_t a_length, const char *b, size_t b_length)
{
    int c = memcmp(a, b, a_length < b_length ? a_length : b_length);
    return c ? c : (a_length > b_length) - (a_length < b_length);
}

static int progress_key(void *userdata, const char *name, size_t length, uint64_t size,
                        uint64_t stamp)
{
    struct progress *p = userdata;
    bool after = key_order(name, length, p->greatest, p->greatest_length) > 0;
    if (p->page_keys == 0 && p->keys > 0 && !after)
        return larder__fail(LARDER_EPROTOCOL,
                            "S3 listing: a page starts at '%.200s', not after '%.200s' listed "
                            "before it: the listing does not advance",
                            name, p->greatest);
    if (++p->keys > KEYS_MAX)
        return larder__fail(LARDER_EPROTOCOL, "S3 listing: more than %u keys, the most listed",
                            KEYS_MAX);
    p->page_keys++;
    if (after || p->keys == 1) {
        memcpy(p->greatest, name, length); /* length < KEY_MAX: the parser's bound */
        p->greatest[length] = '\0';
        p->greatest_length = length;
    }
    return p->fn(p->userdata, name, length, size, stamp);
}

int larder__s3_list(const char *url, larder__s3_object_fn fn, void *userdata)
{
    if (strncmp(url, "s3://", 5) != 0)
        return larder__fail(LARDER_EUSAGE, "%s: not an s3:// URL", url);
    const char *slash = strchr(url + 5, '/');
    const char *prefix = slash ? slash + 1 : "";
    /* the bucket's URL: an object's (s3.c resolves endpoint and
     * addressing) without its one-byte key */
    size_t bucket_length = slash ? (size_t)(slash - url) : strlen(url);
    char *probe = malloc(bucket_length + 3);
    char *key = malloc(KEY_MAX + 8), *token = malloc(TOKEN_MAX + 8);
    char *previous_token = malloc(TOKEN_MAX + 8);
    struct progress progress = {.fn = fn, .userdata = userdata, .greatest = malloc(KEY_MAX + 8)};
    struct page page = {0};
    struct larder__s3 *s3 = NULL;
    char *bucket_url = NULL;
    int rc = probe && key && token && previous_token && progress.greatest ? 0 : -ENOMEM;
    if (rc == 0) {
        snprintf(probe, bucket_length + 3, "%.*s/x", (int)bucket_length, url);
        rc = larder__s3_open(&s3, probe, NULL);
    }
    if (rc == 0 && !(bucket_url = strdup(larder__s3_http_url(s3)))) rc = -ENOMEM;
    if (rc == 0) {
        /* "ENDPOINT/bucket/x" -> "ENDPOINT/bucket" (S3 servers sign the
         * bucket's path without the slash); "https://bucket.host/x" ->
         * "https://bucket.host/" */
        size_t end = strlen(bucket_url) - 1; /* the "x" */
        const char *host = strstr(bucket_url, "://");
        const char *path = host ? strchr(host + 3, '/') : NULL;
        if (path && bucket_url + end - 1 > path) end--;
        bucket_url[end] = '\0';
    }
    larder__s3_close(s3);
    if (rc == 0) token[0] = '\0';
    int empty_pages = 0; /* truncated ones in a row */
    for (bool more = rc == 0; more;) {
        rc = fetch_page(bucket_url, probe, url, prefix, token, &page);
        if (rc == 0) {
            strcpy(previous_token, token);
            progress.page_keys = 0;
            rc = larder__s3_list_parse(page.data ? page.data : "", page.length, prefix, key,
                                       KEY_MAX + 8, progress_key, &progress, &more, token,
                                       TOKEN_MAX + 8);
        }
        if (rc == 0 && more && strcmp(token, previous_token) == 0)
            rc = larder__fail(LARDER_EPROTOCOL,
                              "S3 listing: the same continuation token twice: the listing "
                              "does not advance");
        empty_pages = more && progress.page_keys == 0 ? empty_pages + 1 : 0;
        if (rc == 0 && empty_pages > EMPTY_PAGES_MAX)
            rc = larder__fail(LARDER_EPROTOCOL,
                              "S3 listing: %d truncated pages in a row without a key: the "
                              "listing does not advance",
                              empty_pages);
        if (rc < 0) {
            rc = larder__fail_context(rc, "listing objects");
            break;
        }
    }
    free(page.data);
    free(probe), free(key), free(token), free(previous_token), free(progress.greatest),
        free(bucket_url);
    return rc;
}
