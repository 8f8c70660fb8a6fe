# stripe.sh over UCX's tcp transport (docs/protocol.md, "Transports"): every
# larderd of it runs --transport ucx with UCX_TLS=tcp (lib.sh's
# start_daemon; stripe.sh's own).  Skipped (77) when UCX has no tcp
# transport here.
source "$(dirname "$0")/lib.sh"
ucx_usable tcp
export LARDER_TEST_TRANSPORT=ucx UCX_TLS=tcp
bash "$TESTS/cli/stripe.sh" >"$WORK/stripe.log" 2>&1 || fail "stripe.sh over UCX (tcp): $(tail -20 "$WORK/stripe.log")"
echo "stripe.sh over UCX (tcp): ok"
