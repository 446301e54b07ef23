/*
 * cnx/url.h - the one module that parses, validates, canonicalises and
 * joins the URLs of datasets, layers and objects.
 *
 * Schemes: file:///abs/dir (or a plain path where the caller allows it),
 * s3://bucket/prefix, gs://bucket/prefix, http://host[:port]/prefix and
 * https://host[:port]/prefix. Every other module that checks or builds a
 * store URL calls this one, so the rules live in one place:
 *   - no "." or ".." path component, no control character, no backslash,
 *     no query ("?") or fragment ("#"), no user info ("@") in the host;
 *   - the canonical form has no trailing slash and no repeated slashes;
 *     file:// paths are absolute; a bucket is 3-63 (s3) or 3-222 (gs)
 *     characters of [a-z0-9._-], starting and ending with a letter or
 *     digit, without ".." (gs: dot-separated parts of at most 63); a host
 *     is [A-Za-z0-9.-] (labels of 1-63, at most 253) or a bracketed IPv6
 *     literal, with an optional :port (1-65535, no leading zero);
 *   - the scheme is matched case-insensitively and the scheme and host are
 *     lower-cased; nothing is percent-decoded (a '%' is a '%').
 * Pure string functions: no I/O except the getcwd() of a relative plain
 * path. Thread-safe.
 */
#ifndef CNX_URL_H
#define CNX_URL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cnx_url_scheme {
    CNX_URL_FILE = 1,
    CNX_URL_S3 = 2,
    CNX_URL_GS = 3,
    CNX_URL_HTTP = 4,
    CNX_URL_HTTPS = 5,
} cnx_url_scheme;

/** Longest canonical URL accepted, bytes including the NUL. */
#define CNX_URL_MAX 4096

/** A parsed URL (caller-owned, no heap: nothing to dispose). */
typedef struct cnx_url {
    cnx_url_scheme scheme;
    /* s3/gs: the bucket; http(s): host[:port] as written (lower-cased);
     * file: "" */
    char host[256];
    /* file: the absolute path ("/" for the root); others: the key prefix
     * without leading or trailing '/', possibly "" (the bucket's root) */
    char path[CNX_URL_MAX];
    /* the canonical URL: scheme://host/path, no trailing slash (but
     * "file:///" for the root and "s3://bucket" for a bucket's root) */
    char canonical[CNX_URL_MAX];
} cnx_url;

/** Flags of cnx_url_parse. */
enum {
    /* accept a plain path ("/abs/dir", "rel/dir") as a file:// URL; a
     * relative one is made absolute from the working directory. In a
     * plain path "." components are dropped and the leading ".." of a
     * relative one climb from the working directory (exact: getcwd has no
     * symlinks); any other ".." is refused */
    CNX_URL_ALLOW_PATH = 1u << 0,
};

/**
 * Parse and validate a URL.
 * @return 0; CNX_EINVAL with a one-line message naming the URL and what is
 *         wrong (unknown scheme, bad bucket, ".." component, ...);
 *         CNX_EIO if getcwd fails for a relative path.
 */
int cnx_url_parse(cnx_url *out, const char *text, unsigned flags);

/** @return "file", "s3", "gs", "http" or "https". */
const char *cnx_url_scheme_name(cnx_url_scheme scheme);

/** @return 1 if the scheme's stores can be written (all but http(s)). */
int cnx_url_writable(cnx_url_scheme scheme);

/**
 * Check an object name relative to a store: non-empty, at most 1024
 * bytes, relative, no empty, "." or ".." component, no backslash or
 * control character.
 * @return 0 or CNX_ENAME with a message saying what is wrong.
 */
int cnx_url_check_name(const char *name);

/**
 * Join a base URL (any form cnx_url_parse accepts with flags) and an object
 * name (checked with cnx_url_check_name, and without '?' or '#', which a
 * URL cannot hold) into canonical "base/name".
 * @param[out] out  caller frees with free(); NULL on failure
 * @return 0; CNX_EINVAL; CNX_ENAME; CNX_ENOMEM.
 */
int cnx_url_join(char **out, const char *base, unsigned flags,
                 const char *name);

/**
 * Where a canonical URL lies under a canonical base, component-wise
 * ("s3://b/ds" is under "s3://b", not under "s3://b/d").
 * @param[out] rel  the part of url after base and its '/', borrowed from
 *                  url ("" when url equals base); may be NULL
 * @return 1 if url is base or under it, 0 otherwise.
 */
int cnx_url_under(const char *base, const char *url, const char **rel);

/**
 * Split the canonical URL of an object into the URL of the store that
 * holds it (its parent "directory") and its name there.
 * @param store_url  receives the parent URL (capacity CNX_URL_MAX)
 * @param[out] name  the last component, borrowed from url
 * @return 0; CNX_EINVAL if url is not a canonical URL or has no object
 *         component (a store's root: "s3://b", "file:///").
 */
int cnx_url_split_object(const char *url, char store_url[CNX_URL_MAX],
                         const char **name);

#ifdef __cplusplus
}
#endif
#endif
