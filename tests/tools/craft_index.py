#!/usr/bin/env python3
"""craft_index.py - an independent writer of larder's index format, for tests.

Written from docs/format.md alone: it imports nothing of larder and calls
no larder code, so an index it writes is evidence about the format, not
about larder's own writer.  Hashes come from the python `xxhash` module
when it is installed, else from Debian's libxxhash (ctypes), which larder
builds against anyway (scripts/install-deps installs libxxhash-dev).

It makes a small good dataset (one tar shard written by Python's tarfile,
one flat shard) and hostile variants of its index: shard names that leave
the index's directory, absurd shard sizes, samples and fields that run
past their container, overlapping samples, duplicate keys, another
dataset's id.  Every variant keeps a correct header checksum and (except
where stolen) a correct dataset id, so the only defect is the one named.

    craft_index.py make DIR [--seed N] [--samples N] [--sample-size B]
                            [--layout tar+flat|fuzz] [--block-size B]
        writes DIR/<shards>, DIR/index.larder, DIR/layout.json and, per
        sample, DIR/expect/KEY (its bytes) and DIR/expect/KEY.FIELD
    craft_index.py variant DIR NAME [-o OUT] [--steal-id-from INDEX]
        writes a crafted index next to the shards (default DIR/NAME.larder)
        and prints one JSON line: what a reader of it should see
    craft_index.py list
        the variant names, one a line
    craft_index.py fuzz-seeds OUTDIR
        fuzz/corpus/open seeds: the good index of the fuzz layout (the
        shard files fuzz/fuzz_open.c writes) and its variants

The `fuzz` layout is two flat shards, shard-0.bin and shard-1.bin, whose
bytes come from a 64-bit LCG (fuzz_bytes below; fuzz/fuzz_open.c makes
the same bytes), so seeds written here have right checksums there.
"""

import copy
import ctypes
import ctypes.util
import io
import json
import os
import random
import struct
import sys
import tarfile

# ---- hashes -----------------------------------------------------------------

try:
    import xxhash as _xxhash  # pip/Debian python3-xxhash, when present

    def xxh3_64(data):
        return _xxhash.xxh3_64_intdigest(bytes(data))

    def xxh3_128(data):
        v = _xxhash.xxh3_128_intdigest(bytes(data))
        return v & (2**64 - 1), v >> 64  # low, high

except ImportError:  # Debian 12 has libxxhash0 (a larder build dependency)

    class _XXH128(ctypes.Structure):
        _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]

    _lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    _lib.XXH3_64bits.restype = ctypes.c_uint64
    _lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    _lib.XXH3_128bits.restype = _XXH128
    _lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def xxh3_64(data):
        data = bytes(data)
        return _lib.XXH3_64bits(data, len(data))

    def xxh3_128(data):
        data = bytes(data)
        h = _lib.XXH3_128bits(data, len(data))
        return h.low64, h.high64


# ---- the format (docs/format.md) --------------------------------------------

MAGIC = b"LARDERIX"
HEADER = 128
SHARD_RECORD, SAMPLE_RECORD, FIELD_RECORD = 32, 48, 40
FORMAT_TAR, FORMAT_FLAT = 1, 2
DTYPES = {"bytes": (0, 0), "uint8": (1, 1), "int8": (2, 1), "uint16": (3, 2), "int16": (4, 2),
          "uint32": (5, 4), "int32": (6, 4), "uint64": (7, 8), "int64": (8, 8),
          "float16": (9, 2), "float32": (10, 4), "float64": (11, 8), "bool": (12, 1)}
U64 = 2**64 - 1


class Strings:
    """The string table: u32 length, the bytes, a NUL; each string once."""

    def __init__(self):
        self.data = bytearray()
        self.at = {}

    def ref(self, text):
        raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if raw not in self.at:
            self.at[raw] = len(self.data)
            self.data += struct.pack("<I", len(raw)) + raw + b"\0"
        return self.at[raw]


def key_slots_for(n):
    """The smallest power of two above n with load at most 3/4."""
    slots = 1
    while slots <= n or slots * 3 < n * 4:
        slots *= 2
    return slots


def build_index(layout, stolen_id=None):
    """The bytes of an index for `layout` (the dict layout.json holds).

    Records are written as given, checked against nothing: that is the
    point.  The dataset id is the content hash unless `stolen_id` (16
    bytes) replaces it; the header checksum is always right.
    """
    shards, samples = layout["shards"], layout["samples"]
    strings = Strings()
    for s in shards:  # shard names first, together (the format's advice)
        strings.ref(s["name"])
    fields, dims = [], []
    for s in samples:
        s["_first_field"] = len(fields)
        for f in s["fields"]:
            code, _ = DTYPES[f.get("dtype", "bytes")]
            shape = f.get("shape", [])
            fields.append((f["name"], f["offset"], f["length"], len(dims) if code else 0, code,
                           len(shape) if code else 0))
            if code:
                dims.extend(shape)
    slots = key_slots_for(len(samples))
    table = [0] * slots
    for i, s in enumerate(samples):  # every sample, duplicates included
        h = xxh3_64(s["key"].encode("utf-8"))
        slot = h & (slots - 1)
        while table[slot]:
            slot = (slot + 1) & (slots - 1)
        table[slot] = (h >> 40) << 40 | (i + 1)

    body = bytearray()
    for s in shards:
        body += struct.pack("<QQQII", strings.ref(s["name"]), s["size"], s["checksum"],
                            s["format"], 0)
    for s in samples:
        body += struct.pack("<QQQQQII", s["offset"] & U64, s["length"] & U64, s["checksum"],
                            strings.ref(s["key"]), s["_first_field"], s["shard"],
                            len(s["fields"]))
    for name, offset, length, first_dim, code, ndim in fields:
        body += struct.pack("<QQQQBB6x", strings.ref(name), offset & U64, length & U64,
                            first_dim, code, ndim)
    for d in dims:
        body += struct.pack("<Q", d)
    for slot in table:
        body += struct.pack("<Q", slot)
    body += strings.data
    for s in samples:
        del s["_first_field"]

    size = HEADER + len(body)
    header = bytearray(HEADER)
    header[0:8] = MAGIC
    struct.pack_into("<II", header, 8, 1, HEADER)
    struct.pack_into("<QQQQQQQQ", header, 32, len(shards), len(samples), len(fields), len(dims),
                     slots, len(strings.data), sum(s["length"] & U64 for s in samples) & U64,
                     size)
    struct.pack_into("<II", header, 96, layout["block_size"], 0)
    image = bytearray(header + body)
    if stolen_id is None:
        low, high = xxh3_128(image)  # id and checksum bytes are still zero here
        struct.pack_into("<QQ", image, 16, low, high)
    else:
        image[16:32] = stolen_id
    struct.pack_into("<Q", image, 120, xxh3_64(image[:120]))
    return bytes(image)


def dataset_id_hex(image):
    """The dataset id as larder prints it: high 64 bits first, 32 hex digits."""
    low, high = struct.unpack_from("<QQ", image, 16)
    return f"{high:016x}{low:016x}"


# ---- a good dataset ------------------------------------------------------------


def fuzz_bytes(shard, size):
    """Shard `shard` of the fuzz layout: byte i is the top byte of the
    (i+1)-th step of x = x * 6364136223846793005 + 1442695040888963407
    (mod 2^64) from x = shard + 1.  fuzz/fuzz_open.c writes the same."""
    x, out = shard + 1, bytearray(size)
    for i in range(size):
        x = (x * 6364136223846793005 + 1442695040888963407) & U64
        out[i] = x >> 56
    return bytes(out)


def make_layout(directory, seed=1, per_shard=6, sample_size=20000, kind="tar+flat",
                block_size=65536):
    """Write the shards of a good dataset into `directory` and return its
    layout (records as dicts) plus each sample's bytes by key."""
    rng = random.Random(seed)
    shards, samples, expect = [], [], {}

    def sizes():
        return [rng.randint(sample_size // 4, sample_size * 7 // 4) for _ in range(per_shard)]

    if kind == "fuzz":
        specs = [("shard-0.bin", fuzz_bytes(0, 6000), [900, 1500, 700, 2000, 900]),
                 ("shard-1.bin", fuzz_bytes(1, 9000), [3000, 64, 2500, 1, 3435])]
        for number, (name, data, lengths) in enumerate(specs):
            offset = 0
            for j, length in enumerate(lengths):
                body = data[offset:offset + length]
                half = length // 2
                fields = [{"name": "head", "offset": 0, "length": half},
                          {"name": "tail", "offset": half, "length": length - half}]
                if length >= 64 and j == 0:  # one array field: 4 x 2 float64
                    fields.append({"name": "arr", "offset": 0, "length": 64,
                                   "dtype": "float64", "shape": [4, 2]})
                samples.append({"shard": number, "offset": offset, "length": length,
                                "checksum": xxh3_64(body), "key": f"s{number}/{j:02d}",
                                "fields": fields})
                expect[f"s{number}/{j:02d}"] = body
                offset += length
            shards.append({"name": name, "size": len(data), "checksum": xxh3_64(data),
                           "format": FORMAT_FLAT})
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)
        return {"block_size": block_size, "shards": shards, "samples": samples}, expect

    # shard 0: a ustar archive by Python's tarfile, members KEY.txt, KEY.bin
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for j, length in enumerate(sizes()):
            key = f"t{j:04d}"
            for ext, data in (("txt", f"{key}\n".encode() * (length // 6 + 1)),
                              ("bin", rng.randbytes(length))):
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
                t.addfile(ti, io.BytesIO(data))
    tar = buf.getvalue()
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        members = t.getmembers()
    for j in range(0, len(members), 2):
        first, last = members[j], members[j + 1]
        start = first.offset
        end = last.offset_data + (last.size + 511) // 512 * 512
        fields = [{"name": m.name.split(".", 1)[1], "offset": m.offset_data - start,
                   "length": m.size} for m in (first, last)]
        key = first.name.split(".", 1)[0]
        samples.append({"shard": 0, "offset": start, "length": end - start,
                        "checksum": xxh3_64(tar[start:end]), "key": key, "fields": fields})
        expect[key] = tar[start:end]
    shards.append({"name": "shard-0.tar", "size": len(tar), "checksum": xxh3_64(tar),
                   "format": FORMAT_TAR})

    # shard 1: flat, each sample a "bin" field then a float32 array "arr"
    flat = bytearray()
    for j, length in enumerate(sizes()):
        key = f"f{j:04d}"
        rows = j + 1
        data = rng.randbytes(length)
        arr = struct.pack(f"<{rows * 4}f", *(float(rows * 10 + k) for k in range(rows * 4)))
        fields = [{"name": "bin", "offset": 0, "length": length},
                  {"name": "arr", "offset": length, "length": len(arr), "dtype": "float32",
                   "shape": [rows, 4]}]
        body = data + arr
        samples.append({"shard": 1, "offset": len(flat), "length": len(body),
                        "checksum": xxh3_64(body), "key": key, "fields": fields})
        expect[key] = body
        flat += body
    shards.append({"name": "shard-1.bin", "size": len(flat), "checksum": xxh3_64(flat),
                   "format": FORMAT_FLAT})
    with open(os.path.join(directory, "shard-0.tar"), "wb") as f:
        f.write(tar)
    with open(os.path.join(directory, "shard-1.bin"), "wb") as f:
        f.write(flat)
    return {"block_size": block_size, "shards": shards, "samples": samples}, expect


def make(directory, **kwargs):
    """A good dataset in `directory`: shards, index.larder, layout.json and
    expect/ (each sample's bytes, and each field's as KEY.FIELD)."""
    os.makedirs(directory, exist_ok=True)
    layout, expect = make_layout(directory, **kwargs)
    image = build_index(copy.deepcopy(layout))
    with open(os.path.join(directory, "index.larder"), "wb") as f:
        f.write(image)
    layout["dataset_id"] = dataset_id_hex(image)
    with open(os.path.join(directory, "layout.json"), "w") as f:
        json.dump(layout, f, indent=1)
    for s in layout["samples"]:
        body = expect[s["key"]]
        path = os.path.join(directory, "expect", s["key"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(body)
        for fl in s["fields"]:
            with open(f"{path}.{fl['name']}", "wb") as f:
                f.write(body[fl["offset"]:fl["offset"] + fl["length"]])
    return layout


# ---- hostile variants -------------------------------------------------------
#
# Each takes (layout, directory) and changes the layout in place; it returns
# what a reader should see:
#   at:        "none" (not hostile: it opens and reads),
#              "open" (refused when opened), "sample" (when that sample is
#              read or inspected), "inspect" (a full check finds it),
#              "daemon" (only the node daemon's registry is at stake)
#   code:      the larder error name expected
#   needles:   strings the error message contains (each may list
#              alternatives separated by "|": a sample by number or key)
#   bad_key, bad_sample, bad_field: the record at fault (when it is one)
#   good_key:  a sample of the same index that still reads (directly)
#   trust_reads: with trust (--trust-index), good_key and trust_key read right
#   trust_key: a sample on the shard whose name is crafted


def _flat_samples(layout):
    return [i for i, s in enumerate(layout["samples"]) if s["shard"] == len(layout["shards"]) - 1]


def _rename_last_shard(new_name, trust_reads):
    def mutate(layout, directory):
        number = len(layout["shards"]) - 1
        name = new_name(layout, directory, layout["shards"][number]["name"])
        layout["shards"][number]["name"] = name
        victim = _flat_samples(layout)[0]
        return {"at": "open", "code": "EBADINDEX", "needles": [f"shard {number}", name],
                "shard": number, "name": name, "trust_reads": trust_reads,
                "trust_key": layout["samples"][victim]["key"],
                "good_key": layout["samples"][0]["key"]}
    return mutate


def _shard_size(size):
    def mutate(layout, directory):
        layout["shards"][0]["size"] = size
        return {"at": "open", "code": "EBADINDEX", "needles": ["shard 0"], "shard": 0,
                "size": size, "trust_reads": False, "good_key": layout["samples"][0]["key"]}
    return mutate


def _bad_sample(layout, which, **changes):
    ids = _flat_samples(layout)
    bad, good = ids[which], ids[0] if which else ids[-1]
    layout["samples"][bad].update(changes)
    s = layout["samples"][bad]
    return {"at": "sample", "code": "EBADINDEX", "needles": [f"sample {bad}|'{s['key']}'"],
            "bad_sample": bad, "bad_key": s["key"], "good_key": layout["samples"][good]["key"],
            "trust_reads": False}


def _past_end(layout, directory):
    ids = _flat_samples(layout)
    s = layout["samples"][ids[2]]
    size = layout["shards"][s["shard"]]["size"]
    return _bad_sample(layout, 2, length=size - s["offset"] + 1)


def _offset_wraps(layout, directory):
    return _bad_sample(layout, 2, offset=U64 - 15, length=32)


def _bad_field(offset_of, length_of):
    def mutate(layout, directory):
        ids = _flat_samples(layout)
        bad = ids[1]
        s = layout["samples"][bad]
        f = s["fields"][1]
        f["offset"], f["length"] = offset_of(s, f), length_of(s, f)
        f.pop("dtype", None)  # plain bytes: only the span is wrong
        f.pop("shape", None)
        return {"at": "sample", "code": "EBADINDEX", "needles": [f"sample {bad}|'{s['key']}'"],
                "bad_sample": bad, "bad_key": s["key"], "bad_field": f["name"],
                "bad_field_number": 1, "good_key": layout["samples"][ids[0]]["key"],
                "trust_reads": False}
    return mutate


def _overlap(layout, directory):
    """The second flat sample starts in the middle of the first; its
    checksum is right for its new range, so only the overlap is wrong."""
    ids = _flat_samples(layout)
    first, second = layout["samples"][ids[0]], layout["samples"][ids[1]]
    second["offset"] = first["offset"] + first["length"] // 2
    with open(os.path.join(directory, layout["shards"][second["shard"]]["name"]), "rb") as f:
        f.seek(second["offset"])
        second["checksum"] = xxh3_64(f.read(second["length"]))
    return {"at": "inspect", "code": "EBADINDEX", "needles": ["overlap"],
            "bad_sample": ids[1], "bad_key": second["key"],
            "good_key": layout["samples"][ids[-1]]["key"], "trust_reads": False}


def _duplicate_key(layout, directory):
    ids = _flat_samples(layout)
    original = layout["samples"][0]["key"]
    layout["samples"][ids[3]]["key"] = original
    return {"at": "inspect", "code": "EDUPKEY", "needles": ["duplicate key", original],
            "dup_key": original, "bad_sample": ids[3],
            "good_key": layout["samples"][ids[0]]["key"], "trust_reads": False}


def _stolen_id(layout, directory):
    return {"at": "daemon", "code": None, "needles": [], "trust_reads": False,
            "good_key": layout["samples"][0]["key"]}


def _allowed_name(relative):
    """Not hostile: the flat shard copied to `relative` (below the index's
    directory) and named so; every opener must take it as it is."""
    def mutate(layout, directory):
        number = len(layout["shards"]) - 1
        source = os.path.join(directory, layout["shards"][number]["name"])
        target = os.path.join(directory, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(source, "rb") as f, open(target, "wb") as g:
            g.write(f.read())
        layout["shards"][number]["name"] = relative
        return {"at": "none", "code": None, "needles": [], "trust_reads": False,
                "good_key": layout["samples"][_flat_samples(layout)[0]]["key"]}
    return mutate


VARIANTS = {
    # not hostile: names that stay below the index's directory (no opener
    # may refuse them)
    "subdir": _allowed_name("sub/dir/shard-1.bin"),
    "dots-in-name": _allowed_name("..shard..1...bin"),
    # names that leave the index's directory: refused at open unless trusted
    "abs-path": _rename_last_shard(
        lambda l, d, n: os.path.join(os.path.abspath(d), n), True),
    "dotdot": _rename_last_shard(
        lambda l, d, n: f"../{os.path.basename(os.path.abspath(d))}/{n}", True),
    "inner-dotdot": _rename_last_shard(lambda l, d, n: f"sub/../{n}", False),
    "file-url": _rename_last_shard(
        lambda l, d, n: "file://" + os.path.join(os.path.abspath(d), n), True),
    "http-url": _rename_last_shard(lambda l, d, n: f"http://127.0.0.1:9/{n}", False),
    # a port no URL may have: a build that tries it fails at once, without
    # the retries of a refused connection (the fuzz seeds use this one)
    "https-url": _rename_last_shard(lambda l, d, n: f"https://127.0.0.1:99999/{n}", False),
    "etc-passwd": _rename_last_shard(lambda l, d, n: "/etc/passwd", False),
    # shard sizes no shard has
    "size-2p63": _shard_size(2**63),
    "size-2p64-1": _shard_size(2**64 - 1),
    "size-2p64-4096": _shard_size(2**64 - 4096),
    "size-2p56+64k": _shard_size(2**56 + 65536),
    # records that run past their container
    "sample-past-end": _past_end,
    "sample-offset-wraps": _offset_wraps,
    "field-past-sample": _bad_field(lambda s, f: f["offset"],
                                    lambda s, f: s["length"] - f["offset"] + 1),
    "field-offset-wraps": _bad_field(lambda s, f: U64 - 7, lambda s, f: 16),
    # whole-index problems
    "overlap": _overlap,
    "duplicate-key": _duplicate_key,
    "stolen-id": _stolen_id,
}


def variant(directory, name, out=None, steal_id_from=None):
    """Write variant `name` of the dataset in `directory`; returns its
    expectations (with "path", the index written, and "key_of": the
    sample keys by id)."""
    with open(os.path.join(directory, "layout.json")) as f:
        layout = json.load(f)
    layout.pop("dataset_id", None)
    expect = VARIANTS[name](layout, directory)
    stolen = None
    if name == "stolen-id":
        if not steal_id_from:
            raise SystemExit("stolen-id needs --steal-id-from INDEX")
        with open(steal_id_from, "rb") as f:
            stolen = f.read(32)[16:32]
    elif steal_id_from:
        raise SystemExit("--steal-id-from is for stolen-id only")
    image = build_index(layout, stolen_id=stolen)
    out = out or os.path.join(directory, f"{name}.larder")
    with open(out, "wb") as f:
        f.write(image)
    expect.update(variant=name, path=out, dataset_id=dataset_id_hex(image))
    return expect


def fuzz_seeds(outdir):
    """Seeds for fuzz/corpus/open: the fuzz layout's good index and every
    variant of it that needs nothing outside the fuzz target's directory."""
    import tempfile

    os.makedirs(outdir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        make(tmp, kind="fuzz", block_size=4096)
        written = []
        with open(os.path.join(tmp, "index.larder"), "rb") as f:
            images = {"good": f.read()}
        for name in VARIANTS:
            if name in ("stolen-id", "abs-path", "file-url", "dotdot", "http-url", "subdir",
                        "dots-in-name"):
                continue  # these name the temporary directory or files the fuzz target
                # does not have, or (http-url) cost seconds of retries per run in a build
                # that tries them
            v = variant(tmp, name)
            with open(v["path"], "rb") as f:
                images[name] = f.read()
        for name, image in images.items():
            path = os.path.join(outdir, f"craft-{name}")
            with open(path, "wb") as f:
                f.write(image)
            written.append(path)
    return written


def main(argv):
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--samples", type=int, default=6, help="samples per shard")
    m.add_argument("--sample-size", type=int, default=20000)
    m.add_argument("--layout", choices=["tar+flat", "fuzz"], default="tar+flat")
    m.add_argument("--block-size", type=int, default=65536)
    v = sub.add_parser("variant")
    v.add_argument("dir")
    v.add_argument("name", choices=sorted(VARIANTS))
    v.add_argument("-o", "--output")
    v.add_argument("--steal-id-from")
    sub.add_parser("list")
    s = sub.add_parser("fuzz-seeds")
    s.add_argument("outdir")
    a = p.parse_args(argv)
    if a.command == "make":
        layout = make(a.dir, seed=a.seed, per_shard=a.samples, sample_size=a.sample_size,
                      kind=a.layout, block_size=a.block_size)
        print(json.dumps({"dataset_id": layout["dataset_id"],
                          "keys": [s["key"] for s in layout["samples"]]}))
    elif a.command == "variant":
        print(json.dumps(variant(a.dir, a.name, a.output, a.steal_id_from)))
    elif a.command == "list":
        print("\n".join(VARIANTS))
    else:
        print("\n".join(fuzz_seeds(a.outdir)))


if __name__ == "__main__":
    main(sys.argv[1:])
