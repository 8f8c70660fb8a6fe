/*
 * auth.h - the peer handshake's cryptography (docs/protocol.md,
 * "Handshake"): fresh nonces from getrandom, HMAC-SHA256 proofs over
 * them keyed by the cluster secret, and their constant-time comparison.
 * The secret itself never leaves the process; only proofs travel, and a
 * proof binds both sides' nonces, so a recorded one is worth nothing on
 * another connection.
 */
#ifndef LARDER_AUTH_H
#define LARDER_AUTH_H

#include "common.h"
#include "wire.h"

/* The labels that keep a daemon's proof from serving as a client's. */
#define LARDER__AUTH_SERVER_LABEL "larder server"
#define LARDER__AUTH_CLIENT_LABEL "larder client"

/* Fill out with LARDER__WIRE_NONCE random bytes.  0, or -errno. */
LARDER__HIDDEN int larder__auth_nonce(uint8_t out[LARDER__WIRE_NONCE]);

/* HMAC-SHA256 of data under key into out (32 bytes).  0, or -ENOMEM. */
LARDER__HIDDEN int larder__hmac_sha256(const void *key, size_t key_length, const void *data,
                                       size_t data_length, uint8_t out[32]);

/*
 * A handshake proof: HMAC-SHA256(secret, label | first | second), label
 * without its NUL.  The daemon proves with (SERVER_LABEL, client nonce,
 * server nonce), the client with (CLIENT_LABEL, server nonce, client
 * nonce).  0, or -ENOMEM.
 */
LARDER__HIDDEN int larder__auth_proof(const char *secret, size_t secret_length, const char *label,
                                      const uint8_t first[LARDER__WIRE_NONCE],
                                      const uint8_t second[LARDER__WIRE_NONCE],
                                      uint8_t out[LARDER__WIRE_PROOF]);

/* Whether two proofs are equal, in time that does not depend on where they differ. */
LARDER__HIDDEN bool larder__auth_equal(const uint8_t a[LARDER__WIRE_PROOF],
                                       const uint8_t b[LARDER__WIRE_PROOF]);

#endif
