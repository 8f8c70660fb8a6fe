"""One rank of the torch.distributed test (test_torch.py): joins a gloo
group from the environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE),
reads an epoch with larder.torch, and rank 0 writes every rank's batches
as JSON.

usage: dist_worker.py INDEX OUT.json NUM_WORKERS
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

import torch.distributed as dist  # noqa: E402

import larder.torch as lt  # noqa: E402


def main():
    index, out, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # the environment says the same; make sure torch.distributed is what is read
    os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "1"
    ds = lt.IterableDataset(index, seed=21, batch_size=8)
    assert ds.topology() == (rank, world), (ds.topology(), rank, world)
    loader = lt.DataLoader(ds, num_workers=workers)
    batches = [batch["__index__"].tolist() for batch in loader]
    gathered = [None] * world
    dist.all_gather_object(gathered, {"batches": batches, "state": ds.state_dict(),
                                      "waits": ds.wait_stats()["count"]})
    if rank == 0:
        with open(out, "w") as f:
            json.dump(gathered, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
