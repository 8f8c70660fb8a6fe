/*
 * config.c - larderd's options (config.h): parsed and checked without I/O
 * into struct larderd_config, then the files and environment they name
 * loaded into the daemon (the secret, the cluster's members).
 */
#include "config.h"

#include "args.h"
#include "larderd.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char larderd_help[] =
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

void larderd_config_defaults(struct larderd_config *config)
{
    *config = (struct larderd_config){.socket_path = getenv("LARDER_SOCKET"),
                                      .jobs = 64,
                                      .max_connections = 1024,
                                      .idle_timeout_ms = 60000,
                                      .connection_budget = 64u << 20,
                                      .uid = getuid(),
                                      .gid = getgid()};
}

static int config_error(char *error, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int config_error(char *error, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (size) vsnprintf(error, size, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* An option with a number for its value: the counts, the rate, the ids. */
static int take_number(struct larderd_config *config, int option, const char *value, char *error,
                       size_t size)
{
    uint64_t number = 0;
    double rate;
    switch (option) {
    case 'j':
        if (args_parse_u64(value, &number) < 0 || number < 1 || number > 4096)
            return config_error(error, size, "bad --jobs '%s' (1-4096)", value);
        config->jobs = (int)number;
        return 0;
    case 'r':
        if (args_parse_decimal(value, &rate) < 0)
            return config_error(error, size, "bad --warm-rate '%s' (MB/s, a decimal number)",
                                value);
        config->warm_rate = rate;
        return 0;
    case 'M':
        if (args_parse_u64(value, &number) < 0 || number < 1 || number > 1000000)
            return config_error(error, size, "bad --max-connections '%s'", value);
        config->max_connections = (int)number;
        return 0;
    case 'T':
        if (args_parse_u64(value, &number) < 0 || number < 1 || number > 86400 * 365)
            return config_error(error, size, "bad --idle-timeout '%s' (whole seconds, at least 1)",
                                value);
        config->idle_timeout_ms = (int)(number * 1000);
        return 0;
    default: /* 'U', 'G' */
        if (args_parse_u64(value, &number) < 0 || number >= UINT32_MAX)
            return config_error(error, size, "bad --allow-%s '%s'", option == 'U' ? "uid" : "gid",
                                value);
        if ((option == 'U' ? config->num_allow_uids : config->num_allow_gids) == MAX_ALLOWED_IDS)
            return config_error(error, size, "at most %d --allow-uid and %d --allow-gid",
                                MAX_ALLOWED_IDS, MAX_ALLOWED_IDS);
        if (option == 'U')
            config->allow_uids[config->num_allow_uids++] = (uid_t)number;
        else
            config->allow_gids[config->num_allow_gids++] = (gid_t)number;
        return 0;
    }
}

/* An option with a size for its value. */
static int take_size(struct larderd_config *config, int option, const char *value, char *error,
                     size_t size)
{
    switch (option) {
    case 'b':
        if (args_parse_size(value, &config->borrow_capacity) < 0)
            return config_error(error, size, "bad --borrow-size '%s'", value);
        return 0;
    case 'C':
        if (args_parse_size(value, &config->cache_capacity) < 0)
            return config_error(error, size, "bad --cache-size '%s'", value);
        return 0;
    default: /* 'B' */
        if (args_parse_size(value, &config->connection_budget) < 0 ||
            config->connection_budget < 65536)
            return config_error(error, size, "bad --connection-memory '%s' (at least 64K)", value);
        return 0;
    }
}

/* One option getopt_long returned; -EINVAL with a message when it is bad. */
static int take_option(struct larderd_config *config, int option, const char *value, char *error,
                       size_t size)
{
    switch (option) {
    case 'c':
        config->cache_dir = value;
        return 0;
    case 's':
        config->socket_path = value;
        return 0;
    case 'l':
        config->listen_address = value;
        return 0;
    case 'p':
        config->peers = value;
        return 0;
    case 'H':
        config->hostfile = value;
        return 0;
    case 'S':
        config->slurm = true;
        return 0;
    case 'n':
        config->self_name = value;
        return 0;
    case 'k':
        config->secret_file = value;
        return 0;
    case 'm':
        config->metrics_address = value;
        return 0;
    case 'w':
        config->warm = true;
        return 0;
    case 'I':
        config->insecure_peers = true;
        return 0;
    case 'a':
        if (config->num_allow == MAX_ALLOW_PREFIXES)
            return config_error(error, size, "at most %d --allow", MAX_ALLOW_PREFIXES);
        config->allow[config->num_allow++] = value;
        config->allow[config->num_allow] = NULL;
        return 0;
    case 'b':
    case 'C':
    case 'B':
        return take_size(config, option, value, error, size);
    default:
        return take_number(config, option, value, error, size);
    }
}

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

int larderd_config_parse(struct larderd_config *config, int argc, char **argv, char *error,
                         size_t error_size)
{
    if (error_size) error[0] = '\0';
    optind = 0; /* GNU getopt: start over, so that a test may parse many vectors */
    opterr = 0; /* its messages are ours to write */
    int c;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (c == 'h') return LARDERD_CONFIG_HELP;
        if (c == ':')
            return config_error(error, error_size, "option '%s' needs a value", argv[optind - 1]);
        if (c == '?')
            return config_error(error, error_size, "unrecognized option '%s'", argv[optind - 1]);
        int rc = take_option(config, c, optarg, error, error_size);
        if (rc < 0) return rc;
    }
    if (optind != argc)
        return config_error(error, error_size, "unexpected argument '%s'", argv[optind]);
    if (!config->cache_dir) return -EINVAL; /* the usage says it */
    if (!config->socket_path && !config->listen_address)
        return config_error(error, error_size,
                            "nothing to listen on: give --socket (or set LARDER_SOCKET) "
                            "and/or --listen");
    return LARDERD_CONFIG_RUN;
}

/* A small text file (a secret, a hostfile) without its trailing blanks; NULL: unreadable. */
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

/* The members the options name into d->members; 0 or a negative code with a message. */
static int load_members(struct larderd *d)
{
    const struct larderd_config *config = &d->config;
    const char *port = config->listen_address ? strrchr(config->listen_address, ':') : NULL;
    int default_port = port ? atoi(port + 1) : LARDER__DEFAULT_PORT;
    int rc = 0;
    if (config->peers) rc = larder__members_parse_list(&d->members, config->peers, default_port);
    if (rc == 0 && config->hostfile) {
        char *text = read_small_file(config->hostfile);
        rc = text ? larder__members_parse_hostfile(&d->members, text, strlen(text), default_port)
                  : larder__fail(-errno, "%s: %s", config->hostfile, strerror(errno));
        free(text);
    }
    if (rc == 0 && config->slurm) {
        const char *list = getenv("SLURM_JOB_NODELIST");
        rc = list ? larder__members_parse_slurm(&d->members, list, default_port)
                  : larder__fail(LARDER_EUSAGE, "--slurm: SLURM_JOB_NODELIST is not set");
    }
    return rc;
}

int larderd_config_load(struct larderd *d, char *error, size_t error_size)
{
    struct larderd_config *config = &d->config;
    if (config->secret_file) {
        d->secret = read_small_file(config->secret_file);
        if (!d->secret || !d->secret[0])
            return config_error(error, error_size, "cannot read a secret from %s",
                                config->secret_file);
    }
    if (load_members(d) < 0) return config_error(error, error_size, "%s", larder_errmsg());
    d->self_name = config->self_name ? config->self_name : config->listen_address;
    if (d->members.count > 1) {
        for (size_t m = 0; m < d->members.count && d->self_name; m++)
            if (strcmp(d->members.names[m], d->self_name) == 0) d->self = m;
        if (d->self == SIZE_MAX)
            return config_error(error, error_size,
                                "this node (%s) is not among the members; give --self",
                                d->self_name ? d->self_name : "no --listen");
    }
    if (d->secret && config->insecure_peers) {
        say("--insecure-peers and --secret-file: peers authenticate with the secret; "
            "--insecure-peers changes nothing");
        config->insecure_peers = false;
    }
    if (config->insecure_peers && config->listen_address)
        say("warning: --insecure-peers: any host that reaches %s may read the datasets open "
            "here; give the cluster a --secret-file",
            config->listen_address);
    return 0;
}
