/*
 * cnx/synapse.h - synaptic clefts to synapses with partners (pure kernel).
 * Buffers in, a list out, no I/O, single-threaded; parallelism is across
 * chunks, each chunk a block read with a halo.
 *
 * Per block (synful style; docs/synapses.md has the details):
 *
 *   1. clefts: the voxels with cleft >= cleft_threshold, grouped into
 *      26-connected components over the whole read box (one raster pass
 *      with union-find, two z planes of provisional labels).
 *   2. ownership: a component belongs to this chunk iff its first voxel in
 *      raster order (z, then y, then x) lies in `own`; it is truncated if
 *      its bounding box grown by partner_radius reaches past a face of the
 *      read box that is not a volume edge (`bounds`). Owned components that
 *      are truncated, or smaller than min_size, are dropped (and counted).
 *      With a halo of at least the largest cleft extent plus
 *      partner_radius, every cleft is reported by exactly one chunk, with
 *      the bytes a whole-volume run gives.
 *   3. site: the maximum of the exact squared Euclidean distance transform
 *      of the component (everything else, including the outside of the
 *      read box, is background); ties to the voxel nearest the centroid
 *      (rounded to 1/256 voxel), then raster order.
 *   4. partners, over the voxels within partner_radius (Euclidean) of the
 *      component, clipped to the read box: post = the non-zero segment
 *      most frequent among those with psd >= psd_threshold; pre = the
 *      non-zero segment other than post most frequent among those with
 *      psd < psd_threshold (if none: among all of them). Ties to the lower
 *      id; 0 if there is no candidate. pre_site / post_site: the counted
 *      voxel of that segment farthest from the cleft (at most
 *      partner_radius), ties to the nearest to the site, then raster
 *      order; the site itself when the id is 0.
 *   5. score = mean cleft value / 255 x (the fraction of the psd voxels
 *      that are in post), in millionths, integer rounding.
 *
 * Ids are geometric: 1 + (x | y << 21 | z << 42) of the site, as
 * cnx/segjoin.h's fragments. Determinism: all arithmetic is integer;
 * nothing depends on pointer values, hash order, chunk order or timing.
 */
#ifndef CNX_SYNAPSE_H
#define CNX_SYNAPSE_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/geom.h"
#include "cnx/param.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever the synapses it finds are meant to
 *  change. */
#define CNX_SYNAPSE_VERSION 1

/** The synapse-edges stage's version: bumped whenever what it writes is
 *  meant to change (2: the synapse annotation collection beside the
 *  connectivity, cnx/annotation.h; 3: no empty spatial cell written,
 *  sharded indexes). */
#define CNX_SYNAPSE_EDGES_VERSION 3

/** Site coordinates must lie in [0, 2^21) to pack into an id. */
#define CNX_SYNAPSE_COORD_MAX ((int64_t)1 << 21)

/** Largest read box accepted, voxels (2^31), and largest side (2^20). */
#define CNX_SYNAPSE_MAX_VOXELS ((int64_t)1 << 31)
#define CNX_SYNAPSE_MAX_SIDE ((int64_t)1 << 20)

/** Largest partner_radius. */
#define CNX_SYNAPSE_MAX_RADIUS 16

/** Read box origins (and table sites) within +-2^40: no overflow. */
#define CNX_SYNAPSE_COORD_LIMIT ((int64_t)1 << 40)

/** The id of a synapse whose site is (x, y, z). */
static inline uint64_t cnx_synapse_id(int64_t x, int64_t y, int64_t z)
{
    return 1 + ((uint64_t)x | (uint64_t)y << 21 | (uint64_t)z << 42);
}

/** Parameters; fill with cnx_synapse_params_default, then adjust. */
typedef struct cnx_synapse_params {
    int cleft_threshold; /* a voxel is cleft if cleft >= this, 1..255 (128) */
    int psd_threshold;   /* a voxel is PSD if psd >= this, 1..255 (128) */
    int64_t min_size;    /* clefts with fewer voxels are dropped,
                            0..2^31 (20) */
    int partner_radius;  /* voxels from the cleft searched for partners,
                            1..16 (4) */
} cnx_synapse_params;

/** Fill p with the defaults given with each field above. */
void cnx_synapse_params_default(cnx_synapse_params *p);

/**
 * The bounds table of cnx_synapse_params (cnx/param.h), one row per field
 * in the order the parser reads them and the check names them: what the
 * check, the defaults and the JSON parser (cnx/synapse_io.h) read.
 * @param[out] n  its number of rows
 * @return the rows (static, borrowed).
 */
const cnx_param *cnx_synapse_param_bounds(size_t *n);

/**
 * Check parameters set by hand.
 * @return 0, or CNX_EINVAL naming the field.
 */
int cnx_synapse_params_check(const cnx_synapse_params *p);

/** One block: a chunk grown by its halo (the read box). All borrowed. */
typedef struct cnx_synapse_block {
    const uint8_t *cleft, *psd; /* the read box, x fastest */
    const uint64_t *seg;        /* segmentation over the same box */
    int64_t origin[3], size[3]; /* read box in layer voxels (x, y, z) */
    cnx_box own;                /* the chunk this task owns, inside the
                                   read box */
    cnx_box bounds;             /* the layer's bounds (volume edges);
                                   contains the read box */
    double resolution[3];       /* nm per voxel (positive) */
} cnx_synapse_block;

/** One synapse. */
typedef struct cnx_synapse {
    uint64_t id;                       /* 1 + (x | y<<21 | z<<42) of site */
    int64_t site[3];                   /* layer voxels (x, y, z) */
    int64_t pre_site[3], post_site[3]; /* a voxel inside the pre / post
                                          segment near the cleft (the site
                                          when the id is 0) */
    int64_t size;                      /* cleft voxels */
    uint64_t pre_id, post_id;          /* segment ids; 0 if none found */
    double score;                      /* in [0, 1], a multiple of 1e-6 */
} cnx_synapse;

/** What a detection saw. Every component of the read box is counted in
 *  exactly one of owned_elsewhere, truncated, too_small or the output:
 *  components = owned_elsewhere + truncated + too_small + n. */
typedef struct cnx_synapse_stats {
    int64_t components;      /* cleft components in the read box */
    int64_t too_small;       /* owned here, fewer than min_size voxels */
    int64_t truncated;       /* owned here, cut by a non-volume face
                                (0 when the halo is large enough) */
    int64_t owned_elsewhere; /* first voxel outside own */
} cnx_synapse_stats;

/**
 * Detect the synapses this chunk owns (steps 1-5 of the file comment).
 *
 * @param b   the block (checked)
 * @param p   parameters (checked)
 * @param[out] out    synapses sorted by id; caller frees with free() (NULL
 *                    when there are none)
 * @param[out] n      their number
 * @param[out] stats  optional
 * @return 0; CNX_EINVAL for NULL pointers, a size below 1, an empty own
 *         box or one outside the read box, a read box outside bounds, a
 *         non-positive resolution or bad parameters; CNX_ETOOBIG for a
 *         read box over the limits; CNX_ERANGE when a site lies outside
 *         [0, 2^21); CNX_ENOMEM. All fatal, with a one-line message
 *         ("synapses: ..."). Outputs are untouched on failure.
 * Time O(voxels) for the scan plus O(sum over owned clefts of their box
 * grown by partner_radius); memory two uint32 planes plus 16 bytes per
 * cleft voxel. Thread-safety: no shared state.
 */
int cnx_synapse_detect(const cnx_synapse_block *b, const cnx_synapse_params *p,
                       cnx_synapse **out, size_t *n, cnx_synapse_stats *stats);

/** One connectivity edge: count synapses from pre_id onto post_id. */
typedef struct cnx_synapse_edge {
    uint64_t pre_id, post_id;
    int64_t count;
} cnx_synapse_edge;

/**
 * Connectivity edges over the synapses with both ids non-zero, sorted by
 * (pre_id, post_id); autapses (pre_id == post_id) are kept.
 * @param[out] out  caller frees with free() (NULL when none)
 * @return 0; CNX_EINVAL for NULL pointers; CNX_ENOMEM.
 */
int cnx_synapse_edges(const cnx_synapse *s, size_t n, cnx_synapse_edge **out,
                      size_t *nedges);

#ifdef __cplusplus
}
#endif
#endif
