/*
 * store.c - the store's public API, over one backend per URL scheme
 * (store_int.h): file:// (store_file.c), s3:// and gs:// (store_s3.c),
 * http(s):// read-only (store_http.c).
 *
 * Everything every backend must do the same way lives here, once: the URL
 * is parsed by the URL module, every object name is checked before a
 * backend sees it, every put's digest is computed here, write-once refusals
 * are recorded per thread, verified reads of remote objects go through the
 * digest-keyed read cache (store_cache.c) and are fetched again when their
 * bytes arrive corrupted, and writes stop for good once abandoned.
 * Thread-safe: a store holds no mutable state of its own.
 */
#include "cnx/store.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cnx/error.h"
#include "cnx/url.h"
#include "store_int.h"

/* How many times a remote object whose bytes do not match their digest is
 * fetched again before the mismatch is believed (corruption in transit is
 * retriable; corruption at rest is not). */
#define DIGEST_REFETCHES 2

static atomic_int writes_abandoned;

int cnx__store_writes_abandoned(void)
{
    return atomic_load(&writes_abandoned);
}

void cnx_store_abandon_writes(void)
{
    atomic_store(&writes_abandoned, 1);
    cnx__store_file_abandon();
}

int cnx_store_check_name(const char *name)
{
    return cnx_url_check_name(name);
}

/* 1 if url starts "name://" with a name that is none of ours. */
static int unknown_scheme(const char *url)
{
    static const char *const ours[] = {"file", "s3", "gs", "http", "https"};
    const char *sep = strstr(url, "://");
    size_t n;
    if (sep == NULL)
        return 0;
    n = (size_t)(sep - url);
    for (size_t i = 0; i < n; i++)
        if (!((url[i] >= 'a' && url[i] <= 'z') ||
              (url[i] >= 'A' && url[i] <= 'Z') ||
              (i > 0 && ((url[i] >= '0' && url[i] <= '9') || url[i] == '+' ||
                         url[i] == '-' || url[i] == '.'))))
            return 0;
    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
        if (strlen(ours[i]) == n && strncasecmp(url, ours[i], n) == 0)
            return 0;
    return n > 0;
}

int cnx_store_open(cnx_store **out, const char *url)
{
    cnx_store *store;
    int rc;

    *out = NULL;
    if (url == NULL || url[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "store URL is empty");
    store = calloc(1, sizeof(*store));
    if (store == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "store: out of memory");
    rc = cnx_url_parse(&store->url, url, CNX_URL_ALLOW_PATH);
    if (rc != 0 && unknown_scheme(url))
        rc = cnx_error_set(CNX_EUNSUPPORTED, 0,
                           "store URL '%.200s': scheme not supported (file, "
                           "s3, gs, http and https are)",
                           url);
    if (rc != 0)
        goto fail;
    switch (store->url.scheme) {
    case CNX_URL_FILE:
        rc = cnx__store_open_file(store);
        break;
    case CNX_URL_S3:
    case CNX_URL_GS:
        rc = cnx__store_open_s3(store);
        break;
    case CNX_URL_HTTP:
    case CNX_URL_HTTPS:
        rc = cnx__store_open_http(store);
        break;
    default:
        rc = cnx_error_set(CNX_EUNSUPPORTED, 0,
                           "store URL '%.200s': scheme not supported", url);
        break;
    }
    if (rc != 0)
        goto fail;
    assert(store->ops != NULL);
    *out = store;
    return 0;
fail:
    free(store);
    return rc;
}

void cnx_store_free(cnx_store *store)
{
    if (store == NULL)
        return;
    if (store->ops != NULL && store->ops->dispose != NULL)
        store->ops->dispose(store);
    free(store);
}

const char *cnx_store_url(const cnx_store *store)
{
    return store->url.canonical;
}

int cnx_store_is_remote(const cnx_store *store)
{
    return store->url.scheme != CNX_URL_FILE;
}

/* ---- write-once refusals --------------------------------------------- */

/* The last write-once refusal on this thread (cnx_store_conflict). */
static _Thread_local cnx_store_conflict_info last_conflict;

int cnx__store_conflict_record(const char *name, const char *stored_digest,
                               const char *got_digest)
{
    snprintf(last_conflict.name, sizeof(last_conflict.name), "%s", name);
    snprintf(last_conflict.stored, sizeof(last_conflict.stored), "%s",
             stored_digest);
    snprintf(last_conflict.got, sizeof(last_conflict.got), "%s", got_digest);
    last_conflict.valid = 1;
    return cnx_error_set(CNX_EIMMUTABLE, 0,
                         "object %s exists with different bytes (stored %s, "
                         "new %s); namespaces are write-once",
                         name, last_conflict.stored, last_conflict.got);
}

int cnx_store_conflict(cnx_store_conflict_info *out)
{
    *out = last_conflict;
    return last_conflict.valid;
}

void cnx_store_conflict_clear(void)
{
    memset(&last_conflict, 0, sizeof(last_conflict));
}

/* ---- operations ------------------------------------------------------ */

static int read_only(const cnx_store *store, const char *what,
                     const char *name)
{
    return cnx_error_set(CNX_EUNSUPPORTED, 0,
                         "%s %s/%s: %s:// stores are read-only", what,
                         store->url.canonical, name,
                         cnx_url_scheme_name(store->url.scheme));
}

static int check_writable(const cnx_store *store, const char *what,
                          const char *name)
{
    if (atomic_load(&writes_abandoned))
        return cnx_error_set(CNX_EIO, 1, "writes abandoned: the worker is "
                             "stopping");
    return store->ops->put == NULL ? read_only(store, what, name) : 0;
}

int cnx_store_put(cnx_store *store, const char *name, const void *data,
                  size_t len, char digest[CNX_DIGEST_LEN])
{
    char computed[CNX_DIGEST_LEN];
    int rc = cnx_store_check_name(name);
    if (rc != 0)
        return rc;
    rc = check_writable(store, "put", name);
    if (rc != 0)
        return rc;
    cnx_digest(data, len, computed);
    if (digest != NULL)
        memcpy(digest, computed, CNX_DIGEST_LEN);
    return store->ops->put(store, name, data, len, computed);
}

int cnx_store_get(cnx_store *store, const char *name, size_t max_len,
                  uint8_t **data, size_t *len)
{
    int rc = cnx_store_check_name(name);
    *data = NULL;
    *len = 0;
    if (rc != 0)
        return rc;
    if (max_len == 0)
        max_len = CNX_STORE_MAX_OBJECT;
    return store->ops->get(store, name, max_len, data, len);
}

int cnx_store_get_range(cnx_store *store, const char *name, uint64_t offset,
                        size_t len, uint8_t **data, size_t *got)
{
    int rc = cnx_store_check_name(name);
    *data = NULL;
    *got = 0;
    if (rc != 0)
        return rc;
    if (len == 0 || len > CNX_STORE_MAX_OBJECT)
        return cnx_error_set(CNX_ERANGE, 0,
                             "range of %zu bytes of %s: must be 1 to %zu",
                             len, name, CNX_STORE_MAX_OBJECT);
    if (store->ops->get_range == NULL)
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "%s: ranged reads not supported",
                             store->url.canonical);
    return store->ops->get_range(store, name, offset, len, data, got);
}

int cnx_store_get_verified(cnx_store *store, const char *name,
                           const char *expected, size_t max_len,
                           uint8_t **data, size_t *len)
{
    int remote = cnx_store_is_remote(store);
    int rc;

    *data = NULL;
    *len = 0;
    rc = cnx_store_check_name(name);
    if (rc != 0)
        return rc;
    if (max_len == 0)
        max_len = CNX_STORE_MAX_OBJECT;
    if (remote && cnx__cache_get(expected, max_len, data, len) == 0)
        return 0;
    for (int attempt = 0;; attempt++) {
        rc = store->ops->get(store, name, max_len, data, len);
        if (rc != 0)
            return rc;
        rc = cnx_digest_check(*data, *len, expected, name);
        if (rc == 0)
            break;
        free(*data);
        *data = NULL;
        *len = 0;
        if (!remote || attempt >= DIGEST_REFETCHES)
            return rc;
        cnx__store_count_refetch();
    }
    if (remote)
        cnx__cache_put(expected, *data, *len);
    return 0;
}

int cnx_store_exists(cnx_store *store, const char *name, int *exists)
{
    int rc = cnx_store_check_name(name);
    *exists = 0;
    if (rc != 0)
        return rc;
    return store->ops->exists(store, name, exists);
}

int cnx_store_swap(cnx_store *store, const char *name, const char *expected,
                   const void *data, size_t len)
{
    int rc = cnx_store_check_name(name);
    if (rc != 0)
        return rc;
    rc = check_writable(store, "swap", name);
    if (rc != 0)
        return rc;
    assert(store->ops->swap != NULL);
    return store->ops->swap(store, name, expected, data, len);
}

int cnx_store_list(cnx_store *store, const char *prefix, cnx_store_list_fn fn,
                   void *ctx)
{
    if (prefix != NULL && prefix[0] != '\0') {
        int rc = cnx_store_check_name(prefix);
        if (rc != 0)
            return rc;
    }
    if (store->ops->list == NULL)
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "store %s cannot be listed (%s:// has no "
                             "listing)",
                             store->url.canonical,
                             cnx_url_scheme_name(store->url.scheme));
    return store->ops->list(store, prefix, fn, ctx);
}

/* ---- concurrent reads ------------------------------------------------ */

/* Each thread takes the next index; results are kept per object, so the
 * caller sees them in its own order whatever the threads did. */
typedef struct many_ctx {
    cnx_store *store;
    cnx_store_get_req *reqs;
    size_t n;
    size_t max_len;
    atomic_size_t next;
} many_ctx;

static void get_one(many_ctx *m, size_t i)
{
    cnx_store_get_req *r = &m->reqs[i];
    const cnx_error *e;
    r->rc = r->expected != NULL
                ? cnx_store_get_verified(m->store, r->name, r->expected,
                                         m->max_len, &r->data, &r->len)
                : cnx_store_get(m->store, r->name, m->max_len, &r->data,
                                &r->len);
    if (r->rc != 0) {
        e = cnx_error_last();
        r->retriable = e->retriable;
        snprintf(r->message, sizeof(r->message), "%s", e->message);
    }
}

static void *get_worker(void *arg)
{
    many_ctx *m = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&m->next, 1);
        if (i >= m->n)
            break;
        get_one(m, i);
    }
    return NULL;
}

static int store_concurrency(void)
{
    const char *s = getenv("CNX_STORE_CONCURRENCY");
    long v = s ? strtol(s, NULL, 10) : 0;
    return v >= 1 && v <= 64 ? (int)v : 8;
}

int cnx_store_get_many(cnx_store *store, cnx_store_get_req *reqs, size_t n,
                       size_t max_len)
{
    many_ctx m = {store, reqs, n, max_len, 0};
    pthread_t threads[64];
    int nthreads = 0, want;

    for (size_t i = 0; i < n; i++) {
        reqs[i].data = NULL;
        reqs[i].len = 0;
        reqs[i].rc = 0;
        reqs[i].retriable = 0;
        reqs[i].message[0] = '\0';
    }
    want = cnx_store_is_remote(store) ? store_concurrency() : 1;
    if ((size_t)want > n)
        want = (int)n;
    for (int t = 1; t < want; t++) {
        if (pthread_create(&threads[nthreads], NULL, get_worker, &m) != 0)
            break; /* fewer threads: the rest is done below */
        nthreads++;
    }
    get_worker(&m);
    for (int t = 0; t < nthreads; t++)
        pthread_join(threads[t], NULL);
    for (size_t i = 0; i < n; i++)
        if (reqs[i].rc != 0)
            return cnx_error_set(reqs[i].rc, reqs[i].retriable, "%s",
                                 reqs[i].message);
    return 0;
}
