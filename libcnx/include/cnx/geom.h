/*
 * cnx/geom.h - boxes, chunk grids, halos and the task box generator.
 *
 * Coordinates are int64 voxel indices in a layer's global frame; a box is
 * half-open [min, max) on each axis (x, y, z). A chunk grid is the grid of a
 * precomputed scale: chunk g covers [offset + g*c, offset + min((g+1)*c,
 * size)) -- edge chunks are truncated, never padded.
 */
#ifndef CNX_GEOM_H
#define CNX_GEOM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cnx_box {
    int64_t min[3];
    int64_t max[3];
} cnx_box;

/** The chunk grid of one scale of a layer. */
typedef struct cnx_grid {
    int64_t offset[3]; /* voxel_offset */
    int64_t size[3];   /* extent in voxels */
    int64_t chunk[3];  /* chunk size */
} cnx_grid;

/* Integer helpers for grid arithmetic (also for negative coordinates). */
static inline int64_t cnx_imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t cnx_imax(int64_t a, int64_t b) { return a > b ? a : b; }

/** floor(a / b) for b > 0, also for negative a. */
static inline int64_t cnx_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if (a % b != 0 && a < 0)
        q--;
    return q;
}

/** ceil(a / b) for b > 0, also for negative a. */
static inline int64_t cnx_ceildiv(int64_t a, int64_t b)
{
    return -cnx_floordiv(-a, b);
}

/** @return a box from min and max corners. */
cnx_box cnx_box_make(int64_t x0, int64_t y0, int64_t z0, int64_t x1,
                     int64_t y1, int64_t z1);
/** @return 1 if any axis has max <= min. */
int cnx_box_empty(const cnx_box *box);
/** @return number of voxels (0 for an empty box). */
int64_t cnx_box_voxels(const cnx_box *box);
/** size[i] = max[i] - min[i] (0 if negative). */
void cnx_box_size(const cnx_box *box, int64_t size[3]);
/** @return the intersection (possibly empty). */
cnx_box cnx_box_intersect(const cnx_box *a, const cnx_box *b);
/** @return the smallest box holding both (non-empty) boxes. */
cnx_box cnx_box_hull(const cnx_box *a, const cnx_box *b);
/** @return 1 if inner lies inside outer (an empty inner always does). */
int cnx_box_contains(const cnx_box *outer, const cnx_box *inner);
/** @return 1 if the boxes are equal. */
int cnx_box_equal(const cnx_box *a, const cnx_box *b);
/** @return box grown by halo voxels on every side, then clipped to bounds
 *  (bounds may be NULL for no clipping). */
cnx_box cnx_box_grow(const cnx_box *box, int64_t halo, const cnx_box *bounds);
/**
 * Format as a precomputed chunk name "x0-x1_y0-y1_z0-z1".
 * @return 0, or CNX_ERANGE if buf (size n) is too small.
 */
int cnx_box_format(const cnx_box *box, char *buf, size_t n);
/** Parse "x0-x1_y0-y1_z0-z1". @return 0 or CNX_EINVAL. */
int cnx_box_parse(const char *text, cnx_box *out);

/** @return 0 if the grid is valid (size >= 0, chunk > 0), else CNX_EINVAL. */
int cnx_grid_check(const cnx_grid *grid);
/** @return the grid's bounds: [offset, offset + size). */
cnx_box cnx_grid_bounds(const cnx_grid *grid);
/** counts[i] = ceil(size[i] / chunk[i]). */
void cnx_grid_counts(const cnx_grid *grid, int64_t counts[3]);
/** @return the (truncated) box of chunk g; g must be inside the grid. */
cnx_box cnx_grid_chunk_box(const cnx_grid *grid, const int64_t g[3]);
/**
 * @return 1 if box starts on chunk boundaries and ends on chunk boundaries or
 * at the grid's upper bound, and lies inside the grid.
 */
int cnx_grid_is_aligned(const cnx_grid *grid, const cnx_box *box);
/**
 * Chunk index range [lo, hi) of the chunks that box touches (clipped to the
 * grid). An empty range (lo == hi on some axis) if box misses the grid.
 */
void cnx_grid_chunk_range(const cnx_grid *grid, const cnx_box *box,
                          int64_t lo[3], int64_t hi[3]);

/**
 * Cut a region of interest into task boxes (the deterministic box generator).
 *
 * The roi is clipped to the grid, widened outwards to whole chunks (so a
 * task writes whole chunks), and cut into cells of task_size voxels aligned
 * to the grid offset; cells are truncated at the grid's edge. The cells are
 * disjoint, cover the widened roi exactly, and come in z-major, then y, then
 * x order. task_size must be a positive multiple of the chunk size.
 *
 * @param[out] out    array of boxes, caller frees with free()
 * @param[out] count  number of boxes (0 if the roi misses the grid)
 * @return 0; CNX_EINVAL for a bad grid or task size; CNX_ENOMEM.
 */
int cnx_boxgen(cnx_box **out, size_t *count, const cnx_grid *grid,
               const cnx_box *roi, const int64_t task_size[3]);

#ifdef __cplusplus
}
#endif
#endif
