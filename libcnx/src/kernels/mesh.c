/*
 * mesh.c - multilabel marching cubes with a face-consistent ambiguity rule.
 *
 * The case table (256 corner masks -> oriented loops of cube edges) is built
 * per call from the geometry of the cube, not written out: for each face,
 * the segments joining its crossing edges (a diagonal face always separates
 * its inside corners), each directed so that, looking along the face's
 * outward normal, inside lies to one fixed side; chaining a cube's directed
 * segments gives its loops. Invariant: each crossing edge of a cube has
 * exactly one segment leaving it and one entering it (asserted while the
 * table is built), and a face's segments are reversed in the neighbouring
 * cube, so each label's mesh is a closed oriented manifold.
 *
 * One pass over the cells of a block, z, y, x order, two xy sections of
 * voxels at a time (rows read in place where the block holds them). Each
 * section gets bit rows "voxel equals its +x / +y neighbour", each layer
 * "equals its +z neighbour"; a cell is uniform when the seven equalities
 * of a spanning tree of its corners hold, so uniform cells (most of them)
 * cost a few word operations per 64. A mixed cell is polygonised once per
 * distinct non-zero corner label, from a case table compiled for the pass
 * (the slot offset of each crossing edge). The vertices of a grid edge
 * whose ends differ - one per non-zero end label - are made before the
 * cells that use them, in a sweep over the zero bits of the equality rows,
 * and their ids kept in slots of the two sections and the layer; a cell
 * only reads them. Work is O(cells) plus O(output); no shared state:
 * reentrant.
 */
#include "cnx/mesh.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

#define MESH_NONE UINT32_MAX
#define MESH_MAX_VOXELS ((int64_t)1 << 40)
#define MESH_MAX_COORD ((int64_t)1 << 50)
#define MESH_MAX_SECTION ((size_t)1 << 28) /* slot offsets fit uint32 */

/* Corner c of a cube has offset (c & 1, c >> 1 & 1, c >> 2 & 1). Edge e
 * runs along axis e >> 2 from corner edge_start(e). */
static int edge_start(int e)
{
    const int axis = e >> 2, r = e & 3;
    const int u = (axis + 1) % 3, v = (axis + 2) % 3;
    const int lo = u < v ? u : v, hi = u < v ? v : u;
    return ((r & 1) << lo) | ((r >> 1) << hi);
}

static int edge_of(int c0, int c1)
{
    const int d = c0 ^ c1, s = c0 & c1;
    const int axis = d == 1 ? 0 : d == 2 ? 1 : 2;
    const int u = (axis + 1) % 3, v = (axis + 2) % 3;
    const int lo = u < v ? u : v, hi = u < v ? v : u;
    assert(d == 1 || d == 2 || d == 4);
    return (axis << 2) | ((s >> lo) & 1) | (((s >> hi) & 1) << 1);
}

/* Twice the cube coordinates of an edge midpoint. */
static void edge_mid2(int e, int p[3])
{
    const int c = edge_start(e);
    for (int i = 0; i < 3; i++)
        p[i] = 2 * ((c >> i) & 1) + (i == (e >> 2));
}

/*
 * The polygons of one corner mask, compiled for the sweep. edge[] holds the
 * crossing edges loop after loop: the cube edge (bits 0-3) and which end's
 * label owns its vertex (bit 4: 0 = the edge's start corner is inside, 1 =
 * its end corner is). tri[] indexes edge[] (0..11) or a loop centroid
 * (12 + c), the centroid of the c-th loop longer than 4.
 */
typedef struct mesh_case {
    uint8_t nedges, ntris, ncent;
    uint8_t edge[12];
    uint8_t tri[12][3];
    double cent[2][3]; /* centroid of loop c, from the cube's corner 0 */
} mesh_case;

/* A crossing edge of a case, compiled for one pass: its vertex slot's
 * offset from the cell's, by layer parity (see mesh_pass). */
typedef struct mesh_cedge {
    uint32_t off[2];
} mesh_cedge;

/* Add the directed segment a -> b of face (axis, side) that bounds the
 * inside corner `in`, choosing the direction by the orientation rule. */
static void add_segment(int next[12], int a, int b, int axis, int side, int in)
{
    int pa[3], pb[3], c[3], n[3] = {0, 0, 0}, d[3], t[3], dot = 0;
    edge_mid2(a, pa);
    edge_mid2(b, pb);
    for (int i = 0; i < 3; i++) {
        c[i] = 2 * ((in >> i) & 1) - pa[i];
        d[i] = pb[i] - pa[i];
    }
    n[axis] = side ? 1 : -1;
    t[0] = d[1] * n[2] - d[2] * n[1];
    t[1] = d[2] * n[0] - d[0] * n[2];
    t[2] = d[0] * n[1] - d[1] * n[0];
    for (int i = 0; i < 3; i++)
        dot += t[i] * c[i];
    assert(dot != 0);
    if (dot < 0) {
        int tmp = a;
        a = b;
        b = tmp;
    }
    assert(next[a] < 0);
    next[a] = b;
}

static void build_case(mesh_case *mc, int mask)
{
    int next[12], seen[12] = {0}, into[12] = {0}, k = 0, nloops = 0;
    for (int e = 0; e < 12; e++)
        next[e] = -1;
    for (int axis = 0; axis < 3; axis++) {
        const int u = (axis + 1) % 3, v = (axis + 2) % 3;
        for (int side = 0; side < 2; side++) {
            int q[4], b[4], fe[4], ncross = 0, x[4];
            for (int i = 0; i < 4; i++) {
                const int bu = i == 1 || i == 2, bv = i >= 2;
                q[i] = (side << axis) | (bu << u) | (bv << v);
                b[i] = (mask >> q[i]) & 1;
            }
            for (int i = 0; i < 4; i++) {
                fe[i] = edge_of(q[i], q[(i + 1) & 3]);
                if (b[i] != b[(i + 1) & 3])
                    x[ncross++] = i;
            }
            if (ncross == 2) {
                int in = -1;
                for (int i = 0; i < 4 && in < 0; i++)
                    if (b[i])
                        in = q[i];
                add_segment(next, fe[x[0]], fe[x[1]], axis, side, in);
            } else if (ncross == 4) {
                /* Diagonal face: cut each inside corner off on its own. */
                for (int j = 0; j < 4; j++)
                    if (b[j])
                        add_segment(next, fe[(j + 3) & 3], fe[j], axis, side,
                                    q[j]);
            }
        }
    }
    for (int e = 0; e < 12; e++)
        if (next[e] >= 0)
            into[next[e]]++;
    memset(mc, 0, sizeof(*mc));
    for (int e = 0; e < 12; e++) {
        const int first = k;
        int len = 0;
        assert(into[e] == (next[e] >= 0));
        if (next[e] < 0 || seen[e])
            continue;
        for (int f = e; !seen[f]; f = next[f]) {
            const int end = !((mask >> edge_start(f)) & 1);
            seen[f] = 1;
            mc->edge[k++] = (uint8_t)(f | end << 4);
            len++;
        }
        assert(nloops < 4 && len >= 3);
        nloops++;
        /* 3 or 4 edges: 1 or 2 triangles; more: a fan round the centroid. */
        if (len <= 4) {
            for (int i = 1; i + 1 < len; i++) {
                uint8_t *t = mc->tri[mc->ntris++];
                t[0] = (uint8_t)first;
                t[1] = (uint8_t)(first + i);
                t[2] = (uint8_t)(first + i + 1);
            }
        } else {
            const int c = mc->ncent++;
            int sum2[3] = {0, 0, 0};
            assert(c < 2);
            for (int i = first; i < first + len; i++) {
                int p2[3];
                edge_mid2(mc->edge[i] & 15, p2);
                for (int a = 0; a < 3; a++)
                    sum2[a] += p2[a];
            }
            for (int a = 0; a < 3; a++)
                mc->cent[c][a] = (double)sum2[a] / (2.0 * len);
            for (int i = 0; i < len; i++) {
                uint8_t *t = mc->tri[mc->ntris++];
                t[0] = (uint8_t)(12 + c);
                t[1] = (uint8_t)(first + i);
                t[2] = (uint8_t)(first + (i + 1) % len);
            }
        }
    }
    mc->nedges = (uint8_t)k;
    (void)into;
}

/* One label's mesh under construction. */
typedef struct mesh_out {
    uint64_t label;
    float *verts;
    uint32_t *tris;
    size_t nverts, vcap, ntris, tcap;
} mesh_out;

/* Room kept free before adding to a label's mesh: a cell adds at most 2
 * centroids (a loop longer than 4 has >= 5 of the 12 edges) and 12
 * triangles, an edge one vertex. */
#define CELL_MAX_VERTS 14
#define CELL_MAX_TRIS 12

/* The state of one pass. */
typedef struct mesh_run {
    mesh_case table[256];
    /* Per cube edge: its vertex slot's offset from the cell's, by parity
     * of the layer (see mesh_pass). */
    size_t off[2][12];
    mesh_cedge cedge[256][12]; /* table[m].edge[i] compiled */
    /* Vertex coordinates by doubled local grid coordinate, per axis:
     * coord[a][2 i + h] for grid coordinate c0[a] + i + h / 2. */
    float *coord[3];
    int64_t c0[3];
    double pre[3], mul[3], add[3]; /* position = (g + pre) * mul + add */
    mesh_out *outs;
    size_t nouts, ocap;
    uint32_t *hash; /* open addressing, label -> outs index; MESH_NONE free */
    size_t hcap;    /* power of two, 2 * ocap */
    /* First capacity of a label's vertices (triangles: twice): large, as
     * untouched pages cost nothing and regrowing big arrays costs copies
     * and page faults, but bounded by the block's face areas. */
    size_t first_cap;
    uint64_t cache_label[8]; /* run_out()'s cache; 0: empty */
    uint32_t cache_out[8];
} mesh_run;

static size_t hash_label(uint64_t l, size_t cap)
{
    l ^= l >> 33;
    l *= UINT64_C(0xff51afd7ed558ccd);
    l ^= l >> 33;
    return (size_t)l & (cap - 1);
}

/* Double the table of labels (outs and hash). */
static int run_grow(mesh_run *r)
{
    const size_t cap = r->ocap * 2;
    mesh_out *o = realloc(r->outs, cap * sizeof(*o));
    uint32_t *t;
    if (o == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    r->outs = o;
    r->ocap = cap;
    t = malloc(2 * cap * sizeof(*t));
    if (t == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    free(r->hash);
    r->hash = t;
    r->hcap = 2 * cap;
    memset(t, 0xff, r->hcap * sizeof(*t));
    for (size_t i = 0; i < r->nouts; i++) {
        size_t g = hash_label(r->outs[i].label, r->hcap);
        while (t[g] != MESH_NONE)
            g = (g + 1) & (r->hcap - 1);
        t[g] = (uint32_t)i;
    }
    return 0;
}

/* Room for one cell's polygons of one label (and its edge vertices). */
static int out_reserve(mesh_out *o, size_t first)
{
    if (o->nverts + CELL_MAX_VERTS > o->vcap) {
        size_t cap = o->vcap ? o->vcap * 2 : first;
        float *v;
        if (o->nverts + CELL_MAX_VERTS > (size_t)MESH_NONE)
            return cnx_error_set(CNX_ETOOBIG, 0,
                                 "mesh: label %llu has over 2^32 - 2 "
                                 "vertices",
                                 (unsigned long long)o->label);
        v = realloc(o->verts, cap * 3 * sizeof(*v));
        if (v == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
        o->verts = v;
        o->vcap = cap;
    }
    if (o->ntris + CELL_MAX_TRIS > o->tcap) {
        size_t cap = o->tcap ? o->tcap * 2 : 2 * first;
        uint32_t *t;
        if (o->ntris + CELL_MAX_TRIS > (size_t)UINT32_MAX)
            return cnx_error_set(CNX_ETOOBIG, 0,
                                 "mesh: label %llu has over 2^32 - 1 "
                                 "triangles",
                                 (unsigned long long)o->label);
        t = realloc(o->tris, cap * 3 * sizeof(*t));
        if (t == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
        o->tris = t;
        o->tcap = cap;
    }
    return 0;
}

/* Slow path of run_out(): the hash table, adding l if new. */
static mesh_out *run_find(mesh_run *r, uint64_t l)
{
    size_t h = hash_label(l, r->hcap);
    while (r->hash[h] != MESH_NONE && r->outs[r->hash[h]].label != l)
        h = (h + 1) & (r->hcap - 1);
    if (r->hash[h] == MESH_NONE) {
        if (r->nouts == r->ocap) {
            if (run_grow(r) != 0)
                return NULL;
            h = hash_label(l, r->hcap);
            while (r->hash[h] != MESH_NONE)
                h = (h + 1) & (r->hcap - 1);
        }
        memset(&r->outs[r->nouts], 0, sizeof(r->outs[0]));
        r->outs[r->nouts].label = l;
        r->hash[h] = (uint32_t)r->nouts++;
    }
    return &r->outs[r->hash[h]];
}

/* The mesh of label l (not 0), added if new; NULL on failure (error
 * set). A small direct-mapped cache in front of the hash table: a cell
 * or a row of edges sees few labels. */
static inline mesh_out *run_out(mesh_run *r, uint64_t l)
{
    const size_t c = (size_t)((l * UINT64_C(0x9E3779B97F4A7C15)) >> 61);
    mesh_out *o;
    if (r->cache_label[c] == l)
        return &r->outs[r->cache_out[c]];
    o = run_find(r, l);
    if (o != NULL) {
        r->cache_label[c] = l;
        r->cache_out[c] = (uint32_t)(o - r->outs);
    }
    return o;
}

/* A new vertex of label l at (x, y, z); its id into *id. */
static int new_vertex(mesh_run *r, uint64_t l, float x, float y, float z,
                      uint32_t *id)
{
    mesh_out *o = run_out(r, l);
    float *v;
    if (o == NULL)
        return cnx_error_last()->code;
    if (o->nverts + CELL_MAX_VERTS > o->vcap) {
        int rc = out_reserve(o, r->first_cap);
        if (rc != 0)
            return rc;
    }
    v = o->verts + 3 * o->nverts;
    v[0] = x;
    v[1] = y;
    v[2] = z;
    *id = (uint32_t)o->nverts++;
    return 0;
}

/*
 * The vertices of the grid edges that cross from one label to another,
 * one per non-zero end label, ids into their slots (end 0 or 1): the x
 * and y edges of a section (bit rows ex, ey) or the z edges of a layer
 * (bit rows ez, between sections lo and up). Every such vertex is used by
 * the cells round the edge, so the cells only read their slots.
 */
static int edge_vertices(mesh_run *r, const uint64_t *const *rows_lo,
                         const uint64_t *const *rows_hi, const uint64_t *bits,
                         size_t nbits, size_t nrows, size_t step, int axis,
                         size_t s, uint32_t *slots, size_t w, size_t nw)
{
    const float *cx = r->coord[0], *cy = r->coord[1], *cz = r->coord[2];
    for (size_t j = 0; j < nrows; j++) {
        const uint64_t *a = rows_lo[j];
        const uint64_t *b = axis == 0   ? a + 1
                            : axis == 1 ? rows_lo[j + 1]
                                        : rows_hi[j];
        for (size_t k = 0; 64 * k < nbits; k++) {
            uint64_t cross = ~bits[j * nw + k];
            if (nbits - 64 * k < 64)
                cross &= ((uint64_t)1 << (nbits - 64 * k)) - 1;
            while (cross != 0) {
                const size_t x = 64 * k + (size_t)__builtin_ctzll(cross);
                const uint64_t la = a[x], lb = b[x];
                uint32_t *slot = slots + 4 * (j * w + x) + step;
                const float fx = cx[2 * x + (axis == 0)];
                const float fy = cy[2 * j + (axis == 1)];
                const float fz = cz[2 * s + (axis == 2)];
                int rc = 0;
                cross &= cross - 1;
                if (la != 0)
                    rc = new_vertex(r, la, fx, fy, fz, &slot[0]);
                if (rc == 0 && lb != 0)
                    rc = new_vertex(r, lb, fx, fy, fz, &slot[1]);
                if (rc != 0)
                    return rc;
            }
        }
    }
    return 0;
}

/*
 * Polygonise label l's corners `mask` of the cell at local grid position
 * (x, y, z) of the pass; its edges' vertex ids are at slots + off[e].
 */
static int cell_emit(mesh_run *r, uint32_t *slots, size_t par, uint64_t l,
                     int mask, size_t x, size_t y, size_t z)
{
    const mesh_case *mc = &r->table[mask];
    const mesh_cedge *ce = r->cedge[mask];
    /* Counts in locals: the case's bytes may alias the stores below. */
    const int ne = mc->nedges, nc = mc->ncent, nt = mc->ntris;
    mesh_out *o = run_out(r, l);
    uint32_t id[14], *t, nv;
    float *v;

    if (o == NULL)
        return cnx_error_last()->code;
    if (o->nverts + CELL_MAX_VERTS > o->vcap ||
        o->ntris + CELL_MAX_TRIS > o->tcap) {
        int rc = out_reserve(o, r->first_cap);
        if (rc != 0)
            return rc;
    }
    nv = (uint32_t)o->nverts;
    v = o->verts + 3 * o->nverts;
    for (int i = 0; i < ne; i++)
        id[i] = slots[ce[i].off[par]];
    for (int c = 0; c < nc; c++) {
        const size_t lc[3] = {x, y, z};
        for (int a = 0; a < 3; a++) {
            const double g =
                (double)(r->c0[a] + (int64_t)lc[a]) + mc->cent[c][a];
            v[a] = (float)((g + r->pre[a]) * r->mul[a] + r->add[a]);
        }
        v += 3;
        id[12 + c] = nv++;
    }
    o->nverts = nv;
    t = o->tris + 3 * o->ntris;
    for (int i = 0; i < nt; i++) {
        const uint8_t *k = mc->tri[i];
        const uint32_t a = id[k[0]], b = id[k[1]], c = id[k[2]];
        t[0] = a;
        t[1] = b;
        t[2] = c;
        t += 3;
    }
    o->ntris += (size_t)nt;
    return 0;
}

/* Where the labels come from: a block (voxels outside read as 0) copied as
 * they are, or, with `indicator`, mapped to 1 for `only` and 0 else. */
typedef struct mesh_src {
    const uint64_t *labels;
    int64_t size[3], origin[3];
    int indicator;
    uint64_t only;
} mesh_src;

/*
 * Rows of the section of global voxel z: rows[j] = voxels (x0..x0+w-1,
 * y0 + j, z). A row inside the block is read in place; a row cut by the
 * block's edge (or mapped to an indicator) is copied into buf row j with
 * zeros outside; a row wholly outside is `zero` (w zeros).
 */
static void fill_section(const uint64_t **rows, uint64_t *buf,
                         const uint64_t *zero, const mesh_src *s, int64_t x0,
                         int64_t y0, int64_t z, size_t w, size_t h)
{
    const int64_t lz = z - s->origin[2];
    const int64_t lx0 = x0 - s->origin[0];
    /* Columns [a, b) of the row come from the block. */
    const int64_t a = lx0 < 0 ? -lx0 : 0;
    int64_t b = s->size[0] - lx0;
    if (b > (int64_t)w)
        b = (int64_t)w;
    for (size_t j = 0; j < h; j++) {
        const int64_t ly = y0 + (int64_t)j - s->origin[1];
        uint64_t *row = buf + j * w;
        const uint64_t *src;
        if (lz < 0 || lz >= s->size[2] || b <= a || ly < 0 ||
            ly >= s->size[1]) {
            rows[j] = zero;
            continue;
        }
        src =
            s->labels + (size_t)((lz * s->size[1] + ly) * s->size[0] + lx0 + a);
        if (!s->indicator && a == 0 && b == (int64_t)w) {
            rows[j] = src;
            continue;
        }
        if (a > 0)
            memset(row, 0, (size_t)a * sizeof(*row));
        if (s->indicator) {
            for (int64_t i = 0; i < b - a; i++)
                row[a + i] = src[i] == s->only;
        } else {
            memcpy(row + a, src, (size_t)(b - a) * sizeof(*row));
        }
        if ((size_t)b < w)
            memset(row + b, 0, (w - (size_t)b) * sizeof(*row));
        rows[j] = row;
    }
}

/*
 * One section of voxels (global z) of the pass: its rows and the equality
 * bits of neighbouring voxels in it, 64 cells a word (nw words a row).
 */
typedef struct mesh_sec {
    const uint64_t **rows; /* h rows of w voxels */
    uint64_t *buf;         /* copies of the rows cut by the block's edge */
    uint64_t *ex;          /* row j, bit x: voxel x == voxel x + 1 */
    uint64_t *ey;          /* row j, bit x: voxel (x, j) == (x, j + 1) */
} mesh_sec;

/* dst bit x = (a[x] == b[x]) for x < n, 0 beyond. */
static void eq_bits(uint64_t *dst, const uint64_t *a, const uint64_t *b,
                    size_t n)
{
    for (size_t k = 0; 64 * k < n; k++) {
        const size_t m = n - 64 * k < 64 ? n - 64 * k : 64;
        const uint64_t *pa = a + 64 * k, *pb = b + 64 * k;
        uint64_t word = 0;
        size_t i = 0;
        for (; i + 8 <= m; i += 8) {
            const unsigned byte = (unsigned)(pa[i] == pb[i]) |
                                  (unsigned)(pa[i + 1] == pb[i + 1]) << 1 |
                                  (unsigned)(pa[i + 2] == pb[i + 2]) << 2 |
                                  (unsigned)(pa[i + 3] == pb[i + 3]) << 3 |
                                  (unsigned)(pa[i + 4] == pb[i + 4]) << 4 |
                                  (unsigned)(pa[i + 5] == pb[i + 5]) << 5 |
                                  (unsigned)(pa[i + 6] == pb[i + 6]) << 6 |
                                  (unsigned)(pa[i + 7] == pb[i + 7]) << 7;
            word |= (uint64_t)byte << i;
        }
        for (; i < m; i++)
            word |= (uint64_t)(pa[i] == pb[i]) << i;
        dst[k] = word;
    }
}

/* Load section z into sec: rows, then the x and y equality bits. */
static void sec_load(mesh_sec *sec, const uint64_t *zero, const mesh_src *s,
                     const int64_t c0[3], int64_t z, const size_t n[3])
{
    const size_t w = n[0] + 1, h = n[1] + 1, nw = (w + 63) / 64;
    fill_section(sec->rows, sec->buf, zero, s, c0[0], c0[1], z, w, h);
    for (size_t j = 0; j < h; j++) {
        eq_bits(sec->ex + j * nw, sec->rows[j], sec->rows[j] + 1, n[0]);
        if (j + 1 < h)
            eq_bits(sec->ey + j * nw, sec->rows[j], sec->rows[j + 1], w);
    }
}

/* The vertices of the crossing x and y edges of section s (local z). */
static int sec_vertices(mesh_run *r, const mesh_sec *sec, size_t s,
                        const size_t n[3], uint32_t *slots, size_t nw)
{
    const size_t w = n[0] + 1;
    int rc = edge_vertices(r, sec->rows, NULL, sec->ex, n[0], n[1] + 1, 0, 0, s,
                           slots, w, nw);
    if (rc == 0)
        rc = edge_vertices(r, sec->rows, NULL, sec->ey, w, n[1], 2, 1, s, slots,
                           w, nw);
    return rc;
}

/*
 * Polygonise the mixed cells of row y of layer z, given the rows of its
 * four voxel rows rw[] ((y, z), (y + 1, z), (y, z + 1), (y + 1, z + 1)),
 * the bits of the row's uniform cells (eight equal corners: seven
 * equalities along a spanning tree of the cube) and its slots.
 */
static int row_run(mesh_run *r, const uint64_t *const rw[4],
                   const uint64_t *uni, size_t n, size_t y, size_t z,
                   uint32_t *slots, size_t par)
{
    const uint64_t *r0 = rw[0], *r1 = rw[1], *r2 = rw[2], *r3 = rw[3];
    for (size_t k = 0; 64 * k < n; k++) {
        uint64_t mixed = ~uni[k];
        if (n - 64 * k < 64)
            mixed &= ((uint64_t)1 << (n - 64 * k)) - 1;
        while (mixed != 0) {
            const size_t x = 64 * k + (size_t)__builtin_ctzll(mixed);
            const uint64_t c0 = r0[x], c1 = r0[x + 1], c2 = r1[x],
                           c3 = r1[x + 1], c4 = r2[x], c5 = r2[x + 1],
                           c6 = r3[x], c7 = r3[x + 1];
            unsigned todo = 255;
            uint64_t l = c0;
            mixed &= mixed - 1;
            /* Each distinct corner label, in corner order. */
            for (;;) {
                const unsigned mask =
                    (unsigned)(c0 == l) | (unsigned)(c1 == l) << 1 |
                    (unsigned)(c2 == l) << 2 | (unsigned)(c3 == l) << 3 |
                    (unsigned)(c4 == l) << 4 | (unsigned)(c5 == l) << 5 |
                    (unsigned)(c6 == l) << 6 | (unsigned)(c7 == l) << 7;
                int i;
                todo &= ~mask;
                if (l != 0) {
                    int rc =
                        cell_emit(r, slots + 4 * x, par, l, (int)mask, x, y, z);
                    if (rc != 0)
                        return rc;
                }
                if (todo == 0)
                    break;
                i = __builtin_ctz(todo);
                l = i == 1   ? c1
                    : i == 2 ? c2
                    : i == 3 ? c3
                    : i == 4 ? c4
                    : i == 5 ? c5
                    : i == 6 ? c6
                             : c7;
            }
        }
    }
    return 0;
}

static int out_cmp(const void *a, const void *b)
{
    const uint64_t x = ((const mesh_out *)a)->label;
    const uint64_t y = ((const mesh_out *)b)->label;
    return (x > y) - (x < y);
}

/* Tables of the pass that depend on the cell box and the positions. */
static int run_init(mesh_run *r, const int64_t c0[3], const size_t n[3],
                    const double pre[3], const double mul[3],
                    const double add[3])
{
    const size_t w = n[0] + 1, area = w * (n[1] + 1);
    for (int m = 0; m < 256; m++)
        build_case(&r->table[m], m);
    for (int e = 0; e < 12; e++) {
        const int c = edge_start(e), axis = e >> 2;
        const size_t dx = (size_t)(c & 1), dy = (size_t)((c >> 1) & 1);
        const size_t dz = (size_t)((c >> 2) & 1);
        for (size_t par = 0; par < 2; par++) {
            /* Slot regions: x/y edges of sections of even and odd z, then
             * the z edges of the layer. */
            const size_t region = axis == 2 ? 2 : par ^ dz;
            r->off[par][e] = 4 * (region * area + dy * w + dx) +
                             (axis == 2 ? 0 : 2 * (size_t)axis);
        }
    }
    for (int m = 0; m < 256; m++)
        for (int i = 0; i < r->table[m].nedges; i++) {
            const int code = r->table[m].edge[i], e = code & 15;
            mesh_cedge *ce = &r->cedge[m][i];
            for (int par = 0; par < 2; par++)
                ce->off[par] = (uint32_t)(r->off[par][e] + (size_t)(code >> 4));
        }
    for (int a = 0; a < 3; a++) {
        r->c0[a] = c0[a];
        r->pre[a] = pre[a];
        r->mul[a] = mul[a];
        r->add[a] = add[a];
        r->coord[a] = malloc((2 * n[a] + 2) * sizeof(float));
        if (r->coord[a] == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
        for (size_t i = 0; i <= 2 * n[a]; i++) {
            const double g =
                (double)(c0[a] + (int64_t)(i / 2)) + (i % 2 ? 0.5 : 0.0);
            r->coord[a][i] = (float)((g + pre[a]) * mul[a] + add[a]);
        }
    }
    r->first_cap = (n[0] * n[1] + n[1] * n[2] + n[2] * n[0]) / 2;
    r->first_cap = r->first_cap < 256     ? 256
                   : r->first_cap > 32768 ? 32768
                                          : r->first_cap;
    r->ocap = 64;
    r->hcap = 128;
    r->outs = malloc(r->ocap * sizeof(*r->outs));
    r->hash = malloc(r->hcap * sizeof(*r->hash));
    if (r->outs == NULL || r->hash == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    memset(r->hash, 0xff, r->hcap * sizeof(*r->hash));
    return 0;
}

/* Hand the meshes over, labels ascending. */
static int run_finish(mesh_run *r, cnx_mesh_set *out)
{
    if (r->nouts == 0)
        return 0;
    qsort(r->outs, r->nouts, sizeof(*r->outs), out_cmp);
    out->labels = malloc(r->nouts * sizeof(*out->labels));
    out->meshes = malloc(r->nouts * sizeof(*out->meshes));
    if (out->labels == NULL || out->meshes == NULL) {
        free(out->labels);
        free(out->meshes);
        memset(out, 0, sizeof(*out));
        return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    }
    for (size_t i = 0; i < r->nouts; i++) {
        mesh_out *o = &r->outs[i];
        cnx_mesh *m = &out->meshes[i];
        float *v = realloc(o->verts, o->nverts * 3 * sizeof(*v));
        uint32_t *t = realloc(o->tris, o->ntris * 3 * sizeof(*t));
        out->labels[i] = o->label;
        m->nverts = o->nverts;
        m->ntris = o->ntris;
        m->verts = v != NULL ? v : o->verts;
        m->tris = t != NULL ? t : o->tris;
        o->verts = NULL;
        o->tris = NULL;
    }
    out->n = r->nouts;
    return 0;
}

/* Working memory of a pass. */
typedef struct mesh_mem {
    mesh_sec sec[2];
    uint64_t *zero, *ez, *uni;
    uint32_t *slots; /* 3 regions of 4 per voxel position of a section */
} mesh_mem;

static int mem_alloc(mesh_mem *mm, const size_t n[3])
{
    const size_t w = n[0] + 1, h = n[1] + 1, nw = (w + 63) / 64;
    memset(mm, 0, sizeof(*mm));
    for (int s = 0; s < 2; s++) {
        mm->sec[s].rows = malloc(h * sizeof(*mm->sec[s].rows));
        mm->sec[s].buf = malloc(w * h * sizeof(uint64_t));
        mm->sec[s].ex = malloc(h * nw * sizeof(uint64_t));
        mm->sec[s].ey = malloc(h * nw * sizeof(uint64_t));
        if (mm->sec[s].rows == NULL || mm->sec[s].buf == NULL ||
            mm->sec[s].ex == NULL || mm->sec[s].ey == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    }
    mm->zero = calloc(w, sizeof(uint64_t));
    mm->ez = malloc(h * nw * sizeof(uint64_t));
    mm->uni = malloc(nw * sizeof(uint64_t));
    mm->slots = malloc(12 * w * h * sizeof(uint32_t));
    if (mm->zero == NULL || mm->ez == NULL || mm->uni == NULL ||
        mm->slots == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    return 0;
}

static void mem_free(mesh_mem *mm)
{
    for (int s = 0; s < 2; s++) {
        free(mm->sec[s].rows);
        free(mm->sec[s].buf);
        free(mm->sec[s].ex);
        free(mm->sec[s].ey);
    }
    free(mm->zero);
    free(mm->ez);
    free(mm->uni);
    free(mm->slots);
}

/*
 * The pass: cells [c0, c1) (global) of src, positions (g + pre) * mul + add.
 * Every argument already checked.
 */
static int mesh_pass(const mesh_src *src, const int64_t c0[3],
                     const int64_t c1[3], const double pre[3],
                     const double mul[3], const double add[3],
                     cnx_mesh_set *out)
{
    mesh_run *r = NULL;
    mesh_mem mm;
    size_t n[3], area, nw;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    memset(&mm, 0, sizeof(mm));
    for (int a = 0; a < 3; a++) {
        if (c1[a] <= c0[a])
            return 0;
        n[a] = (size_t)(c1[a] - c0[a]);
    }
    area = (n[0] + 1) * (n[1] + 1);
    nw = (n[0] + 1 + 63) / 64;
    if (n[0] >= MESH_MAX_SECTION || n[1] >= MESH_MAX_SECTION ||
        area > MESH_MAX_SECTION)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "mesh: an xy section of %zux%zu cells is over "
                             "2^28",
                             n[0], n[1]);
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
        goto done;
    }
    rc = mem_alloc(&mm, n);
    if (rc == 0)
        rc = run_init(r, c0, n, pre, mul, add);
    if (rc != 0)
        goto done;

    /* Slots (vertex ids) of the x and y edges of section s live in
     * region s & 1, of the z edges of the layer in region 2; cells read
     * only slots their edges' vertices were written to. */
    sec_load(&mm.sec[1], mm.zero, src, c0, c0[2], n);
    rc = sec_vertices(r, &mm.sec[1], 0, n, mm.slots, nw);
    if (rc != 0)
        goto done;
    for (size_t z = 0; z < n[2]; z++) {
        /* Cells between voxel sections c0 + z (lower) and + 1 (upper). */
        const size_t par = z & 1, w = n[0] + 1;
        const mesh_sec tmp = mm.sec[0];
        const mesh_sec *lo = &mm.sec[0], *up = &mm.sec[1];
        mm.sec[0] = mm.sec[1];
        mm.sec[1] = tmp;
        sec_load(&mm.sec[1], mm.zero, src, c0, c0[2] + (int64_t)z + 1, n);
        for (size_t y = 0; y <= n[1]; y++)
            eq_bits(mm.ez + y * nw, lo->rows[y], up->rows[y], w);
        rc = sec_vertices(r, up, z + 1, n, mm.slots + 4 * area * (par ^ 1), nw);
        if (rc == 0)
            rc = edge_vertices(r, lo->rows, up->rows, mm.ez, w, n[1] + 1, 0, 2,
                               z, mm.slots + 8 * area, w, nw);
        if (rc != 0)
            goto done;
        for (size_t y = 0; y < n[1]; y++) {
            const uint64_t *rw[4] = {lo->rows[y], lo->rows[y + 1], up->rows[y],
                                     up->rows[y + 1]};
            const uint64_t *ez = mm.ez + y * nw;
            for (size_t k = 0; k < nw; k++)
                mm.uni[k] = lo->ex[y * nw + k] & lo->ex[(y + 1) * nw + k] &
                            up->ex[y * nw + k] & up->ex[(y + 1) * nw + k] &
                            lo->ey[y * nw + k] & up->ey[y * nw + k] & ez[k];
            rc = row_run(r, rw, mm.uni, n[0], y, z,
                         mm.slots + 4 * y * (n[0] + 1), par);
            if (rc != 0)
                goto done;
        }
    }
    rc = run_finish(r, out);

done:
    if (r != NULL) {
        for (size_t i = 0; i < r->nouts; i++) {
            free(r->outs[i].verts);
            free(r->outs[i].tris);
        }
        for (int a = 0; a < 3; a++)
            free(r->coord[a]);
        free(r->outs);
        free(r->hash);
    }
    free(r);
    mem_free(&mm);
    return rc;
}

void cnx_mesh_free(cnx_mesh *m)
{
    if (m == NULL)
        return;
    free(m->verts);
    free(m->tris);
    memset(m, 0, sizeof(*m));
}

void cnx_mesh_set_free(cnx_mesh_set *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++)
        cnx_mesh_free(&s->meshes[i]);
    free(s->meshes);
    free(s->labels);
    memset(s, 0, sizeof(*s));
}

static int check_size(const int64_t size[3], const char *what)
{
    if (size[0] < 1 || size[1] < 1 || size[2] < 1)
        return cnx_error_set(CNX_EINVAL, 0, "mesh: %s of %lldx%lldx%lld voxels",
                             what, (long long)size[0], (long long)size[1],
                             (long long)size[2]);
    if (size[0] > MESH_MAX_VOXELS || size[1] > MESH_MAX_VOXELS ||
        size[2] > MESH_MAX_VOXELS || size[0] * size[1] > MESH_MAX_VOXELS ||
        size[0] * size[1] * size[2] > MESH_MAX_VOXELS)
        return cnx_error_set(CNX_ETOOBIG, 0, "mesh: %s over 2^40 voxels", what);
    return 0;
}

int cnx_mesh_label(const uint64_t *labels, const int64_t size[3],
                   uint64_t label, const double scale[3],
                   const double offset[3], cnx_mesh *out)
{
    static const double zero[3] = {0, 0, 0};
    mesh_src src;
    cnx_mesh_set set;
    int64_t c0[3], c1[3];
    int rc;

    if (out != NULL)
        memset(out, 0, sizeof(*out));
    if (labels == NULL || size == NULL || scale == NULL || offset == NULL ||
        out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "mesh: NULL argument");
    rc = check_size(size, "volume");
    if (rc != 0)
        return rc;
    memset(&src, 0, sizeof(src));
    src.labels = labels;
    src.indicator = 1;
    src.only = label;
    for (int a = 0; a < 3; a++) {
        src.size[a] = size[a];
        c0[a] = -1;
        c1[a] = size[a];
    }
    rc = mesh_pass(&src, c0, c1, zero, scale, offset, &set);
    if (rc != 0)
        return rc;
    assert(set.n <= 1 && (set.n == 0 || set.labels[0] == 1));
    if (set.n == 1) {
        *out = set.meshes[0];
        memset(&set.meshes[0], 0, sizeof(set.meshes[0]));
    }
    cnx_mesh_set_free(&set);
    return 0;
}

int cnx_mesh_block_run(const cnx_mesh_block *b, cnx_mesh_set *out)
{
    static const double half[3] = {0.5, 0.5, 0.5}, zero[3] = {0, 0, 0};
    mesh_src src;
    int64_t c0[3], c1[3], nc = 1;
    int rc;

    if (out != NULL)
        memset(out, 0, sizeof(*out));
    if (b == NULL || b->labels == NULL || out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "mesh: NULL argument");
    rc = check_size(b->size, "block");
    if (rc != 0)
        return rc;
    for (int a = 0; a < 3; a++) {
        if (!(b->resolution[a] > 0) || !isfinite(b->resolution[a]))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "mesh: resolution %g on axis %d",
                                 b->resolution[a], a);
        if (b->origin[a] < -MESH_MAX_COORD || b->origin[a] > MESH_MAX_COORD ||
            b->cells.min[a] < -MESH_MAX_COORD ||
            b->cells.min[a] > MESH_MAX_COORD ||
            b->cells.max[a] < -MESH_MAX_COORD ||
            b->cells.max[a] > MESH_MAX_COORD)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "mesh: coordinates beyond 2^50 on axis %d", a);
        c0[a] = b->cells.min[a];
        c1[a] = b->cells.max[a];
        if (c1[a] <= c0[a])
            return 0;
        if (c1[a] - c0[a] >= MESH_MAX_VOXELS)
            return cnx_error_set(CNX_ETOOBIG, 0,
                                 "mesh: cell box over 2^40 cells");
        nc *= c1[a] - c0[a] + 1;
        if (nc > MESH_MAX_VOXELS)
            return cnx_error_set(CNX_ETOOBIG, 0,
                                 "mesh: cell box over 2^40 cells");
    }
    memset(&src, 0, sizeof(src));
    src.labels = b->labels;
    for (int a = 0; a < 3; a++) {
        src.size[a] = b->size[a];
        src.origin[a] = b->origin[a];
    }
    return mesh_pass(&src, c0, c1, half, b->resolution, zero, out);
}

void cnx_mesh_block_planes(const cnx_mesh_block *b, cnx_mesh_simplify_opts *o)
{
    assert(b != NULL && o != NULL);
    o->nplanes = 6;
    for (int a = 0; a < 3; a++) {
        o->plane_axis[2 * a] = a;
        o->plane_axis[2 * a + 1] = a;
        o->plane_at[2 * a] = ((double)b->cells.min[a] + 0.5) * b->resolution[a];
        o->plane_at[2 * a + 1] =
            ((double)b->cells.max[a] + 0.5) * b->resolution[a];
    }
}
