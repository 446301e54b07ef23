/*
 * cnx/digest.h - SHA-256 digests of stored bytes, as "sha256:<64 hex>".
 *
 * Backed by OpenSSL's EVP interface, so it runs as fast as `openssl speed
 * -evp sha256` on the same machine (SHA-NI / AVX2 where present).
 */
#ifndef CNX_DIGEST_H
#define CNX_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** "sha256:" + 64 hex digits + NUL. */
#define CNX_DIGEST_LEN 72

/** Digest of data into out ("sha256:<hex>"). Cannot fail for valid args. */
void cnx_digest(const void *data, size_t len, char out[CNX_DIGEST_LEN]);

/** Raw 32-byte SHA-256 of data. */
void cnx_sha256(const void *data, size_t len, uint8_t out[32]);

/** @return 1 if text is a well-formed "sha256:" + 64 lowercase hex. */
int cnx_digest_valid(const char *text);

/**
 * Check data against an expected digest.
 * @param what  name used in the error message (object name)
 * @return 0; CNX_EINVAL if expected is malformed; CNX_EDIGEST on mismatch,
 *         with a message naming what, the expected and the actual digest.
 */
int cnx_digest_check(const void *data, size_t len, const char *expected,
                     const char *what);

/** Incremental SHA-256 for data that arrives in pieces. */
typedef struct cnx_digest_ctx cnx_digest_ctx;
int cnx_digest_ctx_new(cnx_digest_ctx **out);
void cnx_digest_ctx_update(cnx_digest_ctx *ctx, const void *data, size_t len);
void cnx_digest_ctx_final(cnx_digest_ctx *ctx, char out[CNX_DIGEST_LEN]);
void cnx_digest_ctx_free(cnx_digest_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
