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
