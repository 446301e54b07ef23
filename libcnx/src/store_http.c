/*
 * store_http.c - the http:// and https:// backend of the store
 * (store_int.h): a read-only view of objects any web server publishes, as
 * public buckets and Neuroglancer's own data sources are read.
 *
 * An object is GET base/name (name percent-encoded per segment, '/'
 * kept); exists is a HEAD; ranged reads send Range and accept a server
 * that ignores it. put, swap and list are NULL: store.c answers them with
 * CNX_EUNSUPPORTED. Redirects are followed (at most 5, http(s) only);
 * nothing is signed.
 * Invariant: names arrive checked (store.c); the base URL is canonical.
 * Load: one request per operation. Threading: the impl is read-only after
 * open; requests go through http.c.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/url.h"
#include "http_int.h"
#include "sigv4_int.h"
#include "store_int.h"

/* GET or HEAD of name: the URL and the name messages use (both heap). */
static int object_urls(const cnx_store *store, const char *name, char **url,
                       char **what)
{
    const char *base = store->url.canonical;
    size_t cap = strlen(name) * 3 + 1, n;
    char *enc = malloc(cap);
    int rc;

    *url = *what = NULL;
    if (enc == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    rc = cnx__sigv4_uri_encode(name, 1, enc, cap);
    assert(rc == 0); /* three bytes per byte always fit */
    (void)rc;
    n = strlen(base) + strlen(enc) + 2;
    *url = malloc(n);
    if (*url != NULL)
        snprintf(*url, n, "%s/%s", base, enc);
    n = strlen(base) + strlen(name) + 2;
    *what = malloc(n);
    if (*what != NULL)
        snprintf(*what, n, "%s/%s", base, name);
    free(enc);
    if (*url == NULL || *what == NULL) {
        free(*url);
        free(*what);
        *url = *what = NULL;
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    }
    return 0;
}

/* Send req for name; url and what are filled in and freed here. */
static int http_send(const cnx_store *store, const char *name,
                     cnx__http_req *req, cnx__http_resp *resp, char **url,
                     char **what)
{
    int rc = object_urls(store, name, url, what);
    if (rc != 0)
        return rc;
    req->url = *url;
    req->what = *what;
    req->flags |= CNX_HTTP_FOLLOW;
    return cnx__http_perform(req, resp);
}

static int web_get(cnx_store *store, const char *name, size_t max_len,
                   uint8_t **data, size_t *len)
{
    cnx__http_req req = {.method = "GET", .max_body = max_len};
    cnx__http_resp resp;
    char *url = NULL, *what = NULL;
    int rc;

    *data = NULL;
    *len = 0;
    rc = http_send(store, name, &req, &resp, &url, &what);
    if (rc == 0) {
        if (resp.status == 200) {
            *data = resp.body;
            *len = resp.body_len;
            resp.body = NULL;
        } else {
            rc = cnx__http_fail(&req, &resp);
        }
        cnx__http_resp_dispose(&resp);
    }
    free(url);
    free(what);
    return rc;
}

static int web_get_range(cnx_store *store, const char *name, uint64_t offset,
                         size_t len, uint8_t **data, size_t *got)
{
    cnx__http_req req = {.method = "GET",
                         .max_body = CNX_STORE_MAX_OBJECT,
                         .range = 1,
                         .range_first = offset,
                         .range_last = offset + len - 1};
    cnx__http_resp resp;
    char *url = NULL, *what = NULL;
    int rc;

    assert(len > 0 && offset <= UINT64_MAX - len);
    *data = NULL;
    *got = 0;
    rc = http_send(store, name, &req, &resp, &url, &what);
    if (rc == 0) {
        rc = cnx__http_range_result(&req, &resp, offset, len, data, got);
        cnx__http_resp_dispose(&resp);
    }
    free(url);
    free(what);
    return rc;
}

static int web_exists(cnx_store *store, const char *name, int *exists)
{
    cnx__http_req req = {.method = "HEAD"};
    cnx__http_resp resp;
    char *url = NULL, *what = NULL;
    int rc;

    *exists = 0;
    rc = http_send(store, name, &req, &resp, &url, &what);
    if (rc == 0) {
        if (resp.status == 200)
            *exists = 1;
        else if (resp.status != 404)
            rc = cnx__http_fail(&req, &resp);
        cnx__http_resp_dispose(&resp);
    }
    free(url);
    free(what);
    return rc;
}

static const cnx__store_ops http_ops = {
    .put = NULL,
    .get = web_get,
    .get_range = web_get_range,
    .swap = NULL,
    .exists = web_exists,
    .list = NULL,
    .dispose = NULL,
};

int cnx__store_open_http(cnx_store *store)
{
    assert(store->url.scheme == CNX_URL_HTTP ||
           store->url.scheme == CNX_URL_HTTPS);
    store->ops = &http_ops;
    store->impl = NULL;
    return 0;
}
