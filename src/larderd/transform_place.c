/*
 * transform_place.c - the placement of transforms (transform_place.h):
 * CPU sampling from /proc/stat and getrusage, and the decision.
 */
#include "transform_place.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

void placement_init(struct placement *p, int limit, int64_t now_ms)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    p->limit = limit;
    p->at_reader = limit == 0;
    p->since_ms = now_ms;
    const char *trace = getenv("LARDERD_TRACE_PLACEMENT");
    p->trace = trace && *trace && strcmp(trace, "0") != 0;
}

void placement_free(struct placement *p)
{
    pthread_mutex_destroy(&p->lock);
}

void placement_decide(struct placement *p, int64_t now, const struct place_sample *s)
{
    p->last = *s;
    double unused = 1.0 - s->self;
    double others = s->busy - s->self;
    if (others < 0) others = 0;
    /* with (almost) all of its CPUs in use by itself, others could take nothing */
    double contention = unused > 0.05 ? others / unused : 0.0;
    if (contention > 1) contention = 1;
    p->contention = 0.5 * p->contention + 0.5 * contention;
    if (p->limit == 0 || p->limit >= 100) { /* fixed: always the reader, or CPU never counts */
        bool want = p->limit == 0;
        if (want != p->at_reader) p->at_reader = want, p->since_ms = now, p->switches++;
        return;
    }
    double percent = 100.0 * p->contention;
    bool toward = p->at_reader ? percent < p->limit - PLACE_BAND : percent > p->limit;
    if (!toward) {
        p->crossing_ms = 0;
        return;
    }
    if (!p->crossing_ms) p->crossing_ms = now;
    if (now - p->crossing_ms >= (p->at_reader ? PLACE_LEAVE_MS : PLACE_ENTER_MS)) {
        p->at_reader = !p->at_reader;
        p->since_ms = now;
        p->crossing_ms = 0;
        p->switches++;
    }
}

bool placement_cpu_line(const char *line, const cpu_set_t *set, uint64_t *busy, uint64_t *total)
{
    /* "cpuN ..." only: the aggregate line "cpu  2255 ..." has no digit at
     * line[3], and %d would read its first tick count as a CPU number */
    if (strncmp(line, "cpu", 3) != 0 || !isdigit((unsigned char)line[3])) return false;
    char *end;
    errno = 0;
    unsigned long cpu = strtoul(line + 3, &end, 10);
    if (errno || cpu >= CPU_SETSIZE || !CPU_ISSET((int)cpu, set)) return false;
    unsigned long long v[8] = {0};
    if (sscanf(end, " %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) < 8)
        return false;
    uint64_t idle = v[3] + v[4]; /* idle, iowait */
    uint64_t all = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    *busy += all - idle;
    *total += all;
    return true;
}

/* Busy and total ticks of the CPUs in `set`, from /proc/stat: 0 or -1. */
static int cpu_ticks(const cpu_set_t *set, uint64_t *busy, uint64_t *total)
{
    FILE *f = fopen("/proc/stat", "re");
    if (!f) return -1;
    char line[512];
    *busy = *total = 0;
    while (fgets(line, sizeof line, f))
        placement_cpu_line(line, set, busy, total);
    fclose(f);
    return 0;
}

void placement_tick(struct placement *p, int64_t now)
{
    pthread_mutex_lock(&p->lock);
    if (p->sampled_ms && now - p->sampled_ms < PLACE_SAMPLE_MS) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        for (int i = 0; i < CPU_SETSIZE; i++)
            CPU_SET(i, &set);
    uint64_t busy = 0, total = 0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t self = (uint64_t)ru.ru_utime.tv_sec * 1000000 + (uint64_t)ru.ru_utime.tv_usec +
                    (uint64_t)ru.ru_stime.tv_sec * 1000000 + (uint64_t)ru.ru_stime.tv_usec;
    if (cpu_ticks(&set, &busy, &total) == 0) {
        if (p->sampled_ms && total > p->cpu_total) {
            long hz = sysconf(_SC_CLK_TCK);
            double ticks = (double)(total - p->cpu_total);
            struct place_sample s = {.busy = (double)(busy - p->cpu_busy) / ticks,
                                     .self =
                                         (double)(self - p->self_us) * (double)hz / 1e6 / ticks};
            if (s.self > s.busy) s.self = s.busy; /* tick granularity */
            placement_decide(p, now, &s);
        }
        p->cpu_busy = busy, p->cpu_total = total, p->self_us = self;
    } else if (p->limit == 0 && !p->at_reader) {
        struct place_sample s = {0};
        placement_decide(p, now, &s);
    }
    p->ncpu = CPU_COUNT(&set);
    p->sampled_ms = now;
    pthread_mutex_unlock(&p->lock);
}

bool placement_admit(struct placement *p, int64_t now, uint32_t reader_wait_us,
                     uint32_t reader_budget_us, uint64_t queued, int jobs, bool *shed)
{
    placement_tick(p, now);
    pthread_mutex_lock(&p->lock);
    p->reader_wait_us = reader_wait_us;
    p->reader_budget_us = reader_budget_us;
    *shed = false;
    bool here = !p->at_reader;
    /* an idle worker takes it whatever the estimate: its CPU would idle,
     * and the estimate would never be measured again */
    if (here && queued >= (uint64_t)(jobs > 0 ? jobs : 1)) {
        double budget = reader_budget_us ? reader_budget_us : PLACE_DEFAULT_BUDGET_US;
        double predicted = (double)queued * p->run_us / (jobs > 0 ? jobs : 1) + p->run_us;
        /* or the reader already waits twice its budget: the queue is not keeping up */
        if (predicted > budget || (reader_budget_us && reader_wait_us > 2.0 * budget))
            here = false, *shed = true;
    }
    if (p->trace) /* the decision's inputs, one line a request (docs/transforms.md) */
        fprintf(stderr,
                "larderd: placement %lld ms: %s; queued %llu on %d jobs, run %.0f us, "
                "queue wait %.0f us, reader wait %u us, budget %u us\n",
                (long long)now,
                here    ? "daemon"
                : *shed ? "shed"
                        : "reader",
                (unsigned long long)queued, jobs, p->run_us, p->wait_us, reader_wait_us,
                reader_budget_us);
    pthread_mutex_unlock(&p->lock);
    return here;
}

void placement_note(struct placement *p, uint64_t wait_us, uint64_t run_us)
{
    pthread_mutex_lock(&p->lock);
    p->wait_us = p->wait_us ? 0.9 * p->wait_us + 0.1 * (double)wait_us : (double)wait_us;
    p->run_us = p->run_us ? 0.9 * p->run_us + 0.1 * (double)run_us : (double)run_us;
    pthread_mutex_unlock(&p->lock);
}
