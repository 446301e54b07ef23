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
 * The segment properties document (Neuroglancer's inline form) of j:
 * every segment's id and voxel count ("uint32", or "float32" when a count
 * is over 2^32 - 1), canonical JSON.
 * @param[out] out  caller frees with free()
 * @return 0; CNX_ENOMEM.
 */
int cnx_segjoin_properties_json(const cnx_segjoin *j, char **out);

#ifdef __cplusplus
}
#endif
#endif
