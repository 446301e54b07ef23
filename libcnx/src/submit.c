/*
 * submit.c - task planning for a region of one layer.
 *
 * For every box the generator cuts, the task lists the input objects its
 * box plus halo touches with their current digests (reading each object
 * once per task that needs it). The JSON is assembled with jansson and
 * checked by parsing it back with the task parser, so a planned task is
 * always one a worker accepts.
 */
#include "cnx/submit.h"

#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/task.h"
#include "json_int.h"

static json_t *vec(const int64_t v[3])
{
    return json_pack("[III]", (json_int_t)v[0], (json_int_t)v[1],
                     (json_int_t)v[2]);
}

int cnx_submit_plan(const cnx_submit_opts *o, char ***tasks, size_t *ntasks)
{
    cnx_layer *layer = NULL;
    const cnx_layer_info *info;
    cnx_box *boxes = NULL, roi;
    size_t nboxes = 0, k = 0;
    char **out = NULL;
    json_t *params = NULL;
    const char *ptext;
    int64_t task_size[3];
    cnx_grid grid;
    int s, rc;

    *tasks = NULL;
    *ntasks = 0;
    rc = cnx_layer_open(&layer, o->layer);
    if (rc != 0)
        return rc;
    info = cnx_layer_get_info(layer);
    s = o->scale ? cnx_info_find_scale(info, o->scale) : 0;
    if (s < 0) {
        rc = cnx_error_set(CNX_EINVAL, 0, "layer %s has no scale '%s'",
                           o->layer, o->scale);
        goto done;
    }
    grid = cnx_info_grid(info, s);
    roi = o->has_roi ? o->roi : cnx_grid_bounds(&grid);
    for (int i = 0; i < 3; i++) {
        int64_t want = o->task_size[i] > 0 ? o->task_size[i] : 128;
        int64_t c = grid.chunk[i];
        task_size[i] = want < c ? c : (want / c) * c;
    }
    rc = cnx_boxgen(&boxes, &nboxes, &grid, &roi, task_size);
    if (rc != 0)
        goto done;
    ptext = o->parameters ? o->parameters : "{}";
    if (cnx__json_parse(&params, ptext, strlen(ptext), CNX_EINVAL,
                        "parameters") != 0 ||
        !json_is_object(params)) {
        rc = cnx_error_set(CNX_EINVAL, 0, "parameters: must be a JSON object");
        goto done;
    }
    out = calloc(nboxes + 1, sizeof(*out));
    if (out == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        goto done;
    }
    for (k = 0; k < nboxes; k++) {
        cnx_box bounds = cnx_grid_bounds(&grid);
        cnx_box read = cnx_box_grow(&boxes[k], o->halo, &bounds);
        cnx_object_list objs;
        json_t *objects = json_object(), *task;
        cnx_task *check = NULL;
        cnx_object_list_init(&objs);
        rc = cnx_layer_digests(layer, s, &read, &objs);
        for (size_t i = 0; rc == 0 && i < objs.count; i++)
            json_object_set_new(objects, objs.items[i].name,
                                json_string(objs.items[i].digest));
        cnx_object_list_dispose(&objs);
        if (rc != 0) {
            json_decref(objects);
            goto done;
        }
        task = json_pack(
            "{s:s,s:s,s:s,s:I,s:{s:o,s:o},s:I,s:{s:{s:s,s:s,s:o}},"
            "s:{s:s,s:s},s:O,s:s,s:I,s:s}",
            "schema", CNX_TASK_SCHEMA, "request", o->request, "stage",
            o->stage, "kernel_version", (json_int_t)o->kernel_version, "roi",
            "min", vec(boxes[k].min), "max", vec(boxes[k].max), "halo",
            (json_int_t)o->halo, "inputs", o->input_role, "layer", o->layer,
            "scale", info->scales[s].key, "objects", objects, "output",
            "layer", o->output_layer ? o->output_layer : o->layer, "scale",
            o->output_scale, "parameters", params, "deadline", o->deadline,
            "retry_budget", (json_int_t)o->retry_budget, "priority",
            o->urgent ? "urgent" : "bulk");
        out[k] = task ? cnx__json_canonical(task) : NULL;
        json_decref(task);
        if (out[k] == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
            goto done;
        }
        rc = cnx_task_parse(&check, out[k], strlen(out[k]));
        cnx_task_free(check);
        if (rc != 0)
            goto done;
    }
    *tasks = out;
    *ntasks = nboxes;
    out = NULL;
done:
    for (size_t i = 0; out != NULL && i < nboxes; i++)
        free(out[i]);
    free(out);
    free(boxes);
    json_decref(params);
    cnx_layer_free(layer);
    return rc;
}
