/*
 * cli.c - what the `larder` commands share (cli.h): opening with the
 * trust setting, failures and usage errors, progress, naming a sample.
 */
#include "cli.h"

#include "args.h"
#include "ui.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const program = "larder";
bool cli_trust_index;

int cli_open(larder_dataset **dataset, const char *url, larder_open_options *options)
{
    larder_open_options defaults = {.version = LARDER_OPEN_OPTIONS_VERSION};
    if (!options) options = &defaults;
    options->version = LARDER_OPEN_OPTIONS_VERSION;
    options->trust_index = cli_trust_index;
    return larder_open(dataset, url, options);
}

void cli_log(void *userdata, int level, const char *message)
{
    (void)userdata;
    fprintf(stderr, "%s: %s: %s\n", program, level == LARDER_LOG_ERROR ? "error" : "warning",
            message);
}

bool cli_cache_or_daemon(const char **cache, const char **socket)
{
    if (*cache) return true;
    if (*socket) return true;
    const char *env = getenv("LARDER_CACHE");
    if (env && env[0]) {
        *cache = env;
        return true;
    }
    env = getenv("LARDER_SOCKET");
    if (env && env[0]) *socket = env;
    return *socket != NULL;
}

uint64_t json_number(const char *object, const char *key)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    const char *at = strstr(object, pattern);
    return at ? strtoull(at + strlen(pattern), NULL, 10) : 0;
}

char *daemon_dataset_stats(char *stats, const char *id)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "{\"dataset_id\": \"%s\"", id);
    char *at = strstr(stats, pattern);
    char *end = at ? strchr(at, '}') : NULL;
    if (end) end[1] = '\0';
    return end ? at : NULL;
}

int fail(int rc)
{
    const char *detail = larder_errmsg();
    fprintf(stderr, "%s: %s\n", program, strcmp(detail, "no error") ? detail : larder_strerror(rc));
    return 1;
}

int fail_or_usage(const char *command, int rc)
{
    if (rc == LARDER_EUSAGE) return usage_error(command, "%s", larder_errmsg());
    return fail(rc);
}

int usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", program, command);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s %s --help'.\n", program, command);
    va_end(ap);
    return 2;
}

void cli_progress(void *userdata, uint64_t done, uint64_t total)
{
    progress_update(userdata, done, total);
}

int64_t resolve_sample(larder_dataset *d, const char *what)
{
    int64_t id = larder_find_key(d, what);
    uint64_t n;
    if (id >= 0) return id;
    if (id != LARDER_ENOTFOUND) { /* a corrupt index (a duplicated key, say): say so */
        fail((int)id);
        return -1;
    }
    if (args_parse_u64(what, &n) == 0) {
        if (n < larder_num_samples(d)) return (int64_t)n;
        fprintf(stderr,
                "%s: no sample %s: the dataset has %" PRIu64 " samples (ids 0-%" PRIu64
                ") and no sample with that key\n",
                program, what, larder_num_samples(d), larder_num_samples(d) - 1);
        return -1;
    }
    fprintf(stderr, "%s: no sample with key '%s'\n", program, what);
    return -1;
}
