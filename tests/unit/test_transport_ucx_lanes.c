/*
 * test_transport_ucx_lanes.c - a borrower's lanes (transport_ucx_lanes.c):
 * lane 1 of a hub is a hub of its own (its own worker, so its own
 * address), made once and kept, and a daemon answers READs over each
 * lane's link as over any other; the lane's counters are reported with
 * its hub's, in the one line LARDER_UCX_STATS logs at the hub's stop.
 * LARDER_UCX_LANES=1 leaves the hub alone.  Skipped when UCX has no usable
 * transport here.
 */
#include "test.h"

#include "transport_ucx.h"

#include <stdio.h>
#include <stdlib.h>

static uint8_t pattern(uint64_t at)
{
    return (uint8_t)((at * 7 + 3) % 251);
}

static void serve(void *owner, struct larder__ucx_session *s, uint64_t request,
                  const struct larder__read *read)
{
    (void)owner;
    uint8_t *bytes = malloc(read->length);
    for (uint64_t i = 0; i < read->length; i++)
        bytes[i] = pattern(read->offset + i);
    larder__ucx_answer(s, request, 0, bytes, read->length);
    free(bytes);
}

static char stats_line[1024];
static int stats_lines;

static void capture(void *userdata, int level, const char *message)
{
    (void)userdata, (void)level;
    if (strncmp(message, "UCX stats", 9) != 0) return;
    snprintf(stats_line, sizeof stats_line, "%s", message);
    stats_lines++;
}

/* A session on daemon for hub's worker, and hub's link to it; then one
 * READ of 3 MiB + 5 (rendezvous on every transport) checked byte by byte. */
static void read_over(struct larder__ucx *daemon, struct larder__ucx *hub, uint64_t offset)
{
    const void *address;
    size_t length;
    uint8_t token[LARDER__UCX_TOKEN];
    struct larder__ucx_session *session;
    struct larder__ucx_link *link;
    larder__ucx_address(hub, &address, &length);
    CHECK_EQ(larder__ucx_session_new(daemon, NULL, address, length, token, &session), 0);
    larder__ucx_address(daemon, &address, &length);
    CHECK_EQ(larder__ucx_link_new(hub, address, length, token, &link), 0);
    uint64_t size = (3u << 20) + 5;
    uint8_t *buf = calloc(1, size);
    struct larder__read read = {
        .id_low = 1, .id_high = 2, .shard = 3, .offset = offset, .length = size};
    bool fault = true;
    CHECK_EQ(larder__ucx_link_read(link, &read, buf, 10000, 10000, &fault), 0);
    CHECK(!fault);
    for (uint64_t i = 0; i < size; i++)
        if (buf[i] != pattern(offset + i)) CHECK(!"the bytes differ from the formula");
    free(buf);
    larder__ucx_link_free(link);
    larder__ucx_session_free(session);
}

TEST(ucx_lane_is_a_hub_of_its_own_counted_with_its_hub)
{
    unsetenv("LARDER_UCX_LANES"); /* the default: 2 */
    setenv("LARDER_UCX_STATS", "1", 1);
    struct larder__ucx *daemon, *borrower;
    if (larder__ucx_start(&daemon) < 0) SKIP("UCX has no usable transport here");
    if (larder__ucx_start(&borrower) < 0) SKIP("UCX has no usable transport here");
    larder__ucx_serve(daemon, serve);
    CHECK_EQ(larder__ucx_lanes(borrower), 2);
    CHECK(larder__ucx_lane(borrower, 0) == borrower);
    struct larder__ucx *lane = larder__ucx_lane(borrower, 1);
    CHECK(lane != borrower);
    CHECK(larder__ucx_lane(borrower, 1) == lane);     /* made once, kept */
    CHECK(larder__ucx_lane(borrower, 2) == borrower); /* past the lanes: the hub */
    CHECK(larder__ucx_lane(lane, 1) == lane);         /* a lane has no lanes */
    const void *a, *b;
    size_t a_length, b_length;
    larder__ucx_address(borrower, &a, &a_length);
    larder__ucx_address(lane, &b, &b_length);
    CHECK(a_length != b_length || memcmp(a, b, a_length) != 0); /* two workers */

    read_over(daemon, borrower, 1000);
    read_over(daemon, lane, 2000);
    read_over(daemon, lane, 3000);
    larder_set_log(capture, NULL, LARDER_LOG_WARN);
    larder__ucx_stop(borrower); /* its lane with it: one line, both counted */
    CHECK_EQ(stats_lines, 1);
    CHECK(strstr(stats_line, "answers received 0 eager, 3 rendezvous") != NULL);
    larder__ucx_stop(daemon);
    larder_set_log(NULL, NULL, LARDER_LOG_WARN);
    unsetenv("LARDER_UCX_STATS");
}

static int warnings;

static void count_lanes_warnings(void *userdata, int level, const char *message)
{
    (void)userdata, (void)level;
    if (strstr(message, "LARDER_UCX_LANES")) warnings++;
}

TEST(ucx_lanes_set_by_the_environment)
{
    struct larder__ucx *hub;
    setenv("LARDER_UCX_LANES", "1", 1);
    if (larder__ucx_start(&hub) < 0) SKIP("UCX has no usable transport here");
    CHECK_EQ(larder__ucx_lanes(hub), 1);
    CHECK(larder__ucx_lane(hub, 1) == hub);
    larder__ucx_stop(hub);
    /* out of 1-8: clamped; not a number: the default (2); warned once */
    const char *values[][2] = {{"4", "4"},  {"9", "8"},   {"0", "1"},
                               {"-3", "1"}, {"two", "2"}, {"99999999999999999999", "8"},
                               {"3x", "2"}, {"8", "8"}};
    warnings = 0;
    larder_set_log(count_lanes_warnings, NULL, LARDER_LOG_WARN);
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        setenv("LARDER_UCX_LANES", values[i][0], 1);
        CHECK_EQ(larder__ucx_start(&hub), 0);
        CHECK_EQ(larder__ucx_lanes(hub), atoi(values[i][1]));
        larder__ucx_stop(hub);
    }
    larder_set_log(NULL, NULL, LARDER_LOG_WARN);
    CHECK_EQ(warnings, 1); /* once a process: no other test sets a wrong value */
    unsetenv("LARDER_UCX_LANES");
}
