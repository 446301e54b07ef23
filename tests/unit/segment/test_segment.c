/*
 * test_segment.c - the segmentation kernel (cnx/segment.h) against
 * constructed volumes whose answer is known, and against cnx-synth ground
 * truth.
 *
 * Parameters: defaults, every key, and the exact one-line message for an
 * unknown key, a wrong type and a value out of range. Constructed volumes:
 * blobs behind membrane walls give exactly those segments; a uniform wall
 * of value w merges exactly when w is below merge_threshold (the edge
 * mean is then exactly w); a wall with a small hole does not merge, one
 * that is mostly hole does; sections never join across z and give each
 * section the partition it gets alone; min_size folds a small fragment
 * into the neighbour behind its lower wall; an all-membrane volume still
 * gets one segment (per section). Labels are numbered in raster order of
 * first voxels (checked on random volumes), and the same input gives the
 * same bytes. The membrane filter finds a dark line. A 96^3 cnx-synth
 * volume must score VI split and merge under 0.3 each.
 */
#include <math.h>

#include "cnx/error.h"
#include "cnx/metrics.h"
#include "cnx/segment.h"
#include "cnx/synth.h"
#include "cnx_test.h"

/* A boundary volume under construction. */
typedef struct vol {
    int64_t size[3];
    size_t n;
    float *b;
    uint32_t *labels;
    uint32_t nlabels;
} vol;

static vol vol_new(int64_t x, int64_t y, int64_t z, float fill)
{
    vol v = {{x, y, z}, (size_t)(x * y * z), NULL, NULL, 0};
    v.b = malloc(v.n * sizeof(*v.b));
    v.labels = malloc(v.n * sizeof(*v.labels));
    assert_non_null(v.b);
    assert_non_null(v.labels);
    for (size_t i = 0; i < v.n; i++)
        v.b[i] = fill;
    return v;
}

static void vol_free(vol *v)
{
    free(v->b);
    free(v->labels);
}

static size_t idx(const vol *v, int64_t x, int64_t y, int64_t z)
{
    return (size_t)(x + v->size[0] * (y + v->size[1] * z));
}

/* Set the box [x0, x1) x [y0, y1) x [z0, z1) to value. */
static void fill_box(vol *v, int64_t x0, int64_t x1, int64_t y0, int64_t y1,
                     int64_t z0, int64_t z1, float value)
{
    for (int64_t z = z0; z < z1; z++)
        for (int64_t y = y0; y < y1; y++)
            for (int64_t x = x0; x < x1; x++)
                v->b[idx(v, x, y, z)] = value;
}

static void run(vol *v, const cnx_segment_params *p)
{
    memset(v->labels, 0, v->n * sizeof(*v->labels));
    int rc = cnx_segment_volume(v->b, v->size, p, v->labels, &v->nlabels);
    if (rc != 0)
        fail_msg("cnx_segment_volume: %d %s", rc, cnx_error_last()->message);
}

static uint32_t label_at(const vol *v, int64_t x, int64_t y, int64_t z)
{
    return v->labels[idx(v, x, y, z)];
}

/* Every voxel of the box has label l. */
static void expect_box(const vol *v, int64_t x0, int64_t x1, int64_t y0,
                       int64_t y1, int64_t z0, int64_t z1, uint32_t l)
{
    for (int64_t z = z0; z < z1; z++)
        for (int64_t y = y0; y < y1; y++)
            for (int64_t x = x0; x < x1; x++)
                if (label_at(v, x, y, z) != l)
                    fail_msg("(%lld,%lld,%lld): label %u, want %u",
                             (long long)x, (long long)y, (long long)z,
                             label_at(v, x, y, z), l);
}

/* Labels are 1..nlabels, each used, first voxels in increasing order. */
static void expect_raster_numbering(const vol *v)
{
    uint32_t next = 1;
    for (size_t i = 0; i < v->n; i++) {
        uint32_t l = v->labels[i];
        if (l == 0 || l > next)
            fail_msg("voxel %zu: label %u before label %u was seen", i, l,
                     next);
        if (l == next)
            next++;
    }
    assert_int_equal(next - 1, v->nlabels);
}

/* A deterministic random boundary: smoothed noise, values in [0, 1]. */
static void fill_noise(vol *v, uint64_t seed)
{
    uint64_t rng = seed;
    float *tmp = malloc(v->n * sizeof(*tmp));
    assert_non_null(tmp);
    for (size_t i = 0; i < v->n; i++)
        tmp[i] = (float)(cnx_test_rand(&rng) >> 40) / (float)(1 << 24);
    /* Two passes of a 3-tap mean along x and y: blobs of a few voxels. */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t z = 0; z < v->size[2]; z++)
            for (int64_t y = 0; y < v->size[1]; y++)
                for (int64_t x = 0; x < v->size[0]; x++) {
                    int64_t xl = x > 0 ? x - 1 : x;
                    int64_t xr = x + 1 < v->size[0] ? x + 1 : x;
                    int64_t yl = y > 0 ? y - 1 : y;
                    int64_t yr = y + 1 < v->size[1] ? y + 1 : y;
                    const float *s = pass ? v->b : tmp;
                    float *d = pass ? tmp : v->b;
                    d[idx(v, x, y, z)] =
                        (s[idx(v, xl, y, z)] + s[idx(v, x, y, z)] +
                         s[idx(v, xr, y, z)] + s[idx(v, x, yl, z)] +
                         s[idx(v, x, yr, z)]) /
                        5.0f;
                }
    memcpy(v->b, tmp, v->n * sizeof(*tmp));
    free(tmp);
}

/* ---- parameters -------------------------------------------------------- */

static void test_segment__defaults(void **state)
{
    cnx_segment_params p, q;
    (void)state;
    memset(&p, 0xA5, sizeof(p));
    cnx_segment_params_default(&p);
    assert_int_equal(p.raw_input, 0);
    assert_int_equal(p.sections, 0);
    assert_true(p.filter_sigma == 1.5);
    assert_true(p.filter_ridge == 0.3);
    assert_true(p.filter_background == 25.0);
    assert_int_equal(p.seed_method, CNX_SEGMENT_SEEDS_DISTANCE);
    assert_int_equal(cnx_segment_params_check(&p), 0);
    /* NULL and {} are the defaults. */
    memset(&q, 0x5A, sizeof(q));
    assert_int_equal(cnx_segment_params_parse(&q, NULL), 0);
    assert_memory_equal(&p, &q, sizeof(p));
    memset(&q, 0x5A, sizeof(q));
    assert_int_equal(cnx_segment_params_parse(&q, "{}"), 0);
    assert_memory_equal(&p, &q, sizeof(p));
}

static void test_segment__parse_every_key(void **state)
{
    cnx_segment_params p;
    (void)state;
    assert_int_equal(
        cnx_segment_params_parse(
            &p, "{\"raw_input\":true,\"sections\":1,\"filter_sigma\":2,"
                "\"filter_ridge\":0.25,\"filter_background\":0,"
                "\"seed_min_distance\":5,\"seed_threshold\":0.75,"
                "\"seed_method\":\"minima\",\"merge_threshold\":0.125,"
                "\"min_size\":1000}"),
        0);
    assert_int_equal(p.raw_input, 1);
    assert_int_equal(p.sections, 1);
    assert_true(p.filter_sigma == 2.0);
    assert_true(p.filter_ridge == 0.25);
    assert_true(p.filter_background == 0.0);
    assert_int_equal(p.seed_min_distance, 5);
    assert_true(p.seed_threshold == 0.75);
    assert_int_equal(p.seed_method, CNX_SEGMENT_SEEDS_MINIMA);
    assert_true(p.merge_threshold == 0.125);
    assert_int_equal(p.min_size, 1000);
    assert_int_equal(cnx_segment_params_check(&p), 0);
    /* Booleans false and 0 too; the range ends are accepted. */
    assert_int_equal(cnx_segment_params_parse(
                         &p, "{\"raw_input\":false,\"sections\":0,"
                             "\"merge_threshold\":1,\"seed_min_distance\":0,"
                             "\"min_size\":2147483648}"),
                     0);
    assert_int_equal(p.raw_input, 0);
    assert_true(p.merge_threshold == 1.0);
    assert_int_equal(p.min_size, CNX_SEGMENT_MAX_VOXELS);
}

/* Each bad document, and the exact message it must give. */
static const struct {
    const char *json;
    const char *message;
} bad_params[] = {
    {"{\"merge_threshold\":1.5}",
     "segment: parameters.merge_threshold: must be a number in [0, 1]"},
    {"{\"merge_threshold\":\"0.5\"}",
     "segment: parameters.merge_threshold: must be a number in [0, 1]"},
    {"{\"merge_threshold\":-0.01}",
     "segment: parameters.merge_threshold: must be a number in [0, 1]"},
    {"{\"seed_threshold\":null}",
     "segment: parameters.seed_threshold: must be a number in [0, 1]"},
    {"{\"filter_sigma\":0.25}",
     "segment: parameters.filter_sigma: must be a number in [0.5, 8]"},
    {"{\"filter_ridge\":2}",
     "segment: parameters.filter_ridge: must be a number in [0, 1]"},
    {"{\"filter_background\":-1}",
     "segment: parameters.filter_background: must be a number in [0, 256]"},
    {"{\"min_size\":-1}",
     "segment: parameters.min_size: must be an integer in [0, 2147483648]"},
    {"{\"min_size\":10.5}",
     "segment: parameters.min_size: must be an integer in [0, 2147483648]"},
    {"{\"seed_min_distance\":65}",
     "segment: parameters.seed_min_distance: must be an integer in [0, 64]"},
    {"{\"sections\":2}",
     "segment: parameters.sections: must be a boolean (or 0 or 1)"},
    {"{\"raw_input\":\"yes\"}",
     "segment: parameters.raw_input: must be a boolean (or 0 or 1)"},
    {"{\"seed_method\":\"random\"}",
     "segment: parameters.seed_method: must be \"distance\" or \"minima\""},
    {"{\"merge_treshold\":0.5}",
     "segment: parameters: unknown key 'merge_treshold'"},
    {"[0.5]", "segment: parameters: must be an object"},
};

static void test_segment__parse_refuses_bad_values(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_params) / sizeof(bad_params[0]); i++) {
        cnx_segment_params p, before;
        cnx_segment_params_default(&p);
        p.min_size = 7; /* must survive a failed parse */
        before = p;
        int rc = cnx_segment_params_parse(&p, bad_params[i].json);
        if (rc != CNX_ESCHEMA)
            fail_msg("%s: rc %d", bad_params[i].json, rc);
        assert_string_equal(cnx_error_last()->message, bad_params[i].message);
        assert_int_equal(cnx_error_last()->retriable, 0);
        assert_memory_equal(&p, &before, sizeof(p));
    }
    cnx_segment_params p;
    assert_int_equal(cnx_segment_params_parse(&p, "{\"min_size\":"),
                     CNX_ESCHEMA);
    assert_non_null(strstr(cnx_error_last()->message, "malformed JSON"));
    assert_int_equal(cnx_segment_params_parse(&p, "{\"a\":1,\"a\":1}"),
                     CNX_ESCHEMA);
}

static void test_segment__check_names_the_field(void **state)
{
    cnx_segment_params p;
    (void)state;
    cnx_segment_params_default(&p);
    p.merge_threshold = NAN;
    assert_int_equal(cnx_segment_params_check(&p), CNX_EINVAL);
    assert_string_equal(cnx_error_last()->message,
                        "segment: merge_threshold: out of range");
    cnx_segment_params_default(&p);
    p.seed_method = (cnx_segment_seeds)7;
    assert_int_equal(cnx_segment_params_check(&p), CNX_EINVAL);
    assert_string_equal(cnx_error_last()->message,
                        "segment: seed_method: out of range");
    assert_int_equal(cnx_segment_params_check(NULL), CNX_EINVAL);
}

/* ---- the edge statistic ------------------------------------------------- */

static void test_segment__quantize_and_pair_value(void **state)
{
    (void)state;
    assert_int_equal(cnx_segment_quantize(0.0f), 0);
    assert_int_equal(cnx_segment_quantize(-3.0f), 0);
    assert_int_equal(cnx_segment_quantize(1.0f), 255);
    assert_int_equal(cnx_segment_quantize(7.0f), 255);
    assert_int_equal(cnx_segment_quantize(NAN), 255);
    assert_int_equal(cnx_segment_quantize(INFINITY), 255);
    assert_int_equal(cnx_segment_quantize(-INFINITY), 0);
    assert_int_equal(cnx_segment_quantize(0.5f), 128); /* 127.5 rounds up */
    /* Every uint8 boundary value survives v / 255 and back. */
    for (int v = 0; v < 256; v++)
        assert_int_equal(cnx_segment_quantize((float)v / 255.0f), v);
    assert_int_equal(cnx_segment_pair_value(0.2f, 0.8f), 204);
    assert_int_equal(cnx_segment_pair_value(0.8f, 0.2f), 204);
    assert_int_equal(cnx_segment_pair_value(0.0f, 0.0f), 0);
    assert_int_equal(cnx_segment_pair_value_q(7, 200), 200);
    assert_true(cnx_segment_edge_value(3 * 100, 3) == 100u << 16);
    assert_true(cnx_segment_edge_value(1, 3) == 21845);   /* floor(65536/3) */
    assert_true(cnx_segment_merge_level(0.5) == 8355840); /* 127.5 * 65536 */
    assert_true(cnx_segment_merge_level(1.0) == 255u << 16);
    assert_true(cnx_segment_merge_level(0.0) == 0);
}

/* ---- bad input --------------------------------------------------------- */

static void test_segment__refuses_bad_input(void **state)
{
    cnx_segment_params p;
    float b[8] = {0};
    uint8_t u[8] = {0};
    uint32_t labels[8], n;
    const int64_t ok[3] = {2, 2, 2};
    const int64_t zero[3] = {2, 0, 2}, neg[3] = {-1, 2, 2};
    const int64_t huge[3] = {1 << 20, 1 << 20, 1 << 20};
    const int64_t side[3] = {((int64_t)1 << 20) + 1, 1, 1};
    /* 2^31 voxels exactly, but 3 x 2050 x (2^20 + 2) padded. */
    const int64_t thin[3] = {1, 2048, (int64_t)1 << 20};
    (void)state;
    cnx_segment_params_default(&p);
    assert_int_equal(cnx_segment_volume(NULL, ok, &p, labels, &n), CNX_EINVAL);
    assert_int_equal(cnx_segment_volume(b, NULL, &p, labels, &n), CNX_EINVAL);
    assert_int_equal(cnx_segment_volume(b, ok, NULL, labels, &n), CNX_EINVAL);
    assert_int_equal(cnx_segment_volume(b, ok, &p, NULL, &n), CNX_EINVAL);
    assert_int_equal(cnx_segment_volume(b, ok, &p, labels, NULL), CNX_EINVAL);
    assert_int_equal(cnx_segment_volume(b, zero, &p, labels, &n), CNX_EINVAL);
    assert_string_equal(cnx_error_last()->message,
                        "segment: size[1] is 0, must be >= 1");
    assert_int_equal(cnx_segment_volume(b, neg, &p, labels, &n), CNX_EINVAL);
    /* Refused before anything is read or allocated. */
    assert_int_equal(cnx_segment_volume(b, huge, &p, labels, &n), CNX_ETOOBIG);
    assert_int_equal(cnx_segment_volume(b, side, &p, labels, &n), CNX_ETOOBIG);
    assert_int_equal(cnx_segment_boundary_u8(u, huge, &p, b), CNX_ETOOBIG);
    assert_int_equal(cnx_segment_boundary_f32(b, side, &p, b), CNX_ETOOBIG);
    assert_int_equal(cnx_segment_volume(b, thin, &p, labels, &n), CNX_ETOOBIG);
    assert_non_null(strstr(cnx_error_last()->message, "too thin"));
    assert_int_equal(cnx_segment_boundary_u8(NULL, ok, &p, b), CNX_EINVAL);
    assert_int_equal(cnx_segment_boundary_u8(u, ok, &p, NULL), CNX_EINVAL);
    assert_int_equal(cnx_segment_boundary_f32(NULL, ok, &p, b), CNX_EINVAL);
    p.min_size = -1;
    assert_int_equal(cnx_segment_volume(b, ok, &p, labels, &n), CNX_EINVAL);
    assert_int_equal(cnx_segment_boundary_u8(u, ok, &p, b), CNX_EINVAL);
    assert_int_equal(cnx_error_last()->retriable, 0);
}

/* ---- constructed volumes --------------------------------------------------
 */

/* Blobs behind full membrane walls: exactly those segments. */
static void test_segment__walls_separate_blobs(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(31, 12, 10, 0.0f);
    (void)state;
    cnx_segment_params_default(&p);
    /* Walls at x = 10 and x = 20 (two voxels thick, like synth). */
    fill_box(&v, 10, 12, 0, 12, 0, 10, 1.0f);
    fill_box(&v, 20, 22, 0, 12, 0, 10, 0.9f);
    run(&v, &p);
    assert_int_equal(v.nlabels, 3);
    expect_box(&v, 0, 10, 0, 12, 0, 10, 1);
    expect_box(&v, 12, 20, 0, 12, 0, 10, 2);
    expect_box(&v, 22, 31, 0, 12, 0, 10, 3);
    /* Without the walls: one segment. */
    fill_box(&v, 0, 31, 0, 12, 0, 10, 0.0f);
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    expect_box(&v, 0, 31, 0, 12, 0, 10, 1);
    vol_free(&v);
}

/*
 * Two seeds (value-0 cubes, the only voxels under seed_threshold) on a
 * plateau of 0.2, split by a one-voxel wall of value w at x = 10: every
 * voxel pair between the two basins touches the wall, so the edge mean is
 * exactly quantize(w) and merging happens exactly when that is below the
 * threshold.
 */
static void wall_volume(vol *v, float w)
{
    for (size_t i = 0; i < v->n; i++)
        v->b[i] = 0.2f;
    fill_box(v, 4, 6, 4, 6, 4, 6, 0.0f);
    fill_box(v, 15, 17, 4, 6, 4, 6, 0.0f);
    fill_box(v, 10, 11, 0, 10, 0, 10, w);
}

static void test_segment__merge_threshold_is_exact(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(21, 10, 10, 0.0f);
    (void)state;
    cnx_segment_params_default(&p);
    p.seed_method = CNX_SEGMENT_SEEDS_MINIMA;
    p.seed_threshold = 0.1;
    p.min_size = 0;
    wall_volume(&v, 0.4f); /* quantised: 102 */
    p.merge_threshold = 102.0 / 255.0 + 0.001;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    p.merge_threshold = 102.0 / 255.0 - 0.001;
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    /* Equal to the level is not below it. */
    p.merge_threshold = 102.0 / 255.0;
    assert_true(cnx_segment_merge_level(p.merge_threshold) == 102u << 16);
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    expect_box(&v, 0, 10, 0, 10, 0, 10, 1);
    expect_box(&v, 11, 21, 0, 10, 0, 10, 2);
    /* Without the wall the plateau (0.2 = 51) itself is the edge. */
    wall_volume(&v, 0.2f);
    p.merge_threshold = 0.21;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    p.merge_threshold = 0.19;
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    /* Threshold 0 never merges; 1 merges all but a full membrane. */
    p.merge_threshold = 0.0;
    wall_volume(&v, 0.2f);
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    p.merge_threshold = 1.0;
    wall_volume(&v, 0.99f);
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    wall_volume(&v, 1.0f);
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    vol_free(&v);
}

/*
 * A membrane wall with a hole: a 2x2 hole in a 10x10 wall leaves the edge
 * mean near the membrane's (no merge at 0.8); a wall reduced to one row
 * is mostly hole (merge at 0.5).
 */
static void test_segment__wall_with_gap(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(21, 10, 10, 0.0f);
    (void)state;
    cnx_segment_params_default(&p);
    p.seed_method = CNX_SEGMENT_SEEDS_MINIMA;
    p.seed_threshold = 0.1;
    p.min_size = 0;
    wall_volume(&v, 1.0f);
    fill_box(&v, 10, 11, 4, 6, 4, 6, 0.2f);
    p.merge_threshold = 0.8;
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    expect_box(&v, 0, 10, 0, 10, 0, 10, 1);
    expect_box(&v, 11, 21, 0, 10, 0, 10, 2);
    wall_volume(&v, 1.0f);
    fill_box(&v, 10, 11, 1, 10, 0, 10, 0.2f);
    p.merge_threshold = 0.5;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    vol_free(&v);
}

/*
 * A three-voxel layer between regions A (x < 10) and B (x > 14), behind a
 * wall of 0.9 towards A and 0.7 towards B: kept with min_size 0 (walls
 * above the merge threshold), folded into B (its lower wall) when it is
 * under min_size.
 */
static void test_segment__min_size_joins_lowest_neighbour(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(26, 12, 12, 0.0f);
    (void)state;
    cnx_segment_params_default(&p);
    p.seed_method = CNX_SEGMENT_SEEDS_MINIMA;
    p.seed_threshold = 0.1;
    p.merge_threshold = 0.5;
    p.min_size = 0;
    fill_box(&v, 10, 11, 0, 12, 0, 12, 0.9f);
    fill_box(&v, 14, 15, 0, 12, 0, 12, 0.7f);
    run(&v, &p);
    assert_int_equal(v.nlabels, 3);
    expect_box(&v, 0, 10, 0, 12, 0, 12, 1);
    expect_box(&v, 11, 14, 0, 12, 0, 12, 2);
    expect_box(&v, 15, 26, 0, 12, 0, 12, 3);
    p.min_size = 3 * 12 * 12 + 12 * 12 + 1; /* even with a wall added */
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    expect_box(&v, 0, 10, 0, 12, 0, 12, 1);
    expect_box(&v, 11, 26, 0, 12, 0, 12, 2);
    /* Swap the walls: now it joins A. */
    fill_box(&v, 10, 11, 0, 12, 0, 12, 0.7f);
    fill_box(&v, 14, 15, 0, 12, 0, 12, 0.9f);
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    expect_box(&v, 0, 14, 0, 12, 0, 12, 1);
    expect_box(&v, 15, 26, 0, 12, 0, 12, 2);
    vol_free(&v);
}

/* Nothing below the seed threshold: one segment, one per section. */
static void test_segment__all_membrane_gets_one_segment(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(7, 5, 3, 1.0f);
    (void)state;
    cnx_segment_params_default(&p);
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    expect_box(&v, 0, 7, 0, 5, 0, 3, 1);
    p.sections = 1;
    run(&v, &p);
    assert_int_equal(v.nlabels, 3);
    for (int z = 0; z < 3; z++)
        expect_box(&v, 0, 7, 0, 5, z, z + 1, (uint32_t)z + 1);
    vol_free(&v);
    /* One voxel. */
    v = vol_new(1, 1, 1, 0.5f);
    p.sections = 0;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    assert_int_equal(v.labels[0], 1);
    vol_free(&v);
}

/* sections: no segment spans two z; each section as if alone. */
static void test_segment__sections_are_independent(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(40, 36, 5, 0.0f), one = vol_new(40, 36, 1, 0.0f);
    (void)state;
    cnx_segment_params_default(&p);
    p.sections = 1;
    /* Uniform: exactly one segment per section. */
    run(&v, &p);
    assert_int_equal(v.nlabels, 5);
    for (int z = 0; z < 5; z++)
        expect_box(&v, 0, 40, 0, 36, z, z + 1, (uint32_t)z + 1);
    p.sections = 0;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);

    /* Random sections, segmented together and one at a time. */
    p.sections = 1;
    p.seed_threshold = 0.6;
    p.merge_threshold = 0.45;
    p.min_size = 10;
    fill_noise(&v, 11);
    run(&v, &p);
    expect_raster_numbering(&v);
    assert_true(v.nlabels > 10);
    for (int64_t z = 0; z < 5; z++) {
        const size_t plane = 40 * 36, at = (size_t)z * plane;
        uint32_t lo = v.labels[at], hi = 0;
        memcpy(one.b, v.b + at, plane * sizeof(float));
        run(&one, &p);
        for (size_t i = 0; i < plane; i++) {
            /* Numbered in raster order in both: an offset apart. */
            if (v.labels[at + i] != one.labels[i] + lo - 1)
                fail_msg("section %lld voxel %zu: %u vs %u + %u", (long long)z,
                         i, v.labels[at + i], one.labels[i], lo - 1);
            hi = v.labels[at + i] > hi ? v.labels[at + i] : hi;
        }
        if (z + 1 < 5)
            assert_int_equal(v.labels[at + plane], hi + 1);
    }
    vol_free(&v);
    vol_free(&one);
}

/* Same input, same bytes; u8 and float input agree; raster numbering. */
static void test_segment__deterministic_raster_numbered(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(37, 29, 23, 0.0f);
    uint32_t *first = malloc(v.n * sizeof(*first)), n1;
    uint8_t *u = malloc(v.n);
    float *b = malloc(v.n * sizeof(*b));
    (void)state;
    assert_true(first && u && b);
    for (int method = 0; method < 2; method++) {
        cnx_segment_params_default(&p);
        p.seed_method = (cnx_segment_seeds)method;
        p.seed_threshold = 0.6;
        p.merge_threshold = 0.45;
        p.min_size = 20;
        fill_noise(&v, 5 + (uint64_t)method);
        run(&v, &p);
        expect_raster_numbering(&v);
        assert_true(v.nlabels > 5);
        memcpy(first, v.labels, v.n * sizeof(*first));
        n1 = v.nlabels;
        run(&v, &p);
        assert_int_equal(v.nlabels, n1);
        assert_memory_equal(first, v.labels, v.n * sizeof(*first));
        /* The same map through uint8 and boundary_u8. */
        for (size_t i = 0; i < v.n; i++)
            u[i] = (uint8_t)cnx_segment_quantize(v.b[i]);
        assert_int_equal(cnx_segment_boundary_u8(u, v.size, &p, v.b), 0);
        run(&v, &p);
        assert_memory_equal(first, v.labels, v.n * sizeof(*first));
        assert_int_equal(cnx_segment_boundary_f32(v.b, v.size, &p, b), 0);
        assert_memory_equal(b, v.b, v.n * sizeof(*b));
    }
    free(b);
    free(u);
    free(first);
    vol_free(&v);
}

/* boundary_f32 without raw_input clamps, NaN is a membrane. */
static void test_segment__boundary_f32_clamps(void **state)
{
    cnx_segment_params p;
    const float in[6] = {-1.0f, 0.25f, 2.0f, NAN, INFINITY, 1.0f};
    const float want[6] = {0.0f, 0.25f, 1.0f, 1.0f, 1.0f, 1.0f};
    const int64_t size[3] = {6, 1, 1};
    float out[6];
    (void)state;
    cnx_segment_params_default(&p);
    assert_int_equal(cnx_segment_boundary_f32(in, size, &p, out), 0);
    assert_memory_equal(out, want, sizeof(out));
}

/*
 * The membrane filter: a bright image with a dark vertical line (and a
 * darker corner, the shading it should discount): high on the line, low
 * elsewhere, in [0, 1]; the same twice; a flat image gives 0.
 */
static void test_segment__membrane_filter_finds_dark_line(void **state)
{
    cnx_segment_params p;
    const int64_t size[3] = {64, 48, 2};
    const size_t n = 64 * 48 * 2;
    uint8_t *img = malloc(n);
    float *b = malloc(n * sizeof(*b)), *b2 = malloc(n * sizeof(*b2));
    (void)state;
    assert_true(img && b && b2);
    cnx_segment_params_default(&p);
    p.raw_input = 1;
    p.sections = 1;
    for (int64_t z = 0; z < 2; z++)
        for (int64_t y = 0; y < 48; y++)
            for (int64_t x = 0; x < 64; x++) {
                int v = 200 - (int)(x / 4) - (int)(y / 4); /* shading */
                if (x == 30 || x == 31)
                    v = 60;
                img[x + 64 * (y + 48 * z)] = (uint8_t)v;
            }
    assert_int_equal(cnx_segment_boundary_u8(img, size, &p, b), 0);
    for (int64_t z = 0; z < 2; z++)
        for (int64_t y = 0; y < 48; y++) {
            const float *row = b + 64 * (y + 48 * z);
            for (int64_t x = 0; x < 64; x++)
                assert_true(row[x] >= 0.0f && row[x] <= 1.0f);
            assert_true(row[30] > 0.8f && row[31] > 0.8f);
            assert_true(row[5] < 0.3f && row[58] < 0.3f);
        }
    assert_int_equal(cnx_segment_boundary_u8(img, size, &p, b2), 0);
    assert_memory_equal(b, b2, n * sizeof(*b));
    /* 3D (no sections) runs the 3x3 Hessian path: line still found. */
    p.sections = 0;
    assert_int_equal(cnx_segment_boundary_u8(img, size, &p, b2), 0);
    assert_true(b2[30 + 64 * 20] > 0.8f && b2[5 + 64 * 20] < 0.3f);
    memset(img, 128, n);
    assert_int_equal(cnx_segment_boundary_u8(img, size, &p, b), 0);
    for (size_t i = 0; i < n; i++)
        assert_true(b[i] == 0.0f);
    free(b2);
    free(b);
    free(img);
}

/* ---- synthetic data with ground truth ------------------------------------ */

static void test_segment__synth_volume_scores(void **state)
{
    cnx_synth_params sp;
    cnx_synth *synth = NULL;
    cnx_segment_params p;
    cnx_seg_scores sc;
    int64_t size[3] = {96, 96, 96};
    const size_t n = 96 * 96 * 96;
    float *b = malloc(n * sizeof(*b));
    uint32_t *labels = malloc(n * sizeof(*labels)), nlabels;
    uint64_t *seg = malloc(n * sizeof(*seg));
    (void)state;
    assert_true(b && labels && seg);
    cnx_synth_params_init(&sp);
    sp.shape[0] = sp.shape[1] = sp.shape[2] = 96;
    sp.seed = 3;
    assert_int_equal(cnx_synth_generate(&synth, &sp), 0);
    cnx_segment_params_default(&p);
    assert_int_equal(
        cnx_segment_boundary_u8(synth->boundary->data, size, &p, b), 0);
    assert_int_equal(cnx_segment_volume(b, size, &p, labels, &nlabels), 0);
    for (size_t i = 0; i < n; i++)
        seg[i] = labels[i];
    assert_int_equal(cnx_seg_scores_u64(seg, synth->gt->data, n, &sc), 0);
    print_message("synth 96^3 seed 3: %u segments for %llu objects, VI "
                  "split %.3f merge %.3f, ARE %.3f\n",
                  nlabels, (unsigned long long)synth->nobjects, sc.vi_split,
                  sc.vi_merge, sc.are);
    assert_true(sc.vi_split < 0.3);
    assert_true(sc.vi_merge < 0.3);
    cnx_synth_free(synth);
    free(seg);
    free(labels);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment__defaults),
        cmocka_unit_test(test_segment__parse_every_key),
        cmocka_unit_test(test_segment__parse_refuses_bad_values),
        cmocka_unit_test(test_segment__check_names_the_field),
        cmocka_unit_test(test_segment__quantize_and_pair_value),
        cmocka_unit_test(test_segment__refuses_bad_input),
        cmocka_unit_test(test_segment__walls_separate_blobs),
        cmocka_unit_test(test_segment__merge_threshold_is_exact),
        cmocka_unit_test(test_segment__wall_with_gap),
        cmocka_unit_test(test_segment__min_size_joins_lowest_neighbour),
        cmocka_unit_test(test_segment__all_membrane_gets_one_segment),
        cmocka_unit_test(test_segment__sections_are_independent),
        cmocka_unit_test(test_segment__deterministic_raster_numbered),
        cmocka_unit_test(test_segment__boundary_f32_clamps),
        cmocka_unit_test(test_segment__membrane_filter_finds_dark_line),
        cmocka_unit_test(test_segment__synth_volume_scores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
