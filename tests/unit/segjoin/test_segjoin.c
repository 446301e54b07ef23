/*
 * test_segjoin.c - segmentation across chunk seams: geometry ids, face
 * records, the join, mappings, relabelling, the one-process driver.
 *
 * Truth: volumes of boxes walled off from each other by membrane (value 1)
 * with interiors at 0. The right answer is known: one segment per box, so
 * on interior voxels the chunked result must score VI 0 against the boxes,
 * whatever the chunking, the schedule or where the walls fall on the seams.
 * The mode decides the z faces: 2D never joins across them, SECTIONS and
 * 3D do; the join's minimum size is min_size_nm3 at the resolution.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cnx/error.h"
#include "cnx/metrics.h"
#include "cnx/segjoin.h"
#include "cnx/segjoin_io.h"

/* Boxes of side `cell` with 1-voxel walls on the planes x % cell == 0
 * (likewise y, z); gt is the box index + 1 inside, 0 on walls. Walls are
 * skipped on axes whose bit is clear in `walls`. */
static void boxes(const int64_t size[3], int64_t cell, int walls, float *b,
                  uint64_t *gt)
{
    size_t i = 0;
    for (int64_t z = 0; z < size[2]; z++)
        for (int64_t y = 0; y < size[1]; y++)
            for (int64_t x = 0; x < size[0]; x++, i++) {
                int wall = ((walls & 1) && x % cell == 0) ||
                           ((walls & 2) && y % cell == 0) ||
                           ((walls & 4) && z % cell == 0);
                int64_t bx = walls & 1 ? x / cell : 0;
                int64_t by = walls & 2 ? y / cell : 0;
                int64_t bz = walls & 4 ? z / cell : 0;
                b[i] = wall ? 1.0f : 0.0f;
                gt[i] = wall ? 0 : (uint64_t)(1 + bx + 16 * (by + 16 * bz));
            }
}

static void params(cnx_segment_params *p)
{
    cnx_segment_params_default(p);
    p->min_size_nm3 = 0.0;
}

static cnx_seg_scores score(const uint64_t *seg, const uint64_t *gt, size_t n)
{
    cnx_seg_scores s;
    assert_int_equal(cnx_seg_scores_u64(seg, gt, n, &s), 0);
    return s;
}

/* The chunked method recovers every box exactly, seams or not. */
static void test_boxes_across_seams(void **state)
{
    int64_t size[3] = {48, 40, 36}, chunk[3] = {16, 16, 16};
    size_t n = 48 * 40 * 36;
    float *b = malloc(n * sizeof(*b));
    uint64_t *gt = malloc(n * sizeof(*gt)), *seg = malloc(n * sizeof(*seg));
    cnx_segment_params p;
    (void)state;
    params(&p);
    /* boxes of 12: walls at 0, 12, 24, 36 cross the 16-chunks' seams */
    boxes(size, 12, 7, b, gt);
    assert_int_equal(cnx_segjoin_chunked(b, size, chunk, 2, &p, NULL, seg), 0);
    cnx_seg_scores s = score(seg, gt, n);
    assert_true(s.vi_split < 1e-12);
    assert_true(s.vi_merge < 1e-12);
    free(b);
    free(gt);
    free(seg);
}

/* Ids are the packed first voxel of a fragment of the segment. */
static void test_geometry_ids(void **state)
{
    int64_t size[3] = {32, 32, 8}, chunk[3] = {16, 16, 8};
    size_t n = 32 * 32 * 8;
    float *b = calloc(n, sizeof(*b));
    uint64_t *seg = malloc(n * sizeof(*seg));
    cnx_segment_params p;
    (void)state;
    params(&p);
    /* no wall at all: one segment over four chunks, joined across seams */
    assert_int_equal(cnx_segjoin_chunked(b, size, chunk, 2, &p, NULL, seg), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(seg[i], cnx_segjoin_id(0, 0, 0));
    assert_int_equal(cnx_segjoin_id(3, 2, 1),
                     1 + (3 | (uint64_t)2 << 21 | (uint64_t)1 << 42));
    free(b);
    free(seg);
}

/* Same bytes for 1 and 2 threads, forward and reverse. */
static void test_schedules_same_bytes(void **state)
{
    int64_t size[3] = {40, 40, 40}, chunk[3] = {16, 16, 16};
    size_t n = 40 * 40 * 40;
    float *b = malloc(n * sizeof(*b));
    uint64_t *gt = malloc(n * sizeof(*gt));
    uint64_t *a = malloc(n * sizeof(*a)), *c = malloc(n * sizeof(*c));
    cnx_segjoin_schedule sched[] = {{2, 0}, {1, 1}, {2, 1}};
    cnx_segment_params p;
    uint64_t x = 7;
    (void)state;
    params(&p);
    boxes(size, 10, 7, b, gt);
    /* noise so that the fragments are many and uneven */
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = b[i] * 0.7f + (float)(x >> 40) / (float)(1 << 24) * 0.3f;
    }
    assert_int_equal(cnx_segjoin_chunked(b, size, chunk, 3, &p, NULL, a), 0);
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(
            cnx_segjoin_chunked(b, size, chunk, 3, &p, &sched[k], c), 0);
        assert_memory_equal(a, c, n * sizeof(*a));
    }
    free(b);
    free(gt);
    free(a);
    free(c);
}

/* In 2D, nothing joins across z, even with no wall in z. */
static void test_sections_never_join_z(void **state)
{
    int64_t size[3] = {24, 24, 8}, chunk[3] = {24, 24, 4};
    size_t n = 24 * 24 * 8;
    float *b = calloc(n, sizeof(*b));
    uint64_t *seg = malloc(n * sizeof(*seg));
    cnx_segment_params p;
    (void)state;
    params(&p);
    p.mode = CNX_SEGMENT_MODE_2D;
    assert_int_equal(cnx_segjoin_chunked(b, size, chunk, 0, &p, NULL, seg), 0);
    for (int64_t z = 0; z < 8; z++)
        for (size_t i = 0; i < 24 * 24; i++)
            assert_int_equal(seg[(size_t)z * 576 + i],
                             cnx_segjoin_id(0, 0, z));
    free(b);
    free(seg);
}

/*
 * SECTIONS segments each section alone but links them in its graph: the
 * same volume is one segment, joined within each chunk and across the
 * z face between the chunks (with a halo or without); so is 3D, and so is
 * AUTO at 8 x 8 x 96 nm. 2D at that resolution still never joins.
 */
static void test_sections_mode_joins_z(void **state)
{
    int64_t size[3] = {24, 24, 8}, chunk[3] = {24, 24, 4};
    size_t n = 24 * 24 * 8;
    float *b = calloc(n, sizeof(*b));
    uint64_t *seg = malloc(n * sizeof(*seg));
    cnx_segment_params p;
    (void)state;
    for (int m = CNX_SEGMENT_MODE_AUTO; m <= CNX_SEGMENT_MODE_SECTIONS; m++)
        for (int64_t halo = 0; halo <= 2; halo += 2) {
            params(&p);
            p.mode = (cnx_segment_mode)m;
            p.resolution[2] = 96.0; /* AUTO: SECTIONS (12 x 8) */
            assert_int_equal(cnx_segment_mode_of(&p),
                             m == CNX_SEGMENT_MODE_3D
                                 ? CNX_SEGMENT_MODE_3D
                                 : CNX_SEGMENT_MODE_SECTIONS);
            assert_int_equal(
                cnx_segjoin_chunked(b, size, chunk, halo, &p, NULL, seg), 0);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(seg[i], cnx_segjoin_id(0, 0, 0));
        }
    params(&p);
    p.mode = CNX_SEGMENT_MODE_2D;
    p.resolution[2] = 96.0;
    assert_int_equal(cnx_segjoin_chunked(b, size, chunk, 2, &p, NULL, seg), 0);
    for (int64_t z = 0; z < 8; z++)
        assert_int_equal(seg[(size_t)z * 576 + 100], cnx_segjoin_id(0, 0, z));
    /* A wall in z between the chunks keeps SECTIONS' halves apart. */
    for (size_t i = 3 * 576; i < 4 * 576; i++)
        b[i] = 1.0f;
    params(&p);
    p.mode = CNX_SEGMENT_MODE_SECTIONS;
    assert_int_equal(cnx_segjoin_chunked(b, size, chunk, 0, &p, NULL, seg), 0);
    assert_int_equal(seg[0], cnx_segjoin_id(0, 0, 0));
    assert_true(seg[n - 1] != seg[0]);
    free(b);
    free(seg);
}

/*
 * The join's cleanup counts min_size_nm3 in voxels of the resolution: two
 * 512-voxel chunks behind a full membrane (value 1) on the left chunk's
 * last layer do not join by the threshold; a minimum of 513 voxels of 8 nm
 * joins them, 512 does not, and 513 x 512 nm^3 at 16 nm is 64 voxels.
 */
static void test_join_min_size_at_resolution(void **state)
{
    float *bl = calloc(512, sizeof(*bl)), *br = calloc(512, sizeof(*br));
    cnx_box left = {{0, 0, 0}, {8, 8, 8}}, right = {{8, 0, 0}, {16, 8, 8}};
    uint64_t la[512], lb[512];
    static const struct {
        double res, nm3;
        size_t nsegs;
    } cases[] = {
        {8.0, 0.0, 2},
        {8.0, 512.0 * 512.0, 2},
        {8.0, 513.0 * 512.0, 1},
        {16.0, 513.0 * 512.0, 2},
        {16.0, 513.0 * 4096.0, 1},
        {4.0, 513.0 * 64.0, 1},
    };
    (void)state;
    assert_true(bl && br);
    for (int z = 0; z < 8; z++)
        for (int y = 0; y < 8; y++)
            bl[7 + 8 * (y + 8 * z)] = 1.0f;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cnx_segment_params p;
        cnx_segjoin_input in[2];
        cnx_segjoin j;
        uint8_t *fa, *fb;
        size_t na, nb;
        params(&p);
        p.resolution[0] = p.resolution[1] = p.resolution[2] = cases[k].res;
        p.min_size_nm3 = cases[k].nm3;
        assert_int_equal(
            cnx_segjoin_fragments(bl, &left, &left, &p, la, &fa, &na), 0);
        assert_int_equal(
            cnx_segjoin_fragments(br, &right, &right, &p, lb, &fb, &nb), 0);
        for (int i = 0; i < 512; i++) {
            assert_int_equal(la[i], cnx_segjoin_id(0, 0, 0));
            assert_int_equal(lb[i], cnx_segjoin_id(8, 0, 0));
        }
        in[0] = (cnx_segjoin_input){fa, na, "left"};
        in[1] = (cnx_segjoin_input){fb, nb, "right"};
        assert_int_equal(cnx_segjoin_run(in, 2, &p, &j), 0);
        if (j.nsegs != cases[k].nsegs)
            fail_msg("%g nm^3 at %g nm: %zu segments, want %zu",
                     cases[k].nm3, cases[k].res, j.nsegs, cases[k].nsegs);
        cnx_segjoin_free(&j);
        free(fa);
        free(fb);
    }
    free(bl);
    free(br);
}

/* Two chunks' records by hand: join, mappings, properties, relabel. */
static void test_join_records(void **state)
{
    int64_t bs[3] = {16, 8, 8};
    float *b = calloc(16 * 8 * 8, sizeof(*b));
    cnx_box whole = {{0, 0, 0}, {16, 8, 8}};
    cnx_box left = {{0, 0, 0}, {8, 8, 8}}, right = {{8, 0, 0}, {16, 8, 8}};
    uint64_t la[512], lb[512];
    cnx_segjoin_input in[2];
    uint8_t *fa, *fb, *map;
    size_t na, nb, nmap;
    cnx_segment_params p;
    cnx_segjoin j;
    char *props;
    (void)state;
    (void)bs;
    params(&p);
    assert_int_equal(cnx_segjoin_fragments(b, &whole, &left, &p, la, &fa, &na),
                     0);
    assert_int_equal(
        cnx_segjoin_fragments(b, &whole, &right, &p, lb, &fb, &nb), 0);
    assert_int_equal(la[0], cnx_segjoin_id(0, 0, 0));
    assert_int_equal(lb[0], cnx_segjoin_id(8, 0, 0));
    /* in reverse order: the result does not depend on it */
    in[0] = (cnx_segjoin_input){fb, nb, "right"};
    in[1] = (cnx_segjoin_input){fa, na, "left"};
    assert_int_equal(cnx_segjoin_run(in, 2, &p, &j), 0);
    assert_int_equal(j.nsegs, 1);
    assert_int_equal(j.seg_ids[0], cnx_segjoin_id(0, 0, 0));
    assert_int_equal(j.seg_size[0], 1024);
    assert_int_equal(j.nmerged, 1);
    {
        /* 1024 voxels at 100 x 100 x 100 nm: 1.02 um3, "large"; its id
         * from voxel 0,0,0; fragments in both chunks: "multi_chunk". */
        const double res[3] = {100, 100, 100};
        json_t *doc, *props_arr;
        assert_int_equal(cnx_segjoin_properties_json(&j, res, &props), 0);
        doc = json_loads(props, 0, NULL);
        assert_non_null(doc);
        props_arr = json_object_get(json_object_get(doc, "inline"),
                                    "properties");
        assert_string_equal(json_string_value(json_array_get(json_object_get(
                                json_object_get(doc, "inline"), "ids"), 0)),
                            "1");
        assert_string_equal(
            json_string_value(json_array_get(
                json_object_get(json_array_get(props_arr, 0), "values"), 0)),
            "1.02 um3 @ 0,0,0");
        assert_int_equal(json_integer_value(json_array_get(
                             json_object_get(json_array_get(props_arr, 1),
                                             "values"),
                             0)),
                         1024);
        assert_non_null(strstr(props, "\"values\":[[2,3]]"));
        json_decref(doc);
        free(props);
    }
    /* the join's chunks are in block order: chunk 1 is "right" */
    assert_int_equal(j.chunks[1].min[0], 8);
    assert_int_equal(cnx_segjoin_mapping_encode(&j, 1, &map, &nmap), 0);
    assert_int_equal(cnx_segjoin_relabel(lb, 512, map, nmap), 0);
    for (int i = 0; i < 512; i++)
        assert_int_equal(lb[i], cnx_segjoin_id(0, 0, 0));
    /* the left chunk's fragments are not in the right chunk's mapping */
    assert_int_equal(cnx_segjoin_relabel(la, 512, map, nmap), CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "no entry"));
    free(map);
    cnx_segjoin_free(&j);
    free(fa);
    free(fb);
    free(b);
}

/* Malformed records are refused with the record's name, never read past. */
static void test_corrupt_records(void **state)
{
    float *b = calloc(8 * 8 * 8, sizeof(*b));
    cnx_box box = {{0, 0, 0}, {8, 8, 8}};
    uint64_t lab[512];
    uint8_t *face;
    size_t len;
    cnx_segment_params p;
    cnx_segjoin j;
    (void)state;
    params(&p);
    assert_int_equal(cnx_segjoin_fragments(b, &box, &box, &p, lab, &face, &len),
                     0);
    for (size_t cut = 0; cut < len; cut += 7) {
        cnx_segjoin_input in = {face, cut, "c0"};
        assert_int_equal(cnx_segjoin_run(&in, 1, &p, &j), CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "c0"));
    }
    face[0] ^= 1;
    {
        cnx_segjoin_input in = {face, len, "c1"};
        assert_int_equal(cnx_segjoin_run(&in, 1, &p, &j), CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "magic"));
    }
    assert_int_equal(cnx_segjoin_relabel(lab, 512, face, 7), CNX_ECORRUPT);
    free(face);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boxes_across_seams),
        cmocka_unit_test(test_geometry_ids),
        cmocka_unit_test(test_schedules_same_bytes),
        cmocka_unit_test(test_sections_never_join_z),
        cmocka_unit_test(test_sections_mode_joins_z),
        cmocka_unit_test(test_join_min_size_at_resolution),
        cmocka_unit_test(test_join_records),
        cmocka_unit_test(test_corrupt_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
