/*
 * test.h - the unit-test harness.  A test is
 *
 *     TEST(index_roundtrip) { ... CHECK(x == 1); ... }
 *
 * in any tests/unit/test_*.c file; it registers itself at start-up.  The
 * runner (runner.c) runs each test in its own child process with a
 * timeout, runs one test by name when given names, and ends with
 * "N passed, N failed, N skipped".  A test calls SKIP("why") to skip.
 * Tests get a fresh scratch directory, test_dir(), removed afterwards.
 */
#ifndef LARDER_TEST_H
#define LARDER_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);

#define TEST(name)                                                                                 \
    static void test_##name(void);                                                                 \
    __attribute__((constructor)) static void register_##name(void)                                 \
    {                                                                                              \
        test_register(#name, test_##name);                                                         \
    }                                                                                              \
    static void test_##name(void)

void test_fail(const char *file, int line, const char *what) __attribute__((noreturn));
void test_skip(const char *why) __attribute__((noreturn));

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) test_fail(__FILE__, __LINE__, #cond);                                         \
    } while (0)
/* Compare two integers, printing both on failure. */
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        if (check_a_ != check_b_) {                                                                \
            char check_msg_[512];                                                                  \
            snprintf(check_msg_, sizeof check_msg_, "%s == %s (%lld != %lld)", #a, #b, check_a_,   \
                     check_b_);                                                                    \
            test_fail(__FILE__, __LINE__, check_msg_);                                             \
        }                                                                                          \
    } while (0)
#define SKIP(why) test_skip(why)

/* This test's scratch directory (absolute path). */
const char *test_dir(void);
/* Path of `name` inside test_dir(), in a static buffer reused every 8 calls:
 * copy it to keep it longer. */
const char *test_path(const char *name);
/* Write `length` bytes to `path`, creating parent directories. */
void test_write_file(const char *path, const void *data, size_t length);
/* Read a whole file; caller frees.  Fails the test if it cannot. */
uint8_t *test_read_file(const char *path, size_t *length);
/* Run a shell command; returns its exit status. */
int test_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * Make reads of packed shards (paths containing "/packed/shard-": the
 * origin in these tests, not the cache) take `milliseconds` each, through
 * liblarder's system call table; 0 restores the real pread.
 */
void test_slow_origin(int milliseconds);
/* Deterministic pseudo-random bytes. */
void test_fill_random(void *buf, size_t length, uint64_t seed);
/* Receive exactly n bytes from socket fd: false at EOF or an error (a fake
 * daemon's or peer's loop ends there). */
bool test_recv_exact(int fd, void *buf, size_t n);

#endif
