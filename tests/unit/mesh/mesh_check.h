/*
 * mesh_check.h - checks the mesh tests share, independent of how the
 * kernels work: check_mesh() asserts that a mesh is a closed, consistently
 * oriented 2-manifold (every directed edge once and its reverse once, every
 * vertex's link one cycle), with no zero-area triangle and no two vertices
 * at one place, and returns its Euler characteristic and enclosed volume
 * (divergence theorem); mesh_join() merges meshes by identical vertex
 * coordinates, as fragments of one object meet at chunk faces.
 */
#ifndef CNX_TEST_MESH_CHECK_H
#define CNX_TEST_MESH_CHECK_H

#include "cnx_test.h"

#include <math.h>

#include "cnx/mesh.h"

static inline int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static inline int cmp_vec3(const void *a, const void *b)
{
    return memcmp(a, b, 3 * sizeof(float));
}

static inline uint32_t uf_find(uint32_t *p, uint32_t a)
{
    while (p[a] != a) {
        p[a] = p[p[a]];
        a = p[a];
    }
    return a;
}

/* Check the mesh is a closed oriented manifold without degenerate
 * triangles; return its Euler characteristic and enclosed volume. */
static inline void check_mesh(const cnx_mesh *m, long *chi_out, double *vol_out)
{
    const size_t nt = m->ntris, nv = m->nverts, nd = 3 * m->ntris;
    uint64_t *de = malloc((nd + 1) * sizeof(*de));
    uint32_t *parent = malloc((nv + 1) * sizeof(*parent));
    size_t *start = calloc(nv + 2, sizeof(*start));
    uint32_t *link = malloc((2 * nd + 1) * sizeof(*link));
    float *pos = malloc((3 * nv + 1) * sizeof(*pos));
    double vol = 0;
    assert_non_null(de);
    assert_non_null(parent);
    assert_non_null(start);
    assert_non_null(link);
    assert_non_null(pos);
    if (nt == 0) {
        assert_int_equal(nv, 0);
    }
    for (size_t v = 0; v < nv; v++)
        parent[v] = (uint32_t)v;
    for (size_t t = 0; t < nt; t++) {
        const uint32_t *tri = m->tris + 3 * t;
        double p[3][3], u[3], w[3], c[3];
        for (int i = 0; i < 3; i++) {
            assert_true(tri[i] < nv);
            for (int a = 0; a < 3; a++)
                p[i][a] = m->verts[3 * tri[i] + a];
        }
        assert_true(tri[0] != tri[1] && tri[1] != tri[2] && tri[0] != tri[2]);
        for (int a = 0; a < 3; a++) {
            u[a] = p[1][a] - p[0][a];
            w[a] = p[2][a] - p[0][a];
        }
        c[0] = u[1] * w[2] - u[2] * w[1];
        c[1] = u[2] * w[0] - u[0] * w[2];
        c[2] = u[0] * w[1] - u[1] * w[0];
        assert_true(sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]) > 1e-6);
        vol += (p[0][0] * (p[1][1] * p[2][2] - p[1][2] * p[2][1]) -
                p[0][1] * (p[1][0] * p[2][2] - p[1][2] * p[2][0]) +
                p[0][2] * (p[1][0] * p[2][1] - p[1][1] * p[2][0])) /
               6.0;
        for (int i = 0; i < 3; i++) {
            const uint32_t a = tri[i], b = tri[(i + 1) % 3];
            de[3 * t + (size_t)i] = ((uint64_t)a << 32) | b;
            parent[uf_find(parent, a)] = uf_find(parent, b);
            start[a + 1]++;
        }
    }
    /* Closed and oriented: each directed edge once, its reverse present. */
    qsort(de, nd, sizeof(*de), cmp_u64);
    for (size_t i = 0; i < nd; i++) {
        uint64_t rev = (de[i] >> 32) | (de[i] << 32);
        if (i > 0)
            assert_true(de[i] != de[i - 1]);
        assert_non_null(bsearch(&rev, de, nd, sizeof(*de), cmp_u64));
    }
    /* Manifold vertices: the link of each vertex is a single cycle. */
    for (size_t v = 0; v < nv; v++)
        start[v + 1] += start[v];
    {
        size_t *fill = malloc((nv + 1) * sizeof(*fill));
        assert_non_null(fill);
        memcpy(fill, start, (nv + 1) * sizeof(*fill));
        for (size_t t = 0; t < nt; t++)
            for (int i = 0; i < 3; i++) {
                const uint32_t v = m->tris[3 * t + (size_t)i];
                size_t s = fill[v]++;
                link[2 * s] = m->tris[3 * t + (size_t)(i + 1) % 3];
                link[2 * s + 1] = m->tris[3 * t + (size_t)(i + 2) % 3];
            }
        free(fill);
    }
    for (size_t v = 0; v < nv; v++) {
        const size_t s = start[v], n = start[v + 1] - s;
        uint32_t cur;
        size_t steps = 0;
        assert_true(n >= 3); /* every vertex is used */
        cur = link[2 * s + 1];
        do {
            size_t j;
            for (j = 0; j < n; j++)
                if (link[2 * (s + j)] == cur)
                    break;
            assert_true(j < n);
            cur = link[2 * (s + j) + 1];
            steps++;
        } while (cur != link[2 * s + 1] && steps <= n);
        assert_int_equal(steps, n);
    }
    /* Merged: no two vertices share a position. */
    if (nv > 0)
        memcpy(pos, m->verts, 3 * nv * sizeof(*pos));
    qsort(pos, nv, 3 * sizeof(float), cmp_vec3);
    for (size_t v = 1; v < nv; v++)
        assert_true(memcmp(pos + 3 * v, pos + 3 * (v - 1), 3 * sizeof(float)) !=
                    0);
    /* Euler characteristic of each component: even, at most 2. */
    {
        long *nvc = calloc(nv + 1, sizeof(*nvc));
        long *nfc = calloc(nv + 1, sizeof(*nfc));
        long chi = 0;
        assert_non_null(nvc);
        assert_non_null(nfc);
        for (size_t v = 0; v < nv; v++)
            nvc[uf_find(parent, (uint32_t)v)]++;
        for (size_t t = 0; t < nt; t++)
            nfc[uf_find(parent, m->tris[3 * t])]++;
        for (size_t v = 0; v < nv; v++) {
            long c;
            if (uf_find(parent, (uint32_t)v) != v)
                continue;
            assert_true(nfc[v] % 2 == 0);
            c = nvc[v] - 3 * nfc[v] / 2 + nfc[v];
            assert_true(c % 2 == 0);
            assert_true(c <= 2);
            chi += c;
        }
        assert_int_equal(chi, (long)nv - (long)(nd / 2) + (long)nt);
        *chi_out = chi;
        free(nvc);
        free(nfc);
    }
    *vol_out = vol;
    free(de);
    free(parent);
    free(start);
    free(link);
    free(pos);
}

/* Signed enclosed volume of a mesh (no checks). */
static inline double mesh_volume(const cnx_mesh *m)
{
    double vol = 0;
    for (size_t t = 0; t < m->ntris; t++) {
        const float *a = m->verts + 3 * (size_t)m->tris[3 * t];
        const float *b = m->verts + 3 * (size_t)m->tris[3 * t + 1];
        const float *c = m->verts + 3 * (size_t)m->tris[3 * t + 2];
        vol += (a[0] * ((double)b[1] * c[2] - (double)b[2] * c[1]) -
                a[1] * ((double)b[0] * c[2] - (double)b[2] * c[0]) +
                a[2] * ((double)b[0] * c[1] - (double)b[1] * c[0])) /
               6.0;
    }
    return vol;
}

typedef struct join_key {
    float p[3];
    uint32_t mesh, vert;
} join_key;

static inline int cmp_join_key(const void *a, const void *b)
{
    const join_key *x = a, *y = b;
    int c = memcmp(x->p, y->p, sizeof(x->p));
    if (c != 0)
        return c;
    if (x->mesh != y->mesh)
        return x->mesh < y->mesh ? -1 : 1;
    return x->vert < y->vert ? -1 : x->vert > y->vert;
}

/*
 * Join n meshes into out: vertices with identical coordinates (bytes)
 * become one, numbered in coordinate order; triangles follow in mesh order.
 * Asserts that no mesh has two vertices at one place.
 */
static inline void mesh_join(const cnx_mesh *const *parts, size_t n,
                             cnx_mesh *out)
{
    size_t nv = 0, nt = 0, k = 0, u = 0;
    join_key *keys;
    uint32_t **map;
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < n; i++) {
        nv += parts[i]->nverts;
        nt += parts[i]->ntris;
    }
    keys = malloc((nv + 1) * sizeof(*keys));
    map = calloc(n + 1, sizeof(*map));
    assert_non_null(keys);
    assert_non_null(map);
    for (size_t i = 0; i < n; i++) {
        map[i] = malloc((parts[i]->nverts + 1) * sizeof(**map));
        assert_non_null(map[i]);
        for (size_t v = 0; v < parts[i]->nverts; v++) {
            memcpy(keys[k].p, parts[i]->verts + 3 * v, sizeof(keys[k].p));
            keys[k].mesh = (uint32_t)i;
            keys[k++].vert = (uint32_t)v;
        }
    }
    qsort(keys, nv, sizeof(*keys), cmp_join_key);
    out->verts = malloc((3 * nv + 1) * sizeof(float));
    out->tris = malloc((3 * nt + 1) * sizeof(uint32_t));
    assert_non_null(out->verts);
    assert_non_null(out->tris);
    for (size_t i = 0; i < nv; i++) {
        if (i == 0 || memcmp(keys[i].p, keys[i - 1].p, sizeof(keys[i].p))) {
            memcpy(out->verts + 3 * u, keys[i].p, sizeof(keys[i].p));
            u++;
        } else {
            assert_true(keys[i].mesh != keys[i - 1].mesh);
        }
        map[keys[i].mesh][keys[i].vert] = (uint32_t)(u - 1);
    }
    k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < 3 * parts[i]->ntris; j++)
            out->tris[k++] = map[i][parts[i]->tris[j]];
    out->nverts = u;
    out->ntris = nt;
    for (size_t i = 0; i < n; i++)
        free(map[i]);
    free(map);
    free(keys);
}

/*
 * Labels of a size[0] x size[1] x size[2] volume (x fastest): cells of
 * jittered seeds on a grid of `spacing` voxels, each voxel the label of
 * its nearest seed (random 64-bit labels, some above 2^32); with `zeros`,
 * voxels near the boundary between two cells are 0 (membranes), and a
 * one-voxel border of 0 when zeros > 1.
 */
static inline uint64_t *voronoi_labels(const int64_t size[3], int spacing,
                                       int zeros, uint64_t seed)
{
    const int g[3] = {(int)(size[0] / spacing) + 2,
                      (int)(size[1] / spacing) + 2,
                      (int)(size[2] / spacing) + 2};
    const size_t ns = (size_t)g[0] * (size_t)g[1] * (size_t)g[2];
    double *sp = malloc(3 * ns * sizeof(*sp));
    uint64_t *id = malloc(ns * sizeof(*id));
    uint64_t *v = malloc((size_t)(size[0] * size[1] * size[2]) * sizeof(*v));
    assert_non_null(sp);
    assert_non_null(id);
    assert_non_null(v);
    for (size_t i = 0; i < ns; i++) {
        const size_t c[3] = {i % (size_t)g[0], i / (size_t)g[0] % (size_t)g[1],
                             i / ((size_t)g[0] * (size_t)g[1])};
        for (int a = 0; a < 3; a++)
            sp[3 * i + (size_t)a] =
                ((double)c[a] - 1.0 +
                 (double)(cnx_test_rand(&seed) % 1000) / 1000.0) *
                spacing;
        {
            /* two calls in a fixed order (an expression holding both
             * would leave the order to the compiler) */
            uint64_t value = cnx_test_rand(&seed);
            id[i] = value >> (cnx_test_rand(&seed) % 40);
        }
        if (id[i] == 0)
            id[i] = 1;
    }
    for (int64_t z = 0; z < size[2]; z++)
        for (int64_t y = 0; y < size[1]; y++)
            for (int64_t x = 0; x < size[0]; x++) {
                const int64_t p[3] = {x, y, z};
                double d1 = 1e300, d2 = 1e300;
                uint64_t best = 0;
                int c[3];
                for (int a = 0; a < 3; a++)
                    c[a] = (int)(p[a] / spacing);
                for (int k = c[2]; k <= c[2] + 2 && k < g[2]; k++)
                    for (int j = c[1]; j <= c[1] + 2 && j < g[1]; j++)
                        for (int i = c[0]; i <= c[0] + 2 && i < g[0]; i++) {
                            const size_t s =
                                (size_t)i +
                                (size_t)g[0] *
                                    ((size_t)j + (size_t)g[1] * (size_t)k);
                            double d = 0;
                            for (int a = 0; a < 3; a++)
                                d += (p[a] - sp[3 * s + (size_t)a]) *
                                     (p[a] - sp[3 * s + (size_t)a]);
                            if (d < d1) {
                                d2 = d1;
                                d1 = d;
                                best = id[s];
                            } else if (d < d2) {
                                d2 = d;
                            }
                        }
                if (zeros && sqrt(d2) - sqrt(d1) < 1.0)
                    best = 0;
                if (zeros > 1 &&
                    (x == 0 || y == 0 || z == 0 || x == size[0] - 1 ||
                     y == size[1] - 1 || z == size[2] - 1))
                    best = 0;
                v[(z * size[1] + y) * size[0] + x] = best;
            }
    free(sp);
    free(id);
    return v;
}

/* Voxels of label l in v (n voxels). */
static inline int64_t count_label(const uint64_t *v, size_t n, uint64_t l)
{
    int64_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += v[i] == l;
    return c;
}

/*
 * Mesh volume v (size) as a chunked worker does: chunks of `chunk` voxels,
 * each a block of its voxels plus one of overlap on its high faces where
 * the volume continues, cells [a - (a == 0), b). One set per chunk into
 * sets[] (room for all), blocks[] (the same order; labels freed by the
 * caller with blocks_free()). @return the number of chunks.
 */
static inline size_t mesh_chunks(const uint64_t *v, const int64_t size[3],
                                 const int64_t chunk[3], const double res[3],
                                 cnx_mesh_set *sets, cnx_mesh_block *blocks)
{
    size_t n = 0;
    for (int64_t cz = 0; cz < size[2]; cz += chunk[2])
        for (int64_t cy = 0; cy < size[1]; cy += chunk[1])
            for (int64_t cx = 0; cx < size[0]; cx += chunk[0]) {
                const int64_t a[3] = {cx, cy, cz};
                cnx_mesh_block *b = &blocks[n];
                uint64_t *lab;
                int64_t hi[3];
                memset(b, 0, sizeof(*b));
                for (int i = 0; i < 3; i++) {
                    const int64_t end =
                        a[i] + chunk[i] < size[i] ? a[i] + chunk[i] : size[i];
                    hi[i] = end < size[i] ? end + 1 : end;
                    b->origin[i] = a[i];
                    b->size[i] = hi[i] - a[i];
                    b->cells.min[i] = a[i] == 0 ? -1 : a[i];
                    b->cells.max[i] = end;
                    b->resolution[i] = res[i];
                }
                lab = malloc((size_t)(b->size[0] * b->size[1] * b->size[2]) *
                             sizeof(*lab));
                assert_non_null(lab);
                for (int64_t z = 0; z < b->size[2]; z++)
                    for (int64_t y = 0; y < b->size[1]; y++)
                        memcpy(lab +
                                   (size_t)((z * b->size[1] + y) * b->size[0]),
                               v + (size_t)(((a[2] + z) * size[1] + a[1] + y) *
                                                size[0] +
                                            a[0]),
                               (size_t)b->size[0] * sizeof(*lab));
                b->labels = lab;
                assert_int_equal(cnx_mesh_block_run(b, &sets[n]), 0);
                n++;
            }
    return n;
}

static inline void blocks_free(cnx_mesh_block *blocks, cnx_mesh_set *sets,
                               size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((void *)blocks[i].labels);
        cnx_mesh_set_free(&sets[i]);
    }
}

/* The fragments of label l among n sets (pointers into them); count. */
static inline size_t label_parts(cnx_mesh_set *sets, size_t n, uint64_t l,
                                 const cnx_mesh **parts)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < sets[i].n; j++)
            if (sets[i].labels[j] == l)
                parts[k++] = &sets[i].meshes[j];
    return k;
}

/* Distinct nonzero labels of v (n voxels), ascending, into *out. */
static inline size_t distinct_labels(const uint64_t *v, size_t n,
                                     uint64_t **out)
{
    uint64_t *l = malloc((n + 1) * sizeof(*l));
    size_t k = 0;
    assert_non_null(l);
    memcpy(l, v, n * sizeof(*l));
    qsort(l, n, sizeof(*l), cmp_u64);
    for (size_t i = 0; i < n; i++)
        if (l[i] != 0 && (k == 0 || l[k - 1] != l[i]))
            l[k++] = l[i];
    *out = l;
    return k;
}

#endif
