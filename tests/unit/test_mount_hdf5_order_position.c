/*
 * test_mount_hdf5_order_position.c - where a reader is in a registered row
 * order (src/mount/hdf5_order_position.c): the members a read touches are
 * seen, the position is the lowest place not seen, and reads noted before
 * the listing was ready count when they are replayed.  Orders made by
 * hand: the expected places follow from the addresses and the list, not
 * from the code.
 */
#include "hdf5_order.h"
#include "test.h"

#include <stdlib.h>

/* The mount's log lives in session.c, which the unit tests do not link;
 * the position logs only with m->trace set, which these orders leave off. */
void larder__mount_log(int level, const char *fmt, ...)
{
    (void)level, (void)fmt;
}

struct made {
    struct larder__mount m;
    struct larder__mount_file_order o;
};

/* An order over a file of `size` bytes whose members, in address order,
 * start at address[k] and end at end[k]; list[p] is the member at place p. */
static struct made *make(uint64_t size, size_t n, const uint64_t *address, const uint64_t *end,
                         const uint32_t *list)
{
    struct made *x = calloc(1, sizeof *x);
    CHECK(x != NULL);
    struct larder__mount_file_order *o = &x->o;
    o->m = &x->m;
    o->size = size, o->members = n, o->length = n;
    o->address = malloc(n * sizeof *o->address), o->end = malloc(n * sizeof *o->end);
    o->sorted = malloc(n * sizeof *o->sorted), o->sorted_of = malloc(n * sizeof *o->sorted_of);
    o->list = malloc(n * sizeof *o->list), o->position_of = malloc(n * sizeof *o->position_of);
    o->seen = calloc(n, 1);
    CHECK(o->address && o->end && o->sorted && o->sorted_of && o->list && o->position_of &&
          o->seen);
    for (size_t k = 0; k < n; k++) {
        o->address[k] = o->sorted[k] = address[k], o->end[k] = end[k];
        o->sorted_of[k] = (uint32_t)k, o->list[k] = list[k];
    }
    for (size_t p = 0; p < n; p++)
        o->position_of[list[p]] = (int64_t)p;
    o->ready = true;
    return x;
}

static void unmake(struct made *x)
{
    struct larder__mount_file_order *o = &x->o;
    free(o->address), free(o->end), free(o->sorted), free(o->sorted_of), free(o->list);
    free(o->position_of), free(o->seen), free(o->early);
    free(x);
}

TEST(mount_order_position_lowest_unseen)
{
    const uint64_t address[4] = {1000, 5000, 9000, 13000}, end[4] = {4000, 8000, 12000, 16000};
    const uint32_t list[4] = {2, 0, 3, 1};
    struct made *x = make(20000, 4, address, end, list);
    struct larder__mount_file_order *o = &x->o;
    /* the places moved are returned: the resolvers woken, one a place */
    CHECK_EQ(larder__mount_hdf5_order_seen_locked(o, 0, 500), 0); /* before every member */
    CHECK_EQ(o->position, 0);
    CHECK_EQ(larder__mount_hdf5_order_seen_locked(o, 13500, 100), 0); /* member 3: place 2 */
    CHECK_EQ(o->position, 0);
    /* between members 1 and 2: none */
    CHECK_EQ(larder__mount_hdf5_order_seen_locked(o, 8500, 200), 0);
    CHECK_EQ(o->position, 0);
    CHECK_EQ(larder__mount_hdf5_order_seen_locked(o, 9000, 10), 1); /* member 2: place 0 */
    CHECK_EQ(o->position, 1);
    /* members 0 and 1: places 1 and 3, and 2 was seen: three places on */
    CHECK_EQ(larder__mount_hdf5_order_seen_locked(o, 3900, 1200), 3);
    CHECK_EQ(o->position, 4);
    CHECK_EQ(larder__mount_hdf5_order_seen_locked(o, 9000, 10), 0); /* seen before */
    unmake(x);
}

/* Two members at one address (hard links to one object): a read there
 * touches both, whichever of them the search lands on. */
TEST(mount_order_position_members_at_one_address)
{
    const uint64_t address[4] = {1000, 1000, 5000, 9000}, end[4] = {4000, 4000, 8000, 12000};
    const uint32_t list[4] = {0, 1, 2, 3};
    struct made *x = make(20000, 4, address, end, list);
    struct larder__mount_file_order *o = &x->o;
    larder__mount_hdf5_order_seen_locked(o, 1500, 100);
    CHECK_EQ(o->seen[0], 1);
    CHECK_EQ(o->seen[1], 1);
    CHECK_EQ(o->position, 2);
    unmake(x);
}

/* Pages noted before the listing was ready, replayed: in a file of 1 GiB
 * the table is 32 KiB, mostly zero; pages anywhere in a 64-page word (its
 * first, a middle one, the file's last) are counted, nothing else is. */
TEST(mount_order_position_replays_early_pages)
{
    const uint64_t gib = UINT64_C(1) << 30;
    const uint64_t address[5] = {0, 100 << 20, 512 << 20, (512 << 20) + (37 << 12), gib - 4096};
    const uint64_t end[5] = {4096, (100 << 20) + 4096, (512 << 20) + 4096, (512 << 20) + (38 << 12),
                             gib};
    const uint32_t list[5] = {2, 3, 4, 0, 1};
    struct made *x = make(gib, 5, address, end, list);
    struct larder__mount_file_order *o = &x->o;
    o->early = calloc((size_t)(gib >> (LARDER__MOUNT_EARLY_SHIFT + 3)) + 1, 1);
    CHECK(o->early != NULL);
    uint64_t pages[3] = {(512 << 20) >> LARDER__MOUNT_EARLY_SHIFT,
                         ((512 << 20) >> LARDER__MOUNT_EARLY_SHIFT) + 37,
                         (gib >> LARDER__MOUNT_EARLY_SHIFT) - 1};
    for (int i = 0; i < 3; i++)
        o->early[pages[i] / 8] |= (uint8_t)(1u << pages[i] % 8);
    larder__mount_hdf5_order_replay_early_locked(o);
    CHECK(o->early == NULL);
    CHECK_EQ(o->seen[0], 1);
    CHECK_EQ(o->seen[1], 1);
    CHECK_EQ(o->seen[2], 1);
    CHECK_EQ(o->seen[3], 0); /* member 0, never read */
    CHECK_EQ(o->seen[4], 0); /* member 1 */
    CHECK_EQ(o->position, 3);
    unmake(x);
}
