/*
 * stage_int.h - checks and loops the stages share (private to libcnx).
 */
#ifndef CNX_STAGE_INT_H
#define CNX_STAGE_INT_H

#include <stddef.h>

#include "cnx/geom.h"
#include "cnx/sharded.h"
#include "cnx/task.h"

/*
 * The chunks of grid that make up the task's roi, for the stages whose
 * outputs are per chunk (fragments and face records, mappings, meshes and
 * their indexes, synapse tables). The roi must be on the grid: any aligned
 * run of whole chunks (the planner's task size rounded to whole chunks).
 *
 * @param[out] chunks  the chunk boxes in raster order (x fastest, then y,
 *                     z); caller frees with free()
 * @param[out] n       their number, >= 1
 * @return 0; CNX_ESCHEMA naming the stage if the roi is not on the grid
 *         (fatal); CNX_ENOMEM.
 */
int cnx__stage_chunks(const cnx_task *task, const cnx_grid *grid,
                      const char *stage, cnx_box **chunks, size_t *n);

/*
 * The shard stage's parameters ({} or {"shard_bytes": N,
 * "minishard_chunks": M}) as the targets of cnx_sharding_choose: one
 * parser for the stage and the planner (shard_stage.c). NULL text: {}.
 * @return 0; CNX_ESCHEMA naming the key.
 */
int cnx__shard_params(const char *text, cnx_sharding_target *target);

/*
 * The mesh-manifest stage's parameters: {} or {"multires_sharded": bool,
 * "shard_bytes": N, "minishard_segments": M} (the targets of
 * cnx_sharding_choose_ids; only with multires_sharded true): one parser
 * for the stage and the planner (mesh_stage.c). NULL text: {}.
 * @return 0; CNX_ESCHEMA naming the key.
 */
int cnx__mesh_manifest_params(const char *text, int *sharded,
                              cnx_sharding_target *target);

#endif
