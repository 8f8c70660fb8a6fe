/*
 * indexer.c - larder_index_shards: index existing WebDataset tar shards
 * where they are, without rewriting them.  Each shard is read once, in
 * order (one GET for an HTTP shard), through the push scanner of tar.c,
 * which yields sample ranges and checksums as the bytes pass.
 */
#include "index.h"
#include "source.h"
#include "tar.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "hash.h"

struct indexing {
    struct larder__index_builder *builder;
    struct larder__tar_scanner *scanner;
    uint32_t shard;
    XXH3_state_t hash;
    uint64_t size;
    larder_progress_fn progress;
    void *userdata;
    uint64_t done;
};

static int on_sample(void *userdata, const struct larder__tar_sample *sample)
{
    struct indexing *ix = userdata;
    struct larder__field fields[LARDER__TAR_MAX_FIELDS];
    for (uint32_t f = 0; f < sample->num_fields; f++)
        fields[f] = sample->fields[f].field;
    int64_t id = larder__index_builder_add_sample(ix->builder, ix->shard, sample->offset,
                                                  sample->length, sample->checksum, sample->key,
                                                  sample->key_length, fields, sample->num_fields);
    return id < 0 ? (int)id : 0;
}

static void on_skip(void *userdata, const char *name, uint64_t offset)
{
    (void)userdata;
    larder__log(LARDER_LOG_WARN, "member '%s' at offset %llu has no extension: not indexed", name,
                (unsigned long long)offset);
}

static int sink(void *userdata, const void *data, size_t length)
{
    struct indexing *ix = userdata;
    XXH3_64bits_update(&ix->hash, data, length);
    ix->size += length;
    ix->done += length;
    if (ix->progress) ix->progress(ix->userdata, ix->done, 0);
    return larder__tar_scanner_feed(ix->scanner, data, length);
}

/*
 * Where each shard is, absolute: a URL as it is, a local path through
 * realpath(3).  NULL (errno set) when a local shard cannot be found.
 */
static char *shard_location(const char *shard)
{
    if (larder__is_remote(shard) || strncmp(shard, "s3://", 5) == 0) return strdup(shard);
    const char *path = strncmp(shard, "file://", 7) == 0 ? shard + 7 : shard;
    char target[PATH_MAX];
    return realpath(path, target) ? strdup(target) : NULL;
}

/*
 * The names to record for the shards at `locations` in an index written
 * to `index_path`, and the base they are relative to (NULL: the index's
 * own directory).  Shards inside the index's directory tree are named
 * relative to it, so the two move together; otherwise the index records
 * the shards' common directory (or URL directory) as its base, since a
 * name may not climb out with "..".  Shards with nothing in common (two
 * hosts, or files and URLs) keep their full locations, and only an
 * opener that trusts the index will read it.  Returns 0 or -ENOMEM.
 */
static int shard_names(const char *index_path, char **locations, size_t count, char **base,
                       const char **names)
{
    char dir[PATH_MAX], directory[PATH_MAX];
    snprintf(directory, sizeof directory, "%s", index_path);
    char *slash = strrchr(directory, '/');
    if (slash)
        slash[1] = '\0';
    else
        snprintf(directory, sizeof directory, "./");
    size_t inside = 0;
    if (realpath(directory, dir)) {
        size_t length = strlen(dir);
        if (length > 1) dir[length++] = '/', dir[length] = '\0';
        while (inside < count && strncmp(locations[inside], dir, length) == 0)
            inside++;
        if (inside == count) { /* all under the index's directory */
            *base = NULL;
            for (size_t i = 0; i < count; i++)
                names[i] = locations[i] + length;
            return 0;
        }
    }
    /* the longest common prefix ending in '/', past any "scheme://host/" */
    size_t common = strlen(locations[0]);
    for (size_t i = 1; i < count; i++) {
        size_t k = 0;
        while (k < common && locations[i][k] == locations[0][k])
            k++;
        common = k;
    }
    while (common > 0 && locations[0][common - 1] != '/')
        common--;
    const char *scheme = strstr(locations[0], "://");
    size_t minimum = scheme ? (size_t)(scheme - locations[0]) + 3 : 1;
    if (scheme) {
        const char *host_end = strchr(scheme + 3, '/');
        minimum = host_end ? (size_t)(host_end - locations[0]) + 1 : strlen(locations[0]) + 1;
    }
    if (common < minimum) {
        *base = NULL; /* nothing shared: full names, for trusting openers only */
        for (size_t i = 0; i < count; i++)
            names[i] = locations[i];
        larder__log(LARDER_LOG_WARN,
                    "the shards share no directory or URL prefix: the index names them in "
                    "full, and opening it takes --trust-index");
        return 0;
    }
    if (!(*base = strndup(locations[0], common))) return -ENOMEM;
    for (size_t i = 0; i < count; i++)
        names[i] = locations[i] + common;
    return 0;
}

int larder_index_shards(const char *const *shards, size_t num_shards, const char *index_path,
                        uint32_t block_size, larder_progress_fn progress, void *userdata,
                        larder_pack_result *result)
{
    if (num_shards == 0) return larder__fail(LARDER_EUSAGE, "no shards to index");
    struct indexing ix = {.progress = progress, .userdata = userdata};
    int rc = larder__index_builder_new(&ix.builder, block_size);
    if (rc < 0) return rc;
    ix.scanner = malloc(larder__tar_scanner_size());
    if (!ix.scanner) rc = -ENOMEM;
    uint64_t total = 0;
    char **locations = calloc(num_shards, sizeof *locations);
    const char **names = calloc(num_shards, sizeof *names);
    char *base = NULL;
    if (rc == 0 && (!locations || !names)) rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < num_shards; i++) {
        errno = 0;
        if (!(locations[i] = shard_location(shards[i])))
            rc = larder__fail(-errno ? -errno : -ENOMEM, "%s: %s", shards[i],
                              strerror(errno ? errno : ENOMEM));
    }
    if (rc == 0) rc = shard_names(index_path, locations, num_shards, &base, names);
    if (rc == 0 && base) rc = larder__index_builder_set_base(ix.builder, base);
    for (size_t i = 0; rc == 0 && i < num_shards; i++) {
        int64_t shard = larder__index_builder_add_shard(ix.builder, names[i], LARDER_FORMAT_TAR);
        if (shard < 0) {
            rc = (int)shard;
            break;
        }
        struct larder__source *origin;
        if ((rc = larder__source_open(&origin, shards[i], NULL)) < 0) break;
        ix.shard = (uint32_t)shard;
        ix.size = 0;
        XXH3_64bits_reset(&ix.hash);
        uint64_t before = larder__index_builder_num_samples(ix.builder);
        larder__tar_scanner_init(ix.scanner, shards[i], on_sample, on_skip, &ix);
        rc = larder__source_stream(origin, sink, &ix);
        if (rc == 0) rc = larder__tar_scanner_finish(ix.scanner);
        larder__source_close(origin);
        if (rc == LARDER_EDUPKEY)
            rc = larder__fail_context(rc,
                                      "%s (a WebDataset tar keeps each key's members "
                                      "together and each key once; `larder pack` can "
                                      "regroup them)",
                                      shards[i]);
        if (rc == 0 && larder__index_builder_num_samples(ix.builder) == before)
            rc = larder__fail(LARDER_EEMPTY, "%s: no samples in this shard", shards[i]);
        if (rc == 0)
            larder__index_builder_set_shard(ix.builder, ix.shard, ix.size,
                                            XXH3_64bits_digest(&ix.hash));
        total += ix.size;
    }
    char id[33] = "";
    if (rc == 0) rc = larder__index_builder_write(ix.builder, index_path, id);
    if (rc == 0 && result) {
        result->num_samples = larder__index_builder_num_samples(ix.builder);
        result->num_shards = num_shards;
        result->bytes_written = total;
        memcpy(result->dataset_id, id, sizeof id);
    }
    for (size_t i = 0; locations && i < num_shards; i++)
        free(locations[i]);
    free(locations);
    free(names);
    free(base);
    free(ix.scanner);
    larder__index_builder_free(ix.builder);
    return rc;
}
