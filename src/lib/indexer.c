/*
 * indexer.c - larder_index_shards: index existing WebDataset tar shards
 * where they are, without rewriting them.  Each shard is read once, in
 * order (one GET for an HTTP shard), through the push scanner of tar.c,
 * which yields sample ranges and checksums as the bytes pass.
 */
#include "index.h"
#include "origin.h"
#include "tar.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

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
    struct larder__field fields[LARDER_TAR_MAX_FIELDS];
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
 * The name to record for `shard` in an index written to `index_path`:
 * a URL as it is; a local path relative to the index's directory.
 */
static char *shard_name_for(const char *index_path, const char *shard)
{
    if (larder__is_remote(shard)) return strdup(shard);
    const char *path = strncmp(shard, "file://", 7) == 0 ? shard + 7 : shard;
    char target[PATH_MAX], dir[PATH_MAX], base[PATH_MAX];
    if (!realpath(path, target)) return NULL;
    snprintf(base, sizeof base, "%s", index_path);
    char *slash = strrchr(base, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(base, sizeof base, ".");
    if (!realpath(base[0] ? base : "/", dir)) return NULL;
    /* drop the leading directories both share, then climb out of the rest of dir */
    size_t common = 0; /* length of the shared prefix, ending at a component boundary */
    for (size_t i = 0;; i++) {
        bool dir_end = dir[i] == '\0' || dir[i] == '/';
        bool target_end = target[i] == '\0' || target[i] == '/';
        if (dir_end && target_end) common = i;
        if (dir[i] == '\0' || dir[i] != target[i]) break;
    }
    if (strcmp(dir, "/") == 0) common = 0;
    char out[PATH_MAX * 2];
    size_t used = 0;
    for (size_t i = common; dir[i]; i++)
        if (dir[i] == '/') used += (size_t)snprintf(out + used, sizeof out - used, "../");
    snprintf(out + used, sizeof out - used, "%s", target + common + 1);
    return strdup(out);
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
    for (size_t i = 0; rc == 0 && i < num_shards; i++) {
        char *name = shard_name_for(index_path, shards[i]);
        if (!name) {
            rc = larder__fail(-errno ? -errno : -ENOMEM, "%s: %s", shards[i],
                              strerror(errno ? errno : ENOMEM));
            break;
        }
        int64_t shard = larder__index_builder_add_shard(ix.builder, name, LARDER_FORMAT_TAR);
        free(name);
        if (shard < 0) {
            rc = (int)shard;
            break;
        }
        struct larder__origin *origin;
        if ((rc = larder__origin_open(&origin, shards[i])) < 0) break;
        ix.shard = (uint32_t)shard;
        ix.size = 0;
        XXH3_64bits_reset(&ix.hash);
        uint64_t before = larder__index_builder_num_samples(ix.builder);
        larder__tar_scanner_init(ix.scanner, shards[i], on_sample, on_skip, &ix);
        rc = larder__origin_stream(origin, sink, &ix);
        if (rc == 0) rc = larder__tar_scanner_finish(ix.scanner);
        larder__origin_close(origin);
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
    free(ix.scanner);
    larder__index_builder_free(ix.builder);
    return rc;
}
