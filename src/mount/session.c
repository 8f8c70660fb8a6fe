/*
 * session.c - one `larder mount` from start to unmount (mount.h):
 *
 *   1. the mount point: a directory, or a dead mount's mount point
 *      ("Transport endpoint is not connected"), reported with the command
 *      that clears it, or cleared with --force-unmount-stale;
 *   2. in the background, a fork: the parent waits for the child to say
 *      that the mount is up (or why not) and exits with that, so that a
 *      script may read the mount as soon as the command returns;
 *   3. the source opened (an index, or plain files indexed from a listing,
 *      source.c) and the tree built, before anything is mounted;
 *   4. the FUSE session (low level, multithreaded, 1 MiB requests) until
 *      unmounted (fusermount3 -u) or SIGTERM/SIGINT/SIGHUP, which unmount.
 */
#define FUSE_USE_VERSION 312
#include "mount.h"

#include "passthrough.h"
#include "source_plain.h"

#include "bigbuf.h"
#include "cache.h"
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static FILE *log_file; /* NULL: syslog */
static int log_level = LARDER_LOG_INFO;

void larder__mount_log(int level, const char *fmt, ...)
{
    if (level > log_level) return;
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (!log_file) {
        static const int priorities[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
        syslog(priorities[level < 0 ? 0 : level > 3 ? 3 : level], "%s", message);
        return;
    }
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    fprintf(log_file, "%s larder mount[%d]: %s: %s\n", when, (int)getpid(),
            names[level < 0   ? 0
                  : level > 3 ? 3
                              : level],
            message);
    fflush(log_file);
}

static void library_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    larder__mount_log(level, "%s", message);
}

/* `path` as the kernel writes mount points in /proc/self/mounts and
 * mountinfo: ' ', '\t', '\n' and '\\' as octal escapes. */
static void escape_mount_point(const char *path, char *escaped, size_t size)
{
    size_t n = 0;
    for (const char *p = path; *p && n + 5 < size; p++)
        if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\\')
            n += (size_t)snprintf(escaped + n, size - n, "\\%03o", (unsigned char)*p);
        else
            escaped[n++] = *p;
    escaped[n] = '\0';
}

/* Whether a FUSE file system is mounted at `path` (absolute), per /proc/self/mounts. */
static bool fuse_mounted_at(const char *path)
{
    char escaped[8192];
    escape_mount_point(path, escaped, sizeof escaped);
    size_t n = strlen(escaped);
    FILE *f = fopen("/proc/self/mounts", "r");
    if (!f) return false;
    char line[16384];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        char *point = strchr(line, ' ');
        if (!point) continue;
        point++;
        size_t length = strcspn(point, " ");
        found = length == n && memcmp(point, escaped, n) == 0 &&
                strncmp(point + length, " fuse", 5) == 0;
    }
    fclose(f);
    return found;
}

/* The device of the FUSE mount at `path` (resolved) from /proc/self/mountinfo,
 * which touches no file system (a stat of the mount point would wait on
 * this very process).  true when found. */
static bool fuse_device_at(const char *path, unsigned *major, unsigned *minor)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return false;
    char escaped[8192]; /* mountinfo escapes the mount point: compare it escaped */
    escape_mount_point(path, escaped, sizeof escaped);
    char line[16384];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - TYPE SOURCE ... */
        unsigned a, b;
        char point[8192];
        if (sscanf(line, "%*u %*u %u:%u %*s %8191s", &a, &b, point) != 3) continue;
        const char *type = strstr(line, " - ");
        if (!type || strncmp(type + 3, "fuse", 4) != 0) continue;
        if (strcmp(point, escaped) == 0) *major = a, *minor = b, found = true;
    }
    fclose(f);
    return found;
}

void larder__mount_raise_readahead(struct larder__mount *m, unsigned kb)
{
    if (atomic_exchange(&m->readahead_raised, true)) return;
    if (m->dev_major == 0 && m->dev_minor == 0) return;
    char path[96], now[32] = "";
    snprintf(path, sizeof path, "/sys/class/bdi/%u:%u/read_ahead_kb", m->dev_major, m->dev_minor);
    FILE *f = fopen(path, "r");
    unsigned current = 0;
    if (f) {
        if (fgets(now, sizeof now, f)) current = (unsigned)strtoul(now, NULL, 10);
        fclose(f);
    }
    if (current >= kb) return;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    char value[32];
    int length = snprintf(value, sizeof value, "%u\n", kb);
    if (fd >= 0 && write(fd, value, (size_t)length) == length) {
        close(fd);
        larder__mount_log(LARDER_LOG_INFO,
                          "the kernel's read-ahead for the mount raised from %u "
                          "to %u KiB (%s)",
                          current, kb, path);
        return;
    }
    int error = errno;
    if (fd >= 0) close(fd);
    larder__mount_log(LARDER_LOG_INFO,
                      "the kernel's read-ahead for the mount stays at %u KiB, so buffered reads "
                      "reach the mount in pieces of that size (%s: %s; as root: echo %u > %s)",
                      current, path, strerror(error), kb, path);
}

/* 0 when `path` is a directory to mount on; else 1 after saying why. */
static int check_mountpoint(const struct larder__mount_options *o)
{
    struct stat st;
    struct statfs sf;
    /* statfs asks the file system every time: a dead FUSE mount answers
     * ENOTCONN, where stat may be answered from attributes the kernel kept */
    if (statfs(o->mountpoint, &sf) == 0 && stat(o->mountpoint, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "larder: %s: not a directory\n", o->mountpoint);
            return 1;
        }
        /* /proc/self/mounts names the mount point resolved: compare that,
         * not the path as typed (a trailing '/', a symbolic link, "..") */
        char resolved[PATH_MAX];
        if (fuse_mounted_at(realpath(o->mountpoint, resolved) ? resolved : o->mountpoint)) {
            fprintf(stderr,
                    "larder: %s: a FUSE file system is mounted there already; unmount it first "
                    "(fusermount3 -u %s)\n",
                    o->mountpoint, o->mountpoint);
            return 1;
        }
        return 0;
    }
    if (errno != ENOTCONN) {
        fprintf(stderr, "larder: %s: %s\n", o->mountpoint, strerror(errno));
        return 1;
    }
    if (!o->force_unmount_stale) {
        fprintf(stderr,
                "larder: %s: a stale mount (Transport endpoint is not connected): the process "
                "that served it is gone.  Clear it with 'fusermount3 -u %s' (or "
                "'fusermount3 -u -z %s' while something still holds it open), or mount again "
                "with --force-unmount-stale\n",
                o->mountpoint, o->mountpoint, o->mountpoint);
        return 1;
    }
    char resolved[PATH_MAX];
    for (int lazy = 0; lazy < 2; lazy++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (lazy)
                execlp("fusermount3", "fusermount3", "-u", "-z", o->mountpoint, (char *)NULL);
            else
                execlp("fusermount3", "fusermount3", "-u", o->mountpoint, (char *)NULL);
            _exit(127);
        }
        int status = 0;
        if (pid > 0) waitpid(pid, &status, 0);
        if (statfs(o->mountpoint, &sf) == 0 && stat(o->mountpoint, &st) == 0 &&
            S_ISDIR(st.st_mode) && !fuse_mounted_at(o->mountpoint) &&
            !fuse_mounted_at(realpath(o->mountpoint, resolved) ? resolved : o->mountpoint)) {
            fprintf(stderr, "larder: %s: cleared a stale mount\n", o->mountpoint);
            return 0;
        }
    }
    fprintf(stderr, "larder: %s: could not clear the stale mount (fusermount3 -u): %s\n",
            o->mountpoint, strerror(errno));
    return 1;
}

/* Open the source and build the tree: 0, or 1 after saying why. */
static int open_source(struct larder__mount *m, const struct larder__mount_options *o,
                       struct larder__plain **plain)
{
    /* verify_checksums: without a cache too, every byte handed out is
     * checked (from the cache: fs.c checks each sample once, cache_check.c) */
    larder_open_options lo = {.version = LARDER_OPEN_OPTIONS_VERSION,
                              .verify_checksums = 1,
                              .cache_dir = o->cache_dir,
                              .daemon_socket = o->socket,
                              .trust_index = o->trust_index};
    int rc = larder__plain_open(plain, &m->dataset, o->source, &lo, o->plain);
    if (rc < 0) {
        fprintf(stderr, "larder: %s: %s\n", o->source, larder_errmsg());
        return 1;
    }
    larder_stats stats;
    m->cached = larder_stats_get(m->dataset, &stats) == 0 && stats.cached;
    const char *socket = o->socket ? o->socket : getenv("LARDER_SOCKET");
    m->daemon = socket && socket[0];
    uint64_t skipped = 0;
    if ((rc = larder__mount_tree_new(&m->tree, m->dataset, NULL, NULL, &skipped)) < 0) {
        fprintf(stderr, "larder: %s: %s\n", o->source, larder_errmsg());
        return 1;
    }
    if (skipped)
        fprintf(stderr,
                "larder: warning: %s: %llu files left out (names that cannot be paths, "
                "or that collide)\n",
                o->source, (unsigned long long)skipped);
    return 0;
}

/* Background: fork; the parent returns the child's verdict, the child 0 with *ready. */
static int go_background(int *ready)
{
    int fds[2];
    /* close-on-exec: a program the child runs (fusermount3, run by libfuse
     * to mount) must not hold the write end, or the parent would wait on
     * it past the child's death */
    if (pipe2(fds, O_CLOEXEC) < 0) return -errno;
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid > 0) {
        close(fds[1]);
        unsigned char status = 1;
        ssize_t n;
        while ((n = read(fds[0], &status, 1)) < 0 && errno == EINTR)
            ;
        if (n != 1) { /* the child died before saying anything */
            int ws = 0;
            waitpid(pid, &ws, 0);
            status = 1;
        }
        _exit(status);
    }
    close(fds[0]);
    setsid();
    *ready = fds[1];
    return 0;
}

static void tell_parent(int *ready, unsigned char status)
{
    if (*ready < 0) return;
    ssize_t n = write(*ready, &status, 1);
    (void)n;
    close(*ready);
    *ready = -1;
}

/* After the mount is up in the background: the log to its file (or syslog), stdio to /dev/null. */
static void detach(const struct larder__mount_options *o)
{
    int null = open("/dev/null", O_RDWR);
    if (o->log_path) {
        FILE *f = fopen(o->log_path, "a");
        if (f) log_file = f;
    }
    if (log_file == stderr) log_file = NULL;
    if (!log_file) openlog("larder-mount", LOG_PID, LOG_USER);
    if (null >= 0) {
        dup2(null, 0), dup2(null, 1), dup2(null, 2);
        if (null > 2) close(null);
    }
    if (chdir("/") < 0) larder__mount_log(LARDER_LOG_WARN, "chdir /: %s", strerror(errno));
}

/*
 * libfuse's custom I/O (fuse_session_custom_io): the same reads, writes
 * and splices of /dev/fuse as libfuse's own, with passthrough.c looking at
 * each request and reply on the way (the INIT negotiation and the backing
 * id of an OPEN reply, which libfuse 3.14 cannot send).
 */
static ssize_t io_read(int fd, void *buf, size_t length, void *userdata)
{
    ssize_t n = read(fd, buf, length);
    if (n > 0)
        larder__mount_passthrough_request(((struct larder__mount *)userdata)->passthrough, buf,
                                          (size_t)n);
    return n;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    larder__mount_passthrough_reply(((struct larder__mount *)userdata)->passthrough, iov, count);
    return writev(fd, iov, count);
}

/* given, so that libfuse still splices READ replies from the cache files */
static ssize_t io_splice_send(int in, off_t *in_offset, int out, off_t *out_offset, size_t length,
                              unsigned int flags, void *userdata)
{
    (void)userdata;
    return splice(in, in_offset, out, out_offset, length, flags);
}

static const struct fuse_custom_io passthrough_io = {
    .read = io_read, .writev = io_writev, .splice_send = io_splice_send};

static struct fuse_session *active; /* what a signal ends */

static void on_signal(int signum)
{
    (void)signum;
    if (active) fuse_session_exit(active);
}

/* SIGTERM, SIGINT and SIGHUP unmount, even where the shell that started the
 * mount left them ignored (a background job's SIGINT); SIGPIPE is ignored. */
static void set_signals(struct fuse_session *se, bool on)
{
    active = on ? se : NULL;
    struct sigaction sa = {.sa_handler = on ? on_signal : SIG_DFL};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    struct sigaction ignore = {.sa_handler = on ? SIG_IGN : SIG_DFL};
    sigaction(SIGPIPE, &ignore, NULL);
}

static int serve(struct larder__mount *m, const struct larder__mount_options *o, int *ready)
{
    char options[512];
    snprintf(options, sizeof options,
             "fsname=larder,subtype=larder,default_permissions,max_read=%u%s", 1u << 20,
             o->allow_other ? ",allow_other" : "");
    char *argv[] = {"larder-mount", "-o", options, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    struct fuse_session *se =
        fuse_session_new(&args, &larder__mount_ops, sizeof larder__mount_ops, m);
    if (!se) {
        fprintf(stderr, "larder: %s: could not start a FUSE session\n", o->mountpoint);
        return 1;
    }
    int status = 1;
    set_signals(se, true);
    /* resolved before mounting: afterwards a stat of it would wait on us */
    char resolved[PATH_MAX];
    if (!realpath(o->mountpoint, resolved))
        snprintf(resolved, sizeof resolved, "%s", o->mountpoint);
    if (fuse_session_mount(se, o->mountpoint) != 0) {
        fprintf(stderr, "larder: %s: the mount failed (is /dev/fuse there, and may you mount?)\n",
                o->mountpoint);
    } else {
        struct larder__mount_passthrough_stats pt;
        /* before the loop reads INIT; where passthrough is off, libfuse's own I/O */
        if (larder__mount_passthrough_wanted(m->passthrough)) {
            int fd = fuse_session_fd(se);
            if (fuse_session_custom_io(se, &passthrough_io, fd) == 0)
                larder__mount_passthrough_set_fd(m->passthrough, fd);
            else
                larder__mount_log(LARDER_LOG_WARN, "FUSE passthrough: no custom I/O; not used");
        }
        if (!o->foreground) {
            tell_parent(ready, 0);
            detach(o);
        }
        larder__mount_passthrough_log(m->passthrough);
        if (!fuse_device_at(resolved, &m->dev_major, &m->dev_minor))
            larder__mount_log(LARDER_LOG_WARN, "%s: not found in /proc/self/mountinfo",
                              o->mountpoint);
        uint64_t nodes, files, bytes;
        larder__mount_tree_counts(m->tree, &nodes, &files, &bytes);
        larder__mount_log(LARDER_LOG_INFO, "%s mounted at %s: %llu files, %llu bytes (%s)",
                          o->source, o->mountpoint, (unsigned long long)files,
                          (unsigned long long)bytes,
                          m->cached && m->daemon ? "node cache and daemon"
                          : m->cached            ? "node cache"
                          : m->daemon            ? "through the node daemon"
                                                 : "no cache");
        struct fuse_loop_config *config = fuse_loop_cfg_create();
        fuse_loop_cfg_set_max_threads(config, (unsigned)(o->threads > 0 ? o->threads : 16));
        fuse_loop_cfg_set_idle_threads(config, 4);
        int rc = fuse_session_loop_mt(se, config);
        fuse_loop_cfg_destroy(config);
        /* the kernel drops its backing ids with the connection */
        larder__mount_passthrough_set_fd(m->passthrough, -1);
        fuse_session_unmount(se);
        status = rc < 0 ? 1 : 0;
        larder__mount_passthrough_stats(m->passthrough, &pt);
        struct rusage ru = {0};
        getrusage(RUSAGE_SELF, &ru);
        larder__mount_log(LARDER_LOG_INFO,
                          "%s unmounted: %llu reads, %llu bytes, %llu failed, %llu bytes staged "
                          "ahead; FUSE passthrough %s, %llu opens through it, %llu served by the "
                          "mount; its CPU %.2f s user, %.2f s system, %ld page faults, %ld "
                          "context switches",
                          o->mountpoint, (unsigned long long)atomic_load(&m->reads),
                          (unsigned long long)atomic_load(&m->read_bytes),
                          (unsigned long long)atomic_load(&m->read_errors),
                          (unsigned long long)atomic_load(&m->readahead_bytes), pt.state,
                          (unsigned long long)pt.opens, (unsigned long long)pt.fallbacks,
                          (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
                          (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6,
                          ru.ru_minflt + ru.ru_majflt, ru.ru_nvcsw + ru.ru_nivcsw);
    }
    set_signals(se, false);
    fuse_session_destroy(se);
    fuse_opt_free_args(&args);
    return status;
}

/* A local path made absolute (the background mount leaves the working directory). */
static const char *absolute(const char *path, char *buf, size_t capacity)
{
    if (!path || !path[0] || path[0] == '/' || strstr(path, "://")) return path;
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd) || (size_t)snprintf(buf, capacity, "%s/%s", cwd, path) >= capacity)
        return path;
    return buf;
}

int larder__mount_run(const struct larder__mount_options *given)
{
    struct larder__mount_options options = *given, *o = &options;
    char source[4200], mountpoint[4200], cache[4200], log_path[4200];
    o->source = absolute(o->source, source, sizeof source);
    o->mountpoint = absolute(o->mountpoint, mountpoint, sizeof mountpoint);
    o->log_path = absolute(o->log_path, log_path, sizeof log_path);
    if (!o->cache_dir) o->cache_dir = getenv("LARDER_CACHE");
    o->cache_dir = absolute(o->cache_dir, cache, sizeof cache);
    log_file = stderr;
    larder_set_log(library_log, NULL, LARDER_LOG_WARN);
    /* A node's mount fills on dozens of threads at once (FUSE's, the
     * pool's, an order's resolvers), each into a span of a MiB or two and
     * a hedged read's buffer: kept buffers (bigbuf.c) instead of a
     * reader's two.  With two, the cold epoch of bench/mount.sh took
     * ~200,000 page faults in the mount, a fault per fresh 4 KiB. */
    larder__bigbuf_set_limits(48, (size_t)128 << 20);
    if (check_mountpoint(o)) return 1;
    int ready = -1;
    if (!o->foreground && go_background(&ready) < 0) {
        fprintf(stderr, "larder: fork: %s\n", strerror(errno));
        return 1;
    }
    struct larder__mount m = {.readahead_max =
                                  o->readahead_max ? o->readahead_max : UINT64_C(32) << 20,
                              .cache_root = o->cache_dir && o->cache_dir[0] ? o->cache_dir : NULL,
                              .uid = (uint32_t)getuid(),
                              .gid = (uint32_t)getgid()};
    pthread_mutex_init(&m.lock, NULL);
    pthread_cond_init(&m.idle, NULL);
    struct larder__plain *plain = NULL;
    int status = open_source(&m, o, &plain);
    if (status == 0 && larder__mount_order_new(&m.order) < 0) status = 1;
    if (status == 0 && larder__mount_passthrough_new(&m.passthrough, !o->no_passthrough) < 0)
        status = 1;
    uint64_t nodes = 0;
    if (status == 0) larder__mount_tree_counts(m.tree, &nodes, NULL, NULL);
    m.stage_inflight = o->stage_inflight > 0 ? (unsigned)o->stage_inflight : 0;
    m.adapt.limit = 1;
    const char *trace = getenv("LARDER_MOUNT_TRACE");
    m.trace = trace && trace[0] && strcmp(trace, "0") != 0;
    bool stage = o->stage_on_open > 0 || (o->stage_on_open < 0 && m.cached &&
                                          !larder__cache_evicts(larder__dataset_cache(m.dataset)));
    if (status == 0 && stage && !(m.staged_on_open = calloc(nodes, 1))) status = 1;
    if (status == 0 && larder__mount_passthrough_wanted(m.passthrough) && /* passthrough's */
        !(m.paged_bytes = calloc(nodes, sizeof *m.paged_bytes)))
        status = 1;
    if (status == 0 && m.staged_on_open)
        larder__mount_log(LARDER_LOG_INFO,
                          m.stage_inflight ? "files are staged whole on their first open, "
                                             "%u reads at a time"
                                           : "files are staged whole on their first open, "
                                             "as many reads at a time as the readers' misses "
                                             "allow (%u to start)",
                          m.stage_inflight ? m.stage_inflight : m.adapt.limit);
    if (status == 0) status = serve(&m, o, &ready);
    tell_parent(&ready, (unsigned char)status);
    larder__mount_stager_stop(&m);
    larder__mount_order_free(m.order);
    larder__mount_passthrough_free(m.passthrough);
    larder__mount_stage_wait(&m);
    larder__mount_tree_free(m.tree);
    free((void *)m.staged_on_open);
    free((void *)m.paged_bytes);
    free((void *)m.checked);
    larder_close(m.dataset);
    larder__plain_close(plain);
    pthread_cond_destroy(&m.idle);
    pthread_mutex_destroy(&m.lock);
    if (log_file && log_file != stderr) fclose(log_file);
    return status;
}
