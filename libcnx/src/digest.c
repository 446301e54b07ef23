/*
 * digest.c - SHA-256 through OpenSSL EVP, formatted "sha256:<hex>".
 *
 * One-shot digests use EVP_Digest (the same code path `openssl speed -evp
 * sha256` measures). Comparison against an expected digest is plain string
 * equality after a format check: digests are public, so no constant-time
 * compare is needed.
 */
#include "cnx/digest.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

static const char hexdigits[] = "0123456789abcdef";

static void format_digest(const uint8_t raw[32], char out[CNX_DIGEST_LEN])
{
    memcpy(out, "sha256:", 7);
    for (int i = 0; i < 32; i++) {
        out[7 + 2 * i] = hexdigits[raw[i] >> 4];
        out[8 + 2 * i] = hexdigits[raw[i] & 15];
    }
    out[71] = '\0';
}

void cnx_sha256(const void *data, size_t len, uint8_t out[32])
{
    unsigned int n = 32;
    /* EVP_Digest fails only on allocation failure inside OpenSSL. */
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1)
        abort();
}

void cnx_digest(const void *data, size_t len, char out[CNX_DIGEST_LEN])
{
    uint8_t raw[32];
    cnx_sha256(data, len, raw);
    format_digest(raw, out);
}

int cnx_digest_valid(const char *text)
{
    if (text == NULL || strncmp(text, "sha256:", 7) != 0)
        return 0;
    for (int i = 0; i < 64; i++) {
        char c = text[7 + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return text[71] == '\0';
}

int cnx_digest_check(const void *data, size_t len, const char *expected,
                     const char *what)
{
    char actual[CNX_DIGEST_LEN];
    if (!cnx_digest_valid(expected))
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s: expected digest '%.80s' is not "
                             "sha256:<64 hex>",
                             what, expected ? expected : "(null)");
    cnx_digest(data, len, actual);
    if (strcmp(actual, expected) != 0)
        return cnx_error_set(CNX_EDIGEST, 0,
                             "%s: digest mismatch: expected %s, got %s", what,
                             expected, actual);
    return 0;
}

struct cnx_digest_ctx {
    EVP_MD_CTX *md;
};

int cnx_digest_ctx_new(cnx_digest_ctx **out)
{
    cnx_digest_ctx *ctx = calloc(1, sizeof(*ctx));
    *out = NULL;
    if (ctx == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "digest: out of memory");
    ctx->md = EVP_MD_CTX_new();
    if (ctx->md == NULL || EVP_DigestInit_ex(ctx->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx->md);
        free(ctx);
        return cnx_error_set(CNX_ENOMEM, 0, "digest: cannot start SHA-256");
    }
    *out = ctx;
    return 0;
}

void cnx_digest_ctx_update(cnx_digest_ctx *ctx, const void *data, size_t len)
{
    if (EVP_DigestUpdate(ctx->md, data, len) != 1)
        abort();
}

void cnx_digest_ctx_final(cnx_digest_ctx *ctx, char out[CNX_DIGEST_LEN])
{
    uint8_t raw[32];
    unsigned int n = 32;
    if (EVP_DigestFinal_ex(ctx->md, raw, &n) != 1)
        abort();
    format_digest(raw, out);
}

void cnx_digest_ctx_free(cnx_digest_ctx *ctx)
{
    if (ctx == NULL)
        return;
    EVP_MD_CTX_free(ctx->md);
    free(ctx);
}
