/*
 * mesh_multires.c - Neuroglancer multi-resolution meshes
 * (neuroglancer_multilod_draco, cnx/mesh.h, docs/mesh.md): the octree of a
 * segment's chunk meshes, coarser levels by simplification, quantization
 * in each fragment's cell, the manifest encoder. Draco encoding is in
 * mesh_draco.cc.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/mesh.h"

#define POS_MAX ((uint32_t)1 << 21)

static uint64_t spread3(uint32_t v)
{
    uint64_t x = v & 0x1fffff;
    x = (x | x << 32) & 0x1f00000000ffffULL;
    x = (x | x << 16) & 0x1f0000ff0000ffULL;
    x = (x | x << 8) & 0x100f00f00f00f00fULL;
    x = (x | x << 4) & 0x10c30c30c30c30c3ULL;
    x = (x | x << 2) & 0x1249249249249249ULL;
    return x;
}

uint64_t cnx_mesh_morton(const uint32_t pos[3])
{
    return spread3(pos[0]) | spread3(pos[1]) << 1 | spread3(pos[2]) << 2;
}

/* ---- manifest ------------------------------------------------------------ */

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void put_f32(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put_u32(p, v);
}

int cnx_mesh_mr_index_encode(const cnx_mesh_mr_index *ix, uint8_t **out,
                             size_t *len)
{
    size_t n, at = 0;
    uint8_t *b;

    if (out != NULL)
        *out = NULL;
    if (len != NULL)
        *len = 0;
    if (ix == NULL || out == NULL || len == NULL || ix->num_lods < 1 ||
        ix->num_lods > CNX_MESH_MR_MAX_LODS || ix->lod_scales == NULL ||
        ix->vertex_offsets == NULL || (ix->nfrags > 0 && ix->frags == NULL))
        return cnx_error_set(CNX_EINVAL, 0, "mesh manifest: invalid arguments");
    for (size_t i = 0; i < ix->nfrags; i++) {
        const cnx_mesh_mr_frag *f = &ix->frags[i];
        if (f->lod >= ix->num_lods || f->pos[0] >= POS_MAX ||
            f->pos[1] >= POS_MAX || f->pos[2] >= POS_MAX)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "mesh manifest: fragment %zu: lod %u or "
                                 "position out of range",
                                 i, f->lod);
        if (i > 0 && (f[-1].lod > f->lod ||
                      (f[-1].lod == f->lod &&
                       cnx_mesh_morton(f[-1].pos) >= cnx_mesh_morton(f->pos))))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "mesh manifest: fragment %zu: not after "
                                 "fragment %zu in lod, then z-curve order",
                                 i, i - 1);
    }
    n = 4 * (6 + 1 + 5 * (size_t)ix->num_lods) + 16 * ix->nfrags;
    b = malloc(n);
    if (b == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh manifest: out of memory");
    for (int i = 0; i < 3; i++, at += 4)
        put_f32(b + at, ix->chunk_shape[i]);
    for (int i = 0; i < 3; i++, at += 4)
        put_f32(b + at, ix->grid_origin[i]);
    put_u32(b + at, ix->num_lods);
    at += 4;
    for (uint32_t l = 0; l < ix->num_lods; l++, at += 4)
        put_f32(b + at, ix->lod_scales[l]);
    for (uint32_t l = 0; l < 3 * ix->num_lods; l++, at += 4)
        put_f32(b + at, ix->vertex_offsets[l]);
    {
        size_t first = 0;
        for (uint32_t l = 0; l < ix->num_lods; l++) {
            size_t k = first;
            while (k < ix->nfrags && ix->frags[k].lod == l)
                k++;
            put_u32(b + at + 4 * l, (uint32_t)(k - first));
            first = k;
        }
        at += 4 * (size_t)ix->num_lods;
        first = 0;
        for (uint32_t l = 0; l < ix->num_lods; l++) {
            size_t k = first, m;
            while (k < ix->nfrags && ix->frags[k].lod == l)
                k++;
            m = k - first;
            for (int c = 0; c < 3; c++)
                for (size_t j = 0; j < m; j++, at += 4)
                    put_u32(b + at, ix->frags[first + j].pos[c]);
            for (size_t j = 0; j < m; j++, at += 4)
                put_u32(b + at, ix->frags[first + j].size);
            first = k;
        }
    }
    *out = b;
    *len = at;
    return 0;
}

/* ---- building ------------------------------------------------------------ */

/* A fragment under construction: a cell of one level and its mesh. */
typedef struct cell {
    uint32_t pos[3];
    uint64_t key; /* Morton code */
    cnx_mesh m;
    size_t vcap, tcap;
} cell;

typedef struct level {
    size_t n, cap;
    cell *cells;
} level;

static void level_free(level *l)
{
    for (size_t i = 0; i < l->n; i++)
        cnx_mesh_free(&l->cells[i].m);
    free(l->cells);
    memset(l, 0, sizeof(*l));
}

/* The cell of level l at pos, created when missing (linear search on a
 * sorted array would do; cells are few per segment, so a binary search on
 * the Morton key after an insertion sort keeps it simple). */
static cell *level_get(level *l, const uint32_t pos[3])
{
    uint64_t key = cnx_mesh_morton(pos);
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (l->cells[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < l->n && l->cells[lo].key == key)
        return &l->cells[lo];
    if (l->n == l->cap) {
        size_t c = l->cap ? 2 * l->cap : 16;
        cell *p = realloc(l->cells, c * sizeof(*p));
        if (p == NULL)
            return NULL;
        l->cells = p;
        l->cap = c;
    }
    memmove(&l->cells[lo + 1], &l->cells[lo], (l->n - lo) * sizeof(cell));
    memset(&l->cells[lo], 0, sizeof(cell));
    memcpy(l->cells[lo].pos, pos, sizeof(l->cells[lo].pos));
    l->cells[lo].key = key;
    l->n++;
    return &l->cells[lo];
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (q == NULL)
        return CNX_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* Append triangles (indices into src) to a cell's mesh, copying the
 * vertices they use; map: scratch of src->nverts entries, all UINT32_MAX. */
static int cell_append(cell *c, const cnx_mesh *src, const uint32_t *tris,
                       size_t ntris, uint32_t *map)
{
    int rc = 0;
    for (size_t t = 0; t < ntris && rc == 0; t++) {
        uint32_t tri[3];
        for (int k = 0; k < 3 && rc == 0; k++) {
            uint32_t v = tris[3 * t + k];
            if (map[v] == UINT32_MAX) {
                rc = grow((void **)&c->m.verts, &c->vcap, c->m.nverts + 1,
                          3 * sizeof(float));
                if (rc != 0)
                    break;
                memcpy(&c->m.verts[3 * c->m.nverts], &src->verts[3 * v],
                       3 * sizeof(float));
                map[v] = (uint32_t)c->m.nverts++;
            }
            tri[k] = map[v];
        }
        if (rc == 0)
            rc = grow((void **)&c->m.tris, &c->tcap, c->m.ntris + 1,
                      3 * sizeof(uint32_t));
        if (rc == 0)
            memcpy(&c->m.tris[3 * c->m.ntris++], tri, sizeof(tri));
    }
    for (size_t t = 0; t < ntris; t++)
        for (int k = 0; k < 3; k++)
            map[tris[3 * t + k]] = UINT32_MAX;
    return rc ? cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory")
              : 0;
}

/* The bound of cell j (level lod) on axis a, in nm, by the vertex formula. */
static float bound(const cnx_mesh_mr_params *p, int a, int lod, int64_t j)
{
    int64_t g = p->origin[a] + j * (p->cell[a] << lod);
    return (float)(((double)g + 0.5) * p->resolution[a]);
}

/* The level-0 cell holding a triangle (all vertices inside, faces
 * included), or -1. */
static int tri_cell(const cnx_mesh_mr_params *p, const cnx_mesh *m,
                    const uint32_t *tri, uint32_t pos[3])
{
    for (int a = 0; a < 3; a++) {
        float lo = INFINITY, hi = -INFINITY;
        for (int k = 0; k < 3; k++) {
            float v = m->verts[3 * tri[k] + a];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        double g = (double)lo / p->resolution[a] - 0.5 - (double)p->origin[a];
        int64_t j = (int64_t)floor(g / (double)p->cell[a]);
        int found = 0;
        for (int64_t c = j + 1; c >= j - 1 && !found; c--)
            if (c >= 0 && c < (int64_t)POS_MAX && bound(p, a, 0, c) <= lo &&
                hi <= bound(p, a, 0, c + 1)) {
                pos[a] = (uint32_t)c;
                found = 1;
            }
        if (!found)
            return -1;
    }
    return 0;
}

typedef struct tref {
    uint64_t key;
    uint32_t pos[3];
    size_t tri;
} tref;

static int cmp_tref(const void *a, const void *b)
{
    const tref *u = a, *v = b;
    if (u->key != v->key)
        return u->key < v->key ? -1 : 1;
    return u->tri < v->tri ? -1 : u->tri > v->tri;
}

/* Level 0: each piece's triangles, grouped by the cell that holds them
 * (in their order within a cell), appended to that cell's fragment. */
static int level0(const cnx_mesh *pieces, size_t n, const cnx_mesh_mr_params *p,
                  level *out)
{
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const cnx_mesh *m = &pieces[i];
        size_t nv = m->nverts ? m->nverts : 1, nt = m->ntris ? m->ntris : 1;
        uint32_t *map = malloc(nv * sizeof(*map)), *run = NULL;
        tref *r = malloc(nt * sizeof(*r));
        if (map == NULL || r == NULL ||
            (run = malloc(3 * nt * sizeof(*run))) == NULL) {
            free(map);
            free(r);
            return cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory");
        }
        memset(map, 0xff, nv * sizeof(*map));
        for (size_t t = 0; t < m->ntris && rc == 0; t++) {
            r[t].tri = t;
            if (tri_cell(p, m, &m->tris[3 * t], r[t].pos) != 0) {
                const float *v = &m->verts[3 * m->tris[3 * t]];
                rc = cnx_error_set(CNX_EINVAL, 0,
                                   "mesh multires: piece %zu, triangle %zu "
                                   "(at %g, %g, %g nm) lies in no level-0 "
                                   "cell",
                                   i, t, v[0], v[1], v[2]);
            }
            r[t].key = cnx_mesh_morton(r[t].pos);
        }
        if (rc == 0)
            qsort(r, m->ntris, sizeof(*r), cmp_tref);
        for (size_t t = 0; t < m->ntris && rc == 0;) {
            size_t u = t, k = 0;
            cell *c;
            while (u < m->ntris && r[u].key == r[t].key) {
                memcpy(&run[3 * k++], &m->tris[3 * r[u].tri],
                       3 * sizeof(uint32_t));
                u++;
            }
            c = level_get(out, r[t].pos);
            if (c == NULL)
                rc = cnx_error_set(CNX_ENOMEM, 0,
                                   "mesh multires: out of memory");
            else
                rc = cell_append(c, m, run, k, map);
            t = u;
        }
        free(run);
        free(r);
        free(map);
    }
    return rc;
}

/* Weld the vertices of m with equal positions (bitwise) in place, keeping
 * the first of each in order; triangles are renumbered. */
typedef struct vref {
    float x[3];
    uint32_t i;
} vref;

static int cmp_vref(const void *a, const void *b)
{
    const vref *u = a, *v = b;
    int c = memcmp(u->x, v->x, sizeof(u->x));
    if (c != 0)
        return c;
    return u->i < v->i ? -1 : u->i > v->i;
}

static int weld(cnx_mesh *m)
{
    size_t n = m->nverts, k = 0;
    vref *r = malloc((n ? n : 1) * sizeof(*r));
    uint32_t *to = malloc((n ? n : 1) * sizeof(*to));
    uint32_t *keep = malloc((n ? n : 1) * sizeof(*keep));
    if (r == NULL || to == NULL || keep == NULL) {
        free(r);
        free(to);
        free(keep);
        return cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(r[i].x, &m->verts[3 * i], sizeof(r[i].x));
        r[i].i = (uint32_t)i;
    }
    qsort(r, n, sizeof(*r), cmp_vref);
    for (size_t i = 0; i < n; i++) { /* each vertex -> its run's first */
        size_t j = i;
        while (j + 1 < n && memcmp(r[j + 1].x, r[i].x, sizeof(r[i].x)) == 0)
            j++;
        for (size_t q = i; q <= j; q++)
            to[r[q].i] = r[i].i;
        i = j;
    }
    for (size_t i = 0; i < n; i++) { /* survivors, in order */
        if (to[i] == i) {
            keep[i] = (uint32_t)k;
            memmove(&m->verts[3 * k], &m->verts[3 * i], 3 * sizeof(float));
            k++;
        }
    }
    for (size_t t = 0; t < 3 * m->ntris; t++)
        m->tris[t] = keep[to[m->tris[t]]];
    m->nverts = k;
    free(r);
    free(to);
    free(keep);
    return 0;
}

/* Level lod + 1 from level lod: each cell's fragment simplified with its
 * faces fixed, grouped by parent. */
static int coarser(const level *in, int lod, const cnx_mesh_mr_params *p,
                   level *out)
{
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const cell *c = &in->cells[i];
        cnx_mesh_simplify_opts o;
        cnx_mesh m = {0};
        uint32_t parent[3] = {c->pos[0] >> 1, c->pos[1] >> 1, c->pos[2] >> 1};
        cell *pc;
        uint32_t *map;

        memset(&o, 0, sizeof(o));
        o.target_fraction = p->simplify;
        o.max_error = INFINITY;
        o.nplanes = 6;
        for (int a = 0; a < 3; a++) {
            o.plane_axis[2 * a] = o.plane_axis[2 * a + 1] = a;
            o.plane_at[2 * a] = bound(p, a, lod, c->pos[a]);
            o.plane_at[2 * a + 1] = bound(p, a, lod, (int64_t)c->pos[a] + 1);
        }
        m.nverts = c->m.nverts;
        m.ntris = c->m.ntris;
        m.verts = malloc((m.nverts ? m.nverts : 1) * 3 * sizeof(float));
        m.tris = malloc((m.ntris ? m.ntris : 1) * 3 * sizeof(uint32_t));
        if (m.verts == NULL || m.tris == NULL) {
            cnx_mesh_free(&m);
            return cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory");
        }
        memcpy(m.verts, c->m.verts, m.nverts * 3 * sizeof(float));
        memcpy(m.tris, c->m.tris, m.ntris * 3 * sizeof(uint32_t));
        rc = weld(&m);
        if (rc == 0)
            rc = cnx_mesh_simplify(&m, &o);
        pc = rc == 0 ? level_get(out, parent) : NULL;
        if (rc == 0 && pc == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory");
        map = rc == 0 ? malloc((m.nverts ? m.nverts : 1) * sizeof(*map)) : NULL;
        if (rc == 0 && map == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory");
        if (rc == 0) {
            memset(map, 0xff, (m.nverts ? m.nverts : 1) * sizeof(*map));
            rc = cell_append(pc, &m, m.tris, m.ntris, map);
        }
        free(map);
        cnx_mesh_free(&m);
    }
    for (size_t i = 0; i < out->n && rc == 0; i++)
        rc = weld(&out->cells[i].m);
    return rc;
}

/* Quantize one coordinate of a vertex in its cell [lo, hi] with middle
 * plane mid (lod > 0): faces to 0 and 2^bits - 1, the middle plane to the
 * partition point 2^(bits-1), each side kept on its side of it. */
static uint32_t quantize(float v, float lo, float mid, float hi, int lod)
{
    const uint32_t top = (1u << CNX_MESH_MR_BITS) - 1, part = top / 2 + 1;
    double t = ((double)v - lo) / ((double)hi - lo) * top;
    uint32_t q = t <= 0 ? 0 : t >= top ? top : (uint32_t)lround(t);
    if (v <= lo)
        return 0;
    if (v >= hi)
        return top;
    if (lod > 0) {
        if (v == mid)
            return part;
        if (v < mid && q > part)
            q = part;
        if (v > mid && q < part)
            q = part;
    }
    return q;
}

static int encode_cell(const cell *c, int lod, const cnx_mesh_mr_params *p,
                       uint8_t **out, size_t *len)
{
    uint32_t *q = malloc((c->m.nverts ? c->m.nverts : 1) * 3 * sizeof(*q));
    float lo[3], mid[3], hi[3];
    int rc;
    if (q == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory");
    for (int a = 0; a < 3; a++) {
        int64_t j = c->pos[a];
        lo[a] = bound(p, a, lod, j);
        hi[a] = bound(p, a, lod, j + 1);
        mid[a] = lod > 0 ? bound(p, a, lod - 1, 2 * j + 1) : lo[a];
    }
    for (size_t v = 0; v < c->m.nverts; v++)
        for (int a = 0; a < 3; a++)
            q[3 * v + a] =
                quantize(c->m.verts[3 * v + a], lo[a], mid[a], hi[a], lod);
    rc = cnx_mesh_draco_encode(q, c->m.nverts, c->m.tris, c->m.ntris,
                               CNX_MESH_MR_BITS, out, len);
    free(q);
    return rc;
}

int cnx_mesh_mr_build(const cnx_mesh *pieces, size_t npieces,
                      const cnx_mesh_mr_params *p, uint8_t **index,
                      size_t *index_len, uint8_t **data, size_t *data_len,
                      cnx_mesh_mr_stats *st)
{
    level lv[CNX_MESH_MR_MAX_LODS];
    cnx_mesh_mr_frag *frags = NULL;
    float scales[CNX_MESH_MR_MAX_LODS], offsets[3 * CNX_MESH_MR_MAX_LODS];
    size_t nfrags = 0, dcap = 0, dlen = 0;
    uint8_t *d = NULL;
    int nl = 0, rc = 0;

    if (index != NULL)
        *index = NULL;
    if (data != NULL)
        *data = NULL;
    if (index_len != NULL)
        *index_len = 0;
    if (data_len != NULL)
        *data_len = 0;
    if (st != NULL)
        memset(st, 0, sizeof(*st));
    if ((pieces == NULL && npieces > 0) || p == NULL || index == NULL ||
        index_len == NULL || data == NULL || data_len == NULL ||
        !(p->simplify > 0 && p->simplify <= 1))
        return cnx_error_set(CNX_EINVAL, 0, "mesh multires: invalid arguments");
    for (int a = 0; a < 3; a++)
        if (p->cell[a] < 1 || p->cell[a] > ((int64_t)1 << 30) ||
            !(p->resolution[a] > 0) || !isfinite(p->resolution[a]))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "mesh multires: invalid cell or resolution");
    memset(lv, 0, sizeof(lv));
    rc = level0(pieces, npieces, p, &lv[0]);
    nl = 1;
    /* Coarser levels until one cell holds the segment. */
    while (rc == 0 && lv[nl - 1].n > 1) {
        if (nl == CNX_MESH_MR_MAX_LODS) {
            rc = cnx_error_set(CNX_ETOOBIG, 0,
                               "mesh multires: more than %d levels",
                               CNX_MESH_MR_MAX_LODS);
            break;
        }
        rc = coarser(&lv[nl - 1], nl - 1, p, &lv[nl]);
        nl++;
    }
    for (int l = 0; l < nl && rc == 0; l++)
        nfrags += lv[l].n;
    if (rc == 0) {
        frags = malloc((nfrags ? nfrags : 1) * sizeof(*frags));
        if (frags == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory");
    }
    nfrags = 0;
    for (int l = 0; l < nl && rc == 0; l++) {
        double rmax =
            fmax(p->resolution[0], fmax(p->resolution[1], p->resolution[2]));
        scales[l] = (float)(rmax * (double)(1u << l));
        offsets[3 * l] = offsets[3 * l + 1] = offsets[3 * l + 2] = 0;
        for (size_t i = 0; i < lv[l].n && rc == 0; i++) {
            const cell *c = &lv[l].cells[i];
            uint8_t *b = NULL;
            size_t blen = 0;
            if (c->m.ntris == 0)
                continue;
            rc = encode_cell(c, l, p, &b, &blen);
            if (rc == 0 && (blen > UINT32_MAX || dlen + blen > UINT32_MAX))
                rc = cnx_error_set(CNX_ETOOBIG, 0,
                                   "mesh multires: over 4 GiB of fragments");
            if (rc == 0 && grow((void **)&d, &dcap, dlen + blen, 1) != 0)
                rc = cnx_error_set(CNX_ENOMEM, 0,
                                   "mesh multires: out of memory");
            if (rc == 0) {
                memcpy(d + dlen, b, blen);
                dlen += blen;
                frags[nfrags].lod = (uint32_t)l;
                memcpy(frags[nfrags].pos, c->pos, sizeof(c->pos));
                frags[nfrags].size = (uint32_t)blen;
                nfrags++;
                if (st != NULL) {
                    st->frags[l]++;
                    st->tris[l] += c->m.ntris;
                    st->bytes[l] += blen;
                }
            }
            free(b);
        }
    }
    if (rc == 0) {
        cnx_mesh_mr_index ix;
        memset(&ix, 0, sizeof(ix));
        for (int a = 0; a < 3; a++) {
            ix.chunk_shape[a] = (float)((double)p->cell[a] * p->resolution[a]);
            ix.grid_origin[a] = bound(p, a, 0, 0);
        }
        ix.num_lods = (uint32_t)nl;
        ix.lod_scales = scales;
        ix.vertex_offsets = offsets;
        ix.nfrags = nfrags;
        ix.frags = frags;
        rc = cnx_mesh_mr_index_encode(&ix, index, index_len);
    }
    if (rc == 0) {
        *data = d ? d : malloc(1);
        *data_len = dlen;
        d = NULL;
        if (*data == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "mesh multires: out of memory");
        if (st != NULL)
            st->num_lods = (uint32_t)nl;
    }
    if (rc != 0 && index != NULL) {
        free(*index);
        *index = NULL;
        *index_len = 0;
    }
    free(d);
    free(frags);
    for (int l = 0; l < CNX_MESH_MR_MAX_LODS; l++)
        level_free(&lv[l]);
    return rc;
}
