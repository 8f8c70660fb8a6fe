/*
 * cli.h - what the `larder` commands share: the program's name, opening a
 * dataset with the command line's trust setting, how a failure is shown
 * and which exit status it gives, and the commands themselves (one
 * cmd_*.c file each; main.c dispatches).
 *
 * Exit status: 0 success, 1 the operation failed (or verify found bad
 * data), 2 usage error.
 */
#ifndef LARDER_CLI_H
#define LARDER_CLI_H

#include "larder.h"

#include <stdbool.h>
#include <stdint.h>

extern const char *const program; /* "larder" */

/* --trust-index, taken out of the arguments of any command by main(). */
extern bool cli_trust_index;

/* larder_open with the command line's trust setting (options may be NULL). */
int cli_open(larder_dataset **dataset, const char *url, larder_open_options *options);

/* The library's log callback: "larder: warning: <message>" (or error) on stderr. */
void cli_log(void *userdata, int level, const char *message);

/* "larder COMMAND: <message>" and a hint to --help on stderr; returns 2. */
int usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "larder: <the library's message for rc>" on stderr; returns 1. */
int fail(int rc);
/* fail(), except that LARDER_EUSAGE (options the library found to
 * contradict each other) is a usage error of `command`: exit 2. */
int fail_or_usage(const char *command, int rc);

/*
 * Where a command that reads through a node cache works, from its --cache
 * and --socket options (NULL when not given): *cache set to a directory
 * (--cache, else LARDER_CACHE), or else *socket to the node daemon's
 * socket (--socket, else LARDER_SOCKET), the daemon then owning the
 * cache.  false when there is neither.
 */
bool cli_cache_or_daemon(const char **cache, const char **socket);
/* The number after "key": in a flat JSON object (a daemon's STATS), or 0. */
uint64_t json_number(const char *object, const char *key);
/* The flat object of dataset `id` in a daemon's STATS text, cut out in
 * place (the text after it is lost); NULL when the daemon has no such dataset. */
char *daemon_dataset_stats(char *stats, const char *id);

/* A progress callback of the library, drawing the struct progress it is given. */
void cli_progress(void *userdata, uint64_t done, uint64_t total);
/* A sample named on the command line: an exact key first, else a decimal
 * id.  The id, or -1 once the reason is printed. */
int64_t resolve_sample(larder_dataset *d, const char *what);

/* What a command's option parser returns when the command should go on;
 * anything else is the exit status to return at once (0 after --help, 2
 * after a usage error). */
enum { CLI_RUN = -1 };

/* The commands: argv[0] is the command's name. */
int cmd_pack(int argc, char **argv);
int cmd_index(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_warm(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_hint(int argc, char **argv);
int cmd_publish(int argc, char **argv);
int cmd_consume(int argc, char **argv);
int cmd_names(int argc, char **argv);
int cmd_mount(int argc, char **argv);

#endif
