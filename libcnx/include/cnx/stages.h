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

/*
 * The per-chunk side objects the stages write, <dir>/<scale>/<chunk box>,
 * which a later stage reads with {"stage": ..., "objects": "<dir>"}
 * (docs/workflows.md): one definition for the stages and the planner.
 */
#define CNX_STAGE_FACES_DIR "faces"           /* segment: face records */
#define CNX_STAGE_MAPPING_DIR "agglomeration" /* segment-join: mappings */
#define CNX_STAGE_JOIN_BLOCKS_DIR "blocks"    /* segment-join-block */
#define CNX_STAGE_MESH_INDEX_DIR "mesh_index" /* mesh: the ids per chunk */
#define CNX_STAGE_SYNAPSES_DIR "synapses"     /* synapses: tables */
#define CNX_STAGE_ALIGN_MATCHES_DIR "align_matches" /* align-match */
#define CNX_STAGE_ALIGN_TRANSFORMS_DIR "align_transforms" /* align-solve */

/**
 * downsample: one level of a layer's pyramid per task (docs/downsample.md).
 * Input role "source" (the source scale), output {layer, next scale key};
 * roi in source-scale voxels; parameters {} or {"mode": "average"|"mode"}.
 * Adds the next scale to the output layer's info when it is missing.
 */
extern const cnx_stage cnx_stage_downsample;

/**
 * segment, segment-join, segment-relabel: segmentation across chunk seams
 * (cnx/segjoin.h, docs/segment.md). segment: input role "boundary", a
 * task of any aligned run of whole chunks, writes each chunk's uint64
 * fragments and faces/<scale>/<chunk>. segment-join: role "faces" (all
 * face records), writes agglomeration/<scale>/<chunk> and
 * segment_properties/info. segment-relabel: roles "fragments" and
 * "mapping", a task of whole chunks, writes each final chunk. A chunk's
 * bytes do not depend on how many chunks its task covers.
 */
extern const cnx_stage cnx_stage_segment;
extern const cnx_stage cnx_stage_segment_join;
extern const cnx_stage cnx_stage_segment_join_block;
extern const cnx_stage cnx_stage_segment_relabel;

/**
 * mesh, mesh-manifest: Neuroglancer legacy meshes (cnx/mesh.h,
 * docs/mesh.md). mesh: input role "segmentation" (uint64), a task of
 * whole chunks, halo >= 1; writes, per chunk, mesh/<id>:0:<chunk> and
 * mesh_index/<scale>/<chunk> (ids and fragment digests). mesh-manifest:
 * role "index" (every chunk's index); writes mesh/<id>:0 and mesh/info,
 * and the multi-resolution meshes mesh_multires/<id>.index,
 * mesh_multires/<id> and mesh_multires/info.
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
 * align-match, align-solve, align-render: section alignment (cnx/align.h,
 * docs/align.md). align-match: input role "image" (stitched sections,
 * uint8), a task of whole sections, halo 2; writes per slab of sections
 * align_matches/<scale>/<slab>. align-solve: role "matches" (every slab's
 * records); writes align_transforms/<scale>/<slab>. align-render: roles
 * "image" and "transforms", a task of whole sections; writes the aligned
 * image layer's chunks.
 */
extern const cnx_stage cnx_stage_align_match;
extern const cnx_stage cnx_stage_align_solve;
extern const cnx_stage cnx_stage_align_render;

/**
 * synapses, synapse-edges (cnx/synapse.h, docs/synapses.md). synapses:
 * roles "cleft", "psd" (uint8) and "segmentation" (uint64) on one grid, a
 * task of whole chunks with a halo wider than any cleft; writes, per
 * chunk, the clefts it owns, synapses/<scale>/<chunk> (JSON lines).
 * synapse-edges: role "tables" (every chunk's table); writes
 * connectivity/<scale>/<region> and the synapses as a Neuroglancer
 * annotation collection, synapse_annotations/<scale>/<region>/
 * (cnx/annotation.h).
 */
extern const cnx_stage cnx_stage_synapses;
extern const cnx_stage cnx_stage_synapse_edges;

/**
 * shard: one shard of a sharded layer per task (docs/formats.md, "Writing
 * shards"; docs/workflows.md). Input role "source" (an unsharded scale),
 * halo 0, a task's roi one shard's block of the grid (the planner cuts
 * it so); output the same scale with the sharding the planner chose;
 * writes <key>/<shard>.shard from the chunks as stored.
 */
#define CNX_SHARD_STAGE_VERSION 1
extern const cnx_stage cnx_stage_shard;

#ifdef __cplusplus
}
#endif
#endif
