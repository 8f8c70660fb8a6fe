#!/usr/bin/env python3
"""check_files_index.py - check an index of plain files against the files.

Written from docs/format.md alone (versions 1 to 3): it imports nothing of
larder and calls no larder code, so agreement is evidence about the
format and larder's indexer, not larder agreeing with itself.  Hashes
come from the python `xxhash` module (Debian python3-xxhash) when it is
installed, else from the `xxhsum` tool (Debian xxhash); with neither it
exits 77.

    check_files_index.py INDEX ROOT

For every sample: its key names a file under ROOT, its length is the
file's size, its checksum XXH3-64 of the file; the sample is its shard's
only one, at offset 0, with one field holding all of it.  For every shard
with checksum blocks (version 3): one XXH3-64 per 2^shift bytes of the
file, each recomputed here.  Prints "ok N files, M block checksums".
"""

import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import xxhash

    def xxh3_64(data):
        return xxhash.xxh3_64_intdigest(data)

except ImportError:
    if not shutil.which("xxhsum"):
        print("skipped: neither python3-xxhash nor xxhsum is installed")
        sys.exit(77)

    def xxh3_64(data):
        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            out = subprocess.run(["xxhsum", "-H3", f.name], check=True, capture_output=True)
        # "XXH3 (NAME) = HEX", or "HEX  NAME" in older versions
        text = out.stdout.decode()
        word = text.split("=")[-1].strip() if "=" in text else text.split()[0]
        return int(word, 16)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main():
    index_path, root = sys.argv[1], sys.argv[2]
    image = open(index_path, "rb").read()
    if image[:8] != b"LARDERIX":
        fail("bad magic")
    version, header_size = struct.unpack_from("<II", image, 8)
    (num_shards, num_samples, num_fields, num_dims, num_slots, strings_size, total_bytes,
     file_size) = struct.unpack_from("<8Q", image, 32)
    block_size, flags = struct.unpack_from("<II", image, 96)
    num_sums = struct.unpack_from("<Q", image, 112)[0] if version >= 3 and flags & 2 else 0
    if version not in (1, 2, 3) or header_size != 128 or file_size != len(image):
        fail("header: version %d, size %d, file %d" % (version, header_size, file_size))
    shards_at = 128
    samples_at = shards_at + 32 * num_shards
    fields_at = samples_at + 48 * num_samples
    dims_at = fields_at + 40 * num_fields
    slots_at = dims_at + 8 * num_dims
    sums_at = slots_at + 8 * num_slots
    strings_at = sums_at + 8 * num_sums
    if strings_at + strings_size != len(image):
        fail("sections do not add up to the file")

    def string(offset):
        (length,) = struct.unpack_from("<I", image, strings_at + offset)
        return image[strings_at + offset + 4:strings_at + offset + 4 + length].decode("utf-8")

    # where each shard's block checksums start: shards in order
    sum_first, at = [], 0
    shards = []
    for i in range(num_shards):
        name, size, checksum, fmt, shift = struct.unpack_from("<QQQII", image, shards_at + 32 * i)
        shift = shift if version >= 3 else 0
        sum_first.append(at)
        count = (size + (1 << shift) - 1) >> shift if shift else 0
        at += count
        shards.append((string(name), size, checksum, fmt, shift, count))
    if at != num_sums:
        fail("shards have %d block checksums, the table %d" % (at, num_sums))

    seen_shards, blocks = set(), 0
    for i in range(num_samples):
        offset, length, checksum, key, field_first, shard, nfields = struct.unpack_from(
            "<QQQQQII", image, samples_at + 48 * i)
        key = string(key)
        path = os.path.join(root, key)
        data = open(path, "rb").read()
        name, size, shard_checksum, fmt, shift, count = shards[shard]
        if shard in seen_shards:
            fail("%s: shares shard %d" % (key, shard))
        seen_shards.add(shard)
        if fmt != 2 or offset != 0 or length != len(data) or size != len(data):
            fail("%s: format %d, bytes %d+%d, shard %d bytes, file %d bytes"
                 % (key, fmt, offset, length, size, len(data)))
        want = xxh3_64(data)
        if checksum != want or shard_checksum != want:
            fail("%s: checksum %016x (shard %016x), the file's %016x"
                 % (key, checksum, shard_checksum, want))
        fname, foffset, flength = struct.unpack_from("<QQQ", image, fields_at + 40 * field_first)
        if nfields != 1 or foffset != 0 or flength != len(data):
            fail("%s: fields %d, first %d+%d" % (key, nfields, foffset, flength))
        for b in range(count):
            (got,) = struct.unpack_from("<Q", image, sums_at + 8 * (sum_first[shard] + b))
            piece = data[b << shift:(b + 1) << shift]
            if got != xxh3_64(piece):
                fail("%s: block %d checksum %016x, the file's %016x"
                     % (key, b, got, xxh3_64(piece)))
            blocks += 1
    print("ok %d files, %d block checksums" % (num_samples, blocks))


main()
