# What larder loads whole into memory is bounded (found by review): a
# remote index at 4 GiB, a list of names (--files-from) at 256 MiB
# (src/lib/source.h).  An index whose Content-Length is over the limit is
# refused before its body; a list sent as an endless body without a
# Content-Length stops at the limit, in seconds, its memory bounded.
# Before the fix, both were taken until the HTTP timeout (60 s): the
# endless body grew memory all the while.
source "$(dirname "$0")/lib.sh"
mkdir www
start_hostile_http www
base=$hostile_base
export LARDER_HTTP_TIMEOUT=8 # the old code's stop, not 60 s

started=$(date +%s%N)
expect_error 1 "$base/huge/index.larder: an index of $((5 << 30)) bytes (its Content-Length): refused, more than the $((4 << 30)) larder loads into memory" \
  "$LARDER" inspect $base/huge/index.larder
took=$((($(date +%s%N) - started) / 1000000))
[ $took -lt 3000 ] || fail "the huge index took $took ms to refuse"

# the endless list: the address space capped (not with ASan, which maps
# terabytes of shadow), so that the old code fails instead of eating memory
limit_memory=
[ $sanitizer_build -eq 1 ] || limit_memory="ulimit -v $((3 << 20));"
started=$(date +%s%N)
status=0
bash -c "$limit_memory exec /usr/bin/time -f '%M' -o rss.txt \"\$@\"" larder \
  "$LARDER" index --files $base/files/ --files-from $base/endless/list.txt -o x.larder \
  2>err.txt || status=$?
took=$((($(date +%s%N) - started) / 1000000))
[ $status -eq 1 ] || fail "the endless list exited $status: $(cat err.txt)"
grep -qF "$base/endless/list.txt: a list of names of more than $((256 << 20)) bytes: refused" err.txt ||
  fail "the endless list's message: $(cat err.txt)"
[ $took -lt 6000 ] || fail "the endless list took $took ms to refuse"
rss_kib=$(tail -1 rss.txt)
[ $sanitizer_build -eq 1 ] || [ "$rss_kib" -lt $((900 << 10)) ] ||
  fail "the endless list took $rss_kib KiB of memory"
echo "ok (list refused in $took ms, $rss_kib KiB)"
