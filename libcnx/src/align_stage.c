/*
 * align_stage.c - the three section-alignment stages (cnx/align.h,
 * cnx/align_io.h, docs/align.md).
 *
 * align-match (map): a task is whole sections (its roi spans the input
 *   scale in x and y) and a run of them in z; halo 2 gives it the two
 *   sections below. Each section z is matched against z - 1 and z - 2
 *   (those inside the layer) and its statistics taken; the records go to
 *   align_matches/<scale>/<chunk>, one object per chunk of the output
 *   scale (whose chunks span whole sections: one object per slab).
 * align-solve (reduce): reads every slab's records, solves the stack, and
 *   writes each slab's transforms and per-section report to
 *   align_transforms/<scale>/<chunk>.
 * align-render (map): a task is whole sections; reads its sections of the
 *   stitched image and their transforms, renders each section and writes
 *   the output image layer's chunks.
 * The output layer of match and solve ("alignment/v1" in the workflows)
 * holds only these side objects; its scale has the input's geometry with
 * chunks of whole sections (worker rules in workflow_plan.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/align.h"
#include "cnx/align_io.h"
#include "cnx/error.h"
#include "cnx/stages.h"

#define MATCHES_DIR CNX_STAGE_ALIGN_MATCHES_DIR
#define TRANSFORMS_DIR CNX_STAGE_ALIGN_TRANSFORMS_DIR

/* The scale of input role (its layer's info and the scale), checked to be
 * one channel of uint8. */
static int image_scale(cnx_stage_io *io, const cnx_task *task,
                       const char *stage, const char *role,
                       const cnx_scale **sc)
{
    const cnx_task_input *in = cnx_task_input_get(task, role);
    cnx_layer *layer = cnx_stage_input_layer(io, role);
    const cnx_layer_info *info;
    int s;
    if (in == NULL || layer == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: inputs: needs role \"%s\" (a layer)", stage,
                             role);
    info = cnx_layer_get_info(layer);
    s = cnx_info_find_scale(info, in->scale);
    if (s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: inputs.%s.scale: the layer has no scale "
                             "'%.128s'",
                             stage, role, in->scale);
    if (info->dtype != CNX_DT_UINT8 || info->channels != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: inputs.%s: must be one channel of uint8 "
                             "(a stitched image)",
                             stage, role);
    *sc = &info->scales[s];
    return 0;
}

/* The task's roi must span the scale in x and y: a task is whole
 * sections. */
static int whole_sections(const cnx_task *task, const cnx_scale *sc,
                          const char *stage)
{
    for (int i = 0; i < 2; i++)
        if (task->roi.min[i] != sc->voxel_offset[i] ||
            task->roi.max[i] != sc->voxel_offset[i] + sc->size[i])
            return cnx_error_set(
                CNX_ESCHEMA, 0,
                "%s: roi: a task must span whole sections (x %" PRId64
                "..%" PRId64 ", y %" PRId64 "..%" PRId64
                "); set the stage's task_size to [65536, 65536, N]",
                stage, sc->voxel_offset[0], sc->voxel_offset[0] + sc->size[0],
                sc->voxel_offset[1], sc->voxel_offset[1] + sc->size[1]);
    return 0;
}

/* The output scale's chunks (slabs of whole sections) inside the roi. */
static int output_slabs(cnx_stage_io *io, const cnx_task *task,
                        const char *stage, cnx_box **slabs, size_t *n)
{
    const cnx_layer_info *o = cnx_layer_get_info(cnx_stage_output_layer(io));
    const int s = cnx_stage_output_scale(io);
    int64_t lo[3], hi[3], g[3];
    cnx_grid grid;
    *slabs = NULL;
    *n = 0;
    if (s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: output layer has no scale '%s'", stage,
                             task->output_scale);
    grid = cnx_scale_grid(&o->scales[s]);
    cnx_grid_chunk_range(&grid, &task->roi, lo, hi);
    if (hi[0] - lo[0] != 1 || hi[1] - lo[1] != 1 || hi[2] <= lo[2])
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: output scale '%s': its chunks must span "
                             "whole sections",
                             stage, task->output_scale);
    *slabs = malloc((size_t)(hi[2] - lo[2]) * sizeof(**slabs));
    if (*slabs == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", stage);
    g[0] = lo[0];
    g[1] = lo[1];
    for (g[2] = lo[2]; g[2] < hi[2]; g[2]++) {
        cnx_box b = cnx_grid_chunk_box(&grid, g);
        /* A task's roi may end inside the last slab only if the slab does
         * too (the edge of the region). */
        if (b.min[2] < task->roi.min[2] || b.max[2] > task->roi.max[2]) {
            free(*slabs);
            *slabs = NULL;
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "%s: roi: z %" PRId64 "..%" PRId64
                                 " is not whole chunks of the output (%" PRId64
                                 " sections each)",
                                 stage, task->roi.min[2], task->roi.max[2],
                                 grid.chunk[2]);
        }
        (*slabs)[(*n)++] = b;
    }
    return 0;
}

/* Section z of a volume read over whole sections. */
static cnx_align_image section_of(const cnx_volume *v, int64_t z)
{
    const int64_t w = v->box.max[0] - v->box.min[0];
    const int64_t h = v->box.max[1] - v->box.min[1];
    cnx_align_image s = {v->box.min[0], v->box.min[1], w, h,
                         (const uint8_t *)v->data +
                             (z - v->box.min[2]) * w * h};
    return s;
}

static int put_object(cnx_stage_io *io, const char *dir, const cnx_task *task,
                      const cnx_box *box, const char *doc)
{
    char name[512];
    int rc =
        cnx_side_object_name(dir, task->output_scale, box, name, sizeof(name));
    if (rc == 0)
        rc = cnx_stage_put(io, name, doc, strlen(doc));
    return rc;
}

/* ---- align-match ------------------------------------------------------- */

/* Match the sections of one slab and write its records. */
static int match_slab(cnx_stage_io *io, const cnx_task *task,
                      const cnx_volume *vol, const cnx_box *slab,
                      const cnx_align_params *p)
{
    const int64_t n = slab->max[2] - slab->min[2];
    cnx_align_slab_matches s;
    char *doc = NULL;
    int rc = 0;

    memset(&s, 0, sizeof(s));
    s.nsections = (size_t)n;
    s.z = calloc((size_t)n, sizeof(*s.z));
    s.stats = calloc((size_t)n, sizeof(*s.stats));
    s.matches = calloc((size_t)(2 * n), sizeof(*s.matches));
    if (s.z == NULL || s.stats == NULL || s.matches == NULL)
        rc = cnx_error_set(CNX_ENOMEM, 0, "align-match: out of memory");
    for (int64_t z = slab->min[2]; rc == 0 && z < slab->max[2]; z++) {
        const cnx_align_image b = section_of(vol, z);
        const size_t k = (size_t)(z - slab->min[2]);
        s.z[k] = z;
        s.stats[k] = cnx_align_stats_of(&b);
        s.grid = cnx_align_grid_of(b.x0, b.y0, b.w, b.h, p);
        for (int64_t d = 1; rc == 0 && d <= 2; d++) {
            cnx_align_match *m = &s.matches[s.nmatches];
            cnx_align_image a;
            if (z - d < vol->box.min[2])
                continue;
            a = section_of(vol, z - d);
            rc = cnx_align_match_sections(&a, &b, p, m);
            m->za = z - d;
            m->zb = z;
            s.nmatches++;
            if (rc != 0)
                cnx_error_wrap("align-match: sections %" PRId64 " and %" PRId64,
                               z - d, z);
        }
    }
    if (rc == 0)
        rc = cnx_align_matches_encode(&s, &doc);
    if (rc == 0)
        rc = put_object(io, MATCHES_DIR, task, slab, doc);
    free(doc);
    cnx_align_slab_matches_free(&s);
    return rc;
}

static int run_match(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_scale *sc = NULL;
    cnx_align_params p;
    cnx_volume *vol = NULL;
    cnx_box *slabs = NULL, box;
    size_t nslabs = 0;
    int rc;

    (void)ctx;
    if (task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "align-match: inputs: must be exactly one role, "
                             "\"image\" (the stitched sections)");
    rc = image_scale(io, task, "align-match", "image", &sc);
    if (rc == 0)
        rc = whole_sections(task, sc, "align-match");
    if (rc == 0 && task->halo < 2)
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "align-match: halo %" PRId64
                           ": must be at least 2 (the two sections below)",
                           task->halo);
    if (rc == 0)
        rc = cnx_align_params_parse(task->parameters, &p);
    if (rc == 0)
        rc = output_slabs(io, task, "align-match", &slabs, &nslabs);
    if (rc != 0)
        return rc;
    /* The task's sections and the two below them, inside the layer. */
    box = task->roi;
    box.min[2] -= 2;
    if (box.min[2] < sc->voxel_offset[2])
        box.min[2] = sc->voxel_offset[2];
    rc = cnx_stage_read(io, "image", &box, &vol);
    for (size_t k = 0; rc == 0 && k < nslabs; k++)
        rc = match_slab(io, task, vol, &slabs[k], &p);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    cnx_volume_free(vol);
    free(slabs);
    return rc;
}

const cnx_stage cnx_stage_align_match = {
    .name = "align-match",
    .kernel_version = CNX_ALIGN_VERSION,
    .run = run_match,
    .ctx = NULL,
    .help = "Matches each section of the task (whole sections, halo 2)\n"
            "against the one and two below it: a coarse translation by\n"
            "masked NCC, then a displacement per node of a regular grid by\n"
            "masked NCC of a patch, with a peak ratio per node and outliers\n"
            "rejected. Input role \"image\" (one channel of uint8, 0 = no\n"
            "data); writes align_matches/<scale>/<slab>. Parameters:\n"
            "cnx_align_params (docs/align.md).",
};

/* ---- align-solve --------------------------------------------------------- */

static void free_slabs(cnx_align_slab_matches *s, size_t n)
{
    for (size_t k = 0; s != NULL && k < n; k++)
        cnx_align_slab_matches_free(&s[k]);
    free(s);
}

/* Gather every slab's records into one list of matches (borrowed from the
 * slabs) and the stack's statistics (sections absent: count 0). */
static int gather(const cnx_align_slab_matches *s, size_t nslabs, int64_t z0,
                  int64_t nz, const cnx_align_grid *grid,
                  cnx_align_match **matches, size_t *nmatches,
                  cnx_align_stats *stats)
{
    size_t total = 0, k = 0;
    for (size_t i = 0; i < nslabs; i++) {
        if (s[i].grid.nx != grid->nx || s[i].grid.ny != grid->ny ||
            s[i].grid.x0 != grid->x0 || s[i].grid.y0 != grid->y0 ||
            s[i].grid.step != grid->step)
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "align-solve: the matches were made on "
                                 "another node grid (other parameters?)");
        total += s[i].nmatches;
        for (size_t j = 0; j < s[i].nsections; j++)
            if (s[i].z[j] >= z0 && s[i].z[j] < z0 + nz)
                stats[s[i].z[j] - z0] = s[i].stats[j];
    }
    *matches = calloc(total + 1, sizeof(**matches));
    if (*matches == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "align-solve: out of memory");
    for (size_t i = 0; i < nslabs; i++)
        for (size_t j = 0; j < s[i].nmatches; j++)
            if (s[i].matches[j].za >= z0 && s[i].matches[j].zb < z0 + nz)
                (*matches)[k++] = s[i].matches[j];
    *nmatches = k;
    return 0;
}

static int run_solve(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *in = cnx_task_input_get(task, "matches");
    const int64_t z0 = task->roi.min[2], nz = task->roi.max[2] - z0;
    cnx_align_slab_matches *slabs = NULL;
    cnx_align_match *matches = NULL;
    cnx_align_stats *stats = NULL;
    cnx_align_solution sol;
    cnx_align_params p;
    cnx_align_grid grid;
    cnx_box *out = NULL;
    size_t nout = 0, nmatches = 0;
    int rc;

    (void)ctx;
    memset(&sol, 0, sizeof(sol));
    if (in == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "align-solve: inputs: must be exactly one role, "
                             "\"matches\" (align-match's records)");
    rc = cnx_align_params_parse(task->parameters, &p);
    if (rc == 0)
        rc = output_slabs(io, task, "align-solve", &out, &nout);
    if (rc != 0)
        return rc;
    grid = cnx_align_grid_of(task->roi.min[0], task->roi.min[1],
                             task->roi.max[0] - task->roi.min[0],
                             task->roi.max[1] - task->roi.min[1], &p);
    slabs = calloc(in->nobjects + 1, sizeof(*slabs));
    stats = calloc((size_t)nz, sizeof(*stats));
    if (slabs == NULL || stats == NULL)
        rc = cnx_error_set(CNX_ENOMEM, 0, "align-solve: out of memory");
    for (size_t k = 0; rc == 0 && k < in->nobjects; k++) {
        uint8_t *data = NULL;
        size_t len = 0;
        rc = cnx_stage_get(io, "matches", in->objects[k].name,
                           CNX_ALIGN_MAX_OBJECT, &data, &len);
        if (rc == 0)
            rc = cnx_align_matches_decode((const char *)data, len,
                                          in->objects[k].name, &slabs[k]);
        free(data);
    }
    if (rc == 0)
        rc = gather(slabs, in->nobjects, z0, nz, &grid, &matches, &nmatches,
                    stats);
    if (rc == 0)
        rc = cnx_align_solve(&grid, z0, nz, matches, nmatches, stats, &p, &sol);
    for (size_t k = 0; rc == 0 && k < nout; k++) {
        char *doc = NULL;
        rc = cnx_align_transforms_encode(
            &sol, (size_t)(out[k].min[2] - z0),
            (size_t)(out[k].max[2] - out[k].min[2]), &doc);
        if (rc == 0)
            rc = put_object(io, TRANSFORMS_DIR, task, &out[k], doc);
        free(doc);
    }
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    cnx_align_solution_free(&sol);
    free(matches);
    free(stats);
    free_slabs(slabs, in->nobjects);
    free(out);
    return rc;
}

const cnx_stage cnx_stage_align_solve = {
    .name = "align-solve",
    .kernel_version = CNX_ALIGN_VERSION,
    .run = run_solve,
    .ctx = NULL,
    .help = "Solves the whole stack (one task per region) from input role\n"
            "\"matches\" (align-match's records): an elastic mesh per\n"
            "section relaxed against its matches, in blocks of sections\n"
            "with overlap; a section without usable matches is marked\n"
            "failed and bridged from its neighbours; per section gain and\n"
            "offset. Writes align_transforms/<scale>/<slab> (transforms\n"
            "and per-section report). Parameters: cnx_align_params.",
};

/* ---- align-render -------------------------------------------------------- */

/* What a render task writes: the output scale in x and y (the stitched
 * sections' box less its negative coordinates, workflow_plan.c), the
 * task's sections in z. */
static int aligned_box(cnx_stage_io *io, const cnx_task *task, cnx_box *box)
{
    const cnx_layer_info *o = cnx_layer_get_info(cnx_stage_output_layer(io));
    const int s = cnx_stage_output_scale(io);
    if (s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "align-render: output layer has no scale '%s'",
                             task->output_scale);
    *box = task->roi;
    for (int i = 0; i < 2; i++) {
        box->min[i] = o->scales[s].voxel_offset[i];
        box->max[i] = box->min[i] + o->scales[s].size[i];
    }
    if (cnx_box_empty(box) || box->min[0] < task->roi.min[0] ||
        box->min[1] < task->roi.min[1] || box->max[0] > task->roi.max[0] ||
        box->max[1] > task->roi.max[1])
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "align-render: the output scale's sections are "
                             "not inside the input's");
    return 0;
}

static int run_render(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *tr = cnx_task_input_get(task, "transforms");
    const cnx_scale *sc = NULL;
    cnx_volume *src = NULL, *out = NULL;
    cnx_box obox;
    int64_t box[4];
    int64_t done = 0;
    int rc;

    (void)ctx;
    if (tr == NULL || task->ninputs != 2)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "align-render: inputs: must be exactly the roles "
                             "\"image\" (stitched sections) and "
                             "\"transforms\" (align-solve's)");
    rc = image_scale(io, task, "align-render", "image", &sc);
    if (rc == 0 && task->halo != 0)
        rc = cnx_error_set(CNX_ESCHEMA, 0, "align-render: halo: must be 0");
    if (rc == 0 && strcmp(task->parameters, "{}") != 0)
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "align-render: parameters: must be {} (the "
                           "transforms carry everything)");
    if (rc == 0)
        rc = whole_sections(task, sc, "align-render");
    if (rc == 0)
        rc = cnx_stage_read(io, "image", &task->roi, &src);
    if (rc == 0)
        rc = aligned_box(io, task, &obox);
    if (rc == 0)
        rc = cnx_volume_new(&out, CNX_DT_UINT8, &obox, 1);
    /* The aligned box of every section of the task (x, y, w, h). */
    box[0] = obox.min[0];
    box[1] = obox.min[1];
    box[2] = obox.max[0] - obox.min[0];
    box[3] = obox.max[1] - obox.min[1];
    for (size_t k = 0; rc == 0 && k < tr->nobjects; k++) {
        uint8_t *data = NULL;
        size_t len = 0;
        cnx_align_solution sol;
        memset(&sol, 0, sizeof(sol));
        rc = cnx_stage_get(io, "transforms", tr->objects[k].name,
                           CNX_ALIGN_MAX_OBJECT, &data, &len);
        if (rc == 0)
            rc = cnx_align_transforms_decode((const char *)data, len,
                                             tr->objects[k].name, &sol);
        for (int64_t i = 0; rc == 0 && i < sol.nz; i++) {
            const cnx_align_section *c = &sol.sections[i];
            cnx_align_image s;
            if (c->z < task->roi.min[2] || c->z >= task->roi.max[2])
                continue;
            s = section_of(src, c->z);
            rc = cnx_align_render(
                &s, &sol.grid, c->dx, c->dy, c->gain, c->offset, box,
                (uint8_t *)out->data +
                    (c->z - task->roi.min[2]) * box[2] * box[3]);
            done++;
        }
        cnx_align_solution_free(&sol);
        free(data);
    }
    if (rc == 0 && done != task->roi.max[2] - task->roi.min[2])
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "align-render: the transforms cover %" PRId64
                           " of the task's %" PRId64 " sections",
                           done, task->roi.max[2] - task->roi.min[2]);
    if (rc == 0)
        rc = cnx_stage_write(io, out);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    cnx_volume_free(src);
    cnx_volume_free(out);
    return rc;
}

const cnx_stage cnx_stage_align_render = {
    .name = "align-render",
    .kernel_version = CNX_ALIGN_VERSION,
    .run = run_render,
    .ctx = NULL,
    .help = "Renders the aligned sections of the task (whole sections,\n"
            "halo 0): each pixel q of section z is the stitched section\n"
            "(role \"image\") sampled bilinearly at q + d_z(q), d_z from\n"
            "align-solve's transforms (role \"transforms\"), corrected by\n"
            "the section's gain and offset. Writes the output image\n"
            "layer's chunks. Parameters: {} (docs/align.md).",
};
