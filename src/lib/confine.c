/*
 * confine.c - where an index may send larder to read (see confine.h).
 */
#include "confine.h"
#include "source.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

static bool is_local_base(const char *base)
{
    return !larder__is_remote(base) && strncmp(base, "s3://", 5) != 0;
}

/* Why `name` may not be taken relative to a base, or NULL when it may. */
const char *larder__unconfined_reason(const char *name, bool remote)
{
    if (name[0] == '/') return "an absolute path";
    if (strstr(name, "://") || strncasecmp(name, "file:", 5) == 0) return "a URL of its own";
    for (const char *p = name; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f) return "a control character";
        if (c == '\\') return "a backslash"; /* some servers take it for '/' */
        if (remote && (c == '?' || c == '#')) return "a query or fragment";
        /* "%2e%2e" and "%2f" turn into ".." and "/" inside a web server */
        if (remote && c == '%' &&
            (strncasecmp(p, "%2e", 3) == 0 || strncasecmp(p, "%2f", 3) == 0 ||
             strncasecmp(p, "%5c", 3) == 0))
            return "an escaped '.', '/' or '\\'";
    }
    for (const char *component = name; component;) {
        const char *slash = strchr(component, '/');
        size_t length = slash ? (size_t)(slash - component) : strlen(component);
        if (length == 2 && component[0] == '.' && component[1] == '.') return "a '..' component";
        component = slash ? slash + 1 : NULL;
    }
    return NULL;
}

int larder__shard_location(const struct larder__index *ix, const char *index_url, uint64_t shard,
                           bool trust, char **out)
{
    struct larder__shard info;
    int rc = larder__index_shard(ix, shard, &info);
    if (rc < 0) return rc;
    const char *base = ix->base;
    bool index_remote = !is_local_base(index_url);
    if (base && !trust) {
        size_t length = strlen(base);
        bool absolute = base[0] == '/' || strncmp(base, "file://", 7) == 0 || !is_local_base(base);
        if (!absolute || base[length - 1] != '/')
            return larder__fail(LARDER_EBADINDEX,
                                "%s: base '%s' is not an absolute path or URL ending in '/'",
                                ix->name, base);
        if (index_remote && is_local_base(base))
            return larder__fail(LARDER_EBADINDEX,
                                "%s: an index read over the network names a local base '%s' "
                                "(open it with trust_index / --trust-index if you trust it)",
                                ix->name, base);
    }
    if (!trust) {
        bool remote = base ? !is_local_base(base) : index_remote;
        const char *why = larder__unconfined_reason(info.name, remote);
        if (why)
            return larder__fail(LARDER_EBADINDEX,
                                "%s: shard %llu is named '%s', %s outside the index's base "
                                "(open it with trust_index / --trust-index if you trust it)",
                                ix->name, (unsigned long long)shard, info.name, why);
    }
    char *location;
    bool as_is =
        trust && (larder__is_remote(info.name) || info.name[0] == '/' ||
                  strncmp(info.name, "file://", 7) == 0 || strncmp(info.name, "s3://", 5) == 0);
    if (base && !as_is) {
        size_t length = strlen(base) + strlen(info.name) + 2;
        location = malloc(length);
        if (location)
            snprintf(location, length, "%s%s%s", base, base[strlen(base) - 1] == '/' ? "" : "/",
                     info.name);
    } else {
        location = larder__resolve(index_url, info.name);
    }
    if (!location) return -ENOMEM;
    *out = location;
    return 0;
}

/*
 * A location in a form prefixes compare with: "scheme://host" lower-cased
 * and the path with "." and ".." resolved; a local path made absolute and,
 * where it exists, with symbolic links resolved.  false when it cannot be
 * (too long, or an escaped separator that a server would decode).
 */
static bool normalize(const char *location, char *out, size_t capacity)
{
    char work[PATH_MAX * 2];
    size_t head = 0; /* bytes of "scheme://host" in out */
    const char *path;
    if (!is_local_base(location)) {
        const char *host = strstr(location, "://");
        if (!host) return false;
        host += 3;
        const char *slash = strchr(host, '/');
        head = slash ? (size_t)(slash - location) : strlen(location);
        if (head >= capacity) return false;
        for (size_t i = 0; i < head; i++)
            out[i] = (char)tolower((unsigned char)location[i]);
        path = location + head;
        for (const char *p = path; *p; p++)
            if (*p == '%' && (strncasecmp(p, "%2e", 3) == 0 || strncasecmp(p, "%2f", 3) == 0 ||
                              strncasecmp(p, "%5c", 3) == 0))
                return false;
        if (snprintf(work, sizeof work, "%s", path[0] ? path : "/") >= (int)sizeof work)
            return false;
    } else {
        const char *local = strncmp(location, "file://", 7) == 0 ? location + 7 : location;
        char resolved[PATH_MAX];
        if (realpath(local, resolved)) {
            local = resolved;
        } else if (local[0] != '/') {
            char cwd[PATH_MAX];
            if (!getcwd(cwd, sizeof cwd)) return false;
            if (snprintf(work, sizeof work, "%s/%s", cwd, local) >= (int)sizeof work) return false;
            local = work;
        }
        if (local != work && snprintf(work, sizeof work, "%s", local) >= (int)sizeof work)
            return false;
    }
    /* resolve "." and ".." in work, writing after the head */
    size_t used = head;
    for (const char *component = work; component;) {
        const char *slash = strchr(component, '/');
        size_t length = slash ? (size_t)(slash - component) : strlen(component);
        if (length == 0 || (length == 1 && component[0] == '.')) {
            /* nothing */
        } else if (length == 2 && component[0] == '.' && component[1] == '.') {
            while (used > head && out[used - 1] != '/')
                used--;
            if (used > head) used--; /* the '/' before it */
        } else {
            if (used + 1 + length + 1 > capacity) return false;
            out[used++] = '/';
            memcpy(out + used, component, length);
            used += length;
        }
        component = slash ? slash + 1 : NULL;
    }
    if (used == head) {
        if (used + 2 > capacity) return false;
        out[used++] = '/';
    }
    out[used] = '\0';
    return true;
}

int larder__allowed(const char *location, const char *const *prefixes, const char *what)
{
    if (!prefixes) return 0;
    char have[PATH_MAX * 2];
    if (normalize(location, have, sizeof have)) {
        for (size_t i = 0; prefixes[i]; i++) {
            char prefix[PATH_MAX * 2];
            if (!prefixes[i][0] || !normalize(prefixes[i], prefix, sizeof prefix)) continue;
            size_t length = strlen(prefix);
            if (length > 1 && prefix[length - 1] == '/') length--;
            if (strncmp(have, prefix, length) == 0 &&
                (have[length] == '\0' || have[length] == '/' || strcmp(prefix, "/") == 0))
                return 0;
        }
    }
    return larder__fail(LARDER_EDENIED, "%s '%s' is not under any allowed prefix", what, location);
}
