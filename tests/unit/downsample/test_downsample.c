/*
 * Downsampling: the kernel against a naive reference (nested loops over
 * each output voxel's block in global coordinates, 128-bit sums, sorting
 * for the mode) on random volumes of odd sizes and origins, for every
 * type, both modes and every factor; rounding and tie cases by hand; edge
 * blocks; determinism and invariance to how a volume is cut into tasks;
 * the factor rule; the next scale's geometry; concurrent scale adds; and
 * the stage itself, run through the worker runtime's own I/O
 * (cnx_stage_read/_write, digest-checked, over real layers in a temporary
 * directory).
 */
#include "cnx_test.h"

#include <math.h>
#include <pthread.h>

#include "cnx/downsample.h"
#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/stages.h"
#include "cnx/volume.h"
#include "worker_int.h"

__extension__ typedef unsigned __int128 u128;

/* ---- the reference ---------------------------------------------------- */

static uint64_t get_u(const cnx_volume *vol, int64_t i)
{
    switch (vol->dtype) {
    case CNX_DT_UINT8:
        return ((const uint8_t *)vol->data)[i];
    case CNX_DT_UINT16:
        return ((const uint16_t *)vol->data)[i];
    case CNX_DT_UINT32:
        return ((const uint32_t *)vol->data)[i];
    case CNX_DT_UINT64:
        return ((const uint64_t *)vol->data)[i];
    default:
        fail();
    }
    return 0;
}

static void set_u(cnx_volume *vol, int64_t i, uint64_t v)
{
    switch (vol->dtype) {
    case CNX_DT_UINT8:
        ((uint8_t *)vol->data)[i] = (uint8_t)v;
        break;
    case CNX_DT_UINT16:
        ((uint16_t *)vol->data)[i] = (uint16_t)v;
        break;
    case CNX_DT_UINT32:
        ((uint32_t *)vol->data)[i] = (uint32_t)v;
        break;
    case CNX_DT_UINT64:
        ((uint64_t *)vol->data)[i] = v;
        break;
    default:
        fail();
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int inside(const cnx_box *box, int64_t x, int64_t y, int64_t z)
{
    return x >= box->min[0] && x < box->max[0] && y >= box->min[1] &&
           y < box->max[1] && z >= box->min[2] && z < box->max[2];
}

/*
 * out (already allocated with the right box) from in, one output voxel at
 * a time. Integer average: exact 128-bit sum, (sum + n/2) / n. float32:
 * per x column, values in z-then-y order summed in double, then the
 * columns, then divided (the documented order). Mode: sort, longest run,
 * the first (lowest) of equally long runs.
 */
static void reference_voxel(cnx_volume *out, const cnx_volume *in,
                            const int64_t f[3], cnx_downsample_mode mode,
                            const int64_t o[3], int64_t c)
{
    const int64_t at = cnx_volume_index(out, o[0], o[1], o[2], c);
    uint64_t vals[8];
    double col[2];
    int ncol = 0, n = 0;

    for (int64_t dx = 0; dx < f[0]; dx++) {
        int first = 1;
        for (int64_t dz = 0; dz < f[2]; dz++) {
            for (int64_t dy = 0; dy < f[1]; dy++) {
                const int64_t x = o[0] * f[0] + dx;
                const int64_t y = o[1] * f[1] + dy;
                const int64_t z = o[2] * f[2] + dz;
                int64_t i;
                if (!inside(&in->box, x, y, z))
                    continue;
                i = cnx_volume_index(in, x, y, z, c);
                if (in->dtype == CNX_DT_FLOAT32) {
                    double v = ((const float *)in->data)[i];
                    col[ncol] = first ? v : col[ncol] + v;
                } else {
                    vals[n] = get_u(in, i);
                }
                first = 0;
                n++;
            }
        }
        if (!first)
            ncol++;
    }
    assert_true(n >= 1 && n <= 8);
    if (in->dtype == CNX_DT_FLOAT32) {
        double sum = ncol == 2 ? col[0] + col[1] : col[0];
        ((float *)out->data)[at] = (float)(sum / (double)n);
    } else if (mode == CNX_DOWNSAMPLE_AVERAGE) {
        u128 sum = 0;
        for (int i = 0; i < n; i++)
            sum += vals[i];
        set_u(out, at, (uint64_t)((sum + (u128)(n / 2)) / (u128)n));
    } else {
        uint64_t best = 0;
        int bestrun = 0;
        qsort(vals, (size_t)n, sizeof(vals[0]), cmp_u64);
        for (int i = 0; i < n;) {
            int j = i;
            while (j < n && vals[j] == vals[i])
                j++;
            if (j - i > bestrun) {
                bestrun = j - i;
                best = vals[i];
            }
            i = j;
        }
        set_u(out, at, best);
    }
}

static void reference(cnx_volume *out, const cnx_volume *in, const int64_t f[3],
                      cnx_downsample_mode mode)
{
    const cnx_box *b = &out->box;
    int64_t o[3];
    for (int64_t c = 0; c < in->channels; c++)
        for (o[2] = b->min[2]; o[2] < b->max[2]; o[2]++)
            for (o[1] = b->min[1]; o[1] < b->max[1]; o[1]++)
                for (o[0] = b->min[0]; o[0] < b->max[0]; o[0]++)
                    reference_voxel(out, in, f, mode, o, c);
}

/* ---- data ------------------------------------------------------------- */

static const cnx_dtype all_types[] = {
    CNX_DT_UINT8, CNX_DT_UINT16, CNX_DT_UINT32, CNX_DT_UINT64, CNX_DT_FLOAT32};

/*
 * Random voxels. Average: the full range of the type (sums that overflow
 * 64 bits for uint64), floats of mixed sign and magnitude. Mode: a small
 * alphabet with 0 and ids near the top of the type, so that majorities
 * and ties are frequent.
 */
static void fill_random(cnx_volume *vol, cnx_downsample_mode mode,
                        uint64_t *seed)
{
    const int64_t n = cnx_volume_voxels(vol) * vol->channels;
    const uint64_t top = vol->dtype == CNX_DT_UINT8    ? 0xFF
                         : vol->dtype == CNX_DT_UINT16 ? 0xFFFF
                         : vol->dtype == CNX_DT_UINT32 ? 0xFFFFFFFFu
                                                       : UINT64_MAX;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = cnx_test_rand(seed);
        if (vol->dtype == CNX_DT_FLOAT32) {
            /* Full 24-bit mantissas over 2^80 of range: sums of a block
             * are inexact even in double, so their order shows. */
            const int64_t m = (int64_t)(r & 0xFFFFFF) - 0x800000;
            const int e = (int)((r >> 40) % 81) - 40 - 23;
            ((float *)vol->data)[i] = ldexpf((float)m, e);
        } else if (mode == CNX_DOWNSAMPLE_AVERAGE) {
            set_u(vol, i, (r >> 8) % 16 == 0 ? top - (r % 3) : r & top);
        } else {
            static const uint64_t small[] = {0, 1, 2, 7};
            uint64_t k = r % 6;
            set_u(vol, i, k < 4 ? small[k] : top - (k - 4));
        }
    }
}

static cnx_volume *new_volume(cnx_dtype dt, const cnx_box *box,
                              int64_t channels)
{
    cnx_volume *vol = NULL;
    assert_int_equal(cnx_volume_new(&vol, dt, box, channels), 0);
    return vol;
}

/* Kernel and reference on one input; they must agree byte for byte. */
static void check_against_reference(const cnx_volume *in, const int64_t f[3],
                                    cnx_downsample_mode mode)
{
    cnx_volume *got = NULL, *want;
    cnx_box obox;
    assert_int_equal(cnx_downsample_box(&in->box, f, &obox), 0);
    want = new_volume(in->dtype, &obox, in->channels);
    reference(want, in, f, mode);
    assert_int_equal(cnx_downsample_volume(&got, in, f, mode), 0);
    assert_true(cnx_box_equal(&got->box, &obox));
    if (memcmp(got->data, want->data, cnx_volume_bytes(want)) != 0) {
        print_error("type %s mode %d factor %lld,%lld,%lld box %lld,%lld,"
                    "%lld + %lldx%lldx%lld x%lld channels\n",
                    cnx_dtype_name(in->dtype), (int)mode, (long long)f[0],
                    (long long)f[1], (long long)f[2], (long long)in->box.min[0],
                    (long long)in->box.min[1], (long long)in->box.min[2],
                    (long long)(in->box.max[0] - in->box.min[0]),
                    (long long)(in->box.max[1] - in->box.min[1]),
                    (long long)(in->box.max[2] - in->box.min[2]),
                    (long long)in->channels);
        fail();
    }
    cnx_volume_free(got);
    cnx_volume_free(want);
}

/* ---- kernel ----------------------------------------------------------- */

/*
 * One random case: odd and even sizes 1..13 (every fourth case a wide row
 * in x, to run the vector loops and their tails), an origin anywhere on the
 * factor's lattice, negative included; 1 or 2 channels.
 */
static void random_case(cnx_dtype dt, cnx_downsample_mode mode,
                        const int64_t f[3], int trial, uint64_t *seed)
{
    cnx_volume *in;
    cnx_box box;
    for (int i = 0; i < 3; i++) {
        int64_t size = 1 + (int64_t)(cnx_test_rand(seed) % 13);
        if (i == 0 && trial % 4 == 3)
            size = 61 + (int64_t)(cnx_test_rand(seed) % 8);
        box.min[i] = f[i] * ((int64_t)(cnx_test_rand(seed) % 21) - 10);
        box.max[i] = box.min[i] + size;
    }
    in = new_volume(dt, &box, 1 + (int64_t)(trial % 3 == 2));
    fill_random(in, mode, seed);
    check_against_reference(in, f, mode);
    cnx_volume_free(in);
}

static void test_downsample__random_volumes_match_the_reference(void **state)
{
    static const int64_t factors[][3] = {{2, 2, 2}, {2, 2, 1}, {1, 2, 2},
                                         {2, 1, 1}, {1, 1, 2}, {1, 1, 1}};
    const size_t ntypes = sizeof(all_types) / sizeof(all_types[0]);
    const size_t nfactors = sizeof(factors) / sizeof(factors[0]);
    uint64_t seed = 20260101;
    int cases = 0;
    (void)state;
    for (size_t t = 0; t < ntypes; t++) {
        for (int m = CNX_DOWNSAMPLE_AVERAGE; m <= CNX_DOWNSAMPLE_MODE; m++) {
            if (all_types[t] == CNX_DT_FLOAT32 && m == CNX_DOWNSAMPLE_MODE)
                continue;
            for (size_t fi = 0; fi < nfactors; fi++) {
                for (int trial = 0; trial < 12; trial++) {
                    random_case(all_types[t], (cnx_downsample_mode)m,
                                factors[fi], trial, &seed);
                    cases++;
                }
            }
        }
    }
    assert_int_equal(cases, 9 * 6 * 12);
}

/* One 2x2x2 block of labels, as given, downsampled by mode. */
static uint64_t block_mode(cnx_dtype dt, const uint64_t v[8])
{
    const int64_t f[3] = {2, 2, 2};
    cnx_box box = cnx_box_make(0, 0, 0, 2, 2, 2);
    cnx_volume *in = new_volume(dt, &box, 1), *out = NULL;
    uint64_t got;
    for (int i = 0; i < 8; i++)
        set_u(in, i, v[i]);
    assert_int_equal(cnx_downsample_volume(&out, in, f, CNX_DOWNSAMPLE_MODE),
                     0);
    assert_int_equal(cnx_volume_voxels(out), 1);
    got = get_u(out, 0);
    cnx_volume_free(in);
    cnx_volume_free(out);
    return got;
}

static void test_downsample__mode_ties_go_to_the_lower_id(void **state)
{
    const uint64_t big = UINT64_C(0x8000000000000001);
    struct {
        uint64_t v[8];
        uint64_t want;
    } cases[] = {
        {{7, 7, 7, 7, 3, 3, 3, 3}, 3},         /* 4:4 */
        {{3, 7, 3, 7, 3, 7, 3, 7}, 3},         /* 4:4, interleaved */
        {{5, 5, 0, 0, 5, 0, 5, 0}, 0},         /* 0 is an ordinary label */
        {{9, 9, 9, 4, 4, 4, 1, 2}, 4},         /* 3:3:1:1 */
        {{8, 6, 4, 2, 1, 3, 5, 7}, 1},         /* all distinct */
        {{6, 6, 5, 5, 4, 4, 9, 9}, 4},         /* four pairs */
        {{0, 0, 0, 1, 1, 1, 1, 0}, 0},         /* 4:4 with 0 */
        {{2, 2, 2, 2, 2, 0, 0, 0}, 2},         /* majority beats lower */
        {{big, big, 5, 5, big, 5, big, 5}, 5}, /* high bit set */
        {{big, big, big, 5, 5, 6, 6, 7}, big}, /* plain majority */
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(block_mode(CNX_DT_UINT64, cases[i].v), cases[i].want);
        if (cases[i].v[0] <= UINT32_MAX && cases[i].v[2] <= UINT32_MAX)
            assert_int_equal(block_mode(CNX_DT_UINT32, cases[i].v),
                             cases[i].want);
    }
}

/* A 2x2x2 uint block with the given values, averaged. */
static uint64_t block_mean(cnx_dtype dt, const uint64_t v[8])
{
    const int64_t f[3] = {2, 2, 2};
    cnx_box box = cnx_box_make(0, 0, 0, 2, 2, 2);
    cnx_volume *in = new_volume(dt, &box, 1), *out = NULL;
    uint64_t got;
    for (int i = 0; i < 8; i++)
        set_u(in, i, v[i]);
    assert_int_equal(cnx_downsample_volume(&out, in, f, CNX_DOWNSAMPLE_AVERAGE),
                     0);
    got = get_u(out, 0);
    cnx_volume_free(in);
    cnx_volume_free(out);
    return got;
}

static void test_downsample__average_rounds_half_up(void **state)
{
    const uint64_t m = UINT64_MAX;
    (void)state;
    /* 4/8 = 0.5 -> 1; 3/8 -> 0; 5/8 -> 1; 12/8 = 1.5 -> 2. */
    assert_int_equal(
        block_mean(CNX_DT_UINT8, (uint64_t[]){0, 0, 0, 0, 1, 1, 1, 1}), 1);
    assert_int_equal(
        block_mean(CNX_DT_UINT8, (uint64_t[]){0, 0, 0, 0, 0, 1, 1, 1}), 0);
    assert_int_equal(
        block_mean(CNX_DT_UINT8, (uint64_t[]){0, 0, 0, 1, 1, 1, 1, 1}), 1);
    assert_int_equal(
        block_mean(CNX_DT_UINT16, (uint64_t[]){1, 1, 1, 1, 2, 2, 2, 2}), 2);
    assert_int_equal(block_mean(CNX_DT_UINT8, (uint64_t[]){255, 255, 255, 255,
                                                           255, 255, 255, 255}),
                     255);
    assert_int_equal(block_mean(CNX_DT_UINT32,
                                (uint64_t[]){UINT32_MAX, UINT32_MAX, UINT32_MAX,
                                             UINT32_MAX, UINT32_MAX, UINT32_MAX,
                                             UINT32_MAX, UINT32_MAX - 3}),
                     UINT32_MAX);
    /* uint64: the sum needs 67 bits and must stay exact. */
    assert_true(
        block_mean(CNX_DT_UINT64, (uint64_t[]){m, m, m, m, m, m, m, m}) == m);
    assert_true(block_mean(CNX_DT_UINT64,
                           (uint64_t[]){m, m, m, m, m, m, m, m - 4}) == m);
    assert_true(block_mean(CNX_DT_UINT64,
                           (uint64_t[]){m, m, m, m, m, m, m, m - 5}) == m - 1);
    assert_true(
        block_mean(CNX_DT_UINT64, (uint64_t[]){m, 0, m, 0, m, 0, m, 1}) ==
        UINT64_C(0x8000000000000000));
}

/*
 * float32 sums follow the documented order: per x column, rows in z-then-y
 * order, then the columns. With 2^60 and 1 in one double sum, 1 is lost or
 * kept depending only on where the cancelling -2^60 comes.
 */
static void test_downsample__float_sums_in_the_documented_order(void **state)
{
    const int64_t f[3] = {2, 2, 2};
    cnx_box box = cnx_box_make(0, 0, 0, 2, 2, 2);
    cnx_volume *in = new_volume(CNX_DT_FLOAT32, &box, 1), *out = NULL;
    float *v = in->data;
    const float big = 1152921504606846976.0f; /* 2^60 */
    (void)state;
    v[cnx_volume_index(in, 0, 0, 0, 0)] = big;
    v[cnx_volume_index(in, 0, 1, 0, 0)] = 1.0f; /* lost in big + 1 */
    v[cnx_volume_index(in, 0, 0, 1, 0)] = -big;
    assert_int_equal(cnx_downsample_volume(&out, in, f, CNX_DOWNSAMPLE_AVERAGE),
                     0);
    assert_true(((float *)out->data)[0] == 0.0f);
    cnx_volume_free(out);
    v[cnx_volume_index(in, 0, 1, 0, 0)] = -big; /* cancels first */
    v[cnx_volume_index(in, 0, 0, 1, 0)] = 1.0f;
    assert_int_equal(cnx_downsample_volume(&out, in, f, CNX_DOWNSAMPLE_AVERAGE),
                     0);
    assert_true(((float *)out->data)[0] == 0.125f);
    cnx_volume_free(out);
    /* Columns are summed after their rows: x0 holds big, x1 -big + 8. */
    memset(v, 0, 8 * sizeof(float));
    v[cnx_volume_index(in, 0, 0, 0, 0)] = big;
    v[cnx_volume_index(in, 1, 0, 0, 0)] = -big;
    v[cnx_volume_index(in, 1, 1, 0, 0)] = 8.0f;
    assert_int_equal(cnx_downsample_volume(&out, in, f, CNX_DOWNSAMPLE_AVERAGE),
                     0);
    assert_true(((float *)out->data)[0] == 0.0f);
    cnx_volume_free(out);
    cnx_volume_free(in);
}

static void test_downsample__edge_blocks_average_only_existing(void **state)
{
    const int64_t f[3] = {2, 2, 2};
    cnx_box box = cnx_box_make(4, 0, -2, 7, 3, 1); /* 3x3x3 */
    cnx_volume *in = new_volume(CNX_DT_UINT8, &box, 1), *out = NULL;
    uint8_t *v = in->data, *o;
    (void)state;
    for (int i = 0; i < 27; i++)
        v[i] = 100;
    v[cnx_volume_index(in, 6, 2, 0, 0)] = 7; /* the lone corner voxel */
    v[cnx_volume_index(in, 6, 0, -2, 0)] = 11;
    v[cnx_volume_index(in, 6, 1, -2, 0)] = 12;
    v[cnx_volume_index(in, 6, 0, -1, 0)] = 14;
    v[cnx_volume_index(in, 6, 1, -1, 0)] = 14; /* sum 51, n 4 -> 13 */
    assert_int_equal(cnx_downsample_volume(&out, in, f, CNX_DOWNSAMPLE_AVERAGE),
                     0);
    o = out->data;
    assert_true(cnx_box_equal(&out->box, &(cnx_box){{2, 0, -1}, {4, 2, 1}}));
    assert_int_equal(o[cnx_volume_index(out, 3, 1, 0, 0)], 7);
    assert_int_equal(o[cnx_volume_index(out, 3, 0, -1, 0)], 13);
    assert_int_equal(o[cnx_volume_index(out, 2, 0, -1, 0)], 100);
    cnx_volume_free(out);
    /* Mode of a two-voxel edge block {100, 7}: a tie, so 7. */
    assert_int_equal(cnx_downsample_volume(&out, in, f, CNX_DOWNSAMPLE_MODE),
                     0);
    o = out->data;
    assert_int_equal(o[cnx_volume_index(out, 3, 1, 0, 0)], 7);
    assert_int_equal(o[cnx_volume_index(out, 3, 0, -1, 0)], 14);
    cnx_volume_free(out);
    cnx_volume_free(in);
}

/*
 * Same bytes on every run, and the same bytes whether a volume is
 * downsampled whole or cut into factor-aligned pieces in any order (which
 * is what tasks do).
 */
static void check_cut_invariant(cnx_dtype dt, cnx_downsample_mode mode,
                                const int64_t f[3], uint64_t *seed)
{
    const cnx_box box = cnx_box_make(-8, 6, 4, 59, 47, 25);
    cnx_volume *in = new_volume(dt, &box, 1);
    cnx_volume *whole = NULL, *again = NULL, *pieced;
    fill_random(in, mode, seed);
    assert_int_equal(cnx_downsample_volume(&whole, in, f, mode), 0);
    assert_int_equal(cnx_downsample_volume(&again, in, f, mode), 0);
    assert_memory_equal(whole->data, again->data, cnx_volume_bytes(whole));
    pieced = new_volume(dt, &whole->box, 1);
    /* Pieces on a lattice of 16 x 16 x 10 (multiples of every factor),
     * clipped to the volume, last first. */
    for (int64_t k = 0; k < 3 * 3 * 5; k++) {
        const int64_t x = 48 - 16 * (k % 5), y = 32 - 16 * (k / 5 % 3);
        const int64_t z = 20 - 10 * (k / 15);
        const cnx_box pb = cnx_box_make(x, y, z, x + 16, y + 16, z + 10);
        const cnx_box cut = cnx_box_intersect(&pb, &box);
        cnx_volume *part = NULL, *small = NULL;
        if (cnx_box_empty(&cut))
            continue;
        assert_int_equal(cnx_volume_crop(&part, in, &cut), 0);
        assert_int_equal(cnx_downsample_volume(&small, part, f, mode), 0);
        assert_int_equal(cnx_volume_copy(pieced, small), 0);
        cnx_volume_free(part);
        cnx_volume_free(small);
    }
    assert_memory_equal(whole->data, pieced->data, cnx_volume_bytes(whole));
    cnx_volume_free(in);
    cnx_volume_free(whole);
    cnx_volume_free(again);
    cnx_volume_free(pieced);
}

static void test_downsample__deterministic_and_cut_invariant(void **state)
{
    static const int64_t factors[][3] = {{2, 2, 2}, {2, 2, 1}};
    uint64_t seed = 77;
    (void)state;
    for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++) {
        for (int fi = 0; fi < 2; fi++) {
            check_cut_invariant(all_types[t], CNX_DOWNSAMPLE_AVERAGE,
                                factors[fi], &seed);
            if (all_types[t] != CNX_DT_FLOAT32)
                check_cut_invariant(all_types[t], CNX_DOWNSAMPLE_MODE,
                                    factors[fi], &seed);
        }
    }
}

static void test_downsample__bad_arguments_are_einval(void **state)
{
    const int64_t f2[3] = {2, 2, 2}, f3[3] = {2, 3, 2}, f0[3] = {2, 0, 1};
    cnx_box box = cnx_box_make(1, 0, 0, 9, 8, 8);
    cnx_box ok = cnx_box_make(0, 0, 0, 8, 8, 8);
    cnx_box half = cnx_box_make(0, 0, 0, 4, 4, 4);
    cnx_volume *odd = new_volume(CNX_DT_UINT8, &box, 1);
    cnx_volume *in = new_volume(CNX_DT_FLOAT32, &ok, 1);
    cnx_volume *out = NULL, *wrong;
    (void)state;
    assert_int_equal(
        cnx_downsample_volume(&out, odd, f2, CNX_DOWNSAMPLE_AVERAGE),
        CNX_EINVAL);
    assert_null(out);
    assert_non_null(strstr(cnx_error_last()->message, "multiple"));
    assert_int_equal(
        cnx_downsample_volume(&out, in, f3, CNX_DOWNSAMPLE_AVERAGE),
        CNX_EINVAL);
    assert_int_equal(
        cnx_downsample_volume(&out, in, f0, CNX_DOWNSAMPLE_AVERAGE),
        CNX_EINVAL);
    assert_int_equal(cnx_downsample_volume(&out, in, f2, CNX_DOWNSAMPLE_MODE),
                     CNX_EINVAL);
    assert_int_equal(
        cnx_downsample_volume(&out, in, f2, (cnx_downsample_mode)9),
        CNX_EINVAL);
    /* _into: wrong output box, type, channels. */
    wrong = new_volume(CNX_DT_FLOAT32, &ok, 1);
    assert_int_equal(cnx_downsample_into(wrong, in, f2, CNX_DOWNSAMPLE_AVERAGE),
                     CNX_EINVAL);
    cnx_volume_free(wrong);
    wrong = new_volume(CNX_DT_UINT8, &half, 1);
    assert_int_equal(cnx_downsample_into(wrong, in, f2, CNX_DOWNSAMPLE_AVERAGE),
                     CNX_EINVAL);
    cnx_volume_free(wrong);
    wrong = new_volume(CNX_DT_FLOAT32, &half, 2);
    assert_int_equal(cnx_downsample_into(wrong, in, f2, CNX_DOWNSAMPLE_AVERAGE),
                     CNX_EINVAL);
    cnx_volume_free(wrong);
    wrong = new_volume(CNX_DT_FLOAT32, &half, 1);
    assert_int_equal(cnx_downsample_into(wrong, in, f2, CNX_DOWNSAMPLE_AVERAGE),
                     0);
    cnx_volume_free(wrong);
    cnx_volume_free(odd);
    cnx_volume_free(in);
}

/* ---- geometry --------------------------------------------------------- */

static void test_downsample__factor_keeps_voxels_near_isotropic(void **state)
{
    static const struct {
        double res[3];
        int64_t fz;
    } cases[] = {
        {{4, 4, 40}, 1},   {{8, 8, 40}, 1},
        {{16, 16, 40}, 1}, {{32, 32, 40}, 2},
        {{64, 64, 80}, 2}, {{8, 8, 8}, 2},
        {{4, 4, 4}, 2},    {{8, 8, 4}, 2},
        {{8, 8, 30}, 1},   {{8, 8, 10}, 2},
        {{3, 3, 4}, 1},    {{6, 6, 8}, 1}, /* ties keep z */
        {{6, 6, 7.99}, 2}, {{4, 8, 5}, 2},
        {{4, 8, 6}, 1},    {{0.5, 0.5, 0.6}, 2},
    };
    double res[3] = {4, 4, 40};
    const char *chain[] = {"8_8_40", "16_16_40", "32_32_40", "64_64_80",
                           "128_128_160"};
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t f[3];
        cnx_downsample_factor(cases[i].res, f);
        assert_int_equal(f[0], 2);
        assert_int_equal(f[1], 2);
        if (f[2] != cases[i].fz) {
            print_error("res %g,%g,%g\n", cases[i].res[0], cases[i].res[1],
                        cases[i].res[2]);
            fail();
        }
    }
    /* A whole pyramid from 4,4,40 nm. */
    for (size_t i = 0; i < sizeof(chain) / sizeof(chain[0]); i++) {
        int64_t f[3];
        char key[64];
        cnx_downsample_factor(res, f);
        for (int a = 0; a < 3; a++)
            res[a] *= (double)f[a];
        snprintf(key, sizeof(key), "%g_%g_%g", res[0], res[1], res[2]);
        assert_string_equal(key, chain[i]);
    }
}

static void test_downsample__next_scale_geometry(void **state)
{
    cnx_layer_info info;
    cnx_scale src, next, again;
    const int64_t size[3] = {1001, 515, 77};
    const double res[3] = {4, 4, 40};
    const int64_t chunk[3] = {128, 128, 16};
    (void)state;
    cnx_info_init(&info, CNX_LAYER_SEGMENTATION, CNX_DT_UINT64, size, res,
                  chunk);
    src = info.scales[0];
    src.voxel_offset[0] = 10;
    src.voxel_offset[1] = -3;
    src.voxel_offset[2] = 5;
    src.cseg_block[2] = 4;
    assert_int_equal(cnx_downsample_next_scale(&src, &next), 0);
    assert_string_equal(next.key, "8_8_40");
    assert_int_equal(next.size[0], 501);
    assert_int_equal(next.size[1], 258);
    assert_int_equal(next.size[2], 77);
    assert_int_equal(next.voxel_offset[0], 5);
    assert_int_equal(next.voxel_offset[1], -2); /* floor(-3 / 2) */
    assert_int_equal(next.voxel_offset[2], 5);
    assert_int_equal(next.chunk[0], 64);
    assert_int_equal(next.chunk[1], 64);
    assert_int_equal(next.chunk[2], 16);
    assert_true(next.resolution[0] == 8.0 && next.resolution[2] == 40.0);
    assert_int_equal(next.encoding, CNX_ENC_CSEG);
    assert_int_equal(next.cseg_block[2], 4);
    /* Same input, same bytes (what concurrent tasks rely on). */
    assert_int_equal(cnx_downsample_next_scale(&src, &again), 0);
    assert_memory_equal(&next, &again, sizeof(next));

    /* Isotropic, fractional nm, chunks that cannot shrink below 1. */
    memset(&src, 0, sizeof(src));
    snprintf(src.key, sizeof(src.key), "s0");
    for (int i = 0; i < 3; i++) {
        src.size[i] = 1;
        src.resolution[i] = 3.5;
        src.chunk[i] = 1;
    }
    src.chunk[2] = 3;
    src.encoding = CNX_ENC_RAW;
    assert_int_equal(cnx_downsample_next_scale(&src, &next), 0);
    assert_string_equal(next.key, "7_7_7");
    assert_int_equal(next.size[0], 1);
    assert_int_equal(next.chunk[0], 1);
    assert_int_equal(next.chunk[2], 1);
    src.resolution[1] = 0.0;
    assert_int_equal(cnx_downsample_next_scale(&src, &next), CNX_EINVAL);
}

/* ---- concurrent scale adds -------------------------------------------- */

struct adder {
    const char *url;
    cnx_scale scale;
    pthread_barrier_t *barrier;
    int rc;
};

static void *add_scale_thread(void *arg)
{
    struct adder *a = arg;
    cnx_layer *layer = NULL;
    int index = -1;
    a->rc = cnx_layer_open(&layer, a->url);
    pthread_barrier_wait(a->barrier);
    if (a->rc == 0)
        a->rc = cnx_layer_add_scale(layer, &a->scale, &index);
    if (a->rc == 0 &&
        strcmp(cnx_layer_get_info(layer)->scales[index].key, a->scale.key) != 0)
        a->rc = -100;
    cnx_layer_free(layer);
    return NULL;
}

/* Run n threads adding scales[i % nscales] at once. */
static void add_concurrently(const char *url, const cnx_scale *scales,
                             int nscales, int n)
{
    pthread_t tid[8];
    struct adder add[8];
    pthread_barrier_t barrier;
    assert_true(n <= 8);
    assert_int_equal(pthread_barrier_init(&barrier, NULL, (unsigned)n), 0);
    for (int i = 0; i < n; i++) {
        add[i].url = url;
        add[i].scale = scales[i % nscales];
        add[i].barrier = &barrier;
        add[i].rc = -1;
        assert_int_equal(
            pthread_create(&tid[i], NULL, add_scale_thread, &add[i]), 0);
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(pthread_join(tid[i], NULL), 0);
        assert_int_equal(add[i].rc, 0);
    }
    pthread_barrier_destroy(&barrier);
}

static void test_downsample__racing_scale_adds_end_with_one_scale(void **state)
{
    const int64_t size[3] = {64, 64, 32};
    const double res[3] = {8, 8, 8};
    const int64_t chunk[3] = {32, 32, 32};
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_scale next[4];
    char dir[64], url[128];
    (void)state;
    cnx_test_tmpdir(dir);
    snprintf(url, sizeof(url), "file://%s/img", dir);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, res, chunk);
    assert_int_equal(cnx_layer_create(&layer, url, &info), 0);
    cnx_layer_free(layer);
    assert_int_equal(cnx_downsample_next_scale(&info.scales[0], &next[0]), 0);
    for (int round = 0; round < 5; round++)
        add_concurrently(url, next, 1, 8);
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    assert_int_equal(cnx_layer_get_info(layer)->nscales, 2);
    assert_string_equal(cnx_layer_get_info(layer)->scales[1].key, "16_16_16");
    cnx_layer_free(layer);
    /* Different scales at once: none is lost to a lost race. */
    for (int i = 1; i < 4; i++)
        assert_int_equal(cnx_downsample_next_scale(&next[i - 1], &next[i]), 0);
    add_concurrently(url, next, 4, 8);
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    assert_int_equal(cnx_layer_get_info(layer)->nscales, 5);
    for (int i = 0; i < 4; i++)
        assert_true(
            cnx_info_find_scale(cnx_layer_get_info(layer), next[i].key) >= 1);
    cnx_layer_free(layer);
    cnx_test_rmtree(dir);
}

/* ---- the stage, through the runtime's own I/O ------------------------- */

static int cmp_object(const void *a, const void *b)
{
    return strcmp(((const cnx_task_object *)a)->name,
                  ((const cnx_task_object *)b)->name);
}

/* A task for the stage, pointing at borrowed strings. */
static void make_task(cnx_task *task, const char *url, const char *src_key,
                      const char *out_key, const char *params,
                      const cnx_box *roi)
{
    memset(task, 0, sizeof(*task));
    snprintf(task->stage, sizeof(task->stage), "downsample");
    task->kernel_version = CNX_DOWNSAMPLE_VERSION;
    task->roi = *roi;
    task->ninputs = 1;
    snprintf(task->inputs[0].role, sizeof(task->inputs[0].role), "source");
    task->inputs[0].layer = (char *)url;
    task->inputs[0].scale = (char *)src_key;
    task->output_layer = (char *)url;
    task->output_scale = (char *)out_key;
    task->parameters = (char *)params;
}

/*
 * Run the stage once as a worker would: the task lists every source chunk
 * its roi touches with the chunk's digest (as cnx-submit plans it), and the
 * stage reads and writes through the runtime's cnx_stage_io, which checks
 * those digests.
 */
static int run_stage(const cnx_task *planned, int64_t *voxels)
{
    cnx_task task = *planned;
    cnx_object_list objs;
    cnx_task_object *list;
    cnx_layer *src = NULL;
    cnx_stage_io io;
    int rc, s;

    cnx_object_list_init(&objs);
    assert_int_equal(cnx_layer_open(&src, task.inputs[0].layer), 0);
    s = cnx_info_find_scale(cnx_layer_get_info(src), task.inputs[0].scale);
    if (s >= 0)
        assert_int_equal(cnx_layer_digests(src, s, &task.roi, &objs), 0);
    list = calloc(objs.count + 1, sizeof(*list));
    assert_non_null(list);
    for (size_t i = 0; i < objs.count; i++) {
        list[i].name = objs.items[i].name;
        memcpy(list[i].digest, objs.items[i].digest, CNX_DIGEST_LEN);
    }
    qsort(list, objs.count, sizeof(*list), cmp_object);
    task.inputs[0].objects = list;
    task.inputs[0].nobjects = objs.count;
    assert_int_equal(cnx__stage_io_init(&io, &task), 0);
    cnx_error_clear();
    rc = cnx_stage_downsample.run(cnx_stage_downsample.ctx, &task, &io);
    if (voxels != NULL)
        *voxels += io.voxels;
    cnx__stage_io_dispose(&io);
    free(list);
    cnx_object_list_dispose(&objs);
    cnx_layer_free(src);
    return rc;
}

/* A layer at dir/name with random scale-0 data; returns that data. */
static cnx_volume *make_layer(const char *url, const cnx_layer_info *info,
                              cnx_downsample_mode fill, uint64_t seed)
{
    cnx_layer *layer = NULL;
    cnx_grid grid = cnx_info_grid(info, 0);
    cnx_box bounds = cnx_grid_bounds(&grid);
    cnx_volume *vol = new_volume(info->dtype, &bounds, info->channels);
    fill_random(vol, fill, &seed);
    assert_int_equal(cnx_layer_create(&layer, url, info), 0);
    assert_int_equal(cnx_layer_write(layer, 0, vol, NULL), 0);
    cnx_layer_free(layer);
    return vol;
}

/*
 * Run every task of one level (boxes from the box generator, in reverse
 * order, each task twice: the retry must be a no-op) and compare the
 * stored level with the kernel on the whole source volume.
 */
static void run_level(const char *url, const cnx_volume *src,
                      const char *src_key, const char *out_key,
                      const char *params, const int64_t task_size[3],
                      cnx_downsample_mode mode)
{
    cnx_layer *layer = NULL;
    const cnx_layer_info *info;
    cnx_volume *want = NULL, *got = NULL;
    cnx_box *boxes = NULL;
    cnx_grid grid;
    cnx_box bounds;
    size_t count = 0;
    int64_t voxels = 0, f[3];
    int s;

    assert_int_equal(cnx_layer_open(&layer, url), 0);
    s = cnx_info_find_scale(cnx_layer_get_info(layer), src_key);
    assert_true(s >= 0);
    grid = cnx_info_grid(cnx_layer_get_info(layer), s);
    bounds = cnx_grid_bounds(&grid);
    assert_int_equal(cnx_boxgen(&boxes, &count, &grid, &bounds, task_size), 0);
    assert_true(count > 1);
    for (size_t i = count; i-- > 0;) {
        cnx_task task;
        make_task(&task, url, src_key, out_key, params, &boxes[i]);
        assert_int_equal(run_stage(&task, &voxels), 0);
        assert_int_equal(run_stage(&task, NULL), 0);
    }
    assert_int_equal(voxels, cnx_box_voxels(&bounds));
    free(boxes);

    assert_int_equal(cnx_layer_reload(layer), 0);
    info = cnx_layer_get_info(layer);
    s = cnx_info_find_scale(info, out_key);
    assert_true(s >= 1);
    assert_int_equal(cnx_info_find_scale(info, out_key), s);
    cnx_downsample_factor(
        info->scales[cnx_info_find_scale(info, src_key)].resolution, f);
    assert_int_equal(cnx_downsample_volume(&want, src, f, mode), 0);
    grid = cnx_info_grid(info, s);
    bounds = cnx_grid_bounds(&grid);
    assert_true(cnx_box_equal(&bounds, &want->box));
    assert_int_equal(
        cnx_layer_read(layer, s, &bounds, 0, NULL, NULL, NULL, &got), 0);
    assert_memory_equal(got->data, want->data, cnx_volume_bytes(want));
    cnx_volume_free(want);
    cnx_volume_free(got);
    cnx_layer_free(layer);
}

static void test_downsample__stage_builds_a_pyramid(void **state)
{
    const int64_t isize[3] = {100, 70, 30}, ichunk[3] = {32, 32, 8};
    const double ires[3] = {4, 4, 40};
    const int64_t ssize[3] = {40, 36, 20}, schunk[3] = {16, 16, 16};
    const double sres[3] = {8, 8, 8};
    const int64_t tasks_i[3] = {64, 32, 8}, tasks_s[3] = {16, 32, 16};
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_volume *src, *mid = NULL;
    char dir[64], img[128], seg[128];
    (void)state;
    cnx_test_tmpdir(dir);

    /* An anisotropic image: 4,4,40 -> 8,8,40 (2x2x1), then 16,16,40. */
    snprintf(img, sizeof(img), "file://%s/image", dir);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, isize, ires, ichunk);
    src = make_layer(img, &info, CNX_DOWNSAMPLE_AVERAGE, 1);
    run_level(img, src, "4_4_40", "8_8_40", "{}", tasks_i,
              CNX_DOWNSAMPLE_AVERAGE);
    assert_int_equal(cnx_layer_open(&layer, img), 0);
    {
        const cnx_layer_info *li = cnx_layer_get_info(layer);
        const cnx_scale *sc = &li->scales[1];
        assert_int_equal(li->nscales, 2);
        assert_string_equal(sc->key, "8_8_40");
        assert_int_equal(sc->size[0], 50);
        assert_int_equal(sc->size[1], 35);
        assert_int_equal(sc->size[2], 30);
        assert_int_equal(sc->chunk[0], 16);
        assert_int_equal(sc->chunk[2], 8);
        assert_int_equal(cnx_layer_read(layer, 1,
                                        &(cnx_box){{0, 0, 0}, {50, 35, 30}}, 0,
                                        NULL, NULL, NULL, &mid),
                         0);
    }
    cnx_layer_free(layer);
    run_level(img, mid, "8_8_40", "16_16_40", "{}",
              (const int64_t[3]){32, 32, 8}, CNX_DOWNSAMPLE_AVERAGE);
    cnx_volume_free(mid);
    cnx_volume_free(src);

    /* A segmentation (compressed_segmentation), isotropic: 2x2x2 mode. */
    snprintf(seg, sizeof(seg), "file://%s/seg", dir);
    cnx_info_init(&info, CNX_LAYER_SEGMENTATION, CNX_DT_UINT64, ssize, sres,
                  schunk);
    src = make_layer(seg, &info, CNX_DOWNSAMPLE_MODE, 2);
    run_level(seg, src, "8_8_8", "16_16_16", "{}", tasks_s,
              CNX_DOWNSAMPLE_MODE);
    cnx_volume_free(src);
    cnx_test_rmtree(dir);
}

static void test_downsample__stage_mode_override(void **state)
{
    const int64_t size[3] = {48, 40, 24}, chunk[3] = {16, 16, 8};
    const double res[3] = {8, 8, 8};
    cnx_layer_info info;
    cnx_volume *src;
    char dir[64], url[128];
    (void)state;
    cnx_test_tmpdir(dir);
    snprintf(url, sizeof(url), "file://%s/labels", dir);
    /* Labels stored as a uint16 image: the task asks for the mode. */
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT16, size, res, chunk);
    src = make_layer(url, &info, CNX_DOWNSAMPLE_MODE, 3);
    run_level(url, src, "8_8_8", "16_16_16", "{\"mode\":\"mode\"}",
              (const int64_t[3]){16, 16, 8}, CNX_DOWNSAMPLE_MODE);
    cnx_volume_free(src);
    cnx_test_rmtree(dir);
}

/* The stage refuses a task: fatal, CNX_ESCHEMA, message naming `names`. */
static void expect_refusal(const char *url, const char *src_key,
                           const char *out_key, const char *params,
                           const cnx_box *roi, const char *names)
{
    cnx_task task;
    make_task(&task, url, src_key, out_key, params, roi);
    assert_int_equal(run_stage(&task, NULL), CNX_ESCHEMA);
    assert_int_equal(cnx_error_last()->retriable, 0);
    if (strstr(cnx_error_last()->message, names) == NULL) {
        print_error("message '%s' does not name '%s'\n",
                    cnx_error_last()->message, names);
        fail();
    }
}

static void test_downsample__stage_refuses_bad_tasks(void **state)
{
    const int64_t size[3] = {64, 64, 20}, chunk[3] = {32, 32, 5};
    const double res[3] = {8, 8, 8};
    const cnx_box roi = cnx_box_make(0, 0, 0, 32, 32, 20);
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_volume *src;
    cnx_task task;
    char dir[64], url[128];
    (void)state;
    cnx_test_tmpdir(dir);
    snprintf(url, sizeof(url), "file://%s/img", dir);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_FLOAT32, size, res, chunk);
    src = make_layer(url, &info, CNX_DOWNSAMPLE_AVERAGE, 4);

    expect_refusal(url, "8_8_8", "16_16_8", "{}", &roi, "16_16_16");
    expect_refusal(url, "8_8_8", "16_16_16", "{\"scale\":2}", &roi, "scale");
    expect_refusal(url, "8_8_8", "16_16_16", "{\"mode\":\"median\"}", &roi,
                   "parameters.mode");
    expect_refusal(url, "8_8_8", "16_16_16", "{\"mode\":1}", &roi,
                   "parameters.mode");
    expect_refusal(url, "8_8_8", "16_16_16", "{\"mode\":\"mode\"}", &roi,
                   "float32");
    expect_refusal(url, "8_8_8", "16_16_16", "[]", &roi, "parameters");
    expect_refusal(url, "4_4_4", "8_8_8", "{}", &roi, "4_4_4");
    /* Off the source chunk grid. */
    expect_refusal(url, "8_8_8", "16_16_16", "{}",
                   &(cnx_box){{0, 0, 0}, {32, 30, 20}}, "roi");
    /* On the source grid (z chunks of 5) but its image, z 0-3, is not on
     * the next scale's grid (z chunks of 2). */
    expect_refusal(url, "8_8_8", "16_16_16", "{}",
                   &(cnx_box){{0, 0, 0}, {32, 32, 5}}, "chunk grid");
    /* Starts on an odd voxel: the factor's lattice is missed. */
    expect_refusal(url, "8_8_8", "16_16_16", "{}",
                   &(cnx_box){{0, 0, 5}, {32, 32, 10}}, "roi");
    /* No source role. */
    make_task(&task, url, "8_8_8", "16_16_16", "{}", &roi);
    snprintf(task.inputs[0].role, sizeof(task.inputs[0].role), "image");
    assert_int_equal(run_stage(&task, NULL), CNX_ESCHEMA);
    /* Nothing refused changed the info. */
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    assert_int_equal(cnx_layer_get_info(layer)->nscales, 1);
    cnx_layer_free(layer);
    /* And a good task on the same layer works (float32, 2x2x2). */
    make_task(&task, url, "8_8_8", "16_16_16", "{\"mode\":\"average\"}", &roi);
    assert_int_equal(run_stage(&task, NULL), 0);
    cnx_volume_free(src);
    cnx_test_rmtree(dir);
}

static void test_downsample__stage_declares_its_version(void **state)
{
    (void)state;
    assert_string_equal(cnx_stage_downsample.name, "downsample");
    assert_int_equal(cnx_stage_downsample.kernel_version,
                     CNX_DOWNSAMPLE_VERSION);
    assert_non_null(cnx_stage_downsample.run);
    assert_non_null(cnx_stage_downsample.help);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_downsample__random_volumes_match_the_reference),
        cmocka_unit_test(test_downsample__mode_ties_go_to_the_lower_id),
        cmocka_unit_test(test_downsample__average_rounds_half_up),
        cmocka_unit_test(test_downsample__float_sums_in_the_documented_order),
        cmocka_unit_test(test_downsample__edge_blocks_average_only_existing),
        cmocka_unit_test(test_downsample__deterministic_and_cut_invariant),
        cmocka_unit_test(test_downsample__bad_arguments_are_einval),
        cmocka_unit_test(test_downsample__factor_keeps_voxels_near_isotropic),
        cmocka_unit_test(test_downsample__next_scale_geometry),
        cmocka_unit_test(test_downsample__racing_scale_adds_end_with_one_scale),
        cmocka_unit_test(test_downsample__stage_builds_a_pyramid),
        cmocka_unit_test(test_downsample__stage_mode_override),
        cmocka_unit_test(test_downsample__stage_refuses_bad_tasks),
        cmocka_unit_test(test_downsample__stage_declares_its_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
