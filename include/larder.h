/*
 * larder.h - the one public interface of liblarder.
 *
 * larder stages training data from shared storage onto node-local disk.
 * A dataset is named by the path or URL of its index file (index.larder),
 * which lists the shards and, for every sample, one contiguous byte range
 * inside one shard.  See docs/format.md for the on-disk format.
 *
 * Conventions (as in libuv and liburing):
 *   - Functions return 0 (or a count) on success and a negative code on
 *     failure: -errno for system errors, or one of LARDER_E* below.
 *     larder_strerror() names any code; larder_errmsg() gives the detail
 *     of this thread's most recent failure (file, position, reason).
 *   - Handles are opaque.  Destructors accept NULL.
 *   - Options structs carry a version field; set it to the
 *     LARDER_*_OPTIONS_VERSION constant after zeroing the struct.
 *   - The library never prints and never aborts on bad input.  Messages
 *     go to the callback set with larder_set_log().
 *
 * Anything not declared in this file is not part of the API.
 */
#ifndef LARDER_H
#define LARDER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LARDER_API __attribute__((visibility("default")))
#else
#define LARDER_API
#endif

/* The one place larder's version is written: CMake, larder.pc, the man
 * pages and the Python package take it from here. */
#define LARDER_VERSION_STRING "0.1.0"

/* The version of the library as loaded: LARDER_VERSION_STRING of the
 * header it was built with, to compare with the one a program was compiled
 * against.  A static string. */
LARDER_API const char *larder_version(void);

/* larder's own error codes, well below every errno value. */
#define LARDER_ERRNO_MAP(X)                                                                        \
    X(EBADINDEX, -1000, "index file is corrupt or not an index")                                   \
    X(EVERSION, -1001, "index version is not supported")                                           \
    X(EBADTAR, -1002, "malformed tar archive")                                                     \
    X(ECHECKSUM, -1003, "checksum mismatch")                                                       \
    X(ENOTFOUND, -1004, "no such sample or field")                                                 \
    X(EDUPKEY, -1005, "duplicate sample key")                                                      \
    X(EUNSAFE, -1006, "unsafe or unsupported archive member")                                      \
    X(ETRUNCATED, -1007, "unexpected end of data")                                                 \
    X(EHDF5, -1008, "HDF5 error")                                                                  \
    X(EHTTP, -1009, "HTTP error")                                                                  \
    X(EEMPTY, -1010, "source holds no samples")                                                    \
    X(ETOOSMALL, -1011, "buffer too small")                                                        \
    X(EUSAGE, -1012, "invalid argument")                                                           \
    X(EUNSUPPORTED, -1013, "unsupported input")                                                    \
    X(ECACHE, -1014, "cache directory belongs to another dataset or block size")                   \
    X(EPROTOCOL, -1015, "malformed protocol message")                                              \
    X(EDENIED, -1016, "refused: outside what this opener or daemon allows")                        \
    X(ELOCAL, -1017, "this node's own resources failed, not the peer's")

enum larder_error {
#define LARDER_ERR_ENUM(name, value, text) LARDER_##name = (value),
    LARDER_ERRNO_MAP(LARDER_ERR_ENUM)
#undef LARDER_ERR_ENUM
};

/* A static string naming any return code (larder's or -errno). */
LARDER_API const char *larder_strerror(int code);

/*
 * Detail of this thread's most recent failure, for example
 * "shards/a.tar: member at offset 1536: header checksum mismatch".
 * Valid until the next failing larder call in the same thread.
 */
LARDER_API const char *larder_errmsg(void);

/* ---- logging ---------------------------------------------------------- */

enum larder_log_level { LARDER_LOG_ERROR = 0, LARDER_LOG_WARN, LARDER_LOG_INFO, LARDER_LOG_DEBUG };

typedef void (*larder_log_fn)(void *userdata, int level, const char *message);

/* Route the library's messages at `level` or more severe to `fn`
 * (NULL: drop them, the default).  Process-wide; not thread-safe against
 * concurrent larder calls, so set it once at start-up. */
LARDER_API void larder_set_log(larder_log_fn fn, void *userdata, int level);

/* ---- datasets --------------------------------------------------------- */

typedef struct larder_dataset larder_dataset;

/* Array element types of fields that hold arrays (values in docs/format.md). */
enum larder_dtype {
    LARDER_DTYPE_NONE = 0, /* plain bytes */
    LARDER_DTYPE_U8,
    LARDER_DTYPE_I8,
    LARDER_DTYPE_U16,
    LARDER_DTYPE_I16,
    LARDER_DTYPE_U32,
    LARDER_DTYPE_I32,
    LARDER_DTYPE_U64,
    LARDER_DTYPE_I64,
    LARDER_DTYPE_F16,
    LARDER_DTYPE_F32,
    LARDER_DTYPE_F64,
    LARDER_DTYPE_BOOL,
    LARDER_DTYPE_COUNT
};

/* numpy's name of a dtype ("float32"), or "bytes" for LARDER_DTYPE_NONE. */
LARDER_API const char *larder_dtype_name(int dtype);
/* Size in bytes of one element, 0 for LARDER_DTYPE_NONE or an unknown value. */
LARDER_API size_t larder_dtype_size(int dtype);

#define LARDER_MAX_DIMS 32

/* 2 added trust_index and allow_prefixes, 3 allow_unchecked; version 1 and 2
 * structs are still taken. */
#define LARDER_OPEN_OPTIONS_VERSION 3
typedef struct larder_open_options {
    int version;          /* LARDER_OPEN_OPTIONS_VERSION (or 1, without the fields after
                           * borrow_capacity; or 2, without allow_unchecked) */
    int verify_checksums; /* nonzero: check each checksum also on uncached reads (fills,
                           * daemon answers and a process's first read of a cached
                           * sample are always checked: docs/cache.md) */
    /* Node cache directory; NULL: the LARDER_CACHE environment variable,
     * and when that is unset or empty, no cache (every read goes to the
     * origin).  "" forces no cache. */
    const char *cache_dir;
    uint32_t block_size;     /* cache block size; 0: the index's hint (64 KiB) */
    uint64_t cache_capacity; /* bytes of this dataset's cache; 0: no limit */
    int max_inflight;        /* origin requests in flight in larder_read_samples; 0: 64 */
    /* The node daemon's Unix socket (larderd --socket); NULL: the
     * LARDER_SOCKET environment variable; unset or "": no daemon.  With a
     * daemon, samples not in the cache are asked of it (it fetches them
     * from the origin, or from the node that owns the shard); if it does
     * not answer, the reader falls back to its own path to the origin. */
    const char *daemon_socket;
    /* Bytes of this dataset's cache that blocks borrowed from other nodes
     * (in a cluster of daemons) may take; they are evicted first.  0: no
     * limit of their own. */
    uint64_t borrow_capacity;
    /* Nonzero: take the index's shard names as they are, even where they
     * leave the index's base (absolute paths, file:// URLs, "..", other
     * hosts).  Only for an index you trust as much as your own files:
     * otherwise such a name is refused at open (LARDER_EBADINDEX naming
     * the shard).  See docs/security.md. */
    int trust_index;
    /* NULL, or a NULL-terminated list of path or URL prefixes: the index
     * and every shard it names must lie under one of them (whole path
     * components; after resolving ".." and, for local paths, symbolic
     * links), else open fails with LARDER_EDENIED naming the first that
     * does not.  The node daemon passes its --allow list here. */
    const char *const *allow_prefixes;
    /* Nonzero: accept an index marked unchecked (flag 4, docs/format.md:
     * made from a listing alone, with no checksums, so nothing read through
     * it is checked).  Only for an index this process made itself from
     * files it trusts, as `larder mount` of plain files does; otherwise such
     * an index is refused at open with LARDER_EBADINDEX (any index can set
     * the flag, and it would turn off every check).  Version 3. */
    int allow_unchecked;
} larder_open_options;

/*
 * Open the dataset whose index is at `url`: a local path, file://,
 * http:// or https://.  Shard names in the index resolve relative to the
 * index's own location.  `options` may be NULL for defaults.
 * On success *out owns the dataset until larder_close().
 */
LARDER_API int larder_open(larder_dataset **out, const char *url,
                           const larder_open_options *options);
LARDER_API void larder_close(larder_dataset *dataset);

typedef struct larder_dataset_info {
    uint64_t num_samples;
    uint64_t num_shards;
    uint64_t total_bytes; /* sum of the samples' lengths */
    uint32_t block_size;  /* block size hint recorded at pack time */
    uint32_t version;     /* index format version */
    char dataset_id[33];  /* content hash of the index, 32 hex digits */
} larder_dataset_info;

LARDER_API int larder_dataset_info_get(const larder_dataset *dataset, larder_dataset_info *info);

/*
 * Check the whole index without reading any shard: its content hash
 * against the dataset id, every shard, sample and field record, that
 * every key leads back to its sample (none duplicated), and that no two
 * samples of a shard overlap.  O(samples).  Returns 0 or the first
 * problem's code (LARDER_ECHECKSUM, LARDER_EBADINDEX, LARDER_EDUPKEY)
 * with larder_errmsg() naming it.  larder_open checks only what reading
 * needs (sizes, names, each record as it is used); the node daemon calls
 * this before it serves a dataset.
 */
LARDER_API int larder_validate(larder_dataset *dataset);
LARDER_API uint64_t larder_num_samples(const larder_dataset *dataset);

typedef struct larder_sample_info {
    uint64_t id;            /* position in the index, 0 .. num_samples-1 */
    uint64_t offset;        /* first byte of the sample inside its shard */
    uint64_t length;        /* bytes in the sample's range */
    uint64_t checksum;      /* xxh3-64 of those bytes */
    uint32_t shard;         /* shard number */
    uint32_t num_fields;    /* fields in the sample */
    const char *key;        /* sample key; valid while the dataset is open */
    const char *shard_name; /* shard name as recorded; valid while open */
} larder_sample_info;

typedef struct larder_field_info {
    const char *name; /* field name ("jpg", "image"); valid while open */
    uint64_t offset;  /* first byte of the field, relative to the sample */
    uint64_t length;  /* bytes of the field */
    int dtype;        /* enum larder_dtype */
    uint32_t ndim;    /* dimensions of an array field, else 0 */
    uint64_t shape[LARDER_MAX_DIMS];
} larder_field_info;

/* Layout of sample `id`.  LARDER_ENOTFOUND past the end; LARDER_EBADINDEX
 * when the record is inconsistent (the message names it). */
LARDER_API int larder_sample_info_get(const larder_dataset *dataset, uint64_t id,
                                      larder_sample_info *info);
/* Layout of field `field` (0 .. num_fields-1) of sample `id`. */
LARDER_API int larder_field_info_get(const larder_dataset *dataset, uint64_t id, uint32_t field,
                                     larder_field_info *info);
/*
 * The whole layout of sample `id` in one call: *info (may be NULL) as
 * larder_sample_info_get() fills it, and fields[0 .. num_fields) as
 * larder_field_info_get() fills each field, in field order.  Returns
 * num_fields; LARDER_ETOOSMALL when capacity < num_fields (no field is
 * written, but *info is, so info->num_fields tells what to allocate);
 * LARDER_ENOTFOUND past the end; LARDER_EBADINDEX for an inconsistent
 * record.  The names and keys are valid while the dataset is open.
 */
LARDER_API int larder_sample_layout_get(const larder_dataset *dataset, uint64_t id,
                                        larder_sample_info *info, larder_field_info *fields,
                                        uint32_t capacity);
/* Id of the sample named `key` (>= 0), or LARDER_ENOTFOUND. */
LARDER_API int64_t larder_find_key(const larder_dataset *dataset, const char *key);
/* Index of the field named `name` in sample `id` (>= 0), or LARDER_ENOTFOUND. */
LARDER_API int larder_find_field(const larder_dataset *dataset, uint64_t id, const char *name);

/*
 * Read sample `id` (all its bytes) into buf[0..capacity).  Returns the
 * sample's length, or LARDER_ETOOSMALL when capacity is less (nothing is
 * read), or another negative code.  With verify_checksums set, a
 * checksum mismatch returns LARDER_ECHECKSUM.  Thread-safe.
 */
LARDER_API int64_t larder_read_sample(larder_dataset *dataset, uint64_t id, void *buf,
                                      size_t capacity);
/* The same for one field of the sample. */
LARDER_API int64_t larder_read_field(larder_dataset *dataset, uint64_t id, uint32_t field,
                                     void *buf, size_t capacity);

/*
 * Read many samples at once: every miss is fetched concurrently (up to
 * max_inflight origin requests), so the origin's latency is paid about
 * once per batch, not once per sample.  bufs[i] receives sample ids[i]
 * (capacity caps[i]); results[i] gets its length or a negative code.
 * Returns the number of samples read, or the first error when any failed.
 */
LARDER_API int64_t larder_read_samples(larder_dataset *dataset, const uint64_t *ids, size_t count,
                                       void *const *bufs, const size_t *caps, int64_t *results);

/* Cache and origin counters.  With a cache they are the node's: shared by
 * every process using the same cache directory and dataset. */
#define LARDER_FILL_BUCKETS 24
typedef struct larder_stats {
    int cached;               /* whether a node cache is in use */
    uint64_t hits;            /* samples served from the node cache */
    uint64_t misses;          /* samples that needed an origin fetch */
    uint64_t origin_requests; /* origin reads (one per run of missing blocks) */
    uint64_t origin_bytes;    /* bytes read from the origin */
    uint64_t bytes_served;    /* sample bytes handed to readers */
    uint64_t refetches;       /* fetches repeated because cached bytes were wrong */
    uint64_t evictions;       /* blocks evicted to honour the capacity */
    uint64_t uncached_fills;  /* fills served without caching (disk full) */
    /* fills by latency: bucket i counts fills of [2^i, 2^(i+1)) microseconds */
    uint64_t fill_latency[LARDER_FILL_BUCKETS];
    uint64_t resident_bytes, total_bytes; /* cached and total shard bytes */
    uint32_t block_size;
    uint64_t peer_requests;  /* reads answered by the shard's owner node instead of the origin */
    uint64_t peer_bytes;     /* bytes those reads brought */
    uint64_t borrowed_bytes; /* cached bytes borrowed from other nodes */
} larder_stats;

LARDER_API int larder_stats_get(larder_dataset *dataset, larder_stats *stats);
/* The latency under which `fraction` (0..1) of the fills completed, in
 * microseconds (an upper bound from the histogram), or 0 with no fills. */
LARDER_API uint64_t larder_stats_fill_percentile(const larder_stats *stats, double fraction);

/*
 * Every dataset cached under `dir`: calls fn with each one's dataset id
 * and statistics (node-wide counters, resident and total bytes).  Needs
 * no index.  Returns the number of datasets, or a negative code.
 */
typedef void (*larder_cache_entry_fn)(void *userdata, const char *dataset_id,
                                      const larder_stats *stats);
LARDER_API int larder_cache_list(const char *dir, larder_cache_entry_fn fn, void *userdata);

/*
 * Check the whole dataset: the index's content hash and every record,
 * then every shard's size and checksum and every sample's bytes against
 * its checksum, reading each shard once, in order.  `bad` (may be NULL)
 * is called once per problem with the sample id (LARDER_NO_SAMPLE for a
 * problem of the index or of a shard as a whole), the error and a
 * message.  Returns the number of problems (0 when all is good), or a
 * negative code when the check could not run.  `progress` (may be NULL)
 * receives shard bytes done and total.
 */
#define LARDER_NO_SAMPLE UINT64_MAX
typedef void (*larder_bad_sample_fn)(void *userdata, uint64_t id, int error, const char *message);
typedef void (*larder_progress_fn)(void *userdata, uint64_t done, uint64_t total);
LARDER_API int64_t larder_verify(larder_dataset *dataset, larder_bad_sample_fn bad,
                                 larder_progress_fn progress, void *userdata);

/* ---- transforms (docs/transforms.md) ------------------------------------ */

/*
 * A transform is a named, versioned, deterministic function applied to
 * the fields of a sample: "jpeg_decode_resize:224", "npy_cast:float16",
 * "zstd_decompress".  It runs in the node daemon, next to the cached
 * bytes, or in this process when there is no daemon or the daemon is busy
 * (it then answers the raw bytes, and the reader runs the same code):
 * the output is byte-identical wherever it runs.
 *
 * A transform's ops table is also the ABI of loadable transforms: a
 * shared object in the transform directory exports
 *
 *     const larder_transform_ops *larder_transform_entry(uint32_t abi);
 *
 * returning its table (abi == LARDER_TRANSFORM_ABI), or NULL when it was
 * built for another ABI.  The functions must be thread-safe, must not
 * keep pointers to their arguments past the call, and must be
 * deterministic: the same input, version and parameters give the same
 * bytes.  Bump `version` whenever the output for some input changes.
 */
#define LARDER_TRANSFORM_ABI 1
#define LARDER_TRANSFORM_MAX_NAME 64  /* bytes of a name with its NUL: [a-z0-9_], 1 to 63 */
#define LARDER_TRANSFORM_MAX_SPEC 256 /* bytes of "name:params" with its NUL */
#define LARDER_TRANSFORM_STATE 256    /* bytes of parsed parameters a transform may keep */
#define LARDER_TRANSFORM_MAX_OUTPUT (48u << 20) /* bytes one sample's result may take */

typedef struct larder_transform_ops {
    uint32_t abi;     /* LARDER_TRANSFORM_ABI */
    const char *name; /* [a-z0-9_], 1 to 63 bytes; unique in the process */
    uint32_t version; /* changes whenever an output could change */
    /*
     * Parse `params` (the text after "name:", "" when there is none; at
     * most LARDER_TRANSFORM_MAX_SPEC bytes, from the reader: hostile) into
     * state[0..LARDER_TRANSFORM_STATE), and write its canonical form
     * (equal parameters, equal text) into canonical[0..LARDER_TRANSFORM_MAX_SPEC).
     * 0, or a negative code (LARDER_EUSAGE) with a message in error[0..error_size).
     */
    int (*parse)(const char *params, void *state, char *canonical, char *error, size_t error_size);
    /* 1 when the transform applies to this field (its data are then passed
     * to run), 0 when the field is passed on unchanged. */
    int (*applies)(const void *state, const larder_field_info *field);
    /*
     * An upper bound of the bytes run writes for this field, which may
     * look at its data (a header); negative code and message when the
     * input cannot be transformed (too large, not this format).
     */
    int64_t (*bound)(const void *state, const larder_field_info *field, const void *data,
                     char *error, size_t error_size);
    /*
     * Transform one field: `data` holds field->length bytes; write at
     * most `capacity` (bound's) bytes to out and describe them in *result
     * (dtype, ndim, shape; offset and name are the caller's) and name[0..
     * LARDER_TRANSFORM_MAX_NAME) (the output field's name: preset to the
     * input's).  The bytes written, or a negative code with a message.
     */
    int64_t (*run)(const void *state, const larder_field_info *field, const void *data, void *out,
                   size_t capacity, larder_field_info *result, char *name, char *error,
                   size_t error_size);
} larder_transform_ops;

typedef const larder_transform_ops *(*larder_transform_entry_fn)(uint32_t abi);

/*
 * Load every "*.so" in `dir` as a loadable transform for this process
 * (the daemon does this for --transform-dir; a reader with the
 * LARDER_TRANSFORM_DIR environment variable on its first transform).
 * Only load what you trust as your own code.  Returns the number loaded,
 * or the first failure's code with a message naming the file (a name
 * already taken, a wrong ABI, no entry symbol).
 */
LARDER_API int larder_transform_load_dir(const char *dir);
/*
 * Check a transform spec "name[:params]": 0 and, when `version` is not
 * NULL, its version; LARDER_ENOTFOUND for an unknown name, LARDER_EUSAGE
 * for a malformed spec or bad parameters (the message says which).
 */
LARDER_API int larder_transform_check(const char *spec, uint32_t *version);

/* Where a transformed read ran (larder_transformed.placement). */
enum larder_placement {
    LARDER_PLACED_LOCAL = 1,    /* in this process: no daemon */
    LARDER_PLACED_DAEMON = 2,   /* in the node daemon */
    LARDER_PLACED_CACHED = 3,   /* the daemon's result cache */
    LARDER_PLACED_FALLBACK = 4, /* the daemon sent raw bytes (busy): run here */
};

/* The result of a transformed read: every field of the sample, those the
 * transform applies to transformed, the others as they are. */
typedef struct larder_transformed {
    uint32_t num_fields;
    larder_field_info *fields; /* offsets into data; names valid until freed */
    const uint8_t *data;       /* the fields' bytes (each at an 8-aligned offset) */
    uint64_t length;           /* bytes of data */
    int placement;             /* enum larder_placement */
} larder_transformed;

/*
 * Read sample `id` with the transform `spec` applied, in the node daemon
 * when one is configured (at DEMAND priority), else here.  0 and *out
 * (free it with larder_transformed_free); a negative code with a message
 * naming the sample, the field and the transform when it fails on this
 * sample (corrupt input), LARDER_ENOTFOUND for an unknown transform or
 * one that applies to no field of the sample.  Thread-safe.
 */
LARDER_API int larder_read_transformed(larder_dataset *dataset, uint64_t id, const char *spec,
                                       larder_transformed **out);
LARDER_API void larder_transformed_free(larder_transformed *result);
/*
 * Tell the daemon how long this process's readers can wait for one
 * transformed sample without stalling a step (microseconds; the
 * LARDER_TRANSFORM_BUDGET_MS environment variable sets it too).  0, the
 * default: the process's step budget, what the transformed reads it has
 * in flight would take it here one after another (the most under way at
 * once lately times the CPU time of one, measured: a process runs its
 * first transform here).  It goes with every
 * transformed read, with the process's measured wait for them, for the
 * daemon's placement (docs/transforms.md).
 */
LARDER_API void larder_transform_set_budget(uint64_t budget_us);

/* ---- packing and indexing --------------------------------------------- */
/* Packing itself (larder_pack) is in larder_pack.h, in libraries of its own. */

enum larder_shard_format { LARDER_FORMAT_TAR = 1, LARDER_FORMAT_FLAT = 2 };

typedef struct larder_pack_result {
    uint64_t num_samples;
    uint64_t num_shards;
    uint64_t bytes_written; /* shard bytes */
    char dataset_id[33];
} larder_pack_result;

/*
 * Index existing WebDataset tar shards in place (local paths or http(s)
 * URLs), writing the index to `index_path`.  Shard names are stored
 * relative to the index's directory where possible, else as given.
 */
LARDER_API int larder_index_shards(const char *const *shards, size_t num_shards,
                                   const char *index_path, uint32_t block_size,
                                   larder_progress_fn progress, void *userdata,
                                   larder_pack_result *result);

/*
 * Index a tree of plain files in place, one sample and one flat shard
 * per regular file (checkpoints, model weights, any file a job reads
 * whole or by ranges).  A sample's key is the file's path relative to
 * `root`, its one field the whole file, named by the file's extension
 * (after the last '.' of its name) or "data".  Each file is read once
 * for its checksum; files larger than `large_file` also get one checksum
 * per `checksum_block` bytes, so that a range of them is checked, and
 * read, by those blocks alone (docs/format.md, version 3).
 *
 * `root` is a local directory: every regular file under it, in byte
 * order of names; symbolic links are skipped (never followed), as are
 * the index itself and its writer's temporary files when the index is
 * written inside the tree, and files whose names an index may not hold
 * (a control character, a backslash, a '?', '#' or an escaped '.', '/'
 * or '\'; names that are not UTF-8), each with a warning through the
 * log callback ("NAME: skipped, WHY").  `root` may be an
 * s3://bucket/prefix/ too: the objects under it, listed with
 * ListObjectsV2.  With `files_from`, only the files that list names, one
 * relative name a line; `root` may then be an http(s):// URL directory.  Names are recorded
 * relative to the index's directory when the tree lies under it (so the two move, and serve over
 * HTTP, together), else relative to `root` recorded as the index's base.  NULL options: the
 * defaults.  0, or a negative code (LARDER_EEMPTY when there is no file to index).
 */
typedef struct larder_index_files_options {
    size_t struct_size;          /* sizeof(larder_index_files_options) */
    uint32_t block_size;         /* cache block size hint; 0: 64 KiB */
    uint64_t checksum_block;     /* a power of two, 512 B to 64 MiB, >= block_size; 0: 1 MiB */
    uint64_t large_file;         /* files above this many bytes get block checksums; 0: 4 MiB,
                                    UINT64_MAX: none do */
    larder_progress_fn progress; /* bytes read and to read (may be NULL) */
    void *userdata;              /* for progress */
    const char *files_from;      /* NULL, or a file of names relative to root, one a line */
    /* Nonzero: sizes from the listing only, no file read (local roots and
     * s3:// prefixes): the index has no checksums and reads of it are not
     * checked (what `larder mount` of plain files makes).  After files_from:
     * older callers' struct_size leaves it 0. */
    int listing_only;
} larder_index_files_options;
LARDER_API int larder_index_files(const char *root, const char *index_path,
                                  const larder_index_files_options *options,
                                  larder_pack_result *result);

/* ---- files ------------------------------------------------------------- */
/*
 * A file-like handle on one sample, or one field of a sample: a checkpoint,
 * an HDF5 file, an image, read at any offset without copying the whole
 * sample out.  Reads go through the dataset's read engine (node cache, node
 * daemon, peers, origin; every byte checked against the index's checksums
 * as larder_read_sample checks it); resident bytes are read straight from
 * the cache file.  A handle keeps a small read-ahead window (256 KiB), so
 * small sequential reads cost one engine read per window.
 *
 * The handle borrows the dataset: close every file before the dataset.
 */
typedef struct larder_file larder_file;

/*
 * Open field `field` (0 .. num_fields-1) of sample `id`, or with field -1
 * the whole sample (all its bytes, as larder_read_sample returns them).
 * 0 and *out, which the caller closes with larder_file_close(); or
 * LARDER_ENOTFOUND for a sample or field that does not exist,
 * LARDER_EUSAGE for a NULL argument, -ENOMEM.
 */
LARDER_API int larder_file_open(larder_file **out, larder_dataset *dataset, uint64_t id, int field);
/*
 * The same by the sample's key and the field's name.  `field` NULL: the
 * sample's only field when it has exactly one (a file of a `larder index
 * --files` index, or a packed file), else the whole sample.
 * LARDER_ENOTFOUND names the key or field that is missing.
 */
LARDER_API int larder_file_open_key(larder_file **out, larder_dataset *dataset, const char *key,
                                    const char *field);
/*
 * Read up to `length` bytes at `offset` into buf.  Returns the number of
 * bytes read: `length`, or fewer only when the file ends first (0 at or
 * past the end); or a negative code (nothing valid in buf then):
 * LARDER_ECHECKSUM naming the sample for wrong bytes, and
 * LARDER_EUNSUPPORTED for a part of a sample over 256 MiB with one
 * checksum, read with checks but no cache to stage it in whole (index
 * such files with per-block checksums: larder_index_files).  Does not move
 * the position of larder_file_read.  Thread-safe.
 */
LARDER_API int64_t larder_file_pread(larder_file *file, void *buf, size_t length, uint64_t offset);
/* larder_file_pread at the handle's position, which it then advances by
 * what was read.  read and seek share the position: one thread at a time. */
LARDER_API int64_t larder_file_read(larder_file *file, void *buf, size_t length);
/*
 * Move the position to `offset` from the start (SEEK_SET, 0), the current
 * position (SEEK_CUR, 1) or the end (SEEK_END, 2), as lseek does: past the
 * end is allowed (reads there return 0).  Returns the new position, or
 * LARDER_EUSAGE for a position before the start or an unknown `whence`
 * (the position is unchanged).
 */
LARDER_API int64_t larder_file_seek(larder_file *file, int64_t offset, int whence);
/* The file's size in bytes (the field's, or the sample's). */
LARDER_API uint64_t larder_file_size(const larder_file *file);
/* Close the handle.  Accepts NULL. */
LARDER_API void larder_file_close(larder_file *file);

/* ---- plans ---- */
/*
 * The sample order of an epoch: a pure function of (seed, epoch,
 * position), never of the number of ranks or loader workers, so a job can
 * resume at any step on any world size that divides the global batch.
 * docs/plan.md specifies it bit for bit.
 *
 * Global step t owns positions [t*G, (t+1)*G) of the epoch's order for
 * global batch G.  Rank r of W takes [t*G + r*G/W, t*G + (r+1)*G/W).
 * Loader worker w of K takes the rank's steps start_step + w,
 * start_step + w + K, ...  Every rank gets the same number of steps.
 */
typedef struct larder_plan larder_plan;

enum larder_plan_mode {
    LARDER_PLAN_GLOBAL = 0,   /* one keyed permutation of every sample (default) */
    LARDER_PLAN_LOCALITY = 1, /* shuffle shards, then samples within windows of shards */
    LARDER_PLAN_NONE = 2      /* index order, for evaluation */
};

#define LARDER_PLAN_OPTIONS_VERSION 1
typedef struct larder_plan_options {
    int version;           /* LARDER_PLAN_OPTIONS_VERSION */
    int mode;              /* enum larder_plan_mode */
    uint64_t seed;         /* the order's key, with the epoch */
    uint64_t epoch;        /* see also larder_plan_set_epoch() */
    uint64_t global_batch; /* G, samples per global step over all ranks; 0 means 1 */
    uint32_t world;        /* W, ranks; must divide G; 0 means 1 */
    uint32_t rank;         /* this rank, < W */
    uint32_t workers;      /* K, loader workers of this rank; 0 means 1 */
    uint32_t worker;       /* this worker, < K */
    uint64_t start_step;   /* first step of this pass (resume point); workers split from it */
    /* 0: drop the last partial global batch; nonzero: complete it with the
     * epoch's first samples (position p >= n reads position p mod n). */
    int pad;
    /* Locality mode: shards per window; 0 means 8. */
    uint32_t locality_window;
    /* Deny-list file (a path or URL; format in docs/plan.md), or NULL for
     * none.  larder_plan_default_deny() finds the customary one. */
    const char *deny_path;
    /* More denied sample ids, any order, duplicates allowed; may be NULL. */
    const uint64_t *deny_ids;
    size_t num_deny_ids;
} larder_plan_options;

/*
 * Build the plan of one epoch over `dataset`.  The plan does not keep
 * the dataset: it may be closed afterwards.  Global and none modes take
 * O(d) memory for d denied samples; locality mode reads every sample's
 * shard once and keeps 12 bytes per sample.  LARDER_EUSAGE for
 * inconsistent options (W not dividing G, rank >= W, ...); a deny-list
 * entry that names no sample gives LARDER_ENOTFOUND with the file and
 * line in larder_errmsg().
 */
LARDER_API int larder_plan_create(larder_plan **out, const larder_dataset *dataset,
                                  const larder_plan_options *options);
LARDER_API void larder_plan_destroy(larder_plan *plan);

/*
 * Switch the plan to another epoch in O(shards) time, keeping every other
 * option.  Not safe against concurrent calls on the same plan; the other
 * plan functions are (they only read).
 */
LARDER_API int larder_plan_set_epoch(larder_plan *plan, uint64_t epoch);

typedef struct larder_plan_info {
    uint64_t num_samples;  /* n: samples in every epoch (the dataset's minus denied) */
    uint64_t num_denied;   /* distinct denied samples */
    uint64_t steps;        /* global steps per epoch: n / G, rounded up with pad */
    uint64_t global_batch; /* G */
    uint64_t local_batch;  /* G / W: ids per larder_plan_batch() */
    uint64_t padded;       /* positions of the last step filled by padding */
    uint64_t dropped;      /* samples left out by dropping the last partial batch */
    uint64_t epoch;        /* the current epoch */
} larder_plan_info;

LARDER_API int larder_plan_info_get(const larder_plan *plan, larder_plan_info *info);
/* Global steps per epoch (the same for every rank and worker). */
LARDER_API uint64_t larder_plan_steps(const larder_plan *plan);

/*
 * This rank's slice of global step `step`: G/W sample ids into
 * ids[0..capacity).  Returns G/W, 0 when step is at or past the end of
 * the epoch, or LARDER_ETOOSMALL when capacity < G/W (nothing written).
 */
LARDER_API int64_t larder_plan_batch(const larder_plan *plan, uint64_t step, uint64_t *ids,
                                     size_t capacity);
/*
 * The i-th step (i = 0, 1, ...) this worker handles:
 * start_step + worker + i * workers, or LARDER_ENOTFOUND once that is
 * past the end of the epoch.
 */
LARDER_API int64_t larder_plan_worker_step(const larder_plan *plan, uint64_t i);
/*
 * The sample id at `position` of the epoch's order: position < n, or
 * with pad any position of the last step (p >= n reads p mod n).
 * LARDER_ENOTFOUND past that.
 */
LARDER_API int64_t larder_plan_sample_at(const larder_plan *plan, uint64_t position);
/* The position (< n) of sample `id`, or LARDER_ENOTFOUND when it is
 * denied or past the end of the dataset. */
LARDER_API int64_t larder_plan_position_of(const larder_plan *plan, uint64_t id);

/*
 * The customary deny-list of the index at `index_url`: INDEX.deny in the
 * same directory (for index.larder, index.larder.deny), local indexes
 * only.  Writes its path into path[0..capacity) and returns 1 when that
 * file exists, 0 when it does not (or the index is remote), or
 * LARDER_ETOOSMALL.
 */
LARDER_API int larder_plan_default_deny(const char *index_url, char *path, size_t capacity);
/* ---- end of plans ---- */

/* ---- prefetch ------------------------------------------------------------ */

/*
 * Staging ahead of a reader.  The reader registers its plan once; a
 * thread then keeps the samples of the reader's next window_steps steps
 * (its own steps: larder_plan_worker_step order) staged in the node
 * cache, at a priority below the reader's own reads.  The reader only
 * tells it how many steps it has consumed.  Needs a cache.
 */
typedef struct larder_prefetch larder_prefetch;

#define LARDER_PREFETCH_OPTIONS_VERSION 2
typedef struct larder_prefetch_options {
    int version;           /* LARDER_PREFETCH_OPTIONS_VERSION (1: without start_after) */
    uint64_t window_steps; /* the reader's steps to keep staged ahead; 0: 8 (with a cache
                            * capacity, at most what a share of it holds: docs/cache.md) */
    int max_inflight;      /* fills queued or running at once; 0: the dataset's max_inflight */
    /* Stage nothing until the reader has consumed this many steps.  The
     * plan is registered with the node cache at once (its eviction by next
     * use counts this reader from the start), so a reader can start the
     * prefetcher with its first step without it competing with that step. */
    uint64_t start_after;
} larder_prefetch_options;

/* Start prefetching `plan` (which must outlive the prefetcher) for `dataset`. */
LARDER_API int larder_prefetch_start(larder_prefetch **out, larder_dataset *dataset,
                                     const larder_plan *plan,
                                     const larder_prefetch_options *options);
/* The reader has consumed `consumed` of its steps (an atomic store and a wake-up). */
LARDER_API void larder_prefetch_advance(larder_prefetch *prefetch, uint64_t consumed);
/* Samples fetched ahead so far, and fetches that failed (the reader meets those errors). */
LARDER_API int larder_prefetch_stats_get(larder_prefetch *prefetch, uint64_t *fills,
                                         uint64_t *failures);
/* Stop, waiting for fetches in flight (NULL-safe).  Call before closing the dataset. */
LARDER_API void larder_prefetch_stop(larder_prefetch *prefetch);

/* ---- hints --------------------------------------------------------------- */

/*
 * Telling the node daemons what will be read (docs/protocol.md, "Hints";
 * `larder hint`).  A hot hint has the daemon at `socket` stage the
 * dataset's samples (those named by key, or all) in its node cache in the
 * background, below every reader's priority, and pin them against
 * eviction for ttl_ms; with replicas or all_nodes, other members do the
 * same, each copying from the shard's owner node, so that the origin
 * serves each byte once for the cluster.  A replicate hint has the named
 * members (targets) do it.  Pins live in the node cache's shared state and
 * end with their TTL; pinned bytes count against the cache's capacity, and
 * a hint larger than what pins may hold pins what fits (result->partial).
 */
#define LARDER_HINT_OPTIONS_VERSION 2 /* 2 added `name`; 1 is still taken */
enum larder_hint_kind {
    LARDER_HINT_HOT = 1,       /* stage and pin here (and on replicas / all nodes) */
    LARDER_HINT_REPLICATE = 2, /* stage and pin on the members named by targets */
};
typedef struct larder_hint_options {
    int version;             /* LARDER_HINT_OPTIONS_VERSION */
    int kind;                /* enum larder_hint_kind */
    const char *index;       /* the index's URL or path (made absolute); NULL: name */
    const char *const *keys; /* hot: the samples to stage, by key; NULL: all of them */
    size_t num_keys;
    uint64_t ttl_ms;     /* how long the pins hold; 0: 600000 (10 minutes) */
    uint32_t replicas;   /* hot: nodes staging it, this one included; 0: this one */
    int all_nodes;       /* hot: every member of the cluster */
    const char *targets; /* replicate: members, "host:port,host:port" */
    int wait;            /* return when the staging is done, not when it is accepted */
    int timeout_ms;      /* with wait: the longest wait (0: one hour) */
    /* version 2: instead of index, a name published with larder_publish;
     * every daemon concerned resolves it to the index it reads the
     * publication through (its producer's copy, fetched from the producer
     * or the written-through origin), waiting up to 30 s for a name it is
     * still learning.  NULL: index. */
    const char *name;
} larder_hint_options;

typedef struct larder_hint_result {
    uint32_t nodes;        /* nodes that took the hint */
    uint32_t failed;       /* nodes that did not (down, refused) */
    int done;              /* staging finished on every node that took it */
    int partial;           /* some node pinned less than asked (its capacity) */
    uint64_t samples;      /* samples hinted */
    uint64_t bytes;        /* bytes of those samples, one copy */
    uint64_t pinned_bytes; /* pinned, summed over the nodes */
    uint64_t staged_bytes; /* staged so far, summed over the nodes */
} larder_hint_result;

/*
 * Send a hint to the node daemon at `socket` (NULL: LARDER_SOCKET).  Keys
 * are sent in batches of at most 1024 per frame; *result (may be NULL)
 * sums the answers.  0, or a negative code with a message (an unknown
 * key: LARDER_ENOTFOUND naming it; a name no daemon knows: LARDER_ENOTFOUND;
 * a daemon that may not open the index for this user: LARDER_EDENIED).
 */
LARDER_API int larder_hint(const char *socket, const larder_hint_options *options,
                           larder_hint_result *result);
/*
 * What the daemon at `socket` has pinned, as JSON text ({"hints": [{...}]},
 * docs/protocol.md) written NUL-terminated into buf[0..capacity).  The
 * text's length, or LARDER_ETOOSMALL, or a negative code.
 */
LARDER_API int64_t larder_hint_list(const char *socket, char *buf, size_t capacity);
/* ---- end of hints ---- */

/* ---- names ---------------------------------------------------------------- */
/*
 * Publish and consume (docs/protocol.md, "Names"): the node that wrote a
 * directory (a checkpoint) publishes it under a name through its node
 * daemon, which then owns every byte of it; any node resolves the name
 * through its own daemon and reads the files through the peers.  A name
 * is 1 to 128 bytes of letters, digits and "._-+=@:/", '/' separating
 * non-empty components other than "." and "..".  `socket` is the node
 * daemon's Unix socket; NULL takes LARDER_SOCKET.
 */
typedef struct larder_publication {
    char name[129];
    char dataset_id[33]; /* 32 hex digits, as larder_dataset_info's */
    char producer[257];  /* the producer daemon's member name (host:port), or "local" */
    char index[4097];    /* the index to open on this node (a path or URL) */
    char origin[4097];   /* the written-through index, or "" */
} larder_publication;

#define LARDER_PUBLISH_OPTIONS_VERSION 2 /* 2 added `replace`; 1 is still taken */
typedef struct larder_publish_options {
    int version; /* LARDER_PUBLISH_OPTIONS_VERSION */
    /* an index of the directory's files already made (it must name them
     * relative to its own directory); NULL: DIR/index.larder, made now
     * with larder_index_files */
    const char *index;
    /* a directory on a shared file system (a path or file:// URL; http and
     * s3 are not supported): the files and then the index are copied
     * there in the same layout, each synced, before the name is published,
     * so that readers fall back to it when the producer is gone; NULL: none */
    const char *write_through;
    /* version 2: nonzero: `name` may be published already (on any node):
     * this publication replaces it for every open (and RESOLVE) from now
     * on, on every node, one generation up; readers that opened the one
     * before keep reading its bytes (another dataset, checked against its
     * own index), so its files must stay in place: publish each version
     * from a directory of its own */
    int replace;
} larder_publish_options;

/*
 * Publish the files under `dir` as `name` through this node's daemon
 * (which must be allowed to open the index, as for any OPEN).  On
 * success, 0 and *result (may be NULL) says what was published; a name
 * already published on that node is -EEXIST (unless options->replace).
 */
LARDER_API int larder_publish(const char *socket, const char *dir, const char *name,
                              const larder_publish_options *options, larder_publication *result);

/*
 * Where the publication `name` is, through this node's daemon, waiting up
 * to timeout_ms (at most an hour) for a name not yet published:
 * result->index is what to open here (larder_open) to read its files
 * (keys: their paths relative to the published directory).  0, or
 * LARDER_ENOTFOUND when no such name was published in time.
 */
LARDER_API int larder_resolve(const char *socket, const char *name, int timeout_ms,
                              larder_publication *result);

/*
 * The names this node's daemon knows, as JSON text
 * ({"names": [{"name", "dataset_id", "producer", "index", "origin"}, ...]})
 * into json[0..capacity) with a NUL: its length, or LARDER_ETOOSMALL.
 */
LARDER_API int larder_names_list(const char *socket, char *json, size_t capacity);

#ifdef __cplusplus
}
#endif
#endif /* LARDER_H */
