# Plain files as a dataset (`larder index --files`): a tree with nested
# directories, unicode names, spaces, empty files, a file without an
# extension, a 64 MiB sparse file and the index inside it.  Every file
# read back through `larder cat` equals the file (cmp); the sample count
# is find's; checksums, whole and per block, match tests/tools/
# check_files_index.py (a reader written from docs/format.md, hashing
# with python3-xxhash or xxhsum).  Hostile names and symbolic links are
# skipped with a summary; the tree moved with its index still reads, and
# so does the tree served by nginx; a damaged block is named.
source "$(dirname "$0")/lib.sh"

mkdir -p tree/a/b/c "tree/ünï/cödé" tree/empty_dir
echo hello >tree/top.txt
head -c 300000 /dev/urandom >tree/a/b/c/deep.bin
: >tree/a/empty.dat
: >tree/zero
head -c 5000 /dev/urandom >tree/a/noext
printf 'x' >"tree/ünï/cödé/naïve файл.txt"
head -c 4194305 /dev/urandom >tree/a/just_over_4M.bin # large: one byte into its 5th block
truncate -s 64M tree/big.ckpt
printf 'middle' | dd of=tree/big.ckpt bs=1 seek=$((33 * 1048576 + 5)) conv=notrunc 2>/dev/null
files=$(find tree -type f | wc -l)

# what must be skipped, and the index's own leftovers
touch "tree/bad$(printf '\001')name" 'tree/back\slash' 'tree/what?.txt'
ln -s /etc/passwd tree/link
ln -s .. tree/a/up
touch tree/index.larder.tmp12345 # a stale temporary file of the index's writer

"$LARDER" index --files tree -o tree/index.larder >out.txt 2>err.txt || fail "$(cat err.txt)"
grep -q "indexed $files files" out.txt || fail "$(cat out.txt)"
for part in "skipped 5 files:" "1 for a control character" "1 for a backslash" \
  "1 for a query or fragment" "2 for a symbolic link (not followed)" 'bad\x01name'; do
  grep -qF "$part" err.txt || fail "summary lacks '$part': $(cat err.txt)"
done
"$LARDER" inspect tree/index.larder --json | grep -q "\"num_samples\": $files" || fail "sample count"
"$LARDER" inspect tree/index.larder | grep -qE "^version +3" || fail "not version 3"

# every file, read back, is the file
check_all() { # INDEX DIR
  local n=0
  while IFS= read -r -d '' f; do
    key=${f#"$2"/}
    "$LARDER" cat "$1" "$key" | cmp -s - "$f" || fail "$key read through $1 differs"
    n=$((n + 1))
  done < <(find "$2" -type f ! -name 'index.larder*' ! -name 'bad*' ! -name 'back*' ! -name 'what*' -print0)
  [ "$n" -eq "$files" ] || fail "compared $n files, want $files"
}
check_all tree/index.larder tree

# checksums from a reader of the spec and another hash implementation
status=0
/usr/bin/python3 "$TESTS/tools/check_files_index.py" tree/index.larder tree >check.txt || status=$?
[ $status -eq 0 ] || [ $status -eq 77 ] || fail "$(cat check.txt)"
[ $status -eq 77 ] || grep -q "ok $files files, 69 block checksums" check.txt || fail "$(cat check.txt)"
"$LARDER" verify tree/index.larder >/dev/null || fail "verify"

# an index outside the tree records the tree as its base
"$LARDER" index --files tree/a -o outside.larder >/dev/null
"$LARDER" inspect outside.larder --sample b/c/deep.bin | grep -q "b/c/deep.bin" || fail "outside index"
"$LARDER" cat outside.larder b/c/deep.bin | cmp -s - tree/a/b/c/deep.bin || fail "read through outside index"

# the tree moves with its index
mv tree moved
check_all moved/index.larder moved

# served over HTTP as it is
mkdir www
mv moved www/tree
start_nginx www tree/top.txt
url=http://127.0.0.1:$port/tree
"$LARDER" cat $url/index.larder top.txt | cmp -s - www/tree/top.txt || fail "top.txt over http"
"$LARDER" cat $url/index.larder "ünï/cödé/naïve файл.txt" | cmp -s - "www/tree/ünï/cödé/naïve файл.txt" ||
  fail "unicode name over http"
"$LARDER" cat $url/index.larder big.ckpt | cmp -s - www/tree/big.ckpt || fail "big.ckpt over http"
mkdir cache
"$LARDER" cat --cache cache $url/index.larder a/just_over_4M.bin | cmp -s - www/tree/a/just_over_4M.bin ||
  fail "cached read over http"
"$LARDER" verify $url/index.larder >/dev/null || fail "verify over http"

# a listed subset under an http root: the root is the base
printf 'top.txt\na/b/c/deep.bin\n\nbig.ckpt\n' >list.txt
"$LARDER" index --files $url/ --files-from list.txt -o listed.larder >out.txt || fail "files-from"
grep -q "indexed 3 files" out.txt || fail "$(cat out.txt)"
"$LARDER" cat listed.larder a/b/c/deep.bin | cmp -s - www/tree/a/b/c/deep.bin || fail "listed over http"
expect_error 2 "need --files" "$LARDER" index --files-from list.txt -o x.larder
expect_error 1 "cannot be listed" "$LARDER" index --files $url/ -o x.larder

# the node daemon serves them: a reader with only its socket, and a warm
# through it (in 4 MB pieces: ranges of the large files, checked by block)
LARDERD=${LARDER%/larder}/larderd
"$LARDERD" --cache "$WORK/dcache" --socket "$WORK/d.sock" 2>>"$WORK/daemon.log" &
daemon=$!
cleanup_hooks+=("kill $daemon 2>/dev/null; wait $daemon 2>/dev/null")
for _ in $(seq 100); do [ -S "$WORK/d.sock" ] && break; sleep 0.05; done
[ -S "$WORK/d.sock" ] || fail "larderd did not start: $(cat daemon.log)"
LARDER_SOCKET=$WORK/d.sock "$LARDER" warm www/tree/index.larder >warm.txt 2>&1 || fail "warm: $(cat warm.txt)"
LARDER_SOCKET=$WORK/d.sock "$LARDER" cat www/tree/index.larder big.ckpt | cmp -s - www/tree/big.ckpt ||
  fail "big.ckpt through the daemon"
LARDER_SOCKET=$WORK/d.sock "$LARDER" cat www/tree/index.larder a/just_over_4M.bin |
  cmp -s - www/tree/a/just_over_4M.bin || fail "just_over_4M.bin through the daemon"
[ "$(du -sk "$WORK/dcache" | cut -f1)" -ge 4096 ] || fail "the daemon's cache holds nothing: $(cat warm.txt)"

# a damaged block of the large file: named, and the rest still reads
printf 'X' | dd of=www/tree/big.ckpt bs=1 seek=$((40 * 1048576 + 3)) conv=notrunc 2>/dev/null
status=0
"$LARDER" verify www/tree/index.larder >verify.txt 2>&1 || status=$?
[ $status -eq 1 ] && grep -qF "'big.ckpt'), checksum block 40 (bytes 41943040+1048576)" verify.txt ||
  fail "verify of a damaged block: $status, $(cat verify.txt)"
expect_error 1 "('big.ckpt'): checksum" "$LARDER" cat www/tree/index.larder big.ckpt
mkdir cache2 # through a cache the fill checks by block, and names it
expect_error 1 "'big.ckpt'), checksum block 40 (bytes 41943040+1048576)" \
  "$LARDER" cat --cache cache2 www/tree/index.larder big.ckpt
"$LARDER" cat www/tree/index.larder top.txt | cmp -s - www/tree/top.txt || fail "others still read"

# nothing to index
mkdir -p nothing/empty_dir
expect_error 1 "no files to index" "$LARDER" index --files nothing -o nothing/index.larder
