/*
 * synapse_stage.c - the synapse stages (cnx/synapse.h, docs/synapses.md).
 *
 * "synapses" (map, with a halo wider than any cleft; a task is any
 * aligned run of whole chunks): reads roles "cleft", "psd" and
 * "segmentation" over the task's box grown by the halo, once, then for
 * each chunk in raster order runs the kernel on the chunk grown by the
 * halo (cropped from that read) and writes the clefts the chunk owns as a
 * JSON lines table, synapses/<scale>/<chunk>: the bytes a one-chunk task
 * writes. "synapse-edges" (reduce, one task
 * per region): reads every table (role "tables") and writes the region's
 * connectivity, connectivity/<scale>/<region>: one line per (pre, post)
 * pair with its synapse count, and the same synapses as a Neuroglancer
 * annotation collection, synapse_annotations/<scale>/<region>/
 * (cnx/annotation.h), in the coordinate space of the output scale, its
 * indexes sharded or not per the "annotation_sharding" parameter (auto:
 * sharded from CNX_ANNOTATION_SHARD_MIN synapses); the task is the one
 * writer of every shard of its region's collection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/annotation.h"
#include "cnx/error.h"
#include "cnx/stages.h"
#include "cnx/synapse_io.h"
#include "stage_int.h"

#define TABLE_DIR CNX_STAGE_SYNAPSES_DIR
#define EDGES_DIR "connectivity"
#define ANNOTATIONS_DIR "synapse_annotations"
#define TABLE_MAX ((size_t)64 << 20)

/* The grid of role's scale, checking its data type. */
static int role_grid(cnx_stage_io *io, const cnx_task *task, const char *role,
                     cnx_dtype dtype, cnx_grid *grid, double res[3])
{
    const cnx_task_input *in = cnx_task_input_get(task, role);
    cnx_layer *layer = cnx_stage_input_layer(io, role);
    const cnx_layer_info *info;
    int s;
    if (in == NULL || layer == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "synapses: inputs: needs role \"%s\" (a layer)",
                             role);
    info = cnx_layer_get_info(layer);
    s = cnx_info_find_scale(info, in->scale);
    if (s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "synapses: inputs.%s.scale: the layer has no "
                             "scale '%.128s'",
                             role, in->scale);
    if (info->dtype != dtype || info->channels != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "synapses: inputs.%s: must be one channel of %s, "
                             "not %s",
                             role, cnx_dtype_name(dtype),
                             cnx_dtype_name(info->dtype));
    *grid = cnx_info_grid(info, s);
    memcpy(res, info->scales[s].resolution, 3 * sizeof(double));
    return 0;
}

/* One chunk of a synapses task, from the volumes the task read. */
static int one_synapses(cnx_stage_io *io, const cnx_task *task,
                        cnx_volume *const vol[3], const cnx_box *chunk,
                        const cnx_box *bounds, const double res[3],
                        const cnx_synapse_params *params)
{
    cnx_box rbox = cnx_box_grow(chunk, task->halo, bounds);
    cnx_volume *part[3] = {NULL, NULL, NULL};
    cnx_synapse_stats stats;
    cnx_synapse_block b;
    cnx_synapse *syn = NULL;
    char *table = NULL, name[512];
    size_t n = 0, len = 0;
    int rc = 0;

    for (int r = 0; r < 3 && rc == 0; r++)
        rc = cnx_volume_crop(&part[r], vol[r], &rbox);
    if (rc == 0) {
        memset(&b, 0, sizeof(b));
        b.cleft = part[0]->data;
        b.psd = part[1]->data;
        b.seg = part[2]->data;
        for (int i = 0; i < 3; i++) {
            b.origin[i] = rbox.min[i];
            b.size[i] = rbox.max[i] - rbox.min[i];
            b.resolution[i] = res[i];
        }
        b.own = *chunk;
        b.bounds = *bounds;
        rc = cnx_synapse_detect(&b, params, &syn, &n, &stats);
    }
    if (rc == 0)
        rc = cnx_synapse_table_json(syn, n, res, &table, &len);
    if (rc == 0)
        rc = cnx_side_object_name(TABLE_DIR, task->output_scale, chunk, name,
                                  sizeof(name));
    if (rc == 0)
        rc = cnx_stage_put(io, name, table, len);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(chunk));
    free(table);
    free(syn);
    for (int r = 0; r < 3; r++)
        cnx_volume_free(part[r]);
    return rc;
}

static int run_synapses(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    static const char *const roles[3] = {"cleft", "psd", "segmentation"};
    static const cnx_dtype types[3] = {CNX_DT_UINT8, CNX_DT_UINT8,
                                       CNX_DT_UINT64};
    cnx_volume *vol[3] = {NULL, NULL, NULL};
    cnx_synapse_params params;
    cnx_box *chunks = NULL;
    size_t nchunks = 0;
    cnx_grid grid[3];
    cnx_box bounds, rbox;
    double res[3][3];
    int rc = 0;

    (void)ctx;
    if (task->ninputs != 3)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "synapses: inputs: must be exactly the roles "
                             "\"cleft\", \"psd\" and \"segmentation\"");
    for (int r = 0; r < 3 && rc == 0; r++)
        rc = role_grid(io, task, roles[r], types[r], &grid[r], res[r]);
    if (rc != 0)
        return rc;
    for (int r = 1; r < 3; r++)
        if (memcmp(&grid[r], &grid[0], sizeof(grid[0])) != 0 ||
            memcmp(res[r], res[0], sizeof(res[0])) != 0)
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "synapses: inputs.%s: not on the grid of "
                                 "inputs.cleft",
                                 roles[r]);
    rc = cnx_synapse_params_parse(task->parameters, &params);
    if (rc == 0)
        rc = cnx__stage_chunks(task, &grid[0], "synapses", &chunks, &nchunks);
    if (rc != 0)
        return rc;
    /* Read once: every chunk's box grown by the halo lies in the task's. */
    bounds = cnx_grid_bounds(&grid[0]);
    rbox = cnx_box_grow(&task->roi, task->halo, &bounds);
    for (int r = 0; r < 3 && rc == 0; r++)
        rc = cnx_stage_read(io, roles[r], &rbox, &vol[r]);
    for (size_t k = 0; k < nchunks && rc == 0; k++)
        rc = one_synapses(io, task, vol, &chunks[k], &bounds, res[0], &params);
    for (int r = 0; r < 3; r++)
        cnx_volume_free(vol[r]);
    free(chunks);
    return rc;
}

const cnx_stage cnx_stage_synapses = {
    .name = "synapses",
    .kernel_version = CNX_SYNAPSE_VERSION,
    .run = run_synapses,
    .ctx = NULL,
    .help = "Detects synapses in each chunk of the task (any aligned run\n"
            "of whole chunks, read once): connected components\n"
            "of the thresholded \"cleft\" map, a site per cleft (distance-\n"
            "transform maximum), the post-synaptic segment under the \"psd\"\n"
            "map and the pre-synaptic one across the cleft, from role\n"
            "\"segmentation\" (uint64). A cleft is reported by the one chunk\n"
            "holding its first voxel; the halo must exceed the largest\n"
            "cleft. Writes synapses/<scale>/<chunk> (JSON lines).\n"
            "Parameters: {\"cleft_threshold\", \"psd_threshold\",\n"
            "\"min_size\", \"partner_radius\"}. docs/synapses.md.",
};

/* ---- synapse-edges ------------------------------------------------------- */

static int append(cnx_synapse **all, size_t *n, size_t *cap,
                  const cnx_synapse *s, size_t k)
{
    if (k == 0) /* an empty table: s is NULL, nothing to copy */
        return 0;
    if (*n + k > *cap) {
        size_t c = *cap ? *cap : 1024;
        cnx_synapse *p;
        while (c < *n + k)
            c *= 2;
        p = realloc(*all, c * sizeof(*p));
        if (p == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "synapse-edges: out of memory");
        *all = p;
        *cap = c;
    }
    memcpy(*all + *n, s, k * sizeof(*s));
    *n += k;
    return 0;
}

/* The region's synapses as an annotation collection, one object each,
 * under synapse_annotations/<scale>/<region>/, in the coordinate space of
 * the output scale (its voxels, its bounds). */
static int put_annotations(cnx_stage_io *io, const cnx_task *task,
                           const cnx_synapse *s, size_t n,
                           cnx_annotation_layout layout)
{
    const cnx_layer_info *info = cnx_layer_get_info(cnx_stage_output_layer(io));
    int at = cnx_stage_output_scale(io);
    cnx_annotation_objects objs = {NULL, 0};
    cnx_annotation_space sp;
    char dir[512], name[640];
    int rc;

    if (at < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "synapse-edges: output: the layer has no scale "
                             "'%.128s'",
                             task->output_scale);
    for (int i = 0; i < 3; i++) {
        const cnx_scale *sc = &info->scales[at];
        sp.resolution[i] = sc->resolution[i];
        sp.lower[i] = sc->voxel_offset[i];
        sp.upper[i] = sc->voxel_offset[i] + sc->size[i];
    }
    rc = cnx_side_object_name(ANNOTATIONS_DIR, task->output_scale, &task->roi,
                              dir, sizeof(dir));
    if (rc == 0) {
        rc = cnx_annotation_build_layout(s, n, &sp, layout, &objs);
        if (rc != 0)
            cnx_error_wrap("synapse-edges: %s", dir);
    }
    for (size_t i = 0; i < objs.count && rc == 0; i++) {
        snprintf(name, sizeof(name), "%s/%s", dir, objs.items[i].name);
        rc = cnx_stage_put(io, name, objs.items[i].data, objs.items[i].len);
    }
    cnx_annotation_objects_free(&objs);
    return rc;
}

static int run_edges(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *in = cnx_task_input_get(task, "tables");
    cnx_synapse *all = NULL;
    cnx_synapse_edge *edges = NULL;
    size_t n = 0, cap = 0, nedges = 0, len = 0;
    char *text = NULL, name[512];
    cnx_annotation_layout layout;
    int rc = 0;

    (void)ctx;
    if (in == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "synapse-edges: inputs: must be exactly one "
                             "role, \"tables\" (the synapse stage's tables)");
    rc = cnx_synapse_edges_params_parse(task->parameters, &layout);
    if (rc != 0)
        return rc;
    for (size_t k = 0; k < in->nobjects && rc == 0; k++) {
        uint8_t *data = NULL;
        cnx_synapse *s = NULL;
        size_t dlen = 0, ns = 0;
        rc = cnx_stage_get(io, "tables", in->objects[k].name, TABLE_MAX, &data,
                           &dlen);
        if (rc == 0)
            rc = cnx_synapse_table_parse((const char *)data, dlen,
                                         in->objects[k].name, &s, &ns);
        if (rc == 0)
            rc = append(&all, &n, &cap, s, ns);
        free(s);
        free(data);
    }
    if (rc == 0)
        rc = cnx_synapse_edges(all, n, &edges, &nedges);
    if (rc == 0)
        rc = cnx_synapse_edges_json(edges, nedges, &text, &len);
    if (rc == 0)
        rc = cnx_side_object_name(EDGES_DIR, task->output_scale, &task->roi,
                                  name, sizeof(name));
    if (rc == 0)
        rc = cnx_stage_put(io, name, text, len);
    if (rc == 0)
        rc = put_annotations(io, task, all, n, layout);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    free(text);
    free(edges);
    free(all);
    return rc;
}

const cnx_stage cnx_stage_synapse_edges = {
    .name = "synapse-edges",
    .kernel_version = CNX_SYNAPSE_EDGES_VERSION,
    .run = run_edges,
    .ctx = NULL,
    .help = "Writes the connectivity of a region (one task per region):\n"
            "input role \"tables\" lists the synapse stage's tables; the\n"
            "output, connectivity/<scale>/<region>, has one JSON line per\n"
            "(pre_id, post_id) pair with its synapse count, sorted, and\n"
            "synapse_annotations/<scale>/<region>/, the synapses as a\n"
            "Neuroglancer precomputed annotation collection (points at\n"
            "the sites, partners as relationships), its indexes sharded\n"
            "or not. Parameters: {\"annotation_sharding\": \"auto\" (sharded\n"
            "from 100000 synapses) | \"on\" | \"off\"}. docs/synapses.md.",
};
