/*
 * test_metrics.c - segmentation quality metrics against hand-computed values
 * and scikit-image.
 *
 * Tiny volumes whose variation of information and adapted Rand error are
 * worked out by hand pin the conventions (log base 2, split = H(seg | gt),
 * gt 0 ignored, seg 0 an ordinary label, skimage's pair counts). Random
 * volumes must score bit-identically after relabelling either side and
 * after permuting the voxels, and must agree within 1e-9 (relative) with
 * scikit-image, run through tests/py/metrics_ref.py on fixtures written
 * here. Errors: empty volume, all-zero gt, too many voxels.
 */
#include <math.h>

#include "cnx/error.h"
#include "cnx/metrics.h"
#include "cnx_test.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static cnx_seg_scores score(const uint64_t *seg, const uint64_t *gt, size_t n)
{
    cnx_seg_scores sc;
    memset(&sc, 0xA5, sizeof(sc));
    int rc = cnx_seg_scores_u64(seg, gt, n, &sc);
    if (rc != 0)
        fail_msg("cnx_seg_scores_u64: %d %s", rc, cnx_error_last()->message);
    return sc;
}

static void expect_close(double got, double want, const char *what)
{
    if (!(fabs(got - want) <= 1e-12 * fmax(1.0, fabs(want))))
        fail_msg("%s: got %.17g, want %.17g", what, got, want);
}

static void expect_scores(cnx_seg_scores sc, double split, double merge,
                          double are, double prec, double rec, int64_t voxels)
{
    expect_close(sc.vi_split, split, "vi_split");
    expect_close(sc.vi_merge, merge, "vi_merge");
    expect_close(sc.are, are, "are");
    expect_close(sc.precision, prec, "precision");
    expect_close(sc.recall, rec, "recall");
    assert_int_equal(sc.voxels, voxels);
}

/* ---- hand-computed cases ----------------------------------------------- */

static void test_metrics__identical_scores_zero(void **state)
{
    static const uint64_t gt[] = {1, 1, 2, 2, 2, 3, 9, 9};
    static const uint64_t seg[] = {7, 7, 4, 4, 4, 1, 0, 0};
    (void)state;
    /* Same partition, different label values. */
    expect_scores(score(seg, gt, LEN(gt)), 0, 0, 0, 1, 1, 8);
    expect_scores(score(gt, gt, LEN(gt)), 0, 0, 0, 1, 1, 8);
    assert_true(score(gt, gt, LEN(gt)).vi_split == 0.0);
}

/*
 * One gt object of 4 voxels split 2 + 2: H(seg | gt) = 1 bit, merge 0.
 * Pairs (ordered, n(n-1)): S = 2 + 2 = 4, A = 12, B = 4;
 * ARE = 1 - 4 / (6 + 2) = 0.5, precision S/A = 1/3, recall S/B = 1.
 */
static void test_metrics__split_in_halves_is_one_bit(void **state)
{
    static const uint64_t gt[] = {5, 5, 5, 5};
    static const uint64_t seg[] = {1, 2, 1, 2};
    (void)state;
    expect_scores(score(seg, gt, LEN(gt)), 1, 0, 0.5, 1.0 / 3, 1, 4);
}

/* Two gt objects of 2 merged into one segment: merge = 1 bit. */
static void test_metrics__merge_of_two_is_one_bit(void **state)
{
    static const uint64_t gt[] = {1, 1, 2, 2};
    static const uint64_t seg[] = {7, 7, 7, 7};
    (void)state;
    expect_scores(score(seg, gt, LEN(gt)), 0, 1, 0.5, 1, 1.0 / 3, 4);
}

/*
 * gt {1,1,1}, seg {1,1,2}: H(seg | gt) = 2/3 log2(3/2) + 1/3 log2(3)
 * = log2(3) - 2/3; S = 2, A = 6, B = 2: ARE = 1 - 2/4.
 * Plus gt {1,1,1,2} seg {1,1,2,2}: split = 3/4 (log2 3 - 2/3),
 * merge = 1/4 * 2 * log2 2 ... worked term by term: n_11 = 2 (a=3, b=2),
 * n_12 = 1 (a=3, b=2), n_22 = 1 (a=1, b=2):
 * split = (2 log2(3/2) + log2 3) / 4, merge = (0 + log2 2 + log2 2) / 4;
 * S = 2, A = 6, B = 4: ARE = 1 - 2/5, precision 1/3, recall 1/2.
 */
static void test_metrics__uneven_split(void **state)
{
    static const uint64_t gt1[] = {1, 1, 1};
    static const uint64_t seg1[] = {1, 1, 2};
    static const uint64_t gt2[] = {1, 1, 1, 2};
    static const uint64_t seg2[] = {1, 1, 2, 2};
    (void)state;
    expect_scores(score(seg1, gt1, 3), log2(3.0) - 2.0 / 3, 0, 0.5, 1.0 / 3,
                  1, 3);
    expect_scores(score(seg2, gt2, 4), (2 * log2(1.5) + log2(3.0)) / 4, 0.5,
                  0.6, 1.0 / 3, 0.5, 4);
}

/* Voxels with gt 0 do not count, whatever their segment. */
static void test_metrics__gt_zero_ignored(void **state)
{
    static const uint64_t gt[] = {0, 0, 1, 1, 0, 2, 2, 0};
    static const uint64_t seg[] = {3, 4, 5, 5, 6, 8, 8, 5};
    static const uint64_t seg_split[] = {3, 4, 5, 6, 6, 8, 8, 5};
    (void)state;
    expect_scores(score(seg, gt, LEN(gt)), 0, 0, 0, 1, 1, 4);
    /* Splitting object 1 into halves: 2 of 4 voxels carry 1 bit. */
    expect_scores(score(seg_split, gt, LEN(gt)), 0.5, 0, 1 - 4.0 / (4 + 2),
                  4.0 / 8, 4.0 / 4, 4);
}

/* Segment 0 is a label: {0,0,5,5} splits gt object 1. */
static void test_metrics__seg_zero_is_a_label(void **state)
{
    static const uint64_t gt[] = {1, 1, 1, 1};
    static const uint64_t seg[] = {0, 0, 5, 5};
    static const uint64_t gt2[] = {1, 1, 2, 2};
    static const uint64_t seg2[] = {0, 0, 1, 1};
    (void)state;
    expect_scores(score(seg, gt, LEN(gt)), 1, 0, 0.5, 1.0 / 3, 1, 4);
    expect_scores(score(seg2, gt2, LEN(gt2)), 0, 0, 0, 1, 1, 4);
}

/* No pairs anywhere: one voxel, or all singletons on both sides. */
static void test_metrics__singletons(void **state)
{
    static const uint64_t one[] = {3};
    static const uint64_t gt[] = {1, 2, 3};
    static const uint64_t seg[] = {4, 5, 6};
    static const uint64_t seg_merged[] = {4, 4, 4};
    (void)state;
    expect_scores(score(one, one, 1), 0, 0, 0, 1, 1, 1);
    expect_scores(score(seg, gt, 3), 0, 0, 0, 1, 1, 3);
    /* A = 0 (no gt pairs), S = 0, B = 6: ARE 1, precision 1 (vacuous). */
    expect_scores(score(seg_merged, gt, 3), 0, log2(3.0), 1, 1, 0, 3);
}

static void test_metrics__bad_input_refused(void **state)
{
    static const uint64_t zeros[] = {0, 0, 0};
    static const uint64_t seg[] = {1, 2, 3};
    cnx_seg_scores sc;
    (void)state;
    assert_int_equal(cnx_seg_scores_u64(seg, zeros, 0, &sc), CNX_EINVAL);
    assert_int_equal(cnx_seg_scores_u64(seg, zeros, 3, &sc), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "ground truth"));
    assert_int_equal(cnx_error_last()->retriable, 0);
    /* Refused before any voxel is read. */
    assert_int_equal(cnx_seg_scores_u64(seg, zeros, (size_t)UINT32_MAX + 1,
                                        &sc),
                     CNX_ERANGE);
}

/* ---- random volumes ---------------------------------------------------- */

/*
 * A random volume of n voxels: gt from ngt objects (label values spread
 * over uint64) with a fraction of 0, laid out in runs; seg derived from gt
 * with splits (a voxel-dependent offset) and merges (labels folded modulo
 * nseg), plus noise voxels, label 0 included.
 */
static void make_volume(uint64_t *seg, uint64_t *gt, size_t n, uint64_t seed,
                        unsigned ngt, unsigned nseg, unsigned zero_pct,
                        unsigned noise_pct, int huge_labels)
{
    uint64_t rng = seed;
    size_t i = 0;
    while (i < n) {
        size_t run = 1 + rng_next(&rng) % 40;
        uint64_t g = rng_next(&rng) % 100 < zero_pct
                         ? 0
                         : 1 + rng_next(&rng) % ngt;
        uint64_t split = rng_next(&rng) % 3;
        for (size_t j = 0; j < run && i < n; j++, i++) {
            uint64_t base = g * 7 + (j < run / 2 ? 0 : split);
            uint64_t s = base % nseg;
            if (rng_next(&rng) % 100 < noise_pct)
                s = rng_next(&rng) % (nseg + 1);
            if (huge_labels) {
                gt[i] = g == 0 ? 0 : UINT64_MAX - g * 1000003;
                seg[i] = s * UINT64_C(0x9E3779B97F4A7C15);
            } else {
                gt[i] = g;
                seg[i] = s;
            }
        }
    }
}

static void assert_bit_identical(cnx_seg_scores a, cnx_seg_scores b,
                                 const char *what)
{
    if (memcmp(&a.vi_split, &b.vi_split, sizeof(double)) != 0 ||
        memcmp(&a.vi_merge, &b.vi_merge, sizeof(double)) != 0 ||
        memcmp(&a.are, &b.are, sizeof(double)) != 0 ||
        memcmp(&a.precision, &b.precision, sizeof(double)) != 0 ||
        memcmp(&a.recall, &b.recall, sizeof(double)) != 0 ||
        a.voxels != b.voxels)
        fail_msg("%s: (%.17g %.17g %.17g %.17g %.17g) vs "
                 "(%.17g %.17g %.17g %.17g %.17g)",
                 what, a.vi_split, a.vi_merge, a.are, a.precision, a.recall,
                 b.vi_split, b.vi_merge, b.are, b.precision, b.recall);
}

/* Bit-identical scores after relabelling either side and shuffling. */
static void test_metrics__invariant_under_relabel_and_permutation(void **s)
{
    const size_t n = 200000;
    uint64_t *gt = malloc(n * sizeof(*gt)), *seg = malloc(n * sizeof(*seg));
    uint64_t *gt2 = malloc(n * sizeof(*gt)), *seg2 = malloc(n * sizeof(*gt));
    uint64_t rng = 42;
    (void)s;
    assert_true(gt && seg && gt2 && seg2);
    /* Many objects, so thousands of distinct pairs and summation order
     * would show in the last bits if it depended on labels or voxels. */
    make_volume(seg, gt, n, 7, 3000, 5000, 15, 30, 0);
    cnx_seg_scores ref = score(seg, gt, n);
    assert_true(ref.vi_split > 0.1 && ref.vi_merge > 0.1);

    /* Relabel: gt by an odd multiplier (a bijection keeping 0 at 0), seg by
     * a bijection moving label 0 elsewhere. */
    for (size_t i = 0; i < n; i++) {
        gt2[i] = gt[i] * UINT64_C(0xD1B54A32D192ED03);
        seg2[i] = (seg[i] * UINT64_C(0xA24BAED4963EE407)) ^ 0x5555;
    }
    assert_bit_identical(ref, score(seg2, gt, n), "seg relabelled");
    assert_bit_identical(ref, score(seg, gt2, n), "gt relabelled");
    assert_bit_identical(ref, score(seg2, gt2, n), "both relabelled");

    /* Permute the voxels (same permutation for both). */
    memcpy(gt2, gt, n * sizeof(*gt));
    memcpy(seg2, seg, n * sizeof(*seg));
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = rng_next(&rng) % (i + 1);
        uint64_t t = gt2[i];
        gt2[i] = gt2[j];
        gt2[j] = t;
        t = seg2[i];
        seg2[i] = seg2[j];
        seg2[j] = t;
    }
    assert_bit_identical(ref, score(seg2, gt2, n), "voxels permuted");
    /* Reversed order too (runs survive, in the other direction). */
    for (size_t i = 0; i < n; i++) {
        gt2[i] = gt[n - 1 - i];
        seg2[i] = seg[n - 1 - i];
    }
    assert_bit_identical(ref, score(seg2, gt2, n), "voxels reversed");
    free(gt);
    free(seg);
    free(gt2);
    free(seg2);
}

/* ---- scikit-image cross-check ------------------------------------------ */

typedef struct random_case {
    const char *name;
    size_t n;
    uint64_t seed;
    unsigned ngt, nseg, zero_pct, noise_pct;
    int huge_labels;
} random_case;

static const random_case cases[] = {
    {"few_labels", 24000, 1, 5, 7, 20, 10, 0},
    {"noisy", 30000, 2, 12, 9, 25, 60, 0},
    {"many_labels", 60000, 3, 800, 1500, 10, 20, 0},
    {"huge_values", 40000, 4, 40, 50, 30, 15, 1},
    {"no_zero_gt", 10007, 5, 20, 4, 0, 5, 0},
    {"seg_mostly_zero", 20000, 6, 30, 1, 15, 40, 0},
};

static int write_u64(const char *path, const uint64_t *v, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    /* Raw little-endian: write byte by byte, whatever the host order. */
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            fputc((int)((v[i] >> (8 * b)) & 0xFF), f);
    return fclose(f);
}

static void expect_rel(double got, double want, const char *name,
                       const char *what)
{
    if (!(fabs(got - want) <= 1e-9 * fabs(want) + 1e-300))
        fail_msg("%s %s: cnx %.17g, scikit-image %.17g", name, what, got,
                 want);
}

static void test_metrics__agrees_with_scikit_image(void **state)
{
    const char *py = getenv("CNX_PYTHON");
    const char *src = getenv("CNX_SOURCE");
    char dir[64], path[160], cmd[512], line[512];
    cnx_seg_scores mine[LEN(cases)];
    int seen[LEN(cases)] = {0};
    FILE *p;
    (void)state;
    if (py == NULL || src == NULL)
        skip(); /* run through ctest, which sets both */
    snprintf(cmd, sizeof(cmd), "%s -c 'import skimage.metrics' 2>/dev/null",
             py);
    if (system(cmd) != 0)
        skip();
    cnx_test_tmpdir(dir);
    for (size_t c = 0; c < LEN(cases); c++) {
        const random_case *rc = &cases[c];
        uint64_t *gt = malloc(rc->n * sizeof(*gt));
        uint64_t *seg = malloc(rc->n * sizeof(*seg));
        assert_true(gt && seg);
        make_volume(seg, gt, rc->n, rc->seed, rc->ngt, rc->nseg, rc->zero_pct,
                    rc->noise_pct, rc->huge_labels);
        mine[c] = score(seg, gt, rc->n);
        snprintf(path, sizeof(path), "%s/%s.gt", dir, rc->name);
        assert_int_equal(write_u64(path, gt, rc->n), 0);
        snprintf(path, sizeof(path), "%s/%s.seg", dir, rc->name);
        assert_int_equal(write_u64(path, seg, rc->n), 0);
        free(gt);
        free(seg);
    }
    snprintf(cmd, sizeof(cmd), "%s %s/tests/py/metrics_ref.py %s", py, src,
             dir);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (fgets(line, sizeof(line), p) != NULL) {
        char name[64];
        double v[5];
        long long voxels;
        if (sscanf(line, "%63s %lf %lf %lf %lf %lf %lld", name, &v[0], &v[1],
                   &v[2], &v[3], &v[4], &voxels) != 7)
            fail_msg("metrics_ref.py: bad line '%s'", line);
        size_t c = 0;
        while (c < LEN(cases) && strcmp(cases[c].name, name) != 0)
            c++;
        assert_true(c < LEN(cases));
        print_message("%-16s split %.6f merge %.6f are %.6f p %.6f r %.6f\n",
                      name, v[0], v[1], v[2], v[3], v[4]);
        expect_rel(mine[c].vi_split, v[0], name, "vi_split");
        expect_rel(mine[c].vi_merge, v[1], name, "vi_merge");
        expect_rel(mine[c].are, v[2], name, "are");
        expect_rel(mine[c].precision, v[3], name, "precision");
        expect_rel(mine[c].recall, v[4], name, "recall");
        assert_int_equal(mine[c].voxels, voxels);
        seen[c] = 1;
    }
    assert_int_equal(pclose(p), 0);
    cnx_test_rmtree(dir);
    for (size_t c = 0; c < LEN(cases); c++)
        if (!seen[c])
            fail_msg("metrics_ref.py gave no line for %s", cases[c].name);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics__identical_scores_zero),
        cmocka_unit_test(test_metrics__split_in_halves_is_one_bit),
        cmocka_unit_test(test_metrics__merge_of_two_is_one_bit),
        cmocka_unit_test(test_metrics__uneven_split),
        cmocka_unit_test(test_metrics__gt_zero_ignored),
        cmocka_unit_test(test_metrics__seg_zero_is_a_label),
        cmocka_unit_test(test_metrics__singletons),
        cmocka_unit_test(test_metrics__bad_input_refused),
        cmocka_unit_test(test_metrics__invariant_under_relabel_and_permutation),
        cmocka_unit_test(test_metrics__agrees_with_scikit_image),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
