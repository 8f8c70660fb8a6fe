/*
 * replay.c - run the fuzz targets over their saved corpora, so every
 * input a fuzzer once found interesting is checked in the normal test
 * run (under the sanitizer build in CI).
 *
 *   larder_fuzz_replay DIR         DIR holds index/, tar/, wire/, open/ and daemon/ corpora
 *   larder_fuzz_replay DIR/NAME    one of them, e.g. fuzz/corpus/daemon
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int larder_fuzz_index(const uint8_t *data, size_t size);
int larder_fuzz_tar(const uint8_t *data, size_t size);
int larder_fuzz_wire(const uint8_t *data, size_t size);
int larder_fuzz_open(const uint8_t *data, size_t size);
int larder_fuzz_daemon(const uint8_t *data, size_t size);
int larder_fuzz_transform(const uint8_t *data, size_t size);

static int replay(const char *dir, int (*target)(const uint8_t *, size_t))
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: cannot open corpus\n", dir);
        return -1;
    }
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
        if (data && fread(data, 1, (size_t)n, f) == (size_t)n) {
            target(data, (size_t)n);
            count++;
        }
        free(data);
        fclose(f);
    }
    closedir(d);
    return count;
}

static const struct {
    const char *name;
    int (*target)(const uint8_t *, size_t);
} targets[] = {{"index", larder_fuzz_index},   {"tar", larder_fuzz_tar},
               {"wire", larder_fuzz_wire},     {"open", larder_fuzz_open},
               {"daemon", larder_fuzz_daemon}, {"transform", larder_fuzz_transform}};

enum { NUM_TARGETS = sizeof targets / sizeof *targets };

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR | CORPUS_DIR/TARGET\n", argv[0]);
        return 2;
    }
    /* one target's corpus, named by its last component (fuzz/corpus/daemon) */
    char root[4096];
    snprintf(root, sizeof root, "%s", argv[1]);
    for (size_t n = strlen(root); n > 1 && root[n - 1] == '/'; n--)
        root[n - 1] = '\0';
    const char *slash = strrchr(root, '/');
    const char *last = slash ? slash + 1 : root;
    for (int t = 0; t < NUM_TARGETS; t++) {
        if (strcmp(last, targets[t].name) != 0) continue;
        int n = replay(root, targets[t].target);
        if (n < 0) return 1;
        printf("replayed %d %s inputs\n", n, targets[t].name);
        return 0;
    }
    int count[NUM_TARGETS];
    for (int t = 0; t < NUM_TARGETS; t++) {
        char dir[4096];
        if (snprintf(dir, sizeof dir, "%s/%s", root, targets[t].name) >= (int)sizeof dir) {
            fprintf(stderr, "%s: path too long\n", root);
            return 1;
        }
        if ((count[t] = replay(dir, targets[t].target)) < 0) return 1;
    }
    printf("replayed %d index, %d tar, %d wire, %d open and %d daemon inputs\n", count[0], count[1],
           count[2], count[3], count[4]);
    return 0;
}
