/*
 * test_mount_sampler.c - PyTorch's orders as the mount reproduces them
 * (src/mount/sampler.c), against torch 1.13's own output, printed with
 *
 *   g = torch.Generator(); g.manual_seed(3); torch.randperm(10, generator=g).tolist()
 *   s = DistributedSampler(range10, num_replicas=3, rank=1, shuffle=True, seed=5)
 *   s.set_epoch(2); list(s)
 *   g.manual_seed(7); p = torch.randperm(12800, generator=g).tolist(); p[:5], p[-3:]
 */
#include "sampler.h"
#include "test.h"

#include <stdlib.h>

TEST(mount_sampler_randperm_is_torchs)
{
    uint32_t r[10];
    const uint32_t want[10] = {6, 0, 3, 7, 8, 5, 1, 9, 2, 4};
    larder__mount_torch_randperm(3, r, 10);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(r[i], want[i]);
    uint32_t *big = malloc(12800 * sizeof *big);
    CHECK(big != NULL);
    larder__mount_torch_randperm(7, big, 12800);
    const uint32_t head[5] = {10415, 3781, 2799, 5251, 9091}, tail[3] = {2772, 8804, 2640};
    for (int i = 0; i < 5; i++)
        CHECK_EQ(big[i], head[i]);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(big[12797 + i], tail[i]);
    free(big);
}

TEST(mount_sampler_distributed_is_torchs)
{
    uint32_t scratch[10], out[4];
    CHECK_EQ(larder__mount_torch_distributed_length(10, 3), (size_t)4);
    /* seed 5 + epoch 2; padded to 12 by repeating the start */
    CHECK_EQ(larder__mount_torch_distributed(5, 2, 1, 3, 10, scratch, out), (size_t)4);
    const uint32_t want[4] = {0, 1, 6, 5};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(out[i], want[i]);
    CHECK_EQ(larder__mount_torch_distributed(5, 2, 3, 3, 10, scratch, out), (size_t)0);
    CHECK_EQ(larder__mount_torch_distributed(5, 2, 0, 0, 10, scratch, out), (size_t)0);
}
