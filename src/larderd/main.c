/*
 * larderd - the node daemon.
 *
 * One per node.  Local readers connect over a Unix socket and ask for the
 * byte ranges they miss; the daemon stages them in the node cache and
 * answers with the bytes.  Daemons of a cluster connect over TCP: each
 * shard has one owner (rendezvous hashing over the members), which alone
 * reads it from the origin; the others borrow its bytes from the owner,
 * and read the origin themselves when the owner does not answer.
 *
 * One thread runs an epoll loop over the listeners and connections and
 * parses frames (docs/protocol.md); reads are staged by a pool of workers
 * in priority order, which queue their answers back to the loop.
 *
 * This file: start-up (the options are config.c's, the state state.c's);
 * larderd.h says where the rest is.
 */
#include "bigbuf.h"
#include "larderd.h"
#include "readers.h"
#include "transport_ucx.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* How long a stopping daemon waits for the indexes being opened. */
#define OPENS_STOP_MS 3000

static void on_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    say("%s%s", level == LARDER_LOG_ERROR ? "error: " : "", message);
}

static void on_signal(int signal_number)
{
    (void)signal_number;
    daemon_state.stopping = 1;
}

/* Every connection is a descriptor, and so is every cache file; over UCX
 * each peer this daemon borrows from holds one control connection per lane
 * and open dataset too (transport_ucx_peer.c): room for 1024 of those at
 * the most lanes. */
static void raise_descriptor_limit(const struct larderd_config *config)
{
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        rlim_t want = (rlim_t)config->max_connections + 4096;
        if (config->transport != TRANSPORT_TCP) want += (rlim_t)LARDER__UCX_MAX_LANES * 1024;
        if (files.rlim_cur < want) {
            files.rlim_cur = files.rlim_max < want ? files.rlim_max : want;
            setrlimit(RLIMIT_NOFILE, &files);
        }
    }
}

/* Listen where the options say: 0, or 1 once the failure is said. */
static int start_listening(const struct larderd_config *config, int *unix_fd, int *tcp_fd,
                           int *metrics_fd)
{
    *unix_fd = *tcp_fd = *metrics_fd = -1;
    if (config->socket_path && (*unix_fd = listen_unix(config->socket_path)) < 0) {
        say("%s: %s", config->socket_path, strerror(-*unix_fd));
        return 1;
    }
    if (config->listen_address && (*tcp_fd = listen_tcp(config->listen_address)) < 0) {
        say("%s: %s", config->listen_address, strerror(-*tcp_fd));
        return 1;
    }
    if (config->metrics_address && (*metrics_fd = listen_tcp(config->metrics_address)) < 0) {
        say("%s: %s", config->metrics_address, strerror(-*metrics_fd));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct larderd *d = &daemon_state;
    larderd_init(d);
    char error[CONFIG_ERROR_SIZE];
    /* the configuration file first, the command line over it */
    const char *file = larderd_config_file_option(argc, argv);
    if (file && larderd_config_read(&d->config, file, &d->config_text, error, sizeof error) < 0) {
        say("%s", error);
        return 2;
    }
    int rc = larderd_config_parse(&d->config, argc, argv, error, sizeof error);
    if (rc == LARDERD_CONFIG_HELP) {
        fputs(larderd_help, stdout);
        return 0;
    }
    if (rc < 0 && !error[0]) fputs(larderd_help, stderr);
    if (rc < 0 && error[0]) say("%s", error);
    if (rc < 0 || larderd_config_load(d, error, sizeof error) < 0) {
        if (rc == 0) say("%s", error);
        return 2;
    }
    larder_set_log(on_log, NULL, LARDER_LOG_WARN);
    /* whole chunks borrowed on many workers at once (borrow.c): more kept
     * buffers than a reader process keeps (bigbuf.c) */
    larder__bigbuf_set_limits(16, (size_t)96 << 20);
    borrow_reserve_buffers(d);
    raise_descriptor_limit(&d->config);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    if (d->config.transform_dir) { /* trusted code: the admin's directory (docs/transforms.md) */
        int loaded = larder_transform_load_dir(d->config.transform_dir);
        if (loaded < 0) {
            say("--transform-dir: %s", larder_errmsg());
            return 2;
        }
        say("loaded %d transform%s from %s", loaded, loaded == 1 ? "" : "s",
            d->config.transform_dir);
    }
    if ((rc = larderd_start(d)) < 0 || (rc = transforms_start(d)) < 0) {
        say("cannot start: %s", larder_strerror(rc));
        return 1;
    }
    if (ucx_daemon_start(d) < 0) return 1; /* --transport: says which */
    if ((rc = readers_signal_start(d)) < 0)
        say("not telling peers of readers: %s", larder_strerror(rc));
    int unix_fd, tcp_fd, metrics_fd;
    if (start_listening(&d->config, &unix_fd, &tcp_fd, &metrics_fd)) return 1;
    /* off the loop: anyone on the network reaches that port (metrics.c) */
    if (metrics_fd >= 0 && (rc = metrics_start(d, metrics_fd)) < 0) {
        say("--metrics: cannot start its thread: %s", strerror(-rc));
        return 1;
    }
    const struct larderd_config *config = &d->config;
    say("serving cache %s%s%s%s%s, %zu members", config->cache_dir, unix_fd >= 0 ? " on " : "",
        unix_fd >= 0 ? config->socket_path : "", tcp_fd >= 0 ? " and " : "",
        tcp_fd >= 0 ? config->listen_address : "", d->members.count ? d->members.count : 1);

    run_loop(d, unix_fd, tcp_fd);

    say("stopping");
    metrics_stop(d); /* its port closed now, not after the reads in flight */
    if (config->socket_path) unlink(config->socket_path);
    readers_signal_stop(d);
    ucx_daemon_quiesce(d); /* no READ over UCX from now on, none answered after the datasets go */
    /* an index still coming from a slow origin (up to its HTTP timeout, then
     * retries: minutes) is not waited for: the process ends as after a
     * crash, which the cache survives (docs/cache.md); no answer could go
     * out now anyway, the loop has stopped */
    if (!opens_ended_within(d, OPENS_STOP_MS)) {
        say("stopped with an index still being opened: not waiting past %d ms for its origin",
            OPENS_STOP_MS);
        _exit(0);
    }
    larderd_free(d); /* finishes the reads in flight first */
    ucx_daemon_stop(d);
    return 0;
}
