/*
 * align_solve.c - step 2 of the align kernel (cnx/align.h): per section
 * node displacements d_z(n) from the pair matches, section status,
 * bridging, the report and the intensity normalisation.
 *
 * Unknowns: d_z(n) = (dx, dy) per OK section z and grid node g_n; the
 * aligned point g_n shows stitched section z at g_n + d_z(n). A match
 * (a, b) says b's point p shows what a shows at p + m(p), so d_a(n) -
 * d_b(n) = m(g_n + d_b(n)). m there: bilinear in the 4 nodes of the cell
 * holding the point (outside the grid the nearest cell, extended linearly
 * by at most one step); if one of the 4 is not valid, the nearest valid
 * one of the 4 (else node n itself) provided node n is valid; otherwise
 * the term is dropped.
 * Energy, x and y apart with the same matrix: sum over used matches and
 * their terms of w |d_a(n) - d_b(n) - m|^2 (w 1 for zb - za = 1, 0.5 for
 * 2) + stiffness x sum over sections and 4-neighbour node edges of
 * |d_z(n) - d_z(n')|^2 + (anchor + 1e-9) |d_z(n)|^2. (The edge springs resist a
 * section's rotation relative to its neighbours: at the free grid edge
 * they pull by about stiffness x rotation x step.) The positions g_n +
 * d_b(n) are fixed per pass: 3 passes, the first at d_b = 0, each next at
 * the previous pass's d. Each pass is a Jacobi-preconditioned conjugate
 * gradient solve (loops over sections, then nodes) from the previous
 * pass's d, to a relative residual of 1e-10 or 4000 iterations.
 *
 * Used: a match whose sections both have data and with at least one and
 * at least min_valid x nodes valid nodes. Status: EMPTY (no data), FAILED
 * (no used match), OK. Runs: the OK sections connected by used matches.
 *
 * Blocks: block k holds sections [s_k, s_k + block) of the stack (indices
 * from z0), s_0 = 0, s_{k+1} = s_k + block - overlap, the last one the
 * first to reach the end (nz <= block: one block). Its unknowns are its OK
 * sections from u_k = s_k + h on (u_0 = 0), h = max(1, overlap / 2): the
 * sections before u_k are final (block k - 1 kept exactly its sections
 * before u_k) and a used match from a final section (pinned in the block,
 * or the one before it for a z - 2 match) into the unknowns enters with
 * the final side constant. Matches reaching past the block's end wait for
 * the next block.
 *
 * Gauge: a component of a block's unknowns that touches no final section
 * (a run, or its start) has no translation in the matches (only the
 * ridge): after each pass its mean translation is set to its run's target
 * (0). With more than one block the pinning carries block 0's gauge down
 * the stack, so every block is solved a second time with each run's
 * target at minus its mean translation from the first time: the runs end
 * up near mean translation 0 and the constant shifts below stay small (a
 * shift t moves the match positions by t: an error of about rotation x
 * t). Then each run is moved to mean translation 0 (runs cut apart by
 * failed sections are each centred on their stitched sections) and the
 * mean translation over all OK sections and nodes is subtracted from every
 * OK section. FAILED and EMPTY sections are then bridged: linear in z
 * between the nearest OK sections below and above (one side: a copy;
 * none: 0).
 *
 * Report: residuals |d_a - d_b - m| of the used matches' terms at the
 * final d (each section: its matches as a and as b), medians the lower
 * middle. Normalisation: gain = median sd / sd (1 for sd < 1e-6), offset
 * = median mean - gain x mean over sections with data (lower middles).
 *
 * Single-threaded, deterministic to the byte: matches are taken in (zb,
 * za) order whatever the input order, every sum runs in a fixed order, no
 * libm other than sqrt, built with -ffp-contract=off. Cost per pass:
 * (CG iterations, ~50-250 here) x (sections x nodes x ~20 flops), twice
 * with blocks; memory ~14 doubles per node and section of a block plus 2
 * per node and section of the stack.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/align.h"
#include "cnx/error.h"
#include "kernels/align_int.h"
#include "kernels/unionfind_int.h"

#define RIDGE 1e-9      /* |d|^2 weight: makes every system definite */
#define PASSES 3        /* evaluations of the match positions */
#define CG_TOL 1e-10    /* relative residual that ends a CG solve */
#define CG_MAX 4000     /* CG iterations at most */
#define WEIGHT_SKIP 0.5 /* weight of a zb - za = 2 match */
#define MAX_NZ (INT64_C(1) << 30)
#define NONE ((size_t)-1)

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Lower median of v[0..n) (sorts v; 0 when n == 0). */
static double lower_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), cmp_double);
    return v[(n - 1) / 2];
}

/* Position of coordinate v on a grid axis of n nodes from o by step: the
 * nearest cell [*i0, *i0 + 1] (0 .. n - 2; 0 when n == 1, where *f is 0)
 * and the fraction *f towards *i0 + 1, beyond the outer nodes outside
 * [0, 1] (the cell's linear function extended), at most one step:
 * *f in [-1, 2]. */
static void axis_cell(double v, double o, double step, int64_t n, int64_t *i0,
                      double *f)
{
    const double u = (v - o) / step;
    if (n < 2) {
        *i0 = 0;
        *f = 0.0;
    } else if (!(u > 0.0)) { /* NaN too */
        *i0 = 0;
        *f = u >= -1.0 ? u : -1.0;
    } else if (u >= (double)(n - 1)) {
        *i0 = n - 2;
        *f = u - (double)(n - 2) <= 2.0 ? u - (double)(n - 2) : 2.0;
    } else {
        *i0 = (int64_t)u; /* u > 0: truncation is the floor */
        *f = u - (double)*i0;
    }
}

/* The match m at the point g_n + (dbx, dby): *mx, *my; 0 if the term is
 * dropped (see the file comment), 1 if not. */
static int match_at(const cnx_align_grid *g, const cnx_align_match *m, size_t n,
                    double dbx, double dby, double *mx, double *my)
{
    const int64_t nx = g->nx, i = (int64_t)n % nx, j = (int64_t)n / nx;
    const double px = g->x0 + (double)i * g->step + dbx;
    const double py = g->y0 + (double)j * g->step + dby;
    int64_t i0, j0;
    double fx, fy, best = 0.0;
    size_t c[4], pick = n;

    axis_cell(px, g->x0, g->step, g->nx, &i0, &fx);
    axis_cell(py, g->y0, g->step, g->ny, &j0, &fy);
    {
        const int64_t i1 = g->nx > 1 ? i0 + 1 : i0;
        const int64_t j1 = g->ny > 1 ? j0 + 1 : j0;
        c[0] = (size_t)(j0 * nx + i0);
        c[1] = (size_t)(j0 * nx + i1);
        c[2] = (size_t)(j1 * nx + i0);
        c[3] = (size_t)(j1 * nx + i1);
    }
    if (m->flag[c[0]] == 0 && m->flag[c[1]] == 0 && m->flag[c[2]] == 0 &&
        m->flag[c[3]] == 0) {
        const double gx = 1.0 - fx, gy = 1.0 - fy;
        *mx = gy * (gx * m->dx[c[0]] + fx * m->dx[c[1]]) +
              fy * (gx * m->dx[c[2]] + fx * m->dx[c[3]]);
        *my = gy * (gx * m->dy[c[0]] + fx * m->dy[c[1]]) +
              fy * (gx * m->dy[c[2]] + fx * m->dy[c[3]]);
        return 1;
    }
    if (m->flag[n] != 0)
        return 0;
    /* the nearest valid corner (first of equals), else node n itself */
    for (int k = 0; k < 4; k++) {
        const double ex = (k & 1) ? 1.0 - fx : fx;
        const double ey = (k & 2) ? 1.0 - fy : fy;
        const double e = ex * ex + ey * ey;
        if (m->flag[c[k]] == 0 && (pick == n || e < best)) {
            pick = c[k];
            best = e;
        }
    }
    *mx = m->dx[pick];
    *my = m->dy[pick];
    return 1;
}

/* ---- one block ------------------------------------------------------- */

/* A used match in a block: b is an unknown, a an unknown or final. */
typedef struct term {
    const cnx_align_match *m;
    size_t a, b;   /* sections (stack indices) */
    size_t sa, sb; /* unknown slots (sa NONE: a is final) */
    double w;
} term;

/* The solve's scratch, sized for the largest block. */
typedef struct solver {
    const cnx_align_grid *grid;
    size_t nodes;
    double stiffness;
    double anchor; /* |d|^2 weight per node: towards the stitched position */
    size_t nu;     /* unknown sections of the block */
    size_t *sec;   /* slot -> section */
    size_t *slot;  /* section -> slot or NONE (nz) */
    size_t nt;     /* terms */
    term *t;
    double *tw;      /* nt * nodes: weight of the term at node n, or 0 */
    double *tx, *ty; /* nt * nodes: m at the pass's position */
    double *x, *y;   /* nu * nodes: the block's d */
    double *diag, *rhs, *r, *z, *p, *q; /* nu * nodes */
    uint32_t *comp;       /* nu + 1: components (nu: the final sections) */
    double *sum;          /* 3 * nu: per component sums */
    uint32_t *run;        /* nz: the runs of the stack (union-find) */
    const double *target; /* 2 per run root: mean translation of a free
                             component of that run */
} solver;

/* out = A v for the block's matrix. */
static void apply(const solver *s, const double *v, double *out)
{
    const size_t N = s->nodes, nx = (size_t)s->grid->nx,
                 ny = (size_t)s->grid->ny;
    const double k = s->stiffness;
    for (size_t i = 0; i < s->nu * N; i++)
        out[i] = (RIDGE + s->anchor) * v[i];
    for (size_t u = 0; u < s->nu; u++) {
        const double *vu = v + u * N;
        double *ou = out + u * N;
        for (size_t j = 0; j < ny; j++)
            for (size_t i = 0; i < nx; i++) {
                const size_t n = j * nx + i;
                if (i + 1 < nx) {
                    const double e = k * (vu[n] - vu[n + 1]);
                    ou[n] += e;
                    ou[n + 1] -= e;
                }
                if (j + 1 < ny) {
                    const double e = k * (vu[n] - vu[n + nx]);
                    ou[n] += e;
                    ou[n + nx] -= e;
                }
            }
    }
    for (size_t t = 0; t < s->nt; t++) {
        const term *tm = &s->t[t];
        const double *w = s->tw + t * N;
        double *ob = out + tm->sb * N;
        const double *vb = v + tm->sb * N;
        if (tm->sa == NONE) {
            for (size_t n = 0; n < N; n++)
                ob[n] += w[n] * vb[n];
        } else {
            double *oa = out + tm->sa * N;
            const double *va = v + tm->sa * N;
            for (size_t n = 0; n < N; n++) {
                const double e = w[n] * (va[n] - vb[n]);
                oa[n] += e;
                ob[n] -= e;
            }
        }
    }
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* Solve A x = b (b in s->rhs) from x by Jacobi-preconditioned CG. */
static void cg(solver *s, double *x)
{
    const size_t n = s->nu * s->nodes;
    const double *b = s->rhs;
    const double bb = dot(b, b, n);
    double rz;

    if (bb == 0.0) {
        memset(x, 0, n * sizeof(*x));
        return;
    }
    apply(s, x, s->q);
    for (size_t i = 0; i < n; i++) {
        s->r[i] = b[i] - s->q[i];
        s->z[i] = s->r[i] / s->diag[i];
        s->p[i] = s->z[i];
    }
    rz = dot(s->r, s->z, n);
    for (int it = 0; it < CG_MAX; it++) {
        double pq, alpha, beta, rz1;
        if (dot(s->r, s->r, n) <= CG_TOL * CG_TOL * bb)
            break;
        apply(s, s->p, s->q);
        pq = dot(s->p, s->q, n);
        if (!(pq > 0.0))
            break;
        alpha = rz / pq;
        for (size_t i = 0; i < n; i++) {
            x[i] += alpha * s->p[i];
            s->r[i] -= alpha * s->q[i];
            s->z[i] = s->r[i] / s->diag[i];
        }
        rz1 = dot(s->r, s->z, n);
        beta = rz1 / rz;
        rz = rz1;
        for (size_t i = 0; i < n; i++)
            s->p[i] = s->z[i] + beta * s->p[i];
    }
}

/* Evaluate the terms at the positions of the block's current d_b (0 in
 * the first pass) and build the diagonal. */
static void build_terms(solver *s)
{
    const size_t N = s->nodes, nx = (size_t)s->grid->nx,
                 ny = (size_t)s->grid->ny;
    for (size_t t = 0; t < s->nt; t++) {
        const term *tm = &s->t[t];
        const double *bx = s->x + tm->sb * N, *by = s->y + tm->sb * N;
        for (size_t n = 0; n < N; n++) {
            double mx = 0.0, my = 0.0;
            const int on = match_at(s->grid, tm->m, n, bx[n], by[n], &mx, &my);
            s->tw[t * N + n] = on ? tm->w : 0.0;
            s->tx[t * N + n] = on ? mx : 0.0;
            s->ty[t * N + n] = on ? my : 0.0;
        }
    }
    for (size_t u = 0; u < s->nu; u++)
        for (size_t j = 0; j < ny; j++)
            for (size_t i = 0; i < nx; i++) {
                const size_t deg =
                    (i > 0) + (i + 1 < nx) + (j > 0) + (j + 1 < ny);
                s->diag[u * N + j * nx + i] =
                    RIDGE + s->anchor + s->stiffness * (double)deg;
            }
    for (size_t t = 0; t < s->nt; t++) {
        const term *tm = &s->t[t];
        const double *w = s->tw + t * N;
        for (size_t n = 0; n < N; n++) {
            s->diag[tm->sb * N + n] += w[n];
            if (tm->sa != NONE)
                s->diag[tm->sa * N + n] += w[n];
        }
    }
}

/* The right-hand side of one axis (0: x, 1: y). */
static void build_rhs(solver *s, int ax, const cnx_align_solution *out)
{
    const size_t N = s->nodes;
    memset(s->rhs, 0, s->nu * N * sizeof(*s->rhs));
    for (size_t t = 0; t < s->nt; t++) {
        const term *tm = &s->t[t];
        const double *w = s->tw + t * N;
        const double *m = (ax ? s->ty : s->tx) + t * N;
        double *rb = s->rhs + tm->sb * N;
        if (tm->sa == NONE) {
            const cnx_align_section *fa = &out->sections[tm->a];
            const double *da = ax ? fa->dy : fa->dx;
            for (size_t n = 0; n < N; n++)
                rb[n] += w[n] * (da[n] - m[n]);
        } else {
            double *ra = s->rhs + tm->sa * N;
            for (size_t n = 0; n < N; n++) {
                ra[n] += w[n] * m[n];
                rb[n] -= w[n] * m[n];
            }
        }
    }
}

/* Set the mean translation of every component that touches no final
 * section to its run's target (sums per component root, sections in
 * order). */
static void centre_free(solver *s)
{
    const size_t N = s->nodes;
    const uint32_t fin = cnx__uf_find(s->comp, (uint32_t)s->nu);
    double *sum = s->sum; /* per root: x, y, count */
    memset(sum, 0, 3 * s->nu * sizeof(*sum));
    for (size_t u = 0; u < s->nu; u++) {
        const uint32_t r = cnx__uf_find(s->comp, (uint32_t)u);
        for (size_t n = 0; n < N; n++) {
            sum[3 * r] += s->x[u * N + n];
            sum[3 * r + 1] += s->y[u * N + n];
        }
        sum[3 * r + 2] += (double)N;
    }
    for (size_t u = 0; u < s->nu; u++) {
        const uint32_t r = cnx__uf_find(s->comp, (uint32_t)u);
        const uint32_t g = cnx__uf_find(s->run, (uint32_t)s->sec[u]);
        double mx, my;
        if (r == fin)
            continue;
        mx = sum[3 * r] / sum[3 * r + 2] - s->target[2 * g];
        my = sum[3 * r + 1] / sum[3 * r + 2] - s->target[2 * g + 1];
        for (size_t n = 0; n < N; n++) {
            s->x[u * N + n] -= mx;
            s->y[u * N + n] -= my;
        }
    }
}

/* Solve the unknowns from section u0 to e - 1 (stack indices) and write
 * them into out. used: the used matches in (zb, za) order. */
static void solve_block(solver *s, size_t u0, size_t e,
                        const cnx_align_match *const *used, size_t nused,
                        int64_t z0, cnx_align_solution *out)
{
    const size_t N = s->nodes;
    s->nu = 0;
    for (size_t z = u0; z < e; z++)
        if (out->sections[z].status == CNX_ALIGN_SECTION_OK) {
            s->slot[z] = s->nu;
            s->sec[s->nu++] = z;
        }
    if (s->nu == 0)
        return;
    for (uint32_t u = 0; u <= (uint32_t)s->nu; u++)
        s->comp[u] = u;
    s->nt = 0;
    for (size_t k = 0; k < nused; k++) {
        const cnx_align_match *m = used[k];
        const size_t a = (size_t)(m->za - z0), b = (size_t)(m->zb - z0);
        term *tm;
        if (b < u0 || b >= e)
            continue;
        tm = &s->t[s->nt++];
        tm->m = m;
        tm->a = a;
        tm->b = b;
        tm->sb = s->slot[b];
        tm->sa = a >= u0 ? s->slot[a] : NONE;
        tm->w = m->zb - m->za == 1 ? 1.0 : WEIGHT_SKIP;
        assert(tm->sb != NONE && (a < u0 || tm->sa != NONE));
        cnx__uf_union(s->comp, (uint32_t)tm->sb,
                      tm->sa == NONE ? (uint32_t)s->nu : (uint32_t)tm->sa);
    }
    memset(s->x, 0, s->nu * N * sizeof(*s->x));
    memset(s->y, 0, s->nu * N * sizeof(*s->y));
    for (int pass = 0; pass < PASSES; pass++) {
        build_terms(s);
        build_rhs(s, 0, out);
        cg(s, s->x);
        build_rhs(s, 1, out);
        cg(s, s->y);
        centre_free(s);
    }
    for (size_t u = 0; u < s->nu; u++) {
        cnx_align_section *c = &out->sections[s->sec[u]];
        memcpy(c->dx, s->x + u * N, N * sizeof(*c->dx));
        memcpy(c->dy, s->y + u * N, N * sizeof(*c->dy));
        s->slot[s->sec[u]] = NONE;
    }
}

/* All blocks in order (sets out->blocks). */
static void solve_all(solver *s, const cnx_align_params *p,
                      const cnx_align_match *const *used, size_t nused,
                      int64_t z0, cnx_align_solution *out)
{
    const int64_t nz = out->nz, h = p->overlap / 2 > 1 ? p->overlap / 2 : 1;
    int64_t sk = 0;
    out->blocks = 0;
    for (;;) {
        const int64_t e = sk + p->block < nz ? sk + p->block : nz;
        const int64_t u0 = out->blocks == 0 ? 0 : sk + h;
        solve_block(s, (size_t)u0, (size_t)e, used, nused, z0, out);
        out->blocks++;
        if (e == nz)
            break;
        sk += p->block - p->overlap;
    }
}

/* ---- input, report ----------------------------------------------------- */

typedef struct ordered {
    const cnx_align_match *m;
    size_t index; /* in the input */
} ordered;

static int cmp_ordered(const void *pa, const void *pb)
{
    const ordered *a = pa, *b = pb;
    if (a->m->zb != b->m->zb)
        return a->m->zb < b->m->zb ? -1 : 1;
    if (a->m->za != b->m->za)
        return a->m->za < b->m->za ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

static int in_stack(int64_t z, int64_t z0, int64_t nz)
{
    return z >= z0 && (uint64_t)z - (uint64_t)z0 < (uint64_t)nz;
}

/* Check one match against the stack and the grid. */
static int check_match(const cnx_align_match *m, size_t k, int64_t z0,
                       int64_t nz, size_t nodes)
{
    const long long za = (long long)m->za, zb = (long long)m->zb;
    if (!in_stack(m->za, z0, nz) || !in_stack(m->zb, z0, nz))
        return cnx_error_set(CNX_EINVAL, 0,
                             "align: match %zu (z %lld -> %lld): outside the "
                             "stack %lld..%lld",
                             k, za, zb, (long long)z0,
                             (long long)(z0 + (nz - 1)));
    if (m->zb - m->za != 1 && m->zb - m->za != 2)
        return cnx_error_set(CNX_EINVAL, 0,
                             "align: match %zu (z %lld -> %lld): zb - za must "
                             "be 1 or 2",
                             k, za, zb);
    if (m->nodes != nodes)
        return cnx_error_set(CNX_EINVAL, 0,
                             "align: match %zu (z %lld -> %lld): nodes %zu, "
                             "the grid has %zu",
                             k, za, zb, m->nodes, nodes);
    assert(m->dx && m->dy && m->peak && m->flag);
    for (size_t n = 0; n < nodes; n++)
        if (m->flag[n] == 0 &&
            !(m->dx[n] - m->dx[n] == 0.0 && m->dy[n] - m->dy[n] == 0.0))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "align: match %zu (z %lld -> %lld): node %zu "
                                 "is valid but not finite",
                                 k, za, zb, n);
    return 0;
}

static size_t count_valid(const cnx_align_match *m)
{
    size_t v = 0;
    for (size_t n = 0; n < m->nodes; n++)
        v += m->flag[n] == 0;
    return v;
}

/* Residuals, confidence and counts of section z. buf: 4 * nodes. */
static void report(cnx_align_solution *out, size_t z,
                   const cnx_align_match *const *mine, const int *mine_used,
                   size_t nmine, int64_t z0, double *buf)
{
    cnx_align_section *c = &out->sections[z];
    const size_t N = out->nodes;
    size_t nr = 0, np = 0;
    for (size_t k = 0; k < nmine; k++) {
        const cnx_align_match *m = mine[k];
        for (size_t n = 0; n < N; n++)
            c->nodes_rejected += m->flag[n] != 0;
        if (!mine_used[k])
            continue;
        c->pairs_used++;
        for (size_t n = 0; n < N; n++)
            c->nodes_valid += m->flag[n] == 0;
    }
    /* residuals (the match's terms at the final d) */
    for (size_t k = 0; k < nmine; k++) {
        const cnx_align_match *m = mine[k];
        const cnx_align_section *a = &out->sections[m->za - z0];
        const cnx_align_section *b = &out->sections[m->zb - z0];
        if (!mine_used[k])
            continue;
        for (size_t n = 0; n < N; n++) {
            double mx, my, ex, ey;
            if (!match_at(&out->grid, m, n, b->dx[n], b->dy[n], &mx, &my))
                continue;
            ex = a->dx[n] - b->dx[n] - mx;
            ey = a->dy[n] - b->dy[n] - my;
            buf[nr++] = align_sqrt(ex * ex + ey * ey);
        }
    }
    if (nr > 0) {
        c->residual_median = lower_median(buf, nr);
        c->residual_max = buf[nr - 1];
    }
    for (size_t k = 0; k < nmine; k++) {
        const cnx_align_match *m = mine[k];
        if (!mine_used[k])
            continue;
        for (size_t n = 0; n < N; n++)
            if (m->flag[n] == 0)
                buf[np++] = m->peak[n];
    }
    c->confidence = lower_median(buf, np);
}

static void normalise(cnx_align_solution *out, const cnx_align_stats *stats,
                      int normalize, double *buf)
{
    const size_t nz = (size_t)out->nz;
    double tm, ts;
    size_t n = 0;
    for (size_t z = 0; z < nz; z++) {
        out->sections[z].gain = 1.0;
        out->sections[z].offset = 0.0;
    }
    if (!normalize)
        return;
    for (size_t z = 0; z < nz; z++)
        if (stats[z].count > 0)
            buf[n++] = stats[z].mean;
    tm = lower_median(buf, n);
    n = 0;
    for (size_t z = 0; z < nz; z++)
        if (stats[z].count > 0)
            buf[n++] = stats[z].sd;
    ts = lower_median(buf, n);
    for (size_t z = 0; z < nz; z++) {
        cnx_align_section *c = &out->sections[z];
        if (stats[z].count <= 0)
            continue;
        c->gain = stats[z].sd < 1e-6 ? 1.0 : ts / stats[z].sd;
        c->offset = tm - c->gain * stats[z].mean;
    }
}

/* The mean translation of every run (over its OK sections and nodes, in
 * section order) into mean[2 * root]; other entries 0. */
static void run_means(const cnx_align_solution *out, uint32_t *run,
                      double *mean)
{
    const size_t nz = (size_t)out->nz, N = out->nodes;
    memset(mean, 0, 2 * nz * sizeof(*mean));
    for (size_t r = 0; r < nz; r++) {
        double cnt = 0.0;
        if (cnx__uf_find(run, (uint32_t)r) != r)
            continue;
        for (size_t z = r; z < nz; z++) {
            const cnx_align_section *c = &out->sections[z];
            if (c->status != CNX_ALIGN_SECTION_OK ||
                cnx__uf_find(run, (uint32_t)z) != r)
                continue;
            for (size_t n = 0; n < N; n++) {
                mean[2 * r] += c->dx[n];
                mean[2 * r + 1] += c->dy[n];
            }
            cnt += (double)N;
        }
        if (cnt > 0.0) {
            mean[2 * r] /= cnt;
            mean[2 * r + 1] /= cnt;
        }
    }
}

/* Move every run (connected OK sections) to mean translation 0, then the
 * whole stack (over its OK sections). mean: 2 * nz scratch. */
static void gauge(cnx_align_solution *out, uint32_t *run, double *mean)
{
    const size_t nz = (size_t)out->nz, N = out->nodes;
    double gx = 0.0, gy = 0.0;
    size_t cnt = 0;
    run_means(out, run, mean);
    for (size_t z = 0; z < nz; z++) {
        cnx_align_section *c = &out->sections[z];
        const uint32_t r = cnx__uf_find(run, (uint32_t)z);
        if (c->status != CNX_ALIGN_SECTION_OK)
            continue;
        for (size_t n = 0; n < N; n++) {
            c->dx[n] -= mean[2 * r];
            c->dy[n] -= mean[2 * r + 1];
            gx += c->dx[n];
            gy += c->dy[n];
        }
        cnt += N;
    }
    if (cnt == 0)
        return;
    gx /= (double)cnt;
    gy /= (double)cnt;
    for (size_t z = 0; z < nz; z++) {
        cnx_align_section *c = &out->sections[z];
        if (c->status != CNX_ALIGN_SECTION_OK)
            continue;
        for (size_t n = 0; n < N; n++) {
            c->dx[n] -= gx;
            c->dy[n] -= gy;
        }
    }
}

/* FAILED and EMPTY sections: linear in z between the nearest OK ones. */
static void bridge(cnx_align_solution *out)
{
    const int64_t nz = out->nz;
    const size_t N = out->nodes;
    for (int64_t z = 0; z < nz; z++) {
        cnx_align_section *c = &out->sections[z];
        int64_t lo = z - 1, hi = z + 1;
        if (c->status == CNX_ALIGN_SECTION_OK)
            continue;
        while (lo >= 0 && out->sections[lo].status != CNX_ALIGN_SECTION_OK)
            lo--;
        while (hi < nz && out->sections[hi].status != CNX_ALIGN_SECTION_OK)
            hi++;
        if (lo >= 0 && hi < nz) {
            const cnx_align_section *l = &out->sections[lo],
                                    *h = &out->sections[hi];
            const double wl = (double)(hi - z) / (double)(hi - lo);
            const double wh = (double)(z - lo) / (double)(hi - lo);
            for (size_t n = 0; n < N; n++) {
                c->dx[n] = wl * l->dx[n] + wh * h->dx[n];
                c->dy[n] = wl * l->dy[n] + wh * h->dy[n];
            }
        } else if (lo >= 0 || hi < nz) {
            const cnx_align_section *o = &out->sections[lo >= 0 ? lo : hi];
            memcpy(c->dx, o->dx, N * sizeof(*c->dx));
            memcpy(c->dy, o->dy, N * sizeof(*c->dy));
        }
    }
}

/* ---- the whole solve --------------------------------------------------- */

int cnx_align_solve(const cnx_align_grid *grid, int64_t z0, int64_t nz,
                    const cnx_align_match *matches, size_t nmatches,
                    const cnx_align_stats *stats, const cnx_align_params *p,
                    cnx_align_solution *out)
{
    ordered *ord = NULL;
    const cnx_align_match **used = NULL;
    int *use = NULL;
    uint32_t *run = NULL;
    size_t *mine = NULL, *nmine = NULL; /* per section: 4 match slots */
    double *buf = NULL, *target = NULL;
    solver s;
    size_t N, nused = 0, bmax;
    int rc;

    assert(grid && p && out && (nmatches == 0 || matches));
    memset(out, 0, sizeof(*out));
    memset(&s, 0, sizeof(s));
    rc = cnx_align_params_check(p);
    if (rc != 0)
        return rc;
    if (nz < 1 || nz > MAX_NZ)
        return cnx_error_set(CNX_EINVAL, 0,
                             "align: nz %lld is outside 1 .. %lld",
                             (long long)nz, (long long)MAX_NZ);
    if (grid->nx < 1 || grid->ny < 1 || grid->nx > CNX_ALIGN_MAX_SIDE ||
        grid->ny > CNX_ALIGN_MAX_SIDE)
        return cnx_error_set(CNX_EINVAL, 0,
                             "align: grid nx %lld, ny %lld: each must be "
                             "1 .. %d",
                             (long long)grid->nx, (long long)grid->ny,
                             CNX_ALIGN_MAX_SIDE);
    if (!(grid->step > 0.0 && grid->step < 1e300) ||
        !(grid->x0 - grid->x0 == 0.0 && grid->y0 - grid->y0 == 0.0))
        return cnx_error_set(CNX_EINVAL, 0,
                             "align: grid step %g must be > 0 and the "
                             "origin finite",
                             grid->step);
    assert(stats);
    N = (size_t)grid->nx * (size_t)grid->ny;
    for (size_t k = 0; k < nmatches; k++) {
        rc = check_match(&matches[k], k, z0, nz, N);
        if (rc != 0)
            return rc;
    }
    ord = malloc((nmatches + 1) * sizeof(*ord));
    if (ord == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
    for (size_t k = 0; k < nmatches; k++)
        ord[k] = (ordered){&matches[k], k};
    if (nmatches > 1)
        qsort(ord, nmatches, sizeof(*ord), cmp_ordered);
    for (size_t k = 1; k < nmatches; k++)
        if (ord[k].m->za == ord[k - 1].m->za &&
            ord[k].m->zb == ord[k - 1].m->zb) {
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "align: match %zu (z %lld -> %lld): repeats "
                               "match %zu",
                               ord[k].index, (long long)ord[k].m->za,
                               (long long)ord[k].m->zb, ord[k - 1].index);
            goto done;
        }

    out->grid = *grid;
    out->z0 = z0;
    out->nz = nz;
    out->nodes = N;
    out->sections = calloc((size_t)nz, sizeof(*out->sections));
    use = calloc(nmatches + 1, sizeof(*use));
    used = calloc(nmatches + 1, sizeof(*used));
    run = malloc((size_t)nz * sizeof(*run));
    mine = malloc(4 * (size_t)nz * sizeof(*mine));
    nmine = calloc((size_t)nz, sizeof(*nmine));
    buf = malloc((4 * N > 3 * (size_t)nz ? 4 * N : 3 * (size_t)nz) *
                 sizeof(*buf));
    target = calloc(2 * (size_t)nz, sizeof(*target));
    if (!out->sections || !use || !used || !run || !mine || !nmine || !buf ||
        !target)
        goto nomem;
    for (int64_t z = 0; z < nz; z++) {
        cnx_align_section *c = &out->sections[z];
        c->z = z0 + z;
        c->dx = calloc(N, sizeof(*c->dx));
        c->dy = calloc(N, sizeof(*c->dy));
        if (!c->dx || !c->dy)
            goto nomem;
        c->status = stats[z].count > 0 ? CNX_ALIGN_SECTION_FAILED
                                       : CNX_ALIGN_SECTION_EMPTY;
        run[z] = (uint32_t)z;
    }

    /* used matches (in (zb, za) order), status, runs */
    for (size_t k = 0; k < nmatches; k++) {
        const cnx_align_match *m = ord[k].m;
        const size_t a = (size_t)(m->za - z0), b = (size_t)(m->zb - z0);
        const size_t v = count_valid(m);
        if (stats[a].count <= 0 || stats[b].count <= 0 || v == 0 ||
            (double)v < p->min_valid * (double)N)
            continue;
        use[k] = 1;
        used[nused++] = m;
        out->sections[a].status = CNX_ALIGN_SECTION_OK;
        out->sections[b].status = CNX_ALIGN_SECTION_OK;
        cnx__uf_union(run, (uint32_t)a, (uint32_t)b);
    }

    /* blocks */
    bmax = (size_t)(nz < p->block ? nz : p->block);
    s.grid = grid;
    s.nodes = N;
    s.stiffness = p->stiffness;
    s.anchor = p->anchor;
    s.sec = malloc(bmax * sizeof(*s.sec));
    s.slot = malloc((size_t)nz * sizeof(*s.slot));
    s.t = malloc((2 * bmax + 1) * sizeof(*s.t));
    s.comp = malloc((bmax + 1) * sizeof(*s.comp));
    s.sum = malloc(3 * bmax * sizeof(*s.sum));
    if (!s.sec || !s.slot || !s.t || !s.comp || !s.sum)
        goto nomem;
    if (bmax > SIZE_MAX / sizeof(double) / 2 / N)
        goto nomem;
    {
        const size_t bn = bmax * N, tn = 2 * bmax * N;
        double **arr[] = {&s.x, &s.y, &s.diag, &s.rhs, &s.r, &s.z, &s.p, &s.q};
        for (size_t i = 0; i < sizeof(arr) / sizeof(arr[0]); i++) {
            *arr[i] = malloc(bn * sizeof(double));
            if (*arr[i] == NULL)
                goto nomem;
        }
        s.tw = malloc(tn * sizeof(double));
        s.tx = malloc(tn * sizeof(double));
        s.ty = malloc(tn * sizeof(double));
        if (!s.tw || !s.tx || !s.ty)
            goto nomem;
    }
    for (int64_t z = 0; z < nz; z++)
        s.slot[z] = NONE;
    s.run = run;
    s.target = target;
    solve_all(&s, p, used, nused, z0, out);
    if (out->blocks > 1) {
        /* again, each run's free part placed so that the run ends up near
         * mean translation 0 (see the file comment) */
        run_means(out, run, target);
        for (size_t i = 0; i < 2 * (size_t)nz; i++)
            target[i] = -target[i];
        solve_all(&s, p, used, nused, z0, out);
    }
    gauge(out, run, buf);
    bridge(out);

    /* report: each section's matches (at most 4), in (zb, za) order */
    for (size_t k = 0; k < nmatches; k++) {
        const size_t ends[2] = {(size_t)(ord[k].m->za - z0),
                                (size_t)(ord[k].m->zb - z0)};
        for (int e = 0; e < 2; e++) {
            assert(nmine[ends[e]] < 4);
            mine[4 * ends[e] + nmine[ends[e]]++] = k;
        }
    }
    for (int64_t z = 0; z < nz; z++) {
        const cnx_align_match *m[4];
        int u[4];
        for (size_t k = 0; k < nmine[z]; k++) {
            m[k] = ord[mine[4 * z + k]].m;
            u[k] = use[mine[4 * z + k]];
        }
        report(out, (size_t)z, m, u, nmine[z], z0, buf);
    }
    normalise(out, stats, p->normalize, buf);
    rc = 0;
    goto done;
nomem:
    rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
done:
    if (rc != 0)
        cnx_align_solution_free(out);
    free(ord);
    free(use);
    free(used);
    free(run);
    free(mine);
    free(nmine);
    free(buf);
    free(target);
    free(s.sec);
    free(s.slot);
    free(s.t);
    free(s.comp);
    free(s.sum);
    free(s.x);
    free(s.y);
    free(s.diag);
    free(s.rhs);
    free(s.r);
    free(s.z);
    free(s.p);
    free(s.q);
    free(s.tw);
    free(s.tx);
    free(s.ty);
    return rc;
}

void cnx_align_solution_free(cnx_align_solution *s)
{
    if (s == NULL)
        return;
    if (s->sections != NULL)
        for (int64_t z = 0; z < s->nz; z++) {
            free(s->sections[z].dx);
            free(s->sections[z].dy);
        }
    free(s->sections);
    memset(s, 0, sizeof(*s));
}
