/*
 * downsample_stage.c - the downsample stage: one pyramid level per task.
 *
 * A task reads roi (source-scale voxels, on the source chunk grid) from
 * input "source" and writes roi / factor into the next scale of the output
 * layer. Everything is checked before anything is changed: parameters,
 * the source scale, the expected output key, both alignments. The next
 * scale's geometry is a pure function of the source scale
 * (cnx_downsample_next_scale), so the many tasks of one level that race to
 * add it to the info all add the same bytes; cnx_layer_add_scale makes the
 * race safe (compare-and-swap, an identical scale is a no-op). Task input
 * errors are fatal (CNX_ESCHEMA); storage errors keep their own flag.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnx/downsample.h"
#include "cnx/error.h"
#include "cnx/stages.h"
#include "json_int.h"

#define ROLE "source"

/* Re-raise the current error as a fatal task error with a prefix. */
static int task_error(const char *what)
{
    const char *msg = cnx_error_last()->message;
    char why[sizeof(cnx_error_last()->message)];
    if (strncmp(msg, "downsample: ", 12) == 0)
        msg += 12;
    snprintf(why, sizeof(why), "%s", msg);
    return cnx_error_set(CNX_ESCHEMA, 0, "downsample: %s: %s", what, why);
}

/*
 * Parameters: {} or {"mode": "average" | "mode"}. *mode is left alone when
 * the task does not override it.
 */
static int parse_parameters(const char *text, cnx_downsample_mode *mode)
{
    static const char *const keys[] = {"mode", NULL};
    json_t *js = NULL;
    const json_t *v;
    const char *s;
    int rc;

    if (text == NULL)
        return 0;
    rc = cnx__json_parse(&js, text, strlen(text), CNX_ESCHEMA,
                         "downsample: parameters");
    if (rc != 0)
        return rc;
    if (!json_is_object(js)) {
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "downsample: parameters: must be an object");
        goto done;
    }
    rc = cnx__json_only_keys(js, keys, CNX_ESCHEMA, "downsample: parameters");
    if (rc != 0)
        goto done;
    v = json_object_get(js, "mode");
    if (v == NULL)
        goto done;
    s = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "average") == 0) {
        *mode = CNX_DOWNSAMPLE_AVERAGE;
    } else if (strcmp(s, "mode") == 0) {
        *mode = CNX_DOWNSAMPLE_MODE;
    } else {
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "downsample: parameters.mode: must be "
                           "\"average\" or \"mode\"");
    }
done:
    json_decref(js);
    return rc;
}

/* The source scale's index, re-reading the info once if it is missing. */
static int find_source_scale(cnx_layer *layer, const char *key, int *index)
{
    int s = cnx_info_find_scale(cnx_layer_get_info(layer), key);
    if (s < 0) {
        int rc = cnx_layer_reload(layer);
        if (rc != 0)
            return rc;
        s = cnx_info_find_scale(cnx_layer_get_info(layer), key);
    }
    if (s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "downsample: inputs.source.scale: the layer "
                             "has no scale '%.128s'",
                             key);
    *index = s;
    return 0;
}

#ifdef CNX_FAULT_INJECTION
/*
 * Test builds only (CMake CNX_FAULT_INJECTION): with
 * CNX_FAULT_NONDETERMINISTIC=downsample in the environment, flip low bits
 * of the first voxel by the clock, so that the same task gives different
 * bytes from run to run: the fault the controller must report as a
 * reproducibility violation.
 */
static void fault_nondeterministic(cnx_volume *out)
{
    const char *which = getenv("CNX_FAULT_NONDETERMINISTIC");
    struct timespec ts;
    if (which == NULL || strcmp(which, "downsample") != 0 ||
        out->data == NULL)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    ((uint8_t *)out->data)[0] ^= (uint8_t)(1 + ts.tv_nsec % 127);
}
#endif

static int run(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *input = cnx_task_input_get(task, ROLE);
    cnx_layer *src_layer = cnx_stage_input_layer(io, ROLE);
    cnx_layer *out_layer = cnx_stage_output_layer(io);
    const cnx_layer_info *sinfo, *oinfo;
    cnx_downsample_mode mode;
    cnx_volume *in = NULL, *out = NULL;
    cnx_grid sgrid, ogrid;
    cnx_scale next;
    cnx_box obox;
    int64_t factor[3];
    int s = -1, index = -1, rc;

    (void)ctx;
    if (input == NULL || src_layer == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "downsample: inputs: must be exactly one role, "
                             "\"" ROLE "\"");
    if (out_layer == NULL || task->output_scale == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "downsample: output: layer and scale required");
    rc = find_source_scale(src_layer, input->scale, &s);
    if (rc != 0)
        return rc;
    sinfo = cnx_layer_get_info(src_layer);
    oinfo = cnx_layer_get_info(out_layer);
    if (oinfo->type != sinfo->type || oinfo->dtype != sinfo->dtype ||
        oinfo->channels != sinfo->channels)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "downsample: output.layer: type, data type or "
                             "channels differ from the source layer's");
    mode = sinfo->type == CNX_LAYER_SEGMENTATION ? CNX_DOWNSAMPLE_MODE
                                                 : CNX_DOWNSAMPLE_AVERAGE;
    rc = parse_parameters(task->parameters, &mode);
    if (rc != 0)
        return rc;
    if (mode == CNX_DOWNSAMPLE_MODE && sinfo->dtype == CNX_DT_FLOAT32)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "downsample: parameters.mode: \"mode\" needs "
                             "an integer layer, not float32");

    rc = cnx_downsample_next_scale(&sinfo->scales[s], &next);
    if (rc != 0)
        return task_error("inputs.source.scale");
    if (strcmp(task->output_scale, next.key) != 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "downsample: output.scale: '%.128s' is not the "
                             "next scale of '%.128s', which is '%s'",
                             task->output_scale, input->scale, next.key);
    cnx_downsample_factor(sinfo->scales[s].resolution, factor);
    sgrid = cnx_info_grid(sinfo, s);
    if (!cnx_grid_is_aligned(&sgrid, &task->roi))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "downsample: roi: not on the chunk grid of "
                             "source scale '%.128s'",
                             input->scale);
    rc = cnx_downsample_box(&task->roi, factor, &obox);
    if (rc != 0)
        return task_error("roi");
    for (int i = 0; i < 3; i++) {
        ogrid.offset[i] = next.voxel_offset[i];
        ogrid.size[i] = next.size[i];
        ogrid.chunk[i] = next.chunk[i];
    }
    if (!cnx_grid_is_aligned(&ogrid, &obox))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "downsample: roi: its image %lld-%lld_%lld-%lld_"
                             "%lld-%lld is not on the chunk grid of scale "
                             "'%s'",
                             (long long)obox.min[0], (long long)obox.max[0],
                             (long long)obox.min[1], (long long)obox.max[1],
                             (long long)obox.min[2], (long long)obox.max[2],
                             next.key);

    rc = cnx_layer_add_scale(out_layer, &next, &index);
    if (rc != 0)
        return rc;
    rc = cnx_stage_read(io, ROLE, &task->roi, &in);
    if (rc == 0)
        rc = cnx_downsample_volume(&out, in, factor, mode);
#ifdef CNX_FAULT_INJECTION
    if (rc == 0)
        fault_nondeterministic(out);
#endif
    if (rc == 0)
        rc = cnx_stage_write(io, out);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    cnx_volume_free(in);
    cnx_volume_free(out);
    return rc;
}

const cnx_stage cnx_stage_downsample = {
    .name = "downsample",
    .kernel_version = CNX_DOWNSAMPLE_VERSION,
    .run = run,
    .ctx = NULL,
    .help = "Downsamples one level of a precomputed layer's pyramid per\n"
            "task. Input role \"source\" names the layer and the source\n"
            "scale; the roi (source voxels, on its chunk grid) is averaged\n"
            "(images) or reduced to its most frequent label\n"
            "(segmentations) over 2x2x2 or 2x2x1 blocks, as the\n"
            "resolution asks, into output.scale: the next scale, added to\n"
            "the output layer's info if missing. Parameters: {} or\n"
            "{\"mode\": \"average\"|\"mode\"}. See docs/downsample.md.",
};

/* The next scale's geometry lives beside the layer it is added to: the
 * kernel (kernels/downsample.c) knows volumes, not precomputed scales. */
int cnx_downsample_next_scale(const cnx_scale *src, cnx_scale *out)
{
    int64_t f[3];
    int n;

    for (int i = 0; i < 3; i++) {
        if (src->size[i] < 1 || src->chunk[i] < 1 ||
            !(src->resolution[i] > 0.0) || !isfinite(src->resolution[i]))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "downsample: scale '%s': size, chunk and "
                                 "resolution must be positive",
                                 src->key);
    }
    cnx_downsample_factor(src->resolution, f);
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 3; i++) {
        out->resolution[i] = src->resolution[i] * (double)f[i];
        out->size[i] = cnx_ceildiv(src->size[i], f[i]);
        out->voxel_offset[i] = cnx_floordiv(src->voxel_offset[i], f[i]);
        out->chunk[i] = src->chunk[i] / f[i] > 0 ? src->chunk[i] / f[i] : 1;
        out->cseg_block[i] = src->cseg_block[i];
    }
    out->encoding = src->encoding;
    n = snprintf(out->key, sizeof(out->key), "%g_%g_%g", out->resolution[0],
                 out->resolution[1], out->resolution[2]);
    if (n < 0 || (size_t)n >= sizeof(out->key))
        return cnx_error_set(CNX_ERANGE, 0,
                             "downsample: scale key of resolution %g,%g,%g "
                             "is too long",
                             out->resolution[0], out->resolution[1],
                             out->resolution[2]);
    return 0;
}
