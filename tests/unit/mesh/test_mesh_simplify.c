/*
 * Quadric simplification (cnx_mesh_simplify), checked against truth that
 * does not come from the simplifier: chunk fragments simplified with their
 * chunk faces fixed keep every face vertex exactly, still join into closed,
 * consistently oriented 2-manifolds of the same Euler characteristic, with
 * fewer triangles and the enclosed volume within 5% of the voxel count;
 * closed meshes keep their topology and volume; collapses of zero error
 * keep the volume exactly; the output bytes are deterministic; inputs that
 * are not manifolds are left alone rather than broken.
 */
#include "cnx_test.h"

#include <math.h>

#include "cnx/error.h"
#include "cnx/mesh.h"
#include "mesh_check.h"

#define MAX_CHUNKS 512

static cnx_mesh_set sets[MAX_CHUNKS];
static cnx_mesh_block blocks[MAX_CHUNKS];

static int on_plane(const float *p, const cnx_mesh_simplify_opts *o)
{
    for (int i = 0; i < o->nplanes; i++)
        if (p[o->plane_axis[i]] == (float)o->plane_at[i])
            return 1;
    return 0;
}

static int cmp_vec3f(const void *a, const void *b)
{
    return memcmp(a, b, 3 * sizeof(float));
}

/* The vertices of m on o's planes, sorted; their count. */
static size_t plane_verts(const cnx_mesh *m, const cnx_mesh_simplify_opts *o,
                          float **out)
{
    float *p = malloc((3 * m->nverts + 1) * sizeof(*p));
    size_t k = 0;
    assert_non_null(p);
    for (size_t v = 0; v < m->nverts; v++)
        if (on_plane(m->verts + 3 * v, o))
            memcpy(p + 3 * k++, m->verts + 3 * v, 3 * sizeof(float));
    qsort(p, k, 3 * sizeof(float), cmp_vec3f);
    *out = p;
    return k;
}

static void copy_mesh(const cnx_mesh *a, cnx_mesh *b)
{
    b->nverts = a->nverts;
    b->ntris = a->ntris;
    b->verts = malloc((3 * a->nverts + 1) * sizeof(float));
    b->tris = malloc((3 * a->ntris + 1) * sizeof(uint32_t));
    assert_non_null(b->verts);
    assert_non_null(b->tris);
    memcpy(b->verts, a->verts, 3 * a->nverts * sizeof(float));
    memcpy(b->tris, a->tris, 3 * a->ntris * sizeof(uint32_t));
}

static void test_mesh_simplify__chunks_keep_faces_and_join(void **state)
{
    const int64_t size[3] = {48, 44, 40}, chunk[3] = {16, 16, 16};
    const double res[3] = {8, 8, 8};
    const size_t nvox = (size_t)(size[0] * size[1] * size[2]);
    uint64_t *v = voronoi_labels(size, 12, 0, 3), *labels;
    const size_t nl = distinct_labels(v, nvox, &labels);
    const size_t nch = mesh_chunks(v, size, chunk, res, sets, blocks);
    const cnx_mesh **parts = malloc(nch * sizeof(*parts));
    long *chi0 = malloc(nl * sizeof(*chi0));
    size_t tris_in = 0, tris_out = 0, checked = 0;
    int64_t covered = 0;
    double worst = 0;
    (void)state;
    assert_non_null(parts);
    assert_non_null(chi0);
    /* Topology before. */
    for (size_t l = 0; l < nl; l++) {
        const size_t np = label_parts(sets, nch, labels[l], parts);
        cnx_mesh j;
        double vol;
        mesh_join(parts, np, &j);
        check_mesh(&j, &chi0[l], &vol);
        cnx_mesh_free(&j);
    }
    for (size_t i = 0; i < nch; i++) {
        cnx_mesh_simplify_opts o;
        memset(&o, 0, sizeof(o));
        o.target_fraction = 0.2;
        o.max_error = INFINITY;
        cnx_mesh_block_planes(&blocks[i], &o);
        for (size_t k = 0; k < sets[i].n; k++) {
            cnx_mesh *m = &sets[i].meshes[k];
            float *before, *after;
            const size_t nb = plane_verts(m, &o, &before);
            size_t na;
            tris_in += m->ntris;
            assert_int_equal(cnx_mesh_simplify(m, &o), 0);
            tris_out += m->ntris;
            na = plane_verts(m, &o, &after);
            assert_int_equal(na, nb);
            if (nb > 0) {
                assert_memory_equal(before, after, 3 * nb * sizeof(float));
            }
            free(before);
            free(after);
        }
    }
    for (size_t l = 0; l < nl; l++) {
        const size_t np = label_parts(sets, nch, labels[l], parts);
        const int64_t count = count_label(v, nvox, labels[l]);
        cnx_mesh j;
        long chi;
        double vol, err;
        mesh_join(parts, np, &j);
        check_mesh(&j, &chi, &vol);
        assert_int_equal(chi, chi0[l]);
        err = fabs(vol / (res[0] * res[1] * res[2]) - (double)count) /
              (double)count;
        if (count >= 1000) {
            assert_true(err < 0.05);
            worst = err > worst ? err : worst;
            checked++;
            covered += count;
        }
        cnx_mesh_free(&j);
    }
    print_message("%zu labels in %zu chunks: %zu -> %zu triangles (%.1f%%), "
                  "%zu labels of >= 1000 voxels (%.0f%% of the voxels) "
                  "within %.2f%% of their volume\n",
                  nl, nch, tris_in, tris_out,
                  100.0 * (double)tris_out / (double)tris_in, checked,
                  100.0 * (double)covered / (double)nvox, 100 * worst);
    assert_true(tris_out < tris_in * 6 / 10);
    /* The labels checked hold most of the voxels. */
    assert_true(covered > (int64_t)(nvox - count_label(v, nvox, 0)) * 6 / 10);
    blocks_free(blocks, sets, nch);
    free(chi0);
    free(parts);
    free(labels);
    free(v);
}

static void test_mesh_simplify__closed_meshes_keep_topology(void **state)
{
    const int64_t size[3] = {40, 40, 40};
    const double res[3] = {4, 4, 40};
    const size_t nvox = (size_t)(size[0] * size[1] * size[2]);
    uint64_t *v = voronoi_labels(size, 13, 2, 8);
    cnx_mesh_block b;
    cnx_mesh_set set;
    cnx_mesh_simplify_opts o;
    size_t tin = 0, tout = 0;
    int64_t covered = 0;
    double worst = 0;
    (void)state;
    memset(&b, 0, sizeof(b));
    b.labels = v;
    for (int a = 0; a < 3; a++) {
        b.size[a] = size[a];
        b.cells.min[a] = -1;
        b.cells.max[a] = size[a];
        b.resolution[a] = res[a];
    }
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    memset(&o, 0, sizeof(o));
    o.target_fraction = 0.2;
    o.max_error = INFINITY;
    for (size_t i = 0; i < set.n; i++) {
        cnx_mesh *m = &set.meshes[i];
        const int64_t count = count_label(v, nvox, set.labels[i]);
        long chi0, chi1;
        double vol0, vol1;
        check_mesh(m, &chi0, &vol0);
        tin += m->ntris;
        assert_int_equal(cnx_mesh_simplify(m, &o), 0);
        tout += m->ntris;
        check_mesh(m, &chi1, &vol1);
        assert_int_equal(chi1, chi0);
        if (count >= 1000) {
            const double err =
                fabs(vol1 / (res[0] * res[1] * res[2]) - (double)count) /
                (double)count;
            assert_true(err < 0.05);
            worst = err > worst ? err : worst;
            covered += count;
        }
    }
    print_message("closed: %zu -> %zu triangles (%.1f%%), labels of >= "
                  "1000 voxels (%.0f%% of the voxels) within %.2f%% of "
                  "their volume\n",
                  tin, tout, 100.0 * (double)tout / (double)tin,
                  100.0 * (double)covered / (double)nvox, 100 * worst);
    assert_true(tout < tin / 4);
    assert_true(covered > (int64_t)(nvox - count_label(v, nvox, 0)) * 6 / 10);
    cnx_mesh_set_free(&set);
    free(v);
}

static void test_mesh_simplify__zero_error_keeps_volume_exactly(void **state)
{
    /* A box has flat faces: collapses inside them cost nothing and change
     * nothing of the surface. */
    const int64_t size[3] = {9, 8, 7};
    const double res[3] = {2, 3, 4};
    uint64_t v[9 * 8 * 7];
    cnx_mesh_block b;
    cnx_mesh_set set;
    cnx_mesh_simplify_opts o;
    long chi;
    double vol0, vol1;
    size_t t0;
    (void)state;
    for (int i = 0; i < 9 * 8 * 7; i++)
        v[i] = 5;
    memset(&b, 0, sizeof(b));
    b.labels = v;
    for (int a = 0; a < 3; a++) {
        b.size[a] = size[a];
        b.cells.min[a] = -1;
        b.cells.max[a] = size[a];
        b.resolution[a] = res[a];
    }
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    assert_int_equal(set.n, 1);
    check_mesh(&set.meshes[0], &chi, &vol0);
    t0 = set.meshes[0].ntris;
    memset(&o, 0, sizeof(o));
    o.target_fraction = 0;
    o.max_error = 0;
    assert_int_equal(cnx_mesh_simplify(&set.meshes[0], &o), 0);
    check_mesh(&set.meshes[0], &chi, &vol1);
    assert_int_equal(chi, 2);
    print_message("box: %zu -> %zu triangles\n", t0, set.meshes[0].ntris);
    assert_true(set.meshes[0].ntris < t0 / 2);
    assert_true(fabs(vol1 - vol0) <= 1e-9 * vol0);
    cnx_mesh_set_free(&set);
}

static void test_mesh_simplify__deterministic_and_fraction_one(void **state)
{
    const int64_t size[3] = {30, 26, 22};
    const double res[3] = {8, 8, 8};
    uint64_t *v = voronoi_labels(size, 9, 1, 4);
    cnx_mesh_block b;
    cnx_mesh_set set;
    cnx_mesh_simplify_opts o;
    (void)state;
    memset(&b, 0, sizeof(b));
    b.labels = v;
    for (int a = 0; a < 3; a++) {
        b.size[a] = size[a];
        b.cells.min[a] = -1;
        b.cells.max[a] = size[a];
        b.resolution[a] = res[a];
    }
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    memset(&o, 0, sizeof(o));
    o.max_error = 100;
    for (size_t i = 0; i < set.n; i++) {
        cnx_mesh x, y, z;
        copy_mesh(&set.meshes[i], &x);
        copy_mesh(&set.meshes[i], &y);
        copy_mesh(&set.meshes[i], &z);
        o.target_fraction = 0.3;
        assert_int_equal(cnx_mesh_simplify(&x, &o), 0);
        assert_int_equal(cnx_mesh_simplify(&y, &o), 0);
        assert_int_equal(x.nverts, y.nverts);
        assert_int_equal(x.ntris, y.ntris);
        assert_memory_equal(x.verts, y.verts, 3 * x.nverts * sizeof(float));
        assert_memory_equal(x.tris, y.tris, 3 * x.ntris * sizeof(uint32_t));
        o.target_fraction = 1;
        assert_int_equal(cnx_mesh_simplify(&z, &o), 0);
        assert_int_equal(z.ntris, set.meshes[i].ntris);
        assert_memory_equal(z.tris, set.meshes[i].tris,
                            3 * z.ntris * sizeof(uint32_t));
        cnx_mesh_free(&x);
        cnx_mesh_free(&y);
        cnx_mesh_free(&z);
    }
    cnx_mesh_set_free(&set);
    free(v);
}

static void test_mesh_simplify__open_and_bad_meshes_left_alone(void **state)
{
    /* A strip of triangles (all boundary) and a fan of three triangles
     * round one edge (non-manifold): nothing may be collapsed. */
    float sv[] = {0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 1, 0, 1, 1, 0, 2, 1, 0};
    uint32_t st[] = {0, 1, 4, 0, 4, 3, 1, 2, 5, 1, 5, 4};
    float fv[] = {0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, -1, -1, 0};
    uint32_t ft[] = {0, 1, 2, 1, 0, 3, 0, 1, 4};
    cnx_mesh_simplify_opts o;
    cnx_mesh m;
    (void)state;
    memset(&o, 0, sizeof(o));
    o.max_error = INFINITY;
    m.nverts = 6;
    m.ntris = 4;
    m.verts = malloc(sizeof(sv));
    m.tris = malloc(sizeof(st));
    memcpy(m.verts, sv, sizeof(sv));
    memcpy(m.tris, st, sizeof(st));
    assert_int_equal(cnx_mesh_simplify(&m, &o), 0);
    assert_int_equal(m.ntris, 4);
    assert_memory_equal(m.tris, st, sizeof(st));
    cnx_mesh_free(&m);
    m.nverts = 5;
    m.ntris = 3;
    m.verts = malloc(sizeof(fv));
    m.tris = malloc(sizeof(ft));
    memcpy(m.verts, fv, sizeof(fv));
    memcpy(m.tris, ft, sizeof(ft));
    assert_int_equal(cnx_mesh_simplify(&m, &o), 0);
    assert_int_equal(m.ntris, 3);
    cnx_mesh_free(&m);
    /* Empty mesh: nothing to do. */
    assert_int_equal(cnx_mesh_simplify(&m, &o), 0);
}

static void test_mesh_simplify__bad_options_are_einval(void **state)
{
    float v[] = {0, 0, 0, 1, 0, 0, 0, 1, 0};
    uint32_t t[] = {0, 1, 2}, bad[] = {0, 1, 3};
    cnx_mesh m = {3, 1, v, t};
    cnx_mesh_simplify_opts o;
    (void)state;
    memset(&o, 0, sizeof(o));
    o.target_fraction = 0.5;
    o.max_error = 1;
    assert_int_equal(cnx_mesh_simplify(NULL, &o), CNX_EINVAL);
    assert_int_equal(cnx_mesh_simplify(&m, NULL), CNX_EINVAL);
    o.target_fraction = 1.5;
    assert_int_equal(cnx_mesh_simplify(&m, &o), CNX_EINVAL);
    o.target_fraction = NAN;
    assert_int_equal(cnx_mesh_simplify(&m, &o), CNX_EINVAL);
    o.target_fraction = 0.5;
    o.max_error = -1;
    assert_int_equal(cnx_mesh_simplify(&m, &o), CNX_EINVAL);
    o.max_error = 1;
    o.nplanes = 7;
    assert_int_equal(cnx_mesh_simplify(&m, &o), CNX_EINVAL);
    o.nplanes = 1;
    o.plane_axis[0] = 3;
    assert_int_equal(cnx_mesh_simplify(&m, &o), CNX_EINVAL);
    o.plane_axis[0] = 0;
    m.tris = bad;
    assert_int_equal(cnx_mesh_simplify(&m, &o), CNX_EINVAL);
    assert_true(m.tris == bad && m.verts == v); /* untouched */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_simplify__chunks_keep_faces_and_join),
        cmocka_unit_test(test_mesh_simplify__closed_meshes_keep_topology),
        cmocka_unit_test(test_mesh_simplify__zero_error_keeps_volume_exactly),
        cmocka_unit_test(test_mesh_simplify__deterministic_and_fraction_one),
        cmocka_unit_test(test_mesh_simplify__open_and_bad_meshes_left_alone),
        cmocka_unit_test(test_mesh_simplify__bad_options_are_einval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
