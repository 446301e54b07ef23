/*
 * cnx/store.h - object storage behind one interface.
 *
 * A store is opened from a URL (cnx/url.h): file:///abs/dir or a plain
 * path, s3://bucket/prefix and gs://bucket/prefix (docs/storage.md), and
 * http(s)://host/prefix, read-only. Objects are named by relative paths
 * ("scale/0-64_0-64_0-64"). Writes are atomic (file://: temporary file,
 * fsync, no-clobber link, directory fsync; object stores: one conditional
 * PUT) and write-once: putting identical bytes again is a no-op success,
 * different bytes fail with CNX_EIMMUTABLE and leave the object as it was.
 * Verified reads of remote objects go through a local cache keyed by
 * digest when one is configured (cnx_store_cache_configure).
 * Thread-safety: a store may be shared between threads.
 */
#ifndef CNX_STORE_H
#define CNX_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/digest.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cnx_store cnx_store;

/** Default cap on one object read, bytes (1 GiB). */
#define CNX_STORE_MAX_OBJECT ((size_t)1 << 30)

/** Default bound of the read cache, bytes (10 GiB). */
#define CNX_STORE_CACHE_DEFAULT_MAX ((uint64_t)10 << 30)

/**
 * Open a store. For file:// the directory is created if missing; object
 * stores are not contacted until the first operation.
 * @param[out] out  caller frees with cnx_store_free()
 * @return 0; CNX_EINVAL for a malformed URL or configuration (credentials
 *         file); CNX_EUNSUPPORTED for a scheme this build lacks; CNX_EIO if
 *         the directory cannot be made.
 */
int cnx_store_open(cnx_store **out, const char *url);
void cnx_store_free(cnx_store *store);
/** @return the store's canonical URL ("file:///abs/dir"), borrowed. */
const char *cnx_store_url(const cnx_store *store);
/** @return 1 for an object store or web server, 0 for file://. */
int cnx_store_is_remote(const cnx_store *store);

/**
 * Configure the process's read cache of remote objects: a directory
 * (created if missing; NULL disables the cache) and its bound in bytes (0
 * keeps the current one, default CNX_STORE_CACHE_DEFAULT_MAX). Without a
 * call, CNX_CACHE_DIR and CNX_CACHE_MAX_BYTES are read at the first read.
 * Several processes may share one directory.
 * @return 0; CNX_EINVAL (not absolute); CNX_EIO (cannot create).
 */
int cnx_store_cache_configure(const char *dir, uint64_t max_bytes);

/** Parse "N", "NK", "NM" or "NG" (binary units) into bytes.
 * @return 0 or CNX_EINVAL. */
int cnx_store_parse_size(const char *text, uint64_t *out);

/** Process-wide storage counters (for metrics). */
typedef struct cnx_store_stats {
    uint64_t cache_hits, cache_misses;   /* verified remote reads */
    uint64_t cache_hit_bytes, cache_miss_bytes;
    uint64_t cache_evictions;
    uint64_t digest_refetches; /* remote reads fetched again on a mismatch */
    uint64_t requests, retries; /* HTTP requests to object stores */
    uint64_t bytes_in, bytes_out;
} cnx_store_stats;

void cnx_store_stats_get(cnx_store_stats *out);

/**
 * Check an object name: non-empty, at most 1024 bytes, relative, no empty,
 * "." or ".." component, no backslash or control character.
 * @return 0 or CNX_ENAME with a message saying what is wrong.
 */
int cnx_store_check_name(const char *name);

/** The last write-once refusal (CNX_EIMMUTABLE) of a put on this thread. */
typedef struct cnx_store_conflict_info {
    int valid;
    char name[1024];                /* object name within the store */
    char stored[CNX_DIGEST_LEN];    /* digest of the bytes already there */
    char got[CNX_DIGEST_LEN];       /* digest of the bytes refused */
} cnx_store_conflict_info;

/** Copy this thread's last refusal into out. @return out->valid. */
int cnx_store_conflict(cnx_store_conflict_info *out);
/** Forget this thread's last refusal. */
void cnx_store_conflict_clear(void);

/**
 * Put an object, atomically and at most once.
 * @param digest  if not NULL, receives the digest of data
 * @return 0 (written, or already there with identical bytes);
 *         CNX_ENAME; CNX_EIMMUTABLE if it exists with other bytes;
 *         CNX_EUNSUPPORTED for a read-only (http(s)://) store;
 *         CNX_EIO (retriable) on a storage failure.
 */
int cnx_store_put(cnx_store *store, const char *name, const void *data,
                  size_t len, char digest[CNX_DIGEST_LEN]);

/**
 * Read a whole object.
 * @param[out] data  caller frees with free(); NUL-terminated for convenience
 *                   (the NUL is not counted in len)
 * @return 0; CNX_ENAME; CNX_ENOTFOUND; CNX_ETOOBIG over max_len (0 means
 *         CNX_STORE_MAX_OBJECT); CNX_EIO (retriable).
 */
int cnx_store_get(cnx_store *store, const char *name, size_t max_len,
                  uint8_t **data, size_t *len);

/**
 * Read bytes [offset, offset + len) of an object; fewer (got < len) when
 * the object ends first, none (got 0, not an error) when offset is at or
 * after its end. file:// preads; remote stores send one GET with
 * "Range: bytes=offset-(offset+len-1)" (a 416 answer is 0 bytes). Never
 * served from nor stored in the read cache (docs/storage.md).
 * @param[out] data  caller frees with free(); NUL-terminated
 * @return 0; CNX_ENAME; CNX_ENOTFOUND; CNX_ERANGE (len 0 or over
 *         CNX_STORE_MAX_OBJECT); CNX_EIO (retriable).
 */
int cnx_store_get_range(cnx_store *store, const char *name, uint64_t offset,
                        size_t len, uint8_t **data, size_t *got);

/**
 * Read an object and check it against the digest its reader expects.
 * Remote objects are served from the read cache when it holds the digest,
 * and are fetched again (twice at most) when their bytes arrive corrupted.
 * @return as cnx_store_get, or CNX_EDIGEST on mismatch (nothing returned).
 */
int cnx_store_get_verified(cnx_store *store, const char *name,
                           const char *expected, size_t max_len,
                           uint8_t **data, size_t *len);

/** One read of cnx_store_get_many. */
typedef struct cnx_store_get_req {
    const char *name;     /* in: object name */
    const char *expected; /* in: digest to check, or NULL for a plain get */
    uint8_t *data;        /* out: caller frees with free() */
    size_t len;           /* out */
    int rc;               /* out: 0 or the CNX_E* of this read */
    int retriable;        /* out: of a failure */
    char message[512];    /* out: the one-line error of a failure */
} cnx_store_get_req;

/**
 * Read several objects, concurrently on a remote store (CNX_STORE_CONCURRENCY
 * connections, default 8), one after another on file://. Every request
 * gets its own result; the caller frees every data, failed or not.
 * @return 0 if all succeeded, else the first failure in request order,
 *         with its message as this thread's last error.
 */
int cnx_store_get_many(cnx_store *store, cnx_store_get_req *reqs, size_t n,
                       size_t max_len);

/**
 * Replace a mutable metadata object (a layer's `info` when a scale is
 * added) by compare-and-swap: the new bytes are installed atomically only
 * if the object's current digest is `expected` (NULL: only if it does not
 * exist). Chunk objects are never swapped; they stay write-once.
 * Safe between threads and processes (file:// uses an flock'd lock file
 * ".lock.<name>" beside the object and rename(2); object stores If-Match
 * on the ETag or generation, where the store honours it: docs/storage.md).
 * @return 0; CNX_ECONFLICT if the object changed (re-read and retry);
 *         CNX_ENAME; CNX_EUNSUPPORTED (read-only store); CNX_EIO
 *         (retriable).
 */
int cnx_store_swap(cnx_store *store, const char *name, const char *expected,
                   const void *data, size_t len);

/**
 * Abandon every write in flight in this process: remove their temporary
 * files, stop uploads in flight, and make every later put or swap fail
 * with CNX_EIO. Called by a
 * worker that gives up its task at the end of a SIGTERM grace period, so
 * that it leaves neither a partial object nor a temporary file behind.
 * Thread-safe; irreversible.
 */
void cnx_store_abandon_writes(void);

/** @param[out] exists 1 if the object exists. @return 0, CNX_ENAME, CNX_EIO. */
int cnx_store_exists(cnx_store *store, const char *name, int *exists);

/**
 * Called by cnx_store_list once per object, with its name in the store.
 * @return 0 to go on; anything else stops the listing and is returned.
 */
typedef int (*cnx_store_list_fn)(void *ctx, const char *name);

/**
 * List every object whose name lies under prefix (a directory-like name:
 * "lineage" lists "lineage/..."; "" or NULL lists the whole store),
 * recursively, in byte order of name. Temporary files of puts in flight
 * (".tmp.*") and the lock files of swaps (".lock.*") are not objects and
 * are skipped; so are links to directories.
 * A prefix that does not exist lists nothing.
 * @return 0; the callback's non-zero value; CNX_ENAME for a bad prefix;
 *         CNX_EUNSUPPORTED for a store that cannot list (http(s)://);
 *         CNX_EIO;
 *         CNX_ENOMEM.
 */
int cnx_store_list(cnx_store *store, const char *prefix, cnx_store_list_fn fn,
                   void *ctx);

#ifdef __cplusplus
}
#endif
#endif
