/*
 * install_reader.c - a C program as a user of an installed liblarder
 * writes it, built by tests/cli/install.sh with `pkg-config --cflags
 * --libs larder` only: opens an index, reads one field of one sample and
 * compares its bytes with a file.
 *
 * usage: install_reader INDEX KEY FIELD FILE
 * Prints the library's version; exits 0 when the bytes are the file's.
 */
#include <larder.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole of `path` in a malloc'd buffer, its size in *size; NULL on failure. */
static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *file = fopen(path, "rb");
    if (!file) return NULL;
    unsigned char *bytes = NULL;
    long length = -1;
    if (fseek(file, 0, SEEK_END) == 0 && (length = ftell(file)) >= 0 &&
        fseek(file, 0, SEEK_SET) == 0 && (bytes = malloc((size_t)length + 1)) &&
        fread(bytes, 1, (size_t)length, file) != (size_t)length) {
        free(bytes);
        bytes = NULL;
    }
    fclose(file);
    *size = (size_t)length;
    return bytes;
}

static int failed(const char *what, int64_t rc)
{
    fprintf(stderr, "install_reader: %s: %s (%s)\n", what, larder_strerror((int)rc),
            larder_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: install_reader INDEX KEY FIELD FILE\n");
        return 2;
    }
    if (strcmp(larder_version(), LARDER_VERSION_STRING) != 0) {
        fprintf(stderr, "install_reader: library %s, header %s\n", larder_version(),
                LARDER_VERSION_STRING);
        return 1;
    }
    larder_open_options options;
    memset(&options, 0, sizeof options);
    options.version = LARDER_OPEN_OPTIONS_VERSION;
    options.verify_checksums = 1;
    larder_dataset *dataset;
    int rc = larder_open(&dataset, argv[1], &options);
    if (rc < 0) return failed("open", rc);
    int status = 1;
    unsigned char *want = NULL, *got = NULL;
    int64_t id = larder_find_key(dataset, argv[2]);
    int field = id < 0 ? (int)id : larder_find_field(dataset, (uint64_t)id, argv[3]);
    larder_field_info info;
    if (id < 0 || field < 0) {
        failed("find", id < 0 ? id : field);
    } else if ((rc = larder_field_info_get(dataset, (uint64_t)id, (uint32_t)field, &info)) < 0) {
        failed("field info", rc);
    } else {
        size_t want_size = 0;
        int64_t length;
        want = read_file(argv[4], &want_size);
        got = malloc(info.length + 1);
        if (!want || !got) {
            perror(argv[4]);
        } else if ((length = larder_read_field(dataset, (uint64_t)id, (uint32_t)field, got,
                                               info.length)) < 0) {
            failed("read", length);
        } else if ((uint64_t)length != want_size || memcmp(got, want, want_size) != 0) {
            fprintf(stderr, "install_reader: %s.%s: %lld bytes, not the %zu of %s\n", argv[2],
                    argv[3], (long long)length, want_size, argv[4]);
        } else {
            printf("larder %s: %s.%s: %lld bytes, the same as %s\n", larder_version(), argv[2],
                   argv[3], (long long)length, argv[4]);
            status = 0;
        }
    }
    free(want);
    free(got);
    larder_close(dataset);
    return status;
}
