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
    LARDER__HINT = 11,        /* hints: see the block at the end */
    LARDER__HINT_ANSWER = 12, /* HINTED in docs/protocol.md */
    /* names (publish and consume): the block at the end of this file */
    LARDER__PUBLISH = 13,
    LARDER__RESOLVE = 14,
    LARDER__RESOLVED = 15,
    LARDER__ANNOUNCE = 16,
    /* transforms: the block "transforms" at the end of this file */
    LARDER__TRANSFORM = 17,
    LARDER__TRANSFORMED = 18,
    /* storm: a daemon tells a peer that its READs on this connection are
     * queued or being filled, not lost (docs/protocol.md, "PROGRESS");
     * no payload, request id 0 */
    LARDER__PROGRESS = 20,
    /* ucx: after the handshake, a peer offers its UCX worker address and the
     * daemon answers with its own and a session token (docs/protocol.md,
     * "Transports"); a daemon without UCX answers ERROR */
    LARDER__UCX_OFFER = 24,
    LARDER__UCX_ACCEPT = 25,
    /* priorities: a peer's readers read the shared origin now; start no
     * background read of it for the next hold_ms (docs/protocol.md,
     * "READERS"); answered with an empty READERS */
    LARDER__READERS = 26,
};
#define LARDER__WIRE_MAX_UCX 4000 /* bytes of a UCX worker address in UCX_OFFER, UCX_ACCEPT */

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
    uint8_t flags; /* LARDER__READ_CACHED (storm: relays), LARDER__READ_STAGE, or 0 */
    uint64_t offset, length;
};
/* READ flags (byte 21, docs/protocol.md).  CACHED: answer from the cache
 * only, an ERROR (not found) when any byte would need a fill: a peer asked
 * as a relay.  STAGE: a local reader that reads the node cache itself
 * asks for the bytes to be staged there; the answer is an empty DATA once
 * they are (or the bytes, when the cache could not take them). */
#define LARDER__READ_CACHED 1u
#define LARDER__READ_STAGE 2u
#define LARDER__READ_FLAGS (LARDER__READ_CACHED | LARDER__READ_STAGE)

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

/* The largest payload a frame of `type` may carry (0: an unknown type). */
LARDER__HIDDEN uint64_t larder__wire_max_payload(uint8_t type);
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

/* ---- hints (docs/protocol.md, "Hints") -----------------------------------
 *
 * HINT asks a daemon to stage a dataset's samples (all, or those named by
 * key) in its node cache and pin them for a time (hot), or to have the
 * named members do it (replicate); LIST asks what is pinned.  HINTED
 * answers: how many nodes took it, bytes pinned and staged (summed over
 * the nodes), and for LIST a JSON text. */
#define LARDER__WIRE_MAX_HINT 16384                       /* HINT payload bytes */
#define LARDER__HINT_MAX_KEYS 1024                        /* keys in one HINT */
#define LARDER__HINT_MAX_KEY 1024                         /* bytes of one key */
#define LARDER__HINT_MAX_TARGETS 4096                     /* bytes of a replicate's member list */
#define LARDER__HINT_MAX_TTL_MS (UINT64_C(30) * 86400000) /* 30 days */
#define LARDER__HINT_MAX_REPLICAS 65536
#define LARDER__HINTED_FIXED 48
#define LARDER__HINTED_MAX_TEXT (256u << 10) /* LIST's JSON */

enum larder__hint_kind {
    LARDER__HINT_HOT = 1,       /* stage and pin here, and on replicas / all nodes */
    LARDER__HINT_REPLICATE = 2, /* stage and pin on the named members */
    LARDER__HINT_LIST = 3,      /* what this daemon has pinned */
};
#define LARDER__HINT_ALL_NODES 0x01u /* hot: every member of the cluster */
#define LARDER__HINT_WAIT 0x02u      /* answer when the staging is done, not when accepted */
#define LARDER__HINT_HERE 0x04u      /* this node only: what a daemon forwards to a member */
#define LARDER__HINT_NAME 0x08u      /* url is a publication's name, resolved by each daemon */
#define LARDER__HINT_FLAGS 0x0fu

/* HINT.  Strings are not NUL-terminated; parsed, they point into the payload. */
struct larder__hint {
    uint8_t kind;      /* enum larder__hint_kind */
    uint8_t flags;     /* LARDER__HINT_* */
    uint32_t replicas; /* hot: nodes to stage on, this one included (0: this one alone) */
    uint64_t ttl_ms;   /* how long the pins hold, 1 .. LARDER__HINT_MAX_TTL_MS (LIST: 0) */
    uint32_t url_length, targets_length, num_keys;
    const char *url; /* the index (LIST: none); with LARDER__HINT_NAME a valid publication name */
    const char *targets; /* replicate: "host:port,..." members (else none) */
    /* parsed: num_keys records (u16 length, bytes), keys_length bytes in all;
     * walk them with larder__wire_hint_key */
    const uint8_t *keys;
    uint32_t keys_length;
    const char *const *key_list; /* encoding: num_keys NUL-terminated keys */
};

#define LARDER__HINTED_DONE 0x01u    /* staging finished on every node counted */
#define LARDER__HINTED_PARTIAL 0x02u /* some node pinned less than asked (capacity) */
#define LARDER__HINTED_FLAGS 0x03u

/* HINTED. */
struct larder__hinted {
    uint32_t flags;        /* LARDER__HINTED_* */
    uint32_t nodes;        /* nodes that took the hint */
    uint32_t failed;       /* nodes that did not (down, refused) */
    uint64_t samples;      /* samples hinted */
    uint64_t bytes;        /* bytes of those samples (one copy) */
    uint64_t pinned_bytes; /* pinned, summed over the nodes */
    uint64_t staged_bytes; /* staged so far, summed over the nodes */
    uint32_t text_length;  /* LIST: JSON text; else 0 */
    const char *text;      /* points into the payload, not NUL-terminated */
};

/* Parse a HINT / HINTED payload: 0, or LARDER_EPROTOCOL with a message naming the field. */
LARDER__HIDDEN int larder__wire_hint(const uint8_t *payload, uint32_t length,
                                     struct larder__hint *out);
LARDER__HIDDEN int larder__wire_hinted(const uint8_t *payload, uint32_t length,
                                       struct larder__hinted *out);
/* The next key of a parsed HINT from *cursor (0 at first): 1 and the key, 0 past the last. */
LARDER__HIDDEN int larder__wire_hint_key(const struct larder__hint *hint, uint32_t *cursor,
                                         const char **key, uint32_t *length);
/* Encode a whole frame; its size, or LARDER_ETOOSMALL (also for fields past their limits). */
LARDER__HIDDEN int larder__wire_encode_hint(uint8_t *out, size_t capacity, uint64_t request,
                                            const struct larder__hint *hint);
LARDER__HIDDEN int larder__wire_encode_hinted(uint8_t *out, size_t capacity, uint64_t request,
                                              const struct larder__hinted *hinted);
/* ---- end of hints ---- */

/* ---- names: publish and consume (docs/protocol.md, "Names") ---- */

#define LARDER__WIRE_MAX_PUBLICATION 128          /* bytes of a publication's name */
#define LARDER__WIRE_MAX_NAMES_FRAME (4096u + 64) /* PUBLISH and ANNOUNCE, in all */
#define LARDER__WIRE_MAX_INDEX (16u << 20)        /* index bytes a RESOLVED may carry */
#define LARDER__WIRE_MAX_WAIT_MS 3600000u         /* the longest a RESOLVE may wait */

/* RESOLVE flags */
#define LARDER__RESOLVE_INDEX 1u /* send the index's bytes (a publication without an origin) */
#define LARDER__RESOLVE_LOCAL 2u /* answer from this daemon's registry alone: never ask peers */
#define LARDER__RESOLVE_LIST 4u  /* no name: answer STATS, the registry as JSON */
/* ANNOUNCE and RESOLVED flags */
#define LARDER__PUBLISHED_ORIGIN 1u /* written through: `origin` names the index there */
/* a generation follows the payload's other bytes (u64, 1 and up): the
 * publication replaced that many earlier ones of its name (--replace);
 * without the flag, generation 0 */
#define LARDER__PUBLISHED_GENERATION 2u
/* PUBLISH flags */
#define LARDER__PUBLISH_REPLACE 1u /* the name may be published already: replace it */

/*
 * Whether `name` (length bytes, not NUL-terminated) is a valid publication
 * name: 1 to LARDER__WIRE_MAX_PUBLICATION bytes of letters, digits and
 * "._-+=@:/", where '/' separates non-empty components none of which is
 * "." or "..".  0, or LARDER_EUSAGE with a message saying what is wrong.
 */
LARDER__HIDDEN int larder__wire_check_publication(const char *name, size_t length);

/* PUBLISH (client -> its own daemon): a directory's index under a name. */
struct larder__publish {
    uint32_t name_length, index_length, origin_length;
    uint32_t flags;     /* LARDER__PUBLISH_* */
    const char *name;   /* valid (larder__wire_check_publication) */
    const char *index;  /* the index's absolute path on this node, 1 to 4096 bytes */
    const char *origin; /* the written-through index's URL or path; origin_length 0: none */
};

/* RESOLVE (client or peer -> daemon): where the publication `name` is. */
struct larder__resolve {
    uint32_t wait_ms; /* how long to wait for a name not yet published */
    uint32_t flags;   /* LARDER__RESOLVE_* */
    uint32_t name_length;
    const char *name; /* valid; empty only with LARDER__RESOLVE_LIST */
};

/*
 * ANNOUNCE (producer's daemon -> every member) and RESOLVED (daemon ->
 * client): a publication.  Strings point into the payload and are not
 * NUL-terminated; an ANNOUNCE carries no index bytes.
 */
struct larder__publication {
    uint64_t id_low, id_high; /* the dataset id */
    uint32_t flags;           /* LARDER__PUBLISHED_* (GENERATION: set from `generation`) */
    uint64_t generation;      /* 0, or how many publications of the name it replaced */
    uint32_t name_length, producer_length, location_length, origin_length, index_length;
    const char *name;     /* valid */
    const char *producer; /* the producer's member name (host:port), 1 to 256 bytes */
    /* where the index is: to a local reader, a path on the answering node
     * or a URL it can open; to a peer, the index's path on the producer
     * (what a peer OPENs there); 1 to 4096 bytes */
    const char *location;
    const char *origin;   /* with LARDER__PUBLISHED_ORIGIN, the written-through index */
    const uint8_t *index; /* RESOLVED only, when asked for: the index's bytes */
};

LARDER__HIDDEN int larder__wire_publish(const uint8_t *payload, uint32_t length,
                                        struct larder__publish *out);
LARDER__HIDDEN int larder__wire_resolve(const uint8_t *payload, uint32_t length,
                                        struct larder__resolve *out);
/* ANNOUNCE or RESOLVED (`type`): the same layout. */
LARDER__HIDDEN int larder__wire_publication(uint8_t type, const uint8_t *payload, uint32_t length,
                                            struct larder__publication *out);
/* Encoders: the whole frame's size, or LARDER_ETOOSMALL (also for
 * fields over their limits: the parsers would refuse them). */
LARDER__HIDDEN int larder__wire_encode_publish(uint8_t *out, size_t capacity, uint64_t request,
                                               const struct larder__publish *publish);
LARDER__HIDDEN int larder__wire_encode_resolve(uint8_t *out, size_t capacity, uint64_t request,
                                               const struct larder__resolve *resolve);
/* The size of that frame, to allocate `out` (0 when a field is over its limit). */
LARDER__HIDDEN size_t larder__wire_publication_size(uint8_t type,
                                                    const struct larder__publication *p);
LARDER__HIDDEN int larder__wire_encode_publication(uint8_t *out, size_t capacity, uint8_t type,
                                                   uint64_t request,
                                                   const struct larder__publication *p);

/* ---- transforms (docs/protocol.md, "Transforms") ---- */

#define LARDER__TRANSFORM_FIXED 40    /* TRANSFORM's bytes before the spec */
#define LARDER__TRANSFORMED_FIXED 8   /* TRANSFORMED's bytes before its body */
#define LARDER__TRANSFORMED_RAW 1u    /* the body is the sample's raw bytes: run it yourself */
#define LARDER__TRANSFORMED_CACHED 2u /* the result came from the daemon's result cache */
/* with RAW: the daemon leaves transforms to its readers for now (its CPUs
 * are busy): transform here without asking for a while */
#define LARDER__TRANSFORMED_AT_READER 4u
#define LARDER__TRANSFORMED_FLAGS 7u

/* TRANSFORM flags: the reader holds the sample in its node cache, so an
 * answer of raw bytes needs no body (it reads them there itself) */
#define LARDER__TRANSFORM_RESIDENT 1u

/* TRANSFORM (reader -> its daemon): sample `sample` with the transform `spec`. */
struct larder__transform_request {
    uint64_t id_low, id_high; /* dataset id (opened on this connection) */
    uint64_t sample;
    uint8_t priority;     /* priority.h class, 0-3 */
    uint8_t flags;        /* LARDER__TRANSFORM_* */
    uint32_t version;     /* the reader's version of the transform: the daemon's must match */
    uint32_t wait_us;     /* the reader's recent wait per transformed sample */
    uint32_t budget_us;   /* what the reader can wait per sample (0: unknown) */
    uint16_t spec_length; /* 1 .. LARDER_TRANSFORM_MAX_SPEC - 1 */
    const char *spec;     /* "name[:params]", not NUL-terminated; points into the payload */
};

LARDER__HIDDEN int larder__wire_transform(const uint8_t *payload, uint32_t length,
                                          struct larder__transform_request *out);
/* TRANSFORMED's header: *flags and the body's offset (LARDER__TRANSFORMED_FIXED). */
LARDER__HIDDEN int larder__wire_transformed(const uint8_t *payload, uint32_t length,
                                            uint32_t *flags);
LARDER__HIDDEN int larder__wire_encode_transform(uint8_t *out, size_t capacity, uint64_t request,
                                                 const struct larder__transform_request *t);
/* TRANSFORMED's header and fixed part (the body, body_length bytes, follows). */
LARDER__HIDDEN int larder__wire_encode_transformed(uint8_t *out, size_t capacity, uint64_t request,
                                                   uint32_t flags, uint64_t body_length);

/* ---- READERS: u32 hold_ms, at most LARDER__READERS_MAX_HOLD_MS ---- */
#define LARDER__READERS_MAX_HOLD_MS 1000
/* READERS asking the peer to hold its background origin reads hold_ms. */
LARDER__HIDDEN int larder__wire_encode_readers(uint8_t *out, size_t capacity, uint64_t request,
                                               uint32_t hold_ms);
/* READERS's hold_ms: 0, or LARDER_EPROTOCOL (not 4 bytes, or past the most). */
LARDER__HIDDEN int larder__wire_readers(const uint8_t *payload, uint32_t length, uint32_t *hold_ms);

#endif
