// The parts of OpenSSL's libcrypto IdentityBroker uses, plus wrappers for the
// macros Swift cannot import. Every wrapper carries the `ib_crypto_` prefix.
#ifndef IDENTITY_BROKER_CLIBCRYPTO_H
#define IDENTITY_BROKER_CLIBCRYPTO_H

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

/// Initialises libcrypto without registering its atexit handler: the handler would
/// race Swift's own teardown when libcurl and the keystore share one OpenSSL.
static inline int ib_crypto_init_no_atexit(void) {
    return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

static inline int ib_crypto_gcm_set_ivlen(EVP_CIPHER_CTX *ctx, int length) {
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, length, NULL);
}

static inline int ib_crypto_gcm_get_tag(EVP_CIPHER_CTX *ctx, int length, void *tag) {
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, length, tag);
}

static inline int ib_crypto_gcm_set_tag(EVP_CIPHER_CTX *ctx, int length, void *tag) {
    return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, length, tag);
}

#endif
