/*
 * mesh.c - marching cubes of one label with face-consistent ambiguity rule.
 *
 * The case table (256 corner masks -> oriented loops of cube edges) is built
 * per call from the geometry of the cube, not written out: for each face,
 * the segments joining its crossing edges (a diagonal face always separates
 * its inside corners), each directed so that, looking along the face's
 * outward normal, inside lies to one fixed side; chaining a cube's directed
 * segments gives its loops. Invariant: each crossing edge of a cube has
 * exactly one segment leaving it and one entering it (asserted while the
 * table is built), and a face's segments are reversed in the neighbouring
 * cube, so the mesh is a closed oriented manifold. The volume is swept in
 * z, y, x order over the (sx+1)(sy+1)(sz+1) cubes of the padded grid with
 * two xy sections of indicators and vertex ids; work is O(voxels) plus
 * O(output). No shared state: reentrant.
 */
#include "cnx/mesh.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

#define MESH_NONE UINT32_MAX
#define MESH_MAX_VOXELS ((int64_t)1 << 40)

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

/* Twice the cube coordinates of an edge midpoint / of a corner. */
static void edge_mid2(int e, int p[3])
{
    const int c = edge_start(e);
    for (int i = 0; i < 3; i++)
        p[i] = 2 * ((c >> i) & 1) + (i == (e >> 2));
}

typedef struct mesh_case {
    uint8_t nloops;
    uint8_t len[4];   /* loops of one cube: at most 4 (4 isolated corners) */
    uint8_t edge[12]; /* the loops' edges, one after the other */
} mesh_case;

/* Add the directed segment a -> b of face (axis, side) that bounds the
 * inside corner `in`, choosing the direction by the orientation rule. */
static void add_segment(int next[12], int a, int b, int axis, int side,
                        int in)
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
    int next[12], seen[12] = {0}, into[12] = {0}, k = 0;
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
    mc->nloops = 0;
    for (int e = 0; e < 12; e++) {
        int len = 0;
        assert(into[e] == (next[e] >= 0));
        if (next[e] < 0 || seen[e])
            continue;
        for (int f = e; !seen[f]; f = next[f]) {
            seen[f] = 1;
            mc->edge[k++] = (uint8_t)f;
            len++;
        }
        assert(mc->nloops < 4 && len >= 3);
        mc->len[mc->nloops++] = (uint8_t)len;
    }
    (void)into;
}

/* The output under construction. */
typedef struct mesh_build {
    const double *scale, *offset;
    float *verts;
    uint32_t *tris;
    size_t nverts, vcap, ntris, tcap;
} mesh_build;

static int push_vertex(mesh_build *b, const double g[3], uint32_t *id)
{
    if (b->nverts >= (size_t)MESH_NONE)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "mesh: more than 2^32 - 1 vertices");
    if (b->nverts == b->vcap) {
        size_t cap = b->vcap ? b->vcap * 2 : 1024;
        float *v = realloc(b->verts, cap * 3 * sizeof(*v));
        if (v == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
        b->verts = v;
        b->vcap = cap;
    }
    for (int i = 0; i < 3; i++)
        b->verts[3 * b->nverts + (size_t)i] =
            (float)(g[i] * b->scale[i] + b->offset[i]);
    *id = (uint32_t)b->nverts++;
    return 0;
}

static int push_tri(mesh_build *b, uint32_t v0, uint32_t v1, uint32_t v2)
{
    if (b->ntris >= (size_t)UINT32_MAX)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "mesh: more than 2^32 - 1 triangles");
    if (b->ntris == b->tcap) {
        size_t cap = b->tcap ? b->tcap * 2 : 2048;
        uint32_t *t = realloc(b->tris, cap * 3 * sizeof(*t));
        if (t == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
        b->tris = t;
        b->tcap = cap;
    }
    b->tris[3 * b->ntris] = v0;
    b->tris[3 * b->ntris + 1] = v1;
    b->tris[3 * b->ntris + 2] = v2;
    b->ntris++;
    return 0;
}

void cnx_mesh_free(cnx_mesh *m)
{
    if (m == NULL)
        return;
    free(m->verts);
    free(m->tris);
    memset(m, 0, sizeof(*m));
}

/* Indicators of voxel section z of the padded grid (zeros outside). */
static void fill_section(uint8_t *ind, const uint64_t *labels,
                         const int64_t size[3], uint64_t label, int64_t z)
{
    const int64_t px = size[0] + 2, py = size[1] + 2;
    memset(ind, 0, (size_t)(px * py));
    if (z < 0 || z >= size[2])
        return;
    for (int64_t y = 0; y < size[1]; y++) {
        const uint64_t *row = labels + (size_t)((z * size[1] + y) * size[0]);
        uint8_t *dst = ind + (size_t)((y + 1) * px + 1);
        for (int64_t x = 0; x < size[0]; x++)
            dst[x] = row[x] == label;
    }
}

static void fill_none(uint32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = MESH_NONE;
}

int cnx_mesh_label(const uint64_t *labels, const int64_t size[3],
                   uint64_t label, const double scale[3],
                   const double offset[3], cnx_mesh *out)
{
    mesh_case *table = NULL;
    uint8_t *ind[2] = {NULL, NULL};
    uint32_t *exy[2] = {NULL, NULL}, *ez = NULL;
    mesh_build b;
    int64_t px, py;
    size_t sec;
    int rc = 0;

    if (out != NULL)
        memset(out, 0, sizeof(*out));
    if (labels == NULL || size == NULL || scale == NULL || offset == NULL ||
        out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "mesh: NULL argument");
    if (size[0] < 1 || size[1] < 1 || size[2] < 1)
        return cnx_error_set(CNX_EINVAL, 0,
                             "mesh: volume of %lldx%lldx%lld voxels",
                             (long long)size[0], (long long)size[1],
                             (long long)size[2]);
    if (size[0] > MESH_MAX_VOXELS || size[1] > MESH_MAX_VOXELS ||
        size[2] > MESH_MAX_VOXELS ||
        size[0] * size[1] > MESH_MAX_VOXELS ||
        size[0] * size[1] * size[2] > MESH_MAX_VOXELS)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "mesh: volume over 2^40 voxels");

    memset(&b, 0, sizeof(b));
    b.scale = scale;
    b.offset = offset;
    px = size[0] + 2;
    py = size[1] + 2;
    sec = (size_t)(px * py);
    table = malloc(256 * sizeof(*table));
    ind[0] = malloc(sec);
    ind[1] = malloc(sec);
    exy[0] = malloc(2 * sec * sizeof(uint32_t));
    exy[1] = malloc(2 * sec * sizeof(uint32_t));
    ez = malloc(sec * sizeof(uint32_t));
    if (table == NULL || ind[0] == NULL || ind[1] == NULL ||
        exy[0] == NULL || exy[1] == NULL || ez == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
        goto done;
    }
    for (int m = 0; m < 256; m++)
        build_case(&table[m], m);

    fill_section(ind[1], labels, size, label, -1);
    fill_none(exy[1], 2 * sec);
    for (int64_t z = -1; z < size[2]; z++) {
        /* Cubes between voxel sections z (lower) and z + 1 (upper). */
        uint8_t *tmp8 = ind[0];
        uint32_t *tmp32 = exy[0];
        ind[0] = ind[1];
        ind[1] = tmp8;
        exy[0] = exy[1];
        exy[1] = tmp32;
        fill_section(ind[1], labels, size, label, z + 1);
        fill_none(exy[1], 2 * sec);
        fill_none(ez, sec);
        for (int64_t y = -1; y < size[1]; y++) {
            for (int64_t x = -1; x < size[0]; x++) {
                const size_t idx = (size_t)((x + 1) + px * (y + 1));
                const size_t nb[4] = {idx, idx + 1, idx + (size_t)px,
                                      idx + (size_t)px + 1};
                const mesh_case *mc;
                int mask = 0, k = 0;
                for (int c = 0; c < 4; c++)
                    mask |= (ind[0][nb[c]] << c) | (ind[1][nb[c]] << (c + 4));
                if (mask == 0 || mask == 255)
                    continue;
                mc = &table[mask];
                for (int l = 0; l < mc->nloops; l++) {
                    uint32_t id[12];
                    double g[12][3], cen[3] = {0, 0, 0};
                    const int len = mc->len[l];
                    for (int i = 0; i < len; i++) {
                        const int e = mc->edge[k + i], axis = e >> 2;
                        const int c = edge_start(e);
                        const int dx = c & 1, dy = (c >> 1) & 1,
                                  dz = (c >> 2) & 1;
                        const size_t s = nb[dx + 2 * dy];
                        uint32_t *slot = axis == 2 ? &ez[s]
                                                   : &exy[dz][2 * s + (size_t)axis];
                        g[i][0] = (double)(x + dx) + (axis == 0 ? 0.5 : 0.0);
                        g[i][1] = (double)(y + dy) + (axis == 1 ? 0.5 : 0.0);
                        g[i][2] = (double)(z + dz) + (axis == 2 ? 0.5 : 0.0);
                        if (*slot == MESH_NONE) {
                            rc = push_vertex(&b, g[i], slot);
                            if (rc != 0)
                                goto done;
                        }
                        id[i] = *slot;
                    }
                    k += len;
                    if (len == 3) {
                        rc = push_tri(&b, id[0], id[1], id[2]);
                    } else if (len == 4) {
                        rc = push_tri(&b, id[0], id[1], id[2]);
                        if (rc == 0)
                            rc = push_tri(&b, id[0], id[2], id[3]);
                    } else {
                        uint32_t cid;
                        for (int i = 0; i < len; i++)
                            for (int a = 0; a < 3; a++)
                                cen[a] += g[i][a];
                        for (int a = 0; a < 3; a++)
                            cen[a] /= len;
                        rc = push_vertex(&b, cen, &cid);
                        for (int i = 0; i < len && rc == 0; i++)
                            rc = push_tri(&b, cid, id[i], id[(i + 1) % len]);
                    }
                    if (rc != 0)
                        goto done;
                }
            }
        }
    }
    out->nverts = b.nverts;
    out->ntris = b.ntris;
    out->verts = b.verts;
    out->tris = b.tris;
    b.verts = NULL;
    b.tris = NULL;

done:
    free(b.verts);
    free(b.tris);
    free(table);
    free(ind[0]);
    free(ind[1]);
    free(exy[0]);
    free(exy[1]);
    free(ez);
    return rc;
}
