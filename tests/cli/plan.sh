# larder plan: the global sequence does not depend on world size or
# workers, a run stopped on 4 ranks resumes on 2 and on 8 exactly, every
# sample comes once per epoch, padding evens the ranks out, deny-lists
# (beside the index or named) leave samples out, bad input fails clearly,
# and the output matches an implementation written from docs/plan.md.
DOC=$(cd "$(dirname "$0")/../.." && pwd)/docs/plan.md
source "$(dirname "$0")/lib.sh"
make_tree src 100
"$LARDER" pack src -o ds --shard-size 150K >/dev/null
idx=ds/index.larder
plan() { "$LARDER" plan "$idx" --seed 7 --epoch 2 --batch 16 "$@"; }

# assemble W [ARGS]: the global sequence as W ranks read it, step by step
assemble() {
  local world=$1
  shift
  for ((r = 0; r < world; r++)); do plan --world "$world" --rank "$r" "$@" >"rank$r.txt"; done
  /usr/bin/python3 - "$world" "$((16 / world))" <<'PY'
import sys
world, local = int(sys.argv[1]), int(sys.argv[2])
ranks = [open(f"rank{r}.txt").read().split() for r in range(world)]
assert len({len(x) for x in ranks}) == 1, [len(x) for x in ranks]
for step in range(len(ranks[0]) // local):
    for r in range(world):
        print("\n".join(ranks[r][step * local:(step + 1) * local]))
PY
}

# one sample per line, 100 samples, batch 16: 6 steps, 4 samples dropped
plan >world1.txt
[ "$(wc -l <world1.txt)" -eq 96 ] || fail "world 1 printed $(wc -l <world1.txt) ids, want 96"
[ "$(sort -n world1.txt | uniq | wc -l)" -eq 96 ] || fail "a sample repeats in an epoch"
sort -n world1.txt | awk '$1 < 0 || $1 > 99 { exit 1 }' || fail "ids out of range"
plan --info >info.txt
grep -qx "steps: 6" info.txt || fail "info: $(cat info.txt)"
grep -qx "dropped: 4" info.txt || fail "info dropped: $(cat info.txt)"

# the same global sequence on 2, 4 and 8 ranks, with workers too
for world in 2 4 8; do
  assemble "$world" >"world$world.txt"
  cmp -s world1.txt "world$world.txt" || fail "world $world differs from world 1"
done
for w in 0 1 2; do plan --world 2 --rank 1 --workers 3 --worker $w >"worker$w.txt"; done
plan --world 2 --rank 1 >rank1-all.txt
/usr/bin/python3 - <<'PY' || fail "the workers' steps do not make up the rank's"
workers = [open(f"worker{w}.txt").read().split() for w in range(3)]
whole = open("rank1-all.txt").read().split()
batches = [whole[i:i + 8] for i in range(0, len(whole), 8)]
for step, batch in enumerate(batches):
    w, i = step % 3, step // 3
    assert workers[w][i * 8:(i + 1) * 8] == batch, (step, w)
assert sum(map(len, workers)) == len(whole)
PY

# stop after step 3 on 4 ranks, resume on 2 and on 8: the same sequence
assemble 4 --steps 3 >first.txt
[ "$(wc -l <first.txt)" -eq 48 ] || fail "--steps 3 printed $(wc -l <first.txt) ids"
for world in 2 8; do
  assemble "$world" --from-step 3 >rest.txt
  cat first.txt rest.txt | cmp -s - world1.txt || fail "resume on world $world differs"
done
# a resumed worker split counts from the resume step
plan --from-step 3 --workers 2 --worker 0 >resumed.txt
head -16 resumed.txt | cmp -s - <(sed -n '49,64p' world1.txt) ||
  fail "worker 0 of a resumed pass does not start at the resume step"
[ -z "$(plan --from-step 6)" ] || fail "resuming at the end printed ids"

# another epoch, another order; mode none is index order
plan --epoch 3 | cmp -s - world1.txt && fail "epochs 2 and 3 have the same order"
plan --mode none | cmp -s - <(seq 0 95) || fail "mode none is not index order"

# pad: 7 steps on every rank, the last completed from the epoch's start
plan --pad >padded.txt
[ "$(wc -l <padded.txt)" -eq 112 ] || fail "pad printed $(wc -l <padded.txt) ids"
cmp -s <(head -100 padded.txt | sort -n) <(seq 0 99) || fail "pad: not every sample once"
cmp -s <(tail -12 padded.txt) <(head -12 padded.txt) || fail "pad does not repeat the start"
for r in 0 1 2 3; do
  [ "$(plan --pad --world 4 --rank $r | wc -l)" -eq 28 ] || fail "pad: rank $r has another count"
done

# locality: still every sample once, and a permutation of the same ids
plan --mode locality --window 2 --pad >locality.txt
cmp -s <(head -100 locality.txt | sort -n) <(seq 0 99) || fail "locality: not every sample once"

# deny-lists: a key and an id, beside the index or named
key5=sample00005
id17=$("$LARDER" inspect "$idx" --sample 17 --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["key"])')
printf '# bad samples\n%s   # blurry\n\n17\n' "$key5" >mine.deny
plan --deny mine.deny --keys --pad >denied.txt
[ "$(wc -l <denied.txt)" -eq 112 ] || fail "deny + pad printed $(wc -l <denied.txt)"
grep -qx "$key5" denied.txt && fail "denied key $key5 was planned"
grep -qx "$id17" denied.txt && fail "denied id 17 ($id17) was planned"
[ "$(head -98 denied.txt | sort -u | wc -l)" -eq 98 ] || fail "deny: not every other sample once"
cp mine.deny "$idx.deny"
plan --keys --pad | cmp -s - denied.txt || fail "INDEX.deny was not used by default"
plan --no-deny | cmp -s - world1.txt || fail "--no-deny did not ignore INDEX.deny"
plan --info >info.txt
grep -qx "denied: 2" info.txt || fail "info denied: $(cat info.txt)"
rm "$idx.deny"

# errors: bad deny line, world not dividing the batch, bad options
printf '1\n# fine\nno-such-sample\n' >bad.deny
expect_error 1 "bad.deny: line 3: no sample with key 'no-such-sample'" plan --deny bad.deny
printf '100\n' >big.deny
expect_error 1 "line 1: no sample with id or key '100'" plan --deny big.deny
expect_error 1 "missing.deny" plan --deny missing.deny
expect_error 2 "world size 3 does not divide the global batch 16" plan --world 3
expect_error 2 "rank 4 is not below the world size 4" plan --world 4 --rank 4
expect_error 2 "worker 2 is not below" plan --workers 2 --worker 2
expect_error 2 "unknown mode" plan --mode random
expect_error 2 "past the end of the epoch" plan --from-step 7
expect_error 2 "expected one INDEX" "$LARDER" plan
"$LARDER" plan --help >help.txt
grep -q "usage: larder plan" help.txt || fail "no help"

# the order is the one docs/plan.md specifies: recompute it in Python from
# the document's own code and the index's layout
for i in $(seq 0 99); do "$LARDER" inspect "$idx" --sample "$i" --json; done >layout.json
printf '%s\n3\n' "$key5" >mine.deny
for args in "--mode global" "--mode none" "--mode locality --window 3" "--mode locality --window 1"; do
  for extra in "" "--pad" "--deny mine.deny --world 4 --rank 1 --pad"; do
    # shellcheck disable=SC2086
    plan $args $extra >got.txt
    /usr/bin/python3 - "$DOC" $args $extra <<'PY' >want.txt
import json, re, sys
code = re.search(r"```python\n(.*?)```", open(sys.argv[1]).read(), re.S).group(1)
spec = {}
exec(code, spec)
Permutation = spec["Permutation"]
args = sys.argv[2:]
opt = lambda name, default: args[args.index(name) + 1] if name in args else default
mode, window = opt("--mode", "global"), int(opt("--window", 8))
world, rank, pad = int(opt("--world", 1)), int(opt("--rank", 0)), "--pad" in args
seed, epoch, batch = 7, 2, 16
layout = [json.loads(line) for line in open("layout.json")]
keys = {s["key"]: s["id"] for s in layout}
denied = set()
if "--deny" in args:
    for line in open(opt("--deny", None)):
        entry = line.split("#")[0].strip()
        if entry:
            denied.add(keys[entry] if entry in keys else int(entry))
allowed = [s["id"] for s in layout if s["id"] not in denied]
n = len(allowed)
if mode == "none":
    order = allowed
elif mode == "global":
    p = Permutation(n, seed, epoch, 1, 0)
    order = [allowed[p.forward(x)] for x in range(n)]
else:
    shards = 1 + max(s["shard"] for s in layout)
    lists = [[i for i in allowed if layout[i]["shard"] == s] for s in range(shards)]
    ps = Permutation(shards, seed, epoch, 2, 0)
    order = []
    for v in range(0, (shards + window - 1) // window):
        c = [i for q in range(v * window, min(v * window + window, shards)) for i in lists[ps.forward(q)]]
        pw = Permutation(len(c), seed, epoch, 3, v)
        order += [c[pw.forward(x)] for x in range(len(c))]
steps = -(-n // batch) if pad else n // batch
local = batch // world
for t in range(steps):
    for p in range(t * batch + rank * local, t * batch + (rank + 1) * local):
        print(order[p % n])
PY
    cmp -s got.txt want.txt || fail "larder plan $args $extra differs from docs/plan.md"
  done
done
