/*
 * verify_util.c - the small pieces cnx-verify's library is built from:
 * finding lists, a string index (open addressing, FNV-1a), the parallel
 * loop (threads pull item numbers from one atomic counter, so uneven
 * items balance themselves), the relocation of a moved dataset's names
 * (pure string work on cnx/url.h's canonical URLs), and the reads of
 * stored objects through the store interface, for every scheme.
 *
 * Hashing reads each object whole (cnx_store_get, at most
 * CNX_STORE_MAX_OBJECT) and takes its SHA-256 with cnx_digest (OpenSSL
 * EVP); objects are spread over threads, each store shared by them.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/url.h"
#include "verify_int.h"

/* ---- findings -------------------------------------------------------- */

int vf_add(vf_findings *list, const char *object, const char *check,
           const char *fmt, ...)
{
    char reason[1024];
    cnx_verify_finding *f;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    if (list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 4;
        cnx_verify_finding *grown =
            realloc(list->items, cap * sizeof(*grown));
        if (grown == NULL)
            return CNX_ENOMEM;
        list->items = grown;
        list->cap = cap;
    }
    f = &list->items[list->n];
    f->object = strdup(object != NULL ? object : "?");
    f->check = strdup(check);
    f->reason = strdup(reason);
    if (f->object == NULL || f->check == NULL || f->reason == NULL) {
        free((char *)f->object);
        free((char *)f->check);
        free((char *)f->reason);
        return CNX_ENOMEM;
    }
    list->n++;
    return 0;
}

int vf_move(vf_findings *dst, vf_findings *src)
{
    if (src->n == 0)
        return 0;
    if (dst->n + src->n > dst->cap) {
        size_t cap = dst->cap ? dst->cap : 16;
        cnx_verify_finding *grown;
        while (cap < dst->n + src->n)
            cap *= 2;
        grown = realloc(dst->items, cap * sizeof(*grown));
        if (grown == NULL)
            return CNX_ENOMEM;
        dst->items = grown;
        dst->cap = cap;
    }
    memcpy(dst->items + dst->n, src->items, src->n * sizeof(*src->items));
    dst->n += src->n;
    free(src->items);
    memset(src, 0, sizeof(*src));
    return 0;
}

void vf_findings_dispose(vf_findings *list)
{
    for (size_t i = 0; i < list->n; i++) {
        free((char *)list->items[i].object);
        free((char *)list->items[i].check);
        free((char *)list->items[i].reason);
    }
    free(list->items);
    memset(list, 0, sizeof(*list));
}

/* ---- string index ---------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(1099511628211);
    }
    return h;
}

static int map_grow(vf_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    const char **keys = calloc(cap, sizeof(*keys));
    size_t *vals = calloc(cap, sizeof(*vals));
    if (keys == NULL || vals == NULL) {
        free(keys);
        free(vals);
        return CNX_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        size_t k;
        if (m->keys[i] == NULL)
            continue;
        k = (size_t)fnv1a(m->keys[i]) & (cap - 1);
        while (keys[k] != NULL)
            k = (k + 1) & (cap - 1);
        keys[k] = m->keys[i];
        vals[k] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int vf_map_put(vf_map *m, const char *key, size_t val, size_t *old)
{
    size_t k;
    if ((m->n + 1) * 2 > m->cap && map_grow(m) != 0)
        return CNX_ENOMEM;
    k = (size_t)fnv1a(key) & (m->cap - 1);
    while (m->keys[k] != NULL) {
        if (strcmp(m->keys[k], key) == 0) {
            if (old != NULL)
                *old = m->vals[k];
            return 0;
        }
        k = (k + 1) & (m->cap - 1);
    }
    m->keys[k] = key;
    m->vals[k] = val;
    m->n++;
    return 1;
}

size_t *vf_map_get(const vf_map *m, const char *key)
{
    size_t k;
    if (m->cap == 0)
        return NULL;
    k = (size_t)fnv1a(key) & (m->cap - 1);
    while (m->keys[k] != NULL) {
        if (strcmp(m->keys[k], key) == 0)
            return &m->vals[k];
        k = (k + 1) & (m->cap - 1);
    }
    return NULL;
}

void vf_map_dispose(vf_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* ---- parallel loop --------------------------------------------------- */

typedef struct par {
    atomic_size_t next, done;
    size_t n;
    vf_task_fn fn;
    void *ctx;
    void (*progress)(void *ctx, size_t done);
} par;

typedef struct par_thread {
    par *p;
    int id;
} par_thread;

static void *par_main(void *arg)
{
    par_thread *pt = arg;
    par *p = pt->p;
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        p->fn(p->ctx, i, pt->id);
        i = atomic_fetch_add(&p->done, 1) + 1;
        if (p->progress != NULL)
            p->progress(p->ctx, i);
    }
    return NULL;
}

void vf_parallel(int threads, size_t n, vf_task_fn fn, void *ctx,
                 void (*progress)(void *ctx, size_t done))
{
    pthread_t tid[256];
    par_thread pt[256];
    int started = 0;
    par p;
    atomic_init(&p.next, 0);
    atomic_init(&p.done, 0);
    p.n = n;
    p.fn = fn;
    p.ctx = ctx;
    p.progress = progress;
    if (threads < 1)
        threads = 1;
    if (threads > 256)
        threads = 256;
    if ((size_t)threads > n)
        threads = n > 0 ? (int)n : 1;
    for (int t = 0; t < threads; t++) {
        pt[t].p = &p;
        pt[t].id = t;
    }
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[started], NULL, par_main, &pt[t]) == 0)
            started++;
    par_main(&pt[0]);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}

/* ---- relocation -------------------------------------------------------- */

void cnx__verify_reloc_dispose(vf_reloc *r)
{
    free(r->from);
    free(r->to);
    free(r->written);
    free(r->found);
    memset(r, 0, sizeof(*r));
}

/* The start of the last component of path[0, end) (end > 0, no empty
 * component). */
static size_t last_component(const char *path, size_t end)
{
    size_t at = end;
    while (at > 0 && path[at - 1] != '/')
        at--;
    return at;
}

/* Where the path of u ends once its last component is dropped: before
 * the slash that precedes it, or 0. */
static size_t drop_last(const char *path, size_t end)
{
    size_t at = last_component(path, end);
    return at > 0 ? at - 1 : 0;
}

/* The canonical URL of u's scheme and host with u->path[0, end). */
static int root_of(const cnx_url *u, size_t end, char out[CNX_URL_MAX])
{
    char text[CNX_URL_MAX + 16];
    cnx_url root;
    int n, rc;
    if (u->scheme == CNX_URL_FILE)
        n = snprintf(text, sizeof(text), "file://%.*s", end > 0 ? (int)end : 1,
                     end > 0 ? u->path : "/");
    else
        n = snprintf(text, sizeof(text), "%s://%s%s%.*s",
                     cnx_url_scheme_name(u->scheme), u->host,
                     end > 0 ? "/" : "", (int)end, u->path);
    if (n < 0 || (size_t)n >= sizeof(text))
        return cnx_error_set(CNX_EINVAL, 0, "URL too long");
    rc = cnx_url_parse(&root, text, 0);
    if (rc == 0)
        memcpy(out, root.canonical, strlen(root.canonical) + 1);
    return rc;
}

int cnx__verify_reloc_derive(const char *written, const char *found,
                             char from[CNX_URL_MAX], char to[CNX_URL_MAX])
{
    cnx_url w, f;
    size_t ew, ef;
    int k = 0, rc;

    from[0] = to[0] = '\0';
    rc = cnx_url_parse(&w, written, 0);
    if (rc == 0)
        rc = cnx_url_parse(&f, found, 0);
    if (rc != 0)
        return rc;
    if (strcmp(w.canonical, f.canonical) == 0)
        return 0;
    /* Compare whole components from the end ("/" alone has none). */
    ew = strlen(w.path);
    ef = strlen(f.path);
    if (ew == 1 && w.path[0] == '/')
        ew = 0;
    if (ef == 1 && f.path[0] == '/')
        ef = 0;
    while (ew > 0 && ef > 0) {
        size_t sw = last_component(w.path, ew);
        size_t sf = last_component(f.path, ef);
        if (ew - sw != ef - sf ||
            memcmp(w.path + sw, f.path + sf, ew - sw) != 0)
            break;
        ew = drop_last(w.path, ew);
        ef = drop_last(f.path, ef);
        k++;
    }
    if (k == 0)
        return 0;
    rc = root_of(&w, ew, from);
    if (rc == 0)
        rc = root_of(&f, ef, to);
    if (rc != 0)
        return rc;
    /* equal roots under equal suffixes would be equal URLs */
    assert(strcmp(from, to) != 0);
    return 1;
}

const vf_reloc *cnx__verify_reloc_find(const vf_reloc *list, size_t n,
                                       const char *url)
{
    const vf_reloc *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rel;
        size_t len = strlen(list[i].from);
        if (cnx_url_under(list[i].from, url, &rel) &&
            (best == NULL || len > best_len)) {
            best = &list[i];
            best_len = len;
        }
    }
    return best;
}

int cnx__verify_reloc_apply(const vf_reloc *r, const char *url, char **out)
{
    const char *rel;
    int rc;
    *out = NULL;
    if (!cnx_url_under(r->from, url, &rel))
        return 0;
    if (rel[0] == '\0') {
        *out = strdup(r->to);
        return *out != NULL ? 1 : cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    }
    rc = cnx_url_join(out, r->to, 0, rel);
    return rc == 0 ? 1 : rc;
}

/* ---- reading storage ------------------------------------------------- */

int cnx__verify_store_open(cnx_store **out, const char *url)
{
    cnx_url u;
    struct stat st;
    int rc = cnx_url_parse(&u, url, 0);
    *out = NULL;
    if (rc != 0)
        return rc;
    if (u.scheme == CNX_URL_FILE && stat(u.path, &st) != 0)
        return cnx_error_set(errno == ENOENT || errno == ENOTDIR ? CNX_ENOTFOUND
                                                                 : CNX_EIO,
                             0, "%s: %s", u.canonical, strerror(errno));
    if (u.scheme == CNX_URL_FILE && !S_ISDIR(st.st_mode))
        return cnx_error_set(CNX_ENOTFOUND, 0, "%s: not a directory",
                             u.canonical);
    return cnx_store_open(out, u.canonical);
}

void cnx__verify_hash_object(vf_hash_job *job)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;

    job->digest[0] = '\0';
    job->size = 0;
    if (job->store == NULL)
        return; /* status and error say why */
    job->status = 0;
    rc = cnx_store_get(job->store, job->name_buf, 0, &data, &len);
    if (rc == CNX_ENOTFOUND && job->layer != NULL) {
        /* A chunk of a sharded input scale is no object of its own. */
        const char *rel = NULL;
        cnx_store *layer = NULL;
        char why[sizeof(job->error)];
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        if (cnx_url_under(job->layer, job->url, &rel) == 1 && *rel != '\0' &&
            cnx__verify_store_open(&layer, job->layer) == 0) {
            rc = cnx_layer_object_digest(layer, rel, job->digest, &job->size);
            cnx_store_free(layer);
            if (rc == 0)
                return;
        }
        if (rc == CNX_ENOTFOUND)
            rc = cnx_error_set(CNX_ENOTFOUND, 0, "%s", why);
    }
    if (rc != 0) {
        job->status = rc;
        snprintf(job->error, sizeof(job->error), "%s",
                 cnx_error_last()->message);
        return;
    }
    cnx_digest(data, len, job->digest);
    job->size = (uint64_t)len;
    free(data);
}
