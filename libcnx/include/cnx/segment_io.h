/*
 * cnx/segment_io.h - the segmentation stages' parameters object, read
 * through the kernel's bounds table (cnx_segment_param_bounds). This
 * module owns the format; the kernel (cnx/segment.h) never sees JSON.
 */
#ifndef CNX_SEGMENT_IO_H
#define CNX_SEGMENT_IO_H

#include "cnx/segment.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Parse a JSON object of parameters over the defaults (resolution too:
 * set it from the input's scale afterwards). Keys (all
 * optional): "raw_input", "nodata_zero" (booleans or 0/1), "mode" ("auto",
 * "3d", "sections", "2d"), "filter_sigma_nm", "filter_ridge",
 * "filter_background_nm", "seed_distance_nm", "seed_threshold",
 * "merge_threshold", "min_size_nm3" (numbers), "seed_method"
 * ("distance" or "minima"), with the ranges of cnx_segment_params.
 * The voxel-unit keys of kernel version 1 ("sections", "filter_sigma",
 * "filter_background", "seed_min_distance", "min_size") are refused with
 * a message naming their replacement. NULL means "{}".
 *
 * @param[out] p  filled on success only
 * @param json    the parameters object, NUL-terminated
 * @return 0; CNX_ESCHEMA for malformed JSON, a non-object, an unknown key,
 *         a wrong type or a value out of range, with a one-line message
 *         naming the key ("segment: parameters.merge_threshold: must be a
 *         number in [0, 1]"); CNX_ETOOBIG for a document over the JSON
 *         size limit. Fatal (not retriable).
 */
int cnx_segment_params_parse(cnx_segment_params *p, const char *json);

/**
 * A stage's parameters at a layer's resolution, the one order that works:
 * the defaults, json over them (cnx_segment_params_parse starts from the
 * defaults, resolution too), resolution set, then checked.
 * @param resolution  nm per voxel of the scale the kernel runs on
 * @return 0; what cnx_segment_params_parse returns (CNX_ESCHEMA,
 *         CNX_ETOOBIG); CNX_EINVAL when the check refuses the values at
 *         this resolution (message naming the field). p is filled only
 *         on 0.
 */
int cnx_segment_params_at(cnx_segment_params *p, const char *json,
                          const double resolution[3]);

#ifdef __cplusplus
}
#endif
#endif
