/*
 * shard_stage.c - the shard stage: one shard of a sharded layer per task.
 *
 * The planner gives the output scale its sharding (cnx_sharding_choose over
 * the input grid, workflow_plan.c) and cuts the stage's region into the
 * shards' grid blocks, so a task is exactly one shard: the only writer of
 * "<key>/<shard>.shard". The task reads each chunk of its roi as stored
 * (cnx_stage_get: the bytes of the unsharded input scale, digest-checked,
 * never decoded), keys it by its compressed Morton code and encodes the
 * shard (cnx_shard_encode, deterministic); a shard with no chunk is not
 * written. Input and output share type, data type, encoding and geometry,
 * so a chunk's bytes mean the same in both. Task input errors are fatal
 * (CNX_ESCHEMA); storage errors keep their own flag.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/sharded.h"
#include "cnx/stages.h"
#include "json_int.h"
#include "stage_int.h"

#define ROLE "source"

int cnx__shard_params(const char *text, cnx_sharding_target *target)
{
    static const char *const keys[] = {"shard_bytes", "minishard_chunks", NULL};
    json_t *js = NULL;
    const json_t *v;
    int rc;

    memset(target, 0, sizeof(*target));
    if (text == NULL)
        return 0;
    rc = cnx__json_parse(&js, text, strlen(text), CNX_ESCHEMA,
                         "shard: parameters");
    if (rc != 0)
        return rc;
    if (!json_is_object(js)) {
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "shard: parameters: must be an object");
        goto done;
    }
    rc = cnx__json_only_keys(js, keys, CNX_ESCHEMA, "shard: parameters");
    if (rc != 0)
        goto done;
    v = json_object_get(js, "shard_bytes");
    if (v != NULL) {
        if (!cnx__json_int_in(v, 1, INT64_MAX)) {
            rc = cnx_error_set(CNX_ESCHEMA, 0,
                               "shard: parameters.shard_bytes: must be an "
                               "integer >= 1");
            goto done;
        }
        target->shard_bytes = (uint64_t)json_integer_value(v);
    }
    v = json_object_get(js, "minishard_chunks");
    if (v != NULL) {
        if (!cnx__json_int_in(v, 1, 1 << 20)) {
            rc = cnx_error_set(CNX_ESCHEMA, 0,
                               "shard: parameters.minishard_chunks: must be "
                               "an integer in [1, 1048576]");
            goto done;
        }
        target->minishard_chunks = (uint64_t)json_integer_value(v);
    }
done:
    json_decref(js);
    return rc;
}

static int run_shard(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *in = cnx_task_input_get(task, ROLE);
    cnx_layer *in_layer = cnx_stage_input_layer(io, ROLE);
    const cnx_layer_info *info, *oinfo;
    const cnx_scale *isc, *osc;
    cnx_sharding_target target;
    cnx_shard_chunk *chunks = NULL;
    uint8_t **bytes = NULL, *shard_bytes = NULL;
    cnx_box *boxes = NULL;
    size_t nboxes = 0, shard_len = 0, n = 0;
    uint64_t counts[3], shard = 0, minishard;
    char name[CNX_SHARD_NAME_MAX], object[256 + CNX_SHARD_NAME_MAX];
    cnx_grid grid;
    int s, os, rc;

    (void)ctx;
    if (in == NULL || in_layer == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "shard: inputs: must be exactly \"source\"");
    rc = cnx__shard_params(task->parameters, &target);
    if (rc != 0)
        return rc;
    if (task->halo != 0)
        return cnx_error_set(CNX_ESCHEMA, 0, "shard: halo: must be 0");
    info = cnx_layer_get_info(in_layer);
    s = cnx_info_find_scale(info, in->scale);
    if (s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "shard: inputs.source.scale: the layer has no "
                             "scale '%.128s'",
                             in->scale);
    isc = &info->scales[s];
    oinfo = cnx_layer_get_info(cnx_stage_output_layer(io));
    os = cnx_stage_output_scale(io);
    if (os < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "shard: output.scale: not in the output layer");
    osc = &oinfo->scales[os];
    if (isc->sharded || !osc->sharded)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "shard: the input scale must be unsharded and "
                             "the output scale sharded");
    if (oinfo->dtype != info->dtype || oinfo->channels != info->channels ||
        osc->encoding != isc->encoding ||
        memcmp(osc->size, isc->size, sizeof(isc->size)) != 0 ||
        memcmp(osc->chunk, isc->chunk, sizeof(isc->chunk)) != 0 ||
        memcmp(osc->voxel_offset, isc->voxel_offset,
               sizeof(isc->voxel_offset)) != 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "shard: output: must have the input's data "
                             "type, channels, encoding and geometry");
    if (osc->sharding.hash != CNX_SHARD_HASH_IDENTITY)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "shard: output sharding: the hash must be "
                             "identity (a shard is a block of the grid)");
    grid = cnx_info_grid(info, s);
    rc = cnx__stage_chunks(task, &grid, "shard", &boxes, &nboxes);
    if (rc != 0)
        return rc;
    {
        int64_t c[3];
        cnx_grid_counts(&grid, c);
        for (int i = 0; i < 3; i++)
            counts[i] = (uint64_t)c[i];
    }
    chunks = calloc(nboxes, sizeof(*chunks));
    bytes = calloc(nboxes, sizeof(*bytes));
    if (chunks == NULL || bytes == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "shard: out of memory");
        goto done;
    }
    for (size_t k = 0; k < nboxes; k++) {
        char cname[256];
        uint64_t pos[3], id, sh;
        size_t len = 0;
        for (int i = 0; i < 3; i++)
            pos[i] =
                (uint64_t)((boxes[k].min[i] - grid.offset[i]) / grid.chunk[i]);
        rc = cnx_sharding_morton(pos, counts, &id);
        if (rc == 0)
            rc = cnx_layer_chunk_name(info, s, &boxes[k], cname, sizeof(cname));
        if (rc != 0)
            goto done;
        cnx_sharding_locate(&osc->sharding, id, &sh, &minishard);
        if (k == 0) {
            shard = sh;
        } else if (sh != shard) {
            rc = cnx_error_set(CNX_ESCHEMA, 0,
                               "shard: roi: chunk %s is in shard %" PRIu64
                               ", the first in %" PRIu64
                               " (a task is one shard's block)",
                               cname, sh, shard);
            goto done;
        }
        rc = cnx_stage_get(io, ROLE, cname, (size_t)CNX_SHARD_MAX_CHUNK,
                           &bytes[k], &len);
        if (rc != 0)
            goto done;
        chunks[n++] = (cnx_shard_chunk){id, bytes[k], len, NULL, 0};
        cnx_stage_add_voxels(io, cnx_box_voxels(&boxes[k]));
    }
    rc = cnx_shard_encode(&osc->sharding, shard, chunks, n, &shard_bytes,
                          &shard_len);
    if (rc != 0) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "shard: %s",
                           cnx_error_last()->message);
        goto done;
    }
    cnx_sharding_shard_name(&osc->sharding, shard, name);
    snprintf(object, sizeof(object), "%s/%s", osc->key, name);
    rc = cnx_stage_put(io, object, shard_bytes, shard_len);
done:
    for (size_t k = 0; bytes != NULL && k < nboxes; k++)
        free(bytes[k]);
    free(bytes);
    free(chunks);
    free(boxes);
    free(shard_bytes);
    return rc;
}

const cnx_stage cnx_stage_shard = {
    .name = "shard",
    .kernel_version = CNX_SHARD_STAGE_VERSION,
    .run = run_shard,
    .ctx = NULL,
    .help = "Writes one shard of a sharded layer per task: input role\n"
            "\"source\" (an unsharded scale; its chunks are read as\n"
            "stored, never decoded), output the same scale with the\n"
            "sharding the planner chose (identity hash over compressed\n"
            "Morton ids; a task's roi is its shard's block of the grid;\n"
            "halo 0). Writes <key>/<shard>.shard. Parameters: {} or\n"
            "{\"shard_bytes\": N, \"minishard_chunks\": M} (the planner's\n"
            "targets, docs/formats.md \"Writing shards\").",
};
