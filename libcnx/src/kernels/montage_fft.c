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
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    double *w;
    size_t *rev;
    int logn;

    assert(n >= 1 && (n & (n - 1)) == 0);
    if (f->n == n)
        return 0;
    w = malloc((n / 2 + 1) * 2 * sizeof(*w));
    rev = malloc(n * sizeof(*rev));
    if (w == NULL || rev == NULL) {
        free(w);
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
    for (size_t i = 0; i < n; i++) {
        size_t r = 0;
        for (int b = 0; b < logn; b++)
            r |= ((i >> b) & 1) << (logn - 1 - b);
        rev[i] = r;
    }
    free(f->w);
    free(f->rev);
    f->w = w;
    f->rev = rev;
    f->n = n;
    return 0;
}

void mont_fft_dispose(mont_fft *f)
{
    if (f == NULL)
        return;
    free(f->w);
    free(f->rev);
    memset(f, 0, sizeof(*f));
}

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
    for (size_t half = 4; half < n; half *= 2) {
        const size_t step = n / (2 * half);
        for (size_t i = 0; i < n; i += 2 * half) {
            double *lo = d + 2 * i, *hi = d + 2 * (i + half);
            for (size_t k = 0; k < half; k++) {
                const double wr = f->w[2 * k * step];
                const double wi = sign * f->w[2 * k * step + 1];
                const double xr = hi[2 * k], xi = hi[2 * k + 1];
                const double tr = xr * wr - xi * wi;
                const double ti = xr * wi + xi * wr;
                const double ur = lo[2 * k], ui = lo[2 * k + 1];
                lo[2 * k] = ur + tr;
                lo[2 * k + 1] = ui + ti;
                hi[2 * k] = ur - tr;
                hi[2 * k + 1] = ui - ti;
            }
        }
    }
}
