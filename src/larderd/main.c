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
 * This file: options and start-up (the globals are in state.c);
 * larderd.h says where the rest is.
 */
#include "larderd.h"

#include "args.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

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

static const char help[] =
    "usage: larderd --cache DIR [--socket PATH] [--listen HOST:PORT]\n"
    "               [--peers H:P,... | --hostfile FILE | --slurm] [--self H:P]\n"
    "               [--secret-file FILE | --insecure-peers] [--jobs N]\n"
    "               [--warm [--warm-rate MB/S]] [--metrics HOST:PORT]\n"
    "               [--allow PREFIX]... [--allow-uid UID]... [--allow-gid GID]...\n"
    "               [--cache-size SIZE] [--borrow-size SIZE] [--max-connections N]\n"
    "               [--idle-timeout SECONDS] [--connection-memory SIZE]\n"
    "\n"
    "The node daemon: stages what local readers miss in the node cache, and with\n"
    "peers, reads each shard from the origin on one node only (its owner, by\n"
    "rendezvous hashing) and borrows the rest from the owners.\n"
    "\n"
    "  --cache DIR          the node cache (required)\n"
    "  --socket PATH        Unix socket for local readers (default: $LARDER_SOCKET)\n"
    "  --listen HOST:PORT   TCP address for peers\n"
    "  --peers LIST         the cluster's members, host:port, comma-separated\n"
    "  --hostfile FILE      the members, one a line\n"
    "  --slurm              the members from SLURM_JOB_NODELIST (port of --listen)\n"
    "  --self HOST:PORT     which member this is (default: --listen)\n"
    "  --secret-file FILE   the cluster's shared secret: peers prove it to each other\n"
    "                       (HMAC-SHA256 challenge and response; it never travels)\n"
    "  --insecure-peers     without a secret, take peers from any address (default:\n"
    "                       loopback only)\n"
    "  --jobs N             reads staged at once (default 64)\n"
    "  --warm               stage the shards this node owns in the background, at the\n"
    "                       lowest priority, as datasets are opened\n"
    "  --warm-rate MB/S     pace that staging (default: unpaced)\n"
    "  --metrics HOST:PORT  serve the counters as Prometheus text over HTTP\n"
    "  --borrow-size SIZE   cache bytes per dataset for blocks borrowed from other\n"
    "                       nodes, evicted first (default: no limit of their own)\n"
    "  --cache-size SIZE    bytes the node cache may hold (default: no limit)\n"
    "  --allow PREFIX       serve indexes (and their shards) only under this path or\n"
    "                       URL prefix; repeatable.  Without --allow, only the\n"
    "                       daemon's own uid (and root) may open indexes, any index\n"
    "  --allow-uid UID      let this uid use the socket (besides the daemon's uid, its\n"
    "                       gid and root); repeatable\n"
    "  --allow-gid GID      let this group use the socket; repeatable\n"
    "  --max-connections N  connections at once (default 1024); more are closed\n"
    "  --idle-timeout SECONDS  drop a connection idle this long (default 60)\n"
    "  --connection-memory SIZE  bytes of reads in flight and answers queued per\n"
    "                       connection before it is read no more until they drain\n"
    "                       (default 64M)\n"
    "\n"
    "In Slurm: srun --ntasks-per-node=1 larderd --cache /local/larder --slurm \\\n"
    "          --listen 0.0.0.0:7461 --socket /tmp/larderd.sock\n";

static char *read_small_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = calloc(1, 65537);
    size_t n = text ? fread(text, 1, 65536, f) : 0;
    fclose(f);
    if (!text) return NULL;
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
        text[--n] = 0;
    return text;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {{"cache", required_argument, 0, 'c'},
                                            {"socket", required_argument, 0, 's'},
                                            {"listen", required_argument, 0, 'l'},
                                            {"peers", required_argument, 0, 'p'},
                                            {"hostfile", required_argument, 0, 'H'},
                                            {"slurm", no_argument, 0, 'S'},
                                            {"self", required_argument, 0, 'n'},
                                            {"secret-file", required_argument, 0, 'k'},
                                            {"jobs", required_argument, 0, 'j'},
                                            {"metrics", required_argument, 0, 'm'},
                                            {"warm", no_argument, 0, 'w'},
                                            {"warm-rate", required_argument, 0, 'r'},
                                            {"borrow-size", required_argument, 0, 'b'},
                                            {"cache-size", required_argument, 0, 'C'},
                                            {"allow", required_argument, 0, 'a'},
                                            {"allow-uid", required_argument, 0, 'U'},
                                            {"allow-gid", required_argument, 0, 'G'},
                                            {"insecure-peers", no_argument, 0, 'I'},
                                            {"max-connections", required_argument, 0, 'M'},
                                            {"idle-timeout", required_argument, 0, 'T'},
                                            {"connection-memory", required_argument, 0, 'B'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    const char *peers = NULL, *hostfile = NULL;
    bool slurm = false;
    daemon_state.jobs = 64;
    daemon_state.max_connections = 1024;
    daemon_state.idle_timeout_ms = 60000;
    daemon_state.connection_budget = 64u << 20;
    daemon_state.uid = getuid();
    daemon_state.gid = getgid();
    uint64_t number;
    daemon_state.socket_path = getenv("LARDER_SOCKET");
    int c;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'c':
            daemon_state.cache_dir = optarg;
            break;
        case 's':
            daemon_state.socket_path = optarg;
            break;
        case 'l':
            daemon_state.listen_address = optarg;
            break;
        case 'p':
            peers = optarg;
            break;
        case 'H':
            hostfile = optarg;
            break;
        case 'S':
            slurm = true;
            break;
        case 'n':
            daemon_state.self_name = optarg;
            break;
        case 'k':
            if (!(daemon_state.secret = read_small_file(optarg)) || !daemon_state.secret[0]) {
                say("cannot read a secret from %s", optarg);
                return 2;
            }
            break;
        case 'j':
            daemon_state.jobs = atoi(optarg);
            break;
        case 'm':
            daemon_state.metrics_address = optarg;
            break;
        case 'w':
            daemon_state.warm = true;
            break;
        case 'r':
            daemon_state.warm_rate = atof(optarg);
            break;
        case 'b':
            if (args_parse_size(optarg, &daemon_state.borrow_capacity) < 0) {
                say("bad --borrow-size '%s'", optarg);
                return 2;
            }
            break;
        case 'C':
            if (args_parse_size(optarg, &daemon_state.cache_capacity) < 0) {
                say("bad --cache-size '%s'", optarg);
                return 2;
            }
            break;
        case 'a': {
            const char **more =
                realloc(daemon_state.allow, (size_t)(daemon_state.num_allow + 2) * sizeof *more);
            if (!more) return 1;
            more[daemon_state.num_allow++] = optarg;
            more[daemon_state.num_allow] = NULL;
            daemon_state.allow = more;
            break;
        }
        case 'U':
        case 'G':
            if (args_parse_u64(optarg, &number) < 0 || number >= UINT32_MAX) {
                say("bad --allow-%s '%s'", c == 'U' ? "uid" : "gid", optarg);
                return 2;
            }
            if ((c == 'U' ? daemon_state.num_allow_uids : daemon_state.num_allow_gids) ==
                MAX_ALLOWED_IDS) {
                say("at most %d --allow-uid and %d --allow-gid", MAX_ALLOWED_IDS, MAX_ALLOWED_IDS);
                return 2;
            }
            if (c == 'U')
                daemon_state.allow_uids[daemon_state.num_allow_uids++] = (uid_t)number;
            else
                daemon_state.allow_gids[daemon_state.num_allow_gids++] = (gid_t)number;
            break;
        case 'I':
            daemon_state.insecure_peers = true;
            break;
        case 'M':
            if (args_parse_u64(optarg, &number) < 0 || number < 1 || number > 1000000) {
                say("bad --max-connections '%s'", optarg);
                return 2;
            }
            daemon_state.max_connections = (int)number;
            break;
        case 'T':
            if (args_parse_u64(optarg, &number) < 0 || number < 1 || number > 86400 * 365) {
                say("bad --idle-timeout '%s' (whole seconds, at least 1)", optarg);
                return 2;
            }
            daemon_state.idle_timeout_ms = (int)(number * 1000);
            break;
        case 'B':
            if (args_parse_size(optarg, &daemon_state.connection_budget) < 0 ||
                daemon_state.connection_budget < 65536) {
                say("bad --connection-memory '%s' (at least 64K)", optarg);
                return 2;
            }
            break;
        case 'h':
            fputs(help, stdout);
            return 0;
        default:
            fputs(help, stderr);
            return 2;
        }
    }
    if (!daemon_state.cache_dir || optind != argc || daemon_state.jobs < 1) {
        fputs(help, stderr);
        return 2;
    }
    if (!daemon_state.socket_path && !daemon_state.listen_address) {
        say("nothing to listen on: give --socket (or set LARDER_SOCKET) and/or --listen");
        return 2;
    }
    larder_set_log(on_log, NULL, LARDER_LOG_WARN);
    const char *port =
        daemon_state.listen_address ? strrchr(daemon_state.listen_address, ':') : NULL;
    int default_port = port ? atoi(port + 1) : LARDER_DEFAULT_PORT;
    int rc = 0;
    if (peers) rc = larder__members_parse_list(&daemon_state.members, peers, default_port);
    if (rc == 0 && hostfile) {
        char *text = read_small_file(hostfile);
        rc = text ? larder__members_parse_hostfile(&daemon_state.members, text, strlen(text),
                                                   default_port)
                  : larder__fail(-errno, "%s: %s", hostfile, strerror(errno));
        free(text);
    }
    if (rc == 0 && slurm) {
        const char *list = getenv("SLURM_JOB_NODELIST");
        rc = list ? larder__members_parse_slurm(&daemon_state.members, list, default_port)
                  : larder__fail(LARDER_EUSAGE, "--slurm: SLURM_JOB_NODELIST is not set");
    }
    if (rc < 0) {
        say("%s", larder_errmsg());
        return 2;
    }
    if (!daemon_state.self_name) daemon_state.self_name = daemon_state.listen_address;
    if (daemon_state.members.count > 1) {
        for (size_t m = 0; m < daemon_state.members.count && daemon_state.self_name; m++)
            if (strcmp(daemon_state.members.names[m], daemon_state.self_name) == 0)
                daemon_state.self = m;
        if (daemon_state.self == SIZE_MAX) {
            say("this node (%s) is not among the members; give --self",
                daemon_state.self_name ? daemon_state.self_name : "no --listen");
            return 2;
        }
    }

    if (daemon_state.secret && daemon_state.insecure_peers) {
        say("--insecure-peers and --secret-file: peers authenticate with the secret; "
            "--insecure-peers changes nothing");
        daemon_state.insecure_peers = false;
    }
    if (daemon_state.insecure_peers && daemon_state.listen_address)
        say("warning: --insecure-peers: any host that reaches %s may read the datasets open "
            "here; give the cluster a --secret-file",
            daemon_state.listen_address);

    /* every connection is a descriptor, and so is every cache file */
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        rlim_t want = (rlim_t)daemon_state.max_connections + 4096;
        if (files.rlim_cur < want) {
            files.rlim_cur = files.rlim_max < want ? files.rlim_max : want;
            setrlimit(RLIMIT_NOFILE, &files);
        }
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    pthread_mutex_init(&daemon_state.lock, NULL);
    pthread_mutex_init(&daemon_state.uncached_lock, NULL);
    pthread_cond_init(&daemon_state.uncached_freed, NULL);
    daemon_state.epoll = epoll_create1(EPOLL_CLOEXEC);
    daemon_state.wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (larder__pool_new(&daemon_state.pool, daemon_state.jobs) < 0) return 1;
    int unix_fd = -1, tcp_fd = -1;
    if (daemon_state.socket_path && (unix_fd = listen_unix(daemon_state.socket_path)) < 0) {
        say("%s: %s", daemon_state.socket_path, strerror(-unix_fd));
        return 1;
    }
    if (daemon_state.listen_address && (tcp_fd = listen_tcp(daemon_state.listen_address)) < 0) {
        say("%s: %s", daemon_state.listen_address, strerror(-tcp_fd));
        return 1;
    }
    int metrics_fd = -1;
    if (daemon_state.metrics_address &&
        (metrics_fd = listen_tcp(daemon_state.metrics_address)) < 0) {
        say("%s: %s", daemon_state.metrics_address, strerror(-metrics_fd));
        return 1;
    }
    say("serving cache %s%s%s%s%s, %zu members", daemon_state.cache_dir, unix_fd >= 0 ? " on " : "",
        unix_fd >= 0 ? daemon_state.socket_path : "", tcp_fd >= 0 ? " and " : "",
        tcp_fd >= 0 ? daemon_state.listen_address : "",
        daemon_state.members.count ? daemon_state.members.count : 1);

    run_loop(unix_fd, tcp_fd, metrics_fd);

    say("stopping");
    larder__pool_free(daemon_state.pool); /* finishes the reads in flight */
    close_datasets();
    larder__members_free(&daemon_state.members);
    if (daemon_state.socket_path) unlink(daemon_state.socket_path);
    if (daemon_state.secret) memset((char *)daemon_state.secret, 0, strlen(daemon_state.secret));
    free((char *)daemon_state.secret);
    free(daemon_state.allow);
    return 0;
}
