/*
 * httpdelay - a small static HTTP/1.1 file server that answers every
 * request after a fixed delay: an origin "far away" on loopback, for
 * benchmarks that need many requests in flight (Little's law).  One
 * thread, epoll, keep-alive, GET and HEAD, single byte ranges, sendfile.
 * Nothing but benchmarks and tests should use it.
 *
 *   httpdelay ROOT PORT_FILE [DELAY_MS]
 *
 * Listens on 127.0.0.1 at a free port, written to PORT_FILE once ready.
 * Prints its request count to stderr when stopped with SIGTERM or SIGINT.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 4096
#define REQUEST_MAX 8192

struct connection {
    int fd;
    char request[REQUEST_MAX];
    size_t used;
    /* the response being sent, once due */
    double due;
    bool waiting, sending;
    char head[512];
    size_t head_length, head_sent;
    int file;
    off_t file_offset;
    size_t file_left;
    bool close_after;
};

static const char *root;
static double delay_seconds;
static volatile sig_atomic_t stopping;
static unsigned long long requests;
static struct connection *connections[MAX_CONNECTIONS];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_signal(int signal_number)
{
    (void)signal_number;
    stopping = 1;
}

static void drop(int epoll, struct connection *c)
{
    epoll_ctl(epoll, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->file >= 0) close(c->file);
    connections[c->fd] = NULL;
    free(c);
}

static void respond_status(struct connection *c, int status, const char *reason)
{
    c->head_length = (size_t)snprintf(
        c->head, sizeof c->head, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\n\r\n", status, reason);
    c->file_left = 0;
}

/* Prepare the answer to the complete request in c->request. */
static void prepare(struct connection *c)
{
    char method[8] = "", path[PATH_MAX / 2] = "";
    sscanf(c->request, "%7s %2047s", method, path);
    bool head = strcmp(method, "HEAD") == 0;
    c->close_after = strcasestr(c->request, "\r\nconnection: close") != NULL;
    c->file = -1;
    c->head_sent = 0;
    requests++;
    if (!head && strcmp(method, "GET") != 0) return respond_status(c, 405, "Method Not Allowed");
    if (strstr(path, "..") || path[0] != '/') return respond_status(c, 404, "Not Found");
    char full[PATH_MAX];
    snprintf(full, sizeof full, "%s%s", root, path);
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        return respond_status(c, 404, "Not Found");
    }
    uint64_t size = (uint64_t)st.st_size, first = 0, last = size ? size - 1 : 0;
    bool ranged = false;
    const char *range = strcasestr(c->request, "\r\nrange: bytes=");
    if (range) {
        unsigned long long a, b;
        if (sscanf(range + 15, "%llu-%llu", &a, &b) == 2 && a <= b && a < size) {
            first = a;
            last = b < size ? b : size - 1;
            ranged = true;
        } else {
            close(fd);
            return respond_status(c, 416, "Range Not Satisfiable");
        }
    }
    uint64_t length = size ? last - first + 1 : 0;
    if (ranged)
        c->head_length = (size_t)snprintf(c->head, sizeof c->head,
                                          "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\n"
                                          "Content-Range: bytes %llu-%llu/%llu\r\n\r\n",
                                          (unsigned long long)length, (unsigned long long)first,
                                          (unsigned long long)last, (unsigned long long)size);
    else
        c->head_length = (size_t)snprintf(c->head, sizeof c->head,
                                          "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\n"
                                          "Accept-Ranges: bytes\r\n\r\n",
                                          (unsigned long long)length);
    if (head) {
        close(fd);
        c->file_left = 0;
        return;
    }
    c->file = fd;
    c->file_offset = (off_t)first;
    c->file_left = (size_t)length;
}

/* Send what can be sent; returns false when the connection must go. */
static bool pump(int epoll, struct connection *c)
{
    while (c->head_sent < c->head_length) {
        ssize_t n =
            send(c->fd, c->head + c->head_sent, c->head_length - c->head_sent, MSG_NOSIGNAL);
        if (n < 0) return errno == EAGAIN;
        c->head_sent += (size_t)n;
    }
    while (c->file_left > 0) {
        ssize_t n = sendfile(c->fd, c->file, &c->file_offset, c->file_left);
        if (n < 0) return errno == EAGAIN;
        if (n == 0) return false;
        c->file_left -= (size_t)n;
    }
    if (c->file >= 0) close(c->file);
    c->file = -1;
    c->sending = false;
    if (c->close_after) return false;
    /* a pipelined request may already be buffered */
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = c->fd};
    epoll_ctl(epoll, EPOLL_CTL_MOD, c->fd, &ev);
    return true;
}

/* Read request bytes; start the delay once a request is complete. */
static bool take(struct connection *c)
{
    for (;;) {
        if (c->used == REQUEST_MAX - 1) return false;
        ssize_t n = recv(c->fd, c->request + c->used, REQUEST_MAX - 1 - c->used, 0);
        if (n < 0) return errno == EAGAIN;
        if (n == 0) return false;
        c->used += (size_t)n;
        c->request[c->used] = '\0';
        char *end = strstr(c->request, "\r\n\r\n");
        if (end && !c->waiting && !c->sending) {
            prepare(c);
            /* keep bytes after this request for the next one */
            size_t consumed = (size_t)(end + 4 - c->request);
            memmove(c->request, c->request + consumed, c->used - consumed + 1);
            c->used -= consumed;
            c->waiting = true;
            c->due = now() + delay_seconds;
            return true;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s ROOT PORT_FILE [DELAY_MS]\n", argv[0]);
        return 2;
    }
    root = argv[1];
    delay_seconds = argc > 3 ? atof(argv[3]) / 1000.0 : 0;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t address_length = sizeof address;
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0 ||
        listen(listener, 4096) < 0 ||
        getsockname(listener, (struct sockaddr *)&address, &address_length) < 0) {
        perror("httpdelay: listen");
        return 1;
    }
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", ntohs(address.sin_port)) < 0 || fclose(f) != 0 ||
        rename(tmp, argv[2]) != 0) {
        perror("httpdelay: port file");
        return 1;
    }
    int epoll = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &ev);
    struct epoll_event events[256];
    while (!stopping) {
        /* the nearest due answer bounds the wait */
        double t = now(), next = t + 1;
        for (int fd = 0; fd < MAX_CONNECTIONS; fd++) {
            struct connection *c = connections[fd];
            if (!c || !c->waiting) continue;
            if (c->due <= t) {
                c->waiting = false;
                c->sending = true;
                struct epoll_event out = {.events = EPOLLOUT, .data.fd = fd};
                epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &out);
                if (!pump(epoll, c)) drop(epoll, c);
            } else if (c->due < next) {
                next = c->due;
            }
        }
        int timeout = (int)((next - now()) * 1000) + 1;
        int n = epoll_wait(epoll, events, 256, timeout > 0 ? timeout : 0);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >=
                       0) {
                    if (client >= MAX_CONNECTIONS) {
                        close(client);
                        continue;
                    }
                    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct connection *c = calloc(1, sizeof *c);
                    c->fd = client;
                    c->file = -1;
                    connections[client] = c;
                    struct epoll_event in = {.events = EPOLLIN, .data.fd = client};
                    epoll_ctl(epoll, EPOLL_CTL_ADD, client, &in);
                }
                continue;
            }
            struct connection *c = connections[fd];
            if (!c) continue;
            bool keep = c->sending ? pump(epoll, c) : take(c);
            if (!keep) drop(epoll, c);
        }
    }
    fprintf(stderr, "httpdelay: %llu requests\n", requests);
    return 0;
}
