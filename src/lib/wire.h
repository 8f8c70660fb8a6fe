/*
 * wire.h - frames of the daemon protocol (docs/protocol.md): encoding and
 * parsing, with no I/O and no allocation, so the parser can be fuzzed.
 */
#ifndef LARDER_WIRE_H
#define LARDER_WIRE_H

#include "common.h"

#define LARDER__WIRE_MAGIC UINT32_C(0x5244524c)
/* 2: HELLO carries a nonce instead of a token, WELCOME a nonce and a proof,
 * and PROVE answers it: the cluster secret never travels. */
#define LARDER__WIRE_VERSION 2
#define LARDER__WIRE_HEADER 24
#define LARDER__WIRE_MAX_READ (64u << 20)
#define LARDER__WIRE_NONCE 32 /* bytes of a handshake nonce */
#define LARDER__WIRE_PROOF 32 /* bytes of an HMAC-SHA256 proof */
#define LARDER__WIRE_MAX_NAME 256
#define LARDER__WIRE_MAX_MESSAGE 1024
#define LARDER__WIRE_MAX_STATS (1u << 20)
#define LARDER__WIRE_MAX_URL 4096

enum larder__frame_type {
    LARDER__HELLO = 1,
    LARDER__WELCOME = 2,
    LARDER__READ = 3,
    LARDER__DATA = 4,
    LARDER__ERROR = 5,
    LARDER__STAT = 6,
    LARDER__STATS = 7,
    LARDER__OPEN = 8,
    LARDER__OPENED = 9,
    LARDER__PROVE = 10,
};

/* Roles a HELLO may claim (their values are the wire's). */
enum larder__role {
    LARDER__ROLE_READER = 1, /* a reader of this node, over the Unix socket */
    LARDER__ROLE_PEER = 2,   /* another node's daemon, over TCP */
};

/* How a WELCOME says the daemon authenticates peers. */
#define LARDER__AUTH_NONE 0 /* no cluster secret: proof is zero, no PROVE expected */
#define LARDER__AUTH_HMAC 1 /* HMAC-SHA256 over the nonces (docs/protocol.md) */

struct larder__frame {
    uint8_t type;
    uint32_t length; /* payload bytes */
    uint64_t request;
};

/* HELLO: the first frame a client sends. */
struct larder__hello {
    enum larder__role role;            /* checked: one of the two */
    uint32_t owner_chunk;              /* a peer's ownership chunk in bytes (cluster.h),
                                          checked by the daemon; a reader's: 0 (checked) */
    uint8_t nonce[LARDER__WIRE_NONCE]; /* fresh random bytes of the client's */
};

/* WELCOME: the daemon's answer to HELLO. */
struct larder__welcome {
    uint8_t member[16];
    uint32_t auth;                     /* LARDER__AUTH_NONE or LARDER__AUTH_HMAC */
    uint8_t nonce[LARDER__WIRE_NONCE]; /* fresh random bytes of the daemon's */
    uint8_t proof[LARDER__WIRE_PROOF]; /* the daemon's proof of the secret, or zeros */
    uint32_t name_length;
    const char *name; /* points into the payload, not NUL-terminated */
};

/* PROVE: a peer's proof of the secret, answering a WELCOME with AUTH_HMAC. */
struct larder__prove {
    uint8_t proof[LARDER__WIRE_PROOF];
};

struct larder__read {
    uint64_t id_low, id_high; /* dataset id */
    uint32_t shard;
    uint8_t priority;
    uint64_t offset, length;
};

/* OPENED: the dataset a daemon opened for an OPEN (index URL as payload). */
struct larder__opened {
    uint64_t id_low, id_high;
    uint32_t num_shards;
};

struct larder__error_frame {
    int32_t code;
    uint32_t message_length;
    const char *message; /* points into the payload, not NUL-terminated */
};

/*
 * Parse a frame header from buf[0..available).  Returns 0 and fills
 * `frame` when the header is whole and valid, LARDER_ETRUNCATED when more
 * bytes are needed, or LARDER_EPROTOCOL with a message naming the field
 * for a bad header (the connection must then be closed).
 */
LARDER__HIDDEN int larder__wire_header(const uint8_t *buf, size_t available,
                                       struct larder__frame *frame);
/* Payload parsers: 0, or a negative code with a message. */
LARDER__HIDDEN int larder__wire_hello(const uint8_t *payload, uint32_t length,
                                      struct larder__hello *out);
LARDER__HIDDEN int larder__wire_welcome(const uint8_t *payload, uint32_t length,
                                        struct larder__welcome *out);
LARDER__HIDDEN int larder__wire_prove(const uint8_t *payload, uint32_t length,
                                      struct larder__prove *out);
LARDER__HIDDEN int larder__wire_read(const uint8_t *payload, uint32_t length,
                                     struct larder__read *out);
LARDER__HIDDEN int larder__wire_error(const uint8_t *payload, uint32_t length,
                                      struct larder__error_frame *out);
LARDER__HIDDEN int larder__wire_opened(const uint8_t *payload, uint32_t length,
                                       struct larder__opened *out);

/* Encoders write a whole frame (header and payload) into out[0..capacity)
 * and return its size, or LARDER_ETOOSMALL. */
LARDER__HIDDEN int larder__wire_encode_header(uint8_t *out, size_t capacity, uint8_t type,
                                              uint32_t length, uint64_t request);
LARDER__HIDDEN int larder__wire_encode_hello(uint8_t *out, size_t capacity, uint64_t request,
                                             const struct larder__hello *hello);
LARDER__HIDDEN int larder__wire_encode_welcome(uint8_t *out, size_t capacity, uint64_t request,
                                               const struct larder__welcome *welcome);
LARDER__HIDDEN int larder__wire_encode_prove(uint8_t *out, size_t capacity, uint64_t request,
                                             const struct larder__prove *prove);
LARDER__HIDDEN int larder__wire_encode_read(uint8_t *out, size_t capacity, uint64_t request,
                                            const struct larder__read *read);
LARDER__HIDDEN int larder__wire_encode_open(uint8_t *out, size_t capacity, uint64_t request,
                                            const char *index_url);
LARDER__HIDDEN int larder__wire_encode_opened(uint8_t *out, size_t capacity, uint64_t request,
                                              const struct larder__opened *opened);
LARDER__HIDDEN int larder__wire_encode_error(uint8_t *out, size_t capacity, uint64_t request,
                                             int32_t code, const char *message);

#endif
