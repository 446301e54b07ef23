/*
 * cnx/ccl.h - 2D connected-component labelling of one section (pure kernel).
 *
 * The components are the 4-connected sets of non-zero pixels. Labels are
 * deterministic: 1, 2, 3, ... in raster order (y, then x) of each
 * component's first pixel; zero pixels get 0. Two-pass union-find with path
 * compression over provisional labels; O(pixels), buffers in, buffers out,
 * no I/O.
 */
#ifndef CNX_CCL_H
#define CNX_CCL_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever the labels it writes are meant to change. */
#define CNX_CCL_VERSION 1

/**
 * Label the 4-connected components of the non-zero pixels of an image.
 *
 * @param[out] labels  width*height labels, row-major (x fastest); may not
 *                     alias pixels
 * @param[out] count   number of components (the largest label)
 * @param pixels  width*height elements of dtype (row-major, x fastest)
 * @param dtype   CNX_DT_UINT8, _UINT16, _UINT32 or _UINT64
 * @param width   >= 1
 * @param height  >= 1; width*height at most 2^32
 * @return 0; CNX_EINVAL for a bad type or size; CNX_ENOMEM.
 * Thread-safety: no shared state; call from any number of threads.
 */
int cnx_ccl2d(uint32_t *labels, uint32_t *count, const void *pixels,
              cnx_dtype dtype, int64_t width, int64_t height);

#ifdef __cplusplus
}
#endif
#endif
