/*
 * align_match.c - parameters, the node grid, section statistics and the
 * matching of one section pair (cnx/align.h, docs/align.md).
 *
 * Coarse: both sections cut to the box of their data (pixels != 0) less
 * 2 px, box-averaged by the power of two f that brings the larger side to
 * at most 512 px, and registered as two montage tiles (masked NCC over the
 * true overlap, sub-pixel, peak ratio) with search ceil(search / f); the
 * shift is scaled back by f.
 *
 * Per node: the patch of b centred on the node (patch x patch px) against
 * the window of a around where the coarse shift puts it, grown by
 * patch_search on each side, registered as two montage tiles with that
 * search: the overlap is always the whole patch, so every offset is scored
 * on the same pixels. A node is valid when both rectangles lie inside
 * their sections with no pixel 0, the registration found a peak, and its
 * peak ratio is at least min_peak_ratio; then, in one pass over the valid
 * nodes, a node farther than max_deviation from the median (per axis) of
 * its valid 8-neighbours (at least 2 of them) is an outlier.
 */
#include <stdlib.h>
#include <string.h>

#include "cnx/align.h"
#include "cnx/error.h"
#include "kernels/align_int.h"
#include "kernels/montage_int.h"

#define COARSE_MAX_SIDE 512
#define COARSE_SHRINK 2

/* ---- parameters ---------------------------------------------------------- */

#define ROW(field, kind, lo, hi, open_lo, def, unit)                           \
    CNX_PARAM_ROW(cnx_align_params, field, kind, lo, hi, open_lo, def, unit)

/* overlap's upper bound is block / 2, checked after the table. */
static const cnx_param bounds[] = {
    ROW(stride, CNX_PARAM_INT64, 8, 4096, 0, 32, "px"),
    ROW(patch, CNX_PARAM_INT64, 16, 4096, 0, 64, "px"),
    ROW(search, CNX_PARAM_INT64, 0, 4096, 0, 64, "px"),
    ROW(patch_search, CNX_PARAM_INT64, 1, 256, 0, 8, "px"),
    ROW(highpass, CNX_PARAM_INT64, 0, 256, 0, 8, "px"),
    ROW(bin, CNX_PARAM_INT64, 1, 16, 0, 1, ""),
    ROW(block, CNX_PARAM_INT64, 2, 1000000, 0, 128, "sections"),
    ROW(overlap, CNX_PARAM_INT64, 1, 500000, 0, 32, "sections"),
    ROW(min_peak_ratio, CNX_PARAM_REAL, 1.0, 1e6, 0, 2.5, ""),
    ROW(max_deviation, CNX_PARAM_REAL, 0.0, 1e6, 1, 2.0, "px"),
    ROW(min_valid, CNX_PARAM_REAL, 0.0, 1.0, 0, 0.1, ""),
    ROW(stiffness, CNX_PARAM_REAL, 0.0, 1e6, 1, 0.05, ""),
    ROW(anchor, CNX_PARAM_REAL, 0.0, 1.0, 0, 1e-4, ""),
    ROW(normalize, CNX_PARAM_FLAG, 0, 1, 0, 1, ""),
};

const cnx_param *cnx_align_param_bounds(size_t *n)
{
    *n = sizeof(bounds) / sizeof(bounds[0]);
    return bounds;
}

void cnx_align_params_default(cnx_align_params *p)
{
    memset(p, 0, sizeof(*p));
    cnx_param_defaults(bounds, sizeof(bounds) / sizeof(bounds[0]), p);
}

int cnx_align_params_check(const cnx_align_params *p)
{
    int rc;
    if (p == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "align: no parameters");
    rc = cnx_param_check(bounds, sizeof(bounds) / sizeof(bounds[0]), p,
                         "align");
    if (rc == 0 && p->overlap > p->block / 2)
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "align: overlap: out of range (over block / 2)");
    return rc;
}

/* Nodes along one axis of extent n: count and first position. */
static void grid_axis(int64_t o, int64_t n, int64_t stride, double *first,
                      int64_t *count)
{
    *count = (n - 1) / stride + 1;
    *first = (double)o + (double)((n - 1) - (*count - 1) * stride) / 2.0;
}

cnx_align_grid cnx_align_grid_of(int64_t x0, int64_t y0, int64_t w, int64_t h,
                                 const cnx_align_params *p)
{
    cnx_align_grid g;
    grid_axis(x0, w, p->stride, &g.x0, &g.nx);
    grid_axis(y0, h, p->stride, &g.y0, &g.ny);
    g.step = (double)p->stride;
    return g;
}

cnx_align_stats cnx_align_stats_of(const cnx_align_image *s)
{
    cnx_align_stats st = {0.0, 0.0, 0};
    uint64_t sum = 0, sq = 0;
    const size_t n = (size_t)(s->w * s->h);
    for (size_t i = 0; i < n; i++) {
        const uint64_t v = s->pixels[i];
        if (v != 0) {
            sum += v;
            sq += v * v;
            st.count++;
        }
    }
    if (st.count > 0) {
        const double c = (double)st.count;
        const double var = ((double)sq - (double)sum * (double)sum / c) / c;
        st.mean = (double)sum / c;
        st.sd = var > 0.0 ? align_sqrt(var) : 0.0;
    }
    return st;
}

void cnx_align_match_free(cnx_align_match *m)
{
    if (m == NULL)
        return;
    free(m->dx);
    free(m->dy);
    free(m->peak);
    free(m->flag);
    memset(m, 0, sizeof(*m));
}

/* Summed-area table of "pixel is 0" over a section, (w + 1) * (h + 1). */
static int64_t *zero_table(const cnx_align_image *s)
{
    const int64_t w = s->w, h = s->h;
    int64_t *t = calloc((size_t)((w + 1) * (h + 1)), sizeof(*t));
    if (t == NULL)
        return NULL;
    for (int64_t y = 0; y < h; y++) {
        int64_t row = 0;
        for (int64_t x = 0; x < w; x++) {
            row += s->pixels[y * w + x] == 0;
            t[(y + 1) * (w + 1) + x + 1] = t[y * (w + 1) + x + 1] + row;
        }
    }
    return t;
}

/* 1 if the rectangle [x, x + rw) x [y, y + rh) (section-local) lies inside
 * the section and holds no pixel 0. */
static int rect_ok(const int64_t *zt, int64_t w, int64_t h, int64_t x,
                   int64_t y, int64_t rw, int64_t rh)
{
    if (x < 0 || y < 0 || x + rw > w || y + rh > h)
        return 0;
    return zt[(y + rh) * (w + 1) + x + rw] - zt[y * (w + 1) + x + rw] -
               zt[(y + rh) * (w + 1) + x] + zt[y * (w + 1) + x] ==
           0;
}

/* Copy a rectangle of a section into buf (rw * rh). */
static void copy_rect(const cnx_align_image *s, int64_t x, int64_t y,
                      int64_t rw, int64_t rh, uint8_t *buf)
{
    for (int64_t j = 0; j < rh; j++)
        memcpy(buf + j * rw, s->pixels + (y + j) * s->w + x, (size_t)rw);
}

/*
 * High-pass of a section into out (same size): 0 stays 0; a pixel v with
 * data becomes clamp(128 + 2 (v - m), 1, 255), m the mean of the data
 * pixels within Chebyshev distance r, rounded half away from zero (exact
 * integer arithmetic). Removes the slow intensity changes that otherwise
 * dominate the NCC of whole sections and broaden its peak.
 */
static int highpass(const cnx_align_image *s, int64_t r, uint8_t *out)
{
    const int64_t w = s->w, h = s->h, W = w + 1;
    int64_t *sum = calloc((size_t)(W * (h + 1)), sizeof(*sum));
    int64_t *cnt = calloc((size_t)(W * (h + 1)), sizeof(*cnt));
    if (sum == NULL || cnt == NULL) {
        free(sum);
        free(cnt);
        return cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
    }
    for (int64_t y = 0; y < h; y++) {
        int64_t rs = 0, rc = 0;
        for (int64_t x = 0; x < w; x++) {
            const int64_t v = s->pixels[y * w + x];
            rs += v;
            rc += v != 0;
            sum[(y + 1) * W + x + 1] = sum[y * W + x + 1] + rs;
            cnt[(y + 1) * W + x + 1] = cnt[y * W + x + 1] + rc;
        }
    }
    for (int64_t y = 0; y < h; y++) {
        const int64_t y0 = y - r < 0 ? 0 : y - r;
        const int64_t y1 = y + r + 1 > h ? h : y + r + 1;
        for (int64_t x = 0; x < w; x++) {
            const int64_t v = s->pixels[y * w + x];
            const int64_t x0 = x - r < 0 ? 0 : x - r;
            const int64_t x1 = x + r + 1 > w ? w : x + r + 1;
            int64_t n, t, num, q;
            if (v == 0) {
                out[y * w + x] = 0;
                continue;
            }
            n = cnt[y1 * W + x1] - cnt[y0 * W + x1] - cnt[y1 * W + x0] +
                cnt[y0 * W + x0];
            t = sum[y1 * W + x1] - sum[y0 * W + x1] - sum[y1 * W + x0] +
                sum[y0 * W + x0];
            /* 2 (v - t / n), rounded half away from zero. */
            num = 2 * (v * n - t);
            q = num >= 0 ? (2 * num + n) / (2 * n)
                         : -((-2 * num + n) / (2 * n));
            q += 128;
            out[y * w + x] = (uint8_t)(q < 1 ? 1 : q > 255 ? 255 : q);
        }
    }
    free(sum);
    free(cnt);
    return 0;
}

/* Box of the pixels != 0, less COARSE_SHRINK on each side; 0 if empty. */
static int data_box(const cnx_align_image *s, int64_t box[4])
{
    int64_t lo[2] = {s->w, s->h}, hi[2] = {-1, -1};
    for (int64_t y = 0; y < s->h; y++)
        for (int64_t x = 0; x < s->w; x++)
            if (s->pixels[y * s->w + x] != 0) {
                lo[0] = x < lo[0] ? x : lo[0];
                hi[0] = x > hi[0] ? x : hi[0];
                lo[1] = y < lo[1] ? y : lo[1];
                hi[1] = y > hi[1] ? y : hi[1];
            }
    box[0] = lo[0] + COARSE_SHRINK;
    box[1] = lo[1] + COARSE_SHRINK;
    box[2] = hi[0] - COARSE_SHRINK + 1;
    box[3] = hi[1] - COARSE_SHRINK + 1;
    return box[2] - box[0] >= 16 && box[3] - box[1] >= 16;
}

/* The box of s, averaged f x f (partial cells at the end dropped). */
static uint8_t *binned(const cnx_align_image *s, const int64_t box[4],
                       int64_t f, int64_t *bw, int64_t *bh)
{
    uint8_t *out;
    *bw = (box[2] - box[0]) / f;
    *bh = (box[3] - box[1]) / f;
    out = malloc((size_t)(*bw * *bh));
    if (out == NULL)
        return NULL;
    for (int64_t j = 0; j < *bh; j++)
        for (int64_t i = 0; i < *bw; i++) {
            int64_t sum = 0;
            for (int64_t v = 0; v < f; v++)
                for (int64_t u = 0; u < f; u++)
                    sum += s->pixels[(box[1] + j * f + v) * s->w + box[0] +
                                     i * f + u];
            out[j * *bw + i] = (uint8_t)((sum + f * f / 2) / (f * f));
        }
    return out;
}

/* Coarse shift of b against a: b point p ~ a point p + c. */
static int coarse_shift(mont_work *w, const cnx_align_image *a,
                        const cnx_align_image *b, const cnx_align_params *p,
                        double c[2], double *peak)
{
    int64_t ba[4], bb[4], f = 1, aw, ah, bw, bh;
    uint8_t *pa = NULL, *pb = NULL;
    cnx_montage_pair pair;
    mont_stats st;
    int rc = 0;

    c[0] = c[1] = 0.0;
    *peak = 0.0;
    if (!data_box(a, ba) || !data_box(b, bb))
        return 0;
    while ((ba[2] - ba[0]) / f > COARSE_MAX_SIDE ||
           (ba[3] - ba[1]) / f > COARSE_MAX_SIDE ||
           (bb[2] - bb[0]) / f > COARSE_MAX_SIDE ||
           (bb[3] - bb[1]) / f > COARSE_MAX_SIDE)
        f *= 2;
    pa = binned(a, ba, f, &aw, &ah);
    pb = binned(b, bb, f, &bw, &bh);
    if (pa == NULL || pb == NULL)
        rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
    if (rc == 0) {
        /* Tiles in a's section pixels / f: a at its box, b where it would
         * sit with no shift. */
        const cnx_montage_tile ta = {"a", 0, 0, aw, ah, pa};
        const cnx_montage_tile tb = {
            "b", (bb[0] - ba[0]) / f, (bb[1] - ba[1]) / f, bw, bh, pb};
        const int64_t search = (p->search + f - 1) / f;
        rc = mont_register(w, &ta, &tb, search, &pair, &st);
        if (rc == 1) {
            rc = 0;
        } else if (rc == 0 && pair.peak_ratio > 0.0) {
            /* b's pixel i sits at a's pixel (pair.d + i) (in cells): b's
             * section point bb0 + f i ~ a's point ba0 + f (d + i). */
            c[0] = (double)(ba[0] - bb[0]) + (double)f * pair.dx;
            c[1] = (double)(ba[1] - bb[1]) + (double)f * pair.dy;
            *peak = pair.peak_ratio;
        }
    }
    free(pa);
    free(pb);
    return rc < 0 ? rc : 0;
}

/* Median of n values (sorted in place; the lower middle for even n). */
static double median_small(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        double t = v[i];
        size_t j = i;
        for (; j > 0 && v[j - 1] > t; j--)
            v[j] = v[j - 1];
        v[j] = t;
    }
    return v[(n - 1) / 2];
}

/* One pass: valid nodes far from their valid neighbours' median. */
static int reject_outliers(const cnx_align_grid *g, cnx_align_match *m,
                           double max_dev)
{
    uint8_t *out = calloc(m->nodes, 1);
    if (out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
    for (int64_t j = 0; j < g->ny; j++)
        for (int64_t i = 0; i < g->nx; i++) {
            const size_t n = (size_t)(j * g->nx + i);
            double vx[8], vy[8];
            size_t k = 0;
            if (m->flag[n] != CNX_ALIGN_NODE_OK)
                continue;
            for (int64_t v = -1; v <= 1; v++)
                for (int64_t u = -1; u <= 1; u++) {
                    const int64_t ii = i + u, jj = j + v;
                    size_t q;
                    if ((u == 0 && v == 0) || ii < 0 || jj < 0 || ii >= g->nx ||
                        jj >= g->ny)
                        continue;
                    q = (size_t)(jj * g->nx + ii);
                    if (m->flag[q] == CNX_ALIGN_NODE_OK) {
                        vx[k] = m->dx[q];
                        vy[k] = m->dy[q];
                        k++;
                    }
                }
            if (k >= 2) {
                const double ex = m->dx[n] - median_small(vx, k);
                const double ey = m->dy[n] - median_small(vy, k);
                if (ex * ex + ey * ey > max_dev * max_dev)
                    out[n] = 1;
            }
        }
    for (size_t n = 0; n < m->nodes; n++)
        if (out[n]) {
            m->flag[n] = CNX_ALIGN_NODE_OUTLIER;
            m->dx[n] = m->dy[n] = 0.0;
        }
    free(out);
    return 0;
}

static int check_image(const cnx_align_image *s, const char *which)
{
    if (s == NULL || s->pixels == NULL || s->w < 1 || s->h < 1 ||
        s->w > CNX_ALIGN_MAX_SIDE || s->h > CNX_ALIGN_MAX_SIDE)
        return cnx_error_set(CNX_EINVAL, 0,
                             "align: section %s: no pixels or a side "
                             "outside 1..%d",
                             which, CNX_ALIGN_MAX_SIDE);
    return 0;
}

static int match_filtered(const cnx_align_image *a, const cnx_align_image *b,
                          const cnx_align_params *p, const cnx_align_grid *g,
                          cnx_align_match *out);

/* Section s averaged bin x bin into out (w / bin x h / bin, local
 * coordinates from 0): a cell with any pixel 0 is 0 (no data), else the
 * rounded mean, at least 1. */
static void bin_section(const cnx_align_image *s, int64_t bin, uint8_t *out)
{
    const int64_t w = s->w / bin, h = s->h / bin;
    for (int64_t j = 0; j < h; j++)
        for (int64_t i = 0; i < w; i++) {
            int64_t sum = 0, zero = 0;
            for (int64_t v = 0; v < bin; v++)
                for (int64_t u = 0; u < bin; u++) {
                    const int64_t px =
                        s->pixels[(j * bin + v) * s->w + i * bin + u];
                    sum += px;
                    zero |= px == 0;
                }
            out[j * w + i] =
                zero ? 0 : (uint8_t)((sum + bin * bin / 2) / (bin * bin));
        }
}

/* What one bin x bin cell measures is bin pixels: the parameters of the
 * binned sections, lengths divided by bin (at least their minimum). */
static cnx_align_params binned_params(const cnx_align_params *p)
{
    cnx_align_params q = *p;
    const int64_t b = p->bin;
    q.bin = 1;
    q.patch = p->patch / b < 16 ? 16 : p->patch / b;
    q.search = (p->search + b - 1) / b;
    q.patch_search = (p->patch_search + b - 1) / b;
    q.highpass = p->highpass == 0 ? 0 : (p->highpass + b - 1) / b;
    q.max_deviation = p->max_deviation / (double)b;
    return q;
}

int cnx_align_match_sections(const cnx_align_image *a, const cnx_align_image *b,
                             const cnx_align_params *p, cnx_align_match *out)
{
    const int64_t bin = p->bin;
    cnx_align_grid g = cnx_align_grid_of(b->x0, b->y0, b->w, b->h, p);
    cnx_align_params q = *p;
    cnx_align_image fa, fb;
    uint8_t *pa = NULL, *pb = NULL, *ha = NULL, *hb = NULL;
    int rc;

    memset(out, 0, sizeof(*out));
    rc = cnx_align_params_check(p);
    if (rc == 0)
        rc = check_image(a, "a");
    if (rc == 0)
        rc = check_image(b, "b");
    if (rc == 0 &&
        (a->x0 != b->x0 || a->y0 != b->y0 || a->w != b->w || a->h != b->h))
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "align: sections of different geometry");
    if (rc == 0 && (a->w < 16 * bin || a->h < 16 * bin))
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "align: parameters.bin %lld leaves a section of "
                           "%lld x %lld px under 16 x 16",
                           (long long)bin, (long long)a->w, (long long)a->h);
    if (rc != 0)
        return rc;
    fa = *a;
    fb = *b;
    if (bin > 1) {
        /* Binned cell (i, j) has its centre at section point
         * x0 + bin i + (bin - 1) / 2: the grid in cell coordinates. */
        const size_t n = (size_t)((a->w / bin) * (a->h / bin));
        q = binned_params(p);
        g.x0 = (g.x0 - (double)b->x0 - (double)(bin - 1) / 2.0) / (double)bin;
        g.y0 = (g.y0 - (double)b->y0 - (double)(bin - 1) / 2.0) / (double)bin;
        g.step /= (double)bin;
        pa = malloc(n);
        pb = malloc(n);
        if (pa == NULL || pb == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
            goto done;
        }
        bin_section(a, bin, pa);
        bin_section(b, bin, pb);
        fa = (cnx_align_image){0, 0, a->w / bin, a->h / bin, pa};
        fb = (cnx_align_image){0, 0, b->w / bin, b->h / bin, pb};
    }
    if (q.highpass > 0) {
        ha = malloc((size_t)(fa.w * fa.h));
        hb = malloc((size_t)(fb.w * fb.h));
        if (ha == NULL || hb == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
        if (rc == 0)
            rc = highpass(&fa, q.highpass, ha);
        if (rc == 0)
            rc = highpass(&fb, q.highpass, hb);
        fa.pixels = ha;
        fb.pixels = hb;
    }
    if (rc == 0)
        rc = match_filtered(&fa, &fb, &q, &g, out);
    if (rc == 0 && bin > 1) {
        out->coarse[0] *= (double)bin;
        out->coarse[1] *= (double)bin;
        for (size_t n = 0; n < out->nodes; n++) {
            out->dx[n] *= (double)bin;
            out->dy[n] *= (double)bin;
        }
    }
done:
    free(pa);
    free(pb);
    free(ha);
    free(hb);
    return rc;
}

/* Clip the run [*x, *x + *len) to [lo, hi) (len starts at P). */
static void clip_axis(int64_t *x, int64_t *len, int64_t lo, int64_t hi,
                      int64_t P)
{
    int64_t x1 = *x + P;
    if (*x < lo)
        *x = lo;
    if (x1 > hi)
        x1 = hi;
    *len = x1 - *x;
}

/* Match a against b (checked; high-passed when asked). */
static int match_filtered(const cnx_align_image *a, const cnx_align_image *b,
                          const cnx_align_params *p, const cnx_align_grid *gp,
                          cnx_align_match *out)
{
    const cnx_align_grid g = *gp;
    const int64_t P = p->patch, r = p->patch_search, W = P + 2 * r;
    int64_t *za = NULL, *zb = NULL, cx, cy, lo[2], hi[2];
    uint8_t *pa = NULL, *pb = NULL;
    mont_work work;
    int rc = 0;

    memset(&work, 0, sizeof(work));
    out->nodes = (size_t)(g.nx * g.ny);
    out->dx = calloc(out->nodes, sizeof(double));
    out->dy = calloc(out->nodes, sizeof(double));
    out->peak = calloc(out->nodes, sizeof(double));
    out->flag = malloc(out->nodes);
    za = zero_table(a);
    zb = zero_table(b);
    pa = malloc((size_t)(W * W));
    pb = malloc((size_t)(P * P));
    if (out->dx == NULL || out->dy == NULL || out->peak == NULL ||
        out->flag == NULL || za == NULL || zb == NULL || pa == NULL ||
        pb == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
        goto done;
    }
    memset(out->flag, CNX_ALIGN_NODE_NODATA, out->nodes);
    rc = coarse_shift(&work, a, b, p, out->coarse, &out->coarse_peak);
    if (rc != 0 || out->coarse_peak <= 0.0)
        goto done;
    cx = (int64_t)align_round(out->coarse[0]);
    cy = (int64_t)align_round(out->coarse[1]);
    /* Where a patch of b may lie: inside b's data box and, moved by the
     * coarse shift and grown by the search, inside a's. */
    {
        int64_t da[4], db[4];
        data_box(a, da);
        data_box(b, db);
        lo[0] = db[0] > da[0] - cx + r ? db[0] : da[0] - cx + r;
        lo[1] = db[1] > da[1] - cy + r ? db[1] : da[1] - cy + r;
        hi[0] = db[2] < da[2] - cx - r ? db[2] : da[2] - cx - r;
        hi[1] = db[3] < da[3] - cy - r ? db[3] : da[3] - cy - r;
    }
    for (int64_t j = 0; j < g.ny; j++)
        for (int64_t i = 0; i < g.nx; i++) {
            const size_t n = (size_t)(j * g.nx + i);
            /* Patch of b centred on the node (section-local pixels),
             * clipped to where both sections have data: near the edge of
             * the tissue a node keeps the part of its patch (at least
             * half of each side) whose window in a still has data. */
            int64_t bx =
                align_floor(g.x0 + (double)i * g.step + 0.5) - b->x0 - P / 2;
            int64_t by =
                align_floor(g.y0 + (double)j * g.step + 0.5) - b->y0 - P / 2;
            int64_t pw = P, ph = P, ax, ay;
            cnx_montage_pair pair;
            mont_stats st;
            clip_axis(&bx, &pw, lo[0], hi[0], P);
            clip_axis(&by, &ph, lo[1], hi[1], P);
            ax = bx + cx - r;
            ay = by + cy - r;
            if (pw < P / 2 || ph < P / 2 ||
                !rect_ok(zb, b->w, b->h, bx, by, pw, ph) ||
                !rect_ok(za, a->w, a->h, ax, ay, pw + 2 * r, ph + 2 * r))
                continue;
            copy_rect(a, ax, ay, pw + 2 * r, ph + 2 * r, pa);
            copy_rect(b, bx, by, pw, ph, pb);
            {
                const cnx_montage_tile ta = {"a",        0,          0,
                                             pw + 2 * r, ph + 2 * r, pa};
                const cnx_montage_tile tb = {"b", r, r, pw, ph, pb};
                rc = mont_register(&work, &ta, &tb, r, &pair, &st);
            }
            if (rc == 1) {
                rc = 0;
                continue;
            }
            if (rc != 0)
                goto done;
            out->peak[n] = pair.peak_ratio;
            if (pair.peak_ratio <= 0.0) {
                out->flag[n] = CNX_ALIGN_NODE_FLAT;
                continue;
            }
            if (pair.peak_ratio < p->min_peak_ratio) {
                out->flag[n] = CNX_ALIGN_NODE_WEAK;
                continue;
            }
            /* b's pixel (bx + u) shows a's pixel (ax + d + u). */
            out->flag[n] = CNX_ALIGN_NODE_OK;
            out->dx[n] = (double)(ax - bx) + pair.dx;
            out->dy[n] = (double)(ay - by) + pair.dy;
        }
    rc = reject_outliers(&g, out, p->max_deviation);
done:
    for (size_t n = 0; out->flag != NULL && n < out->nodes; n++)
        out->valid += out->flag[n] == CNX_ALIGN_NODE_OK;
    mont_work_dispose(&work);
    free(za);
    free(zb);
    free(pa);
    free(pb);
    return rc;
}
