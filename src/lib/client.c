/*
 * client.c - blocking daemon clients with connection pools (client.h).
 */
#include "client.h"
#include "wire.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define POOL 64
#define DOWN_SECONDS 10

struct larder__endpoint {
    char *address, *token, *index_url;
    int role, timeout_ms;
    pthread_mutex_t lock;
    int idle[POOL];
    int num_idle;
    time_t down_until;
};

static time_t now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

int larder__endpoint_new(struct larder__endpoint **out, const char *address, int role,
                         const char *token, const char *index_url, int timeout_ms)
{
    struct larder__endpoint *e = calloc(1, sizeof *e);
    if (!e || !(e->address = strdup(address)) || (token && !(e->token = strdup(token))) ||
        (index_url && !(e->index_url = strdup(index_url)))) {
        larder__endpoint_free(e);
        return -ENOMEM;
    }
    e->role = role;
    e->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
    pthread_mutex_init(&e->lock, NULL);
    *out = e;
    return 0;
}

void larder__endpoint_free(struct larder__endpoint *e)
{
    if (!e) return;
    for (int i = 0; i < e->num_idle; i++)
        close(e->idle[i]);
    pthread_mutex_destroy(&e->lock);
    free(e->address);
    free(e->token);
    free(e->index_url);
    free(e);
}

const char *larder__endpoint_address(const struct larder__endpoint *e)
{
    return e->address;
}

bool larder__endpoint_down(struct larder__endpoint *e)
{
    pthread_mutex_lock(&e->lock);
    bool down = e->down_until > now_s();
    pthread_mutex_unlock(&e->lock);
    return down;
}

static void mark_down(struct larder__endpoint *e)
{
    pthread_mutex_lock(&e->lock);
    e->down_until = now_s() + DOWN_SECONDS;
    for (int i = 0; i < e->num_idle; i++)
        close(e->idle[i]);
    e->num_idle = 0;
    pthread_mutex_unlock(&e->lock);
}

/* Send all of buf, or fail. */
static int send_all(int fd, const void *buf, size_t length)
{
    const uint8_t *p = buf;
    while (length) {
        ssize_t n = send(fd, p, length, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -(n < 0 ? errno : EPIPE);
        p += n, length -= (size_t)n;
    }
    return 0;
}

/* Receive exactly length bytes (the socket has a receive timeout). */
static int recv_all(int fd, void *buf, size_t length)
{
    uint8_t *p = buf;
    while (length) {
        ssize_t n = recv(fd, p, length, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -(errno == EAGAIN ? ETIMEDOUT : errno);
        if (n == 0) return -ECONNRESET;
        p += n, length -= (size_t)n;
    }
    return 0;
}

/* One frame: header into *frame, payload (up to capacity) into payload. */
static int recv_frame(int fd, struct larder__frame *frame, void *payload, size_t capacity)
{
    uint8_t header[LARDER_WIRE_HEADER];
    int rc = recv_all(fd, header, sizeof header);
    if (rc < 0) return rc;
    if ((rc = larder__wire_header(header, sizeof header, frame)) < 0) return rc;
    if (frame->length > capacity)
        return larder__fail(LARDER_EPROTOCOL, "answer of %u bytes, expected at most %zu",
                            frame->length, capacity);
    return recv_all(fd, payload, frame->length);
}

static int dial(const struct larder__endpoint *e)
{
    int fd = -1;
    if (strchr(e->address, '/')) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        if (strlen(e->address) >= sizeof a.sun_path) return -ENAMETOOLONG;
        strcpy(a.sun_path, e->address);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
            int err = errno;
            close(fd);
            return -err;
        }
    } else {
        const char *colon = strrchr(e->address, ':');
        if (!colon) return -EINVAL;
        char host[256];
        snprintf(host, sizeof host, "%.*s", (int)(colon - e->address), e->address);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list;
        if (getaddrinfo(host, colon + 1, &hints, &list) != 0) return -EHOSTUNREACH;
        int err = ECONNREFUSED;
        for (struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next) {
            fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) continue;
            /* connect with the timeout: non-blocking, then poll */
            struct timeval tv = {e->timeout_ms / 1000, (e->timeout_ms % 1000) * 1000};
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                err = errno;
                close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(list);
        if (fd < 0) return -err;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    if (fd < 0) return -errno;
    struct timeval tv = {e->timeout_ms / 1000, (e->timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/* A fresh connection: dialled, greeted, the dataset opened. */
static int connect_endpoint(struct larder__endpoint *e)
{
    int fd = dial(e);
    if (fd < 0) return larder__fail(fd, "larder daemon at %s: %s", e->address, strerror(-fd));
    uint8_t buf[LARDER_WIRE_HEADER + LARDER_WIRE_MAX_URL + 64];
    struct larder__hello hello = {.role = (uint32_t)e->role,
                                  .token_length = e->token ? (uint32_t)strlen(e->token) : 0,
                                  .token = (const uint8_t *)e->token};
    int n = larder__wire_encode_hello(buf, sizeof buf, 0, &hello);
    int rc = n < 0 ? n : send_all(fd, buf, (size_t)n);
    struct larder__frame frame;
    uint8_t answer[LARDER_WIRE_MAX_MESSAGE + 300];
    if (rc == 0) rc = recv_frame(fd, &frame, answer, sizeof answer);
    if (rc == 0 && frame.type != LARDER__WELCOME) rc = LARDER_EPROTOCOL;
    if (rc == 0 && e->index_url) {
        n = larder__wire_encode_open(buf, sizeof buf, 1, e->index_url);
        rc = n < 0 ? n : send_all(fd, buf, (size_t)n);
        if (rc == 0) rc = recv_frame(fd, &frame, answer, sizeof answer);
        if (rc == 0 && frame.type == LARDER__ERROR) {
            struct larder__error_frame error;
            rc = larder__wire_error(answer, frame.length, &error);
            if (rc == 0)
                rc = larder__fail(error.code, "larder daemon at %s: %.*s", e->address,
                                  (int)error.message_length, error.message);
        } else if (rc == 0 && frame.type != LARDER__OPENED) {
            rc = LARDER_EPROTOCOL;
        }
    }
    if (rc < 0) {
        close(fd);
        if (rc == LARDER_EPROTOCOL || rc > -4096)
            return larder__fail(rc, "larder daemon at %s: %s", e->address, larder_strerror(rc));
        return rc;
    }
    return fd;
}

int larder__endpoint_read(struct larder__endpoint *e, uint64_t id_low, uint64_t id_high,
                          uint32_t shard, int priority, uint64_t offset, uint64_t length, void *buf)
{
    pthread_mutex_lock(&e->lock);
    int fd = e->num_idle ? e->idle[--e->num_idle] : -1;
    pthread_mutex_unlock(&e->lock);
    if (fd < 0 && (fd = connect_endpoint(e)) < 0) {
        if (fd != LARDER_ENOTFOUND) mark_down(e);
        return fd;
    }
    uint8_t request[LARDER_WIRE_HEADER + 40];
    struct larder__read read = {.id_low = id_low,
                                .id_high = id_high,
                                .shard = shard,
                                .priority = (uint8_t)priority,
                                .offset = offset,
                                .length = length};
    int n = larder__wire_encode_read(request, sizeof request, 2, &read);
    int rc = send_all(fd, request, (size_t)n);
    uint8_t header[LARDER_WIRE_HEADER];
    struct larder__frame frame;
    if (rc == 0) rc = recv_all(fd, header, sizeof header);
    if (rc == 0) rc = larder__wire_header(header, sizeof header, &frame);
    bool connection_fault = rc < 0;
    if (rc == 0 && frame.type == LARDER__DATA && frame.length == length) {
        rc = recv_all(fd, buf, length);
        connection_fault = rc < 0;
    } else if (rc == 0 && frame.type == LARDER__ERROR &&
               frame.length <= 4 + LARDER_WIRE_MAX_MESSAGE) {
        uint8_t payload[4 + LARDER_WIRE_MAX_MESSAGE];
        struct larder__error_frame error;
        rc = recv_all(fd, payload, frame.length);
        if (rc == 0) rc = larder__wire_error(payload, frame.length, &error);
        connection_fault = rc < 0;
        if (rc == 0)
            rc = larder__fail(error.code, "larder daemon at %s: %.*s", e->address,
                              (int)error.message_length, error.message);
    } else if (rc == 0) {
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: unexpected answer type %u",
                          e->address, frame.type);
        connection_fault = true;
    }
    if (connection_fault) {
        close(fd);
        mark_down(e);
        if (rc > -4096 && rc < 0)
            rc = larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
        return rc;
    }
    pthread_mutex_lock(&e->lock);
    if (e->num_idle < POOL) {
        e->idle[e->num_idle++] = fd;
        fd = -1;
    }
    pthread_mutex_unlock(&e->lock);
    if (fd >= 0) close(fd);
    return rc;
}

int larder__endpoint_stats(struct larder__endpoint *e, char **json)
{
    int fd = connect_endpoint(e);
    if (fd < 0) return fd;
    uint8_t request[LARDER_WIRE_HEADER];
    larder__wire_encode_header(request, sizeof request, LARDER__STAT, 0, 3);
    int rc = send_all(fd, request, sizeof request);
    struct larder__frame frame;
    char *text = malloc(LARDER_WIRE_MAX_STATS + 1);
    if (!text) rc = -ENOMEM;
    if (rc == 0) rc = recv_frame(fd, &frame, text, LARDER_WIRE_MAX_STATS);
    if (rc == 0 && frame.type != LARDER__STATS)
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer type %u to STAT",
                          e->address, frame.type);
    close(fd);
    if (rc < 0) {
        free(text);
        if (rc > -4096) rc = larder__fail(rc, "larder daemon at %s: %s", e->address, strerror(-rc));
        return rc;
    }
    text[frame.length] = '\0';
    *json = text;
    return 0;
}
