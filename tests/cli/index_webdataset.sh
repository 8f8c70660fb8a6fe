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
"$LARDER" inspect elsewhere/index.larder --sample 0 | grep "../shards/a.tar" >/dev/null ||
  fail "shard names are not relative to the index"
"$LARDER" verify elsewhere/index.larder >/dev/null || fail "verify"

mkdir -p extracted && tar xf shards/a.tar -C extracted && tar xf shards/b.tar -C extracted
for f in extracted/*; do
  name=$(basename "$f")
  same_bytes elsewhere/index.larder "${name%%.*}" "${name#*.}" "$f"
done

# a whole sample read is its tar members, headers included
"$LARDER" cat elsewhere/index.larder sample00001 >whole.bin
tar tf whole.bin 2>/dev/null | grep sample00001.cls >/dev/null || fail "sample range is not tar members"

# moving the index and shards together keeps working (relative names)
mkdir moved && mv elsewhere shards moved/
"$LARDER" verify moved/elsewhere/index.larder >/dev/null || fail "verify after move"
