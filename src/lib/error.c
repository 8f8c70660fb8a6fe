/*
 * error.c - return codes, their names, and the per-thread detail message
 * behind larder_errmsg(); and larder_version(), the library's version.
 */
#include "common.h"

#include <stdio.h>

static _Thread_local char error_detail[1024];

const char *larder_version(void)
{
    return LARDER_VERSION_STRING;
}

const char *larder_strerror(int code)
{
    switch (code) {
#define LARDER_ERR_CASE(name, value, text)                                                         \
    case LARDER_##name:                                                                            \
        return text;
        LARDER_ERRNO_MAP(LARDER_ERR_CASE)
#undef LARDER_ERR_CASE
    case 0:
        return "success";
    default:
        break;
    }
    if (code < 0 && code > -4096) return strerror(-code);
    return "unknown error";
}

const char *larder_errmsg(void)
{
    return error_detail[0] ? error_detail : "no error";
}

int larder__fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_detail, sizeof error_detail, fmt, ap);
    va_end(ap);
    return code;
}

int larder__fail_context(int code, const char *fmt, ...)
{
    char prefix[512], old[sizeof error_detail];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_detail, sizeof old);
    if (old[0])
        snprintf(error_detail, sizeof error_detail, "%.500s: %.520s", prefix, old);
    else
        snprintf(error_detail, sizeof error_detail, "%.500s: %s", prefix, larder_strerror(code));
    return code;
}
