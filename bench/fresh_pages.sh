#!/usr/bin/env bash
# What a page the kernel hands out costs on this machine: writes of SIZE
# MiB (default 2048) into a new file's page cache, timed with their system
# CPU, three ways: the first write; the same again at once (the pages the
# first one freed, reused); and again after IDLE seconds (default 60) with
# the machine idle.  On a VM whose balloon reports free pages to its host
# (bench_page_reporting), the host takes back what stays free a few
# seconds, and each page handed out afterwards faults on the host: the
# third write then costs what the first did, an order of magnitude over
# the second.  Every benchmark that stages bytes into a cache (larderd,
# the mount, bench/borrow_floor.c's receivers) pays that per new page; a
# local-disk baseline reading resident files does not.  bench/README.md.
#   bench/fresh_pages.sh [DIR]     (SIZE, IDLE)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
dir=${1:-bench/work}
size=${SIZE:-2048} idle=${IDLE:-60}
mkdir -p "$dir"
file=$dir/fresh-pages.$$
trap 'rm -f "$file"' EXIT
write() { # label: one write of SIZE MiB into a new file, then the file removed
  /usr/bin/time -f "%e %S" -o "$file.time" dd if=/dev/zero of="$file" bs=1M count="$size" status=none
  rm -f "$file"
  read -r wall sys <"$file.time"
  rm -f "$file.time"
  awk -v l="$1" -v w="$wall" -v s="$sys" -v m="$size" 'BEGIN {
    printf "%-28s %6.2f s  %6.2f s system  %5.2f ms system per MiB\n", l, w, s, s * 1000 / m }'
}
echo "$(bench_page_reporting); $size MiB into $dir"
write "first"
write "again at once"
sleep "$idle"
write "again after ${idle} s idle"
