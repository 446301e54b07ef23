/*
 * montage_solve.c - the global solves of the montage kernel: tile
 * positions from the registered pairs (least squares, loop closure, gauge)
 * and per-tile gain and offset from the overlap statistics.
 *
 * Every solve is a sparse symmetric positive definite system over the
 * tiles of one connected group, one tile held fixed: the graph Laplacian of
 * the used pairs. Tiles are numbered in input order, so for a row-major
 * grid of c columns the matrix is banded (about c + 1 wide); it is solved by
 * a banded Cholesky factorisation, O(tiles x band^2), in a fixed order.
 * Loop closure re-solves after each dropped pair: O(pairs) solves at
 * worst, each a few microseconds for a 10 x 10 grid. No libm function
 * other than sqrt.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/montage_int.h"
#include "kernels/unionfind_int.h"

/* Ridge added to the intensity systems: keeps tiles whose overlaps say
 * nothing (flat) at gain 1 / offset 0 instead of making them singular. */
#define RIDGE 1e-6

/* Tiles are grouped by a union-find (kernels/unionfind_int.h). */

/* ---- banded SPD systems ----------------------------------------------- */

typedef struct band {
    size_t n, bw;
    double *m; /* m[i * (bw + 1) + (i - j)], j in [i - bw, i] */
} band;

static double *band_at(band *b, size_t i, size_t j)
{
    assert(j <= i && i - j <= b->bw);
    return &b->m[i * (b->bw + 1) + (i - j)];
}

/* Factor in place (Cholesky, lower) and solve for nrhs right-hand sides
 * (each of n values, consecutive). */
static void band_solve(band *b, double *rhs, int nrhs)
{
    const size_t n = b->n, bw = b->bw;
    for (size_t i = 0; i < n; i++) {
        const size_t j0 = i > bw ? i - bw : 0;
        for (size_t j = j0; j <= i; j++) {
            double s = *band_at(b, i, j);
            const size_t k0 = j > bw ? (j - bw > j0 ? j - bw : j0) : j0;
            for (size_t k = k0; k < j; k++)
                s -= *band_at(b, i, k) * *band_at(b, j, k);
            if (i == j)
                *band_at(b, i, i) = sqrt(s > 1e-300 ? s : 1e-300);
            else
                *band_at(b, i, j) = s / *band_at(b, j, j);
        }
    }
    for (int r = 0; r < nrhs; r++) {
        double *x = rhs + (size_t)r * n;
        for (size_t i = 0; i < n; i++) {
            const size_t j0 = i > bw ? i - bw : 0;
            double s = x[i];
            for (size_t j = j0; j < i; j++)
                s -= *band_at(b, i, j) * x[j];
            x[i] = s / *band_at(b, i, i);
        }
        for (size_t i = n; i-- > 0;) {
            const size_t j1 = i + bw < n - 1 ? i + bw : n - 1;
            double s = x[i];
            for (size_t j = i + 1; j <= j1; j++)
                s -= *band_at(b, j, i) * x[j];
            x[i] = s / *band_at(b, i, i);
        }
    }
}

/* The solve's scratch: a row per tile of the group (fixed excluded). */
typedef struct solver {
    size_t n;     /* tiles */
    size_t *row;  /* tile -> row, or SIZE_MAX (fixed or outside) */
    size_t *tile; /* row -> tile */
    size_t rows;
    band b;
    double *rhs; /* 2 * rows */
    size_t cap;  /* doubles in b.m */
} solver;

/* Number the tiles of the group rooted like `fixed` (except fixed) and set
 * the band width from the used pairs. */
static int solver_setup(solver *s, uint32_t *parent, size_t fixed,
                        const cnx_montage_pair *pairs, const int *use,
                        size_t npairs)
{
    const size_t root = cnx__uf_find(parent, fixed);
    size_t bw = 0, need;
    s->rows = 0;
    for (size_t t = 0; t < s->n; t++) {
        s->row[t] = SIZE_MAX;
        if (t != fixed && cnx__uf_find(parent, t) == root) {
            s->row[t] = s->rows;
            s->tile[s->rows++] = t;
        }
    }
    for (size_t k = 0; k < npairs; k++) {
        const size_t ra = s->row[pairs[k].a], rb = s->row[pairs[k].b];
        if (!use[k] || ra == SIZE_MAX || rb == SIZE_MAX)
            continue;
        bw = ra > rb ? (ra - rb > bw ? ra - rb : bw)
                     : (rb - ra > bw ? rb - ra : bw);
    }
    need = s->rows * (bw + 1);
    if (need > s->cap) {
        double *m = realloc(s->b.m, need * sizeof(*m));
        if (m == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
        s->b.m = m;
        s->cap = need;
    }
    s->b.n = s->rows;
    s->b.bw = bw;
    if (need > 0)
        memset(s->b.m, 0, need * sizeof(*s->b.m));
    memset(s->rhs, 0, 2 * s->n * sizeof(*s->rhs));
    return 0;
}

/* Add w * (c_a v_a + c_b v_b - t)^2 to the system (v_fixed known). */
static void add_term(solver *s, size_t a, size_t b, double ca, double cb,
                     double t0, double t1, const double known[2], size_t fixed)
{
    const size_t ra = s->row[a], rb = s->row[b];
    double *r0 = s->rhs, *r1 = s->rhs + s->rows;
    /* move a fixed side to the right-hand side */
    if (a == fixed) {
        t0 -= ca * known[0];
        t1 -= ca * known[1];
    }
    if (b == fixed) {
        t0 -= cb * known[0];
        t1 -= cb * known[1];
    }
    if (ra != SIZE_MAX) {
        *band_at(&s->b, ra, ra) += ca * ca;
        r0[ra] += ca * t0;
        r1[ra] += ca * t1;
    }
    if (rb != SIZE_MAX) {
        *band_at(&s->b, rb, rb) += cb * cb;
        r0[rb] += cb * t0;
        r1[rb] += cb * t1;
    }
    if (ra != SIZE_MAX && rb != SIZE_MAX) {
        if (ra > rb)
            *band_at(&s->b, ra, rb) += ca * cb;
        else
            *band_at(&s->b, rb, ra) += ca * cb;
    }
}

/* The fixed tile: the lowest index of the largest group (ties: the group
 * with the lowest index). */
static size_t pick_fixed(uint32_t *parent, size_t n, size_t *count)
{
    size_t best = 0;
    memset(count, 0, n * sizeof(*count));
    for (size_t t = 0; t < n; t++)
        count[cnx__uf_find(parent, t)]++;
    for (size_t t = 0; t < n; t++)
        if (parent[t] == t && count[t] > count[best])
            best = t;
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- positions --------------------------------------------------------- */

static void group(uint32_t *parent, size_t n, const cnx_montage_pair *pairs,
                  const int *use, size_t npairs)
{
    for (size_t t = 0; t < n; t++)
        parent[t] = (uint32_t)t;
    for (size_t k = 0; k < npairs; k++)
        if (use[k])
            cnx__uf_union(parent, pairs[k].a, pairs[k].b);
}

/* Solve positions of the fixed tile's group into r->x, r->y (others
 * untouched). */
static void solve_positions(solver *s, const cnx_montage_tile *tiles,
                            size_t fixed, const cnx_montage_pair *pairs,
                            const int *use, size_t npairs,
                            cnx_montage_result *r)
{
    const double known[2] = {(double)tiles[fixed].x, (double)tiles[fixed].y};
    for (size_t k = 0; k < npairs; k++) {
        if (!use[k])
            continue;
        add_term(s, pairs[k].a, pairs[k].b, -1.0, 1.0, pairs[k].dx, pairs[k].dy,
                 known, fixed);
    }
    band_solve(&s->b, s->rhs, 2);
    r->x[fixed] = known[0];
    r->y[fixed] = known[1];
    for (size_t i = 0; i < s->rows; i++) {
        r->x[s->tile[i]] = s->rhs[i];
        r->y[s->tile[i]] = s->rhs[s->rows + i];
    }
}

static double pair_residual(const cnx_montage_result *r,
                            const cnx_montage_pair *q)
{
    const double ex = (r->x[q->b] - r->x[q->a]) - q->dx;
    const double ey = (r->y[q->b] - r->y[q->a]) - q->dy;
    return sqrt(ex * ex + ey * ey);
}

/* ---- intensities ------------------------------------------------------- */

/* Gains then offsets of the fixed tile's group (solver set up for it). */
static int solve_intensity(solver *s, size_t fixed,
                           const cnx_montage_pair *pairs, const int *use,
                           const mont_stats *st, size_t npairs,
                           cnx_montage_result *r, uint32_t *parent,
                           size_t *count)
{
    const double one[2] = {1.0, 0.0}, zero[2] = {0.0, 0.0};
    double mean = 0.0;
    size_t placed = 0;
    int rc;

    /* gains: g_a sd_a = g_b sd_b, each equation divided by the mean sd */
    for (size_t i = 0; i < s->rows; i++) {
        *band_at(&s->b, i, i) += RIDGE;
        s->rhs[i] += RIDGE;
    }
    for (size_t k = 0; k < npairs; k++) {
        const double m = 0.5 * (st[k].sd_a + st[k].sd_b);
        if (!use[k] || !(m > 0.0))
            continue;
        add_term(s, pairs[k].a, pairs[k].b, st[k].sd_a / m, -st[k].sd_b / m,
                 0.0, 0.0, one, fixed);
    }
    band_solve(&s->b, s->rhs, 1);
    r->gain[fixed] = 1.0;
    for (size_t i = 0; i < s->rows; i++)
        r->gain[s->tile[i]] = s->rhs[i];
    for (size_t t = 0; t < r->ntiles; t++)
        if (r->placed[t]) {
            mean += r->gain[t];
            placed++;
        }
    mean /= (double)placed;
    for (size_t t = 0; t < r->ntiles; t++)
        if (r->placed[t] &&
            !(r->gain[t] > 0.1 * mean && r->gain[t] < 10.0 * mean))
            return 1; /* implausible: leave the identity */
    for (size_t t = 0; t < r->ntiles; t++)
        if (r->placed[t])
            r->gain[t] /= mean;

    /* offsets: g_a mean_a + o_a = g_b mean_b + o_b */
    rc = solver_setup(s, parent, fixed, pairs, use, npairs);
    if (rc != 0)
        return rc;
    (void)count;
    for (size_t i = 0; i < s->rows; i++)
        *band_at(&s->b, i, i) += RIDGE;
    for (size_t k = 0; k < npairs; k++) {
        const size_t a = pairs[k].a, b = pairs[k].b;
        if (!use[k])
            continue;
        add_term(s, a, b, 1.0, -1.0,
                 r->gain[b] * st[k].mean_b - r->gain[a] * st[k].mean_a, 0.0,
                 zero, fixed);
    }
    band_solve(&s->b, s->rhs, 1);
    r->offset[fixed] = 0.0;
    for (size_t i = 0; i < s->rows; i++)
        r->offset[s->tile[i]] = s->rhs[i];
    mean = 0.0;
    for (size_t t = 0; t < r->ntiles; t++)
        if (r->placed[t])
            mean += r->offset[t];
    mean /= (double)placed;
    for (size_t t = 0; t < r->ntiles; t++)
        if (r->placed[t])
            r->offset[t] -= mean;
    return 0;
}

/* ---- the whole solve --------------------------------------------------- */

int mont_solve(const cnx_montage_tile *tiles, size_t n,
               const cnx_montage_params *p, const mont_stats *st,
               cnx_montage_result *r)
{
    const size_t np = r->npairs;
    cnx_montage_pair *pairs = r->pairs;
    uint32_t *parent = malloc(n * sizeof(*parent));
    size_t *count = malloc(n * sizeof(*count));
    int *use = malloc((np + 1) * sizeof(*use));
    double *res = malloc((np + 1) * sizeof(*res));
    solver s;
    size_t fixed = 0, nused = 0, placed = 0;
    double sx = 0.0, sy = 0.0;
    int64_t shx, shy;
    int rc = 0;

    memset(&s, 0, sizeof(s));
    s.n = n;
    s.row = malloc(n * sizeof(*s.row));
    s.tile = malloc(n * sizeof(*s.tile));
    s.rhs = malloc(2 * n * sizeof(*s.rhs));
    if (!parent || !count || !use || !res || !s.row || !s.tile || !s.rhs) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
        goto done;
    }
    for (size_t k = 0; k < np; k++)
        use[k] = pairs[k].peak_ratio > 0.0 &&
                 pairs[k].peak_ratio >= p->min_peak_ratio;
    for (size_t t = 0; t < n; t++) {
        r->x[t] = (double)tiles[t].x;
        r->y[t] = (double)tiles[t].y;
    }

    /* loop closure: solve, drop the worst pair above max_residual, repeat */
    for (;;) {
        size_t worst = SIZE_MAX, root;
        double wr = p->max_residual;
        group(parent, n, pairs, use, np);
        fixed = pick_fixed(parent, n, count);
        rc = solver_setup(&s, parent, fixed, pairs, use, np);
        if (rc != 0)
            goto done;
        /* pairs outside the fixed group take no part */
        root = cnx__uf_find(parent, fixed);
        for (size_t k = 0; k < np; k++)
            if (use[k] && cnx__uf_find(parent, pairs[k].a) != root)
                use[k] = 0;
        solve_positions(&s, tiles, fixed, pairs, use, np, r);
        for (size_t k = 0; k < np; k++) {
            double e;
            if (!use[k])
                continue;
            e = pair_residual(r, &pairs[k]);
            if (e > wr) {
                wr = e;
                worst = k;
            }
        }
        if (worst == SIZE_MAX)
            break;
        use[worst] = 0;
        for (size_t t = 0; t < n; t++) {
            r->x[t] = (double)tiles[t].x;
            r->y[t] = (double)tiles[t].y;
        }
    }
    r->fixed = fixed;

    /* gauge: move everything by round(mean(nominal - solved)) over the
     * placed tiles, an integer so the solved sub-pixel phases stay */
    {
        const size_t root = cnx__uf_find(parent, fixed);
        for (size_t t = 0; t < n; t++) {
            r->placed[t] = cnx__uf_find(parent, t) == root;
            if (r->placed[t]) {
                sx += (double)tiles[t].x - r->x[t];
                sy += (double)tiles[t].y - r->y[t];
                placed++;
            }
        }
    }
    shx = (int64_t)mont_round(sx / (double)placed);
    shy = (int64_t)mont_round(sy / (double)placed);
    for (size_t t = 0; t < n; t++) {
        r->x[t] += (double)shx;
        r->y[t] += (double)shy;
        r->gain[t] = 1.0;
        r->offset[t] = 0.0;
    }
    r->shift[0] = shx;
    r->shift[1] = shy;

    for (size_t k = 0; k < np; k++) {
        pairs[k].used = use[k];
        pairs[k].residual = pair_residual(r, &pairs[k]);
        if (use[k])
            res[nused++] = pairs[k].residual;
    }
    r->rejected = np - nused;
    if (nused > 0) {
        qsort(res, nused, sizeof(*res), cmp_double);
        r->max_residual = res[nused - 1];
        r->median_residual = nused % 2
                                 ? res[nused / 2]
                                 : 0.5 * (res[nused / 2 - 1] + res[nused / 2]);
    }

    if (p->normalize && nused > 0) {
        rc = solver_setup(&s, parent, fixed, pairs, use, np);
        if (rc == 0)
            rc = solve_intensity(&s, fixed, pairs, use, st, np, r, parent,
                                 count);
        if (rc == 1) {
            for (size_t t = 0; t < n; t++) {
                r->gain[t] = 1.0;
                r->offset[t] = 0.0;
            }
            rc = 0;
        }
    }
done:
    free(parent);
    free(count);
    free(use);
    free(res);
    free(s.row);
    free(s.tile);
    free(s.rhs);
    free(s.b.m);
    return rc;
}
