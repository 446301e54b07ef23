/*
 * cnx/segjoin_io.h - the segment join's JSON document: the segment
 * properties (docs/segment.md). The kernel (cnx/segjoin.h) writes only
 * its binary records; this module owns the JSON.
 */
#ifndef CNX_SEGJOIN_IO_H
#define CNX_SEGJOIN_IO_H

#include "cnx/segjoin.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The segment properties document (Neuroglancer's inline form) of j, in
 * segment id order, canonical JSON:
 * - "label" (string): the segment's volume and the voxel its id comes
 *   from, "0.0123 um3 @ 130,7,64" (volume to 3 significant digits from the
 *   voxel count and resolution; the voxel decoded from the id: the first
 *   voxel of the fragment that names it, docs/segment.md);
 * - "voxels" (number): the voxel count ("uint32", or "float32" when a
 *   count is over 2^32 - 1);
 * - "tags": a size class, "small" (< 0.1 um3), "medium" (< 1 um3) or
 *   "large", and "multi_chunk" when its fragments lie in more than one
 *   chunk (so in the join's seams).
 * @param resolution  nm per voxel, x, y, z
 * @param[out] out  caller frees with free()
 * @return 0; CNX_ENOMEM.
 */
int cnx_segjoin_properties_json(const cnx_segjoin *j,
                                const double resolution[3], char **out);

#ifdef __cplusplus
}
#endif
#endif
