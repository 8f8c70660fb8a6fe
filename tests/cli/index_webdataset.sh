# Index existing WebDataset shards in place (no rewrite): the index points
# into the original files and every sample byte-matches what tar extracts.
source "$(dirname "$0")/lib.sh"
make_tree src 60
mkdir -p shards
(cd src && ls | head -60 | tar --sort=name -cf ../shards/a.tar -T - &&
  ls | tail -60 | tar --sort=name -cf ../shards/b.tar -T -)
before=$(sha256sum shards/*.tar)

mkdir -p elsewhere
"$LARDER" index shards/a.tar shards/b.tar -o elsewhere/index.larder >out.txt
grep -q "indexed 60 samples in 2 shards" out.txt || fail "$(cat out.txt)"
[ "$(sha256sum shards/*.tar)" = "$before" ] || fail "shards were modified"
# shards outside the index's directory: the index records their directory as
# its base (format version 2) and names them under it, never with ".."
"$LARDER" inspect elsewhere/index.larder --sample 0 | grep -E "shard +0 \(a.tar\)" >/dev/null ||
  fail "shard names are not relative to the shards' directory"
"$LARDER" inspect elsewhere/index.larder | grep -E "^version +2" >/dev/null ||
  fail "an index with a base is not version 2"
"$LARDER" verify elsewhere/index.larder >/dev/null || fail "verify"

mkdir -p extracted && tar xf shards/a.tar -C extracted && tar xf shards/b.tar -C extracted
for f in extracted/*; do
  name=$(basename "$f")
  same_bytes elsewhere/index.larder "${name%%.*}" "${name#*.}" "$f"
done

# a whole sample read is its tar members, headers included
"$LARDER" cat elsewhere/index.larder sample00001 >whole.bin
tar tf whole.bin 2>/dev/null | grep sample00001.cls >/dev/null || fail "sample range is not tar members"

# an index beside its shards names them relative to itself (version 1), so
# moving the directory keeps it working
"$LARDER" index shards/a.tar shards/b.tar -o shards/index.larder >/dev/null
"$LARDER" inspect shards/index.larder | grep -E "^version +1" >/dev/null ||
  fail "an index beside its shards needs no base"
mkdir moved && mv shards moved/
"$LARDER" verify moved/shards/index.larder >/dev/null || fail "verify after move"
