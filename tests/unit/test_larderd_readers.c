/*
 * test_larderd_readers.c - READERS (src/larderd/readers.c) without
 * sockets: only a member that proved the cluster secret is heard (a local
 * user, or any peer of a cluster without a secret, is refused, for it
 * could stall every node's staging); a bad hold is refused; a member's
 * word is answered with an empty READERS and holds this process's gate
 * (one background piece at most while that member's readers are about).
 */
#include "auth.h"
#include "daemon_fixture.h"
#include "source.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static void send_readers(struct connection *c, uint32_t hold_ms)
{
    uint8_t frame[LARDER__WIRE_HEADER + 4];
    int n = larder__wire_encode_readers(frame, sizeof frame, 4, hold_ms);
    CHECK_EQ(n, LARDER__WIRE_HEADER + 4);
    CHECK(fixture_send(c, frame, (size_t)n));
}

/* A peer connection of d that proved d's secret. */
static struct connection *proven_peer(struct larderd *d)
{
    struct connection *c = fixture_connection(d, true);
    struct larder__hello h = {.role = LARDER__ROLE_PEER, .owner_chunk = 4u << 20};
    memset(h.nonce, 0x33, sizeof h.nonce);
    uint8_t frame[256];
    int n = larder__wire_encode_hello(frame, sizeof frame, 1, &h);
    CHECK(fixture_send(c, frame, (size_t)n));
    struct output *o = fixture_answer(c, LARDER__WELCOME);
    struct larder__welcome w;
    CHECK_EQ(larder__wire_welcome(o->bytes + LARDER__WIRE_HEADER,
                                  (uint32_t)(o->length - LARDER__WIRE_HEADER), &w),
             0);
    free(o);
    struct larder__prove prove;
    CHECK_EQ(larder__auth_proof(d->secret, strlen(d->secret), LARDER__AUTH_CLIENT_LABEL, w.nonce,
                                h.nonce, prove.proof),
             0);
    n = larder__wire_encode_prove(frame, sizeof frame, 2, &prove);
    CHECK(fixture_send(c, frame, (size_t)n));
    CHECK(c->proven);
    return c;
}

TEST(larderd_readers_only_from_a_proven_member)
{
    struct larderd d;
    fixture_daemon(&d, 2);
    char message[256];
    /* no cluster secret: no peer is heard */
    struct connection *peer = fixture_connection(&d, true);
    fixture_hello(peer, true);
    send_readers(peer, 30);
    CHECK_EQ(fixture_error(peer, message, sizeof message), LARDER_EDENIED);
    connection_release(peer);
    d.secret = strdup("cluster-secret");
    /* a local reader: refused, with or without a secret */
    struct connection *local = fixture_connection(&d, false);
    fixture_hello(local, false);
    send_readers(local, 30);
    CHECK_EQ(fixture_error(local, message, sizeof message), LARDER_EDENIED);
    connection_release(local);
    CHECK_EQ(larder__source_gate_held_ms(), 0); /* nothing heard yet */
    /* a member that proved the secret: a hold past 1 s is refused ... */
    struct connection *member = proven_peer(&d);
    send_readers(member, 5000);
    CHECK_EQ(fixture_error(member, message, sizeof message), LARDER_EPROTOCOL);
    connection_release(member);
    CHECK_EQ(larder__source_gate_held_ms(), 0);
    /* ... the longest hold (looked at well within it) is answered with an
     * empty READERS and holds the gate */
    member = proven_peer(&d);
    send_readers(member, 1000);
    struct output *o = fixture_answer(member, LARDER__READERS);
    CHECK_EQ(o->length, LARDER__WIRE_HEADER);
    free(o);
    CHECK(larder__source_gate_held_ms() > 0);
    CHECK_EQ(larder__source_gate_slots(), 1);
    connection_release(member);
    larderd_free(&d);
}
