# Bad input gets a clear error naming the file, a non-zero exit, and
# nothing half-written.
source "$(dirname "$0")/lib.sh"
make_tree src 20
"$LARDER" pack src -o good --shard-size 100K >/dev/null
idx=good/index.larder

# usage errors exit 2
expect_error 2 "missing -o" "$LARDER" pack src
expect_error 2 "unknown format" "$LARDER" pack src -o x --format zip
expect_error 2 "bad shard size" "$LARDER" pack src -o x --shard-size lots
expect_error 2 "unknown command" "$LARDER" frobnicate
expect_error 2 "expected one INDEX" "$LARDER" verify
[ ! -e x ] || fail "a usage error wrote output"

# the index: missing, not an index, truncated, another version, bit rot
expect_error 1 "nope.larder" "$LARDER" inspect nope.larder
head -c 1000 /dev/urandom >junk.larder
expect_error 1 "junk.larder: bad magic at offset 0: not a larder index" "$LARDER" inspect junk.larder
head -c 300 $idx >cut.larder
expect_error 1 "cut.larder" "$LARDER" verify cut.larder
cp $idx v2.larder && printf '\x02' | dd of=v2.larder bs=1 seek=8 conv=notrunc 2>/dev/null
expect_error 1 "v2.larder" "$LARDER" inspect v2.larder
size=$(stat -c %s $idx)
cp $idx rot.larder && printf 'Q' | dd of=rot.larder bs=1 seek=$((size - 5)) conv=notrunc 2>/dev/null
status=0
"$LARDER" verify rot.larder >rot.txt 2>&1 || status=$?
[ $status -eq 1 ] || fail "verify of a damaged index exited $status"
grep -q "content hash" rot.txt || fail "verify did not report the content hash: $(cat rot.txt)"

# a damaged shard: verify lists the bad sample by key and exits 1
cp -r good bad
victim=$("$LARDER" inspect bad/index.larder --sample 3 --json | /usr/bin/python3 -c '
import json, sys; s = json.load(sys.stdin); print(s["key"], s["shard_name"], s["offset"] + s["length"] // 2)')
read -r key shard offset <<<"$victim"
printf 'XYZ' | dd of="bad/$shard" bs=1 seek="$offset" conv=notrunc 2>/dev/null
status=0
"$LARDER" verify bad/index.larder >verify.txt || status=$?
[ $status -eq 1 ] || fail "verify exited $status"
grep -q "^BAD $key (sample 3)" verify.txt || fail "bad sample not listed by key: $(cat verify.txt)"
expect_error 1 "checksum" "$LARDER" cat bad/index.larder "$key"
rm "bad/$shard"
expect_error 1 "$shard" "$LARDER" cat bad/index.larder "$key"

# cat: no such sample or field
expect_error 1 "no sample with key 'nokey'" "$LARDER" cat $idx nokey
expect_error 1 "no sample 999" "$LARDER" cat $idx 999
expect_error 1 "has no field 'png'; it has: cls jpg" "$LARDER" cat $idx sample00001 --field png

# pack: bad sources fail before writing anything
expect_error 1 "missing-dir" "$LARDER" pack missing-dir -o out1
mkdir empty && expect_error 1 "empty" "$LARDER" pack empty -o out2
printf 'not a tar file at all' >fake.tar
expect_error 1 "fake.tar" "$LARDER" pack fake.tar -o out3
(cd src && tar cf ../t1.tar sample00001.jpg sample00001.cls && tar cf ../t2.tar sample00001.jpg)
expect_error 1 "duplicate sample key 'sample00001'" "$LARDER" pack t1.tar t2.tar -o out4
mkfifo src/pipe.bin
expect_error 1 "pipe.bin: not a regular file" "$LARDER" pack src -o out5
rm src/pipe.bin
for o in out1 out2 out3 out4 out5; do [ ! -e $o/index.larder ] || fail "$o has an index"; done

# unsafe tars
ln -s /etc/passwd src/evil.txt
(cd src && tar cf ../links.tar sample00002.cls evil.txt)
expect_error 1 "is a link or device" "$LARDER" index links.tar -o links.larder
/usr/bin/python3 - <<'PY'
import io, tarfile
with tarfile.open("dots.tar", "w", format=tarfile.USTAR_FORMAT) as t:
    ti = tarfile.TarInfo("../../etc/x.txt"); ti.size = 1; t.addfile(ti, io.BytesIO(b"x"))
PY
expect_error 1 "'..'" "$LARDER" index dots.tar -o dots.larder
expect_error 1 "dots.tar" "$LARDER" pack dots.tar -o out6
[ ! -e links.larder ] && [ ! -e dots.larder ] || fail "an unsafe tar got an index"
