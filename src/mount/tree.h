/*
 * tree.h - the name tree `larder mount` shows: every file and directory
 * of a mounted index, built once at mount time from the index alone
 * (keys, fields, sizes), so that lookups, stat and readdir never reach
 * the origin.  Pure: no FUSE, no I/O beyond the dataset's in-memory index;
 * tested on its own (tests/unit/test_mount_tree.c).
 *
 * How an index's samples become files (docs/mount.md):
 *   - a sample of a `--files` index (one field spanning the whole sample,
 *     named after the key's extension, or "data"): the file KEY itself;
 *   - an array field (packed HDF5): KEY.FIELD.npy, a .npy header made
 *     here followed by the field's bytes;
 *   - any other field (a packed tree): KEY.FIELD.
 * A key's '/' make directories.  Names from the index are hostile: a path
 * with an empty, ".", ".." or over-long component, or one that collides
 * with a file or directory already placed, or that is the control file's
 * name at the root, is left out and counted (the caller logs the first
 * few).
 *
 * Node numbers are FUSE inode numbers: the root is 1, nodes never go away
 * while the tree lives, so every lookup is answered with a permanent
 * number and FORGET has nothing to do.
 */
#ifndef LARDER_MOUNT_TREE_H
#define LARDER_MOUNT_TREE_H

#include "larder.h"

/* The name of the mount's control file at its root (order.c): no file or
 * directory of the index may take it there. */
#define LARDER__MOUNT_ORDER_FILE ".larder-order"
/* The mount's read-only stats file at its root (fs.c), reserved likewise. */
#define LARDER__MOUNT_STATS_FILE ".larder-stats"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LARDER__MOUNT_ROOT 1
#define LARDER__MOUNT_NAME_MAX 255 /* bytes of one path component */

struct larder__mount_node {
    char *name;         /* the component (the root's is "") */
    uint64_t parent;    /* node number of the directory holding it (the root: itself) */
    bool directory;     /* a directory: children below; else a file */
    uint64_t *children; /* directories: node numbers, in the order they were placed */
    size_t num_children, children_capacity;
    uint64_t sample;        /* files: the sample */
    int field;              /* files: the field (larder_file_open's), -1 the whole sample */
    uint64_t size;          /* files: bytes, the .npy header included */
    uint32_t header_length; /* files: bytes of .npy header before the field's bytes, or 0 */
};

struct larder__mount_tree;

/* Why a sample's file was left out, passed to the tree's skip callback. */
typedef void (*larder__mount_skip_fn)(void *userdata, const char *path, const char *why);

/*
 * Build the tree of every sample of `dataset` (which must outlive the
 * tree: the .npy headers are made from its records on demand).  0 and
 * *out, or a negative code (-ENOMEM, or the index's own error for a
 * record that cannot be read).  Paths left out are passed to `skip` (may
 * be NULL) and counted in *skipped (may be NULL).
 */
int larder__mount_tree_new(struct larder__mount_tree **out, larder_dataset *dataset,
                           larder__mount_skip_fn skip, void *userdata, uint64_t *skipped);
void larder__mount_tree_free(struct larder__mount_tree *tree);

/* The node numbered `ino`, or NULL for a number that names none. */
const struct larder__mount_node *larder__mount_tree_node(const struct larder__mount_tree *tree,
                                                         uint64_t ino);
/* The child of directory `parent` named name[0..length), or 0. */
uint64_t larder__mount_tree_lookup(const struct larder__mount_tree *tree, uint64_t parent,
                                   const char *name, size_t length);
/* The node a '/'-separated path relative to the root names, or 0. */
uint64_t larder__mount_tree_resolve(const struct larder__mount_tree *tree, const char *path);
/* Nodes in the tree (the root included), files among them, and their bytes. */
void larder__mount_tree_counts(const struct larder__mount_tree *tree, uint64_t *nodes,
                               uint64_t *files, uint64_t *bytes);

/*
 * The .npy header of file node `node` into out[0..capacity): its length
 * (node->header_length), or a negative code.  Made from the index's
 * record of the field (dtype and shape), as numpy writes version 1.0.
 */
int larder__mount_npy_header(const struct larder__mount_tree *tree,
                             const struct larder__mount_node *node, uint8_t *out, size_t capacity);

#endif
