/*
 * synth.c - synthetic EM dataset kernel: parameters, the stage driver.
 *
 * cnx_synth_generate runs the stages in a fixed order on one thread.
 * Classic style: neurite skeletons (synth_neurites.c) -> labelled distance
 * fill -> one component per object -> membranes -> synapse sites
 * (synth_synapses.c) -> image, boundary, cleft and psd (synth_layers.c) ->
 * uint64 ground truth. Hard style: neurites in nm -> cells packed into the
 * rest -> components settled (synth_hard.c) -> synapse sites in nm ->
 * the degraded layers (synth_hard_layers.c) -> ground truth.
 * Each stage owns its random stream (synth_int.h), so the output is a
 * function of the parameters alone. Working memory is a uint32 label and a
 * uint8 flag per voxel besides the outputs (hard style: a few more bytes
 * per voxel while rendering); see cnx_synth_generate.
 */
#include "cnx/synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/synth_int.h"

/* Generation progress units per stage, roughly their share of the time;
 * they sum to SYNTH_WORK. */
enum {
    WORK_NEURITES = 20,
    WORK_FILL = 28,
    WORK_CONNECT = 10,
    WORK_SYNAPSES = 4,
    WORK_RENDER = 35,
    WORK_GT = 3,
    SYNTH_WORK = 100,
};
/* The same for the hard style (also summing to SYNTH_WORK). */
enum {
    HWORK_NEURITES = 22,
    HWORK_CELLS = 14,
    HWORK_SETTLE = 10,
    HWORK_SYNAPSES = 4,
    HWORK_RENDER = 47,
    HWORK_GT = 3,
};

static const char *const style_names[] = {"classic", "hard"};

const char *cnx_synth_style_name(cnx_synth_style style)
{
    if ((int)style < 0 ||
        (size_t)style >= sizeof(style_names) / sizeof(style_names[0]))
        return NULL;
    return style_names[style];
}

int cnx_synth_style_parse(const char *name, cnx_synth_style *out)
{
    size_t k;
    for (k = 0; k < sizeof(style_names) / sizeof(style_names[0]); k++) {
        if (strcmp(name, style_names[k]) == 0) {
            *out = (cnx_synth_style)k;
            return 0;
        }
    }
    return cnx_error_set(CNX_EINVAL, 0,
                         "synth: style '%.64s' is not classic or hard", name);
}

static const char *const distort_names[] = {"none", "default"};

const char *cnx_synth_distort_name(cnx_synth_distort distort)
{
    if ((int)distort < 0 ||
        (size_t)distort >= sizeof(distort_names) / sizeof(distort_names[0]))
        return NULL;
    return distort_names[distort];
}

int cnx_synth_distort_parse(const char *name, cnx_synth_distort *out)
{
    size_t k;
    for (k = 0; k < sizeof(distort_names) / sizeof(distort_names[0]); k++) {
        if (strcmp(name, distort_names[k]) == 0) {
            *out = (cnx_synth_distort)k;
            return 0;
        }
    }
    return cnx_error_set(CNX_EINVAL, 0,
                         "synth: distort '%.64s' is not none or default", name);
}

void cnx_synth__metric(synth_metric *m, const cnx_synth_params *p)
{
    int i;
    m->physical = p->style == CNX_SYNTH_STYLE_HARD;
    m->wmin = HUGE_VAL;
    for (i = 0; i < 3; i++) {
        m->w[i] = m->physical ? p->resolution[i] : 1.0;
        m->wmin = m->w[i] < m->wmin ? m->w[i] : m->wmin;
    }
}

void cnx_synth__rng_init(synth_rng *rng, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ cnx_synth__mix(stream ^ UINT64_C(0x5ca1ab1e));
    int i;
    for (i = 0; i < 4; i++) {
        x += UINT64_C(0x9e3779b97f4a7c15);
        rng->s[i] = cnx_synth__mix(x);
    }
}

void cnx_synth_params_init(cnx_synth_params *p)
{
    memset(p, 0, sizeof(*p));
    p->shape[0] = p->shape[1] = p->shape[2] = 256;
    p->seed = 1;
    p->resolution[0] = p->resolution[1] = p->resolution[2] = 8.0;
    p->style = CNX_SYNTH_STYLE_CLASSIC;
    p->chunk[0] = p->chunk[1] = p->chunk[2] = CNX_SYNTH_DEFAULT_CHUNK;
    p->radius_min = 3;
    p->radius_max = 10;
    p->fill_percent = 30;
    p->synapse_spacing = 24;
    p->synapses_per_mvx = 4;
    p->tile_side = 128;
    p->tile_overlap_percent = 15;
    p->tile_jitter = 3;
    p->tile_nominal_error = 20;
    p->distort = CNX_SYNTH_DISTORT_DEFAULT;
    p->distort_translation = 12.0;
    p->distort_rotation = 0.01;
    p->distort_warp = 1.5;
    p->distort_grid = 6;
    p->distort_gain_milli = 100;
    p->distort_offset = 10;
    p->missing = NULL;
    p->nmissing = 0;
}

/* The distortion settings and the missing sections. */
static int check_sections(const cnx_synth_params *p)
{
    uint64_t seen[CNX_SYNTH_MAX_SIDE / 64] = {0}; /* one bit per section */
    size_t k;
    if (cnx_synth_distort_name(p->distort) == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synth: unknown distort %d",
                             (int)p->distort);
    /* The comparisons also reject NaN. */
    if (!(p->distort_translation >= 0.0 && p->distort_translation <= 1000.0))
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: distort_translation is not within "
                             "0..1000 px");
    if (!(p->distort_rotation >= 0.0 && p->distort_rotation <= 0.5))
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: distort_rotation is not within 0..0.5");
    if (!(p->distort_warp >= 0.0 && p->distort_warp <= 100.0))
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: distort_warp is not within 0..100 px");
    if (p->distort_grid < 4 || p->distort_grid > CNX_SYNTH_WARP_GRID_MAX)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: distort_grid %d is not within 4..%d",
                             p->distort_grid, CNX_SYNTH_WARP_GRID_MAX);
    if (p->distort_gain_milli < 0 || p->distort_gain_milli > 500)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: distort_gain_milli %d is not within "
                             "0..500",
                             p->distort_gain_milli);
    if (p->distort_offset < 0 || p->distort_offset > 100)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: distort_offset %d is not within 0..100",
                             p->distort_offset);
    if (p->nmissing > 0 && p->missing == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synth: missing is NULL");
    if (p->nmissing > CNX_SYNTH_MISSING_MAX)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: more than %d missing sections",
                             CNX_SYNTH_MISSING_MAX);
    for (k = 0; k < p->nmissing; k++) {
        if (p->missing[k] < 0 || p->missing[k] >= p->shape[2])
            return cnx_error_set(CNX_EINVAL, 0,
                                 "synth: missing section %lld is outside "
                                 "0..%lld",
                                 (long long)p->missing[k],
                                 (long long)p->shape[2] - 1);
        /* shape[2] <= CNX_SYNTH_MAX_SIDE was checked before. */
        if (seen[p->missing[k] / 64] >> (p->missing[k] % 64) & 1)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "synth: missing section %lld given twice",
                                 (long long)p->missing[k]);
        seen[p->missing[k] / 64] |= UINT64_C(1) << (p->missing[k] % 64);
    }
    /* Distinct and in range, so nmissing == shape[2] means all of them. */
    if ((int64_t)p->nmissing >= p->shape[2])
        return cnx_error_set(CNX_EINVAL, 0, "synth: every section is missing");
    return 0;
}

int cnx_synth_params_check(const cnx_synth_params *p)
{
    static const char axis[3] = {'x', 'y', 'z'};
    int64_t voxels = 1;
    int i;

    for (i = 0; i < 3; i++) {
        if (p->shape[i] < 1)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "synth: shape %c = %lld is not positive",
                                 axis[i], (long long)p->shape[i]);
        if (p->shape[i] > CNX_SYNTH_MAX_SIDE)
            return cnx_error_set(CNX_ERANGE, 0,
                                 "synth: shape %c = %lld is over %d", axis[i],
                                 (long long)p->shape[i], CNX_SYNTH_MAX_SIDE);
        /* Also rejects NaN. */
        if (!(p->resolution[i] > 0.0 && p->resolution[i] <= 1e9))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "synth: resolution %c must be in (0, 1e9] nm",
                                 axis[i]);
        if (p->chunk[i] < 1 || p->chunk[i] > CNX_SYNTH_MAX_CHUNK)
            return cnx_error_set(
                CNX_EINVAL, 0, "synth: chunk %c = %lld is not within 1..%d",
                axis[i], (long long)p->chunk[i], CNX_SYNTH_MAX_CHUNK);
        voxels *= p->shape[i];
    }
    if (cnx_synth_style_name(p->style) == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synth: unknown style %d",
                             (int)p->style);
    for (i = 0; i < 3 && p->style == CNX_SYNTH_STYLE_HARD; i++) {
        if (!(p->resolution[i] >= CNX_SYNTH_HARD_RES_MIN &&
              p->resolution[i] <= CNX_SYNTH_HARD_RES_MAX))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "synth: resolution %c must be in %g..%g nm "
                                 "for the hard style",
                                 axis[i], CNX_SYNTH_HARD_RES_MIN,
                                 CNX_SYNTH_HARD_RES_MAX);
    }
    if (p->seed > (uint64_t)INT64_MAX)
        return cnx_error_set(CNX_EINVAL, 0, "synth: seed %llu is over 2^63 - 1",
                             (unsigned long long)p->seed);
    if (voxels > CNX_SYNTH_MAX_VOXELS)
        return cnx_error_set(
            CNX_ETOOBIG, 0, "synth: %lld voxels is over the limit of %lld",
            (long long)voxels, (long long)CNX_SYNTH_MAX_VOXELS);
    if (p->radius_min < 1 || p->radius_max < p->radius_min ||
        p->radius_max > 64)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: radius range %d..%d is not within 1..64",
                             p->radius_min, p->radius_max);
    if (p->fill_percent < 1 || p->fill_percent > 60)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: fill_percent %d is not within 1..60",
                             p->fill_percent);
    if (p->synapse_spacing < 20 || p->synapse_spacing > 1024)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: synapse_spacing %d is not within 20..1024",
                             p->synapse_spacing);
    if (p->synapses_per_mvx < 0 || p->synapses_per_mvx > 1000)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: synapses_per_mvx %d is not within 0..1000",
                             p->synapses_per_mvx);
    if (p->tile_side < 16 || p->tile_side > 8192)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: tile_side %d is not within 16..8192",
                             p->tile_side);
    if (p->tile_overlap_percent < 0 || p->tile_overlap_percent > 50)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: tile_overlap_percent %d is not within "
                             "0..50",
                             p->tile_overlap_percent);
    if (p->tile_jitter < 0 || p->tile_jitter > p->tile_side / 8)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: tile_jitter %d is not within 0..%d",
                             p->tile_jitter, p->tile_side / 8);
    if (p->tile_nominal_error < 0 || p->tile_nominal_error > 1000000)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: tile_nominal_error %d is out of range",
                             p->tile_nominal_error);
    return check_sections(p);
}

void cnx_synth_free(cnx_synth *synth)
{
    if (synth == NULL)
        return;
    cnx_volume_free(synth->gt);
    cnx_volume_free(synth->image);
    cnx_volume_free(synth->boundary);
    cnx_volume_free(synth->cleft);
    cnx_volume_free(synth->psd);
    free(synth->synapses);
    free(synth->missing);
    free(synth);
}

static void report(const cnx_synth_params *p, int64_t done)
{
    if (p->progress != NULL)
        p->progress(p->progress_ctx, done, SYNTH_WORK);
}

/* Allocate the four uint8 maps of synth (image, boundary, cleft, psd) over
 * box; those made before a failure are freed with synth. @return 0 or
 * the error of cnx_volume_new. */
static int new_maps(cnx_synth *synth, const cnx_box *box)
{
    int rc = cnx_volume_new(&synth->image, CNX_DT_UINT8, box, 1);
    if (rc == 0)
        rc = cnx_volume_new(&synth->boundary, CNX_DT_UINT8, box, 1);
    if (rc == 0)
        rc = cnx_volume_new(&synth->cleft, CNX_DT_UINT8, box, 1);
    if (rc == 0)
        rc = cnx_volume_new(&synth->psd, CNX_DT_UINT8, box, 1);
    return rc;
}

/* The classic geometry and maps (synth_neurites.c, synth_layers.c). */
static int generate_classic(cnx_synth *synth, uint32_t *label,
                            const synth_dims *d, const cnx_synth_params *p,
                            const cnx_box *box)
{
    uint8_t *flags = NULL;
    uint32_t nobjects = 0;
    int rc;

    rc = cnx_synth__neurites(label, &nobjects, d, p);
    if (rc < 0)
        goto done;
    synth->nobjects = nobjects;
    report(p, WORK_NEURITES);
    rc = cnx_synth__fill(label, d);
    if (rc < 0)
        goto done;
    report(p, WORK_NEURITES + WORK_FILL);
    rc = cnx_synth__connect(label, d);
    if (rc < 0)
        goto done;
    report(p, WORK_NEURITES + WORK_FILL + WORK_CONNECT);

    flags = malloc((size_t)d->n);
    if (flags == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    cnx_synth__membrane(flags, label, d);
    rc = cnx_synth__synapses(&synth->synapses, &synth->nsynapses, label, d, p);
    if (rc < 0)
        goto done;
    report(p, WORK_NEURITES + WORK_FILL + WORK_CONNECT + WORK_SYNAPSES);

    rc = new_maps(synth, box);
    if (rc < 0)
        goto done;
    rc = cnx_synth__render(synth, label, flags, d);
    if (rc < 0)
        goto done;
    report(p, SYNTH_WORK - WORK_GT);
done:
    free(flags);
    return rc;
}

/* The hard geometry and maps (synth_hard.c, synth_hard_layers.c). */
static int generate_hard(cnx_synth *synth, uint32_t *label, const synth_dims *d,
                         const cnx_synth_params *p, const cnx_box *box)
{
    uint32_t nneurites = 0, nobjects = 0;
    int rc;

    rc = cnx_synth__hard_neurites(label, &nneurites, d, p);
    if (rc < 0)
        return rc;
    report(p, HWORK_NEURITES);
    rc = cnx_synth__hard_cells(label, nneurites, d, p);
    if (rc < 0)
        return rc;
    report(p, HWORK_NEURITES + HWORK_CELLS);
    rc = cnx_synth__hard_settle(label, &nobjects, d, p);
    if (rc < 0)
        return rc;
    synth->nobjects = nobjects;
    report(p, HWORK_NEURITES + HWORK_CELLS + HWORK_SETTLE);
    rc = cnx_synth__synapses(&synth->synapses, &synth->nsynapses, label, d, p);
    if (rc < 0)
        return rc;
    report(p, HWORK_NEURITES + HWORK_CELLS + HWORK_SETTLE + HWORK_SYNAPSES);

    rc = new_maps(synth, box);
    if (rc < 0)
        return rc;
    rc = cnx_synth__hard_render(synth, label, d);
    if (rc < 0)
        return rc;
    report(p, SYNTH_WORK - HWORK_GT);
    return 0;
}

int cnx_synth_generate(cnx_synth **out, const cnx_synth_params *p)
{
    cnx_synth *synth = NULL;
    uint32_t *label = NULL;
    synth_dims d;
    cnx_box box;
    uint64_t *gt;
    int64_t i;
    int rc;

    *out = NULL;
    rc = cnx_synth_params_check(p);
    if (rc < 0)
        return rc;
    d.sx = p->shape[0];
    d.sy = p->shape[1];
    d.sz = p->shape[2];
    d.n = d.sx * d.sy * d.sz;
    box = cnx_box_make(0, 0, 0, d.sx, d.sy, d.sz);

    report(p, 0);
    synth = calloc(1, sizeof(*synth));
    label = calloc((size_t)d.n, sizeof(*label));
    if (synth == NULL || label == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    synth->params = *p;
    synth->params.progress = NULL;
    synth->params.progress_ctx = NULL;
    synth->params.missing = NULL;
    if (p->nmissing > 0) {
        synth->missing = malloc(p->nmissing * sizeof(*synth->missing));
        if (synth->missing == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
            goto done;
        }
        memcpy(synth->missing, p->missing,
               p->nmissing * sizeof(*synth->missing));
        synth->params.missing = synth->missing;
    }

    if (p->style == CNX_SYNTH_STYLE_HARD)
        rc = generate_hard(synth, label, &d, p, &box);
    else
        rc = generate_classic(synth, label, &d, p, &box);
    if (rc < 0)
        goto done;

    rc = cnx_volume_new(&synth->gt, CNX_DT_UINT64, &box, 1);
    if (rc < 0)
        goto done;
    gt = synth->gt->data;
    for (i = 0; i < d.n; i++)
        gt[i] = label[i];
    report(p, SYNTH_WORK);
    *out = synth;
    synth = NULL;
    rc = 0;
done:
    free(label);
    cnx_synth_free(synth);
    return rc;
}
