/*
 * montage.c - the montage kernel's entry points: parameters (the bounds
 * table, defaults, checks), input checks, the pair list and the solve
 * (registration in montage_register.c, global solves in montage_solve.c).
 * Rendering is montage_render.c; the JSON parameters and the report are
 * montage_io.c.
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
#include "kernels/montage_int.h"

#define MAX_POS ((int64_t)1 << 40)

/* ---- parameters ---------------------------------------------------------- */

#define ROW(field, kind, lo, hi, open_lo, def, unit)                           \
    CNX_PARAM_ROW(cnx_montage_params, field, kind, lo, hi, open_lo, def, unit)

static const cnx_param bounds[] = {
    ROW(search, CNX_PARAM_INT64, 0, CNX_MONTAGE_MAX_SEARCH, 0, 50, "px"),
    ROW(min_peak_ratio, CNX_PARAM_REAL, 1.0, 1e6, 0, 3.0, ""),
    ROW(max_residual, CNX_PARAM_REAL, 0.0, 1e6, 1, 2.0, "px"),
    ROW(normalize, CNX_PARAM_FLAG, 0, 1, 0, 1, ""),
};

const cnx_param *cnx_montage_param_bounds(size_t *n)
{
    *n = sizeof(bounds) / sizeof(bounds[0]);
    return bounds;
}

void cnx_montage_params_default(cnx_montage_params *p)
{
    memset(p, 0, sizeof(*p));
    cnx_param_defaults(bounds, sizeof(bounds) / sizeof(bounds[0]), p);
}

int cnx_montage_params_check(const cnx_montage_params *p)
{
    if (p == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "montage: no parameters");
    return cnx_param_check(bounds, sizeof(bounds) / sizeof(bounds[0]), p,
                           "montage");
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
