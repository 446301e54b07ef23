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
 * x at a time (sums: s[0] doubles of scratch).
 */
static void box_axis(const float *a, float *b, const vol3 *v, int axis,
                     int64_t r, double *sums)
{
    const int64_t sx = v->s[0], len = v->s[axis];
    const int64_t width = axis == 0 ? 1 : sx;
    const size_t step = axis == 0   ? 1
                        : axis == 1 ? (size_t)sx
                                    : (size_t)(sx * v->s[1]);
    const int64_t nouter = axis == 0   ? v->s[1] * v->s[2]
                           : axis == 1 ? v->s[2]
                                       : v->s[1];
    const size_t outer = axis == 0   ? (size_t)sx
                         : axis == 1 ? (size_t)(sx * v->s[1])
                                     : (size_t)sx;
    const double inv = 1.0 / (double)(2 * r + 1);
    for (int64_t o = 0; o < nouter; o++) {
        const float *src = a + (size_t)o * outer;
        float *dst = b + (size_t)o * outer;
        for (int64_t x = 0; x < width; x++)
            sums[x] = 0.0;
        for (int64_t j = -r; j <= r; j++) {
            const float *row = src + (size_t)clamp_i(j, len) * step;
            for (int64_t x = 0; x < width; x++)
                sums[x] += row[x];
        }
        for (int64_t i = 0; i < len; i++) {
            const float *in = src + (size_t)clamp_i(i + r + 1, len) * step;
            const float *outr = src + (size_t)clamp_i(i - r, len) * step;
            float *d = dst + (size_t)i * step;
            for (int64_t x = 0; x < width; x++) {
                d[x] = (float)(sums[x] * inv);
                sums[x] += (double)in[x] - (double)outr[x];
            }
        }
    }
}

/* Three box passes per axis of radius r[axis] (none where 0), a in place
 * (tmp: scratch volume). */
static int box3(float *a, float *tmp, const vol3 *v, int sections,
                const int64_t r[3])
{
    const int axes = sections || v->s[2] == 1 ? 2 : 3;
    double *sums = malloc((size_t)v->s[0] * sizeof(*sums));
    if (sums == NULL)
        return CNX_ENOMEM;
    for (int axis = 0; axis < axes; axis++)
        for (int pass = 0; pass < 3 && r[axis] > 0; pass++) {
            box_axis(a, tmp, v, axis, r[axis], sums);
            memcpy(a, tmp, v->n * sizeof(*a));
        }
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

/* Largest eigenvalue of the symmetric 3x3 [a d e; d b f; e f c]. */
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
    for (int it = 0; it < 40; it++) {
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

/* ridge[i] = max(0, largest Hessian eigenvalue of f at i). */
static void ridge(const float *f, float *out, const vol3 *v, int sections)
{
    const int three = !sections && v->s[2] > 1;
    size_t i = 0;
    for (int64_t z = 0; z < v->s[2]; z++)
        for (int64_t y = 0; y < v->s[1]; y++)
            for (int64_t x = 0; x < v->s[0]; x++, i++) {
                double l;
                if (three)
                    l = eig3(
                        second(f, v, x, y, z, 0), second(f, v, x, y, z, 1),
                        second(f, v, x, y, z, 2), mixed(f, v, x, y, z, 0, 1),
                        mixed(f, v, x, y, z, 0, 2), mixed(f, v, x, y, z, 1, 2));
                else
                    l = eig2(second(f, v, x, y, z, 0), second(f, v, x, y, z, 1),
                             mixed(f, v, x, y, z, 0, 1));
                out[i] = l > 0.0 ? (float)l : 0.0f;
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

/* darkness term into dark (tmp, line: scratch). */
static int darkness(const float *img, float *dark, float *bg, float *tmp,
                    const vol3 *v, const seg_cfg *p)
{
    const int bgon = p->background[0] > 0 || p->background[1] > 0 ||
                     (!p->sections && p->background[2] > 0);
    kern3 k = {{NULL, NULL, NULL}, {0, 0, 0}};
    int rc = kern3_init(&k, p->sigma, 1.0);
    for (size_t i = 0; i < v->n && rc == 0; i++)
        dark[i] = 1.0f - img[i];
    if (rc == 0 && bgon) {
        memcpy(bg, dark, v->n * sizeof(*bg));
        rc = box3(bg, tmp, v, p->sections, p->background);
    }
    if (rc == 0)
        rc = convolve(dark, tmp, v, p->sections, &k);
    for (size_t i = 0; i < v->n && rc == 0 && bgon; i++)
        dark[i] -= bg[i];
    kern3_free(&k);
    return rc;
}

static int ridge_term(const float *img, float *out, float *sm, float *tmp,
                      const vol3 *v, const seg_cfg *p)
{
    kern3 k = {{NULL, NULL, NULL}, {0, 0, 0}};
    int rc = kern3_init(&k, p->sigma, 2.0);
    if (rc == 0) {
        memcpy(sm, img, v->n * sizeof(*sm));
        rc = convolve(sm, tmp, v, p->sections, &k);
    }
    if (rc == 0)
        ridge(sm, out, v, p->sections);
    kern3_free(&k);
    return rc;
}

int seg__membrane_filter(const float *img, const int64_t size[3],
                         const seg_cfg *p, float *out)
{
    vol3 v = {{size[0], size[1], size[2]}, 0};
    const double wr = p->ridge;
    float *dark, *a, *b;
    int rc = 0;
    v.n = (size_t)(size[0] * size[1] * size[2]);
    dark = malloc(v.n * sizeof(*dark));
    a = malloc(v.n * sizeof(*a));
    b = malloc(v.n * sizeof(*b));
    if (dark == NULL || a == NULL || b == NULL ||
        darkness(img, dark, a, b, &v, p) != 0 ||
        stretch_domains(dark, &v, p->sections) != 0 ||
        (wr > 0.0 && (ridge_term(img, out, a, b, &v, p) != 0 ||
                      stretch_domains(out, &v, p->sections) != 0))) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
        goto done;
    }
    for (size_t i = 0; i < v.n; i++) {
        float m = (float)(1.0 - wr) * dark[i];
        if (wr > 0.0)
            m += (float)wr * out[i];
        out[i] = m < 0.0f ? 0.0f : m > 1.0f ? 1.0f : m;
    }
done:
    free(b);
    free(a);
    free(dark);
    return rc;
}
