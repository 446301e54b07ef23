/*
 * cnx/metrics.h - segmentation quality metrics against a ground truth (pure
 * kernel): variation of information (CREMI convention) and the adapted Rand
 * error (scikit-image's pair-count form), from one contingency table.
 *
 * Only voxels whose ground truth is not 0 count; a segmentation label 0 is
 * an ordinary label. With n_ij the voxels of ground-truth object i and
 * segment j, a_i = sum_j n_ij, b_j = sum_i n_ij, N = sum n_ij:
 *
 *   vi_split = H(seg | gt) = sum_ij (n_ij / N) log2(a_i / n_ij)
 *   vi_merge = H(gt | seg) = sum_ij (n_ij / N) log2(b_j / n_ij)
 *   S = sum n_ij (n_ij - 1), A = sum a_i (a_i - 1), B = sum b_j (b_j - 1)
 *   are = 1 - S / (A/2 + B/2)   (= 1 - 2pr / (p + r))
 *   precision = S / A, recall = S / B
 *
 * precision and recall are the numbers scikit-image 0.19's
 * adapted_rand_error returns under those names. Note that its docstring
 * (and SNEMI3D) describe precision as divided by the pairs of the *test*
 * segmentation; the code divides by the ground-truth pairs, as here
 * (scikit-image issue #6485). The adapted Rand error itself is symmetric
 * and unaffected. A ratio whose denominator is 0 (no pairs) is 1.
 *
 * The results are bit-identical for any order of the voxels and any
 * relabelling of either volume: counts are exact integers, and the
 * entropy terms are summed in the sorted order of their (size, count)
 * values, never in label or voxel order.
 */
#ifndef CNX_METRICS_H
#define CNX_METRICS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Scores of a segmentation against a ground truth (see the file comment). */
typedef struct cnx_seg_scores {
    double vi_split;  /* H(seg | gt), bits: over-segmentation */
    double vi_merge;  /* H(gt | seg), bits: under-segmentation */
    double are;       /* adapted Rand error, 0 (perfect) .. 1 */
    double precision; /* S / A, scikit-image's "precision" */
    double recall;    /* S / B, scikit-image's "recall" */
    int64_t voxels;   /* voxels with gt != 0: N */
} cnx_seg_scores;

/**
 * Score a segmentation against a ground truth of the same shape.
 *
 * @param seg  n segment labels (any uint64; 0 is an ordinary label)
 * @param gt   n ground-truth labels; voxels with gt 0 are ignored
 * @param n    voxels in each; 1 .. UINT32_MAX
 * @param[out] out  written on success only
 * @return 0; CNX_EINVAL if n is 0 or no gt voxel is non-zero; CNX_ERANGE
 *         if n is over UINT32_MAX; CNX_ENOMEM. All fatal (not retriable).
 * Time O(n) expected (hash table of (gt, seg) pairs, runs of equal pairs
 * counted at once) plus O(K) radix sorting of the K distinct pairs; memory
 * O(K). Thread-safety: no shared state; call from any number of threads.
 */
int cnx_seg_scores_u64(const uint64_t *seg, const uint64_t *gt, size_t n,
                       cnx_seg_scores *out);

#ifdef __cplusplus
}
#endif
#endif
