/*
 * Multilabel block meshing (cnx_mesh_block_run), checked against truth that
 * does not come from the kernel: volumes cut into chunks exactly as a worker
 * cuts them (one voxel of overlap on high faces), every label's fragments
 * joined at identical vertex coordinates must be a closed, consistently
 * oriented 2-manifold (mesh_check.h), enclose the label's voxel count x
 * the voxel volume within 5%, and equal - vertex for vertex, triangle for
 * triangle - the mesh of the whole volume in one block; one block's meshes
 * equal cnx_mesh_label's of each label; output bytes are deterministic.
 */
#include "cnx_test.h"

#include <math.h>

#include "cnx/error.h"
#include "cnx/mesh.h"
#include "mesh_check.h"

#define MAX_CHUNKS 4096

static cnx_mesh_set sets[MAX_CHUNKS];
static cnx_mesh_block blocks[MAX_CHUNKS];

static int cmp_tri(const void *a, const void *b)
{
    return memcmp(a, b, 3 * sizeof(uint32_t));
}

/* Triangles of m rotated to start at their smallest index, sorted. */
static uint32_t *canonical_tris(const cnx_mesh *m)
{
    uint32_t *t = malloc((3 * m->ntris + 1) * sizeof(*t));
    assert_non_null(t);
    for (size_t i = 0; i < m->ntris; i++) {
        const uint32_t *s = m->tris + 3 * i;
        int r = s[1] < s[0] && s[1] < s[2] ? 1 : s[2] < s[0] ? 2 : 0;
        for (int j = 0; j < 3; j++)
            t[3 * i + (size_t)j] = s[(r + j) % 3];
    }
    qsort(t, m->ntris, 3 * sizeof(*t), cmp_tri);
    return t;
}

/* The same surface: identical vertex coordinates and triangles. */
static void assert_same_surface(const cnx_mesh *a, const cnx_mesh *b)
{
    const cnx_mesh *pa = a, *pb = b;
    cnx_mesh ja, jb;
    uint32_t *ta, *tb;
    mesh_join(&pa, 1, &ja); /* vertices in coordinate order */
    mesh_join(&pb, 1, &jb);
    assert_int_equal(ja.nverts, jb.nverts);
    assert_int_equal(ja.ntris, jb.ntris);
    assert_memory_equal(ja.verts, jb.verts, 3 * ja.nverts * sizeof(float));
    ta = canonical_tris(&ja);
    tb = canonical_tris(&jb);
    assert_memory_equal(ta, tb, 3 * ja.ntris * sizeof(uint32_t));
    free(ta);
    free(tb);
    cnx_mesh_free(&ja);
    cnx_mesh_free(&jb);
}

/* The whole volume as one block of closed meshes. */
static void mesh_whole(const uint64_t *v, const int64_t size[3],
                       const double res[3], cnx_mesh_set *out)
{
    cnx_mesh_block b;
    memset(&b, 0, sizeof(b));
    b.labels = v;
    for (int a = 0; a < 3; a++) {
        b.size[a] = size[a];
        b.cells.min[a] = -1;
        b.cells.max[a] = size[a];
        b.resolution[a] = res[a];
    }
    assert_int_equal(cnx_mesh_block_run(&b, out), 0);
}

typedef struct chunk_case {
    int64_t size[3], chunk[3];
    int spacing, zeros;
    double res[3];
} chunk_case;

static const chunk_case cases[] = {
    {{40, 36, 33}, {16, 16, 16}, 11, 0, {4, 4, 40}},
    {{45, 38, 31}, {7, 9, 6}, 13, 1, {8, 8, 8}},
    {{30, 30, 30}, {11, 13, 64}, 10, 2, {3.5, 5, 7.25}},
    {{12, 10, 9}, {1, 3, 2}, 4, 0, {1, 1, 1}},
};

static void test_mesh_block__chunks_join_into_closed_manifolds(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const chunk_case *cc = &cases[c];
        const size_t nvox = (size_t)(cc->size[0] * cc->size[1] * cc->size[2]);
        const double vvox = cc->res[0] * cc->res[1] * cc->res[2];
        uint64_t *v = voronoi_labels(cc->size, cc->spacing, cc->zeros, 42 + c);
        uint64_t *labels;
        const size_t nl = distinct_labels(v, nvox, &labels);
        const size_t nch =
            mesh_chunks(v, cc->size, cc->chunk, cc->res, sets, blocks);
        const cnx_mesh **parts = malloc(nch * sizeof(*parts));
        cnx_mesh_set whole;
        size_t checked = 0, fragments = 0;
        int64_t covered = 0;
        double worst = 0;
        assert_non_null(parts);
        mesh_whole(v, cc->size, cc->res, &whole);
        assert_int_equal(whole.n, nl);
        for (size_t i = 0; i < nch; i++) {
            for (size_t j = 0; j < sets[i].n; j++) {
                assert_true(sets[i].labels[j] != 0);
                if (j > 0) {
                    assert_true(sets[i].labels[j - 1] < sets[i].labels[j]);
                }
                assert_true(sets[i].meshes[j].ntris > 0);
            }
            fragments += sets[i].n;
        }
        for (size_t l = 0; l < nl; l++) {
            const size_t np = label_parts(sets, nch, labels[l], parts);
            const int64_t count = count_label(v, nvox, labels[l]);
            cnx_mesh joined;
            long chi;
            double vol, err;
            assert_true(np > 0);
            assert_int_equal(whole.labels[l], labels[l]);
            mesh_join(parts, np, &joined);
            check_mesh(&joined, &chi, &vol);
            assert_true(vol > 0);
            assert_same_surface(&joined, &whole.meshes[l]);
            err = fabs(vol / vvox - (double)count) / (double)count;
            if (count >= 500) {
                assert_true(err < 0.05);
                worst = err > worst ? err : worst;
                checked++;
                covered += count;
            }
            cnx_mesh_free(&joined);
        }
        print_message("%lldx%lldx%lld in %zu chunks: %zu labels, %zu "
                      "fragments; %zu labels of >= 500 voxels (%.0f%% of "
                      "the voxels), volume error at most %.2f%%\n",
                      (long long)cc->size[0], (long long)cc->size[1],
                      (long long)cc->size[2], nch, nl, fragments, checked,
                      100.0 * (double)covered / (double)nvox, 100 * worst);
        /* The labels checked hold most of the voxels. */
        assert_true(cc->spacing < 6 ||
                    covered > (int64_t)(nvox - count_label(v, nvox, 0)) / 2);
        cnx_mesh_set_free(&whole);
        blocks_free(blocks, sets, nch);
        free(parts);
        free(labels);
        free(v);
    }
}

static void test_mesh_block__random_labels_chunked_are_manifolds(void **state)
{
    const int64_t size[3] = {13, 11, 9}, chunk[3] = {5, 4, 3};
    const double res[3] = {2, 3, 5};
    const size_t nvox = (size_t)(size[0] * size[1] * size[2]);
    uint64_t seed = 7;
    (void)state;
    for (int rep = 0; rep < 6; rep++) {
        uint64_t *v = malloc(nvox * sizeof(*v)), *labels;
        const cnx_mesh **parts;
        cnx_mesh_set whole;
        size_t nl, nch;
        assert_non_null(v);
        for (size_t i = 0; i < nvox; i++) {
            const uint64_t r = cnx_test_rand(&seed);
            v[i] = r % 100 < (uint64_t)(15 * rep) ? 0 : 1 + (r >> 40) % 4;
        }
        nl = distinct_labels(v, nvox, &labels);
        nch = mesh_chunks(v, size, chunk, res, sets, blocks);
        parts = malloc(nch * sizeof(*parts));
        assert_non_null(parts);
        mesh_whole(v, size, res, &whole);
        assert_int_equal(whole.n, nl);
        for (size_t l = 0; l < nl; l++) {
            const size_t np = label_parts(sets, nch, labels[l], parts);
            cnx_mesh joined;
            long chi;
            double vol;
            mesh_join(parts, np, &joined);
            check_mesh(&joined, &chi, &vol);
            assert_true(vol > 0);
            assert_same_surface(&joined, &whole.meshes[l]);
            cnx_mesh_free(&joined);
        }
        cnx_mesh_set_free(&whole);
        blocks_free(blocks, sets, nch);
        free(parts);
        free(labels);
        free(v);
    }
}

static void test_mesh_block__equals_mesh_label_per_label(void **state)
{
    const int64_t size[3] = {17, 14, 12};
    const double res[3] = {4, 6, 30};
    const size_t nvox = (size_t)(size[0] * size[1] * size[2]);
    uint64_t *v = voronoi_labels(size, 5, 1, 99), *labels;
    const size_t nl = distinct_labels(v, nvox, &labels);
    cnx_mesh_block b;
    cnx_mesh_set set;
    (void)state;
    memset(&b, 0, sizeof(b));
    b.labels = v;
    for (int a = 0; a < 3; a++) {
        b.size[a] = size[a];
        b.origin[a] = 1000 * (a + 1) - 7; /* positions are global */
        b.cells.min[a] = b.origin[a] - 1;
        b.cells.max[a] = b.origin[a] + size[a];
        b.resolution[a] = res[a];
    }
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    assert_int_equal(set.n, nl);
    for (size_t l = 0; l < nl; l++) {
        const double off[3] = {((double)b.origin[0] + 0.5) * res[0],
                               ((double)b.origin[1] + 0.5) * res[1],
                               ((double)b.origin[2] + 0.5) * res[2]};
        const cnx_mesh *a = &set.meshes[l];
        cnx_mesh m;
        assert_int_equal(set.labels[l], labels[l]);
        assert_int_equal(cnx_mesh_label(v, size, labels[l], res, off, &m), 0);
        assert_int_equal(m.nverts, a->nverts);
        assert_int_equal(m.ntris, a->ntris);
        assert_memory_equal(m.tris, a->tris, 3 * m.ntris * sizeof(uint32_t));
        for (size_t i = 0; i < 3 * m.nverts; i++) {
            /* Same point, another rounding: (g + 0.5) r against
             * (g - o) r + (o + 0.5) r. */
            assert_true(fabs(m.verts[i] - a->verts[i]) <=
                        2e-7 * fabs(a->verts[i]) + 1e-9);
        }
        cnx_mesh_free(&m);
    }
    cnx_mesh_set_free(&set);
    free(labels);
    free(v);
}

static void test_mesh_block__positions_are_voxel_centres_in_nm(void **state)
{
    /* One voxel of label 9 at global (5, 6, 7), 4 x 5 x 40 nm: an
     * octahedron around ((5, 6, 7) + 0.5) * res, half a voxel out. */
    const uint64_t one = 9;
    cnx_mesh_block b;
    cnx_mesh_set set;
    double lo[3] = {1e30, 1e30, 1e30}, hi[3] = {-1e30, -1e30, -1e30};
    (void)state;
    memset(&b, 0, sizeof(b));
    b.labels = &one;
    b.size[0] = b.size[1] = b.size[2] = 1;
    b.origin[0] = 5;
    b.origin[1] = 6;
    b.origin[2] = 7;
    b.cells = cnx_box_make(4, 5, 6, 6, 7, 8);
    b.resolution[0] = 4;
    b.resolution[1] = 5;
    b.resolution[2] = 40;
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    assert_int_equal(set.n, 1);
    assert_true(set.labels[0] == 9);
    assert_int_equal(set.meshes[0].nverts, 6);
    assert_int_equal(set.meshes[0].ntris, 8);
    for (size_t i = 0; i < 18; i++) {
        lo[i % 3] = fmin(lo[i % 3], set.meshes[0].verts[i]);
        hi[i % 3] = fmax(hi[i % 3], set.meshes[0].verts[i]);
    }
    for (int a = 0; a < 3; a++) {
        const double c = ((double)b.origin[a] + 0.5) * b.resolution[a];
        assert_true(lo[a] == (float)(c - 0.5 * b.resolution[a]));
        assert_true(hi[a] == (float)(c + 0.5 * b.resolution[a]));
    }
    assert_true(fabs(mesh_volume(&set.meshes[0]) - 4.0 * 5 * 40 / 6) < 1e-3);
    cnx_mesh_set_free(&set);
}

static void test_mesh_block__deterministic_bytes(void **state)
{
    const int64_t size[3] = {30, 27, 25};
    const double res[3] = {8, 8, 8};
    uint64_t *v = voronoi_labels(size, 7, 1, 5);
    cnx_mesh_set a, b;
    (void)state;
    mesh_whole(v, size, res, &a);
    mesh_whole(v, size, res, &b);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.labels, b.labels, a.n * sizeof(uint64_t));
    for (size_t i = 0; i < a.n; i++) {
        assert_int_equal(a.meshes[i].nverts, b.meshes[i].nverts);
        assert_int_equal(a.meshes[i].ntris, b.meshes[i].ntris);
        assert_memory_equal(a.meshes[i].verts, b.meshes[i].verts,
                            3 * a.meshes[i].nverts * sizeof(float));
        assert_memory_equal(a.meshes[i].tris, b.meshes[i].tris,
                            3 * a.meshes[i].ntris * sizeof(uint32_t));
    }
    cnx_mesh_set_free(&a);
    cnx_mesh_set_free(&b);
    free(v);
}

static void test_mesh_block__uniform_or_empty_gives_no_meshes(void **state)
{
    uint64_t v[27];
    cnx_mesh_block b;
    cnx_mesh_set set;
    (void)state;
    for (int i = 0; i < 27; i++)
        v[i] = 77;
    memset(&b, 0, sizeof(b));
    b.labels = v;
    b.size[0] = b.size[1] = b.size[2] = 3;
    b.resolution[0] = b.resolution[1] = b.resolution[2] = 1;
    /* Cells whose corners all lie inside the block: all 77. */
    b.cells = cnx_box_make(0, 0, 0, 2, 2, 2);
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    assert_int_equal(set.n, 0);
    assert_null(set.labels);
    /* Empty box; a box far outside the block (all 0). */
    b.cells = cnx_box_make(0, 0, 0, 2, 0, 2);
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    assert_int_equal(set.n, 0);
    b.cells = cnx_box_make(100, 100, 100, 110, 104, 103);
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    assert_int_equal(set.n, 0);
    /* All zero: nothing, label 0 is never meshed. */
    memset(v, 0, sizeof(v));
    b.cells = cnx_box_make(-1, -1, -1, 3, 3, 3);
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    assert_int_equal(set.n, 0);
    cnx_mesh_set_free(&set);
    cnx_mesh_set_free(NULL);
}

static void test_mesh_block__bad_arguments_are_einval(void **state)
{
    uint64_t v = 1;
    cnx_mesh_block b;
    cnx_mesh_set set;
    (void)state;
    memset(&b, 0, sizeof(b));
    b.labels = &v;
    b.size[0] = b.size[1] = b.size[2] = 1;
    b.cells = cnx_box_make(-1, -1, -1, 1, 1, 1);
    b.resolution[0] = b.resolution[1] = b.resolution[2] = 1;
    assert_int_equal(cnx_mesh_block_run(NULL, &set), CNX_EINVAL);
    assert_int_equal(cnx_mesh_block_run(&b, NULL), CNX_EINVAL);
    b.resolution[1] = 0;
    assert_int_equal(cnx_mesh_block_run(&b, &set), CNX_EINVAL);
    b.resolution[1] = NAN;
    assert_int_equal(cnx_mesh_block_run(&b, &set), CNX_EINVAL);
    b.resolution[1] = 1;
    b.size[2] = 0;
    assert_int_equal(cnx_mesh_block_run(&b, &set), CNX_EINVAL);
    b.size[2] = 1;
    b.cells.max[0] = (int64_t)1 << 52;
    assert_int_equal(cnx_mesh_block_run(&b, &set), CNX_EINVAL);
    b.labels = NULL;
    assert_int_equal(cnx_mesh_block_run(&b, &set), CNX_EINVAL);
    assert_int_equal(set.n, 0);
}

static void test_mesh_block__planes_match_chunk_face_vertices(void **state)
{
    /* Every vertex of a chunk's fragment that another chunk also has lies
     * on one of the planes cnx_mesh_block_planes() gives, and only those
     * vertices are shared. */
    const int64_t size[3] = {24, 20, 18}, chunk[3] = {8, 7, 6};
    const double res[3] = {4.5, 6, 33};
    uint64_t *v = voronoi_labels(size, 6, 0, 11);
    const size_t nch = mesh_chunks(v, size, chunk, res, sets, blocks);
    size_t on = 0;
    (void)state;
    for (size_t i = 0; i < nch; i++) {
        cnx_mesh_simplify_opts o;
        memset(&o, 0, sizeof(o));
        cnx_mesh_block_planes(&blocks[i], &o);
        assert_int_equal(o.nplanes, 6);
        for (size_t j = 0; j < sets[i].n; j++) {
            const cnx_mesh *m = &sets[i].meshes[j];
            for (size_t k = 0; k < m->nverts; k++) {
                int plane = 0;
                for (int p = 0; p < 6; p++)
                    plane |= m->verts[3 * k + (size_t)o.plane_axis[p]] ==
                             (float)o.plane_at[p];
                /* Inside the chunk's cell box, or on its faces. */
                for (int a = 0; a < 3; a++) {
                    const float x = m->verts[3 * k + (size_t)a];
                    assert_true(x >= (float)o.plane_at[2 * a] &&
                                x <= (float)o.plane_at[2 * a + 1]);
                }
                on += (size_t)plane;
            }
        }
    }
    assert_true(on > 0);
    blocks_free(blocks, sets, nch);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_block__chunks_join_into_closed_manifolds),
        cmocka_unit_test(test_mesh_block__random_labels_chunked_are_manifolds),
        cmocka_unit_test(test_mesh_block__equals_mesh_label_per_label),
        cmocka_unit_test(test_mesh_block__positions_are_voxel_centres_in_nm),
        cmocka_unit_test(test_mesh_block__deterministic_bytes),
        cmocka_unit_test(test_mesh_block__uniform_or_empty_gives_no_meshes),
        cmocka_unit_test(test_mesh_block__bad_arguments_are_einval),
        cmocka_unit_test(test_mesh_block__planes_match_chunk_face_vertices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
