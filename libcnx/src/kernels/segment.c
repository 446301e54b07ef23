/*
 * segment.c - the segmentation kernel's entry points: parameters (defaults,
 * JSON parsing, checks), the boundary conversion, and the pipeline that
 * quantises the boundary into a padded buffer and runs the seeds
 * (segment_seeds.c), the watershed (segment_ws.c) and the agglomeration
 * (segment_rag.c); the membrane filter for raw images is segment_filter.c.
 *
 * Load: one call per chunk (128^3 .. 512^3) or per ISBI stack; memory is
 * the padded uint8 boundary and uint32 labels, two uint8 arrays while
 * seeding, the queue while flooding (4 bytes per voxel), then the graph.
 * Single-threaded, no shared state.
 */
#include "cnx/segment.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "json_int.h"
#include "segment_int.h"

#define WHAT "segment: parameters"

void cnx_segment_params_default(cnx_segment_params *p)
{
    memset(p, 0, sizeof(*p));
    p->raw_input = 0;
    p->sections = 0;
    p->filter_sigma = 1.5;
    p->filter_ridge = 0.3;
    p->filter_background = 25.0;
    p->seed_min_distance = 2;
    p->seed_threshold = 0.5;
    p->seed_method = CNX_SEGMENT_SEEDS_DISTANCE;
    p->merge_threshold = 0.5;
    p->min_size = 64;
}

/* ---- JSON parameters ---------------------------------------------------- */

static int get_seed_method(const json_t *js, cnx_segment_seeds *out)
{
    const json_t *v = json_object_get(js, "seed_method");
    const char *s;
    if (v == NULL)
        return 0;
    s = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "distance") == 0)
        *out = CNX_SEGMENT_SEEDS_DISTANCE;
    else if (strcmp(s, "minima") == 0)
        *out = CNX_SEGMENT_SEEDS_MINIMA;
    else
        return cnx_error_set(CNX_ESCHEMA, 0,
                             WHAT ".seed_method: must be \"distance\" or "
                                  "\"minima\"");
    return 0;
}

/* Every key of js over p, in a fixed order (the first bad key is named). */
static int parse_keys(const json_t *js, cnx_segment_params *p)
{
    int rc = cnx__json_param_flag(js, "raw_input", WHAT, &p->raw_input);
    if (rc == 0)
        rc = cnx__json_param_flag(js, "sections", WHAT, &p->sections);
    if (rc == 0)
        rc = cnx__json_param_number(js, "filter_sigma", 0.5, 8.0, 0, WHAT,
                                    &p->filter_sigma);
    if (rc == 0)
        rc = cnx__json_param_number(js, "filter_ridge", 0.0, 1.0, 0, WHAT,
                                    &p->filter_ridge);
    if (rc == 0)
        rc = cnx__json_param_number(js, "filter_background", 0.0, 256.0, 0,
                                    WHAT, &p->filter_background);
    if (rc == 0)
        rc = cnx__json_param_int(js, "seed_min_distance", 0, 64, WHAT,
                                 &p->seed_min_distance);
    if (rc == 0)
        rc = cnx__json_param_number(js, "seed_threshold", 0.0, 1.0, 0, WHAT,
                                    &p->seed_threshold);
    if (rc == 0)
        rc = get_seed_method(js, &p->seed_method);
    if (rc == 0)
        rc = cnx__json_param_number(js, "merge_threshold", 0.0, 1.0, 0, WHAT,
                                    &p->merge_threshold);
    if (rc == 0)
        rc = cnx__json_param_int(js, "min_size", 0, CNX_SEGMENT_MAX_VOXELS,
                                 WHAT, &p->min_size);
    return rc;
}

int cnx_segment_params_parse(cnx_segment_params *p, const char *json)
{
    static const char *const keys[] = {"raw_input",
                                       "sections",
                                       "filter_sigma",
                                       "filter_ridge",
                                       "filter_background",
                                       "seed_min_distance",
                                       "seed_threshold",
                                       "seed_method",
                                       "merge_threshold",
                                       "min_size",
                                       NULL};
    cnx_segment_params tmp;
    json_t *js = NULL;
    int rc;

    assert(p != NULL);
    cnx_segment_params_default(&tmp);
    rc = cnx__json_params(&js, json, keys, WHAT);
    if (rc == 0)
        rc = parse_keys(js, &tmp);
    if (rc == 0)
        *p = tmp;
    json_decref(js);
    return rc;
}

static int bad_field(const char *field)
{
    return cnx_error_set(CNX_EINVAL, 0, "segment: %s: out of range", field);
}

int cnx_segment_params_check(const cnx_segment_params *p)
{
    if (p == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "segment: no parameters");
    if (p->raw_input != 0 && p->raw_input != 1)
        return bad_field("raw_input");
    if (p->sections != 0 && p->sections != 1)
        return bad_field("sections");
    if (!(p->filter_sigma >= 0.5 && p->filter_sigma <= 8.0))
        return bad_field("filter_sigma");
    if (!(p->filter_ridge >= 0.0 && p->filter_ridge <= 1.0))
        return bad_field("filter_ridge");
    if (!(p->filter_background >= 0.0 && p->filter_background <= 256.0))
        return bad_field("filter_background");
    if (p->seed_min_distance < 0 || p->seed_min_distance > 64)
        return bad_field("seed_min_distance");
    if (!(p->seed_threshold >= 0.0 && p->seed_threshold <= 1.0))
        return bad_field("seed_threshold");
    if (p->seed_method != CNX_SEGMENT_SEEDS_DISTANCE &&
        p->seed_method != CNX_SEGMENT_SEEDS_MINIMA)
        return bad_field("seed_method");
    if (!(p->merge_threshold >= 0.0 && p->merge_threshold <= 1.0))
        return bad_field("merge_threshold");
    if (p->min_size < 0 || p->min_size > CNX_SEGMENT_MAX_VOXELS)
        return bad_field("min_size");
    return 0;
}

uint64_t cnx_segment_merge_level(double merge_threshold)
{
    double t = merge_threshold > 0.0 ? merge_threshold : 0.0;
    t = t < 1.0 ? t : 1.0;
    return (uint64_t)(t * (255.0 * 65536.0) + 0.5);
}

/* ---- geometry ------------------------------------------------------------ */

int seg__grid_init(seg_grid *g, const int64_t size[3], int sections)
{
    int64_t voxels = 1;
    for (int i = 0; i < 3; i++) {
        if (size[i] < 1)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "segment: size[%d] is %lld, must be >= 1", i,
                                 (long long)size[i]);
        if (size[i] > CNX_SEGMENT_MAX_SIDE)
            return cnx_error_set(CNX_ETOOBIG, 0,
                                 "segment: size[%d] is %lld, over the limit "
                                 "of %lld",
                                 i, (long long)size[i],
                                 (long long)CNX_SEGMENT_MAX_SIDE);
        voxels *= size[i]; /* < 2^31 * 2^20: no overflow */
        if (voxels > CNX_SEGMENT_MAX_VOXELS)
            return cnx_error_set(CNX_ETOOBIG, 0,
                                 "segment: over the limit of %lld voxels",
                                 (long long)CNX_SEGMENT_MAX_VOXELS);
    }
    g->px = size[0] + 2;
    g->py = size[1] + 2;
    if ((double)g->px * (double)g->py * (double)(size[2] + 2) >=
        (double)UINT32_MAX)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "segment: %lldx%lldx%lld is too thin: the "
                             "padded volume is over 2^32 voxels",
                             (long long)size[0], (long long)size[1],
                             (long long)size[2]);
    memcpy(g->size, size, sizeof(g->size));
    g->n = (size_t)(g->px * g->py * (size[2] + 2));
    g->sections = sections;
    g->nnb = sections ? 4 : 6;
    g->nb[0] = -1;
    g->nb[1] = 1;
    g->nb[2] = -(ptrdiff_t)g->px;
    g->nb[3] = (ptrdiff_t)g->px;
    g->nb[4] = -(ptrdiff_t)(g->px * g->py);
    g->nb[5] = (ptrdiff_t)(g->px * g->py);
    return 0;
}

/* ---- boundary conversion ------------------------------------------------ */

static int check_call(const void *in, const int64_t size[3],
                      const cnx_segment_params *p, const void *out, seg_grid *g)
{
    if (in == NULL || size == NULL || out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "segment: NULL buffer or size");
    if (cnx_segment_params_check(p) != 0)
        return CNX_EINVAL;
    return seg__grid_init(g, size, p->sections);
}

static size_t voxels_of(const int64_t size[3])
{
    return (size_t)(size[0] * size[1] * size[2]);
}

/*
 * Map raw intensities to [0, 1] by the 1st and 99th percentiles of a
 * 4096-bin histogram of them (v in [0, 1] before): v' = (v - lo) / (hi -
 * lo), clamped. Integer bins, so the percentiles are exact and stable.
 */
static int normalise(float *v, size_t n)
{
    enum { BINS = 4096 };
    static const double cut = 0.01;
    size_t *hist = calloc(BINS, sizeof(*hist)), acc = 0;
    int lo = 0, hi = BINS - 1;
    float flo, fhi;
    if (hist == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    for (size_t i = 0; i < n; i++)
        hist[(int)(v[i] * (BINS - 1) + 0.5f)]++;
    while (lo < BINS - 1 && (double)(acc + hist[lo]) <= cut * (double)n)
        acc += hist[lo++];
    acc = 0;
    while (hi > 0 && (double)(acc + hist[hi]) <= cut * (double)n)
        acc += hist[hi--];
    free(hist);
    if (hi <= lo)
        return 0; /* (nearly) constant: nothing to stretch */
    flo = (float)lo / (BINS - 1);
    fhi = (float)hi / (BINS - 1);
    for (size_t i = 0; i < n; i++) {
        float x = (v[i] - flo) / (fhi - flo);
        v[i] = x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
    }
    return 0;
}

/* img: normalised intensities in [0, 1], overwritten by the filter. */
static int filter_raw(float *img, const int64_t size[3],
                      const cnx_segment_params *p, float *out)
{
    int rc = normalise(img, voxels_of(size));
    return rc != 0 ? rc : seg__membrane_filter(img, size, p, out);
}

int cnx_segment_boundary_u8(const uint8_t *in, const int64_t size[3],
                            const cnx_segment_params *p, float *boundary_out)
{
    seg_grid g;
    float *img;
    size_t n;
    int rc = check_call(in, size, p, boundary_out, &g);
    if (rc != 0)
        return rc;
    n = voxels_of(size);
    if (!p->raw_input) {
        for (size_t i = 0; i < n; i++)
            boundary_out[i] = (float)in[i] / 255.0f;
        return 0;
    }
    img = malloc(n * sizeof(*img));
    if (img == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    for (size_t i = 0; i < n; i++)
        img[i] = (float)in[i] / 255.0f;
    rc = filter_raw(img, size, p, boundary_out);
    free(img);
    return rc;
}

/* Clamp to [0, 1]; NaN to nan_value. */
static float clamp01(float v, float nan_value)
{
    if (v != v)
        return nan_value;
    return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
}

/* Float raw intensities to [0, 1] by their range (NaN: the darkest). */
static void span_f32(const float *in, size_t n, float *img)
{
    float lo = 0.0f, hi = 0.0f;
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        float v = in[i];
        if (v != v || v == INFINITY || v == -INFINITY)
            continue;
        if (!any || v < lo)
            lo = v;
        if (!any || v > hi)
            hi = v;
        any = 1;
    }
    for (size_t i = 0; i < n; i++) {
        float v = in[i];
        if (v != v || hi <= lo)
            img[i] = 0.0f;
        else
            img[i] =
                clamp01((float)(((double)v - lo) / ((double)hi - lo)), 0.0f);
    }
}

int cnx_segment_boundary_f32(const float *in, const int64_t size[3],
                             const cnx_segment_params *p, float *boundary_out)
{
    seg_grid g;
    float *img;
    size_t n;
    int rc = check_call(in, size, p, boundary_out, &g);
    if (rc != 0)
        return rc;
    n = voxels_of(size);
    if (!p->raw_input) {
        for (size_t i = 0; i < n; i++)
            boundary_out[i] = clamp01(in[i], 1.0f);
        return 0;
    }
    img = malloc(n * sizeof(*img));
    if (img == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    span_f32(in, n, img);
    rc = filter_raw(img, size, p, boundary_out);
    free(img);
    return rc;
}

/* ---- the pipeline ------------------------------------------------------- */

/* The quantised boundary in the padded layout (margin 255). */
static void quantise_padded(const seg_grid *g, const float *boundary,
                            uint8_t *q)
{
    const int64_t *s = g->size;
    memset(q, 255, g->n);
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++) {
            const float *row = boundary + (size_t)(s[0] * (y + s[1] * z));
            uint8_t *dst = q + seg__at(g, 0, y, z);
            for (int64_t x = 0; x < s[0]; x++)
                dst[x] = (uint8_t)cnx_segment_quantize(row[x]);
        }
}

int cnx_segment_volume(const float *boundary, const int64_t size[3],
                       const cnx_segment_params *p, uint32_t *labels,
                       uint32_t *nlabels)
{
    seg_grid g;
    uint8_t *q = NULL;
    uint32_t *lab = NULL, nbasins = 0;
    int rc = check_call(boundary, size, p, labels, &g);
    if (rc != 0)
        return rc;
    if (nlabels == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "segment: NULL nlabels");
    q = malloc(g.n);
    lab = malloc(g.n * sizeof(*lab));
    if (q == NULL || lab == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0,
                           "segment: out of memory (%zu "
                           "voxels)",
                           g.n);
        goto done;
    }
    quantise_padded(&g, boundary, q);
    rc = seg__watershed(&g, p, q, lab, &nbasins);
    if (rc == 0)
        rc = seg__agglomerate(&g, p, q, lab, nbasins, labels, nlabels);
done:
    free(lab);
    free(q);
    return rc;
}
