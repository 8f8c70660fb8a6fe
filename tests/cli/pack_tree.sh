# Pack a directory tree into tar and flat shards; everything verifies,
# GNU tar lists the members, every field reads back byte for byte, and the
# same input packs to the same dataset id.
source "$(dirname "$0")/lib.sh"
make_tree src 120
mkdir -p src/nested/deeper && head -c 5000 /dev/urandom >src/nested/deeper/x.a.b.bin

"$LARDER" pack src -o tar --shard-size 300K --shuffle-seed 3 >pack.txt
grep -q "packed 121 samples" pack.txt || fail "pack summary: $(cat pack.txt)"
"$LARDER" verify tar/index.larder | grep "^ok: 121 samples" >/dev/null || fail "verify"

# the shards are ordinary tars holding every file under its own name
for s in tar/shard-*.tar; do tar tf "$s"; done | sort >listed.txt
(cd src && find . -type f | sed 's|^\./||' | sort) >wanted.txt
cmp listed.txt wanted.txt || fail "tar tf differs from the source files"

for i in 00001 00057 00120; do
  same_bytes tar/index.larder "sample$i" jpg "src/sample$i.jpg"
  same_bytes tar/index.larder "sample$i" cls "src/sample$i.cls"
done
same_bytes tar/index.larder nested/deeper/x a.b.bin src/nested/deeper/x.a.b.bin

# inspect, as JSON
"$LARDER" inspect tar/index.larder --json >summary.json
/usr/bin/python3 - <<'PY' || fail "inspect --json"
import json
s = json.load(open("summary.json"))
assert s["num_samples"] == 121, s
assert s["num_shards"] >= 6, s
assert len(s["dataset_id"]) == 32
assert s["total_bytes"] > 0
assert s["fields"]["jpg"] == 120
PY
"$LARDER" inspect tar/index.larder --sample sample00057 --json | /usr/bin/python3 -c '
import json, sys; s = json.load(sys.stdin); assert s["key"] == "sample00057"; assert [f["name"] for f in s["fields"]] == ["cls", "jpg"], s'

# same input and seed: same dataset id; another seed: another
id1=$(sed -n 's/^dataset id: //p' pack.txt)
id2=$("$LARDER" pack src -o again --shard-size 300K --shuffle-seed 3 --jobs 1 | sed -n 's/^dataset id: //p')
id3=$("$LARDER" pack src -o other --shard-size 300K --shuffle-seed 4 | sed -n 's/^dataset id: //p')
[ "$id1" = "$id2" ] || fail "same input, different ids: $id1 $id2"
[ "$id1" != "$id3" ] || fail "different seeds, same id"

# flat shards
"$LARDER" pack src -o flat --format flat --no-shuffle >/dev/null
"$LARDER" verify flat/index.larder >/dev/null || fail "verify flat"
same_bytes flat/index.larder sample00099 jpg src/sample00099.jpg
# a sample read whole is its fields back to back in flat shards
"$LARDER" cat flat/index.larder sample00002 | cmp -s - <(cat src/sample00002.cls src/sample00002.jpg) ||
  fail "flat sample bytes"

# the readers warning
"$LARDER" pack src -o warn --shard-size 1M --readers 8 2>warn.txt >/dev/null
grep -q "readers would get no shard" warn.txt || fail "no readers warning: $(cat warn.txt)"
