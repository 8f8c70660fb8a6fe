/*
 * test_larderd_metrics.c - the daemon's Prometheus text
 * (src/larderd/metrics.c): parsed back line by line, every metric has its
 * HELP and TYPE and one sample per dataset with the value the test set,
 * the READ latency histogram its cumulative buckets, sum and count; a
 * buffer too small gets whole lines only; READs counted by kind land in
 * the right series; a daemon's open dataset shows.
 */
#include "daemon_fixture.h"
#include "metrics.h"
#include "test.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

static const struct {
    const char *name, *type;
} expected[] = {
    {"larder_hits_total", "counter"},
    {"larder_misses_total", "counter"},
    {"larder_borrowed_reads_total", "counter"},
    {"larder_read_errors_total", "counter"},
    {"larder_served_bytes_total", "counter"},
    {"larder_peer_served_reads_total", "counter"},
    {"larder_peer_served_bytes_total", "counter"},
    {"larder_origin_requests_total", "counter"},
    {"larder_origin_bytes_total", "counter"},
    {"larder_peer_requests_total", "counter"},
    {"larder_peer_bytes_total", "counter"},
    {"larder_resident_bytes", "gauge"},
    {"larder_dataset_bytes", "gauge"},
    {"larder_pinned_bytes", "gauge"},
    {"larder_inplace_blocks_total", "counter"},
    {"larder_staged_reads_total", "counter"},
    {"larder_staged_bytes_total", "counter"},
    {"larder_read_duration_seconds", "histogram"},
};
enum { NUM_EXPECTED = sizeof expected / sizeof *expected, HISTOGRAM = NUM_EXPECTED - 1 };

static uint64_t expected_value(const struct metrics_row *r, int m)
{
    const larder_stats *s = &r->stats;
    const struct served *v = &r->served;
    const uint64_t values[NUM_EXPECTED - 1] = {
        v->hits,         v->misses,         v->borrowed,        v->errors,       v->bytes,
        v->peer_reads,   v->peer_bytes,     s->origin_requests, s->origin_bytes, s->peer_requests,
        s->peer_bytes,   s->resident_bytes, s->total_bytes,     r->pinned_bytes, v->inplace_blocks,
        v->staged_reads, v->staged_bytes};
    return values[m];
}

static int metric_index(const char *name)
{
    for (int m = 0; m < NUM_EXPECTED; m++)
        if (strcmp(expected[m].name, name) == 0) return m;
    return -1;
}

/* The row of dataset `id`, or -1. */
static int row_of(const struct metrics_row *rows, int count, const char *id)
{
    for (int i = 0; i < count; i++)
        if (strcmp(rows[i].dataset_id, id) == 0) return i;
    return -1;
}

/* One line of the histogram: its buckets are cumulative and end at +Inf with
 * the count; its sum is the rows' microseconds in seconds.  The samples seen. */
static int check_histogram_line(const char *line, const struct metrics_row *rows, int count,
                                uint64_t *cumulative)
{
    char id[64], bound[32];
    unsigned long long value;
    double sum;
    int row;
    if (sscanf(line,
               "larder_read_duration_seconds_bucket{dataset=\"%63[0-9a-f]\",le=\"%31[^\"]\"} %llu",
               id, bound, &value) == 3) {
        CHECK((row = row_of(rows, count, id)) >= 0);
        const struct served *v = &rows[row].served;
        uint64_t want = 0;
        double le = strcmp(bound, "+Inf") == 0 ? 1e300 : strtod(bound, NULL);
        for (int b = 0; b <= READ_LATENCY_BUCKETS; b++)
            if (b == READ_LATENCY_BUCKETS
                    ? le > 1e299
                    : (double)read_latency_bounds_us[b] / 1e6 <= le * (1 + 1e-9))
                want += v->latency[b];
        CHECK(value == want);
        CHECK(value >= cumulative[row]); /* cumulative */
        cumulative[row] = value;
        return 1;
    }
    if (sscanf(line, "larder_read_duration_seconds_sum{dataset=\"%63[0-9a-f]\"} %lf", id, &sum) ==
        2) {
        CHECK((row = row_of(rows, count, id)) >= 0);
        CHECK(fabs(sum - (double)rows[row].served.latency_sum_us / 1e6) < 1e-6);
        return 1;
    }
    CHECK(sscanf(line, "larder_read_duration_seconds_count{dataset=\"%63[0-9a-f]\"} %llu", id,
                 &value) == 2);
    CHECK((row = row_of(rows, count, id)) >= 0);
    CHECK(value == cumulative[row]); /* the +Inf bucket's */
    return 1;
}

/* Check the text against rows: every line well formed, every value right. */
static void check_text(char *text, const struct metrics_row *rows, int count)
{
    int typed[NUM_EXPECTED] = {0}, helped[NUM_EXPECTED] = {0}, samples[NUM_EXPECTED] = {0};
    uint64_t cumulative[8] = {0};
    char name[128], rest[256], id[64];
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        unsigned long long value;
        int m;
        if (sscanf(line, "# HELP %127s %255[^\n]", name, rest) == 2) {
            CHECK((m = metric_index(name)) >= 0);
            CHECK(helped[m]++ == 0 && samples[m] == 0);
        } else if (sscanf(line, "# TYPE %127s %255s", name, rest) == 2) {
            CHECK((m = metric_index(name)) >= 0);
            CHECK(strcmp(rest, expected[m].type) == 0);
            CHECK(typed[m]++ == 0 && samples[m] == 0);
        } else if (strncmp(line, "larder_read_duration_seconds_", 29) == 0) {
            CHECK(typed[HISTOGRAM] && helped[HISTOGRAM]);
            samples[HISTOGRAM] += check_histogram_line(line, rows, count, cumulative);
        } else {
            CHECK(sscanf(line, "%127[a-z_]{dataset=\"%63[0-9a-f]\"} %llu", name, id, &value) == 3);
            CHECK((m = metric_index(name)) >= 0 && m != HISTOGRAM);
            CHECK(typed[m] && helped[m]);
            int row = row_of(rows, count, id);
            CHECK(row >= 0);
            CHECK(value == expected_value(&rows[row], m));
            samples[m]++;
        }
    }
    for (int m = 0; m < NUM_EXPECTED; m++)
        CHECK(typed[m] == 1 && helped[m] == 1 &&
              samples[m] == (m == HISTOGRAM ? (READ_LATENCY_BUCKETS + 3) * count : count));
}

TEST(larderd_metrics_text)
{
    struct metrics_row rows[2] = {{.dataset_id = "0123456789abcdef0123456789abcdef"},
                                  {.dataset_id = "fedcba9876543210fedcba9876543210"}};
    for (int i = 0; i < 2; i++) {
        larder_stats *s = &rows[i].stats;
        uint64_t base = (uint64_t)(i + 1) * 1000;
        s->hits = base + 1, s->misses = base + 2, s->origin_requests = base + 3;
        s->origin_bytes = base + 4, s->peer_requests = base + 5, s->peer_bytes = base + 6;
        s->bytes_served = base + 7, s->resident_bytes = base + 8;
        s->total_bytes = UINT64_MAX - (uint64_t)i; /* the whole range */
        struct served *v = &rows[i].served;
        v->hits = base + 11, v->misses = base + 12, v->borrowed = base + 13;
        v->errors = base + 14, v->bytes = base + 15, v->peer_reads = base + 16;
        v->peer_bytes = base + 17, v->latency_sum_us = base * 1000 + 123456;
        rows[i].pinned_bytes = base + 18;
        v->inplace_blocks = base + 19;
        for (int b = 0; b <= READ_LATENCY_BUCKETS; b++)
            v->latency[b] = (uint64_t)(b * (i + 1));
    }
    char text[16384];
    size_t length = metrics_format(rows, 2, text, sizeof text);
    CHECK(length > 0 && length == strlen(text));
    CHECK(strstr(text, "larder_dataset_bytes{dataset=\"0123456789abcdef0123456789abcdef\"} "
                       "18446744073709551615\n") != NULL);
    CHECK(strstr(text, "larder_pinned_bytes{dataset=\"fedcba9876543210fedcba9876543210\"} "
                       "2018\n") != NULL);
    CHECK(strstr(text, "larder_inplace_blocks_total{dataset=\"0123456789abcdef0123456789abcdef\"} "
                       "1019\n") != NULL);
    CHECK(strstr(text,
                 "larder_read_duration_seconds_bucket{dataset=\"0123456789abcdef0123456789abcdef"
                 "\",le=\"0.00025\"} 1\n") != NULL);
    CHECK(strstr(text, "larder_read_duration_seconds_sum{dataset=\"0123456789abcdef0123456789abcdef"
                       "\"} 1.123456\n") != NULL);
    check_text(text, rows, 2);

    /* no datasets: the HELP and TYPE lines alone */
    length = metrics_format(rows, 0, text, sizeof text);
    check_text(text, rows, 0);
}

TEST(larderd_metrics_small_buffer)
{
    struct metrics_row row = {.dataset_id = "0123456789abcdef0123456789abcdef"};
    char full[16384], part[300];
    size_t whole = metrics_format(&row, 1, full, sizeof full);
    size_t length = metrics_format(&row, 1, part, sizeof part);
    CHECK(length < sizeof part && length == strlen(part));
    CHECK(length > 0 && length < whole);
    CHECK(part[length - 1] == '\n'); /* whole lines only */
    CHECK(memcmp(part, full, length) == 0);
    CHECK_EQ(metrics_format(&row, 1, part, 0), 0);
    CHECK_EQ(metrics_format(&row, 1, part, 1), 0);
    CHECK(part[0] == '\0');
}

TEST(larderd_metrics_served_count)
{
    struct served v = {0}, copy;
    served_count(&v, true, false, false, false, 100, 50);    /* a hit, 50 us */
    served_count(&v, false, false, false, false, 200, 100);  /* a miss, on the first bound */
    served_count(&v, false, true, false, true, 300, 101);    /* borrowed, to a peer */
    served_count(&v, true, true, false, false, 10, 2000);    /* a hit is never borrowed */
    served_count(&v, false, false, true, true, 0, 20000000); /* an error, past the last bound */
    served_copy(&v, &copy);
    CHECK(copy.hits == 2 && copy.misses == 2 && copy.borrowed == 1 && copy.errors == 1);
    CHECK(copy.bytes == 610 && copy.peer_reads == 1 && copy.peer_bytes == 300);
    CHECK(copy.latency[0] == 2 && copy.latency[1] == 1 && copy.latency[4] == 1);
    CHECK(copy.latency[READ_LATENCY_BUCKETS] == 1);
    CHECK(copy.latency_sum_us == 50 + 100 + 101 + 2000 + 20000000);
    CHECK(served_percentile(&copy, 0.4) == 100);
    CHECK(served_percentile(&copy, 0.6) == 250);
    CHECK(served_percentile(&copy, 1.0) == UINT64_MAX);
    struct served none = {0};
    CHECK(served_percentile(&none, 0.5) == 0);

    struct metrics_row row = {.dataset_id = "0123456789abcdef0123456789abcdef", .served = copy};
    char text[16384];
    metrics_format(&row, 1, text, sizeof text);
    const char *id = "{dataset=\"0123456789abcdef0123456789abcdef\"}";
    char want[256];
    snprintf(want, sizeof want, "larder_hits_total%s 2\n", id);
    CHECK(strstr(text, want) != NULL);
    snprintf(want, sizeof want, "larder_served_bytes_total%s 610\n", id);
    CHECK(strstr(text, want) != NULL);
    snprintf(want, sizeof want, "larder_read_duration_seconds_count%s 5\n", id);
    CHECK(strstr(text, want) != NULL);
    check_text(text, &row, 1);
}

TEST(larderd_metrics_of_a_daemon)
{
    const char *index = fixture_dataset("ds", 12, 1 << 20);
    struct larderd d;
    fixture_daemon(&d, 1);
    struct dataset_entry *e;
    int slot;
    CHECK_EQ(open_dataset(&d, index, true, &e, &slot), 0);
    larder_dataset_info info;
    larder_dataset_info_get(e->dataset, &info);
    char text[16384], want[256];
    CHECK(metrics_text(&d, text, sizeof text) > 0);
    snprintf(want, sizeof want, "larder_dataset_bytes{dataset=\"%s\"} %" PRIu64 "\n",
             info.dataset_id, info.total_bytes);
    CHECK(strstr(text, want) != NULL);
    larderd_free(&d);
}
