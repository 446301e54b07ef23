/*
 * 2D connected components against a naive reference model: a breadth-first
 * flood fill started at every unlabelled non-zero pixel in raster order,
 * which numbers components by their first pixel by construction. Random
 * binary images of many densities (around the percolation threshold, where
 * components are largest and most tangled) and shapes, every pixel type,
 * and patterns that stress late merges and the label table's growth.
 */
#include "cnx_test.h"

#include "cnx/ccl.h"
#include "cnx/error.h"

/* The reference: flood fill with an explicit queue. */
static uint32_t reference_ccl(uint32_t *labels, const uint8_t *fg, int64_t w,
                              int64_t h)
{
    const size_t n = (size_t)(w * h);
    size_t *queue = malloc(n * sizeof(*queue));
    uint32_t next = 0;
    assert_non_null(queue);
    memset(labels, 0, n * sizeof(*labels));
    for (size_t start = 0; start < n; start++) {
        size_t head = 0, tail = 0;
        if (!fg[start] || labels[start] != 0)
            continue;
        labels[start] = ++next;
        queue[tail++] = start;
        while (head < tail) {
            size_t p = queue[head++];
            int64_t x = (int64_t)(p % (size_t)w), y = (int64_t)(p / (size_t)w);
            const int64_t nb[4][2] = {
                {x - 1, y}, {x + 1, y}, {x, y - 1}, {x, y + 1}};
            for (int k = 0; k < 4; k++) {
                size_t q;
                if (nb[k][0] < 0 || nb[k][0] >= w || nb[k][1] < 0 ||
                    nb[k][1] >= h)
                    continue;
                q = (size_t)(nb[k][1] * w + nb[k][0]);
                if (fg[q] && labels[q] == 0) {
                    labels[q] = next;
                    queue[tail++] = q;
                }
            }
        }
    }
    free(queue);
    return next;
}

/* Label fg (given as pixels of dtype) and compare with the reference. */
static void check_against_reference(const uint8_t *fg, int64_t w, int64_t h,
                                    cnx_dtype dtype, uint64_t *seed)
{
    const size_t n = (size_t)(w * h);
    const size_t esize = cnx_dtype_size(dtype);
    uint8_t *px = malloc(n * esize);
    uint32_t *got = malloc(n * sizeof(*got));
    uint32_t *want = malloc(n * sizeof(*want));
    uint32_t count = 12345, want_count;
    assert_non_null(px);
    assert_non_null(got);
    assert_non_null(want);
    /* Non-zero pixels get arbitrary non-zero values: only zero matters. */
    for (size_t i = 0; i < n; i++) {
        uint64_t v = fg[i] ? (cnx_test_rand(seed) | 1) : 0;
        switch (dtype) {
        case CNX_DT_UINT8:
            px[i] = (uint8_t)v;
            break;
        case CNX_DT_UINT16:
            ((uint16_t *)px)[i] = (uint16_t)v;
            break;
        case CNX_DT_UINT32:
            ((uint32_t *)px)[i] = (uint32_t)v;
            break;
        default:
            ((uint64_t *)px)[i] = v;
            break;
        }
    }
    want_count = reference_ccl(want, fg, w, h);
    assert_int_equal(cnx_ccl2d(got, &count, px, dtype, w, h), 0);
    assert_int_equal(count, want_count);
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i])
            fail_msg("%lldx%lld: pixel %zu: label %u, reference %u",
                     (long long)w, (long long)h, i, got[i], want[i]);
    }
    free(px);
    free(got);
    free(want);
}

static void test_ccl__random_images_match_flood_fill(void **state)
{
    static const int64_t sizes[][2] = {
        {1, 1},   {1, 40},  {40, 1},  {2, 2},     {3, 3},     {7, 13},
        {64, 64}, {255, 3}, {3, 255}, {129, 130}, {300, 301},
    };
    static const double densities[] = {0.0,  0.02, 0.1, 0.3,  0.45, 0.55,
                                       0.59, 0.62, 0.7, 0.85, 0.97, 1.0};
    static const cnx_dtype types[] = {CNX_DT_UINT8, CNX_DT_UINT16,
                                      CNX_DT_UINT32, CNX_DT_UINT64};
    uint64_t seed = 42;
    (void)state;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        const int64_t w = sizes[s][0], h = sizes[s][1];
        uint8_t *fg = malloc((size_t)(w * h));
        assert_non_null(fg);
        for (size_t d = 0; d < sizeof(densities) / sizeof(densities[0]); d++) {
            const uint64_t cut = (uint64_t)(densities[d] * 1048576.0);
            for (int rep = 0; rep < 3; rep++) {
                for (int64_t i = 0; i < w * h; i++)
                    fg[i] = (cnx_test_rand(&seed) & 0xfffff) < cut;
                check_against_reference(fg, w, h, types[(d + (size_t)rep) % 4],
                                        &seed);
            }
        }
        free(fg);
    }
}

static void test_ccl__late_merges_and_raster_numbering(void **state)
{
    /*
     * A comb whose teeth meet only at the bottom row (every tooth starts as
     * its own provisional label), a spiral, and components whose first
     * pixel order differs from their leftmost pixel order.
     */
    const int64_t w = 41, h = 41;
    uint8_t *fg = calloc((size_t)(w * h), 1);
    uint64_t seed = 5;
    (void)state;
    assert_non_null(fg);
    for (int64_t x = 0; x < w; x += 2)
        for (int64_t y = 0; y < h - 1; y++)
            fg[y * w + x] = 1;
    for (int64_t x = 0; x < w; x++)
        fg[(h - 1) * w + x] = 1;
    check_against_reference(fg, w, h, CNX_DT_UINT8, &seed);

    memset(fg, 0, (size_t)(w * h));
    /* Square spiral, walls two pixels apart. */
    {
        int64_t x0 = 0, y0 = 0, x1 = w - 1, y1 = h - 1;
        while (x0 <= x1 && y0 <= y1) {
            for (int64_t x = x0; x <= x1; x++)
                fg[y0 * w + x] = 1;
            for (int64_t y = y0; y <= y1; y++)
                fg[y * w + x1] = 1;
            for (int64_t x = x0; x <= x1; x++)
                fg[y1 * w + x] = 1;
            for (int64_t y = y0 + 2; y <= y1; y++)
                fg[y * w + x0] = 1;
            if (x0 + 2 < x1)
                fg[(y0 + 2) * w + x0 + 1] = 1;
            x0 += 2;
            y0 += 2;
            x1 -= 2;
            y1 -= 2;
        }
    }
    check_against_reference(fg, w, h, CNX_DT_UINT16, &seed);

    /* Two components: a "U" whose right arm starts first in raster order. */
    {
        const uint8_t pic[5 * 6] = {
            0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 1,
            0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1, 0,
        };
        uint32_t got[30], count;
        assert_int_equal(cnx_ccl2d(got, &count, pic, CNX_DT_UINT8, 6, 5), 0);
        assert_int_equal(count, 2);
        assert_int_equal(got[4], 1);  /* first pixel of the U */
        assert_int_equal(got[6], 1);  /* its left arm, merged late */
        assert_int_equal(got[14], 2); /* the dot inside */
        check_against_reference(pic, 6, 5, CNX_DT_UINT8, &seed);
    }
    free(fg);
}

static void test_ccl__checkerboard_has_one_component_per_pixel(void **state)
{
    /* 4-connectivity: diagonal neighbours are separate. The worst case for
     * the label table (w*h/2 components), which has to grow many times. */
    const int64_t w = 1001, h = 999;
    uint8_t *px = malloc((size_t)(w * h));
    uint32_t *labels = malloc((size_t)(w * h) * sizeof(*labels));
    uint32_t count, next = 0;
    (void)state;
    assert_non_null(px);
    assert_non_null(labels);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            px[y * w + x] = (uint8_t)((x + y) % 2 == 0);
    assert_int_equal(cnx_ccl2d(labels, &count, px, CNX_DT_UINT8, w, h), 0);
    assert_int_equal(count, (uint32_t)((w * h + 1) / 2));
    for (int64_t i = 0; i < w * h; i++)
        assert_int_equal(labels[i], px[i] ? ++next : 0);
    free(px);
    free(labels);
}

static void test_ccl__refuses_bad_arguments(void **state)
{
    uint8_t px[4] = {1, 0, 0, 1};
    uint32_t labels[4], count;
    float fpx[4] = {0};
    (void)state;
    assert_int_equal(cnx_ccl2d(labels, &count, px, CNX_DT_UINT8, 0, 4),
                     CNX_EINVAL);
    assert_int_equal(cnx_ccl2d(labels, &count, px, CNX_DT_UINT8, 2, -1),
                     CNX_EINVAL);
    assert_int_equal(cnx_ccl2d(labels, &count, px, CNX_DT_UINT8,
                               (int64_t)1 << 20, (int64_t)1 << 13),
                     CNX_EINVAL);
    assert_int_equal(cnx_ccl2d(labels, &count, fpx, CNX_DT_FLOAT32, 2, 2),
                     CNX_EINVAL);
    assert_int_equal(cnx_ccl2d(labels, &count, px, CNX_DT_UINT8, 2, 2), 0);
    assert_int_equal(count, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ccl__random_images_match_flood_fill),
        cmocka_unit_test(test_ccl__late_merges_and_raster_numbering),
        cmocka_unit_test(test_ccl__checkerboard_has_one_component_per_pixel),
        cmocka_unit_test(test_ccl__refuses_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
