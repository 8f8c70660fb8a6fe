# Registrations written to MOUNT/.larder-order that the mount must refuse
# (docs/mount.md "A registered sample order"; all found by review): the
# writer sees EINVAL, the mount's log says why, nothing is registered and
# the mount stays up.
#  - a global batch over the index's samples (20 here): a plan of no step;
#    batch=2^64-1 over world=2^32-1 had the prefetcher allocate a batch of
#    2^32 + 1 ids, and the mount died;
#  - a value longer than its field: taken as absent, rank= of 32 digits
#    registered rank 0, a long mode= the global plan, and a file= of 256
#    bytes registered a sample order of the whole index.
# A batch of exactly the 20 samples is taken, and is then the only line
# listed.
source "$(dirname "$0")/lib.sh"
source "$TESTS/cli/mount.lib"

make_tree src 20 # 20 keys, each a sample of two fields
"$LARDER" pack src -o packed --shard-size 100K >/dev/null
samples=$("$LARDER" inspect packed/index.larder --json |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["num_samples"])')
[ "$samples" -eq 20 ] || fail "the index holds $samples samples, not 20"
mount_larder o "$WORK/packed/index.larder" --cache "$WORK/cache-o"

long_rank=$(printf '0%.0s' $(seq 31))1 # 32 characters, the number 1
long_mode=$(printf 'x%.0s' $(seq 16)) # 16 characters
long_file=$(printf 'a%.0s' $(seq 256)) # 256 bytes
refused=(
  "seed=1 epoch=0 rank=0 world=4294967295 batch=18446744073709551615|batch=18446744073709551615 world=4294967295: a global batch (and world) of at most the index's 20 samples"
  "seed=1 epoch=0 rank=0 world=1 batch=21|batch=21 world=1: a global batch (and world) of at most the index's 20 samples"
  "seed=1 epoch=0 rank=0 world=21 batch=21|batch=21 world=21: a global batch (and world) of at most"
  "seed=1 epoch=0 rank=$long_rank world=2 batch=4|rank=: a value of 32 bytes, over the 31 allowed"
  "seed=1 epoch=0 rank=0 world=1 batch=4 mode=$long_mode|mode=: a value of 16 bytes, over the 15 allowed"
  "file=$long_file sampler=torch seed=1 epoch=0 rank=0 world=1 batch=4|file=: a value of 256 bytes, over the 255 allowed"
)
for entry in "${refused[@]}"; do
  line=${entry%%|*} why=${entry#*|}
  if echo "$line" >mnt-o/.larder-order 2>err.txt; then fail "accepted: $line"; fi
  grep -q "Invalid argument" err.txt || fail "not EINVAL: $line: $(cat err.txt)"
  grep -qF "$why" mnt-o.log || fail "no '$why' in the log for: $line: $(tail -3 mnt-o.log)"
done
[ -z "$(cat mnt-o/.larder-order)" ] || fail "registered: $(cat mnt-o/.larder-order)"
echo "seed=1 epoch=0 rank=1 world=2 batch=20" >mnt-o/.larder-order || fail "batch=20 refused"
# counted by its words, not by lines: the text is made again for each read,
# and a second read(2) past the first one's end finds the few bytes that the
# line's fills= grew by meanwhile
listed=$(grep -c "world=" mnt-o/.larder-order || true)
[ "$listed" -eq 1 ] && grep -q "rank=1 world=2 batch=20 " mnt-o/.larder-order ||
  fail "registrations listed: $(cat mnt-o/.larder-order)"
cmp src/sample00003.jpg mnt-o/sample00003.jpg || fail "sample00003.jpg differs"
umount_larder o
echo "${#refused[@]} registrations refused with their reason; a batch of every sample taken"
