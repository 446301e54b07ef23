/*
 * workflow_plan.c - plans: a workflow laid over a region of a dataset.
 *
 * Geometry flows forwards (topological order): a stage's input scale is its
 * first input's (an external layer's scale, or the producing stage's output
 * scale) and its output scale comes from its worker's rule (worker_rules).
 * Regions flow backwards: a stage's region is the requested roi in its own
 * voxels, grown to cover everything its dependents read (their regions plus
 * halo, mapped back through the stage's factor), snapped to its input chunk
 * grid. Tasks are cut by the box generator (cnx_boxgen). The boxes of one
 * stage are separable -- a task's extent on one axis depends only on its
 * cell index on that axis -- so each stage keeps, per axis, the sorted
 * roi/write/read intervals of its cells, and "which tasks of S meet box q"
 * is two binary searches per axis. Planning 4096^3 voxels through three
 * stages (about 37,000 tasks) takes milliseconds; nothing is quadratic.
 * A plan is immutable once built and may be read from several threads.
 */
#include "cnx/workflow.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/align_io.h"
#include "cnx/downsample.h"
#include "cnx/error.h"
#include "cnx/montage_io.h"
#include "cnx/segjoin.h"
#include "cnx/segment_io.h"
#include "cnx/stages.h"
#include "cnx/store.h"
#include "cnx/synapse_io.h"
#include "cnx/task.h"
#include "cnx/tileset.h"
#include "cnx/url.h"
#include "json_int.h"
#include "stage_int.h"

/* The cells of one stage along one axis: intervals ascending, disjoint
 * for roi and write, overlapping by the halo for read. */
typedef struct axis {
    int64_t n;
    int64_t *rmin, *rmax; /* roi (input voxels) */
    int64_t *wmin, *wmax; /* write (output voxels) */
    int64_t *gmin, *gmax; /* read: roi grown by halo, clipped */
} axis;

typedef struct stage_lattice {
    axis ax[3];
    int64_t *mem;
} stage_lattice;

struct cnx_plan_lattice {
    size_t nstages;
    stage_lattice *st;
};

/* The largest halo a task may carry (cnx.task/1: 0..256). */

static int nomem(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "plan: out of memory");
}

static cnx_box scale_bounds(const cnx_scale *sc)
{
    cnx_grid g = cnx_scale_grid(sc);
    return cnx_grid_bounds(&g);
}

/*
 * A box in voxels of scale from, in voxels of scale to: physical position
 * is voxel * resolution in every scale, so min maps down and max up by the
 * resolution ratio (the tolerance absorbs ratios like 4/12 that are not
 * exact in binary).
 */
static cnx_box map_box(const cnx_box *b, const cnx_scale *from,
                       const cnx_scale *to)
{
    cnx_box r = *b;
    for (int i = 0; i < 3; i++) {
        double q;
        if (from->resolution[i] == to->resolution[i])
            continue;
        q = from->resolution[i] / to->resolution[i];
        r.min[i] = (int64_t)floor((double)b->min[i] * q + 1e-9);
        r.max[i] = (int64_t)ceil((double)b->max[i] * q - 1e-9);
    }
    return r;
}

/* The smallest box holding both (either may be empty). */
static cnx_box box_union(const cnx_box *a, const cnx_box *b)
{
    cnx_box r;
    if (cnx_box_empty(a))
        return *b;
    if (cnx_box_empty(b))
        return *a;
    for (int i = 0; i < 3; i++) {
        r.min[i] = cnx_imin(a->min[i], b->min[i]);
        r.max[i] = cnx_imax(a->max[i], b->max[i]);
    }
    return r;
}

/* Extend a box outwards to chunk boundaries of sc, clipped to its bounds. */
static cnx_box snap(const cnx_box *b, const cnx_scale *sc)
{
    cnx_box bounds = scale_bounds(sc), r;
    if (cnx_box_empty(b))
        return *b;
    for (int i = 0; i < 3; i++) {
        int64_t o = sc->voxel_offset[i], c = sc->chunk[i];
        r.min[i] = o + cnx_floordiv(b->min[i] - o, c) * c;
        r.max[i] = o + cnx_ceildiv(b->max[i] - o, c) * c;
    }
    return cnx_box_intersect(&r, &bounds);
}

static void fmt_box(const cnx_box *b, char *buf, size_t n)
{
    snprintf(buf, n,
             "%" PRId64 ",%" PRId64 ",%" PRId64 "-%" PRId64 ",%" PRId64
             ",%" PRId64,
             b->min[0], b->min[1], b->min[2], b->max[0], b->max[1], b->max[2]);
}

/* ---- worker rules ------------------------------------------------------- */

/*
 * What a worker writes, given what it reads, what it reads around a task,
 * and what it refuses. out_scale fills the output scale and the factor
 * (output voxel = input voxel / factor); the input's encoding is already
 * replaced by the stage's override, if any. same_format: the worker writes
 * its input's type, data type and encoding and refuses anything else, so
 * a plan asking otherwise is refused early. halo derives the stage's halo
 * when the workflow does not pin one (NULL: 0 for a reduce stage, 2 for a
 * map stage). check refuses, at plan time, a stage the worker would
 * refuse task by task (geometry and halo known). side_dir: the directory
 * of the per-chunk side objects it writes, the only "objects" a reader of
 * its output may name. To add a worker with its own geometry, halo or
 * refusals, add a row.
 */
typedef struct worker_rule {
    const char *worker;
    int (*out_scale)(const cnx_scale *in, cnx_scale *out, int64_t factor[3],
                     const char *stage);
    int same_format;
    int (*halo)(const cnx_plan *p, size_t s, int64_t *halo);
    int (*check)(const cnx_plan *p, size_t s);
    const char *side_dir; /* the per-chunk side objects it writes, or NULL */
} worker_rule;

static int rule_downsample(const cnx_scale *in, cnx_scale *out,
                           int64_t factor[3], const char *stage)
{
    int rc;
    cnx_downsample_factor(in->resolution, factor);
    for (int i = 0; i < 3; i++) {
        if (in->voxel_offset[i] % factor[i] != 0 ||
            (in->chunk[i] % factor[i] != 0 && in->chunk[i] < in->size[i]))
            return cnx_error_set(
                CNX_ESCHEMA, 0,
                "stage %s: downsampling scale '%s' by %" PRId64 ",%" PRId64
                ",%" PRId64 " needs its voxel_offset and chunk size to be "
                "multiples of the factor (offset %" PRId64 ",%" PRId64
                ",%" PRId64 ", chunk %" PRId64 ",%" PRId64 ",%" PRId64 ")",
                stage, in->key, factor[0], factor[1], factor[2],
                in->voxel_offset[0], in->voxel_offset[1], in->voxel_offset[2],
                in->chunk[0], in->chunk[1], in->chunk[2]);
    }
    rc = cnx_downsample_next_scale(in, out);
    if (rc != 0)
        return cnx_error_set(CNX_ESCHEMA, 0, "stage %s: %s", stage,
                             cnx_error_last()->message);
    return 0;
}

/* The default: the output has the input's geometry, voxel for voxel. */
static int rule_same(const cnx_scale *in, cnx_scale *out, int64_t factor[3],
                     const char *stage)
{
    (void)stage;
    *out = *in;
    for (int i = 0; i < 3; i++) {
        factor[i] = 1;
        out->cseg_block[i] = 8;
    }
    return 0;
}

/* montage: the stitched sections on the tile set's geometry, in chunks of
 * at most 256 x 256 pixels of one section each. */
static int rule_montage(const cnx_scale *in, cnx_scale *out, int64_t factor[3],
                        const char *stage)
{
    int rc = rule_same(in, out, factor, stage);
    out->chunk[0] = cnx_imin(in->chunk[0], 256);
    out->chunk[1] = cnx_imin(in->chunk[1], 256);
    out->chunk[2] = 1;
    out->encoding = CNX_ENC_RAW;
    return rc;
}

/* ---- plan-time checks and derived halos ---------------------------------- */

static int refuse(const cnx_plan *p, size_t s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CNX_ESCHEMA: "workflow <w>: stage <s>: <why and the fix>". */
static int refuse(const cnx_plan *p, size_t s, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return cnx_error_set(CNX_ESCHEMA, 0, "workflow %s: stage %s: %s",
                         p->wf->name, p->wf->stages[s].name, why);
}

/* The input of stage s playing role, or NULL. */
static const cnx_plan_input *role_input(const cnx_plan *p, size_t s,
                                        const char *role)
{
    const cnx_plan_stage *ps = &p->stages[s];
    for (size_t k = 0; k < ps->ninputs; k++)
        if (strcmp(ps->inputs[k].role, role) == 0)
            return &ps->inputs[k];
    return NULL;
}

/*
 * The input of stage s playing role must be a layer's chunks (objects 0)
 * or a stage's side objects (objects 1), with one channel of dtype (0:
 * any) -- or of dtype2 when it is not 0.
 */
static int need_role(const cnx_plan *p, size_t s, const char *role, int objects,
                     cnx_dtype dtype, cnx_dtype dtype2)
{
    const cnx_plan_input *in = role_input(p, s, role);
    const char *worker = p->wf->stages[s].worker;
    if (in == NULL)
        return refuse(p, s,
                      "the %s worker reads input role \"%s\"; name the "
                      "input \"%s\"",
                      worker, role, role);
    if (objects && in->objects[0] == '\0')
        return refuse(p, s,
                      "input %s: the %s worker reads a stage's side "
                      "objects here; give the input \"objects\"",
                      role, worker);
    if (!objects && (in->objects[0] != '\0' || in->tileset))
        return refuse(p, s,
                      "input %s: the %s worker reads a layer's chunks here, "
                      "not %s",
                      role, worker, in->tileset ? "a tile set" : "objects");
    if (objects || dtype == 0)
        return 0;
    if ((in->dtype != dtype && (dtype2 == 0 || in->dtype != dtype2)) ||
        in->channels != 1)
        return refuse(p, s,
                      "input %s is %s x%" PRId64 "; the %s worker needs one "
                      "channel of %s%s%s",
                      role, cnx_dtype_name(in->dtype), in->channels, worker,
                      cnx_dtype_name(dtype), dtype2 ? " or " : "",
                      dtype2 ? cnx_dtype_name(dtype2) : "");
    return 0;
}

/* Stage s must have exactly n inputs (the roles need_role checked). */
static int need_ninputs(const cnx_plan *p, size_t s, size_t n,
                        const char *roles)
{
    if (p->stages[s].ninputs == n)
        return 0;
    return refuse(p, s,
                  "the %s worker reads exactly %s; remove the other "
                  "inputs",
                  p->wf->stages[s].worker, roles);
}

/* The stage writes a one-channel uint64 segmentation (its chunks). */
static int need_u64_output(const cnx_plan *p, size_t s)
{
    const cnx_plan_stage *ps = &p->stages[s];
    if (ps->out_type == CNX_LAYER_SEGMENTATION &&
        ps->out_dtype == CNX_DT_UINT64 && ps->out_channels == 1)
        return 0;
    return refuse(p, s,
                  "the %s worker writes a uint64 segmentation; set "
                  "\"output\": {\"type\": \"segmentation\", "
                  "\"data_type\": \"uint64\"}",
                  p->wf->stages[s].worker);
}

/* Parameters that must be {}. */
static int need_no_params(const cnx_plan *p, size_t s)
{
    if (strcmp(p->wf->stages[s].parameters, "{}") == 0)
        return 0;
    return refuse(p, s,
                  "the %s worker takes no parameters; set "
                  "\"parameters\": {}",
                  p->wf->stages[s].worker);
}

/*
 * The segmentation kernel's parameters of stage s at resolution (nm per
 * voxel of the scale the worker takes it from): parsed over the defaults,
 * as the worker parses them.
 */
static int segment_params(const cnx_plan *p, size_t s,
                          const double resolution[3], cnx_segment_params *sp)
{
    int rc = cnx_segment_params_at(sp, p->wf->stages[s].parameters,
                                   resolution);
    if (rc == CNX_EINVAL) /* the check, at this resolution */
        return refuse(p, s, "at resolution %g,%g,%g nm: %s", resolution[0],
                      resolution[1], resolution[2], cnx_error_last()->message);
    if (rc != 0)
        return refuse(p, s, "%s", cnx_error_last()->message);
    return 0;
}

/* segment: what the kernel's footprint needs at the input resolution, so
 * that a chunk's labels are what the whole volume would give. */
static int halo_segment(const cnx_plan *p, size_t s, int64_t *halo)
{
    cnx_segment_params sp;
    int rc = segment_params(p, s, p->stages[s].in_scale.resolution, &sp);
    if (rc != 0)
        return rc;
    *halo = cnx_segment_halo(&sp);
    if (*halo < 0 || *halo > CNX_TASK_HALO_MAX)
        return refuse(p, s,
                      "the segment kernel needs a halo of %" PRId64 " voxels "
                      "for these parameters at %g,%g,%g nm, over the limit "
                      "of %d; use smaller lengths (seed_distance_nm, "
                      "filter_*_nm) or a coarser scale",
                      *halo, p->stages[s].in_scale.resolution[0],
                      p->stages[s].in_scale.resolution[1],
                      p->stages[s].in_scale.resolution[2], CNX_TASK_HALO_MAX);
    return 0;
}

/* mesh: one voxel of overlap on the high faces. */
static int halo_one(const cnx_plan *p, size_t s, int64_t *halo)
{
    (void)p;
    (void)s;
    *halo = 1;
    return 0;
}

/* Workers that read nothing around their box. */
static int halo_zero(const cnx_plan *p, size_t s, int64_t *halo)
{
    (void)p;
    (void)s;
    *halo = 0;
    return 0;
}

static int check_segment(const cnx_plan *p, size_t s)
{
    const cnx_plan_stage *ps = &p->stages[s];
    const cnx_scale *in = &ps->in_scale;
    cnx_segment_params sp;
    int rc = need_role(p, s, "boundary", 0, CNX_DT_UINT8, CNX_DT_FLOAT32);
    if (rc == 0)
        rc = need_u64_output(p, s);
    if (rc == 0)
        rc = segment_params(p, s, in->resolution, &sp);
    for (int i = 0; i < 3 && rc == 0; i++)
        if (in->voxel_offset[i] < 0 ||
            in->voxel_offset[i] + in->size[i] > CNX_SEGJOIN_COORD_MAX)
            rc = refuse(p, s,
                        "input scale '%s' spans voxels %" PRId64 "..%" PRId64
                        " on axis %c; fragment ids pack coordinates in "
                        "[0, 2^21): segment a scale inside that range",
                        in->key, in->voxel_offset[i],
                        in->voxel_offset[i] + in->size[i], "xyz"[i]);
    return rc;
}

/* The join's input: the face records ("faces") or, for a join as a tree,
 * the block summaries below ("blocks"). */
static int join_input(const cnx_plan *p, size_t s)
{
    const char *role = role_input(p, s, "blocks") ? "blocks" : "faces";
    int rc = need_role(p, s, role, 1, 0, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 1, "role \"faces\" or \"blocks\"");
    return rc;
}

static int check_join(const cnx_plan *p, size_t s)
{
    cnx_segment_params sp;
    int rc = join_input(p, s);
    if (rc == 0)
        rc = need_u64_output(p, s);
    if (rc == 0)
        rc = segment_params(p, s, p->stages[s].out_scale.resolution, &sp);
    return rc;
}

/* segment-join-block: a map stage over blocks of whole chunks, reading one
 * voxel around them (the records beside its faces). */
static int check_join_block(const cnx_plan *p, size_t s)
{
    cnx_segment_params sp;
    int rc = need_role(p, s, "faces", 1, 0, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 1, "role \"faces\"");
    if (rc == 0 && p->wf->stages[s].kind != CNX_WF_MAP)
        rc = refuse(p, s,
                    "the segment-join-block worker summarises one block "
                    "per task; make it a map stage with \"task_size\" the "
                    "block");
    if (rc == 0 && p->stages[s].halo < 1)
        rc = refuse(p, s,
                    "halo %" PRId64 ": the segment-join-block worker reads "
                    "the face records beside its block; set \"halo\" to at "
                    "least 1, or leave it out (derived: 1)",
                    p->stages[s].halo);
    if (rc == 0)
        rc = segment_params(p, s, p->stages[s].out_scale.resolution, &sp);
    return rc;
}

static int check_relabel(const cnx_plan *p, size_t s)
{
    int rc = need_role(p, s, "fragments", 0, CNX_DT_UINT64, 0);
    if (rc == 0)
        rc = need_role(p, s, "mapping", 1, 0, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 2, "roles \"fragments\" and \"mapping\"");
    if (rc == 0)
        rc = need_u64_output(p, s);
    if (rc == 0)
        rc = need_no_params(p, s);
    return rc;
}

static int check_mesh(const cnx_plan *p, size_t s)
{
    int rc = need_role(p, s, "segmentation", 0, CNX_DT_UINT64, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 1, "role \"segmentation\"");
    if (rc == 0 && p->stages[s].halo < 1)
        rc = refuse(p, s,
                    "halo %" PRId64 ": the mesh worker reads one voxel "
                    "beyond each chunk's high faces; set \"halo\" to at "
                    "least 1, or leave it out (derived: 1)",
                    p->stages[s].halo);
    return rc;
}

/* A reduce of one input role, the side objects of a map stage. */
static int check_index_reduce(const cnx_plan *p, size_t s, const char *role)
{
    char what[64];
    int rc = need_role(p, s, role, 1, 0, 0);
    snprintf(what, sizeof(what), "role \"%s\"", role);
    if (rc == 0)
        rc = need_ninputs(p, s, 1, what);
    return rc;
}

static int check_mesh_manifest(const cnx_plan *p, size_t s)
{
    cnx_sharding_target target;
    int sharded, rc = check_index_reduce(p, s, "index");
    if (rc == 0 && cnx__mesh_manifest_params(p->wf->stages[s].parameters,
                                             &sharded, &target) != 0)
        rc = refuse(p, s, "%s", cnx_error_last()->message);
    return rc;
}

static int check_synapse_edges(const cnx_plan *p, size_t s)
{
    cnx_annotation_layout layout;
    int rc = check_index_reduce(p, s, "tables");
    if (rc == 0 && cnx_synapse_edges_params_parse(p->wf->stages[s].parameters,
                                                  &layout) != 0)
        rc = refuse(p, s, "%s", cnx_error_last()->message);
    return rc;
}

static int check_synapses(const cnx_plan *p, size_t s)
{
    cnx_synapse_params sp;
    int rc = need_role(p, s, "cleft", 0, CNX_DT_UINT8, 0);
    if (rc == 0)
        rc = need_role(p, s, "psd", 0, CNX_DT_UINT8, 0);
    if (rc == 0)
        rc = need_role(p, s, "segmentation", 0, CNX_DT_UINT64, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 3,
                          "roles \"cleft\", \"psd\" and \"segmentation\"");
    if (rc == 0 &&
        cnx_synapse_params_parse(p->wf->stages[s].parameters, &sp) != 0)
        rc = refuse(p, s, "%s", cnx_error_last()->message);
    return rc;
}

static int check_montage(const cnx_plan *p, size_t s)
{
    const cnx_wf_stage *st = &p->wf->stages[s];
    cnx_montage_params mp;
    if (p->stages[s].halo != 0)
        return refuse(p, s,
                      "halo %" PRId64 ": the montage worker reads no halo; "
                      "set \"halo\": 0 or leave it out",
                      p->stages[s].halo);
    if (st->kind != CNX_WF_MAP || st->task_size[2] != 1)
        return refuse(p, s,
                      "the montage worker stitches one section per "
                      "task; make it a map stage with \"task_size\": "
                      "[1, 1, 1]");
    if (cnx_montage_params_parse(st->parameters, &mp) != 0)
        return refuse(p, s, "%s", cnx_error_last()->message);
    return 0;
}

/* align-match, align-solve: side objects only, one per slab of
 * CNX_ALIGN_SLAB whole sections. */
static int rule_align_slab(const cnx_scale *in, cnx_scale *out,
                           int64_t factor[3], const char *stage)
{
    int rc = rule_same(in, out, factor, stage);
    out->chunk[0] = in->size[0];
    out->chunk[1] = in->size[1];
    out->chunk[2] = cnx_imin(in->size[2], CNX_ALIGN_SLAB);
    out->encoding = CNX_ENC_RAW;
    return rc;
}

/* align-render: the aligned image on the stitched sections' coordinates
 * less their negative part (the segmentation packs non-negative
 * coordinates; the montage keeps the sections where the stage put them, so
 * x, y < 0 is the margin around the tissue), in chunks of at most 128 x 128
 * x CNX_ALIGN_SLAB (a task renders whole slabs). */
static int rule_align_render(const cnx_scale *in, cnx_scale *out,
                             int64_t factor[3], const char *stage)
{
    int rc = rule_same(in, out, factor, stage);
    for (int i = 0; i < 2; i++)
        if (out->voxel_offset[i] < 0) {
            out->size[i] += out->voxel_offset[i];
            out->voxel_offset[i] = 0;
        }
    if (out->size[0] < 1 || out->size[1] < 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "stage %s: the sections lie at negative x or y "
                             "only; the aligned layer keeps x, y >= 0",
                             stage);
    out->chunk[0] = cnx_imin(in->size[0], 128);
    out->chunk[1] = cnx_imin(in->size[1], 128);
    out->chunk[2] = cnx_imin(in->size[2], CNX_ALIGN_SLAB);
    out->encoding = CNX_ENC_RAW;
    return rc;
}

/* A map stage of the alignment: tasks of whole sections and whole slabs. */
static int align_tasks(const cnx_plan *p, size_t s)
{
    const cnx_wf_stage *st = &p->wf->stages[s];
    const cnx_scale *in = &p->stages[s].in_scale;
    if (st->kind != CNX_WF_MAP || st->task_size[0] < in->size[0] ||
        st->task_size[1] < in->size[1] ||
        (st->task_size[2] % CNX_ALIGN_SLAB != 0 &&
         st->task_size[2] < in->size[2]))
        return refuse(p, s,
                      "the %s worker takes whole sections in slabs of %d; "
                      "make it a map stage with \"task_size\": [65536, "
                      "65536, %d] (or a multiple of %d in z)",
                      st->worker, CNX_ALIGN_SLAB, CNX_ALIGN_SLAB,
                      CNX_ALIGN_SLAB);
    return 0;
}

static int align_params(const cnx_plan *p, size_t s)
{
    cnx_align_params ap;
    if (cnx_align_params_parse(p->wf->stages[s].parameters, &ap) != 0)
        return refuse(p, s, "%s", cnx_error_last()->message);
    return 0;
}

static int check_align_match(const cnx_plan *p, size_t s)
{
    int rc = need_role(p, s, "image", 0, CNX_DT_UINT8, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 1, "role \"image\"");
    if (rc == 0 && p->stages[s].halo < 2)
        rc = refuse(p, s,
                    "halo %" PRId64 ": the align-match worker reads the two "
                    "sections below each; set \"halo\" to 2 or leave it "
                    "out",
                    p->stages[s].halo);
    if (rc == 0)
        rc = align_tasks(p, s);
    if (rc == 0)
        rc = align_params(p, s);
    return rc;
}

static int check_align_solve(const cnx_plan *p, size_t s)
{
    int rc = need_role(p, s, "matches", 1, 0, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 1, "role \"matches\"");
    if (rc == 0)
        rc = align_params(p, s);
    return rc;
}

static int check_align_render(const cnx_plan *p, size_t s)
{
    int rc = need_role(p, s, "image", 0, CNX_DT_UINT8, 0);
    if (rc == 0)
        rc = need_role(p, s, "transforms", 1, 0, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 2, "roles \"image\" and \"transforms\"");
    if (rc == 0)
        rc = align_tasks(p, s);
    if (rc == 0)
        rc = need_no_params(p, s);
    return rc;
}

/* ---- the shard stage ---------------------------------------------------- */

/* shard: the input scale as it is (chunk bytes are copied, so even the
 * compressed_segmentation block stays); the sharding is added by
 * plan_sharding once the data type is known. */
static int rule_shard(const cnx_scale *in, cnx_scale *out, int64_t factor[3],
                      const char *stage)
{
    (void)stage;
    *out = *in;
    for (int i = 0; i < 3; i++)
        factor[i] = 1;
    return 0;
}

/* The output scale's sharding: cnx_sharding_choose over the input grid
 * with the stage's targets (its parameters). */
static int plan_sharding(cnx_plan *p, size_t s)
{
    cnx_plan_stage *ps = &p->stages[s];
    cnx_sharding_target target;
    uint64_t grid[3], chunk_bytes;
    int64_t counts[3];
    cnx_grid g = {{0}, {0}, {0}};
    int rc;

    if (ps->in_scale.sharded)
        return refuse(p, s,
                      "input %s: scale '%s' is sharded already; the shard "
                      "worker reads an unsharded scale",
                      ps->inputs[0].role, ps->in_scale.key);
    rc = cnx__shard_params(p->wf->stages[s].parameters, &target);
    if (rc != 0)
        return refuse(p, s, "%s", cnx_error_last()->message);
    for (int i = 0; i < 3; i++) {
        g.offset[i] = ps->in_scale.voxel_offset[i];
        g.size[i] = ps->in_scale.size[i];
        g.chunk[i] = ps->in_scale.chunk[i];
    }
    cnx_grid_counts(&g, counts);
    chunk_bytes =
        (uint64_t)cnx_dtype_size(ps->out_dtype) * (uint64_t)ps->out_channels;
    for (int i = 0; i < 3; i++) {
        grid[i] = (uint64_t)(counts[i] > 0 ? counts[i] : 1);
        chunk_bytes *= (uint64_t)ps->in_scale.chunk[i];
    }
    rc = cnx_sharding_choose(grid, chunk_bytes, &target,
                             &ps->out_scale.sharding);
    if (rc != 0)
        return refuse(p, s, "%s", cnx_error_last()->message);
    ps->out_scale.sharded = 1;
    return 0;
}

/* The unit a stage's region is snapped to: its input chunks, or for a
 * stage writing a sharded scale its shards' blocks of chunks (a task is
 * one whole shard: its one writer). */
static cnx_scale snap_unit(const cnx_plan_stage *ps)
{
    cnx_scale unit = ps->in_scale;
    if (ps->out_scale.sharded) {
        uint64_t grid[3], block[3];
        for (int i = 0; i < 3; i++) {
            int64_t c = ps->in_scale.chunk[i];
            grid[i] =
                (uint64_t)cnx_imax(1, cnx_ceildiv(ps->in_scale.size[i], c));
        }
        cnx_sharding_block(&ps->out_scale.sharding, grid, block);
        for (int i = 0; i < 3; i++)
            unit.chunk[i] = ps->in_scale.chunk[i] * (int64_t)block[i];
    }
    return unit;
}

static int check_shard(const cnx_plan *p, size_t s)
{
    int rc = need_role(p, s, "source", 0, 0, 0);
    if (rc == 0)
        rc = need_ninputs(p, s, 1, "the role \"source\"");
    if (rc == 0 && p->wf->stages[s].kind != CNX_WF_MAP)
        rc = refuse(p, s,
                    "the shard worker writes one shard per task; make it "
                    "a map stage (the planner cuts one task per shard)");
    if (rc == 0 && p->stages[s].halo != 0)
        rc = refuse(p, s,
                    "halo %" PRId64 ": the shard worker reads no "
                    "halo; set \"halo\" to 0 or leave it out",
                    p->stages[s].halo);
    return rc;
}

static const worker_rule worker_rules[] = {
    {"downsample", rule_downsample, 1, NULL, NULL, NULL},
    {"montage", rule_montage, 0, halo_zero, check_montage, NULL},
    {"segment", rule_same, 0, halo_segment, check_segment, CNX_STAGE_FACES_DIR},
    {"segment-join", rule_same, 0, halo_zero, check_join,
     CNX_STAGE_MAPPING_DIR},
    {"segment-join-block", rule_same, 0, halo_one, check_join_block,
     CNX_STAGE_JOIN_BLOCKS_DIR},
    {"segment-relabel", rule_same, 0, halo_zero, check_relabel, NULL},
    {"mesh", rule_same, 0, halo_one, check_mesh, CNX_STAGE_MESH_INDEX_DIR},
    {"mesh-manifest", rule_same, 0, halo_zero, check_mesh_manifest, NULL},
    {"synapses", rule_same, 0, NULL, check_synapses, CNX_STAGE_SYNAPSES_DIR},
    {"synapse-edges", rule_same, 0, halo_zero, check_synapse_edges, NULL},
    {"align-match", rule_align_slab, 0, NULL, check_align_match,
     CNX_STAGE_ALIGN_MATCHES_DIR},
    {"align-solve", rule_same, 0, halo_zero, check_align_solve,
     CNX_STAGE_ALIGN_TRANSFORMS_DIR},
    {"align-render", rule_align_render, 0, halo_zero, check_align_render, NULL},
    {"shard", rule_shard, 1, halo_zero, check_shard, NULL},
};

static const worker_rule default_rule = {NULL, rule_same, 0, NULL, NULL, NULL};

static const worker_rule *rule_for(const char *worker)
{
    for (size_t i = 0; i < sizeof(worker_rules) / sizeof(worker_rules[0]); i++)
        if (strcmp(worker_rules[i].worker, worker) == 0)
            return &worker_rules[i];
    return &default_rule;
}

/* ---- external inputs ---------------------------------------------------- */

size_t cnx_plan_externals(const cnx_workflow *wf, cnx_plan_ref *refs,
                          size_t cap)
{
    size_t n = 0;
    for (size_t s = 0; s < wf->nstages; s++) {
        for (size_t k = 0; k < wf->stages[s].ninputs; k++) {
            if (wf->stages[s].inputs[k].stage >= 0)
                continue;
            if (n < cap) {
                refs[n].stage = s;
                refs[n].input = k;
            }
            n++;
        }
    }
    return n;
}

/* The dataset's canonical URL (cnx/url.h) into dst (2048 bytes). */
static int copy_dataset(char dst[2048], const char *dataset)
{
    cnx_url url;
    int rc;
    if (dataset == NULL || dataset[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "plan: dataset URL is empty");
    rc = cnx_url_parse(&url, dataset, 0);
    if (rc != 0)
        return cnx_error_wrap("plan: dataset");
    if (strlen(url.canonical) >= 2048)
        return cnx_error_set(CNX_EINVAL, 0,
                             "plan: dataset URL must be 1 to 2047 "
                             "characters");
    memcpy(dst, url.canonical, strlen(url.canonical) + 1);
    return 0;
}

/* dataset/path, joined by the URL module (path is checked as an object
 * name: no "..", no absolute path). */
static int layer_url(char dst[2048], const char *dataset, const char *path)
{
    char *joined = NULL;
    int rc = cnx_url_join(&joined, dataset, 0, path);
    if (rc != 0)
        return cnx_error_wrap("plan: layer '%.64s'", path);
    if (strlen(joined) >= 2048) {
        free(joined);
        return cnx_error_set(CNX_ERANGE, 0,
                             "plan: layer URL %s/%.64s... is over 2047 "
                             "characters",
                             dataset, path);
    }
    memcpy(dst, joined, strlen(joined) + 1);
    free(joined);
    return 0;
}

/*
 * The geometry a tile set stands for: one image scale whose xy extent is
 * the box of every section's nominal tile rectangles grown by the largest
 * nominal error a tile set allows (docs/tiles.md), so that the solved
 * positions fall inside it, whose z extent runs from the first section to
 * the last, and whose "chunk" is one whole section: a task reads the tile
 * set a section at a time.
 */
static int tileset_geometry(cnx_plan_external *out, const char *url)
{
    const int64_t m = CNX_TILESET_MAX_ERROR;
    cnx_store *store = NULL;
    cnx_tileset *ts = NULL;
    uint8_t *text = NULL;
    size_t len = 0;
    int64_t lo[3] = {INT64_MAX, INT64_MAX, INT64_MAX};
    int64_t hi[3] = {INT64_MIN, INT64_MIN, INT64_MIN}, size[3], chunk[3];
    cnx_layer_info info;
    int rc = cnx_store_open(&store, url);

    if (rc == 0)
        rc = cnx_store_get(store, CNX_TILESET_NAME, CNX_TILESET_MAX_JSON,
                           &text, &len);
    if (rc == 0)
        rc = cnx_tileset_parse(&ts, (const char *)text, len, CNX_TILESET_NAME,
                               CNX_TILESET_MAX_ERROR);
    cnx_store_free(store);
    free(text);
    if (rc != 0)
        return rc;
    for (size_t s = 0; s < ts->nsections; s++) {
        const cnx_tile_section *sec = &ts->sections[s];
        lo[2] = cnx_imin(lo[2], sec->z);
        hi[2] = cnx_imax(hi[2], sec->z + 1);
        for (size_t t = 0; t < sec->ntiles; t++) {
            const cnx_tile *tl = &sec->tiles[t];
            if (tl->sha256[0] == '\0') {
                rc = cnx_error_set(CNX_ESCHEMA, 0,
                                   "tile %s has no sha256: not a recorded "
                                   "tile set (record it with cnx-ingest "
                                   "--tiles)",
                                   tl->id);
                cnx_tileset_free(ts);
                return rc;
            }
            lo[0] = cnx_imin(lo[0], tl->x);
            lo[1] = cnx_imin(lo[1], tl->y);
            hi[0] = cnx_imax(hi[0], tl->x + tl->width);
            hi[1] = cnx_imax(hi[1], tl->y + tl->height);
        }
    }
    lo[0] -= m;
    lo[1] -= m;
    hi[0] += m;
    hi[1] += m;
    for (int i = 0; i < 3; i++) {
        size[i] = hi[i] - lo[i];
        chunk[i] = i < 2 ? size[i] : 1;
    }
    cnx_info_init(&info, CNX_LAYER_IMAGE, ts->dtype, size, ts->resolution,
                  chunk);
    memcpy(info.scales[0].voxel_offset, lo, sizeof(lo));
    out->type = CNX_LAYER_IMAGE;
    out->dtype = ts->dtype;
    out->channels = 1;
    out->scale = info.scales[0];
    cnx_tileset_free(ts);
    return 0;
}

int cnx_plan_read_externals(cnx_plan_external **ext, size_t *next,
                            const cnx_workflow *wf, const char *dataset)
{
    size_t n = cnx_plan_externals(wf, NULL, 0);
    cnx_plan_ref *refs = calloc(n + 1, sizeof(*refs));
    cnx_plan_external *out = calloc(n + 1, sizeof(*out));
    char base[2048], url[2048];
    int rc = 0;

    *ext = NULL;
    *next = 0;
    if (refs == NULL || out == NULL) {
        rc = nomem();
        goto done;
    }
    rc = copy_dataset(base, dataset);
    if (rc != 0)
        goto done;
    cnx_plan_externals(wf, refs, n);
    for (size_t e = 0; e < n; e++) {
        const cnx_wf_stage *st = &wf->stages[refs[e].stage];
        const cnx_wf_input *in = &st->inputs[refs[e].input];
        const cnx_layer_info *info;
        cnx_layer *layer = NULL;
        int s;
        rc = layer_url(url, base, in->layer);
        if (rc != 0)
            goto done;
        if (in->tileset) {
            char why[sizeof(cnx_error_last()->message)];
            rc = tileset_geometry(&out[e], url);
            snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
            if (rc != 0 && rc != CNX_EIO)
                rc = cnx_error_set(CNX_ESCHEMA, 0,
                                   "workflow %s: stage %s: input %s: tile "
                                   "set '%.128s' in %s: %s",
                                   wf->name, st->name, in->role, in->layer,
                                   base, why);
            else if (rc != 0)
                cnx_error_wrap("workflow %s: stage %s: input %s", wf->name,
                               st->name, in->role);
            if (rc != 0)
                goto done;
            continue;
        }
        rc = cnx_layer_open(&layer, url);
        if (rc != 0) {
            char why[sizeof(cnx_error_last()->message)];
            if (rc != CNX_ENOTFOUND && rc != CNX_ECORRUPT &&
                rc != CNX_EUNSUPPORTED && rc != CNX_ENAME && rc != CNX_EINVAL) {
                /* storage trouble: keep the code and retriable flag */
                cnx_error_wrap("workflow %s: stage %s: input %s", wf->name,
                               st->name, in->role);
                goto done;
            }
            snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
            rc = cnx_error_set(CNX_ESCHEMA, 0,
                               "workflow %s: stage %s: input %s: layer "
                               "'%.128s' %s %s (%s)",
                               wf->name, st->name, in->role, in->layer,
                               rc == CNX_ENOTFOUND ? "not found in"
                                                   : "is unusable in",
                               base, why);
            goto done;
        }
        info = cnx_layer_get_info(layer);
        s = in->scale ? cnx_info_find_scale(info, in->scale) : 0;
        if (s < 0) {
            char have[512];
            size_t off = 0;
            have[0] = '\0';
            for (int k = 0; k < info->nscales && off < sizeof(have); k++)
                off += (size_t)snprintf(have + off, sizeof(have) - off, "%s%s",
                                        k ? ", " : "", info->scales[k].key);
            rc = cnx_error_set(CNX_ESCHEMA, 0,
                               "workflow %s: stage %s: input %s: layer "
                               "'%.128s' in %s has no scale '%s' (it has "
                               "%s)",
                               wf->name, st->name, in->role, in->layer, base,
                               in->scale, have);
            cnx_layer_free(layer);
            goto done;
        }
        out[e].type = info->type;
        out[e].dtype = info->dtype;
        out[e].channels = info->channels;
        out[e].scale = info->scales[s];
        cnx_layer_free(layer);
    }
    *ext = out;
    *next = n;
    out = NULL;
done:
    free(refs);
    free(out);
    return rc;
}

int cnx_plan_externals_to_json(const cnx_plan_external *ext, size_t next,
                               char **json)
{
    json_t *arr = json_array();
    int rc = 0;

    *json = NULL;
    if (arr == NULL)
        return nomem();
    for (size_t e = 0; e < next; e++) {
        cnx_layer_info info;
        char *text = NULL;
        json_t *one;
        memset(&info, 0, sizeof(info));
        info.type = ext[e].type;
        info.dtype = ext[e].dtype;
        info.channels = ext[e].channels;
        info.nscales = 1;
        info.scales[0] = ext[e].scale;
        rc = cnx_info_to_json(&info, &text);
        if (rc != 0)
            break;
        one = json_loads(text, 0, NULL);
        free(text);
        if (one == NULL || json_array_append_new(arr, one) != 0) {
            rc = nomem();
            break;
        }
    }
    if (rc == 0) {
        *json = cnx__json_canonical(arr);
        if (*json == NULL)
            rc = nomem();
    }
    json_decref(arr);
    return rc;
}

int cnx_plan_externals_from_json(cnx_plan_external **ext, size_t *next,
                                 const char *json, size_t len)
{
    cnx_plan_external *out = NULL;
    json_t *arr = NULL;
    size_t n;
    int rc;

    *ext = NULL;
    *next = 0;
    rc = cnx__json_parse(&arr, json, len, CNX_ECORRUPT, "plan externals");
    if (rc != 0)
        return rc;
    if (!json_is_array(arr)) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "plan externals: must be an array of info "
                           "documents");
        goto done;
    }
    n = json_array_size(arr);
    out = calloc(n + 1, sizeof(*out));
    if (out == NULL) {
        rc = nomem();
        goto done;
    }
    for (size_t e = 0; e < n; e++) {
        char *text = cnx__json_canonical(json_array_get(arr, e));
        cnx_layer_info info;
        if (text == NULL) {
            rc = nomem();
            goto done;
        }
        rc = cnx_info_parse(&info, text, strlen(text));
        free(text);
        if (rc == 0 && info.nscales != 1)
            rc = cnx_error_set(CNX_ECORRUPT, 0, "must have one scale");
        if (rc != 0) {
            cnx_error_wrap("plan externals[%zu]", e);
            goto done;
        }
        out[e].type = info.type;
        out[e].dtype = info.dtype;
        out[e].channels = info.channels;
        out[e].scale = info.scales[0];
    }
    *ext = out;
    *next = n;
    out = NULL;
done:
    free(out);
    json_decref(arr);
    return rc;
}

/* ---- building a plan ---------------------------------------------------- */

static int same_grid(const cnx_scale *a, const cnx_scale *b)
{
    for (int i = 0; i < 3; i++)
        if (a->resolution[i] != b->resolution[i] || a->size[i] != b->size[i] ||
            a->voxel_offset[i] != b->voxel_offset[i])
            return 0;
    return 1;
}

/* Inputs, input and output geometry of every stage, in stage order. */
static int derive_geometry(cnx_plan *p, const cnx_plan_external *ext)
{
    const cnx_workflow *wf = p->wf;
    size_t e = 0;

    for (size_t s = 0; s < wf->nstages; s++) {
        const cnx_wf_stage *st = &wf->stages[s];
        cnx_plan_stage *ps = &p->stages[s];
        const worker_rule *rule = rule_for(st->worker);
        cnx_layer_type in_type = CNX_LAYER_IMAGE;
        cnx_dtype in_dtype = CNX_DT_UINT8;
        cnx_scale in;
        int rc;

        ps->ninputs = st->ninputs;
        for (size_t k = 0; k < st->ninputs; k++) {
            const cnx_wf_input *wi = &st->inputs[k];
            cnx_plan_input *pi = &ps->inputs[k];
            cnx_layer_type type;
            cnx_dtype dtype;
            int64_t channels;
            snprintf(pi->role, sizeof(pi->role), "%s", wi->role);
            snprintf(pi->objects, sizeof(pi->objects), "%s", wi->objects);
            pi->tileset = wi->tileset;
            if (wi->stage < 0) {
                const cnx_plan_external *x = &ext[e++];
                rc = layer_url(pi->layer, p->dataset, wi->layer);
                if (rc != 0)
                    return rc;
                pi->scale = x->scale;
                type = x->type;
                dtype = x->dtype;
                channels = x->channels;
            } else {
                const cnx_plan_stage *src = &p->stages[wi->stage];
                assert((size_t)wi->stage < s);
                memcpy(pi->layer, src->out_layer, sizeof(pi->layer));
                pi->scale = src->out_scale;
                type = src->out_type;
                dtype = src->out_dtype;
                channels = src->out_channels;
            }
            pi->type = type;
            pi->dtype = dtype;
            pi->channels = channels;
            if (k == 0) {
                in_type = type;
                in_dtype = dtype;
                ps->out_channels = channels;
            }
        }
        if (st->kind == CNX_WF_MAP) {
            for (size_t k = 1; k < st->ninputs; k++) {
                const cnx_scale *a = &ps->inputs[0].scale;
                const cnx_scale *b = &ps->inputs[k].scale;
                if (same_grid(a, b))
                    continue;
                return cnx_error_set(
                    CNX_ESCHEMA, 0,
                    "workflow %s: stage %s: inputs %s and %s have different "
                    "grids (resolution %g,%g,%g size %" PRId64 ",%" PRId64
                    ",%" PRId64 " offset %" PRId64 ",%" PRId64 ",%" PRId64
                    " vs resolution %g,%g,%g size %" PRId64 ",%" PRId64
                    ",%" PRId64 " offset %" PRId64 ",%" PRId64 ",%" PRId64
                    "); a map stage reads one box of all of them",
                    wf->name, st->name, ps->inputs[0].role, ps->inputs[k].role,
                    a->resolution[0], a->resolution[1], a->resolution[2],
                    a->size[0], a->size[1], a->size[2], a->voxel_offset[0],
                    a->voxel_offset[1], a->voxel_offset[2], b->resolution[0],
                    b->resolution[1], b->resolution[2], b->size[0], b->size[1],
                    b->size[2], b->voxel_offset[0], b->voxel_offset[1],
                    b->voxel_offset[2]);
            }
        }
        memcpy(ps->in_layer, ps->inputs[0].layer, sizeof(ps->in_layer));
        ps->in_scale = ps->inputs[0].scale;
        ps->out_type =
            st->out_type >= 0 ? (cnx_layer_type)st->out_type : in_type;
        ps->out_dtype =
            st->out_dtype >= 0 ? (cnx_dtype)st->out_dtype : in_dtype;
        in = ps->in_scale;
        if (strcmp(st->worker, "segment-join") == 0 && st->ninputs == 1 &&
            st->inputs[0].stage >= 0 &&
            strcmp(wf->stages[st->inputs[0].stage].worker,
                   "segment-join-block") == 0)
            /* the top of a join as a tree writes on the fragments' grid,
             * as the one-task join does, not on the blocks' */
            in = p->stages[st->inputs[0].stage].in_scale;
        /* Outputs are written one object a chunk, raw or
         * compressed_segmentation, whatever the input's layout, encoding
         * and other members (sharded, jpeg and png inputs are read). */
        if (in.encoding == CNX_ENC_JPEG || in.encoding == CNX_ENC_PNG)
            in.encoding = CNX_ENC_RAW;
        in.sharded = 0;
        memset(&in.sharding, 0, sizeof(in.sharding));
        in.extra[0] = '\0';
        if (rule->same_format &&
            (ps->out_type != in_type || ps->out_dtype != in_dtype ||
             (st->out_encoding >= 0 && st->out_encoding != (int)in.encoding)))
            return cnx_error_set(
                CNX_ESCHEMA, 0,
                "workflow %s: stage %s: output: the %s "
                "worker writes its input's type, "
                "data_type and encoding (%s %s %s)",
                wf->name, st->name, st->worker,
                in_type == CNX_LAYER_SEGMENTATION ? "segmentation" : "image",
                cnx_dtype_name(in_dtype),
                in.encoding == CNX_ENC_CSEG ? "compressed_segmentation"
                                            : "raw");
        if (st->out_encoding >= 0)
            in.encoding = (cnx_encoding)st->out_encoding;
        rc = rule->out_scale(&in, &ps->out_scale, ps->factor, st->name);
        if (rc != 0)
            return cnx_error_wrap("workflow %s", wf->name);
        if (strcmp(st->worker, "segment-join-block") == 0)
            for (int i = 0; i < 3; i++) {
                /* one summary per task: the output's chunk is the block */
                int64_t c = in.chunk[i], want = st->task_size[i];
                want = want < c ? c : (want / c) * c;
                ps->out_scale.chunk[i] = cnx_imin(want, in.size[i]);
                ps->out_scale.encoding = CNX_ENC_RAW;
            }
        if (rule->out_scale == rule_shard) { /* the one sharded output */
            rc = plan_sharding(p, s);
            if (rc != 0)
                return rc;
        }
        if (ps->out_scale.encoding == CNX_ENC_CSEG &&
            ps->out_dtype != CNX_DT_UINT32 && ps->out_dtype != CNX_DT_UINT64)
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "workflow %s: stage %s: output.encoding: "
                                 "compressed_segmentation needs uint32 or "
                                 "uint64, not %s",
                                 wf->name, st->name,
                                 cnx_dtype_name(ps->out_dtype));
        if (ps->out_type == CNX_LAYER_SEGMENTATION &&
            (ps->out_dtype == CNX_DT_FLOAT32 || ps->out_channels != 1))
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "workflow %s: stage %s: output: a "
                                 "segmentation must be one channel of an "
                                 "integer type",
                                 wf->name, st->name);
        rc = layer_url(ps->out_layer, p->dataset, st->output_layer);
        if (rc != 0)
            return rc;
    }
    /* Each (layer, scale) has one writer; a layer has one format. */
    for (size_t a = 0; a < wf->nstages; a++) {
        for (size_t b = a + 1; b < wf->nstages; b++) {
            const cnx_plan_stage *pa = &p->stages[a], *pb = &p->stages[b];
            if (strcmp(wf->stages[a].output_layer,
                       wf->stages[b].output_layer) != 0)
                continue;
            if (strcmp(pa->out_scale.key, pb->out_scale.key) == 0 &&
                strcmp(wf->stages[a].output_part,
                       wf->stages[b].output_part) == 0)
                return cnx_error_set(
                    CNX_ESCHEMA, 0,
                    "workflow %s: stages %s and %s both write layer '%.128s' "
                    "at scale '%s'%s%s",
                    wf->name, wf->stages[a].name, wf->stages[b].name,
                    wf->stages[a].output_layer, pa->out_scale.key,
                    wf->stages[a].output_part[0] ? " part " : "",
                    wf->stages[a].output_part);
            if (pa->out_type != pb->out_type ||
                pa->out_dtype != pb->out_dtype ||
                pa->out_channels != pb->out_channels)
                return cnx_error_set(
                    CNX_ESCHEMA, 0,
                    "workflow %s: stages %s and %s both write layer '%.128s' "
                    "but with different type, data_type or channels",
                    wf->name, wf->stages[a].name, wf->stages[b].name,
                    wf->stages[a].output_layer);
        }
    }
    return 0;
}

/* Input k of stage s names the side objects its producer writes. */
static int check_objects(const cnx_plan *p, size_t s, size_t k)
{
    const cnx_wf_input *in = &p->wf->stages[s].inputs[k];
    const cnx_wf_stage *src;
    const worker_rule *rule;
    if (in->stage < 0 || in->objects[0] == '\0')
        return 0;
    src = &p->wf->stages[in->stage];
    rule = rule_for(src->worker);
    if (rule->side_dir == NULL || strcmp(rule->side_dir, in->objects) == 0)
        return 0;
    return refuse(p, s,
                  "input %s: the %s worker (stage %s) writes its per-chunk "
                  "objects under \"%s\", not \"%s\"; set \"objects\": "
                  "\"%s\"",
                  in->role, src->worker, src->name, rule->side_dir,
                  in->objects, rule->side_dir);
}

/*
 * Every stage's halo -- the workflow's when it pins one, else what the
 * worker's rule derives from its footprint (computed once, here) -- then
 * every worker's plan-time checks, so that a stage the worker would
 * refuse task by task is refused before any task exists.
 */
static int apply_rules(cnx_plan *p)
{
    for (size_t s = 0; s < p->nstages; s++) {
        const cnx_wf_stage *st = &p->wf->stages[s];
        const worker_rule *rule = rule_for(st->worker);
        cnx_plan_stage *ps = &p->stages[s];
        int rc = 0;
        if (st->halo_pinned)
            ps->halo = st->halo;
        else if (rule->halo != NULL)
            rc = rule->halo(p, s, &ps->halo);
        else
            ps->halo = st->kind == CNX_WF_REDUCE ? 0 : 2;
        if (rc == 0 && rule->check != NULL)
            rc = rule->check(p, s);
        for (size_t k = 0; k < st->ninputs && rc == 0; k++)
            rc = check_objects(p, s, k);
        if (rc != 0)
            return rc;
        assert(ps->halo >= 0 && ps->halo <= CNX_TASK_HALO_MAX);
    }
    return 0;
}

/* Is stage s an input (not just a dependency) of stage d? */
static int reads_from(const cnx_wf_stage *d, int s)
{
    for (size_t k = 0; k < d->ninputs; k++)
        if (d->inputs[k].stage == s)
            return 1;
    return 0;
}

/* The box task roi of stage s reads, in its input-scale voxels. */
static cnx_box read_box(const cnx_plan *p, size_t s, const cnx_box *roi)
{
    cnx_box bounds = scale_bounds(&p->stages[s].in_scale);
    return cnx_box_grow(roi, p->stages[s].halo, &bounds);
}

/* What dependent d (reading s) needs of s, in s's input-scale voxels. */
static cnx_box need_of(const cnx_plan *p, size_t s, size_t d)
{
    const cnx_plan_stage *ps = &p->stages[s];
    cnx_box r = read_box(p, d, &p->stages[d].region), ob, need;
    cnx_box obounds = scale_bounds(&ps->out_scale);
    cnx_box ibounds = scale_bounds(&ps->in_scale);
    if (cnx_box_empty(&r))
        return r;
    ob = map_box(&r, &p->stages[d].in_scale, &ps->out_scale);
    ob = cnx_box_intersect(&ob, &obounds);
    for (int i = 0; i < 3; i++) {
        need.min[i] = ob.min[i] * ps->factor[i];
        need.max[i] = ob.max[i] * ps->factor[i];
    }
    return cnx_box_intersect(&need, &ibounds);
}

static int add_note(cnx_plan *p, const char *text)
{
    char **bigger = realloc(p->notes, (p->nnotes + 1) * sizeof(*bigger));
    if (bigger == NULL)
        return nomem();
    p->notes = bigger;
    p->notes[p->nnotes] = strdup(text);
    if (p->notes[p->nnotes] == NULL)
        return nomem();
    p->nnotes++;
    return 0;
}

/* Regions, from the last stage backwards; a note per widened stage. */
static int widen(cnx_plan *p)
{
    const cnx_workflow *wf = p->wf;
    const cnx_scale *first = &p->stages[0].in_scale;
    cnx_box fb = scale_bounds(first);

    if (!cnx_box_contains(&fb, &p->roi)) {
        /* said once, in the first stage's input voxels */
        char a[128], b[128], c[128], note[640];
        cnx_box in = cnx_box_intersect(&p->roi, &fb);
        fmt_box(&p->roi, a, sizeof(a));
        fmt_box(&fb, b, sizeof(b));
        fmt_box(&in, c, sizeof(c));
        snprintf(note, sizeof(note),
                 "roi %s reaches outside the volume (voxels %s of scale "
                 "'%s'): clipped to %s",
                 a, b, first->key, c);
        if (add_note(p, note) != 0)
            return CNX_ENOMEM;
    }
    for (size_t s = wf->nstages; s-- > 0;) {
        cnx_plan_stage *ps = &p->stages[s];
        cnx_box bounds = scale_bounds(&ps->in_scale);
        cnx_box roi = map_box(&p->roi, first, &ps->in_scale), base, all;
        cnx_scale unit = snap_unit(ps);
        char why[640] = "", a[128], b[128], note[1024];
        const char *reasons[CNX_WF_MAX_STAGES + 1];
        char halos[CNX_WF_MAX_STAGES][96];
        size_t nr = 0;

        roi = cnx_box_intersect(&roi, &bounds);
        ps->roi = roi;
        base = snap(&roi, &unit);
        if (!cnx_box_empty(&roi) && !cnx_box_equal(&base, &roi)) {
            snprintf(halos[0], sizeof(halos[0]),
                     "whole %s of %" PRId64 ",%" PRId64 ",%" PRId64,
                     ps->out_scale.sharded ? "shards" : "chunks", unit.chunk[0],
                     unit.chunk[1], unit.chunk[2]);
            reasons[nr++] = halos[0];
        }
        all = base;
        for (size_t d = s + 1; d < wf->nstages; d++) {
            cnx_box need;
            if (!reads_from(&wf->stages[d], (int)s))
                continue;
            need = need_of(p, s, d);
            if (!cnx_box_contains(&base, &need) && nr < CNX_WF_MAX_STAGES) {
                if (p->stages[d].halo > 0)
                    snprintf(halos[nr], sizeof(halos[nr]),
                             "the halo %" PRId64 " that %s needs",
                             p->stages[d].halo, wf->stages[d].name);
                else
                    snprintf(halos[nr], sizeof(halos[nr]), "what %s reads",
                             wf->stages[d].name);
                reasons[nr] = halos[nr];
                nr++;
            }
            all = box_union(&all, &need);
        }
        ps->region = snap(&all, &unit);
        if (cnx_box_empty(&ps->region)) {
            fmt_box(&bounds, a, sizeof(a));
            return cnx_error_set(CNX_EINVAL, 0,
                                 "workflow %s: stage %s: the roi misses its "
                                 "input (scale '%s', voxels %s)",
                                 wf->name, wf->stages[s].name, ps->in_scale.key,
                                 a);
        }
        if (cnx_box_equal(&ps->region, &roi))
            continue;
        for (size_t k = 0; k < nr; k++) {
            size_t len = strlen(why);
            snprintf(why + len, sizeof(why) - len, "%s%s",
                     k == 0 ? "" : (k + 1 == nr ? " and " : ", "), reasons[k]);
        }
        fmt_box(&roi, a, sizeof(a));
        fmt_box(&ps->region, b, sizeof(b));
        if (cnx_box_empty(&roi))
            snprintf(note, sizeof(note), "%s: region %s (only %s)",
                     wf->stages[s].name, b, why);
        else
            snprintf(note, sizeof(note), "%s: region %s widened to %s (%s)",
                     wf->stages[s].name, a, b, why);
        if (add_note(p, note) != 0)
            return CNX_ENOMEM;
    }
    return 0;
}

static void lattice_free(cnx_plan_lattice *l)
{
    if (l == NULL)
        return;
    for (size_t s = 0; s < l->nstages; s++)
        free(l->st[s].mem);
    free(l->st);
    free(l);
}

/* Fill the per-axis interval arrays of stage s from its boxes. */
static int set_axes(cnx_plan *p, size_t s, const cnx_box *boxes, size_t n)
{
    stage_lattice *sl = &p->lattice->st[s];
    cnx_plan_stage *ps = &p->stages[s];
    cnx_box ib = scale_bounds(&ps->in_scale);
    int64_t cnt[3], total, h = ps->halo;
    int64_t *m;

    /* Boxes come in z, y, x order: count the cells of each axis. */
    for (cnt[0] = 1;
         (size_t)cnt[0] < n && boxes[cnt[0]].min[1] == boxes[0].min[1] &&
         boxes[cnt[0]].min[2] == boxes[0].min[2];
         cnt[0]++)
        ;
    for (cnt[1] = 1; (size_t)(cnt[1] * cnt[0]) < n &&
                     boxes[cnt[1] * cnt[0]].min[2] == boxes[0].min[2];
         cnt[1]++)
        ;
    cnt[2] = (int64_t)n / (cnt[0] * cnt[1]);
    if (cnt[0] * cnt[1] * cnt[2] != (int64_t)n)
        return cnx_error_set(CNX_EINVAL, 0,
                             "plan: stage %s: task boxes are not a lattice",
                             p->wf->stages[s].name);
    total = cnt[0] + cnt[1] + cnt[2];
    m = calloc((size_t)(6 * total), sizeof(*m));
    if (m == NULL)
        return nomem();
    sl->mem = m;
    for (int i = 0; i < 3; i++) {
        axis *ax = &sl->ax[i];
        int64_t stride = i == 0 ? 1 : (i == 1 ? cnt[0] : cnt[0] * cnt[1]);
        ax->n = cnt[i];
        ax->rmin = m;
        ax->rmax = m + cnt[i];
        ax->wmin = m + 2 * cnt[i];
        ax->wmax = m + 3 * cnt[i];
        ax->gmin = m + 4 * cnt[i];
        ax->gmax = m + 5 * cnt[i];
        m += 6 * cnt[i];
        for (int64_t k = 0; k < cnt[i]; k++) {
            const cnx_box *b = &boxes[k * stride];
            ax->rmin[k] = b->min[i];
            ax->rmax[k] = b->max[i];
            ax->wmin[k] = cnx_floordiv(b->min[i], ps->factor[i]);
            ax->wmax[k] = cnx_ceildiv(b->max[i], ps->factor[i]);
            ax->gmin[k] = cnx_imax(b->min[i] - h, ib.min[i]);
            ax->gmax[k] = cnx_imin(b->max[i] + h, ib.max[i]);
        }
    }
    /* The generator's boxes are exactly the products of the intervals. */
    for (size_t t = 0; t < n; t++) {
        int64_t c[3] = {(int64_t)t % cnt[0], ((int64_t)t / cnt[0]) % cnt[1],
                        (int64_t)t / (cnt[0] * cnt[1])};
        for (int i = 0; i < 3; i++)
            if (boxes[t].min[i] != sl->ax[i].rmin[c[i]] ||
                boxes[t].max[i] != sl->ax[i].rmax[c[i]])
                return cnx_error_set(CNX_EINVAL, 0,
                                     "plan: stage %s: task boxes are not a "
                                     "lattice",
                                     p->wf->stages[s].name);
    }
    return 0;
}

/* A map stage's task size: the workflow's, rounded to whole input chunks
 * (at least one); a reduce stage's single task is its whole region. */
static void set_task_size(cnx_plan *p, size_t s)
{
    cnx_plan_stage *ps = &p->stages[s];
    const cnx_wf_stage *ws = &p->wf->stages[s];
    if (ws->kind == CNX_WF_REDUCE) {
        cnx_box_size(&ps->region, ps->task_size);
        return;
    }
    if (ps->out_scale.sharded) { /* one task per shard */
        cnx_scale unit = snap_unit(ps);
        memcpy(ps->task_size, unit.chunk, sizeof(ps->task_size));
        return;
    }
    for (int i = 0; i < 3; i++) {
        int64_t want = ws->task_size[i];
        int64_t c = ps->in_scale.chunk[i];
        ps->task_size[i] = want < c ? c : (want / c) * c;
    }
}

/*
 * How many boxes cnx_boxgen cuts from region with task_size on grid,
 * without cutting them (saturating at SIZE_MAX): cells are aligned to the
 * grid origin, so per axis they are the step-sized runs of chunk indices
 * that meet the region's chunk range, and no cell is empty. 0 when the
 * region misses the grid or the grid or task size is bad (cut() reports
 * those).
 */
static size_t count_boxes(const cnx_grid *grid, const cnx_box *region,
                          const int64_t task_size[3])
{
    int64_t first[3], hi[3];
    size_t n = 1;
    if (cnx_grid_check(grid) != 0)
        return 0;
    cnx_grid_chunk_range(grid, region, first, hi);
    for (int i = 0; i < 3; i++) {
        int64_t step, lo, k;
        if (hi[i] <= first[i] || task_size[i] <= 0 ||
            task_size[i] % grid->chunk[i] != 0)
            return 0;
        step = task_size[i] / grid->chunk[i];
        lo = cnx_floordiv(first[i], step) * step;
        k = cnx_ceildiv(hi[i] - lo, step);
        assert(k > 0);
        if (n > SIZE_MAX / (size_t)k)
            return SIZE_MAX;
        n *= (size_t)k;
    }
    return n;
}

/* The number of tasks of stage s, once its region is known. */
static size_t stage_count(cnx_plan *p, size_t s)
{
    cnx_plan_stage *ps = &p->stages[s];
    cnx_grid grid = cnx_scale_grid(&ps->in_scale);
    set_task_size(p, s);
    if (p->wf->stages[s].kind == CNX_WF_REDUCE)
        return 1;
    return count_boxes(&grid, &ps->region, ps->task_size);
}

/* Refuse a plan of more than max_tasks tasks, before any is cut. */
static int check_cap(cnx_plan *p, size_t max_tasks)
{
    size_t total = 0, counts[CNX_WF_MAX_STAGES];
    char detail[1024] = "";
    assert(p->nstages <= CNX_WF_MAX_STAGES);
    for (size_t s = 0; s < p->nstages; s++) {
        counts[s] = stage_count(p, s);
        total = counts[s] > SIZE_MAX - total ? SIZE_MAX : total + counts[s];
    }
    if (total <= max_tasks)
        return 0;
    for (size_t s = 0; s < p->nstages; s++) {
        size_t len = strlen(detail);
        snprintf(detail + len, sizeof(detail) - len, "%s%s %zu",
                 s == 0 ? "" : ", ", p->wf->stages[s].name, counts[s]);
    }
    return cnx_error_set(CNX_ETOOBIG, 0,
                         "workflow %s: the region needs %s%zu tasks (%s), "
                         "more than the cap of %zu tasks per request",
                         p->wf->name, total == SIZE_MAX ? "over " : "", total,
                         detail, max_tasks);
}

/* Cut every stage's region into tasks. */
static int cut(cnx_plan *p)
{
    const cnx_workflow *wf = p->wf;
    cnx_box **boxes = calloc(wf->nstages, sizeof(*boxes));
    size_t *counts = calloc(wf->nstages, sizeof(*counts));
    size_t total = 0;
    int rc = 0;

    if (boxes == NULL || counts == NULL) {
        rc = nomem();
        goto done;
    }
    for (size_t s = 0; s < wf->nstages; s++) {
        cnx_plan_stage *ps = &p->stages[s];
        cnx_grid grid = cnx_scale_grid(&ps->in_scale);
        set_task_size(p, s);
        if (wf->stages[s].kind == CNX_WF_REDUCE) {
            boxes[s] = malloc(sizeof(cnx_box));
            if (boxes[s] == NULL) {
                rc = nomem();
                goto done;
            }
            boxes[s][0] = ps->region;
            counts[s] = 1;
        } else {
            rc = cnx_boxgen(&boxes[s], &counts[s], &grid, &ps->region,
                            ps->task_size);
            if (rc != 0)
                goto done;
            /* check_cap counted the same boxes without cutting them. */
            assert(counts[s] == count_boxes(&grid, &ps->region, ps->task_size));
        }
        ps->first = total;
        ps->count = counts[s];
        total += counts[s];
        rc = set_axes(p, s, boxes[s], counts[s]);
        if (rc != 0)
            goto done;
    }
    if (total > UINT32_MAX) {
        rc = cnx_error_set(CNX_ETOOBIG, 0, "plan: %zu tasks", total);
        goto done;
    }
    p->tasks = calloc(total + 1, sizeof(*p->tasks));
    if (p->tasks == NULL) {
        rc = nomem();
        goto done;
    }
    p->ntasks = total;
    for (size_t s = 0; s < wf->nstages; s++) {
        const cnx_plan_stage *ps = &p->stages[s];
        for (size_t k = 0; k < counts[s]; k++) {
            cnx_plan_task *t = &p->tasks[ps->first + k];
            t->stage = (uint32_t)s;
            t->roi = boxes[s][k];
            for (int i = 0; i < 3; i++) {
                t->write.min[i] = cnx_floordiv(t->roi.min[i], ps->factor[i]);
                t->write.max[i] = cnx_ceildiv(t->roi.max[i], ps->factor[i]);
            }
        }
    }
done:
    for (size_t s = 0; boxes != NULL && s < wf->nstages; s++)
        free(boxes[s]);
    free(boxes);
    free(counts);
    return rc;
}

/* ---- dependency queries -------------------------------------------------- */

/* First k with key[k] > v (key non-decreasing). */
static int64_t upper(const int64_t *key, int64_t n, int64_t v)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (key[mid] > v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* First k with key[k] >= v (key non-decreasing). */
static int64_t lower(const int64_t *key, int64_t n, int64_t v)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (key[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/*
 * Cells [lo, hi) per axis whose interval [mins[k], maxs[k]) meets q's:
 * those with maxs > q.min and mins < q.max. @return the number of cells.
 */
static int64_t cell_range(const stage_lattice *sl, int write, const cnx_box *q,
                          int64_t lo[3], int64_t hi[3])
{
    int64_t n = 1;
    for (int i = 0; i < 3; i++) {
        const axis *ax = &sl->ax[i];
        const int64_t *mins = write ? ax->wmin : ax->gmin;
        const int64_t *maxs = write ? ax->wmax : ax->gmax;
        lo[i] = upper(maxs, ax->n, q->min[i]);
        hi[i] = lower(mins, ax->n, q->max[i]);
        if (hi[i] <= lo[i] || q->max[i] <= q->min[i])
            return 0;
        n *= hi[i] - lo[i];
    }
    return n;
}

/* Append the tasks of a cell range (z, y, x order: ascending indices). */
static void emit_range(const cnx_plan *p, size_t s, const int64_t lo[3],
                       const int64_t hi[3], size_t *ids, size_t *n)
{
    const axis *ax = p->lattice->st[s].ax;
    for (int64_t z = lo[2]; z < hi[2]; z++)
        for (int64_t y = lo[1]; y < hi[1]; y++)
            for (int64_t x = lo[0]; x < hi[0]; x++)
                ids[(*n)++] = p->stages[s].first +
                              (size_t)((z * ax[1].n + y) * ax[0].n + x);
}

static void emit_all(const cnx_plan *p, size_t s, size_t *ids, size_t *n)
{
    for (size_t k = 0; k < p->stages[s].count; k++)
        ids[(*n)++] = p->stages[s].first + k;
}

/* The input of stage d produced by stage s (the first such role). */
static const cnx_plan_input *input_from(const cnx_plan *p, size_t d, int s)
{
    const cnx_wf_stage *st = &p->wf->stages[d];
    for (size_t k = 0; k < st->ninputs; k++)
        if (st->inputs[k].stage == s)
            return &p->stages[d].inputs[k];
    return NULL;
}

/*
 * Walk the tasks task t waits for: count them (ids NULL) or list them.
 * For an input from S, t's read box is mapped to S's output scale and
 * clipped to it; the S tasks whose write boxes meet it are t's inputs.
 */
static size_t walk_inputs(const cnx_plan *p, size_t t, size_t *ids)
{
    const cnx_plan_task *task = &p->tasks[t];
    size_t d = task->stage, n = 0;
    const cnx_wf_stage *st = &p->wf->stages[d];
    cnx_box r = read_box(p, d, &task->roi);

    for (size_t k = 0; k < st->ndeps; k++) {
        size_t s = (size_t)st->deps[k];
        const cnx_plan_input *in = input_from(p, d, (int)s);
        cnx_box q, ob;
        int64_t lo[3], hi[3], c;
        if (st->kind == CNX_WF_REDUCE || in == NULL) {
            if (ids != NULL)
                emit_all(p, s, ids, &n);
            else
                n += p->stages[s].count;
            continue;
        }
        ob = scale_bounds(&in->scale);
        q = map_box(&r, &p->stages[d].in_scale, &in->scale);
        q = cnx_box_intersect(&q, &ob);
        c = cell_range(&p->lattice->st[s], 1, &q, lo, hi);
        if (c > 0 && ids != NULL)
            emit_range(p, s, lo, hi, ids, &n);
        else if (c > 0)
            n += (size_t)c;
    }
    return n;
}

/* Walk the tasks that wait for t, as walk_inputs. */
static size_t walk_dependents(const cnx_plan *p, size_t t, size_t *ids)
{
    const cnx_plan_task *task = &p->tasks[t];
    size_t s = task->stage, n = 0;

    for (size_t d = s + 1; d < p->wf->nstages; d++) {
        const cnx_wf_stage *st = &p->wf->stages[d];
        const cnx_plan_input *in;
        int dep = 0;
        cnx_box q;
        int64_t lo[3], hi[3], c;
        for (size_t k = 0; k < st->ndeps; k++)
            dep |= (size_t)st->deps[k] == s;
        if (!dep)
            continue;
        in = input_from(p, d, (int)s);
        if (st->kind == CNX_WF_REDUCE || in == NULL) {
            if (ids != NULL)
                emit_all(p, d, ids, &n);
            else
                n += p->stages[d].count;
            continue;
        }
        /* Inputs of a map stage share the stage's input grid. */
        q = map_box(&task->write, &in->scale, &p->stages[d].in_scale);
        c = cell_range(&p->lattice->st[d], 0, &q, lo, hi);
        if (c > 0 && ids != NULL)
            emit_range(p, d, lo, hi, ids, &n);
        else if (c > 0)
            n += (size_t)c;
    }
    return n;
}

static int listing(const cnx_plan *p, size_t t, size_t **ids, size_t *n,
                   size_t (*walk)(const cnx_plan *, size_t, size_t *))
{
    size_t count;
    *ids = NULL;
    *n = 0;
    assert(t < p->ntasks);
    count = walk(p, t, NULL);
    if (count == 0)
        return 0;
    *ids = malloc(count * sizeof(**ids));
    if (*ids == NULL)
        return nomem();
    *n = walk(p, t, *ids);
    assert(*n == count);
    return 0;
}

int cnx_plan_inputs(const cnx_plan *p, size_t t, size_t **ids, size_t *n)
{
    return listing(p, t, ids, n, walk_inputs);
}

int cnx_plan_dependents(const cnx_plan *p, size_t t, size_t **ids, size_t *n)
{
    return listing(p, t, ids, n, walk_dependents);
}

ssize_t cnx_plan_find(const cnx_plan *p, size_t stage, const cnx_box *roi)
{
    const stage_lattice *sl;
    int64_t c[3];
    if (stage >= p->nstages)
        return -1;
    sl = &p->lattice->st[stage];
    for (int i = 0; i < 3; i++) {
        const axis *ax = &sl->ax[i];
        c[i] = lower(ax->rmin, ax->n, roi->min[i]);
        if (c[i] >= ax->n || ax->rmin[c[i]] != roi->min[i] ||
            ax->rmax[c[i]] != roi->max[i])
            return -1;
    }
    return (
        ssize_t)(p->stages[stage].first +
                 (size_t)((c[2] * sl->ax[1].n + c[1]) * sl->ax[0].n + c[0]));
}

int cnx_plan_new_with(cnx_plan **out, const cnx_workflow *wf,
                      const char *dataset, const cnx_box *roi,
                      const cnx_plan_external *ext, size_t next)
{
    return cnx_plan_new_capped(out, wf, dataset, roi, ext, next, SIZE_MAX);
}

int cnx_plan_new_capped(cnx_plan **out, const cnx_workflow *wf,
                        const char *dataset, const cnx_box *roi,
                        const cnx_plan_external *ext, size_t next,
                        size_t max_tasks)
{
    cnx_plan *p;
    size_t want = cnx_plan_externals(wf, NULL, 0);
    int rc;

    *out = NULL;
    if (next != want)
        return cnx_error_set(CNX_EINVAL, 0,
                             "plan: workflow %s has %zu external inputs, "
                             "got the geometry of %zu",
                             wf->name, want, next);
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return nomem();
    p->wf = wf;
    p->nstages = wf->nstages;
    p->stages = calloc(wf->nstages, sizeof(*p->stages));
    p->lattice = calloc(1, sizeof(*p->lattice));
    if (p->stages == NULL || p->lattice == NULL) {
        rc = nomem();
        goto fail;
    }
    p->lattice->st = calloc(wf->nstages, sizeof(*p->lattice->st));
    if (p->lattice->st == NULL) {
        rc = nomem();
        goto fail;
    }
    p->lattice->nstages = wf->nstages;
    rc = copy_dataset(p->dataset, dataset);
    if (rc == 0)
        rc = derive_geometry(p, ext);
    if (rc == 0)
        rc = apply_rules(p);
    if (rc != 0)
        goto fail;
    if (roi != NULL) {
        cnx_box bounds = scale_bounds(&p->stages[0].in_scale), in;
        char a[128], b[128];
        if (cnx_box_empty(roi)) {
            fmt_box(roi, a, sizeof(a));
            rc = cnx_error_set(CNX_EINVAL, 0, "plan: roi %s is empty", a);
            goto fail;
        }
        in = cnx_box_intersect(roi, &bounds);
        if (cnx_box_empty(&in)) {
            fmt_box(roi, a, sizeof(a));
            fmt_box(&bounds, b, sizeof(b));
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "plan: roi %s misses the data of stage %s "
                               "(scale '%s', voxels %s)",
                               a, wf->stages[0].name, p->stages[0].in_scale.key,
                               b);
            goto fail;
        }
        p->roi = *roi;
    } else {
        p->roi = scale_bounds(&p->stages[0].in_scale);
    }
    rc = widen(p);
    if (rc == 0)
        rc = check_cap(p, max_tasks);
    if (rc == 0)
        rc = cut(p);
    if (rc != 0)
        goto fail;
    for (size_t t = 0; t < p->ntasks; t++) {
        size_t n = walk_inputs(p, t, NULL);
        if (n > UINT32_MAX) {
            rc = cnx_error_set(CNX_ETOOBIG, 0,
                               "plan: task %zu waits for "
                               "%zu tasks",
                               t, n);
            goto fail;
        }
        p->tasks[t].ndeps = (uint32_t)n;
    }
    *out = p;
    return 0;
fail:
    cnx_plan_free(p);
    return rc;
}

int cnx_plan_new(cnx_plan **out, const cnx_workflow *wf, const char *dataset,
                 const cnx_box *roi)
{
    cnx_plan_external *ext = NULL;
    size_t next = 0;
    int rc;

    *out = NULL;
    rc = cnx_plan_read_externals(&ext, &next, wf, dataset);
    if (rc == 0)
        rc = cnx_plan_new_with(out, wf, dataset, roi, ext, next);
    free(ext);
    return rc;
}

void cnx_plan_free(cnx_plan *plan)
{
    if (plan == NULL)
        return;
    for (size_t i = 0; i < plan->nnotes; i++)
        free(plan->notes[i]);
    free(plan->notes);
    free(plan->tasks);
    free(plan->stages);
    lattice_free(plan->lattice);
    free(plan);
}

/* ---- task messages ------------------------------------------------------- */

static json_t *ivec(const int64_t v[3])
{
    return json_pack("[III]", (json_int_t)v[0], (json_int_t)v[1],
                     (json_int_t)v[2]);
}

/* role -> {layer, scale, objects} for task t. */
static int task_inputs(const cnx_plan *p, size_t t, cnx_plan_lookup_fn lookup,
                       void *ctx, json_t *inputs)
{
    const cnx_plan_task *task = &p->tasks[t];
    const cnx_plan_stage *ps = &p->stages[task->stage];
    cnx_box r = read_box(p, task->stage, &task->roi);
    cnx_layer_info info;

    memset(&info, 0, sizeof(info));
    info.nscales = 1;
    for (size_t k = 0; k < ps->ninputs; k++) {
        const cnx_plan_input *in = &ps->inputs[k];
        cnx_grid grid = cnx_scale_grid(&in->scale);
        cnx_box q = map_box(&r, &ps->in_scale, &in->scale);
        int64_t lo[3], hi[3], g[3], n = 1;
        json_t *objects = json_object(), *entry;
        cnx_grid_chunk_range(&grid, &q, lo, hi);
        for (int i = 0; i < 3; i++)
            n *= hi[i] - lo[i];
        if (objects == NULL)
            return nomem();
        entry = json_pack("{s:s,s:s,s:o}", "layer", in->layer, "scale",
                          in->scale.key, "objects", objects);
        if (entry == NULL || json_object_set_new(inputs, in->role, entry))
            return nomem();
        if (in->tileset) {
            /* The tile set document only: it names every tile with its
             * digest, and the worker checks each tile it reads. */
            char digest[CNX_DIGEST_LEN];
            int rc = lookup(ctx, in->role, in->layer, CNX_TILESET_NAME,
                            digest);
            if (rc != 0)
                return rc;
            digest[CNX_DIGEST_LEN - 1] = '\0';
            if (json_object_set_new(objects, CNX_TILESET_NAME,
                                    json_string(digest)) != 0)
                return nomem();
            continue;
        }
        if (n > CNX_TASK_MAX_OBJECTS)
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "workflow %s: stage %s: a task would read "
                                 "%" PRId64 " objects of input %s, over the "
                                 "limit of %d",
                                 p->wf->name, p->wf->stages[task->stage].name,
                                 n, in->role, CNX_TASK_MAX_OBJECTS);
        info.scales[0] = in->scale;
        for (g[2] = lo[2]; g[2] < hi[2]; g[2]++) {
            for (g[1] = lo[1]; g[1] < hi[1]; g[1]++) {
                for (g[0] = lo[0]; g[0] < hi[0]; g[0]++) {
                    cnx_box cb = cnx_grid_chunk_box(&grid, g);
                    char name[512], digest[CNX_DIGEST_LEN];
                    int rc =
                        cnx_layer_chunk_name(&info, 0, &cb, name, sizeof(name));
                    if (rc == 0 && in->objects[0] != '\0')
                        rc = cnx_side_object_name(in->objects, in->scale.key,
                                                  &cb, name, sizeof(name));
                    if (rc == 0)
                        rc = lookup(ctx, in->role, in->layer, name, digest);
                    if (rc != 0)
                        return rc;
                    digest[CNX_DIGEST_LEN - 1] = '\0';
                    if (json_object_set_new(objects, name,
                                            json_string(digest)) != 0)
                        return nomem();
                }
            }
        }
    }
    return 0;
}

int cnx_plan_task_json(const cnx_plan *p, size_t t, const char *request,
                       const char *deadline, int urgent,
                       cnx_plan_lookup_fn lookup, void *ctx, char **json)
{
    const cnx_plan_task *task;
    const cnx_plan_stage *ps;
    const cnx_wf_stage *st;
    json_t *inputs = NULL, *params = NULL, *js = NULL;
    cnx_task *check = NULL;
    char *text = NULL;
    int rc;

    *json = NULL;
    if (request == NULL || deadline == NULL || lookup == NULL)
        return cnx_error_set(CNX_EINVAL, 0,
                             "plan: request, deadline and lookup are "
                             "required");
    if (t >= p->ntasks)
        return cnx_error_set(CNX_EINVAL, 0, "plan: no task %zu (of %zu)", t,
                             p->ntasks);
    task = &p->tasks[t];
    ps = &p->stages[task->stage];
    st = &p->wf->stages[task->stage];
    inputs = json_object();
    params = json_loads(st->parameters, 0, NULL);
    if (inputs == NULL || params == NULL) {
        rc = nomem();
        goto done;
    }
    rc = task_inputs(p, t, lookup, ctx, inputs);
    if (rc != 0)
        goto done;
    js = json_pack("{s:s,s:s,s:s,s:I,s:{s:o,s:o},s:I,s:O,s:{s:s,s:s},s:O,"
                   "s:s,s:I,s:s}",
                   "schema", CNX_TASK_SCHEMA, "request", request, "stage",
                   st->worker, "kernel_version", (json_int_t)st->kernel_version,
                   "roi", "min", ivec(task->roi.min), "max",
                   ivec(task->roi.max), "halo", (json_int_t)ps->halo, "inputs",
                   inputs, "output", "layer", ps->out_layer, "scale",
                   ps->out_scale.key, "parameters", params, "deadline",
                   deadline, "retry_budget", (json_int_t)st->retry_budget,
                   "priority", urgent ? "urgent" : "bulk");
    text = js ? cnx__json_canonical(js) : NULL;
    if (text == NULL) {
        rc = nomem();
        goto done;
    }
    rc = cnx_task_parse(&check, text, strlen(text));
    if (rc != 0) {
        cnx_error_wrap("workflow %s: stage %s: task %zu", p->wf->name, st->name,
                       t);
        goto done;
    }
    *json = text;
    text = NULL;
done:
    cnx_task_free(check);
    free(text);
    json_decref(js);
    json_decref(inputs);
    json_decref(params);
    return rc;
}

/* ---- what a task writes -------------------------------------------------- */

static int cmp_url(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A task of a stage writing a sharded scale writes one object: its shard,
 * "<layer>/<key>/<shard name>" (the shard of its box's first chunk: the
 * planner cut the box to be one shard's block). */
static int shard_output(const cnx_plan *p, size_t t, char ***urls, size_t *n)
{
    const cnx_plan_task *task = &p->tasks[t];
    const cnx_plan_stage *ps = &p->stages[task->stage];
    cnx_grid grid = cnx_scale_grid(&ps->out_scale);
    int64_t lo[3], hi[3], counts[3];
    uint64_t pos[3], gridu[3], id, shard, minishard;
    char name[CNX_SHARD_NAME_MAX];
    char **out;
    size_t len;
    int rc;

    cnx_grid_chunk_range(&grid, &task->write, lo, hi);
    cnx_grid_counts(&grid, counts);
    for (int i = 0; i < 3; i++) {
        if (hi[i] <= lo[i])
            return 0;
        pos[i] = (uint64_t)lo[i];
        gridu[i] = (uint64_t)counts[i];
    }
    rc = cnx_sharding_morton(pos, gridu, &id);
    if (rc != 0)
        return rc;
    cnx_sharding_locate(&ps->out_scale.sharding, id, &shard, &minishard);
    cnx_sharding_shard_name(&ps->out_scale.sharding, shard, name);
    out = calloc(1, sizeof(*out));
    if (out == NULL)
        return nomem();
    len = strlen(ps->out_layer) + strlen(ps->out_scale.key) + strlen(name) + 3;
    out[0] = malloc(len);
    if (out[0] == NULL) {
        free(out);
        return nomem();
    }
    snprintf(out[0], len, "%s/%s/%s", ps->out_layer, ps->out_scale.key, name);
    *urls = out;
    *n = 1;
    return 0;
}

int cnx_plan_task_outputs(const cnx_plan *p, size_t t, char ***urls, size_t *n)
{
    const cnx_workflow *wf = p->wf;
    const cnx_plan_task *task;
    const cnx_plan_stage *ps;
    const char *dirs[CNX_WF_MAX_STAGES * CNX_WF_MAX_INPUTS + 1];
    size_t ndirs = 0, count = 1, k = 0;
    int64_t lo[3], hi[3], g[3];
    cnx_layer_info info;
    cnx_grid grid;
    char **out;

    assert(t < p->ntasks);
    *urls = NULL;
    *n = 0;
    task = &p->tasks[t];
    ps = &p->stages[task->stage];
    if (ps->out_scale.sharded)
        return shard_output(p, t, urls, n);
    /* What is written per chunk: the chunk itself (a stage without a
     * part), and each side-object directory a later stage reads. */
    if (wf->stages[task->stage].output_part[0] == '\0')
        dirs[ndirs++] = "";
    for (size_t d = task->stage + 1; d < wf->nstages; d++) {
        for (size_t i = 0; i < wf->stages[d].ninputs; i++) {
            const cnx_wf_input *in = &wf->stages[d].inputs[i];
            size_t j;
            if (in->stage != (int)task->stage || in->objects[0] == '\0')
                continue;
            for (j = 0; j < ndirs && strcmp(dirs[j], in->objects) != 0; j++)
                ;
            if (j == ndirs)
                dirs[ndirs++] = in->objects;
        }
    }
    if (ndirs == 0)
        return 0;
    grid = cnx_scale_grid(&ps->out_scale);
    cnx_grid_chunk_range(&grid, &task->write, lo, hi);
    for (int i = 0; i < 3; i++) {
        if (hi[i] <= lo[i])
            return 0;
        count *= (size_t)(hi[i] - lo[i]);
        if (count > CNX_TASK_MAX_OBJECTS)
            break;
    }
    if (count > CNX_TASK_MAX_OBJECTS / ndirs)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "workflow %s: stage %s: task %zu writes more "
                             "than %d objects",
                             wf->name, wf->stages[task->stage].name, t,
                             CNX_TASK_MAX_OBJECTS);
    count *= ndirs;
    out = calloc(count, sizeof(*out));
    if (out == NULL)
        return nomem();
    memset(&info, 0, sizeof(info));
    info.nscales = 1;
    info.scales[0] = ps->out_scale;
    for (g[2] = lo[2]; g[2] < hi[2]; g[2]++) {
        for (g[1] = lo[1]; g[1] < hi[1]; g[1]++) {
            for (g[0] = lo[0]; g[0] < hi[0]; g[0]++) {
                cnx_box cb = cnx_grid_chunk_box(&grid, g);
                for (size_t j = 0; j < ndirs; j++) {
                    char name[512];
                    size_t len;
                    int rc =
                        dirs[j][0] == '\0'
                            ? cnx_layer_chunk_name(&info, 0, &cb, name,
                                                   sizeof(name))
                            : cnx_side_object_name(dirs[j], ps->out_scale.key,
                                                   &cb, name, sizeof(name));
                    if (rc == 0) {
                        len = strlen(ps->out_layer) + strlen(name) + 2;
                        out[k] = malloc(len);
                        if (out[k] == NULL)
                            rc = nomem();
                        else
                            snprintf(out[k++], len, "%s/%s", ps->out_layer,
                                     name);
                    }
                    if (rc != 0) {
                        while (k > 0)
                            free(out[--k]);
                        free(out);
                        return rc;
                    }
                }
            }
        }
    }
    assert(k == count);
    qsort(out, count, sizeof(*out), cmp_url);
    *urls = out;
    *n = count;
    return 0;
}

/* ---- output layers ------------------------------------------------------- */

void cnx_plan_namespace(const cnx_plan *p, size_t s, char *buf, size_t n)
{
    const char *part = p->wf->stages[s].output_part;
    snprintf(buf, n, "%s%s%s", p->stages[s].out_scale.key, part[0] ? ":" : "",
             part);
}

static int same_scale(const cnx_scale *a, const cnx_scale *b)
{
    const cnx_sharding *x = &a->sharding, *y = &b->sharding;
    if (strcmp(a->key, b->key) != 0 || a->encoding != b->encoding)
        return 0;
    /* shards cut another way would have other owners and other names */
    if (a->sharded != b->sharded ||
        (a->sharded &&
         (x->preshift_bits != y->preshift_bits ||
          x->minishard_bits != y->minishard_bits ||
          x->shard_bits != y->shard_bits || x->hash != y->hash ||
          x->minishard_index_encoding != y->minishard_index_encoding ||
          x->data_encoding != y->data_encoding)))
        return 0;
    for (int i = 0; i < 3; i++)
        if (a->size[i] != b->size[i] || a->resolution[i] != b->resolution[i] ||
            a->voxel_offset[i] != b->voxel_offset[i] ||
            a->chunk[i] != b->chunk[i] ||
            (a->encoding == CNX_ENC_CSEG &&
             a->cseg_block[i] != b->cseg_block[i]))
            return 0;
    return 1;
}

/*
 * The directories a layer's info points at, from the parts its writers
 * declare: part "mesh" writes the legacy mesh manifests (info "mesh"),
 * part "segment_properties" the segment properties.
 */
static void layer_parts(const cnx_plan *p, const char *url,
                        cnx_layer_info *info)
{
    static const char *const known[] = {"mesh", "segment_properties"};
    for (size_t s = 0; s < p->nstages; s++) {
        const char *part = p->wf->stages[s].output_part;
        if (strcmp(p->stages[s].out_layer, url) != 0)
            continue;
        if (strcmp(part, known[0]) == 0)
            snprintf(info->mesh, sizeof(info->mesh), "%s", part);
        else if (strcmp(part, known[1]) == 0)
            snprintf(info->segment_properties,
                     sizeof(info->segment_properties), "%s", part);
    }
}

/* Check (and complete) an existing output layer for stage s. */
static int check_output(const cnx_plan *p, size_t s, cnx_layer *layer)
{
    const cnx_plan_stage *ps = &p->stages[s];
    const cnx_layer_info *info = cnx_layer_get_info(layer);
    const char *name = p->wf->stages[s].name;
    int at, index;

    if (info->type != ps->out_type || info->dtype != ps->out_dtype ||
        info->channels != ps->out_channels)
        return cnx_error_set(
            CNX_EIMMUTABLE, 0,
            "workflow %s: stage %s: output layer %s exists "
            "as %s %s x%" PRId64 ", not %s %s x%" PRId64,
            p->wf->name, name, ps->out_layer,
            info->type == CNX_LAYER_SEGMENTATION ? "segmentation" : "image",
            cnx_dtype_name(info->dtype), info->channels,
            ps->out_type == CNX_LAYER_SEGMENTATION ? "segmentation" : "image",
            cnx_dtype_name(ps->out_dtype), ps->out_channels);
    {
        cnx_layer_info want;
        memset(&want, 0, sizeof(want));
        layer_parts(p, ps->out_layer, &want);
        if (strcmp(want.mesh, info->mesh) != 0 ||
            strcmp(want.segment_properties, info->segment_properties) != 0)
            return cnx_error_set(CNX_EIMMUTABLE, 0,
                                 "workflow %s: stage %s: output layer %s "
                                 "exists with mesh '%s' and "
                                 "segment_properties '%s', not '%s' and '%s'",
                                 p->wf->name, name, ps->out_layer, info->mesh,
                                 info->segment_properties, want.mesh,
                                 want.segment_properties);
    }
    at = cnx_info_find_scale(info, ps->out_scale.key);
    if (at >= 0 && !same_scale(&info->scales[at], &ps->out_scale))
        return cnx_error_set(CNX_EIMMUTABLE, 0,
                             "workflow %s: stage %s: output layer %s: scale "
                             "'%s' exists with other geometry or sharding",
                             p->wf->name, name, ps->out_layer,
                             ps->out_scale.key);
    if (at >= 0)
        return 0;
    if (cnx_layer_add_scale(layer, &ps->out_scale, &index) != 0)
        return cnx_error_wrap("workflow %s: stage %s: output layer %s",
                              p->wf->name, name, ps->out_layer);
    return 0;
}

/*
 * Where a layer's lineage is, for readers of its info and for CloudVolume
 * (which reads the layer's "provenance" object): the same bytes for every
 * layer and every workflow, so that the write-once info and provenance of a
 * layer two workflows write agree.
 */
static const char info_provenance[] =
    "{\"provenance\":{\"by\":\"cnx\",\"lineage\":\"lineage/\","
    "\"verify\":\"cnx-verify --layer <this layer's URL>\"}}";
static const char provenance_object[] =
    "{\"description\":\"Written by cnx. Every object of this layer was "
    "written by a task whose signed lineage manifest (a DSSE envelope of an "
    "in-toto v1 statement naming its inputs, parameters, code and outputs "
    "with their SHA-256 digests) is under lineage/<task key>/; cnx-verify "
    "--layer <this layer's URL> checks them.\",\"owners\":[],"
    "\"processing\":[{\"by\":\"cnx\",\"method\":{\"lineage\":"
    "\"lineage/\",\"verify\":\"cnx-verify\"}}],\"sources\":[]}";

int cnx_plan_prepare_outputs(const cnx_plan *p)
{
    for (size_t s = 0; s < p->nstages; s++) {
        const cnx_plan_stage *ps = &p->stages[s];
        cnx_layer *layer = NULL;
        int rc = cnx_layer_open(&layer, ps->out_layer);
        if (rc == CNX_ENOTFOUND) {
            cnx_layer_info info;
            memset(&info, 0, sizeof(info));
            info.type = ps->out_type;
            info.dtype = ps->out_dtype;
            info.channels = ps->out_channels;
            info.nscales = 1;
            info.scales[0] = ps->out_scale;
            layer_parts(p, ps->out_layer, &info);
            memcpy(info.extra, info_provenance, sizeof(info_provenance));
            rc = cnx_layer_create(&layer, ps->out_layer, &info);
            if (rc == 0)
                rc = cnx_store_put(cnx_layer_store(layer), "provenance",
                                   provenance_object,
                                   sizeof(provenance_object) - 1, NULL);
            if (rc == CNX_EIMMUTABLE) /* someone else created it: check */
                rc = cnx_layer_open(&layer, ps->out_layer);
            else if (rc != 0)
                cnx_error_wrap("workflow %s: stage %s: creating %s",
                               p->wf->name, p->wf->stages[s].name,
                               ps->out_layer);
        }
        if (rc == 0)
            rc = check_output(p, s, layer);
        cnx_layer_free(layer);
        if (rc != 0)
            return rc;
    }
    return 0;
}
