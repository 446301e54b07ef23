/*
 * segment_filter.c - the membrane filter: a raw EM image (dark membranes)
 * to a boundary map in [0, 1], for cnx_segment_boundary_* with raw_input.
 *
 * Two terms, each stretched to [0, 1] by its own 1st and 99th percentiles
 * (per section with sections, else over the volume) and mixed as
 * b = (1 - filter_ridge) * darkness + filter_ridge * ridge:
 *   darkness = smooth(1 - img, filter_sigma) - box3(1 - img,
 *              filter_background): dark, with slow shading removed;
 *   ridge    = max(0, largest Hessian eigenvalue of smooth(img,
 *              2 filter_sigma)): thin dark lines (membranes) rather than
 *              dark blobs (mitochondria) or dark specks (vesicles).
 * smooth() is a binomial kernel of n + 1 taps, n = 2 round(2 sigma^2)
 * (standard deviation sqrt(n) / 2), box3() three box filters of width
 * 2 round(sigma) + 1 (a Gaussian-like blur of about that sigma); edges are
 * replicated. Everything is separable (x, y, and z unless sections) and
 * uses float + - * / and sqrt in a fixed order: no libm transcendental
 * function, so the output is the same on every machine. The largest
 * eigenvalue of a 3x3 Hessian comes from Newton's method on the
 * characteristic polynomial, started above every root (a Gershgorin
 * bound), which converges monotonically. Memory: four float volumes.
 *
 * Speed without changing a bit: the Hessian reads by direct index inside
 * the volume (clamped only on its faces), solves two voxels at once (two
 * double lanes, the scalar operations per lane) and stops once an iterate
 * is <= 0 (the term is 0 there); the box passes ping-pong between two
 * buffers, run along x four rows at a time and along y and z two doubles
 * a vector.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "segment_int.h"

#define BINS 4096

typedef struct vol3 {
    int64_t s[3];
    size_t n;
} vol3;

static int64_t clamp_i(int64_t i, int64_t len)
{
    return i < 0 ? 0 : i >= len ? len - 1 : i;
}

/* ---- separable filters ------------------------------------------------- */

/* The binomial kernel of standard deviation about sigma: *r = n / 2. */
static float *binomial(double sigma, int64_t *r)
{
    const int64_t n = 2 * (int64_t)(2.0 * sigma * sigma + 0.5);
    float *w = malloc((size_t)(n + 1) * sizeof(*w));
    double c = 1.0, sum = 0.0;
    double *cw = malloc((size_t)(n + 1) * sizeof(*cw));
    if (w == NULL || cw == NULL) {
        free(w);
        free(cw);
        return NULL;
    }
    for (int64_t k = 0; k <= n; k++) {
        cw[k] = c; /* C(n, k) */
        sum += c;
        c = c * (double)(n - k) / (double)(k + 1);
    }
    for (int64_t k = 0; k <= n; k++)
        w[k] = (float)(cw[k] / sum);
    free(cw);
    *r = n / 2;
    return w;
}

/*
 * Convolve along x: dst[x] = sum_k w[k] src[clamp(x + k - r)]. line: a
 * scratch of len + 2r floats.
 */
static void conv_x(const float *src, float *dst, const vol3 *v, const float *w,
                   int64_t r, float *line)
{
    const int64_t len = v->s[0];
    for (size_t row = 0; row < v->n; row += (size_t)len) {
        for (int64_t i = -r; i < len + r; i++)
            line[i + r] = src[row + (size_t)clamp_i(i, len)];
        for (int64_t x = 0; x < len; x++) {
            float acc = 0.0f;
            for (int64_t k = 0; k <= 2 * r; k++)
                acc += w[k] * line[x + k];
            dst[row + (size_t)x] = acc;
        }
    }
}

/*
 * Convolve along y (axis 1) or z (axis 2), a whole row of x at a time:
 * row i of a line is at base + i * step.
 */
static void conv_rows(const float *src, float *dst, const vol3 *v, int axis,
                      const float *w, int64_t r)
{
    const int64_t sx = v->s[0], len = v->s[axis];
    const size_t step = (size_t)(axis == 1 ? sx : sx * v->s[1]);
    const int64_t nouter = axis == 1 ? v->s[2] : v->s[1];
    const size_t outer = axis == 1 ? (size_t)(sx * v->s[1]) : (size_t)sx;
    for (int64_t o = 0; o < nouter; o++) {
        const size_t base = (size_t)o * outer;
        for (int64_t i = 0; i < len; i++) {
            float *d = dst + base + (size_t)i * step;
            for (int64_t x = 0; x < sx; x++)
                d[x] = 0.0f;
            for (int64_t k = 0; k <= 2 * r; k++) {
                const float *s =
                    src + base + (size_t)clamp_i(i + k - r, len) * step;
                const float wk = w[k];
                for (int64_t x = 0; x < sx; x++)
                    d[x] += wk * s[x];
            }
        }
    }
}

/* One binomial kernel per axis (the scale of each, voxels). */
typedef struct kern3 {
    float *w[3];
    int64_t r[3];
} kern3;

static void kern3_free(kern3 *k)
{
    for (int i = 0; i < 3; i++)
        free(k->w[i]);
}

/* k: binomial kernels of scale factor * sigma[i]. @return 0 or CNX_ENOMEM. */
static int kern3_init(kern3 *k, const double sigma[3], double factor)
{
    int rc = 0;
    for (int i = 0; i < 3; i++) {
        k->w[i] = binomial(factor * sigma[i], &k->r[i]);
        if (k->w[i] == NULL)
            rc = CNX_ENOMEM;
    }
    return rc;
}

/* Separable convolution of a (in place) with k along x, y and (unless
 * sections) z; tmp: a volume of scratch. */
static int convolve(float *a, float *tmp, const vol3 *v, int sections,
                    const kern3 *k)
{
    float *line = malloc((size_t)(v->s[0] + 2 * k->r[0]) * sizeof(*line));
    if (line == NULL)
        return CNX_ENOMEM;
    conv_x(a, tmp, v, k->w[0], k->r[0], line);
    free(line);
    conv_rows(tmp, a, v, 1, k->w[1], k->r[1]);
    if (!sections && v->s[2] > 1 && k->r[2] > 0) {
        conv_rows(a, tmp, v, 2, k->w[2], k->r[2]);
        memcpy(a, tmp, v->n * sizeof(*a));
    }
    return 0;
}

/*
 * One box filter of radius r along axis, a into b, edges replicated:
 * running sums in double, in a fixed order; along y and z a whole row of
 * x at a time (sums: s[0] doubles of scratch), along x four rows at a
 * time (independent sums, so their additions overlap). Each output is
 * the same sequence of double operations whatever the grouping or the
 * vector width, so the result does not depend on them.
 */
static void box_x(const float *a, float *b, const vol3 *v, int64_t r)
{
    const int64_t len = v->s[0], nrows = v->s[1] * v->s[2];
    const double inv = 1.0 / (double)(2 * r + 1);
    int64_t o = 0;
    for (; o + 4 <= nrows; o += 4) {
        const float *src = a + (size_t)(o * len);
        float *dst = b + (size_t)(o * len);
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        const float *r0 = src, *r1 = src + len, *r2 = src + 2 * len,
                    *r3 = src + 3 * len;
        for (int64_t j = -r; j <= r; j++) {
            const int64_t c = clamp_i(j, len);
            s0 += r0[c];
            s1 += r1[c];
            s2 += r2[c];
            s3 += r3[c];
        }
        for (int64_t i = 0; i < len; i++) {
            const int64_t in = clamp_i(i + r + 1, len), out = clamp_i(i - r, len);
            dst[i] = (float)(s0 * inv);
            dst[i + len] = (float)(s1 * inv);
            dst[i + 2 * len] = (float)(s2 * inv);
            dst[i + 3 * len] = (float)(s3 * inv);
            s0 += (double)r0[in] - (double)r0[out];
            s1 += (double)r1[in] - (double)r1[out];
            s2 += (double)r2[in] - (double)r2[out];
            s3 += (double)r3[in] - (double)r3[out];
        }
    }
    for (; o < nrows; o++) {
        const float *src = a + (size_t)(o * len);
        float *dst = b + (size_t)(o * len);
        double sum = 0.0;
        for (int64_t j = -r; j <= r; j++)
            sum += src[clamp_i(j, len)];
        for (int64_t i = 0; i < len; i++) {
            dst[i] = (float)(sum * inv);
            sum += (double)src[clamp_i(i + r + 1, len)] -
                   (double)src[clamp_i(i - r, len)];
        }
    }
}

/* sums[x] += row[x] for x < w. */
static void sums_add(double *restrict sums, const float *restrict row,
                     int64_t w)
{
    for (int64_t x = 0; x < w; x++)
        sums[x] += row[x];
}

/* d[x] = (float)(sums[x] * inv); sums[x] += in[x] - out[x]. */
static void sums_step(double *restrict sums, float *restrict d,
                      const float *in, const float *out, double inv, int64_t w)
{
    int64_t x = 0;
#if defined(__GNUC__)
    typedef double v2d_ __attribute__((vector_size(16)));
    const v2d_ vinv = {inv, inv};
    for (; x + 2 <= w; x += 2) {
        v2d_ sv, iv = {in[x], in[x + 1]}, ov = {out[x], out[x + 1]}, dv;
        memcpy(&sv, sums + x, sizeof(sv));
        dv = sv * vinv;
        d[x] = (float)dv[0];
        d[x + 1] = (float)dv[1];
        sv += iv - ov;
        memcpy(sums + x, &sv, sizeof(sv));
    }
#endif
    for (; x < w; x++) {
        d[x] = (float)(sums[x] * inv);
        sums[x] += (double)in[x] - (double)out[x];
    }
}

static void box_axis(const float *a, float *b, const vol3 *v, int axis,
                     int64_t r, double *sums)
{
    const int64_t sx = v->s[0], len = v->s[axis];
    const size_t step = axis == 1 ? (size_t)sx : (size_t)(sx * v->s[1]);
    const int64_t nouter = axis == 1 ? v->s[2] : v->s[1];
    const size_t outer = axis == 1 ? (size_t)(sx * v->s[1]) : (size_t)sx;
    const double inv = 1.0 / (double)(2 * r + 1);
    if (axis == 0) {
        box_x(a, b, v, r);
        return;
    }
    for (int64_t o = 0; o < nouter; o++) {
        const float *src = a + (size_t)o * outer;
        float *dst = b + (size_t)o * outer;
        memset(sums, 0, (size_t)sx * sizeof(*sums));
        for (int64_t j = -r; j <= r; j++)
            sums_add(sums, src + (size_t)clamp_i(j, len) * step, sx);
        for (int64_t i = 0; i < len; i++)
            sums_step(sums, dst + (size_t)i * step,
                      src + (size_t)clamp_i(i + r + 1, len) * step,
                      src + (size_t)clamp_i(i - r, len) * step, inv, sx);
    }
}

/* Three box passes per axis of radius r[axis] (none where 0), a in place
 * (tmp: scratch volume). */
static int box3(float *a, float *tmp, const vol3 *v, int sections,
                const int64_t r[3])
{
    const int axes = sections || v->s[2] == 1 ? 2 : 3;
    double *sums = malloc((size_t)v->s[0] * sizeof(*sums));
    float *src = a, *dst = tmp;
    if (sums == NULL)
        return CNX_ENOMEM;
    for (int axis = 0; axis < axes; axis++)
        for (int pass = 0; pass < 3 && r[axis] > 0; pass++) {
            float *t = src;
            box_axis(src, dst, v, axis, r[axis], sums);
            src = dst; /* ping-pong: no copy per pass */
            dst = t;
        }
    if (src != a)
        memcpy(a, src, v->n * sizeof(*a));
    free(sums);
    return 0;
}

/* ---- Hessian ridge ------------------------------------------------------ */

/* f at (x + dx, y + dy, z + dz), edges replicated. */
static float at(const float *f, const vol3 *v, int64_t x, int64_t y, int64_t z,
                int dx, int dy, int dz)
{
    x = clamp_i(x + dx, v->s[0]);
    y = clamp_i(y + dy, v->s[1]);
    z = clamp_i(z + dz, v->s[2]);
    return f[(size_t)(x + v->s[0] * (y + v->s[1] * z))];
}

static float second(const float *f, const vol3 *v, int64_t x, int64_t y,
                    int64_t z, int a)
{
    const int d[3] = {a == 0, a == 1, a == 2};
    return at(f, v, x, y, z, d[0], d[1], d[2]) -
           2.0f * at(f, v, x, y, z, 0, 0, 0) +
           at(f, v, x, y, z, -d[0], -d[1], -d[2]);
}

static float mixed(const float *f, const vol3 *v, int64_t x, int64_t y,
                   int64_t z, int a, int b)
{
    int p[3] = {0, 0, 0}, m[3] = {0, 0, 0};
    p[a] = 1;
    p[b] = 1;
    m[a] = 1;
    m[b] = -1;
    return 0.25f * (at(f, v, x, y, z, p[0], p[1], p[2]) -
                    at(f, v, x, y, z, m[0], m[1], m[2]) -
                    at(f, v, x, y, z, -m[0], -m[1], -m[2]) +
                    at(f, v, x, y, z, -p[0], -p[1], -p[2]));
}

/* Largest eigenvalue of the symmetric 2x2 [a c; c b]. */
static double eig2(double a, double b, double c)
{
    const double h = 0.5 * (a - b);
    return 0.5 * (a + b) + sqrt(h * h + c * c) /* IEEE: exact */;
}

/*
 * Largest eigenvalue of the symmetric 3x3 [a d e; d b f; e f c], or any
 * value <= 0 when that eigenvalue is <= 0 (the caller keeps max(0, .)):
 * the Newton iterates decrease strictly, so once one is <= 0 the one it
 * would end on is too, and the iteration stops there.
 */
static double eig3(double a, double b, double c, double d, double e, double f)
{
    const double tr = a + b + c;
    const double c1 = a * b + a * c + b * c - d * d - e * e - f * f;
    const double det =
        a * (b * c - f * f) - d * (d * c - f * e) + e * (d * f - b * e);
    double ra = a + (d < 0 ? -d : d) + (e < 0 ? -e : e);
    double rb = b + (d < 0 ? -d : d) + (f < 0 ? -f : f);
    double rc = c + (e < 0 ? -e : e) + (f < 0 ? -f : f);
    double l = ra > rb ? ra : rb;
    l = l > rc ? l : rc;
    for (int it = 0; it < 40 && l > 0.0; it++) {
        const double p = ((l - tr) * l + c1) * l - det;
        const double dp = (3.0 * l - 2.0 * tr) * l + c1;
        double next;
        if (!(dp > 0.0) || !(p > 0.0))
            break;
        next = l - p / dp;
        if (!(next < l))
            break;
        l = next;
    }
    return l;
}

#if defined(__GNUC__)
/*
 * eig3 on two voxels at once (GCC / Clang vector extensions: two double
 * lanes, SSE2 on x86-64): every lane runs the very operations of eig3, in
 * the same order (no contraction: -ffp-contract=off), and leaves the loop
 * where eig3 would, so each result is eig3's to the bit.
 */
typedef double v2d __attribute__((vector_size(16)));
typedef long long v2l __attribute__((vector_size(16)));

static inline v2d sel2(v2l m, v2d x, v2d y)
{
    return (v2d)(((v2l)x & m) | ((v2l)y & ~m));
}

static inline v2d abs2(v2d x)
{
    const v2d zero = {0.0, 0.0};
    return sel2(x < zero, -x, x);
}

static v2d eig3x2(v2d a, v2d b, v2d c, v2d d, v2d e, v2d f)
{
    const v2d zero = {0.0, 0.0}, two = {2.0, 2.0}, three = {3.0, 3.0};
    const v2d tr = a + b + c;
    const v2d c1 = a * b + a * c + b * c - d * d - e * e - f * f;
    const v2d det =
        a * (b * c - f * f) - d * (d * c - f * e) + e * (d * f - b * e);
    const v2d ra = a + abs2(d) + abs2(e);
    const v2d rb = b + abs2(d) + abs2(f);
    const v2d rc = c + abs2(e) + abs2(f);
    v2d l = sel2(ra > rb, ra, rb);
    v2l on = {-1, -1};
    l = sel2(l > rc, l, rc);
    for (int it = 0; it < 40; it++) {
        const v2d p = ((l - tr) * l + c1) * l - det;
        const v2d dp = (three * l - two * tr) * l + c1;
        const v2d next = l - p / dp;
        on &= (l > zero) & (dp > zero) & (p > zero) & (next < l);
        if ((on[0] | on[1]) == 0)
            break;
        l = sel2(on, next, l);
    }
    return l;
}
#endif

/* ridge at one voxel from its clamped 3x3(x3) neighbourhood (borders). */
static float ridge_at(const float *f, const vol3 *v, int three, int64_t x,
                      int64_t y, int64_t z)
{
    double l;
    if (three)
        l = eig3(second(f, v, x, y, z, 0), second(f, v, x, y, z, 1),
                 second(f, v, x, y, z, 2), mixed(f, v, x, y, z, 0, 1),
                 mixed(f, v, x, y, z, 0, 2), mixed(f, v, x, y, z, 1, 2));
    else
        l = eig2(second(f, v, x, y, z, 0), second(f, v, x, y, z, 1),
                 mixed(f, v, x, y, z, 0, 1));
    return l > 0.0 ? (float)l : 0.0f;
}

/*
 * The same inside a row whose neighbours all exist (x in 1 .. sx - 2; y and
 * z not on a face): direct indices, the very expressions of second() and
 * mixed(), so the values are the same to the bit.
 */
static void ridge_row(const float *f, float *out, int64_t sx, ptrdiff_t sy,
                      ptrdiff_t sz, int three)
{
    int64_t x = 1;
#if defined(__GNUC__)
    for (; three && x + 1 < sx - 1; x += 2) {
        v2d h[6], l;
        for (int j = 0; j < 2; j++) {
            const float *c = f + x + j;
            const float fc = c[0];
            h[0][j] = c[1] - 2.0f * fc + c[-1];
            h[1][j] = c[sy] - 2.0f * fc + c[-sy];
            h[2][j] = c[sz] - 2.0f * fc + c[-sz];
            h[3][j] =
                0.25f * (c[1 + sy] - c[1 - sy] - c[-1 + sy] + c[-1 - sy]);
            h[4][j] =
                0.25f * (c[1 + sz] - c[1 - sz] - c[-1 + sz] + c[-1 - sz]);
            h[5][j] = 0.25f * (c[sy + sz] - c[sy - sz] - c[-sy + sz] +
                               c[-sy - sz]);
        }
        l = eig3x2(h[0], h[1], h[2], h[3], h[4], h[5]);
        out[x] = l[0] > 0.0 ? (float)l[0] : 0.0f;
        out[x + 1] = l[1] > 0.0 ? (float)l[1] : 0.0f;
    }
#endif
    for (; x < sx - 1; x++) {
        const float *c = f + x;
        const float fc = c[0];
        const float hxx = c[1] - 2.0f * fc + c[-1];
        const float hyy = c[sy] - 2.0f * fc + c[-sy];
        const float hxy =
            0.25f * (c[1 + sy] - c[1 - sy] - c[-1 + sy] + c[-1 - sy]);
        double l;
        if (three) {
            const float hzz = c[sz] - 2.0f * fc + c[-sz];
            const float hxz =
                0.25f * (c[1 + sz] - c[1 - sz] - c[-1 + sz] + c[-1 - sz]);
            const float hyz = 0.25f * (c[sy + sz] - c[sy - sz] -
                                       c[-sy + sz] + c[-sy - sz]);
            l = eig3(hxx, hyy, hzz, hxy, hxz, hyz);
        } else
            l = eig2(hxx, hyy, hxy);
        out[x] = l > 0.0 ? (float)l : 0.0f;
    }
}

/* ridge[i] = max(0, largest Hessian eigenvalue of f at i). */
static void ridge(const float *f, float *out, const vol3 *v, int sections)
{
    const int three = !sections && v->s[2] > 1;
    const int64_t sx = v->s[0], sy = v->s[1], sz = v->s[2];
    for (int64_t z = 0; z < sz; z++)
        for (int64_t y = 0; y < sy; y++) {
            const size_t row = (size_t)(sx * (y + sy * z));
            const int inner = sx > 2 && y > 0 && y < sy - 1 &&
                              (!three || (z > 0 && z < sz - 1));
            if (!inner) {
                for (int64_t x = 0; x < sx; x++)
                    out[row + (size_t)x] = ridge_at(f, v, three, x, y, z);
                continue;
            }
            out[row] = ridge_at(f, v, three, 0, y, z);
            ridge_row(f + row, out + row, sx, (ptrdiff_t)sx,
                      (ptrdiff_t)(sx * sy), three);
            out[row + (size_t)(sx - 1)] = ridge_at(f, v, three, sx - 1, y, z);
        }
}

/* ---- normalisation ------------------------------------------------------ */

/* Stretch a[0..n) to [0, 1] by its 1st and 99th percentiles (a histogram
 * of BINS over [min, max]); hist: BINS scratch. */
static void stretch(float *a, size_t n, size_t *hist)
{
    float lo = a[0], hi = a[0], plo, phi;
    size_t acc = 0;
    int bl = 0, bh = BINS - 1;
    for (size_t i = 1; i < n; i++) {
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    if (!(hi > lo)) {
        memset(a, 0, n * sizeof(*a));
        return;
    }
    memset(hist, 0, BINS * sizeof(*hist));
    for (size_t i = 0; i < n; i++)
        hist[(int)((a[i] - lo) / (hi - lo) * (BINS - 1) + 0.5f)]++;
    while (bl < BINS - 1 && (double)(acc + hist[bl]) <= 0.01 * (double)n)
        acc += hist[bl++];
    acc = 0;
    while (bh > 0 && (double)(acc + hist[bh]) <= 0.01 * (double)n)
        acc += hist[bh--];
    plo = lo + (hi - lo) * ((float)bl / (BINS - 1));
    phi = lo + (hi - lo) * ((float)bh / (BINS - 1));
    if (!(phi > plo))
        phi = hi, plo = lo;
    for (size_t i = 0; i < n; i++) {
        float t = (a[i] - plo) / (phi - plo);
        a[i] = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    }
}

/* stretch() per section (sections) or over the whole volume. */
static int stretch_domains(float *a, const vol3 *v, int sections)
{
    const size_t plane = (size_t)(v->s[0] * v->s[1]);
    const size_t dn = sections ? plane : v->n;
    size_t *hist = malloc(BINS * sizeof(*hist));
    if (hist == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    for (size_t at0 = 0; at0 < v->n; at0 += dn)
        stretch(a + at0, dn, hist);
    free(hist);
    return 0;
}

/* ---- the filter -----------------------------------------------------------
 */

/* The sub-volume of v at lo, size sz (a crop). */
static void crop3(const float *a, const vol3 *v, const int64_t lo[3],
                  const vol3 *w, float *out)
{
    for (int64_t z = 0; z < w->s[2]; z++)
        for (int64_t y = 0; y < w->s[1]; y++)
            memcpy(out + (size_t)(w->s[0] * (y + w->s[1] * z)),
                   a + (size_t)(lo[0] + v->s[0] * (lo[1] + y +
                                                   v->s[1] * (lo[2] + z))),
                   (size_t)w->s[0] * sizeof(*out));
}

/*
 * The filter of img (volume v) on the region at o_lo of size o->s:
 *   - the shading (box3 at filter_background) over the whole volume: its
 *     footprint is what the halo is mostly for;
 *   - the smoothings and the Hessian over the region grown by their own
 *     footprint only (w_lo, w), so on the region they equal, to the bit,
 *     what the whole volume gives (the same sums in the same order; a
 *     face of w that is not a face of v is farther than any footprint);
 *   - each term stretched by its percentiles over the region.
 * With the region the whole volume this is the whole-volume filter.
 */
int seg__membrane_filter_region(const float *img, const int64_t size[3],
                                const seg_cfg *p, const int64_t o_lo[3],
                                const int64_t o_size[3], float *out)
{
    vol3 v = {{size[0], size[1], size[2]}, 0}, w, o;
    const double wr = p->ridge;
    const int bgon = p->background[0] > 0 || p->background[1] > 0 ||
                     (!p->sections && p->background[2] > 0);
    kern3 k1 = {{NULL, NULL, NULL}, {0, 0, 0}};
    kern3 k2 = {{NULL, NULL, NULL}, {0, 0, 0}};
    int64_t w_lo[3], in_w[3];
    float *bg = NULL, *tmp = NULL, *dark = NULL, *sm = NULL, *t2 = NULL;
    float *rt = NULL;
    int rc;

    v.n = (size_t)(size[0] * size[1] * size[2]);
    rc = kern3_init(&k1, p->sigma, 1.0);
    if (rc == 0)
        rc = kern3_init(&k2, p->sigma, 2.0);
    if (rc != 0)
        goto done;
    o.n = 1;
    w.n = 1;
    for (int i = 0; i < 3; i++) {
        /* the Hessian reads one voxel beyond its smoothing */
        int64_t m = k1.r[i] > k2.r[i] + 1 ? k1.r[i] : k2.r[i] + 1;
        int64_t hi;
        if (i == 2 && p->sections)
            m = 0;
        w_lo[i] = o_lo[i] - m > 0 ? o_lo[i] - m : 0;
        hi = o_lo[i] + o_size[i] + m < size[i] ? o_lo[i] + o_size[i] + m
                                                : size[i];
        w.s[i] = hi - w_lo[i];
        o.s[i] = o_size[i];
        in_w[i] = o_lo[i] - w_lo[i];
        w.n *= (size_t)w.s[i];
        o.n *= (size_t)o.s[i];
    }
    dark = malloc(w.n * sizeof(*dark));
    sm = malloc(w.n * sizeof(*sm));
    t2 = malloc(w.n * sizeof(*t2));
    rt = malloc(w.n * sizeof(*rt));
    if (dark == NULL || sm == NULL || t2 == NULL || rt == NULL) {
        rc = CNX_ENOMEM;
        goto done;
    }
    if (bgon) {
        /* the shading over the whole volume, kept on w */
        bg = malloc(v.n * sizeof(*bg));
        tmp = malloc(v.n * sizeof(*tmp));
        if (bg == NULL || tmp == NULL) {
            rc = CNX_ENOMEM;
            goto done;
        }
        for (size_t i = 0; i < v.n; i++)
            bg[i] = 1.0f - img[i];
        rc = box3(bg, tmp, &v, p->sections, p->background);
        if (rc != 0)
            goto done;
        crop3(bg, &v, w_lo, &w, sm);
        free(bg);
        free(tmp);
        bg = tmp = NULL;
    }
    /* darkness on w: smooth(1 - img) - shading */
    crop3(img, &v, w_lo, &w, dark);
    for (size_t i = 0; i < w.n; i++)
        dark[i] = 1.0f - dark[i];
    rc = convolve(dark, t2, &w, p->sections, &k1);
    for (size_t i = 0; i < w.n && rc == 0 && bgon; i++)
        dark[i] -= sm[i];
    /* the ridge on w */
    if (rc == 0 && wr > 0.0) {
        crop3(img, &v, w_lo, &w, sm);
        rc = convolve(sm, t2, &w, p->sections, &k2);
        if (rc == 0)
            ridge(sm, rt, &w, p->sections);
    }
    if (rc != 0)
        goto done;
    /* both on the region, each stretched there, then mixed */
    crop3(dark, &w, in_w, &o, t2);
    if (stretch_domains(t2, &o, p->sections) != 0) {
        rc = CNX_ENOMEM;
        goto done;
    }
    if (wr > 0.0) {
        crop3(rt, &w, in_w, &o, out);
        if (stretch_domains(out, &o, p->sections) != 0) {
            rc = CNX_ENOMEM;
            goto done;
        }
    }
    for (size_t i = 0; i < o.n; i++) {
        float m = (float)(1.0 - wr) * t2[i];
        if (wr > 0.0)
            m += (float)wr * out[i];
        out[i] = m < 0.0f ? 0.0f : m > 1.0f ? 1.0f : m;
    }
done:
    kern3_free(&k1);
    kern3_free(&k2);
    free(rt);
    free(t2);
    free(sm);
    free(dark);
    free(tmp);
    free(bg);
    return rc == 0 ? 0 : cnx_error_set(CNX_ENOMEM, 0,
                                       "segment: out of memory");
}

int seg__membrane_filter(const float *img, const int64_t size[3],
                         const seg_cfg *p, float *out)
{
    static const int64_t zero[3] = {0, 0, 0};
    return seg__membrane_filter_region(img, size, p, zero, size, out);
}
