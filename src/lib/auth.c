/*
 * auth.c - nonces, HMAC-SHA256 proofs and their comparison for the peer
 * handshake (auth.h), over OpenSSL's libcrypto.
 */
#include "auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

int larder__auth_nonce(uint8_t out[LARDER__WIRE_NONCE])
{
    size_t got = 0;
    while (got < LARDER__WIRE_NONCE) {
        ssize_t n = getrandom(out + got, LARDER__WIRE_NONCE - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        got += (size_t)n;
    }
    return 0;
}

int larder__hmac_sha256(const void *key, size_t key_length, const void *data, size_t data_length,
                        uint8_t out[32])
{
    unsigned int length = 32;
    if (key_length > INT32_MAX) return -EINVAL;
    if (!HMAC(EVP_sha256(), key, (int)key_length, data, data_length, out, &length) || length != 32)
        return -ENOMEM;
    return 0;
}

int larder__auth_proof(const char *secret, size_t secret_length, const char *label,
                       const uint8_t first[LARDER__WIRE_NONCE],
                       const uint8_t second[LARDER__WIRE_NONCE], uint8_t out[LARDER__WIRE_PROOF])
{
    uint8_t message[32 + 2 * LARDER__WIRE_NONCE];
    size_t label_length = strlen(label);
    if (label_length > 32) return -EINVAL;
    memcpy(message, label, label_length);
    memcpy(message + label_length, first, LARDER__WIRE_NONCE);
    memcpy(message + label_length + LARDER__WIRE_NONCE, second, LARDER__WIRE_NONCE);
    return larder__hmac_sha256(secret, secret_length, message,
                               label_length + 2 * LARDER__WIRE_NONCE, out);
}

bool larder__auth_equal(const uint8_t a[LARDER__WIRE_PROOF], const uint8_t b[LARDER__WIRE_PROOF])
{
    return CRYPTO_memcmp(a, b, LARDER__WIRE_PROOF) == 0;
}
