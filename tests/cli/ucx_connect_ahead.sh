# connect_ahead.sh over UCX's tcp transport: every larderd of it runs
# --transport ucx with UCX_TLS=tcp, so the UCX path to each member (its
# control connection, whose OPEN a member counts in peer_opens) is made
# ahead too, and the first borrows make no new connection.  Skipped (77)
# when UCX has no tcp transport here.
source "$(dirname "$0")/lib.sh"
ucx_usable tcp
export LARDER_TEST_TRANSPORT=ucx UCX_TLS=tcp
bash "$TESTS/cli/connect_ahead.sh" >"$WORK/ahead.log" 2>&1 || fail "connect_ahead.sh over UCX (tcp): $(tail -20 "$WORK/ahead.log")"
grep "reads borrowed" "$WORK/ahead.log"
echo "connect_ahead.sh over UCX (tcp): ok"
