/*
 * cnx/store.h - object storage behind one interface.
 *
 * A store is opened from a URL: file:///abs/dir (or a plain path) now; the
 * interface is the one s3://, gs:// and http(s):// backends plug into.
 * Objects are named by relative paths ("scale/0-64_0-64_0-64"). Writes are
 * atomic (temporary file, fsync, no-clobber link, directory fsync) and
 * write-once: putting identical bytes again is a no-op success, different
 * bytes fail with CNX_EIMMUTABLE and leave the object as it was.
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

/**
 * Open a store. For file:// the directory is created if missing.
 * @param[out] out  caller frees with cnx_store_free()
 * @return 0; CNX_EINVAL for a malformed URL; CNX_EUNSUPPORTED for a scheme
 *         this build lacks; CNX_EIO if the directory cannot be made.
 */
int cnx_store_open(cnx_store **out, const char *url);
void cnx_store_free(cnx_store *store);
/** @return the store's canonical URL ("file:///abs/dir"), borrowed. */
const char *cnx_store_url(const cnx_store *store);

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
 * Read an object and check it against the digest its reader expects.
 * @return as cnx_store_get, or CNX_EDIGEST on mismatch (nothing returned).
 */
int cnx_store_get_verified(cnx_store *store, const char *name,
                           const char *expected, size_t max_len,
                           uint8_t **data, size_t *len);

/**
 * Replace a mutable metadata object (a layer's `info` when a scale is
 * added) by compare-and-swap: the new bytes are installed atomically only
 * if the object's current digest is `expected` (NULL: only if it does not
 * exist). Chunk objects are never swapped; they stay write-once.
 * Safe between threads and processes (file:// uses an flock'd lock file
 * beside the object and rename(2)).
 * @return 0; CNX_ECONFLICT if the object changed (re-read and retry);
 *         CNX_ENAME; CNX_EIO (retriable).
 */
int cnx_store_swap(cnx_store *store, const char *name, const char *expected,
                   const void *data, size_t len);

/**
 * Abandon every write in flight in this process: remove their temporary
 * files and make every later put or swap fail with CNX_EIO. Called by a
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
 * (".tmp.*") are not objects and are skipped; so are links to directories.
 * A prefix that does not exist lists nothing.
 * @return 0; the callback's non-zero value; CNX_ENAME for a bad prefix;
 *         CNX_EUNSUPPORTED for a store that cannot list; CNX_EIO;
 *         CNX_ENOMEM.
 */
int cnx_store_list(cnx_store *store, const char *prefix, cnx_store_list_fn fn,
                   void *ctx);

#ifdef __cplusplus
}
#endif
#endif
