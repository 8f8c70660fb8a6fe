/*
 * cmd_mount.c - `larder mount`: an index, or a directory of plain files,
 * read-only through FUSE (src/mount/, docs/mount.md).  Built with
 * libfuse3 only; without it the command says so.
 */
#include "cli.h"

#include "args.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LARDER_HAVE_MOUNT
#include "mount.h"
#endif

static const char mount_help[] =
    "usage: larder mount SOURCE MOUNTPOINT [--cache DIR] [--socket PATH] [--foreground]\n"
    "                    [--log FILE] [--force-unmount-stale] [--allow-other] [--plain]\n"
    "                    [--threads N] [--readahead SIZE] [--stage-on-open]\n"
    "                    [--no-stage-on-open] [--stage-inflight N] [--no-passthrough]\n"
    "\n"
    "Show SOURCE read-only at MOUNTPOINT, every read going through larder:\n"
    "the node cache, the node daemon, peers and the origin, checked against the\n"
    "index's checksums (a sample the cache holds, once per mount).\n"
    "SOURCE is an index (a packed tree shows KEY.FIELD files, packed HDF5\n"
    "KEY.FIELD.npy arrays, a --files index the files themselves), or a\n"
    "directory or s3:// prefix of plain files, indexed now from a listing\n"
    "(names and sizes, nothing read; such files are not checked).\n"
    "\n"
    "  --cache DIR            the node cache (default LARDER_CACHE); hits are read\n"
    "                         from its files directly\n"
    "  --socket PATH          the node daemon (default LARDER_SOCKET): misses are\n"
    "                         asked of it; give --cache its cache directory too, so\n"
    "                         that hits need no request\n"
    "  --foreground, -f       stay attached, log to stderr; otherwise return once the\n"
    "                         mount is ready and serve in the background\n"
    "  --log FILE             the background mount's log (default: syslog)\n"
    "  --force-unmount-stale  unmount a dead mount left at MOUNTPOINT first\n"
    "  --allow-other          let other users read the mount (needs user_allow_other\n"
    "                         in /etc/fuse.conf unless root)\n"
    "  --plain                take SOURCE as plain files even if it is an index file\n"
    "  --threads N            FUSE worker threads at most (default 16)\n"
    "  --readahead SIZE       the largest sequential read-ahead window (default 32M)\n"
    "  --stage-on-open        stage a whole file in the background (below every\n"
    "                         reader) when it is first opened: its first 4 MiB and\n"
    "                         last 1 MiB at once, the rest a few 1 MiB reads at a\n"
    "                         time (default: where the node cache evicts nothing)\n"
    "  --no-stage-on-open     only what is read (and read ahead) is staged (default\n"
    "                         where the node cache evicts, or there is none)\n"
    "  --stage-inflight N     staging reads in flight at most, for all files, half of\n"
    "                         it while a reader waits on a miss (default: adaptive,\n"
    "                         1 to 32, grown while readers' misses stay fast)\n"
    "  --no-passthrough       never hand a file's reads to the kernel (by default a\n"
    "                         file the node cache holds whole, in a cache that\n"
    "                         evicts nothing, is read by the kernel from the cache's\n"
    "                         data file: FUSE passthrough, Linux 6.9+, as root)\n"
    "\n"
    "Unmount with 'fusermount3 -u MOUNTPOINT' or by sending the mount SIGTERM.\n"
    "A reader may register its sample order by writing\n"
    "'seed=S epoch=E rank=R world=W batch=G' to MOUNTPOINT/.larder-order;\n"
    "MOUNTPOINT/.larder-stats reads back the mount's counters.\n";

int cmd_mount(int argc, char **argv)
{
    static const struct option options[] = {{"cache", required_argument, 0, 'c'},
                                            {"socket", required_argument, 0, 'S'},
                                            {"foreground", no_argument, 0, 'f'},
                                            {"log", required_argument, 0, 'l'},
                                            {"force-unmount-stale", no_argument, 0, 'F'},
                                            {"allow-other", no_argument, 0, 'a'},
                                            {"plain", no_argument, 0, 'p'},
                                            {"threads", required_argument, 0, 't'},
                                            {"readahead", required_argument, 0, 'r'},
                                            {"stage-on-open", no_argument, 0, 'O'},
                                            {"no-stage-on-open", no_argument, 0, 'N'},
                                            {"stage-inflight", required_argument, 0, 'i'},
                                            {"no-passthrough", no_argument, 0, 'P'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    const char *cache = NULL, *socket = NULL, *log = NULL;
    bool foreground = false, force = false, allow_other = false, plain = false;
    bool no_passthrough = false;
    /* auto: where the node cache evicts nothing (docs/mount.md: with the
     * adaptive limit, a cold random epoch measured faster with it) */
    int stage_on_open = -1;
    uint64_t threads = 0, readahead = 0, stage_inflight = 0;
    int c;
    while ((c = getopt_long(argc, argv, "fh", options, NULL)) != -1) {
        switch (c) {
        case 'c':
            cache = optarg;
            break;
        case 'S':
            socket = optarg;
            break;
        case 'f':
            foreground = true;
            break;
        case 'l':
            log = optarg;
            break;
        case 'F':
            force = true;
            break;
        case 'a':
            allow_other = true;
            break;
        case 'p':
            plain = true;
            break;
        case 'O':
            stage_on_open = 1;
            break;
        case 'N':
            stage_on_open = 0;
            break;
        case 'P':
            no_passthrough = true;
            break;
        case 'i':
            if (args_parse_u64(optarg, &stage_inflight) < 0 || stage_inflight == 0 ||
                stage_inflight > 64)
                return usage_error("mount", "--stage-inflight %s: a number from 1 to 64", optarg);
            break;
        case 't':
            if (args_parse_u64(optarg, &threads) < 0 || threads == 0 || threads > 256)
                return usage_error("mount", "--threads %s: a number from 1 to 256", optarg);
            break;
        case 'r':
            if (args_parse_size(optarg, &readahead) < 0 || readahead < (1 << 20) ||
                readahead > (UINT64_C(1) << 30))
                return usage_error("mount", "--readahead %s: a size from 1M to 1G", optarg);
            break;
        case 'h':
            fputs(mount_help, stdout);
            return 0;
        default:
            return usage_error("mount", "bad option");
        }
    }
    if (optind + 2 != argc) return usage_error("mount", "expected SOURCE and MOUNTPOINT");
#ifdef LARDER_HAVE_MOUNT
    struct larder__mount_options o = {.source = argv[optind],
                                      .mountpoint = argv[optind + 1],
                                      .cache_dir = cache,
                                      .socket = socket,
                                      .log_path = log,
                                      .foreground = foreground,
                                      .force_unmount_stale = force,
                                      .allow_other = allow_other,
                                      .trust_index = cli_trust_index,
                                      .plain = plain,
                                      .threads = (int)threads,
                                      .readahead_max = readahead,
                                      .stage_on_open = stage_on_open,
                                      .stage_inflight = (int)stage_inflight,
                                      .no_passthrough = no_passthrough};
    return larder__mount_run(&o);
#else
    (void)cache, (void)socket, (void)log, (void)foreground, (void)force, (void)allow_other;
    (void)plain, (void)stage_on_open, (void)stage_inflight, (void)no_passthrough;
    fprintf(stderr,
            "%s: mount: this larder was built without libfuse3 (scripts/install-deps "
            "installs libfuse3-dev; then rebuild)\n",
            program);
    return 1;
#endif
}
