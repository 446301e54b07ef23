/*
 * lineage.c - Ed25519 keys, DSSE envelopes, in-toto/SLSA provenance.
 *
 * Keys are OpenSSL EVP_PKEYs of type ED25519, immutable once made, so one key
 * may sign or verify from many threads at once; each operation has its own
 * EVP_MD_CTX. Signatures cover the DSSE PAE of (payloadType, payload), never
 * the JSON text of the envelope, so re-encoding an envelope (URL-safe base64,
 * no padding, other key order) keeps it valid. Envelopes are untrusted
 * input: size-limited (CNX_JSON_MAX, CNX_DSSE_MAX_SIGNATURES), checked field
 * by field, and the keyid is a hint only: every signature is tried against
 * every trusted key. The exact canonical envelope form (what cnx_dsse_sign
 * writes) is read by a small strict scanner, anything else by jansson with
 * every check, so both give the same fields and errors; the scanner saves
 * most of an envelope's parse, a third of a verification. Statements are
 * built as jansson trees and serialised in
 * canonical form, so equal provenance gives equal bytes.
 */
#include "cnx/lineage.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cnx/error.h"
#include "fd_int.h"
#include "cnx/json.h"
#include "json_int.h"

#define ED25519_SIG_LEN 64
#define KEY_FILE_MAX (64u << 10)     /* a PEM key is a few hundred bytes */
#define TEXT_MAX 4096                /* artifact names, worker ids */
#define RFC3339_MAX 253402300799.999 /* 9999-12-31T23:59:59.999Z */
#define RFC3339_MAX_MS INT64_C(253402300799999)

struct cnx_key {
    EVP_PKEY *pkey;
    int has_private;
    char id[CNX_DIGEST_LEN];
    /* EVP_DigestVerifyInit done once (it fetches the algorithm: a few
     * microseconds, more than copying): a verification works on a copy.
     * Never changed after key_finish; NULL: initialise each time. */
    EVP_MD_CTX *verify_ctx;
};

/* ---- OpenSSL glue ---------------------------------------------------- */

/* The reason for the most recent OpenSSL failure; empties the queue. */
static const char *ossl_reason(char *buf, size_t cap)
{
    unsigned long e = ERR_peek_last_error();
    if (e == 0)
        snprintf(buf, cap, "unknown OpenSSL error");
    else
        ERR_error_string_n(e, buf, cap);
    ERR_clear_error();
    return buf;
}

/* Refuse passphrase prompts: keys are stored unencrypted, mode 0600. */
static int no_passphrase(char *buf, int size, int rwflag, void *arg)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)arg;
    return -1;
}

static int key_finish(cnx_key *key)
{
    unsigned char *der = NULL;
    int n = i2d_PUBKEY(key->pkey, &der);
    char why[160];
    if (n <= 0)
        return cnx_error_set(CNX_ENOMEM, 0,
                             "key: cannot encode the public key: %s",
                             ossl_reason(why, sizeof(why)));
    cnx_digest(der, (size_t)n, key->id);
    OPENSSL_free(der);
    key->verify_ctx = EVP_MD_CTX_new();
    if (key->verify_ctx != NULL &&
        EVP_DigestVerifyInit(key->verify_ctx, NULL, NULL, NULL, key->pkey) !=
            1) {
        EVP_MD_CTX_free(key->verify_ctx);
        key->verify_ctx = NULL;
    }
    ERR_clear_error();
    return 0;
}

int cnx_key_generate(cnx_key **out)
{
    cnx_key *key;
    char why[160];
    int rc;

    *out = NULL;
    key = calloc(1, sizeof(*key));
    if (key == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "key: out of memory");
    key->pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (key->pkey == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0,
                           "key: Ed25519 key generation failed: %s",
                           ossl_reason(why, sizeof(why)));
        goto done;
    }
    key->has_private = 1;
    rc = key_finish(key);
done:
    if (rc != 0)
        cnx_key_free(key);
    else
        *out = key;
    return rc;
}

void cnx_key_free(cnx_key *key)
{
    if (key == NULL)
        return;
    EVP_MD_CTX_free(key->verify_ctx);
    EVP_PKEY_free(key->pkey);
    free(key);
}

void cnx_key_id(const cnx_key *key, char out[CNX_DIGEST_LEN])
{
    memcpy(out, key->id, CNX_DIGEST_LEN);
}

/* ---- key files ------------------------------------------------------- */

/*
 * Create path (never replacing anything, never following a link at its
 * name) with exactly mode, holding data, synced. On failure nothing is left.
 */
static int write_new_file(const char *path, mode_t mode, const void *data,
                          size_t len)
{
    int fd =
        open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    int err;
    if (fd < 0 && errno == EEXIST)
        return cnx_error_set(CNX_EIMMUTABLE, 0,
                             "key: %s exists; refusing to overwrite a key",
                             path);
    if (fd < 0)
        return cnx_error_set(CNX_EIO, 0, "key: cannot create %s: %s", path,
                             strerror(errno));
    /* The umask may have removed bits from mode; it never added any. */
    if (fchmod(fd, mode) != 0 || cnx__write_all(fd, data, len) != 0 ||
        fsync(fd) != 0) {
        err = errno;
        close(fd);
        unlink(path);
        return cnx_error_set(CNX_EIO, 0, "key: cannot write %s: %s", path,
                             strerror(err));
    }
    if (close(fd) != 0) {
        err = errno;
        unlink(path);
        return cnx_error_set(CNX_EIO, 0, "key: cannot write %s: %s", path,
                             strerror(err));
    }
    return 0;
}

static int key_paths(const char *dir, char *priv, char *pub, size_t cap)
{
    int a = snprintf(priv, cap, "%s/cnx.key", dir);
    int b = snprintf(pub, cap, "%s/cnx.pub", dir);
    if (a < 0 || b < 0 || (size_t)a >= cap || (size_t)b >= cap)
        return cnx_error_set(CNX_EINVAL, 0,
                             "key: directory name too long (%zu bytes)",
                             strlen(dir));
    return 0;
}

static int ensure_dir(const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return cnx_error_set(CNX_EIO, 0, "key: cannot create directory %s: %s",
                             dir, strerror(errno));
    if (stat(dir, &st) != 0)
        return cnx_error_set(CNX_EIO, 0, "key: %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cnx_error_set(CNX_EINVAL, 0, "key: %s is not a directory", dir);
    return 0;
}

/* PEM of key into a NUL-terminated heap buffer (cleared on free). */
static int key_pem(const cnx_key *key, int private_part, char **out,
                   size_t *len)
{
    BIO *bio = BIO_new(private_part ? BIO_s_secmem() : BIO_s_mem());
    char *data = NULL, why[160];
    long n;
    int ok, rc = 0;

    *out = NULL;
    if (bio == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "key: out of memory");
    if (private_part)
        ok = PEM_write_bio_PKCS8PrivateKey(bio, key->pkey, NULL, NULL, 0, NULL,
                                           NULL);
    else
        ok = PEM_write_bio_PUBKEY(bio, key->pkey);
    n = BIO_get_mem_data(bio, &data);
    if (ok != 1 || n <= 0) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "key: cannot encode PEM: %s",
                           ossl_reason(why, sizeof(why)));
        goto done;
    }
    *out = OPENSSL_secure_malloc((size_t)n + 1);
    if (*out == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "key: out of memory");
        goto done;
    }
    memcpy(*out, data, (size_t)n);
    (*out)[n] = '\0';
    *len = (size_t)n;
done:
    BIO_free(bio);
    return rc;
}

static void pem_free(char *pem, size_t len)
{
    if (pem != NULL)
        OPENSSL_secure_clear_free(pem, len + 1);
}

int cnx_key_write(const cnx_key *key, const char *dir)
{
    char priv[PATH_MAX], pub[PATH_MAX];
    char *priv_pem = NULL, *pub_pem = NULL;
    size_t priv_len = 0, pub_len = 0;
    struct stat st;
    int rc, dir_fd;

    if (!key->has_private)
        return cnx_error_set(
            CNX_EINVAL, 0,
            "key: %s is a public key; only a key pair can be written", key->id);
    rc = key_paths(dir, priv, pub, sizeof(priv));
    if (rc != 0)
        return rc;
    rc = ensure_dir(dir);
    if (rc != 0)
        return rc;
    /* Refuse before writing anything if either half exists; O_EXCL below
     * closes the race with a concurrent writer. */
    if (lstat(priv, &st) == 0 || lstat(pub, &st) == 0)
        return cnx_error_set(CNX_EIMMUTABLE, 0,
                             "key: %s already holds a key (cnx.key or "
                             "cnx.pub); refusing to overwrite it",
                             dir);
    rc = key_pem(key, 1, &priv_pem, &priv_len);
    if (rc != 0)
        goto done;
    rc = key_pem(key, 0, &pub_pem, &pub_len);
    if (rc != 0)
        goto done;
    rc = write_new_file(priv, 0600, priv_pem, priv_len);
    if (rc != 0)
        goto done;
    rc = write_new_file(pub, 0644, pub_pem, pub_len);
    if (rc != 0) {
        unlink(priv);
        goto done;
    }
    /* Best effort: the names survive a crash once the directory is synced;
     * the files themselves are complete either way. */
    dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
        (void)fsync(dir_fd);
        close(dir_fd);
    }
done:
    pem_free(priv_pem, priv_len);
    pem_free(pub_pem, pub_len);
    return rc;
}

/*
 * Read a key file (at most KEY_FILE_MAX bytes) into secure memory. With
 * private_part, refuse a file that group or others may access: the check is
 * on the opened descriptor, so it sees the file actually read.
 */
static int read_key_file(const char *path, int private_part, char **out,
                         size_t *len)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd, rc = 0;

    *out = NULL;
    *len = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return cnx_error_set(CNX_ENOTFOUND, 0, "key: %s: no such file", path);
    if (fd < 0)
        return cnx_error_set(CNX_EIO, 0, "key: cannot open %s: %s", path,
                             strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = cnx_error_set(CNX_EIO, 0, "key: cannot stat %s: %s", path,
                           strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc =
            cnx_error_set(CNX_EINVAL, 0, "key: %s is not a regular file", path);
        goto done;
    }
    if (private_part && (st.st_mode & 077) != 0) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "key: %s has mode %04o: a private key must not be "
                           "group or world accessible (chmod 600 it)",
                           path, (unsigned)(st.st_mode & 07777));
        goto done;
    }
    if (st.st_size <= 0 || (uint64_t)st.st_size > KEY_FILE_MAX) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "key: %s: %lld bytes is not a PEM key (limit %u)",
                           path, (long long)st.st_size, KEY_FILE_MAX);
        goto done;
    }
    buf = OPENSSL_secure_malloc(KEY_FILE_MAX + 1);
    if (buf == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "key: out of memory");
        goto done;
    }
    while (got < KEY_FILE_MAX) {
        ssize_t n = read(fd, buf + got, KEY_FILE_MAX - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = cnx_error_set(CNX_EIO, 0, "key: cannot read %s: %s", path,
                               strerror(errno));
            goto done;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    buf = NULL;
done:
    if (buf != NULL)
        OPENSSL_secure_clear_free(buf, KEY_FILE_MAX + 1);
    close(fd);
    return rc;
}

static int key_load(cnx_key **out, const char *path, int private_part)
{
    cnx_key *key = NULL;
    char *pem = NULL, why[160];
    size_t len = 0;
    BIO *bio = NULL;
    int rc;

    *out = NULL;
    rc = read_key_file(path, private_part, &pem, &len);
    if (rc != 0)
        return rc;
    key = calloc(1, sizeof(*key));
    bio = BIO_new_mem_buf(pem, (int)len);
    if (key == NULL || bio == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "key: out of memory");
        goto done;
    }
    if (private_part)
        key->pkey = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
    else
        key->pkey = PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL);
    if (key->pkey == NULL) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "key: %s is not an unencrypted PEM %s key: %s", path,
                           private_part ? "private" : "public",
                           ossl_reason(why, sizeof(why)));
        goto done;
    }
    if (!EVP_PKEY_is_a(key->pkey, "ED25519")) {
        const char *kind = EVP_PKEY_get0_type_name(key->pkey);
        rc = cnx_error_set(CNX_EUNSUPPORTED, 0,
                           "key: %s holds a %s key; lineage keys are Ed25519",
                           path, kind != NULL ? kind : "non-Ed25519");
        goto done;
    }
    key->has_private = private_part;
    rc = key_finish(key);
done:
    BIO_free(bio);
    if (pem != NULL)
        OPENSSL_secure_clear_free(pem, KEY_FILE_MAX + 1);
    if (rc != 0)
        cnx_key_free(key);
    else
        *out = key;
    return rc;
}

int cnx_key_load_private(cnx_key **out, const char *path)
{
    return key_load(out, path, 1);
}

int cnx_key_load_public(cnx_key **out, const char *path)
{
    return key_load(out, path, 0);
}

/* ---- base64 ---------------------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *cnx_base64_encode(const void *data, size_t len)
{
    const uint8_t *in = data;
    size_t groups = len / 3 + (len % 3 != 0);
    char *out, *p;

    if (groups > (SIZE_MAX - 1) / 4) {
        cnx_error_set(CNX_ETOOBIG, 0, "base64: %zu bytes is too long", len);
        return NULL;
    }
    out = malloc(groups * 4 + 1);
    if (out == NULL) {
        cnx_error_set(CNX_ENOMEM, 0, "base64: out of memory");
        return NULL;
    }
    p = out;
    for (size_t i = 0; i + 2 < len; i += 3) {
        uint32_t v =
            (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *p++ = b64_alphabet[v >> 18];
        *p++ = b64_alphabet[(v >> 12) & 63];
        *p++ = b64_alphabet[(v >> 6) & 63];
        *p++ = b64_alphabet[v & 63];
    }
    if (len % 3 != 0) {
        size_t i = len - len % 3;
        uint32_t v = (uint32_t)in[i] << 16;
        if (len % 3 == 2)
            v |= (uint32_t)in[i + 1] << 8;
        *p++ = b64_alphabet[v >> 18];
        *p++ = b64_alphabet[(v >> 12) & 63];
        *p++ = len % 3 == 2 ? b64_alphabet[(v >> 6) & 63] : '=';
        *p++ = '=';
    }
    *p = '\0';
    return out;
}

/* 6-bit value of each byte in the standard or the URL-safe alphabet;
 * 255 for any other byte. */
static const uint8_t b64_dec[256] = {
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 62, 255, 62, 255, 63,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 255, 255,
    255, 255, 255, 255, 255, 0, 1, 2, 3, 4, 5, 6,
    7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
    19, 20, 21, 22, 23, 24, 25, 255, 255, 255, 255, 63,
    255, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36,
    37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48,
    49, 50, 51, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
    255, 255, 255, 255,
};

int cnx_base64_decode(const char *text, size_t len, uint8_t **out,
                      size_t *out_len)
{
    const unsigned char *t = (const unsigned char *)text;
    size_t n = len, pad = 0, outn, o = 0, i = 0;
    uint32_t acc = 0, bad = 0;
    int bits = 0;
    uint8_t *buf;

    *out = NULL;
    *out_len = 0;
    while (n > 0 && pad < 2 && text[n - 1] == '=') {
        n--;
        pad++;
    }
    if (pad > 0 && len % 4 != 0)
        return cnx_error_set(
            CNX_EINVAL, 0,
            "base64: padded text of %zu characters (not a multiple of 4)", len);
    if (n % 4 == 1)
        return cnx_error_set(
            CNX_EINVAL, 0,
            "base64: %zu characters cannot be base64 (truncated?)", n);
    outn = n / 4 * 3 + (n % 4 != 0 ? n % 4 - 1 : 0);
    buf = malloc(outn + 1);
    if (buf == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "base64: out of memory");
    /* Whole groups of 4 characters (3 bytes), a table lookup each; a
     * character outside the alphabet sets bit 7 of bad. */
    for (; i + 4 <= n; i += 4) {
        uint32_t a = b64_dec[t[i]], b = b64_dec[t[i + 1]];
        uint32_t c = b64_dec[t[i + 2]], d = b64_dec[t[i + 3]];
        uint32_t v = a << 18 | b << 12 | c << 6 | d;
        bad |= a | b | c | d;
        buf[o] = (uint8_t)(v >> 16);
        buf[o + 1] = (uint8_t)(v >> 8);
        buf[o + 2] = (uint8_t)v;
        o += 3;
    }
    for (; i < n; i++) { /* the last 2 or 3 characters */
        uint32_t v = b64_dec[t[i]];
        bad |= v;
        acc = acc << 6 | (v & 63);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (bad & 0x80) { /* name the first character outside the alphabet */
        for (i = 0; b64_dec[t[i]] != 255; i++)
            ;
        free(buf);
        if (t[i] >= 0x20 && t[i] < 0x7f)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "base64: character '%c' at offset %zu is "
                                 "not in the standard or URL-safe alphabet",
                                 t[i], i);
        return cnx_error_set(CNX_EINVAL, 0,
                             "base64: byte 0x%02x at offset %zu is not in "
                             "the standard or URL-safe alphabet",
                             t[i], i);
    }
    /* A canonical encoder leaves the unused low bits zero. */
    if (acc != 0) {
        free(buf);
        return cnx_error_set(CNX_EINVAL, 0,
                             "base64: non-zero bits after the last byte (not a "
                             "canonical encoding)");
    }
    assert(o == outn);
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    return 0;
}

/* ---- DSSE ------------------------------------------------------------ */

int cnx_dsse_pae(const char *type, const void *body, size_t len, uint8_t **out,
                 size_t *out_len)
{
    char head[48], mid[48];
    size_t tlen = strlen(type), total;
    int a, b;
    uint8_t *buf;

    *out = NULL;
    *out_len = 0;
    a = snprintf(head, sizeof(head), "DSSEv1 %zu ", tlen);
    b = snprintf(mid, sizeof(mid), " %zu ", len);
    assert(a > 0 && (size_t)a < sizeof(head) && b > 0 &&
           (size_t)b < sizeof(mid));
    if (tlen > SIZE_MAX / 4 || len > SIZE_MAX / 4)
        return cnx_error_set(CNX_ETOOBIG, 0, "dsse: payload too large");
    total = (size_t)a + tlen + (size_t)b + len;
    buf = malloc(total + 1);
    if (buf == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "dsse: out of memory");
    memcpy(buf, head, (size_t)a);
    memcpy(buf + a, type, tlen);
    memcpy(buf + a + tlen, mid, (size_t)b);
    if (len > 0)
        memcpy(buf + a + tlen + b, body, len);
    buf[total] = '\0';
    *out = buf;
    *out_len = total;
    return 0;
}

/* A payloadType we sign: 1..256 printable ASCII characters. */
static int check_type(const char *type)
{
    size_t n = strlen(type);
    if (n == 0 || n > 256)
        return cnx_error_set(CNX_EINVAL, 0,
                             "dsse: payloadType must be 1 to 256 characters");
    for (size_t i = 0; i < n; i++)
        if (type[i] < 0x21 || type[i] > 0x7e)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "dsse: payloadType: character at offset %zu "
                                 "is not printable ASCII",
                                 i);
    return 0;
}

/* key's Ed25519 signature of msg (64 bytes) into sig. */
static int ed25519_sign(const cnx_key *key, const uint8_t *msg, size_t len,
                        uint8_t sig[ED25519_SIG_LEN], size_t *sig_len)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    char why[160];
    int rc = 0;
    *sig_len = ED25519_SIG_LEN;
    if (md == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "dsse: out of memory");
    if (EVP_DigestSignInit(md, NULL, NULL, NULL, key->pkey) != 1 ||
        EVP_DigestSign(md, sig, sig_len, msg, len) != 1 ||
        *sig_len != ED25519_SIG_LEN)
        rc = cnx_error_set(CNX_ENOMEM, 0, "dsse: Ed25519 signing failed: %s",
                           ossl_reason(why, sizeof(why)));
    EVP_MD_CTX_free(md);
    return rc;
}

int cnx_dsse_sign(const cnx_key *key, const char *type, const void *body,
                  size_t len, char **envelope)
{
    uint8_t *pae = NULL, sig[ED25519_SIG_LEN];
    size_t pae_len = 0, sig_len = sizeof(sig);
    char *payload_b64 = NULL, *sig_b64 = NULL;
    json_t *env = NULL;
    int rc;

    *envelope = NULL;
    if (!key->has_private)
        return cnx_error_set(
            CNX_EINVAL, 0,
            "dsse: key %s is a public key; signing needs the private key",
            key->id);
    rc = check_type(type);
    if (rc != 0)
        return rc;
    /* base64 grows 4/3: a larger body could not be verified by us. */
    if (len > CNX_JSON_MAX / 4 * 3)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "dsse: payload of %zu bytes would make an "
                             "envelope over the %u byte limit",
                             len, CNX_JSON_MAX);
    rc = cnx_dsse_pae(type, body, len, &pae, &pae_len);
    if (rc != 0)
        return rc;
    rc = ed25519_sign(key, pae, pae_len, sig, &sig_len);
    if (rc != 0)
        goto done;
    payload_b64 = cnx_base64_encode(body, len);
    sig_b64 = cnx_base64_encode(sig, sig_len);
    if (payload_b64 == NULL || sig_b64 == NULL) {
        rc = cnx_error_last()->code;
        goto done;
    }
    env = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "payload", payload_b64,
                    "payloadType", type, "signatures", "keyid", key->id, "sig",
                    sig_b64);
    if (env != NULL)
        *envelope = cnx__json_canonical(env);
    if (*envelope == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "dsse: out of memory");
    } else if (strlen(*envelope) > CNX_JSON_MAX) {
        rc = cnx_error_set(CNX_ETOOBIG, 0,
                           "dsse: envelope of %zu bytes is over the %u byte "
                           "limit verifiers accept",
                           strlen(*envelope), CNX_JSON_MAX);
        free(*envelope);
        *envelope = NULL;
    }
done:
    json_decref(env);
    free(payload_b64);
    free(sig_b64);
    free(pae);
    return rc;
}

/* 1: sig is key's Ed25519 signature of msg; 0: it is not; <0: error. */
static int ed25519_verify(const cnx_key *key, const uint8_t *msg, size_t len,
                          const uint8_t *sig, size_t sig_len)
{
    EVP_MD_CTX *md;
    int ok;
    if (sig_len != ED25519_SIG_LEN)
        return 0;
    md = EVP_MD_CTX_new();
    if (md == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "dsse: out of memory");
    /* Copying reads the key's context only (and takes references), so
     * threads may share the key. */
    ok = ((key->verify_ctx != NULL &&
           EVP_MD_CTX_copy_ex(md, key->verify_ctx) == 1) ||
          EVP_DigestVerifyInit(md, NULL, NULL, NULL, key->pkey) == 1) &&
         EVP_DigestVerify(md, sig, sig_len, msg, len) == 1;
    EVP_MD_CTX_free(md);
    ERR_clear_error();
    return ok;
}

/* A string member of obj, NUL-free; NULL (and *rc set) if not there. */
static const char *get_string(const json_t *obj, const char *key,
                              const char *path, size_t *len, int *rc)
{
    const json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        *rc = cnx_error_set(CNX_ESCHEMA, 0, "envelope: %s: missing", path);
        return NULL;
    }
    if (!json_is_string(v)) {
        *rc = cnx_error_set(CNX_ESCHEMA, 0, "envelope: %s: must be a string",
                            path);
        return NULL;
    }
    *len = json_string_length(v);
    return json_string_value(v);
}

/* Untrusted text for a one-line message: non-printable bytes become '?'. */
static void printable(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src != NULL && src[i] != '\0' && i + 1 < cap; i++)
        dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
    dst[i] = '\0';
}

static int decode_field(const char *text, size_t len, const char *path,
                        uint8_t **out, size_t *out_len)
{
    char why[sizeof(cnx_error_last()->message)];
    if (cnx_base64_decode(text, len, out, out_len) == 0)
        return 0;
    if (cnx_error_last()->code == CNX_ENOMEM)
        return CNX_ENOMEM;
    snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
    return cnx_error_set(CNX_ESCHEMA, 0, "envelope: %s: not base64 (%s)", path,
                         why);
}

/*
 * The envelope's strings, found either by the fast reader below (the exact
 * canonical form workers write) or by jansson (anything else). The
 * pointers are into the envelope text or the jansson tree, not NUL-ended.
 */
typedef struct dsse_fields {
    const char *payload, *type;
    size_t payload_len, type_len;
    size_t nsigs;
    const char *sig[CNX_DSSE_MAX_SIGNATURES];
    size_t sig_len[CNX_DSSE_MAX_SIGNATURES];
    const char *hint[CNX_DSSE_MAX_SIGNATURES]; /* NUL-ended copies or NULL */
    char hint_buf[CNX_DSSE_MAX_SIGNATURES][CNX_DIGEST_LEN];
} dsse_fields;

/* Match `lit` at *p; advance. */
static int lit(const char **p, const char *end, const char *text)
{
    size_t n = strlen(text);
    if ((size_t)(end - *p) < n || memcmp(*p, text, n) != 0)
        return 0;
    *p += n;
    return 1;
}

/* The string at *p up to the next '"': printable ASCII without escapes,
 * or (b64) anything, left to fast_decode; advance past the quote. */
static int plain_string(const char **p, const char *end, int b64,
                        const char **s, size_t *n)
{
    const char *q = *p;
    if (b64) /* checked by decoding it (fast_decode) */
        q = memchr(q, '"', (size_t)(end - q));
    while (q != NULL && q < end && *q != '"') {
        unsigned char c = (unsigned char)*q;
        if (c < 0x20 || c >= 0x7f || c == '\\')
            return 0;
        q++;
    }
    if (q == NULL || q >= end)
        return 0;
    *s = *p;
    *n = (size_t)(q - *p);
    *p = q + 1;
    return 1;
}

/*
 * The canonical envelope, byte for byte:
 * {"payload":"B64","payloadType":"T","signatures":[{"keyid":"K","sig":"B64"}
 * (,{...})*]} with base64 strings, printable T and K without escapes, no
 * whitespace. Such text is valid JSON with exactly the members jansson
 * would find, so reading it directly gives the same fields, only faster
 * (the envelope's long base64 strings dominate a jansson parse). Anything
 * else returns 0 and goes to jansson. The base64 strings are only
 * delimited here (up to the next '"'): fast_decode decoding every one of
 * them is what shows they hold nothing else (no escape, no quote).
 */
static int fast_fields(const char *text, size_t len, dsse_fields *f)
{
    const char *p = text, *end = text + len;
    if (!lit(&p, end, "{\"payload\":\"") ||
        !plain_string(&p, end, 1, &f->payload, &f->payload_len) ||
        !lit(&p, end, ",\"payloadType\":\"") ||
        !plain_string(&p, end, 0, &f->type, &f->type_len) ||
        !lit(&p, end, ",\"signatures\":["))
        return 0;
    f->nsigs = 0;
    for (;;) {
        const char *kid;
        size_t kid_len;
        if (f->nsigs == CNX_DSSE_MAX_SIGNATURES ||
            !lit(&p, end, "{\"keyid\":\"") ||
            !plain_string(&p, end, 0, &kid, &kid_len) ||
            kid_len >= CNX_DIGEST_LEN || !lit(&p, end, ",\"sig\":\"") ||
            !plain_string(&p, end, 1, &f->sig[f->nsigs],
                          &f->sig_len[f->nsigs]) ||
            !lit(&p, end, "}"))
            return 0;
        memcpy(f->hint_buf[f->nsigs], kid, kid_len);
        f->hint_buf[f->nsigs][kid_len] = '\0';
        f->hint[f->nsigs] = f->hint_buf[f->nsigs];
        f->nsigs++;
        if (lit(&p, end, ","))
            continue;
        break;
    }
    return lit(&p, end, "]}") && p == end;
}

/* Decode the fields fast_fields found: 1 if the payload and every
 * signature (non-empty) are canonical base64 (the strings were then
 * exactly what jansson would have read), else 0 with nothing kept: the
 * envelope is read again through jansson, which says what is wrong. */
static int fast_decode(const dsse_fields *f, uint8_t **sig_raw,
                       size_t *sig_len, uint8_t **body, size_t *body_len)
{
    int ok = cnx_base64_decode(f->payload, f->payload_len, body,
                               body_len) == 0;
    for (size_t i = 0; ok && i < f->nsigs; i++)
        ok = f->sig_len[i] > 0 &&
             cnx_base64_decode(f->sig[i], f->sig_len[i], &sig_raw[i],
                               &sig_len[i]) == 0;
    if (!ok) {
        for (size_t i = 0; i < f->nsigs; i++) {
            free(sig_raw[i]);
            sig_raw[i] = NULL;
        }
        free(*body);
        *body = NULL;
    }
    return ok;
}

/* The fields through jansson, every check with its message; *env keeps
 * the tree the pointers point into. */
static int json_fields(const char *envelope, size_t len, json_t **envp,
                       dsse_fields *f)
{
    static const char *const env_keys[] = {"payload", "payloadType",
                                           "signatures", NULL};
    static const char *const sig_keys[] = {"keyid", "sig", NULL};
    json_t *env;
    const json_t *sigs;
    char path[48];
    int rc = cnx__json_parse(envp, envelope, len, CNX_ESCHEMA, "envelope");
    if (rc != 0)
        return rc;
    env = *envp;
    if (!json_is_object(env))
        return cnx_error_set(CNX_ESCHEMA, 0, "envelope: must be a JSON object");
    rc = cnx__json_only_keys(env, env_keys, CNX_ESCHEMA, "envelope");
    if (rc != 0)
        return rc;
    f->payload = get_string(env, "payload", "payload", &f->payload_len, &rc);
    if (f->payload == NULL)
        return rc;
    f->type = get_string(env, "payloadType", "payloadType", &f->type_len, &rc);
    if (f->type == NULL)
        return rc;
    sigs = json_object_get(env, "signatures");
    if (sigs == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0, "envelope: signatures: missing");
    if (!json_is_array(sigs))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "envelope: signatures: must be an array");
    f->nsigs = json_array_size(sigs);
    if (f->nsigs < 1 || f->nsigs > CNX_DSSE_MAX_SIGNATURES)
        return cnx_error_set(
            CNX_ESCHEMA, 0,
            "envelope: signatures: %zu signatures; 1 to %d allowed", f->nsigs,
            CNX_DSSE_MAX_SIGNATURES);
    for (size_t i = 0; i < f->nsigs; i++) {
        const json_t *s = json_array_get(sigs, i);
        const json_t *kid;
        snprintf(path, sizeof(path), "signatures[%zu]", i);
        if (!json_is_object(s))
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "envelope: %s: must be an object", path);
        rc = cnx__json_only_keys(s, sig_keys, CNX_ESCHEMA, path);
        if (rc != 0) {
            cnx_error_wrap("envelope");
            return rc;
        }
        kid = json_object_get(s, "keyid");
        if (kid != NULL && !json_is_string(kid))
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "envelope: %s.keyid: must be a string", path);
        f->hint[i] = kid != NULL ? json_string_value(kid) : NULL;
        snprintf(path, sizeof(path), "signatures[%zu].sig", i);
        f->sig[i] = get_string(s, "sig", path, &f->sig_len[i], &rc);
        if (f->sig[i] == NULL)
            return rc; /* an empty one is refused while decoding, in order */
    }
    return 0;
}

int cnx_dsse_sign_detached(const cnx_key *key, const char *type,
                           const void *body, size_t len,
                           char sig[CNX_DSSE_SIG_MAX])
{
    uint8_t *pae = NULL, raw[ED25519_SIG_LEN];
    size_t pae_len = 0, raw_len = 0;
    char *b64;
    int rc;

    sig[0] = '\0';
    if (!key->has_private)
        return cnx_error_set(
            CNX_EINVAL, 0,
            "dsse: key %s is a public key; signing needs the private key",
            key->id);
    rc = check_type(type);
    if (rc == 0)
        rc = cnx_dsse_pae(type, body, len, &pae, &pae_len);
    if (rc == 0)
        rc = ed25519_sign(key, pae, pae_len, raw, &raw_len);
    free(pae);
    if (rc != 0)
        return rc;
    b64 = cnx_base64_encode(raw, raw_len);
    if (b64 == NULL)
        return cnx_error_last()->code;
    assert(strlen(b64) < CNX_DSSE_SIG_MAX);
    snprintf(sig, CNX_DSSE_SIG_MAX, "%s", b64);
    free(b64);
    return 0;
}

int cnx_dsse_verify_detached(const char *type, const void *body, size_t len,
                             const char *sig, cnx_key *const *trusted,
                             size_t ntrusted, int *signer)
{
    uint8_t *pae = NULL, *raw = NULL;
    size_t pae_len = 0, raw_len = 0;
    int rc, ok = 0;

    if (signer != NULL)
        *signer = -1;
    if (ntrusted == 0)
        return cnx_error_set(CNX_EINVAL, 0, "dsse: no trusted keys");
    if (strlen(sig) >= CNX_DSSE_SIG_MAX ||
        cnx_base64_decode(sig, strlen(sig), &raw, &raw_len) != 0) {
        free(raw);
        if (cnx_error_last()->code == CNX_ENOMEM)
            return CNX_ENOMEM;
        return cnx_error_set(CNX_ESCHEMA, 0, "signature: not base64");
    }
    rc = cnx_dsse_pae(type, body, len, &pae, &pae_len);
    for (size_t i = 0; rc == 0 && i < ntrusted && !ok; i++) {
        int v = ed25519_verify(trusted[i], pae, pae_len, raw, raw_len);
        if (v < 0)
            rc = v;
        else if (v == 1) {
            ok = 1;
            if (signer != NULL)
                *signer = (int)i;
        }
    }
    free(pae);
    free(raw);
    if (rc == 0 && !ok)
        rc = cnx_error_set(CNX_EDIGEST, 0, "signature: no trusted key "
                           "verifies it");
    return rc;
}

int cnx_dsse_verify(const char *envelope, size_t len, cnx_key *const *trusted,
                    size_t ntrusted, uint8_t **payload, size_t *payload_len,
                    int *signer)
{
    return cnx_dsse_verify_type(envelope, len, trusted, ntrusted, payload,
                                payload_len, signer, NULL);
}

int cnx_dsse_verify_type(const char *envelope, size_t len,
                         cnx_key *const *trusted, size_t ntrusted,
                         uint8_t **payload, size_t *payload_len, int *signer,
                         char **type_out)
{
    json_t *env = NULL;
    dsse_fields *f = NULL;
    char *type = NULL;
    size_t body_len = 0, pae_len = 0;
    uint8_t *body = NULL, *pae = NULL;
    uint8_t *sig_raw[CNX_DSSE_MAX_SIGNATURES] = {NULL};
    size_t sig_len[CNX_DSSE_MAX_SIGNATURES] = {0};
    char path[48];
    int rc = 0, found = -1, named = -1;

    if (payload != NULL) {
        *payload = NULL;
        *payload_len = 0;
    }
    if (signer != NULL)
        *signer = -1;
    if (type_out != NULL)
        *type_out = NULL;
    if (ntrusted == 0)
        return cnx_error_set(CNX_EINVAL, 0,
                             "envelope: no trusted keys to verify it with");
    if (len > CNX_JSON_MAX)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "envelope: %zu bytes, over the %u byte limit",
                             len, CNX_JSON_MAX);
    f = malloc(sizeof(*f));
    if (f == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "dsse: out of memory");
    if (!fast_fields(envelope, len, f) ||
        !fast_decode(f, sig_raw, sig_len, &body, &body_len)) {
        rc = json_fields(envelope, len, &env, f);
        if (rc != 0)
            goto done;
        for (size_t i = 0; i < f->nsigs; i++) {
            snprintf(path, sizeof(path), "signatures[%zu].sig", i);
            if (f->sig_len[i] == 0) {
                rc = cnx_error_set(CNX_ESCHEMA, 0, "envelope: %s: empty",
                                   path);
                goto done;
            }
            rc = decode_field(f->sig[i], f->sig_len[i], path, &sig_raw[i],
                              &sig_len[i]);
            if (rc != 0)
                goto done;
        }
        rc = decode_field(f->payload, f->payload_len, "payload", &body,
                          &body_len);
        if (rc != 0)
            goto done;
    }
    /* The PAE takes the type's byte length; json strings hold no NUL. */
    type = malloc(f->type_len + 1);
    if (type == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "dsse: out of memory");
        goto done;
    }
    memcpy(type, f->type, f->type_len);
    type[f->type_len] = '\0';
    rc = cnx_dsse_pae(type, body, body_len, &pae, &pae_len);
    if (rc != 0)
        goto done;
    for (size_t i = 0; i < f->nsigs && found < 0; i++) {
        for (size_t k = 0; k < ntrusted; k++) {
            int ok;
            assert(trusted[k] != NULL);
            if (named < 0 && f->hint[i] != NULL &&
                strcmp(f->hint[i], trusted[k]->id) == 0)
                named = (int)i;
            ok = ed25519_verify(trusted[k], pae, pae_len, sig_raw[i],
                                sig_len[i]);
            if (ok < 0) {
                rc = ok;
                goto done;
            }
            if (ok) {
                found = (int)k;
                break;
            }
        }
    }
    if (found < 0 && named >= 0) {
        rc = cnx_error_set(
            CNX_EDIGEST, 0,
            "envelope: signatures[%d] names trusted key %s but does not "
            "verify: the payload, payloadType or signature was altered",
            named, f->hint[named]);
        goto done;
    }
    if (found < 0) {
        char kid[81];
        printable(kid, sizeof(kid), f->hint[0]);
        rc = cnx_error_set(CNX_EDIGEST, 0,
                           "envelope: none of its %zu signature(s) verifies "
                           "with any of the %zu trusted key(s): signed by an "
                           "untrusted key (keyid '%s'), or altered",
                           f->nsigs, ntrusted, kid);
        goto done;
    }
    if (signer != NULL)
        *signer = found;
    if (payload != NULL) {
        *payload = body;
        *payload_len = body_len;
        body = NULL;
    }
    if (type_out != NULL) {
        *type_out = type;
        type = NULL;
    }
done:
    for (size_t i = 0; i < CNX_DSSE_MAX_SIGNATURES; i++)
        free(sig_raw[i]);
    free(type);
    free(body);
    free(pae);
    free(f);
    json_decref(env);
    return rc;
}

/* ---- RFC 3339 -------------------------------------------------------- */

static char *put_digits(char *p, int v, int width)
{
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + width;
}

void cnx_rfc3339_format(double unix_seconds, char out[32])
{
    double t = unix_seconds;
    int64_t ms, secs;
    time_t tt;
    struct tm tm;
    char *p = out;

    /* Clamp to what RFC 3339 can write (years 1970..9999 here). */
    if (!(t >= 0.0))
        t = 0.0;
    if (t > RFC3339_MAX)
        t = RFC3339_MAX;
    /* Nearest millisecond, so 0.1235 s written by a clock prints .124
     * rather than falling to .123 through binary rounding. */
    ms = (int64_t)floor(t * 1000.0 + 0.5);
    if (ms > RFC3339_MAX_MS)
        ms = RFC3339_MAX_MS;
    secs = ms / 1000;
    tt = (time_t)secs;
    if (gmtime_r(&tt, &tm) == NULL)
        memset(&tm, 0, sizeof(tm)); /* unreachable for the clamped range */
    p = put_digits(p, tm.tm_year + 1900, 4);
    *p++ = '-';
    p = put_digits(p, tm.tm_mon + 1, 2);
    *p++ = '-';
    p = put_digits(p, tm.tm_mday, 2);
    *p++ = 'T';
    p = put_digits(p, tm.tm_hour, 2);
    *p++ = ':';
    p = put_digits(p, tm.tm_min, 2);
    *p++ = ':';
    p = put_digits(p, tm.tm_sec, 2);
    *p++ = '.';
    p = put_digits(p, (int)(ms % 1000), 3);
    *p++ = 'Z';
    *p = '\0';
}

/* ---- provenance ------------------------------------------------------ */

static int bad_prov(const char *path, const char *why)
{
    return cnx_error_set(CNX_EINVAL, 0, "provenance: %s: %s", path, why);
}

/* Length of the UTF-8 sequence at s (max bytes available), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t max)
{
    uint32_t cp;
    size_t n;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n = 2;
        cp = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n = 3;
        cp = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n > max)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* Text for the statement: 1..max bytes of UTF-8, no control characters. */
static int check_text(const char *s, const char *path, size_t max)
{
    size_t len;
    if (s == NULL)
        return bad_prov(path, "missing");
    len = strlen(s);
    if (len == 0 || len > max)
        return cnx_error_set(
            CNX_EINVAL, 0, "provenance: %s: must be 1 to %zu bytes", path, max);
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq((const unsigned char *)s + i, len - i);
        if (n == 0)
            return bad_prov(path, "not valid UTF-8");
        if (n == 1 && ((unsigned char)s[i] < 0x20 || s[i] == 0x7f))
            return bad_prov(path, "control character");
        i += n;
    }
    return 0;
}

static int check_artifacts(const cnx_artifact *list, size_t n, const char *what)
{
    char path[64];
    if (n > 0 && list == NULL)
        return bad_prov(what, "NULL list with a non-zero count");
    for (size_t i = 0; i < n; i++) {
        int rc;
        snprintf(path, sizeof(path), "%s[%zu].name", what, i);
        rc = check_text(list[i].name, path, TEXT_MAX);
        if (rc != 0)
            return rc;
        if (!cnx_digest_valid(list[i].digest)) {
            snprintf(path, sizeof(path), "%s[%zu].digest", what, i);
            return bad_prov(path, "must be sha256:<64 lowercase hex>");
        }
    }
    return 0;
}

/* A stage name as tasks have it: [a-z][a-z0-9-]{0,31}. */
static int check_stage(const char *stage)
{
    size_t len = stage != NULL ? strlen(stage) : 0;
    if (len == 0 || len > 32 || stage[0] < 'a' || stage[0] > 'z')
        return bad_prov(
            "stage",
            "must be 1 to 32 characters a-z 0-9 -, starting with a letter");
    for (size_t i = 1; i < len; i++)
        if (!((stage[i] >= 'a' && stage[i] <= 'z') ||
              (stage[i] >= '0' && stage[i] <= '9') || stage[i] == '-'))
            return bad_prov(
                "stage",
                "must be 1 to 32 characters a-z 0-9 -, starting with a letter");
    return 0;
}

static int check_time(double t, const char *path)
{
    if (!isfinite(t) || t < 0.0 || t > RFC3339_MAX)
        return bad_prov(path, "must be Unix seconds between 1970 and 9999");
    return 0;
}

static int check_commit(const char *commit)
{
    if (commit == NULL || commit[0] == '\0')
        return 0;
    for (int i = 0; i < 40; i++)
        if (!((commit[i] >= '0' && commit[i] <= '9') ||
              (commit[i] >= 'a' && commit[i] <= 'f')))
            return bad_prov("git_commit",
                            "must be 40 lowercase hex digits or \"\"");
    if (commit[40] != '\0')
        return bad_prov("git_commit",
                        "must be 40 lowercase hex digits or \"\"");
    return 0;
}

/* The task must agree with the stage and kernel version it is run as. */
static int check_task(const json_t *task, const cnx_provenance *prov)
{
    const json_t *v;
    if (!json_is_object(task))
        return bad_prov("task_json", "must be a JSON object");
    v = json_object_get(task, "stage");
    if (v != NULL &&
        (!json_is_string(v) || strcmp(json_string_value(v), prov->stage) != 0))
        return cnx_error_set(
            CNX_EINVAL, 0, "provenance: stage '%.64s' is not the task's stage",
            prov->stage);
    v = json_object_get(task, "kernel_version");
    if (v != NULL &&
        (!json_is_integer(v) || json_integer_value(v) != prov->kernel_version))
        return cnx_error_set(CNX_EINVAL, 0,
                             "provenance: kernel_version %" PRId64
                             " is not the task's",
                             prov->kernel_version);
    return 0;
}

static int check_provenance(const cnx_provenance *prov)
{
    int rc;
    if (prov->task_json == NULL)
        return bad_prov("task_json", "missing");
    if (!cnx_digest_valid(prov->task_key))
        return bad_prov("task_key", "must be sha256:<64 lowercase hex>");
    rc = check_stage(prov->stage);
    if (rc != 0)
        return rc;
    if (prov->kernel_version < 1)
        return bad_prov("kernel_version", "must be >= 1");
    if (prov->noutputs < 1)
        return bad_prov("outputs", "a statement needs at least one subject");
    rc = check_artifacts(prov->outputs, prov->noutputs, "outputs");
    if (rc != 0)
        return rc;
    rc = check_artifacts(prov->inputs, prov->ninputs, "inputs");
    if (rc != 0)
        return rc;
    rc = check_commit(prov->git_commit);
    if (rc != 0)
        return rc;
    if (prov->container_digest != NULL && prov->container_digest[0] != '\0' &&
        !cnx_digest_valid(prov->container_digest))
        return bad_prov("container_digest",
                        "must be sha256:<64 lowercase hex>, \"\" or NULL");
    rc = check_text(prov->worker, "worker", TEXT_MAX);
    if (rc != 0)
        return rc;
    if (prov->attempt < 1)
        return bad_prov("attempt", "must be >= 1");
    rc = check_time(prov->started, "started");
    if (rc != 0)
        return rc;
    rc = check_time(prov->finished, "finished");
    if (rc != 0)
        return rc;
    if (prov->finished < prov->started)
        return bad_prov("finished", "is before started");
    return 0;
}

/*
 * Builders: each takes ownership of the values it is given and records an
 * allocation failure in *oom instead of returning it, so the tree is built
 * straight through and checked once.
 */
static void put(json_t *obj, const char *key, json_t *value, int *oom)
{
    if (json_object_set_new(obj, key, value) != 0)
        *oom = 1;
}

static void push(json_t *arr, json_t *value, int *oom)
{
    if (json_array_append_new(arr, value) != 0)
        *oom = 1;
}

/* {"name": name, "digest": {alg: value}} */
static json_t *descriptor(const char *name, const char *alg, const char *value)
{
    return json_pack("{s:s, s:{s:s}}", "name", name, "digest", alg, value);
}

static json_t *artifact_list(const cnx_artifact *list, size_t n, int *oom)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        push(arr, descriptor(list[i].name, "sha256", list[i].digest + 7), oom);
    if (arr == NULL)
        *oom = 1;
    return arr;
}

static json_t *dependencies(const cnx_provenance *prov, int *oom)
{
    json_t *deps = artifact_list(prov->inputs, prov->ninputs, oom);
    json_t *git = json_pack("{s:s, s:{s:b}}", "name", "git+cnx", "annotations",
                            "dirty", prov->git_dirty != 0);
    /* An unknown commit is recorded as no digest, not as a made-up one. */
    if (git != NULL && prov->git_commit != NULL && prov->git_commit[0])
        put(git, "digest", json_pack("{s:s}", "gitCommit", prov->git_commit),
            oom);
    push(deps, git, oom);
    if (prov->container_digest != NULL && prov->container_digest[0])
        push(deps,
             descriptor("container", "sha256", prov->container_digest + 7),
             oom);
    return deps;
}

static json_t *run_details(const cnx_provenance *prov, int *oom)
{
    char started[32], finished[32], invocation[CNX_DIGEST_LEN + 16];
    json_t *run;

    cnx_rfc3339_format(prov->started, started);
    cnx_rfc3339_format(prov->finished, finished);
    snprintf(invocation, sizeof(invocation), "%s/%d", prov->task_key,
             prov->attempt);
    run = json_pack("{s:{s:s+}, s:{s:s, s:s, s:s}, s:[]}", "builder", "id",
                    "cnx-worker:", prov->worker, "metadata", "invocationId",
                    invocation, "startedOn", started, "finishedOn", finished,
                    "byproducts");
    if (run == NULL)
        *oom = 1;
    return run;
}

int cnx_provenance_statement(const cnx_provenance *prov, char **out)
{
    json_t *task = NULL, *st = NULL, *pred, *build, *ext;
    int rc, oom = 0;
    size_t len;

    *out = NULL;
    rc = check_provenance(prov);
    if (rc != 0)
        return rc;
    rc = cnx__json_parse(&task, prov->task_json, strlen(prov->task_json),
                         CNX_EINVAL, "provenance: task_json");
    if (rc != 0)
        return rc;
    rc = check_task(task, prov);
    if (rc != 0)
        goto done;

    ext = json_pack("{s:s, s:s, s:I}", "taskKey", prov->task_key, "stage",
                    prov->stage, "kernelVersion",
                    (json_int_t)prov->kernel_version);
    put(ext, "task", json_incref(task), &oom);
    build = json_pack("{s:s}", "buildType", CNX_BUILD_TYPE);
    put(build, "externalParameters", ext, &oom);
    put(build, "resolvedDependencies", dependencies(prov, &oom), &oom);
    pred = json_object();
    put(pred, "buildDefinition", build, &oom);
    put(pred, "runDetails", run_details(prov, &oom), &oom);
    st = json_pack("{s:s, s:s}", "_type", CNX_STATEMENT_TYPE, "predicateType",
                   CNX_SLSA_PREDICATE);
    put(st, "subject", artifact_list(prov->outputs, prov->noutputs, &oom),
        &oom);
    put(st, "predicate", pred, &oom);
    if (st == NULL || oom) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "provenance: out of memory");
        goto done;
    }
    *out = cnx__json_canonical(st);
    if (*out == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "provenance: out of memory");
        goto done;
    }
    len = strlen(*out);
    if (len > CNX_JSON_MAX / 4 * 3) {
        free(*out);
        *out = NULL;
        rc = cnx_error_set(CNX_ETOOBIG, 0,
                           "provenance: statement of %zu bytes would not fit a "
                           "%u byte envelope",
                           len, CNX_JSON_MAX);
    }
done:
    json_decref(st);
    json_decref(task);
    return rc;
}
