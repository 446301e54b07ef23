/*
 * montage_render.c - draw a canvas of a section from its solved tiles.
 *
 * A tile at solved top-left (x, y) puts its pixel (i, j) at section
 * position (x + i, y + j), and covers the section pixels X whose tile
 * coordinate u = X - x lies in [-0.5, width - 0.5) (likewise in y). Its
 * value there is the bilinear interpolation of its pixels (the edge pixel
 * repeated beyond the last centre), corrected by gain and offset. Tiles are
 * blended with weight min(du, dv), du = min(u + 0.5, width - 0.5 - u) the
 * distance to the nearer edge in x (dv in y): weights fall linearly to 0 at
 * a tile's edge, so seams fade. The canvas is done in bands of rows with
 * double accumulators, tiles in index order, then rounded to nearest and
 * clamped: the same bytes everywhere. The fractional part of a tile's
 * position is one per tile, so the interpolation weights are constant
 * within a tile. Memory: 16 bytes per pixel of one band.
 */
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/montage_int.h"

#define BAND_ROWS 64

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* One axis of a tile's footprint on the canvas. */
typedef struct span {
    int64_t first, last; /* canvas coordinates covered, inclusive */
    int64_t base;        /* floor of the tile position */
    double frac;         /* position - base, in [0, 1) */
} span;

/* Canvas pixels X covered: X - pos in [-0.5, w - 0.5). */
static void span_of(double pos, int64_t w, span *s)
{
    s->base = mont_floor(pos);
    s->frac = pos - (double)s->base;
    /* X >= pos - 0.5: X >= base + (frac >= 0.5 ? 1 : 0) */
    s->first = s->base + (s->frac > 0.5 ? 1 : 0);
    if (s->frac == 0.5)
        s->first = s->base; /* X - pos = -0.5 exactly is inside */
    /* X < pos + w - 0.5 */
    s->last = s->base + w - 1 + (s->frac > 0.5 ? 1 : 0);
    if (s->frac == 0.5)
        s->last = s->base + w - 1;
}

/* For canvas coordinate X of a span: the two tile indices, the weight of
 * the second, and the feather distance. */
static void sample_of(const span *s, int64_t w, int64_t X, int64_t *i0,
                      int64_t *i1, double *t, double *edge)
{
    const int64_t k = X - s->base; /* u = k - frac */
    const double u = (double)k - s->frac;
    /* distance to the nearer edge plus half a pixel: never 0 */
    double d0 = u + 1.0, d1 = (double)w - u;
    if (s->frac == 0.0) {
        *i0 = *i1 = k;
        *t = 0.0;
    } else {
        *i0 = k - 1;
        *i1 = k;
        *t = 1.0 - s->frac;
    }
    if (*i0 < 0)
        *i0 = 0;
    if (*i1 > w - 1)
        *i1 = w - 1;
    if (*i1 < 0)
        *i1 = 0;
    if (*i0 > w - 1)
        *i0 = w - 1;
    *edge = d0 < d1 ? d0 : d1;
}

int cnx_montage_render(const cnx_montage_tile *tiles, size_t n,
                       const cnx_montage_result *r, int64_t x0, int64_t y0,
                       int64_t w, int64_t h, uint8_t *out)
{
    double *acc = NULL, *wsum = NULL, *tx = NULL, *ex = NULL;
    int64_t *ix0 = NULL, *ix1 = NULL, wmax = 0;
    int rc = 0;

    if (tiles == NULL || r == NULL || out == NULL || r->ntiles != n || n == 0 ||
        r->x == NULL)
        return cnx_error_set(CNX_EINVAL, 0,
                             "montage: render: no tiles or a result of "
                             "another tile set");
    if (w < 1 || h < 1 || w > ((int64_t)1 << 31) / h)
        return cnx_error_set(CNX_EINVAL, 0,
                             "montage: render: canvas %lld x %lld outside "
                             "1 .. 2^31 pixels",
                             (long long)w, (long long)h);
    for (size_t t = 0; t < n; t++) {
        if (tiles[t].pixels == NULL || tiles[t].width < 1 ||
            tiles[t].height < 1 || tiles[t].width > CNX_MONTAGE_MAX_SIDE ||
            tiles[t].height > CNX_MONTAGE_MAX_SIDE)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "montage: render: tile %zu: "
                                 "bad size or no pixels",
                                 t);
        wmax = max64(wmax, tiles[t].width);
    }
    acc = malloc((size_t)(w * BAND_ROWS) * sizeof(*acc));
    wsum = malloc((size_t)(w * BAND_ROWS) * sizeof(*wsum));
    tx = malloc((size_t)(wmax + 2) * sizeof(*tx));
    ex = malloc((size_t)(wmax + 2) * sizeof(*ex));
    ix0 = malloc((size_t)(wmax + 2) * sizeof(*ix0));
    ix1 = malloc((size_t)(wmax + 2) * sizeof(*ix1));
    if (!acc || !wsum || !tx || !ex || !ix0 || !ix1) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "montage: render: out of memory");
        goto done;
    }
    for (int64_t by = 0; by < h; by += BAND_ROWS) {
        const int64_t bh = min64(BAND_ROWS, h - by);
        memset(acc, 0, (size_t)(w * bh) * sizeof(*acc));
        memset(wsum, 0, (size_t)(w * bh) * sizeof(*wsum));
        for (size_t t = 0; t < n; t++) {
            const cnx_montage_tile *tl = &tiles[t];
            const double g = r->gain[t], o = r->offset[t];
            span sx, sy;
            int64_t cx0, cx1, cy0, cy1;
            span_of(r->x[t], tl->width, &sx);
            span_of(r->y[t], tl->height, &sy);
            cx0 = max64(sx.first, x0);
            cx1 = min64(sx.last, x0 + w - 1);
            cy0 = max64(sy.first, y0 + by);
            cy1 = min64(sy.last, y0 + by + bh - 1);
            if (cx0 > cx1 || cy0 > cy1)
                continue;
            for (int64_t X = cx0; X <= cx1; X++)
                sample_of(&sx, tl->width, X, &ix0[X - cx0], &ix1[X - cx0],
                          &tx[X - cx0], &ex[X - cx0]);
            for (int64_t Y = cy0; Y <= cy1; Y++) {
                int64_t j0, j1;
                double ty, ey;
                const uint8_t *r0, *r1;
                double *pa = acc + (Y - y0 - by) * w - x0;
                double *pw = wsum + (Y - y0 - by) * w - x0;
                sample_of(&sy, tl->height, Y, &j0, &j1, &ty, &ey);
                r0 = tl->pixels + j0 * tl->width;
                r1 = tl->pixels + j1 * tl->width;
                for (int64_t X = cx0; X <= cx1; X++) {
                    const int64_t k = X - cx0;
                    const double t1 = tx[k];
                    const double top =
                        (1.0 - t1) * r0[ix0[k]] + t1 * r0[ix1[k]];
                    const double bot =
                        (1.0 - t1) * r1[ix0[k]] + t1 * r1[ix1[k]];
                    const double v = (1.0 - ty) * top + ty * bot;
                    const double wt = ex[k] < ey ? ex[k] : ey;
                    pa[X] += wt * (g * v + o);
                    pw[X] += wt;
                }
            }
        }
        for (int64_t i = 0; i < w * bh; i++) {
            uint8_t *q = out + by * w + i;
            double v;
            if (!(wsum[i] > 0.0)) {
                *q = 0;
                continue;
            }
            v = acc[i] / wsum[i] + 0.5;
            *q = v <= 0.0 ? 0 : (v >= 255.0 ? 255 : (uint8_t)(int)v);
        }
    }
done:
    free(acc);
    free(wsum);
    free(tx);
    free(ex);
    free(ix0);
    free(ix1);
    return rc;
}
