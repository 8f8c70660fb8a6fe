/*
 * names.c - the client side of publish and consume (larder.h, "names";
 * docs/protocol.md, "Names"): index a directory, copy it through to an
 * origin when asked, and PUBLISH it to the node daemon; RESOLVE a name;
 * list the names a daemon knows.  The daemon's side is
 * src/larderd/publish.c.
 */
#include "dataset.h"
#include "endpoint.h"
#include "index.h"
#include "source.h"
#include "sys.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PUBLISH_TIMEOUT_MS 60000 /* the daemon opens and checks the whole index */
#define COPY_BUFFER (1u << 20)

/* This node's daemon, for one request. */
static int daemon_endpoint(const char *socket, struct larder__endpoint **out)
{
    if (!socket) socket = getenv("LARDER_SOCKET");
    if (!socket || !socket[0])
        return larder__fail(LARDER_EUSAGE, "no node daemon: set LARDER_SOCKET to its socket");
    return larder__endpoint_new(out, socket, LARDER__ROLE_READER, NULL, NULL, PUBLISH_TIMEOUT_MS);
}

/* Copy at most capacity - 1 bytes of text[0..length) into out with a NUL. */
static void copy_text(char *out, size_t capacity, const char *text, size_t length)
{
    if (length >= capacity) length = capacity - 1;
    memcpy(out, text, length);
    out[length] = '\0';
}

/* Send `frame`, expect RESOLVED, and fill *result from it (may be NULL). */
static int ask(const char *socket, const uint8_t *frame, size_t length, int wait_ms,
               larder_publication *result)
{
    struct larder__endpoint *e;
    int rc = daemon_endpoint(socket, &e);
    if (rc < 0) return rc;
    uint8_t type = 0, *payload = NULL;
    uint32_t payload_length = 0;
    rc = larder__endpoint_ask(e, frame, length, wait_ms, &type, &payload, &payload_length);
    struct larder__publication m;
    if (rc == 0 && type != LARDER__RESOLVED)
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer type %u",
                          larder__endpoint_address(e), type);
    if (rc == 0) rc = larder__wire_publication(LARDER__RESOLVED, payload, payload_length, &m);
    if (rc == 0 && result) {
        memset(result, 0, sizeof *result);
        copy_text(result->name, sizeof result->name, m.name, m.name_length);
        larder__hex128(m.id_high, m.id_low, result->dataset_id);
        copy_text(result->producer, sizeof result->producer, m.producer, m.producer_length);
        copy_text(result->index, sizeof result->index, m.location, m.location_length);
        copy_text(result->origin, sizeof result->origin, m.origin, m.origin_length);
    }
    free(payload);
    larder__endpoint_free(e);
    return rc;
}

/* mkdir -p of the directories above `path` (not path itself). */
static int make_parents(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash > path ? larder__mkdir_p(path, (size_t)(slash - path), 0755) : 0;
}

/* fsync the directory holding `path`, so that a new name in it lasts. */
static int sync_parent(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return larder__fail(-errno, "%s: %s", dir, strerror(errno));
    int rc = fsync(fd) < 0 ? larder__fail(-errno, "fsync %s: %s", dir, strerror(errno)) : 0;
    close(fd);
    return rc;
}

/* Copy `from` to `to` through a temporary name, synced, then renamed into place. */
static int copy_file(const char *from, const char *to, void *buffer)
{
    char temporary[PATH_MAX + 32];
    snprintf(temporary, sizeof temporary, "%s.larder-tmp.%d", to, (int)getpid());
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) return larder__fail(-errno, "%s: %s", from, strerror(errno));
    /* a new file of our own, never one already there: on a shared file
     * system another user may have put a symlink at that name */
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int out = open(temporary, flags, 0644);
    if (out < 0 && errno == EEXIST && unlink(temporary) == 0) /* a stale one (or a trap) */
        out = open(temporary, flags, 0644);
    int rc = out < 0 ? larder__fail(-errno, "%s: %s", temporary, strerror(errno)) : 0;
    for (;;) {
        if (rc < 0) break;
        ssize_t n = read(in, buffer, COPY_BUFFER);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) rc = larder__fail(-errno, "%s: %s", from, strerror(errno));
        if (n <= 0) break;
        for (ssize_t done = 0; rc == 0 && done < n;) {
            ssize_t w = write(out, (char *)buffer + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) rc = larder__fail(-errno, "%s: %s", temporary, strerror(errno));
            done += w > 0 ? w : 0;
        }
    }
    if (rc == 0 && fsync(out) < 0) rc = larder__fail(-errno, "fsync %s: %s", to, strerror(errno));
    if (out >= 0 && close(out) < 0 && rc == 0)
        rc = larder__fail(-errno, "%s: %s", temporary, strerror(errno));
    close(in);
    if (rc == 0 && rename(temporary, to) < 0)
        rc = larder__fail(-errno, "%s: %s", to, strerror(errno));
    if (rc < 0 && out >= 0) unlink(temporary);
    return rc == 0 ? sync_parent(to) : rc;
}

/*
 * Copy every shard of the index at `index` (a local path, naming them
 * relative to its own directory), then the index itself, into `prefix`
 * in the same layout.  *origin: the copy of the index (malloc'd).
 */
static int write_through(const char *index, const char *prefix, char **origin)
{
    if (larder__is_remote(prefix))
        return larder__fail(LARDER_EUNSUPPORTED,
                            "--write-through %s: only a directory (a path or file:// URL on a "
                            "shared file system) is supported, not http or s3",
                            prefix);
    prefix = larder__file_path(prefix);
    char root[PATH_MAX], from[PATH_MAX], to[PATH_MAX];
    if (prefix[0] == '\0' || strlen(prefix) + 2 >= sizeof root)
        return larder__fail(LARDER_EUSAGE, "--write-through: a directory, please");
    snprintf(root, sizeof root, "%s/", prefix);
    int rc = make_parents(root);
    if (rc < 0) return rc;
    if (!realpath(prefix, root)) return larder__fail(-errno, "%s: %s", prefix, strerror(errno));
    larder_open_options o = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = "", .daemon_socket = ""};
    larder_dataset *d = NULL;
    rc = larder_open(&d, index, &o);
    if (rc == 0 && larder__dataset_index(d)->base)
        rc = larder__fail(LARDER_EUNSUPPORTED,
                          "%s names a base: only an index beside its files can be written through",
                          index);
    const char *slash = strrchr(index, '/');
    size_t dir_length = (size_t)(slash - index); /* index is absolute */
    void *buffer = rc == 0 ? malloc(COPY_BUFFER) : NULL;
    if (rc == 0 && !buffer) rc = -ENOMEM;
    uint64_t samples = rc == 0 ? larder_num_samples(d) : 0;
    uint32_t shards = rc == 0 ? larder__dataset_num_shards(d) : 0;
    bool *copied = rc == 0 ? calloc(shards ? shards : 1, sizeof *copied) : NULL;
    if (rc == 0 && !copied) rc = -ENOMEM;
    for (uint64_t i = 0; rc == 0 && i < samples; i++) { /* each shard, by its samples */
        larder_sample_info s;
        if ((rc = larder_sample_info_get(d, i, &s)) < 0) break;
        if (s.shard >= shards || copied[s.shard]) continue;
        copied[s.shard] = true;
        if ((size_t)snprintf(from, sizeof from, "%.*s/%s", (int)dir_length, index, s.shard_name) >=
                sizeof from ||
            (size_t)snprintf(to, sizeof to, "%s/%s", root, s.shard_name) >= sizeof to) {
            rc = larder__fail(-ENAMETOOLONG, "%s: too long a path", s.shard_name);
            break;
        }
        if ((rc = make_parents(to)) == 0) rc = copy_file(from, to, buffer);
    }
    if (rc == 0 && (size_t)snprintf(to, sizeof to, "%s/%s", root, slash + 1) >= sizeof to)
        rc = larder__fail(-ENAMETOOLONG, "%s: too long a path", root);
    if (rc == 0) rc = copy_file(index, to, buffer); /* last: a reader of it finds every file */
    free(buffer);
    free(copied);
    larder_close(d);
    if (rc == 0 && !(*origin = strdup(to))) rc = -ENOMEM;
    return rc;
}

int larder_publish(const char *socket, const char *dir, const char *name,
                   const larder_publish_options *options, larder_publication *result)
{
    if (!dir || !name) return larder__fail(LARDER_EUSAGE, "larder_publish: NULL argument");
    if (options && (options->version < 1 || options->version > LARDER_PUBLISH_OPTIONS_VERSION))
        return larder__fail(LARDER_EUSAGE, "larder_publish: options version %d, expected 1 to %d",
                            options->version, LARDER_PUBLISH_OPTIONS_VERSION);
    bool replace = options && options->version >= 2 && options->replace; /* 1 has no replace */
    int rc = larder__wire_check_publication(name, strlen(name));
    if (rc < 0) return rc;
    char root[PATH_MAX], index[PATH_MAX];
    if (!realpath(dir, root)) return larder__fail(-errno, "%s: %s", dir, strerror(errno));
    if (options && options->index) {
        if (!realpath(options->index, index))
            return larder__fail(-errno, "%s: %s", options->index, strerror(errno));
    } else {
        if ((size_t)snprintf(index, sizeof index, "%s/index.larder", root) >= sizeof index)
            return larder__fail(-ENAMETOOLONG, "%s: too long a path", root);
        larder_pack_result made;
        if ((rc = larder_index_files(root, index, NULL, &made)) < 0) return rc;
    }
    char *origin = NULL;
    if (options && options->write_through &&
        (rc = write_through(index, options->write_through, &origin)) < 0)
        return rc;
    struct larder__publish m = {.name_length = (uint32_t)strlen(name),
                                .name = name,
                                .index_length = (uint32_t)strlen(index),
                                .index = index,
                                .origin_length = origin ? (uint32_t)strlen(origin) : 0,
                                .origin = origin,
                                .flags = replace ? LARDER__PUBLISH_REPLACE : 0};
    uint8_t frame[LARDER__WIRE_HEADER + LARDER__WIRE_MAX_NAMES_FRAME];
    int n = larder__wire_encode_publish(frame, sizeof frame, 1, &m);
    if (n < 0)
        rc = larder__fail(LARDER_EUSAGE, "%s%s%s: too long a path to publish", index,
                          origin ? " and " : "", origin ? origin : "");
    else
        rc = ask(socket, frame, (size_t)n, 0, result);
    free(origin);
    return rc;
}

int larder_resolve(const char *socket, const char *name, int timeout_ms, larder_publication *result)
{
    if (!name) return larder__fail(LARDER_EUSAGE, "larder_resolve: NULL name");
    if (timeout_ms < 0 || (uint32_t)timeout_ms > LARDER__WIRE_MAX_WAIT_MS)
        return larder__fail(LARDER_EUSAGE, "larder_resolve: a timeout of %d ms (0 to %u)",
                            timeout_ms, LARDER__WIRE_MAX_WAIT_MS);
    int rc = larder__wire_check_publication(name, strlen(name));
    if (rc < 0) return rc;
    struct larder__resolve q = {
        .wait_ms = (uint32_t)timeout_ms, .name_length = (uint32_t)strlen(name), .name = name};
    uint8_t frame[LARDER__WIRE_HEADER + 8 + LARDER__WIRE_MAX_PUBLICATION];
    int n = larder__wire_encode_resolve(frame, sizeof frame, 1, &q);
    return n < 0 ? n : ask(socket, frame, (size_t)n, timeout_ms, result);
}

int larder_names_list(const char *socket, char *json, size_t capacity)
{
    if (!json || capacity == 0) return larder__fail(LARDER_EUSAGE, "larder_names_list: no buffer");
    struct larder__endpoint *e;
    int rc = daemon_endpoint(socket, &e);
    if (rc < 0) return rc;
    struct larder__resolve q = {.flags = LARDER__RESOLVE_LIST};
    uint8_t frame[LARDER__WIRE_HEADER + 8], type = 0, *payload = NULL;
    uint32_t length = 0;
    int n = larder__wire_encode_resolve(frame, sizeof frame, 1, &q);
    rc = n < 0 ? n : larder__endpoint_ask(e, frame, (size_t)n, 0, &type, &payload, &length);
    if (rc == 0 && type != LARDER__STATS)
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon at %s: answer type %u",
                          larder__endpoint_address(e), type);
    if (rc == 0 && length >= capacity)
        rc = larder__fail(LARDER_ETOOSMALL, "%u bytes of names", length);
    if (rc == 0) {
        memcpy(json, payload, length);
        json[length] = '\0';
        rc = (int)length;
    }
    free(payload);
    larder__endpoint_free(e);
    return rc;
}
