/*
 * test_mount_tree.c - the name tree `larder mount` shows (src/mount/tree.c)
 * and the listing-only indexes it mounts plain directories with
 * (larder_index_files' listing_only): the paths and sizes expected are
 * written here from the files the test makes, the .npy headers are
 * checked with the .npy parser against the shapes the test gave, and
 * hostile keys are left out with the count.
 */
#include "index.h"
#include "mount.h"
#include "npy.h"
#include "test.h"
#include "tree.h"

#include "larder_pack.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

static larder_dataset *open_index(const char *path)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = ""};
    larder_dataset *d = NULL;
    int rc = larder_open(&d, path, &o);
    if (rc < 0) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    return d;
}

/* Open our own listing-only index, as the mount does (allow_unchecked). */
static larder_dataset *open_listed(const char *path, const char *cache_dir, int verify)
{
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION,
                             .verify_checksums = verify,
                             .cache_dir = cache_dir,
                             .allow_unchecked = 1};
    larder_dataset *d = NULL;
    int rc = larder_open(&d, path, &o);
    if (rc < 0) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    return d;
}

static const struct larder__mount_node *file_at(const struct larder__mount_tree *t,
                                                const char *path)
{
    uint64_t ino = larder__mount_tree_resolve(t, path);
    const struct larder__mount_node *n = larder__mount_tree_node(t, ino);
    if (!n) fprintf(stderr, "    no node for %s\n", path);
    CHECK(n != NULL);
    return n;
}

TEST(mount_tree_of_a_packed_directory)
{
    test_write_file(test_path("src/a/one.jpg"), "0123456789", 10);
    test_write_file(test_path("src/a/one.cls"), "7\n", 2);
    test_write_file(test_path("src/two.txt"), "hello", 5);
    const char *sources[] = {test_path("src")};
    larder_pack_options po = {.version = LARDER_PACK_OPTIONS_VERSION};
    char out[512];
    snprintf(out, sizeof out, "%s", test_path("packed"));
    CHECK_EQ(larder_pack(sources, 1, out, &po, NULL), 0);
    larder_dataset *d = open_index(test_path("packed/index.larder"));
    struct larder__mount_tree *t;
    uint64_t skipped = 99;
    CHECK_EQ(larder__mount_tree_new(&t, d, NULL, NULL, &skipped), 0);
    CHECK_EQ(skipped, 0);
    uint64_t nodes, files, bytes;
    larder__mount_tree_counts(t, &nodes, &files, &bytes);
    CHECK_EQ(files, 3);
    CHECK_EQ(nodes, 5); /* the root, a/, and three files */
    CHECK_EQ(bytes, 17);
    CHECK_EQ(file_at(t, "a/one.jpg")->size, 10);
    CHECK_EQ(file_at(t, "a/one.cls")->size, 2);
    CHECK_EQ(file_at(t, "two.txt")->size, 5);
    CHECK(file_at(t, "a")->directory);
    CHECK(!file_at(t, "two.txt")->directory);
    CHECK_EQ(file_at(t, "a/one.jpg")->header_length, 0);
    CHECK_EQ(larder__mount_tree_resolve(t, "a/one"), 0);
    CHECK_EQ(larder__mount_tree_resolve(t, "two.txt/x"), 0);
    CHECK_EQ(larder__mount_tree_lookup(t, LARDER__MOUNT_ROOT, "a", 1),
             larder__mount_tree_resolve(t, "a"));
    /* the root's children are what readdir lists */
    const struct larder__mount_node *root = larder__mount_tree_node(t, LARDER__MOUNT_ROOT);
    CHECK_EQ(root->num_children, 2);
    CHECK(larder__mount_tree_node(t, 0) == NULL);
    CHECK(larder__mount_tree_node(t, nodes + 1) == NULL);
    larder__mount_tree_free(t);
    larder_close(d);
}

/* An index of one flat shard with samples named by `keys`, each `length` bytes. */
static void write_index(const char *path, const char *const *keys, size_t count,
                        const struct larder__field *field)
{
    struct larder__index_builder *b;
    CHECK_EQ(larder__index_builder_new(&b, 0), 0);
    CHECK_EQ(larder__index_builder_add_shard(b, "shard.bin", LARDER_FORMAT_FLAT), 0);
    uint64_t length = field ? field->length : 4;
    larder__index_builder_set_shard(b, 0, length * count, 0);
    for (size_t i = 0; i < count; i++)
        CHECK_EQ(larder__index_builder_add_sample(b, 0, i * length, length, 0, keys[i],
                                                  strlen(keys[i]), field, field ? 1 : 0),
                 (int64_t)i);
    CHECK_EQ(larder__index_builder_write(b, path, NULL), 0);
    larder__index_builder_free(b);
}

static int skipped_calls;
static void count_skip(void *userdata, const char *path, const char *why)
{
    (void)userdata, (void)path;
    CHECK(why && why[0]);
    skipped_calls++;
}

TEST(mount_tree_leaves_out_hostile_and_colliding_names)
{
    char long_name[300];
    memset(long_name, 'x', 256);
    long_name[256] = '\0';
    const char *keys[] = {"ok",   "../up",   "a//b", ".",   "d/..", "/abs",
                          "dir/", long_name, "f",    "f/g", "h/i",  "h"};
    struct larder__field field = {.name = "bin", .length = 4};
    write_index(test_path("index.larder"), keys, sizeof keys / sizeof *keys, &field);
    test_write_file(test_path("shard.bin"), "", 0);
    larder_dataset *d = open_index(test_path("index.larder"));
    struct larder__mount_tree *t;
    uint64_t skipped = 0;
    skipped_calls = 0;
    CHECK_EQ(larder__mount_tree_new(&t, d, count_skip, NULL, &skipped), 0);
    /* left out: a '..' component (../up), empty ones (a//b, /abs) and one over
     * 255 bytes; "." + ".bin" and "d/.." + ".bin" are names like any other */
    CHECK_EQ(skipped, 4);
    CHECK_EQ(skipped_calls, 4);
    CHECK_EQ(larder__mount_tree_resolve(t, "../up.bin"), 0);
    CHECK(larder__mount_tree_resolve(t, "ok.bin") != 0);
    CHECK(larder__mount_tree_resolve(t, "..bin") != 0);    /* key "." */
    CHECK(larder__mount_tree_resolve(t, "d/...bin") != 0); /* key "d/.." */
    CHECK(larder__mount_tree_resolve(t, "dir/.bin") != 0); /* key "dir/" */
    CHECK(larder__mount_tree_resolve(t, "f.bin") != 0);
    CHECK(larder__mount_tree_resolve(t, "f/g.bin") != 0);
    CHECK(larder__mount_tree_resolve(t, "h/i.bin") != 0);
    CHECK(larder__mount_tree_resolve(t, "h.bin") != 0);
    larder__mount_tree_free(t);
    larder_close(d);
    /* files of a --files index (one "data" field spanning each sample): a
     * file where a directory is, and a directory where a file is, collide */
    const char *clash[] = {"x", "x/y", "p/q", "p"};
    struct larder__field data = {.name = "data", .length = 4};
    write_index(test_path("clash.larder"), clash, 4, &data);
    d = open_index(test_path("clash.larder"));
    CHECK_EQ(larder__mount_tree_new(&t, d, NULL, NULL, &skipped), 0);
    CHECK_EQ(skipped, 2);
    CHECK(!file_at(t, "x")->directory);
    CHECK(file_at(t, "p")->directory);
    CHECK(!file_at(t, "p/q")->directory);
    CHECK_EQ(larder__mount_tree_resolve(t, "x/y"), 0);
    larder__mount_tree_free(t);
    larder_close(d);
}

TEST(mount_tree_npy_header_of_array_fields)
{
    const char *keys[] = {"s0", "s1"};
    struct larder__field field = {.name = "graph",
                                  .length = 3 * 4 * 4,
                                  .dtype = LARDER_DTYPE_F32,
                                  .ndim = 2,
                                  .shape = {3, 4}};
    write_index(test_path("index.larder"), keys, 2, &field);
    test_write_file(test_path("shard.bin"), "", 0);
    larder_dataset *d = open_index(test_path("index.larder"));
    struct larder__mount_tree *t;
    int rc = larder__mount_tree_new(&t, d, NULL, NULL, NULL);
    if (rc < 0) fprintf(stderr, "    %s\n", larder_errmsg());
    CHECK_EQ(rc, 0);
    const struct larder__mount_node *n = file_at(t, "s1.graph.npy");
    CHECK(n->header_length > 0 && n->header_length % 64 == 0);
    CHECK_EQ(n->size, n->header_length + 48);
    uint8_t header[LARDER__NPY_MAX_HEADER];
    CHECK_EQ(larder__mount_npy_header(t, n, header, sizeof header), (int)n->header_length);
    struct larder__npy npy;
    CHECK_EQ(larder__npy_parse(header, n->header_length, &npy), 0);
    CHECK_EQ(npy.dtype, LARDER_DTYPE_F32);
    CHECK_EQ(npy.ndim, 2);
    CHECK_EQ(npy.shape[0], 3);
    CHECK_EQ(npy.shape[1], 4);
    CHECK_EQ(npy.data_offset, n->header_length);
    CHECK_EQ(npy.data_length, 48);
    CHECK(memcmp(header, "\x93NUMPY\x01\x00", 8) == 0);
    larder__mount_tree_free(t);
    larder_close(d);
    /* a shape that does not match the length: the index itself is refused,
     * so no .npy header ever describes other bytes than the field's */
    struct larder__field wrong = field;
    wrong.length = 47;
    write_index(test_path("wrong.larder"), keys, 2, &wrong);
    d = open_index(test_path("wrong.larder"));
    t = (struct larder__mount_tree *)1;
    CHECK_EQ(larder__mount_tree_new(&t, d, NULL, NULL, NULL), LARDER_EBADINDEX);
    CHECK(t == NULL);
    larder_close(d);
}

TEST(mount_listing_only_index_reads_files_unchecked)
{
    test_write_file(test_path("tree/a.bin"), "abcdefgh", 8);
    test_write_file(test_path("tree/sub/b.txt"), "0123456789ab", 12);
    larder_index_files_options o = {.struct_size = sizeof o, .listing_only = 1};
    CHECK_EQ(larder_index_files(test_path("tree"), test_path("listed.larder"), &o, NULL), 0);
    larder_dataset *d = open_listed(test_path("listed.larder"), "", 0);
    larder_dataset_info info;
    CHECK_EQ(larder_dataset_info_get(d, &info), 0);
    CHECK_EQ(info.version, 3);
    CHECK_EQ(info.num_samples, 2);
    int64_t id = larder_find_key(d, "sub/b.txt");
    CHECK(id >= 0);
    larder_sample_info s;
    CHECK_EQ(larder_sample_info_get(d, (uint64_t)id, &s), 0);
    CHECK_EQ(s.length, 12);
    CHECK(s.checksum != XXH3_64bits("0123456789ab", 12)); /* a stamp, not the bytes' */
    /* no checksum to hold the bytes to: what the file holds now is read,
     * with verification asked for, from the origin and through a cache */
    test_write_file(test_path("tree/sub/b.txt"), "ZYXWVUTSRQPO", 12);
    char buf[16];
    CHECK_EQ(larder_read_sample(d, (uint64_t)id, buf, sizeof buf), 12);
    CHECK(memcmp(buf, "ZYXWVUTSRQPO", 12) == 0);
    larder_close(d);
    d = open_listed(test_path("listed.larder"), test_path("cache"), 1);
    CHECK_EQ(larder_read_sample(d, (uint64_t)id, buf, sizeof buf), 12);
    CHECK(memcmp(buf, "ZYXWVUTSRQPO", 12) == 0);
    CHECK_EQ(larder_read_sample(d, (uint64_t)id, buf, sizeof buf), 12); /* from the cache */
    CHECK(memcmp(buf, "ZYXWVUTSRQPO", 12) == 0);
    /* nothing to verify, said so rather than every sample called bad */
    CHECK_EQ(larder_verify(d, NULL, NULL, NULL), LARDER_EUNSUPPORTED);
    CHECK(strstr(larder_errmsg(), "listing") != NULL);
    larder_close(d);
    /* the same tree indexed with checksums is checked: a changed file fails */
    o.listing_only = 0;
    CHECK_EQ(larder_index_files(test_path("tree"), test_path("summed.larder"), &o, NULL), 0);
    test_write_file(test_path("tree/sub/b.txt"), "------------", 12);
    d = open_index(test_path("summed.larder"));
    larder_close(d);
    larder_open_options vo = {
        .version = LARDER_OPEN_OPTIONS_VERSION, .verify_checksums = 1, .cache_dir = ""};
    CHECK_EQ(larder_open(&d, test_path("summed.larder"), &vo), 0);
    id = larder_find_key(d, "sub/b.txt");
    CHECK_EQ(larder_read_sample(d, (uint64_t)id, buf, sizeof buf), LARDER_ECHECKSUM);
    larder_close(d);
    /* names from a network list have no sizes: refused, not guessed */
    test_write_file(test_path("names"), "a.bin\n", 6);
    o.listing_only = 1;
    o.files_from = test_path("names");
    CHECK_EQ(larder_index_files("http://127.0.0.1:9/", test_path("net.larder"), &o, NULL),
             LARDER_EUNSUPPORTED);
}

/* Flag 4 turns off every checksum check: an index that merely carries it
 * is refused unless the opener asked for it (the mount, for its own). */
TEST(unchecked_index_refused_without_the_openers_consent)
{
    test_write_file(test_path("tree/a.bin"), "abcdefgh", 8);
    larder_index_files_options io = {.struct_size = sizeof io, .listing_only = 1};
    CHECK_EQ(larder_index_files(test_path("tree"), test_path("listed.larder"), &io, NULL), 0);
    larder_dataset *d = (larder_dataset *)1;
    larder_open_options o = {.version = LARDER_OPEN_OPTIONS_VERSION, .cache_dir = ""};
    CHECK_EQ(larder_open(&d, test_path("listed.larder"), &o), LARDER_EBADINDEX);
    CHECK(strstr(larder_errmsg(), "unchecked") != NULL);
    CHECK_EQ(larder_open(&d, test_path("listed.larder"), NULL), LARDER_EBADINDEX);
    o.version = 2; /* a caller built before allow_unchecked: refused too */
    o.allow_unchecked = 1;
    CHECK_EQ(larder_open(&d, test_path("listed.larder"), &o), LARDER_EBADINDEX);
    o.version = LARDER_OPEN_OPTIONS_VERSION;
    CHECK_EQ(larder_open(&d, test_path("listed.larder"), &o), 0);
    larder_close(d);
    /* an index with checksums opens as before, with or without the opt-in */
    io.listing_only = 0;
    CHECK_EQ(larder_index_files(test_path("tree"), test_path("summed.larder"), &io, NULL), 0);
    d = open_index(test_path("summed.larder"));
    larder_close(d);
    CHECK_EQ(larder_open(&d, test_path("summed.larder"), &o), 0);
    larder_close(d);
}

/* A listing-only index records each file's version (times, inode): a
 * file rewritten in place at the same size, even with its modification
 * time put back, gives another dataset id, so another cache; an
 * unchanged tree gives the same one. */
TEST(listing_only_index_id_follows_file_versions)
{
    test_write_file(test_path("tree/a.bin"), "abcdefgh", 8);
    test_write_file(test_path("tree/b.bin"), "01234567", 8);
    larder_index_files_options o = {.struct_size = sizeof o, .listing_only = 1};
    char ids[4][33];
    char paths[4][PATH_MAX];
    for (int i = 0; i < 4; i++)
        snprintf(paths[i], sizeof paths[i], "%s/l%d.larder", test_dir(), i);
    struct stat before;
    CHECK_EQ(stat(test_path("tree/a.bin"), &before), 0);
    for (int i = 0; i < 4; i++) {
        if (i == 2) { /* in place, same size, same inode */
            FILE *f = fopen(test_path("tree/a.bin"), "r+");
            CHECK(f != NULL);
            CHECK_EQ(fwrite("ABCDEFGH", 1, 8, f), 8);
            CHECK_EQ(fclose(f), 0);
        }
        if (i == 3) { /* and its modification time put back */
            struct timespec times[2] = {before.st_atim, before.st_mtim};
            CHECK_EQ(utimensat(AT_FDCWD, test_path("tree/a.bin"), times, 0), 0);
            struct stat now;
            CHECK_EQ(stat(test_path("tree/a.bin"), &now), 0);
            CHECK_EQ(now.st_ino, before.st_ino);
            CHECK_EQ(now.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
        }
        CHECK_EQ(larder_index_files(test_path("tree"), paths[i], &o, NULL), 0);
        larder_dataset *d = open_listed(paths[i], "", 0);
        larder_dataset_info info;
        CHECK_EQ(larder_dataset_info_get(d, &info), 0);
        memcpy(ids[i], info.dataset_id, sizeof ids[i]);
        larder_close(d);
    }
    CHECK(strcmp(ids[0], ids[1]) == 0); /* nothing changed */
    CHECK(strcmp(ids[1], ids[2]) != 0); /* rewritten */
    CHECK(strcmp(ids[2], ids[3]) != 0); /* its mtime put back: its change time moved */
}

/* What a failed read answers: ENOMEM and EINTR as they are, the rest
 * (larder's own codes, checksum failures, other errnos) EIO. */
TEST(mount_errno_of_a_failure)
{
    CHECK_EQ(larder__mount_errno(-ENOMEM), ENOMEM);
    CHECK_EQ(larder__mount_errno(-EINTR), EINTR);
    CHECK_EQ(larder__mount_errno(-ENOENT), EIO);
    CHECK_EQ(larder__mount_errno(LARDER_ECHECKSUM), EIO);
    CHECK_EQ(larder__mount_errno(LARDER_EBADINDEX), EIO);
}

/* The control file's and the stats file's names at the root are the
 * mount's own: an index's file or directory of either name there would be
 * shadowed (listed, but looked up as the mount's file), so it is left out
 * and counted; deeper down they are names like any other. */
TEST(mount_tree_leaves_out_the_control_files_name_at_the_root)
{
    const char *keys[] = {"ok",
                          ".larder-order",
                          ".larder-order/x",
                          "sub/.larder-order",
                          ".larder-stats",
                          "sub/.larder-stats"};
    struct larder__field data = {.name = "data", .length = 4};
    write_index(test_path("control.larder"), keys, 6, &data);
    test_write_file(test_path("shard.bin"), "", 0);
    larder_dataset *d = open_index(test_path("control.larder"));
    struct larder__mount_tree *t;
    uint64_t skipped = 0;
    skipped_calls = 0;
    CHECK_EQ(larder__mount_tree_new(&t, d, count_skip, NULL, &skipped), 0);
    CHECK_EQ(skipped, 3);
    CHECK_EQ(skipped_calls, 3);
    CHECK_EQ(larder__mount_tree_resolve(t, ".larder-order"), 0);
    CHECK_EQ(larder__mount_tree_resolve(t, ".larder-order/x"), 0);
    CHECK_EQ(larder__mount_tree_resolve(t, ".larder-stats"), 0);
    CHECK(!file_at(t, "sub/.larder-order")->directory);
    CHECK(!file_at(t, "sub/.larder-stats")->directory);
    CHECK(!file_at(t, "ok")->directory);
    uint64_t nodes, files, bytes;
    larder__mount_tree_counts(t, &nodes, &files, &bytes);
    CHECK_EQ(files, 3);
    larder__mount_tree_free(t);
    larder_close(d);
}
