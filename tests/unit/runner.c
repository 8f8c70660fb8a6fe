/*
 * runner.c - runs the registered unit tests, each in a child process with
 * a timeout, in a scratch directory of its own.
 *
 *   larder_tests               run all
 *   larder_tests NAME...       run the named tests (substring with -k)
 *   larder_tests -l            list them
 */
#include "test.h"
#include "sys.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 1024
#define TIMEOUT_SECONDS 120

static struct {
    const char *name;
    test_fn fn;
} tests[MAX_TESTS];
static int num_tests;
static char scratch[4096];

void test_register(const char *name, test_fn fn)
{
    if (num_tests < MAX_TESTS) tests[num_tests].name = name, tests[num_tests++].fn = fn;
}

void test_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "    %s:%d: check failed: %s\n", file, line, what);
    exit(1);
}

void test_skip(const char *why)
{
    fprintf(stderr, "    skipped: %s\n", why);
    exit(77);
}

const char *test_dir(void)
{
    return scratch;
}

const char *test_path(const char *name)
{
    static char buffers[8][4096];
    static int next;
    char *b = buffers[next++ % 8];
    if (snprintf(b, 4096, "%s/%s", scratch, name) >= 4096) test_fail(__FILE__, __LINE__, name);
    return b;
}

void test_write_file(const char *path, const void *data, size_t length)
{
    /* without a shell: fixtures write thousands of files (a `sh -c mkdir
     * -p` each made one test take 100 s) */
    const char *slash = strrchr(path, '/');
    if (slash && slash > path && larder__mkdir_p(path, (size_t)(slash - path), 0777) < 0)
        test_fail(__FILE__, __LINE__, larder_errmsg());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, length, f) != length || fclose(f) != 0)
        test_fail(__FILE__, __LINE__, path);
}

uint8_t *test_read_file(const char *path, size_t *length)
{
    FILE *f = fopen(path, "rb");
    if (!f) test_fail(__FILE__, __LINE__, path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc((size_t)n + 1);
    if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) test_fail(__FILE__, __LINE__, path);
    fclose(f);
    *length = (size_t)n;
    return data;
}

int test_sh(const char *fmt, ...)
{
    char command[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(command, sizeof command, fmt, ap);
    va_end(ap);
    int status = system(command);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void test_fill_random(void *buf, size_t length, uint64_t seed)
{
    uint8_t *p = buf;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < length; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

bool test_recv_exact(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t got = recv(fd, p, n, 0);
        if (got <= 0) return false;
        p += got, n -= (size_t)got;
    }
    return true;
}

static ssize_t (*real_pread)(int, void *, size_t, off_t);
static int slow_milliseconds;

static ssize_t slow_pread(int fd, void *buf, size_t count, off_t offset)
{
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n > 0) {
        target[n] = '\0';
        if (strstr(target, "/packed/shard-")) {
            struct timespec pause = {slow_milliseconds / 1000,
                                     (long)(slow_milliseconds % 1000) * 1000000};
            nanosleep(&pause, NULL);
        }
    }
    return real_pread(fd, buf, count, offset);
}

void test_slow_origin(int milliseconds)
{
    if (!real_pread) real_pread = larder__sys.pread;
    slow_milliseconds = milliseconds;
    larder__sys.pread = milliseconds ? slow_pread : real_pread;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int run_one(int i)
{
    char template[] = "/tmp/larder-test-XXXXXX";
    if (!mkdtemp(template)) return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        snprintf(scratch, sizeof scratch, "%s", template);
        if (chdir(scratch) != 0) _exit(1);
        alarm(TIMEOUT_SECONDS);
        tests[i].fn();
        exit(0); /* not _exit: LeakSanitizer reports at exit */
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    char command[4200];
    snprintf(command, sizeof command, "rm -rf '%s'", template);
    if (system(command) != 0) fprintf(stderr, "    could not remove %s\n", template);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        fprintf(stderr, "    timed out after %d s\n", TIMEOUT_SECONDS);
    else if (WIFSIGNALED(status))
        fprintf(stderr, "    killed by signal %d\n", WTERMSIG(status));
    return 1;
}

int main(int argc, char **argv)
{
    /* stable order: by name */
    const char *names[MAX_TESTS];
    for (int i = 0; i < num_tests; i++)
        names[i] = tests[i].name;
    qsort(names, (size_t)num_tests, sizeof *names, compare_names);
    int substring = 0, listing = 0, first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (strcmp(argv[first], "-k") == 0) substring = 1;
        if (strcmp(argv[first], "-l") == 0) listing = 1;
    }
    int passed = 0, failed = 0, skipped = 0;
    for (int n = 0; n < num_tests; n++) {
        int i = 0;
        while (strcmp(tests[i].name, names[n]) != 0)
            i++;
        if (first < argc) {
            int wanted = 0;
            for (int a = first; a < argc; a++)
                if (substring ? strstr(tests[i].name, argv[a]) != NULL
                              : strcmp(tests[i].name, argv[a]) == 0)
                    wanted = 1;
            if (!wanted) continue;
        }
        if (listing) {
            printf("%s\n", tests[i].name);
            continue;
        }
        int rc = run_one(i);
        const char *verdict = rc == 0 ? "ok" : rc == 77 ? "skip" : "FAIL";
        printf("%-4s %s\n", verdict, tests[i].name);
        if (rc == 0)
            passed++;
        else if (rc == 77)
            skipped++;
        else
            failed++;
    }
    if (listing) return 0;
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
