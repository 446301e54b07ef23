/*
 * Marching-cubes mesher, checked against properties that do not depend on
 * how it works: every directed edge appears once and its reverse once
 * (closed, consistently oriented), every vertex's link is one cycle
 * (manifold), no zero-area triangle, no two vertices at one place (merged),
 * every component has an even Euler characteristic <= 2, and for known
 * shapes the total Euler characteristic and the enclosed volume (divergence
 * theorem) computed by hand. Exhaustive over the 256 masks of a 2x2x2
 * volume, random multi-label volumes of several sizes and densities, and
 * shapes: voxel, cubes, ball, diagonal contacts, shell, torus.
 */
#include "cnx_test.h"

#include <math.h>
#include <time.h>

#include "cnx/error.h"
#include "cnx/mesh.h"

static const double unit_scale[3] = {1, 1, 1};
static const double zero_offset[3] = {0, 0, 0};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_vec3(const void *a, const void *b)
{
    return memcmp(a, b, 3 * sizeof(float));
}

static uint32_t uf_find(uint32_t *p, uint32_t a)
{
    while (p[a] != a) {
        p[a] = p[p[a]];
        a = p[a];
    }
    return a;
}

/* Check the mesh is a closed oriented manifold without degenerate
 * triangles; return its Euler characteristic and enclosed volume. */
static void check_mesh(const cnx_mesh *m, long *chi_out, double *vol_out)
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
        assert_true(tri[0] != tri[1] && tri[1] != tri[2] &&
                    tri[0] != tri[2]);
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
        assert_true(memcmp(pos + 3 * v, pos + 3 * (v - 1),
                           3 * sizeof(float)) != 0);
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

static void mesh_and_check(const uint64_t *labels, const int64_t size[3],
                           uint64_t label, long *chi, double *vol)
{
    cnx_mesh m;
    assert_int_equal(cnx_mesh_label(labels, size, label, unit_scale,
                                    zero_offset, &m),
                     0);
    check_mesh(&m, chi, vol);
    cnx_mesh_free(&m);
}

/* Volume of the iso-0.5 surface of a k*k*k block of voxels, by hand: dual
 * cubes inside the block contribute 1, face cubes a half slab, edge cubes
 * a prism of a right triangle with legs 1/2 (1/8), corner cubes a
 * tetrahedron with legs 1/2 (1/48). */
static double cube_volume(int64_t k)
{
    const double a = (double)(k - 1);
    return a * a * a + 6 * a * a / 2 + 12 * a / 8 + 8.0 / 48;
}

static uint64_t *new_volume(const int64_t s[3])
{
    uint64_t *v = calloc((size_t)(s[0] * s[1] * s[2]), sizeof(*v));
    assert_non_null(v);
    return v;
}

static void set_box(uint64_t *v, const int64_t s[3], int64_t x0, int64_t y0,
                    int64_t z0, int64_t x1, int64_t y1, int64_t z1,
                    uint64_t label)
{
    for (int64_t z = z0; z < z1; z++)
        for (int64_t y = y0; y < y1; y++)
            for (int64_t x = x0; x < x1; x++)
                v[(z * s[1] + y) * s[0] + x] = label;
}

static void test_mesh__all_2x2x2_masks_are_closed_manifolds(void **state)
{
    const int64_t s[3] = {2, 2, 2};
    uint64_t v[8];
    (void)state;
    for (int mask = 0; mask < 256; mask++) {
        long chi;
        double vol;
        for (int i = 0; i < 8; i++)
            v[i] = (uint64_t)((mask >> i) & 1);
        mesh_and_check(v, s, 1, &chi, &vol);
        if (mask == 0) {
            assert_int_equal(chi, 0);
        } else {
            assert_true(vol > 0);
            assert_true(chi >= 2);
        }
    }
}

static void test_mesh__single_voxel_is_an_octahedron(void **state)
{
    const int64_t s[3] = {1, 1, 1};
    uint64_t v = 7;
    cnx_mesh m;
    long chi;
    double vol;
    (void)state;
    assert_int_equal(
        cnx_mesh_label(&v, s, 7, unit_scale, zero_offset, &m), 0);
    assert_int_equal(m.nverts, 6);
    assert_int_equal(m.ntris, 8);
    check_mesh(&m, &chi, &vol);
    assert_int_equal(chi, 2);
    assert_true(fabs(vol - 1.0 / 6) < 1e-9);
    cnx_mesh_free(&m);
    /* Absent label: empty mesh. */
    assert_int_equal(
        cnx_mesh_label(&v, s, 8, unit_scale, zero_offset, &m), 0);
    assert_int_equal(m.nverts, 0);
    assert_int_equal(m.ntris, 0);
    assert_null(m.verts);
    cnx_mesh_free(&m);
    cnx_mesh_free(NULL);
}

static void test_mesh__cubes_have_the_hand_computed_volume(void **state)
{
    (void)state;
    for (int64_t k = 1; k <= 6; k++) {
        /* At the volume's edge and away from it. */
        for (int64_t pad = 0; pad <= 2; pad += 2) {
            const int64_t s[3] = {k + pad, k + pad + 1, k + pad};
            uint64_t *v = new_volume(s);
            long chi;
            double vol;
            set_box(v, s, pad / 2, pad / 2, pad / 2, pad / 2 + k,
                    pad / 2 + k, pad / 2 + k, 3);
            mesh_and_check(v, s, 3, &chi, &vol);
            assert_int_equal(chi, 2);
            assert_true(fabs(vol - cube_volume(k)) < 1e-6);
            free(v);
        }
    }
}

static void make_ball(uint64_t *v, const int64_t s[3], double c, double r,
                      uint64_t label, long *count)
{
    *count = 0;
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++)
            for (int64_t x = 0; x < s[0]; x++) {
                double d = (x - c) * (x - c) + (y - c) * (y - c) +
                           (z - c) * (z - c);
                if (d <= r * r) {
                    v[(z * s[1] + y) * s[0] + x] = label;
                    (*count)++;
                }
            }
}

static void test_mesh__ball_volume_within_5_percent(void **state)
{
    const double radii[] = {5, 8, 12.5};
    (void)state;
    for (size_t i = 0; i < sizeof(radii) / sizeof(radii[0]); i++) {
        const int64_t n = (int64_t)(2 * radii[i]) + 5;
        const int64_t s[3] = {n, n, n};
        uint64_t *v = new_volume(s);
        long count, chi;
        double vol;
        make_ball(v, s, (double)(n / 2), radii[i], 1, &count);
        mesh_and_check(v, s, 1, &chi, &vol);
        print_message("ball r=%.1f: %ld voxels, mesh volume %.2f (%+.2f%%)\n",
                      radii[i], count, vol, 100.0 * (vol - count) / count);
        assert_int_equal(chi, 2);
        assert_true(fabs(vol - (double)count) < 0.05 * (double)count);
        free(v);
    }
}

static void test_mesh__diagonal_contacts_give_separate_shells(void **state)
{
    const int64_t s[3] = {6, 6, 6};
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        uint64_t *v = new_volume(s);
        long chi;
        double vol;
        set_box(v, s, 1, 1, 1, 3, 3, 3, 2);
        if (kind == 0) /* touching along a z edge */
            set_box(v, s, 3, 3, 1, 5, 5, 3, 2);
        else /* touching at a corner */
            set_box(v, s, 3, 3, 3, 5, 5, 5, 2);
        mesh_and_check(v, s, 2, &chi, &vol);
        assert_int_equal(chi, 4);
        assert_true(fabs(vol - 2 * cube_volume(2)) < 1e-6);
        free(v);
    }
}

static void test_mesh__shell_with_cavity_and_torus(void **state)
{
    const int64_t s[3] = {9, 9, 9};
    uint64_t *v = new_volume(s);
    long chi;
    double vol;
    (void)state;
    set_box(v, s, 1, 1, 1, 8, 8, 8, 5);
    set_box(v, s, 3, 3, 3, 6, 6, 6, 0);
    mesh_and_check(v, s, 5, &chi, &vol);
    assert_int_equal(chi, 4);
    /* The cavity's surface encloses a cube of background: no diagonal
     * faces, so its volume is the same formula. */
    assert_true(fabs(vol - (cube_volume(7) - cube_volume(3))) < 1e-6);
    /* The cavity (label 0) as its own object: one shell. */
    mesh_and_check(v, s, 0, &chi, &vol);
    free(v);

    {
        const int64_t t[3] = {5, 5, 3};
        uint64_t *w = new_volume(t);
        set_box(w, t, 1, 1, 1, 4, 4, 2, 1);
        set_box(w, t, 2, 2, 1, 3, 3, 2, 0);
        mesh_and_check(w, t, 1, &chi, &vol);
        assert_int_equal(chi, 0); /* one torus */
        assert_true(vol > 0);
        free(w);
    }
}

static void test_mesh__random_volumes_are_closed_manifolds(void **state)
{
    const int64_t sizes[][3] = {{1, 1, 7}, {3, 4, 5}, {8, 8, 8},
                                {17, 9, 13}, {32, 24, 20}};
    const unsigned dens[] = {10, 30, 50, 70, 90}; /* percent */
    uint64_t seed = 42;
    (void)state;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t d = 0; d < sizeof(dens) / sizeof(dens[0]); d++)
            for (int rep = 0; rep < 3; rep++) {
                const int64_t *s = sizes[i];
                const size_t n = (size_t)(s[0] * s[1] * s[2]);
                uint64_t *v = new_volume(s);
                uint64_t *bin = new_volume(s);
                for (size_t j = 0; j < n; j++) {
                    uint64_t r = cnx_test_rand(&seed);
                    v[j] = r % 100 < dens[d] ? 1 + (r >> 32) % 3 : 0;
                }
                for (uint64_t l = 0; l <= 3; l++) {
                    cnx_mesh m, mb;
                    long chi;
                    double vol;
                    assert_int_equal(cnx_mesh_label(v, s, l, unit_scale,
                                                    zero_offset, &m),
                                     0);
                    check_mesh(&m, &chi, &vol);
                    assert_true(m.ntris == 0 || vol > 0);
                    /* Same mesh as the binary mask of that label. */
                    for (size_t j = 0; j < n; j++)
                        bin[j] = v[j] == l ? 9 : 4;
                    assert_int_equal(cnx_mesh_label(bin, s, 9, unit_scale,
                                                    zero_offset, &mb),
                                     0);
                    assert_int_equal(m.nverts, mb.nverts);
                    assert_int_equal(m.ntris, mb.ntris);
                    if (m.ntris > 0) {
                        assert_memory_equal(m.verts, mb.verts,
                                            m.nverts * 3 * sizeof(float));
                        assert_memory_equal(m.tris, mb.tris,
                                            m.ntris * 3 * sizeof(uint32_t));
                    }
                    cnx_mesh_free(&m);
                    cnx_mesh_free(&mb);
                }
                free(v);
                free(bin);
            }
}

static void test_mesh__deterministic_and_scaled_exactly(void **state)
{
    const int64_t s[3] = {20, 18, 16};
    const size_t n = (size_t)(s[0] * s[1] * s[2]);
    const double scale[3] = {4, 5.5, 40}, offset[3] = {100, -3.25, 7.5};
    uint64_t *v = new_volume(s);
    uint64_t seed = 7;
    cnx_mesh a, b, c;
    size_t exact = 0;
    (void)state;
    for (size_t j = 0; j < n; j++)
        v[j] = cnx_test_rand(&seed) % 2;
    assert_int_equal(cnx_mesh_label(v, s, 1, unit_scale, zero_offset, &a),
                     0);
    assert_int_equal(cnx_mesh_label(v, s, 1, unit_scale, zero_offset, &b),
                     0);
    assert_int_equal(a.nverts, b.nverts);
    assert_int_equal(a.ntris, b.ntris);
    assert_memory_equal(a.verts, b.verts, a.nverts * 3 * sizeof(float));
    assert_memory_equal(a.tris, b.tris, a.ntris * 3 * sizeof(uint32_t));
    assert_int_equal(cnx_mesh_label(v, s, 1, scale, offset, &c), 0);
    assert_int_equal(c.nverts, a.nverts);
    assert_memory_equal(c.tris, a.tris, a.ntris * 3 * sizeof(uint32_t));
    for (size_t i = 0; i < 3 * a.nverts; i++) {
        const double g = a.verts[i];
        const float want = (float)(g * scale[i % 3] + offset[i % 3]);
        if (g * 2 == floor(g * 2)) { /* a grid-edge midpoint: exact */
            assert_true(c.verts[i] == want);
            exact++;
        } else { /* a loop centroid, rounded to float once more */
            assert_true(fabs(c.verts[i] - want) <=
                        1e-5 * (fabs(want) + scale[i % 3]));
        }
    }
    assert_true(exact > 0);
    cnx_mesh_free(&a);
    cnx_mesh_free(&b);
    cnx_mesh_free(&c);
    free(v);
}

static void test_mesh__bad_arguments_are_einval(void **state)
{
    const int64_t s[3] = {1, 1, 1}, bad[3] = {1, 0, 1};
    uint64_t v = 1;
    cnx_mesh m;
    (void)state;
    assert_int_equal(cnx_mesh_label(NULL, s, 1, unit_scale, zero_offset, &m),
                     CNX_EINVAL);
    assert_int_equal(cnx_mesh_label(&v, bad, 1, unit_scale, zero_offset, &m),
                     CNX_EINVAL);
    assert_int_equal(m.nverts, 0);
    assert_int_equal(cnx_mesh_label(&v, s, 1, unit_scale, zero_offset, NULL),
                     CNX_EINVAL);
}

/* Speed figure for the report, not an assertion. */
static void test_mesh__speed_on_a_128_ball(void **state)
{
    const int64_t s[3] = {128, 128, 128};
    uint64_t *v = new_volume(s);
    struct timespec t0, t1;
    cnx_mesh m;
    long count;
    double sec;
    (void)state;
    make_ball(v, s, 63.5, 60, 1, &count);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(cnx_mesh_label(v, s, 1, unit_scale, zero_offset, &m), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec -
                                                            t0.tv_nsec);
    print_message("128^3 ball r=60: %zu verts, %zu tris, %.3f s, %.1f MVx/s\n",
                  m.nverts, m.ntris, sec, 128.0 * 128 * 128 / sec / 1e6);
    cnx_mesh_free(&m);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh__all_2x2x2_masks_are_closed_manifolds),
        cmocka_unit_test(test_mesh__single_voxel_is_an_octahedron),
        cmocka_unit_test(test_mesh__cubes_have_the_hand_computed_volume),
        cmocka_unit_test(test_mesh__ball_volume_within_5_percent),
        cmocka_unit_test(test_mesh__diagonal_contacts_give_separate_shells),
        cmocka_unit_test(test_mesh__shell_with_cavity_and_torus),
        cmocka_unit_test(test_mesh__random_volumes_are_closed_manifolds),
        cmocka_unit_test(test_mesh__deterministic_and_scaled_exactly),
        cmocka_unit_test(test_mesh__bad_arguments_are_einval),
        cmocka_unit_test(test_mesh__speed_on_a_128_ball),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
