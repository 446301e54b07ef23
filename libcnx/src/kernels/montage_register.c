/*
 * montage_register.c - registration of one pair of tiles by normalised
 * cross-correlation (NCC) over their true overlap.
 *
 * With a at the origin, b's top-left is searched at d = d0 + (-S..S)^2, d0
 * the nominal offset. Only the strip of each tile that some d can overlap
 * takes part (a's right strip and b's left one for side-by-side tiles).
 * For every d the NCC is taken over exactly the pixels both tiles cover
 * there: the cross sum by one FFT cross-correlation of the two strips
 * (packed as the real and imaginary parts of one complex image, zero-padded
 * to a power of two large enough that no lag in the window wraps), the
 * sums and sums of squares of each side from summed-area tables. When S is
 * at least MONT_BIN_SEARCH the strips are binned 2 x 2 first (4x fewer FFT
 * points). Offsets whose overlap is under MONT_MIN_SIDE on a side or
 * MONT_MIN_AREA pixels, or flat, are not scored.
 *
 * The best lag (ties: the first in row-major lag order) is then refined at
 * full resolution by exact integer sums over the tiles' pixels (16 pixels
 * at a time where SSE2 is there; each offset summed once per pair): a hill
 * climb over the 8 neighbours, then a parabola through the NCC of the
 * neighbours on each axis gives the sub-pixel offset (at most 0.5).
 * Confidence: the peak ratio of the search surface, (1 - r2) / (1 - r1)
 * for r1 the best NCC and r2 the best at least MONT_EXCLUDE pixels away:
 * how many times more of the variance the runner-up leaves unexplained.
 * Load: a few hundred pairs per section; one workspace reused for all.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cnx/error.h"
#include "kernels/montage_int.h"

#define INVALID (-2.0)

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return -floor_div(-a, b);
}

static size_t pow2_at_least(int64_t v)
{
    size_t n = 1;
    while ((int64_t)n < v)
        n *= 2;
    return n;
}

void mont_work_dispose(mont_work *w)
{
    if (w == NULL)
        return;
    mont_fft_dispose(&w->fx);
    mont_fft_dispose(&w->fy);
    free(w->grid);
    free(w->ra);
    free(w->rb);
    free(w->sa);
    free(w->sb);
    free(w->ncc);
    memset(w, 0, sizeof(*w));
}

/* Grow *buf to hold n doubles. */
static int reserve(double **buf, size_t *cap, size_t n)
{
    double *p;
    if (*cap >= n)
        return 0;
    p = realloc(*buf, n * sizeof(*p));
    if (p == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
    *buf = p;
    *cap = n;
    return 0;
}

/* Largest overlap along one axis of extents wa (at 0) and wb (at d) over
 * d in [lo, hi]: the overlap is concave in d, flat on [min(0, wa - wb),
 * max(0, wa - wb)]. */
static int64_t best_overlap(int64_t wa, int64_t wb, int64_t lo, int64_t hi)
{
    const int64_t p0 = min64(0, wa - wb), p1 = max64(0, wa - wb);
    const int64_t d = hi < p0 ? hi : (lo > p1 ? lo : p0 > lo ? p0 : lo);
    return min64(wa, d + wb) - max64(0, d);
}

int mont_may_overlap(const cnx_montage_tile *a, const cnx_montage_tile *b,
                     int64_t search)
{
    const int64_t dx = b->x - a->x, dy = b->y - a->y;
    return best_overlap(a->width, b->width, dx - search, dx + search) >=
               MONT_MIN_SIDE &&
           best_overlap(a->height, b->height, dy - search, dy + search) >=
               MONT_MIN_SIDE;
}

/* ---- full-resolution NCC by direct sums ------------------------------- */

typedef struct direct_ncc {
    double r; /* INVALID if not scored */
    mont_stats st;
} direct_ncc;

/* Most offsets one refinement scores (25 + 9 x 8 at most). */
#define REFINE_MEMO 128

/* The full-resolution refinement of one pair: the tiles and the offsets
 * scored so far (the hill climb asks for most of them again). */
typedef struct refine {
    const cnx_montage_tile *a, *b;
    int nmemo;
    int64_t mx[REFINE_MEMO], my[REFINE_MEMO];
    direct_ncc memo[REFINE_MEMO];
} refine;

/* s[0..4] += the sums of u, v, u^2, v^2, u v over u = pa[i], v = pb[i],
 * i < n; exact (integers). */
static void row_sums(const uint8_t *pa, const uint8_t *pb, int64_t n,
                     uint64_t s[5])
{
    int64_t i = 0;
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    while (n - i >= 16) {
        /* a 32-bit lane takes 4 products (< 2^18) a round: flushed well
         * before 2^32 */
        const int64_t end = i + 16 * 4096 < n ? i + 16 * 4096 : n;
        __m128i su = zero, sv = zero, uu = zero, vv = zero, uv = zero;
        uint64_t q[2];
        uint32_t l[4];
        for (; end - i >= 16; i += 16) {
            const __m128i u = _mm_loadu_si128((const __m128i *)(pa + i));
            const __m128i v = _mm_loadu_si128((const __m128i *)(pb + i));
            const __m128i ul = _mm_unpacklo_epi8(u, zero);
            const __m128i uh = _mm_unpackhi_epi8(u, zero);
            const __m128i vl = _mm_unpacklo_epi8(v, zero);
            const __m128i vh = _mm_unpackhi_epi8(v, zero);
            su = _mm_add_epi64(su, _mm_sad_epu8(u, zero));
            sv = _mm_add_epi64(sv, _mm_sad_epu8(v, zero));
            uu = _mm_add_epi32(uu, _mm_add_epi32(_mm_madd_epi16(ul, ul),
                                                 _mm_madd_epi16(uh, uh)));
            vv = _mm_add_epi32(vv, _mm_add_epi32(_mm_madd_epi16(vl, vl),
                                                 _mm_madd_epi16(vh, vh)));
            uv = _mm_add_epi32(uv, _mm_add_epi32(_mm_madd_epi16(ul, vl),
                                                 _mm_madd_epi16(uh, vh)));
        }
        _mm_storeu_si128((__m128i *)q, su);
        s[0] += q[0] + q[1];
        _mm_storeu_si128((__m128i *)q, sv);
        s[1] += q[0] + q[1];
        _mm_storeu_si128((__m128i *)l, uu);
        s[2] += (uint64_t)l[0] + l[1] + l[2] + l[3];
        _mm_storeu_si128((__m128i *)l, vv);
        s[3] += (uint64_t)l[0] + l[1] + l[2] + l[3];
        _mm_storeu_si128((__m128i *)l, uv);
        s[4] += (uint64_t)l[0] + l[1] + l[2] + l[3];
    }
#endif
    for (; i < n; i++) {
        const uint64_t u = pa[i], v = pb[i];
        s[0] += u;
        s[1] += v;
        s[2] += u * u;
        s[3] += v * v;
        s[4] += u * v;
    }
}

/* NCC of a and b with b's top-left at (dx, dy) in a's frame. */
static direct_ncc ncc_direct(refine *rf, int64_t dx, int64_t dy)
{
    const cnx_montage_tile *a = rf->a, *b = rf->b;
    direct_ncc out = {INVALID, {0, 0, 0, 0, 0}};
    const int64_t x0 = max64(0, dx), x1 = min64(a->width, dx + b->width);
    const int64_t y0 = max64(0, dy), y1 = min64(a->height, dy + b->height);
    uint64_t s[5] = {0, 0, 0, 0, 0}; /* sa, sb, saa, sbb, sab */
    double n, va, vb, cov;

    for (int k = 0; k < rf->nmemo; k++)
        if (rf->mx[k] == dx && rf->my[k] == dy)
            return rf->memo[k];
    if (x1 - x0 < MONT_MIN_SIDE || y1 - y0 < MONT_MIN_SIDE ||
        (x1 - x0) * (y1 - y0) < MONT_MIN_AREA)
        return out;
    for (int64_t y = y0; y < y1; y++)
        row_sums(a->pixels + y * a->width + x0,
                 b->pixels + (y - dy) * b->width + (x0 - dx), x1 - x0, s);
    n = (double)((x1 - x0) * (y1 - y0));
    /* exact integer moments, then one rounding each */
    va = (double)s[2] - (double)s[0] * (double)s[0] / n;
    vb = (double)s[3] - (double)s[1] * (double)s[1] / n;
    cov = (double)s[4] - (double)s[0] * (double)s[1] / n;
    out.st.count = (int64_t)n;
    out.st.mean_a = (double)s[0] / n;
    out.st.mean_b = (double)s[1] / n;
    out.st.sd_a = va > 0 ? sqrt(va / n) : 0.0;
    out.st.sd_b = vb > 0 ? sqrt(vb / n) : 0.0;
    if (va > 1e-6 * n && vb > 1e-6 * n)
        out.r = cov / sqrt(va * vb);
    if (rf->nmemo < REFINE_MEMO) {
        rf->mx[rf->nmemo] = dx;
        rf->my[rf->nmemo] = dy;
        rf->memo[rf->nmemo++] = out;
    }
    return out;
}

/* ---- the FFT search --------------------------------------------------- */

/* Bin the region [x0, x0 + w*f) x [y0, y0 + h*f) of a tile by f into dst
 * (w * h), minus its mean; sat gets the summed-area tables of the values
 * and their squares, (w + 1) x (h + 1) interleaved. */
static void load_region(const cnx_montage_tile *t, int64_t x0, int64_t y0,
                        int64_t w, int64_t h, int64_t f, double *dst,
                        double *sat)
{
    double mean = 0.0;
    const double inv = 1.0 / (double)(f * f);
    for (int64_t y = 0; y < h; y++) {
        for (int64_t x = 0; x < w; x++) {
            uint32_t s = 0;
            for (int64_t j = 0; j < f; j++) {
                const uint8_t *p =
                    t->pixels + (y0 + y * f + j) * t->width + x0 + x * f;
                for (int64_t i = 0; i < f; i++)
                    s += p[i];
            }
            dst[y * w + x] = (double)s * inv;
        }
    }
    for (int64_t i = 0; i < w * h; i++)
        mean += dst[i];
    mean /= (double)(w * h);
    for (int64_t i = 0; i < w * h; i++)
        dst[i] -= mean;
    memset(sat, 0, (size_t)(w + 1) * 2 * sizeof(*sat));
    for (int64_t y = 0; y < h; y++) {
        double *row = sat + (y + 1) * (w + 1) * 2;
        const double *up = row - (w + 1) * 2;
        double s1 = 0.0, s2 = 0.0;
        row[0] = row[1] = 0.0;
        for (int64_t x = 0; x < w; x++) {
            const double v = dst[y * w + x];
            s1 += v;
            s2 += v * v;
            row[2 * (x + 1)] = up[2 * (x + 1)] + s1;
            row[2 * (x + 1) + 1] = up[2 * (x + 1) + 1] + s2;
        }
    }
}

/* Sum (k = 0) or sum of squares (k = 1) over [x0, x1) x [y0, y1). */
static double sat_sum(const double *sat, int64_t w, int64_t x0, int64_t x1,
                      int64_t y0, int64_t y1, int k)
{
    const int64_t s = (w + 1) * 2;
    return sat[y1 * s + 2 * x1 + k] - sat[y0 * s + 2 * x1 + k] -
           sat[y1 * s + 2 * x0 + k] + sat[y0 * s + 2 * x0 + k];
}

/* Forward 2D FFT of the nx x ny grid whose rows >= rows are zero. */
static void fft2_forward(mont_work *w, size_t nx, size_t rows)
{
    for (size_t y = 0; y < rows; y++)
        mont_fft_1d(&w->fx, w->grid + 2 * y * nx, 0);
    mont_fft_cols(&w->fy, w->grid, nx, 0);
}

/* Z = FFT(A + iB) -> FFT(A) conj(FFT(B)), whose inverse is the circular
 * cross-correlation sum_p A(p + l) B(p). Uses Z(-k) = conj pairing. */
static void cross_power(double *g, size_t nx, size_t ny)
{
    for (size_t ky = 0; ky < ny; ky++) {
        const size_t my = ky == 0 ? 0 : ny - ky;
        for (size_t kx = 0; kx < nx; kx++) {
            const size_t mx = kx == 0 ? 0 : nx - kx;
            const size_t i = ky * nx + kx, m = my * nx + mx;
            double p, q, r, s, far, fai, fbr, fbi, pr, pi;
            if (m < i)
                continue;
            p = g[2 * i];
            q = g[2 * i + 1];
            r = g[2 * m];
            s = g[2 * m + 1];
            /* FA = (Z(k) + conj Z(-k)) / 2, FB = (Z(k) - conj Z(-k)) / 2i */
            far = 0.5 * (p + r);
            fai = 0.5 * (q - s);
            fbr = 0.5 * (q + s);
            fbi = -0.5 * (p - r);
            /* FA conj(FB) */
            pr = far * fbr + fai * fbi;
            pi = fai * fbr - far * fbi;
            g[2 * i] = pr;
            g[2 * i + 1] = pi;
            g[2 * m] = pr;
            g[2 * m + 1] = -pi;
        }
    }
}

/* Inverse 2D FFT, real parts only needed on rows ly0..ly1 (mod ny): the
 * columns first for all, then only those rows. */
static void fft2_inverse_rows(mont_work *w, size_t nx, size_t ny, int64_t ly0,
                              int64_t ly1)
{
    mont_fft_cols(&w->fy, w->grid, nx, 1);
    for (int64_t l = ly0; l <= ly1; l++) {
        const size_t y =
            (size_t)(((l % (int64_t)ny) + (int64_t)ny) % (int64_t)ny);
        mont_fft_1d(&w->fx, w->grid + 2 * y * nx, 1);
    }
}

/* One axis of the search set-up. */
typedef struct axis {
    int64_t d0;     /* nominal offset of b in a's frame */
    int64_t a0, b0; /* region origins in a's and b's frames (full res) */
    int64_t wa, wb; /* region extents, binned */
    int64_t l0, l1; /* binned lag window (b region origin in a region) */
    size_t n;       /* FFT size */
} axis;

static void axis_setup(axis *ax, int64_t Wa, int64_t Wb, int64_t d0, int64_t S,
                       int64_t f)
{
    const int64_t a1 = min64(Wa, d0 + S + Wb), b1 = min64(Wb, Wa - (d0 - S));
    ax->d0 = d0;
    ax->a0 = max64(0, d0 - S);
    ax->b0 = max64(0, -(d0 + S));
    ax->wa = (a1 - ax->a0) / f;
    ax->wb = (b1 - ax->b0) / f;
    /* full-res d = a0 - b0 + f l */
    ax->l0 = ceil_div(d0 - S - ax->a0 + ax->b0, f);
    ax->l1 = floor_div(d0 + S - ax->a0 + ax->b0, f);
    ax->n =
        pow2_at_least(max64(max64(ax->wa - ax->l0, ax->l1 + ax->wb),
                            max64(ax->l1 - ax->l0 + 1, max64(ax->wa, ax->wb))));
}

/* The FFT search; fills w->ncc ((l1x - l0x + 1) x (l1y - l0y + 1)). */
static int search_surface(mont_work *w, const cnx_montage_tile *a,
                          const cnx_montage_tile *b, const axis *ax,
                          const axis *ay, int64_t f)
{
    const size_t nx = ax->n, ny = ay->n;
    const int64_t sw = ax->l1 - ax->l0 + 1, sh = ay->l1 - ay->l0 + 1;
    const int64_t min_side = (MONT_MIN_SIDE + f - 1) / f;
    const int64_t min_area = (MONT_MIN_AREA + f * f - 1) / (f * f);
    const double scale = 1.0 / ((double)nx * (double)ny);
    const size_t ra = (size_t)(ax->wa * ay->wa), rb = (size_t)(ax->wb * ay->wb);
    const size_t sat_a = (size_t)((ax->wa + 1) * (ay->wa + 1) * 2);
    const size_t sat_b = (size_t)((ax->wb + 1) * (ay->wb + 1) * 2);
    int rc;

    if (nx * ny > MONT_MAX_FFT)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "montage: tiles %s and %s: the search needs an "
                             "FFT of %zu x %zu points, over the limit",
                             a->id, b->id, nx, ny);
    if ((rc = mont_fft_plan(&w->fx, nx)) != 0 ||
        (rc = mont_fft_plan(&w->fy, ny)) != 0)
        return rc;
    rc = reserve(&w->grid, &w->grid_cap, 2 * nx * ny);
    if (rc == 0)
        rc = reserve(&w->ncc, &w->ncc_cap, (size_t)(sw * sh));
    if (rc == 0)
        rc = reserve(&w->ra, &w->ra_cap, ra);
    if (rc == 0)
        rc = reserve(&w->rb, &w->rb_cap, rb);
    if (rc == 0)
        rc = reserve(&w->sa, &w->sa_cap, sat_a);
    if (rc == 0)
        rc = reserve(&w->sb, &w->sb_cap, sat_b);
    if (rc != 0)
        return rc;

    load_region(a, ax->a0, ay->a0, ax->wa, ay->wa, f, w->ra, w->sa);
    load_region(b, ax->b0, ay->b0, ax->wb, ay->wb, f, w->rb, w->sb);
    memset(w->grid, 0, 2 * nx * ny * sizeof(*w->grid));
    for (int64_t y = 0; y < ay->wa; y++)
        for (int64_t x = 0; x < ax->wa; x++)
            w->grid[2 * ((size_t)y * nx + (size_t)x)] = w->ra[y * ax->wa + x];
    for (int64_t y = 0; y < ay->wb; y++)
        for (int64_t x = 0; x < ax->wb; x++)
            w->grid[2 * ((size_t)y * nx + (size_t)x) + 1] =
                w->rb[y * ax->wb + x];
    fft2_forward(w, nx, (size_t)max64(ay->wa, ay->wb));
    cross_power(w->grid, nx, ny);
    fft2_inverse_rows(w, nx, ny, ay->l0, ay->l1);

    for (int64_t ly = ay->l0; ly <= ay->l1; ly++) {
        const size_t gy =
            (size_t)(((ly % (int64_t)ny) + (int64_t)ny) % (int64_t)ny);
        const int64_t y0 = max64(0, ly), y1 = min64(ay->wa, ly + ay->wb);
        for (int64_t lx = ax->l0; lx <= ax->l1; lx++) {
            /* |lx| < nx: the window fits the FFT without wrapping */
            const size_t gx = (size_t)(lx < 0 ? lx + (int64_t)nx : lx);
            const int64_t x0 = max64(0, lx), x1 = min64(ax->wa, lx + ax->wb);
            double *r = &w->ncc[(ly - ay->l0) * sw + (lx - ax->l0)];
            double n, s1a, s2a, s1b, s2b, sab, va, vb;
            *r = INVALID;
            if (x1 - x0 < min_side || y1 - y0 < min_side ||
                (x1 - x0) * (y1 - y0) < min_area)
                continue;
            n = (double)((x1 - x0) * (y1 - y0));
            s1a = sat_sum(w->sa, ax->wa, x0, x1, y0, y1, 0);
            s2a = sat_sum(w->sa, ax->wa, x0, x1, y0, y1, 1);
            s1b = sat_sum(w->sb, ax->wb, x0 - lx, x1 - lx, y0 - ly, y1 - ly, 0);
            s2b = sat_sum(w->sb, ax->wb, x0 - lx, x1 - lx, y0 - ly, y1 - ly, 1);
            sab = w->grid[2 * (gy * nx + gx)] * scale;
            va = s2a - s1a * s1a / n;
            vb = s2b - s1b * s1b / n;
            if (!(va > 1e-6 * n && vb > 1e-6 * n))
                continue;
            *r = (sab - s1a * s1b / n) / sqrt(va * vb);
        }
    }
    return 0;
}

/* Sub-pixel offset of a parabola through (-1, m), (0, c), (1, p). */
static double parabola(double m, double c, double p)
{
    double den;
    if (m == INVALID || p == INVALID)
        return 0.0;
    den = m - 2.0 * c + p;
    if (!(den < 0.0))
        return 0.0;
    den = 0.5 * (m - p) / den;
    return den < -0.5 ? -0.5 : (den > 0.5 ? 0.5 : den);
}

int mont_register(mont_work *w, const cnx_montage_tile *a,
                  const cnx_montage_tile *b, int64_t search,
                  cnx_montage_pair *out, mont_stats *st)
{
    const int64_t d0x = b->x - a->x, d0y = b->y - a->y;
    axis ax, ay;
    int64_t f = 1, sw, sh, px = 0, py = 0, dx, dy, ex;
    double r1 = INVALID, r2 = INVALID;
    direct_ncc best, nb[3][3];
    refine scratch, *rf = &scratch;
    int rc;

    memset(out, 0, sizeof(*out));
    memset(st, 0, sizeof(*st));
    out->dx = (double)d0x;
    out->dy = (double)d0y;
    if (!mont_may_overlap(a, b, search))
        return 1;
    axis_setup(&ax, a->width, b->width, d0x, search, 1);
    axis_setup(&ay, a->height, b->height, d0y, search, 1);
    if (search >= MONT_BIN_SEARCH && min64(ax.wa, ax.wb) >= 4 * MONT_MIN_SIDE &&
        min64(ay.wa, ay.wb) >= 4 * MONT_MIN_SIDE) {
        f = 2;
        axis_setup(&ax, a->width, b->width, d0x, search, f);
        axis_setup(&ay, a->height, b->height, d0y, search, f);
    }
    rc = search_surface(w, a, b, &ax, &ay, f);
    if (rc != 0)
        return rc;

    /* the peak, then the runner-up away from it */
    sw = ax.l1 - ax.l0 + 1;
    sh = ay.l1 - ay.l0 + 1;
    for (int64_t j = 0; j < sh; j++)
        for (int64_t i = 0; i < sw; i++)
            if (w->ncc[j * sw + i] > r1) {
                r1 = w->ncc[j * sw + i];
                px = i;
                py = j;
            }
    if (r1 == INVALID)
        return 0;
    ex = (MONT_EXCLUDE + f - 1) / f;
    for (int64_t j = 0; j < sh; j++)
        for (int64_t i = 0; i < sw; i++) {
            const int64_t cx = i > px ? i - px : px - i;
            const int64_t cy = j > py ? j - py : py - j;
            if ((cx >= ex || cy >= ex) && w->ncc[j * sw + i] > r2)
                r2 = w->ncc[j * sw + i];
        }

    /* full-resolution refinement: the binned window, then hill climbing */
    rf->a = a;
    rf->b = b;
    rf->nmemo = 0;
    dx = ax.a0 - ax.b0 + f * (ax.l0 + px);
    dy = ay.a0 - ay.b0 + f * (ay.l0 + py);
    best = ncc_direct(rf, dx, dy);
    {
        const int64_t cx = dx, cy = dy, rad = f == 1 ? 0 : 2;
        for (int64_t j = -rad; j <= rad; j++)
            for (int64_t i = -rad; i <= rad; i++) {
                direct_ncc c;
                if ((i == 0 && j == 0) || cx + i < d0x - search ||
                    cx + i > d0x + search || cy + j < d0y - search ||
                    cy + j > d0y + search)
                    continue;
                c = ncc_direct(rf, cx + i, cy + j);
                if (c.r > best.r) {
                    best = c;
                    dx = cx + i;
                    dy = cy + j;
                }
            }
    }
    for (int step = 0; step <= 8; step++) {
        int moved = 0;
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 3; i++)
                nb[j][i] = (i == 1 && j == 1)
                               ? best
                               : ncc_direct(rf, dx + i - 1, dy + j - 1);
        if (step == 8)
            break;
        {
            direct_ncc top = best;
            int64_t tx = dx, ty = dy;
            for (int j = 0; j < 3; j++)
                for (int i = 0; i < 3; i++) {
                    const int64_t nx = dx + i - 1, ny = dy + j - 1;
                    if (nb[j][i].r > top.r && nx >= d0x - search &&
                        nx <= d0x + search && ny >= d0y - search &&
                        ny <= d0y + search) {
                        top = nb[j][i];
                        tx = nx;
                        ty = ny;
                        moved = 1;
                    }
                }
            best = top;
            dx = tx;
            dy = ty;
        }
        if (!moved)
            break;
    }
    if (best.r == INVALID)
        return 0;
    out->dx = (double)dx + parabola(nb[1][0].r, best.r, nb[1][2].r);
    out->dy = (double)dy + parabola(nb[0][1].r, best.r, nb[2][1].r);
    out->ncc = best.r;
    /* peak ratio: unexplained variance at the runner-up over that at the
     * peak, (1 - r2) / (1 - r1): r1 the refined (full-resolution) NCC, r2
     * the runner-up of the search surface */
    r1 = best.r;
    r2 = r2 == INVALID ? 0.0 : r2;
    out->peak_ratio =
        (1.0 - r2) /
        (1.0 - r1 > MONT_RATIO_FLOOR ? 1.0 - r1 : MONT_RATIO_FLOOR);
    *st = best.st;
    return 0;
}
