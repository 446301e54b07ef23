/*
 * tune_io.c - the only storage access of the tune module: read a ground-
 * truth cube (a segmentation layer and the kernel's input layer over one
 * box) into the buffers cnx_tune_run takes (cnx/tune.h).
 *
 * The two scales must have the same resolution; the box defaults to their
 * common bounds. The whole box is read at once (the kernel needs it
 * whole): memory is 1 or 4 bytes per voxel for the input and 8 for the gt.
 * Missing gt chunks read as 0 (unlabelled, as Neuroglancer shows them);
 * a missing input chunk is an error. Single-threaded; one call per run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/tune.h"

void cnx_tune_data_dispose(cnx_tune_data *d)
{
    if (d == NULL)
        return;
    cnx_volume_free(d->input_buf);
    cnx_volume_free(d->gt_buf);
    memset(d, 0, sizeof(*d));
}

static int same_resolution(const cnx_scale *a, const cnx_scale *b)
{
    return a->resolution[0] == b->resolution[0] &&
           a->resolution[1] == b->resolution[1] &&
           a->resolution[2] == b->resolution[2];
}

/* The input scale: by key, else the first. */
static int input_scale(const cnx_layer_info *info, const cnx_tune_source *src)
{
    int s = src->input_scale != NULL
                ? cnx_info_find_scale(info, src->input_scale)
                : 0;
    if (s < 0)
        return cnx_error_set(CNX_EINVAL, 0, "input %s: no scale '%s'",
                             src->input_url, src->input_scale);
    if ((info->dtype != CNX_DT_UINT8 && info->dtype != CNX_DT_FLOAT32) ||
        info->channels != 1)
        return cnx_error_set(CNX_EINVAL, 0,
                             "input %s: must be uint8 or float32 with one "
                             "channel, not %s with %lld",
                             src->input_url, cnx_dtype_name(info->dtype),
                             (long long)info->channels);
    return s;
}

/* The gt scale: by key (same resolution required), else the first at the
 * input's resolution. */
static int gt_scale(const cnx_layer_info *info, const cnx_tune_source *src,
                    const cnx_scale *in)
{
    int s = -1;
    if ((info->dtype != CNX_DT_UINT64 && info->dtype != CNX_DT_UINT32) ||
        info->channels != 1)
        return cnx_error_set(CNX_EINVAL, 0,
                             "gt %s: must be a uint64 or uint32 "
                             "segmentation with one channel, not %s",
                             src->gt_url, cnx_dtype_name(info->dtype));
    if (src->gt_scale != NULL) {
        s = cnx_info_find_scale(info, src->gt_scale);
        if (s < 0)
            return cnx_error_set(CNX_EINVAL, 0, "gt %s: no scale '%s'",
                                 src->gt_url, src->gt_scale);
    } else {
        for (int i = 0; i < info->nscales && s < 0; i++)
            if (same_resolution(&info->scales[i], in))
                s = i;
    }
    if (s < 0 || !same_resolution(&info->scales[s], in))
        return cnx_error_set(
            CNX_EINVAL, 0,
            "gt %s: %s at the input's resolution %gx%gx%g nm (scale %s)",
            src->gt_url, s < 0 ? "no scale" : "the scale is not",
            in->resolution[0], in->resolution[1], in->resolution[2], in->key);
    return s;
}

static int choose_box(cnx_tune_data *d, const cnx_tune_source *src,
                      const cnx_scale *in, const cnx_scale *gt)
{
    cnx_grid gi = cnx_scale_grid(in), gg = cnx_scale_grid(gt);
    cnx_box bi = cnx_grid_bounds(&gi), bg = cnx_grid_bounds(&gg);
    cnx_box common = cnx_box_intersect(&bi, &bg);
    if (cnx_box_empty(&common))
        return cnx_error_set(CNX_EINVAL, 0,
                             "gt %s and input %s: the scales %s and %s do "
                             "not overlap",
                             src->gt_url, src->input_url, gt->key, in->key);
    if (src->roi == NULL) {
        d->box = common;
    } else if (cnx_box_empty(src->roi) ||
               !cnx_box_contains(&common, src->roi)) {
        return cnx_error_set(
            CNX_EINVAL, 0,
            "roi %lld,%lld,%lld,%lld,%lld,%lld: not a box inside the gt "
            "and input's common box %lld,%lld,%lld,%lld,%lld,%lld",
            (long long)src->roi->min[0], (long long)src->roi->min[1],
            (long long)src->roi->min[2], (long long)src->roi->max[0],
            (long long)src->roi->max[1], (long long)src->roi->max[2],
            (long long)common.min[0], (long long)common.min[1],
            (long long)common.min[2], (long long)common.max[0],
            (long long)common.max[1], (long long)common.max[2]);
    } else {
        d->box = *src->roi;
    }
    if (cnx_box_voxels(&d->box) > CNX_SEGMENT_MAX_VOXELS)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "roi: %lld voxels, over the kernel's limit of "
                             "%lld (give a smaller --roi)",
                             (long long)cnx_box_voxels(&d->box),
                             (long long)CNX_SEGMENT_MAX_VOXELS);
    return 0;
}

/* gt as uint64, whatever its stored width. */
static int widen_gt(cnx_tune_data *d)
{
    cnx_volume *wide = NULL;
    const uint32_t *src;
    uint64_t *dst;
    int64_t n;
    int rc;
    if (d->gt_buf->dtype == CNX_DT_UINT64)
        return 0;
    rc = cnx_volume_new(&wide, CNX_DT_UINT64, &d->box, 1);
    if (rc != 0)
        return rc;
    n = cnx_volume_voxels(d->gt_buf);
    src = d->gt_buf->data;
    dst = wide->data;
    for (int64_t i = 0; i < n; i++)
        dst[i] = src[i];
    cnx_volume_free(d->gt_buf);
    d->gt_buf = wide;
    return 0;
}

int cnx_tune_read(cnx_tune_data *d, const cnx_tune_source *src)
{
    cnx_layer *in = NULL, *gt = NULL;
    const cnx_layer_info *ii, *gi;
    int si, sg, rc;

    memset(d, 0, sizeof(*d));
    rc = cnx_layer_open(&in, src->input_url);
    if (rc != 0) {
        cnx_error_wrap("input %s", src->input_url);
        goto done;
    }
    rc = cnx_layer_open(&gt, src->gt_url);
    if (rc != 0) {
        cnx_error_wrap("gt %s", src->gt_url);
        goto done;
    }
    ii = cnx_layer_get_info(in);
    gi = cnx_layer_get_info(gt);
    si = rc = input_scale(ii, src);
    if (rc < 0)
        goto done;
    sg = rc = gt_scale(gi, src, &ii->scales[si]);
    if (rc < 0)
        goto done;
    rc = choose_box(d, src, &ii->scales[si], &gi->scales[sg]);
    if (rc != 0)
        goto done;
    rc = cnx_layer_read(in, si, &d->box, 0, NULL, NULL, NULL, &d->input_buf);
    if (rc != 0) {
        cnx_error_wrap("input %s", src->input_url);
        goto done;
    }
    rc = cnx_layer_read(gt, sg, &d->box, CNX_READ_FILL_MISSING, NULL, NULL,
                        NULL, &d->gt_buf);
    if (rc != 0) {
        cnx_error_wrap("gt %s", src->gt_url);
        goto done;
    }
    rc = widen_gt(d);
    if (rc != 0)
        goto done;
    snprintf(d->input_scale, sizeof(d->input_scale), "%s", ii->scales[si].key);
    snprintf(d->gt_scale, sizeof(d->gt_scale), "%s", gi->scales[sg].key);
    memcpy(d->resolution, ii->scales[si].resolution, sizeof(d->resolution));
    cnx_box_size(&d->box, d->vol.size);
    d->vol.dtype = ii->dtype;
    d->vol.input = d->input_buf->data;
    d->vol.gt = d->gt_buf->data;
done:
    cnx_layer_free(in);
    cnx_layer_free(gt);
    return rc;
}
