/*
 * test_segjoin.c - segmentation across chunk seams: geometry ids, face
 * records, the join, mappings, relabelling, the one-process driver.
 *
 * Truth: volumes of boxes walled off from each other by membrane (value 1)
 * with interiors at 0. The right answer is known: one segment per box, so
 * on interior voxels the chunked result must score VI 0 against the boxes,
 * whatever the chunking, the schedule or where the walls fall on the seams.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cnx/error.h"
#include "cnx/metrics.h"
#include "cnx/segjoin.h"

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
    p->min_size = 0;
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

/* Ids are the packed first voxel of the least fragment of the segment. */
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

/* With sections, nothing joins across z, even with no wall in z. */
static void test_sections_never_join_z(void **state)
{
    int64_t size[3] = {24, 24, 8}, chunk[3] = {24, 24, 4};
    size_t n = 24 * 24 * 8;
    float *b = calloc(n, sizeof(*b));
    uint64_t *seg = malloc(n * sizeof(*seg));
    cnx_segment_params p;
    (void)state;
    params(&p);
    p.sections = 1;
    assert_int_equal(cnx_segjoin_chunked(b, size, chunk, 0, &p, NULL, seg), 0);
    for (int64_t z = 0; z < 8; z++)
        for (size_t i = 0; i < 24 * 24; i++)
            assert_int_equal(seg[(size_t)z * 576 + i],
                             cnx_segjoin_id(0, 0, z));
    free(b);
    free(seg);
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
    assert_int_equal(cnx_segjoin_properties_json(&j, &props), 0);
    assert_non_null(strstr(props, "\"ids\":[\"1\"]"));
    assert_non_null(strstr(props, "\"values\":[1024]"));
    free(props);
    /* chunk 0 of the join is "right" (input order) */
    assert_int_equal(cnx_segjoin_mapping_encode(&j, 0, &map, &nmap), 0);
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
        cmocka_unit_test(test_join_records),
        cmocka_unit_test(test_corrupt_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
