/*
 * segment_stage.c - the three segmentation stages (cnx/segjoin.h,
 * docs/segment.md): fragments per chunk with face records, the join over
 * all chunk faces, and the relabelling of each chunk.
 *
 * Every task of "segment" and "segment-relabel" is one chunk of its input
 * scale (the face records and mappings are per chunk); "segment-join" is
 * one task over the region. Task errors are fatal (CNX_ESCHEMA); storage
 * errors keep their own retriable flag.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/segjoin.h"
#include "cnx/stages.h"
#include "stage_int.h"

#define FACES_DIR "faces"
#define MAPPING_DIR "agglomeration"
#define PROPERTIES "segment_properties/info"
#define SIDE_MAX ((size_t)64 << 20) /* a face record or mapping, bytes */

/* The scale an input role reads, with its index. */
static int input_scale(cnx_stage_io *io, const cnx_task *task,
                       const char *stage, const char *role,
                       const cnx_layer_info **info, int *s)
{
    const cnx_task_input *in = cnx_task_input_get(task, role);
    cnx_layer *layer = cnx_stage_input_layer(io, role);
    if (in == NULL || layer == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0, "%s: inputs: needs role \"%s\"",
                             stage, role);
    *info = cnx_layer_get_info(layer);
    *s = cnx_info_find_scale(*info, in->scale);
    if (*s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: inputs.%s.scale: the layer has no scale "
                             "'%.128s'",
                             stage, role, in->scale);
    return 0;
}

/* The output must be a one-channel uint64 segmentation. */
static int check_output(cnx_stage_io *io, const char *stage, int need_scale)
{
    const cnx_layer_info *o = cnx_layer_get_info(cnx_stage_output_layer(io));
    if (o->type != CNX_LAYER_SEGMENTATION || o->dtype != CNX_DT_UINT64 ||
        o->channels != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: output.layer: must be a uint64 "
                             "segmentation",
                             stage);
    if (need_scale && cnx_stage_output_scale(io) < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: output.scale: not in the output layer",
                             stage);
    return 0;
}

static int parse_params(const cnx_task *task, cnx_segment_params *p)
{
    cnx_segment_params_default(p);
    return cnx_segment_params_parse(p, task->parameters);
}

/* Boundary values in [0, 1] for the volume read. */
static int to_boundary(const cnx_volume *in, const cnx_segment_params *p,
                       float **out)
{
    int64_t size[3];
    int rc;
    cnx_box_size(&in->box, size);
    *out = malloc((size_t)cnx_volume_voxels(in) * sizeof(**out));
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    if (in->dtype == CNX_DT_UINT8)
        rc = cnx_segment_boundary_u8(in->data, size, p, *out);
    else
        rc = cnx_segment_boundary_f32(in->data, size, p, *out);
    if (rc != 0) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- segment: fragments and face records -------------------------------- */

static int run_fragments(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_layer_info *info;
    cnx_segment_params p;
    cnx_volume *in = NULL, *out = NULL;
    float *boundary = NULL;
    uint8_t *face = NULL;
    size_t face_len = 0;
    cnx_grid grid;
    cnx_box bounds, bbox;
    char name[512];
    int s, rc;

    (void)ctx;
    rc = input_scale(io, task, "segment", "boundary", &info, &s);
    if (rc == 0 && ((info->dtype != CNX_DT_UINT8 &&
                     info->dtype != CNX_DT_FLOAT32) ||
                    info->channels != 1))
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "segment: inputs.boundary: must be one channel of "
                           "uint8 or float32, not %s x%lld",
                           cnx_dtype_name(info->dtype),
                           (long long)info->channels);
    if (rc == 0)
        rc = check_output(io, "segment", 1);
    if (rc == 0)
        rc = parse_params(task, &p);
    if (rc != 0)
        return rc;
    grid = cnx_info_grid(info, s);
    rc = cnx__stage_one_chunk(task, &grid, "segment");
    if (rc != 0)
        return rc;
    bounds = cnx_grid_bounds(&grid);
    bbox = cnx_box_grow(&task->roi, task->halo, &bounds);
    rc = cnx_stage_read(io, "boundary", &bbox, &in);
    if (rc == 0)
        rc = to_boundary(in, &p, &boundary);
    if (rc == 0)
        rc = cnx_volume_new(&out, CNX_DT_UINT64, &task->roi, 1);
    if (rc == 0)
        rc = cnx_segjoin_fragments(boundary, &bbox, &task->roi, &p, out->data,
                                   &face, &face_len);
    if (rc == 0)
        rc = cnx_stage_write(io, out);
    if (rc == 0)
        rc = cnx_side_object_name(FACES_DIR, task->output_scale, &task->roi,
                                  name, sizeof(name));
    if (rc == 0)
        rc = cnx_stage_put(io, name, face, face_len);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    free(face);
    free(boundary);
    cnx_volume_free(in);
    cnx_volume_free(out);
    return rc;
}

const cnx_stage cnx_stage_segment = {
    .name = "segment",
    .kernel_version = CNX_SEGMENT_VERSION,
    .run = run_fragments,
    .ctx = NULL,
    .help = "Segments one chunk per task into fragments: the\n"
            "segmentation kernel (seeded watershed, region graph, greedy\n"
            "agglomeration, cleanup; docs/segment.md) on input role\n"
            "\"boundary\" (uint8 or float32; a raw EM image with\n"
            "{\"raw_input\": true}) grown by the task's halo, cropped to\n"
            "the chunk, with ids derived from geometry. Writes the chunk\n"
            "(uint64) and its face record faces/<scale>/<chunk> for\n"
            "segment-join. Parameters: cnx_segment_params (docs/segment.md).",
};

/* ---- segment-join --------------------------------------------------------- */

static void free_inputs(cnx_segjoin_input *in, size_t n)
{
    for (size_t k = 0; in != NULL && k < n; k++)
        free((void *)in[k].data);
    free(in);
}

static int run_join(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *faces = cnx_task_input_get(task, "faces");
    cnx_segjoin_input *in = NULL;
    cnx_segment_params p;
    cnx_segjoin j;
    char *props = NULL;
    int64_t voxels = 0;
    int rc;

    (void)ctx;
    memset(&j, 0, sizeof(j));
    if (faces == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "segment-join: inputs: must be exactly one role, "
                             "\"faces\" (the face records of segment)");
    rc = check_output(io, "segment-join", 0);
    if (rc == 0)
        rc = parse_params(task, &p);
    if (rc != 0)
        return rc;
    in = calloc(faces->nobjects ? faces->nobjects : 1, sizeof(*in));
    if (in == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment-join: out of memory");
    for (size_t k = 0; k < faces->nobjects && rc == 0; k++) {
        uint8_t *data = NULL;
        in[k].name = faces->objects[k].name;
        rc = cnx_stage_get(io, "faces", in[k].name, SIDE_MAX, &data,
                           &in[k].len);
        in[k].data = data;
    }
    if (rc == 0)
        rc = cnx_segjoin_run(in, faces->nobjects, &p, &j);
    for (size_t k = 0; k < j.nchunks && rc == 0; k++) {
        uint8_t *map = NULL;
        size_t len = 0;
        char name[512];
        rc = cnx_segjoin_mapping_encode(&j, k, &map, &len);
        if (rc == 0)
            rc = cnx_side_object_name(MAPPING_DIR, task->output_scale,
                                      &j.chunks[k], name, sizeof(name));
        if (rc == 0)
            rc = cnx_stage_put(io, name, map, len);
        voxels += cnx_box_voxels(&j.chunks[k]);
        free(map);
    }
    if (rc == 0)
        rc = cnx_segjoin_properties_json(&j, &props);
    if (rc == 0)
        rc = cnx_stage_put(io, PROPERTIES, props, strlen(props));
    if (rc == 0)
        cnx_stage_add_voxels(io, voxels);
    free(props);
    cnx_segjoin_free(&j);
    free_inputs(in, faces->nobjects);
    return rc;
}

const cnx_stage cnx_stage_segment_join = {
    .name = "segment-join",
    .kernel_version = CNX_SEGMENT_VERSION,
    .run = run_join,
    .ctx = NULL,
    .help = "Joins the fragments of all chunks across their shared faces\n"
            "(one task per region): input role \"faces\" lists the face\n"
            "records segment wrote; an edge whose mean boundary value is\n"
            "below merge_threshold joins its fragments (union-find; a\n"
            "segment's id is its least fragment id). Writes one mapping\n"
            "per chunk, agglomeration/<scale>/<chunk>, and\n"
            "segment_properties/info (voxel counts). Parameters: the\n"
            "segment stage's.",
};

/* ---- segment-relabel -------------------------------------------------------- */

static int run_relabel(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *mapping = cnx_task_input_get(task, "mapping");
    const cnx_layer_info *info;
    cnx_volume *vol = NULL;
    uint8_t *map = NULL;
    size_t len = 0;
    char name[512];
    cnx_grid grid;
    int s, rc;

    (void)ctx;
    rc = input_scale(io, task, "segment-relabel", "fragments", &info, &s);
    if (rc == 0 && (mapping == NULL || task->ninputs != 2))
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "segment-relabel: inputs: must be \"fragments\" "
                           "and \"mapping\"");
    if (rc == 0 && (info->dtype != CNX_DT_UINT64 || info->channels != 1))
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "segment-relabel: inputs.fragments: must be "
                           "uint64");
    if (rc == 0)
        rc = check_output(io, "segment-relabel", 1);
    if (rc == 0 && task->parameters != NULL &&
        strcmp(task->parameters, "{}") != 0)
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "segment-relabel: parameters: must be {}");
    if (rc != 0)
        return rc;
    grid = cnx_info_grid(info, s);
    rc = cnx__stage_one_chunk(task, &grid, "segment-relabel");
    if (rc == 0)
        rc = cnx_side_object_name(MAPPING_DIR, mapping->scale, &task->roi,
                                  name, sizeof(name));
    if (rc == 0)
        rc = cnx_stage_get(io, "mapping", name, SIDE_MAX, &map, &len);
    if (rc == 0)
        rc = cnx_stage_read(io, "fragments", &task->roi, &vol);
    if (rc == 0) {
        rc = cnx_segjoin_relabel(vol->data, (size_t)cnx_volume_voxels(vol),
                                 map, len);
        if (rc != 0)
            cnx_error_wrap("segment-relabel: %s", name);
    }
    if (rc == 0)
        rc = cnx_stage_write(io, vol);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    free(map);
    cnx_volume_free(vol);
    return rc;
}

const cnx_stage cnx_stage_segment_relabel = {
    .name = "segment-relabel",
    .kernel_version = CNX_SEGMENT_VERSION,
    .run = run_relabel,
    .ctx = NULL,
    .help = "Relabels one chunk per task: input role \"fragments\" (the\n"
            "segment stage's chunk) through input role \"mapping\" (the\n"
            "chunk's agglomeration/<scale>/<chunk> from segment-join) into\n"
            "the final segmentation. Parameters: {}.",
};
