/*
 * http.c - the libcurl transport of the remote stores: one request in,
 * one judged answer out, transient failures retried inside.
 *
 * Each thread keeps one easy handle (created on first use, cleaned up when
 * the thread exits), so a thread reuses its own keep-alive connections
 * from request to request. All handles share one CURLSH holding the DNS
 * cache and the TLS session cache, with a mutex per kind of data. The
 * connection cache is deliberately NOT shared: libcurl documents sharing
 * connections between concurrent threads as unsupported (KNOWN_BUGS "A
 * shared connection cache is not thread-safe", curl#4915, curl#9404), and
 * a crash in a worker costs more than a TCP+TLS handshake per thread.
 * Invariant: a request either returns 0 with a complete answer (a 2xx body
 * never shorter than its Content-Length) or sets one error line; bodies
 * are capped (max_body for 2xx, CNX_HTTP_ERROR_BODY_MAX for the rest).
 * Load: one call per store operation, objects of kilobytes to ~100 MB.
 * Threading: any thread; process-wide state is set up once (pthread_once)
 * and the counters are atomics.
 */
#include "http_int.h"

#include <assert.h>
#include <curl/curl.h>
#include <errno.h>
#include <expat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cnx/error.h"
#include "store_int.h"

/* ---- process-wide state ----------------------------------------------- */

static pthread_once_t http_once = PTHREAD_ONCE_INIT;
static int http_init_rc;        /* 0 or the CNX_E* of a failed init */
static char http_init_msg[256]; /* its message */
static CURLSH *http_share;
static pthread_mutex_t http_locks[CURL_LOCK_DATA_LAST];
static pthread_key_t http_easy_key;
static long http_timeout_s = 30;
static long http_retries = 6;
static long http_backoff_ms = 100;

/* attempts sent (retries included), retries, body bytes each way */
static _Atomic uint64_t stat_requests, stat_retries;
static _Atomic uint64_t stat_sent, stat_received;

static void share_lock(CURL *easy, curl_lock_data data, curl_lock_access access,
                       void *ctx)
{
    (void)easy;
    (void)access;
    (void)ctx;
    assert(data >= 0 && data < CURL_LOCK_DATA_LAST);
    pthread_mutex_lock(&http_locks[data]);
}

static void share_unlock(CURL *easy, curl_lock_data data, void *ctx)
{
    (void)easy;
    (void)ctx;
    assert(data >= 0 && data < CURL_LOCK_DATA_LAST);
    pthread_mutex_unlock(&http_locks[data]);
}

static void easy_destroy(void *easy)
{
    curl_easy_cleanup(easy);
}

/* An integer setting from the environment, or def when unset. */
static int env_setting(const char *name, long lo, long hi, long *value)
{
    const char *text = getenv(name);
    char *end;
    long v;

    if (text == NULL || text[0] == '\0')
        return 0;
    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        snprintf(http_init_msg, sizeof(http_init_msg),
                 "%s='%.40s': not an integer in [%ld, %ld]", name, text, lo,
                 hi);
        return CNX_EINVAL;
    }
    *value = v;
    return 0;
}

static void http_setup(void)
{
    int rc;

    rc = env_setting("CNX_STORE_TIMEOUT_S", 1, 3600, &http_timeout_s);
    if (rc == 0)
        rc = env_setting("CNX_STORE_RETRIES", 0, 100, &http_retries);
    if (rc == 0)
        rc = env_setting("CNX_STORE_BACKOFF_MS", 0, 60000, &http_backoff_ms);
    if (rc != 0) {
        http_init_rc = rc;
        return;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        http_init_rc = CNX_EIO;
        snprintf(http_init_msg, sizeof(http_init_msg),
                 "libcurl global initialisation failed");
        return;
    }
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&http_locks[i], NULL);
    http_share = curl_share_init();
    if (http_share == NULL ||
        curl_share_setopt(http_share, CURLSHOPT_LOCKFUNC, share_lock) ||
        curl_share_setopt(http_share, CURLSHOPT_UNLOCKFUNC, share_unlock) ||
        curl_share_setopt(http_share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) ||
        curl_share_setopt(http_share, CURLSHOPT_SHARE,
                          CURL_LOCK_DATA_SSL_SESSION)) {
        http_init_rc = CNX_ENOMEM;
        snprintf(http_init_msg, sizeof(http_init_msg),
                 "libcurl share handle could not be set up");
        return;
    }
    if (pthread_key_create(&http_easy_key, easy_destroy) != 0) {
        http_init_rc = CNX_ENOMEM;
        snprintf(http_init_msg, sizeof(http_init_msg),
                 "no thread-specific key for the HTTP handles");
    }
}

static int http_init(void)
{
    pthread_once(&http_once, http_setup);
    if (http_init_rc != 0)
        return cnx_error_set(http_init_rc, 0, "store transport: %s",
                             http_init_msg);
    return 0;
}

/* This thread's easy handle, created on first use. */
static CURL *thread_easy(void)
{
    CURL *easy = pthread_getspecific(http_easy_key);
    if (easy != NULL)
        return easy;
    easy = curl_easy_init();
    if (easy == NULL)
        return NULL;
    if (pthread_setspecific(http_easy_key, easy) != 0) {
        curl_easy_cleanup(easy);
        return NULL;
    }
    return easy;
}

void cnx__http_stats(uint64_t *requests, uint64_t *retries, uint64_t *bytes_in,
                     uint64_t *bytes_out)
{
    *requests = atomic_load(&stat_requests);
    *retries = atomic_load(&stat_retries);
    *bytes_in = atomic_load(&stat_received);
    *bytes_out = atomic_load(&stat_sent);
}

/* ---- one attempt ------------------------------------------------------ */

typedef struct xfer {
    const cnx__http_req *req;
    cnx__http_resp *resp;
    CURL *easy;
    size_t sent; /* read position in req->body */
    size_t cap;  /* allocated bytes of resp->body */
    int toobig;  /* a 2xx body went over max_body */
    int nomem;
    int abandoned; /* the progress callback stopped a write */
} xfer;

static void copy_value(char *dst, size_t cap, const char *v, size_t n)
{
    if (n >= cap)
        n = 0; /* over-long values are treated as absent, never cut */
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static void response_reset_headers(cnx__http_resp *resp)
{
    resp->content_length = -1;
    resp->etag[0] = resp->generation[0] = resp->content_range[0] = '\0';
    resp->checksum_sha256[0] = resp->meta_sha256[0] = '\0';
    resp->bucket_region[0] = '\0';
}

static size_t on_header(char *line, size_t size, size_t n, void *ctx)
{
    xfer *x = ctx;
    cnx__http_resp *resp = x->resp;
    size_t len = size * n, name_len;
    const char *colon, *v, *end;

    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        /* a new answer (after a redirect or an interim 1xx) */
        response_reset_headers(resp);
        return len;
    }
    colon = memchr(line, ':', len);
    if (colon == NULL)
        return len;
    name_len = (size_t)(colon - line);
    v = colon + 1;
    end = line + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' ||
                       end[-1] == '\t'))
        end--;
#define IS(h) (name_len == sizeof(h) - 1 && strncasecmp(line, h, name_len) == 0)
    if (IS("etag")) {
        copy_value(resp->etag, sizeof(resp->etag), v, (size_t)(end - v));
    } else if (IS("x-goog-generation")) {
        copy_value(resp->generation, sizeof(resp->generation), v,
                   (size_t)(end - v));
    } else if (IS("content-range")) {
        copy_value(resp->content_range, sizeof(resp->content_range), v,
                   (size_t)(end - v));
    } else if (IS("x-amz-checksum-sha256")) {
        copy_value(resp->checksum_sha256, sizeof(resp->checksum_sha256), v,
                   (size_t)(end - v));
    } else if (IS("x-amz-meta-cnx-sha256") || IS("x-goog-meta-cnx-sha256")) {
        copy_value(resp->meta_sha256, sizeof(resp->meta_sha256), v,
                   (size_t)(end - v));
    } else if (IS("x-amz-bucket-region")) {
        copy_value(resp->bucket_region, sizeof(resp->bucket_region), v,
                   (size_t)(end - v));
    } else if (IS("content-length")) {
        int64_t cl = 0;
        const char *p = v;
        if (p == end)
            cl = -1;
        for (; p < end && cl >= 0; p++) {
            if (*p < '0' || *p > '9' || cl > (INT64_MAX - 9) / 10)
                cl = -1;
            else
                cl = cl * 10 + (*p - '0');
        }
        resp->content_length = cl;
    }
#undef IS
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    xfer *x = ctx;
    cnx__http_resp *resp = x->resp;
    size_t len = size * n, keep = len, limit, need;
    long status = 0;

    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) {
        limit = x->req->max_body;
        if ((resp->content_length >= 0 &&
             (uint64_t)resp->content_length > (uint64_t)limit) ||
            len > limit - resp->body_len) {
            x->toobig = 1;
            return 0; /* CURLE_WRITE_ERROR */
        }
    } else {
        limit = CNX_HTTP_ERROR_BODY_MAX;
        if (keep > limit - resp->body_len)
            keep = limit - resp->body_len; /* keep the head, drop the rest */
    }
    need = resp->body_len + keep + 1;
    if (need > x->cap) {
        size_t ncap = x->cap ? x->cap : 16384;
        uint8_t *grown;
        if (resp->content_length >= 0 && x->cap == 0 &&
            (uint64_t)resp->content_length < (uint64_t)limit)
            ncap = (size_t)resp->content_length + 1;
        while (ncap < need)
            ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
        if (ncap > limit + 1)
            ncap = limit + 1;
        if (ncap < need)
            ncap = need;
        grown = realloc(resp->body, ncap);
        if (grown == NULL) {
            x->nomem = 1;
            return 0;
        }
        resp->body = grown;
        x->cap = ncap;
    }
    memcpy(resp->body + resp->body_len, data, keep);
    resp->body_len += keep;
    return len;
}

static size_t on_read(char *buf, size_t size, size_t n, void *ctx)
{
    xfer *x = ctx;
    size_t room = size * n, left = x->req->body_len - x->sent;
    size_t k = room < left ? room : left;
    if (k > 0)
        memcpy(buf, (const uint8_t *)x->req->body + x->sent, k);
    x->sent += k;
    return k;
}

static int on_seek(void *ctx, curl_off_t offset, int origin)
{
    xfer *x = ctx;
    if (origin != SEEK_SET || offset < 0 ||
        (uint64_t)offset > (uint64_t)x->req->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    x->sent = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    xfer *x = ctx;
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    if (cnx__store_writes_abandoned()) {
        x->abandoned = 1;
        return 1; /* CURLE_ABORTED_BY_CALLBACK */
    }
    return 0;
}

static CURLcode perform_once(CURL *easy, xfer *x, struct curl_slist *headers,
                             char errbuf[CURL_ERROR_SIZE])
{
    const cnx__http_req *req = x->req;
    char range[64];

    curl_easy_reset(easy);
    errbuf[0] = '\0';
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy, CURLOPT_URL, req->url);
    curl_easy_setopt(easy, CURLOPT_SHARE, http_share);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_USERAGENT,
                     "cnx/"
                     "0.1 libcurl");
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT, http_timeout_s);
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, http_timeout_s);
    {
        /* The CA bundle every AWS tool honours (a proxy or private CA). */
        const char *ca = getenv("AWS_CA_BUNDLE");
        if (ca != NULL && ca[0] != '\0')
            curl_easy_setopt(easy, CURLOPT_CAINFO, ca);
    }
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, x);
    if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
    } else if (strcmp(req->method, "PUT") == 0) {
        curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(easy, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(easy, CURLOPT_READDATA, x);
        curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(easy, CURLOPT_SEEKDATA, x);
        curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE,
                         (curl_off_t)req->body_len);
    } else {
        assert(strcmp(req->method, "GET") == 0);
        curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    }
    if (req->range) {
        assert(req->range_first <= req->range_last);
        snprintf(range, sizeof(range), "%llu-%llu",
                 (unsigned long long)req->range_first,
                 (unsigned long long)req->range_last);
        curl_easy_setopt(easy, CURLOPT_RANGE, range);
    }
    if (req->flags & CNX_HTTP_FOLLOW) {
        curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(easy, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    }
    if (req->flags & CNX_HTTP_WRITE) {
        curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(easy, CURLOPT_XFERINFODATA, x);
    }
    return curl_easy_perform(easy);
}

/* ---- XML error bodies --------------------------------------------------- */

/*
 * S3 and the GCS XML API answer errors with
 * <Error><Code>..</Code><Message>..</Message>...</Error>. Parsed with
 * expat (Debian's libexpat: small, well maintained, already in the
 * curl/git family of dependencies on every machine we build on), which
 * loads no external entities and caps entity expansion.
 */
typedef struct err_parse {
    cnx__http_resp *resp;
    int depth;
    int root_ok; /* the root element is <Error> */
    char *field; /* resp->code or resp->message while inside one */
    size_t cap;
} err_parse;

static void XMLCALL err_start(void *ctx, const XML_Char *name,
                              const XML_Char **attrs)
{
    err_parse *p = ctx;
    (void)attrs;
    p->depth++;
    if (p->depth == 1)
        p->root_ok = strcmp(name, "Error") == 0;
    if (p->depth != 2 || !p->root_ok)
        return;
    if (strcmp(name, "Code") == 0) {
        p->field = p->resp->code;
        p->cap = sizeof(p->resp->code);
    } else if (strcmp(name, "Message") == 0) {
        p->field = p->resp->message;
        p->cap = sizeof(p->resp->message);
    }
    if (p->field != NULL)
        p->field[0] = '\0';
}

static void XMLCALL err_end(void *ctx, const XML_Char *name)
{
    err_parse *p = ctx;
    (void)name;
    if (p->depth == 2)
        p->field = NULL;
    p->depth--;
}

/* Text of <Code> or <Message>, cut at the field's size. */
static void XMLCALL err_text(void *ctx, const XML_Char *s, int len)
{
    err_parse *p = ctx;
    size_t have, k;
    if (p->field == NULL || len <= 0)
        return;
    have = strlen(p->field);
    assert(have < p->cap);
    k = (size_t)len;
    if (k > p->cap - 1 - have)
        k = p->cap - 1 - have;
    memcpy(p->field + have, s, k);
    p->field[have + k] = '\0';
}

/* Replace control characters so that a message stays one line. */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = ' ';
}

static void parse_error_body(cnx__http_resp *resp)
{
    err_parse c;
    XML_Parser parser;
    size_t i = 0;

    resp->code[0] = resp->message[0] = '\0';
    if (resp->body == NULL || resp->body_len == 0)
        return;
    while (i < resp->body_len &&
           (resp->body[i] == ' ' || resp->body[i] == '\n' ||
            resp->body[i] == '\r' || resp->body[i] == '\t'))
        i++;
    if (i == resp->body_len || resp->body[i] != '<')
        return;
    parser = XML_ParserCreate(NULL);
    if (parser == NULL)
        return;
    memset(&c, 0, sizeof(c));
    c.resp = resp;
    XML_SetUserData(parser, &c);
    XML_SetElementHandler(parser, err_start, err_end);
    XML_SetCharacterDataHandler(parser, err_text);
    /* a malformed or cut body still yields what was read before it */
    (void)XML_Parse(parser, (const char *)resp->body, (int)resp->body_len, 1);
    XML_ParserFree(parser);
    one_line(resp->code);
    one_line(resp->message);
}

/* ---- the request loop --------------------------------------------------- */

static int curl_fatal(CURLcode cc)
{
    switch (cc) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION:
    case CURLE_LOGIN_DENIED:
        return 1;
    default:
        return 0;
    }
}

static int status_retriable(const cnx__http_resp *resp)
{
    if (resp->status >= 500 || resp->status == 429 || resp->status == 408)
        return 1;
    /* S3 names throttling and idle-socket timeouts in the body */
    return strcmp(resp->code, "SlowDown") == 0 ||
           strcmp(resp->code, "RequestTimeout") == 0 ||
           strcmp(resp->code, "Throttling") == 0 ||
           /* the body was damaged on the way: send it again */
           strcmp(resp->code, "BadDigest") == 0 ||
           strcmp(resp->code, "XAmzContentSHA256Mismatch") == 0;
}

/* Per-thread xorshift for the jitter (quality is irrelevant here). */
static uint64_t jitter_next(void)
{
    static _Thread_local uint64_t state;
    if (state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                (uint64_t)(uintptr_t)&state;
        if (state == 0)
            state = 0x9e3779b97f4a7c15ull;
    }
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

/*
 * Sleep before retry number `retry` (1, 2, ...): the ceiling doubles from
 * the base up to 50 times the base; the sleep is half the ceiling plus a
 * random part of the other half, so that many workers that failed together
 * do not come back together.
 */
static void backoff(int retry)
{
    long ceiling = http_backoff_ms, cap = http_backoff_ms * 50, ms;
    struct timespec ts;

    if (http_backoff_ms == 0)
        return;
    for (int i = 1; i < retry && ceiling < cap; i++)
        ceiling *= 2;
    if (ceiling > cap)
        ceiling = cap;
    ms = ceiling / 2 + (long)(jitter_next() % (uint64_t)(ceiling / 2 + 1));
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void cnx__http_resp_dispose(cnx__http_resp *resp)
{
    if (resp == NULL)
        return;
    free(resp->body);
    memset(resp, 0, sizeof(*resp));
    resp->content_length = -1;
}

int cnx__http_perform(const cnx__http_req *req, cnx__http_resp *resp)
{
    struct curl_slist *headers = NULL, *grown;
    char errbuf[CURL_ERROR_SIZE], reason[512];
    CURL *easy;
    int rc;

    assert(req != NULL && req->method != NULL && req->url != NULL);
    assert(req->what != NULL && resp != NULL);
    assert(req->nheaders <= CNX_HTTP_HEADERS_MAX);
    assert(req->body != NULL || req->body_len == 0);
    memset(resp, 0, sizeof(*resp));
    resp->content_length = -1;

    rc = http_init();
    if (rc != 0)
        return rc;
    easy = thread_easy();
    if (easy == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "%s %s: no libcurl handle",
                             req->method, req->what);
    for (size_t i = 0; i < req->nheaders; i++) {
        assert(strchr(req->headers[i], ':') != NULL);
        if (strlen(req->headers[i]) >= CNX_HTTP_HEADER_MAX) {
            curl_slist_free_all(headers);
            return cnx_error_set(CNX_EINVAL, 0,
                                 "%s %s: header over %d "
                                 "bytes",
                                 req->method, req->what, CNX_HTTP_HEADER_MAX);
        }
        grown = curl_slist_append(headers, req->headers[i]);
        if (grown == NULL)
            goto nomem;
        headers = grown;
    }
    /* No "Expect: 100-continue": one round trip less per put, and some
     * test servers stall on it. */
    grown = curl_slist_append(headers, "Expect:");
    if (grown == NULL)
        goto nomem;
    headers = grown;

    reason[0] = '\0';
    for (long attempt = 0;; attempt++) {
        xfer x;
        CURLcode cc;
        curl_off_t up = 0, down = 0;

        if (attempt > 0) {
            atomic_fetch_add(&stat_retries, 1);
            backoff((int)attempt);
        }
        if ((req->flags & CNX_HTTP_WRITE) && cnx__store_writes_abandoned()) {
            rc = cnx_error_set(CNX_EIO, 1,
                               "%s %s: writes abandoned: the "
                               "worker is stopping",
                               req->method, req->what);
            break;
        }
        free(resp->body);
        memset(resp, 0, sizeof(*resp));
        resp->content_length = -1;
        memset(&x, 0, sizeof(x));
        x.req = req;
        x.resp = resp;
        x.easy = easy;
        atomic_fetch_add(&stat_requests, 1);
        cc = perform_once(easy, &x, headers, errbuf);
        curl_easy_getinfo(easy, CURLINFO_SIZE_UPLOAD_T, &up);
        curl_easy_getinfo(easy, CURLINFO_SIZE_DOWNLOAD_T, &down);
        atomic_fetch_add(&stat_sent, (uint64_t)(up > 0 ? up : 0));
        atomic_fetch_add(&stat_received, (uint64_t)(down > 0 ? down : 0));
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp->status);

        if (cc != CURLE_OK) {
            if (x.abandoned) {
                rc = cnx_error_set(CNX_EIO, 1,
                                   "%s %s: writes abandoned "
                                   "during the transfer",
                                   req->method, req->what);
                break;
            }
            if (x.toobig) {
                rc = cnx_error_set(CNX_ETOOBIG, 0,
                                   "%s %s: answer over the %zu-byte limit",
                                   req->method, req->what, req->max_body);
                break;
            }
            if (x.nomem || cc == CURLE_OUT_OF_MEMORY) {
                rc = cnx_error_set(CNX_ENOMEM, 0, "%s %s: out of memory",
                                   req->method, req->what);
                break;
            }
            snprintf(reason, sizeof(reason), "%s%s%s", curl_easy_strerror(cc),
                     errbuf[0] ? ": " : "", errbuf);
            one_line(reason);
            if (curl_fatal(cc)) {
                rc = cnx_error_set(CNX_EIO, 0, "%s %s: %s", req->method,
                                   req->what, reason);
                break;
            }
        } else {
            if (resp->status >= 300)
                parse_error_body(resp);
            if (status_retriable(resp)) {
                snprintf(reason, sizeof(reason), "%ld%s%s%s%s", resp->status,
                         resp->code[0] ? " " : "", resp->code,
                         resp->message[0] ? ": " : "", resp->message);
            } else if (resp->status >= 200 && resp->status < 300 &&
                       strcmp(req->method, "HEAD") != 0 &&
                       resp->content_length >= 0 &&
                       (uint64_t)resp->body_len <
                           (uint64_t)resp->content_length) {
                snprintf(reason, sizeof(reason),
                         "truncated answer: %zu of %lld bytes", resp->body_len,
                         (long long)resp->content_length);
            } else {
                /* an answer for the caller to judge */
                if (resp->body == NULL) {
                    resp->body = malloc(1);
                    if (resp->body == NULL)
                        goto nomem;
                }
                resp->body[resp->body_len] = '\0';
                curl_slist_free_all(headers);
                return 0;
            }
        }
        if (attempt >= http_retries) {
            rc = cnx_error_set(CNX_EIO, 1,
                               "%s %s: %s (gave up after %ld "
                               "attempts)",
                               req->method, req->what, reason, attempt + 1);
            break;
        }
    }
    curl_slist_free_all(headers);
    cnx__http_resp_dispose(resp);
    return rc;
nomem:
    curl_slist_free_all(headers);
    cnx__http_resp_dispose(resp);
    return cnx_error_set(CNX_ENOMEM, 0, "%s %s: out of memory", req->method,
                         req->what);
}

int cnx__http_fail(const cnx__http_req *req, const cnx__http_resp *resp)
{
    int code = resp->status == 404 ? CNX_ENOTFOUND : CNX_EIO;
    const char *hint = "";
    char region_hint[128];

    if (resp->bucket_region[0] != '\0' &&
        (resp->status == 301 || resp->status == 307 || resp->status == 400)) {
        snprintf(region_hint, sizeof(region_hint),
                 " (the bucket is in %s: set AWS_REGION)", resp->bucket_region);
        hint = region_hint;
    } else if (resp->status == 403 && resp->code[0] == '\0' &&
               strcmp(req->method, "HEAD") == 0) {
        hint = " (a HEAD answer has no body; S3 answers 403 for a missing "
               "key when the credentials may not list the bucket)";
    }
    if (resp->code[0] != '\0' && resp->message[0] != '\0')
        return cnx_error_set(code, 0, "%s %s: %ld %s: %s%s", req->method,
                             req->what, resp->status, resp->code, resp->message,
                             hint);
    if (resp->code[0] != '\0')
        return cnx_error_set(code, 0, "%s %s: %ld %s%s", req->method, req->what,
                             resp->status, resp->code, hint);
    return cnx_error_set(code, 0, "%s %s: HTTP %ld%s", req->method, req->what,
                         resp->status, hint);
}

/* "bytes A-B/T" -> A, or -1. */
static long long range_start(const char *content_range)
{
    char *end;
    long long a;
    if (strncasecmp(content_range, "bytes ", 6) != 0)
        return -1;
    a = strtoll(content_range + 6, &end, 10);
    return (end == content_range + 6 || *end != '-') ? -1 : a;
}

int cnx__http_range_result(const cnx__http_req *req, cnx__http_resp *resp,
                           uint64_t offset, size_t len, uint8_t **data,
                           size_t *got)
{
    *data = NULL;
    *got = 0;
    assert(len > 0);
    if (resp->status == 206) {
        if (range_start(resp->content_range) != (long long)offset ||
            resp->body_len > len)
            return cnx_error_set(CNX_EIO, 1,
                                 "%s %s: asked bytes %llu-%llu, "
                                 "got Content-Range '%s' and %zu bytes",
                                 req->method, req->what,
                                 (unsigned long long)offset,
                                 (unsigned long long)(offset + len - 1),
                                 resp->content_range, resp->body_len);
    } else if (resp->status == 200) {
        /* the server ignored the Range: cut the slice here */
        size_t from = offset < resp->body_len ? (size_t)offset : resp->body_len;
        size_t k = resp->body_len - from < len ? resp->body_len - from : len;
        memmove(resp->body, resp->body + from, k);
        resp->body[k] = '\0';
        resp->body_len = k;
    } else if (resp->status == 416) {
        resp->body_len = 0; /* the object ends before offset */
        resp->body[0] = '\0';
    } else {
        return cnx__http_fail(req, resp);
    }
    *data = resp->body;
    *got = resp->body_len;
    resp->body = NULL;
    resp->body_len = 0;
    return 0;
}
