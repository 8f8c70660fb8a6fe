/*
 * pack.c - larder_pack: open the inputs, lay the samples out (layout.c),
 * and write the shards and their index from several threads.
 *
 * Which input reads a path is decided here and only here: a directory is
 * a tree (input_dir.c), a regular file an HDF5 file (input_hdf5.c) when
 * it has HDF5's signature, else a tar archive (input_tar.c).
 */
#include "index.h"
#include "input.h"
#include "layout.h"
#include "pack.h"
#include "npy.h"
#include "sys.h"
#include "tar.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "hash.h"

#define CHUNK (1u << 20) /* fits a core's L2 cache: a 4 MiB buffer was 2-3x slower under load */

struct pack_job {
    const larder_pack_options *options;
    struct larder__pack_layout *layout;
    struct larder__index_builder *builder;
    const char *outdir;
    struct larder__pack_placement placement;
    atomic_uint next_shard;
    atomic_ullong bytes_done;
    pthread_mutex_t lock; /* error and progress */
    int error;
    char error_message[1024];
};

/* ---- writing ------------------------------------------------------------- */

struct shard_writer {
    int fd;
    const char *path;
    uint64_t offset;
    XXH3_state_t shard_hash, sample_hash;
    uint8_t *buf; /* CHUNK bytes */
    size_t used;
};

static int writer_flush(struct shard_writer *w)
{
    int rc = larder__pwrite_full(w->fd, w->buf, w->used, w->offset, w->path);
    w->offset += w->used;
    w->used = 0;
    return rc;
}

static int writer_put(struct shard_writer *w, const void *data, size_t length)
{
    XXH3_64bits_update(&w->shard_hash, data, length);
    XXH3_64bits_update(&w->sample_hash, data, length);
    const uint8_t *p = data;
    while (length) {
        size_t n = CHUNK - w->used < length ? CHUNK - w->used : length;
        memcpy(w->buf + w->used, p, n);
        w->used += n, p += n, length -= n;
        if (w->used == CHUNK) {
            int rc = writer_flush(w);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

/* Read a field's data from its input straight into the write buffer. */
static int writer_copy(struct shard_writer *w, struct larder__pack_input *input,
                       const struct larder__pack_field *field)
{
    for (uint64_t done = 0; done < field->size;) {
        if (w->used == CHUNK) {
            int rc = writer_flush(w);
            if (rc < 0) return rc;
        }
        size_t n = CHUNK - w->used;
        if (n > field->size - done) n = (size_t)(field->size - done);
        int rc = input->ops->read(input, field, done, w->buf + w->used, n);
        if (rc < 0) return rc;
        XXH3_64bits_update(&w->shard_hash, w->buf + w->used, n);
        XXH3_64bits_update(&w->sample_hash, w->buf + w->used, n);
        w->used += n;
        done += n;
    }
    return 0;
}

static int write_sample(struct pack_job *job, struct shard_writer *w,
                        const struct larder__pack_out_sample *s)
{
    static const uint8_t zeros[LARDER__TAR_BLOCK];
    const char *key;
    struct larder__pack_input *input;
    const struct larder__pack_field *fields;
    uint32_t num_fields;
    larder__pack_layout_sample(job->layout, s->listed, &key, &input, &fields, &num_fields);
    XXH3_64bits_reset(&w->sample_hash);
    uint64_t start = w->offset + w->used;
    int rc = 0;
    for (uint32_t f = 0; f < s->num_fields && rc == 0; f++) {
        const struct larder__pack_out_field *of = &s->fields[f];
        uint64_t data_size = of->field->size + of->npy_size;
        if (job->placement.format == LARDER_FORMAT_TAR) {
            uint8_t header[LARDER__TAR_BLOCK * 3 + LARDER__TAR_MAX_NAME * 2];
            int n = larder__tar_member_header(header, sizeof header, of->member, data_size);
            if (n < 0) return n;
            rc = writer_put(w, header, (size_t)n);
        }
        if (rc == 0 && of->npy_size) {
            uint8_t npy[LARDER__NPY_MAX_HEADER];
            size_t n =
                larder__npy_write_header(npy, of->field->dtype, of->field->ndim, of->field->shape);
            rc = writer_put(w, npy, n);
        }
        if (rc == 0) rc = writer_copy(w, input, of->field);
        if (rc == 0 && job->placement.format == LARDER_FORMAT_TAR)
            rc = writer_put(w, zeros, (size_t)larder__tar_padding(data_size));
    }
    if (rc < 0) return rc;
    if (w->offset + w->used - start != s->length)
        return larder__fail(LARDER_EUSAGE, "%s: sample '%s' changed size while packing",
                            input->name, key);
    larder__index_builder_set_checksum(job->builder, s->index_id,
                                       XXH3_64bits_digest(&w->sample_hash));
    return 0;
}

static int write_shard(struct pack_job *job, uint32_t shard, uint8_t *buf)
{
    char name[64], path[PATH_MAX], tmp[PATH_MAX];
    const struct larder__pack_placement *placement = &job->placement;
    larder__pack_shard_name(name, sizeof name, shard, placement->format);
    if (snprintf(path, sizeof path, "%s/%s", job->outdir, name) >= (int)sizeof path - 4)
        return larder__fail(-ENAMETOOLONG, "%s: path too long", job->outdir);
    memcpy(tmp, path, strlen(path));
    strcpy(tmp + strlen(path), ".tmp");
    int fd = larder__open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fd;
    struct shard_writer w = {.fd = fd, .path = tmp, .buf = buf};
    XXH3_64bits_reset(&w.shard_hash);
    int rc = 0;
    for (uint64_t k = placement->shard_first[shard];
         k < placement->shard_first[shard + 1] && rc == 0; k++) {
        const struct larder__pack_out_sample *s = &placement->samples[k];
        rc = write_sample(job, &w, s);
        uint64_t before = atomic_fetch_add(&job->bytes_done, s->length);
        if (rc == 0 && job->options->progress) {
            pthread_mutex_lock(&job->lock);
            job->options->progress(job->options->progress_userdata, before + s->length,
                                   placement->bytes_total);
            pthread_mutex_unlock(&job->lock);
        }
    }
    if (rc == 0 && placement->format == LARDER_FORMAT_TAR) {
        static const uint8_t end[2 * LARDER__TAR_BLOCK];
        rc = writer_put(&w, end, sizeof end);
    }
    if (rc == 0) rc = writer_flush(&w);
    if (rc == 0 && larder__sys.fsync(fd) < 0)
        rc = larder__fail(-errno, "%s: fsync: %s", tmp, strerror(errno));
    larder__sys.close(fd);
    if (rc == 0 && larder__sys.rename(tmp, path) < 0)
        rc = larder__fail(-errno, "%s: %s", path, strerror(errno));
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    larder__index_builder_set_shard(job->builder, shard, w.offset,
                                    XXH3_64bits_digest(&w.shard_hash));
    return 0;
}

static void *writer_thread(void *arg)
{
    struct pack_job *job = arg;
    uint8_t *buf = malloc(CHUNK);
    for (;;) {
        pthread_mutex_lock(&job->lock);
        int stop = job->error;
        pthread_mutex_unlock(&job->lock);
        if (stop) break;
        unsigned shard = atomic_fetch_add(&job->next_shard, 1);
        if (shard >= job->placement.num_shards) break;
        int rc = buf ? write_shard(job, shard, buf) : -ENOMEM;
        if (rc < 0) {
            pthread_mutex_lock(&job->lock);
            if (!job->error) {
                job->error = rc;
                snprintf(job->error_message, sizeof job->error_message, "%s", larder_errmsg());
            }
            pthread_mutex_unlock(&job->lock);
            break;
        }
    }
    free(buf);
    return NULL;
}

/* ---- larder_pack ----------------------------------------------------------- */

/* Open the input that reads `path` and list its samples into the layout. */
static int add_input(struct larder__pack_layout *layout, const char *path,
                     const larder_pack_options *options)
{
    struct stat st;
    if (stat(path, &st) < 0) return larder__fail(-errno, "%s: %s", path, strerror(errno));
    struct larder__pack_input *input;
    uint64_t before = larder__pack_layout_num_samples(layout);
    int rc;
    if (S_ISDIR(st.st_mode))
        rc = larder__pack_input_dir_open(path, &input);
    else if (!S_ISREG(st.st_mode))
        return larder__fail(LARDER_EUSAGE, "%s: not a directory, tar archive or HDF5 file", path);
    else if (larder__is_hdf5(path))
        rc = larder__pack_input_hdf5_open(path, options, &input);
    else
        rc = larder__pack_input_tar_open(path, &input);
    if (rc == 0) rc = larder__pack_layout_add_input(layout, input);
    if (rc == 0 && larder__pack_layout_num_samples(layout) == before)
        rc = larder__fail(LARDER_EEMPTY, "%s: source holds no samples", path);
    return rc;
}

/* Write every shard, from options->jobs threads (this one among them). */
static int write_shards(struct pack_job *job)
{
    int jobs = job->options->jobs > 0 ? job->options->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    if ((unsigned)jobs > job->placement.num_shards) jobs = (int)job->placement.num_shards;
    pthread_t threads[256];
    if (jobs > 256) jobs = 256;
    int started = 0;
    for (; started < jobs - 1; started++)
        if (pthread_create(&threads[started], NULL, writer_thread, job) != 0) break;
    writer_thread(job);
    for (int t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    if (job->error) return larder__fail(job->error, "%s", job->error_message);
    return 0;
}

static void fill_result(const struct pack_job *job, const char *id, larder_pack_result *result)
{
    const struct larder__pack_placement *placement = &job->placement;
    result->num_samples = placement->num_samples;
    result->num_shards = placement->num_shards;
    result->bytes_written = 0;
    for (uint32_t i = 0; i < placement->num_shards; i++)
        result->bytes_written += placement->shard_bytes[i];
    memcpy(result->dataset_id, id, 33);
}

/* The options' errors, before any input is read. */
static int check_options(const larder_pack_options *options)
{
    if (options->version != LARDER_PACK_OPTIONS_VERSION)
        return larder__fail(LARDER_EUSAGE, "larder_pack: options version %d, expected %d",
                            options->version, LARDER_PACK_OPTIONS_VERSION);
    int format = options->format ? options->format : LARDER_FORMAT_TAR;
    if (format != LARDER_FORMAT_TAR && format != LARDER_FORMAT_FLAT)
        return larder__fail(LARDER_EUSAGE, "unknown shard format %d", options->format);
    /* the index builder says so too, but only once every input is listed */
    if (options->block_size & (options->block_size - 1))
        return larder__fail(LARDER_EUSAGE, "block size %u is not a power of two",
                            options->block_size);
    return 0;
}

int larder__pack_write(struct larder__pack_layout *layout, const char *outdir,
                       const larder_pack_options *options, larder_pack_result *result)
{
    larder_pack_options defaults = {.version = LARDER_PACK_OPTIONS_VERSION, .shuffle = 1};
    if (!options) options = &defaults;
    int rc = check_options(options);
    if (rc < 0) return rc;
    int format = options->format ? options->format : LARDER_FORMAT_TAR;
    struct pack_job job = {.options = options, .layout = layout, .outdir = outdir};
    pthread_mutex_init(&job.lock, NULL);
    rc = larder__index_builder_new(&job.builder, options->block_size);
    if (rc == 0)
        rc = larder__pack_layout_place(layout, options, format, job.builder, &job.placement);
    if (rc == 0) rc = larder__mkdir_p(outdir, strlen(outdir), 0755);
    if (rc == 0) rc = write_shards(&job);
    char index_path[PATH_MAX], id[33] = "";
    snprintf(index_path, sizeof index_path, "%s/index.larder", outdir);
    if (rc == 0) rc = larder__index_builder_write(job.builder, index_path, id);
    if (rc == 0 && result) fill_result(&job, id, result);
    larder__pack_placement_free(&job.placement);
    larder__index_builder_free(job.builder);
    pthread_mutex_destroy(&job.lock);
    return rc;
}

int larder_pack(const char *const *sources, size_t num_sources, const char *outdir,
                const larder_pack_options *options, larder_pack_result *result)
{
    larder_pack_options defaults = {.version = LARDER_PACK_OPTIONS_VERSION, .shuffle = 1};
    if (!options) options = &defaults;
    if (options->version != LARDER_PACK_OPTIONS_VERSION) return check_options(options);
    if (num_sources == 0) return larder__fail(LARDER_EUSAGE, "no sources to pack");
    int rc = check_options(options);
    if (rc < 0) return rc;
    struct larder__pack_layout *layout;
    rc = larder__pack_layout_new(&layout);
    for (size_t i = 0; rc == 0 && i < num_sources; i++)
        rc = add_input(layout, sources[i], options);
    if (rc == 0) rc = larder__pack_write(layout, outdir, options, result);
    larder__pack_layout_free(layout);
    return rc;
}
