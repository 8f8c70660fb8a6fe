#!/usr/bin/env bash
# The daemon soak at length: three larderd over one nginx origin, six
# readers reading random samples through them (no cache of their own),
# one daemon killed with -9 and restarted every KILL_EVERY seconds, for
# SOAK_SECONDS (default 150 s, 10 s apart).  Each run of tests/cli/soak.sh
# compares every byte with the origin's file and fails on a wrong byte, an
# error, a read over 1 s or a daemon over 300 MB.  Writes
# bench/results/soak.md.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
scripts/install-deps >/dev/null
cmake -S . -B "$build" -G Ninja >/dev/null && ninja -C "$build" >/dev/null
seconds=${SOAK_SECONDS:-150} every=${KILL_EVERY:-10}
out=bench/results/soak.md
log=$(mktemp)
status=0
SOAK_SECONDS=$seconds KILL_EVERY=$every LARDER=$PWD/$build/larder BUILD=$build \
  bash tests/cli/soak.sh >"$log" 2>&1 || status=$?
result=$(grep -E "kills, .* reads" "$log" || true)
{
  echo "# Daemons killed under load"
  echo
  echo "Written by \`bench/soak.sh\` on $(date -u '+%Y-%m-%d %H:%M') UTC; $(nproc) cores;"
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include || echo ' (dirty tree)')."
  echo "Reproduce: \`SOAK_SECONDS=$seconds KILL_EVERY=$every bench/soak.sh\`."
  echo
  echo "Three daemons on loopback over one nginx origin (300 samples of 1-30 KB in"
  echo "600 KB tar shards), six Python readers (two per daemon, no cache of their"
  echo "own, so every read is a request to their daemon) reading random samples for"
  echo "$seconds s, each compared with the origin's file; every $every s one daemon is"
  echo "killed with -9 and restarted, in turn."
  echo
  echo "| outcome | result |"
  echo "|---|---|"
  echo "| test | $([ $status -eq 0 ] && echo passed || echo FAILED) |"
  echo "| figures | ${result:-none: see the log below} |"
  if [ $status -ne 0 ]; then
    echo
    echo '```'
    tail -20 "$log"
    echo '```'
  fi
} >"$out"
rm -f "$log"
cat "$out"
exit $status
