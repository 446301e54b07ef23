/*
 * montage.c - the montage kernel's entry points: parameters (defaults,
 * JSON parsing, checks), input checks, the pair list, the solve
 * (registration in montage_register.c, global solves in montage_solve.c)
 * and the canonical JSON report. Rendering is montage_render.c.
 *
 * Load: one call per section (a few to a few thousand tiles). Pairs are
 * found by sorting the tiles by nominal x and sweeping, O(n log n + pairs).
 * Single-threaded, no shared state.
 */
#include "cnx/montage.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "json_int.h"
#include "kernels/montage_int.h"

#define WHAT "montage: parameters"
#define MAX_POS ((int64_t)1 << 40)

void cnx_montage_params_default(cnx_montage_params *p)
{
    memset(p, 0, sizeof(*p));
    p->search = 50;
    p->min_peak_ratio = 3.0;
    p->max_residual = 2.0;
    p->normalize = 1;
}

/* ---- JSON parameters ---------------------------------------------------- */

int cnx_montage_params_parse(const char *json, cnx_montage_params *p)
{
    static const char *const keys[] = {"search", "min_peak_ratio",
                                       "max_residual", "normalize", NULL};
    cnx_montage_params tmp;
    json_t *js = NULL;
    int rc;

    assert(p != NULL);
    cnx_montage_params_default(&tmp);
    rc = cnx__json_params(&js, json, keys, WHAT);
    if (rc == 0)
        rc = cnx__json_param_int(js, "search", 0, CNX_MONTAGE_MAX_SEARCH, WHAT,
                                 &tmp.search);
    if (rc == 0)
        rc = cnx__json_param_number(js, "min_peak_ratio", 1.0, 1e6, 0, WHAT,
                                    &tmp.min_peak_ratio);
    if (rc == 0)
        rc = cnx__json_param_number(js, "max_residual", 0.0, 1e6, 1, WHAT,
                                    &tmp.max_residual);
    if (rc == 0)
        rc = cnx__json_param_flag(js, "normalize", WHAT, &tmp.normalize);
    if (rc == 0)
        *p = tmp;
    json_decref(js);
    return rc;
}

static int bad_field(const char *field)
{
    return cnx_error_set(CNX_EINVAL, 0, "montage: %s: out of range", field);
}

int cnx_montage_params_check(const cnx_montage_params *p)
{
    if (p == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "montage: no parameters");
    if (p->search < 0 || p->search > CNX_MONTAGE_MAX_SEARCH)
        return bad_field("search");
    if (!(p->min_peak_ratio >= 1.0 && p->min_peak_ratio <= 1e6))
        return bad_field("min_peak_ratio");
    if (!(p->max_residual > 0.0 && p->max_residual <= 1e6))
        return bad_field("max_residual");
    if (p->normalize != 0 && p->normalize != 1)
        return bad_field("normalize");
    return 0;
}

/* ---- input checks -------------------------------------------------------- */

static int check_tile(const cnx_montage_tile *t, size_t i)
{
    if (t->id == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "montage: tile %zu: no id", i);
    if (t->width < 1 || t->width > CNX_MONTAGE_MAX_SIDE || t->height < 1 ||
        t->height > CNX_MONTAGE_MAX_SIDE)
        return cnx_error_set(CNX_EINVAL, 0,
                             "montage: tile %s: size %lld x %lld outside 1 "
                             ".. %d",
                             t->id, (long long)t->width, (long long)t->height,
                             CNX_MONTAGE_MAX_SIDE);
    if (t->pixels == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "montage: tile %s: no pixels",
                             t->id);
    if (t->x < -MAX_POS || t->x > MAX_POS || t->y < -MAX_POS || t->y > MAX_POS)
        return cnx_error_set(CNX_EINVAL, 0,
                             "montage: tile %s: position beyond +-2^40", t->id);
    return 0;
}

/* qsort has no context argument in C11; a thread-local pointer keeps the
 * kernel callable from several threads at once. */
static _Thread_local const cnx_montage_tile *sort_tiles;

static int cmp_id(const void *a, const void *b)
{
    const size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const int c = strcmp(sort_tiles[i].id, sort_tiles[j].id);
    return c != 0 ? c : (i > j) - (i < j);
}

static int cmp_x(const void *a, const void *b)
{
    const size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const int64_t xi = sort_tiles[i].x, xj = sort_tiles[j].x;
    return xi != xj ? (xi > xj) - (xi < xj) : (i > j) - (i < j);
}

static int check_input(const cnx_montage_tile *tiles, size_t n,
                       const cnx_montage_params *p)
{
    size_t *idx;
    int rc;
    if (tiles == NULL || n == 0)
        return cnx_error_set(CNX_EINVAL, 0, "montage: no tiles");
    if (n > CNX_MONTAGE_MAX_TILES)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "montage: %zu tiles in one section, over the "
                             "limit of %d",
                             n, CNX_MONTAGE_MAX_TILES);
    rc = cnx_montage_params_check(p);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        rc = check_tile(&tiles[i], i);
        if (rc != 0)
            return rc;
    }
    idx = malloc(n * sizeof(*idx));
    if (idx == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    sort_tiles = tiles;
    qsort(idx, n, sizeof(*idx), cmp_id);
    for (size_t i = 1; i < n && rc == 0; i++)
        if (strcmp(tiles[idx[i - 1]].id, tiles[idx[i]].id) == 0)
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "montage: tile %s: id repeated (tiles %zu "
                               "and %zu)",
                               tiles[idx[i]].id, idx[i - 1], idx[i]);
    free(idx);
    return rc;
}

/* ---- pairs --------------------------------------------------------------- */

static int cmp_pair(const void *a, const void *b)
{
    const cnx_montage_pair *p = a, *q = b;
    if (p->a != q->a)
        return (p->a > q->a) - (p->a < q->a);
    return (p->b > q->b) - (p->b < q->b);
}

/* Every pair that may overlap within search, in (a, b) order. */
static int find_pairs(const cnx_montage_tile *tiles, size_t n, int64_t search,
                      cnx_montage_pair **out, size_t *count)
{
    size_t *idx = malloc(n * sizeof(*idx));
    cnx_montage_pair *pairs = NULL;
    size_t np = 0, cap = 0;
    int64_t wmax = 0;
    int rc = 0;

    *out = NULL;
    *count = 0;
    if (idx == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        wmax = tiles[i].width > wmax ? tiles[i].width : wmax;
    }
    sort_tiles = tiles;
    qsort(idx, n, sizeof(*idx), cmp_x);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const cnx_montage_tile *ti = &tiles[idx[i]];
        for (size_t j = i + 1; j < n; j++) {
            const cnx_montage_tile *tj = &tiles[idx[j]];
            size_t a = idx[i], b = idx[j];
            /* sorted by x: once tj starts past any reach of ti, stop */
            if (tj->x - ti->x > wmax + search)
                break;
            if (a > b) {
                a = idx[j];
                b = idx[i];
            }
            if (!mont_may_overlap(&tiles[a], &tiles[b], search))
                continue;
            if (np == cap) {
                size_t nc = cap ? 2 * cap : 64;
                cnx_montage_pair *p = realloc(pairs, nc * sizeof(*p));
                if (p == NULL) {
                    rc = cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
                    break;
                }
                pairs = p;
                cap = nc;
            }
            memset(&pairs[np], 0, sizeof(pairs[np]));
            pairs[np].a = a;
            pairs[np].b = b;
            np++;
        }
    }
    free(idx);
    if (rc != 0) {
        free(pairs);
        return rc;
    }
    if (np > 0)
        qsort(pairs, np, sizeof(*pairs), cmp_pair);
    *out = pairs;
    *count = np;
    return 0;
}

/* ---- solve --------------------------------------------------------------- */

void cnx_montage_result_free(cnx_montage_result *r)
{
    if (r == NULL)
        return;
    free(r->x);
    free(r->y);
    free(r->gain);
    free(r->offset);
    free(r->placed);
    free(r->pairs);
    memset(r, 0, sizeof(*r));
}

int cnx_montage_solve(const cnx_montage_tile *tiles, size_t n,
                      const cnx_montage_params *p, cnx_montage_result *out)
{
    cnx_montage_params def;
    mont_work w;
    mont_stats *st = NULL;
    int rc;

    if (out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "montage: no result");
    memset(out, 0, sizeof(*out));
    if (p == NULL) {
        cnx_montage_params_default(&def);
        p = &def;
    }
    rc = check_input(tiles, n, p);
    if (rc != 0)
        return rc;
    memset(&w, 0, sizeof(w));
    out->ntiles = n;
    out->x = calloc(n, sizeof(*out->x));
    out->y = calloc(n, sizeof(*out->y));
    out->gain = calloc(n, sizeof(*out->gain));
    out->offset = calloc(n, sizeof(*out->offset));
    out->placed = calloc(n, sizeof(*out->placed));
    if (!out->x || !out->y || !out->gain || !out->offset || !out->placed) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
        goto done;
    }
    rc = find_pairs(tiles, n, p->search, &out->pairs, &out->npairs);
    if (rc != 0)
        goto done;
    st = calloc(out->npairs + 1, sizeof(*st));
    if (st == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
        goto done;
    }
    for (size_t k = 0; k < out->npairs; k++) {
        cnx_montage_pair *q = &out->pairs[k];
        const size_t a = q->a, b = q->b;
        rc = mont_register(&w, &tiles[a], &tiles[b], p->search, q, &st[k]);
        q->a = a;
        q->b = b;
        if (rc < 0)
            goto done;
        rc = 0;
    }
    rc = mont_solve(tiles, n, p, st, out);
done:
    mont_work_dispose(&w);
    free(st);
    if (rc != 0)
        cnx_montage_result_free(out);
    return rc;
}

int cnx_montage_register_pair(const cnx_montage_tile *a,
                              const cnx_montage_tile *b,
                              const cnx_montage_params *p,
                              cnx_montage_pair *out)
{
    cnx_montage_params def;
    mont_work w;
    mont_stats st;
    int rc;

    if (a == NULL || b == NULL || out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "montage: no tiles");
    if (p == NULL) {
        cnx_montage_params_default(&def);
        p = &def;
    }
    rc = cnx_montage_params_check(p);
    if (rc == 0)
        rc = check_tile(a, 0);
    if (rc == 0)
        rc = check_tile(b, 1);
    if (rc != 0)
        return rc;
    memset(&w, 0, sizeof(w));
    rc = mont_register(&w, a, b, p->search, out, &st);
    mont_work_dispose(&w);
    out->a = 0;
    out->b = 1;
    if (rc == 1)
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "montage: tiles %s and %s cannot overlap within "
                             "%lld pixels of their nominal offset",
                             a->id, b->id, (long long)p->search);
    return rc;
}

/* ---- report -------------------------------------------------------------- */

static int set_new(json_t *obj, const char *key, json_t *v)
{
    return v == NULL || json_object_set_new(obj, key, v) != 0 ? -1 : 0;
}

int cnx_montage_report_json(const cnx_montage_tile *tiles,
                            const cnx_montage_result *r, int64_t z, char **out)
{
    json_t *doc = json_object(), *jt = json_array(), *jp = json_array();
    json_t *sum = json_object();
    size_t used = 0;
    int bad = doc == NULL || jt == NULL || jp == NULL || sum == NULL;

    if (out != NULL)
        *out = NULL;
    /* A section without tiles (r zeroed, no solve) reports no tiles, no
     * pairs and no fixed tile. */
    if (r == NULL || out == NULL ||
        (r->ntiles > 0 &&
         (tiles == NULL || r->x == NULL || r->fixed >= r->ntiles))) {
        json_decref(doc);
        json_decref(jt);
        json_decref(jp);
        json_decref(sum);
        return cnx_error_set(CNX_EINVAL, 0, "montage: report: no result");
    }
    for (size_t t = 0; t < r->ntiles && !bad; t++) {
        json_t *o = json_object(), *nom = json_array();
        bad = o == NULL || nom == NULL;
        if (!bad)
            bad = json_array_append_new(nom, json_integer(tiles[t].x)) ||
                  json_array_append_new(nom, json_integer(tiles[t].y));
        bad = bad || set_new(o, "id", json_string(tiles[t].id)) ||
              set_new(o, "nominal", nom) ||
              set_new(o, "x", json_real(r->x[t])) ||
              set_new(o, "y", json_real(r->y[t])) ||
              set_new(o, "gain", json_real(r->gain[t])) ||
              set_new(o, "offset", json_real(r->offset[t])) ||
              set_new(o, "placed", json_boolean(r->placed[t]));
        if (nom != NULL && bad && json_object_get(o, "nominal") != nom)
            json_decref(nom);
        if (bad || json_array_append_new(jt, o) != 0) {
            bad = 1;
            json_decref(o);
        }
    }
    for (size_t k = 0; k < r->npairs && !bad; k++) {
        const cnx_montage_pair *q = &r->pairs[k];
        json_t *o = json_object();
        if (q->a >= r->ntiles || q->b >= r->ntiles) {
            json_decref(o);
            bad = 2;
            break;
        }
        used += q->used != 0;
        bad = o == NULL || set_new(o, "a", json_string(tiles[q->a].id)) ||
              set_new(o, "b", json_string(tiles[q->b].id)) ||
              set_new(o, "dx", json_real(q->dx)) ||
              set_new(o, "dy", json_real(q->dy)) ||
              set_new(o, "peak_ratio", json_real(q->peak_ratio)) ||
              set_new(o, "residual", json_real(q->residual)) ||
              set_new(o, "used", json_boolean(q->used));
        if (bad || json_array_append_new(jp, o) != 0) {
            bad = 1;
            json_decref(o);
        }
    }
    if (!bad)
        bad = set_new(sum, "tiles", json_integer((json_int_t)r->ntiles)) ||
              set_new(sum, "pairs", json_integer((json_int_t)r->npairs)) ||
              set_new(sum, "used", json_integer((json_int_t)used)) ||
              set_new(sum, "rejected", json_integer((json_int_t)r->rejected)) ||
              set_new(sum, "median_residual", json_real(r->median_residual)) ||
              set_new(sum, "max_residual", json_real(r->max_residual)) ||
              set_new(sum, "fixed", r->ntiles > 0
                                        ? json_string(tiles[r->fixed].id)
                                        : json_null());
    if (!bad) {
        bad = set_new(doc, "format", json_string(CNX_MONTAGE_FORMAT)) ||
              set_new(doc, "z", json_integer(z));
        bad |= set_new(doc, "tiles", jt) != 0;
        jt = NULL;
        bad |= set_new(doc, "pairs", jp) != 0;
        jp = NULL;
        bad |= set_new(doc, "summary", sum) != 0;
        sum = NULL;
    }
    if (!bad) {
        *out = cnx__json_canonical(doc);
        bad = *out == NULL;
    }
    json_decref(doc);
    json_decref(jt);
    json_decref(jp);
    json_decref(sum);
    if (bad == 2)
        return cnx_error_set(CNX_EINVAL, 0, "montage: report: bad pair");
    if (bad)
        return cnx_error_set(CNX_ENOMEM, 0,
                             "montage: report: out of memory or non-finite "
                             "value");
    return 0;
}
