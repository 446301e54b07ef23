/*
 * store_s3.c - the s3:// and gs:// backends of the store (store_int.h):
 * the S3 REST API, and the GCS XML API that speaks the same dialect.
 *
 * Every object is one PUT, so a reader sees the whole object or none. A put
 * is write-once through a precondition the service checks atomically
 * (If-None-Match: * on S3, x-goog-if-generation-match: 0 on GCS); a refused
 * put compares digests (identical: success). Stores that ignore the
 * precondition (s3rver, and S3 look-alikes of unknown vintage) are guarded
 * by a HEAD before the PUT, on by default for every endpoint that is not
 * AWS or GCS (CNX_S3_CHECK_BEFORE_PUT, docs/storage.md): the best such a
 * store allows, racy between two writers of different bytes. A swap reads
 * the object, compares its digest and PUTs with If-Match (GCS: the
 * generation). Listing is ListObjectsV2, parsed with expat.
 * Invariant: names arrive checked (store.c); keys are the store's prefix,
 * '/', the name, percent-encoded per segment.
 * Load: one to three HTTP requests per operation (docs/storage.md).
 * Threading: the impl is read-only after open; requests go through http.c.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <expat.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/url.h"
#include "http_int.h"
#include "sigv4_int.h"
#include "store_int.h"

/* SHA-256 of the empty body, the payload hash of GET and HEAD. */
#define EMPTY_SHA256                                                           \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Cap on one page of a listing (1000 keys of 1 KiB each, with XML). */
#define LIST_PAGE_BODY_MAX ((size_t)16 << 20)
/* Cap on one key or continuation token inside a listing. */
#define LIST_TEXT_MAX 8192
/* Most extra headers one operation sends. */
#define OP_HEADERS_MAX 8

enum { AUTH_NONE, AUTH_SIGV4, AUTH_BEARER };

typedef struct s3_impl {
    int gs;               /* gs:// (GCS XML API) rather than s3:// */
    int auth;             /* AUTH_* */
    int check_before_put; /* HEAD before each put (see the top) */
    int list_page;        /* max-keys of a listing page, 1..1000 */
    char origin[600];     /* "https://host[:port]", no trailing '/' */
    char host[560];       /* the Host header: host[:port] */
    char path_base[300];  /* "/bucket" (path-style) or "" (virtual) */
    char region[64];      /* signing region ("auto" for GCS) */
    char access_key[128];
    char secret_key[128];
    char session_token[4096];
    char bearer[4096];     /* GOOGLE_OAUTH_ACCESS_TOKEN */
    char cred_source[160]; /* where the credentials came from */
} s3_impl;

static const s3_impl *impl_of(const cnx_store *store)
{
    return store->impl;
}

/* ---- requests ----------------------------------------------------------- */

/* One request on the store's bucket. */
typedef struct s3_op {
    const char *method;
    const char *name;  /* object name in the store; NULL: the bucket */
    const char *query; /* canonical query ("" for none) */
    cnx__sigv4_header hdr[OP_HEADERS_MAX]; /* extra headers (signed) */
    size_t nhdr;
    const void *body;
    size_t body_len;
    const char *payload_hex; /* SHA-256 of body, hex; NULL: empty body */
    size_t max_body;
    int range;
    uint64_t first, last;
    unsigned flags;
} s3_op;

static void op_header(s3_op *op, const char *name, const char *value)
{
    assert(op->nhdr < OP_HEADERS_MAX);
    op->hdr[op->nhdr].name = name;
    op->hdr[op->nhdr].value = value;
    op->nhdr++;
}

/* "s3://bucket/prefix/name", the object as messages name it (heap). */
static char *what_of(const cnx_store *store, const char *name)
{
    size_t n = strlen(store->url.canonical) + (name ? strlen(name) : 0) + 2;
    char *w = malloc(n);
    if (w != NULL)
        snprintf(w, n, "%s%s%s", store->url.canonical, name ? "/" : "",
                 name ? name : "");
    return w;
}

/* The key of name: the store's prefix, '/', name (heap, not encoded). */
static char *key_of(const cnx_store *store, const char *name)
{
    const char *prefix = store->url.path;
    size_t n = strlen(prefix) + strlen(name) + 2;
    char *k = malloc(n);
    if (k != NULL)
        snprintf(k, n, "%s%s%s", prefix, prefix[0] ? "/" : "", name);
    return k;
}

static char *header_line(const char *name, const char *value)
{
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (line != NULL)
        snprintf(line, n, "%s: %s", name, value);
    return line;
}

/*
 * Build, sign and send op. On 0, resp holds an answer for the caller to
 * judge (release with cnx__http_resp_dispose) and *what_out the object as
 * messages name it (free() it); on failure, neither holds anything.
 */
static int s3_send(const cnx_store *store, const s3_op *op, char **what_out,
                   cnx__http_resp *resp)
{
    const s3_impl *s = impl_of(store);
    cnx__sigv4_header sh[OP_HEADERS_MAX + 4];
    char *lines[CNX_HTTP_HEADERS_MAX];
    char *key = NULL, *enc = NULL, *path = NULL, *url = NULL, *what = NULL;
    char amz_date[17], auth[CNX_SIGV4_AUTH_MAX];
    const char *payload = op->payload_hex ? op->payload_hex : EMPTY_SHA256;
    size_t nsh = 0, nlines = 0, n;
    cnx__http_req req;
    int rc;

    memset(resp, 0, sizeof(*resp));
    *what_out = NULL;
    what = what_of(store, op->name);
    if (what == NULL)
        goto nomem;
    if (op->name != NULL) {
        key = key_of(store, op->name);
        if (key == NULL)
            goto nomem;
        n = strlen(key) * 3 + 1;
        enc = malloc(n);
        if (enc == NULL)
            goto nomem;
        rc = cnx__sigv4_uri_encode(key, 1, enc, n);
        assert(rc == 0); /* three bytes per byte always fit */
        n = strlen(s->path_base) + strlen(enc) + 2;
        path = malloc(n);
        if (path == NULL)
            goto nomem;
        snprintf(path, n, "%s/%s", s->path_base, enc);
    } else {
        path = strdup(s->path_base[0] ? s->path_base : "/");
        if (path == NULL)
            goto nomem;
    }
    n = strlen(s->origin) + strlen(path) + strlen(op->query) + 2;
    url = malloc(n);
    if (url == NULL)
        goto nomem;
    snprintf(url, n, "%s%s%s%s", s->origin, path, op->query[0] ? "?" : "",
             op->query);

    /* the headers sent, every one of them signed */
    sh[nsh++] = (cnx__sigv4_header){"host", s->host};
    for (size_t i = 0; i < op->nhdr; i++)
        sh[nsh++] = op->hdr[i];
    if (s->auth == AUTH_SIGV4) {
        cnx__sigv4_amz_date((long long)time(NULL), amz_date);
        sh[nsh++] = (cnx__sigv4_header){"x-amz-date", amz_date};
        sh[nsh++] = (cnx__sigv4_header){"x-amz-content-sha256", payload};
        if (s->session_token[0] != '\0')
            sh[nsh++] =
                (cnx__sigv4_header){"x-amz-security-token", s->session_token};
    }
    assert(nsh <= sizeof(sh) / sizeof(sh[0]));
    for (size_t i = 0; i < nsh; i++) {
        lines[nlines] = header_line(sh[i].name, sh[i].value);
        if (lines[nlines] == NULL)
            goto nomem;
        nlines++;
    }
    if (s->auth == AUTH_SIGV4) {
        cnx__sigv4_request sreq = {
            .method = op->method,
            .path = path,
            .query = op->query,
            .headers = sh,
            .nheaders = nsh,
            .payload_hash = payload,
            .normalize_path = 0, /* S3 signs the path as sent */
        };
        rc = cnx__sigv4_authorization(&sreq, s->access_key, s->secret_key,
                                      amz_date, s->region, "s3", auth);
        if (rc != 0) {
            cnx_error_wrap("%s %s: signing", op->method, what);
            goto done;
        }
        lines[nlines] = header_line("Authorization", auth);
        if (lines[nlines] == NULL)
            goto nomem;
        nlines++;
    } else if (s->auth == AUTH_BEARER) {
        size_t bn = strlen(s->bearer) + 8;
        char *bearer = malloc(bn);
        if (bearer == NULL)
            goto nomem;
        snprintf(bearer, bn, "Bearer %s", s->bearer);
        lines[nlines] = header_line("Authorization", bearer);
        free(bearer);
        if (lines[nlines] == NULL)
            goto nomem;
        nlines++;
    }
    assert(nlines <= CNX_HTTP_HEADERS_MAX);

    memset(&req, 0, sizeof(req));
    req.method = op->method;
    req.url = url;
    req.what = what;
    req.headers = (const char *const *)lines;
    req.nheaders = nlines;
    req.body = op->body;
    req.body_len = op->body_len;
    req.max_body = op->max_body;
    req.range = op->range;
    req.range_first = op->first;
    req.range_last = op->last;
    req.flags = op->flags;
    rc = cnx__http_perform(&req, resp);
    if (rc == 0) {
        *what_out = what;
        what = NULL;
    }
    goto done;
nomem:
    rc = cnx_error_set(CNX_ENOMEM, 0, "%s %s: out of memory", op->method,
                       what ? what : store->url.canonical);
done:
    for (size_t i = 0; i < nlines; i++)
        free(lines[i]);
    free(key);
    free(enc);
    free(path);
    free(url);
    free(what);
    return rc;
}

/* The error for an unexpected answer to op (see cnx__http_fail); a 401
 * or 403 also says which credentials were used. */
static int s3_fail(const cnx_store *store, const s3_op *op, const char *what,
                   const cnx__http_resp *resp)
{
    const s3_impl *s = impl_of(store);
    cnx__http_req req;
    char line[sizeof(cnx_error_last()->message)];
    int rc;

    memset(&req, 0, sizeof(req));
    req.method = op->method;
    req.url = what;
    req.what = what;
    rc = cnx__http_fail(&req, resp);
    if (resp->status == 401 || resp->status == 403) {
        snprintf(line, sizeof(line), "%s", cnx_error_last()->message);
        rc = cnx_error_set(rc, 0, "%s (credentials: %s)", line,
                           s->auth == AUTH_NONE ? "none, unsigned"
                                                : s->cred_source);
    }
    return rc;
}

/* ---- digests --------------------------------------------------------- */

/* "sha256:<hex>" -> the 32 raw bytes. */
static void digest_raw(const char *digest, uint8_t raw[32])
{
    assert(cnx_digest_valid(digest));
    for (int i = 0; i < 32; i++) {
        char pair[3] = {digest[7 + 2 * i], digest[8 + 2 * i], '\0'};
        raw[i] = (uint8_t)strtoul(pair, NULL, 16);
    }
}

/* base64 of a digest's bytes, as x-amz-checksum-sha256 carries it. */
static void digest_base64(const char *digest, char out[45])
{
    uint8_t raw[32];
    digest_raw(digest, raw);
    EVP_EncodeBlock((unsigned char *)out, raw, 32);
}

/* x-amz-checksum-sha256 (base64 of 32 bytes) -> "sha256:<hex>", or 0. */
static int digest_from_base64(const char *b64, char out[CNX_DIGEST_LEN])
{
    uint8_t raw[36];
    if (strlen(b64) != 44 || b64[43] != '=' || b64[42] == '=')
        return 0;
    if (EVP_DecodeBlock(raw, (const unsigned char *)b64, 44) != 33)
        return 0;
    memcpy(out, "sha256:", 7);
    for (int i = 0; i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", raw[i]);
    return 1;
}

/* A GET of name, whole, up to max_len bytes. */
/* How many times a whole GET whose bytes do not match the digest we stored
 * with the object is sent again. */
#define GET_REPAIRS 3

/*
 * GET a whole object. An object we wrote carries its digest in metadata
 * (x-amz-meta-cnx-sha256 / x-goog-meta-cnx-sha256), which comes back with
 * it: bytes that do not match it were damaged on the way and are fetched
 * again -- this covers the reads no caller can check, such as a layer's
 * `info`. Objects written by other tools have no such digest and are
 * returned as they come (a caller with an expected digest still checks).
 */
static int s3_get_body(cnx_store *store, const char *name, size_t max_len,
                       uint8_t **data, size_t *len, cnx__http_resp *resp)
{
    s3_op op = {
        .method = "GET", .name = name, .query = "", .max_body = max_len};
    char *what = NULL, got[CNX_DIGEST_LEN];
    int rc;

    *data = NULL;
    *len = 0;
    for (int attempt = 0;; attempt++) {
        rc = s3_send(store, &op, &what, resp);
        if (rc != 0)
            return rc;
        if (resp->status != 200) {
            rc = s3_fail(store, &op, what, resp);
            cnx__http_resp_dispose(resp);
            break;
        }
        if (cnx_digest_valid(resp->meta_sha256)) {
            cnx_digest(resp->body, resp->body_len, got);
            if (strcmp(got, resp->meta_sha256) != 0) {
                cnx__store_count_refetch();
                if (attempt < GET_REPAIRS) {
                    cnx__http_resp_dispose(resp);
                    free(what);
                    what = NULL;
                    continue;
                }
                rc = cnx_error_set(CNX_EIO, 1,
                                   "GET %s: the bytes are %s, not the %s "
                                   "stored with the object, %d times",
                                   what, got, resp->meta_sha256,
                                   attempt + 1);
                cnx__http_resp_dispose(resp);
                break;
            }
        }
        *data = resp->body;
        *len = resp->body_len;
        resp->body = NULL;
        resp->body_len = 0;
        break;
    }
    free(what);
    return rc;
}

/*
 * The digest of the object stored at name: the service's own SHA-256
 * checksum when it keeps one (S3, for objects put with
 * x-amz-checksum-sha256), else the digest we put in its metadata, else the
 * digest of its bytes (one GET more).
 * @return 0; CNX_ENOTFOUND; CNX_EIO.
 */
static int stored_digest(cnx_store *store, const char *name,
                         char out[CNX_DIGEST_LEN], char etag[256])
{
    const s3_impl *s = impl_of(store);
    s3_op op = {.method = "HEAD", .name = name, .query = "", .max_body = 0};
    cnx__http_resp resp;
    uint8_t *data;
    size_t len;
    char *what = NULL;
    int rc;

    if (!s->gs)
        op_header(&op, "x-amz-checksum-mode", "ENABLED");
    rc = s3_send(store, &op, &what, &resp);
    if (rc != 0)
        return rc;
    if (etag != NULL)
        snprintf(etag, 256, "%s", resp.etag);
    if (resp.status != 200) {
        rc = s3_fail(store, &op, what, &resp);
    } else if (digest_from_base64(resp.checksum_sha256, out)) {
        rc = 0;
    } else if (cnx_digest_valid(resp.meta_sha256)) {
        memcpy(out, resp.meta_sha256, CNX_DIGEST_LEN);
        rc = 0;
    } else {
        cnx__http_resp_dispose(&resp);
        rc = s3_get_body(store, name, CNX_STORE_MAX_OBJECT, &data, &len, &resp);
        if (rc == 0) {
            cnx_digest(data, len, out);
            free(data);
        }
    }
    cnx__http_resp_dispose(&resp);
    free(what);
    return rc;
}

/* Identical: 0; different: the recorded refusal (CNX_EIMMUTABLE). */
static int compare_stored(const char *name, const char *stored,
                          const char *digest)
{
    if (strcmp(stored, digest) == 0)
        return 0;
    return cnx__store_conflict_record(name, stored, digest);
}

/* ---- operations ---------------------------------------------------------- */

/* The headers that store a digest with the object (put and swap). */
static void op_digest_headers(const s3_impl *s, s3_op *op, const char *digest,
                              char b64[45])
{
    if (s->gs) {
        op_header(op, "x-goog-meta-cnx-sha256", digest);
    } else {
        digest_base64(digest, b64);
        op_header(op, "x-amz-checksum-sha256", b64);
        op_header(op, "x-amz-meta-cnx-sha256", digest);
    }
}

/* How many times a PUT whose stored bytes came out different from those
 * sent (by the ETag) is sent again. */
#define PUT_REPAIRS 3

/* MD5 of a body, hex (the ETag of a single PUT) and base64 (Content-MD5). */
static void body_md5(const void *data, size_t len, char hex[33],
                     char b64[25])
{
    uint8_t md[16];
    unsigned int n = 0;
    int ok = EVP_Digest(data, len, md, &n, EVP_md5(), NULL);
    assert(ok == 1 && n == 16);
    (void)ok;
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_EncodeBlock((unsigned char *)b64, md, 16);
}

/* 1 if etag is the plain MD5 form ("<32 hex>", quoted or not) of other
 * bytes than md5_hex; 0 when it matches or is another form (multipart,
 * encrypted objects, GCS), which says nothing. */
static int etag_is_other_md5(const char *etag, const char *md5_hex)
{
    const char *p = etag;
    size_t n = strlen(p);
    if (n >= 2 && p[0] == '"' && p[n - 1] == '"')
        p++, n -= 2;
    if (n != 32)
        return 0;
    for (size_t i = 0; i < 32; i++)
        if (!isxdigit((unsigned char)p[i]))
            return 0;
    return strncasecmp(p, md5_hex, 32) != 0;
}

static int s3_put(cnx_store *store, const char *name, const void *data,
                  size_t len, const char *digest)
{
    const s3_impl *s = impl_of(store);
    s3_op op = {.method = "PUT",
                .name = name,
                .query = "",
                .body = data,
                .body_len = len,
                .payload_hex = digest + 7,
                .max_body = CNX_HTTP_ERROR_BODY_MAX,
                .flags = CNX_HTTP_WRITE};
    char stored[CNX_DIGEST_LEN], b64[45], md5_hex[33], md5_b64[25];
    cnx__http_resp resp;
    char *what = NULL;
    int rc;

    assert(cnx_digest_valid(digest));
    if (cnx__store_writes_abandoned())
        return cnx_error_set(CNX_EIO, 1,
                             "put %s: writes abandoned: the "
                             "worker is stopping",
                             name);
    body_md5(data, len, md5_hex, md5_b64);
    if (s->check_before_put) {
        char etag[256];
        rc = stored_digest(store, name, stored, etag);
        if (rc == 0 && (strcmp(stored, digest) != 0 ||
                        !etag_is_other_md5(etag, md5_hex)))
            return compare_stored(name, stored, digest);
        if (rc != 0 && rc != CNX_ENOTFOUND)
            return rc;
        /* Missing, or ours by its metadata but with other bytes (an
         * earlier upload of it damaged on the way to a store that checks
         * no checksum): PUT it, again. */
    }
    if (s->gs)
        op_header(&op, "x-goog-if-generation-match", "0");
    else
        op_header(&op, "If-None-Match", "*");
    op_header(&op, "Content-MD5", md5_b64);
    op_digest_headers(s, &op, digest, b64);
    for (int attempt = 0;; attempt++) {
        rc = s3_send(store, &op, &what, &resp);
        if (rc != 0)
            return rc;
        /* A store that checks neither checksum nor Content-MD5 still
         * answers with the MD5 of what it stored as the ETag: bytes
         * damaged on the way are found here and sent again. */
        if (!s->check_before_put ||
            !(resp.status == 200 || resp.status == 201 ||
              resp.status == 204) ||
            !etag_is_other_md5(resp.etag, md5_hex))
            break;
        cnx__store_count_refetch();
        if (attempt >= PUT_REPAIRS) {
            rc = cnx_error_set(CNX_EIO, 1,
                               "PUT %s: the stored bytes differ from those "
                               "sent (ETag %s, MD5 sent %s), %d times",
                               what, resp.etag, md5_hex, attempt + 1);
            cnx__http_resp_dispose(&resp);
            free(what);
            return rc;
        }
        cnx__http_resp_dispose(&resp);
        free(what);
        what = NULL;
    }
    if (resp.status == 200 || resp.status == 201 || resp.status == 204) {
        rc = 0;
    } else if (resp.status == 412 || resp.status == 409 || resp.status == 304) {
        /* There already (or being written: 409 ConditionalRequestConflict
         * on S3; some S3 look-alikes answer 304): compare what is there. */
        rc = stored_digest(store, name, stored, NULL);
        if (rc == 0)
            rc = compare_stored(name, stored, digest);
        else if (rc == CNX_ENOTFOUND)
            rc = cnx_error_set(CNX_EIO, 1,
                               "PUT %s: %ld %s, and the object "
                               "is not there yet: another write is in "
                               "flight",
                               what, resp.status, resp.code);
    } else {
        rc = s3_fail(store, &op, what, &resp);
    }
    cnx__http_resp_dispose(&resp);
    free(what);
    return rc;
}

static int s3_get(cnx_store *store, const char *name, size_t max_len,
                  uint8_t **data, size_t *len)
{
    cnx__http_resp resp;
    int rc = s3_get_body(store, name, max_len, data, len, &resp);
    cnx__http_resp_dispose(&resp);
    return rc;
}

static int s3_get_range(cnx_store *store, const char *name, uint64_t offset,
                        size_t len, uint8_t **data, size_t *got)
{
    s3_op op = {.method = "GET",
                .name = name,
                .query = "",
                .max_body = CNX_STORE_MAX_OBJECT,
                .range = 1,
                .first = offset,
                .last = offset + len - 1};
    cnx__http_resp resp;
    cnx__http_req req;
    char *what = NULL;
    int rc;

    assert(len > 0 && offset <= UINT64_MAX - len);
    *data = NULL;
    *got = 0;
    rc = s3_send(store, &op, &what, &resp);
    if (rc != 0)
        return rc;
    memset(&req, 0, sizeof(req));
    req.method = op.method;
    req.url = req.what = what;
    rc = cnx__http_range_result(&req, &resp, offset, len, data, got);
    cnx__http_resp_dispose(&resp);
    free(what);
    return rc;
}

static int s3_exists(cnx_store *store, const char *name, int *exists)
{
    s3_op op = {.method = "HEAD", .name = name, .query = ""};
    cnx__http_resp resp;
    char *what = NULL;
    int rc;

    *exists = 0;
    rc = s3_send(store, &op, &what, &resp);
    if (rc != 0)
        return rc;
    if (resp.status == 200)
        *exists = 1;
    else if (resp.status != 404)
        rc = s3_fail(store, &op, what, &resp);
    cnx__http_resp_dispose(&resp);
    free(what);
    return rc;
}

static int s3_swap(cnx_store *store, const char *name, const char *expected,
                   const void *data, size_t len)
{
    const s3_impl *s = impl_of(store);
    s3_op op = {.method = "PUT",
                .name = name,
                .query = "",
                .body = data,
                .body_len = len,
                .max_body = CNX_HTTP_ERROR_BODY_MAX,
                .flags = CNX_HTTP_WRITE};
    char digest[CNX_DIGEST_LEN], current[CNX_DIGEST_LEN], b64[45];
    char etag[256], generation[32];
    cnx__http_resp resp;
    uint8_t *old = NULL;
    size_t old_len = 0;
    char *what = NULL;
    int rc;

    if (cnx__store_writes_abandoned())
        return cnx_error_set(CNX_EIO, 1,
                             "swap %s: writes abandoned: the "
                             "worker is stopping",
                             name);
    cnx_digest(data, len, digest);
    rc = s3_get_body(store, name, CNX_STORE_MAX_OBJECT, &old, &old_len, &resp);
    if (rc == CNX_ENOTFOUND) {
        if (expected != NULL)
            return cnx_error_set(CNX_ECONFLICT, 0,
                                 "swap %s/%s: expected %s, "
                                 "but it does not exist",
                                 store->url.canonical, name, expected);
        if (s->gs)
            op_header(&op, "x-goog-if-generation-match", "0");
        else
            op_header(&op, "If-None-Match", "*");
    } else if (rc != 0) {
        cnx__http_resp_dispose(&resp);
        return rc;
    } else {
        cnx_digest(old, old_len, current);
        free(old);
        memcpy(etag, resp.etag, sizeof(etag));
        memcpy(generation, resp.generation, sizeof(generation));
        cnx__http_resp_dispose(&resp);
        if (expected == NULL || strcmp(current, expected) != 0)
            return cnx_error_set(CNX_ECONFLICT, 0,
                                 "swap %s/%s: changed: now "
                                 "%s, expected %s",
                                 store->url.canonical, name, current,
                                 expected ? expected : "none");
        if (s->gs && generation[0] != '\0') {
            op_header(&op, "x-goog-if-generation-match", generation);
        } else if (etag[0] != '\0') {
            op_header(&op, "If-Match", etag);
        } else {
            return cnx_error_set(CNX_EIO, 0,
                                 "swap %s/%s: the service "
                                 "answered without an ETag or generation; "
                                 "it cannot compare-and-swap",
                                 store->url.canonical, name);
        }
    }
    op.payload_hex = digest + 7;
    op_digest_headers(s, &op, digest, b64);
    rc = s3_send(store, &op, &what, &resp);
    if (rc != 0)
        return rc;
    if (resp.status == 200 || resp.status == 201 || resp.status == 204)
        rc = 0;
    else if (resp.status == 412 || resp.status == 409)
        rc = cnx_error_set(CNX_ECONFLICT, 0,
                           "PUT %s: %ld %s: another writer "
                           "changed it first",
                           what, resp.status,
                           resp.code[0] ? resp.code : "PreconditionFailed");
    else
        rc = s3_fail(store, &op, what, &resp);
    cnx__http_resp_dispose(&resp);
    free(what);
    return rc;
}

/* ---- listing ------------------------------------------------------------ */

/*
 * One ListObjectsV2 page: <ListBucketResult> with <Contents><Key> per
 * object, <IsTruncated> and <NextContinuationToken>. Parsed with expat
 * (Debian's libexpat: small and well kept, from the same family of
 * dependencies as curl and git, which loads no external entities and caps
 * entity expansion); every text is capped at LIST_TEXT_MAX.
 */
typedef struct list_page {
    int depth;
    int in_key; /* inside ListBucketResult/Contents/Key */
    int in_truncated;
    int in_token;
    int root_ok;
    int overflow; /* a text over LIST_TEXT_MAX */
    int nomem;
    char text[LIST_TEXT_MAX + 1];
    size_t text_len;
    char **keys;
    size_t nkeys, cap;
    int truncated;
    char token[LIST_TEXT_MAX + 1];
} list_page;

static void XMLCALL lp_start(void *ctx, const XML_Char *name,
                             const XML_Char **attrs)
{
    list_page *p = ctx;
    (void)attrs;
    p->depth++;
    if (p->depth == 1)
        p->root_ok = strcmp(name, "ListBucketResult") == 0;
    if (!p->root_ok)
        return;
    p->text_len = 0;
    if (p->depth == 2 && strcmp(name, "IsTruncated") == 0)
        p->in_truncated = 1;
    else if (p->depth == 2 && strcmp(name, "NextContinuationToken") == 0)
        p->in_token = 1;
    else if (p->depth == 3 && strcmp(name, "Key") == 0)
        p->in_key = 1; /* Contents/Key (CommonPrefixes has Prefix) */
}

static void XMLCALL lp_end(void *ctx, const XML_Char *name)
{
    list_page *p = ctx;
    (void)name;
    p->text[p->text_len] = '\0';
    if (p->in_key) {
        if (p->nkeys == p->cap) {
            size_t ncap = p->cap ? p->cap * 2 : 256;
            char **grown = realloc(p->keys, ncap * sizeof(*grown));
            if (grown == NULL) {
                p->nomem = 1;
                goto out;
            }
            p->keys = grown;
            p->cap = ncap;
        }
        p->keys[p->nkeys] = strdup(p->text);
        if (p->keys[p->nkeys] == NULL)
            p->nomem = 1;
        else
            p->nkeys++;
    } else if (p->in_truncated) {
        p->truncated = strcmp(p->text, "true") == 0;
    } else if (p->in_token) {
        memcpy(p->token, p->text, p->text_len + 1);
    }
out:
    p->in_key = p->in_truncated = p->in_token = 0;
    p->text_len = 0;
    p->depth--;
}

static void XMLCALL lp_text(void *ctx, const XML_Char *s, int len)
{
    list_page *p = ctx;
    if (!(p->in_key || p->in_truncated || p->in_token) || len <= 0)
        return;
    if ((size_t)len > LIST_TEXT_MAX - p->text_len) {
        p->overflow = 1;
        return;
    }
    memcpy(p->text + p->text_len, s, (size_t)len);
    p->text_len += (size_t)len;
}

static void list_page_dispose(list_page *p)
{
    for (size_t i = 0; i < p->nkeys; i++)
        free(p->keys[i]);
    free(p->keys);
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append "name=enc(value)" to a query under construction. */
static int query_add(char *q, size_t cap, const char *name, const char *value)
{
    size_t have = strlen(q), n = strlen(name);
    if (have + n + 3 > cap)
        return CNX_ERANGE;
    snprintf(q + have, cap - have, "%s%s=", have ? "&" : "", name);
    have = strlen(q);
    return cnx__sigv4_uri_encode(value, 0, q + have, cap - have);
}

static int s3_list(cnx_store *store, const char *prefix, cnx_store_list_fn fn,
                   void *ctx)
{
    const s3_impl *s = impl_of(store);
    const char *base = store->url.path;
    size_t base_len = strlen(base) + (base[0] ? 1 : 0);
    char *full = NULL, *query = NULL, *last = NULL, *what = NULL;
    char page_size[16];
    size_t full_len, qcap;
    list_page *page = NULL;
    int rc = 0;

    /* keys under the store's prefix and the caller's, component-wise */
    full_len = strlen(base) + (prefix ? strlen(prefix) : 0) + 3;
    full = malloc(full_len);
    page = calloc(1, sizeof(*page));
    qcap = 3 * (full_len + LIST_TEXT_MAX) + 128;
    query = malloc(qcap);
    if (full == NULL || page == NULL || query == NULL)
        goto nomem;
    snprintf(full, full_len, "%s%s%s%s", base, base[0] ? "/" : "",
             prefix ? prefix : "", prefix && prefix[0] ? "/" : "");
    snprintf(page_size, sizeof(page_size), "%d", s->list_page);

    for (;;) {
        s3_op op = {.method = "GET",
                    .name = NULL,
                    .query = NULL,
                    .max_body = LIST_PAGE_BODY_MAX};
        cnx__http_resp resp;
        XML_Parser parser;
        char token[LIST_TEXT_MAX + 1];

        /* canonical order: continuation-token, list-type, max-keys,
         * prefix */
        memcpy(token, page->token, sizeof(token));
        list_page_dispose(page);
        memset(page, 0, sizeof(*page));
        query[0] = '\0';
        if ((token[0] &&
             query_add(query, qcap, "continuation-token", token) != 0) ||
            query_add(query, qcap, "list-type", "2") != 0 ||
            query_add(query, qcap, "max-keys", page_size) != 0 ||
            (full[0] && query_add(query, qcap, "prefix", full) != 0)) {
            rc = cnx_error_set(CNX_EIO, 0, "list %s: query too long",
                               store->url.canonical);
            break;
        }
        op.query = query;
        free(what);
        what = NULL;
        rc = s3_send(store, &op, &what, &resp);
        if (rc != 0)
            break;
        if (resp.status != 200) {
            rc = s3_fail(store, &op, what, &resp);
            cnx__http_resp_dispose(&resp);
            break;
        }
        parser = XML_ParserCreate(NULL);
        if (parser == NULL) {
            cnx__http_resp_dispose(&resp);
            goto nomem;
        }
        XML_SetUserData(parser, page);
        XML_SetElementHandler(parser, lp_start, lp_end);
        XML_SetCharacterDataHandler(parser, lp_text);
        if (XML_Parse(parser, (const char *)resp.body, (int)resp.body_len, 1) !=
            XML_STATUS_OK) {
            rc = cnx_error_set(CNX_EIO, 1,
                               "GET %s (list): malformed XML at "
                               "line %lu: %s",
                               what,
                               (unsigned long)XML_GetCurrentLineNumber(parser),
                               XML_ErrorString(XML_GetErrorCode(parser)));
        } else if (page->nomem) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "list %s: out of memory", what);
        } else if (!page->root_ok || page->overflow) {
            rc = cnx_error_set(CNX_EIO, 0, "GET %s (list): %s", what,
                               page->overflow ? "a key or token over the "
                                                "size limit"
                                              : "not a ListBucketResult");
        } else if (page->truncated && page->token[0] == '\0') {
            rc = cnx_error_set(CNX_EIO, 0,
                               "GET %s (list): truncated page "
                               "without a NextContinuationToken",
                               what);
        }
        XML_ParserFree(parser);
        cnx__http_resp_dispose(&resp);
        if (rc != 0)
            break;

        /* S3 and GCS answer in byte order; sort anyway (cheap), and
         * refuse a listing whose pages go backwards. */
        if (page->nkeys > 1)
            qsort(page->keys, page->nkeys, sizeof(char *), cmp_key);
        for (size_t i = 0; i < page->nkeys && rc == 0; i++) {
            const char *key = page->keys[i], *rel;
            if (strncmp(key, full, strlen(full)) != 0)
                continue; /* not under the prefix: a confused service */
            rel = key + base_len;
            if (cnx_url_check_name(rel) != 0) {
                cnx_error_clear(); /* "dir/" markers, "a//b": not objects */
                continue;
            }
            if (last != NULL && strcmp(key, last) <= 0) {
                rc = cnx_error_set(CNX_EIO, 0,
                                   "list %s: the service listed "
                                   "'%.200s' after '%.200s' (not in byte "
                                   "order)",
                                   what, key, last);
                break;
            }
            free(last);
            last = strdup(key);
            if (last == NULL)
                goto nomem;
            rc = fn(ctx, rel);
        }
        if (rc != 0 || !page->truncated)
            break;
    }
    goto done;
nomem:
    rc = cnx_error_set(CNX_ENOMEM, 0, "list %s: out of memory",
                       store->url.canonical);
done:
    if (page != NULL)
        list_page_dispose(page);
    free(page);
    free(full);
    free(query);
    free(last);
    free(what);
    return rc;
}

static void s3_dispose(cnx_store *store)
{
    s3_impl *s = store->impl;
    if (s != NULL) {
        /* secrets do not outlive the store in freed memory */
        OPENSSL_cleanse(s, sizeof(*s));
        free(s);
    }
    store->impl = NULL;
}

static const cnx__store_ops s3_ops = {
    .put = s3_put,
    .get = s3_get,
    .get_range = s3_get_range,
    .swap = s3_swap,
    .exists = s3_exists,
    .list = s3_list,
    .dispose = s3_dispose,
};

/* ---- open ---------------------------------------------------------------- */

/* Copy an environment variable into dst; 0 when unset or empty. */
static int env_copy(const char *name, char *dst, size_t cap, int *too_long)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return 0;
    if (strlen(v) >= cap) {
        *too_long = 1;
        return 0;
    }
    memcpy(dst, v, strlen(v) + 1);
    return 1;
}

/* The host part of "host[:port]" or "[v6]:port" is an address or
 * localhost: such endpoints (MinIO, s3rver, ...) get path-style. */
static int host_is_local_or_ip(const char *hostport)
{
    char h[256];
    unsigned char addr[16];
    const char *end;
    size_t n;

    if (hostport[0] == '[')
        return 1;
    end = strchr(hostport, ':');
    n = end ? (size_t)(end - hostport) : strlen(hostport);
    if (n >= sizeof(h))
        return 0;
    memcpy(h, hostport, n);
    h[n] = '\0';
    return strcasecmp(h, "localhost") == 0 || inet_pton(AF_INET, h, addr) == 1;
}

/* Does host[:port] end with suffix (a domain, matched label-wise)? */
static int host_in_domain(const char *hostport, const char *domain)
{
    size_t n = strcspn(hostport, ":"), d = strlen(domain);
    if (n == d)
        return strncasecmp(hostport, domain, n) == 0;
    return n > d && hostport[n - d - 1] == '.' &&
           strncasecmp(hostport + n - d, domain, d) == 0;
}

static int open_fail(cnx_store *store, int rc)
{
    s3_dispose(store);
    return rc;
}

int cnx__store_open_s3(cnx_store *store)
{
    cnx__aws_config cfg;
    s3_impl *s;
    cnx_url ep;
    const char *bucket = store->url.host, *v, *endpoint;
    char endpoint_buf[600];
    int rc, too_long = 0, path_style, custom;

    assert(store->url.scheme == CNX_URL_S3 || store->url.scheme == CNX_URL_GS);
    rc = cnx__aws_config_load(&cfg);
    if (rc != 0)
        return rc;
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        OPENSSL_cleanse(&cfg, sizeof(cfg));
        return cnx_error_set(CNX_ENOMEM, 0, "store: out of memory");
    }
    store->impl = s;
    s->gs = store->url.scheme == CNX_URL_GS;

    /* endpoint */
    if (s->gs) {
        v = getenv("CNX_GS_ENDPOINT");
        endpoint = (v && v[0]) ? v : "https://storage.googleapis.com";
        custom = v && v[0];
    } else if (cfg.endpoint[0] != '\0') {
        endpoint = cfg.endpoint;
        custom = 1;
    } else {
        snprintf(endpoint_buf, sizeof(endpoint_buf),
                 "https://s3.%s.amazonaws.com", cfg.region);
        endpoint = endpoint_buf;
        custom = 0;
    }
    rc = cnx_url_parse(&ep, endpoint, 0);
    if (rc == 0 && ep.scheme != CNX_URL_HTTP && ep.scheme != CNX_URL_HTTPS)
        rc = cnx_error_set(CNX_EINVAL, 0, "endpoint '%.200s': not http(s)",
                           endpoint);
    if (rc == 0 && ep.path[0] != '\0')
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "endpoint '%.200s': a path after "
                           "the host is not supported",
                           endpoint);
    if (rc != 0) {
        cnx_error_wrap("store %s", store->url.canonical);
        OPENSSL_cleanse(&cfg, sizeof(cfg));
        return open_fail(store, rc);
    }

    /* addressing: GCS and local/IP endpoints path-style; AWS and other
     * named hosts virtual-hosted, except dotted buckets over https (the
     * wildcard certificate does not cover them) */
    v = getenv("CNX_S3_ADDRESSING");
    if (v != NULL && strcmp(v, "path") == 0)
        path_style = 1;
    else if (v != NULL && strcmp(v, "virtual") == 0)
        path_style = 0;
    else if (v == NULL || v[0] == '\0' || strcmp(v, "auto") == 0)
        path_style = s->gs || host_is_local_or_ip(ep.host) ||
                     (ep.scheme == CNX_URL_HTTPS && strchr(bucket, '.'));
    else {
        OPENSSL_cleanse(&cfg, sizeof(cfg));
        return open_fail(
            store, cnx_error_set(CNX_EINVAL, 0,
                                 "CNX_S3_ADDRESSING='%.40s': not auto, path or "
                                 "virtual",
                                 v));
    }
    if (path_style) {
        snprintf(s->host, sizeof(s->host), "%s", ep.host);
        snprintf(s->path_base, sizeof(s->path_base), "/%s", bucket);
    } else {
        snprintf(s->host, sizeof(s->host), "%s.%s", bucket, ep.host);
    }
    snprintf(s->origin, sizeof(s->origin), "%s://%s",
             cnx_url_scheme_name(ep.scheme), s->host);

    /* write-once guard for stores that may ignore If-None-Match */
    v = getenv("CNX_S3_CHECK_BEFORE_PUT");
    if (v != NULL && strcmp(v, "1") == 0)
        s->check_before_put = 1;
    else if (v != NULL && strcmp(v, "0") == 0)
        s->check_before_put = 0;
    else if (v == NULL || v[0] == '\0' || strcmp(v, "auto") == 0)
        s->check_before_put =
            custom && !host_in_domain(ep.host, "amazonaws.com") &&
            !host_in_domain(ep.host, "amazonaws.com.cn") &&
            !host_in_domain(ep.host, "storage.googleapis.com");
    else {
        OPENSSL_cleanse(&cfg, sizeof(cfg));
        return open_fail(
            store, cnx_error_set(
                       CNX_EINVAL, 0,
                       "CNX_S3_CHECK_BEFORE_PUT='%.40s': not 0, 1 or auto", v));
    }

    s->list_page = 1000;
    v = getenv("CNX_S3_LIST_PAGE");
    if (v != NULL && v[0] != '\0') {
        char *end;
        long page = strtol(v, &end, 10);
        if (end == v || *end != '\0' || page < 1 || page > 1000) {
            OPENSSL_cleanse(&cfg, sizeof(cfg));
            return open_fail(
                store,
                cnx_error_set(CNX_EINVAL, 0,
                              "CNX_S3_LIST_PAGE='%.40s': not 1 to 1000", v));
        }
        s->list_page = (int)page;
    }

    /* credentials: GCS bearer token, GCS HMAC keys, the AWS chain */
    snprintf(s->region, sizeof(s->region), "%s", s->gs ? "auto" : cfg.region);
    if (s->gs && env_copy("GOOGLE_OAUTH_ACCESS_TOKEN", s->bearer,
                          sizeof(s->bearer), &too_long)) {
        s->auth = AUTH_BEARER;
        snprintf(s->cred_source, sizeof(s->cred_source),
                 "GOOGLE_OAUTH_ACCESS_TOKEN");
    } else if (s->gs && env_copy("GS_ACCESS_KEY_ID", s->access_key,
                                 sizeof(s->access_key), &too_long)) {
        if (!env_copy("GS_SECRET_ACCESS_KEY", s->secret_key,
                      sizeof(s->secret_key), &too_long))
            too_long = too_long ? 1 : 2;
        s->auth = AUTH_SIGV4;
        snprintf(s->cred_source, sizeof(s->cred_source), "GS_ACCESS_KEY_ID");
    } else if (cfg.access_key[0] != '\0') {
        memcpy(s->access_key, cfg.access_key, sizeof(s->access_key));
        memcpy(s->secret_key, cfg.secret_key, sizeof(s->secret_key));
        memcpy(s->session_token, cfg.session_token, sizeof(s->session_token));
        s->auth = AUTH_SIGV4;
        snprintf(s->cred_source, sizeof(s->cred_source), "%s", cfg.source);
    } else {
        s->auth = AUTH_NONE; /* public buckets */
    }
    OPENSSL_cleanse(&cfg, sizeof(cfg));
    if (too_long)
        return open_fail(
            store,
            cnx_error_set(CNX_EINVAL, 0, "store %s: %s", store->url.canonical,
                          too_long == 2 ? "GS_ACCESS_KEY_ID is set but "
                                          "GS_SECRET_ACCESS_KEY is not"
                                        : "a credential in "
                                          "the environment is too long"));
    store->ops = &s3_ops;
    return 0;
}
