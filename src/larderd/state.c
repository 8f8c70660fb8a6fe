/*
 * state.c - the daemon's state (struct larderd): set up, started, torn
 * down; its log line and its clock.  Apart from main() so that a harness
 * (fuzz/fuzz_daemon.c, tests/unit/test_larderd_*.c) can link the daemon's
 * parts without its start-up, and make a daemon of its own.
 */
#include "larderd.h"
#include "source_http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct larderd daemon_state;

static bool quiet;

void larderd_init(struct larderd *d)
{
    memset(d, 0, sizeof *d);
    larderd_config_defaults(&d->config);
    d->self = SIZE_MAX;
    d->epoll = d->wake = d->spare_fd = -1;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->opened, NULL);
    pthread_mutex_init(&d->uncached_lock, NULL);
    pthread_mutex_init(&d->warm_lock, NULL);
}

int larderd_start(struct larderd *d)
{
    larder__http_global_init(); /* here, on the main thread, not on an OPEN's worker */
    d->epoll = epoll_create1(EPOLL_CLOEXEC);
    if (d->epoll < 0) return -errno;
    d->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d->wake < 0) return -errno;
    int rc = larder__pool_new(&d->pool, d->config.jobs);
    if (rc == 0) rc = larder__pool_new(&d->open_pool, OPEN_WORKERS);
    if (rc == 0) rc = larder__pool_new(&d->peer_pool, d->config.jobs);
    if (rc == 0) rc = connect_ahead_start(d); /* its own workers: never the open pool's */
    /* the name registry now, before any thread may reach it (publish_registry.c) */
    return rc < 0 ? rc : publications_start(d);
}

void larderd_classes_get(struct larderd *d, struct larder__pool_stats *out)
{
    struct larder__pool_stats peers;
    larder__pool_stats_get(d->pool, out);
    larder__pool_stats_get(d->peer_pool, &peers);
    for (int c = 0; c < LARDER__CLASSES; c++) {
        out->submitted[c] += peers.submitted[c];
        out->started[c] += peers.started[c];
        out->running[c] += peers.running[c];
        out->wait_us[c] += peers.wait_us[c];
        if (peers.wait_max_us[c] > out->wait_max_us[c]) out->wait_max_us[c] = peers.wait_max_us[c];
    }
}

void larderd_free(struct larderd *d)
{
    metrics_stop(d);       /* (main's done so already) its thread reads the datasets */
    connect_ahead_stop(d); /* its queued jobs dropped, its running ones over by their deadline */
    larder__pool_free(d->open_pool); /* the OPENs under way end: they use all below */
    d->open_pool = NULL;
    publications_stop(d);            /* no name job opening datasets, starting hints */
    hints_stop(d);                   /* no more hint threads queueing staging */
    uncached_close(d);               /* READs parked for room answered: none left out */
    larder__pool_free(d->peer_pool); /* finishes the reads in flight */
    d->peer_pool = NULL;
    larder__pool_free(d->pool);
    d->pool = NULL;
    hints_free(d);      /* after the pool: its staging jobs hold hints */
    transforms_free(d); /* its raw answers ran on the pool; now its own workers */
    /* d->hints left: a hint thread still waits on a member (hints_free
     * gave it 10 s); the datasets, their member endpoints and the members
     * it uses stay, for the process is ending */
    if (!d->hints && !d->ucx_answers_left) { /* (and the answers UCX kept: ucx.c) */
        close_datasets(d);
        publications_free(d);
        larder__members_clear(&d->members);
    }
    if (d->secret) memset(d->secret, 0, strlen(d->secret));
    free(d->secret);
    d->secret = NULL;
    free(d->config_text);
    d->config_text = NULL;
    if (d->epoll >= 0) close(d->epoll);
    if (d->wake >= 0) close(d->wake);
    d->epoll = d->wake = -1;
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->opened);
    free(d->uncached_users); /* what holds room was freed above: no one gives it back now */
    d->uncached_users = NULL;
    d->uncached_users_count = d->uncached_users_capacity = 0;
    pthread_mutex_destroy(&d->uncached_lock);
    pthread_mutex_destroy(&d->warm_lock);
}

void larderd_wake(struct larderd *d)
{
    uint64_t one = 1;
    if (d->wake >= 0 && write(d->wake, &one, sizeof one) < 0) { /* the loop sweeps anyway */
    }
}

void say_quietly(bool be_quiet)
{
    quiet = be_quiet;
}

void say(const char *fmt, ...)
{
    if (quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "larderd: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
