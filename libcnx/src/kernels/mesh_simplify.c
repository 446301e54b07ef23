/*
 * mesh_simplify.c - quadric-error edge collapse (Garland & Heckbert 1997)
 * that keeps chunk-face vertices and the mesh's topology.
 *
 * Each vertex carries the sum of the quadrics of its original triangles'
 * planes (unweighted: errors are squared distances, in the mesh's units
 * squared). Collapsing r into its neighbour w puts w at the minimum of
 * Q_r + Q_w on their segment (or leaves it, if w is fixed), so a vertex
 * strictly inside a chunk stays inside. Every free vertex keeps its
 * cheapest collapse, recomputed only when its neighbourhood changed (and
 * cheaply, through the one edge that changed, when it can be). The work
 * goes in passes (as meshoptimizer does): a pass takes the cheaper half of
 * the candidates and makes them in vertex order (locality), skipping a
 * vertex whose neighbourhood a collapse of this pass has changed; the
 * order is a function of the input alone, so are the output bytes. Every
 * collapse is checked first: link condition (manifold, same topology), no
 * new edge between fixed vertices, no normal turning by more than ~75
 * degrees, no near-degenerate triangle. Fixed vertices (on the given
 * planes, on open or non-manifold edges, or with a fan that is not one
 * cycle) never move and are never removed, so the boundary of a chunk's
 * fragment is kept as it is. Vertex -> triangle lists live in one pool; a
 * merged list is appended at its end, the pool compacted when full.
 * The cost of every half-edge (its first vertex merged into its second)
 * is cached per triangle corner: a collapse recomputes the costs of the
 * edges of the one vertex it changed (both directions of an edge share
 * their quadric sum), and a vertex's cheapest collapse is a scan of its
 * cached costs, so the work per collapse is bounded by the valences. A
 * pass's cost limit is the median candidate's, found by selection.
 * Load: O(V + T) per pass, ~20 passes; ~12.5 k instructions, ~3.7 us
 * of CPU per collapse on a chunk's meshes. No shared state.
 */
#include "cnx/mesh.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

#define VF_FIXED 1u
#define VF_DEAD 2u

/* Normal-turn limit: cos(75 degrees); quality floor of a new triangle
 * (2 sqrt(3) |n| / sum of squared edge lengths; 1 for equilateral). */
#define MAX_TURN_COS 0.2588
#define MIN_QUALITY 0.02
#define MAX_VALENCE 64
#define NO_VERTEX UINT32_MAX
#define SIMP_MAX_TRIS ((size_t)1 << 29) /* pool offsets fit uint32 */

/* The hot part of a vertex: one cache line. */
typedef struct simp_vert {
    double p[3];
    double cost;    /* its cheapest collapse, onto `to` (NO_VERTEX: none) */
    uint32_t start; /* triangle list in the pool */
    uint32_t len;
    uint32_t to;
    uint32_t lock; /* the pass that last changed its neighbourhood */
    uint8_t flags;
    uint8_t dirty; /* cost and to need recomputing */
} simp_vert;

typedef struct simp {
    simp_vert *v;
    double *q; /* 10 per vertex: a2 ab ac ad b2 bc bd c2 cd d2 of sum K_p */
    size_t nv;
    uint32_t *tri; /* 3 per triangle; tri[3t] == UINT32_MAX: dead */
    double *hc;    /* 3 per triangle: hc[3t + j] = edge_cost(tri[3t + j],
                      tri[3t + (j + 1) % 3]), NaN: not known (yet) */
    size_t nt, alive;
    uint32_t *pool;
    size_t npool, pcap;
    uint32_t pass;
} simp;

static int oom(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
}

static double quadric_eval(const double q[10], const double p[3])
{
    const double x = p[0], y = p[1], z = p[2];
    return q[0] * x * x + 2 * q[1] * x * y + 2 * q[2] * x * z + 2 * q[3] * x +
           q[4] * y * y + 2 * q[5] * y * z + 2 * q[6] * y + q[7] * z * z +
           2 * q[8] * z + q[9];
}

/*
 * Cost of moving r and its neighbour w together, into t: the minimum of
 * q = Q_r + Q_w on the segment from r to w, rounded to float - or w
 * itself if w is fixed. r stays inside the chunk either way. d = w - r
 * and ad = A d (A: q's 3x3 part) are given, dad = d.A.d and lim the
 * flatness threshold: they are the same for both directions of an edge
 * (negating d negates ad exactly), so edge_cost2 computes them once.
 */
static double seg_cost(const double q[10], const double pr[3],
                       const double pw[3], int w_fixed, const double d[3],
                       const double ad[3], double dad, double lim, double t[3])
{
    double c;
    if (w_fixed) {
        t[0] = pw[0];
        t[1] = pw[1];
        t[2] = pw[2];
    } else {
        double num, u = 0.5;
        num = ad[0] * pr[0] + ad[1] * pr[1] + ad[2] * pr[2] + q[3] * d[0] +
              q[6] * d[1] + q[8] * d[2];
        /* Flat along the edge (coplanar faces): its midpoint. */
        if (dad > lim) {
            u = -num / dad;
            u = u < 0 ? 0 : u > 1 ? 1 : u;
        }
        t[0] = (double)(float)(pr[0] + u * d[0]);
        t[1] = (double)(float)(pr[1] + u * d[1]);
        t[2] = (double)(float)(pr[2] + u * d[2]);
    }
    c = quadric_eval(q, t);
    return c > 0 ? c : 0;
}

/* q = Q_a + Q_b; d = b - a, ad = A d, dad, the flatness threshold. */
static void edge_setup(const simp *s, uint32_t a, uint32_t b, double q[10],
                       double d[3], double ad[3], double *dad, double *lim)
{
    const double *qa = s->q + 10 * (size_t)a, *qb = s->q + 10 * (size_t)b;
    const double *pa = s->v[a].p, *pb = s->v[b].p;
    q[0] = qa[0] + qb[0];
    q[1] = qa[1] + qb[1];
    q[2] = qa[2] + qb[2];
    q[3] = qa[3] + qb[3];
    q[4] = qa[4] + qb[4];
    q[5] = qa[5] + qb[5];
    q[6] = qa[6] + qb[6];
    q[7] = qa[7] + qb[7];
    q[8] = qa[8] + qb[8];
    q[9] = qa[9] + qb[9];
    d[0] = pb[0] - pa[0];
    d[1] = pb[1] - pa[1];
    d[2] = pb[2] - pa[2];
    ad[0] = q[0] * d[0] + q[1] * d[1] + q[2] * d[2];
    ad[1] = q[1] * d[0] + q[4] * d[1] + q[5] * d[2];
    ad[2] = q[2] * d[0] + q[5] * d[1] + q[7] * d[2];
    *dad = ad[0] * d[0] + ad[1] * d[1] + ad[2] * d[2];
    *lim =
        1e-9 * (q[0] + q[4] + q[7]) * (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
}

/* Cost of merging r into its neighbour w, the merged vertex into t. */
static double edge_cost(const simp *s, uint32_t r, uint32_t w, double t[3])
{
    double q[10], d[3], ad[3], dad, lim;
    edge_setup(s, r, w, q, d, ad, &dad, &lim);
    return seg_cost(q, s->v[r].p, s->v[w].p, (s->v[w].flags & VF_FIXED) != 0, d,
                    ad, dad, lim, t);
}

/* edge_cost(a, b) into *ab and edge_cost(b, a) into *ba, the same bits,
 * with the shared part once. */
static void edge_cost2(const simp *s, uint32_t a, uint32_t b, double *ab,
                       double *ba)
{
    double q[10], d[3], ad[3], dad, lim, t[3];
    edge_setup(s, a, b, q, d, ad, &dad, &lim);
    const double nd[3] = {-d[0], -d[1], -d[2]};
    const double nad[3] = {-ad[0], -ad[1], -ad[2]};
    *ab = seg_cost(q, s->v[a].p, s->v[b].p, (s->v[b].flags & VF_FIXED) != 0, d,
                   ad, dad, lim, t);
    *ba = seg_cost(q, s->v[b].p, s->v[a].p, (s->v[a].flags & VF_FIXED) != 0, nd,
                   nad, dad, lim, t);
}

/* edge_cost of half-edge j of triangle t (its vertex j removed into the
 * next), from the cache: a cached cost is exact, since edge_cost reads
 * only the two vertices' quadrics, positions and flags, and a collapse
 * invalidates the half-edges of the one vertex it changes. */
static double half_cost(simp *s, size_t t, int j)
{
    double *c = &s->hc[3 * t + (size_t)j];
    if (isnan(*c)) {
        double tp[3];
        *c = edge_cost(s, s->tri[3 * t + (size_t)j],
                       s->tri[3 * t + (size_t)(j + 1) % 3], tp);
    }
    return *c;
}

/* Keep the collapse onto w at cost c if it is v's cheapest (ties: the
 * lower neighbour index). */
static void offer(simp_vert *v, uint32_t w, double c)
{
    if (c < v->cost || (c == v->cost && w < v->to)) {
        v->cost = c;
        v->to = w;
    }
}

/* The small loops of the hot functions are written out: the library is
 * built at -O2, which does not unroll them. */
static void tri_normal(const double *p0, const double *p1, const double *p2,
                       double n[3])
{
    const double u[3] = {p1[0] - p0[0], p1[1] - p0[1], p1[2] - p0[2]};
    const double w[3] = {p2[0] - p0[0], p2[1] - p0[1], p2[2] - p0[2]};
    n[0] = u[1] * w[2] - u[2] * w[1];
    n[1] = u[2] * w[0] - u[0] * w[2];
    n[2] = u[0] * w[1] - u[1] * w[0];
}

static double sq_dist(const double *a, const double *b)
{
    const double x = a[0] - b[0], y = a[1] - b[1], z = a[2] - b[2];
    return x * x + y * y + z * z;
}

/* Would moving vertex `who` of live triangle t to p flip it or make it
 * near-degenerate? */
static int tri_bad_after(const simp *s, size_t t, uint32_t who,
                         const double p[3])
{
    const uint32_t *tr = s->tri + 3 * t;
    const double *q[3], *o[3];
    double n0[3], n1[3], l0, l1, dot, sum, qual;
    o[0] = s->v[tr[0]].p;
    o[1] = s->v[tr[1]].p;
    o[2] = s->v[tr[2]].p;
    q[0] = tr[0] == who ? p : o[0];
    q[1] = tr[1] == who ? p : o[1];
    q[2] = tr[2] == who ? p : o[2];
    tri_normal(o[0], o[1], o[2], n0);
    tri_normal(q[0], q[1], q[2], n1);
    l0 = sqrt(n0[0] * n0[0] + n0[1] * n0[1] + n0[2] * n0[2]);
    l1 = sqrt(n1[0] * n1[0] + n1[1] * n1[1] + n1[2] * n1[2]);
    dot = n0[0] * n1[0] + n0[1] * n1[1] + n0[2] * n1[2];
    if (!(dot > MAX_TURN_COS * l0 * l1))
        return 1;
    sum = sq_dist(q[0], q[1]) + sq_dist(q[1], q[2]) + sq_dist(q[2], q[0]);
    qual = 2 * sqrt(3.0) * l1 / sum;
    if (qual < MIN_QUALITY) {
        double s0 =
            sq_dist(o[0], o[1]) + sq_dist(o[1], o[2]) + sq_dist(o[2], o[0]);
        if (qual < 2 * sqrt(3.0) * l0 / s0)
            return 1;
    }
    return 0;
}

static int tri_has(const uint32_t *tr, uint32_t x)
{
    return tr[0] == x || tr[1] == x || tr[2] == x;
}

/* Neighbours of v (distinct, through live triangles) into nb (cap n).
 * A free vertex's fan is one closed cycle, so the vertex after v in each
 * of its triangles names each neighbour once; a fixed one may have open
 * or irregular fans and is deduplicated. */
static size_t neighbours(const simp *s, uint32_t v, uint32_t *nb, size_t n)
{
    const simp_vert *sv = &s->v[v];
    size_t k = 0;
    if (!(sv->flags & VF_FIXED)) {
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
 * vertices share exactly the two neighbours opposite their edge, and do
 * not close a tetrahedron; no new edge between fixed vertices) and the
 * shapes of the triangles that remain.
 * @return 1 if allowed.
 */
static int collapse_ok(const simp *s, uint32_t keep, uint32_t r,
                       const double t[3])
{
    const simp_vert *vk = &s->v[keep], *vr = &s->v[r];
    uint32_t nk[MAX_VALENCE], nr[MAX_VALENCE], opp[2];
    size_t ck, cr, nopp = 0, ncommon = 0;
    int kt = 0, rt = 0;

    if ((size_t)vk->len + vr->len + 2 >= MAX_VALENCE)
        return 0; /* keep's new fan would not fit the neighbour arrays */
    /* The edge's triangles: exactly two (r is interior). */
    for (uint32_t i = 0; i < vr->len; i++) {
        const uint32_t *tr = s->tri + 3 * (size_t)s->pool[vr->start + i];
        if (tri_has(tr, keep)) {
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
    ck = neighbours(s, keep, nk, MAX_VALENCE);
    cr = neighbours(s, r, nr, MAX_VALENCE);
    for (size_t i = 0; i < cr; i++)
        for (size_t j = 0; j < ck; j++)
            if (nr[i] == nk[j])
                ncommon++;
    if (ncommon != 2)
        return 0;
    /* No new edge between two fixed vertices: at a chunk face it could
     * duplicate one of the neighbouring fragment's edges. */
    if (vk->flags & VF_FIXED)
        for (size_t i = 0; i < cr; i++) {
            size_t j;
            if (nr[i] == keep || !(s->v[nr[i]].flags & VF_FIXED))
                continue;
            for (j = 0; j < ck && nk[j] != nr[i]; j++)
                ;
            if (j == ck)
                return 0;
        }
    /* Tetrahedron: triangles (keep, o1, o2) and (r, o1, o2) both. */
    for (uint32_t i = 0; i < vk->len; i++) {
        const uint32_t *tr = s->tri + 3 * (size_t)s->pool[vk->start + i];
        kt |= tri_has(tr, opp[0]) && tri_has(tr, opp[1]);
    }
    for (uint32_t i = 0; i < vr->len; i++) {
        const uint32_t *tr = s->tri + 3 * (size_t)s->pool[vr->start + i];
        rt |= tri_has(tr, opp[0]) && tri_has(tr, opp[1]);
    }
    if (kt && rt)
        return 0;
    /* Shapes of the triangles that survive, r and keep moved to t. */
    for (uint32_t i = 0; i < vr->len; i++) {
        const size_t tt = s->pool[vr->start + i];
        if (!tri_has(s->tri + 3 * tt, keep) && tri_bad_after(s, tt, r, t))
            return 0;
    }
    if (memcmp(t, vk->p, sizeof(vk->p)) != 0)
        for (uint32_t i = 0; i < vk->len; i++) {
            const size_t tt = s->pool[vk->start + i];
            if (!tri_has(s->tri + 3 * tt, r) && tri_bad_after(s, tt, keep, t))
                return 0;
        }
    return 1;
}

/* Remove triangle t from v's list, keeping the order. */
static void list_remove(simp *s, uint32_t v, uint32_t t)
{
    simp_vert *sv = &s->v[v];
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
static int pool_compact(simp *s, size_t need)
{
    size_t live = 0, at = 0, cap;
    uint32_t *pl;
    for (size_t v = 0; v < s->nv; v++)
        live += s->v[v].len;
    cap = 2 * (live + need) + 16;
    pl = malloc(cap * sizeof(*pl));
    if (pl == NULL)
        return oom();
    for (size_t v = 0; v < s->nv; v++) {
        simp_vert *sv = &s->v[v];
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
 * and its new neighbours are locked for this pass and recomputed. */
static int collapse(simp *s, uint32_t keep, uint32_t r, const double t[3])
{
    simp_vert *vk, *vr;
    uint32_t nb[MAX_VALENCE];
    size_t start, n = 0, nn;

    if (s->npool + (size_t)s->v[keep].len + s->v[r].len > s->pcap) {
        int rc = pool_compact(s, (size_t)s->v[keep].len + s->v[r].len);
        if (rc != 0)
            return rc;
    }
    vk = &s->v[keep];
    vr = &s->v[r];
    start = s->npool;
    for (uint32_t i = 0; i < vk->len; i++) {
        const uint32_t t = s->pool[vk->start + i];
        if (tri_has(s->tri + 3 * (size_t)t, r)) {
            for (int j = 0; j < 3; j++) {
                const uint32_t o = s->tri[3 * (size_t)t + (size_t)j];
                if (o != keep && o != r)
                    list_remove(s, o, t);
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
    vr->flags |= VF_DEAD;
    vr->len = 0;
    /* The costs of the half-edges from and to keep are stale (keep moved,
     * its quadric grew); no other changed. Keep free: its fan is one
     * cycle, each neighbour x the vertex before keep in exactly one
     * triangle and after it in another, so both costs of the edge come
     * from one edge_cost2 and are cached at once. Keep fixed: only the
     * costs into keep matter, computed when asked for. */
    if (!(vk->flags & VF_FIXED)) {
        uint32_t xs[MAX_VALENCE];
        double out[MAX_VALENCE];
        const uint32_t n = vk->len;
        assert(n < MAX_VALENCE);
        for (uint32_t i = 0; i < n; i++) {
            const size_t t = s->pool[vk->start + i];
            const uint32_t *tr = s->tri + 3 * t;
            const int j = tr[0] == keep ? 0 : tr[1] == keep ? 1 : 2;
            const int jp = (j + 2) % 3;
            xs[i] = tr[jp];
            edge_cost2(s, keep, xs[i], &out[i], &s->hc[3 * t + (size_t)jp]);
        }
        for (uint32_t i = 0; i < n; i++) {
            const size_t t = s->pool[vk->start + i];
            const uint32_t *tr = s->tri + 3 * t;
            const int j = tr[0] == keep ? 0 : tr[1] == keep ? 1 : 2;
            const uint32_t nx = tr[(j + 1) % 3];
            uint32_t k = 0;
            while (k < n && xs[k] != nx)
                k++;
            assert(k < n);
            s->hc[3 * t + (size_t)j] = out[k];
        }
        /* A neighbour's cheapest collapse changes only through its edge
         * to keep, unless it was onto r or keep. */
        for (uint32_t i = 0; i < n; i++) {
            const size_t t = s->pool[vk->start + i];
            const uint32_t *tr = s->tri + 3 * t;
            const int j = tr[0] == keep ? 0 : tr[1] == keep ? 1 : 2;
            const int jp = (j + 2) % 3;
            simp_vert *x = &s->v[tr[jp]];
            x->lock = s->pass;
            if (x->flags & VF_FIXED)
                continue;
            if (x->to == r || x->to == keep || x->to == NO_VERTEX)
                x->dirty = 1;
            else
                offer(x, keep, s->hc[3 * t + (size_t)jp]);
        }
        return 0;
    }
    for (uint32_t i = 0; i < vk->len; i++) {
        const size_t t = s->pool[vk->start + i];
        const uint32_t *tr = s->tri + 3 * t;
        for (int j = 0; j < 3; j++)
            if (tr[j] == keep || tr[(j + 1) % 3] == keep)
                s->hc[3 * t + (size_t)j] = NAN;
    }
    nn = neighbours(s, keep, nb, MAX_VALENCE);
    for (size_t i = 0; i < nn; i++) {
        simp_vert *x = &s->v[nb[i]];
        x->lock = s->pass;
        if (x->flags & VF_FIXED)
            continue;
        if (x->to == r || x->to == keep || x->to == NO_VERTEX) {
            x->dirty = 1;
        } else {
            double tx[3];
            offer(x, keep, edge_cost(s, nb[i], keep, tx));
        }
    }
    return 0;
}

/* Mark vertices whose triangles do not form one closed, consistently
 * oriented fan (boundary, non-manifold, degenerate) as fixed. */
static void mark_irregular(simp *s)
{
    for (size_t v = 0; v < s->nv; v++) {
        simp_vert *sv = &s->v[v];
        uint32_t nx[MAX_VALENCE], pv[MAX_VALENCE];
        size_t d = sv->len, cur = 0, steps = 0;
        if (sv->flags & VF_FIXED)
            continue;
        if (d < 3 || d > MAX_VALENCE) {
            sv->flags |= VF_FIXED;
            continue;
        }
        for (size_t i = 0; i < d; i++) {
            const uint32_t *tr = s->tri + 3 * (size_t)s->pool[sv->start + i];
            int j = tr[0] == v ? 0 : tr[1] == v ? 1 : 2;
            nx[i] = tr[(j + 1) % 3];
            pv[i] = tr[(j + 2) % 3];
            if (tr[(j + 1) % 3] == v || tr[(j + 2) % 3] == v)
                sv->flags |= VF_FIXED; /* degenerate triangle */
        }
        for (size_t i = 0; i < d && !(sv->flags & VF_FIXED); i++)
            for (size_t j = i + 1; j < d; j++)
                if (nx[i] == nx[j] || pv[i] == pv[j])
                    sv->flags |= VF_FIXED;
        if (sv->flags & VF_FIXED)
            continue;
        /* Walk the fan: triangle (v, a, b) is followed by (v, b, c). */
        do {
            size_t j;
            for (j = 0; j < d && nx[j] != pv[cur]; j++)
                ;
            if (j == d) {
                sv->flags |= VF_FIXED;
                break;
            }
            cur = j;
            steps++;
        } while (cur != 0 && steps <= d);
        if (steps != d)
            sv->flags |= VF_FIXED;
    }
}

static int check_opts(const cnx_mesh *m, const cnx_mesh_simplify_opts *o)
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
    if (m->nverts >= UINT32_MAX || m->ntris > SIMP_MAX_TRIS)
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

/* Cheapest collapse of free vertex r onto a neighbour (ties: lower
 * neighbour index), into v[r].cost and v[r].to. */
static void best_collapse(simp *s, uint32_t r)
{
    simp_vert *vr = &s->v[r];
    vr->to = NO_VERTEX;
    vr->cost = HUGE_VAL;
    vr->dirty = 0;
    /* r is free: the vertex after r in each triangle names each neighbour
     * once (neighbours()). */
    for (uint32_t i = 0; i < vr->len && i < MAX_VALENCE; i++) {
        const size_t t = s->pool[vr->start + i];
        const uint32_t *tr = s->tri + 3 * t;
        const int j = tr[0] == r ? 0 : tr[1] == r ? 1 : 2;
        offer(vr, tr[(j + 1) % 3], half_cost(s, t, j));
    }
}

/* Try to collapse r onto its cheapest neighbour: the cached one if it is
 * not locked (else wait for the next pass), or if that one fails the
 * checks, the others in order of cost. @return 1 if a collapse was made,
 * 0 if none, -1 on failure (error set). */
static int try_collapse(simp *s, uint32_t r, double max_error)
{
    simp_vert *vr = &s->v[r];
    uint32_t nb[MAX_VALENCE], first = vr->to;
    double cost[MAX_VALENCE], t[3];
    size_t n;
    int locked = 0;
    if (s->v[first].lock == s->pass)
        return 0;
    (void)edge_cost(s, r, first, t);
    if (collapse_ok(s, first, r, t))
        return collapse(s, first, r, t) != 0 ? -1 : 1;
    n = vr->len < MAX_VALENCE ? vr->len : MAX_VALENCE;
    for (size_t i = 0; i < n; i++) {
        const size_t tt = s->pool[vr->start + i];
        const uint32_t *tr = s->tri + 3 * tt;
        const int j = tr[0] == r ? 0 : tr[1] == r ? 1 : 2;
        nb[i] = tr[(j + 1) % 3];
        cost[i] = half_cost(s, tt, j);
        if (nb[i] == first)
            nb[i] = NO_VERTEX;
    }
    for (;;) {
        size_t best = n;
        uint32_t w;
        for (size_t i = 0; i < n; i++)
            if (nb[i] != NO_VERTEX &&
                (best == n || cost[i] < cost[best] ||
                 (cost[i] == cost[best] && nb[i] < nb[best])))
                best = i;
        if (best == n || cost[best] > max_error)
            break;
        w = nb[best];
        nb[best] = NO_VERTEX;
        if (s->v[w].lock == s->pass) {
            locked = 1;
            continue;
        }
        (void)edge_cost(s, r, w, t);
        if (collapse_ok(s, w, r, t))
            return collapse(s, w, r, t) != 0 ? -1 : 1;
    }
    /* Nothing now: wait for a change around r, unless only a lock of
     * this pass was in the way. */
    if (!locked)
        vr->to = NO_VERTEX;
    return 0;
}

/* Build the working state from m. */
static int simp_init(simp *s, const cnx_mesh *m,
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
    s->hc = malloc(3 * s->nt * sizeof(*s->hc));
    s->pcap = 3 * s->nt + 16;
    s->pool = malloc(s->pcap * sizeof(*s->pool));
    fill = calloc(s->nv + 1, sizeof(*fill));
    if (s->v == NULL || s->q == NULL || s->tri == NULL || s->hc == NULL ||
        s->pool == NULL || fill == NULL) {
        free(fill);
        return oom();
    }
    memcpy(s->tri, m->tris, 3 * s->nt * sizeof(*s->tri));
    for (size_t i = 0; i < 3 * s->nt; i++)
        s->hc[i] = NAN;
    for (int i = 0; i < o->nplanes; i++)
        pf[i] = (float)o->plane_at[i];
    for (size_t v = 0; v < s->nv; v++) {
        simp_vert *sv = &s->v[v];
        for (int a = 0; a < 3; a++)
            sv->p[a] = m->verts[3 * v + (size_t)a];
        for (int i = 0; i < o->nplanes; i++)
            if (m->verts[3 * v + (size_t)o->plane_axis[i]] == pf[i])
                sv->flags |= VF_FIXED;
        sv->to = NO_VERTEX;
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
        tri_normal(s->v[tr[0]].p, s->v[tr[1]].p, s->v[tr[2]].p, n);
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
    mark_irregular(s);
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
            const int fa = (s->v[a].flags & VF_FIXED) != 0;
            const int fb = (s->v[b].flags & VF_FIXED) != 0;
            double tp[3], c;
            if (a > b || (fa && fb))
                continue;
            c = fa ? edge_cost(s, b, a, tp) : edge_cost(s, a, b, tp);
            if (!fa) {
                s->hc[3 * t + (size_t)j] = c; /* edge_cost(a, b) */
                offer(&s->v[a], b, c);
            }
            if (!fb)
                offer(&s->v[b], a, c);
        }
    return 0;
}

static void simp_dispose(simp *s)
{
    free(s->v);
    free(s->q);
    free(s->tri);
    free(s->hc);
    free(s->pool);
}

/* The k-th smallest of the n keys (0-based), by selection: the keys are
 * reordered. Partition into <, == and > the middle key's value (Dutch
 * flag), so runs of equal keys cost one round; linear on average. */
static uint32_t select_key(uint32_t *key, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* the answer lies in key[lo, hi) */
    assert(k < n);
    for (;;) {
        const uint32_t pv = key[lo + (hi - lo) / 2];
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            const uint32_t x = key[i];
            if (x < pv) {
                key[i++] = key[lt];
                key[lt++] = x;
            } else if (x > pv) {
                key[i] = key[--gt];
                key[gt] = x;
            } else {
                i++;
            }
        }
        if (k < lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return pv;
    }
}

/* A non-negative double as a sortable 32-bit key (its float's bits,
 * rounded up so that a smaller key never hides a larger cost). */
static uint32_t cost_key(double c)
{
    float f = (float)c;
    uint32_t k;
    if (!(f < HUGE_VALF))
        return UINT32_MAX;
    memcpy(&k, &f, sizeof(k));
    return k;
}

/* Run passes until the target or no collapse is left. */
static int simp_run(simp *s, size_t target, double max_error)
{
    const size_t n1 = s->nv + 1;
    uint32_t *buf = malloc(4 * n1 * sizeof(*buf));
    uint32_t *key = buf, *idx = buf + n1, *sorted = buf + 2 * n1;
    uint32_t *act = buf + 3 * n1;
    size_t nact = 0;
    int rc = 0;
    if (buf == NULL)
        return oom();
    for (size_t v = 0; v < s->nv; v++)
        if (!(s->v[v].flags & VF_FIXED))
            act[nact++] = (uint32_t)v;
    while (s->alive > target) {
        size_t m = 0, made = 0, keep = 0;
        uint32_t limit;
        s->pass++;
        /* The free live vertices, in index order, and their candidates. */
        for (size_t i = 0; i < nact; i++) {
            const uint32_t v = act[i];
            simp_vert *sv = &s->v[v];
            if (sv->flags & VF_DEAD)
                continue;
            act[keep++] = v;
            if (sv->dirty)
                best_collapse(s, v);
            if (sv->to == NO_VERTEX || sv->cost > max_error)
                continue;
            key[m] = cost_key(sv->cost);
            idx[m++] = v;
        }
        nact = keep;
        if (m == 0)
            break;
        /* This pass makes the cheaper half, in index order (locality);
         * the others wait for a later pass. */
        memcpy(sorted, key, m * sizeof(*key));
        limit = select_key(sorted, m, (m - 1) / 2);
        for (size_t i = 0; i < m && s->alive > target; i++) {
            const uint32_t r = idx[i];
            int got;
            if (key[i] > limit || s->v[r].lock == s->pass ||
                (s->v[r].flags & VF_DEAD))
                continue;
            got = try_collapse(s, r, max_error);
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

int cnx_mesh_simplify(cnx_mesh *m, const cnx_mesh_simplify_opts *o)
{
    simp s;
    size_t target, nv = 0, nt = 0;
    uint32_t *map = NULL;
    float *verts = NULL;
    uint32_t *tris = NULL;
    int rc = check_opts(m, o);
    if (rc != 0)
        return rc;
    if (m->ntris == 0)
        return 0;
    rc = simp_init(&s, m, o);
    if (rc != 0)
        goto done;
    target = (size_t)floor(o->target_fraction * (double)m->ntris);
    rc = simp_run(&s, target, o->max_error);
    if (rc != 0)
        goto done;
    /* Compact: live vertices and triangles in their old order. */
    map = malloc(s.nv * sizeof(*map));
    verts = malloc(3 * s.nv * sizeof(*verts));
    tris = malloc(3 * s.alive * sizeof(*tris) + 1);
    if (map == NULL || verts == NULL || tris == NULL) {
        rc = oom();
        goto done;
    }
    for (size_t v = 0; v < s.nv; v++) {
        if (s.v[v].flags & VF_DEAD)
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
    {
        /* Shrink to fit; where realloc cannot, keep the larger block. */
        void *fit = realloc(verts, 3 * nv * sizeof(*verts) + 1);
        if (fit != NULL)
            verts = fit;
    }
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
    simp_dispose(&s);
    return rc;
}
