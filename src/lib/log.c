/*
 * log.c - the library's only way to say anything: a callback the host
 * sets.  The level is checked before formatting, so disabled messages
 * cost one comparison.
 */
#include "common.h"

#include <stdio.h>

static larder_log_fn log_fn;
static void *log_userdata;
static int log_level = LARDER_LOG_WARN;

void larder_set_log(larder_log_fn fn, void *userdata, int level)
{
    log_fn = fn;
    log_userdata = userdata;
    log_level = level;
}

void larder__log(int level, const char *fmt, ...)
{
    if (!log_fn || level > log_level) return;
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    log_fn(log_userdata, level, message);
}
