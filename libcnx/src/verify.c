/*
 * verify.c - cnx-verify's library: sources, the lineage walk, and the
 * checks that compare manifests with storage, the repository and the
 * ledger (docs/verify.md).
 *
 * A run goes in rounds: verify the manifests not yet verified (signature
 * and statement, on worker threads, verify_stmt.c), index their subjects
 * by URL, and for every input no known manifest wrote, read the lineage/
 * directory of that input's layer (once per layer) as more manifests; stop
 * when a round adds none. The walk thus reaches back to layers without
 * lineage: raw data, the roots. Then every object whose bytes matter (the
 * given manifests' subjects, the root inputs) is hashed once, on worker
 * threads, and each check compares. Findings are sorted and made unique,
 * so the output does not depend on thread timing.
 * Single caller thread; manifests are individually allocated so the index
 * may point into them while the list grows.
 */
#include "cnx/verify.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/json.h"
#include "cnx/log.h"
#include "cnx/store.h"
#include "cnx/workflow.h"
#include "verify_int.h"

#define MAX_THREADS 256

typedef struct vf_layer {
    char *url;       /* canonical */
    int given;       /* --layer: its objects need coverage */
    int visited;     /* its lineage/ was looked for */
    int has_lineage; /* it stores at least one lineage/ object */
    char *unlistable; /* why its lineage/ cannot be listed (NULL: it can) */
    char **objects;  /* given layers: every object but info, lineage/ */
    size_t nobjects, cap;
} vf_layer;

typedef struct vf_removal { /* a ledger row whose envelope must be stored */
    char *object;
    char digest[CNX_DIGEST_LEN];
    char key[CNX_DIGEST_LEN];
    char *layer; /* the task's output layer, as signed */
    char *at;    /* the given layer it was found to be (NULL: relocate) */
} vf_removal;

typedef struct vf_store_ent { /* one opened store, or why it is not */
    char *url;
    cnx_store *store; /* NULL: rc and why */
    int rc;
    char *why;
} vf_store_ent;

/* One subject occurrence, chained per URL. */
typedef struct vf_occ {
    size_t manifest, subject, next;
} vf_occ;
#define NO_OCC ((size_t)-1)

struct cnx_verify {
    cnx_verify_config cfg;
    unsigned checks;
    cnx_key **keys;
    size_t nkeys;
    vf_ledger *ledger;
    vf_repo *repo;
    vf_manifest **m;
    size_t n, cap, given;
    vf_map by_env; /* envelope digest -> manifest */
    vf_layer *layers;
    size_t nlayers, layers_cap;
    vf_removal *removals;
    size_t nremovals, removals_cap;
    int ledger_layers; /* --layer with a ledger: look for removed rows */
    vf_reloc *relocs;  /* the given ones first, then those derived */
    size_t nrelocs, relocs_cap, ngiven;
    cnx_verify_relocation *report; /* the public view, after run */
    vf_store_ent *stores;          /* every store opened, one per URL */
    size_t nstores, stores_cap;
    vf_map store_of; /* store URL -> stores[] */
    int ran;
    vf_findings findings;
    /* run state */
    vf_occ *occ;
    size_t nocc, occ_cap;
    vf_map by_url;    /* subject URL -> first occurrence */
    vf_map by_digest; /* subject digest -> first occurrence */
    vf_hash_job *jobs;
    size_t njobs, jobs_cap;
    vf_map job_of; /* URL -> job */
    cnx_progress *bar;
    cnx_verify_stats stats;
};

void cnx_verify_config_init(cnx_verify_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->storage = 1;
}

static int nomem(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
}

static int threads_of(const cnx_verify_config *cfg)
{
    long n = cfg->threads;
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* ---- keys ------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_keys(cnx_verify *v, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char *names[256];
    size_t n = 0;
    int rc = 0;
    if (d == NULL)
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "trust directory %s cannot be read", dir);
    while ((de = readdir(d)) != NULL && n < 256) {
        size_t len = strlen(de->d_name);
        if (len > 4 && (strcmp(de->d_name + len - 4, ".pub") == 0 ||
                        strcmp(de->d_name + len - 4, ".pem") == 0)) {
            names[n] = strdup(de->d_name);
            if (names[n] == NULL) {
                rc = nomem();
                break;
            }
            n++;
        }
    }
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_str);
    v->keys = calloc(n + 1, sizeof(*v->keys));
    if (rc == 0 && v->keys == NULL)
        rc = nomem();
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        rc = cnx_key_load_public(&v->keys[v->nkeys], path);
        if (rc != 0)
            cnx_error_wrap("trusted key %s", path);
        else
            v->nkeys++;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    if (rc == 0 && v->nkeys == 0)
        rc = cnx_error_set(CNX_ENOTFOUND, 0,
                           "trust directory %s holds no *.pub or *.pem key",
                           dir);
    return rc;
}

int cnx_verify_new(cnx_verify **out, const cnx_verify_config *cfg)
{
    cnx_verify *v = calloc(1, sizeof(*v));
    int rc = 0;
    *out = NULL;
    if (v == NULL)
        return nomem();
    v->cfg = *cfg;
    v->checks = cfg->checks ? cfg->checks : CNX_VERIFY_ALL;
    v->checks |= CNX_VERIFY_SIGNATURE | CNX_VERIFY_STATEMENT;
    if (cfg->trust_dir == NULL)
        rc = cnx_error_set(CNX_EINVAL, 0, "no trust directory");
    if (rc == 0)
        rc = load_keys(v, cfg->trust_dir);
    if (rc == 0 && cfg->ledger != NULL)
        rc = vf_ledger_open(&v->ledger, cfg->ledger);
    if (rc == 0 && cfg->repo != NULL)
        rc = vf_repo_open(&v->repo, cfg->repo, cfg->ref);
    if (rc != 0) {
        cnx_verify_free(v);
        return rc;
    }
    if (v->ledger == NULL)
        v->checks &= ~(CNX_VERIFY_LEDGER | CNX_VERIFY_PARAMETERS);
    if (v->repo == NULL)
        v->checks &= ~CNX_VERIFY_COMMIT;
    if (!cfg->storage)
        v->checks &= ~(CNX_VERIFY_SUBJECT | CNX_VERIFY_COVERAGE);
    *out = v;
    return 0;
}

void cnx_verify_free(cnx_verify *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->nkeys; i++)
        cnx_key_free(v->keys[i]);
    free(v->keys);
    vf_ledger_close(v->ledger);
    vf_repo_close(v->repo);
    for (size_t i = 0; i < v->n; i++) {
        vf_manifest_dispose(v->m[i]);
        free(v->m[i]);
    }
    free(v->m);
    vf_map_dispose(&v->by_env);
    for (size_t i = 0; i < v->nlayers; i++) {
        for (size_t k = 0; k < v->layers[i].nobjects; k++)
            free(v->layers[i].objects[k]);
        free(v->layers[i].objects);
        free(v->layers[i].url);
        free(v->layers[i].unlistable);
    }
    free(v->layers);
    for (size_t i = 0; i < v->nremovals; i++) {
        free(v->removals[i].object);
        free(v->removals[i].layer);
        free(v->removals[i].at);
    }
    free(v->removals);
    for (size_t i = 0; i < v->nrelocs; i++)
        cnx__verify_reloc_dispose(&v->relocs[i]);
    free(v->relocs);
    free(v->report);
    for (size_t i = 0; i < v->nstores; i++) {
        cnx_store_free(v->stores[i].store);
        free(v->stores[i].url);
        free(v->stores[i].why);
    }
    free(v->stores);
    vf_map_dispose(&v->store_of);
    vf_findings_dispose(&v->findings);
    free(v->occ);
    vf_map_dispose(&v->by_url);
    vf_map_dispose(&v->by_digest);
    free(v->jobs);
    vf_map_dispose(&v->job_of);
    free(v);
}

/* ---- sources --------------------------------------------------------- */

/* A new manifest record; text is taken over (NULL: unreadable). */
static int add_manifest(cnx_verify *v, const char *origin, char *text,
                        size_t len, vf_origin how, vf_manifest **out)
{
    vf_manifest *m;
    size_t old;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        vf_manifest **grown = realloc(v->m, cap * sizeof(*grown));
        if (grown == NULL) {
            free(text);
            return nomem();
        }
        v->m = grown;
        v->cap = cap;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL || (m->origin = strdup(origin)) == NULL) {
        free(m);
        free(text);
        return nomem();
    }
    m->text = text;
    m->len = len;
    m->how = how;
    m->ledger_partition = -1;
    if (text != NULL) {
        cnx_digest(text, len, m->env_digest);
        rc = vf_map_put(&v->by_env, m->env_digest, v->n, &old);
        if (rc < 0) {
            vf_manifest_dispose(m);
            free(m);
            return nomem();
        }
        if (rc == 0) { /* the same envelope from another source */
            vf_manifest_dispose(m);
            free(m);
            return 0;
        }
    }
    v->m[v->n++] = m;
    if (how == VF_GIVEN)
        v->given++;
    if (out != NULL)
        *out = m;
    return 0;
}

int cnx_verify_add_envelope(cnx_verify *v, const char *origin,
                            const char *envelope, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return nomem();
    memcpy(copy, envelope, len);
    copy[len] = '\0';
    return add_manifest(v, origin, copy, len, VF_GIVEN, NULL);
}

/* Read a whole file of at most CNX_JSON_MAX bytes; NULL with why. */
static char *slurp(const char *path, size_t *len, char *why, size_t cap)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t got;
    if (f == NULL) {
        snprintf(why, cap, "cannot read it: %s", strerror(errno));
        return NULL;
    }
    buf = malloc((size_t)CNX_JSON_MAX + 2);
    if (buf == NULL) {
        fclose(f);
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    got = fread(buf, 1, (size_t)CNX_JSON_MAX + 1, f);
    if (ferror(f)) {
        snprintf(why, cap, "cannot read it: %s", strerror(errno));
        free(buf);
        buf = NULL;
    } else if (got > CNX_JSON_MAX) {
        snprintf(why, cap, "over the %u-byte envelope limit", CNX_JSON_MAX);
        free(buf);
        buf = NULL;
    } else {
        char *small = realloc(buf, got + 1);
        buf = small != NULL ? small : buf;
        buf[got] = '\0';
        *len = got;
    }
    fclose(f);
    return buf;
}

int cnx_verify_add_file(cnx_verify *v, const char *path)
{
    char why[256];
    size_t len = 0;
    char *text = slurp(path, &len, why, sizeof(why));
    vf_manifest *m;
    int rc = add_manifest(v, path, text, len, VF_GIVEN, &m);
    if (rc == 0 && text == NULL && m != NULL) {
        m->unreadable = 1;
        rc = vf_add(&m->findings, path, "statement", "%s", why);
    }
    return rc;
}

/* ---- storage ----------------------------------------------------------- */

/*
 * The store at url (canonical), opened once for the whole verification and
 * kept, as is a failure to open it (its code and message), so that a
 * thousand objects of one scale open one store. Caller thread only; the
 * stores themselves are then shared by the hashing threads.
 * @return 0 with *store; CNX_ENOMEM; or the code that opening it gave,
 *         with its message in *why.
 */
static int store_at(cnx_verify *v, const char *url, cnx_store **store,
                    const char **why)
{
    const size_t *k = vf_map_get(&v->store_of, url);
    vf_store_ent *e;
    *store = NULL;
    *why = NULL;
    if (k == NULL) {
        if (v->nstores == v->stores_cap) {
            size_t cap = v->stores_cap ? v->stores_cap * 2 : 16;
            vf_store_ent *grown = realloc(v->stores, cap * sizeof(*grown));
            if (grown == NULL)
                return nomem();
            v->stores = grown;
            v->stores_cap = cap;
        }
        e = &v->stores[v->nstores];
        memset(e, 0, sizeof(*e));
        e->url = strdup(url);
        if (e->url == NULL)
            return nomem();
        e->rc = cnx__verify_store_open(&e->store, url);
        if (e->rc == CNX_ENOMEM ||
            (e->rc != 0 &&
             (e->why = strdup(cnx_error_last()->message)) == NULL)) {
            free(e->url);
            return nomem();
        }
        if (vf_map_put(&v->store_of, e->url, v->nstores, NULL) < 0) {
            cnx_store_free(e->store);
            free(e->url);
            free(e->why);
            return nomem();
        }
        k = vf_map_get(&v->store_of, url);
        v->nstores++;
    }
    e = &v->stores[*k];
    *store = e->store;
    *why = e->why;
    return e->rc;
}

static vf_layer *layer_get(cnx_verify *v, const char *url, int create)
{
    vf_layer *l;
    for (size_t i = 0; i < v->nlayers; i++)
        if (strcmp(v->layers[i].url, url) == 0)
            return &v->layers[i];
    if (!create)
        return NULL;
    if (v->nlayers == v->layers_cap) {
        size_t cap = v->layers_cap ? v->layers_cap * 2 : 8;
        vf_layer *grown = realloc(v->layers, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        v->layers = grown;
        v->layers_cap = cap;
    }
    l = &v->layers[v->nlayers];
    memset(l, 0, sizeof(*l));
    l->url = strdup(url);
    if (l->url == NULL)
        return NULL;
    v->nlayers++;
    return l;
}

typedef struct list_ctx {
    cnx_verify *v;
    vf_layer *layer;
    cnx_store *store;
    vf_origin how;
    int coverage;
    size_t listed;  /* objects listed */
    size_t lineage; /* of them under lineage/ */
} list_ctx;

static int is_hex64(const char *s, size_t n)
{
    if (n != 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* One envelope file of a layer's lineage/. */
static int add_stored(list_ctx *c, const char *name)
{
    static const size_t dir_len = sizeof(CNX_LINEAGE_DIR);
    static const size_t suf_len = sizeof(CNX_LINEAGE_SUFFIX) - 1;
    const char *key = name + dir_len, *slash = strchr(key, '/');
    const char *dig = slash != NULL ? slash + 1 : NULL;
    size_t dlen = dig != NULL ? strlen(dig) : 0;
    char url[4200];
    uint8_t *data = NULL;
    size_t len = 0;
    vf_manifest *m = NULL;
    int rc;

    snprintf(url, sizeof(url), "%s/%s", c->layer->url, name);
    if (dig == NULL || !is_hex64(key, (size_t)(slash - key)) ||
        dlen != 64 + suf_len || !is_hex64(dig, 64) ||
        strcmp(dig + 64, CNX_LINEAGE_SUFFIX) != 0)
        return vf_add(&c->v->findings, url, "statement",
                      "not a lineage envelope's name (" CNX_LINEAGE_DIR
                      "/<task key hex>/<envelope digest hex>"
                      CNX_LINEAGE_SUFFIX ")");
    rc = cnx_store_get(c->store, name, CNX_JSON_MAX, &data, &len);
    if (rc != 0 && rc != CNX_ENOMEM) {
        rc = add_manifest(c->v, url, NULL, 0, c->how, &m);
        if (rc == 0 && m != NULL) {
            m->unreadable = 1;
            rc = vf_add(&m->findings, url, "statement", "cannot read it: %s",
                        cnx_error_last()->message);
        }
        return rc;
    }
    if (rc != 0)
        return rc;
    rc = add_manifest(c->v, url, (char *)data, len, c->how, &m);
    if (rc == 0 && m != NULL) {
        snprintf(m->expect_key, sizeof(m->expect_key), "sha256:%.64s", key);
        snprintf(m->expect_digest, sizeof(m->expect_digest), "sha256:%.64s",
                 dig);
        m->stored_layer = strdup(c->layer->url);
        if (m->stored_layer == NULL)
            rc = nomem();
    }
    return rc;
}

/* A file:// store's swap lock (".lock.<name>") or put temporary
 * (".tmp.*"): never an object, but a directory copied to a bucket as it
 * is brings them along. */
static int is_scratch(const char *name)
{
    const char *base = strrchr(name, '/');
    base = base != NULL ? base + 1 : name;
    return strncmp(base, ".lock.", 6) == 0 || strncmp(base, ".tmp.", 5) == 0;
}

static int list_one(void *ctx, const char *name)
{
    list_ctx *c = ctx;
    vf_layer *l = c->layer;
    c->listed++;
    if (strncmp(name, CNX_LINEAGE_DIR "/", sizeof(CNX_LINEAGE_DIR)) == 0) {
        c->lineage++;
        return add_stored(c, name);
    }
    if (!c->coverage || strcmp(name, "info") == 0 ||
        strcmp(name, "info.lock") == 0 || strcmp(name, "provenance") == 0 ||
        is_scratch(name))
        return 0;
    if (l->nobjects == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        char **grown = realloc(l->objects, cap * sizeof(*grown));
        if (grown == NULL)
            return nomem();
        l->objects = grown;
        l->cap = cap;
    }
    l->objects[l->nobjects] = strdup(name);
    if (l->objects[l->nobjects] == NULL)
        return nomem();
    l->nobjects++;
    return 0;
}

/*
 * Read a layer's envelopes (and, if coverage, the names of its objects),
 * through the store at its URL, whatever its scheme. A layer that does not
 * exist, or lists nothing, has no lineage: walked to, it is a root. One
 * that cannot be listed (http(s)) is remembered as such: its inputs are
 * then findings, never taken for roots.
 */
static int load_layer(cnx_verify *v, vf_layer *l, vf_origin how, int coverage)
{
    cnx_store *store = NULL;
    const char *why = NULL;
    list_ctx c;
    int rc;

    l->visited = 1;
    rc = store_at(v, l->url, &store, &why);
    if (rc == CNX_ENOMEM)
        return rc;
    if (rc == CNX_ENOTFOUND && !coverage)
        return 0;
    if (rc == CNX_ENOTFOUND)
        return cnx_error_set(CNX_ENOTFOUND, 0, "layer %s does not exist",
                             l->url);
    if (rc != 0 && coverage)
        return cnx_error_set(rc, 0, "layer %s: %s", l->url, why);
    memset(&c, 0, sizeof(c));
    c.v = v;
    c.layer = l;
    c.store = store;
    c.how = how;
    c.coverage = coverage;
    if (rc == 0)
        rc = cnx_store_list(store, coverage ? "" : CNX_LINEAGE_DIR, list_one,
                            &c);
    if (rc != 0 && !coverage && rc != CNX_ENOMEM && rc != CNX_EIO) {
        /* cannot be listed (or opened): its inputs cannot be traced */
        l->unlistable = strdup(why != NULL ? why : cnx_error_last()->message);
        return l->unlistable != NULL ? 0 : nomem();
    }
    if (rc != 0)
        return rc;
    l->has_lineage = c.lineage > 0;
    if (coverage && c.listed == 0)
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "layer %s does not exist "
                             "(nothing is stored under it)",
                             l->url);
    if (how == VF_WALKED || coverage)
        v->stats.layers++;
    return 0;
}

int cnx_verify_add_layer(cnx_verify *v, const char *url)
{
    cnx_url u;
    vf_layer *l;
    int rc = cnx_url_parse(&u, url, CNX_URL_ALLOW_PATH);
    if (rc != 0)
        return rc;
    l = layer_get(v, u.canonical, 1);
    if (l == NULL)
        return nomem();
    if (l->given)
        return 0;
    l->given = 1;
    if (v->ledger != NULL)
        v->ledger_layers = 1;
    return load_layer(v, l, VF_GIVEN, 1);
}

int cnx_verify_add_relocation(cnx_verify *v, const char *old_url,
                              const char *new_url)
{
    cnx_url from, to;
    vf_reloc *r;
    int rc;
    if (v->ran)
        return cnx_error_set(CNX_EINVAL, 0,
                             "relocations are added before the run");
    rc = cnx_url_parse(&from, old_url, CNX_URL_ALLOW_PATH);
    if (rc == 0)
        rc = cnx_url_parse(&to, new_url, CNX_URL_ALLOW_PATH);
    if (rc != 0)
        return cnx_error_wrap("relocation %s=%s", old_url, new_url);
    if (v->nrelocs == v->relocs_cap) {
        size_t cap = v->relocs_cap ? v->relocs_cap * 2 : 8;
        vf_reloc *grown = realloc(v->relocs, cap * sizeof(*grown));
        if (grown == NULL)
            return nomem();
        v->relocs = grown;
        v->relocs_cap = cap;
    }
    assert(v->nrelocs == v->ngiven); /* no derived one before the run */
    r = &v->relocs[v->nrelocs];
    memset(r, 0, sizeof(*r));
    r->from = strdup(from.canonical);
    r->to = strdup(to.canonical);
    if (r->from == NULL || r->to == NULL) {
        cnx__verify_reloc_dispose(r);
        return nomem();
    }
    v->nrelocs++;
    v->ngiven++;
    return 0;
}

/* A verified ledger row whose envelope must still be stored, in the given
 * layer at (NULL: where its output layer is now, relocated). */
static int add_removal(cnx_verify *v, const char *object, const char *digest,
                       const char *text, size_t len, const char *at)
{
    vf_removal *r;
    if (v->nremovals == v->removals_cap) {
        size_t cap = v->removals_cap ? v->removals_cap * 2 : 64;
        vf_removal *grown = realloc(v->removals, cap * sizeof(*grown));
        if (grown == NULL)
            return nomem();
        v->removals = grown;
        v->removals_cap = cap;
    }
    r = &v->removals[v->nremovals];
    memset(r, 0, sizeof(*r));
    if (vf_envelope_locate(text, len, &r->layer, r->key) != 0)
        return 0; /* unreadable statement: the row's own finding */
    r->object = strdup(object);
    r->at = at != NULL ? strdup(at) : NULL;
    if (r->object == NULL || (at != NULL && r->at == NULL)) {
        free(r->object);
        free(r->at);
        free(r->layer);
        return nomem();
    }
    snprintf(r->digest, sizeof(r->digest), "%s", digest);
    v->nremovals++;
    return 0;
}

static void row_name(const cnx_verify *v, int p, int64_t o, char *out,
                     size_t cap)
{
    snprintf(out, cap, "%s: lineage partition %d offset %lld",
             vf_ledger_path(v->ledger), p, (long long)o);
}

static int request_row(void *ctx, int p, int64_t o, const char *digest,
                       int verified, const char *text, size_t len)
{
    cnx_verify *v = ctx;
    char origin[4200], *copy = malloc(len + 1);
    vf_manifest *m = NULL;
    int rc;
    if (copy == NULL)
        return nomem();
    memcpy(copy, text, len);
    copy[len] = '\0';
    row_name(v, p, o, origin, sizeof(origin));
    rc = add_manifest(v, origin, copy, len, VF_GIVEN, &m);
    if (rc == 0 && m != NULL) {
        snprintf(m->expect_digest, sizeof(m->expect_digest), "%s", digest);
        m->ledger_partition = p;
        m->ledger_offset = o;
    }
    if (rc == 0 && verified == 1)
        rc = add_removal(v, origin, digest, text, len, NULL);
    return rc;
}

int cnx_verify_add_request(cnx_verify *v, const char *request)
{
    int rc;
    if (v->ledger == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "--request needs a ledger");
    rc = vf_ledger_has_request(v->ledger, request);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        char file[1024];
        if (vf_ledger_archived(v->ledger, request, file, sizeof(file)) == 1)
            return cnx_error_set(CNX_ENOTFOUND, 0, "the ledger %s has no "
                                 "request %s: it was archived in %s (verify "
                                 "that file)", vf_ledger_path(v->ledger),
                                 request, file);
        return cnx_error_set(CNX_ENOTFOUND, 0, "the ledger %s has no "
                             "request %s", vf_ledger_path(v->ledger),
                             request);
    }
    return vf_ledger_rows(v->ledger, request, request_row, v);
}

/* ---- verification rounds --------------------------------------------- */

static void progress_cb(void *ctx, size_t done)
{
    cnx_verify *v = ctx;
    cnx_progress_update(v->bar, (int64_t)done);
}

typedef struct round_ctx {
    cnx_verify *v;
    size_t from;
} round_ctx;

static void check_one(void *ctx, size_t i, int thread)
{
    round_ctx *r = ctx;
    (void)thread;
    vf_manifest_check(r->v->m[r->from + i], r->v->keys, r->v->nkeys,
                      r->v->relocs, r->v->ngiven);
}

static void round_progress(void *ctx, size_t done)
{
    progress_cb(((round_ctx *)ctx)->v, done);
}

static int index_manifest(cnx_verify *v, size_t mi)
{
    vf_manifest *m = v->m[mi];
    if (!m->stmt_ok)
        return 0;
    for (size_t s = 0; s < m->nsubjects; s++) {
        size_t old, k;
        int rc;
        if (v->nocc == v->occ_cap) {
            size_t cap = v->occ_cap ? v->occ_cap * 2 : 1024;
            vf_occ *grown = realloc(v->occ, cap * sizeof(*grown));
            if (grown == NULL)
                return nomem();
            v->occ = grown;
            v->occ_cap = cap;
        }
        k = v->nocc++;
        v->occ[k].manifest = mi;
        v->occ[k].subject = s;
        v->occ[k].next = NO_OCC;
        rc = vf_map_put(&v->by_url, m->subjects[s].name, k, &old);
        if (rc < 0)
            return nomem();
        if (rc == 0) { /* append to the URL's chain */
            while (v->occ[old].next != NO_OCC)
                old = v->occ[old].next;
            v->occ[old].next = k;
        }
        if (vf_map_put(&v->by_digest, m->subjects[s].digest, k, NULL) < 0)
            return nomem();
    }
    return 0;
}

/* Layers of inputs no known manifest wrote, read once each. */
static int walk(cnx_verify *v, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        vf_manifest *m = v->m[i];
        if (!m->stmt_ok)
            continue;
        for (size_t k = 0; k < m->ninputs; k++) {
            vf_layer *l;
            int rc;
            if (vf_map_get(&v->by_url, m->inputs[k].name) != NULL)
                continue;
            l = layer_get(v, m->inputs[k].layer, 1);
            if (l == NULL)
                return nomem();
            if (l->visited)
                continue;
            rc = load_layer(v, l, VF_WALKED, 0);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* The relocation a manifest derived, added to the list unless there. */
static int note_relocation(cnx_verify *v, const vf_manifest *m)
{
    const vf_reloc *d = &m->reloc;
    vf_reloc *r;
    if (d->from == NULL)
        return 0;
    for (size_t i = v->ngiven; i < v->nrelocs; i++)
        if (strcmp(v->relocs[i].from, d->from) == 0 &&
            strcmp(v->relocs[i].to, d->to) == 0)
            return 0;
    if (v->nrelocs == v->relocs_cap) {
        size_t cap = v->relocs_cap ? v->relocs_cap * 2 : 8;
        vf_reloc *grown = realloc(v->relocs, cap * sizeof(*grown));
        if (grown == NULL)
            return nomem();
        v->relocs = grown;
        v->relocs_cap = cap;
    }
    r = &v->relocs[v->nrelocs];
    r->from = strdup(d->from);
    r->to = strdup(d->to);
    r->written = strdup(d->written);
    r->found = strdup(d->found);
    if (r->from == NULL || r->to == NULL || r->written == NULL ||
        r->found == NULL) {
        cnx__verify_reloc_dispose(r);
        return nomem();
    }
    v->nrelocs++;
    return 0;
}

static int verify_rounds(cnx_verify *v)
{
    size_t from = 0;
    double t0 = cnx_now();
    int rc = 0;
    while (from < v->n) {
        size_t to = v->n;
        round_ctx r = {v, from};
        v->bar = cnx_progress_start(from == 0 ? "verifying manifests"
                                              : "verifying inputs' manifests",
                                    (int64_t)(to - from), !v->cfg.progress);
        vf_parallel(threads_of(&v->cfg), to - from, check_one, &r,
                    round_progress);
        cnx_progress_finish(v->bar);
        v->bar = NULL;
        for (size_t i = from; i < to && rc == 0; i++)
            rc = index_manifest(v, i);
        for (size_t i = from; i < to && rc == 0; i++)
            rc = note_relocation(v, v->m[i]);
        if (rc == 0 && (v->checks & CNX_VERIFY_INPUT) && v->cfg.storage)
            rc = walk(v, from, to);
        if (rc != 0)
            return rc;
        from = to;
    }
    v->stats.verify_s = cnx_now() - t0;
    return 0;
}

/* ---- hashing --------------------------------------------------------- */

/* Where job's object is stored: the store that holds it (cnx/url.h splits
 * the URL) and its name there; a URL that is none, or a store that cannot
 * be opened, is the job's status. @return 0 or CNX_ENOMEM. */
static int locate(cnx_verify *v, vf_hash_job *j)
{
    char store_url[CNX_URL_MAX];
    const char *name = NULL, *why = NULL;
    cnx_url u;
    int rc = cnx_url_parse(&u, j->url, 0);
    if (rc == 0)
        rc = cnx_url_split_object(u.canonical, store_url, &name);
    if (rc == 0 && strlen(name) >= sizeof(j->name_buf))
        rc = cnx_error_set(CNX_ENAME, 0, "object name too long");
    if (rc != 0) {
        j->status = rc;
        snprintf(j->error, sizeof(j->error), "%s", cnx_error_last()->message);
        return 0;
    }
    memcpy(j->name_buf, name, strlen(name) + 1);
    rc = store_at(v, store_url, &j->store, &why);
    if (rc == CNX_ENOMEM)
        return rc;
    if (rc != 0) {
        j->store = NULL;
        j->status = rc;
        snprintf(j->error, sizeof(j->error), "%s", why);
    }
    return 0;
}

/* layer: the URL of the layer an input was read from (NULL for subjects):
 * a chunk of a sharded scale is read from its shard through it. */
static int want_hash(cnx_verify *v, const char *url, const char *layer)
{
    int rc;
    if (v->njobs == v->jobs_cap) {
        size_t cap = v->jobs_cap ? v->jobs_cap * 2 : 256;
        vf_hash_job *grown = realloc(v->jobs, cap * sizeof(*grown));
        if (grown == NULL)
            return nomem();
        v->jobs = grown;
        v->jobs_cap = cap;
    }
    rc = vf_map_put(&v->job_of, url, v->njobs, NULL);
    if (rc < 0)
        return nomem();
    if (rc == 1) {
        vf_hash_job *j = &v->jobs[v->njobs++];
        memset(j, 0, sizeof(*j));
        j->url = url;
        j->layer = layer;
        return locate(v, j);
    }
    return 0;
}

static const vf_hash_job *job(const cnx_verify *v, const char *url)
{
    const size_t *k = vf_map_get(&v->job_of, url);
    return k != NULL ? &v->jobs[*k] : NULL;
}

static int is_root(cnx_verify *v, const vf_art *in)
{
    vf_layer *l = layer_get(v, in->layer, 0);
    return l != NULL && l->visited && !l->has_lineage && !l->unlistable;
}

static void hash_one(void *ctx, size_t i, int thread)
{
    cnx_verify *v = ctx;
    (void)thread;
    cnx__verify_hash_object(&v->jobs[i]);
}

static int hash_objects(cnx_verify *v)
{
    double t0 = cnx_now();
    int rc = 0;
    for (size_t i = 0; i < v->n && rc == 0; i++) {
        vf_manifest *m = v->m[i];
        if (!m->stmt_ok)
            continue;
        if ((v->checks & CNX_VERIFY_SUBJECT) && m->how == VF_GIVEN)
            for (size_t s = 0; s < m->nsubjects && rc == 0; s++)
                rc = want_hash(v, m->subjects[s].name, NULL);
        if ((v->checks & CNX_VERIFY_INPUT) && v->cfg.storage)
            for (size_t k = 0; k < m->ninputs && rc == 0; k++)
                if (vf_map_get(&v->by_url, m->inputs[k].name) == NULL &&
                    is_root(v, &m->inputs[k]))
                    rc = want_hash(v, m->inputs[k].name,
                                   m->inputs[k].layer);
    }
    if (rc != 0 || v->njobs == 0)
        return rc;
    v->bar = cnx_progress_start("hashing stored objects", (int64_t)v->njobs,
                                !v->cfg.progress);
    vf_parallel(threads_of(&v->cfg), v->njobs, hash_one, v, progress_cb);
    cnx_progress_finish(v->bar);
    v->bar = NULL;
    for (size_t i = 0; i < v->njobs; i++)
        v->stats.bytes += v->jobs[i].size;
    v->stats.objects = v->njobs;
    v->stats.hash_s = cnx_now() - t0;
    return 0;
}

/* ---- checks ---------------------------------------------------------- */

/* "; <url> ... the bytes of Y written by task K" when digest is another
 * object's subject, else "". */
static void bytes_of(const cnx_verify *v, const char *digest,
                     const char *self, char *out, size_t cap)
{
    const size_t *k = vf_map_get(&v->by_digest, digest);
    out[0] = '\0';
    if (k == NULL)
        return;
    const vf_occ *o = &v->occ[*k];
    const vf_manifest *p = v->m[o->manifest];
    const char *y = p->subjects[o->subject].name;
    if (strcmp(y, self) == 0)
        return;
    snprintf(out, cap, ": the bytes of %s written by task %s", y,
             p->task_key);
}

static int check_subjects(cnx_verify *v)
{
    int rc = 0;
    for (size_t i = 0; i < v->n && rc == 0; i++) {
        const vf_manifest *m = v->m[i];
        if (!m->stmt_ok || m->how != VF_GIVEN)
            continue;
        for (size_t s = 0; s < m->nsubjects && rc == 0; s++) {
            const vf_art *a = &m->subjects[s];
            const vf_hash_job *j = job(v, a->name);
            char other[600];
            if (j == NULL)
                continue;
            if (j->status == CNX_ENOTFOUND)
                rc = vf_add(&v->findings, a->name, "subject",
                            "missing from storage; manifest %s (task %s) "
                            "wrote %s", m->origin, m->task_key, a->digest);
            else if (j->status != 0)
                rc = vf_add(&v->findings, a->name, "subject",
                            "cannot read it (%s); manifest %s wrote %s",
                            j->error, m->origin, a->digest);
            else if (strcmp(j->digest, a->digest) != 0) {
                bytes_of(v, j->digest, a->name, other, sizeof(other));
                rc = vf_add(&v->findings, a->name, "subject",
                            "storage now holds %s%s, but manifest %s "
                            "(task %s) wrote %s",
                            j->digest, other, m->origin, m->task_key,
                            a->digest);
            }
        }
    }
    return rc;
}

static int check_input(cnx_verify *v, const vf_manifest *m, const vf_art *in)
{
    const size_t *first = vf_map_get(&v->by_url, in->name);
    char other[600];
    v->stats.inputs++;
    if (first != NULL) {
        const vf_occ *o = &v->occ[*first];
        for (size_t k = *first; k != NO_OCC; k = v->occ[k].next) {
            const vf_manifest *p = v->m[v->occ[k].manifest];
            if (strcmp(p->subjects[v->occ[k].subject].digest, in->digest) ==
                0)
                return 0;
        }
        const vf_manifest *p = v->m[o->manifest];
        bytes_of(v, in->digest, in->name, other, sizeof(other));
        return vf_add(&v->findings, m->origin, "input",
                      "reads %s as %s but its manifest %s (task %s) wrote "
                      "%s%s%s",
                      in->name, in->digest, p->origin, p->task_key,
                      p->subjects[o->subject].digest,
                      other[0] ? "; it then held" : "", other);
    }
    if (!v->cfg.storage)
        return 0; /* no storage: a root cannot be told from a gap */
    {
        vf_layer *l = layer_get(v, in->layer, 0);
        const vf_hash_job *j;
        if (l == NULL || !l->visited)
            return 0;
        if (l->unlistable != NULL)
            return vf_add(&v->findings, m->origin, "input",
                          "cannot check %s: its layer %s cannot be listed "
                          "for its lineage (%s)",
                          in->name, in->layer, l->unlistable);
        if (l->has_lineage) {
            bytes_of(v, in->digest, in->name, other, sizeof(other));
            return vf_add(&v->findings, m->origin, "input",
                          "no manifest wrote %s (read as %s), though its "
                          "layer %s keeps lineage%s%s",
                          in->name, in->digest, in->layer,
                          other[0] ? "; those are" : "", other);
        }
        j = job(v, in->name);
        if (j == NULL)
            return vf_add(&v->findings, m->origin, "input",
                          "cannot check %s: its layer cannot be read",
                          in->name);
        if (j->status == CNX_ENOTFOUND)
            return vf_add(&v->findings, m->origin, "input",
                          "reads raw input %s (no lineage), which is no "
                          "longer in storage", in->name);
        if (j->status != 0)
            return vf_add(&v->findings, m->origin, "input",
                          "cannot read raw input %s: %s", in->name, j->error);
        if (strcmp(j->digest, in->digest) != 0) {
            bytes_of(v, j->digest, in->name, other, sizeof(other));
            return vf_add(&v->findings, m->origin, "input",
                          "reads raw input %s (no lineage) as %s but it now "
                          "holds %s%s%s",
                          in->name, in->digest, j->digest,
                          other[0] ? "; now" : "", other);
        }
    }
    return 0;
}

static int check_inputs(cnx_verify *v)
{
    int rc = 0;
    for (size_t i = 0; i < v->n && rc == 0; i++) {
        const vf_manifest *m = v->m[i];
        if (!m->stmt_ok)
            continue;
        for (size_t k = 0; k < m->ninputs && rc == 0; k++)
            rc = check_input(v, m, &m->inputs[k]);
    }
    return rc;
}

static int check_coverage(cnx_verify *v)
{
    int rc = 0;
    for (size_t i = 0; i < v->nlayers && rc == 0; i++) {
        const vf_layer *l = &v->layers[i];
        if (!l->given)
            continue;
        for (size_t k = 0; k < l->nobjects && rc == 0; k++) {
            char url[4200];
            snprintf(url, sizeof(url), "%s/%s", l->url, l->objects[k]);
            if (vf_map_get(&v->by_url, url) == NULL)
                rc = vf_add(&v->findings, url, "coverage",
                            "no verified manifest covers it");
        }
    }
    return rc;
}

static int check_commits(cnx_verify *v)
{
    int rc = 0;
    for (size_t i = 0; i < v->n && rc == 0; i++) {
        const vf_manifest *m = v->m[i];
        int r;
        if (!m->stmt_ok)
            continue;
        r = vf_repo_check(v->repo, m->commit);
        if (r < 0)
            return r;
        if (r == 1)
            rc = vf_add(&v->findings, m->origin, "commit",
                        "code commit %s is not in repository %s", m->commit,
                        v->cfg.repo);
        else if (r == 2)
            rc = vf_add(&v->findings, m->origin, "commit",
                        "code commit %s is not reachable from %s", m->commit,
                        v->cfg.ref);
        if (rc == 0 && m->dirty)
            rc = vf_add(&v->findings, m->origin, "commit",
                        "built from a dirty tree (commit %s with uncommitted "
                        "changes)", m->commit);
    }
    return rc;
}

static int layer_row(void *ctx, int p, int64_t o, const char *digest,
                     int verified, const char *text, size_t len)
{
    cnx_verify *v = ctx;
    char *layer = NULL, key[CNX_DIGEST_LEN], name[4200];
    vf_layer *l;
    int rc = 0;
    (void)verified;
    if (vf_envelope_locate(text, len, &layer, key) != 0)
        return 0;
    l = layer_get(v, layer, 0);
    /* a given layer may be this one moved: by any relocation */
    for (size_t i = 0; (l == NULL || !l->given) && i < v->nrelocs; i++) {
        char *moved = NULL;
        rc = cnx__verify_reloc_apply(&v->relocs[i], layer, &moved);
        if (rc == CNX_ENOMEM) {
            free(layer);
            return rc;
        }
        l = moved != NULL ? layer_get(v, moved, 0) : NULL;
        free(moved);
    }
    free(layer);
    if (l == NULL || !l->given)
        return 0;
    row_name(v, p, o, name, sizeof(name));
    return add_removal(v, name, digest, text, len, l->url);
}

/* Is a verified row's envelope still stored, where its layer is now? */
static int check_removal(cnx_verify *v, const vf_removal *r)
{
    const vf_reloc *rel = NULL;
    char name[300], url[CNX_URL_MAX + 300], *moved = NULL;
    const char *layer = r->at, *why = NULL;
    cnx_store *store = NULL;
    int exists = 0, rc;
    if (!cnx_digest_valid(r->digest))
        return 0; /* the row's own finding */
    if (layer == NULL)
        rel = cnx__verify_reloc_find(v->relocs, v->nrelocs, r->layer);
    rc = rel != NULL ? cnx__verify_reloc_apply(rel, r->layer, &moved) : 0;
    if (rc == CNX_ENOMEM)
        return rc;
    if (layer == NULL)
        layer = moved != NULL ? moved : r->layer;
    snprintf(name, sizeof(name), "%s/%s/%s%s", CNX_LINEAGE_DIR, r->key + 7,
             r->digest + 7, CNX_LINEAGE_SUFFIX);
    snprintf(url, sizeof(url), "%s/%s", layer, name);
    rc = store_at(v, layer, &store, &why);
    if (rc == 0) {
        rc = cnx_store_exists(store, name, &exists);
        why = rc != 0 ? cnx_error_last()->message : NULL;
    }
    if (rc == CNX_ENOMEM || (rc == 0 && exists)) {
        free(moved);
        return rc;
    }
    if (rc == 0 || rc == CNX_ENOTFOUND)
        rc = vf_add(&v->findings, r->object, "ledger",
                    "manifest removed: the ledger's verified envelope %s "
                    "(task %s) is not stored at %s",
                    r->digest, r->key, url);
    else
        rc = vf_add(&v->findings, r->object, "ledger",
                    "cannot tell whether the ledger's verified envelope %s "
                    "(task %s) is stored at %s: %s",
                    r->digest, r->key, url, why);
    free(moved);
    return rc;
}

static int check_ledger(cnx_verify *v)
{
    size_t rows = 0;
    int rc = vf_ledger_check_chain(v->ledger, &v->findings, &rows);
    for (size_t i = 0; i < v->n && rc == 0; i++) {
        const vf_manifest *m = v->m[i];
        char why[256], got[CNX_DIGEST_LEN];
        int p = 0;
        int64_t o = 0;
        int r;
        if (m->how != VF_GIVEN || !m->sig_ok || m->ledger_partition >= 0)
            continue;
        r = vf_ledger_find_envelope(v->ledger, m->env_digest, &p, &o, why,
                                    sizeof(why));
        if (r < 0)
            return r;
        if (r == 0)
            rc = vf_add(&v->findings, m->origin, "ledger",
                        "not in the ledger: no lineage row has envelope %s",
                        m->env_digest);
        else if (r == 2)
            rc = vf_add(&v->findings, m->origin, "ledger",
                        "the ledger's row (partition %d offset %lld) marks "
                        "it unverified: %s", p, (long long)o, why);
        for (size_t s = 0; rc == 0 && m->stmt_ok && s < m->nsubjects; s++) {
            const vf_art *a = &m->subjects[s];
            rc = vf_ledger_output(v->ledger, m->task_key,
                                  a->signed_name ? a->signed_name : a->name,
                                  got);
            if (rc != 0)
                return rc;
            if (got[0] == '\0')
                rc = vf_add(&v->findings, a->name, "ledger",
                            "the ledger's outputs have no row for it under "
                            "task %s", m->task_key);
            else if (strcmp(got, a->digest) != 0)
                rc = vf_add(&v->findings, a->name, "ledger",
                            "the ledger's outputs row (task %s) says %s but "
                            "manifest %s wrote %s",
                            m->task_key, got, m->origin, a->digest);
        }
    }
    /* Ledger-sourced manifests: outputs rows too. */
    for (size_t i = 0; i < v->n && rc == 0; i++) {
        const vf_manifest *m = v->m[i];
        char got[CNX_DIGEST_LEN];
        if (m->ledger_partition < 0 || !m->stmt_ok)
            continue;
        for (size_t s = 0; rc == 0 && s < m->nsubjects; s++) {
            const vf_art *a = &m->subjects[s];
            rc = vf_ledger_output(v->ledger, m->task_key,
                                  a->signed_name ? a->signed_name : a->name,
                                  got);
            if (rc != 0)
                return rc;
            if (got[0] != '\0' && strcmp(got, a->digest) != 0)
                rc = vf_add(&v->findings, a->name, "ledger",
                            "the ledger's outputs row (task %s) says %s but "
                            "manifest %s wrote %s",
                            m->task_key, got, m->origin, a->digest);
        }
    }
    if (rc == 0 && v->ledger_layers)
        rc = vf_ledger_rows(v->ledger, NULL, layer_row, v);
    for (size_t i = 0; i < v->nremovals && rc == 0; i++)
        rc = check_removal(v, &v->removals[i]);
    return rc;
}

typedef struct wf_cache {
    char *request;
    cnx_workflow *wf; /* NULL: none or unparsable */
    char error[600];
} wf_cache;

static int check_parameters(cnx_verify *v)
{
    wf_cache *cache = NULL;
    size_t ncache = 0;
    int rc = 0;
    for (size_t i = 0; i < v->n && rc == 0; i++) {
        const vf_manifest *m = v->m[i];
        char stage[64];
        wf_cache *c = NULL;
        int si;
        if (m->how != VF_GIVEN || !m->stmt_ok)
            continue;
        rc = vf_ledger_task_stage(v->ledger, m->request, m->task_key, stage,
                                  sizeof(stage));
        if (rc != 0)
            break;
        if (stage[0] == '\0')
            continue; /* not the ledger's: the ledger check says so */
        for (size_t k = 0; k < ncache; k++)
            if (strcmp(cache[k].request, m->request) == 0)
                c = &cache[k];
        if (c == NULL) {
            char *json = NULL;
            wf_cache *grown = realloc(cache, (ncache + 1) * sizeof(*cache));
            if (grown == NULL) {
                rc = nomem();
                break;
            }
            cache = grown;
            c = &cache[ncache++];
            memset(c, 0, sizeof(*c));
            c->request = strdup(m->request);
            rc = vf_ledger_workflow(v->ledger, m->request, &json);
            if (rc == 0 && c->request == NULL)
                rc = nomem();
            if (rc != 0) {
                free(json);
                break;
            }
            if (json == NULL)
                snprintf(c->error, sizeof(c->error), "the ledger has no "
                         "request %s", m->request);
            else if (cnx_workflow_parse(&c->wf, json, strlen(json)) != 0)
                snprintf(c->error, sizeof(c->error), "%s",
                         cnx_error_last()->message);
            free(json);
        }
        if (c->wf == NULL) {
            rc = vf_add(&v->findings, m->origin, "parameters",
                        "cannot read request %s's workflow: %s", m->request,
                        c->error);
            continue;
        }
        si = cnx_workflow_find_stage(c->wf, stage);
        if (si < 0) {
            rc = vf_add(&v->findings, m->origin, "parameters",
                        "task %s (request %s) is of stage %s, which request "
                        "%s's workflow does not have",
                        m->task_key, m->request, stage, m->request);
            continue;
        }
        const cnx_wf_stage *ws = &c->wf->stages[si];
        if (strcmp(ws->parameters, m->parameters) != 0)
            rc = vf_add(&v->findings, m->origin, "parameters",
                        "task %s (request %s, stage %s) ran with parameters "
                        "%.300s but the workflow's stage %s has %.300s",
                        m->task_key, m->request, stage, m->parameters, stage,
                        ws->parameters);
        if (rc == 0 && (ws->kernel_version != m->kernel_version ||
                        strcmp(ws->worker, m->stage) != 0))
            rc = vf_add(&v->findings, m->origin, "parameters",
                        "task %s (request %s, stage %s) ran %s kernel v%lld "
                        "but the workflow's stage %s runs %s kernel v%lld",
                        m->task_key, m->request, stage, m->stage,
                        (long long)m->kernel_version, stage, ws->worker,
                        (long long)ws->kernel_version);
    }
    for (size_t k = 0; k < ncache; k++) {
        free(cache[k].request);
        cnx_workflow_free(cache[k].wf);
    }
    free(cache);
    return rc;
}

static int cmp_finding(const void *a, const void *b)
{
    const cnx_verify_finding *x = a, *y = b;
    int c = strcmp(x->object, y->object);
    if (c == 0)
        c = strcmp(x->check, y->check);
    return c != 0 ? c : strcmp(x->reason, y->reason);
}

static void sort_unique(vf_findings *f)
{
    size_t w = 0;
    if (f->n == 0)
        return;
    qsort(f->items, f->n, sizeof(*f->items), cmp_finding);
    for (size_t r = 1; r < f->n; r++) {
        if (cmp_finding(&f->items[w], &f->items[r]) == 0) {
            free((char *)f->items[r].object);
            free((char *)f->items[r].check);
            free((char *)f->items[r].reason);
        } else {
            f->items[++w] = f->items[r];
        }
    }
    f->n = w + 1;
}

int cnx_verify_run(cnx_verify *v)
{
    double t0 = cnx_now();
    int rc;
    v->ran = 1;
    rc = verify_rounds(v);
    if (rc == 0)
        rc = hash_objects(v);
    for (size_t i = 0; i < v->n && rc == 0; i++)
        rc = vf_move(&v->findings, &v->m[i]->findings);
    if (rc == 0 && (v->checks & CNX_VERIFY_SUBJECT))
        rc = check_subjects(v);
    if (rc == 0 && (v->checks & CNX_VERIFY_INPUT))
        rc = check_inputs(v);
    if (rc == 0 && (v->checks & CNX_VERIFY_COVERAGE))
        rc = check_coverage(v);
    if (rc == 0 && (v->checks & CNX_VERIFY_COMMIT))
        rc = check_commits(v);
    if (rc == 0 && (v->checks & CNX_VERIFY_LEDGER))
        rc = check_ledger(v);
    if (rc == 0 && (v->checks & CNX_VERIFY_PARAMETERS))
        rc = check_parameters(v);
    sort_unique(&v->findings);
    if (rc == 0 && v->nrelocs > 0) {
        free(v->report);
        v->report = calloc(v->nrelocs, sizeof(*v->report));
        if (v->report == NULL)
            rc = CNX_ENOMEM;
        for (size_t i = 0; rc == 0 && i < v->nrelocs; i++) {
            v->report[i].from = v->relocs[i].from;
            v->report[i].to = v->relocs[i].to;
            v->report[i].written = v->relocs[i].written;
            v->report[i].found = v->relocs[i].found;
        }
    }
    v->stats.manifests = v->n;
    v->stats.manifests_given = v->given;
    v->stats.total_s = cnx_now() - t0;
    if (rc == CNX_ENOMEM)
        cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    return rc;
}

const cnx_verify_finding *cnx_verify_findings(const cnx_verify *v,
                                              size_t *count)
{
    *count = v->findings.n;
    return v->findings.items;
}

void cnx_verify_get_stats(const cnx_verify *v, cnx_verify_stats *out)
{
    *out = v->stats;
}

const cnx_verify_relocation *cnx_verify_relocations(const cnx_verify *v,
                                                    size_t *count)
{
    *count = v->report != NULL ? v->nrelocs : 0;
    return v->report;
}

int cnx_verify_report_json(const cnx_verify *v, char **out)
{
    json_t *root = json_object(), *list = json_array();
    json_t *moved = json_array();
    size_t nrel = 0;
    const cnx_verify_relocation *rel = cnx_verify_relocations(v, &nrel);
    int oom = root == NULL || list == NULL || moved == NULL;
    *out = NULL;
    for (size_t i = 0; !oom && i < nrel; i++) {
        json_t *o = json_pack("{s:s, s:s, s:s?, s:s?}", "from", rel[i].from,
                              "to", rel[i].to, "written", rel[i].written,
                              "found", rel[i].found);
        oom = o == NULL || json_array_append_new(moved, o) != 0;
    }
    for (size_t i = 0; !oom && i < v->findings.n; i++) {
        const cnx_verify_finding *f = &v->findings.items[i];
        json_t *o = json_pack("{s:s, s:s, s:s}", "object", f->object, "check",
                              f->check, "reason", f->reason);
        oom = o == NULL || json_array_append_new(list, o) != 0;
    }
    if (!oom)
        oom = json_object_set_new(root, "ok",
                                  json_boolean(v->findings.n == 0)) != 0 ||
              json_object_set_new(root, "manifests",
                                  json_integer((json_int_t)v->stats.manifests)) ||
              json_object_set_new(root, "objects",
                                  json_integer((json_int_t)v->stats.objects)) ||
              json_object_set_new(root, "bytes",
                                  json_integer((json_int_t)v->stats.bytes)) ||
              json_object_set_new(root, "inputs",
                                  json_integer((json_int_t)v->stats.inputs)) ||
              json_object_set_new(root, "layers",
                                  json_integer((json_int_t)v->stats.layers)) ||
              json_object_set(root, "findings", list) != 0;
    if (!oom)
        oom = json_object_set(root, "relocations", moved) != 0;
    if (!oom) {
        *out = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT);
        oom = *out == NULL;
    }
    json_decref(list);
    json_decref(moved);
    json_decref(root);
    return oom ? nomem() : 0;
}
