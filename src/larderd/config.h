/*
 * config.h - larderd's options: a configuration file's "key = value"
 * lines (larderd --config FILE; larderd_config_parse_text), then the
 * command line over them, parsed into a struct and validated
 * (larderd_config_parse); neither does I/O, so a unit test drives them
 * with texts and argument vectors.  Then what the options name, read
 * from files and the environment (larderd_config_load: the secret, the
 * cluster's members).
 */
#ifndef LARDERD_CONFIG_H
#define LARDERD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MAX_ALLOWED_IDS 64          /* --allow-uid, --allow-gid: each at most this many */
#define MAX_ALLOW_PREFIXES 64       /* --allow */
#define MAX_REPLICATE_RULES 16      /* --replicate-prefix */
#define CONFIG_ERROR_SIZE 256       /* room for any message of larderd_config_parse */
#define CONFIG_MAX_FILE (64 * 1024) /* bytes of a configuration file, at most */

struct larderd;

struct larderd_config {
    const char *config_file;     /* --config FILE: read before the command line; NULL: none */
    const char *cache_dir;       /* --cache DIR: the node cache (required) */
    const char *socket_path;     /* --socket, else $LARDER_SOCKET; NULL: none */
    const char *listen_address;  /* --listen HOST:PORT for peers; NULL: none */
    const char *self_name;       /* --self: which member this is; NULL: --listen */
    const char *metrics_address; /* --metrics HOST:PORT; NULL: none */
    const char *secret_file;     /* --secret-file; NULL: no cluster secret */
    const char *peers;           /* --peers LIST */
    const char *hostfile;        /* --hostfile FILE */
    bool slurm;                  /* --slurm: members from SLURM_JOB_NODELIST */
    int jobs;                    /* --jobs: reads staged at once (default 64) */
    uint64_t borrow_capacity;    /* --borrow-size: a dataset's bytes for borrowed blocks */
    uint64_t cache_capacity;     /* --cache-size: the node cache's bytes, 0: no limit */
    bool warm;                   /* --warm: stage owned shards in the background */
    double warm_rate;            /* --warm-rate MB/s for that, 0: unpaced */
    bool insecure_peers;         /* --insecure-peers: peers from any address */
    const char *allow[MAX_ALLOW_PREFIXES + 1]; /* --allow prefixes, NULL-terminated */
    int num_allow;                             /* 0: none given */
    uid_t allow_uids[MAX_ALLOWED_IDS];         /* --allow-uid, besides our own uid and root */
    int num_allow_uids;
    gid_t allow_gids[MAX_ALLOWED_IDS]; /* --allow-gid, besides our own gid */
    int num_allow_gids;
    uid_t uid; /* the daemon's own, set by larderd_config_defaults */
    gid_t gid;
    int max_connections;        /* --max-connections (default 1024) */
    int idle_timeout_ms;        /* --idle-timeout, in ms (default 60 s) */
    uint64_t connection_budget; /* --connection-memory: bytes per connection (default 64M) */
    /* --replicate-prefix PREFIX=MEMBERS rules (src/larderd/hints.c), NULL-terminated */
    const char *replicate[MAX_REPLICATE_RULES + 1];
    int num_replicate;
    /* --transport: how peers' READ answers travel (docs/protocol.md, "Transports") */
    enum { TRANSPORT_TCP, TRANSPORT_UCX, TRANSPORT_AUTO } transport; /* default TCP */
    /* transforms (src/larderd/transform*.c, docs/transforms.md) */
    const char *transform_dir;      /* --transform-dir: loadable transforms; NULL: none */
    int transform_cpu_limit;        /* --transform-cpu-limit PERCENT (default 80; 0: never) */
    int transform_jobs;             /* --transform-jobs: transforms run at once (0: the CPUs) */
    uint64_t transform_cache_bytes; /* --transform-cache SIZE: the result cache (default 256M) */
};

/* The usage text, for --help (stdout) and for a usage error (stderr). */
extern const char larderd_help[];

/* The defaults: LARDER_SOCKET from the environment, the process's uid and gid. */
void larderd_config_defaults(struct larderd_config *config);

enum { LARDERD_CONFIG_RUN = 0, LARDERD_CONFIG_HELP = 1 };
/*
 * Parse argv (argv[0] is the program) over config (its defaults, and what
 * a configuration file set), and check the options against each other:
 * an option given here replaces the file's value, and the first --allow
 * (--allow-uid, --allow-gid) here replaces the file's list of them.
 * LARDERD_CONFIG_RUN; LARDERD_CONFIG_HELP for --help; or -EINVAL with a
 * message in error (error_size bytes, CONFIG_ERROR_SIZE is enough), an
 * empty one when the usage text says it best.  The strings in config
 * point into argv.  Not reentrant (getopt).
 */
int larderd_config_parse(struct larderd_config *config, int argc, char **argv, char *error,
                         size_t error_size);

/* The value of the last --config in argv (argv[0] is the program), or
 * NULL: the file to read before parsing argv over it.  Not reentrant. */
const char *larderd_config_file_option(int argc, char **argv);

/*
 * A configuration file's text over config: one "key = value" a line, the
 * key a long option's name without "--" ("cache", "allow", ...), a flag's
 * value true or false (yes/no, on/off, 1/0); blank lines and lines whose
 * first non-blank is '#' are left alone; repeatable options (allow,
 * allow-uid, allow-gid) on as many lines as wanted, any other key once.
 * The value is the rest of the line without its surrounding blanks (no
 * quoting, no comment after it).  No I/O and no allocation: text is cut
 * in place and config's strings point into it, so it must outlive config.
 * 0, or -EINVAL with "NAME:LINE: message" in error (NAME: the file's).
 * Checks nothing across options: larderd_config_parse does, after.
 */
int larderd_config_parse_text(struct larderd_config *config, char *text, const char *name,
                              char *error, size_t error_size);

/*
 * Read the configuration file at path (at most CONFIG_MAX_FILE bytes)
 * into *text (malloc'd; the caller frees it after config) and parse it
 * over config (larderd_config_parse_text).  0, or -EINVAL with a message.
 */
int larderd_config_read(struct larderd_config *config, const char *path, char **text, char *error,
                        size_t error_size);

/*
 * What the options name, into the daemon: the secret (read from
 * --secret-file), the members (--peers, --hostfile, --slurm), which one is
 * this node (self), and the resolution of --insecure-peers against the
 * secret.  0, or -1 with a message in error.  Warnings go through say().
 */
int larderd_config_load(struct larderd *daemon, char *error, size_t error_size);

#endif
