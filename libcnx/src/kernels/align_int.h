/*
 * align_int.h - shared internals of the align kernel (align_match.c,
 * align_render.c, align_solve.c): sqrt and rounding without the rest of
 * libm. Pure functions.
 */
#ifndef CNX_ALIGN_INT_H
#define CNX_ALIGN_INT_H

#include <math.h>
#include <stdint.h>

#include "cnx/align.h"

/* The one libm function the kernel uses (correctly rounded by IEEE). */
static inline double align_sqrt(double v)
{
    return sqrt(v);
}

/* Round half away from zero, without libm. */
static inline double align_round(double v)
{
    return (double)(int64_t)(v < 0 ? v - 0.5 : v + 0.5);
}

/* Floor of v (|v| < 2^62), without libm. */
static inline int64_t align_floor(double v)
{
    const int64_t t = (int64_t)v;
    return (double)t > v ? t - 1 : t;
}

#endif
