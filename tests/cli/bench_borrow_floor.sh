# bench/borrow_floor.c (bench/peer.sh section 4) on a few small files:
# every mode moves every byte (the reader's XXH3 of all of them equals
# xxhsum's of the files concatenated, a tool outside the program), each
# mode has its rounds and a median line, and bad arguments are refused
# with a message and exit 2.
source "$(dirname "$0")/lib.sh"
BUILD_ABS=$(cd "$(dirname "$LARDER")" && pwd)
floor=$BUILD_ABS/larder_bench_borrow_floor
[ -x "$floor" ] || fail "larder_bench_borrow_floor was not built"
command -v xxhsum >/dev/null || skip "xxhsum missing (scripts/install-deps installs xxhash)"

# sizes around the program's 1 MiB pieces and the reader's 256 KiB reads:
# one byte, a piece and a bit, an odd size that straddles both
head -c 1 /dev/urandom >a
head -c $((1048576 + 17)) /dev/urandom >b
head -c $((3 * 1048576 + 262144 + 4095)) /dev/urandom >c
want=$(cat a b c | xxhsum -H3 | awk '{ print $NF }')
mkdir stage
"$floor" --rounds 2 --dir stage --reader 4x65536 a b c >out.txt 2>err.txt ||
  fail "exit $?: $(cat err.txt)"
total=$(( $(stat -c %s a) + $(stat -c %s b) + $(stat -c %s c) ))
grep -qx "bytes $total files 3 rounds 2" out.txt || fail "header: $(head -1 out.txt)"
got=$(awk '/^xxh3 / { print $2 }' out.txt)
[ "$got" = "$want" ] || fail "the reader's XXH3 $got, xxhsum's $want"
for mode in copy copy-waitall pwrite pwrite+check splice mmap; do
  n=$(awk -v m="$mode" '$1 == m && NF == 6' out.txt | wc -l)
  [ "$n" = 2 ] || fail "$mode: $n rounds, want 2"
  grep -q "^median $mode [0-9]* [0-9.]*$" out.txt || fail "no median for $mode"
done
[ -z "$(ls stage)" ] || fail "staging files left: $(ls stage)"

# refused: a missing file, no files, rounds out of range, a bad --reader
for args in "missing" "" "--rounds 0 a" "--rounds 65 a" "--reader 0x4096 a" "--reader 4x100 a" "--reader 4096x1048576 a" "--bogus a"; do
  set +e
  # shellcheck disable=SC2086
  "$floor" --dir stage $args >out.txt 2>err.txt
  rc=$?
  set -e
  [ "$rc" = 2 ] || fail "'$args': exit $rc, want 2"
  [ -s err.txt ] || fail "'$args': no message"
done
head -c 0 /dev/null >empty
set +e
"$floor" --dir stage empty >out.txt 2>err.txt
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "empty" err.txt || fail "empty files: exit $rc, $(cat err.txt)"
echo "ok"
