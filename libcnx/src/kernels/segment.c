/*
 * segment.c - the segmentation kernel's entry points: parameters (the
 * bounds table, defaults, checks), the boundary conversion, and the
 * pipeline that quantises the boundary into a padded buffer and runs the
 * seeds (segment_seeds.c), the watershed (segment_ws.c) and the
 * agglomeration (segment_rag.c); the membrane filter for raw images is
 * segment_filter.c. The JSON parameters are segment_io.c.
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
#include "segment_int.h"

/* ---- parameters ---------------------------------------------------------- */

const char *const cnx_segment_mode_names[CNX_SEGMENT_MODE_2D + 1] = {
    "auto", "3d", "sections", "2d"};
const char *const cnx_segment_seed_names[CNX_SEGMENT_SEEDS_MINIMA + 1] = {
    "distance", "minima"};

/* CHOICE rows read and write their enum field as an int. */
_Static_assert(sizeof(cnx_segment_mode) == sizeof(int) &&
                   sizeof(cnx_segment_seeds) == sizeof(int),
               "enum fields are int-sized");

#define ROW(field, kind, lo, hi, def, unit)                                    \
    CNX_PARAM_ROW(cnx_segment_params, field, kind, lo, hi, 0, def, unit)
#define CHOICE(field, def, names)                                              \
    CNX_PARAM_CHOICE_ROW(cnx_segment_params, field, def, names)

/* In the order the parser reads them and the check names them. */
static const cnx_param bounds[] = {
    ROW(raw_input, CNX_PARAM_FLAG, 0, 1, 0, ""),
    ROW(nodata_zero, CNX_PARAM_FLAG, 0, 1, 0, ""),
    CHOICE(mode, CNX_SEGMENT_MODE_AUTO, cnx_segment_mode_names),
    ROW(filter_sigma_nm, CNX_PARAM_REAL, 1.0, 1000.0, 6.0, "nm"),
    ROW(filter_ridge, CNX_PARAM_REAL, 0.0, 1.0, 0.3, ""),
    ROW(filter_background_nm, CNX_PARAM_REAL, 0.0, 1e5, 100.0, "nm"),
    ROW(seed_distance_nm, CNX_PARAM_REAL, 0.0, 1e4, 32.0, "nm"),
    ROW(seed_threshold, CNX_PARAM_REAL, 0.0, 1.0, 0.5, ""),
    CHOICE(seed_method, CNX_SEGMENT_SEEDS_DISTANCE, cnx_segment_seed_names),
    ROW(merge_threshold, CNX_PARAM_REAL, 0.0, 1.0, 0.55, ""),
    ROW(min_size_nm3, CNX_PARAM_REAL, 0.0, 1e15, 1e6, "nm^3"),
};

const cnx_param *cnx_segment_param_bounds(size_t *n)
{
    *n = sizeof(bounds) / sizeof(bounds[0]);
    return bounds;
}

void cnx_segment_params_default(cnx_segment_params *p)
{
    memset(p, 0, sizeof(*p));
    p->resolution[0] = p->resolution[1] = p->resolution[2] = 8.0;
    cnx_param_defaults(bounds, sizeof(bounds) / sizeof(bounds[0]), p);
}

static int bad_field(const char *field)
{
    return cnx_error_set(CNX_EINVAL, 0, "segment: %s: out of range", field);
}

/* A length in nm as voxels along axis i (rounded). */
static double vox(const cnx_segment_params *p, double nm, int i)
{
    return nm / p->resolution[i];
}

/* Voxel-unit limits of the derived settings (memory and time bounds). */
#define SIGMA_MAX 16.0       /* filter scale, voxels */
#define BACKGROUND_MAX 256.0 /* shading radius, voxels */
#define SEED_MAX 64.0        /* seed window half side, voxels */

static int bad_voxels(const char *field, double v, double max)
{
    return cnx_error_set(CNX_EINVAL, 0,
                         "segment: %s is %.4g voxels at this resolution, "
                         "over %.0f",
                         field, v, max);
}

int cnx_segment_params_check(const cnx_segment_params *p)
{
    if (p == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "segment: no parameters");
    for (int i = 0; i < 3; i++)
        if (!(p->resolution[i] >= 0.01 && p->resolution[i] <= 1e6))
            return bad_field("resolution");
    if (cnx_param_check(bounds, sizeof(bounds) / sizeof(bounds[0]), p,
                        "segment") != 0)
        return CNX_EINVAL;
    /* z is not filtered nor seeded across in the section modes. */
    for (int i = 0; i < (cnx_segment_mode_of(p) == CNX_SEGMENT_MODE_3D ? 3 : 2);
         i++) {
        if (p->raw_input && 2.0 * vox(p, p->filter_sigma_nm, i) > SIGMA_MAX)
            return bad_voxels("2 x filter_sigma_nm",
                              2.0 * vox(p, p->filter_sigma_nm, i), SIGMA_MAX);
        if (p->raw_input && vox(p, p->filter_background_nm, i) > BACKGROUND_MAX)
            return bad_voxels("filter_background_nm",
                              vox(p, p->filter_background_nm, i),
                              BACKGROUND_MAX);
        if (vox(p, p->seed_distance_nm, i) > SEED_MAX)
            return bad_voxels("seed_distance_nm",
                              vox(p, p->seed_distance_nm, i), SEED_MAX);
    }
    return 0;
}

cnx_segment_mode cnx_segment_mode_of(const cnx_segment_params *p)
{
    double xy;
    if (p->mode != CNX_SEGMENT_MODE_AUTO)
        return p->mode;
    xy = p->resolution[0] > p->resolution[1] ? p->resolution[0]
                                             : p->resolution[1];
    return p->resolution[2] >= CNX_SEGMENT_ANISOTROPY * xy
               ? CNX_SEGMENT_MODE_SECTIONS
               : CNX_SEGMENT_MODE_3D;
}

/* Round a non-negative voxel count. */
static int64_t round_vox(double v)
{
    return (int64_t)(v + 0.5);
}

int64_t cnx_segment_min_voxels(const cnx_segment_params *p)
{
    double v = p->min_size_nm3 /
               (p->resolution[0] * p->resolution[1] * p->resolution[2]);
    return v >= (double)CNX_SEGMENT_MAX_VOXELS ? CNX_SEGMENT_MAX_VOXELS
                                               : round_vox(v);
}

void seg__cfg(const cnx_segment_params *p, seg_cfg *c)
{
    const cnx_segment_mode mode = cnx_segment_mode_of(p);
    memset(c, 0, sizeof(*c));
    c->raw_input = p->raw_input;
    c->sections = mode != CNX_SEGMENT_MODE_3D;
    c->z_edges = mode != CNX_SEGMENT_MODE_2D;
    for (int i = 0; i < 3; i++) {
        c->sigma[i] = vox(p, p->filter_sigma_nm, i);
        c->background[i] = round_vox(vox(p, p->filter_background_nm, i));
        c->seed_r[i] = round_vox(vox(p, p->seed_distance_nm, i));
    }
    c->ridge = p->filter_ridge;
    c->seed_threshold = p->seed_threshold;
    c->seed_method = p->seed_method;
    c->merge_threshold = p->merge_threshold;
    c->min_size = (uint64_t)cnx_segment_min_voxels(p);
}

/* The halo (filter footprint + seeds' room, the larger over the axes)
 * and the context (eight times that room, the larger over the axes), as
 * voxel radii. The context is what the seeds, the watershed and the
 * agglomeration of a chunk see around it; chosen on two measurements
 * (docs/segment.md, "Context"): ISBI 2012's chunked VI, and the aligned
 * synthetic image of acceptance/align_test.sh, whose VI merge went from
 * 0.656 (version 2) to 0.814 with 32 voxels and 0.643 with 64. */
static void halo_parts(const cnx_segment_params *p, int64_t *halo,
                       int64_t *context)
{
    seg_cfg c;
    *halo = 8;
    *context = 8;
    if (cnx_segment_params_check(p) != 0)
        return;
    seg__cfg(p, &c);
    *halo = 0;
    *context = 0;
    for (int i = 0; i < (c.sections ? 2 : 3); i++) {
        int64_t filter = 0, seeds = 4 * c.seed_r[i];
        if (c.raw_input) {
            /* binomial radii: round(2 s^2) at s = sigma, 2 sigma */
            int64_t ridge = round_vox(8.0 * c.sigma[i] * c.sigma[i]) + 1;
            int64_t shade = 3 * c.background[i];
            filter = ridge > shade ? ridge : shade;
        }
        seeds = seeds > 8 ? seeds : 8;
        if (filter + seeds > *halo)
            *halo = filter + seeds;
        if (8 * seeds > *context)
            *context = 8 * seeds;
    }
}

int64_t cnx_segment_halo(const cnx_segment_params *p)
{
    int64_t halo, context;
    halo_parts(p, &halo, &context);
    return halo;
}

int64_t cnx_segment_context(const cnx_segment_params *p)
{
    int64_t halo, context;
    halo_parts(p, &halo, &context);
    return context;
}

uint64_t cnx_segment_merge_level(double merge_threshold)
{
    double t = merge_threshold > 0.0 ? merge_threshold : 0.0;
    t = t < 1.0 ? t : 1.0;
    return (uint64_t)(t * (255.0 * 65536.0) + 0.5);
}

/* ---- geometry ------------------------------------------------------------ */

int seg__grid_init(seg_grid *g, const int64_t size[3], int sections,
                   int z_edges)
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
    g->z_edges = z_edges;
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
                      const cnx_segment_params *p, const void *out, seg_grid *g,
                      seg_cfg *c)
{
    if (in == NULL || size == NULL || out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "segment: NULL buffer or size");
    if (cnx_segment_params_check(p) != 0)
        return CNX_EINVAL;
    seg__cfg(p, c);
    return seg__grid_init(g, size, c->sections, c->z_edges);
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

/* The region at lo of size osize of a volume of size size. */
typedef struct seg_region {
    int64_t lo[3], size[3];
} seg_region;

static int region_check(const int64_t size[3], const int64_t lo[3],
                        const int64_t osize[3], seg_region *r)
{
    if (lo == NULL || osize == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "segment: NULL region");
    for (int i = 0; i < 3; i++) {
        if (lo[i] < 0 || osize[i] < 1 || lo[i] > size[i] - osize[i])
            return cnx_error_set(CNX_EINVAL, 0,
                                 "segment: region [%lld, %lld) on axis %d "
                                 "is not inside the volume [0, %lld)",
                                 (long long)lo[i],
                                 (long long)(lo[i] + osize[i]), i,
                                 (long long)size[i]);
        r->lo[i] = lo[i];
        r->size[i] = osize[i];
    }
    return 0;
}

/* Index in the volume of the first voxel of row j (y + size_y * z) of the
 * region; the row's voxels follow it (x fastest). */
static size_t region_row(const int64_t size[3], const seg_region *r,
                         int64_t j)
{
    const int64_t y = j % r->size[1], z = j / r->size[1];
    return (size_t)(r->lo[0] +
                    size[0] * (r->lo[1] + y + size[1] * (r->lo[2] + z)));
}

/* img: normalised intensities in [0, 1] (over the whole volume). */
static int filter_raw(float *img, const int64_t size[3], const seg_cfg *p,
                      const seg_region *r, float *out)
{
    int rc = normalise(img, voxels_of(size));
    return rc != 0 ? rc
                   : seg__membrane_filter_region(img, size, p, r->lo,
                                                 r->size, out);
}

int cnx_segment_boundary_u8_region(const uint8_t *in, const int64_t size[3],
                                   const cnx_segment_params *p,
                                   const int64_t lo[3],
                                   const int64_t osize[3],
                                   float *boundary_out)
{
    seg_grid g;
    seg_cfg c;
    seg_region r;
    float *img;
    size_t n;
    int rc = check_call(in, size, p, boundary_out, &g, &c);
    if (rc == 0)
        rc = region_check(size, lo, osize, &r);
    if (rc != 0)
        return rc;
    n = voxels_of(size);
    if (!p->raw_input) {
        for (int64_t j = 0; j < r.size[1] * r.size[2]; j++) {
            const uint8_t *src = in + region_row(size, &r, j);
            float *dst = boundary_out + (size_t)(j * r.size[0]);
            for (int64_t x = 0; x < r.size[0]; x++)
                dst[x] = (float)src[x] / 255.0f;
        }
        return 0;
    }
    img = malloc(n * sizeof(*img));
    if (img == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    for (size_t i = 0; i < n; i++)
        img[i] = (float)in[i] / 255.0f;
    if (p->nodata_zero) {
        /* No data takes the mean of the data (no edge for the filter). */
        double sum = 0.0;
        size_t cnt = 0;
        for (size_t i = 0; i < n; i++)
            if (in[i] != 0) {
                sum += (double)img[i];
                cnt++;
            }
        for (size_t i = 0; i < n; i++)
            if (in[i] == 0)
                img[i] = cnt > 0 ? (float)(sum / (double)cnt) : 0.0f;
    }
    rc = filter_raw(img, size, &c, &r, boundary_out);
    for (int64_t j = 0; rc == 0 && p->nodata_zero && j < r.size[1] * r.size[2];
         j++) {
        const uint8_t *src = in + region_row(size, &r, j);
        float *dst = boundary_out + (size_t)(j * r.size[0]);
        for (int64_t x = 0; x < r.size[0]; x++)
            if (src[x] == 0)
                dst[x] = 1.0f;
    }
    free(img);
    return rc;
}

int cnx_segment_boundary_u8(const uint8_t *in, const int64_t size[3],
                            const cnx_segment_params *p, float *boundary_out)
{
    static const int64_t zero[3] = {0, 0, 0};
    return cnx_segment_boundary_u8_region(in, size, p, zero, size,
                                          boundary_out);
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

int cnx_segment_boundary_f32_region(const float *in, const int64_t size[3],
                                    const cnx_segment_params *p,
                                    const int64_t lo[3],
                                    const int64_t osize[3],
                                    float *boundary_out)
{
    seg_grid g;
    seg_cfg c;
    seg_region r;
    float *img;
    size_t n;
    int rc = check_call(in, size, p, boundary_out, &g, &c);
    if (rc == 0)
        rc = region_check(size, lo, osize, &r);
    if (rc != 0)
        return rc;
    n = voxels_of(size);
    if (!p->raw_input) {
        for (int64_t j = 0; j < r.size[1] * r.size[2]; j++) {
            const float *src = in + region_row(size, &r, j);
            float *dst = boundary_out + (size_t)(j * r.size[0]);
            for (int64_t x = 0; x < r.size[0]; x++)
                dst[x] = clamp01(src[x], 1.0f);
        }
        return 0;
    }
    img = malloc(n * sizeof(*img));
    if (img == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    span_f32(in, n, img);
    rc = filter_raw(img, size, &c, &r, boundary_out);
    free(img);
    return rc;
}

int cnx_segment_boundary_f32(const float *in, const int64_t size[3],
                             const cnx_segment_params *p, float *boundary_out)
{
    static const int64_t zero[3] = {0, 0, 0};
    return cnx_segment_boundary_f32_region(in, size, p, zero, size,
                                           boundary_out);
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
    seg_cfg c;
    uint8_t *q = NULL;
    uint32_t *lab = NULL, nbasins = 0;
    int rc = check_call(boundary, size, p, labels, &g, &c);
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
    rc = seg__watershed(&g, &c, q, lab, &nbasins);
    if (rc == 0)
        rc = seg__agglomerate(&g, &c, q, lab, nbasins, labels, nlabels);
done:
    free(lab);
    free(q);
    return rc;
}
