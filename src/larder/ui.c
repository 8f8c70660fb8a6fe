/*
 * ui.c - progress bars, units and JSON escaping for the CLI.
 */
#include "ui.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *human_bytes(uint64_t bytes, char buf[32])
{
    static const char *units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000 && u < 5)
        v /= 1000, u++;
    if (u == 0)
        snprintf(buf, 32, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void progress_start(struct progress *p, const char *label)
{
    p->label = label;
    p->enabled = isatty(STDERR_FILENO) && !getenv("LARDER_NO_PROGRESS");
    p->started = now_seconds();
    p->last_draw = 0;
    p->drawn = 0;
}

void progress_update(struct progress *p, uint64_t done, uint64_t total)
{
    if (!p->enabled) return;
    double now = now_seconds();
    if (now - p->last_draw < 0.1 && !(total && done == total)) return;
    p->last_draw = now;
    double elapsed = now - p->started;
    char a[32], rate[32];
    human_bytes(elapsed > 0 ? (uint64_t)((double)done / elapsed) : 0, rate);
    if (total) {
        int width = 30, fill = (int)((double)done / (double)total * width);
        if (fill > width) fill = width;
        char bar[64];
        memset(bar, '#', (size_t)fill);
        memset(bar + fill, '.', (size_t)(width - fill));
        bar[width] = '\0';
        fprintf(stderr, "\r%-8s [%s] %3d%%  %s/s  ", p->label, bar,
                (int)((double)done * 100 / (double)total), rate);
    } else {
        fprintf(stderr, "\r%-8s %s  %s/s  ", p->label, human_bytes(done, a), rate);
    }
    p->drawn = 1;
}

void progress_end(struct progress *p)
{
    if (p->drawn) fprintf(stderr, "\n");
    p->drawn = 0;
}
