/*
 * align_render.c - render one aligned section (cnx/align.h, step 3).
 *
 * Aligned pixel q (any box of the layer) takes the stitched section at
 * P = q + d(q), d bilinear between the grid's nodes (clamped to the outer
 * nodes beyond them). The sample is bilinear in the four pixels around P,
 * as the montage samples a tile: P must lie within half a pixel of the
 * section's pixels (the edge pixel repeats up to there), else 0. Pixels
 * without data (0) are left out of the blend and the weights of the others
 * renormalised, so the edge of the data does not darken; all four 0 gives
 * 0. The value is then gain * v + offset, rounded half away from zero and
 * clamped to 1..255 (0 stays "no data").
 */
#include <stdlib.h>

#include "cnx/align.h"
#include "cnx/error.h"
#include "kernels/align_int.h"

/* Position of coordinate v on a grid axis (first, step, count): cell index
 * and fraction, clamped to the nodes. */
static void grid_cell(double v, double first, double step, int64_t count,
                      int64_t *cell, double *frac)
{
    double u = (v - first) / step;
    if (count < 2 || u <= 0.0) {
        *cell = 0;
        *frac = 0.0;
        return;
    }
    if (u >= (double)(count - 1)) {
        *cell = count - 2;
        *frac = 1.0;
        return;
    }
    *cell = align_floor(u);
    *frac = u - (double)*cell;
}

/* Bilinear value of a node field f at cell (i, j) + fractions. */
static double field_at(const double *f, int64_t nx, int64_t ny, int64_t i,
                       double fx, int64_t j, double fy)
{
    const int64_t i1 = nx > 1 ? i + 1 : i, j1 = ny > 1 ? j + 1 : j;
    const double top = f[j * nx + i] * (1.0 - fx) + f[j * nx + i1] * fx;
    const double bot = f[j1 * nx + i] * (1.0 - fx) + f[j1 * nx + i1] * fx;
    return top * (1.0 - fy) + bot * fy;
}

/* Bilinear sample of src at local (sx, sy) skipping pixels 0; -1 if none. */
static double sample(const cnx_align_image *src, double sx, double sy)
{
    const int64_t w = src->w, h = src->h;
    int64_t ix, iy, x[2], y[2];
    double fx, fy, wsum = 0.0, vsum = 0.0;
    if (sx < -0.5 || sy < -0.5 || sx >= (double)w - 0.5 ||
        sy >= (double)h - 0.5)
        return -1.0;
    ix = align_floor(sx);
    iy = align_floor(sy);
    fx = sx - (double)ix;
    fy = sy - (double)iy;
    x[0] = ix < 0 ? 0 : ix;
    x[1] = ix + 1 > w - 1 ? w - 1 : ix + 1;
    y[0] = iy < 0 ? 0 : iy;
    y[1] = iy + 1 > h - 1 ? h - 1 : iy + 1;
    for (int v = 0; v < 2; v++)
        for (int u = 0; u < 2; u++) {
            const double wt = (u ? fx : 1.0 - fx) * (v ? fy : 1.0 - fy);
            const uint8_t px = src->pixels[y[v] * w + x[u]];
            if (px != 0 && wt > 0.0) {
                wsum += wt;
                vsum += wt * (double)px;
            }
        }
    return wsum > 0.0 ? vsum / wsum : -1.0;
}

int cnx_align_render(const cnx_align_image *src, const cnx_align_grid *grid,
                     const double *dx, const double *dy, double gain,
                     double offset, const int64_t box[4], uint8_t *out)
{
    if (src == NULL || src->pixels == NULL || src->w < 1 || src->h < 1 ||
        src->w > CNX_ALIGN_MAX_SIDE || src->h > CNX_ALIGN_MAX_SIDE ||
        grid->nx < 1 || grid->ny < 1 || !(grid->step > 0.0) || dx == NULL ||
        dy == NULL || out == NULL || box[2] < 1 || box[3] < 1 ||
        box[2] > CNX_ALIGN_MAX_SIDE || box[3] > CNX_ALIGN_MAX_SIDE)
        return cnx_error_set(CNX_EINVAL, 0,
                             "align: render: bad section, box or grid "
                             "geometry");
    for (int64_t j = 0; j < box[3]; j++) {
        const double qy = (double)(box[1] + j);
        int64_t cj;
        double fy;
        grid_cell(qy, grid->y0, grid->step, grid->ny, &cj, &fy);
        for (int64_t i = 0; i < box[2]; i++) {
            const double qx = (double)(box[0] + i);
            int64_t ci;
            double fx, v;
            grid_cell(qx, grid->x0, grid->step, grid->nx, &ci, &fx);
            /* Source pixel coordinates of q + d(q) in src. */
            v = sample(src,
                       qx - (double)src->x0 +
                           field_at(dx, grid->nx, grid->ny, ci, fx, cj, fy),
                       qy - (double)src->y0 +
                           field_at(dy, grid->nx, grid->ny, ci, fx, cj, fy));
            if (v < 0.0) {
                out[j * box[2] + i] = 0;
                continue;
            }
            v = align_round(gain * v + offset);
            out[j * box[2] + i] = (uint8_t)(v < 1.0 ? 1 : v > 255.0 ? 255 : v);
        }
    }
    return 0;
}
