/* bigbuf.c: large buffers kept for reuse (bigbuf.h). */
#include "test.h"

#include "bigbuf.h"

#include <string.h>

TEST(bigbuf_reuses_a_large_buffer_that_fits)
{
    uint8_t *a = larder__bigbuf_get(2u << 20);
    CHECK(a != NULL);
    memset(a, 1, 2u << 20); /* all of it is the caller's */
    larder__bigbuf_put(a);
    uint8_t *b = larder__bigbuf_get((3u << 20) / 2); /* smaller: the kept one */
    CHECK(b == a);
    uint8_t *c = larder__bigbuf_get(3u << 20); /* larger than any kept: a new one */
    CHECK(c != NULL && c != a);
    memset(c, 2, 3u << 20);
    larder__bigbuf_put(b);
    larder__bigbuf_put(c);
    /* of two kept, the smallest that fits */
    uint8_t *d = larder__bigbuf_get(1u << 20);
    CHECK(d == a);
    larder__bigbuf_put(d);
}

TEST(bigbuf_small_and_empty_buffers)
{
    uint8_t *a = larder__bigbuf_get(0);
    CHECK(a != NULL);
    a[0] = 7;
    uint8_t *b = larder__bigbuf_get(100);
    CHECK(b != NULL && b != a);
    memset(b, 3, 100);
    larder__bigbuf_put(a); /* freed, not kept: below LARDER__BIGBUF_MIN */
    larder__bigbuf_put(b);
    larder__bigbuf_put(NULL);
    CHECK(larder__bigbuf_get((size_t)-1) == NULL); /* no overflow of the header */
}

TEST(bigbuf_keeps_a_bounded_number)
{
    enum { MANY = 40 };
    uint8_t *bufs[MANY];
    for (int i = 0; i < MANY; i++) {
        bufs[i] = larder__bigbuf_get(4u << 20);
        CHECK(bufs[i] != NULL);
        memset(bufs[i], 0, 4u << 20);
        bufs[i][100] = 0xA5; /* a mark that a kept buffer still carries */
    }
    for (int i = 0; i < MANY; i++)
        larder__bigbuf_put(bufs[i]);
    /* at most 16 buffers (and 96 MiB) are kept, bigbuf.c: the rest were
     * freed, and new ones (fresh pages) carry no mark */
    int marked = 0;
    uint8_t *again[MANY];
    for (int i = 0; i < MANY; i++) {
        again[i] = larder__bigbuf_get(4u << 20);
        CHECK(again[i] != NULL);
        marked += again[i][100] == 0xA5;
    }
    CHECK(marked > 0);
    CHECK(marked <= 16);
    for (int i = 0; i < MANY; i++)
        larder__bigbuf_put(again[i]);
}
