/*
 * montage_int.h - shared internals of the montage kernel: the
 * deterministic FFT (montage_fft.c), pair registration with its reusable
 * workspace (montage_register.c), the global solves (montage_solve.c).
 * Nothing here is thread-safe by itself: one workspace per thread.
 */
#ifndef CNX_MONTAGE_INT_H
#define CNX_MONTAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/montage.h"

/* Smallest overlap side (pixels) an offset must give to be scored. */
#define MONT_MIN_SIDE 8
/* Smallest overlap area (pixels) an offset must give to be scored. */
#define MONT_MIN_AREA 256
/* Peak ratio: the runner-up is the best NCC at Chebyshev distance of at
 * least this many (full-resolution) pixels from the peak. */
#define MONT_EXCLUDE 5
/* Floor of 1 - NCC at the peak in the peak ratio (keeps it finite: the
 * ratio is at most 2 / MONT_RATIO_FLOOR). */
#define MONT_RATIO_FLOOR 1e-4
/* Bin 2 x 2 before the FFT search when the search is at least this wide. */
#define MONT_BIN_SEARCH 8
/* Largest FFT (points) one pair may need. */
#define MONT_MAX_FFT ((size_t)1 << 26)

/* ---- FFT ------------------------------------------------------------------
 */

/* Twiddles of a power-of-two size n: w[k] = exp(-2 pi i k / n), k < n/2,
 * interleaved (re, im). */
typedef struct mont_fft {
    size_t n;
    double *w;
    double *ws;  /* the same twiddles by stage: those of the stage of
                  * half-length h (k < h) at ws[2 h + 2 k], contiguous */
    size_t *rev; /* bit reversal permutation */
} mont_fft;

/* Prepare the plan for size n (a power of two >= 1); reuses memory.
 * @return 0 or CNX_ENOMEM. */
int mont_fft_plan(mont_fft *f, size_t n);
void mont_fft_dispose(mont_fft *f);

/* In-place complex FFT of n interleaved values (stride 1); inverse = 1
 * uses conj twiddles and does not scale. */
void mont_fft_1d(const mont_fft *f, double *data, int inverse);

/* The same transform of every column of an f->n x m grid of interleaved
 * values (row stride 2 m doubles), in place: each column gets exactly the
 * operations mont_fft_1d would give it (the same bits), done a whole row at
 * a time instead of through a gathered copy. */
void mont_fft_cols(const mont_fft *f, double *data, size_t m, int inverse);

/* cos and sin of 2 pi k / n for n a power of two, deterministically
 * (half-angle recurrences from pi/2, products in a fixed order). */
void mont_cos_sin(uint64_t k, uint64_t n, double *c, double *s);

/* ---- registration ---------------------------------------------------------
 */

/* Reusable buffers for registering pairs. */
typedef struct mont_work {
    mont_fft fx, fy;
    double *grid; /* nx * ny complex */
    size_t grid_cap;
    double *ra, *rb; /* region images (binned), real */
    double *sa, *sb; /* summed-area tables: value and square, interleaved */
    size_t ra_cap, rb_cap, sa_cap, sb_cap;
    double *ncc; /* lag surface */
    size_t ncc_cap;
} mont_work;

void mont_work_dispose(mont_work *w);

/* Overlap statistics of a registered pair, for the normalisation. */
typedef struct mont_stats {
    double mean_a, sd_a, mean_b, sd_b;
    int64_t count;
} mont_stats;

/* Register tiles a, b; fills dx, dy, peak_ratio, ncc of out and st.
 * @return 0 (peak_ratio 0 when nothing valid); 1 if the tiles cannot
 * overlap within search; CNX_ETOOBIG; CNX_ENOMEM. */
int mont_register(mont_work *w, const cnx_montage_tile *a,
                  const cnx_montage_tile *b, int64_t search,
                  cnx_montage_pair *out, mont_stats *st);

/* 1 if tiles a and b can share MONT_MIN_SIDE^2 pixels within search. */
int mont_may_overlap(const cnx_montage_tile *a, const cnx_montage_tile *b,
                     int64_t search);

/* ---- solve ----------------------------------------------------------------
 */

/* Solve positions and intensities into r (arrays allocated, pairs
 * registered); st: one per pair. @return 0 or CNX_ENOMEM. */
int mont_solve(const cnx_montage_tile *tiles, size_t n,
               const cnx_montage_params *p, const mont_stats *st,
               cnx_montage_result *r);

/* Round half away from zero, without libm. */
static inline double mont_round(double v)
{
    double t = (double)(int64_t)(v < 0 ? v - 0.5 : v + 0.5);
    return t;
}

/* Floor of v (|v| < 2^62), without libm. */
static inline int64_t mont_floor(double v)
{
    int64_t t = (int64_t)v;
    return (double)t > v ? t - 1 : t;
}

#endif
