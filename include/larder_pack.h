/*
 * larder_pack.h - packing: turning directory trees, tar archives and
 * HDF5 files into larder shards and their index.
 *
 * Packing is a library of its own (larder_pack, which links libhdf5), so
 * that liblarder, the reader a training job loads, does not depend on
 * HDF5.  Link larder_pack and liblarder (or larder_static) to call it.
 * Indexing existing tar shards in place, larder_index_shards, needs no
 * HDF5 and stays in liblarder (larder.h), as do larder_pack_result and
 * the shard formats it shares with this header.
 */
#ifndef LARDER_PACK_API_H
#define LARDER_PACK_API_H

#include "larder.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What packing says about a single input (a file, a tar member, an HDF5
 * group) goes to the log callback (larder_set_log) as a warning
 * "SUBJECT: CAUSE", where the cause has no ": " of its own and is the
 * same text for every input it applies to, so that a host can group
 * them by cause (larder pack summarizes them).  The causes of an input
 * left out of the dataset begin with "skipped, ":
 */
#define LARDER_PACK_SKIPPED_NO_KEY "skipped, no extension (no sample key)"
#define LARDER_PACK_SKIPPED_DIRECTORY_LINK "skipped, a symbolic link to a directory (not followed)"

#define LARDER_PACK_OPTIONS_VERSION 1
typedef struct larder_pack_options {
    int version;           /* LARDER_PACK_OPTIONS_VERSION */
    int format;            /* enum larder_shard_format; 0 means tar */
    uint64_t shard_size;   /* target bytes per shard; 0 means 1 GiB */
    int shuffle;           /* nonzero: write samples in a seeded random order */
    uint64_t shuffle_seed; /* seed of that order */
    int jobs;              /* writer threads; 0 means the number of CPUs */
    uint32_t block_size;   /* block size hint stored in the index; 0: 64 KiB */
    /* HDF5 sources: one sample per group at this depth (1 = children of
     * the root), unless hdf5_rows names datasets to split along axis 0
     * (comma-separated paths). */
    int hdf5_group_depth;
    const char *hdf5_rows;
    larder_progress_fn progress; /* may be NULL; bytes written and total */
    void *progress_userdata;
} larder_pack_options;

/*
 * Pack `sources` (directories of files grouped by WebDataset keys,
 * existing tar shards, or HDF5 files) into shards and an index under
 * `outdir` (created if missing): outdir/index.larder plus shards named
 * shard-NNNNNN.tar or .bin.  `result` may be NULL.
 */
LARDER_API int larder_pack(const char *const *sources, size_t num_sources, const char *outdir,
                           const larder_pack_options *options, larder_pack_result *result);

#ifdef __cplusplus
}
#endif
#endif /* LARDER_PACK_API_H */
