/*
 * test_segment.c - the segmentation kernel (cnx/segment.h) against
 * constructed volumes whose answer is known, and against cnx-synth ground
 * truth.
 *
 * Parameters (kernel version 2: lengths in nm at a resolution, a mode):
 * defaults, every key, and the exact one-line message for an unknown key,
 * a wrong type, a value out of range, a bad mode and each voxel-unit key
 * of kernel version 1; the check's voxel limits at a given resolution;
 * the mode AUTO stands for; the voxel counts (min size, halo) derived from
 * nm, the halo against hand-computed values. Constructed volumes: blobs
 * behind membrane walls give exactly those segments; a uniform wall of
 * value w merges exactly when w is below merge_threshold (the edge mean is
 * then exactly w); a wall with a small hole does not merge, one that is
 * mostly hole does; 2D sections never join across z and give each section
 * the partition it gets alone, while SECTIONS seeds and floods per section
 * but agglomerates across z; min_size_nm3 folds a small fragment into the
 * neighbour behind its lower wall, at the voxel count its resolution
 * gives; an all-membrane volume still gets one segment (per 2D section).
 * The same voxels at a doubled resolution with doubled lengths give the
 * same bytes. Labels are numbered in raster order of first voxels (checked
 * on random volumes), and the same input gives the same bytes. The
 * membrane filter finds a dark line. A 96^3 cnx-synth volume must score VI
 * split and merge under 0.3 each, and an interior chunk segmented with
 * cnx_segment_halo's context must partition its voxels as the whole
 * volume does, up to a small measured fraction. The graph agglomeration
 * (seg__agglomerate_graph: merges through an edge table, a merge costing
 * the absorbed region's degree) takes, on random graphs with hubs, the
 * decisions of a plain reference written from the rules of cnx/segment.h
 * (steps 4 and 5: lowest (value, pair) first, combined sums, the lower id
 * kept; cleanup smallest first along the lowest (value, neighbour)).
 */
#include <math.h>

#include "cnx/error.h"
#include "cnx/metrics.h"
#include "cnx/segjoin.h"
#include "cnx/segment_io.h"
#include "cnx/synth.h"
#include "cnx_test.h"
#include "kernels/segment_int.h"

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
    for (int i = 0; i < 3; i++)
        assert_true(p.resolution[i] == 8.0);
    assert_int_equal(p.raw_input, 0);
    assert_int_equal(p.mode, CNX_SEGMENT_MODE_AUTO);
    assert_true(p.filter_sigma_nm == 6.0);
    assert_true(p.filter_ridge == 0.3);
    assert_true(p.filter_background_nm == 100.0);
    assert_true(p.seed_distance_nm == 32.0);
    assert_true(p.seed_threshold == 0.5);
    assert_int_equal(p.seed_method, CNX_SEGMENT_SEEDS_DISTANCE);
    assert_true(p.merge_threshold == 0.55);
    assert_true(p.min_size_nm3 == 1e6);
    assert_int_equal(cnx_segment_params_check(&p), 0);
    /* At 8 nm: isotropic 3D, a seed window of 4 voxels, 1953 voxels
     * (1953.125) at least. */
    assert_int_equal(cnx_segment_mode_of(&p), CNX_SEGMENT_MODE_3D);
    assert_int_equal(cnx_segment_min_voxels(&p), 1953);
    assert_int_equal(cnx_segment_halo(&p), 16);
    /* NULL and {} are the defaults. */
    memset(&q, 0x5A, sizeof(q));
    assert_int_equal(cnx_segment_params_parse(&q, NULL), 0);
    assert_memory_equal(&p, &q, sizeof(p));
    memset(&q, 0x5A, sizeof(q));
    assert_int_equal(cnx_segment_params_parse(&q, "{}"), 0);
    assert_memory_equal(&p, &q, sizeof(p));
}

/* cnx_segment_params_at: defaults, the JSON, the resolution, the check. */
static void test_segment__params_at_resolution(void **state)
{
    static const double res[3] = {4, 4, 40};
    cnx_segment_params p, before;
    (void)state;
    assert_int_equal(
        cnx_segment_params_at(&p, "{\"seed_distance_nm\":24}", res), 0);
    assert_memory_equal(p.resolution, res, sizeof(res));
    assert_true(p.seed_distance_nm == 24.0);
    assert_true(p.merge_threshold == 0.55); /* a default */
    before = p;
    /* 300 nm at 4 nm is 75 voxels, over 64: the check, EINVAL */
    assert_int_equal(
        cnx_segment_params_at(&p, "{\"seed_distance_nm\":300}", res),
        CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "seed_distance_nm"));
    assert_memory_equal(&p, &before, sizeof(p));
    /* a parse error keeps its code */
    assert_int_equal(cnx_segment_params_at(&p, "{\"min_size\":1}", res),
                     CNX_ESCHEMA);
    assert_memory_equal(&p, &before, sizeof(p));
}

static void test_segment__parse_every_key(void **state)
{
    static const struct {
        const char *name;
        cnx_segment_mode mode;
    } modes[] = {{"auto", CNX_SEGMENT_MODE_AUTO},
                 {"3d", CNX_SEGMENT_MODE_3D},
                 {"sections", CNX_SEGMENT_MODE_SECTIONS},
                 {"2d", CNX_SEGMENT_MODE_2D}};
    cnx_segment_params p;
    char json[64];
    (void)state;
    assert_int_equal(
        cnx_segment_params_parse(
            &p, "{\"raw_input\":true,\"mode\":\"2d\",\"filter_sigma_nm\":12,"
                "\"filter_ridge\":0.25,\"filter_background_nm\":0,"
                "\"seed_distance_nm\":40,\"seed_threshold\":0.75,"
                "\"seed_method\":\"minima\",\"merge_threshold\":0.125,"
                "\"min_size_nm3\":512000}"),
        0);
    assert_int_equal(p.raw_input, 1);
    assert_int_equal(p.mode, CNX_SEGMENT_MODE_2D);
    assert_true(p.filter_sigma_nm == 12.0);
    assert_true(p.filter_ridge == 0.25);
    assert_true(p.filter_background_nm == 0.0);
    assert_true(p.seed_distance_nm == 40.0);
    assert_true(p.seed_threshold == 0.75);
    assert_int_equal(p.seed_method, CNX_SEGMENT_SEEDS_MINIMA);
    assert_true(p.merge_threshold == 0.125);
    assert_true(p.min_size_nm3 == 512000.0);
    /* resolution is not a key: the defaults', set by the caller later */
    for (int i = 0; i < 3; i++)
        assert_true(p.resolution[i] == 8.0);
    assert_int_equal(cnx_segment_params_check(&p), 0);
    assert_int_equal(cnx_segment_min_voxels(&p), 1000);
    /* Every mode by name. */
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        snprintf(json, sizeof(json), "{\"mode\":\"%s\"}", modes[i].name);
        assert_int_equal(cnx_segment_params_parse(&p, json), 0);
        assert_int_equal(p.mode, modes[i].mode);
    }
    /* Booleans false and 0 too; the range ends are accepted. */
    assert_int_equal(cnx_segment_params_parse(
                         &p, "{\"raw_input\":false,\"mode\":\"auto\","
                             "\"merge_threshold\":1,\"seed_distance_nm\":0,"
                             "\"filter_sigma_nm\":1,"
                             "\"filter_background_nm\":100000,"
                             "\"min_size_nm3\":1e15}"),
                     0);
    assert_int_equal(p.raw_input, 0);
    assert_true(p.merge_threshold == 1.0);
    assert_true(p.seed_distance_nm == 0.0);
    assert_true(p.filter_sigma_nm == 1.0);
    assert_true(p.filter_background_nm == 1e5);
    assert_true(p.min_size_nm3 == 1e15);
    assert_int_equal(cnx_segment_min_voxels(&p), CNX_SEGMENT_MAX_VOXELS);
    /* (the filter's voxel limits apply to raw input only) */
    assert_int_equal(cnx_segment_params_check(&p), 0);
    assert_int_equal(cnx_segment_params_parse(
                         &p, "{\"filter_sigma_nm\":1000,\"raw_input\":0,"
                             "\"seed_distance_nm\":10000}"),
                     0);
    assert_true(p.filter_sigma_nm == 1000.0);
    assert_true(p.seed_distance_nm == 1e4);
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
    {"{\"filter_sigma_nm\":0.5}",
     "segment: parameters.filter_sigma_nm: must be a number in [1, 1000]"},
    {"{\"filter_sigma_nm\":1000.5}",
     "segment: parameters.filter_sigma_nm: must be a number in [1, 1000]"},
    {"{\"filter_ridge\":2}",
     "segment: parameters.filter_ridge: must be a number in [0, 1]"},
    {"{\"filter_background_nm\":-1}",
     "segment: parameters.filter_background_nm: must be a number in "
     "[0, 100000]"},
    {"{\"filter_background_nm\":100001}",
     "segment: parameters.filter_background_nm: must be a number in "
     "[0, 100000]"},
    {"{\"seed_distance_nm\":-0.5}",
     "segment: parameters.seed_distance_nm: must be a number in [0, 10000]"},
    {"{\"seed_distance_nm\":10001}",
     "segment: parameters.seed_distance_nm: must be a number in [0, 10000]"},
    {"{\"seed_distance_nm\":true}",
     "segment: parameters.seed_distance_nm: must be a number in [0, 10000]"},
    {"{\"min_size_nm3\":-1}",
     "segment: parameters.min_size_nm3: must be a number in [0, 1e+15]"},
    {"{\"min_size_nm3\":2e15}",
     "segment: parameters.min_size_nm3: must be a number in [0, 1e+15]"},
    {"{\"min_size_nm3\":\"64\"}",
     "segment: parameters.min_size_nm3: must be a number in [0, 1e+15]"},
    {"{\"raw_input\":\"yes\"}",
     "segment: parameters.raw_input: must be a boolean (or 0 or 1)"},
    {"{\"mode\":\"isotropic\"}", "segment: parameters.mode: must be \"auto\", "
                                 "\"3d\", \"sections\" or \"2d\""},
    {"{\"mode\":\"3D\"}", /* names are lower case */
     "segment: parameters.mode: must be \"auto\", \"3d\", \"sections\" or "
     "\"2d\""},
    {"{\"mode\":2}", /* a name, not the enum's value */
     "segment: parameters.mode: must be \"auto\", \"3d\", \"sections\" or "
     "\"2d\""},
    {"{\"mode\":true}", "segment: parameters.mode: must be \"auto\", \"3d\", "
                        "\"sections\" or \"2d\""},
    {"{\"seed_method\":\"random\"}",
     "segment: parameters.seed_method: must be \"distance\" or \"minima\""},
    {"{\"merge_treshold\":0.5}",
     "segment: parameters: unknown key 'merge_treshold'"},
    {"{\"resolution\":[4,4,40]}", /* set from the layer, never a key */
     "segment: parameters: unknown key 'resolution'"},
    {"[0.5]", "segment: parameters: must be an object"},
    /* The voxel-unit keys of kernel version 1, whatever their value, even
     * beside valid keys of version 2. */
    {"{\"sections\":1}",
     "segment: parameters.sections: a voxel-unit key of kernel version 1; "
     "use mode (\"sections\" or \"2d\")"},
    {"{\"sections\":false}",
     "segment: parameters.sections: a voxel-unit key of kernel version 1; "
     "use mode (\"sections\" or \"2d\")"},
    {"{\"filter_sigma\":1.5}",
     "segment: parameters.filter_sigma: a voxel-unit key of kernel version "
     "1; use filter_sigma_nm (nm)"},
    {"{\"filter_background\":25}",
     "segment: parameters.filter_background: a voxel-unit key of kernel "
     "version 1; use filter_background_nm (nm)"},
    {"{\"seed_min_distance\":2}",
     "segment: parameters.seed_min_distance: a voxel-unit key of kernel "
     "version 1; use seed_distance_nm (nm)"},
    {"{\"seed_min_distance\":null}",
     "segment: parameters.seed_min_distance: a voxel-unit key of kernel "
     "version 1; use seed_distance_nm (nm)"},
    {"{\"min_size\":64}",
     "segment: parameters.min_size: a voxel-unit key of kernel version 1; "
     "use min_size_nm3 (nm^3)"},
    {"{\"mode\":\"2d\",\"min_size_nm3\":1000,\"min_size\":64}",
     "segment: parameters.min_size: a voxel-unit key of kernel version 1; "
     "use min_size_nm3 (nm^3)"},
    /* The old keys are checked before any value of the new ones. */
    {"{\"merge_threshold\":7,\"filter_sigma\":1.5}",
     "segment: parameters.filter_sigma: a voxel-unit key of kernel version "
     "1; use filter_sigma_nm (nm)"},
};

static void test_segment__parse_refuses_bad_values(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_params) / sizeof(bad_params[0]); i++) {
        cnx_segment_params p, before;
        cnx_segment_params_default(&p);
        p.min_size_nm3 = 7.0; /* must survive a failed parse */
        p.mode = CNX_SEGMENT_MODE_SECTIONS;
        before = p;
        int rc = cnx_segment_params_parse(&p, bad_params[i].json);
        if (rc != CNX_ESCHEMA)
            fail_msg("%s: rc %d", bad_params[i].json, rc);
        if (strcmp(cnx_error_last()->message, bad_params[i].message) != 0)
            fail_msg("%s: message \"%s\", want \"%s\"", bad_params[i].json,
                     cnx_error_last()->message, bad_params[i].message);
        assert_int_equal(cnx_error_last()->retriable, 0);
        assert_memory_equal(&p, &before, sizeof(p));
    }
    cnx_segment_params p;
    assert_int_equal(cnx_segment_params_parse(&p, "{\"min_size_nm3\":"),
                     CNX_ESCHEMA);
    assert_non_null(strstr(cnx_error_last()->message, "malformed JSON"));
    assert_int_equal(cnx_segment_params_parse(&p, "{\"a\":1,\"a\":1}"),
                     CNX_ESCHEMA);
}

/* A field set by hand: its name in the message. */
static void expect_check_refusal(const cnx_segment_params *p,
                                 const char *message)
{
    assert_int_equal(cnx_segment_params_check(p), CNX_EINVAL);
    if (strcmp(cnx_error_last()->message, message) != 0)
        fail_msg("message \"%s\", want \"%s\"", cnx_error_last()->message,
                 message);
    assert_int_equal(cnx_error_last()->retriable, 0);
}

static void test_segment__check_names_the_field(void **state)
{
    cnx_segment_params p;
    (void)state;
    cnx_segment_params_default(&p);
    p.merge_threshold = NAN;
    expect_check_refusal(&p, "segment: merge_threshold: out of range");
    cnx_segment_params_default(&p);
    p.seed_method = (cnx_segment_seeds)7;
    expect_check_refusal(&p, "segment: seed_method: out of range");
    cnx_segment_params_default(&p);
    p.mode = (cnx_segment_mode)4;
    expect_check_refusal(&p, "segment: mode: out of range");
    p.mode = (cnx_segment_mode)-1;
    expect_check_refusal(&p, "segment: mode: out of range");
    cnx_segment_params_default(&p);
    p.filter_sigma_nm = 0.5;
    expect_check_refusal(&p, "segment: filter_sigma_nm: out of range");
    cnx_segment_params_default(&p);
    p.filter_background_nm = -1.0;
    expect_check_refusal(&p, "segment: filter_background_nm: out of range");
    cnx_segment_params_default(&p);
    p.seed_distance_nm = NAN;
    expect_check_refusal(&p, "segment: seed_distance_nm: out of range");
    cnx_segment_params_default(&p);
    p.min_size_nm3 = 1e16;
    expect_check_refusal(&p, "segment: min_size_nm3: out of range");
    /* resolution: each axis in [0.01, 10^6] */
    const double bad_res[] = {0.0, 0.009, -8.0, 1.1e6, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad_res) / sizeof(bad_res[0]); i++)
        for (int axis = 0; axis < 3; axis++) {
            cnx_segment_params_default(&p);
            p.resolution[axis] = bad_res[i];
            expect_check_refusal(&p, "segment: resolution: out of range");
        }
    cnx_segment_params_default(&p);
    p.resolution[0] = 0.01;
    p.resolution[1] = 1e6;
    p.seed_distance_nm = 0.0;
    p.min_size_nm3 = 0.0;
    assert_int_equal(cnx_segment_params_check(&p), 0);
    assert_int_equal(cnx_segment_params_check(NULL), CNX_EINVAL);
}

/*
 * The voxel limits of lengths at a resolution (2 x the filter scale at
 * most 16 voxels, raw input only; the shading radius 256, raw input only;
 * the seed window's half side 64), on any axis the mode uses.
 */
static void test_segment__check_voxel_limits(void **state)
{
    cnx_segment_params p;
    (void)state;
    /* 32 nm (the default) at 0.5 nm: a 64-voxel window, the limit,
     * passes */
    cnx_segment_params_default(&p);
    p.resolution[0] = p.resolution[1] = p.resolution[2] = 0.5;
    assert_int_equal(cnx_segment_params_check(&p), 0);
    /* 32 nm at 0.4 nm: 80 voxels */
    p.resolution[0] = p.resolution[1] = p.resolution[2] = 0.4;
    expect_check_refusal(&p, "segment: seed_distance_nm is 80 voxels at this "
                             "resolution, over 64");
    /* one fine axis is enough, z too in 3D (AUTO picks 3D here); the
     * section modes never filter or seed across z, so z is not limited */
    cnx_segment_params_default(&p);
    p.resolution[2] = 0.25;
    expect_check_refusal(&p, "segment: seed_distance_nm is 128 voxels at this "
                             "resolution, over 64");
    p.mode = CNX_SEGMENT_MODE_2D;
    assert_int_equal(cnx_segment_params_check(&p), 0);
    p.mode = CNX_SEGMENT_MODE_SECTIONS;
    assert_int_equal(cnx_segment_params_check(&p), 0);
    /* The largest window the parser accepts needs a coarse resolution. */
    cnx_segment_params_default(&p);
    p.seed_distance_nm = 1e4;
    expect_check_refusal(&p, "segment: seed_distance_nm is 1250 voxels at this "
                             "resolution, over 64");
    p.resolution[0] = p.resolution[1] = p.resolution[2] = 156.25;
    assert_int_equal(cnx_segment_params_check(&p), 0);
    /* The filter scale: raw input only. 6 nm at 0.5 nm is 2 x 12 voxels. */
    cnx_segment_params_default(&p);
    p.resolution[0] = p.resolution[1] = p.resolution[2] = 0.5;
    p.filter_background_nm = 0.0;
    p.seed_distance_nm = 0.0;
    assert_int_equal(cnx_segment_params_check(&p), 0);
    p.raw_input = 1;
    expect_check_refusal(&p,
                         "segment: 2 x filter_sigma_nm is 24 voxels at this "
                         "resolution, over 16");
    /* 8 nm at 1 nm: 2 x 8, the limit, passes */
    p.resolution[0] = p.resolution[1] = p.resolution[2] = 1.0;
    p.filter_sigma_nm = 8.0;
    assert_int_equal(cnx_segment_params_check(&p), 0);
    p.filter_sigma_nm = 8.5;
    expect_check_refusal(&p,
                         "segment: 2 x filter_sigma_nm is 17 voxels at this "
                         "resolution, over 16");
    /* The shading radius: 100 nm at 0.25 nm is 400 voxels. */
    cnx_segment_params_default(&p);
    p.raw_input = 1;
    p.resolution[0] = p.resolution[1] = p.resolution[2] = 0.25;
    p.filter_sigma_nm = 1.0;
    p.seed_distance_nm = 16.0; /* 64 voxels, the seed limit */
    expect_check_refusal(&p,
                         "segment: filter_background_nm is 400 voxels at this "
                         "resolution, over 256");
    p.filter_background_nm = 64.0; /* 256 voxels: passes */
    assert_int_equal(cnx_segment_params_check(&p), 0);
    p.raw_input = 0; /* not filtered: no limit */
    p.filter_background_nm = 1e5;
    assert_int_equal(cnx_segment_params_check(&p), 0);
    /* The kernel refuses what the check refuses. */
    {
        float b[8] = {0};
        uint32_t labels[8], n;
        const int64_t size[3] = {2, 2, 2};
        cnx_segment_params_default(&p);
        p.resolution[1] = 0.4;
        assert_int_equal(cnx_segment_volume(b, size, &p, labels, &n),
                         CNX_EINVAL);
        assert_non_null(strstr(cnx_error_last()->message, "80 voxels"));
    }
}

/* AUTO: SECTIONS exactly when z >= 12 x the coarser of x and y. */
static void test_segment__mode_of_resolution(void **state)
{
    static const struct {
        double res[3];
        cnx_segment_mode want;
    } cases[] = {
        {{8, 8, 8}, CNX_SEGMENT_MODE_3D},
        {{8, 8, 96}, CNX_SEGMENT_MODE_SECTIONS},
        {{8, 8, 95.9}, CNX_SEGMENT_MODE_3D},
        {{8, 8, 16}, CNX_SEGMENT_MODE_3D}, /* 2 x: kernel version 2's first
                                              rule, no longer */
        {{4, 4, 40}, CNX_SEGMENT_MODE_3D}, /* 10 x */
        {{4, 4, 48}, CNX_SEGMENT_MODE_SECTIONS},
        {{4, 4, 50}, CNX_SEGMENT_MODE_SECTIONS}, /* ISBI 2012 */
        {{4, 8, 96}, CNX_SEGMENT_MODE_SECTIONS}, /* the coarser of x, y */
        {{8, 4, 96}, CNX_SEGMENT_MODE_SECTIONS},
        {{4, 8, 95.99}, CNX_SEGMENT_MODE_3D}, /* 12 x 4 is not enough */
        {{8, 4, 95.99}, CNX_SEGMENT_MODE_3D},
        {{16, 16, 8}, CNX_SEGMENT_MODE_3D}, /* finer z */
        {{0.01, 0.01, 0.16}, CNX_SEGMENT_MODE_SECTIONS},
        {{0.01, 0.01, 0.11}, CNX_SEGMENT_MODE_3D},
        {{1e6, 1e6, 1e6}, CNX_SEGMENT_MODE_3D},
    };
    cnx_segment_params p;
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cnx_segment_params_default(&p);
        memcpy(p.resolution, cases[i].res, sizeof(p.resolution));
        if (cnx_segment_mode_of(&p) != cases[i].want)
            fail_msg("resolution %g,%g,%g: mode %d, want %d", cases[i].res[0],
                     cases[i].res[1], cases[i].res[2],
                     (int)cnx_segment_mode_of(&p), (int)cases[i].want);
        /* An explicit mode is kept whatever the resolution. */
        for (int m = CNX_SEGMENT_MODE_3D; m <= CNX_SEGMENT_MODE_2D; m++) {
            p.mode = (cnx_segment_mode)m;
            assert_int_equal(cnx_segment_mode_of(&p), m);
        }
    }
}

/* min_size_nm3 over the voxel volume, rounded half up, capped. */
static void test_segment__min_voxels(void **state)
{
    static const struct {
        double res[3], nm3;
        int64_t want;
    } cases[] = {
        {{8, 8, 8}, 1e6, 1953},   /* the default: 1953.125 */
        {{8, 8, 30}, 1e6, 521},   /* 520.8 */
        {{8, 8, 8}, 32768, 64},   /* kernel version 2's first default */
        {{16, 16, 16}, 32768, 8}, /* 32768 / 4096 */
        {{4, 4, 4}, 32768, 512},  /* 32768 / 64 */
        {{4, 4, 40}, 32768, 51},  /* 51.2 */
        {{4, 4, 40}, 32960, 52},  /* 51.5 rounds up */
        {{4, 4, 40}, 32959, 51},  /* 51.498... */
        {{8, 8, 8}, 0, 0},
        {{8, 8, 8}, 255, 0},                                /* 0.498 */
        {{8, 8, 8}, 256, 1},                                /* 0.5 */
        {{0.01, 0.01, 0.01}, 1e15, CNX_SEGMENT_MAX_VOXELS}, /* 10^21: cap */
        {{1e6, 1e6, 1e6}, 1e15, 0},
    };
    cnx_segment_params p;
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cnx_segment_params_default(&p);
        memcpy(p.resolution, cases[i].res, sizeof(p.resolution));
        p.min_size_nm3 = cases[i].nm3;
        if (cnx_segment_min_voxels(&p) != cases[i].want)
            fail_msg("%g nm^3 at %g,%g,%g: %lld voxels, want %lld",
                     cases[i].nm3, cases[i].res[0], cases[i].res[1],
                     cases[i].res[2], (long long)cnx_segment_min_voxels(&p),
                     (long long)cases[i].want);
    }
}

/*
 * cnx_segment_halo against values worked out by hand from the formula of
 * segment.h: per axis x and y (and z in 3D), seeds = max(8, 4
 * round(seed_distance_nm / res)) and, with raw input, filter = max(round(8
 * (filter_sigma_nm / res)^2) + 1, 3 round(filter_background_nm / res)) (the
 * binomial radius of the ridge smoothing at 2 sigma plus the Hessian's step;
 * three box passes); the halo is the largest filter + seeds.
 */
static void test_segment__halo_formula(void **state)
{
    static const struct {
        double res[3];
        int raw;
        double sigma, background, seed;
        int64_t want;
    } cases[] = {
        /* boundary input: seeds only */
        {{8, 8, 8}, 0, 6, 100, 16, 8},     /* 4 x 2 = 8 */
        {{8, 8, 8}, 0, 6, 100, 0, 8},      /* at least 8 */
        {{8, 8, 8}, 0, 6, 100, 40, 20},    /* 4 x 5 */
        {{8, 8, 8}, 0, 6, 100, 20, 12},    /* 2.5 rounds to 3: 4 x 3 */
        {{8, 8, 8}, 0, 6, 100, 19.9, 8},   /* 2.49 rounds to 2 */
        {{16, 16, 16}, 0, 6, 100, 80, 20}, /* 4 x 5 */
        {{4, 8, 8}, 0, 6, 100, 16, 16},    /* x: 4 x 4; y: 8 */
        {{8, 4, 8}, 0, 6, 100, 16, 16},    /* y: 4 x 4 */
        {{4, 4, 50}, 0, 6, 100, 16, 16},   /* z (sections) unused */
        {{4, 4, 40}, 0, 6, 100, 16, 16},   /* 3D (AUTO): x 16, z 8 */
        {{8, 8, 4}, 0, 6, 100, 16, 16},    /* 3D (AUTO): z 4 x 4 */
        {{8, 8, 4}, 1, 6, 0, 16, 35},      /* 3D: z sigma 1.5: 19 + 16 */
        /* raw input at 8 nm: sigma 0.75 voxels: round(4.5) + 1 = 6;
         * shading 12.5 -> 13 voxels: 39; + 8 */
        {{8, 8, 8}, 1, 6, 100, 16, 47},
        {{8, 8, 8}, 1, 6, 0, 16, 14},    /* 6 + 8 */
        {{8, 8, 8}, 1, 6, 40, 16, 23},   /* 3 x 5 + 8 */
        {{8, 8, 8}, 1, 12, 0, 16, 27},   /* 1.5: 18 + 1 + 8 */
        {{8, 8, 8}, 1, 24, 0, 16, 81},   /* 3: 72 + 1 + 8 */
        {{8, 8, 8}, 1, 24, 200, 16, 83}, /* shading 3 x 25 = 75 > 73: 75 + 8 */
        {{8, 8, 8}, 1, 12, 0, 48, 43},   /* 19 + 4 x 6 */
        /* raw ISBI 4x4x50 (sections): sigma 1.5 voxels (19), shading 25
         * (75), seeds 4 x 4 = 16 */
        {{4, 4, 50}, 1, 6, 100, 16, 91},
        /* the default seeds, 32 nm: 4 x 4 at 8 nm, 4 x 8 at 4 nm */
        {{8, 8, 8}, 0, 6, 100, 32, 16},
        {{4, 4, 50}, 0, 6, 100, 32, 32},
        {{4, 4, 50}, 1, 6, 100, 32, 107}, /* 75 + 32 */
        /* raw at 16 nm: sigma 0.375: round(1.125) + 1 = 2; shading 2.5 ->
         * 3 voxels: 9; seeds 1 voxel: 8 */
        {{16, 16, 16}, 1, 6, 40, 16, 17},
        /* anisotropic xy: x 4 nm (sigma 1.5: 19, shading 0), y 8 nm */
        {{4, 8, 8}, 1, 6, 0, 16, 35}, /* x: 19 + 16 */
        /* bad parameters: 8 */
        {{8, 8, 8}, 0, 6, 100, -1, 8},
        {{0, 8, 8}, 1, 6, 100, 16, 8},
        {{0.1, 0.1, 0.1}, 0, 6, 0, 16, 8}, /* 160-voxel window: refused */
    };
    cnx_segment_params p;
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cnx_segment_params_default(&p);
        memcpy(p.resolution, cases[i].res, sizeof(p.resolution));
        p.raw_input = cases[i].raw;
        p.filter_sigma_nm = cases[i].sigma;
        p.filter_background_nm = cases[i].background;
        p.seed_distance_nm = cases[i].seed;
        if (cnx_segment_halo(&p) != cases[i].want)
            fail_msg("case %zu: halo %lld, want %lld", i,
                     (long long)cnx_segment_halo(&p), (long long)cases[i].want);
    }
    /* It grows with the filter scale (never shrinks), and the raw input's
     * halo covers the boundary input's. */
    cnx_segment_params_default(&p);
    p.raw_input = 1;
    p.filter_background_nm = 0.0;
    int64_t last = 0;
    for (double sigma = 1.0; sigma <= 64.0; sigma += 0.5) {
        p.filter_sigma_nm = sigma;
        int64_t h = cnx_segment_halo(&p);
        if (h < last)
            fail_msg("sigma %g nm: halo %lld after %lld", sigma, (long long)h,
                     (long long)last);
        last = h;
        p.raw_input = 0;
        assert_true(cnx_segment_halo(&p) <= h);
        p.raw_input = 1;
    }
    /* the default seeds: 32 nm, 4 voxels, 4 x 4 = 16 */
    p.filter_sigma_nm = 8.0; /* 1 voxel: 9 + 16 */
    assert_int_equal(cnx_segment_halo(&p), 25);
    p.filter_sigma_nm = 16.0; /* 2 voxels: 33 + 16 */
    assert_int_equal(cnx_segment_halo(&p), 49);
    p.filter_sigma_nm = 64.0; /* 8 voxels: 513 + 16 */
    assert_int_equal(cnx_segment_halo(&p), 529);
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
    p.min_size_nm3 = -1.0;
    assert_int_equal(cnx_segment_volume(b, ok, &p, labels, &n), CNX_EINVAL);
    assert_int_equal(cnx_segment_boundary_u8(u, ok, &p, b), CNX_EINVAL);
    assert_int_equal(cnx_error_last()->retriable, 0);
}

/* ---- constructed volumes --------------------------------------------------
 */

/* Blobs behind full membrane walls: exactly those segments (no minimum
 * size: the blobs, 1200 voxels at most, are under the default's 1953). */
static void test_segment__walls_separate_blobs(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(31, 12, 10, 0.0f);
    (void)state;
    cnx_segment_params_default(&p);
    p.min_size_nm3 = 0.0;
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
    p.min_size_nm3 = 0.0;
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
    p.min_size_nm3 = 0.0;
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
 * wall of 0.9 towards A and 0.7 towards B: kept with min_size_nm3 0 (walls
 * above the merge threshold), folded into B (its lower wall) when it is
 * under min_size_nm3 (voxels of 8^3 nm^3 here).
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
    p.min_size_nm3 = 0.0;
    fill_box(&v, 10, 11, 0, 12, 0, 12, 0.9f);
    fill_box(&v, 14, 15, 0, 12, 0, 12, 0.7f);
    run(&v, &p);
    assert_int_equal(v.nlabels, 3);
    expect_box(&v, 0, 10, 0, 12, 0, 12, 1);
    expect_box(&v, 11, 14, 0, 12, 0, 12, 2);
    expect_box(&v, 15, 26, 0, 12, 0, 12, 3);
    /* even with a wall added */
    p.min_size_nm3 = (3 * 12 * 12 + 12 * 12 + 1) * 512.0;
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

/* Voxels of the middle region of min_size_volume's answer at min size 0. */
static size_t min_size_volume(vol *v, cnx_segment_params *p)
{
    size_t middle = 0;
    for (size_t i = 0; i < v->n; i++)
        v->b[i] = 0.0f;
    fill_box(v, 10, 11, 0, 12, 0, 12, 0.9f);
    fill_box(v, 14, 15, 0, 12, 0, 12, 0.7f);
    p->seed_method = CNX_SEGMENT_SEEDS_MINIMA;
    p->seed_threshold = 0.1;
    p->merge_threshold = 0.5;
    p->min_size_nm3 = 0.0;
    run(v, p);
    assert_int_equal(v->nlabels, 3);
    for (size_t i = 0; i < v->n; i++)
        middle += v->labels[i] == 2;
    return middle;
}

/*
 * The same layer: it is folded exactly when its voxel count is below
 * cnx_segment_min_voxels, min_size_nm3 over the voxel volume at the
 * resolution, rounded (a region is kept at exactly the minimum).
 */
static void test_segment__min_size_nm3_follows_resolution(void **state)
{
    static const double res[][3] = {
        {8, 8, 8}, {16, 16, 16}, {4, 4, 40}, {4, 8, 16}, {2.5, 2.5, 2.5}};
    cnx_segment_params p;
    vol v = vol_new(26, 12, 12, 0.0f);
    (void)state;
    for (size_t r = 0; r < sizeof(res) / sizeof(res[0]); r++) {
        const double vox = res[r][0] * res[r][1] * res[r][2];
        size_t middle;
        cnx_segment_params_default(&p);
        memcpy(p.resolution, res[r], sizeof(p.resolution));
        p.mode = CNX_SEGMENT_MODE_3D; /* AUTO would pick sections at some */
        middle = min_size_volume(&v, &p);
        assert_true(middle >= 3 * 12 * 12 && middle <= 5 * 12 * 12);
        /* kept at exactly its size, and up to just under half a voxel
         * more */
        p.min_size_nm3 = (double)middle * vox;
        assert_int_equal(cnx_segment_min_voxels(&p), (int64_t)middle);
        run(&v, &p);
        assert_int_equal(v.nlabels, 3);
        p.min_size_nm3 = ((double)middle + 0.49) * vox;
        assert_int_equal(cnx_segment_min_voxels(&p), (int64_t)middle);
        run(&v, &p);
        assert_int_equal(v.nlabels, 3);
        /* folded into B from half a voxel more on */
        p.min_size_nm3 = ((double)middle + 0.5) * vox;
        assert_int_equal(cnx_segment_min_voxels(&p), (int64_t)middle + 1);
        run(&v, &p);
        assert_int_equal(v.nlabels, 2);
        expect_box(&v, 11, 26, 0, 12, 0, 12, 2);
    }
    /* One volume in nm^3, two resolutions: 577 voxels of 8 nm fold the
     * layer; the same nm^3 is 72 voxels of 16 nm, which do not. */
    cnx_segment_params_default(&p);
    min_size_volume(&v, &p);
    p.min_size_nm3 = 577.0 * 512.0;
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    p.resolution[0] = p.resolution[1] = p.resolution[2] = 16.0;
    assert_int_equal(cnx_segment_min_voxels(&p), 72);
    run(&v, &p);
    assert_int_equal(v.nlabels, 3);
    vol_free(&v);
}

/*
 * Nothing below the seed threshold: one segment; one per section in 2D.
 * SECTIONS seeds each section on its own too, but its graph links them:
 * the 35-voxel sections are under the default minimum (1953 voxels at
 * 8 nm) and fold together
 * across z, unless there is no minimum.
 */
static void test_segment__all_membrane_gets_one_segment(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(7, 5, 3, 1.0f);
    (void)state;
    cnx_segment_params_default(&p);
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    expect_box(&v, 0, 7, 0, 5, 0, 3, 1);
    p.mode = CNX_SEGMENT_MODE_2D;
    run(&v, &p);
    assert_int_equal(v.nlabels, 3);
    for (int z = 0; z < 3; z++)
        expect_box(&v, 0, 7, 0, 5, z, z + 1, (uint32_t)z + 1);
    p.mode = CNX_SEGMENT_MODE_SECTIONS;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    expect_box(&v, 0, 7, 0, 5, 0, 3, 1);
    p.min_size_nm3 = 0.0;
    run(&v, &p);
    assert_int_equal(v.nlabels, 3);
    for (int z = 0; z < 3; z++)
        expect_box(&v, 0, 7, 0, 5, z, z + 1, (uint32_t)z + 1);
    vol_free(&v);
    /* One voxel. */
    v = vol_new(1, 1, 1, 0.5f);
    cnx_segment_params_default(&p);
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    assert_int_equal(v.labels[0], 1);
    vol_free(&v);
}

/* 2D: no segment spans two z; each section as if alone. */
static void test_segment__sections_are_independent(void **state)
{
    cnx_segment_params p;
    vol v = vol_new(40, 36, 5, 0.0f), one = vol_new(40, 36, 1, 0.0f);
    (void)state;
    cnx_segment_params_default(&p);
    p.mode = CNX_SEGMENT_MODE_2D;
    /* Uniform: exactly one segment per section. */
    run(&v, &p);
    assert_int_equal(v.nlabels, 5);
    for (int z = 0; z < 5; z++)
        expect_box(&v, 0, 40, 0, 36, z, z + 1, (uint32_t)z + 1);
    p.mode = CNX_SEGMENT_MODE_3D;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    /* SECTIONS: one segment per section, then joined across z. */
    p.mode = CNX_SEGMENT_MODE_SECTIONS;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);
    /* AUTO at ISBI's 4 x 4 x 50 nm is SECTIONS. */
    p.mode = CNX_SEGMENT_MODE_AUTO;
    p.resolution[0] = p.resolution[1] = 4.0;
    p.resolution[2] = 50.0;
    run(&v, &p);
    assert_int_equal(v.nlabels, 1);

    /* Random sections, segmented together and one at a time. */
    cnx_segment_params_default(&p);
    p.mode = CNX_SEGMENT_MODE_2D;
    p.seed_threshold = 0.6;
    p.merge_threshold = 0.45;
    p.min_size_nm3 = 10 * 512.0;
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

/*
 * Two blobs, the same in every section (a membrane ring one voxel wide
 * and a two-voxel wall at x = 11, 12), no membrane between sections: in
 * SECTIONS each section is seeded and flooded alone, and the graph joins
 * each blob across z (its z edges have the mean of its own boundary,
 * about 0.2): two segments through the stack, as in 3D. 2D gives two per
 * section.
 */
static void blobs_stack(vol *v)
{
    for (size_t i = 0; i < v->n; i++)
        v->b[i] = 1.0f;
    fill_box(v, 1, 11, 1, 23, 0, v->size[2], 0.0f);
    fill_box(v, 13, 23, 1, 23, 0, v->size[2], 0.0f);
}

static void test_segment__sections_mode_joins_across_z(void **state)
{
    const int64_t nz = 6;
    cnx_segment_params p;
    vol v = vol_new(24, 24, nz, 0.0f);
    uint32_t left, right;
    (void)state;
    cnx_segment_params_default(&p);
    p.min_size_nm3 = 0.0;
    blobs_stack(&v);
    for (int m = CNX_SEGMENT_MODE_3D; m <= CNX_SEGMENT_MODE_SECTIONS; m++) {
        p.mode = (cnx_segment_mode)m;
        run(&v, &p);
        assert_int_equal(v.nlabels, 2);
        left = label_at(&v, 1, 1, 0);
        right = label_at(&v, 13, 1, 0);
        assert_true(left != right);
        expect_box(&v, 1, 11, 1, 23, 0, nz, left);
        expect_box(&v, 13, 23, 1, 23, 0, nz, right);
    }
    /* AUTO at 8 x 8 x 96 nm: SECTIONS, the same. */
    p.mode = CNX_SEGMENT_MODE_AUTO;
    p.resolution[2] = 96.0;
    assert_int_equal(cnx_segment_mode_of(&p), CNX_SEGMENT_MODE_SECTIONS);
    run(&v, &p);
    assert_int_equal(v.nlabels, 2);
    expect_box(&v, 1, 11, 1, 23, 0, nz, label_at(&v, 1, 1, 0));
    /* 2D: two per section, none across z. */
    p.mode = CNX_SEGMENT_MODE_2D;
    run(&v, &p);
    assert_int_equal(v.nlabels, 2 * nz);
    for (int64_t z = 0; z < nz; z++) {
        left = label_at(&v, 1, 1, z);
        right = label_at(&v, 13, 1, z);
        assert_true(left != right);
        expect_box(&v, 1, 11, 1, 23, z, z + 1, left);
        expect_box(&v, 13, 23, 1, 23, z, z + 1, right);
        if (z > 0)
            assert_true(left != label_at(&v, 1, 1, z - 1));
    }
    /*
     * A membrane section at z = 3 tells SECTIONS from 3D: in 3D its voxels
     * are flooded from the blobs above and below (4 segments); in SECTIONS
     * it is a section without a seed below the threshold, seeded at its
     * first voxel and flooded alone: a fifth segment, walled off on both
     * sides. 2D: 2 per blob section + 1.
     */
    fill_box(&v, 0, 24, 0, 24, 3, 4, 1.0f);
    p.resolution[2] = 8.0;
    p.mode = CNX_SEGMENT_MODE_3D;
    run(&v, &p);
    assert_int_equal(v.nlabels, 4);
    p.mode = CNX_SEGMENT_MODE_SECTIONS;
    run(&v, &p);
    assert_int_equal(v.nlabels, 5);
    expect_box(&v, 0, 24, 0, 24, 3, 4, label_at(&v, 0, 0, 3));
    assert_true(label_at(&v, 0, 0, 3) != label_at(&v, 1, 1, 2));
    assert_true(label_at(&v, 0, 0, 3) != label_at(&v, 1, 1, 4));
    expect_box(&v, 1, 11, 1, 23, 0, 3, label_at(&v, 1, 1, 0));
    expect_box(&v, 1, 11, 1, 23, 4, nz, label_at(&v, 1, 1, 4));
    p.mode = CNX_SEGMENT_MODE_2D;
    run(&v, &p);
    assert_int_equal(v.nlabels, 2 * (nz - 1) + 1);
    vol_free(&v);
}

/*
 * Lengths are nm: the same voxels at 16 nm with every length doubled (and
 * the volume x 8) give the same bytes as at 8 nm - boundary maps (seed
 * window, minimum size) and the membrane filter of a raw image alike. The
 * seed window is not idle here: at 16 nm with the 8 nm lengths the labels
 * differ.
 */
static void test_segment__resolution_scales_lengths(void **state)
{
    cnx_segment_params p8, p16;
    vol v = vol_new(40, 36, 12, 0.0f);
    const size_t n = v.n;
    uint32_t *first = malloc(n * sizeof(*first)), n8;
    uint8_t *img = malloc(n);
    float *b8 = malloc(n * sizeof(*b8)), *b16 = malloc(n * sizeof(*b16));
    uint64_t rng = 21;
    (void)state;
    assert_true(first && img && b8 && b16);
    for (int method = 0; method < 2; method++)
        for (int m = CNX_SEGMENT_MODE_3D; m <= CNX_SEGMENT_MODE_2D; m++) {
            cnx_segment_params_default(&p8);
            p8.mode = (cnx_segment_mode)m;
            p8.seed_method = (cnx_segment_seeds)method;
            p8.seed_threshold = 0.6;
            p8.merge_threshold = 0.3;
            p8.seed_distance_nm = 24.0; /* 3 voxels */
            p8.min_size_nm3 = 20 * 512.0;
            p16 = p8;
            p16.resolution[0] = p16.resolution[1] = p16.resolution[2] = 16.0;
            p16.seed_distance_nm = 48.0;
            p16.min_size_nm3 = 20 * 4096.0;
            fill_noise(&v, 31 + (uint64_t)method);
            run(&v, &p8);
            memcpy(first, v.labels, n * sizeof(*first));
            n8 = v.nlabels;
            assert_true(n8 > 5);
            run(&v, &p16);
            assert_int_equal(v.nlabels, n8);
            assert_memory_equal(first, v.labels, n * sizeof(*first));
            /* 24 nm at 16 nm is a 2-voxel window (1.5 rounded up): other
             * seeds, other labels. */
            p16.seed_distance_nm = 24.0;
            run(&v, &p16);
            assert_true(v.nlabels != n8 ||
                        memcmp(first, v.labels, n * sizeof(*first)) != 0);
        }
    /* The membrane filter: scale and shading in nm. */
    for (size_t i = 0; i < n; i++)
        img[i] = (uint8_t)(cnx_test_rand(&rng) >> 56);
    for (int m = CNX_SEGMENT_MODE_3D; m <= CNX_SEGMENT_MODE_2D; m++) {
        cnx_segment_params_default(&p8);
        p8.raw_input = 1;
        p8.mode = (cnx_segment_mode)m;
        p8.filter_sigma_nm = 12.0;      /* 1.5 voxels */
        p8.filter_background_nm = 40.0; /* 5 voxels */
        p16 = p8;
        p16.resolution[0] = p16.resolution[1] = p16.resolution[2] = 16.0;
        p16.filter_sigma_nm = 24.0;
        p16.filter_background_nm = 80.0;
        p16.seed_distance_nm = 2.0 * p8.seed_distance_nm; /* for the halo */
        assert_int_equal(cnx_segment_boundary_u8(img, v.size, &p8, b8), 0);
        assert_int_equal(cnx_segment_boundary_u8(img, v.size, &p16, b16), 0);
        assert_memory_equal(b8, b16, n * sizeof(*b8));
        assert_int_equal(cnx_segment_halo(&p8), cnx_segment_halo(&p16));
        p16.filter_sigma_nm = 12.0; /* 0.75 voxels: another map */
        assert_int_equal(cnx_segment_boundary_u8(img, v.size, &p16, b16), 0);
        assert_true(memcmp(b8, b16, n * sizeof(*b8)) != 0);
    }
    free(b16);
    free(b8);
    free(img);
    free(first);
    vol_free(&v);
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
    for (int k = 0; k < 4; k++) {
        const int method = k & 1;
        cnx_segment_params_default(&p);
        p.mode = k < 2 ? CNX_SEGMENT_MODE_AUTO : CNX_SEGMENT_MODE_SECTIONS;
        p.seed_method = (cnx_segment_seeds)method;
        p.seed_threshold = 0.6;
        p.merge_threshold = 0.45;
        p.min_size_nm3 = 20 * 512.0;
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
    p.mode = CNX_SEGMENT_MODE_2D;
    /* kernel version 1's defaults: scale 1.5 voxels, shading 25 voxels */
    p.resolution[0] = p.resolution[1] = p.resolution[2] = 4.0;
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
    /* SECTIONS filters per section as 2D does; so does AUTO where z is
     * coarse (its z scale then unused). */
    p.mode = CNX_SEGMENT_MODE_SECTIONS;
    assert_int_equal(cnx_segment_boundary_u8(img, size, &p, b2), 0);
    assert_memory_equal(b, b2, n * sizeof(*b));
    p.mode = CNX_SEGMENT_MODE_AUTO;
    p.resolution[2] = 50.0;
    assert_int_equal(cnx_segment_mode_of(&p), CNX_SEGMENT_MODE_SECTIONS);
    assert_int_equal(cnx_segment_boundary_u8(img, size, &p, b2), 0);
    assert_memory_equal(b, b2, n * sizeof(*b));
    p.resolution[2] = 4.0;
    /* 3D runs the 3x3 Hessian path: line still found. */
    p.mode = CNX_SEGMENT_MODE_3D;
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
    memcpy(p.resolution, synth->params.resolution, sizeof(p.resolution));
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

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * How far two labellings of the same n voxels are from being one
 * partition: the fraction of voxels outside the pairs (label of a, label
 * of b) that are each other's best match (the b label overlapping the a
 * label most, and the other way round; ties: the first in sorted order).
 * 0 exactly when the partitions are equal (up to relabelling).
 */
static double partition_disagreement(const uint32_t *a, const uint32_t *b,
                                     size_t n)
{
    uint64_t *pair = malloc(n * sizeof(*pair));
    uint32_t na = 0, nb = 0, *best_b, *best_a;
    size_t *cnt_a, *cnt_b, matched = 0;
    assert_non_null(pair);
    for (size_t i = 0; i < n; i++) {
        pair[i] = (uint64_t)a[i] << 32 | b[i];
        na = a[i] > na ? a[i] : na;
        nb = b[i] > nb ? b[i] : nb;
    }
    qsort(pair, n, sizeof(*pair), cmp_u64);
    best_b = calloc((size_t)na + 1, sizeof(*best_b));
    best_a = calloc((size_t)nb + 1, sizeof(*best_a));
    cnt_a = calloc((size_t)na + 1, sizeof(*cnt_a));
    cnt_b = calloc((size_t)nb + 1, sizeof(*cnt_b));
    assert_true(best_b && best_a && cnt_a && cnt_b);
    for (size_t i = 0, j; i < n; i = j) {
        const uint32_t la = (uint32_t)(pair[i] >> 32), lb = (uint32_t)pair[i];
        for (j = i; j < n && pair[j] == pair[i]; j++)
            ;
        if (j - i > cnt_a[la]) {
            cnt_a[la] = j - i;
            best_b[la] = lb;
        }
        if (j - i > cnt_b[lb]) {
            cnt_b[lb] = j - i;
            best_a[lb] = la;
        }
    }
    for (uint32_t la = 0; la <= na; la++)
        if (cnt_a[la] > 0 && best_a[best_b[la]] == la)
            matched += cnt_a[la];
    free(cnt_b);
    free(cnt_a);
    free(best_a);
    free(best_b);
    free(pair);
    return 1.0 - (double)matched / (double)n;
}

/* Segment the box [lo, hi)^3 of a cube of side s (raw image), labels out. */
static void segment_box(const uint8_t *img, int64_t s, int64_t lo, int64_t hi,
                        const cnx_segment_params *p, uint32_t *labels,
                        uint32_t *nlabels)
{
    const int64_t e = hi - lo, size[3] = {e, e, e};
    const size_t n = (size_t)(e * e * e);
    uint8_t *box = malloc(n);
    float *b = malloc(n * sizeof(*b));
    assert_true(box && b);
    for (int64_t z = 0; z < e; z++)
        for (int64_t y = 0; y < e; y++)
            memcpy(box + (size_t)(e * (y + e * z)),
                   img + (size_t)(lo + s * ((lo + y) + s * (lo + z))),
                   (size_t)e);
    assert_int_equal(cnx_segment_boundary_u8(box, size, p, b), 0);
    assert_int_equal(cnx_segment_volume(b, size, p, labels, nlabels), 0);
    free(b);
    free(box);
}

/* The labels of the cube [c0, c1)^3 out of a segmentation of [lo, hi)^3. */
static void crop(const uint32_t *labels, int64_t lo, int64_t hi, int64_t c0,
                 int64_t c1, uint32_t *out)
{
    const int64_t e = hi - lo;
    size_t k = 0;
    for (int64_t z = c0; z < c1; z++)
        for (int64_t y = c0; y < c1; y++)
            for (int64_t x = c0; x < c1; x++)
                out[k++] =
                    labels[(size_t)((x - lo) + e * ((y - lo) + e * (z - lo)))];
}

/* Dense numbers (1..) for the ids of n labels, in order of first sight. */
static void dense_ids(const uint64_t *ids, size_t n, uint32_t *out)
{
    uint64_t *seen = malloc(n * sizeof(*seen));
    size_t nseen = 0;
    assert_non_null(seen);
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < nseen && seen[k] != ids[i])
            k++;
        if (k == nseen)
            seen[nseen++] = ids[i];
        out[i] = (uint32_t)(k + 1);
    }
    free(seen);
}

/* cnx_segjoin_chunk on [lo, hi)^3 of an s^3 image for the chunk [c0,
 * c1)^3: the fraction of its voxels partitioned otherwise than want. */
static double chunk_path_disagreement(const uint8_t *img, int64_t s,
                                      int64_t lo, int64_t hi, int64_t c0,
                                      int64_t c1, const cnx_segment_params *p,
                                      const uint32_t *want)
{
    const int64_t e = hi - lo, ce = c1 - c0;
    const size_t n = (size_t)(e * e * e), cn = (size_t)(ce * ce * ce);
    cnx_box bbox = {{lo, lo, lo}, {hi, hi, hi}}, roi = {{c0, c0, c0},
                                                       {c1, c1, c1}};
    uint8_t *box = malloc(n), *face = NULL;
    uint64_t *ids = malloc(cn * sizeof(*ids));
    uint32_t *got = malloc(cn * sizeof(*got));
    size_t face_len = 0;
    double diff;
    assert_true(box && ids && got);
    for (int64_t z = 0; z < e; z++)
        for (int64_t y = 0; y < e; y++)
            memcpy(box + (size_t)(e * (y + e * z)),
                   img + (size_t)(lo + s * ((lo + y) + s * (lo + z))),
                   (size_t)e);
    assert_int_equal(cnx_segjoin_chunk(box, CNX_DT_UINT8, &bbox, &roi, p, ids,
                                       &face, &face_len),
                     0);
    assert_true(face_len > 0);
    dense_ids(ids, cn, got);
    diff = partition_disagreement(got, want, cn);
    free(face);
    free(got);
    free(ids);
    free(box);
    return diff;
}

/*
 * Chunked versus whole: the interior chunk [32, 64)^3 of a 96^3 cnx-synth
 * image (raw input), segmented on the chunk grown by cnx_segment_halo and
 * cropped, against the whole volume's labels there.
 *
 * Exact equality is not to be had: the image is stretched by the 1st and
 * 99th percentiles of the box it is given (and each filter term by its
 * own), so nearly every boundary value of the grown chunk differs a little
 * from the whole volume's (measured: 97% of the quantised levels), and the
 * agglomeration is a global process. What the halo buys is measured as
 * the fraction of the chunk's voxels outside mutually best-matched
 * segments: 0.031% (10 voxels of 32768) with the halo of 23 voxels here
 * (shading 40 nm, 5 voxels: 3 x 5 + 8); over synth seeds 1..7 it stayed
 * at or under 0.29%. Without a halo it is 11%, with the fixed 8 voxels
 * of kernel version 1's stage 1.4%. The bound, 0.5%, passes the first
 * and fails the other two.
 */
static void test_segment__chunk_with_halo_matches_whole(void **state)
{
    const int64_t s = 96, c0 = 32, c1 = 64, ce = c1 - c0;
    const size_t n = (size_t)(s * s * s), cn = (size_t)(ce * ce * ce);
    cnx_synth_params sp;
    cnx_synth *synth = NULL;
    cnx_segment_params p;
    uint32_t *whole = malloc(n * sizeof(*whole)), nwhole, ngrown;
    uint32_t *grown = malloc(n * sizeof(*grown));
    uint32_t *want = malloc(cn * sizeof(*want)),
             *got = malloc(cn * sizeof(*got));
    int64_t halo, lo, hi;
    double diff, diff0;
    (void)state;
    assert_true(whole && grown && want && got);
    cnx_synth_params_init(&sp);
    sp.shape[0] = sp.shape[1] = sp.shape[2] = s;
    sp.seed = 3;
    assert_int_equal(cnx_synth_generate(&synth, &sp), 0);
    cnx_segment_params_default(&p);
    memcpy(p.resolution, synth->params.resolution, sizeof(p.resolution));
    p.raw_input = 1;
    p.filter_background_nm = 40.0;
    /* the settings the numbers above were measured at (kernel version 2's
     * first defaults): seeds 16 nm, 2 voxels */
    p.seed_distance_nm = 16.0;
    p.merge_threshold = 0.5;
    p.min_size_nm3 = 32768.0;
    halo = cnx_segment_halo(&p);
    assert_int_equal(halo, 23);
    lo = c0 - halo > 0 ? c0 - halo : 0;
    hi = c1 + halo < s ? c1 + halo : s;
    assert_true(lo > 0 && hi < s); /* a real crop, not the whole volume */
    segment_box(synth->image->data, s, 0, s, &p, whole, &nwhole);
    crop(whole, 0, s, c0, c1, want);
    segment_box(synth->image->data, s, lo, hi, &p, grown, &ngrown);
    crop(grown, lo, hi, c0, c1, got);
    diff = partition_disagreement(got, want, cn);
    /* the same chunk without any halo */
    segment_box(synth->image->data, s, c0, c1, &p, grown, &ngrown);
    diff0 = partition_disagreement(grown, want, cn);
    print_message("chunk [%lld, %lld)^3 of a 96^3 synth image, halo %lld: "
                  "%.4f%% of its voxels partitioned otherwise than in the "
                  "whole volume (%.0f voxels); without a halo %.2f%%\n",
                  (long long)c0, (long long)c1, (long long)halo, 100.0 * diff,
                  diff * (double)cn, 100.0 * diff0);
    assert_true(diff < 0.005);
    assert_true(diff0 > 0.005);
    /* What the segment stage runs (cnx_segjoin_chunk): here the context
     * (64 voxels) reaches past the halo, so the seeds see all that was
     * read and the labels partition the chunk as above, exactly. (Where
     * the halo is larger, ISBI 2012's chunked test and align_test measure
     * the context's effect: tests/integration/segment_isbi_chunked.sh,
     * acceptance/align_test.sh.) */
    assert_int_equal(cnx_segment_context(&p), 64);
    assert_true(chunk_path_disagreement(synth->image->data, s, lo, hi, c0,
                                        c1, &p, got) == 0.0);
    /* The measure itself: 0 for one partition under other numbers. */
    for (size_t i = 0; i < cn; i++)
        got[i] = want[i] * 7 + 3;
    assert_true(partition_disagreement(got, want, cn) == 0.0);
    cnx_synth_free(synth);
    free(got);
    free(want);
    free(grown);
    free(whole);
}

/*
 * The boundary of a region: without raw_input the region's values of the
 * whole call; with it, the whole call when the region is the volume, and
 * a region off the volume refused.
 */
static void test_segment__boundary_region(void **state)
{
    const int64_t size[3] = {24, 20, 16}, lo[3] = {3, 5, 2},
                  osize[3] = {10, 9, 8}, zero[3] = {0, 0, 0};
    const size_t n = 24 * 20 * 16, on = 10 * 9 * 8;
    uint8_t *u = malloc(n);
    float *whole = malloc(n * sizeof(float)), *reg = malloc(n * sizeof(float));
    cnx_segment_params p;
    size_t k = 0;
    (void)state;
    assert_true(u && whole && reg);
    for (size_t i = 0; i < n; i++)
        u[i] = (uint8_t)(((uint32_t)i * 2654435761u) >> 24);
    cnx_segment_params_default(&p);
    assert_int_equal(cnx_segment_boundary_u8(u, size, &p, whole), 0);
    assert_int_equal(
        cnx_segment_boundary_u8_region(u, size, &p, lo, osize, reg), 0);
    for (int64_t z = lo[2]; z < lo[2] + osize[2]; z++)
        for (int64_t y = lo[1]; y < lo[1] + osize[1]; y++)
            for (int64_t x = lo[0]; x < lo[0] + osize[0]; x++)
                assert_true(reg[k++] ==
                            whole[(size_t)(x + 24 * (y + 20 * z))]);
    assert_int_equal(k, on);
    p.raw_input = 1;
    assert_int_equal(cnx_segment_boundary_u8(u, size, &p, whole), 0);
    assert_int_equal(
        cnx_segment_boundary_u8_region(u, size, &p, zero, size, reg), 0);
    assert_memory_equal(reg, whole, n * sizeof(float));
    {
        const int64_t off[3] = {20, 0, 0};
        assert_int_equal(
            cnx_segment_boundary_u8_region(u, size, &p, off, osize, reg),
            CNX_EINVAL);
        assert_int_equal(
            cnx_segment_boundary_u8_region(u, size, &p, NULL, osize, reg),
            CNX_EINVAL);
    }
    free(reg);
    free(whole);
    free(u);
}

/* nodata_zero: voxels of value 0 (no data) are boundary after the filter;
 * the others see no edge where the data stops (they are filtered as if the
 * missing voxels had the data's mean). */
static void test_segment__nodata_zero_is_boundary(void **state)
{
    const int64_t size[3] = {32, 32, 4};
    const size_t n = 32 * 32 * 4;
    uint8_t *u = malloc(n);
    float *with = malloc(n * sizeof(float));
    cnx_segment_params p;
    size_t zeros = 0;
    (void)state;
    assert_non_null(u);
    assert_non_null(with);
    for (size_t i = 0; i < n; i++) {
        const size_t x = i % 32;
        /* a textured tissue with no data in the 8 columns on the left */
        u[i] = x < 8
                   ? 0
                   : (uint8_t)(120 + (int)(((uint32_t)i * 2654435761u) >> 28));
    }
    cnx_segment_params_default(&p);
    p.raw_input = 1;
    p.nodata_zero = 1;
    assert_int_equal(cnx_segment_boundary_u8(u, size, &p, with), 0);
    for (size_t i = 0; i < n; i++)
        if (u[i] == 0) {
            zeros++;
            assert_true(with[i] == 1.0f);
        }
    assert_int_equal(zeros, 8 * 32 * 4);
    /* the data's own voxels: no darker edge beside the missing block than
     * in the middle of the tissue (the filter saw the data's mean there) */
    {
        double edge = 0.0, mid = 0.0;
        for (int64_t z = 0; z < 4; z++)
            for (int64_t y = 0; y < 32; y++) {
                edge += with[(z * 32 + y) * 32 + 8];
                mid += with[(z * 32 + y) * 32 + 20];
            }
        assert_true(edge < mid + 0.25 * 128);
    }
    assert_int_equal(cnx_segment_params_parse(&p, "{\"nodata_zero\": true}"),
                     0);
    assert_int_equal(p.nodata_zero, 1);
    free(u);
    free(with);
}

/* ---- graph agglomeration against a reference ----------------------------- */

/* The reference: a dense matrix of (sum, count) between current regions,
 * every step a full scan. O(n^3), for small n. */
typedef struct ref_graph {
    uint32_t n;
    uint64_t *sum, *cnt; /* n x n, 1-based ids stored at [(a-1)*n + b-1] */
    uint64_t *size;
    uint32_t *parent; /* 1-based */
} ref_graph;

static uint64_t *ref_at(const ref_graph *g, uint64_t *m, uint32_t a,
                        uint32_t b)
{
    return &m[(size_t)(a - 1) * g->n + (b - 1)];
}

/* Merge b into a (a < b): combine b's row into a's. */
static void ref_merge(ref_graph *g, uint32_t a, uint32_t b)
{
    for (uint32_t o = 1; o <= g->n; o++) {
        uint64_t s, c;
        if (o == a || o == b || *ref_at(g, g->cnt, b, o) == 0)
            continue;
        s = *ref_at(g, g->sum, b, o);
        c = *ref_at(g, g->cnt, b, o);
        *ref_at(g, g->sum, a, o) += s;
        *ref_at(g, g->cnt, a, o) += c;
        *ref_at(g, g->sum, o, a) += s;
        *ref_at(g, g->cnt, o, a) += c;
    }
    for (uint32_t o = 1; o <= g->n; o++) {
        *ref_at(g, g->sum, b, o) = *ref_at(g, g->cnt, b, o) = 0;
        *ref_at(g, g->sum, o, b) = *ref_at(g, g->cnt, o, b) = 0;
    }
    for (uint32_t i = 1; i <= g->n; i++)
        if (g->parent[i - 1] == b)
            g->parent[i - 1] = a;
    g->size[a - 1] += g->size[b - 1];
    g->size[b - 1] = 0;
}

static void ref_agglomerate(ref_graph *g, uint64_t level, uint64_t min_size)
{
    for (;;) { /* step 4 */
        uint32_t ba = 0, bb = 0;
        uint64_t bv = 0;
        for (uint32_t a = 1; a <= g->n; a++)
            for (uint32_t b = a + 1; b <= g->n; b++) {
                uint64_t c = *ref_at(g, g->cnt, a, b), v;
                if (c == 0)
                    continue;
                v = cnx_segment_edge_value(*ref_at(g, g->sum, a, b), c);
                if (v < level && (ba == 0 || v < bv)) /* raster: ties lower */
                    ba = a, bb = b, bv = v;
            }
        if (ba == 0)
            break;
        ref_merge(g, ba, bb);
    }
    for (;;) { /* step 5 */
        uint32_t node = 0, best = 0;
        uint64_t bv = 0;
        for (uint32_t i = 1; i <= g->n; i++) {
            int has = 0;
            if (g->parent[i - 1] != i || g->size[i - 1] >= min_size)
                continue;
            for (uint32_t o = 1; o <= g->n && !has; o++)
                has = o != i && *ref_at(g, g->cnt, i, o) != 0;
            if (has && (node == 0 || g->size[i - 1] < g->size[node - 1]))
                node = i;
        }
        if (node == 0)
            break;
        for (uint32_t o = 1; o <= g->n; o++) {
            uint64_t c = *ref_at(g, g->cnt, node, o), v;
            if (o == node || c == 0)
                continue;
            v = cnx_segment_edge_value(*ref_at(g, g->sum, node, o), c);
            if (best == 0 || v < bv)
                best = o, bv = v;
        }
        ref_merge(g, node < best ? node : best, node < best ? best : node);
    }
}

static void test_segment__agglomerate_graph_matches_reference(void **state)
{
    uint64_t rng = 12345;
    (void)state;
    for (int trial = 0; trial < 60; trial++) {
        const uint32_t n = 20 + (uint32_t)(trial % 7) * 13;
        ref_graph g = {n, calloc((size_t)n * n, 8), calloc((size_t)n * n, 8),
                       calloc(n, 8), calloc(n, 4)};
        seg_graph_edge *e = calloc((size_t)n * n, sizeof(*e));
        uint64_t *sizes = calloc(n, 8);
        uint32_t *parent = calloc(n, 4);
        const uint32_t hub = 1 + (uint32_t)(trial * 7) % n;
        const uint64_t level = (uint64_t)(40 + trial % 5 * 40) * 65536;
        const uint64_t min_size = trial % 3 == 0 ? 1 : 30;
        size_t ne = 0;
        assert_true(g.sum && g.cnt && g.size && g.parent && e && sizes &&
                    parent);
        for (uint32_t i = 0; i < n; i++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            sizes[i] = g.size[i] = 1 + (rng >> 33) % 60;
            g.parent[i] = i + 1;
        }
        for (uint32_t a = 1; a <= n; a++)
            for (uint32_t b = a + 1; b <= n; b++) {
                /* sparse, but the hub touches nearly every node; values
                 * from few levels, so that ties are common */
                rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
                if ((rng >> 40) % 100 >= (a == hub || b == hub ? 90u : 12u))
                    continue;
                e[ne].a = a;
                e[ne].b = b;
                e[ne].count = 1 + (rng >> 20) % 4;
                e[ne].sum = e[ne].count * (20 * ((rng >> 10) % 12));
                *ref_at(&g, g.sum, a, b) = *ref_at(&g, g.sum, b, a) = e[ne].sum;
                *ref_at(&g, g.cnt, a, b) = *ref_at(&g, g.cnt, b, a) =
                    e[ne].count;
                ne++;
            }
        assert_int_equal(seg__agglomerate_graph(n, sizes, e, ne, level,
                                                min_size, parent),
                         0);
        ref_agglomerate(&g, level, min_size);
        for (uint32_t i = 0; i < n; i++)
            assert_int_equal(parent[i], g.parent[i] - 1);
        free(g.sum);
        free(g.cnt);
        free(g.size);
        free(g.parent);
        free(e);
        free(sizes);
        free(parent);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment__defaults),
        cmocka_unit_test(test_segment__nodata_zero_is_boundary),
        cmocka_unit_test(test_segment__params_at_resolution),
        cmocka_unit_test(test_segment__parse_every_key),
        cmocka_unit_test(test_segment__parse_refuses_bad_values),
        cmocka_unit_test(test_segment__check_names_the_field),
        cmocka_unit_test(test_segment__check_voxel_limits),
        cmocka_unit_test(test_segment__mode_of_resolution),
        cmocka_unit_test(test_segment__min_voxels),
        cmocka_unit_test(test_segment__halo_formula),
        cmocka_unit_test(test_segment__quantize_and_pair_value),
        cmocka_unit_test(test_segment__refuses_bad_input),
        cmocka_unit_test(test_segment__walls_separate_blobs),
        cmocka_unit_test(test_segment__merge_threshold_is_exact),
        cmocka_unit_test(test_segment__wall_with_gap),
        cmocka_unit_test(test_segment__min_size_joins_lowest_neighbour),
        cmocka_unit_test(test_segment__all_membrane_gets_one_segment),
        cmocka_unit_test(test_segment__min_size_nm3_follows_resolution),
        cmocka_unit_test(test_segment__sections_are_independent),
        cmocka_unit_test(test_segment__sections_mode_joins_across_z),
        cmocka_unit_test(test_segment__resolution_scales_lengths),
        cmocka_unit_test(test_segment__deterministic_raster_numbered),
        cmocka_unit_test(test_segment__boundary_f32_clamps),
        cmocka_unit_test(test_segment__membrane_filter_finds_dark_line),
        cmocka_unit_test(test_segment__synth_volume_scores),
        cmocka_unit_test(test_segment__chunk_with_halo_matches_whole),
        cmocka_unit_test(test_segment__boundary_region),
        cmocka_unit_test(test_segment__agglomerate_graph_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
