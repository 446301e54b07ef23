/*
 * segment_stage.c - the three segmentation stages (cnx/segjoin.h,
 * docs/segment.md): fragments per chunk with face records, the join over
 * all chunk faces, and the relabelling of each chunk.
 *
 * A task of "segment" or "segment-relabel" is any aligned run of whole
 * chunks of its input scale. The face records and mappings are per chunk,
 * so the stage reads the task's box (plus halo) once and then does, chunk
 * by chunk in raster order, exactly what a one-chunk task does: a chunk's
 * bytes do not depend on the task size. "segment-join" is one task over
 * the region. Task errors are fatal (CNX_ESCHEMA); storage errors keep
 * their own retriable flag.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/segjoin.h"
#include "cnx/segjoin_io.h"
#include "cnx/segment_io.h"
#include "cnx/stages.h"
#include "stage_int.h"

#define FACES_DIR CNX_STAGE_FACES_DIR
#define MAPPING_DIR CNX_STAGE_MAPPING_DIR
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

/* The output must be a one-channel uint64 segmentation with the task's
 * output scale. */
static int check_output(cnx_stage_io *io, const char *stage)
{
    const cnx_layer_info *o = cnx_layer_get_info(cnx_stage_output_layer(io));
    if (o->type != CNX_LAYER_SEGMENTATION || o->dtype != CNX_DT_UINT64 ||
        o->channels != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: output.layer: must be a uint64 "
                             "segmentation",
                             stage);
    if (cnx_stage_output_scale(io) < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: output.scale: not in the output layer",
                             stage);
    return 0;
}

/*
 * The task's parameters over the defaults, at resolution (nm per voxel,
 * from the layer's scale: the kernel's lengths are in nm).
 */
static int parse_params(const cnx_task *task, const double resolution[3],
                        const char *stage, cnx_segment_params *p)
{
    int rc = cnx_segment_params_at(p, task->parameters, resolution);
    if (rc == CNX_EINVAL) /* the check, at this resolution */
        return cnx_error_set(CNX_ESCHEMA, 0, "%s: %s", stage,
                             cnx_error_last()->message);
    return rc;
}

/* ---- segment: fragments and face records -------------------------------- */

/*
 * One chunk of a fragments task: the kernel (cnx_segjoin_chunk) on the
 * chunk grown by the halo (clipped to bounds), cropped from what the task
 * read; the chunk and its face record written.
 */
static int one_fragments(cnx_stage_io *io, const cnx_task *task,
                         const cnx_volume *in, const cnx_box *chunk,
                         const cnx_box *bounds, const cnx_segment_params *p)
{
    cnx_box bbox = cnx_box_grow(chunk, task->halo, bounds);
    cnx_volume *part = NULL, *out = NULL;
    uint8_t *face = NULL;
    size_t face_len = 0;
    char name[512];
    int rc;

    rc = cnx_volume_crop(&part, in, &bbox);
    if (rc == 0)
        rc = cnx_volume_new(&out, CNX_DT_UINT64, chunk, 1);
    if (rc == 0)
        rc = cnx_segjoin_chunk(part->data, part->dtype, &bbox, chunk, p,
                               out->data, &face, &face_len);
    if (rc == 0)
        rc = cnx_stage_write(io, out);
    if (rc == 0)
        rc = cnx_side_object_name(FACES_DIR, task->output_scale, chunk, name,
                                  sizeof(name));
    if (rc == 0)
        rc = cnx_stage_put(io, name, face, face_len);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(chunk));
    free(face);
    cnx_volume_free(part);
    cnx_volume_free(out);
    return rc;
}

static int run_fragments(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_layer_info *info;
    cnx_segment_params p;
    cnx_volume *in = NULL;
    cnx_box *chunks = NULL;
    size_t nchunks = 0;
    cnx_grid grid;
    cnx_box bounds, rbox;
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
        rc = check_output(io, "segment");
    if (rc == 0)
        rc = parse_params(task, info->scales[s].resolution, "segment", &p);
    if (rc != 0)
        return rc;
    grid = cnx_info_grid(info, s);
    rc = cnx__stage_chunks(task, &grid, "segment", &chunks, &nchunks);
    if (rc != 0)
        return rc;
    /* Read once: the task's box grown by the halo holds every chunk's. */
    bounds = cnx_grid_bounds(&grid);
    rbox = cnx_box_grow(&task->roi, task->halo, &bounds);
    rc = cnx_stage_read(io, "boundary", &rbox, &in);
    for (size_t k = 0; k < nchunks && rc == 0; k++)
        rc = one_fragments(io, task, in, &chunks[k], &bounds, &p);
    cnx_volume_free(in);
    free(chunks);
    return rc;
}

const cnx_stage cnx_stage_segment = {
    .name = "segment",
    .kernel_version = CNX_SEGMENT_VERSION,
    .run = run_fragments,
    .ctx = NULL,
    .help = "Segments each chunk of the task (any aligned run of whole\n"
            "chunks) into fragments: the segmentation kernel (seeded\n"
            "watershed, region graph, greedy agglomeration, cleanup;\n"
            "docs/segment.md) on input role \"boundary\" (uint8 or\n"
            "float32; a raw EM image with {\"raw_input\": true}) over the\n"
            "chunk grown by the task's halo, cropped to the chunk, with ids\n"
            "derived from geometry; lengths in nm at the input scale's\n"
            "resolution. Writes each chunk (uint64) and its face record\n"
            "faces/<scale>/<chunk> for segment-join; a chunk's bytes do not\n"
            "depend on the task size. The planner derives the halo from the\n"
            "parameters (cnx_segment_halo) unless the workflow pins one.\n"
            "Parameters: cnx_segment_params (docs/segment.md).",
};

/* ---- segment-join --------------------------------------------------------- */

static void free_inputs(cnx_segjoin_input *in, size_t n)
{
    for (size_t k = 0; in != NULL && k < n; k++)
        free((void *)in[k].data);
    free(in);
}

/* Read every object the task lists for role into in[] (names borrowed). */
static int read_side(cnx_stage_io *io, const cnx_task_input *objs,
                     const char *role, cnx_segjoin_input **in)
{
    int rc = 0;
    *in = calloc(objs->nobjects ? objs->nobjects : 1, sizeof(**in));
    if (*in == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment-join: out of memory");
    for (size_t k = 0; k < objs->nobjects && rc == 0; k++) {
        uint8_t *data = NULL;
        (*in)[k].name = objs->objects[k].name;
        rc = cnx_stage_get(io, role, (*in)[k].name, SIDE_MAX, &data,
                           &(*in)[k].len);
        (*in)[k].data = data;
    }
    return rc;
}

/* The join's parameters: lengths in nm at the output scale's resolution,
 * the fragments'. */
static int join_params(cnx_stage_io *io, const cnx_task *task,
                       const char *stage, cnx_segment_params *p)
{
    int rc = check_output(io, stage);
    if (rc == 0) {
        const cnx_layer_info *o =
            cnx_layer_get_info(cnx_stage_output_layer(io));
        const cnx_scale *sc = &o->scales[cnx_stage_output_scale(io)];
        rc = parse_params(task, sc->resolution, stage, p);
    }
    return rc;
}

/* Each chunk of j inside roi: its mapping; the voxels it covers. */
static int put_mappings(cnx_stage_io *io, const cnx_task *task,
                        const cnx_segjoin *j, int64_t *voxels)
{
    int rc = 0;
    for (size_t k = 0; k < j->nchunks && rc == 0; k++) {
        uint8_t *map = NULL;
        size_t len = 0;
        char name[512];
        cnx_box in = cnx_box_intersect(&j->chunks[k], &task->roi);
        if (cnx_box_voxels(&in) != cnx_box_voxels(&j->chunks[k]))
            continue; /* a block beyond the region: not this task's */
        rc = cnx_segjoin_mapping_encode(j, k, &map, &len);
        if (rc == 0)
            rc = cnx_side_object_name(MAPPING_DIR, task->output_scale,
                                      &j->chunks[k], name, sizeof(name));
        if (rc == 0)
            rc = cnx_stage_put(io, name, map, len);
        *voxels += cnx_box_voxels(&j->chunks[k]);
        free(map);
    }
    return rc;
}

/*
 * The top of a join as a tree: the level-1 block summaries merged over
 * their whole box (nothing is left open), then each block's chunks'
 * mappings, one block at a time, and the segment properties.
 */
static int join_tree_top(cnx_stage_io *io, const cnx_task *task,
                         const cnx_segjoin_input *in, size_t n,
                         const cnx_segment_params *p, cnx_segjoin *all,
                         int64_t *voxels)
{
    cnx_box region, b;
    cnx_segjoin_input top = {NULL, 0, "the top"};
    cnx_segjoin_tree *t = NULL;
    uint8_t *bytes = NULL;
    int rc = n > 0 ? 0
                   : cnx_error_set(CNX_ESCHEMA, 0,
                                   "segment-join: inputs.blocks: no block "
                                   "summary");
    for (size_t k = 0; k < n && rc == 0; k++) {
        rc = cnx_segjoin_summary_box(&in[k], &b, NULL);
        region = k == 0 ? b : cnx_box_hull(&region, &b);
    }
    if (rc == 0)
        rc = cnx_segjoin_merge(in, n, &region, &region, p, &bytes, &top.len);
    top.data = bytes;
    if (rc == 0)
        rc = cnx_segjoin_tree_open(&top, 1, &t);
    if (rc == 0)
        rc = cnx_segjoin_tree_segments(t, all);
    for (size_t k = 0; k < n && rc == 0; k++) {
        cnx_segjoin j;
        memset(&j, 0, sizeof(j));
        rc = cnx_segjoin_tree_block(t, &in[k], &j);
        if (rc == 0)
            rc = put_mappings(io, task, &j, voxels);
        cnx_segjoin_free(&j);
    }
    cnx_segjoin_tree_free(t);
    free(bytes);
    return rc;
}

static int run_join(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *faces = cnx_task_input_get(task, "faces");
    const cnx_task_input *blocks = cnx_task_input_get(task, "blocks");
    const cnx_task_input *objs = faces ? faces : blocks;
    cnx_segjoin_input *in = NULL;
    cnx_segment_params p;
    cnx_segjoin j;
    char *props = NULL;
    int64_t voxels = 0;
    int rc;

    (void)ctx;
    memset(&j, 0, sizeof(j));
    if (objs == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "segment-join: inputs: must be exactly one role, "
                             "\"faces\" (the face records of segment) or "
                             "\"blocks\" (the summaries of "
                             "segment-join-block)");
    rc = join_params(io, task, "segment-join", &p);
    if (rc != 0)
        return rc;
    rc = read_side(io, objs, faces ? "faces" : "blocks", &in);
    if (rc == 0 && faces != NULL) {
        rc = cnx_segjoin_run(in, faces->nobjects, &p, &j);
        if (rc == 0)
            rc = put_mappings(io, task, &j, &voxels);
    } else if (rc == 0) {
        rc = join_tree_top(io, task, in, blocks->nobjects, &p, &j, &voxels);
    }
    if (rc == 0)
        rc = cnx_segjoin_properties_json(&j, p.resolution, &props);
    if (rc == 0)
        rc = cnx_stage_put(io, PROPERTIES, props, strlen(props));
    if (rc == 0)
        cnx_stage_add_voxels(io, voxels);
    free(props);
    cnx_segjoin_free(&j);
    free_inputs(in, objs->nobjects);
    return rc;
}

/*
 * segment-join-block: one block's summary from the face records of its
 * chunks and of the chunks beside it (the halo lists them). The region is
 * the box of every record the task lists: a face with no record beyond it
 * leads nowhere. (The kernel merges summaries at any level, but a level
 * between the blocks and the top would need the region, which a task does
 * not carry: the workflows have two levels, and segment-join reading the
 * summaries is the top.)
 */
static int run_join_block(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *faces = cnx_task_input_get(task, "faces");
    cnx_segjoin_input *in = NULL;
    cnx_segment_params p;
    cnx_box region = task->roi;
    uint8_t *out = NULL;
    size_t len = 0;
    char name[512];
    int rc;

    (void)ctx;
    if (faces == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "segment-join-block: inputs: must be exactly "
                             "one role, \"faces\" (the face records of "
                             "segment)");
    rc = join_params(io, task, "segment-join-block", &p);
    if (rc == 0)
        rc = read_side(io, faces, "faces", &in);
    for (size_t k = 0; k < faces->nobjects && rc == 0; k++) {
        /* <dir>/<scale>/<chunk box> */
        const char *slash = strrchr(in[k].name, '/');
        cnx_box c;
        if (cnx_box_parse(slash ? slash + 1 : in[k].name, &c) != 0)
            rc = cnx_error_set(CNX_ESCHEMA, 0,
                               "segment-join-block: inputs.faces: '%.200s' "
                               "is not a chunk's face record",
                               in[k].name);
        else
            region = cnx_box_hull(&region, &c);
    }
    if (rc == 0)
        rc = cnx_segjoin_block(in, faces->nobjects, &task->roi, &region, &p,
                               &out, &len);
    if (rc == 0)
        rc = cnx_side_object_name(CNX_STAGE_JOIN_BLOCKS_DIR,
                                  task->output_scale, &task->roi, name,
                                  sizeof(name));
    if (rc == 0)
        rc = cnx_stage_put(io, name, out, len);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    free(out);
    free_inputs(in, faces->nobjects);
    return rc;
}

const cnx_stage cnx_stage_segment_join_block = {
    .name = "segment-join-block",
    .kernel_version = CNX_SEGJOIN_VERSION,
    .run = run_join_block,
    .ctx = NULL,
    .help = "One block of the join as a tree (map, one block of whole\n"
            "chunks per task, halo 1): input role \"faces\" lists the face\n"
            "records of the block's chunks and of the chunks beside it;\n"
            "writes the block's summary blocks/<scale>/<block> (what the\n"
            "level above needs: the components reaching the block's faces,\n"
            "the seam edges leaving it, voxel counts, and each fragment's\n"
            "segment or open component). segment-join with role \"blocks\"\n"
            "is the top. Parameters as segment.\n",
};

const cnx_stage cnx_stage_segment_join = {
    .name = "segment-join",
    .kernel_version = CNX_SEGJOIN_VERSION,
    .run = run_join,
    .ctx = NULL,
    .help = "Joins the fragments of all chunks across their shared faces\n"
            "(one task per region): input role \"faces\" lists the face\n"
            "records segment wrote; an edge whose mean boundary value is\n"
            "below merge_threshold joins its fragments (union-find; a\n"
            "segment's id is its least fragment id). Writes one mapping\n"
            "per chunk, agglomeration/<scale>/<chunk>, and\n"
            "segment_properties/info (voxel counts). Parameters: the\n"
            "segment stage's, lengths in nm at the output scale's\n"
            "resolution.",
};

/* ---- segment-relabel -------------------------------------------------------- */

/* One chunk of a relabel task: its fragments, cropped from what the task
 * read, through its mapping. */
static int one_relabel(cnx_stage_io *io, const cnx_task_input *mapping,
                       const cnx_volume *vol, const cnx_box *chunk)
{
    cnx_volume *part = NULL;
    uint8_t *map = NULL;
    size_t len = 0;
    char name[512];
    int rc = cnx_side_object_name(MAPPING_DIR, mapping->scale, chunk, name,
                                  sizeof(name));
    if (rc == 0)
        rc = cnx_stage_get(io, "mapping", name, SIDE_MAX, &map, &len);
    if (rc == 0)
        rc = cnx_volume_crop(&part, vol, chunk);
    if (rc == 0) {
        rc = cnx_segjoin_relabel(part->data, (size_t)cnx_volume_voxels(part),
                                 map, len);
        if (rc != 0)
            cnx_error_wrap("segment-relabel: %s", name);
    }
    if (rc == 0)
        rc = cnx_stage_write(io, part);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(chunk));
    free(map);
    cnx_volume_free(part);
    return rc;
}

static int run_relabel(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *mapping = cnx_task_input_get(task, "mapping");
    const cnx_layer_info *info;
    cnx_volume *vol = NULL;
    cnx_box *chunks = NULL;
    size_t nchunks = 0;
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
        rc = check_output(io, "segment-relabel");
    if (rc == 0 && task->parameters != NULL &&
        strcmp(task->parameters, "{}") != 0)
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "segment-relabel: parameters: must be {}");
    if (rc != 0)
        return rc;
    grid = cnx_info_grid(info, s);
    rc = cnx__stage_chunks(task, &grid, "segment-relabel", &chunks, &nchunks);
    if (rc == 0)
        rc = cnx_stage_read(io, "fragments", &task->roi, &vol);
    for (size_t k = 0; k < nchunks && rc == 0; k++)
        rc = one_relabel(io, mapping, vol, &chunks[k]);
    cnx_volume_free(vol);
    free(chunks);
    return rc;
}

const cnx_stage cnx_stage_segment_relabel = {
    .name = "segment-relabel",
    .kernel_version = CNX_SEGMENT_VERSION,
    .run = run_relabel,
    .ctx = NULL,
    .help = "Relabels each chunk of the task (any aligned run of whole\n"
            "chunks; halo 0): input role \"fragments\" (the segment\n"
            "stage's chunks) through input role \"mapping\" (each chunk's\n"
            "agglomeration/<scale>/<chunk> from segment-join) into the\n"
            "final segmentation. Parameters: {}.",
};
