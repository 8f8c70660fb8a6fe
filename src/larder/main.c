/*
 * main.c - the `larder` command-line tool: global options (--help,
 * --version, --trust-index), and dispatch to one command, each in its own
 * cmd_*.c file (cli.h).  Each command parses its options, calls liblarder,
 * and decides what a person sees: results on stdout, warnings and errors
 * on stderr, a progress bar on a terminal.
 * Exit status: 0 success, 1 the operation failed (or verify found bad
 * data), 2 usage error.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char main_help[] =
    "usage: larder COMMAND [ARGS]\n"
    "\n"
    "Turn a training dataset into indexed shards and read it back.\n"
    "\n"
    "  pack SRC... -o OUTDIR     pack files, tar shards or HDF5 into shards and an index\n"
    "  index SHARD... -o INDEX   index existing WebDataset tar shards in place\n"
    "  inspect INDEX             summarize a dataset, or one sample (--sample)\n"
    "  verify INDEX              check every sample's checksum\n"
    "  cat INDEX ID|KEY          write a sample or a field (--field) to stdout\n"
    "  warm INDEX --cache DIR    stage a dataset onto the node cache (or --socket PATH:\n"
    "                            through the node daemon, into its cache)\n"
    "  stat --cache DIR          what the node cache (or --socket PATH: the daemon) holds,\n"
    "                            and its counters\n"
    "  plan INDEX --batch G      print a rank's sample ids for an epoch, in order\n"
    "  hint hot|replicate|list   stage and pin samples on the node daemons ahead of a\n"
    "                            read (with a TTL), or show what is pinned\n"
    "  publish DIR NAME          publish a directory's files (a checkpoint) under NAME\n"
    "                            through the node daemon (--write-through PREFIX)\n"
    "  consume NAME [DEST]       find NAME (waiting for it) and copy its files to DEST\n"
    "  names                     the names the node daemon knows\n"
    "  mount SOURCE MOUNTPOINT   an index or a directory of files, read-only through FUSE\n"
    "                            and the node cache\n"
    "\n"
    "Every command that reads an index refuses one whose shard names leave its\n"
    "base (absolute paths, '..', file:// or other hosts' URLs) unless given\n"
    "--trust-index: only for an index you trust as much as your own files.\n"
    "\n"
    "LARDER_CACHE names the node cache, LARDER_SOCKET the node daemon (larderd):\n"
    "with only LARDER_SOCKET set, warm, stat and cat go through the daemon.\n"
    "\n"
    "'larder COMMAND --help' describes a command.  Version " LARDER_VERSION_STRING ".\n";

int main(int argc, char **argv)
{
    larder_set_log(cli_log, NULL, LARDER_LOG_WARN);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("larder %s\n", LARDER_VERSION_STRING);
        return 0;
    }
    int kept = 2;
    for (int i = 2; i < argc; i++) { /* a flag of every command */
        if (strcmp(argv[i], "--") == 0) {
            while (i < argc)
                argv[kept++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], "--trust-index") == 0)
            cli_trust_index = true;
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    argv[argc] = NULL;
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } commands[] = {{"pack", cmd_pack},       {"index", cmd_index},     {"inspect", cmd_inspect},
                    {"verify", cmd_verify},   {"cat", cmd_cat},         {"warm", cmd_warm},
                    {"stat", cmd_stat},       {"plan", cmd_plan},       {"hint", cmd_hint},
                    {"publish", cmd_publish}, {"consume", cmd_consume}, {"names", cmd_names},
                    {"mount", cmd_mount}};
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s'\n\n%s", program, argv[1], main_help);
    return 2;
}
