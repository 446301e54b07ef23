/*
 * montage_fft.c - a small deterministic complex FFT for the montage
 * kernel: iterative radix-2, power-of-two sizes, interleaved (re, im)
 * doubles.
 *
 * Output bytes must not depend on the libm at hand, so the twiddle factors
 * come from no sin or cos: the rotation by 2 pi / 2^j is built by
 * half-angle formulas from the exact rotation by 2 pi / 4 (cos' = sqrt((1 +
 * cos) / 2), sin' = sin / (2 cos')), and the rotation by 2 pi k / n is the
 * product of the rotations of the set bits of k, highest first. Every
 * operation is IEEE + - * / or sqrt in a fixed order (the build has
 * -ffp-contract=off), so a plan holds the same bits everywhere; the error is
 * a few ulps. Plans are per caller (no static state): thread-safe.
 * The butterflies use SSE2 where the compiler offers it, one complex value
 * per register: the same IEEE operations on the same operands (a - b as
 * a + (-b), a + b commuted), so the bits do not depend on it.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MONT_AVX2 1
#endif

#include "cnx/error.h"
#include "kernels/montage_int.h"

/* base[j] = (cos, sin) of 2 pi / 2^j, j = 0 .. 63. */
static void base_rotations(double c[64], double s[64])
{
    c[0] = 1.0;
    s[0] = 0.0;
    c[1] = -1.0;
    s[1] = 0.0;
    c[2] = 0.0;
    s[2] = 1.0;
    for (int j = 3; j < 64; j++) {
        c[j] = sqrt((1.0 + c[j - 1]) * 0.5);
        s[j] = s[j - 1] / (2.0 * c[j]);
    }
}

static int log2_exact(uint64_t n)
{
    int l = 0;
    while (((uint64_t)1 << l) < n)
        l++;
    return l;
}

/* cos, sin of 2 pi k / n from the base rotations (n = 2^logn). */
static void rotation(const double bc[64], const double bs[64], uint64_t k,
                     int logn, double *c, double *s)
{
    double cr = 1.0, sr = 0.0;
    k &= ((uint64_t)1 << logn) - 1;
    for (int b = logn - 1; b >= 0; b--) {
        if ((k >> b) & 1) {
            /* 2 pi 2^b / 2^logn = 2 pi / 2^(logn - b) */
            const double xc = bc[logn - b], xs = bs[logn - b];
            const double nc = cr * xc - sr * xs;
            const double ns = cr * xs + sr * xc;
            cr = nc;
            sr = ns;
        }
    }
    *c = cr;
    *s = sr;
}

void mont_cos_sin(uint64_t k, uint64_t n, double *c, double *s)
{
    double bc[64], bs[64];
    assert(n >= 1 && (n & (n - 1)) == 0);
    base_rotations(bc, bs);
    rotation(bc, bs, k, log2_exact(n), c, s);
}

int mont_fft_plan(mont_fft *f, size_t n)
{
    double bc[64], bs[64];
    double *w, *ws;
    size_t *rev;
    int logn;

    assert(n >= 1 && (n & (n - 1)) == 0);
    if (f->n == n)
        return 0;
    w = malloc((n / 2 + 1) * 2 * sizeof(*w));
    ws = malloc((n + 1) * 2 * sizeof(*ws));
    rev = malloc(n * sizeof(*rev));
    if (w == NULL || ws == NULL || rev == NULL) {
        free(w);
        free(ws);
        free(rev);
        return cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory (FFT)");
    }
    logn = log2_exact(n);
    base_rotations(bc, bs);
    for (size_t k = 0; k < n / 2; k++) {
        double c, s;
        rotation(bc, bs, k, logn, &c, &s);
        w[2 * k] = c;
        w[2 * k + 1] = -s; /* forward transform: exp(-i theta) */
    }
    for (size_t h = 1; h < n; h *= 2)
        for (size_t k = 0; k < h; k++) {
            ws[2 * (h + k)] = w[2 * k * (n / (2 * h))];
            ws[2 * (h + k) + 1] = w[2 * k * (n / (2 * h)) + 1];
        }
    for (size_t i = 0; i < n; i++) {
        size_t r = 0;
        for (int b = 0; b < logn; b++)
            r |= ((i >> b) & 1) << (logn - 1 - b);
        rev[i] = r;
    }
    free(f->w);
    free(f->ws);
    free(f->rev);
    f->w = w;
    f->ws = ws;
    f->rev = rev;
    f->n = n;
    return 0;
}

void mont_fft_dispose(mont_fft *f)
{
    if (f == NULL)
        return;
    free(f->w);
    free(f->ws);
    free(f->rev);
    memset(f, 0, sizeof(*f));
}

/* lo, hi <- lo + w hi, lo - w hi for cnt complex values at lo and hi:
 * t = (xr wr - xi wi, xr wi + xi wr). */
static void butterfly(double *lo, double *hi, size_t cnt, double wr, double wi)
{
#if defined(__SSE2__)
    const __m128d vr = _mm_set1_pd(wr), vi = _mm_set1_pd(wi);
    const __m128d neg = _mm_set_pd(0.0, -0.0); /* flips the real lane */
    for (size_t k = 0; k < cnt; k++) {
        const __m128d x = _mm_loadu_pd(hi + 2 * k);
        const __m128d xs = _mm_shuffle_pd(x, x, 1);
        /* (xr wr, xi wr) + (-(xi wi), xr wi) */
        const __m128d t =
            _mm_add_pd(_mm_mul_pd(x, vr), _mm_xor_pd(_mm_mul_pd(xs, vi), neg));
        const __m128d u = _mm_loadu_pd(lo + 2 * k);
        _mm_storeu_pd(lo + 2 * k, _mm_add_pd(u, t));
        _mm_storeu_pd(hi + 2 * k, _mm_sub_pd(u, t));
    }
#else
    for (size_t k = 0; k < cnt; k++) {
        const double xr = hi[2 * k], xi = hi[2 * k + 1];
        const double tr = xr * wr - xi * wi;
        const double ti = xr * wi + xi * wr;
        const double ur = lo[2 * k], ui = lo[2 * k + 1];
        lo[2 * k] = ur + tr;
        lo[2 * k + 1] = ui + ti;
        hi[2 * k] = ur - tr;
        hi[2 * k + 1] = ui - ti;
    }
#endif
}

#if defined(MONT_AVX2)
/* butterfly() two complex values per register, where the CPU has AVX2
 * (no FMA: the same operations). */
__attribute__((target("avx2"))) static void
butterfly_avx2(double *lo, double *hi, size_t cnt, double wr, double wi)
{
    const __m256d vr = _mm256_set1_pd(wr), vi = _mm256_set1_pd(wi);
    const __m256d neg = _mm256_set_pd(0.0, -0.0, 0.0, -0.0);
    size_t k = 0;
    for (; k + 2 <= cnt; k += 2) {
        const __m256d x = _mm256_loadu_pd(hi + 2 * k);
        const __m256d xs = _mm256_permute_pd(x, 5);
        const __m256d t = _mm256_add_pd(
            _mm256_mul_pd(x, vr), _mm256_xor_pd(_mm256_mul_pd(xs, vi), neg));
        const __m256d u = _mm256_loadu_pd(lo + 2 * k);
        _mm256_storeu_pd(lo + 2 * k, _mm256_add_pd(u, t));
        _mm256_storeu_pd(hi + 2 * k, _mm256_sub_pd(u, t));
    }
    if (k < cnt)
        butterfly(lo + 2 * k, hi + 2 * k, cnt - k, wr, wi);
}
#endif

#if defined(MONT_AVX2)
/* The butterflies of one stage of half-length h >= 2 of a row, two
 * complex values and their own twiddles (tw, h of them, contiguous) per
 * register. */
__attribute__((target("avx2"))) static void
stage_avx2(double *d, size_t n, size_t h, const double *tw, double sign)
{
    const __m256d neg = _mm256_set_pd(0.0, -0.0, 0.0, -0.0);
    const __m256d sg = _mm256_set1_pd(sign);
    for (size_t i = 0; i < n; i += 2 * h) {
        double *lo = d + 2 * i, *hi = d + 2 * (i + h);
        for (size_t k = 0; k < h; k += 2) {
            const __m256d w = _mm256_loadu_pd(tw + 2 * k);
            const __m256d vr = _mm256_unpacklo_pd(w, w);
            const __m256d vi = _mm256_mul_pd(sg, _mm256_unpackhi_pd(w, w));
            const __m256d x = _mm256_loadu_pd(hi + 2 * k);
            const __m256d xs = _mm256_permute_pd(x, 5);
            const __m256d t =
                _mm256_add_pd(_mm256_mul_pd(x, vr),
                              _mm256_xor_pd(_mm256_mul_pd(xs, vi), neg));
            const __m256d u = _mm256_loadu_pd(lo + 2 * k);
            _mm256_storeu_pd(lo + 2 * k, _mm256_add_pd(u, t));
            _mm256_storeu_pd(hi + 2 * k, _mm256_sub_pd(u, t));
        }
    }
}
#endif

/* lo, hi <- lo + hi, lo - hi for cnt doubles. */
static void butterfly_plain(double *lo, double *hi, size_t cnt)
{
    for (size_t k = 0; k < cnt; k++) {
        const double a = lo[k], b = hi[k];
        lo[k] = a + b;
        hi[k] = a - b;
    }
}

/* lo, hi <- lo + e, lo - e for cnt complex values, e = hi rotated by
 * -i (sign 1) or +i (sign -1): e = (sign hi_im, -sign hi_re). */
static void butterfly_quarter(double *lo, double *hi, size_t cnt, double sign)
{
    for (size_t k = 0; k < cnt; k++) {
        const double er = sign * hi[2 * k + 1], ei = -sign * hi[2 * k];
        const double cr = lo[2 * k], ci = lo[2 * k + 1];
        lo[2 * k] = cr + er;
        lo[2 * k + 1] = ci + ei;
        hi[2 * k] = cr - er;
        hi[2 * k + 1] = ci - ei;
    }
}

#if defined(MONT_AVX2)
__attribute__((target("avx2"))) static void
butterfly_plain_avx2(double *lo, double *hi, size_t cnt)
{
    size_t k = 0;
    for (; k + 4 <= cnt; k += 4) {
        const __m256d a = _mm256_loadu_pd(lo + k), b = _mm256_loadu_pd(hi + k);
        _mm256_storeu_pd(lo + k, _mm256_add_pd(a, b));
        _mm256_storeu_pd(hi + k, _mm256_sub_pd(a, b));
    }
    butterfly_plain(lo + k, hi + k, cnt - k);
}

/* butterfly_quarter(): e = hi swapped times (sign, -sign), the products
 * butterfly_quarter forms. */
__attribute__((target("avx2"))) static void
butterfly_quarter_avx2(double *lo, double *hi, size_t cnt, double sign)
{
    const __m256d sg = _mm256_set_pd(-sign, sign, -sign, sign);
    size_t k = 0;
    for (; k + 2 <= cnt; k += 2) {
        const __m256d x = _mm256_loadu_pd(hi + 2 * k);
        const __m256d e = _mm256_mul_pd(sg, _mm256_permute_pd(x, 5));
        const __m256d c = _mm256_loadu_pd(lo + 2 * k);
        _mm256_storeu_pd(lo + 2 * k, _mm256_add_pd(c, e));
        _mm256_storeu_pd(hi + 2 * k, _mm256_sub_pd(c, e));
    }
    butterfly_quarter(lo + 2 * k, hi + 2 * k, cnt - k, sign);
}
#endif

void mont_fft_1d(const mont_fft *f, double *d, int inverse)
{
    const size_t n = f->n;
    const double sign = inverse ? -1.0 : 1.0;

    for (size_t i = 0; i < n; i++) {
        const size_t r = f->rev[i];
        if (r > i) {
            double t0 = d[2 * i], t1 = d[2 * i + 1];
            d[2 * i] = d[2 * r];
            d[2 * i + 1] = d[2 * r + 1];
            d[2 * r] = t0;
            d[2 * r + 1] = t1;
        }
    }
    /* The first two stages need no multiplication. */
    if (n >= 2) {
        for (size_t i = 0; i < n; i += 2) {
            const double ar = d[2 * i], ai = d[2 * i + 1];
            const double br = d[2 * i + 2], bi = d[2 * i + 3];
            d[2 * i] = ar + br;
            d[2 * i + 1] = ai + bi;
            d[2 * i + 2] = ar - br;
            d[2 * i + 3] = ai - bi;
        }
    }
    if (n >= 4) {
        for (size_t i = 0; i < n; i += 4) {
            double *p = d + 2 * i;
            const double ar = p[0], ai = p[1], br = p[4], bi = p[5];
            const double cr = p[2], ci = p[3];
            /* twiddle of the second butterfly: -i (forward), +i (inverse) */
            const double er = sign * p[7], ei = -sign * p[6];
            p[0] = ar + br;
            p[1] = ai + bi;
            p[4] = ar - br;
            p[5] = ai - bi;
            p[2] = cr + er;
            p[3] = ci + ei;
            p[6] = cr - er;
            p[7] = ci - ei;
        }
    }
#if defined(MONT_AVX2)
    if (__builtin_cpu_supports("avx2")) {
        for (size_t half = 4; half < n; half *= 2)
            stage_avx2(d, n, half, f->ws + 2 * half, sign);
        return;
    }
#endif
    for (size_t half = 4; half < n; half *= 2) {
        const size_t step = n / (2 * half);
        for (size_t i = 0; i < n; i += 2 * half) {
            double *lo = d + 2 * i, *hi = d + 2 * (i + half);
            for (size_t k = 0; k < half; k++)
                butterfly(lo + 2 * k, hi + 2 * k, 1, f->w[2 * k * step],
                          sign * f->w[2 * k * step + 1]);
        }
    }
}

void mont_fft_cols(const mont_fft *f, double *d, size_t m, int inverse)
{
    const size_t n = f->n, rs = 2 * m; /* row stride, doubles */
    const double sign = inverse ? -1.0 : 1.0;

    for (size_t i = 0; i < n; i++) {
        const size_t r = f->rev[i];
        if (r > i) {
            double *p = d + i * rs, *q = d + r * rs;
            for (size_t k = 0; k < rs; k++) {
                const double t = p[k];
                p[k] = q[k];
                q[k] = t;
            }
        }
    }
#if defined(MONT_AVX2)
    if (m >= 2 && __builtin_cpu_supports("avx2")) {
        if (n >= 2)
            for (size_t i = 0; i < n; i += 2)
                butterfly_plain_avx2(d + i * rs, d + (i + 1) * rs, rs);
        if (n >= 4)
            for (size_t i = 0; i < n; i += 4) {
                butterfly_plain_avx2(d + i * rs, d + (i + 2) * rs, rs);
                butterfly_quarter_avx2(d + (i + 1) * rs, d + (i + 3) * rs, m,
                                       sign);
            }
        for (size_t half = 4; half < n; half *= 2) {
            const size_t step = n / (2 * half);
            for (size_t i = 0; i < n; i += 2 * half)
                for (size_t k = 0; k < half; k++)
                    butterfly_avx2(d + (i + k) * rs, d + (i + k + half) * rs, m,
                                   f->w[2 * k * step],
                                   sign * f->w[2 * k * step + 1]);
        }
        return;
    }
#endif
    if (n >= 2)
        for (size_t i = 0; i < n; i += 2)
            butterfly_plain(d + i * rs, d + (i + 1) * rs, rs);
    if (n >= 4)
        for (size_t i = 0; i < n; i += 4) {
            butterfly_plain(d + i * rs, d + (i + 2) * rs, rs);
            butterfly_quarter(d + (i + 1) * rs, d + (i + 3) * rs, m, sign);
        }
    for (size_t half = 4; half < n; half *= 2) {
        const size_t step = n / (2 * half);
        for (size_t i = 0; i < n; i += 2 * half)
            for (size_t k = 0; k < half; k++)
                butterfly(d + (i + k) * rs, d + (i + k + half) * rs, m,
                          f->w[2 * k * step], sign * f->w[2 * k * step + 1]);
    }
}
