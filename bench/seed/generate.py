#!/usr/bin/python3
"""Generate the seed benchmark's dataset in the three layouts it compares.

Samples are shaped like the seed paper's (a GNN's inputs, about 286 KB each):
two float32 fields, "graph" (9250 x 2, 74,000 bytes) and "features"
(1000 x 53, 212,000 bytes), with content that is a pure function of
(seed, sample number).  Written under OUT:

  samples.h5         HDF5, one group per sample ("s000000", ...) holding the
                     datasets "graph" and "features": the paper's baseline layout
  files/s000000.bin  one file per sample: graph's bytes, then features'
  larder/            larder shards and index.larder, packed from samples.h5
                     with `larder pack --hdf5-depth 1`

OUT/manifest.json records what was written; a second run with the same
arguments finds it and does nothing.

Usage: generate.py OUT --samples N [--seed S] [--larder build/larder]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

GRAPH_SHAPE = (9250, 2)      # 74,000 bytes of float32
FEATURES_SHAPE = (1000, 53)  # 212,000 bytes of float32
SAMPLE_BYTES = 4 * (GRAPH_SHAPE[0] * GRAPH_SHAPE[1] + FEATURES_SHAPE[0] * FEATURES_SHAPE[1])
LAYOUT_VERSION = 1


def key(i):
    return "s%06d" % i


def sample(seed, i):
    """Sample i's two fields: a pure function of (seed, i)."""
    rng = np.random.Generator(np.random.PCG64([seed, i]))
    graph = rng.standard_normal(GRAPH_SHAPE, dtype=np.float32)
    features = rng.standard_normal(FEATURES_SHAPE, dtype=np.float32)
    return graph, features


def generate(out, samples, seed, larder, shard_size):
    """Write the dataset under `out` unless it is there already; returns the
    seconds it took, or None when it was there."""
    manifest_path = os.path.join(out, "manifest.json")
    want = {"version": LAYOUT_VERSION, "samples": samples, "seed": seed,
            "graph_shape": list(GRAPH_SHAPE), "features_shape": list(FEATURES_SHAPE),
            "sample_bytes": SAMPLE_BYTES, "shard_size": shard_size}
    try:
        with open(manifest_path) as f:
            if json.load(f) == want:
                print(f"generate: {out} already holds this dataset", file=sys.stderr)
                return None
    except (OSError, ValueError):
        pass
    started = time.time()
    if os.path.exists(out):
        shutil.rmtree(out)
    files = os.path.join(out, "files")
    os.makedirs(files)
    h5_path = os.path.join(out, "samples.h5")
    with h5py.File(h5_path, "w") as h5:
        for i in range(samples):
            graph, features = sample(seed, i)
            group = h5.create_group(key(i))
            group.create_dataset("graph", data=graph)
            group.create_dataset("features", data=features)
            with open(os.path.join(files, key(i) + ".bin"), "wb") as f:
                f.write(graph.tobytes())
                f.write(features.tobytes())
    subprocess.run([larder, "pack", h5_path, "-o", os.path.join(out, "larder"),
                    "--hdf5-depth", "1", "--shard-size", shard_size],
                   check=True, stdout=subprocess.DEVNULL)
    with open(manifest_path, "w") as f:
        json.dump(want, f)
    took = time.time() - started
    print(f"generate: {samples} samples of {SAMPLE_BYTES} bytes in 3 layouts, {took:.1f} s",
          file=sys.stderr)
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--larder", default="build/larder")
    parser.add_argument("--shard-size", default="256M")
    args = parser.parse_args()
    generate(args.out, args.samples, args.seed, args.larder, args.shard_size)


if __name__ == "__main__":
    main()
