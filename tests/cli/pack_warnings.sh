# Packing a tree with many files the packer skips: the warnings are a
# count per cause with three examples (not one line per file), the summary
# says how many inputs were skipped and why, and --verbose lists every one.
source "$(dirname "$0")/lib.sh"
make_tree src 10
for i in $(seq 1 25); do echo "notes $i" >"src/README$i"; done # no extension: no key
mkdir -p elsewhere && ln -s "$WORK/elsewhere" src/linked-dir    # not followed

"$LARDER" pack src -o out >out.txt 2>err.txt || fail "pack: $(cat err.txt)"
grep -q "packed 10 samples" out.txt || fail "summary: $(cat out.txt)"
grep -qF "skipped 26 inputs:" out.txt || fail "no skipped count in the summary: $(cat out.txt)"
grep -qF "25 for no extension (no sample key)" out.txt || fail "summary: $(cat out.txt)"
grep -qF "1 for a symbolic link to a directory (not followed)" out.txt || fail "summary: $(cat out.txt)"
grep -qF "warning: 25 times: skipped, no extension (no sample key), such as" err.txt ||
  fail "no count of the cause: $(cat err.txt)"
[ "$(grep -c "/README" err.txt)" -eq 3 ] || fail "not three examples: $(cat err.txt)"
grep -qF "and 22 more (--verbose lists them all)" err.txt || fail "no rest count: $(cat err.txt)"
grep -qF "src/linked-dir: skipped, a symbolic link to a directory (not followed)" err.txt ||
  fail "a cause seen once is said as it is: $(cat err.txt)"
[ "$(wc -l <err.txt)" -le 8 ] || fail "too many lines of warnings: $(cat err.txt)"

# --verbose: every one, and the same summary
"$LARDER" pack src -o verbose --verbose >out.txt 2>err.txt || fail "pack --verbose"
[ "$(grep -c "skipped, no extension (no sample key)" err.txt)" -eq 25 ] ||
  fail "--verbose did not list all 25: $(cat err.txt)"
for i in 1 13 25; do grep -q "src/README$i: skipped" err.txt || fail "README$i not listed"; done
grep -qF "skipped 26 inputs:" out.txt || fail "summary with --verbose: $(cat out.txt)"

# a tree with nothing skipped says nothing of it
mkdir -p tidy && cp src/sample0000*.* tidy/
"$LARDER" pack tidy -o tidy-out >out.txt 2>err.txt || fail "pack tidy: $(cat err.txt)"
! grep -q "skipped" out.txt || fail "a clean tree reports skips: $(cat out.txt)"
[ ! -s err.txt ] || fail "a clean tree warns: $(cat err.txt)"
