/*
 * test_larderd_metrics.c - the daemon's Prometheus text
 * (src/larderd/metrics.c): parsed back line by line, every metric has its
 * HELP and TYPE and one sample per dataset with the value the test set;
 * a buffer too small gets whole lines only; a daemon's open dataset shows.
 */
#include "daemon_fixture.h"
#include "metrics.h"
#include "test.h"

#include <inttypes.h>

static const struct {
    const char *name, *type;
} expected[] = {
    {"larder_hits_total", "counter"},
    {"larder_misses_total", "counter"},
    {"larder_origin_requests_total", "counter"},
    {"larder_origin_bytes_total", "counter"},
    {"larder_peer_requests_total", "counter"},
    {"larder_peer_bytes_total", "counter"},
    {"larder_served_bytes_total", "counter"},
    {"larder_resident_bytes", "gauge"},
    {"larder_dataset_bytes", "gauge"},
};
enum { NUM_EXPECTED = sizeof expected / sizeof *expected };

static uint64_t expected_value(const larder_stats *s, int m)
{
    const uint64_t v[NUM_EXPECTED] = {s->hits,         s->misses,         s->origin_requests,
                                      s->origin_bytes, s->peer_requests,  s->peer_bytes,
                                      s->bytes_served, s->resident_bytes, s->total_bytes};
    return v[m];
}

static int metric_index(const char *name)
{
    for (int m = 0; m < NUM_EXPECTED; m++)
        if (strcmp(expected[m].name, name) == 0) return m;
    return -1;
}

/* Check the text against rows: every line well formed, every value right. */
static void check_text(char *text, const struct metrics_row *rows, int count)
{
    int typed[NUM_EXPECTED] = {0}, helped[NUM_EXPECTED] = {0}, samples[NUM_EXPECTED] = {0};
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
        } else {
            CHECK(sscanf(line, "%127[a-z_]{dataset=\"%63[0-9a-f]\"} %llu", name, id, &value) == 3);
            CHECK((m = metric_index(name)) >= 0);
            CHECK(typed[m] && helped[m]);
            int row = -1;
            for (int i = 0; i < count; i++)
                if (strcmp(rows[i].dataset_id, id) == 0) row = i;
            CHECK(row >= 0);
            CHECK(value == expected_value(&rows[row].stats, m));
            samples[m]++;
        }
    }
    for (int m = 0; m < NUM_EXPECTED; m++)
        CHECK(typed[m] == 1 && helped[m] == 1 && samples[m] == count);
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
    }
    char text[8192];
    size_t length = metrics_format(rows, 2, text, sizeof text);
    CHECK(length > 0 && length == strlen(text));
    CHECK(strstr(text, "larder_dataset_bytes{dataset=\"0123456789abcdef0123456789abcdef\"} "
                       "18446744073709551615\n") != NULL);
    check_text(text, rows, 2);

    /* no datasets: the HELP and TYPE lines alone */
    length = metrics_format(rows, 0, text, sizeof text);
    check_text(text, rows, 0);
}

TEST(larderd_metrics_small_buffer)
{
    struct metrics_row row = {.dataset_id = "0123456789abcdef0123456789abcdef"};
    char full[8192], part[300];
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
