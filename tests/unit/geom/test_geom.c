/*
 * Boxes, chunk grids and the box generator, the latter against a naive
 * reference model: mark every voxel of the widened roi and check that the
 * generated boxes cover each exactly once, are chunk-aligned, and never
 * split a chunk between two tasks.
 */
#include "cnx_test.h"

#include "cnx/error.h"
#include "cnx/geom.h"

static void test_geom__box_basics(void **state)
{
    cnx_box a = cnx_box_make(0, 0, 0, 10, 20, 30);
    cnx_box b = cnx_box_make(5, -5, 10, 15, 5, 40);
    cnx_box in = cnx_box_intersect(&a, &b);
    cnx_box want = cnx_box_make(5, 0, 10, 10, 5, 30);
    int64_t size[3];
    (void)state;
    assert_true(cnx_box_equal(&in, &want));
    assert_int_equal(cnx_box_voxels(&a), 6000);
    cnx_box_size(&b, size);
    assert_int_equal(size[2], 30);
    assert_true(cnx_box_contains(&a, &in));
    assert_false(cnx_box_contains(&in, &a));
    cnx_box far = cnx_box_make(100, 100, 100, 101, 101, 101);
    in = cnx_box_intersect(&a, &far);
    assert_true(cnx_box_empty(&in));
    assert_int_equal(cnx_box_voxels(&in), 0);
}

static void test_geom__grow_clips_halo_to_bounds(void **state)
{
    cnx_box bounds = cnx_box_make(0, 0, 0, 100, 100, 100);
    cnx_box b = cnx_box_make(0, 50, 98, 10, 60, 100);
    cnx_box g = cnx_box_grow(&b, 2, &bounds);
    cnx_box want = cnx_box_make(0, 48, 96, 12, 62, 100);
    (void)state;
    assert_true(cnx_box_equal(&g, &want));
    g = cnx_box_grow(&b, 2, NULL);
    assert_int_equal(g.min[0], -2);
}

static void test_geom__format_and_parse_round_trip(void **state)
{
    cnx_box b = cnx_box_make(-64, 0, 128, 0, 64, 200), p;
    char name[128];
    (void)state;
    assert_int_equal(cnx_box_format(&b, name, sizeof(name)), 0);
    assert_string_equal(name, "-64-0_0-64_128-200");
    assert_int_equal(cnx_box_parse(name, &p), 0);
    assert_true(cnx_box_equal(&b, &p));
    assert_int_equal(cnx_box_format(&b, name, 5), CNX_ERANGE);
}

static void test_geom__parse_rejects_malformed_names(void **state)
{
    static const char *bad[] = {"", "0-1_0-1", "0-1_0-1_0-1_", "a-1_0-1_0-1",
                                "0-1_0-1_0-1x", "0_1-0_1-0_1",
                                "0-99999999999999999999_0-1_0-1"};
    cnx_box b;
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(cnx_box_parse(bad[i], &b), CNX_EINVAL);
}

static void test_geom__chunk_boxes_are_truncated_at_the_edge(void **state)
{
    cnx_grid grid = {{10, 0, 0}, {300, 100, 64}, {128, 64, 64}};
    int64_t counts[3], g[3] = {2, 1, 0};
    cnx_box b;
    (void)state;
    cnx_grid_counts(&grid, counts);
    assert_int_equal(counts[0], 3);
    assert_int_equal(counts[1], 2);
    assert_int_equal(counts[2], 1);
    b = cnx_grid_chunk_box(&grid, g);
    assert_int_equal(b.min[0], 266);
    assert_int_equal(b.max[0], 310);
    assert_int_equal(b.min[1], 64);
    assert_int_equal(b.max[1], 100);
    assert_true(cnx_grid_is_aligned(&grid, &b));
    b.max[0] = 300;
    assert_false(cnx_grid_is_aligned(&grid, &b));
    b = cnx_box_make(10, 0, 0, 310, 100, 64);
    assert_true(cnx_grid_is_aligned(&grid, &b));
    b.min[0] = 0;
    assert_false(cnx_grid_is_aligned(&grid, &b));
}

/* Reference model check of one boxgen call. */
static void check_boxgen(const cnx_grid *grid, const cnx_box *roi,
                         const int64_t task[3])
{
    cnx_box *boxes = NULL;
    size_t n = 0;
    cnx_box bounds = cnx_grid_bounds(grid);
    cnx_box clip = cnx_box_intersect(roi, &bounds);
    int64_t lo[3], hi[3], s[3];
    uint8_t *hits;

    assert_int_equal(cnx_boxgen(&boxes, &n, grid, roi, task), 0);
    cnx_box_size(&bounds, s);
    hits = calloc((size_t)(s[0] * s[1] * s[2]) + 1, 1);
    assert_non_null(hits);
    for (size_t i = 0; i < n; i++) {
        int64_t bs[3];
        assert_true(cnx_grid_is_aligned(grid, &boxes[i]));
        cnx_box_size(&boxes[i], bs);
        for (int a = 0; a < 3; a++)
            assert_true(bs[a] <= task[a]);
        /* Order: z-major, then y, then x. */
        if (i > 0) {
            const cnx_box *p = &boxes[i - 1];
            int64_t kp = (p->min[2] * 1000003 + p->min[1]) * 1000003 +
                         p->min[0];
            int64_t kb = (boxes[i].min[2] * 1000003 + boxes[i].min[1]) *
                             1000003 + boxes[i].min[0];
            assert_true(kb > kp);
        }
        for (int64_t z = boxes[i].min[2]; z < boxes[i].max[2]; z++)
            for (int64_t y = boxes[i].min[1]; y < boxes[i].max[1]; y++)
                for (int64_t x = boxes[i].min[0]; x < boxes[i].max[0]; x++)
                    hits[(x - bounds.min[0]) +
                         s[0] * ((y - bounds.min[1]) +
                                 s[1] * (z - bounds.min[2]))]++;
    }
    /* Expected coverage: every chunk the roi touches, whole. */
    cnx_grid_chunk_range(grid, &clip, lo, hi);
    for (int64_t z = bounds.min[2]; z < bounds.max[2]; z++)
        for (int64_t y = bounds.min[1]; y < bounds.max[1]; y++)
            for (int64_t x = bounds.min[0]; x < bounds.max[0]; x++) {
                int64_t c[3] = {(x - grid->offset[0]) / grid->chunk[0],
                                (y - grid->offset[1]) / grid->chunk[1],
                                (z - grid->offset[2]) / grid->chunk[2]};
                int inside = !cnx_box_empty(&clip);
                for (int a = 0; a < 3; a++)
                    inside = inside && c[a] >= lo[a] && c[a] < hi[a];
                assert_int_equal(hits[(x - bounds.min[0]) +
                                      s[0] * ((y - bounds.min[1]) +
                                              s[1] * (z - bounds.min[2]))],
                                 inside ? 1 : 0);
            }
    free(hits);
    free(boxes);
}

static void test_geom__boxgen_matches_reference_model(void **state)
{
    uint64_t rng = 42;
    (void)state;
    for (int trial = 0; trial < 200; trial++) {
        cnx_grid grid;
        cnx_box roi;
        int64_t task[3];
        for (int a = 0; a < 3; a++) {
            grid.offset[a] = (int64_t)(cnx_test_rand(&rng) % 7) - 3;
            grid.size[a] = 1 + (int64_t)(cnx_test_rand(&rng) % 40);
            grid.chunk[a] = 1 + (int64_t)(cnx_test_rand(&rng) % 9);
            task[a] = grid.chunk[a] * (1 + (int64_t)(cnx_test_rand(&rng) % 3));
            roi.min[a] = grid.offset[a] - 5 +
                         (int64_t)(cnx_test_rand(&rng) % (uint64_t)(grid.size[a] + 5));
            roi.max[a] = roi.min[a] + 1 +
                         (int64_t)(cnx_test_rand(&rng) % (uint64_t)(grid.size[a] + 5));
        }
        check_boxgen(&grid, &roi, task);
    }
}

static void test_geom__boxgen_is_independent_of_roi_origin(void **state)
{
    /* Two overlapping requests cut the shared chunks into identical tasks. */
    cnx_grid grid = {{0, 0, 0}, {1000, 1000, 1000}, {64, 64, 64}};
    int64_t task[3] = {128, 128, 128};
    cnx_box r1 = cnx_box_make(0, 0, 0, 512, 512, 512);
    cnx_box r2 = cnx_box_make(200, 200, 200, 700, 700, 700);
    cnx_box *b1, *b2;
    size_t n1, n2, shared = 0;
    (void)state;
    assert_int_equal(cnx_boxgen(&b1, &n1, &grid, &r1, task), 0);
    assert_int_equal(cnx_boxgen(&b2, &n2, &grid, &r2, task), 0);
    assert_int_equal(n1, 64);
    for (size_t i = 0; i < n2; i++) {
        for (size_t j = 0; j < n1; j++) {
            cnx_box in = cnx_box_intersect(&b2[i], &b1[j]);
            if (!cnx_box_empty(&in) && cnx_box_equal(&b2[i], &b1[j]))
                shared++;
        }
    }
    assert_true(shared > 0);
    free(b1);
    free(b2);
}

static void test_geom__boxgen_rejects_bad_task_size(void **state)
{
    cnx_grid grid = {{0, 0, 0}, {100, 100, 100}, {64, 64, 64}};
    cnx_box roi = cnx_box_make(0, 0, 0, 10, 10, 10);
    int64_t task[3] = {100, 64, 64};
    cnx_box *boxes;
    size_t n;
    (void)state;
    assert_int_equal(cnx_boxgen(&boxes, &n, &grid, &roi, task), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "multiple"));
    cnx_grid bad = {{0, 0, 0}, {100, 100, 100}, {0, 64, 64}};
    int64_t ok[3] = {64, 64, 64};
    assert_int_equal(cnx_boxgen(&boxes, &n, &bad, &roi, ok), CNX_EINVAL);
    roi = cnx_box_make(200, 200, 200, 300, 300, 300);
    assert_int_equal(cnx_boxgen(&boxes, &n, &grid, &roi, ok), 0);
    assert_int_equal(n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geom__box_basics),
        cmocka_unit_test(test_geom__grow_clips_halo_to_bounds),
        cmocka_unit_test(test_geom__format_and_parse_round_trip),
        cmocka_unit_test(test_geom__parse_rejects_malformed_names),
        cmocka_unit_test(test_geom__chunk_boxes_are_truncated_at_the_edge),
        cmocka_unit_test(test_geom__boxgen_matches_reference_model),
        cmocka_unit_test(test_geom__boxgen_is_independent_of_roi_origin),
        cmocka_unit_test(test_geom__boxgen_rejects_bad_task_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
