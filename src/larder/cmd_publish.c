/*
 * cmd_publish.c - `larder publish`, `larder consume` and `larder names`:
 * a directory of files (a checkpoint) published under a name by the node
 * that wrote it, read by that name on any node, and the names a node's
 * daemon knows (larder.h, "names").
 */
#include "cli.h"

#include "args.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char publish_help[] =
    "usage: larder publish DIR NAME [--write-through ORIGIN_PREFIX] [--index INDEX]\n"
    "                      [--replace] [--socket PATH]\n"
    "\n"
    "Publish the files under DIR as NAME through this node's daemon (--socket,\n"
    "or LARDER_SOCKET), which then serves them to every node from here: their\n"
    "bytes are local, so nothing is read from an origin.  DIR is indexed in\n"
    "place first (DIR/index.larder, each file one sample keyed by its path\n"
    "under DIR), unless --index names an index of it already made.  With\n"
    "--write-through, the files and then the index are also copied, synced,\n"
    "to ORIGIN_PREFIX (a directory on a shared file system, or file://), and\n"
    "readers fall back to that copy when this node is gone.\n"
    "\n"
    "A name is published once; with --replace, a NAME published already (here\n"
    "or by another node) now names DIR's files, for every open from now on,\n"
    "on every node.  Readers that opened the publication before keep reading\n"
    "its own bytes: it is another dataset, and its files must stay where they\n"
    "are while read, so publish each version from a directory of its own\n"
    "(rewriting the published directory in place is refused).\n";

static const char consume_help[] =
    "usage: larder consume NAME [DEST] [--timeout SECONDS] [--socket PATH]\n"
    "\n"
    "Find the publication NAME through this node's daemon (--socket, or\n"
    "LARDER_SOCKET), waiting up to --timeout seconds (default 60, at most\n"
    "3600) for a name not yet published.  With DEST, write each of its files\n"
    "to DEST/PATH, read through the daemon (from the producer node, or the\n"
    "written-through origin when the producer is gone), every byte checked;\n"
    "without, print the index to open on this node.\n";

static const char names_help[] = "usage: larder names [--socket PATH]\n"
                                 "\n"
                                 "Print the names this node's daemon knows, as JSON.\n";

/* Options shared by the three: --socket, and the command's own. */
static int parse(int argc, char **argv, const char *help, const char **socket,
                 const char **write_through, const char **index, const char **timeout,
                 const char **replace)
{
    static const struct option options[] = {{"socket", required_argument, 0, 'S'},
                                            {"write-through", required_argument, 0, 'w'},
                                            {"index", required_argument, 0, 'i'},
                                            {"timeout", required_argument, 0, 't'},
                                            {"replace", no_argument, 0, 'r'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        const char **slot = c == 'S'   ? socket
                            : c == 'w' ? write_through
                            : c == 'i' ? index
                            : c == 't' ? timeout
                                       : NULL;
        if (c == 'h') {
            fputs(help, stdout);
            return 0;
        }
        if (c == 'r') {
            *replace = "yes";
            continue;
        }
        if (!slot) return usage_error(argv[0], "bad option (see --help)");
        *slot = optarg;
    }
    return CLI_RUN;
}

int cmd_publish(int argc, char **argv)
{
    const char *socket = NULL, *write_through = NULL, *index = NULL, *timeout = NULL;
    const char *replace = NULL;
    int rc = parse(argc, argv, publish_help, &socket, &write_through, &index, &timeout, &replace);
    if (rc != CLI_RUN) return rc;
    if (timeout) return usage_error("publish", "--timeout is consume's");
    if (optind + 2 != argc) return usage_error("publish", "expected DIR and NAME");
    larder_publish_options o = {.version = LARDER_PUBLISH_OPTIONS_VERSION,
                                .index = index,
                                .write_through = write_through,
                                .replace = replace != NULL};
    larder_publication p;
    rc = larder_publish(socket, argv[optind], argv[optind + 1], &o, &p);
    if (rc < 0) return fail_or_usage("publish", rc);
    printf("published %s: dataset %s from %s, index %s", p.name, p.dataset_id, p.producer, p.index);
    if (p.origin[0]) printf(", written through to %s", p.origin);
    printf("\n");
    return 0;
}

/* Whether a sample's key is a safe relative path to write under DEST. */
static bool safe_key(const char *key)
{
    if (!key[0] || key[0] == '/') return false;
    for (const char *part = key; *part;) {
        size_t n = strcspn(part, "/");
        if (n == 0 || (n == 1 && part[0] == '.') || (n == 2 && part[0] == '.' && part[1] == '.'))
            return false;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)part[i] < 0x20 || part[i] == 0x7f || part[i] == '\\') return false;
        part += n;
        if (*part == '/') part++;
        if (!*part && part[-1] == '/') return false;
    }
    return true;
}

/* Make the directories above dest/key; path receives dest/key. */
static int make_parents(const char *dest, const char *key, char *path, size_t size)
{
    if ((size_t)snprintf(path, size, "%s/%s", dest, key) >= size) {
        fprintf(stderr, "%s: %s/%s: too long a path\n", program, dest, key);
        return -ENAMETOOLONG;
    }
    for (char *slash = strchr(path + strlen(dest) + 1, '/'); slash;
         slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (mkdir(path, 0755) < 0 && errno != EEXIST) {
            int rc = -errno;
            fprintf(stderr, "%s: %s: %s\n", program, path, strerror(errno));
            return rc;
        }
        *slash = '/';
    }
    return 0;
}

enum { COPY_PIECE = 4 << 20 }; /* bytes per larder_file_read: 4 MiB */

/*
 * Copy the open file `f` to dest/key piece by piece (memory stays at one
 * piece whatever the file's size), into a temporary name renamed over
 * dest/key once every byte is written and synced: a reader of DEST never
 * sees a file half written, and a failed copy leaves the old file (or
 * none).  0, or 1 after saying why.
 */
static int copy_file(larder_file *f, const char *name, const char *dest, const char *key, char *buf)
{
    char path[PATH_MAX], temp[PATH_MAX + 32];
    if (make_parents(dest, key, path, sizeof path) < 0) return 1;
    snprintf(temp, sizeof temp, "%s.larder-%ld", path, (long)getpid());
    int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        fprintf(stderr, "%s: %s: %s\n", program, temp, strerror(errno));
        return 1;
    }
    int64_t n;
    const char *failed = NULL; /* what failed: NULL, "read" or a system error */
    while (!failed && (n = larder_file_read(f, buf, COPY_PIECE)) != 0) {
        if (n < 0) {
            fprintf(stderr, "%s: %s: %s: %s\n", program, name, key, larder_errmsg());
            failed = "read";
            break;
        }
        for (int64_t done = 0; done < n;) {
            ssize_t w = write(fd, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) {
                failed = strerror(errno);
                break;
            }
            done += w;
        }
    }
    if (!failed && fsync(fd) < 0) failed = strerror(errno);
    if (close(fd) < 0 && !failed) failed = strerror(errno);
    if (!failed && rename(temp, path) < 0) failed = strerror(errno);
    if (!failed) return 0;
    if (strcmp(failed, "read") != 0) fprintf(stderr, "%s: %s: %s\n", program, path, failed);
    unlink(temp);
    return 1;
}

/* Every file of the publication into dest: 0 (exit status) or 1. */
static int consume_into(const larder_publication *p, const char *socket, const char *dest)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .verify_checksums = 1,
                             .cache_dir = "",
                             .daemon_socket = socket};
    larder_dataset *d;
    int rc = larder_open(&d, p->index, &o);
    if (rc < 0) return fail(rc);
    char *buf = malloc(COPY_PIECE);
    if (!buf || (mkdir(dest, 0755) < 0 && errno != EEXIST)) {
        fprintf(stderr, "%s: %s: %s\n", program, dest, buf ? strerror(errno) : strerror(ENOMEM));
        free(buf);
        larder_close(d);
        return 1;
    }
    uint64_t files = 0, bytes = 0;
    int status = 0;
    for (uint64_t id = 0; status == 0 && id < larder_num_samples(d); id++) {
        larder_sample_info info;
        larder_file *f = NULL;
        rc = larder_sample_info_get(d, id, &info);
        if (rc == 0 && !safe_key(info.key)) {
            fprintf(stderr, "%s: %s: sample %llu has the key '%s', not a relative path: refused\n",
                    program, p->name, (unsigned long long)id, info.key);
            status = 1;
            break;
        }
        if (rc == 0) rc = larder_file_open(&f, d, id, -1);
        if (rc < 0) {
            status = fail(rc);
            break;
        }
        status = copy_file(f, p->name, dest, info.key, buf);
        larder_file_close(f);
        if (status && !p->origin[0])
            fprintf(stderr,
                    "%s: %s was published without --write-through: its producer %s holds "
                    "the only copy\n",
                    program, p->name, p->producer);
        files++, bytes += info.length;
    }
    free(buf);
    larder_close(d);
    if (status == 0)
        printf("%s: %llu files, %llu bytes into %s\n", p->name, (unsigned long long)files,
               (unsigned long long)bytes, dest);
    return status;
}

int cmd_consume(int argc, char **argv)
{
    const char *socket = NULL, *write_through = NULL, *index = NULL, *timeout = NULL;
    const char *replace = NULL;
    int rc = parse(argc, argv, consume_help, &socket, &write_through, &index, &timeout, &replace);
    if (rc != CLI_RUN) return rc;
    if (write_through || index || replace)
        return usage_error("consume", "--write-through, --index and --replace are publish's");
    if (optind + 1 != argc && optind + 2 != argc)
        return usage_error("consume", "expected NAME and perhaps DEST");
    double seconds = 60;
    if (timeout && (args_parse_decimal(timeout, &seconds) < 0 || seconds < 0 || seconds > 3600))
        return usage_error("consume", "--timeout %s: seconds from 0 to 3600", timeout);
    larder_publication p;
    rc = larder_resolve(socket, argv[optind], (int)(seconds * 1000), &p);
    if (rc < 0) return fail_or_usage("consume", rc);
    if (optind + 1 == argc) {
        printf("%s\n", p.index);
        return 0;
    }
    return consume_into(&p, socket, argv[optind + 1]);
}

int cmd_names(int argc, char **argv)
{
    const char *socket = NULL, *write_through = NULL, *index = NULL, *timeout = NULL;
    const char *replace = NULL;
    int rc = parse(argc, argv, names_help, &socket, &write_through, &index, &timeout, &replace);
    if (rc != CLI_RUN) return rc;
    if (write_through || index || timeout || replace || optind != argc)
        return usage_error("names", "no arguments but --socket");
    size_t capacity = 1u << 20;
    char *json = malloc(capacity + 1);
    if (!json) return fail(-ENOMEM);
    rc = larder_names_list(socket, json, capacity + 1);
    if (rc >= 0) printf("%s\n", json);
    free(json);
    return rc < 0 ? fail(rc) : 0;
}
