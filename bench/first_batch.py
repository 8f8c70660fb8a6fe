"""Time to the first batch of a PyTorch DataLoader, one reader per process.

    first_batch.py make DIR SAMPLES SHARDS      # write the data set three ways
    first_batch.py run READER DIR [WORKERS BATCH]

`make` writes SAMPLES samples (key.bin: random bytes of 4 to 60 KiB,
key.cls: a label) as SHARDS tar shards under DIR/tar and the same samples
into DIR/data.h5 (a variable-length uint8 dataset "bin" and an int64
dataset "cls"); `larder index` then indexes the tar shards in place
(bench/first_batch.sh does that).

Every reader hands the training loop {"bin": bytes, "cls": int} samples,
collated into a list of bytes and a tensor of labels.

`run` starts from a process that has imported torch (every reader needs
it) and prints one line of JSON: the milliseconds from there to the first
batch in the training loop ("first_ms"), and on the way: importing the
reader's module ("import_ms"), building the dataset and the loader
("setup_ms"), iter() ("iter_ms", where the workers are started) and the
first next() ("next_ms").  READER is one of:

    larder   larder.torch.IterableDataset over DIR/tar/index.larder (no
             cache) in a larder.torch.DataLoader
    larder-warm, larder-cold  the same with the node cache in
             DIR/cache-warm or DIR/cache-cold (first_batch.sh fills the
             first with every sample beforehand and removes the second
             before each run)
    larder-http  the same over HTTP: the index and shards at the URL in
             $FIRST_BATCH_URL (first_batch.sh serves DIR/tar with
             tools/httpdelay, 20 ms a request), the node cache in
             DIR/cache-http, removed before each run: a cold remote origin
    tar      an IterableDataset streaming the tar shards with Python's
             tarfile (1 MiB reads), shards split over the workers
    h5py     a map-style Dataset over DIR/data.h5 (each worker opens the
             file on first use), shuffled, in a torch DataLoader
"""

import json
import os
import sys
import time

T0 = None


def make(root, samples, shards):
    import io
    import random
    import tarfile

    import h5py
    import numpy

    rng = random.Random(1)
    os.makedirs(os.path.join(root, "tar"), exist_ok=True)
    blobs, labels = [], []
    for i in range(samples):
        blobs.append(rng.randbytes(rng.randrange(4096, 61440)))
        labels.append(i % 10)
    per = -(-samples // shards)
    for s in range(shards):
        with tarfile.open(os.path.join(root, "tar", f"shard-{s:04d}.tar"), "w",
                          format=tarfile.USTAR_FORMAT) as tar:
            for i in range(s * per, min(samples, (s + 1) * per)):
                for ext, data in (("bin", blobs[i]), ("cls", b"%d\n" % labels[i])):
                    member = tarfile.TarInfo(f"s{i:06d}.{ext}")
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
    with h5py.File(os.path.join(root, "data.h5"), "w") as f:
        blob = f.create_dataset("bin", (samples,), dtype=h5py.vlen_dtype(numpy.uint8))
        for i, data in enumerate(blobs):
            blob[i] = numpy.frombuffer(data, dtype=numpy.uint8)
        f.create_dataset("cls", data=numpy.array(labels, dtype=numpy.int64))


def training_sample(sample):
    """What every reader hands the training loop: the blob's bytes and the
    label as an int (a tensor once collated), so that every batch is the
    same kind of object, with one tensor in it."""
    return {"bin": sample["bin"], "cls": int(sample["cls"])}


def tar_reader(root):
    import tarfile

    import torch.utils.data

    class TarStream(torch.utils.data.IterableDataset):
        """WebDataset-style streaming: each worker reads whole shards in
        order, grouping members by key."""

        def __init__(self, shards):
            self.shards = shards

        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
            for path in self.shards[worker::workers]:
                with open(path, "rb", buffering=1 << 20) as raw, \
                        tarfile.open(fileobj=raw, mode="r|", bufsize=1 << 20) as tar:
                    sample = None
                    for member in tar:
                        key, ext = member.name.split(".", 1)
                        if sample is not None and sample["__key__"] != key:
                            yield training_sample(sample)
                            sample = None
                        if sample is None:
                            sample = {"__key__": key}
                        sample[ext] = tar.extractfile(member).read()
                    if sample is not None:
                        yield training_sample(sample)

    folder = os.path.join(root, "tar")
    shards = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tar"))
    return TarStream(shards)


def h5_reader(root):
    import h5py
    import torch.utils.data

    class H5(torch.utils.data.Dataset):
        def __init__(self, path):
            self.path = path
            with h5py.File(path, "r") as f:
                self.n = len(f["cls"])
            self.file = None

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            if self.file is None:
                self.file = h5py.File(self.path, "r")
            return {"bin": self.file["bin"][i].tobytes(), "cls": int(self.file["cls"][i])}

    return H5(os.path.join(root, "data.h5"))


def run(reader, root, workers, batch):
    import torch.utils.data

    marks = {}
    start = time.perf_counter()
    if reader.startswith("larder"):
        import larder.torch

        marks["import_ms"] = time.perf_counter()
        cache = "" if reader == "larder" else os.path.join(root, "cache-" + reader[7:])
        index = os.path.join(root, "tar", "index.larder")
        if reader == "larder-http":
            index = os.environ["FIRST_BATCH_URL"] + "/index.larder"
        ds = larder.torch.IterableDataset(index, cache=cache, batch_size=batch, seed=1,
                                          decode=training_sample)
        loader = larder.torch.DataLoader(ds, num_workers=workers)
    elif reader == "tar":
        ds = tar_reader(root)
        marks["import_ms"] = time.perf_counter()
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)
    elif reader == "h5py":
        import h5py  # noqa: F401

        marks["import_ms"] = time.perf_counter()
        ds = h5_reader(root)
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                             shuffle=True)
    else:
        raise SystemExit(f"unknown reader {reader}")
    marks["setup_ms"] = time.perf_counter()
    batches = iter(loader)
    marks["iter_ms"] = time.perf_counter()
    first = next(batches)
    marks["next_ms"] = time.perf_counter()
    assert len(first["bin"]) == batch and first["cls"].shape == (batch,)
    out, last = {"reader": reader, "first_ms": (marks["next_ms"] - T0) * 1000}, start
    out["torch_to_start_ms"] = (start - T0) * 1000
    for name in ("import_ms", "setup_ms", "iter_ms", "next_ms"):
        out[name] = (marks[name] - last) * 1000
        last = marks[name]
    del batches  # stop the workers before the interpreter goes
    print(json.dumps(out))


if __name__ == "__main__":
    import torch  # noqa: F401  (the common start: every reader needs torch)

    T0 = time.perf_counter()
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        workers = int(sys.argv[4]) if len(sys.argv) > 4 else 4
        batch = int(sys.argv[5]) if len(sys.argv) > 5 else 8
        run(sys.argv[2], sys.argv[3], workers, batch)
