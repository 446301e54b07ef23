/*
 * Multi-resolution meshes (neuroglancer_multilod_draco): the Morton order
 * against a bit-by-bit interleaving, the manifest's bytes against a layout
 * written out by hand from the format description, the encoder's
 * refusals, and a build from chunk meshes of a ball (levels, fewer
 * triangles per level, a triangle outside every cell refused).
 * tests/py/multires_ref.py checks real layers with Draco's own decoder.
 */
#include "cnx_test.h"

#include <math.h>

#include "cnx/error.h"
#include "cnx/mesh.h"

static uint64_t naive_morton(const uint32_t p[3])
{
    uint64_t m = 0;
    for (int bit = 0; bit < 21; bit++)
        for (int a = 0; a < 3; a++)
            m |= (uint64_t)((p[a] >> bit) & 1) << (3 * bit + a);
    return m;
}

static void test_mesh_multires__morton_interleaves_x_lowest(void **state)
{
    uint32_t x[3] = {1, 0, 0}, y[3] = {0, 1, 0}, z[3] = {0, 0, 1};
    uint32_t all[3] = {1, 1, 1}, two[3] = {2, 0, 0};
    uint64_t s = 12345;
    (void)state;
    assert_int_equal(cnx_mesh_morton(x), 1);
    assert_int_equal(cnx_mesh_morton(y), 2);
    assert_int_equal(cnx_mesh_morton(z), 4);
    assert_int_equal(cnx_mesh_morton(all), 7);
    assert_int_equal(cnx_mesh_morton(two), 8);
    for (int i = 0; i < 10000; i++) {
        uint32_t p[3];
        for (int a = 0; a < 3; a++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            p[a] = (uint32_t)(s >> 43); /* 21 bits */
        }
        assert_true(cnx_mesh_morton(p) == naive_morton(p));
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void putf(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    put32(p, v);
}

static void test_mesh_multires__manifest_bytes(void **state)
{
    const float scales[2] = {40, 80}, offs[6] = {0, 0, 0, 0.5f, 0, 0};
    const cnx_mesh_mr_frag f[3] = {
        {0, {1, 0, 0}, 10}, {0, {0, 1, 0}, 20}, {1, {0, 0, 0}, 30}};
    cnx_mesh_mr_index ix = {
        {512, 512, 2560}, {4, 4, -2540}, 2, scales, offs, 3, f};
    uint8_t want[4 * (6 + 1 + 2 + 6 + 2 + 6 + 2 + 3 + 1)], *buf;
    size_t len, at = 0;
    (void)state;
    for (int i = 0; i < 3; i++, at += 4)
        putf(want + at, ix.chunk_shape[i]);
    for (int i = 0; i < 3; i++, at += 4)
        putf(want + at, ix.grid_origin[i]);
    put32(want + at, 2), at += 4;
    putf(want + at, 40), at += 4;
    putf(want + at, 80), at += 4;
    for (int i = 0; i < 6; i++, at += 4)
        putf(want + at, offs[i]);
    put32(want + at, 2), at += 4; /* fragments of lod 0 */
    put32(want + at, 1), at += 4; /* of lod 1 */
    /* lod 0 positions, [3][2]: x's, y's, z's; then sizes */
    const uint32_t lod0[] = {1, 0, 0, 1, 0, 0, 10, 20};
    for (int i = 0; i < 8; i++, at += 4)
        put32(want + at, lod0[i]);
    const uint32_t lod1[] = {0, 0, 0, 30};
    for (int i = 0; i < 4; i++, at += 4)
        put32(want + at, lod1[i]);
    assert_int_equal(at, sizeof(want));
    assert_int_equal(cnx_mesh_mr_index_encode(&ix, &buf, &len), 0);
    assert_int_equal(len, sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));
    free(buf);
}

static void test_mesh_multires__manifest_refusals(void **state)
{
    const float scales[2] = {1, 2}, offs[6] = {0};
    cnx_mesh_mr_frag f[2] = {{0, {0, 1, 0}, 1}, {0, {1, 0, 0}, 1}};
    cnx_mesh_mr_index ix = {{1, 1, 1}, {0, 0, 0}, 2, scales, offs, 2, f};
    uint8_t *buf;
    size_t len;
    (void)state;
    /* (0,1,0) has code 2, (1,0,0) code 1: not z-curve order */
    assert_int_equal(cnx_mesh_mr_index_encode(&ix, &buf, &len), CNX_EINVAL);
    assert_null(buf);
    assert_non_null(strstr(cnx_error_last()->message, "z-curve"));
    f[0].pos[1] = 0, f[0].pos[0] = 0;
    assert_int_equal(cnx_mesh_mr_index_encode(&ix, &buf, &len), 0);
    free(buf);
    f[1].lod = 2; /* not below num_lods */
    assert_int_equal(cnx_mesh_mr_index_encode(&ix, &buf, &len), CNX_EINVAL);
    f[1].lod = 1;
    f[1].pos[2] = 1u << 21;
    assert_int_equal(cnx_mesh_mr_index_encode(&ix, &buf, &len), CNX_EINVAL);
    ix.num_lods = 0;
    assert_int_equal(cnx_mesh_mr_index_encode(&ix, &buf, &len), CNX_EINVAL);
}

/* A ball of radius 13 in a 32^3 volume, meshed in 8^3 chunks as the mesh
 * stage does (low-face planes at the chunk's own face), simplified. */
static void ball_pieces(cnx_mesh **out, size_t *n)
{
    enum { S = 32, C = 8 };
    static uint64_t vol[S * S * S];
    cnx_mesh *pieces = NULL;
    size_t np = 0;
    for (int z = 0; z < S; z++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double d =
                    sqrt((x - 15.5) * (x - 15.5) + (y - 16.2) * (y - 16.2) +
                         (z - 15.8) * (z - 15.8));
                vol[(z * S + y) * S + x] = d < 13 ? 7 : 0;
            }
    for (int cz = 0; cz < S; cz += C)
        for (int cy = 0; cy < S; cy += C)
            for (int cx = 0; cx < S; cx += C) {
                int64_t a[3] = {cx, cy, cz}, b[3], sz[3];
                static uint64_t part[(C + 1) * (C + 1) * (C + 1)];
                cnx_mesh_block blk;
                cnx_mesh_set set;
                cnx_mesh_simplify_opts o = {0.3, INFINITY, 0, {0}, {0}};
                memset(&blk, 0, sizeof(blk));
                for (int i = 0; i < 3; i++) {
                    b[i] = a[i] + C < S ? a[i] + C + 1 : S;
                    sz[i] = b[i] - a[i];
                    blk.size[i] = sz[i];
                    blk.origin[i] = a[i];
                    blk.cells.min[i] = a[i] - (a[i] == 0);
                    blk.cells.max[i] = a[i] + C;
                    blk.resolution[i] = i == 2 ? 40 : 8;
                }
                for (int z = 0; z < sz[2]; z++)
                    for (int y = 0; y < sz[1]; y++)
                        for (int x = 0; x < sz[0]; x++)
                            part[(z * sz[1] + y) * sz[0] + x] =
                                vol[((a[2] + z) * S + a[1] + y) * S + a[0] + x];
                blk.labels = part;
                assert_int_equal(cnx_mesh_block_run(&blk, &set), 0);
                cnx_mesh_block_planes(&blk, &o);
                for (int i = 0; i < 3; i++)
                    if (a[i] == 0)
                        o.plane_at[2 * i] = 0.5 * blk.resolution[i];
                for (size_t k = 0; k < set.n; k++) {
                    assert_int_equal(cnx_mesh_simplify(&set.meshes[k], &o), 0);
                    pieces = realloc(pieces, (np + 1) * sizeof(*pieces));
                    pieces[np++] = set.meshes[k];
                    memset(&set.meshes[k], 0, sizeof(cnx_mesh));
                }
                cnx_mesh_set_free(&set);
            }
    *out = pieces;
    *n = np;
}

static void test_mesh_multires__build_levels(void **state)
{
    cnx_mesh *pieces;
    size_t n;
    cnx_mesh_mr_params p = {{-8, -8, -8}, {8, 8, 8}, {8, 8, 40}, 0.25};
    cnx_mesh_mr_stats st;
    uint8_t *index, *data, *index2, *data2;
    size_t ilen, dlen, ilen2, dlen2, bytes = 0;
    (void)state;
    ball_pieces(&pieces, &n);
    assert_true(n >= 27);
    assert_int_equal(
        cnx_mesh_mr_build(pieces, n, &p, &index, &ilen, &data, &dlen, &st), 0);
    /* 32 voxels + the padding ring: 5 cells a side, so levels of 5, 3, 2,
     * 1 cells: four levels */
    assert_int_equal(st.num_lods, 4);
    for (uint32_t l = 0; l < st.num_lods; l++) {
        assert_true(st.frags[l] > 0);
        bytes += st.bytes[l];
        if (l > 0)
            assert_true(st.tris[l] < st.tris[l - 1]);
    }
    assert_int_equal(st.frags[3], 1);
    assert_int_equal(bytes, dlen);
    /* deterministic */
    assert_int_equal(
        cnx_mesh_mr_build(pieces, n, &p, &index2, &ilen2, &data2, &dlen2, NULL),
        0);
    assert_int_equal(ilen, ilen2);
    assert_int_equal(dlen, dlen2);
    assert_memory_equal(index, index2, ilen);
    assert_memory_equal(data, data2, dlen);
    free(index), free(data), free(index2), free(data2);
    /* a grid shifted by half a chunk: triangles straddle its faces */
    p.origin[0] = -4;
    assert_int_equal(
        cnx_mesh_mr_build(pieces, n, &p, &index, &ilen, &data, &dlen, NULL),
        CNX_EINVAL);
    assert_null(index);
    assert_non_null(strstr(cnx_error_last()->message, "no level-0 cell"));
    for (size_t i = 0; i < n; i++)
        cnx_mesh_free(&pieces[i]);
    free(pieces);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_multires__morton_interleaves_x_lowest),
        cmocka_unit_test(test_mesh_multires__manifest_bytes),
        cmocka_unit_test(test_mesh_multires__manifest_refusals),
        cmocka_unit_test(test_mesh_multires__build_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
