/*
 * Neuroglancer legacy mesh fragments: the bytes of a known mesh written
 * out by hand (little-endian counts, floats and indices), round trips of
 * real block meshes, and decoding refusing every malformed length or
 * index with CNX_ECORRUPT and a message naming what is wrong.
 */
#include "cnx_test.h"

#include "cnx/error.h"
#include "cnx/mesh.h"
#include "mesh_check.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_mesh_legacy__bytes_are_the_documented_layout(void **state)
{
    float verts[] = {1.5f, -2.0f, 1e6f, 0, 0.25f, 3, 7, 8, 9};
    uint32_t tris[] = {0, 1, 2, 2, 1, 0};
    const cnx_mesh m = {3, 2, verts, tris};
    uint8_t want[4 + 36 + 24], *buf;
    size_t len;
    (void)state;
    put32(want, 3);
    for (int i = 0; i < 9; i++) {
        uint32_t bits;
        memcpy(&bits, &verts[i], 4);
        put32(want + 4 + 4 * i, bits);
    }
    for (int i = 0; i < 6; i++)
        put32(want + 40 + 4 * i, tris[i]);
    assert_int_equal(cnx_mesh_legacy_encode(&m, &buf, &len), 0);
    assert_int_equal(len, sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));
    free(buf);
}

static void test_mesh_legacy__round_trip_of_block_meshes(void **state)
{
    const int64_t size[3] = {20, 18, 16};
    uint64_t *v = voronoi_labels(size, 6, 1, 21);
    cnx_mesh_block b;
    cnx_mesh_set set;
    (void)state;
    memset(&b, 0, sizeof(b));
    b.labels = v;
    for (int a = 0; a < 3; a++) {
        b.size[a] = size[a];
        b.origin[a] = 12345;
        b.cells.min[a] = 12344;
        b.cells.max[a] = 12345 + size[a];
        b.resolution[a] = a == 2 ? 40 : 4;
    }
    assert_int_equal(cnx_mesh_block_run(&b, &set), 0);
    assert_true(set.n > 0);
    for (size_t i = 0; i < set.n; i++) {
        const cnx_mesh *m = &set.meshes[i];
        uint8_t *buf;
        size_t len;
        cnx_mesh d;
        assert_int_equal(cnx_mesh_legacy_encode(m, &buf, &len), 0);
        assert_int_equal(len, 4 + 12 * (m->nverts + m->ntris));
        assert_int_equal(cnx_mesh_legacy_decode(buf, len, &d), 0);
        assert_int_equal(d.nverts, m->nverts);
        assert_int_equal(d.ntris, m->ntris);
        assert_memory_equal(d.verts, m->verts, 3 * m->nverts * sizeof(float));
        assert_memory_equal(d.tris, m->tris, 3 * m->ntris * sizeof(uint32_t));
        cnx_mesh_free(&d);
        free(buf);
    }
    cnx_mesh_set_free(&set);
    free(v);
}

static void test_mesh_legacy__empty_mesh_is_a_zero_count(void **state)
{
    const cnx_mesh e = {0, 0, NULL, NULL};
    const uint8_t zero[4] = {0, 0, 0, 0};
    uint8_t *buf;
    size_t len;
    cnx_mesh d;
    (void)state;
    assert_int_equal(cnx_mesh_legacy_encode(&e, &buf, &len), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(buf, zero, 4);
    assert_int_equal(cnx_mesh_legacy_decode(buf, len, &d), 0);
    assert_int_equal(d.nverts, 0);
    assert_int_equal(d.ntris, 0);
    assert_null(d.verts);
    assert_null(d.tris);
    free(buf);
}

/* Decoding buf must fail with CNX_ECORRUPT naming `what`. */
static void assert_corrupt(const uint8_t *buf, size_t len, const char *what)
{
    cnx_mesh d;
    assert_int_equal(cnx_mesh_legacy_decode(buf, len, &d), CNX_ECORRUPT);
    assert_int_equal(d.nverts, 0);
    assert_null(d.verts);
    assert_non_null(strstr(cnx_error_last()->message, what));
}

static void test_mesh_legacy__corrupt_lengths_are_refused(void **state)
{
    uint8_t buf[4 + 24 + 12 + 8];
    (void)state;
    memset(buf, 0, sizeof(buf));
    put32(buf, 2); /* two vertices, one triangle */
    put32(buf + 28, 0);
    put32(buf + 32, 1);
    put32(buf + 36, 1);
    assert_corrupt(buf, 0, "vertex count");
    assert_corrupt(buf, 3, "vertex count");
    assert_corrupt(buf, 4 + 23, "short of its 2 vertices");
    assert_corrupt(buf, 4 + 24 + 11, "multiple of 12");
    assert_corrupt(buf, 4 + 24 + 13, "multiple of 12");
    put32(buf + 36, 2);
    assert_corrupt(buf, 4 + 24 + 12, "index 2 of 2");
    put32(buf, UINT32_MAX);
    assert_corrupt(buf, sizeof(buf), "short of its 4294967295 vertices");
    {
        cnx_mesh d;
        put32(buf, 2);
        put32(buf + 36, 1);
        assert_int_equal(cnx_mesh_legacy_decode(buf, 4 + 24 + 12, &d), 0);
        assert_int_equal(d.ntris, 1);
        cnx_mesh_free(&d);
        assert_int_equal(cnx_mesh_legacy_decode(NULL, 4, &d), CNX_EINVAL);
    }
}

static void test_mesh_legacy__encode_refuses_bad_indices(void **state)
{
    float v[] = {0, 0, 0, 1, 0, 0, 0, 1, 0};
    uint32_t t[] = {0, 1, 3};
    const cnx_mesh m = {3, 1, v, t};
    uint8_t *buf;
    size_t len;
    (void)state;
    assert_int_equal(cnx_mesh_legacy_encode(&m, &buf, &len), CNX_EINVAL);
    assert_null(buf);
    assert_int_equal(cnx_mesh_legacy_encode(NULL, &buf, &len), CNX_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_legacy__bytes_are_the_documented_layout),
        cmocka_unit_test(test_mesh_legacy__round_trip_of_block_meshes),
        cmocka_unit_test(test_mesh_legacy__empty_mesh_is_a_zero_count),
        cmocka_unit_test(test_mesh_legacy__corrupt_lengths_are_refused),
        cmocka_unit_test(test_mesh_legacy__encode_refuses_bad_indices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
