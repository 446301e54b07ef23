/*
 * segment_io.c - the segmentation stages' parameters object
 * (cnx/segment_io.h), parsed over the defaults through the kernel's
 * bounds table; the voxel-unit keys of kernel version 1 are refused by
 * name, with their replacement.
 */
#include "cnx/segment_io.h"

#include <assert.h>
#include <string.h>

#include "cnx/error.h"
#include "param_io_int.h"

#define WHAT "segment: parameters"

/* Keys of kernel version 1, in voxels, and what replaced them. */
static const char *const old[][2] = {
    {"sections", "mode (\"sections\" or \"2d\")"},
    {"filter_sigma", "filter_sigma_nm (nm)"},
    {"filter_background", "filter_background_nm (nm)"},
    {"seed_min_distance", "seed_distance_nm (nm)"},
    {"min_size", "min_size_nm3 (nm^3)"},
};
#define NOLD (sizeof(old) / sizeof(old[0]))

static int old_keys(const json_t *js)
{
    for (size_t i = 0; i < NOLD; i++)
        if (json_object_get(js, old[i][0]) != NULL)
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 WHAT ".%s: a voxel-unit key of kernel "
                                      "version 1; use %s",
                                 old[i][0], old[i][1]);
    return 0;
}

int cnx_segment_params_parse(cnx_segment_params *p, const char *json)
{
    const char *refused[NOLD + 1];
    cnx_segment_params tmp;
    size_t n;
    const cnx_param *t = cnx_segment_param_bounds(&n);
    json_t *js = NULL;
    int rc;

    assert(p != NULL);
    for (size_t i = 0; i < NOLD; i++)
        refused[i] = old[i][0];
    refused[NOLD] = NULL;
    cnx_segment_params_default(&tmp);
    rc = cnx__param_json_open(&js, json, t, n, refused, WHAT);
    if (rc == 0)
        rc = old_keys(js);
    if (rc == 0)
        rc = cnx__param_json_rows(js, t, n, WHAT, &tmp);
    if (rc == 0)
        *p = tmp;
    json_decref(js);
    return rc;
}

int cnx_segment_params_at(cnx_segment_params *p, const char *json,
                          const double resolution[3])
{
    cnx_segment_params tmp;
    int rc = cnx_segment_params_parse(&tmp, json);
    if (rc != 0)
        return rc;
    memcpy(tmp.resolution, resolution, sizeof(tmp.resolution));
    if (cnx_segment_params_check(&tmp) != 0)
        return CNX_EINVAL;
    *p = tmp;
    return 0;
}
