#!/usr/bin/env bash
# The simulation at 1,024 nodes x 8 ranks and a 100 GiB checkpoint
# (bench/sim/params/cluster.json), the figures docs/scale.md quotes, and
# the runs at 16 and 64 nodes that show how far the aggregated (lockstep)
# model is from the exact one.  Writes bench/results/restart-sim.md.
# Standard library and numpy; a few minutes on one core.
#
#   bench/sim/scale.sh                       # the cluster's assumed figures
#   MEASURED=bench/results/restart-measured.json bench/sim/scale.sh
#       # per-node serve rate from this machine's run (its nodes, NIC and
#       # checkpoint keys are ignored: only serve_bw is taken)
set -euo pipefail
{ # one group, read whole before it runs: editing the file mid-run is safe
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
out=${RESULTS:-bench/results/restart-sim.md}
base=(--params bench/sim/params/checkpoint.json --params bench/sim/params/cluster.json)
extra=()
if [ -n "${MEASURED:-}" ]; then
  serve=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["serve_bw"])' "$MEASURED")
  extra=(--set "serve_bw=$serve")
fi
sim() { $py bench/sim/run.py "${base[@]}" "${extra[@]}" "$@" | tail -n +4; } # rows only
header="| policy | nodes x ranks | order | origin bytes / size | time s | vs one reader | bound s | busiest share | x nodes | replication s | events |
|---|---|---|---|---|---|---|---|---|---|---|"
started=$SECONDS
{
  echo "# The restart storm at scale, simulated"
  echo
  echo "Written by \`bench/sim/scale.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit"
  echo "$(git rev-parse --short HEAD 2>/dev/null || echo '?'). Parameters: bench/sim/params/cluster.json${extra:+ with ${extra[*]}}"
  echo "(what each figure is and where it comes from: there, and docs/scale.md). Columns: bench/sim/run.py."
  echo "\"bound\" is what the links allow a perfect schedule; \"symmetric\" runs are the aggregated"
  echo "lockstep model (every node reading the same chunk at the same moment), \"full\" runs model"
  echo "every node."
  echo
  echo "## 1,024 nodes x 8 ranks, 100 GiB, 4 MiB chunks, 16 in flight per daemon"
  echo
  echo "$header"
  sim
  echo
  echo "## What changes it (striped and hinted, 1,024 x 8, lockstep)"
  echo
  for set in "window=64" "window=256" "chunk_bytes=16777216" "chunk_bytes=67108864" "serve_bw=25e9" \
    "window=256 serve_bw=25e9"; do
    echo "### $set"
    echo
    echo "$header"
    args=()
    for kv in $set; do args+=(--set "$kv"); done
    sim --policies striped,hinted "${args[@]}"
    echo
  done
  echo "## Lockstep against every node modelled (1 GiB, so that the exact model runs)"
  echo
  echo "$header"
  for n in 16 32; do
    sim --set nodes=$n --set checkpoint_bytes=1073741824 --policies striped,hinted --mode symmetric
    sim --set nodes=$n --set checkpoint_bytes=1073741824 --policies striped,hinted --mode full
    sim --set nodes=$n --set checkpoint_bytes=1073741824 --policies striped,hinted --mode full --order staggered
  done
  echo
  echo "($((SECONDS - started)) s of simulation.)"
} >"$out"
cat "$out"
exit
}
