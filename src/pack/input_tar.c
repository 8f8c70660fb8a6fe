/*
 * input_tar.c - a tar archive as a packing input (repacking existing
 * WebDataset shards).
 *
 * A tar made with plain `tar cf DIR` need not keep a key's members
 * together.  Repacking rewrites every byte anyway, so members are
 * regrouped by key here (samples in order of their key's first
 * appearance, fields in archive order); only `larder index`, which
 * keeps the archive as it is, needs them adjacent.
 *
 * A field's locator is {0, offset of the member's data in the archive};
 * the archive stays open for the input's life.
 */
#include "input.h"
#include "sys.h"
#include "tar.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SCAN_CHUNK (1u << 20)

struct tar_input {
    struct larder__pack_input base;
    int fd; /* the archive */
};

static int tar_read(struct larder__pack_input *input, const struct larder__pack_field *field,
                    uint64_t offset, void *buf, size_t length)
{
    struct tar_input *tar = (struct tar_input *)input;
    int rc = larder__pread_full(tar->fd, buf, length, field->locator[1] + offset, input->name);
    if (rc == LARDER_ETRUNCATED)
        return larder__fail(rc, "%s: file shrank while packing", input->name);
    return rc;
}

static void tar_close(struct larder__pack_input *input)
{
    struct tar_input *tar = (struct tar_input *)input;
    if (tar->fd >= 0) larder__sys.close(tar->fd);
    free(tar->base.name);
    free(tar);
}

/* ---- scanning ----------------------------------------------------------- */

struct tar_member {
    char *key; /* malloc'd */
    char *ext; /* points into key's allocation */
    uint64_t offset, size;
    uint64_t order; /* first appearance of the key, then archive order */
    uint64_t position;
};

struct tar_enumeration {
    const char *path; /* the archive's, for messages */
    struct tar_member *members;
    size_t count, capacity;
};

static int tar_on_sample(void *userdata, const struct larder__tar_sample *sample)
{
    struct tar_enumeration *e = userdata;
    if (larder__reserve((void **)&e->members, &e->capacity, e->count + sample->num_fields,
                        sizeof *e->members) < 0)
        return -ENOMEM;
    for (uint32_t f = 0; f < sample->num_fields; f++) {
        size_t ext_length = strlen(sample->fields[f].ext);
        char *key = malloc(sample->key_length + ext_length + 2);
        if (!key) return -ENOMEM;
        memcpy(key, sample->key, sample->key_length);
        key[sample->key_length] = '\0';
        memcpy(key + sample->key_length + 1, sample->fields[f].ext, ext_length + 1);
        e->members[e->count] = (struct tar_member){.key = key,
                                                   .ext = key + sample->key_length + 1,
                                                   .offset = sample->fields[f].member_offset,
                                                   .size = sample->fields[f].member_length,
                                                   .position = e->count};
        e->count++;
    }
    return 0;
}

static void tar_on_skip(void *userdata, const char *name, uint64_t offset)
{
    const struct tar_enumeration *e = userdata;
    larder__log(LARDER_LOG_WARN, "%s: member '%s' at offset %llu: " LARDER_PACK_SKIPPED_NO_KEY,
                e->path, name, (unsigned long long)offset);
}

static int by_key_then_position(const void *a, const void *b)
{
    const struct tar_member *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return x->position < y->position ? -1 : x->position > y->position;
}

static int by_order(const void *a, const void *b)
{
    const struct tar_member *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Read the archive through the scanner into e. */
static int tar_scan(struct tar_input *tar, struct tar_enumeration *e)
{
    const char *path = tar->base.name;
    struct larder__tar_scanner *scanner = malloc(larder__tar_scanner_size());
    uint8_t *buf = malloc(SCAN_CHUNK);
    int rc = scanner && buf ? 0 : -ENOMEM;
    if (rc == 0) larder__tar_scanner_init(scanner, path, tar_on_sample, tar_on_skip, e);
    for (uint64_t offset = 0; rc == 0;) {
        ssize_t n = larder__sys.pread(tar->fd, buf, SCAN_CHUNK, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = larder__fail(-errno, "%s: %s", path, strerror(errno));
            break;
        }
        if (n == 0) {
            rc = larder__tar_scanner_finish(scanner);
            break;
        }
        rc = larder__tar_scanner_feed(scanner, buf, (size_t)n);
        offset += (uint64_t)n;
    }
    free(buf);
    free(scanner);
    return rc;
}

/* Regroup: the order of a sample is its key's first appearance. */
static void regroup(struct tar_enumeration *e)
{
    if (!e->count) return;
    qsort(e->members, e->count, sizeof *e->members, by_key_then_position);
    for (size_t i = 0; i < e->count; i++) {
        bool same = i > 0 && strcmp(e->members[i].key, e->members[i - 1].key) == 0;
        e->members[i].order = same ? e->members[i - 1].order : e->members[i].position << 20;
        if (same) e->members[i].order = e->members[i - 1].order + 1;
    }
    qsort(e->members, e->count, sizeof *e->members, by_order);
}

static int tar_list(struct larder__pack_input *input, larder__pack_sample_fn on_sample,
                    void *context)
{
    struct tar_input *tar = (struct tar_input *)input;
    const char *path = input->name;
    struct tar_enumeration e = {.path = path};
    int rc = tar_scan(tar, &e);
    if (rc == 0) regroup(&e);
    struct larder__pack_field fields[LARDER__TAR_MAX_FIELDS];
    size_t listed = 0;
    for (size_t i = 0; rc == 0 && i < e.count;) {
        size_t j = i;
        uint32_t n = 0;
        for (; j < e.count && strcmp(e.members[j].key, e.members[i].key) == 0; j++) {
            if (n == LARDER__TAR_MAX_FIELDS) {
                rc = larder__fail(LARDER_EUNSUPPORTED, "%s: sample '%s' has too many members", path,
                                  e.members[i].key);
                break;
            }
            fields[n++] = (struct larder__pack_field){.name = e.members[j].ext,
                                                      .size = e.members[j].size,
                                                      .locator = {0, e.members[j].offset}};
        }
        if (rc == 0) rc = on_sample(context, e.members[i].key, strlen(e.members[i].key), fields, n);
        if (rc == 0) listed++;
        i = j;
    }
    for (size_t i = 0; i < e.count; i++)
        free(e.members[i].key);
    free(e.members);
    if (rc == 0 && listed == 0)
        rc = larder__fail(LARDER_EEMPTY, "%s: no samples in this tar archive", path);
    return rc;
}

static const struct larder__pack_input_ops tar_ops = {
    .list = tar_list, .read = tar_read, .close = tar_close};

int larder__pack_input_tar_open(const char *path, struct larder__pack_input **out)
{
    *out = NULL;
    struct tar_input *tar = calloc(1, sizeof *tar);
    if (!tar || !(tar->base.name = strdup(path))) {
        free(tar);
        return -ENOMEM;
    }
    tar->base.ops = &tar_ops;
    tar->fd = larder__open(path, O_RDONLY, 0);
    if (tar->fd < 0) {
        int rc = tar->fd;
        tar_close(&tar->base);
        return rc;
    }
    *out = &tar->base;
    return 0;
}
