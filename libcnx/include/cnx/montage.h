/*
 * cnx/montage.h - stitch the tiles of one section (pure kernel): register
 * every pair of tiles that may overlap, solve the tile positions globally,
 * normalise each tile's intensity, render the section. Buffers in, buffers
 * out, no I/O, single-threaded.
 *
 *   1. pairs: every pair of tiles whose nominal rectangles, each moved by
 *      up to `search` pixels, would share at least 8 x 8 pixels.
 *   2. registration: normalised cross-correlation (NCC) of the two tiles
 *      over their true overlap for every integer offset within `search`
 *      of the nominal one; the cross term by FFT on the two strips that
 *      can overlap (2 x 2 binned when the search is wide), the sums of
 *      each side from summed-area tables. The best offset is refined at
 *      full resolution and to sub-pixel by a parabola through the NCC of
 *      its neighbours. Confidence: the peak ratio (1 - r2) / (1 - r1), r1
 *      the NCC at the peak and r2 the best NCC at least 5 pixels away from
 *      it: how many times more variance the runner-up leaves unexplained
 *      (1 .. 20000).
 *   3. solve: least squares of tile positions from the pairs with a peak
 *      ratio of at least min_peak_ratio, the first tile of the largest
 *      connected group fixed; while the worst pair's residual is above
 *      max_residual that pair is dropped and the solve repeated (loop
 *      closure). The whole solution is then moved by an integer vector so
 *      that it sits, on average, where the nominal positions put it.
 *   4. normalisation: per tile gain and offset, least squares from the
 *      mean and standard deviation of both sides of every used overlap.
 *   5. rendering: bilinear sampling at the solved positions, linear
 *      feathering by the distance to each tile's edge.
 *
 * Determinism: the same input gives the same bytes (report and render) on
 * every machine and at every optimisation level: only IEEE + - * / and
 * sqrt in a fixed order (our own FFT, its twiddles from half-angle
 * formulas; built with -ffp-contract=off), no other libm function, and
 * every tie broken by index. See docs/montage.md. The JSON parameters
 * and the report are cnx/montage_io.h.
 */
#ifndef CNX_MONTAGE_H
#define CNX_MONTAGE_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/param.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever the bytes it writes are meant to change. */
#define CNX_MONTAGE_VERSION 1

/** Largest tile width or height, pixels. */
#define CNX_MONTAGE_MAX_SIDE 65536

/** Largest `search`, pixels. */
#define CNX_MONTAGE_MAX_SEARCH 4096

/** Most tiles in one section (the solve indexes them with 32 bits). */
#define CNX_MONTAGE_MAX_TILES 1000000

/** One tile of a section (all borrowed). */
typedef struct cnx_montage_tile {
    const char *id;        /* for messages and the report; unique */
    int64_t x, y;          /* nominal top-left, section pixels (may be < 0) */
    int64_t width, height; /* 1 .. CNX_MONTAGE_MAX_SIDE */
    const uint8_t *pixels; /* width * height, row-major (x fastest) */
} cnx_montage_tile;

/** Parameters; fill with cnx_montage_params_default, then adjust. */
typedef struct cnx_montage_params {
    /* Largest |measured - nominal| offset of a pair searched, per axis,
     * pixels: 0 .. CNX_MONTAGE_MAX_SEARCH (50). */
    int64_t search;
    /* Pairs with a lower peak ratio are not used: 1 .. 10^6 (3). */
    double min_peak_ratio;
    /* After a solve, a pair with a larger residual is dropped (the worst
     * first) and the solve repeated, pixels: > 0 .. 10^6 (2.0). */
    double max_residual;
    /* 1: per-tile gain and offset from the overlaps; 0: identity (1). */
    int normalize;
} cnx_montage_params;

/** Fill p with the defaults given with each field above. */
void cnx_montage_params_default(cnx_montage_params *p);

/**
 * The bounds table of cnx_montage_params (cnx/param.h), one row per
 * field in the order above: what the check, the defaults and the JSON
 * parser (cnx/montage_io.h) read.
 * @param[out] n  its number of rows
 * @return the rows (static, borrowed).
 */
const cnx_param *cnx_montage_param_bounds(size_t *n);

/**
 * Check parameters set by hand (the ranges above).
 * @return 0, or CNX_EINVAL naming the field.
 */
int cnx_montage_params_check(const cnx_montage_params *p);

/** One registered pair of tiles. */
typedef struct cnx_montage_pair {
    size_t a, b;       /* tile indices, a < b */
    double dx, dy;     /* measured: top-left of b minus top-left of a, px */
    double peak_ratio; /* confidence (0: no valid offset found) */
    double residual;   /* px after the final solve: |(pos b - pos a) - d| */
    int used;          /* 1 if in the final solve */
    double ncc;        /* the NCC at the measured offset, -1 .. 1 */
} cnx_montage_pair;

/** What cnx_montage_solve found; free with cnx_montage_result_free. */
typedef struct cnx_montage_result {
    size_t ntiles;
    double *x, *y;         /* solved top-left, section pixels */
    double *gain, *offset; /* corrected pixel = gain * pixel + offset */
    /* 1 if connected to the fixed tile by used pairs; 0: kept at its
     * nominal position, moved like the rest (gain 1, offset 0). */
    int *placed;
    size_t npairs;
    cnx_montage_pair *pairs; /* every candidate pair, in (a, b) order */
    size_t fixed;            /* tile held fixed in the solve */
    double median_residual, max_residual; /* over used pairs (0 if none) */
    size_t rejected;                      /* pairs not used */
    int64_t shift[2]; /* the integer gauge translation applied (x, y) */
} cnx_montage_result;

/**
 * Register every pair of tiles that may overlap, solve positions and
 * normalise intensities (steps 1-4 of the file comment).
 *
 * @param tiles  n tiles (borrowed)
 * @param p      parameters, or NULL for the defaults
 * @param[out] out  zeroed first; on success the caller frees it with
 *                  cnx_montage_result_free (also after a failure)
 * @return 0; CNX_EINVAL for n == 0, a tile with no id or pixels, a width
 *         or height outside 1 .. CNX_MONTAGE_MAX_SIDE, a repeated id, a
 *         position beyond +-2^40, or bad parameters (the message names the
 *         tile or field); CNX_ETOOBIG if the strips of a pair need an FFT
 *         of more than 2^26 points; CNX_ENOMEM. All fatal.
 * Time: O(pairs x N log N) for N the FFT points of a pair (256 x 256 for
 * 128-pixel tiles and search 50, 128 x 128 after binning).
 */
int cnx_montage_solve(const cnx_montage_tile *tiles, size_t n,
                      const cnx_montage_params *p, cnx_montage_result *out);

/**
 * Register one pair of tiles (step 2); out->a = 0, out->b = 1, residual 0,
 * used 0.
 * @return 0 (peak_ratio 0 when no offset within search had a valid
 *         overlap); CNX_ENOTFOUND if the tiles cannot share 8 x 8 pixels
 *         within search of their nominal offset; errors as
 *         cnx_montage_solve.
 */
int cnx_montage_register_pair(const cnx_montage_tile *a,
                              const cnx_montage_tile *b,
                              const cnx_montage_params *p,
                              cnx_montage_pair *out);

/**
 * Render the canvas [x0, x0 + w) x [y0, y0 + h) of section pixels into
 * out (w * h bytes, row-major, x fastest): every tile at its solved
 * position, corrected by its gain and offset, sampled bilinearly, blended
 * with weights that fall linearly to the tile's edge; rounded to nearest
 * and clamped to 0..255. Pixels no tile covers are 0.
 *
 * @param r  a result of cnx_montage_solve for these tiles
 * @return 0; CNX_EINVAL for w or h below 1, w * h over 2^31, or a result
 *         of another tile count; CNX_ENOMEM.
 */
int cnx_montage_render(const cnx_montage_tile *tiles, size_t n,
                       const cnx_montage_result *r, int64_t x0, int64_t y0,
                       int64_t w, int64_t h, uint8_t *out);

/** Free what a result holds and zero it. Accepts NULL. */
void cnx_montage_result_free(cnx_montage_result *r);

#ifdef __cplusplus
}
#endif
#endif
