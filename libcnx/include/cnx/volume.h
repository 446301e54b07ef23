/*
 * cnx/volume.h - typed volume buffers.
 *
 * A volume is a dense array of one data type placed at a box of a layer's
 * global frame: x fastest, then y, then z, then channel (the precomputed
 * `raw` order). Kernels take and return volumes; they never do I/O.
 */
#ifndef CNX_VOLUME_H
#define CNX_VOLUME_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/geom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cnx_dtype {
    CNX_DT_UINT8 = 1,
    CNX_DT_UINT16 = 2,
    CNX_DT_UINT32 = 3,
    CNX_DT_UINT64 = 4,
    CNX_DT_FLOAT32 = 5,
} cnx_dtype;

/** @return bytes per element (1, 2, 4, 8, 4), or 0 for an unknown type. */
size_t cnx_dtype_size(cnx_dtype dtype);
/** @return "uint8", ..., "float32", or NULL for an unknown type. */
const char *cnx_dtype_name(cnx_dtype dtype);
/** Parse a precomputed data_type name. @return 0 or CNX_EINVAL. */
int cnx_dtype_parse(const char *name, cnx_dtype *out);

typedef struct cnx_volume {
    cnx_dtype dtype;
    cnx_box box;      /* where the data lies in the global frame */
    int64_t channels; /* >= 1 */
    void *data;       /* owned; box voxels * channels * dtype size bytes */
} cnx_volume;

/**
 * Allocate a zero-filled volume covering box.
 * @param[out] out  caller frees with cnx_volume_free()
 * @return 0; CNX_EINVAL for an empty box, bad type or channels < 1;
 *         CNX_ETOOBIG over 2^40 bytes; CNX_ENOMEM.
 */
int cnx_volume_new(cnx_volume **out, cnx_dtype dtype, const cnx_box *box,
                   int64_t channels);
/** Free a volume and its data. Accepts NULL. */
void cnx_volume_free(cnx_volume *vol);
/** @return number of voxels per channel. */
int64_t cnx_volume_voxels(const cnx_volume *vol);
/** @return total bytes of data. */
size_t cnx_volume_bytes(const cnx_volume *vol);
/** @return the linear element index of global voxel (x, y, z), channel c. */
static inline int64_t cnx_volume_index(const cnx_volume *vol, int64_t x,
                                       int64_t y, int64_t z, int64_t c)
{
    const int64_t sx = vol->box.max[0] - vol->box.min[0];
    const int64_t sy = vol->box.max[1] - vol->box.min[1];
    const int64_t sz = vol->box.max[2] - vol->box.min[2];
    return (x - vol->box.min[0]) +
           sx * ((y - vol->box.min[1]) +
                 sy * ((z - vol->box.min[2]) + sz * c));
}
/**
 * Copy the voxels of the intersection of src->box and dst->box (all
 * channels) from src to dst. Types and channel counts must agree.
 * @return 0, or CNX_EINVAL on a type or channel mismatch.
 */
int cnx_volume_copy(cnx_volume *dst, const cnx_volume *src);
/**
 * Copy the part of src inside box into a new volume with that box.
 * @return 0; CNX_ERANGE if box is not inside src->box; CNX_ENOMEM.
 */
int cnx_volume_crop(cnx_volume **out, const cnx_volume *src,
                    const cnx_box *box);

#ifdef __cplusplus
}
#endif
#endif
