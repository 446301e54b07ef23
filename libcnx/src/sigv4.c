/*
 * sigv4.c - AWS Signature Version 4 (header form), signed with OpenSSL.
 *
 * Pure string work: a request description in, the canonical request, the
 * string to sign and the Authorization header value out; no clock, no
 * environment, no I/O. The canonical request follows SigV4 task 1: the path
 * percent-encoded once (and, for every service but S3, with dot segments and
 * empty segments removed), the query pairs decoded, re-encoded and sorted,
 * the headers lower-cased, trimmed, sorted and joined by name. Every
 * intermediate string lives in a growable buffer capped at SIGV4_MAX, so a
 * hostile or broken caller gets CNX_EINVAL, never an unbounded allocation.
 * Load: one signature per S3 request, a few microseconds of HMAC-SHA256.
 * Threading: reentrant; no shared state. The derived keys are wiped with
 * OPENSSL_cleanse before their stack frames are left.
 */
#include "sigv4_int.h"

#include <assert.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnx/digest.h"
#include "cnx/error.h"

/* Longest canonical request or string to sign we build: far above any S3
 * request (a few KiB with a session token), far below anything harmful. */
#define SIGV4_MAX (256u * 1024u)

static const char hex_upper[] = "0123456789ABCDEF";
static const char hex_lower[] = "0123456789abcdef";

/* ---- growable buffer --------------------------------------------------- */

typedef struct sbuf {
    char *data; /* NUL-terminated while len < cap */
    size_t len;
    size_t cap;
} sbuf;

static void sb_dispose(sbuf *sb)
{
    free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
}

static int sb_put(sbuf *sb, const char *s, size_t n)
{
    if (sb->len + n + 1 > SIGV4_MAX)
        return cnx_error_set(CNX_EINVAL, 0,
                             "sigv4: request too large to sign (over %u "
                             "bytes canonical)",
                             SIGV4_MAX);
    if (sb->len + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 256;
        while (cap < sb->len + n + 1)
            cap *= 2;
        char *p = realloc(sb->data, cap);
        if (p == NULL)
            return cnx_error_set(CNX_ENOMEM, 1, "sigv4: out of memory");
        sb->data = p;
        sb->cap = cap;
    }
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
    return 0;
}

static int sb_puts(sbuf *sb, const char *s)
{
    return sb_put(sb, s, strlen(s));
}

static int sb_putc(sbuf *sb, char c)
{
    return sb_put(sb, &c, 1);
}

/* ---- character classes and encoding ------------------------------------ */

static int is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
           c == '~';
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Percent-encode n bytes of s into sb (SigV4 rules, see the header). */
static int sb_put_encoded(sbuf *sb, const char *s, size_t n, int keep_slash)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc;
        if (is_unreserved(c) || (keep_slash && c == '/')) {
            rc = sb_putc(sb, (char)c);
        } else {
            char esc[3] = {'%', hex_upper[c >> 4], hex_upper[c & 15]};
            rc = sb_put(sb, esc, 3);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

int cnx__sigv4_uri_encode(const char *in, int keep_slash, char *out, size_t cap)
{
    size_t o = 0;
    assert(in != NULL && out != NULL);
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        size_t need = (is_unreserved(*p) || (keep_slash && *p == '/')) ? 1 : 3;
        if (o + need + 1 > cap) {
            if (cap > 0)
                out[0] = '\0';
            return cnx_error_set(CNX_ERANGE, 0,
                                 "sigv4: encoded URI component longer than "
                                 "%zu bytes",
                                 cap > 0 ? cap - 1 : 0);
        }
        if (need == 1) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex_upper[*p >> 4];
            out[o++] = hex_upper[*p & 15];
        }
    }
    if (cap == 0)
        return cnx_error_set(CNX_ERANGE, 0,
                             "sigv4: no room for an encoded URI component");
    out[o] = '\0';
    return 0;
}

void cnx__sigv4_amz_date(long long unix_seconds, char out[17])
{
    struct tm tm;
    /* 0000-01-01 .. 9999-12-31: anything else is a broken clock or caller. */
    assert(unix_seconds >= 0 && unix_seconds < 253402300800LL);
    time_t t = (time_t)unix_seconds;
    struct tm *ok = gmtime_r(&t, &tm);
    assert(ok != NULL);
    (void)ok;
    size_t n = strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
    assert(n == 16);
    (void)n;
}

/* ---- canonical URI ----------------------------------------------------- */

/* The path as sent, once more through the encoder: unreserved bytes and '/'
 * kept, a well-formed %XX escape kept (hex upper-cased), every other byte
 * (a raw space or UTF-8, as the test suite writes its requests) escaped.
 * A path already encoded with cnx__sigv4_uri_encode passes unchanged. */
static int put_path_bytes(sbuf *sb, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc;
        if (s[i] == '%' && i + 2 < n && hex_value(s[i + 1]) >= 0 &&
            hex_value(s[i + 2]) >= 0) {
            char esc[3] = {'%', hex_upper[hex_value(s[i + 1])],
                           hex_upper[hex_value(s[i + 2])]};
            rc = sb_put(sb, esc, 3);
            i += 2;
        } else {
            rc = sb_put_encoded(sb, s + i, 1, 1);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Whether the segment s[0..len) is "." or "..". */
static int is_dot_segment(const char *s, size_t len)
{
    return (len == 1 && s[0] == '.') ||
           (len == 2 && s[0] == '.' && s[1] == '.');
}

/* RFC 3986 dot-segment removal plus empty-segment removal ("//" -> "/"):
 * the canonical URI every service but S3 expects. A path whose last
 * segment is empty, "." or ".." keeps one trailing '/'. */
static int put_normalized_path(sbuf *sb, const char *path)
{
    size_t n = strlen(path), nseg = 0, i = 0;
    int rc = 0;
    /* (start, length) of each kept segment; a segment takes 2 bytes. */
    size_t(*seg)[2] = malloc((n / 2 + 1) * sizeof(*seg));
    if (seg == NULL)
        return cnx_error_set(CNX_ENOMEM, 1, "sigv4: out of memory");
    while (i < n) {
        while (i < n && path[i] == '/')
            i++;
        size_t start = i;
        while (i < n && path[i] != '/')
            i++;
        size_t len = i - start;
        if (len == 0 || is_dot_segment(path + start, len)) {
            if (len == 2 && nseg > 0)
                nseg--;
            continue;
        }
        assert(nseg < n / 2 + 1);
        seg[nseg][0] = start;
        seg[nseg][1] = len;
        nseg++;
    }
    const char *last = strrchr(path, '/') + 1;
    int trailing = *last == '\0' || is_dot_segment(last, strlen(last));
    for (size_t k = 0; k < nseg && rc == 0; k++) {
        rc = sb_putc(sb, '/');
        if (rc == 0)
            rc = put_path_bytes(sb, path + seg[k][0], seg[k][1]);
    }
    if (rc == 0 && (nseg == 0 || trailing))
        rc = sb_putc(sb, '/');
    free(seg);
    return rc;
}

static int put_canonical_uri(sbuf *sb, const char *path, int normalize)
{
    if (path[0] == '\0')
        return sb_putc(sb, '/');
    if (path[0] != '/')
        return cnx_error_set(CNX_EINVAL, 0,
                             "sigv4: path does not start with '/'");
    if (normalize)
        return put_normalized_path(sb, path);
    return put_path_bytes(sb, path, strlen(path));
}

/* ---- canonical query string -------------------------------------------- */

typedef struct qparam {
    char *name;  /* encoded */
    char *value; /* encoded, "" for "name" and "name=" */
} qparam;

/* Decode %XX escapes of s[0..n) and encode the result the SigV4 way into a
 * new string. '+' is a literal plus (SigV4 never decodes it as a space). */
static int reencode(const char *s, size_t n, char **out)
{
    sbuf sb = {0};
    int rc = sb_put(&sb, "", 0);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n || hex_value(s[i + 1]) < 0 ||
                hex_value(s[i + 2]) < 0) {
                rc = cnx_error_set(CNX_EINVAL, 0,
                                   "sigv4: bad percent escape in the query "
                                   "string");
                break;
            }
            c = (char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        }
        rc = sb_put_encoded(&sb, &c, 1, 0);
    }
    if (rc < 0) {
        sb_dispose(&sb);
        return rc;
    }
    *out = sb.data;
    return 0;
}

static int qparam_cmp(const void *a, const void *b)
{
    const qparam *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : strcmp(x->value, y->value);
}

static int put_canonical_query(sbuf *sb, const char *query)
{
    size_t n = strlen(query), count = 0, np = 1;
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        np += query[i] == '&';
    qparam *params = calloc(np, sizeof(*params));
    if (params == NULL)
        return cnx_error_set(CNX_ENOMEM, 1, "sigv4: out of memory");
    const char *p = query;
    while (*p != '\0' && rc == 0) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0) { /* "a&&b" and a trailing '&' carry no parameter */
            const char *eq = memchr(p, '=', len);
            size_t nlen = eq ? (size_t)(eq - p) : len;
            assert(count < np);
            rc = reencode(p, nlen, &params[count].name);
            if (rc == 0)
                rc = reencode(eq ? eq + 1 : p + len, eq ? len - nlen - 1 : 0,
                              &params[count].value);
            count++;
        }
        p = end ? end + 1 : p + len;
    }
    if (rc == 0)
        qsort(params, count, sizeof(*params), qparam_cmp);
    for (size_t i = 0; i < count && rc == 0; i++) {
        if (i > 0)
            rc = sb_putc(sb, '&');
        if (rc == 0)
            rc = sb_puts(sb, params[i].name);
        if (rc == 0)
            rc = sb_putc(sb, '=');
        if (rc == 0)
            rc = sb_puts(sb, params[i].value);
    }
    for (size_t i = 0; i < count; i++) {
        free(params[i].name);
        free(params[i].value);
    }
    free(params);
    return rc;
}

/* ---- canonical headers ------------------------------------------------- */

typedef struct hentry {
    char *name;   /* lower-cased */
    size_t index; /* position in the request: keeps same-name order */
    const char *value;
} hentry;

static int hentry_cmp(const void *a, const void *b)
{
    const hentry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c != 0)
        return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* A header name is an RFC 9110 token: visible ASCII but separators. */
static int is_token_char(unsigned char c)
{
    return c > 32 && c < 127 && strchr("\"(),/:;<=>?@[\\]{}", c) == NULL;
}

/* Value trimmed, every run of white space (folded lines too) one ' '. */
static int put_header_value(sbuf *sb, const char *v)
{
    int rc = 0, pending = 0;
    while (is_ws(*v))
        v++;
    for (; *v != '\0' && rc == 0; v++) {
        if (is_ws(*v)) {
            pending = 1;
            continue;
        }
        if (pending)
            rc = sb_putc(sb, ' ');
        pending = 0;
        if (rc == 0)
            rc = sb_putc(sb, *v);
    }
    return rc;
}

/* Canonical headers (each "name:value\n") into creq and the signed header
 * list ("a;b;c") into signed_headers. */
static int put_canonical_headers(sbuf *creq, sbuf *signed_headers,
                                 const cnx__sigv4_request *req)
{
    int rc = sb_put(signed_headers, "", 0);
    size_t n = req->nheaders;
    if (n == 0 || rc < 0)
        return rc;
    hentry *h = calloc(n, sizeof(*h));
    if (h == NULL)
        return cnx_error_set(CNX_ENOMEM, 1, "sigv4: out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *name = req->headers[i].name;
        assert(name != NULL && req->headers[i].value != NULL);
        size_t len = strlen(name);
        if (len == 0 || len > 256) {
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "sigv4: header %zu has an empty or over-long "
                               "name",
                               i);
            break;
        }
        h[i].name = malloc(len + 1);
        if (h[i].name == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 1, "sigv4: out of memory");
            break;
        }
        for (size_t k = 0; k <= len; k++) {
            unsigned char c = (unsigned char)name[k];
            if (k < len && !is_token_char(c)) {
                rc = cnx_error_set(CNX_EINVAL, 0,
                                   "sigv4: header %zu has a bad name "
                                   "character (0x%02x)",
                                   i, c);
                break;
            }
            h[i].name[k] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : (char)c;
        }
        h[i].index = i;
        h[i].value = req->headers[i].value;
    }
    if (rc == 0)
        qsort(h, n, sizeof(*h), hentry_cmp);
    for (size_t i = 0; i < n && rc == 0; i++) {
        int same = i > 0 && strcmp(h[i].name, h[i - 1].name) == 0;
        if (same) {
            rc = sb_putc(creq, ',');
        } else {
            if (i > 0)
                rc = sb_putc(creq, '\n');
            if (rc == 0 && i > 0)
                rc = sb_putc(signed_headers, ';');
            if (rc == 0)
                rc = sb_puts(signed_headers, h[i].name);
            if (rc == 0)
                rc = sb_puts(creq, h[i].name);
            if (rc == 0)
                rc = sb_putc(creq, ':');
        }
        if (rc == 0)
            rc = put_header_value(creq, h[i].value);
    }
    if (rc == 0)
        rc = sb_putc(creq, '\n');
    for (size_t i = 0; i < n; i++)
        free(h[i].name);
    free(h);
    return rc;
}

/* ---- task 1: canonical request ----------------------------------------- */

/* 64 lower-case hex digits, or a literal such as UNSIGNED-PAYLOAD or
 * STREAMING-AWS4-HMAC-SHA256-PAYLOAD (upper case, digits, '-', and the
 * word PAYLOAD, so that an upper-case hex digest is not taken for one). */
static int payload_hash_ok(const char *s)
{
    size_t n = strlen(s);
    int hex = n == 64, literal = n > 0 && n < 64;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
        literal = literal && ((c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '-');
    }
    return hex || (literal && strstr(s, "PAYLOAD") != NULL);
}

static int method_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 32)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_token_char((unsigned char)s[i]))
            return 0;
    return 1;
}

/* The canonical request into creq; the signed header list into signed. */
static int build_canonical(const cnx__sigv4_request *req, sbuf *creq,
                           sbuf *signed_headers)
{
    int rc;
    assert(req != NULL && req->method != NULL && req->path != NULL);
    assert(req->payload_hash != NULL);
    assert(req->nheaders == 0 || req->headers != NULL);
    if (!method_ok(req->method))
        return cnx_error_set(CNX_EINVAL, 0, "sigv4: bad HTTP method");
    if (!payload_hash_ok(req->payload_hash))
        return cnx_error_set(CNX_EINVAL, 0,
                             "sigv4: payload hash is neither 64 lower-case "
                             "hex digits nor a literal like "
                             "UNSIGNED-PAYLOAD");
    rc = sb_puts(creq, req->method);
    if (rc == 0)
        rc = sb_putc(creq, '\n');
    if (rc == 0)
        rc = put_canonical_uri(creq, req->path, req->normalize_path);
    if (rc == 0)
        rc = sb_putc(creq, '\n');
    if (rc == 0)
        rc = put_canonical_query(creq, req->query ? req->query : "");
    if (rc == 0)
        rc = sb_putc(creq, '\n');
    if (rc == 0)
        rc = put_canonical_headers(creq, signed_headers, req);
    if (rc == 0)
        rc = sb_putc(creq, '\n');
    if (rc == 0)
        rc = sb_put(creq, signed_headers->data, signed_headers->len);
    if (rc == 0)
        rc = sb_putc(creq, '\n');
    if (rc == 0)
        rc = sb_puts(creq, req->payload_hash);
    return rc;
}

int cnx__sigv4_canonical_request(const cnx__sigv4_request *req, char **out)
{
    sbuf creq = {0}, signed_headers = {0};
    assert(out != NULL);
    *out = NULL;
    int rc = build_canonical(req, &creq, &signed_headers);
    sb_dispose(&signed_headers);
    if (rc < 0) {
        sb_dispose(&creq);
        return rc;
    }
    *out = creq.data;
    return 0;
}

/* ---- task 2: string to sign -------------------------------------------- */

static int amz_date_ok(const char *d)
{
    if (strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z')
        return 0;
    for (int i = 0; i < 15; i++)
        if (i != 8 && !(d[i] >= '0' && d[i] <= '9'))
            return 0;
    return 1;
}

/* Region and service names go into the credential scope, which '/' and ','
 * delimit: allow only what real names use. */
static int scope_part_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!is_unreserved(c) || c == '~')
            return 0;
    }
    return 1;
}

static void hex_encode(const uint8_t *raw, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex_lower[raw[i] >> 4];
        out[2 * i + 1] = hex_lower[raw[i] & 15];
    }
    out[2 * n] = '\0';
}

static int check_scope(const char *amz_date, const char *region,
                       const char *service)
{
    assert(amz_date != NULL && region != NULL && service != NULL);
    if (!amz_date_ok(amz_date))
        return cnx_error_set(CNX_EINVAL, 0,
                             "sigv4: date is not YYYYMMDDTHHMMSSZ");
    if (!scope_part_ok(region))
        return cnx_error_set(CNX_EINVAL, 0, "sigv4: bad region name");
    if (!scope_part_ok(service))
        return cnx_error_set(CNX_EINVAL, 0, "sigv4: bad service name");
    return 0;
}

/* String to sign from a finished canonical request. */
static int build_string_to_sign(const sbuf *creq, const char *amz_date,
                                const char *region, const char *service,
                                sbuf *sts)
{
    uint8_t digest[32];
    char hex[65];
    cnx_sha256(creq->data, creq->len, digest);
    hex_encode(digest, sizeof(digest), hex);
    int rc = sb_puts(sts, "AWS4-HMAC-SHA256\n");
    if (rc == 0)
        rc = sb_puts(sts, amz_date);
    if (rc == 0)
        rc = sb_putc(sts, '\n');
    if (rc == 0)
        rc = sb_put(sts, amz_date, 8);
    if (rc == 0)
        rc = sb_putc(sts, '/');
    if (rc == 0)
        rc = sb_puts(sts, region);
    if (rc == 0)
        rc = sb_putc(sts, '/');
    if (rc == 0)
        rc = sb_puts(sts, service);
    if (rc == 0)
        rc = sb_puts(sts, "/aws4_request\n");
    if (rc == 0)
        rc = sb_puts(sts, hex);
    return rc;
}

int cnx__sigv4_string_to_sign(const cnx__sigv4_request *req,
                              const char *amz_date, const char *region,
                              const char *service, char **out)
{
    sbuf creq = {0}, signed_headers = {0}, sts = {0};
    assert(out != NULL);
    *out = NULL;
    int rc = check_scope(amz_date, region, service);
    if (rc == 0)
        rc = build_canonical(req, &creq, &signed_headers);
    if (rc == 0)
        rc = build_string_to_sign(&creq, amz_date, region, service, &sts);
    sb_dispose(&creq);
    sb_dispose(&signed_headers);
    if (rc < 0) {
        sb_dispose(&sts);
        return rc;
    }
    *out = sts.data;
    return 0;
}

/* ---- task 3 and 4: signing key, signature, Authorization ---------------- */

static void hmac_sha256(const void *key, size_t key_len, const void *msg,
                        size_t msg_len, uint8_t out[32])
{
    unsigned int n = 32;
    assert(key_len <= INT32_MAX);
    /* HMAC fails only when OpenSSL cannot allocate its context. */
    if (HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, out, &n) == NULL)
        abort();
    assert(n == 32);
}

/* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region),
 * service), "aws4_request"). */
static int signing_key(const char *secret_key, const char *amz_date,
                       const char *region, const char *service, uint8_t out[32])
{
    char k_secret[4 + 256];
    uint8_t k_date[32], k_region[32], k_service[32];
    size_t n = strlen(secret_key);
    if (n == 0 || n > 256)
        return cnx_error_set(CNX_EINVAL, 0,
                             "sigv4: secret key is empty or over-long");
    memcpy(k_secret, "AWS4", 4);
    memcpy(k_secret + 4, secret_key, n);
    hmac_sha256(k_secret, 4 + n, amz_date, 8, k_date);
    hmac_sha256(k_date, 32, region, strlen(region), k_region);
    hmac_sha256(k_region, 32, service, strlen(service), k_service);
    hmac_sha256(k_service, 32, "aws4_request", 12, out);
    OPENSSL_cleanse(k_secret, sizeof(k_secret));
    OPENSSL_cleanse(k_date, sizeof(k_date));
    OPENSSL_cleanse(k_region, sizeof(k_region));
    OPENSSL_cleanse(k_service, sizeof(k_service));
    return 0;
}

static int access_key_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_token_char((unsigned char)s[i]) || s[i] == ',')
            return 0;
    return 1;
}

int cnx__sigv4_authorization(const cnx__sigv4_request *req,
                             const char *access_key, const char *secret_key,
                             const char *amz_date, const char *region,
                             const char *service, char out[CNX_SIGV4_AUTH_MAX])
{
    sbuf creq = {0}, signed_headers = {0}, sts = {0};
    uint8_t key[32], sig[32];
    char sig_hex[65];
    assert(access_key != NULL && secret_key != NULL && out != NULL);
    out[0] = '\0';
    int rc = check_scope(amz_date, region, service);
    if (rc == 0 && !access_key_ok(access_key))
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "sigv4: access key is empty, over-long or has "
                           "characters a header cannot carry");
    if (rc == 0)
        rc = build_canonical(req, &creq, &signed_headers);
    if (rc == 0)
        rc = build_string_to_sign(&creq, amz_date, region, service, &sts);
    if (rc == 0)
        rc = signing_key(secret_key, amz_date, region, service, key);
    if (rc == 0) {
        hmac_sha256(key, sizeof(key), sts.data, sts.len, sig);
        OPENSSL_cleanse(key, sizeof(key));
        hex_encode(sig, sizeof(sig), sig_hex);
        int n = snprintf(out, CNX_SIGV4_AUTH_MAX,
                         "AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/%s/"
                         "aws4_request, SignedHeaders=%s, Signature=%s",
                         access_key, amz_date, region, service,
                         signed_headers.data, sig_hex);
        if (n < 0 || n >= CNX_SIGV4_AUTH_MAX) {
            out[0] = '\0';
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "sigv4: Authorization header longer than %d "
                               "bytes (too many signed headers)",
                               CNX_SIGV4_AUTH_MAX - 1);
        }
    }
    sb_dispose(&creq);
    sb_dispose(&signed_headers);
    sb_dispose(&sts);
    return rc;
}

void cnx__sigv4_hex_sha256(const void *data, size_t len, char out[65])
{
    uint8_t digest[32];
    assert(data != NULL || len == 0);
    cnx_sha256(len ? data : "", len, digest);
    hex_encode(digest, sizeof(digest), out);
}
