/*
 * sampler.h - the orders a reader of the mount may register for the rows
 * of one file (hdf5_order.c, docs/mount.md "A registered row order"):
 * PyTorch's DistributedSampler with shuffle, the order most training
 * scripts that read HDF5 through h5py use.  Pure arithmetic: no I/O, no
 * allocation but the caller's, so that it can be checked against torch's
 * own output (tests/unit/test_mount_sampler.c).
 *
 * torch (1.x and 2.x for n below 2^32 / 20) makes the permutation with its
 * CPU generator, an MT19937 seeded with the seed's low 32 bits:
 * r = [0, n); for i in [0, n - 1): swap r[i] and r[i + random() % (n - i)].
 * DistributedSampler(shuffle=True, seed=S, drop_last=False) uses seed
 * S + epoch, pads the permutation to a multiple of the world by repeating
 * its start, and gives rank R every world-th item from R on.
 */
#ifndef LARDER_MOUNT_SAMPLER_H
#define LARDER_MOUNT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* MT19937 as torch's CPU generator keeps it. */
struct larder__mount_mt19937 {
    uint32_t state[624];
    unsigned next;
};
void larder__mount_mt19937_seed(struct larder__mount_mt19937 *mt, uint64_t seed);
uint32_t larder__mount_mt19937_next(struct larder__mount_mt19937 *mt);

/* torch.randperm(n, generator=torch.Generator().manual_seed(seed)) into out[0..n). */
void larder__mount_torch_randperm(uint64_t seed, uint32_t *out, uint32_t n);

/*
 * What rank `rank` of `world` reads from torch's DistributedSampler over n
 * items (shuffle, drop_last False) at `epoch`: written to out, which the
 * caller sizes with larder__mount_torch_distributed_length; `scratch` holds
 * n entries.  The number written.
 */
size_t larder__mount_torch_distributed_length(uint32_t n, uint32_t world);
size_t larder__mount_torch_distributed(uint64_t seed, uint64_t epoch, uint32_t rank, uint32_t world,
                                       uint32_t n, uint32_t *scratch, uint32_t *out);

#endif
