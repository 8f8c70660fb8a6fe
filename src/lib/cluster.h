/*
 * cluster.h - who the nodes are and which one owns a shard.
 *
 * Members come from a list ("host:port,..."), a hostfile (one a line), or
 * Slurm's environment (SLURM_JOB_NODELIST, a compressed hostlist such as
 * "gpu[01-04,07],login1").  Each chunk (LARDER__OWNER_CHUNK bytes) of each
 * shard of each dataset has one owner, chosen by rendezvous
 * (highest-random-weight) hashing over the members: every node computes
 * the same owner with no metadata service, adding or removing a node moves
 * only the chunks it gains or had, and a large shard is spread over every
 * member instead of one.  docs/protocol.md ("Ownership") gives the formula
 * so that another implementation can compute the same owners.  The parsers
 * do no I/O.
 */
#ifndef LARDER_CLUSTER_H
#define LARDER_CLUSTER_H

#include "common.h"

#define LARDER__MAX_MEMBERS 65536
#define LARDER__DEFAULT_PORT 7461
/*
 * Bytes of a shard one owner serves (the last chunk of a shard may be
 * shorter; a shard smaller than this is one chunk).  Every daemon of a
 * cluster must use the same value: a peer says its value in HELLO and a
 * daemon refuses a peer whose value differs (docs/protocol.md).
 */
#define LARDER__OWNER_CHUNK (UINT64_C(4) << 20)

struct larder__members {
    size_t count;
    char **names;      /* "host:port", owned */
    uint64_t *weights; /* per-member hash seeds, derived from the names */
};

/* A zeroed struct is an empty list, owned by the caller: _clear frees what it
 * holds and leaves it empty again (not _free: the struct is not freed). */
LARDER__HIDDEN void larder__members_clear(struct larder__members *members);
/* Add "host" or "host:port" (default_port when absent); duplicates are ignored. */
LARDER__HIDDEN int larder__members_add(struct larder__members *members, const char *name,
                                       size_t length, int default_port);
/* "a:1,b,c:3" (commas or whitespace). */
LARDER__HIDDEN int larder__members_parse_list(struct larder__members *members, const char *text,
                                              int default_port);
/* One member a line; '#' starts a comment; blank lines ignored.  Errors name the line. */
LARDER__HIDDEN int larder__members_parse_hostfile(struct larder__members *members, const char *text,
                                                  size_t length, int default_port);
/* A Slurm hostlist ("n[1-3,5],m[01-02]-ib,x"), expanded in order. */
LARDER__HIDDEN int larder__members_parse_slurm(struct larder__members *members,
                                               const char *hostlist, int default_port);

/* The owner (an index into members) of shard `shard` of the dataset `id`
 * as a whole (before striping; kept for tools that place whole shards). */
LARDER__HIDDEN size_t larder__owner(const struct larder__members *members, uint64_t id_low,
                                    uint64_t id_high, uint32_t shard);
/*
 * The owner (an index into members; 0 when there are none) of chunk
 * `chunk` (bytes [chunk * LARDER__OWNER_CHUNK, (chunk + 1) * ...)) of
 * shard `shard` of the dataset `id`: the member whose
 * XXH3_64bits_withSeed(key, 32, XXH3_64bits(name)) is highest, key being
 * id_low, id_high, shard, chunk as four little-endian u64s; a tie goes to
 * the smaller name (strcmp).
 */
LARDER__HIDDEN size_t larder__owner_chunk(const struct larder__members *members, uint64_t id_low,
                                          uint64_t id_high, uint32_t shard, uint64_t chunk);

#endif
