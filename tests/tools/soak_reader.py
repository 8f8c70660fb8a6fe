"""One reader of the daemon soak (tests/cli/soak.sh, bench/soak.sh).

    soak_reader.py INDEX_URL SHARD_DIR SECONDS SEED OUT.json

Reads random samples through larder (its node daemon from LARDER_SOCKET,
the node cache from LARDER_CACHE) until SECONDS pass, compares each with
the bytes of the shard file itself (SHARD_DIR/<shard name>, at the
sample's offset: the origin's files, read without larder), and writes
counts and read latencies to OUT.json.  Any difference or error is
recorded with the sample, not raised, so the driver sees them all.
"""

import json
import os
import random
import sys
import time

import larder


def main():
    url, shard_dir, seconds, seed, out = sys.argv[1:6]
    seconds, rng = float(seconds), random.Random(int(seed))
    ds = larder.Dataset(url)
    n = len(ds)
    files = {}
    reads = wrong = errors = 0
    latencies = []
    problems = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        i = rng.randrange(n)
        info = ds.sample_info(i)
        f = files.get(info.shard_name)
        if f is None:
            f = files[info.shard_name] = open(os.path.join(shard_dir, info.shard_name), "rb")
        start = time.monotonic()
        try:
            data = ds.read(i)
        except larder.LarderError as e:
            errors += 1
            if len(problems) < 20:
                problems.append(f"sample {i}: {e}")
            continue
        finally:
            latencies.append(time.monotonic() - start)
        reads += 1
        f.seek(info.offset)
        if data != f.read(info.length):
            wrong += 1
            if len(problems) < 20:
                problems.append(f"sample {i}: wrong bytes")
    latencies.sort()
    with open(out, "w") as o:
        json.dump({"reads": reads, "wrong": wrong, "errors": errors,
                   "max_s": latencies[-1] if latencies else 0.0,
                   "p99_s": latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0,
                   "slow": sum(1 for t in latencies if t > 1.0),
                   "problems": problems}, o)


if __name__ == "__main__":
    main()
