/*
 * sigv4_int.h - AWS Signature Version 4 (signed with OpenSSL) and the
 * credentials every AWS tool reads, inside libcnx only.
 *
 * The signer is pure (strings in, strings out): store_s3.c builds the
 * request, lists the headers it sends, and adds the Authorization header
 * this returns. Checked against AWS's published SigV4 test suite and the
 * S3 documentation's examples (tests/unit/sigv4).
 */
#ifndef CNX_SIGV4_INT_H
#define CNX_SIGV4_INT_H

#include <stddef.h>

/* Where credentials and settings came from, for the one-line messages. */
typedef struct cnx__aws_config {
    char access_key[128];
    char secret_key[128];
    char session_token[4096];  /* "" when none */
    char region[64];           /* never "" after load: default us-east-1 */
    char endpoint[512];        /* AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, or "" */
    char profile[128];         /* the profile read from the shared files */
    char source[160];          /* "environment", "/root/.aws/credentials [p]" */
} cnx__aws_config;

/**
 * Load the configuration the way the AWS CLI does: AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN from the environment; else the
 * shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default
 * ~/.aws/credentials) section of AWS_PROFILE (default "default"); region
 * from AWS_REGION, AWS_DEFAULT_REGION, then the config file
 * (AWS_CONFIG_FILE, default ~/.aws/config, "[profile NAME]" or
 * "[default]"), default us-east-1; endpoint from AWS_ENDPOINT_URL_S3 then
 * AWS_ENDPOINT_URL (then "endpoint_url" in the config file's profile).
 * No credentials at all is not an error: access_key stays "" and requests
 * go unsigned (public buckets).
 * @return 0; CNX_EINVAL for a malformed file or an over-long value (the
 *         message names the file and line).
 */
int cnx__aws_config_load(cnx__aws_config *out);

/* One header to sign: name as sent (any case), value as sent. */
typedef struct cnx__sigv4_header {
    const char *name;
    const char *value;
} cnx__sigv4_header;

typedef struct cnx__sigv4_request {
    const char *method;   /* "GET", "PUT", ... */
    const char *path;     /* the path as sent on the wire (percent-encoded) */
    const char *query;    /* the query as sent, without '?'; "" for none */
    const cnx__sigv4_header *headers; /* every signed header, host included */
    size_t nheaders;
    const char *payload_hash; /* hex SHA-256 of the body, or
                                 "UNSIGNED-PAYLOAD" */
    int normalize_path;   /* 1: remove dot segments and double slashes
                             (every service but S3, and the test suite).
                             Either way the path is encoded once: bytes
                             outside A-Z a-z 0-9 - _ . ~ / and %XX are
                             escaped, never an escape twice (S3's rule). */
} cnx__sigv4_request;

/** Longest Authorization header value produced. */
#define CNX_SIGV4_AUTH_MAX 2048

/**
 * The canonical request of SigV4 task 1.
 * @param[out] out  caller frees with free()
 * @return 0; CNX_EINVAL; CNX_ENOMEM.
 */
int cnx__sigv4_canonical_request(const cnx__sigv4_request *req, char **out);

/**
 * The string to sign of SigV4 task 2.
 * @param amz_date  "YYYYMMDDTHHMMSSZ"
 * @param[out] out  caller frees with free()
 */
int cnx__sigv4_string_to_sign(const cnx__sigv4_request *req,
                              const char *amz_date, const char *region,
                              const char *service, char **out);

/**
 * Sign a request: the full Authorization header value
 * ("AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...").
 * @return 0; CNX_EINVAL (bad date, too long); CNX_ENOMEM.
 */
int cnx__sigv4_authorization(const cnx__sigv4_request *req,
                             const char *access_key, const char *secret_key,
                             const char *amz_date, const char *region,
                             const char *service,
                             char out[CNX_SIGV4_AUTH_MAX]);

/**
 * Percent-encode for a URI as SigV4 wants it: unreserved characters
 * (A-Z a-z 0-9 - _ . ~) kept, every other byte %XX upper-case; '/' kept
 * when keep_slash.
 * @return 0; CNX_ERANGE if it does not fit cap (NUL included).
 */
int cnx__sigv4_uri_encode(const char *in, int keep_slash, char *out,
                          size_t cap);

/** "YYYYMMDDTHHMMSSZ" of a UTC time (asserts years 1970..9999). */
void cnx__sigv4_amz_date(long long unix_seconds, char out[17]);

/** Lower-case hex SHA-256 of a body: the payload_hash and the value of the
 *  x-amz-content-sha256 header. */
void cnx__sigv4_hex_sha256(const void *data, size_t len, char out[65]);

#endif
