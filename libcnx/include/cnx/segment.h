/*
 * cnx/segment.h - boundary map to neuron segmentation (pure kernel):
 * seeded watershed, region adjacency graph, greedy agglomeration by the
 * mean boundary value along each edge (waterz / ABISS style), small-
 * fragment cleanup. Buffers in, buffers out, no I/O, single-threaded.
 *
 * Lengths are in nm (parameters *_nm) and become voxels per axis through
 * the resolution the caller sets from the layer. The pipeline, all on the
 * boundary quantised to 8 bits (q = cnx_segment_quantize(b), 0 = interior
 * .. 255 = membrane), in 3D, or per z section for seeds and watershed
 * (modes SECTIONS and 2D; see cnx_segment_mode):
 *
 *   1. seeds: "distance" (default) - the voxels with q below
 *      seed_threshold are interior; a chamfer distance transform (3-4-5
 *      in voxel steps; 3-4 per section) measures each one's distance to
 *      the nearest boundary voxel (the volume's faces are not boundaries;
 *      distances saturate at 85 voxels, farther is one plateau); the seeds
 *      are the connected components of the voxels whose distance is
 *      positive and the largest within seed_distance_nm (a box of that
 *      half side per axis, like scikit-image's peak_local_max). "minima":
 *      the components of the voxels whose q is below seed_threshold and
 *      the smallest within the same box. A volume (or, per section, a
 *      section) left without a seed is seeded at its first voxel of
 *      lowest q.
 *   2. watershed: a priority flood from the seeds over face neighbours
 *      (6 in 3D, 4 in-plane per section), lowest q first through a
 *      256-bucket FIFO queue; a voxel takes the label of the voxel that
 *      reached it first. Every voxel is labelled.
 *   3. graph: every face-adjacent voxel pair (a, b) with different basins
 *      (across sections too, except in 2D mode) adds
 *      cnx_segment_pair_value(q_a, q_b) to the sum and 1 to the count of
 *      the edge between the two basins. An edge's value is its mean, kept
 *      as the integer floor(65536 * sum / count): the sum carries the
 *      contact area, so a merged region's edge is the mean over all its
 *      contacts.
 *   4. agglomeration: the edge of lowest value is merged while its value
 *      is below merge_threshold * 255 * 65536 (rounded); edges to a common
 *      neighbour are combined (sums and counts added). Ties go to the
 *      lower (smaller id, larger id) pair; a merged region keeps the
 *      smaller id. SECTIONS mode runs it twice: within sections first
 *      (edges across sections wait), then over every edge.
 *   5. cleanup (the size term): while a region is smaller than
 *      min_size_nm3 (cnx_segment_min_voxels; the smallest first, ties to
 *      the lower id), it is merged along its edge of lowest value (ties:
 *      the lower neighbour id). A region with no neighbour stays.
 *   6. numbering: labels 1..n in raster order (x fastest, then y, z) of
 *      each segment's first voxel.
 *
 * Determinism: every decision is integer (quantised boundary, integer
 * sums, bucket queue, ids); nothing depends on pointer values, hash order
 * or timing, so the same input gives the same bytes on every machine. The
 * membrane filter for raw images uses only IEEE + - * / and sqrt (all
 * correctly rounded; no other libm function) and binomial kernels from a
 * fixed recurrence, in a fixed order, built with -ffp-contract=off.
 * See docs/segment.md for the method, defaults and measured quality. The
 * JSON parameters are cnx/segment_io.h.
 */
#ifndef CNX_SEGMENT_H
#define CNX_SEGMENT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cnx/param.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever the labels it writes are meant to change. */
#define CNX_SEGMENT_VERSION 3

/** Largest number of voxels accepted (2^31): labels are uint32. */
#define CNX_SEGMENT_MAX_VOXELS ((int64_t)1 << 31)

/** Largest extent accepted on any axis, voxels. */
#define CNX_SEGMENT_MAX_SIDE ((int64_t)1 << 20)

/** How seeds are found (step 1 of the file comment). */
typedef enum cnx_segment_seeds {
    CNX_SEGMENT_SEEDS_DISTANCE = 0, /* maxima of the distance to boundary */
    CNX_SEGMENT_SEEDS_MINIMA = 1,   /* minima of the boundary */
} cnx_segment_seeds;

/**
 * How the volume is treated (docs/segment.md, "Anisotropy"):
 *  - 3D: filter, seeds and watershed in 3D, graph over 6 neighbours;
 *  - SECTIONS: filter, seeds and watershed per z section, then the graph
 *    and agglomeration in 3D (edges across sections too): the method for
 *    serial-section EM whose z is much coarser than xy;
 *  - 2D: every section on its own throughout (no edge across z; for
 *    data scored per section, such as ISBI 2012);
 *  - AUTO: SECTIONS when resolution z >= CNX_SEGMENT_ANISOTROPY times
 *    the coarser of x and y, else 3D.
 */
typedef enum cnx_segment_mode {
    CNX_SEGMENT_MODE_AUTO = 0,
    CNX_SEGMENT_MODE_3D = 1,
    CNX_SEGMENT_MODE_SECTIONS = 2,
    CNX_SEGMENT_MODE_2D = 3,
} cnx_segment_mode;

/** The anisotropy (z over xy) from which AUTO picks SECTIONS. */
#define CNX_SEGMENT_ANISOTROPY 12.0

/**
 * Parameters; fill with cnx_segment_params_default, then adjust. Ranges
 * and (defaults) are given with each field. Lengths are in nm and turned
 * into voxels per axis with resolution, which the caller sets from the
 * input layer's scale (the stages do; it is not a JSON key).
 */
typedef struct cnx_segment_params {
    /* nm per voxel, x, y, z: each 0.01 .. 10^6 (8, 8, 8). */
    double resolution[3];
    /* 0: the input is a boundary map (high = membrane); 1: a raw EM image
     * (dark membranes), put through the membrane filter first (0). */
    int raw_input;
    /* raw_input only: 1: voxels of value 0 are outside the tissue (what the
     * montage and the aligner write where there is no data): they take the
     * mean of the others before the filter and are boundary (1) after it,
     * so segments do not run through them (0). */
    int nodata_zero;
    /* Isotropic 3D, sections, 2D, or chosen from resolution (AUTO). */
    cnx_segment_mode mode;
    /* Membrane filter scale, nm, raw_input only: 1 .. 1000 (6). */
    double filter_sigma_nm;
    /* Weight of the filter's ridge (Hessian) term against its darkness
     * term: 0 .. 1 (0.3). */
    double filter_ridge;
    /* Scale of the shading removed from the darkness term, nm; 0: none.
     * 0 .. 10^5 (100). */
    double filter_background_nm;
    /* Seeds are extrema within this distance, nm (a box of that half
     * side per axis, in voxels rounded; 0 per axis below half a voxel):
     * 0 .. 10^4 (32). */
    double seed_distance_nm;
    /* Boundary level below which a voxel may hold a seed: 0 .. 1 (0.5). */
    double seed_threshold;
    /* Distance maxima or boundary minima (CNX_SEGMENT_SEEDS_DISTANCE). */
    cnx_segment_seeds seed_method;
    /* Merge neighbours while the mean boundary along their shared edge is
     * below this: 0 .. 1 (0.55). */
    double merge_threshold;
    /* Segments smaller than this volume, nm^3, join the neighbour they
     * share the lowest edge with: 0 .. 10^15 (10^6, about 1950 voxels of
     * 8 nm, 520 of 8 x 8 x 30 nm). */
    double min_size_nm3;
} cnx_segment_params;

/** Fill p with the defaults given with each field above. */
void cnx_segment_params_default(cnx_segment_params *p);

/**
 * The bounds table of cnx_segment_params (cnx/param.h): one row per JSON
 * key (every field but resolution), in the order the parser reads them
 * and the check names them. What the check, the defaults, the JSON
 * parser (cnx/segment_io.h) and cnx-tune read.
 * @param[out] n  its number of rows
 * @return the rows (static, borrowed).
 */
const cnx_param *cnx_segment_param_bounds(size_t *n);

/** The JSON names of the modes and seed rules, in enum order. */
extern const char *const cnx_segment_mode_names[CNX_SEGMENT_MODE_2D + 1];
extern const char *const cnx_segment_seed_names[CNX_SEGMENT_SEEDS_MINIMA + 1];

/**
 * Check parameters set by hand (the ranges above).
 * @return 0, or CNX_EINVAL naming the field.
 */
int cnx_segment_params_check(const cnx_segment_params *p);

/** The mode p stands for: AUTO resolved by the rule above (never AUTO). */
cnx_segment_mode cnx_segment_mode_of(const cnx_segment_params *p);

/**
 * The halo, voxels (one value for every axis: the largest per-axis need),
 * a chunk needs so that the labels inside it come out as they do on the
 * whole volume, for these parameters at p->resolution: the membrane
 * filter's footprint (raw_input: the larger of the ridge smoothing and
 * the shading blur, as voxel radii), plus room for the seeds and the
 * watershed (4 seed distances, at least 8 voxels). docs/segment.md
 * ("Halo") gives the formula. p must pass cnx_segment_params_check (else
 * 8 is returned).
 */
int64_t cnx_segment_halo(const cnx_segment_params *p);

/**
 * The context of a chunk of raw input: eight times the seeds' room of
 * cnx_segment_halo (32 seed distances, at least 64 voxels; the larger over
 * the axes). Such a chunk is filtered over all it was read with (the
 * halo is mostly the shading's footprint) and segmented (seeds, watershed,
 * agglomeration) over the chunk grown by this much, clipped to what was
 * read (cnx_segjoin_chunk). Same check as above.
 */
int64_t cnx_segment_context(const cnx_segment_params *p);

/** Segment volume in voxels (min_size_nm3 at p->resolution, rounded). */
int64_t cnx_segment_min_voxels(const cnx_segment_params *p);

/**
 * Turn a uint8 volume into a float boundary map in [0, 1].
 *
 * raw_input 0: b = v / 255. raw_input 1: the membrane filter (see
 * docs/segment.md and segment_filter.c): per section in the modes
 * SECTIONS and 2D, else in 3D; intensities stretched by their 1st and
 * 99th percentiles; darkness = the image inverted, smoothed at
 * filter_sigma_nm (per axis in voxels), minus its shading (a blur at
 * filter_background_nm); ridge = the largest Hessian eigenvalue (in voxel
 * steps) at 2 filter_sigma_nm (dark thin lines); each term stretched to
 * [0, 1] by its percentiles, b = (1 - filter_ridge) * darkness +
 * filter_ridge * ridge.
 *
 * @param in    size[0]*size[1]*size[2] voxels, x fastest, then y, z
 * @param size  each 1 .. CNX_SEGMENT_MAX_SIDE, product at most
 *              CNX_SEGMENT_MAX_VOXELS
 * @param p     parameters (checked)
 * @param[out] boundary_out  as many floats as voxels; may not alias in
 * @return 0; CNX_EINVAL for NULL pointers, a size below 1 or bad
 *         parameters; CNX_ETOOBIG for a volume over the limits (also
 *         when (X+2)(Y+2)(Z+2) reaches 2^32: very thin volumes);
 *         CNX_ENOMEM. All fatal. Time O(voxels) (the filter: O(voxels x
 *         filter_sigma^2)); memory 16 bytes per voxel (filter).
 * Thread-safety: no shared state; call from any number of threads.
 */
int cnx_segment_boundary_u8(const uint8_t *in, const int64_t size[3],
                            const cnx_segment_params *p, float *boundary_out);

/**
 * As cnx_segment_boundary_u8 for float input. raw_input 0: b = v clamped
 * to [0, 1] (NaN reads as 1, a membrane). raw_input 1: intensities are
 * normalised by their own 1st and 99th percentiles (NaN counts as dark).
 */
int cnx_segment_boundary_f32(const float *in, const int64_t size[3],
                             const cnx_segment_params *p, float *boundary_out);

/**
 * As cnx_segment_boundary_u8 / _f32, written for the region at lo of size
 * osize of the input only (boundary_out: osize voxels, x fastest). With
 * raw_input the shading and the intensity percentiles come from the whole
 * input, the smoothings and the Hessian from the region grown by their
 * footprint (so, on the region, the whole input's values to the bit), and
 * each term is stretched by its percentiles over the region; lo = 0,
 * osize = size is the whole-volume call. A region not inside the input:
 * CNX_EINVAL.
 */
int cnx_segment_boundary_u8_region(const uint8_t *in, const int64_t size[3],
                                   const cnx_segment_params *p,
                                   const int64_t lo[3],
                                   const int64_t osize[3],
                                   float *boundary_out);
int cnx_segment_boundary_f32_region(const float *in, const int64_t size[3],
                                    const cnx_segment_params *p,
                                    const int64_t lo[3],
                                    const int64_t osize[3],
                                    float *boundary_out);

/**
 * The 8-bit level the kernel works with: round(255 * b) for b clamped to
 * [0, 1] (NaN: 255).
 */
static inline uint32_t cnx_segment_quantize(float b)
{
    /* On the bits, without branches: non-negative floats order as their
     * bit patterns; NaN of either sign reads as 1.0f, negatives as 0. */
    const uint32_t one = 0x3F800000u;
    uint32_t u;
    float c;
    memcpy(&u, &b, sizeof(u));
    u = (u & 0x7FFFFFFFu) > 0x7F800000u ? one : u;
    u = (u & 0x80000000u) != 0 ? 0u : u;
    u = u < one ? u : one;
    memcpy(&c, &u, sizeof(c));
    return (uint32_t)(c * 255.0f + 0.5f);
}

/**
 * The edge statistic: what one face-adjacent voxel pair (a, b) in
 * different regions adds to the sum of the edge between their regions
 * (the count grows by one). It is the larger of the two quantised
 * boundary values, 0 .. 255: the height of the ridge the watershed line
 * crosses there. A cross-chunk join must sum exactly this, over exactly
 * the face pairs that straddle its seam, to take the decisions the kernel
 * would take on the whole volume.
 *
 * @param ba, bb  the float boundary values of the two voxels (the _q form
 *                takes their quantised values)
 */
static inline uint32_t cnx_segment_pair_value_q(uint32_t qa, uint32_t qb)
{
    return qa > qb ? qa : qb;
}

static inline uint32_t cnx_segment_pair_value(float ba, float bb)
{
    return cnx_segment_pair_value_q(cnx_segment_quantize(ba),
                                    cnx_segment_quantize(bb));
}

/**
 * An edge's value from its sums: floor(65536 * sum / count), compared
 * against cnx_segment_merge_level(merge_threshold).
 */
static inline uint64_t cnx_segment_edge_value(uint64_t sum, uint64_t count)
{
    return (sum << 16) / count;
}

/**
 * The value below which edges merge: merge_threshold * 255 * 65536,
 * rounded to the nearest integer (threshold in [0, 1]).
 */
uint64_t cnx_segment_merge_level(double merge_threshold);

/**
 * Segment a boundary map (steps 1-6 of the file comment).
 *
 * @param boundary  size[0]*size[1]*size[2] values in [0, 1] (others are
 *                  clamped; NaN is 1), x fastest, then y, z
 * @param size      each 1 .. CNX_SEGMENT_MAX_SIDE, product at most
 *                  CNX_SEGMENT_MAX_VOXELS
 * @param p         parameters (checked; raw_input and filter_* unused)
 * @param[out] labels   one label per voxel, 1 .. *nlabels
 * @param[out] nlabels  the number of segments
 * @return 0; CNX_EINVAL for NULL pointers, a size below 1 or bad
 *         parameters; CNX_ETOOBIG for a volume over the limits (as
 *         cnx_segment_boundary_u8); CNX_ENOMEM. All fatal. Outputs are
 *         undefined on failure.
 * Time O(voxels) plus O(E log E) in the number of graph edges; memory
 * about 10 bytes per voxel (padded) besides input and output.
 * Thread-safety: no shared state; call from any number of threads.
 */
int cnx_segment_volume(const float *boundary, const int64_t size[3],
                       const cnx_segment_params *p, uint32_t *labels,
                       uint32_t *nlabels);

#ifdef __cplusplus
}
#endif
#endif
