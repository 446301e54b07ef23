/*
 * cnx/stages.h - the stages libcnx ships, ready for cnx_worker_main().
 *
 * Each is a constant cnx_stage (name, kernel version, run function, help)
 * whose run() does its I/O through the worker runtime's cnx_stage_io and
 * its arithmetic in a pure kernel. A worker's main.c passes one of them to
 * cnx_worker_main() and does nothing else.
 */
#ifndef CNX_STAGES_H
#define CNX_STAGES_H

#include "cnx/worker.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * downsample: one level of a layer's pyramid per task (docs/downsample.md).
 * Input role "source" (the source scale), output {layer, next scale key};
 * roi in source-scale voxels; parameters {} or {"mode": "average"|"mode"}.
 * Adds the next scale to the output layer's info when it is missing.
 */
extern const cnx_stage cnx_stage_downsample;

/**
 * segment, segment-join, segment-relabel: segmentation across chunk seams
 * (cnx/segjoin.h, docs/segment.md). segment: input role "boundary", one
 * chunk per task, writes uint64 fragments and faces/<scale>/<chunk>.
 * segment-join: role "faces" (all face records), writes
 * agglomeration/<scale>/<chunk> and segment_properties/info. segment-
 * relabel: roles "fragments" and "mapping", one chunk per task, writes the
 * final chunk.
 */
extern const cnx_stage cnx_stage_segment;
extern const cnx_stage cnx_stage_segment_join;
extern const cnx_stage cnx_stage_segment_relabel;

/**
 * mesh, mesh-manifest: Neuroglancer legacy meshes (cnx/mesh.h,
 * docs/mesh.md). mesh: input role "segmentation" (uint64), one chunk per
 * task, halo >= 1; writes mesh/<id>:0:<chunk> and
 * mesh_index/<scale>/<chunk>. mesh-manifest: role "index" (every chunk's
 * index); writes mesh/<id>:0.
 */
extern const cnx_stage cnx_stage_mesh;
extern const cnx_stage cnx_stage_mesh_manifest;

/**
 * montage: one section per task (task_size [1, 1, 1], halo 0) from input
 * role "tiles", a recorded tile set (cnx/montage.h, docs/montage.md):
 * tiles.json is listed in the task, each tile read is checked against its
 * sha256 there. Writes the stitched section into the output image layer
 * and the report montage/<scale>/<section box>.
 */
extern const cnx_stage cnx_stage_montage;

/**
 * synapses, synapse-edges (cnx/synapse.h, docs/synapses.md). synapses:
 * roles "cleft", "psd" (uint8) and "segmentation" (uint64) on one grid, one
 * chunk per task with a halo wider than any cleft; writes the clefts the
 * chunk owns, synapses/<scale>/<chunk> (JSON lines). synapse-edges: role
 * "tables" (every chunk's table); writes connectivity/<scale>/<region>.
 */
extern const cnx_stage cnx_stage_synapses;
extern const cnx_stage cnx_stage_synapse_edges;

#ifdef __cplusplus
}
#endif
#endif
