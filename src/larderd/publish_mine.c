/*
 * publish_mine.c - this node's own publications, kept across restarts in
 * the cache's published/mine (publish.c has the whole): appended as each
 * is published, loaded (checked like any input) when the registry is made,
 * with the publisher's uid so that the same local user may replace them
 * after a restart.  Also what the names' code reads of index files (the id
 * an index claims, a whole small index), and the cache's published/
 * directory allowed beside --allow's prefixes.
 */
#include "publish.h"
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The cache's published/mine: one line per publication,
 * "NAME\tID\tINDEX\tORIGIN\tGENERATION\tUID" (ID in hex as larder prints it;
 * ORIGIN "-" when none; UID the local user who published it, who may
 * replace it after a restart too; the wire allows no tab or newline in any
 * of them).  Lines of before the UID was kept end at ORIGIN, or at a
 * GENERATION above 0: their publisher is unknown, so only the daemon's
 * user or root may replace them.  A later line of a name is a --replace of
 * it: the last one stands. */
static int mine_path(const struct larderd *d, char *path, size_t capacity)
{
    if (!d->config.cache_dir) return -1;
    return (size_t)snprintf(path, capacity, "%s/published/mine", d->config.cache_dir) < capacity
               ? 0
               : -1;
}

void publication_remember(struct larderd *d, const char *name)
{
    struct publications *r = d->publications;
    char path[PATH_MAX], dir[PATH_MAX];
    if (!r || mine_path(d, path, sizeof path) < 0) return;
    snprintf(dir, sizeof dir, "%s/published", d->config.cache_dir);
    mkdir(d->config.cache_dir, 0750);
    mkdir(dir, 0750);
    pthread_mutex_lock(&r->lock);
    struct publication *p = find(r, name, strlen(name));
    FILE *f = p && p->mine ? fopen(path, "ae") : NULL;
    if (f) {
        char id[33];
        larder__hex128(p->id_high, p->id_low, id);
        fprintf(f, "%s\t%s\t%s\t%s\t%llu", p->name, id, p->location, p->origin ? p->origin : "-",
                (unsigned long long)p->generation);
        if (p->publisher_uid >= 0) fprintf(f, "\t%lld", (long long)p->publisher_uid);
        fputc('\n', f);
        if (fclose(f) != 0) say("%s: %s", path, strerror(errno));
    }
    pthread_mutex_unlock(&r->lock);
}

/* The dataset id an index file claims (bytes 16-31), or false. */
bool claimed_id(const char *path, uint64_t *low, uint64_t *high)
{
    uint8_t header[32];
    int fd = open(larder__file_path(path), O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && pread(fd, header, sizeof header, 0) == (ssize_t)sizeof header;
    if (fd >= 0) close(fd);
    if (ok) *low = larder__le64(header + 16), *high = larder__le64(header + 24);
    return ok;
}

/* A field of published/mine that is a decimal number and nothing else (at most 20 digits). */
static bool plain_number(const char *text, unsigned long long *out)
{
    size_t digits = strspn(text, "0123456789");
    if (digits == 0 || digits > 20 || text[digits] != '\0') return false;
    errno = 0;
    *out = strtoull(text, NULL, 10);
    return errno == 0;
}

void publications_load(struct larderd *d, struct publications *r)
{
    char path[PATH_MAX], line[2 * LARDER__WIRE_MAX_NAMES_FRAME];
    FILE *f = mine_path(d, path, sizeof path) == 0 ? fopen(path, "re") : NULL;
    if (!f) return;
    size_t loaded = 0;
    while (fgets(line, sizeof line, f)) {
        char *fields[6] = {line, NULL, NULL, NULL, NULL, NULL}, *end;
        for (int k = 1; k < 6 && fields[k - 1]; k++)
            if ((fields[k] = strchr(fields[k - 1], '\t'))) *fields[k]++ = '\0';
        char *last = fields[5] ? fields[5] : fields[4] ? fields[4] : fields[3];
        if (!fields[3] || !(end = strchr(last, '\n'))) continue; /* cut or hand-edited */
        *end = '\0';
        const char *name = fields[0], *index = fields[2], *origin = fields[3];
        unsigned long long generation = 0, uid = 0;
        /* digits only (strtoull would take a sign or spaces); a generation of 0 is
         * written only with a UID after it (the old lines had none there) */
        if (fields[4] && (!plain_number(fields[4], &generation) || (generation == 0 && !fields[5])))
            continue;
        if (fields[5] && (!plain_number(fields[5], &uid) || uid > UINT32_MAX)) continue;
        struct publication *before = find(r, name, strlen(name));
        if (before && before->generation >= generation) continue; /* (not a replacement) */
        /* replaced: the later line stands, even when its index is gone (then so is the
         * name: it never falls back to the publication it replaced) */
        if (before) forget(r, before), loaded--;
        uint64_t low, high;
        char id[33];
        /* the file is the daemon's own, but the names are checked as any;
         * an index gone, or rewritten as another dataset: so is the publication */
        if (larder__wire_check_publication(name, strlen(name)) < 0 || index[0] != '/' ||
            !claimed_id(index, &low, &high))
            continue;
        larder__hex128(high, low, id);
        if (strcmp(id, fields[1]) != 0) continue;
        struct publication *p = add(r, name, strlen(name));
        if (!p) break;
        p->state = READY;
        p->generation = generation;
        p->mine = true;
        p->publisher_uid = fields[5] ? (int64_t)uid : -1; /* -1: unknown (an older line) */
        p->id_low = low, p->id_high = high;
        p->producer_member = d->self;
        p->producer = strdup(d->self_name ? d->self_name : "local");
        p->location = strdup(index);
        p->local = strdup(index);
        p->origin = strcmp(origin, "-") != 0 ? strdup(origin) : NULL;
        if (!p->producer || !p->location || !p->local || (strcmp(origin, "-") && !p->origin)) {
            forget(r, p);
            break;
        }
        loaded++;
    }
    fclose(f);
    if (loaded) say("%zu names of this node's from before (%s)", loaded, path);
}

/* Read a whole small file (an index) into a malloc'd buffer: 0, or a negative code. */
int read_file(const char *path, uint8_t **out, uint32_t *length)
{
    int fd = open(larder__file_path(path), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return larder__fail(-errno, "%s: %s", path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    if (rc == 0 && (st.st_size <= 0 || st.st_size > (off_t)LARDER__WIRE_MAX_INDEX))
        rc = larder__fail(LARDER_EUNSUPPORTED, "%s: an index of %lld bytes (at most %u)", path,
                          (long long)st.st_size, LARDER__WIRE_MAX_INDEX);
    uint8_t *bytes = rc == 0 ? malloc((size_t)st.st_size) : NULL;
    if (rc == 0 && !bytes) rc = -ENOMEM;
    size_t done = 0;
    while (rc == 0 && done < (size_t)st.st_size) {
        ssize_t n = pread(fd, bytes + done, (size_t)st.st_size - done, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) rc = n < 0 ? -errno : LARDER_ETRUNCATED;
        done += n > 0 ? (size_t)n : 0;
    }
    close(fd);
    if (rc < 0) {
        free(bytes);
        return rc;
    }
    *out = bytes;
    *length = (uint32_t)st.st_size;
    return 0;
}

void publications_allow(struct larderd *d, struct publications *r)
{
    char dir[PATH_MAX], absolute[PATH_MAX];
    if (!d->config.num_allow || d->config.num_allow >= MAX_ALLOW_PREFIXES || !d->config.cache_dir ||
        (size_t)snprintf(dir, sizeof dir, "%s/published", d->config.cache_dir) >= sizeof dir)
        return;
    mkdir(d->config.cache_dir, 0750);
    mkdir(dir, 0750);
    if (!realpath(dir, absolute) || !(r->allowed = strdup(absolute))) return;
    d->config.allow[d->config.num_allow++] = r->allowed;
    d->config.allow[d->config.num_allow] = NULL;
}
