/*
 * montage_stage.c - the montage stage (cnx/montage.h, docs/montage.md).
 *
 * One task per section: input role "tiles" is a recorded tile set
 * (docs/tiles.md), of which the task lists only tiles.json with its digest;
 * every tile of the section is then read checked against the sha256 that
 * tiles.json gives it, so the manifest records each tile's bytes. The
 * kernel registers the overlapping pairs, solves the tile positions and
 * gains, and renders the section; the stage writes it into the output
 * image layer (the tile set's geometry, chunks of one section) and the
 * kernel's report -- solved positions, gains and per-pair residuals -- as
 * montage/<scale>/<section box>.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/imageio.h"
#include "cnx/montage_io.h"
#include "cnx/stages.h"
#include "cnx/tileset.h"

#define REPORT_DIR "montage"

typedef struct section_tiles {
    cnx_montage_tile *tiles;
    cnx_image **images;
    size_t n;
} section_tiles;

static void section_free(section_tiles *st)
{
    for (size_t i = 0; i < st->n; i++)
        cnx_image_free(st->images[i]);
    free(st->images);
    free(st->tiles);
    memset(st, 0, sizeof(*st));
}

/* Read and decode every tile of sec, each checked against its sha256. */
static int read_tiles(cnx_stage_io *io, const cnx_tile_section *sec,
                      section_tiles *out)
{
    int rc = 0;
    out->tiles = calloc(sec->ntiles, sizeof(*out->tiles));
    out->images = calloc(sec->ntiles, sizeof(*out->images));
    if (out->tiles == NULL || out->images == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "montage: out of memory");
    for (size_t i = 0; i < sec->ntiles && rc == 0; i++) {
        const cnx_tile *t = &sec->tiles[i];
        uint8_t *bytes = NULL;
        size_t len = 0;
        char what[320];
        snprintf(what, sizeof(what), "tile %s (%s)", t->id, t->file);
        if (t->sha256[0] == '\0')
            rc = cnx_error_set(CNX_ESCHEMA, 0,
                               "%s has no sha256: the input must be a "
                               "recorded tile set (cnx-ingest --tiles)",
                               what);
        if (rc == 0)
            rc = cnx_stage_get_expect(io, "tiles", t->file, t->sha256, 0,
                                      &bytes, &len);
        if (rc == 0)
            rc = cnx_image_decode(&out->images[i], bytes, len, what);
        free(bytes);
        out->n = i + 1;
        if (rc != 0)
            return cnx_error_wrap("montage");
        if (out->images[i]->bits != 8 || out->images[i]->width != t->width ||
            out->images[i]->height != t->height)
            return cnx_error_set(CNX_ECORRUPT, 0,
                                 "montage: %s is %" PRId64 "x%" PRId64
                                 " at %d bits, the tile set says %" PRId64
                                 "x%" PRId64 " at 8",
                                 what, out->images[i]->width,
                                 out->images[i]->height, out->images[i]->bits,
                                 t->width, t->height);
        out->tiles[i] = (cnx_montage_tile){
            .id = t->id,
            .x = t->x,
            .y = t->y,
            .width = t->width,
            .height = t->height,
            .pixels = out->images[i]->pixels,
        };
    }
    return rc;
}

/* The tile set the task names, parsed. */
static int load_tileset(cnx_stage_io *io, cnx_tileset **ts)
{
    uint8_t *text = NULL;
    size_t len = 0;
    int rc = cnx_stage_get(io, "tiles", CNX_TILESET_NAME, CNX_TILESET_MAX_JSON,
                           &text, &len);
    if (rc == 0)
        rc = cnx_tileset_parse(ts, (const char *)text, len, CNX_TILESET_NAME,
                               CNX_TILESET_MAX_ERROR);
    free(text);
    if (rc != 0)
        return cnx_error_wrap("montage: input tiles");
    if ((*ts)->dtype != CNX_DT_UINT8)
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "montage: input tiles: tiles of %s are not "
                             "supported (uint8 only)",
                             cnx_dtype_name((*ts)->dtype));
    return 0;
}

static int run_montage(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *in = cnx_task_input_get(task, "tiles");
    const cnx_tile_section *sec = NULL;
    cnx_montage_params params;
    cnx_montage_result res;
    section_tiles st;
    cnx_tileset *ts = NULL;
    cnx_volume *vol = NULL;
    char *report = NULL;
    char name[512];
    int64_t w, h;
    int rc;

    (void)ctx;
    memset(&res, 0, sizeof(res));
    memset(&st, 0, sizeof(st));
    if (in == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "montage: inputs: must be exactly one role, "
                             "\"tiles\" (a recorded tile set)");
    if (task->halo != 0)
        return cnx_error_set(CNX_ESCHEMA, 0, "montage: halo: must be 0");
    if (task->roi.max[2] - task->roi.min[2] != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "montage: roi: a task is one section (z extent "
                             "1; set the stage's task_size to [1, 1, 1])");
    rc = cnx_montage_params_parse(task->parameters, &params);
    if (rc == 0)
        rc = load_tileset(io, &ts);
    for (size_t s = 0; rc == 0 && s < ts->nsections; s++)
        if (ts->sections[s].z == task->roi.min[2])
            sec = &ts->sections[s];
    if (rc == 0 && cnx_stage_output_scale(io) < 0)
        rc = cnx_error_set(CNX_ESCHEMA, 0, "montage: output layer has no "
                                           "scale '%s'",
                           task->output_scale);
    if (rc == 0)
        rc = cnx_volume_new(&vol, CNX_DT_UINT8, &task->roi, 1);
    if (rc != 0)
        goto done;
    w = task->roi.max[0] - task->roi.min[0];
    h = task->roi.max[1] - task->roi.min[1];
    /* A section the tile set lacks is written black, with an empty
     * report, so the layer has no holes. */
    if (sec != NULL) {
        rc = read_tiles(io, sec, &st);
        if (rc == 0)
            rc = cnx_montage_solve(st.tiles, st.n, &params, &res);
        if (rc == 0)
            rc = cnx_montage_render(st.tiles, st.n, &res, task->roi.min[0],
                                    task->roi.min[1], w, h, vol->data);
    }
    if (rc == 0)
        rc = cnx_montage_report_json(st.tiles, &res, task->roi.min[2],
                                     &report);
    if (rc == 0)
        rc = cnx_stage_write(io, vol);
    if (rc == 0)
        rc = cnx_side_object_name(REPORT_DIR, task->output_scale, &task->roi,
                                  name, sizeof(name));
    if (rc == 0)
        rc = cnx_stage_put(io, name, report, strlen(report));
    if (rc == 0)
        cnx_stage_add_voxels(io, w * h);
done:
    free(report);
    cnx_volume_free(vol);
    cnx_montage_result_free(&res);
    section_free(&st);
    cnx_tileset_free(ts);
    return rc;
}

const cnx_stage cnx_stage_montage = {
    .name = "montage",
    .kernel_version = CNX_MONTAGE_VERSION,
    .run = run_montage,
    .ctx = NULL,
    .help = "Stitches one section per task (task_size [1, 1, 1], halo 0)\n"
            "from input role \"tiles\", a recorded tile set: registers every\n"
            "overlapping tile pair, solves tile positions (loop closure)\n"
            "and per-tile gain and offset, and renders the section into the\n"
            "output image layer; the solved positions, gains and pair\n"
            "residuals go to montage/<scale>/<section box>. Parameters:\n"
            "{\"search\", \"min_peak_ratio\", \"max_residual\",\n"
            "\"normalize\"}. docs/montage.md.",
};
