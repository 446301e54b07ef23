/*
 * cnx/downsample.h - one level of a layer's pyramid (pure kernel).
 *
 * An output voxel (x, y, z) covers the input voxels [f*x, f*x + f) on each
 * axis, in global coordinates; the factor is 2x2x2 or 2x2x1, chosen from
 * the resolution so that voxels stay as close to isotropic as they can.
 * Images are averaged with integer round-half-up; labels take the most
 * frequent value of their block, ties to the lower id. A block cut by the
 * edge of the input uses only the voxels that exist. The next scale's
 * geometry (key, size, offset, chunking) is computed here as well, so that
 * every task that adds it adds the same bytes. See docs/downsample.md.
 */
#ifndef CNX_DOWNSAMPLE_H
#define CNX_DOWNSAMPLE_H

#include <stdint.h>

#include "cnx/geom.h"
#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever the voxels it writes are meant to change. */
#define CNX_DOWNSAMPLE_VERSION 1

typedef enum cnx_downsample_mode {
    CNX_DOWNSAMPLE_AVERAGE = 1, /* images: mean, rounded half up */
    CNX_DOWNSAMPLE_MODE = 2,    /* labels: most frequent, ties to lower */
} cnx_downsample_mode;

/**
 * The factor of one pyramid step from a scale's resolution (nm per voxel).
 *
 * x and y are always halved. z is halved too when that leaves it closer to
 * the new in-plane resolution t = 2 * min(res_x, res_y) than leaving it:
 * |res_z - t| > |2 res_z - t|, i.e. res_z < 4/3 * min(res_x, res_y). This
 * is the rule of neuroglancer's and CloudVolume's
 * compute_near_isotropic_downsampling_scales restricted to x and y always
 * halving: 4,4,40 -> 2,2,1; 8,8,8 -> 2,2,2; 32,32,40 -> 2,2,2.
 *
 * @param res     the resolution of the source scale; each > 0
 * @param[out] factor  {2, 2, 1} or {2, 2, 2}
 */
void cnx_downsample_factor(const double res[3], int64_t factor[3]);

/**
 * The output box of an input box: [min / f, ceil(max / f)) per axis.
 *
 * @param in      the input box; in->min must be a multiple of the factor
 * @param factor  1 or 2 per axis
 * @param[out] out  the output box
 * @return 0; CNX_EINVAL for an empty box, a bad factor or a min that is not
 *         a multiple of it.
 */
int cnx_downsample_box(const cnx_box *in, const int64_t factor[3],
                       cnx_box *out);

/**
 * Downsample in into out, whose box must be cnx_downsample_box(in->box).
 *
 * Average: for integer types (sum + n/2) / n over the n voxels of the
 * block that exist, in exact integer arithmetic (uint64 too); for float32
 * the sum is taken in double in a fixed order -- for each x, the input
 * rows in z-then-y order, then the x pair -- and the quotient rounded to
 * float. Mode: the most frequent value of the block, ties to the lowest
 * value; 0 is an ordinary value. Channels are downsampled independently.
 *
 * @param out     same type and channels as in; every voxel is written
 * @param in      the input volume (not aliased with out)
 * @param factor  1 or 2 per axis (the stage uses 2,2,1 or 2,2,2)
 * @param mode    CNX_DOWNSAMPLE_AVERAGE (any type) or CNX_DOWNSAMPLE_MODE
 *                (integer types)
 * @return 0; CNX_EINVAL for a misaligned input, a wrong output box, type
 *         or channel count, a bad factor, or mode on float32; CNX_ENOMEM.
 * Thread-safety: no shared state; single-threaded; deterministic.
 */
int cnx_downsample_into(cnx_volume *out, const cnx_volume *in,
                        const int64_t factor[3], cnx_downsample_mode mode);

/**
 * Like cnx_downsample_into, allocating the output volume.
 * @param[out] out  caller frees with cnx_volume_free()
 */
int cnx_downsample_volume(cnx_volume **out, const cnx_volume *in,
                          const int64_t factor[3], cnx_downsample_mode mode);

/**
 * The geometry of the scale one step above src, with the factor
 * cnx_downsample_factor(src->resolution) gives: resolution * f, key
 * "%g_%g_%g" of it (as cnx_info_init names scales), size ceil(size / f),
 * voxel_offset floor(offset / f), chunk max(1, chunk / f) (so that one task
 * over whole source chunks writes whole output chunks), same encoding and
 * compressed_segmentation block.
 *
 * @param src  a scale with positive size, chunk and resolution
 * @param[out] out  the next scale (all bytes set)
 * @return 0; CNX_EINVAL for a bad src; CNX_ERANGE if the key does not fit.
 */
struct cnx_scale; /* cnx/precomputed.h */
int cnx_downsample_next_scale(const struct cnx_scale *src,
                              struct cnx_scale *out);

#ifdef __cplusplus
}
#endif
#endif
