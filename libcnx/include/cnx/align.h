/*
 * cnx/align.h - align the stitched sections of a serial-section stack to
 * each other (pure kernels): buffers in, buffers out, no I/O, no JSON,
 * single-threaded, deterministic to the byte (IEEE + - * / and sqrt in a
 * fixed order, built with -ffp-contract=off, as the montage).
 *
 *   1. match (per section pair b = z, a = z - 1 or z - 2), on high-passed
 *      sections (each pixel less the mean of its neighbourhood): a coarse
 *      translation of the whole section by masked NCC, then on a regular
 *      grid of nodes a local displacement per node by masked NCC of a patch
 *      of b against a window of a (the montage's registration), with a
 *      confidence (peak ratio) per node and outlier rejection (low
 *      confidence, no texture, no data, inconsistent with its neighbours).
 *   2. solve (over every section, in blocks of sections with overlap): an
 *      elastic mesh per section -- springs between neighbouring nodes of a
 *      section, springs from each node to its matches in the sections one
 *      and two before and after, a weak spring to its stitched position
 *      (the anchor) -- relaxed to equilibrium by a linear least-squares
 *      solve (conjugate gradients in a fixed order); a
 *      section that cannot be aligned is marked and bridged from its
 *      neighbours. Per section gain and offset bring each section's
 *      intensity to the stack's median mean and spread.
 *   3. render: each aligned pixel q of section z is the stitched section
 *      sampled bilinearly at q + d_z(q), d_z bilinear in the node grid,
 *      then corrected by the section's gain and offset.
 *
 * Coordinates: section pixels of the layer (x, y), pixel centres at
 * integers, the layer's voxel_offset included. A section image is given
 * as w x h uint8 pixels (x fastest) whose pixel (i, j) sits at
 * (x0 + i, y0 + j). Pixel value 0 means "no data" (what the montage writes
 * where no tile covers): patches are clipped to the data near its edge and
 * not matched where they would touch it.
 * See docs/align.md.
 */
#ifndef CNX_ALIGN_H
#define CNX_ALIGN_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/param.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever the bytes it writes are meant to change. */
#define CNX_ALIGN_VERSION 1

/** Largest section side, pixels. */
#define CNX_ALIGN_MAX_SIDE 65536

/** Node flags of a match (0: valid). */
enum {
    CNX_ALIGN_NODE_OK = 0,
    CNX_ALIGN_NODE_NODATA = 1,  /* patch or window touches no-data pixels
                                   or leaves the section */
    CNX_ALIGN_NODE_FLAT = 2,    /* no texture (no valid offset) */
    CNX_ALIGN_NODE_WEAK = 3,    /* peak ratio below min_peak_ratio */
    CNX_ALIGN_NODE_OUTLIER = 4, /* far from its neighbours' median */
};

/** Section status in a solution. */
enum {
    CNX_ALIGN_SECTION_OK = 0,     /* aligned by its matches */
    CNX_ALIGN_SECTION_FAILED = 1, /* no usable match: bridged */
    CNX_ALIGN_SECTION_EMPTY = 2,  /* no data at all: bridged */
};

/** Parameters; fill with cnx_align_params_default, then adjust. */
typedef struct cnx_align_params {
    int64_t stride;       /* node spacing, px: 8 .. 4096 (32) */
    int64_t patch;        /* patch side, px: 16 .. 4096 (64) */
    int64_t search;       /* coarse search, px: 0 .. 4096 (64) */
    int64_t patch_search; /* per node, around the coarse offset: 1 .. 256 (8) */
    int64_t bin;          /* match on sections averaged bin x bin (the
                             lengths above divided by bin): 1 .. 16 (1) */
    int64_t highpass;     /* both sections are matched high-passed: v less
                             the mean of the data within this radius, px:
                             0 (off) .. 256 (8) */
    double min_peak_ratio; /* nodes below are rejected: 1 .. 10^6 (2.5) */
    double max_deviation;  /* px from the neighbours' median: > 0 (2) */
    double min_valid;      /* a pair with a smaller fraction of valid nodes
                              is not used: 0 .. 1 (0.1) */
    double stiffness;      /* spring within a section relative to a match
                              spring: > 0 .. 10^6 (0.05) */
    double anchor;         /* spring from every node to its stitched
                              position, relative to a match spring: the
                              stage's coordinates are unbiased on average,
                              the tissue's drift between sections is not:
                              0 .. 1 (1e-4) */
    int64_t block;         /* sections per solve block: 2 .. 10^6 (128) */
    int64_t overlap;       /* sections shared by consecutive blocks:
                              1 .. block / 2 (32) */
    int normalize;         /* 1: per section gain and offset (1) */
} cnx_align_params;

/** Fill p with the defaults given with each field above. */
void cnx_align_params_default(cnx_align_params *p);

/** @return 0, or CNX_EINVAL naming the field out of its range (the
 *  bounds table's, then overlap <= block / 2). */
int cnx_align_params_check(const cnx_align_params *p);

/**
 * The bounds table of cnx_align_params (cnx/param.h): what the defaults,
 * the check and the JSON parser (cnx/align_io.h) read. overlap's table
 * bound is its widest; the check also holds it to block / 2.
 * @param[out] n  its number of rows
 * @return the rows (static, borrowed).
 */
const cnx_param *cnx_align_param_bounds(size_t *n);

/** The node grid of a section w x h at (x0, y0): nodes at
 * (x0 + ox + i * stride, y0 + oy + j * stride), i < nx, j < ny, spread so
 * that the first and last node are equally far from the edges. */
typedef struct cnx_align_grid {
    double x0, y0;  /* first node */
    double step;    /* stride */
    int64_t nx, ny; /* nodes per axis, >= 1 */
} cnx_align_grid;

/** The grid of a section (same for every section of a layer). */
cnx_align_grid cnx_align_grid_of(int64_t x0, int64_t y0, int64_t w, int64_t h,
                                 const cnx_align_params *p);

/** Statistics of one section's data (pixels != 0). */
typedef struct cnx_align_stats {
    double mean, sd; /* over pixels with data (0 if none) */
    int64_t count;   /* pixels with data */
} cnx_align_stats;

/** What section b's content matched in section a, node by node. */
typedef struct cnx_align_match {
    int64_t za, zb;     /* a = zb - 1 or zb - 2 */
    double coarse[2];   /* whole-section shift: b point p ~ a point p + c */
    double coarse_peak; /* its peak ratio (0: none found) */
    size_t nodes;       /* grid.nx * grid.ny */
    /* Per node n at grid position g: b's point g shows what a shows at
     * g + (dx[n], dy[n]) (0, 0 where flag[n] != 0). */
    double *dx, *dy;
    double *peak;  /* peak ratio (0 where not registered) */
    uint8_t *flag; /* CNX_ALIGN_NODE_* */
    size_t valid;  /* nodes with flag 0 */
} cnx_align_match;

/** Section image: pixels (i, j) at (x0 + i, y0 + j), borrowed. */
typedef struct cnx_align_image {
    int64_t x0, y0, w, h;
    const uint8_t *pixels;
} cnx_align_image;

/**
 * Statistics of a section's data.
 */
cnx_align_stats cnx_align_stats_of(const cnx_align_image *s);

/**
 * Match section b against section a (same geometry): step 1.
 * @param[out] out  zeroed first; free with cnx_align_match_free (also
 *                  after a failure); za, zb are the caller's to set
 * @return 0 (a pair with no data or no texture gives no valid node, not an
 *         error); CNX_EINVAL for bad parameters or images of different
 *         geometry or a side outside 1 .. CNX_ALIGN_MAX_SIDE; CNX_ENOMEM.
 */
int cnx_align_match_sections(const cnx_align_image *a, const cnx_align_image *b,
                             const cnx_align_params *p, cnx_align_match *out);

/** Free what a match holds and zero it. Accepts NULL. */
void cnx_align_match_free(cnx_align_match *m);

/** One section of a solution. */
typedef struct cnx_align_section {
    int64_t z;
    int status;          /* CNX_ALIGN_SECTION_* */
    double *dx, *dy;     /* per node: aligned point g maps to stitched g + d */
    double gain, offset; /* corrected = gain * v + offset */
    /* Report: over the valid nodes of the pairs used, after the solve,
     * |d_a(g) - d_b(g) - m(g + d_b(g))| in px (0 if none). */
    double residual_median, residual_max;
    double confidence;     /* median peak ratio of its used nodes (0: none) */
    size_t nodes_valid;    /* valid nodes over its used pairs */
    size_t nodes_rejected; /* rejected nodes over all its pairs */
    size_t pairs_used;     /* pairs (either side) used in the solve */
} cnx_align_section;

/** A solved stack: sections z0 .. z0 + nz - 1. */
typedef struct cnx_align_solution {
    cnx_align_grid grid;
    int64_t z0, nz;
    cnx_align_section *sections; /* nz */
    size_t nodes;                /* per section */
    int64_t blocks;              /* solve blocks used */
} cnx_align_solution;

/**
 * Solve the stack z0 .. z0 + nz - 1 (step 2) from its matches (any order;
 * each (za, zb) at most once, both inside the stack, zb - za 1 or 2) and
 * every section's statistics (nz entries, z0 first).
 * @param[out] out  zeroed first; free with cnx_align_solution_free
 * @return 0; CNX_EINVAL for bad parameters, nz < 1, a match outside the
 *         stack, repeated, or with another node count; CNX_ENOMEM.
 */
int cnx_align_solve(const cnx_align_grid *grid, int64_t z0, int64_t nz,
                    const cnx_align_match *matches, size_t nmatches,
                    const cnx_align_stats *stats, const cnx_align_params *p,
                    cnx_align_solution *out);

/** Free what a solution holds and zero it. Accepts NULL. */
void cnx_align_solution_free(cnx_align_solution *s);

/**
 * Render one aligned section (step 3): the aligned pixels of box
 * (x0, y0, w, h: layer coordinates, any box) into out (w * h bytes, x
 * fastest): out(q) = clamp(round(gain * bilinear(src, q + d(q)) + offset),
 * 1, 255), 0 where q + d(q) falls outside src's pixels (beyond half a pixel
 * from the edge) or every source pixel sampled is 0 (no data). d is
 * bilinear in the node displacements dx, dy (grid.nx * grid.ny each),
 * clamped to the outer nodes beyond them.
 * @return 0; CNX_EINVAL for a bad geometry.
 */
int cnx_align_render(const cnx_align_image *src, const cnx_align_grid *grid,
                     const double *dx, const double *dy, double gain,
                     double offset, const int64_t box[4], uint8_t *out);

#ifdef __cplusplus
}
#endif
#endif
