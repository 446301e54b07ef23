/*
 * store_int.h - what a storage backend implements, inside libcnx only.
 *
 * store.c owns the public API: it parses the URL (cnx/url.h), checks every
 * object name, computes the digest of every put, consults the read cache
 * for verified reads and records write-once refusals; then it calls the
 * backend's operation. A backend sees only checked names. Each backend
 * translates its own library's errors into CNX_E* codes with one-line
 * messages naming the object (and, for remote stores, the URL and the
 * service's error code), retriable or fatal as cnx/error.h says.
 * Thread-safety: every operation may be called from several threads on one
 * store at once.
 */
#ifndef CNX_STORE_INT_H
#define CNX_STORE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/store.h"
#include "cnx/url.h"

typedef struct cnx__store_ops {
    /*
     * Write-once put of a checked name. digest is "sha256:<hex>" of data.
     * Identical bytes already there: 0. Other bytes there: call
     * cnx__store_conflict_record() and return CNX_EIMMUTABLE. A reader
     * must never see a partial object. NULL for read-only stores.
     */
    int (*put)(cnx_store *store, const char *name, const void *data,
               size_t len, const char *digest);
    /* Whole read, as cnx_store_get (max_len is never 0 here). */
    int (*get)(cnx_store *store, const char *name, size_t max_len,
               uint8_t **data, size_t *len);
    /* Bytes [offset, offset+len) of an object, as cnx_store_get_range. */
    int (*get_range)(cnx_store *store, const char *name, uint64_t offset,
                     size_t len, uint8_t **data, size_t *got);
    /* As cnx_store_swap. NULL for read-only stores. */
    int (*swap)(cnx_store *store, const char *name, const char *expected,
                const void *data, size_t len);
    /* As cnx_store_exists. */
    int (*exists)(cnx_store *store, const char *name, int *exists);
    /* As cnx_store_list (byte order of name). NULL: CNX_EUNSUPPORTED. */
    int (*list)(cnx_store *store, const char *prefix, cnx_store_list_fn fn,
                void *ctx);
    /* Release impl (not the store itself). */
    void (*dispose)(cnx_store *store);
} cnx__store_ops;

struct cnx_store {
    const cnx__store_ops *ops;
    cnx_url url;  /* parsed; url.canonical is cnx_store_url() */
    void *impl;   /* the backend's state */
};

/* Backends: fill store->ops and store->impl from store->url. */
int cnx__store_open_file(cnx_store *store);
int cnx__store_open_s3(cnx_store *store);
int cnx__store_open_http(cnx_store *store);

/* Remove the file backend's temporary files in flight (abandon). */
void cnx__store_file_abandon(void);

/* Record this thread's write-once refusal (cnx_store_conflict) and set
 * the one-line CNX_EIMMUTABLE error naming both digests.
 * @return CNX_EIMMUTABLE */
int cnx__store_conflict_record(const char *name, const char *stored_digest,
                               const char *got_digest);

/* 1 once cnx_store_abandon_writes() was called: every later put or swap
 * must fail with CNX_EIO, and a transfer in flight should stop. */
int cnx__store_writes_abandoned(void);

/* The read cache (store_cache.c). get: 0 on a hit (bytes checked against
 * digest), CNX_ENOTFOUND otherwise, never another error; put: best effort. */
int cnx__cache_get(const char *digest, size_t max_len, uint8_t **data,
                   size_t *len);
void cnx__cache_put(const char *digest, const uint8_t *data, size_t len);
/* The cache's bound in bytes, or 0 when no cache is configured. */
uint64_t cnx__cache_bound(void);
void cnx__store_count_refetch(void);

/* Counters of the HTTP transport (http.c). */
void cnx__http_stats(uint64_t *requests, uint64_t *retries,
                     uint64_t *bytes_in, uint64_t *bytes_out);

#endif
