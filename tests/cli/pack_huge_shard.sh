# 64-bit offsets: a sample that sits past 4 GiB in a shard packs, indexes
# and reads back.  The big file is sparse, so this costs little disk.
source "$(dirname "$0")/lib.sh"
avail=$(df --output=avail -k . | tail -1)
[ "$avail" -gt $((6 * 1024 * 1024)) ] || skip "needs 6 GiB free in $WORK"
mkdir src
truncate -s 4600M src/big.bin          # sparse zeros, 4.6 GB
echo "after the 4 GiB mark" >src/tail.txt
"$LARDER" pack src -o out --no-shuffle --jobs 1 --shard-size 8G >/dev/null
"$LARDER" inspect out/index.larder --sample tail --json | /usr/bin/python3 -c '
import json, sys; s = json.load(sys.stdin); assert s["offset"] > 4 << 30, s'
"$LARDER" cat out/index.larder tail --field txt | grep "after the 4 GiB mark" >/dev/null || fail "read past 4 GiB"
tar tvf out/shard-000000.tar | grep "4823449600 .* big.bin" >/dev/null || fail "tar does not list the big member"
