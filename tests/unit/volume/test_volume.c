/* Typed volume buffers: allocation, indexing, copy over box overlaps. */
#include "cnx_test.h"

#include "cnx/error.h"
#include "cnx/volume.h"

static void test_volume__dtypes_have_sizes_and_names(void **state)
{
    static const struct {
        const char *name;
        size_t size;
    } want[] = {{"uint8", 1}, {"uint16", 2}, {"uint32", 4}, {"uint64", 8},
                {"float32", 4}};
    (void)state;
    for (size_t i = 0; i < 5; i++) {
        cnx_dtype dt;
        assert_int_equal(cnx_dtype_parse(want[i].name, &dt), 0);
        assert_int_equal(cnx_dtype_size(dt), want[i].size);
        assert_string_equal(cnx_dtype_name(dt), want[i].name);
    }
    cnx_dtype dt;
    assert_int_equal(cnx_dtype_parse("int8", &dt), CNX_EINVAL);
    assert_int_equal(cnx_dtype_parse("float64", &dt), CNX_EINVAL);
}

static void test_volume__new_is_zeroed_and_indexed_x_fastest(void **state)
{
    cnx_box box = cnx_box_make(10, 20, 30, 14, 23, 32);
    cnx_volume *v;
    (void)state;
    assert_int_equal(cnx_volume_new(&v, CNX_DT_UINT16, &box, 2), 0);
    assert_int_equal(cnx_volume_voxels(v), 24);
    assert_int_equal(cnx_volume_bytes(v), 24 * 2 * 2);
    for (size_t i = 0; i < 48; i++)
        assert_int_equal(((uint16_t *)v->data)[i], 0);
    assert_int_equal(cnx_volume_index(v, 10, 20, 30, 0), 0);
    assert_int_equal(cnx_volume_index(v, 11, 20, 30, 0), 1);
    assert_int_equal(cnx_volume_index(v, 10, 21, 30, 0), 4);
    assert_int_equal(cnx_volume_index(v, 10, 20, 31, 0), 12);
    assert_int_equal(cnx_volume_index(v, 10, 20, 30, 1), 24);
    cnx_volume_free(v);
    cnx_volume_free(NULL);
}

static void test_volume__rejects_bad_shapes(void **state)
{
    cnx_box empty = cnx_box_make(0, 0, 0, 0, 1, 1);
    cnx_box huge = cnx_box_make(0, 0, 0, 1 << 20, 1 << 20, 1 << 20);
    cnx_box ok = cnx_box_make(0, 0, 0, 1, 1, 1);
    cnx_volume *v;
    (void)state;
    assert_int_equal(cnx_volume_new(&v, CNX_DT_UINT8, &empty, 1), CNX_EINVAL);
    assert_int_equal(cnx_volume_new(&v, CNX_DT_UINT8, &ok, 0), CNX_EINVAL);
    assert_int_equal(cnx_volume_new(&v, (cnx_dtype)99, &ok, 1), CNX_EINVAL);
    assert_int_equal(cnx_volume_new(&v, CNX_DT_UINT64, &huge, 1), CNX_ETOOBIG);
    assert_null(v);
}

/* Copy against a voxel-by-voxel reference. */
static void test_volume__copy_moves_exactly_the_overlap(void **state)
{
    cnx_box sb = cnx_box_make(0, 0, 0, 7, 5, 3);
    cnx_box db = cnx_box_make(4, -2, 1, 10, 3, 6);
    cnx_volume *src, *dst;
    (void)state;
    assert_int_equal(cnx_volume_new(&src, CNX_DT_UINT32, &sb, 2), 0);
    assert_int_equal(cnx_volume_new(&dst, CNX_DT_UINT32, &db, 2), 0);
    for (int64_t i = 0; i < cnx_volume_voxels(src) * 2; i++)
        ((uint32_t *)src->data)[i] = (uint32_t)i + 1;
    assert_int_equal(cnx_volume_copy(dst, src), 0);
    for (int64_t c = 0; c < 2; c++)
        for (int64_t z = db.min[2]; z < db.max[2]; z++)
            for (int64_t y = db.min[1]; y < db.max[1]; y++)
                for (int64_t x = db.min[0]; x < db.max[0]; x++) {
                    uint32_t got = ((uint32_t *)dst->data)
                        [cnx_volume_index(dst, x, y, z, c)];
                    int in = x < 7 && y >= 0 && y < 5 && z < 3;
                    uint32_t want = in ? ((uint32_t *)src->data)
                        [cnx_volume_index(src, x, y, z, c)] : 0;
                    assert_int_equal(got, want);
                }
    cnx_volume *crop;
    cnx_box cb = cnx_box_make(1, 1, 1, 3, 4, 2);
    assert_int_equal(cnx_volume_crop(&crop, src, &cb), 0);
    assert_int_equal(((uint32_t *)crop->data)[0],
                     ((uint32_t *)src->data)[cnx_volume_index(src, 1, 1, 1, 0)]);
    cnx_volume_free(crop);
    cb.max[0] = 8;
    assert_int_equal(cnx_volume_crop(&crop, src, &cb), CNX_ERANGE);
    cnx_volume *other;
    assert_int_equal(cnx_volume_new(&other, CNX_DT_UINT8, &db, 2), 0);
    assert_int_equal(cnx_volume_copy(other, src), CNX_EINVAL);
    cnx_volume_free(other);
    cnx_volume_free(src);
    cnx_volume_free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_volume__dtypes_have_sizes_and_names),
        cmocka_unit_test(test_volume__new_is_zeroed_and_indexed_x_fastest),
        cmocka_unit_test(test_volume__rejects_bad_shapes),
        cmocka_unit_test(test_volume__copy_moves_exactly_the_overlap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
