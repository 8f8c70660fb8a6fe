/*
 * hint.c - the client side of hints (larder_hint, larder_hint_list in
 * larder.h): a HINT frame to the node daemon over its Unix socket, the
 * keys in batches that fit a frame, the HINTED answers summed.  The
 * daemon's side is src/larderd/hints.c.
 */
#include "endpoint.h"
#include "source.h"
#include "wire.h"

#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TTL_MS 600000
#define DEFAULT_WAIT_MS 3600000
#define ACCEPT_TIMEOUT_MS 60000 /* opening the index, members answering (30 s each) */

/* The daemon's socket: the argument, else LARDER_SOCKET; a bare file
 * name becomes ./NAME (an endpoint takes a name without '/' for host:port). */
static const char *socket_of(const char *socket, char path[PATH_MAX])
{
    if (!socket || !socket[0]) socket = getenv("LARDER_SOCKET");
    if (!socket || !socket[0]) return NULL;
    if (strchr(socket, '/')) return socket;
    snprintf(path, PATH_MAX, "./%s", socket);
    return path;
}

/* Keys from *next on that fit one frame beside the fixed part, the index and the targets. */
static size_t batch_of(const larder_hint_options *o, size_t next, size_t fixed)
{
    size_t used = fixed, count = 0;
    while (next + count < o->num_keys && count < LARDER__HINT_MAX_KEYS) {
        size_t n = 2 + strlen(o->keys[next + count]);
        if (used + n > LARDER__WIRE_MAX_HINT) break;
        used += n;
        count++;
    }
    return count;
}

static int one_frame(struct larder__endpoint *e, const struct larder__hint *h, int timeout_ms,
                     larder_hint_result *sum)
{
    uint8_t *frame = malloc(LARDER__WIRE_HEADER + LARDER__WIRE_MAX_HINT);
    uint8_t *answer = malloc(LARDER__HINTED_FIXED + 4096);
    int rc = frame && answer ? 0 : -ENOMEM;
    int n = rc == 0
                ? larder__wire_encode_hint(frame, LARDER__WIRE_HEADER + LARDER__WIRE_MAX_HINT, 5, h)
                : rc;
    struct larder__frame f;
    if (n > 0)
        rc = larder__endpoint_call(e, frame, (size_t)n, &f, answer, LARDER__HINTED_FIXED + 4096,
                                   timeout_ms);
    else
        rc =
            n == LARDER_ETOOSMALL ? larder__fail(LARDER_EUSAGE, "hint: a key or name too long") : n;
    struct larder__hinted got;
    if (rc == 0 && f.type != LARDER__HINT_ANSWER)
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon: answer type %u to HINT", f.type);
    if (rc == 0) rc = larder__wire_hinted(answer, f.length, &got);
    if (rc == 0) {
        if (got.nodes > sum->nodes) sum->nodes = got.nodes;
        if (got.failed > sum->failed) sum->failed = got.failed;
        sum->done = sum->done && (got.flags & LARDER__HINTED_DONE);
        sum->partial = sum->partial || (got.flags & LARDER__HINTED_PARTIAL);
        sum->samples += got.samples;
        sum->bytes += got.bytes;
        sum->pinned_bytes += got.pinned_bytes;
        sum->staged_bytes += got.staged_bytes;
    }
    free(frame);
    free(answer);
    return rc;
}

int larder_hint(const char *socket, const larder_hint_options *o, larder_hint_result *result)
{
    larder_hint_result sum = {.done = 1};
    if (result) *result = sum;
    if (!o || o->version < 1 || o->version > LARDER_HINT_OPTIONS_VERSION)
        return larder__fail(LARDER_EUSAGE, "hint: options of another version");
    const char *name = o->version >= 2 ? o->name : NULL; /* version 1 has no name */
    char path[PATH_MAX];
    if (!(socket = socket_of(socket, path)))
        return larder__fail(LARDER_EUSAGE, "hint: no node daemon (give a socket or LARDER_SOCKET)");
    bool hot = o->kind == LARDER_HINT_HOT, replicate = o->kind == LARDER_HINT_REPLICATE;
    if (!hot && !replicate) return larder__fail(LARDER_EUSAGE, "hint: unknown kind %d", o->kind);
    if (name && o->index)
        return larder__fail(LARDER_EUSAGE, "hint: an index or a published name, not both");
    if (name && larder__wire_check_publication(name, strlen(name)) < 0) return LARDER_EUSAGE;
    if (!name && (!o->index || !o->index[0]))
        return larder__fail(LARDER_EUSAGE, "hint: no index or name");
    if (replicate && (!o->targets || !o->targets[0]))
        return larder__fail(LARDER_EUSAGE, "hint replicate: no members to replicate to");
    if (replicate && (o->num_keys || o->replicas || o->all_nodes))
        return larder__fail(LARDER_EUSAGE,
                            "hint replicate: the whole dataset goes to the named members "
                            "(no keys, replicas or all nodes)");
    if (o->all_nodes && o->replicas)
        return larder__fail(LARDER_EUSAGE, "hint: replicas or all nodes, not both");
    if (o->replicas > LARDER__HINT_MAX_REPLICAS)
        return larder__fail(LARDER_EUSAGE, "hint: %u replicas", o->replicas);
    uint64_t ttl = o->ttl_ms ? o->ttl_ms : DEFAULT_TTL_MS;
    if (ttl > LARDER__HINT_MAX_TTL_MS)
        return larder__fail(LARDER_EUSAGE, "hint: a TTL of more than 30 days");
    if (o->num_keys && !o->keys) return larder__fail(LARDER_EUSAGE, "hint: keys missing");
    for (size_t k = 0; k < o->num_keys; k++) {
        size_t n = o->keys[k] ? strlen(o->keys[k]) : 0;
        if (n == 0 || n > LARDER__HINT_MAX_KEY)
            return larder__fail(LARDER_EUSAGE, "hint: key %zu is empty or longer than %d bytes", k,
                                LARDER__HINT_MAX_KEY);
    }
    char absolute[PATH_MAX];
    const char *where = name ? name : o->index; /* a name: each daemon resolves it */
    if (!name && !larder__is_remote(where) && realpath(larder__file_path(where), absolute))
        where = absolute;
    size_t url_length = strlen(where), targets_length = replicate ? strlen(o->targets) : 0;
    if (url_length > LARDER__WIRE_MAX_URL || targets_length > LARDER__HINT_MAX_TARGETS)
        return larder__fail(LARDER_EUSAGE, "hint: index name or member list too long");
    struct larder__endpoint *e;
    int timeout =
        o->wait ? (o->timeout_ms > 0 ? o->timeout_ms : DEFAULT_WAIT_MS) : ACCEPT_TIMEOUT_MS;
    int rc = larder__endpoint_new(&e, socket, LARDER__ROLE_READER, NULL, NULL, ACCEPT_TIMEOUT_MS);
    if (rc < 0) return rc;
    struct larder__hint h = {.kind = (uint8_t)o->kind,
                             .flags = (uint8_t)((o->all_nodes ? LARDER__HINT_ALL_NODES : 0) |
                                                (o->wait ? LARDER__HINT_WAIT : 0) |
                                                (name ? LARDER__HINT_NAME : 0)),
                             .replicas = o->replicas,
                             .ttl_ms = ttl,
                             .url_length = (uint32_t)url_length,
                             .url = where,
                             .targets_length = (uint32_t)targets_length,
                             .targets = replicate ? o->targets : NULL};
    size_t fixed = 32 + url_length + targets_length, next = 0;
    do { /* without keys, one frame: the whole dataset */
        size_t count = batch_of(o, next, fixed);
        if (o->num_keys && count == 0) {
            rc = larder__fail(LARDER_EUSAGE, "hint: key %zu does not fit a frame", next);
            break;
        }
        h.num_keys = (uint32_t)count;
        h.key_list = o->num_keys ? o->keys + next : NULL;
        rc = one_frame(e, &h, timeout, &sum);
        next += count;
    } while (rc == 0 && next < o->num_keys);
    larder__endpoint_free(e);
    if (result) *result = sum;
    return rc;
}

int64_t larder_hint_list(const char *socket, char *buf, size_t capacity)
{
    char path[PATH_MAX];
    if (!(socket = socket_of(socket, path)))
        return larder__fail(LARDER_EUSAGE, "hint: no node daemon (give a socket or LARDER_SOCKET)");
    struct larder__endpoint *e;
    int rc = larder__endpoint_new(&e, socket, LARDER__ROLE_READER, NULL, NULL, ACCEPT_TIMEOUT_MS);
    if (rc < 0) return rc;
    uint8_t request[LARDER__WIRE_HEADER + 32];
    struct larder__hint h = {.kind = LARDER__HINT_LIST};
    int n = larder__wire_encode_hint(request, sizeof request, 6, &h);
    uint8_t *answer = malloc(LARDER__HINTED_FIXED + LARDER__HINTED_MAX_TEXT);
    struct larder__frame f;
    struct larder__hinted got;
    rc = answer ? n : -ENOMEM;
    if (rc > 0)
        rc = larder__endpoint_call(e, request, (size_t)n, &f, answer,
                                   LARDER__HINTED_FIXED + LARDER__HINTED_MAX_TEXT, 0);
    if (rc == 0 && f.type != LARDER__HINT_ANSWER)
        rc = larder__fail(LARDER_EPROTOCOL, "larder daemon: answer type %u to HINT", f.type);
    if (rc == 0) rc = larder__wire_hinted(answer, f.length, &got);
    int64_t out = rc;
    if (rc == 0 && (size_t)got.text_length + 1 > capacity) out = LARDER_ETOOSMALL;
    if (rc == 0 && out == 0) {
        memcpy(buf, got.text, got.text_length);
        buf[got.text_length] = '\0';
        out = got.text_length;
    }
    free(answer);
    larder__endpoint_free(e);
    return out;
}
