/*
 * http_int.h - the libcurl transport of the remote stores (store_s3.c,
 * store_http.c), inside libcnx only.
 *
 * One call makes one logical request: it retries transient failures itself
 * (5xx, 429, SlowDown, RequestTimeout, connection resets, empty replies,
 * timeouts, truncated bodies) with capped exponential backoff and jitter,
 * and hands every other answer -- 2xx, 3xx, 4xx -- to the caller, who knows
 * what a 404 or a 412 means for its operation. Settings come from the
 * environment, read once per process:
 *   CNX_STORE_TIMEOUT_S   connect timeout, and the time a transfer may
 *                         stay under 1 KiB/s before it is abandoned (30)
 *   CNX_STORE_RETRIES     retries after the first attempt (6)
 *   CNX_STORE_BACKOFF_MS  base of the backoff (100; the cap is 50 times
 *                         the base, 5 s by default)
 * Thread-safety: every function may be called from any thread; each thread
 * uses its own easy handle (and so its own connections), and all threads
 * share one DNS cache and one TLS session cache.
 */
#ifndef CNX_HTTP_INT_H
#define CNX_HTTP_INT_H

#include <stddef.h>
#include <stdint.h>

/** Longest "Name: value" header line a caller may pass. */
#define CNX_HTTP_HEADER_MAX 4608
/** Most headers a caller may pass in one request. */
#define CNX_HTTP_HEADERS_MAX 24
/** Cap on a kept error body (the rest of a long one is discarded). */
#define CNX_HTTP_ERROR_BODY_MAX ((size_t)64 << 10)

/** Flags of cnx__http_req. */
enum {
    /* follow redirects (at most 5, http and https only): for plain
     * http(s) stores; never for signed requests */
    CNX_HTTP_FOLLOW = 1u << 0,
    /* a write: stop at once when cnx__store_writes_abandoned() */
    CNX_HTTP_WRITE = 1u << 1,
};

typedef struct cnx__http_req {
    const char *method; /* "GET", "HEAD" or "PUT" */
    const char *url;    /* absolute http(s) URL, already percent-encoded */
    const char *what;   /* what messages name: "s3://b/ds/info" */
    const char *const *headers; /* "Name: value" lines (borrowed) */
    size_t nheaders;            /* at most CNX_HTTP_HEADERS_MAX */
    const void *body;           /* PUT body (borrowed); NULL for none */
    size_t body_len;
    size_t max_body; /* cap on a 2xx body: over it, CNX_ETOOBIG */
    int range;       /* 1: send "Range: bytes=first-last" */
    uint64_t range_first;
    uint64_t range_last; /* inclusive */
    unsigned flags;      /* CNX_HTTP_* */
} cnx__http_req;

/** The answer to a request (caller-owned; release with _dispose). */
typedef struct cnx__http_resp {
    long status;   /* HTTP status of the final answer */
    uint8_t *body; /* NUL-terminated (the NUL is not in body_len) */
    size_t body_len;
    int64_t content_length; /* -1 when absent */
    /* headers of interest; "" when absent or longer than the field */
    char etag[256];      /* as sent, quotes included */
    char generation[32]; /* x-goog-generation */
    char content_range[128];
    char checksum_sha256[64]; /* x-amz-checksum-sha256 (base64) */
    char meta_sha256[80];     /* x-amz-meta-cnx-sha256 / x-goog-meta-... */
    char bucket_region[64];   /* x-amz-bucket-region */
    /* <Code> and <Message> of an XML error body; "" when none */
    char code[64];
    char message[256];
} cnx__http_resp;

/**
 * Make a request, retrying transient failures.
 * @param[out] resp  filled on 0 (any status the caller must judge); on
 *                   failure holds nothing to free
 * @return 0 with resp->status set; CNX_EIO retriable=1 when the retries
 *         are spent or writes were abandoned; CNX_EIO retriable=0 for a
 *         fatal transport error (bad certificate, unsupported protocol);
 *         CNX_ETOOBIG (fatal) when a 2xx body exceeds max_body;
 *         CNX_ENOMEM; CNX_EINVAL for an over-long header.
 */
int cnx__http_perform(const cnx__http_req *req, cnx__http_resp *resp);

/** Free resp->body and clear resp. NULL-safe. */
void cnx__http_resp_dispose(cnx__http_resp *resp);

/**
 * The error for an answer the caller did not expect: CNX_ENOTFOUND for
 * 404, otherwise CNX_EIO, both fatal, with one line such as
 * "GET s3://b/ds/info: 403 AccessDenied: Access Denied".
 * @return the code set.
 */
int cnx__http_fail(const cnx__http_req *req, const cnx__http_resp *resp);

/**
 * Judge the answer to a GET of bytes [offset, offset + len): 206 must start
 * at offset and hold at most len bytes; 200 (a server that ignores Range)
 * is cut to the slice here; 416 means the object ends before offset (no
 * bytes); anything else is cnx__http_fail's. On 0 the body moves to *data
 * (NUL-terminated, free()), *got bytes.
 * @return 0; CNX_ENOTFOUND; CNX_EIO (retriable for a mismatched range).
 */
int cnx__http_range_result(const cnx__http_req *req, cnx__http_resp *resp,
                           uint64_t offset, size_t len, uint8_t **data,
                           size_t *got);

/*
 * The transport's process-wide counters (attempts sent, retries among
 * them, response and request body bytes) are read with cnx__http_stats(),
 * declared in store_int.h for the metrics.
 */

#endif
