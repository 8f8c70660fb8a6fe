# Hostile indexes (issue 9, "Trust"): each variant that
# tests/tools/craft_index.py writes, an index larder never wrote, is met
# with a clean error by every opener -- larder inspect, larder cat with a
# cache, Python's larder.Dataset, a node daemon -- naming what is wrong:
#   - shard names leaving the index's directory (absolute, "..", file://,
#     any host's URL) and shard sizes above 2^56: refused at open with
#     LARDER_EBADINDEX naming the shard, unless the opener trusts the index
#     (--trust-index, trust_index=True) -- which lifts only the names;
#   - a sample past its shard's end, a field past its sample: an error
#     naming the sample (and field) when it is used; the other samples read;
#   - overlapping samples, duplicate keys: `larder inspect` exits 1 naming
#     them, `larder cat` of the duplicated key fails with EDUPKEY, larderd
#     will not open the index, other samples still read directly;
#   - another dataset's id in the header: larderd never registers the
#     crafted index under that id, so the real dataset still reads right
#     through it.
# Names that stay below the index's directory ("sub/dir/x", "..x..") are
# taken by every opener.  All the while the daemon serves a good dataset
# to another client.
# Never a signal (status >= 128), never wrong bytes.  Every check runs and
# the failures are listed together at the end.
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS/.." && pwd)
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
LARDERD=$BUILD_ABS/larderd
CRAFT="/usr/bin/python3 $TESTS/tools/craft_index.py"
[ -x "$LARDERD" ] || fail "larderd not built at $LARDERD"

# A sanitizer build's library loads into Python only with the ASan runtime
# preloaded (as tests/run does for tests/python); address-space limits do
# not suit ASan's shadow memory, so those are left off there.
pyenv=(PYTHONPATH="$ROOT/python" PYTHONDONTWRITEBYTECODE=1 LARDER_LIBRARY="$BUILD_ABS/liblarder.so"
  "${sanitized_python[@]}")
sanitized=${sanitized_python[*]:+1}

# bounded CMD...: run CMD so that a build that takes a crafted shard size
# at its word fails instead of filling the disk or memory (a 2^56-byte
# shard's block bitmap is 128 GiB): files up to 1 GiB (SIGXFSZ ignored, so
# a write past that fails with EFBIG), 4 GiB of address space, 60 s.
bounded() {
  (
    ulimit -f 1048576
    [ -n "$sanitized" ] || ulimit -v 4194304
    trap '' XFSZ
    exec timeout 60 "$@"
  )
}

failures=()
problem() { failures+=("$*"); echo "PROBLEM: $*" >&2; }

# run_check DESC WANT NEEDLES CMD...: CMD (bounded) exits WANT; when WANT
# is 1, its stderr is "larder: ..." and holds each of NEEDLES (a list
# separated by ';', each item a set of alternatives separated by '|').
# Its stdout is left in $WORK/out.bin; $checked is 1 when all held.
# Returns 0 either way (a problem is recorded, the script goes on).
checked=0
run_check() {
  local desc=$1 want=$2 needles=$3 status=0
  shift 3
  checked=0
  bounded "$@" >"$WORK/out.bin" 2>"$WORK/err.txt" || status=$?
  local err
  err=$(head -c 600 "$WORK/err.txt" | tr "\n" " ")
  if [ "$status" -ge 124 ]; then
    problem "$desc: ended by signal or timeout (status $status): $err"
    return 0
  fi
  if grep -qE "Sanitizer|runtime error:" "$WORK/err.txt"; then # ASan exits 1, like a clean error
    problem "$desc: a sanitizer report: $err"
    return 0
  fi
  if [ "$status" -ne "$want" ]; then
    problem "$desc: exit $status, want $want: ${err:-(no stderr)}"
    return 0
  fi
  if [ "$want" -eq 1 ]; then
    grep -q "^larder: " "$WORK/err.txt" || { problem "$desc: stderr not 'larder: ...': $err"; return 0; }
    local item alt found
    IFS=';' read -ra items <<<"$needles"
    for item in "${items[@]}"; do
      [ -n "$item" ] || continue
      found=""
      IFS='|' read -ra alts <<<"$item"
      for alt in "${alts[@]}"; do grep -qF -- "$alt" "$WORK/err.txt" && found=1; done
      [ -n "$found" ] || { problem "$desc: stderr lacks '$item': $err"; return 0; }
    done
  fi
  checked=1
}

# same_as DESC FILE: the last run_check held and its stdout equals FILE
same_as() {
  [ "$checked" = 1 ] || return 0
  cmp -s "$WORK/out.bin" "$2" || problem "$1: wrong bytes (differ from $2)"
}

# ---- datasets: a good one, the crafted variants of it, a packed one --------

$CRAFT make ds --seed 7 >/dev/null
idx=ds/index.larder
"$LARDER" verify $idx >/dev/null || fail "craft_index.py's good index does not verify: the writer is wrong"
variants=$($CRAFT list | grep -v '^stolen-id$')
for v in $variants; do $CRAFT variant ds "$v" >"ds/$v.json"; done
field() { /usr/bin/python3 -c 'import json,sys; v = json.load(open(sys.argv[1])).get(sys.argv[2], ""); print(";".join(v) if isinstance(v, list) else v)' "$@"; }

make_tree real 24
"$LARDER" pack real -o A --shard-size 60K >/dev/null
A_ID=$("$LARDER" inspect A/index.larder --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_id"])')
$CRAFT make evil --seed 99 >/dev/null
$CRAFT variant evil stolen-id --steal-id-from A/index.larder >evil/stolen.json
stolen=evil/stolen-id.larder
[ "$(field evil/stolen.json dataset_id)" = "$A_ID" ] || fail "the stolen id was not written"

# ---- one daemon for all of it, itself bounded ------------------------------

sock=$WORK/sock
(
  ulimit -f 1048576
  [ -n "$sanitized" ] || ulimit -v 8388608
  trap '' XFSZ
  exec "$LARDERD" --cache "$WORK/dcache" --socket "$sock"
) 2>"$WORK/daemon.log" &
daemon=$!
cleanup_hooks+=("kill $daemon 2>/dev/null; wait $daemon 2>/dev/null")
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || fail "larderd did not start: $(cat "$WORK/daemon.log")"

# daemon_open INDEX: send HELLO and OPEN of INDEX on the daemon's socket as
# a reader would, print the answer as JSON: {"opened": ID} or {"error":
# CODE, "message": TEXT} or {"closed": WHY}
cat >daemon_open.py <<'PY'
import json, os, socket, struct, sys
def frame(kind, payload, request):
    return struct.pack("<IBBHIIQ", 0x5244524C, 2, kind, 0, len(payload), 0, request) + payload
def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return data
def recv_frame(s):
    magic, version, kind, flags, length, reserved, request = struct.unpack(
        "<IBBHIIQ", recv_exact(s, 24))
    return kind, recv_exact(s, length)
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
try:
    s.connect(sys.argv[1])
    s.sendall(frame(1, struct.pack("<II", 1, 0) + os.urandom(32), 1))  # HELLO, wire version 2
    recv_frame(s)  # WELCOME
    s.sendall(frame(8, os.path.abspath(sys.argv[2]).encode(), 2))
    kind, payload = recv_frame(s)
    if kind == 9:
        low, high, shards = struct.unpack_from("<QQI", payload)
        print(json.dumps({"opened": f"{high:016x}{low:016x}", "shards": shards}))
    elif kind == 5:
        print(json.dumps({"error": struct.unpack_from("<i", payload)[0],
                          "message": payload[4:].decode("utf-8", "replace")}))
    else:
        print(json.dumps({"closed": f"answer of type {kind}"}))
except (OSError, EOFError) as e:
    print(json.dumps({"closed": str(e)}))
PY
# daemon_ids: the dataset ids the daemon has registered, one a line, with
# their total_bytes
daemon_ids() {
  "$LARDER" stat --socket "$sock" --json | /usr/bin/python3 -c '
import json, sys
for d in json.load(sys.stdin)["datasets"]: print(d["dataset_id"], d["total_bytes"], d["origin_bytes"])'
}

# another client reads the good dataset through the daemon the whole time
good_keys=$(/usr/bin/python3 -c 'import json; print(" ".join(s["key"] for s in json.load(open("ds/layout.json"))["samples"]))')
(
  rounds=0
  while [ ! -e stop-reader ]; do
    for k in $good_keys; do
      if ! LARDER_SOCKET=$sock timeout 30 "$LARDER" cat $idx "$k" 2>>reader.err | cmp -s - "ds/expect/$k"; then
        echo "round $rounds: $k" >>reader.bad
      fi
    done
    rounds=$((rounds + 1))
    echo $rounds >reader.rounds
  done
) &
reader=$!
cleanup_hooks=("touch $WORK/stop-reader; wait $reader" "${cleanup_hooks[@]}")

# ---- the variants, from the command line and the daemon --------------------

for v in $variants; do
  j=ds/$v.json
  at=$(field $j at) needles=$(field $j needles) path=ds/$v.larder
  good=$(field $j good_key) bad=$(field $j bad_key)
  vid=$(field $j dataset_id)
  case $at in
  none) # names below the index's directory: nobody refuses them
    run_check "$v: inspect" 0 "" "$LARDER" inspect $path
    run_check "$v: cat --cache" 0 "" "$LARDER" cat $path "$good" --cache "c-$v"
    same_as "$v: cat --cache" "ds/expect/$good"
    run_check "$v: cat through larderd" 0 "" env LARDER_SOCKET="$sock" "$LARDER" cat $path "$good"
    same_as "$v: cat through larderd" "ds/expect/$good"
    answer=$(bounded /usr/bin/python3 daemon_open.py "$sock" $path)
    case $answer in *'"opened": "'"$vid"'"'*) ;; *) problem "$v: larderd did not open it: $answer" ;; esac
    ;;
  open)
    run_check "$v: inspect" 1 "$needles" "$LARDER" inspect $path
    run_check "$v: cat --cache" 1 "$needles" "$LARDER" cat $path "$good" --cache "c-$v"
    run_check "$v: cat through larderd" 1 "$needles" env LARDER_SOCKET="$sock" "$LARDER" cat $path "$good"
    answer=$(bounded /usr/bin/python3 daemon_open.py "$sock" $path)
    echo "$answer" | /usr/bin/python3 -c '
import json, sys
a, needles = json.loads(sys.stdin.read()), sys.argv[1].split(";")
assert a.get("error") == -1000, a
assert all(n in a["message"] for n in needles), a' "$needles" 2>/dev/null ||
      problem "$v: larderd's answer to OPEN is not EBADINDEX naming the shard: $answer"
    if [ "$(field $j trust_reads)" = True ]; then
      tk=$(field $j trust_key)
      run_check "$v: cat --trust-index" 0 "" "$LARDER" cat $path "$tk" --trust-index --cache "t-$v"
      same_as "$v: cat --trust-index" "ds/expect/$tk"
    fi
    case $v in
    size-*) # trust is about names, not sizes
      run_check "$v: inspect --trust-index" 1 "$needles" "$LARDER" inspect $path --trust-index ;;
    *) run_check "$v: inspect --trust-index" 0 "" "$LARDER" inspect $path --trust-index ;;
    esac
    ;;
  sample)
    bf=$(field $j bad_field)
    fneedle=${bf:+;field $(field $j bad_field_number)|\'$bf\'}
    run_check "$v: inspect" 1 "$needles$fneedle" "$LARDER" inspect $path
    run_check "$v: inspect --sample" 1 "$needles$fneedle" "$LARDER" inspect $path --sample "$bad"
    run_check "$v: cat --cache of the bad sample" 1 "$needles$fneedle" \
      "$LARDER" cat $path "$bad" ${bf:+--field "$bf"} --cache "c-$v"
    # the field is there, its record is corrupt: not "no such field"
    [ -z "$bf" ] || ! grep -q "has no field" err.txt ||
      problem "$v: cat --field calls a corrupt field record missing: $(head -c 300 err.txt)"
    case $v in
    sample-*) # the fill engine must know whose bytes are whose: a cache refuses the index
      run_check "$v: cat --cache of a good sample" 1 "$needles" "$LARDER" cat $path "$good" --cache "c-$v" ;;
    *)
      run_check "$v: cat --cache of a good sample" 0 "" "$LARDER" cat $path "$good" --cache "c-$v"
      same_as "$v: cat --cache of a good sample" "ds/expect/$good" ;;
    esac
    run_check "$v: cat of a good sample, no cache" 0 "" "$LARDER" cat $path "$good" --cache ""
    same_as "$v: cat of a good sample, no cache" "ds/expect/$good"
    run_check "$v: cat of the bad sample through larderd" 1 "$needles$fneedle" \
      env LARDER_SOCKET="$sock" "$LARDER" cat $path "$bad" ${bf:+--field "$bf"}
    [ -z "$bf" ] || ! grep -q "has no field" err.txt ||
      problem "$v: cat --field through larderd calls a corrupt field record missing: $(head -c 300 err.txt)"
    run_check "$v: cat of a good sample through larderd" 0 "" \
      env LARDER_SOCKET="$sock" "$LARDER" cat $path "$good"
    same_as "$v: cat of a good sample through larderd" "ds/expect/$good"
    ;;
  inspect)
    run_check "$v: inspect" 1 "$needles" "$LARDER" inspect $path
    if [ "$v" = overlap ]; then # a byte with two checksums: a cache refuses the index
      run_check "$v: cat --cache of a good sample" 1 "$needles" "$LARDER" cat $path "$good" --cache "c-$v"
    else
      run_check "$v: cat of a good sample" 0 "" "$LARDER" cat $path "$good" --cache "c-$v"
      same_as "$v: cat of a good sample" "ds/expect/$good"
    fi
    run_check "$v: cat of a good sample, no cache" 0 "" "$LARDER" cat $path "$good" --cache ""
    same_as "$v: cat of a good sample, no cache" "ds/expect/$good"
    if [ "$v" = duplicate-key ]; then
      dup=$(field $j dup_key)
      run_check "$v: cat of the duplicated key" 1 "duplicate;$dup" "$LARDER" cat $path "$dup"
    fi
    answer=$(bounded /usr/bin/python3 daemon_open.py "$sock" $path)
    echo "$answer" | /usr/bin/python3 -c '
import json, sys; a = json.loads(sys.stdin.read()); assert a.get("error", 0) < 0, a' 2>/dev/null ||
      problem "$v: larderd opened it: $answer"
    # a reader of a good sample through the daemon falls back or fails cleanly
    status=0
    LARDER_SOCKET=$sock bounded "$LARDER" cat $path "$good" >out.bin 2>err.txt || status=$?
    if [ $status -eq 0 ]; then
      cmp -s out.bin "ds/expect/$good" || problem "$v: wrong bytes through larderd"
    elif [ $status -ne 1 ]; then
      problem "$v: a read through larderd ended with status $status: $(head -c 300 err.txt)"
    fi
    ;;
  esac
  # whatever the daemon was sent, it holds no crafted index that it should have refused
  case $at in open | inspect)
    daemon_ids | grep -q "^$vid " && problem "$v: larderd registered the crafted index ($vid)" ;;
  esac
done

# ---- another dataset's id --------------------------------------------------

answer=$(bounded /usr/bin/python3 daemon_open.py "$sock" $stolen)
case $answer in *"\"opened\": \"$A_ID\""*) problem "stolen-id: larderd opened the crafted index as $A_ID" ;; esac
# a reader of the crafted index through the daemon: whatever it gets, the
# daemon must not now hold a dataset under the real one's id
status=0
LARDER_SOCKET=$sock bounded "$LARDER" cat $stolen "$(field evil/stolen.json good_key)" >/dev/null 2>err.txt || status=$?
[ $status -le 1 ] || problem "stolen-id: a read through larderd ended with status $status"
daemon_ids | grep -q "^$A_ID " && problem "stolen-id: larderd registered the crafted index under $A_ID"
# the real dataset now reads right, through the daemon: it stages A's own
# shards (their sizes add up to what it reports) and serves their bytes
a_shard_bytes=$(cat A/*.tar | wc -c)
for k in sample00003 sample00017 sample00024; do
  run_check "stolen-id: the real dataset's $k through larderd" 0 "" \
    env LARDER_SOCKET="$sock" "$LARDER" cat A/index.larder "$k" --field jpg
  same_as "stolen-id: the real dataset's $k through larderd" "real/$k.jpg"
done
read -r _ a_total a_origin <<<"$(daemon_ids | grep "^$A_ID " | head -1)"
[ "${a_total:-0}" = "$a_shard_bytes" ] ||
  problem "stolen-id: larderd's dataset $A_ID has ${a_total:-no} shard bytes, A's shards have $a_shard_bytes"
[ "${a_origin:-0}" -gt 0 ] || problem "stolen-id: the real dataset was not read through larderd"
# and once the real one is open, the crafted one does not take its place
bounded /usr/bin/python3 daemon_open.py "$sock" $stolen >/dev/null
run_check "stolen-id: the real dataset after a second try" 0 "" \
  env LARDER_SOCKET="$sock" "$LARDER" cat A/index.larder sample00011 --field jpg --cache "$WORK/dcache"
same_as "stolen-id: the real dataset after a second try" real/sample00011.jpg

# ---- the daemon served the good dataset all along ---------------------------

touch stop-reader
wait $reader
rounds=$(cat reader.rounds 2>/dev/null || echo 0)
[ "$rounds" -ge 1 ] || problem "the good reader finished no round: $(tail -3 reader.err 2>/dev/null)"
[ ! -s reader.bad ] || problem "the good dataset read wrong or failed through larderd: $(head -5 reader.bad) $(tail -3 reader.err)"
kill -0 $daemon 2>/dev/null || problem "larderd died: $(tail -5 "$WORK/daemon.log")"
! grep -qE "Sanitizer|runtime error:" "$WORK/daemon.log" reader.err 2>/dev/null ||
  problem "a sanitizer report from larderd or the reader: $(grep -m3 -E "Sanitizer|runtime error:" "$WORK/daemon.log" reader.err)"
echo "the good reader read the dataset $rounds times through larderd meanwhile"

# ---- Python ------------------------------------------------------------------

bounded env "${pyenv[@]}" /usr/bin/python3 - ds $variants >py.txt 2>&1 <<'PY' || true
import json, os, sys
import larder

root, names = sys.argv[1], sys.argv[2:]
problems = []
def expect(name, want_code, needles, fn):
    try:
        fn()
    except larder.LarderError as e:
        if e.code != want_code:
            problems.append(f"{name}: code {e.code} ({e}), want {want_code}")
        elif not all(any(alt in str(e) for alt in n.split("|")) for n in needles):
            problems.append(f"{name}: message lacks {needles}: {e}")
        return
    except Exception as e:
        problems.append(f"{name}: {type(e).__name__}: {e}")
        return
    problems.append(f"{name}: no error")
def expected(key):
    with open(os.path.join(root, "expect", key), "rb") as f:
        return f.read()
for v in names:
    j = json.load(open(os.path.join(root, v + ".json")))
    path, cache = j["path"], os.path.join(root, "pycache-" + v)
    code = getattr(larder, j["code"]) if j["code"] else None
    if j["at"] == "none":
        try:
            ds = larder.Dataset(path, cache=cache)
            if ds.read(ds.index_of(j["good_key"])) != expected(j["good_key"]):
                problems.append(f"{v}: read wrong bytes")
        except Exception as e:
            problems.append(f"{v}: {type(e).__name__}: {e}")
    elif j["at"] == "open":
        expect(f"{v}: Dataset()", code, j["needles"], lambda: larder.Dataset(path, cache=cache))
        if j["trust_reads"]:
            try:
                ds = larder.Dataset(path, cache=cache, trust_index=True)
                if ds.read(ds.index_of(j["trust_key"])) != expected(j["trust_key"]):
                    problems.append(f"{v}: trust_index=True read wrong bytes")
            except Exception as e:
                problems.append(f"{v}: trust_index=True: {type(e).__name__}: {e}")
    elif j["at"] == "sample":
        ds = larder.Dataset(path, cache=cache)
        needles = j["needles"] + ([f"field {j['bad_field_number']}|'{j['bad_field']}'"]
                                  if "bad_field" in j else [])
        expect(f"{v}: ds[bad]", code, needles, lambda: ds[j["bad_sample"]])
        good = ds.index_of(j["good_key"])
        if v.startswith("sample-"):  # a cache refuses an index whose samples it cannot place
            expect(f"{v}: a good sample, cached", code, j["needles"], lambda: ds.read(good))
        elif ds.read(good) != expected(j["good_key"]):
            problems.append(f"{v}: a good sample read wrong")
        if larder.Dataset(path, cache="").read(good) != expected(j["good_key"]):
            problems.append(f"{v}: a good sample read wrong without a cache")
    elif v == "duplicate-key":
        ds = larder.Dataset(path, cache=cache)
        expect(f"{v}: index_of(dup)", code, [j["dup_key"]], lambda: ds.index_of(j["dup_key"]))
        if ds.read(ds.index_of(j["good_key"])) != expected(j["good_key"]):
            problems.append(f"{v}: a good sample read wrong")
print("\n".join(problems) or "python: all as expected")
PY
while IFS= read -r line; do
  case $line in "python: all as expected") ;; *) problem "python: $line" ;; esac
done <py.txt

if [ ${#failures[@]} -gt 0 ]; then
  echo "${#failures[@]} problems:"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "all hostile indexes refused cleanly"
