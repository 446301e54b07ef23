/*
 * mesh_simplify_v2.h - the baseline of bench_mesh: cnx_mesh_simplify as
 * CNX_MESH_VERSION 2 first shipped it (libcnx/src/kernels/mesh_simplify.c
 * at a03ae92), verbatim but for the names (static, prefixed v2_), so the
 * bench times the kernel against its previous code in the same run and
 * checks that both write the same bytes. Included by bench_mesh.c only;
 * not part of the library.
 */
#ifndef CNX_BENCH_MESH_SIMPLIFY_V2_H
#define CNX_BENCH_MESH_SIMPLIFY_V2_H

#include "cnx/mesh.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

#define V2_VF_FIXED 1u
#define V2_VF_DEAD 2u

/* Normal-turn limit: cos(75 degrees); quality floor of a new triangle
 * (2 sqrt(3) |n| / sum of squared edge lengths; 1 for equilateral). */
#define V2_MAX_TURN_COS 0.2588
#define V2_MIN_QUALITY 0.02
#define V2_MAX_VALENCE 64
#define V2_NO_VERTEX UINT32_MAX
#define V2_SIMP_MAX_TRIS ((size_t)1 << 29) /* pool offsets fit uint32 */

/* The hot part of a vertex: one cache line. */
typedef struct v2_simp_vert {
    double p[3];
    double cost; /* its cheapest v2_collapse, onto `to` (V2_NO_VERTEX: none) */
    uint32_t start; /* triangle list in the pool */
    uint32_t len;
    uint32_t to;
    uint32_t lock; /* the pass that last changed its neighbourhood */
    uint8_t flags;
    uint8_t dirty; /* cost and to need recomputing */
} v2_simp_vert;

typedef struct v2_simp {
    v2_simp_vert *v;
    double *q; /* 10 per vertex: a2 ab ac ad b2 bc bd c2 cd d2 of sum K_p */
    size_t nv;
    uint32_t *tri; /* 3 per triangle; tri[3t] == UINT32_MAX: dead */
    size_t nt, alive;
    uint32_t *pool;
    size_t npool, pcap;
    uint32_t pass;
} v2_simp;

static int v2_oom(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
}

static double v2_quadric_eval(const double q[10], const double p[3])
{
    const double x = p[0], y = p[1], z = p[2];
    return q[0] * x * x + 2 * q[1] * x * y + 2 * q[2] * x * z + 2 * q[3] * x +
           q[4] * y * y + 2 * q[5] * y * z + 2 * q[6] * y + q[7] * z * z +
           2 * q[8] * z + q[9];
}

/*
 * Cost of moving r and its neighbour w together, into t: the minimum of
 * (Q_r + Q_w) on the segment from r to w, rounded to float - or w itself
 * if w is fixed. r stays inside the chunk either way.
 */
static double v2_edge_cost(const v2_simp *s, uint32_t r, uint32_t w,
                           double t[3])
{
    const double *qr = s->q + 10 * (size_t)r, *qw = s->q + 10 * (size_t)w;
    const double *pr = s->v[r].p, *pw = s->v[w].p;
    double q[10], c;
    for (int i = 0; i < 10; i++)
        q[i] = qr[i] + qw[i];
    if (s->v[w].flags & V2_VF_FIXED) {
        memcpy(t, pw, 3 * sizeof(*t));
    } else {
        double d[3], ad[3], dad, num, u = 0.5;
        for (int i = 0; i < 3; i++)
            d[i] = pw[i] - pr[i];
        ad[0] = q[0] * d[0] + q[1] * d[1] + q[2] * d[2];
        ad[1] = q[1] * d[0] + q[4] * d[1] + q[5] * d[2];
        ad[2] = q[2] * d[0] + q[5] * d[1] + q[7] * d[2];
        dad = ad[0] * d[0] + ad[1] * d[1] + ad[2] * d[2];
        num = ad[0] * pr[0] + ad[1] * pr[1] + ad[2] * pr[2] + q[3] * d[0] +
              q[6] * d[1] + q[8] * d[2];
        /* Flat along the edge (coplanar faces): its midpoint. */
        if (dad > 1e-9 * (q[0] + q[4] + q[7]) *
                      (d[0] * d[0] + d[1] * d[1] + d[2] * d[2])) {
            u = -num / dad;
            u = u < 0 ? 0 : u > 1 ? 1 : u;
        }
        for (int i = 0; i < 3; i++)
            t[i] = (double)(float)(pr[i] + u * d[i]);
    }
    c = v2_quadric_eval(q, t);
    return c > 0 ? c : 0;
}

/* Keep the v2_collapse onto w at cost c if it is v's cheapest (ties: the
 * lower neighbour index). */
static void v2_offer(v2_simp_vert *v, uint32_t w, double c)
{
    if (c < v->cost || (c == v->cost && w < v->to)) {
        v->cost = c;
        v->to = w;
    }
}

static void v2_tri_normal(const double *p0, const double *p1, const double *p2,
                          double n[3])
{
    double u[3], w[3];
    for (int i = 0; i < 3; i++) {
        u[i] = p1[i] - p0[i];
        w[i] = p2[i] - p0[i];
    }
    n[0] = u[1] * w[2] - u[2] * w[1];
    n[1] = u[2] * w[0] - u[0] * w[2];
    n[2] = u[0] * w[1] - u[1] * w[0];
}

static double v2_sq_dist(const double *a, const double *b)
{
    double d = 0;
    for (int i = 0; i < 3; i++)
        d += (a[i] - b[i]) * (a[i] - b[i]);
    return d;
}

/* Would moving vertex `who` of live triangle t to p flip it or make it
 * near-degenerate? */
static int v2_tri_bad_after(const v2_simp *s, size_t t, uint32_t who,
                            const double p[3])
{
    const uint32_t *tr = s->tri + 3 * t;
    const double *q[3], *o[3];
    double n0[3], n1[3], l0, l1, dot, sum, qual;
    for (int i = 0; i < 3; i++) {
        o[i] = s->v[tr[i]].p;
        q[i] = tr[i] == who ? p : o[i];
    }
    v2_tri_normal(o[0], o[1], o[2], n0);
    v2_tri_normal(q[0], q[1], q[2], n1);
    l0 = sqrt(n0[0] * n0[0] + n0[1] * n0[1] + n0[2] * n0[2]);
    l1 = sqrt(n1[0] * n1[0] + n1[1] * n1[1] + n1[2] * n1[2]);
    dot = n0[0] * n1[0] + n0[1] * n1[1] + n0[2] * n1[2];
    if (!(dot > V2_MAX_TURN_COS * l0 * l1))
        return 1;
    sum = v2_sq_dist(q[0], q[1]) + v2_sq_dist(q[1], q[2]) +
          v2_sq_dist(q[2], q[0]);
    qual = 2 * sqrt(3.0) * l1 / sum;
    if (qual < V2_MIN_QUALITY) {
        double s0 = v2_sq_dist(o[0], o[1]) + v2_sq_dist(o[1], o[2]) +
                    v2_sq_dist(o[2], o[0]);
        if (qual < 2 * sqrt(3.0) * l0 / s0)
            return 1;
    }
    return 0;
}

static int v2_tri_has(const uint32_t *tr, uint32_t x)
{
    return tr[0] == x || tr[1] == x || tr[2] == x;
}

/* Neighbours of v (distinct, through live triangles) into nb (cap n).
 * A free vertex's fan is one closed cycle, so the vertex after v in each
 * of its triangles names each neighbour once; a fixed one may have open
 * or irregular fans and is deduplicated. */
static size_t v2_neighbours(const v2_simp *s, uint32_t v, uint32_t *nb,
                            size_t n)
{
    const v2_simp_vert *sv = &s->v[v];
    size_t k = 0;
    if (!(sv->flags & V2_VF_FIXED)) {
        for (uint32_t i = 0; i < sv->len && k < n; i++) {
            const uint32_t *tr = s->tri + 3 * (size_t)s->pool[sv->start + i];
            nb[k++] = tr[0] == v ? tr[1] : tr[1] == v ? tr[2] : tr[0];
        }
        return k;
    }
    for (uint32_t i = 0; i < sv->len; i++) {
        const uint32_t *tr = s->tri + 3 * (size_t)s->pool[sv->start + i];
        for (int j = 0; j < 3; j++) {
            const uint32_t x = tr[j];
            size_t m;
            if (x == v)
                continue;
            for (m = 0; m < k && nb[m] != x; m++)
                ;
            if (m == k && k < n)
                nb[k++] = x;
        }
    }
    return k;
}

/*
 * Check merging r into its neighbour keep at t: link condition (the two
 * vertices share exactly the two v2_neighbours opposite their edge, and do
 * not close a tetrahedron; no new edge between fixed vertices) and the
 * shapes of the triangles that remain.
 * @return 1 if allowed.
 */
static int v2_collapse_ok(const v2_simp *s, uint32_t keep, uint32_t r,
                          const double t[3])
{
    const v2_simp_vert *vk = &s->v[keep], *vr = &s->v[r];
    uint32_t nk[V2_MAX_VALENCE], nr[V2_MAX_VALENCE], opp[2];
    size_t ck, cr, nopp = 0, ncommon = 0;
    int kt = 0, rt = 0;

    if ((size_t)vk->len + vr->len + 2 >= V2_MAX_VALENCE)
        return 0; /* keep's new fan would not fit the neighbour arrays */
    /* The edge's triangles: exactly two (r is interior). */
    for (uint32_t i = 0; i < vr->len; i++) {
        const uint32_t *tr = s->tri + 3 * (size_t)s->pool[vr->start + i];
        if (v2_tri_has(tr, keep)) {
            if (nopp == 2)
                return 0;
            for (int j = 0; j < 3; j++)
                if (tr[j] != keep && tr[j] != r)
                    opp[nopp] = tr[j];
            nopp++;
        }
    }
    if (nopp != 2 || opp[0] == opp[1])
        return 0;
    ck = v2_neighbours(s, keep, nk, V2_MAX_VALENCE);
    cr = v2_neighbours(s, r, nr, V2_MAX_VALENCE);
    for (size_t i = 0; i < cr; i++)
        for (size_t j = 0; j < ck; j++)
            if (nr[i] == nk[j])
                ncommon++;
    if (ncommon != 2)
        return 0;
    /* No new edge between two fixed vertices: at a chunk face it could
     * duplicate one of the neighbouring fragment's edges. */
    if (vk->flags & V2_VF_FIXED)
        for (size_t i = 0; i < cr; i++) {
            size_t j;
            if (nr[i] == keep || !(s->v[nr[i]].flags & V2_VF_FIXED))
                continue;
            for (j = 0; j < ck && nk[j] != nr[i]; j++)
                ;
            if (j == ck)
                return 0;
        }
    /* Tetrahedron: triangles (keep, o1, o2) and (r, o1, o2) both. */
    for (uint32_t i = 0; i < vk->len; i++) {
        const uint32_t *tr = s->tri + 3 * (size_t)s->pool[vk->start + i];
        kt |= v2_tri_has(tr, opp[0]) && v2_tri_has(tr, opp[1]);
    }
    for (uint32_t i = 0; i < vr->len; i++) {
        const uint32_t *tr = s->tri + 3 * (size_t)s->pool[vr->start + i];
        rt |= v2_tri_has(tr, opp[0]) && v2_tri_has(tr, opp[1]);
    }
    if (kt && rt)
        return 0;
    /* Shapes of the triangles that survive, r and keep moved to t. */
    for (uint32_t i = 0; i < vr->len; i++) {
        const size_t tt = s->pool[vr->start + i];
        if (!v2_tri_has(s->tri + 3 * tt, keep) && v2_tri_bad_after(s, tt, r, t))
            return 0;
    }
    if (memcmp(t, vk->p, sizeof(vk->p)) != 0)
        for (uint32_t i = 0; i < vk->len; i++) {
            const size_t tt = s->pool[vk->start + i];
            if (!v2_tri_has(s->tri + 3 * tt, r) &&
                v2_tri_bad_after(s, tt, keep, t))
                return 0;
        }
    return 1;
}

/* Remove triangle t from v's list, keeping the order. */
static void v2_list_remove(v2_simp *s, uint32_t v, uint32_t t)
{
    v2_simp_vert *sv = &s->v[v];
    uint32_t *l = s->pool + sv->start;
    uint32_t i = 0;
    while (i < sv->len && l[i] != t)
        i++;
    assert(i < sv->len);
    memmove(l + i, l + i + 1, (sv->len - i - 1) * sizeof(*l));
    sv->len--;
}

/* Rewrite the pool with the live vertices' lists only; room for need
 * more entries after it. */
static int v2_pool_compact(v2_simp *s, size_t need)
{
    size_t live = 0, at = 0, cap;
    uint32_t *pl;
    for (size_t v = 0; v < s->nv; v++)
        live += s->v[v].len;
    cap = 2 * (live + need) + 16;
    pl = malloc(cap * sizeof(*pl));
    if (pl == NULL)
        return v2_oom();
    for (size_t v = 0; v < s->nv; v++) {
        v2_simp_vert *sv = &s->v[v];
        memcpy(pl + at, s->pool + sv->start, sv->len * sizeof(*pl));
        sv->start = (uint32_t)at;
        at += sv->len;
    }
    free(s->pool);
    s->pool = pl;
    s->npool = at;
    s->pcap = cap;
    return 0;
}

/* Move r onto keep: r's triangles go to keep, the edge's two vanish; keep
 * and its new v2_neighbours are locked for this pass and recomputed. */
static int v2_collapse(v2_simp *s, uint32_t keep, uint32_t r, const double t[3])
{
    v2_simp_vert *vk, *vr;
    uint32_t nb[V2_MAX_VALENCE];
    size_t start, n = 0, nn;

    if (s->npool + (size_t)s->v[keep].len + s->v[r].len > s->pcap) {
        int rc = v2_pool_compact(s, (size_t)s->v[keep].len + s->v[r].len);
        if (rc != 0)
            return rc;
    }
    vk = &s->v[keep];
    vr = &s->v[r];
    start = s->npool;
    for (uint32_t i = 0; i < vk->len; i++) {
        const uint32_t t = s->pool[vk->start + i];
        if (v2_tri_has(s->tri + 3 * (size_t)t, r)) {
            for (int j = 0; j < 3; j++) {
                const uint32_t o = s->tri[3 * (size_t)t + (size_t)j];
                if (o != keep && o != r)
                    v2_list_remove(s, o, t);
            }
            s->tri[3 * (size_t)t] = UINT32_MAX;
            s->tri[3 * (size_t)t + 1] = UINT32_MAX;
            s->tri[3 * (size_t)t + 2] = UINT32_MAX;
            s->alive--;
        } else {
            s->pool[start + n++] = t;
        }
    }
    for (uint32_t i = 0; i < vr->len; i++) {
        const uint32_t t = s->pool[vr->start + i];
        uint32_t *tr = s->tri + 3 * (size_t)t;
        if (tr[0] == UINT32_MAX)
            continue; /* one of the edge's two, removed above */
        for (int j = 0; j < 3; j++)
            if (tr[j] == r)
                tr[j] = keep;
        s->pool[start + n++] = t;
    }
    s->npool = start + n;
    vk->start = (uint32_t)start;
    vk->len = (uint32_t)n;
    for (int i = 0; i < 10; i++)
        s->q[10 * (size_t)keep + (size_t)i] += s->q[10 * (size_t)r + (size_t)i];
    memcpy(vk->p, t, sizeof(vk->p));
    vk->lock = s->pass;
    vk->dirty = 1;
    vr->flags |= V2_VF_DEAD;
    vr->len = 0;
    /* A neighbour's cheapest v2_collapse changes only through its edge to
     * keep (moved, its quadric grown), unless it was onto r or keep. */
    nn = v2_neighbours(s, keep, nb, V2_MAX_VALENCE);
    for (size_t i = 0; i < nn; i++) {
        v2_simp_vert *x = &s->v[nb[i]];
        x->lock = s->pass;
        if (x->flags & V2_VF_FIXED)
            continue;
        if (x->to == r || x->to == keep || x->to == V2_NO_VERTEX) {
            x->dirty = 1;
        } else {
            double tx[3];
            v2_offer(x, keep, v2_edge_cost(s, nb[i], keep, tx));
        }
    }
    return 0;
}

/* Mark vertices whose triangles do not form one closed, consistently
 * oriented fan (boundary, non-manifold, degenerate) as fixed. */
static void v2_mark_irregular(v2_simp *s)
{
    for (size_t v = 0; v < s->nv; v++) {
        v2_simp_vert *sv = &s->v[v];
        uint32_t nx[V2_MAX_VALENCE], pv[V2_MAX_VALENCE];
        size_t d = sv->len, cur = 0, steps = 0;
        if (sv->flags & V2_VF_FIXED)
            continue;
        if (d < 3 || d > V2_MAX_VALENCE) {
            sv->flags |= V2_VF_FIXED;
            continue;
        }
        for (size_t i = 0; i < d; i++) {
            const uint32_t *tr = s->tri + 3 * (size_t)s->pool[sv->start + i];
            int j = tr[0] == v ? 0 : tr[1] == v ? 1 : 2;
            nx[i] = tr[(j + 1) % 3];
            pv[i] = tr[(j + 2) % 3];
            if (tr[(j + 1) % 3] == v || tr[(j + 2) % 3] == v)
                sv->flags |= V2_VF_FIXED; /* degenerate triangle */
        }
        for (size_t i = 0; i < d && !(sv->flags & V2_VF_FIXED); i++)
            for (size_t j = i + 1; j < d; j++)
                if (nx[i] == nx[j] || pv[i] == pv[j])
                    sv->flags |= V2_VF_FIXED;
        if (sv->flags & V2_VF_FIXED)
            continue;
        /* Walk the fan: triangle (v, a, b) is followed by (v, b, c). */
        do {
            size_t j;
            for (j = 0; j < d && nx[j] != pv[cur]; j++)
                ;
            if (j == d) {
                sv->flags |= V2_VF_FIXED;
                break;
            }
            cur = j;
            steps++;
        } while (cur != 0 && steps <= d);
        if (steps != d)
            sv->flags |= V2_VF_FIXED;
    }
}

static int v2_check_opts(const cnx_mesh *m, const cnx_mesh_simplify_opts *o)
{
    if (m == NULL || o == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "mesh: NULL argument");
    if (!(o->target_fraction >= 0 && o->target_fraction <= 1))
        return cnx_error_set(CNX_EINVAL, 0,
                             "mesh: target_fraction %g outside [0, 1]",
                             o->target_fraction);
    if (!(o->max_error >= 0))
        return cnx_error_set(CNX_EINVAL, 0, "mesh: max_error %g", o->max_error);
    if (o->nplanes < 0 || o->nplanes > 6)
        return cnx_error_set(CNX_EINVAL, 0, "mesh: %d fixed planes",
                             o->nplanes);
    for (int i = 0; i < o->nplanes; i++)
        if (o->plane_axis[i] < 0 || o->plane_axis[i] > 2 ||
            !isfinite(o->plane_at[i]))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "mesh: fixed plane %d: axis %d at %g", i,
                                 o->plane_axis[i], o->plane_at[i]);
    if ((m->nverts > 0 && m->verts == NULL) ||
        (m->ntris > 0 && m->tris == NULL))
        return cnx_error_set(CNX_EINVAL, 0, "mesh: NULL arrays");
    if (m->nverts >= UINT32_MAX || m->ntris > V2_SIMP_MAX_TRIS)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "mesh: %zu vertices, %zu triangles: over the "
                             "simplifier's 2^32 - 1, 2^29",
                             m->nverts, m->ntris);
    for (size_t i = 0; i < 3 * m->ntris; i++)
        if (m->tris[i] >= m->nverts)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "mesh: triangle %zu has index %u of %zu "
                                 "vertices",
                                 i / 3, m->tris[i], m->nverts);
    return 0;
}

/* Cheapest v2_collapse of free vertex r onto a neighbour (ties: lower
 * neighbour index), into v[r].cost and v[r].to. */
static void v2_best_collapse(v2_simp *s, uint32_t r)
{
    v2_simp_vert *vr = &s->v[r];
    uint32_t nb[V2_MAX_VALENCE];
    const size_t n = v2_neighbours(s, r, nb, V2_MAX_VALENCE);
    vr->to = V2_NO_VERTEX;
    vr->cost = HUGE_VAL;
    vr->dirty = 0;
    for (size_t i = 0; i < n; i++) {
        double t[3];
        v2_offer(vr, nb[i], v2_edge_cost(s, r, nb[i], t));
    }
}

/* Try to v2_collapse r onto its cheapest neighbour: the cached one if it is
 * not locked (else wait for the next pass), or if that one fails the
 * checks, the others in order of cost. @return 1 if a v2_collapse was made,
 * 0 if none, -1 on failure (error set). */
static int v2_try_collapse(v2_simp *s, uint32_t r, double max_error)
{
    v2_simp_vert *vr = &s->v[r];
    uint32_t nb[V2_MAX_VALENCE], first = vr->to;
    double cost[V2_MAX_VALENCE], t[3];
    size_t n;
    int locked = 0;
    if (s->v[first].lock == s->pass)
        return 0;
    (void)v2_edge_cost(s, r, first, t);
    if (v2_collapse_ok(s, first, r, t))
        return v2_collapse(s, first, r, t) != 0 ? -1 : 1;
    n = v2_neighbours(s, r, nb, V2_MAX_VALENCE);
    for (size_t i = 0; i < n; i++) {
        cost[i] = v2_edge_cost(s, r, nb[i], t);
        if (nb[i] == first)
            nb[i] = V2_NO_VERTEX;
    }
    for (;;) {
        size_t best = n;
        uint32_t w;
        for (size_t i = 0; i < n; i++)
            if (nb[i] != V2_NO_VERTEX &&
                (best == n || cost[i] < cost[best] ||
                 (cost[i] == cost[best] && nb[i] < nb[best])))
                best = i;
        if (best == n || cost[best] > max_error)
            break;
        w = nb[best];
        nb[best] = V2_NO_VERTEX;
        if (s->v[w].lock == s->pass) {
            locked = 1;
            continue;
        }
        (void)v2_edge_cost(s, r, w, t);
        if (v2_collapse_ok(s, w, r, t))
            return v2_collapse(s, w, r, t) != 0 ? -1 : 1;
    }
    /* Nothing now: wait for a change around r, unless only a lock of
     * this pass was in the way. */
    if (!locked)
        vr->to = V2_NO_VERTEX;
    return 0;
}

/* Build the working state from m. */
static int v2_simp_init(v2_simp *s, const cnx_mesh *m,
                        const cnx_mesh_simplify_opts *o)
{
    float pf[6];
    size_t *fill;
    memset(s, 0, sizeof(*s));
    s->nv = m->nverts;
    s->nt = m->ntris;
    s->alive = m->ntris;
    s->v = calloc(s->nv, sizeof(*s->v));
    s->q = calloc(10 * s->nv, sizeof(*s->q));
    s->tri = malloc(3 * s->nt * sizeof(*s->tri));
    s->pcap = 3 * s->nt + 16;
    s->pool = malloc(s->pcap * sizeof(*s->pool));
    fill = calloc(s->nv + 1, sizeof(*fill));
    if (s->v == NULL || s->q == NULL || s->tri == NULL || s->pool == NULL ||
        fill == NULL) {
        free(fill);
        return v2_oom();
    }
    memcpy(s->tri, m->tris, 3 * s->nt * sizeof(*s->tri));
    for (int i = 0; i < o->nplanes; i++)
        pf[i] = (float)o->plane_at[i];
    for (size_t v = 0; v < s->nv; v++) {
        v2_simp_vert *sv = &s->v[v];
        for (int a = 0; a < 3; a++)
            sv->p[a] = m->verts[3 * v + (size_t)a];
        for (int i = 0; i < o->nplanes; i++)
            if (m->verts[3 * v + (size_t)o->plane_axis[i]] == pf[i])
                sv->flags |= V2_VF_FIXED;
        sv->to = V2_NO_VERTEX;
        sv->dirty = 1;
    }
    /* Vertex -> triangle lists (CSR in the pool). */
    for (size_t i = 0; i < 3 * s->nt; i++)
        s->v[s->tri[i]].len++;
    for (size_t v = 0, at = 0; v < s->nv; v++) {
        s->v[v].start = (uint32_t)at;
        fill[v] = at;
        at += s->v[v].len;
    }
    for (size_t t = 0; t < s->nt; t++)
        for (int j = 0; j < 3; j++)
            s->pool[fill[s->tri[3 * t + (size_t)j]]++] = (uint32_t)t;
    s->npool = 3 * s->nt;
    free(fill);
    /* Quadrics of the triangles' planes. */
    for (size_t t = 0; t < s->nt; t++) {
        const uint32_t *tr = s->tri + 3 * t;
        double n[3], len, d, k[10];
        v2_tri_normal(s->v[tr[0]].p, s->v[tr[1]].p, s->v[tr[2]].p, n);
        len = sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
        if (!(len > 0))
            continue;
        for (int a = 0; a < 3; a++)
            n[a] /= len;
        d = -(n[0] * s->v[tr[0]].p[0] + n[1] * s->v[tr[0]].p[1] +
              n[2] * s->v[tr[0]].p[2]);
        k[0] = n[0] * n[0];
        k[1] = n[0] * n[1];
        k[2] = n[0] * n[2];
        k[3] = n[0] * d;
        k[4] = n[1] * n[1];
        k[5] = n[1] * n[2];
        k[6] = n[1] * d;
        k[7] = n[2] * n[2];
        k[8] = n[2] * d;
        k[9] = d * d;
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 10; i++)
                s->q[10 * (size_t)tr[j] + (size_t)i] += k[i];
    }
    v2_mark_irregular(s);
    /* First candidates, each interior edge once (it is a -> b with a < b
     * in exactly one of its two triangles). */
    for (size_t v = 0; v < s->nv; v++) {
        s->v[v].cost = HUGE_VAL;
        s->v[v].dirty = 0;
    }
    for (size_t t = 0; t < s->nt; t++)
        for (int j = 0; j < 3; j++) {
            const uint32_t a = s->tri[3 * t + (size_t)j];
            const uint32_t b = s->tri[3 * t + (size_t)(j + 1) % 3];
            const int fa = (s->v[a].flags & V2_VF_FIXED) != 0;
            const int fb = (s->v[b].flags & V2_VF_FIXED) != 0;
            double tp[3], c;
            if (a > b || (fa && fb))
                continue;
            c = fa ? v2_edge_cost(s, b, a, tp) : v2_edge_cost(s, a, b, tp);
            if (!fa)
                v2_offer(&s->v[a], b, c);
            if (!fb)
                v2_offer(&s->v[b], a, c);
        }
    return 0;
}

static void v2_simp_dispose(v2_simp *s)
{
    free(s->v);
    free(s->q);
    free(s->tri);
    free(s->pool);
}

/* LSD radix sort of n keys, 11 bits a round; tmp holds n more. */
static void v2_radix_sort(uint32_t *key, uint32_t *tmp, size_t n)
{
    size_t count[2048];
    for (int shift = 0; shift < 32; shift += 11) {
        size_t sum = 0;
        uint32_t *sw;
        memset(count, 0, sizeof(count));
        for (size_t i = 0; i < n; i++)
            count[(key[i] >> shift) & 2047]++;
        for (size_t b = 0; b < 2048; b++) {
            const size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            tmp[count[(key[i] >> shift) & 2047]++] = key[i];
        sw = key;
        key = tmp;
        tmp = sw;
    }
    /* Three rounds: the result is in the temporary; copy it back. */
    memcpy(tmp, key, n * sizeof(*key));
}

/* A non-negative double as a sortable 32-bit key (its float's bits,
 * rounded up so that a smaller key never hides a larger cost). */
static uint32_t v2_cost_key(double c)
{
    float f = (float)c;
    uint32_t k;
    if (!(f < HUGE_VALF))
        return UINT32_MAX;
    memcpy(&k, &f, sizeof(k));
    return k;
}

/* Run passes until the target or no v2_collapse is left. */
static int v2_simp_run(v2_simp *s, size_t target, double max_error)
{
    const size_t n1 = s->nv + 1;
    uint32_t *buf = malloc(5 * n1 * sizeof(*buf));
    uint32_t *key = buf, *idx = buf + n1, *sorted = buf + 2 * n1;
    uint32_t *tmp = buf + 3 * n1, *act = buf + 4 * n1;
    size_t nact = 0;
    int rc = 0;
    if (buf == NULL)
        return v2_oom();
    for (size_t v = 0; v < s->nv; v++)
        if (!(s->v[v].flags & V2_VF_FIXED))
            act[nact++] = (uint32_t)v;
    while (s->alive > target) {
        size_t m = 0, made = 0, keep = 0;
        uint32_t limit;
        s->pass++;
        /* The free live vertices, in index order, and their candidates. */
        for (size_t i = 0; i < nact; i++) {
            const uint32_t v = act[i];
            v2_simp_vert *sv = &s->v[v];
            if (sv->flags & V2_VF_DEAD)
                continue;
            act[keep++] = v;
            if (sv->dirty)
                v2_best_collapse(s, v);
            if (sv->to == V2_NO_VERTEX || sv->cost > max_error)
                continue;
            key[m] = v2_cost_key(sv->cost);
            idx[m++] = v;
        }
        nact = keep;
        if (m == 0)
            break;
        /* This pass makes the cheaper half, in index order (locality);
         * the others wait for a later pass. */
        memcpy(sorted, key, m * sizeof(*key));
        v2_radix_sort(sorted, tmp, m);
        limit = sorted[(m - 1) / 2];
        for (size_t i = 0; i < m && s->alive > target; i++) {
            const uint32_t r = idx[i];
            int got;
            if (key[i] > limit || s->v[r].lock == s->pass ||
                (s->v[r].flags & V2_VF_DEAD))
                continue;
            got = v2_try_collapse(s, r, max_error);
            if (got < 0) {
                rc = cnx_error_last()->code;
                goto done;
            }
            made += (size_t)got;
        }
        if (made == 0)
            break;
    }
done:
    free(buf);
    return rc;
}

static int v2_mesh_simplify(cnx_mesh *m, const cnx_mesh_simplify_opts *o)
{
    v2_simp s;
    size_t target, nv = 0, nt = 0;
    uint32_t *map = NULL;
    float *verts = NULL;
    uint32_t *tris = NULL;
    int rc = v2_check_opts(m, o);
    if (rc != 0)
        return rc;
    if (m->ntris == 0)
        return 0;
    rc = v2_simp_init(&s, m, o);
    if (rc != 0)
        goto done;
    target = (size_t)floor(o->target_fraction * (double)m->ntris);
    rc = v2_simp_run(&s, target, o->max_error);
    if (rc != 0)
        goto done;
    /* Compact: live vertices and triangles in their old order. */
    map = malloc(s.nv * sizeof(*map));
    verts = malloc(3 * s.nv * sizeof(*verts));
    tris = malloc(3 * s.alive * sizeof(*tris) + 1);
    if (map == NULL || verts == NULL || tris == NULL) {
        rc = v2_oom();
        goto done;
    }
    for (size_t v = 0; v < s.nv; v++) {
        if (s.v[v].flags & V2_VF_DEAD)
            continue;
        map[v] = (uint32_t)nv;
        for (int a = 0; a < 3; a++)
            verts[3 * nv + (size_t)a] = (float)s.v[v].p[a];
        nv++;
    }
    for (size_t t = 0; t < s.nt; t++) {
        if (s.tri[3 * t] == UINT32_MAX)
            continue;
        for (int j = 0; j < 3; j++)
            tris[3 * nt + (size_t)j] = map[s.tri[3 * t + (size_t)j]];
        nt++;
    }
    assert(nt == s.alive);
    free(m->verts);
    free(m->tris);
    m->verts = realloc(verts, 3 * nv * sizeof(*verts) + 1);
    if (m->verts == NULL)
        m->verts = verts;
    m->tris = tris;
    m->nverts = nv;
    m->ntris = nt;
    verts = NULL;
    tris = NULL;
done:
    free(map);
    free(verts);
    free(tris);
    v2_simp_dispose(&s);
    return rc;
}

#endif
