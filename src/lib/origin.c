/*
 * origin.c - file and HTTP origins behind one small interface.
 */
#include "origin.h"
#include "sys.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct larder__origin {
    char *url;
    int fd; /* files; -1 for HTTP */
    CURL *curl;
    pthread_mutex_t lock; /* one transfer at a time on the handle */
    uint64_t size;
    bool have_size;
};

bool larder__is_remote(const char *name)
{
    return strncmp(name, "http://", 7) == 0 || strncmp(name, "https://", 8) == 0;
}

static const char *file_path(const char *url)
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
        o->curl = curl_easy_init();
        if (!o->curl) {
            larder__origin_close(o);
            return -ENOMEM;
        }
    } else {
        int fd = larder__open(file_path(url), O_RDONLY, 0);
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
    if (o->curl) curl_easy_cleanup(o->curl);
    pthread_mutex_destroy(&o->lock);
    free(o->url);
    free(o);
}

const char *larder__origin_url(const struct larder__origin *o)
{
    return o->url;
}

/* ---- HTTP -------------------------------------------------------------- */

struct body {
    uint8_t *buf; /* fixed buffer (range reads), or NULL */
    size_t capacity;
    size_t used;
    larder__sink_fn sink; /* streaming */
    void *userdata;
    int sink_error;
    bool overflow;
};

static size_t on_body(char *data, size_t size, size_t count, void *userdata)
{
    struct body *b = userdata;
    size_t n = size * count;
    if (b->sink) {
        int rc = b->sink(b->userdata, data, n);
        if (rc < 0) {
            b->sink_error = rc;
            return 0;
        }
        b->used += n;
        return n;
    }
    if (n > b->capacity - b->used) {
        b->overflow = true;
        return 0;
    }
    memcpy(b->buf + b->used, data, n);
    b->used += n;
    return n;
}

static void http_setup(struct larder__origin *o, struct body *b)
{
    curl_easy_reset(o->curl);
    curl_easy_setopt(o->curl, CURLOPT_URL, o->url);
    curl_easy_setopt(o->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(o->curl, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(o->curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(o->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(o->curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(o->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(o->curl, CURLOPT_LOW_SPEED_TIME, 30L);
}

/* Run the transfer; map transport and status errors to codes with messages. */
static int http_perform(struct larder__origin *o, struct body *b, long want_status, long *status)
{
    CURLcode cc = curl_easy_perform(o->curl);
    if (b->sink_error) return b->sink_error;
    if (b->overflow)
        return larder__fail(LARDER_EHTTP, "%s: server sent more bytes than requested", o->url);
    if (cc != CURLE_OK) return larder__fail(LARDER_EHTTP, "%s: %s", o->url, curl_easy_strerror(cc));
    curl_easy_getinfo(o->curl, CURLINFO_RESPONSE_CODE, status);
    if (*status != want_status && !(want_status == 206 && *status == 200))
        return larder__fail(*status == 404   ? -ENOENT
                            : *status == 403 ? -EACCES
                                             : LARDER_EHTTP,
                            "%s: HTTP status %ld", o->url, *status);
    return 0;
}

static int http_size(struct larder__origin *o)
{
    struct body b = {0};
    http_setup(o, &b);
    curl_easy_setopt(o->curl, CURLOPT_NOBODY, 1L);
    long status = 0;
    int rc = http_perform(o, &b, 200, &status);
    if (rc < 0) return rc;
    curl_off_t length = -1;
    curl_easy_getinfo(o->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (length < 0) return larder__fail(LARDER_EHTTP, "%s: server gave no Content-Length", o->url);
    o->size = (uint64_t)length;
    o->have_size = true;
    return 0;
}

static int http_read(struct larder__origin *o, void *buf, size_t length, uint64_t offset)
{
    struct body b = {.buf = buf, .capacity = length};
    char range[64];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)offset,
             (unsigned long long)(offset + length - 1));
    http_setup(o, &b);
    curl_easy_setopt(o->curl, CURLOPT_RANGE, range);
    long status = 0;
    int rc = http_perform(o, &b, 206, &status);
    if (rc < 0) return rc;
    if (status == 200)
        return larder__fail(LARDER_EHTTP,
                            "%s: server answered 200 to a range request (bytes %s): it does not "
                            "support ranges",
                            o->url, range);
    if (b.used != length) {
        memset((uint8_t *)buf + b.used, 0, length - b.used);
        return larder__fail(LARDER_ETRUNCATED, "%s: short body: %zu of %zu bytes at offset %llu",
                            o->url, b.used, length, (unsigned long long)offset);
    }
    return 0;
}

/* ---- interface ---------------------------------------------------------- */

int larder__origin_size(struct larder__origin *o, uint64_t *size)
{
    int rc = 0;
    pthread_mutex_lock(&o->lock);
    if (!o->have_size) {
        if (o->curl) {
            rc = http_size(o);
        } else if ((rc = larder__file_size(o->fd, &o->size, o->url)) == 0) {
            o->have_size = true;
        }
    }
    *size = o->size;
    pthread_mutex_unlock(&o->lock);
    return rc;
}

int larder__origin_read(struct larder__origin *o, void *buf, size_t length, uint64_t offset)
{
    if (length == 0) return 0;
    if (!o->curl) return larder__pread_full(o->fd, buf, length, offset, o->url);
    pthread_mutex_lock(&o->lock);
    int rc = http_read(o, buf, length, offset);
    pthread_mutex_unlock(&o->lock);
    return rc;
}

int larder__origin_stream(struct larder__origin *o, larder__sink_fn sink, void *userdata)
{
    if (o->curl) {
        struct body b = {.sink = sink, .userdata = userdata};
        pthread_mutex_lock(&o->lock);
        http_setup(o, &b);
        long status = 0;
        int rc = http_perform(o, &b, 200, &status);
        pthread_mutex_unlock(&o->lock);
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
