# Helpers shared by the benchmark scripts (sourced).

# random_samples DIR N SIZE: N files of SIZE random bytes, sNNNNNN.bin
random_samples() {
  mkdir -p "$1"
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(os.path.join(root, "s%06d.bin" % i), "wb") as f:
        f.write(os.urandom(size))
PY
}

# start_httpdelay BUILD ROOT WORK DELAY: serve ROOT with tools/httpdelay;
# sets server (its pid) and base_url; the caller kills it
start_httpdelay() {
  rm -f "$3/port"
  "$1/httpdelay" "$2" "$3/port" "$4" 2>/dev/null &
  server=$!
  for _ in $(seq 100); do [ -s "$3/port" ] && break; sleep 0.05; done
  base_url=http://127.0.0.1:$(cat "$3/port")
}

# ---- the slow-storage benchmarks (seed.sh, eviction.sh, mount.sh) ----------
# Each runs a Python driver that starts slowfs and the training ranks in
# process groups of their own, listed in WORK/pids ("slowfs GROUP" and
# "rank GROUP" lines) while they run.

# bench_options USAGE "$@": --quick sets quick=1 (quick keeps a value set
# before), -h/--help prints the script's header comment; else usage, exit 2
bench_options() {
  local usage=$1 arg
  shift
  quick=${quick:-0}
  for arg in "$@"; do
    case $arg in
      --quick) quick=1 ;;
      -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) echo "usage: $usage" >&2; exit 2 ;;
    esac
  done
}

# bench_need_fuse NAME: exit 77 (skipped) without /dev/fuse
bench_need_fuse() {
  [ -e /dev/fuse ] || { echo "$1: /dev/fuse is missing: slowfs cannot mount" >&2; exit 77; }
}

# bench_build BUILD TARGET...: configure BUILD when it has no build.ninja, build the targets
bench_build() {
  local build=$1
  shift
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S . -B "$build" -G Ninja -DLARDER_WERROR=ON >/dev/null
  fi
  ninja -C "$build" "$@" >/dev/null
}

# bench_unmount MOUNT: undo a FUSE mount at MOUNT, if there is one (lazily
# when busy)
bench_unmount() {
  if grep -qs " $1 fuse" /proc/self/mounts; then
    fusermount3 -u "$1" 2>/dev/null || fusermount3 -u -z "$1" 2>/dev/null || umount -l "$1" || true
  fi
}

# bench_guard WORK MOUNT...: on exit, failure or signal, end what the run
# started: the driver (its pid in $driver, which this sets empty), then
# the ranks WORK/pids lists (killed outright: the driver could not end
# them), the FUSE mounts at MOUNT..., and last the slowfs processes
bench_guard() {
  bench_work=$1
  shift
  bench_mounts=("$@")
  driver=""
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
}

bench_cleanup() {
  local status=$? kind group m
  trap - EXIT INT TERM HUP
  if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
    kill -TERM "$driver" 2>/dev/null || true
    wait "$driver" 2>/dev/null || true
  fi
  if [ -s "$bench_work/pids" ]; then
    while read -r kind group; do
      if [ "$kind" = rank ]; then kill -KILL -- "-$group" 2>/dev/null || true; fi
    done <"$bench_work/pids"
  fi
  for m in "${bench_mounts[@]}"; do bench_unmount "$m"; done
  if [ -s "$bench_work/pids" ]; then
    while read -r kind group; do
      if [ "$kind" = slowfs ]; then kill -TERM -- "-$group" 2>/dev/null || true; fi
    done <"$bench_work/pids"
    rm -f "$bench_work/pids"
  fi
  exit "$status"
}

# bench_page_reporting: one phrase for a results header saying whether this
# machine's memory balloon reports free pages to its host ("free page
# reporting on (virtio_balloon)"), which makes every page a run allocates
# cost a host fault once it has been free a few seconds: bench/README.md
bench_page_reporting() {
  local d f
  for d in /sys/bus/virtio/drivers/virtio_balloon/virtio*; do
    [ -e "$d/features" ] || continue
    f=$(cat "$d/features")
    # feature bit 5: VIRTIO_BALLOON_F_REPORTING (the string's 6th character)
    [ "${f:5:1}" = 1 ] && { echo "free page reporting on (virtio_balloon)"; return; }
  done
  echo "no free page reporting"
}
