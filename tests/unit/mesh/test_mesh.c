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

#include "cnx/error.h"
#include "cnx/mesh.h"
#include "mesh_check.h"

static const double unit_scale[3] = {1, 1, 1};
static const double zero_offset[3] = {0, 0, 0};

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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
