/*
 * cnx/submit.h - plan the tasks of one stage over a region and publish
 * them: the region is clipped to the layer, widened to whole chunks and cut
 * by the box generator; each task names every input object it will read
 * (its box plus halo) with that object's digest as stored now.
 */
#ifndef CNX_SUBMIT_H
#define CNX_SUBMIT_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/geom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cnx_submit_opts {
    const char *stage;
    int64_t kernel_version;
    const char *input_role;   /* e.g. "source" */
    const char *layer;        /* input layer URL */
    const char *scale;        /* input scale key (NULL: the first) */
    const char *output_layer; /* NULL: the input layer */
    const char *output_scale; /* required */
    cnx_box roi;              /* in input scale voxels */
    int has_roi;              /* 0: the whole scale */
    int64_t task_size[3];     /* 0: 128 (rounded to chunks) */
    int64_t halo;
    const char *parameters;   /* JSON object text; NULL: {} */
    const char *request;      /* request id */
    const char *deadline;     /* RFC 3339 */
    int64_t retry_budget;
    int urgent;
} cnx_submit_opts;

/**
 * Plan the tasks: one canonical JSON task message per box, in box
 * generator order.
 * @param[out] tasks  array of strings; free each and the array
 */
int cnx_submit_plan(const cnx_submit_opts *opts, char ***tasks,
                    size_t *ntasks);

#ifdef __cplusplus
}
#endif
#endif
