/*
 * synth_sections.c - section distortions: what a microscope does to each
 * section before the tiles are cut (docs/synth.md, "Section distortions").
 *
 * Each section z gets a map U_z from the pixel coordinates it is recorded
 * in to the true volume: a rotation about the section's centre, a
 * translation and a smooth warp (a uniform cubic B-spline over a G x G
 * control grid), then an intensity drift. The parameters come from a
 * random stream of the section's own (SYNTH_STREAM_SECTIONS + z << 8), so
 * sections are independent and no other stage's draws move. Arithmetic is
 * IEEE + - * / sqrt and floor in the order written here (the project
 * builds with -ffp-contract=off), so every machine gives the same bytes;
 * the intensity drift is integer. Pure and thread-safe.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/synth_int.h"

int cnx_synth_section_is_missing(const cnx_synth_params *p, int64_t z)
{
    size_t k;
    for (k = 0; k < p->nmissing; k++)
        if (p->missing[k] == z)
            return 1;
    return 0;
}

/* The part of a warp that does not depend on the draws: the identity. */
static void warp_identity(cnx_synth_section_warp *w, int64_t width,
                          int64_t height, int grid)
{
    memset(w, 0, sizeof(*w));
    w->width = width;
    w->height = height;
    w->centre[0] = (double)(width - 1) / 2.0;
    w->centre[1] = (double)(height - 1) / 2.0;
    w->sin_angle = 0.0;
    w->cos_angle = 1.0;
    w->grid = grid;
    /* Control points 1 and G-2 lie on the first and last pixel centres, so
     * the spline's G-3 segments span the section exactly. */
    w->spacing[0] = (double)(width > 1 ? width - 1 : 1) / (double)(grid - 3);
    w->spacing[1] = (double)(height > 1 ? height - 1 : 1) / (double)(grid - 3);
    w->origin[0] = -w->spacing[0];
    w->origin[1] = -w->spacing[1];
    w->gain_milli = 1000;
    w->offset_milli = 0;
}

/* Uniform in [-a, a): a * (2u - 1). */
static double symmetric(synth_rng *rng, double a)
{
    return a * (2.0 * cnx_synth__rng_unit(rng) - 1.0);
}

int cnx_synth_section_warp_draw(cnx_synth_section_warp *out,
                                const cnx_synth_params *p, int64_t z)
{
    synth_rng rng;
    int k, n;
    int rc = cnx_synth_params_check(p);

    if (rc < 0)
        return rc;
    if (z < 0 || z >= p->shape[2])
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: section %lld is outside 0..%lld",
                             (long long)z, (long long)p->shape[2] - 1);
    warp_identity(out, p->shape[0], p->shape[1], p->distort_grid);
    if (p->distort == CNX_SYNTH_DISTORT_NONE)
        return 0;
    cnx_synth__rng_init(&rng, p->seed,
                        SYNTH_STREAM_SECTIONS + ((uint64_t)z << 8));
    out->sin_angle = symmetric(&rng, p->distort_rotation);
    out->cos_angle = sqrt(1.0 - out->sin_angle * out->sin_angle);
    out->translation[0] = symmetric(&rng, p->distort_translation);
    out->translation[1] = symmetric(&rng, p->distort_translation);
    n = p->distort_grid * p->distort_grid;
    for (k = 0; k < n; k++) {
        out->dx[k] = symmetric(&rng, p->distort_warp);
        out->dy[k] = symmetric(&rng, p->distort_warp);
    }
    out->gain_milli = (int)cnx_synth__rng_range(
        &rng, 1000 - p->distort_gain_milli, 1000 + p->distort_gain_milli);
    out->offset_milli =
        (int)cnx_synth__rng_range(&rng, -1000 * (int64_t)p->distort_offset,
                                  1000 * (int64_t)p->distort_offset);
    return 0;
}

/*
 * The cubic B-spline's segment and basis along one axis at coordinate v:
 * u = (v - origin) / spacing, segment i = floor(u) clamped to 1..G-3,
 * t = u - i (outside [0, 1) only beyond the section), weights of control
 * points i-1 .. i+2.
 */
static int spline_axis(double v, double origin, double spacing, int grid,
                       double b[4])
{
    const double u = (v - origin) / spacing;
    double f = floor(u), t, t2, t3, s;
    int i;

    if (f < 1.0)
        f = 1.0;
    if (f > (double)(grid - 3))
        f = (double)(grid - 3);
    i = (int)f;
    t = u - f;
    t2 = t * t;
    t3 = t2 * t;
    s = 1.0 - t;
    b[0] = s * s * s / 6.0;
    b[1] = (3.0 * t3 - 6.0 * t2 + 4.0) / 6.0;
    b[2] = (-3.0 * t3 + 3.0 * t2 + 3.0 * t + 1.0) / 6.0;
    b[3] = t3 / 6.0;
    return i;
}

/* Sum over the spline's rows first, then its columns (the documented
 * order): q[a] = sum_b by[b] P[j-1+b][i-1+a], w = sum_a bx[a] q[a]. */
void cnx_synth_section_map(const cnx_synth_section_warp *w, double px,
                           double py, double *tx, double *ty)
{
    const int g = w->grid;
    const double ex = px - w->centre[0], ey = py - w->centre[1];
    const double rx = w->cos_angle * ex - w->sin_angle * ey;
    const double ry = w->sin_angle * ex + w->cos_angle * ey;
    double bx[4], by[4], wx = 0.0, wy = 0.0;
    int i, j, a, b;

    assert(g >= 4 && g <= CNX_SYNTH_WARP_GRID_MAX);
    i = spline_axis(px, w->origin[0], w->spacing[0], g, bx);
    j = spline_axis(py, w->origin[1], w->spacing[1], g, by);
    for (a = 0; a < 4; a++) {
        const int col = i - 1 + a;
        double qx = 0.0, qy = 0.0;
        for (b = 0; b < 4; b++) {
            qx += by[b] * w->dx[(j - 1 + b) * g + col];
            qy += by[b] * w->dy[(j - 1 + b) * g + col];
        }
        wx += bx[a] * qx;
        wy += bx[a] * qy;
    }
    *tx = ((w->centre[0] + rx) + w->translation[0]) + wx;
    *ty = ((w->centre[1] + ry) + w->translation[1]) + wy;
}

/* Mirror an index into 0..n-1: ... 2 1 | 0 1 ... n-1 | n-2 n-3 ... */
static int64_t reflect(int64_t i, int64_t n)
{
    const int64_t period = 2 * (n - 1);
    int64_t m;
    if (n == 1)
        return 0;
    m = i % period;
    if (m < 0)
        m += period;
    return m >= n ? period - m : m;
}

/* One column's spline segment and weights (the x half of the map). */
typedef struct spline_col {
    int i;
    double b[4];
} spline_col;

/*
 * The same arithmetic as cnx_synth_section_map, in the same order, with
 * the x weights computed once per column and the row sums q once per row:
 * bit-identical to calling it per pixel, several times faster.
 */
int cnx_synth_distort_section(uint8_t *out, const uint8_t *in,
                              const cnx_synth_section_warp *w)
{
    const int64_t sx = w->width, sy = w->height;
    const int g = w->grid;
    spline_col *cols;
    int64_t x, y;

    assert(sx >= 1 && sy >= 1);
    assert(g >= 4 && g <= CNX_SYNTH_WARP_GRID_MAX);
    cols = malloc((size_t)sx * sizeof(*cols));
    if (cols == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    for (x = 0; x < sx; x++)
        cols[x].i =
            spline_axis((double)x, w->origin[0], w->spacing[0], g, cols[x].b);
    for (y = 0; y < sy; y++) {
        double by[4], qx[CNX_SYNTH_WARP_GRID_MAX], qy[CNX_SYNTH_WARP_GRID_MAX];
        const double ey = (double)y - w->centre[1];
        const int j =
            spline_axis((double)y, w->origin[1], w->spacing[1], g, by);
        int c, b;
        for (c = 0; c < g; c++) {
            qx[c] = 0.0;
            qy[c] = 0.0;
            for (b = 0; b < 4; b++) {
                qx[c] += by[b] * w->dx[(j - 1 + b) * g + c];
                qy[c] += by[b] * w->dy[(j - 1 + b) * g + c];
            }
        }
        for (x = 0; x < sx; x++) {
            const spline_col *col = &cols[x];
            const double ex = (double)x - w->centre[0];
            const double rx = w->cos_angle * ex - w->sin_angle * ey;
            const double ry = w->sin_angle * ex + w->cos_angle * ey;
            double wx = 0.0, wy = 0.0, ux, uy, fx, fy, x0, y0, top, bottom, v;
            int64_t ix0, ix1, iy0, iy1, r, n;
            int a;

            for (a = 0; a < 4; a++) {
                wx += col->b[a] * qx[col->i - 1 + a];
                wy += col->b[a] * qy[col->i - 1 + a];
            }
            ux = ((w->centre[0] + rx) + w->translation[0]) + wx;
            uy = ((w->centre[1] + ry) + w->translation[1]) + wy;
            /* Bounded strengths keep U_z within a few thousand pixels. */
            assert(fabs(ux) < 1e12 && fabs(uy) < 1e12);
            x0 = floor(ux);
            y0 = floor(uy);
            fx = ux - x0;
            fy = uy - y0;
            ix0 = reflect((int64_t)x0, sx);
            ix1 = reflect((int64_t)x0 + 1, sx);
            iy0 = reflect((int64_t)y0, sy);
            iy1 = reflect((int64_t)y0 + 1, sy);
            top =
                (double)in[iy0 * sx + ix0] +
                fx * ((double)in[iy0 * sx + ix1] - (double)in[iy0 * sx + ix0]);
            bottom =
                (double)in[iy1 * sx + ix0] +
                fx * ((double)in[iy1 * sx + ix1] - (double)in[iy1 * sx + ix0]);
            v = top + fy * (bottom - top);
            r = (int64_t)floor(v + 0.5);
            /* round(r * gain + offset) in thousandths, half up. */
            n = r * w->gain_milli + w->offset_milli + 500;
            n = n < 0 ? 0 : n / 1000;
            out[y * sx + x] = (uint8_t)(n > 255 ? 255 : n);
        }
    }
    free(cols);
    return 0;
}
