/*
 * config.c - larderd's options (config.h): a configuration file's lines,
 * then the command line over them, parsed and checked without I/O into
 * struct larderd_config (both through take_option, so a key of the file
 * and its flag take the same values and fail with the same message), then
 * the files and environment they name loaded into the daemon (the
 * secret, the cluster's members).
 */
#include "config.h"

#include "args.h"
#include "larderd.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* long options without a letter: the transforms' (OPT_TF_*) */
enum {
    OPT_TF_DIR = 1000,
    OPT_TF_JOBS,
    OPT_TF_CPU,
    OPT_TF_CACHE,
};

const char larderd_help[] =
    "usage: larderd [--config FILE] --cache DIR [--socket PATH] [--listen HOST:PORT]\n"
    "               [--peers H:P,... | --hostfile FILE | --slurm] [--self H:P]\n"
    "               [--secret-file FILE | --insecure-peers] [--jobs N]\n"
    "               [--warm [--warm-rate MB/S]] [--metrics HOST:PORT]\n"
    "               [--allow PREFIX]... [--allow-uid UID]... [--allow-gid GID]...\n"
    "               [--cache-size SIZE] [--borrow-size SIZE] [--max-connections N]\n"
    "               [--idle-timeout SECONDS] [--connection-memory SIZE]\n"
    "               [--replicate-prefix PREFIX=H:P,...]...\n"
    "               [--transform-dir DIR] [--transform-jobs N] [--transform-cpu-limit PERCENT]\n"
    "               [--transform-cache SIZE]\n"
    "\n"
    "The node daemon: stages what local readers miss in the node cache, and with\n"
    "peers, reads each shard from the origin on one node only (its owner, by\n"
    "rendezvous hashing) and borrows the rest from the owners.\n"
    "\n"
    "  --config FILE        read options from FILE first: 'key = value' lines, the\n"
    "                       keys the long options below ('cache = /nvme/larder',\n"
    "                       'warm = true'), '#' comments; options given here win\n"
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
    "  --transport tcp|ucx|auto  how peers' data travels: over the TCP connection\n"
    "                       (default), over UCX (UCX_TLS and UCX_NET_DEVICES choose its\n"
    "                       transports and devices), or UCX when it has a usable\n"
    "                       transport; a peer without UCX is read over TCP either way\n"
    "  --replicate-prefix PREFIX=H:P,...  every publication whose name starts with\n"
    "                       PREFIX is staged and pinned (10 minutes) on those members,\n"
    "                       as 'larder hint replicate' does; repeatable\n"
    "  --transform-dir DIR  load the transforms of the shared objects in DIR (trusted\n"
    "                       code: docs/transforms.md), besides the built-ins\n"
    "  --transform-jobs N   transforms run at once (default: the CPUs larderd may use)\n"
    "  --transform-cpu-limit PERCENT  above this use of its CPUs by other work, the\n"
    "                       daemon leaves transforms to the readers (default 80; 0:\n"
    "                       always; 100: never for CPU, only for queue wait)\n"
    "  --transform-cache SIZE  bytes of transformed samples kept (default 256M; 0: none)\n"
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
                                      .transform_cpu_limit = 80,
                                      .transform_cache_bytes = 256u << 20,
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
    case OPT_TF_JOBS:
        if (args_parse_u64(value, &number) < 0 || number < 1 || number > 256)
            return config_error(error, size, "bad --transform-jobs '%s' (1-256)", value);
        config->transform_jobs = (int)number;
        return 0;
    case OPT_TF_CPU:
        if (args_parse_u64(value, &number) < 0 || number > 100)
            return config_error(error, size, "bad --transform-cpu-limit '%s' (percent, 0-100)",
                                value);
        config->transform_cpu_limit = (int)number;
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
    case OPT_TF_CACHE:
        if (args_parse_size(value, &config->transform_cache_bytes) < 0)
            return config_error(error, size, "bad --transform-cache '%s'", value);
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
    case 'F':
        config->config_file = value;
        return 0;
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
    case 'X':
        if (strcmp(value, "tcp") == 0)
            config->transport = TRANSPORT_TCP;
        else if (strcmp(value, "ucx") == 0)
            config->transport = TRANSPORT_UCX;
        else if (strcmp(value, "auto") == 0)
            config->transport = TRANSPORT_AUTO;
        else
            return config_error(error, size, "--transport is tcp, ucx or auto, not '%s'", value);
        return 0;
    case 'a':
        if (config->num_allow == MAX_ALLOW_PREFIXES)
            return config_error(error, size, "at most %d --allow", MAX_ALLOW_PREFIXES);
        config->allow[config->num_allow++] = value;
        config->allow[config->num_allow] = NULL;
        return 0;
    case 'R': { /* PREFIX=MEMBERS: both non-empty */
        const char *equals = strchr(value, '=');
        if (!equals || equals == value || !equals[1])
            return config_error(error, size, "bad --replicate-prefix '%s' (PREFIX=H:P,...)", value);
        if (config->num_replicate == MAX_REPLICATE_RULES)
            return config_error(error, size, "at most %d --replicate-prefix", MAX_REPLICATE_RULES);
        config->replicate[config->num_replicate++] = value;
        config->replicate[config->num_replicate] = NULL;
        return 0;
    }
    case OPT_TF_DIR:
        config->transform_dir = value;
        return 0;
    case 'b':
    case 'C':
    case 'B':
    case OPT_TF_CACHE:
        return take_size(config, option, value, error, size);
    default:
        return take_number(config, option, value, error, size);
    }
}

static const struct option options[] = {{"config", required_argument, 0, 'F'},
                                        {"cache", required_argument, 0, 'c'},
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
                                        {"replicate-prefix", required_argument, 0, 'R'},
                                        {"transport", required_argument, 0, 'X'},
                                        {"transform-dir", required_argument, 0, OPT_TF_DIR},
                                        {"transform-jobs", required_argument, 0, OPT_TF_JOBS},
                                        {"transform-cpu-limit", required_argument, 0, OPT_TF_CPU},
                                        {"transform-cache", required_argument, 0, OPT_TF_CACHE},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};

int larderd_config_parse(struct larderd_config *config, int argc, char **argv, char *error,
                         size_t error_size)
{
    if (error_size) error[0] = '\0';
    optind = 0; /* GNU getopt: start over, so that a test may parse many vectors */
    opterr = 0; /* its messages are ours to write */
    /* --allow, --allow-uid, --allow-gid, --replicate-prefix */
    bool lists_replaced[4] = {false, false, false, false};
    int c;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (c == 'h') return LARDERD_CONFIG_HELP;
        if (c == ':')
            return config_error(error, error_size, "option '%s' needs a value", argv[optind - 1]);
        if (c == '?')
            return config_error(error, error_size, "unrecognized option '%s'", argv[optind - 1]);
        int list = c == 'a' ? 0 : c == 'U' ? 1 : c == 'G' ? 2 : c == 'R' ? 3 : -1;
        if (list >= 0 && !lists_replaced[list]) { /* the command line's list, not the file's */
            lists_replaced[list] = true;
            if (list == 0) config->num_allow = 0, config->allow[0] = NULL;
            if (list == 1) config->num_allow_uids = 0;
            if (list == 2) config->num_allow_gids = 0;
            if (list == 3) config->num_replicate = 0, config->replicate[0] = NULL;
        }
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

const char *larderd_config_file_option(int argc, char **argv)
{
    const char *file = NULL;
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1)
        if (c == 'F') file = optarg;
    optind = 0;
    return file;
}

/* Whether a flag's value in a file is true (1), false (0), or neither (-1). */
static int flag_value(const char *value)
{
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                                "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(value, yes[i]) == 0) return 1;
        if (strcasecmp(value, no[i]) == 0) return 0;
    }
    return -1;
}

/* Cut the blanks around [start, end) in place: the trimmed string, NUL-terminated. */
static char *trim(char *start, char *end)
{
    while (start < end && isspace((unsigned char)*start))
        start++;
    while (end > start && isspace((unsigned char)end[-1]))
        end--;
    *end = '\0';
    return start;
}

/* One "key = value" line of a file (its number `line`); seen_on: where each single key was. */
static int take_line(struct larderd_config *config, char *text, const char *name, int line,
                     int *seen_on, char *error, size_t size)
{
    char *equals = strchr(text, '=');
    if (!equals)
        return config_error(error, size, "%s:%d: expected 'key = value', not '%s'", name, line,
                            trim(text, text + strlen(text)));
    char *key = trim(text, equals), *value = trim(equals + 1, equals + 1 + strlen(equals + 1));
    if (!key[0]) return config_error(error, size, "%s:%d: no key before '='", name, line);
    size_t o = 0;
    while (options[o].name && (strcmp(options[o].name, key) != 0 || options[o].val == 'h'))
        o++;
    if (!options[o].name)
        return config_error(error, size, "%s:%d: unknown option '%s'", name, line, key);
    int option = options[o].val;
    if (option == 'F')
        return config_error(error, size, "%s:%d: 'config' is an option of the command line only",
                            name, line);
    if (!value[0]) return config_error(error, size, "%s:%d: '%s' needs a value", name, line, key);
    bool repeatable = option == 'a' || option == 'U' || option == 'G' || option == 'R';
    if (!repeatable && seen_on[o])
        return config_error(error, size, "%s:%d: '%s' again (line %d set it)", name, line, key,
                            seen_on[o]);
    seen_on[o] = line;
    if (options[o].has_arg == no_argument) {
        int on = flag_value(value);
        if (on < 0)
            return config_error(error, size, "%s:%d: '%s' is true or false, not '%s'", name, line,
                                key, value);
        bool *flag = option == 'S'   ? &config->slurm
                     : option == 'w' ? &config->warm
                                     : &config->insecure_peers; /* 'I' */
        *flag = on == 1;
        return 0;
    }
    char message[CONFIG_ERROR_SIZE];
    if (take_option(config, option, value, message, sizeof message) < 0)
        return config_error(error, size, "%s:%d: %s", name, line, message);
    return 0;
}

int larderd_config_parse_text(struct larderd_config *config, char *text, const char *name,
                              char *error, size_t error_size)
{
    if (error_size) error[0] = '\0';
    int seen_on[sizeof options / sizeof *options] = {0};
    int line = 0;
    for (char *at = text; at && *at;) {
        line++;
        char *end = strchr(at, '\n');
        char *next = end ? end + 1 : NULL;
        if (end) *end = '\0';
        char *content = trim(at, at + strlen(at));
        if (content[0] && content[0] != '#') {
            int rc = take_line(config, content, name, line, seen_on, error, error_size);
            if (rc < 0) return rc;
        }
        at = next;
    }
    return 0;
}

int larderd_config_read(struct larderd_config *config, const char *path, char **text, char *error,
                        size_t error_size)
{
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return config_error(error, error_size, "cannot read %s: %s", path, strerror(errno));
    char *buf = malloc(CONFIG_MAX_FILE + 2);
    size_t n = buf ? fread(buf, 1, CONFIG_MAX_FILE + 1, f) : 0;
    bool failed = buf && ferror(f);
    fclose(f);
    if (!buf) return config_error(error, error_size, "%s: out of memory", path);
    if (failed || n > CONFIG_MAX_FILE || memchr(buf, '\0', n)) {
        free(buf);
        return config_error(error, error_size,
                            failed ? "cannot read %s"
                                   : "%s: not a configuration file (over 64 KB, "
                                     "or a NUL byte)",
                            path);
    }
    buf[n] = '\0';
    *text = buf;
    return larderd_config_parse_text(config, buf, path, error, error_size);
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
