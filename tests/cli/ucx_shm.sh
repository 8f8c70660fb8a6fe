# The cluster tests over UCX's shm transport (docs/protocol.md, "Transports"):
# daemon.sh (three daemons, origin bytes once for the cluster, byte-exact
# reads on every node, an owner killed mid-epoch, a restarted daemon
# rejoining, hostile frames) and stripe.sh (striped ownership), each with
# every larderd run as --transport ucx and UCX_TLS=shm.  Skipped (77) when
# UCX has no shm transport here.
source "$(dirname "$0")/lib.sh"
ucx_usable shm
export LARDER_TEST_TRANSPORT=ucx UCX_TLS=shm

for t in daemon stripe; do
  bash "$TESTS/cli/$t.sh" >"$WORK/$t.log" 2>&1 || fail "$t.sh over UCX (shm): $(tail -20 "$WORK/$t.log")"
  echo "$t.sh over UCX (shm): ok"
done
