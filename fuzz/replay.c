/*
 * replay.c - run the fuzz targets over their saved corpora, so every
 * input a fuzzer once found interesting is checked in the normal test
 * run (under the sanitizer build in CI).
 *
 *   larder_fuzz_replay DIR     DIR holds index/, tar/, wire/, open/ and daemon/ corpora
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

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/index", argv[1]);
    int a = replay(dir, larder_fuzz_index);
    snprintf(dir, sizeof dir, "%s/tar", argv[1]);
    int b = replay(dir, larder_fuzz_tar);
    snprintf(dir, sizeof dir, "%s/wire", argv[1]);
    int c = replay(dir, larder_fuzz_wire);
    snprintf(dir, sizeof dir, "%s/open", argv[1]);
    int o = replay(dir, larder_fuzz_open);
    snprintf(dir, sizeof dir, "%s/daemon", argv[1]);
    int d = replay(dir, larder_fuzz_daemon);
    if (a < 0 || b < 0 || c < 0 || o < 0 || d < 0) return 1;
    printf("replayed %d index, %d tar, %d wire, %d open and %d daemon inputs\n", a, b, c, o, d);
    return 0;
}
