/*
 * state.c - the daemon's globals: its state, its log line and its clock,
 * apart from main() so that a harness (fuzz/fuzz_daemon.c) can link the
 * daemon's parts -- loop.c, requests.c, datasets.c -- without its start-up.
 */
#include "larderd.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

struct daemon_state daemon_state = {.self = SIZE_MAX};

void say(const char *fmt, ...)
{
    if (daemon_state.quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "larderd: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
