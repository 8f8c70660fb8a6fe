/*
 * sampler.c - PyTorch's sampling orders (sampler.h), reproduced.
 */
#include "sampler.h"

void larder__mount_mt19937_seed(struct larder__mount_mt19937 *mt, uint64_t seed)
{
    mt->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (unsigned j = 1; j < 624; j++)
        mt->state[j] = 1812433253u * (mt->state[j - 1] ^ (mt->state[j - 1] >> 30)) + j;
    mt->next = 624;
}

uint32_t larder__mount_mt19937_next(struct larder__mount_mt19937 *mt)
{
    if (mt->next >= 624) {
        for (unsigned k = 0; k < 624; k++) {
            uint32_t y = (mt->state[k] & 0x80000000u) | (mt->state[(k + 1) % 624] & 0x7fffffffu);
            mt->state[k] = mt->state[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        mt->next = 0;
    }
    uint32_t y = mt->state[mt->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

void larder__mount_torch_randperm(uint64_t seed, uint32_t *out, uint32_t n)
{
    struct larder__mount_mt19937 mt;
    larder__mount_mt19937_seed(&mt, seed);
    for (uint32_t i = 0; i < n; i++)
        out[i] = i;
    for (uint32_t i = 0; i + 1 < n; i++) {
        uint32_t z = larder__mount_mt19937_next(&mt) % (n - i);
        uint32_t swap = out[i];
        out[i] = out[i + z];
        out[i + z] = swap;
    }
}

size_t larder__mount_torch_distributed_length(uint32_t n, uint32_t world)
{
    if (world == 0) return 0;
    return ((size_t)n + world - 1) / world; /* ceil: the padded share */
}

size_t larder__mount_torch_distributed(uint64_t seed, uint64_t epoch, uint32_t rank, uint32_t world,
                                       uint32_t n, uint32_t *scratch, uint32_t *out)
{
    if (n == 0 || world == 0 || rank >= world) return 0;
    larder__mount_torch_randperm(seed + epoch, scratch, n);
    size_t share = larder__mount_torch_distributed_length(n, world), total = share * world, k = 0;
    for (size_t i = rank; i < total; i += world)
        out[k++] = scratch[i % n]; /* past n: the padding repeats the start */
    return k;
}
