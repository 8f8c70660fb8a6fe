/*
 * plan_perm.c - the keyed permutation of [0, n) that every sample order
 * derives from (plan.h; docs/plan.md specifies the key derivation, the
 * rounds and the network bit for bit): a Feistel network over the
 * smallest power of two >= n, with cycle walking back into [0, n).
 */
#include "plan.h"

#define GOLDEN UINT64_C(0x9e3779b97f4a7c15)
/* "larder01": the start of every key derivation (docs/plan.md). */
#define KEY_BASE UINT64_C(0x6c61726465723031)

static uint64_t low_mask(unsigned bits)
{
    return bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
}

void larder__perm_init(struct larder__perm *p, uint64_t n, uint64_t seed, uint64_t epoch,
                       uint64_t purpose, uint64_t index)
{
    unsigned bits = 0;
    while (bits < 64 && (UINT64_C(1) << bits) < n)
        bits++;
    p->n = n;
    p->high_bits = bits / 2;
    p->low_bits = bits - p->high_bits;
    p->rounds = bits <= 6 ? 32 : bits <= 12 ? 16 : 8;
    uint64_t h = KEY_BASE;
    h = larder__mix64(h ^ seed);
    h = larder__mix64(h ^ epoch);
    h = larder__mix64(h ^ purpose);
    h = larder__mix64(h ^ index);
    for (unsigned i = 0; i < p->rounds; i++)
        p->keys[i] = larder__mix64(h + (uint64_t)(i + 1) * GOLDEN);
}

/* One pass of the network over the whole power-of-two domain.  Even rounds
 * change the low half from the high one, odd rounds the reverse; each
 * round is its own inverse, so decryption runs the rounds backwards. */
static uint64_t feistel(const struct larder__perm *p, uint64_t x, bool inverse)
{
    uint64_t low_m = low_mask(p->low_bits), high_m = low_mask(p->high_bits);
    uint64_t low = x & low_m, high = x >> p->low_bits; /* low_bits <= 32 */
    for (unsigned step = 0; step < p->rounds; step++) {
        unsigned round = inverse ? p->rounds - 1 - step : step;
        if (round % 2 == 0)
            low ^= larder__mix64(p->keys[round] ^ high) & low_m;
        else
            high ^= larder__mix64(p->keys[round] ^ low) & high_m;
    }
    return p->high_bits ? high << p->low_bits | low : low;
}

/* Cycle walking: apply the network until the value falls back into [0, n).
 * It terminates because x < n lies on a cycle of the domain permutation. */
uint64_t larder__perm_forward(const struct larder__perm *p, uint64_t x)
{
    if (p->n <= 1) return x;
    do
        x = feistel(p, x, false);
    while (x >= p->n);
    return x;
}

uint64_t larder__perm_inverse(const struct larder__perm *p, uint64_t y)
{
    if (p->n <= 1) return y;
    do
        y = feistel(p, y, true);
    while (y >= p->n);
    return y;
}
