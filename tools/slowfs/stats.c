/*
 * stats.c - histograms and the JSON report (see stats.h).
 */
#include "stats.h"

#include "model.h"

#include <stdarg.h>
#include <stdio.h>

/* Bucket of a value in microseconds: exact below SLOWFS_HIST_SUB, then
 * SLOWFS_HIST_SUB equal steps per power of two. */
static size_t bucket_of(uint64_t us)
{
    if (us < SLOWFS_HIST_SUB) return (size_t)us;
    int exponent = 63 - __builtin_clzll(us); /* >= 4 */
    size_t index = SLOWFS_HIST_SUB + (size_t)(exponent - 4) * SLOWFS_HIST_SUB +
                   (size_t)((us >> (exponent - 4)) & (SLOWFS_HIST_SUB - 1));
    return index < SLOWFS_HIST_BUCKETS ? index : SLOWFS_HIST_BUCKETS - 1;
}

/* Lower bound in microseconds of a bucket, and its width. */
static void bucket_range(size_t index, uint64_t *low, uint64_t *width)
{
    if (index < SLOWFS_HIST_SUB) {
        *low = index;
        *width = 1;
        return;
    }
    size_t exponent = (index - SLOWFS_HIST_SUB) / SLOWFS_HIST_SUB + 4;
    uint64_t step = 1ull << (exponent - 4);
    *low = (1ull << exponent) + ((index - SLOWFS_HIST_SUB) % SLOWFS_HIST_SUB) * step;
    *width = step;
}

void slowfs_hist_add(struct slowfs_hist *hist, uint64_t ns)
{
    hist->count++;
    hist->sum_ns += ns;
    if (ns > hist->max_ns) hist->max_ns = ns;
    hist->buckets[bucket_of(ns / 1000)]++;
}

uint64_t slowfs_hist_quantile(const struct slowfs_hist *hist, double q)
{
    if (hist->count == 0) return 0;
    /* the rank of the wanted value, 1-based, as in "the k-th smallest" */
    uint64_t rank = (uint64_t)(q * (double)hist->count + 0.5);
    if (rank < 1) rank = 1;
    if (rank > hist->count) rank = hist->count;
    uint64_t seen = 0;
    for (size_t i = 0; i < SLOWFS_HIST_BUCKETS; i++) {
        seen += hist->buckets[i];
        if (seen >= rank) {
            uint64_t low, width;
            bucket_range(i, &low, &width);
            uint64_t ns = low * 1000 + width * 500;
            return ns < hist->max_ns ? ns : hist->max_ns;
        }
    }
    return hist->max_ns;
}

/* A bounded appender: keeps counting past the end so the caller learns
 * the size it needed. */
struct out {
    char *buf;
    size_t size, len;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *out, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    size_t room = out->len < out->size ? out->size - out->len : 0;
    int n = vsnprintf(room ? out->buf + out->len : NULL, room, fmt, args);
    va_end(args);
    if (n > 0) out->len += (size_t)n;
}

static void put_hist(struct out *out, const char *name, const struct slowfs_hist *hist)
{
    double mean = hist->count ? (double)hist->sum_ns / (double)hist->count : 0;
    put(out,
        "  \"%s\": {\"count\": %llu, \"mean\": %.3f, \"p50\": %.3f, \"p90\": %.3f, "
        "\"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f},\n",
        name, (unsigned long long)hist->count, mean / 1e6,
        (double)slowfs_hist_quantile(hist, 0.5) / 1e6,
        (double)slowfs_hist_quantile(hist, 0.9) / 1e6,
        (double)slowfs_hist_quantile(hist, 0.99) / 1e6,
        (double)slowfs_hist_quantile(hist, 0.999) / 1e6, (double)hist->max_ns / 1e6);
}

size_t slowfs_stats_json(char *buf, size_t size, const struct slowfs_stats *stats,
                         const struct slowfs_params *params, double uptime_s)
{
    struct out out = {buf, size, 0};
    const struct slowfs_stats *s = stats;
    const struct slowfs_params *p = params;
    if (size) buf[0] = '\0';
    put(&out, "{\n  \"profile\": \"%s\",\n  \"seed\": %llu,\n", p->profile,
        (unsigned long long)p->seed);
    put(&out,
        "  \"params\": {\"floor_ms\": %g, \"latency_ms\": %g, \"sigma\": %g, "
        "\"tail_prob\": %g, \"tail_scale_ms\": %g, \"tail_alpha\": %g, \"tail_max_ms\": %g, "
        "\"max_concurrent\": %u, \"bandwidth_mbps\": %g, \"congestion_every_s\": %g, "
        "\"congestion_for_s\": %g, \"congestion_factor\": %g, \"meta_latency_ms\": %g},\n",
        p->floor_ms, p->latency_ms, p->sigma, p->tail_prob, p->tail_scale_ms, p->tail_alpha,
        p->tail_max_ms, p->max_concurrent, p->bandwidth_mbps, p->congestion_every_s,
        p->congestion_for_s, p->congestion_factor, p->meta_latency_ms);
    put(&out, "  \"uptime_s\": %.3f,\n", uptime_s);
    uint64_t phase = slowfs_congestion_phase_ns(p); /* episodes: where the first began */
    if (phase != UINT64_MAX) put(&out, "  \"congestion_phase_s\": %.3f,\n", (double)phase / 1e9);
    put(&out, "  \"reads\": %llu,\n  \"bytes\": %llu,\n  \"read_errors\": %llu,\n",
        (unsigned long long)s->reads, (unsigned long long)s->bytes,
        (unsigned long long)s->read_errors);
    put(&out, "  \"eof_reads\": %llu,\n", (unsigned long long)s->eof_reads);
    put(&out, "  \"tail_stalls\": %llu,\n  \"congested_reads\": %llu,\n",
        (unsigned long long)s->tail_stalls, (unsigned long long)s->congested_reads);
    put(&out, "  \"drawn_delay_ns_total\": %llu,\n", (unsigned long long)s->drawn_delay_ns);
    put(&out, "  \"in_flight\": %llu,\n  \"max_in_flight\": %llu,\n",
        (unsigned long long)s->in_flight, (unsigned long long)s->max_in_flight);
    put(&out, "  \"queued\": %llu,\n  \"max_queue_depth\": %llu,\n", (unsigned long long)s->queued,
        (unsigned long long)s->max_queue_depth);
    put(&out, "  \"meta_ops\": %llu,\n  \"meta_delay_ms_total\": %.3f,\n",
        (unsigned long long)s->meta_ops, (double)s->meta_delay_ns / 1e6);
    put_hist(&out, "read_wait_ms", &s->read_wait);
    put_hist(&out, "queue_wait_ms", &s->queue_wait);
    put_hist(&out, "service_ms", &s->service);
    put(&out, "  \"cpu_user_s\": %.3f,\n  \"cpu_system_s\": %.3f,\n  \"page_faults\": %llu,\n",
        s->cpu_user_s, s->cpu_system_s, (unsigned long long)s->page_faults);
    /* every entry above ends in ",\n"; close with one that does not */
    put(&out, "  \"version\": 1\n}\n");
    return out.len;
}
