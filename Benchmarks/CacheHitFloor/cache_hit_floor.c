// The least a `federate credentials` cache hit can do with the libraries the brief prescribes
// (the system's libsqlite3 and libcrypto), in C and nothing else: open the keystore's
// database as the CLI does (read-write and without following symlinks: a WAL database needs
// its -wal and -shm files), read the session's row, open it with AES-256-GCM through libcrypto
// (initialised as SecureStorage does, configuration file included) under the key from
// $IDENTITY_BROKER_KEY and the item's associated data, and write the plaintext record to
// stdout. No Swift runtime, no argument parsing, no file checks, no JSON.
//
// compare.sh times it beside `noop` and `federate credentials` (cli_floor_vs_noop): the ratio
// to the no-op that no implementation of the cache hit on these libraries goes under.
//
//   cache_hit_floor DATABASE SERVICE KEY      (exit 0 only when the item opened)
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// SecureStorage's ItemBinding with no access group, after Sealing's format-version byte.
static size_t associated_data(unsigned char *out, const char *service, const char *key) {
    static const char domain[] = "IdentityBroker.SecureStorage";
    size_t n = 0;
    out[n++] = 1;
    memcpy(out + n, domain, sizeof domain);  // with its terminating zero
    n += sizeof domain;
    const char *fields[2] = {service, key};
    for (int i = 0; i < 2; i++) {
        size_t length = strlen(fields[i]);
        out[n++] = (unsigned char)(length >> 24);
        out[n++] = (unsigned char)(length >> 16);
        out[n++] = (unsigned char)(length >> 8);
        out[n++] = (unsigned char)length;
        memcpy(out + n, fields[i], length);
        n += length;
        if (i == 0) out[n++] = 0;  // no access group
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    const char *encoded = getenv("IDENTITY_BROKER_KEY");
    unsigned char key[48];
    if (!encoded || strlen(encoded) != 44 || EVP_DecodeBlock(key, (const unsigned char *)encoded, 44) != 33) return 2;

    sqlite3 *db;
    sqlite3_stmt *statement;
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) != SQLITE_OK) return 3;
    if (sqlite3_prepare_v2(db, "SELECT value FROM items WHERE key = ?1", -1, &statement, NULL) != SQLITE_OK) return 3;
    sqlite3_bind_text(statement, 1, argv[3], -1, SQLITE_STATIC);
    if (sqlite3_step(statement) != SQLITE_ROW) return 3;
    const unsigned char *sealed = sqlite3_column_blob(statement, 0);
    int count = sqlite3_column_bytes(statement, 0);
    if (count < 29 || sealed[0] != 1 || count > 65536) return 4;

    unsigned char aad[1024], plaintext[65536], tag[16];
    if (strlen(argv[2]) + strlen(argv[3]) > 900) return 2;
    size_t aad_length = associated_data(aad, argv[2], argv[3]);
    memcpy(tag, sealed + count - 16, 16);
    int length = 0, final_length = 0;
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
    EVP_CIPHER *cipher = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    EVP_CIPHER_CTX *context = EVP_CIPHER_CTX_new();
    if (!cipher || !context
        || EVP_DecryptInit_ex(context, cipher, NULL, NULL, NULL) != 1
        || EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) != 1
        || EVP_DecryptInit_ex(context, NULL, NULL, key, sealed + 1) != 1
        || EVP_DecryptUpdate(context, NULL, &length, aad, (int)aad_length) != 1
        || EVP_DecryptUpdate(context, plaintext, &length, sealed + 13, count - 29) != 1
        || EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, tag) != 1
        || EVP_DecryptFinal_ex(context, plaintext + length, &final_length) != 1) return 4;
    fwrite(plaintext, 1, (size_t)(length + final_length), stdout);
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return 0;
}
