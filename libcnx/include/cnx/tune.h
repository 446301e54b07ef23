/*
 * cnx/tune.h - fit the segmentation parameters (cnx/segment.h) to a
 * ground-truth cube: a bounded, deterministic search that scores each
 * candidate with the VI of cnx/metrics.h, and the tuned workflow file.
 *
 * The search (cnx_tune_search) walks a table of parameters, one row per
 * JSON key of cnx_segment_params (cnx_tune_keys): first a sweep of the
 * rows flagged CNX_TUNE_SWEEP (merge_threshold: the split/merge curve),
 * then coordinate descent over every row with halving steps. The objective
 * is VI split + VI merge; a candidate replaces the best only when it is
 * strictly lower, so ties keep the earlier evaluation. Every evaluation is
 * counted against a budget and the search stops at it: the same inputs
 * and budget give the same evaluations in the same order, and the same
 * result, on every machine. cnx_tune_run evaluates with the kernel on
 * buffers (one boundary map per filter setting, cached); cnx_tune_read
 * (tune_io.c) is the only part that touches storage. See docs/tune.md.
 */
#ifndef CNX_TUNE_H
#define CNX_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/geom.h"
#include "cnx/metrics.h"
#include "cnx/segment.h"
#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most rows a search table may have. */
#define CNX_TUNE_MAX_KEYS 16

/** Most evaluations a search may be given. */
#define CNX_TUNE_MAX_BUDGET 10000

/** How a row's value moves. */
typedef enum cnx_tune_kind {
    CNX_TUNE_LINEAR = 0, /* x +- step; the step halves after a miss */
    CNX_TUNE_LOG = 1,    /* x * step and x / step (step a factor > 1);
                          * the factor becomes its square root */
    CNX_TUNE_CHOICE = 2, /* an enum field: every other one of names[] */
} cnx_tune_kind;

/** The unit lo, hi (and a LINEAR step) are written in. */
typedef enum cnx_tune_unit {
    CNX_TUNE_PLAIN = 0,  /* as the key's own unit */
    CNX_TUNE_VOXEL = 1,  /* voxel sides: times the finer of resolution x,
                          * y (a key in nm) */
    CNX_TUNE_VOXEL3 = 2, /* voxel volumes: times resolution x * y * z (a
                          * key in nm^3) */
} cnx_tune_unit;

/** Row flags. */
enum {
    CNX_TUNE_SWEEP = 1,    /* swept first over lo, lo + step, ..., hi;
                            * the descent then starts at step / 2 */
    CNX_TUNE_FILTER = 2,   /* changes the boundary map (raw input) */
    CNX_TUNE_RAW_ONLY = 4, /* searched only when raw_input is set */
};

/**
 * One searched parameter. key is the JSON key, which is the name of the
 * cnx_segment_params field at offset: a double, or for CHOICE an int-sized
 * enum whose values 0 .. nnames-1 are called names[0 ..] in JSON.
 */
typedef struct cnx_tune_key {
    const char *key;
    size_t offset;
    cnx_tune_kind kind;
    cnx_tune_unit unit;
    double lo, hi, step;
    const char *const *names;
    int nnames;
    unsigned flags;
} cnx_tune_key;

/**
 * The built-in table, in search order (docs/tune.md lists it).
 * @param[out] n  its number of rows
 * @return the rows (static, borrowed).
 */
const cnx_tune_key *cnx_tune_keys(size_t *n);

/** Called after every counted evaluation: done of budget. */
typedef void (*cnx_tune_progress_fn)(void *ctx, int64_t done, int64_t budget);

typedef struct cnx_tune_config {
    int64_t budget;           /* evaluations, 1 .. CNX_TUNE_MAX_BUDGET (60) */
    const cnx_tune_key *keys; /* NULL: cnx_tune_keys() */
    size_t nkeys;
    cnx_tune_progress_fn progress; /* optional */
    void *progress_ctx;
} cnx_tune_config;

/** Defaults: budget 60, the built-in table, no progress. */
void cnx_tune_config_init(cnx_tune_config *cfg);

/** One evaluated candidate. */
typedef struct cnx_tune_eval {
    cnx_segment_params params;
    cnx_seg_scores scores;
    uint32_t nlabels; /* segments the kernel made */
} cnx_tune_eval;

/** One point of a sweep: the swept key's value and its scores. */
typedef struct cnx_tune_point {
    const char *key; /* the row's key (borrowed from the table) */
    double value;
    cnx_seg_scores scores;
    uint32_t nlabels;
} cnx_tune_point;

typedef struct cnx_tune_result {
    cnx_tune_eval *evals;  /* in evaluation order; evals[0] is the base */
    size_t nevals;         /* counted evaluations, <= budget */
    size_t best;           /* index of the lowest VI split + merge */
    cnx_tune_point *curve; /* the sweeps, in grid order (a point equal to
                            * an earlier evaluation is listed too) */
    size_t ncurve;
    int64_t boundary_maps; /* boundary maps computed (cnx_tune_run) */
    double seconds;        /* wall time of the search (reporting only) */
} cnx_tune_result;

/** Free a result. Accepts NULL. */
void cnx_tune_result_free(cnx_tune_result *r);

/**
 * Score one candidate.
 * @param[out] scores, nlabels  written on success
 * @return 0, or a CNX_E* code (with its message) that ends the search.
 */
typedef int (*cnx_tune_eval_fn)(void *ctx, const cnx_segment_params *p,
                                cnx_seg_scores *scores, uint32_t *nlabels);

/**
 * Search the parameters from base (which holds raw_input, the mode and
 * the resolution, and the starting value of every row).
 *
 * Order: base; the sweep rows' grids, in table order; then passes of
 * coordinate descent in table order. A numeric row tries x + step, then
 * x - step (LOG: x * step, x / step), clamped to [lo, hi] (widened to
 * hold the base value) and rounded to 6 significant digits; a success
 * keeps going that way while it improves; two misses halve the step, at
 * most 3 times. A CHOICE row tries every other name. The search ends
 * when a pass improves nothing and every step is at its floor, or at the
 * budget. Candidates seen before, equal to the current point, or that
 * cnx_segment_params_check refuses cost nothing and are not recorded.
 * RAW_ONLY rows are left out unless base->raw_input.
 *
 * @param[out] out  caller frees with cnx_tune_result_free()
 * @return 0; CNX_EINVAL for a bad config or table (named) or base
 *         parameters that fail cnx_segment_params_check; whatever eval
 *         returns; CNX_ENOMEM. Fatal.
 * Deterministic: the same arguments give the same calls to eval in the
 * same order, and the same result if eval is a function of its input.
 */
int cnx_tune_search(cnx_tune_result **out, const cnx_tune_config *cfg,
                    const cnx_segment_params *base, cnx_tune_eval_fn eval,
                    void *eval_ctx);

/** A ground-truth cube in memory: the kernel's input and the gt. */
typedef struct cnx_tune_volume {
    int64_t size[3];    /* voxels, x fastest, then y, z */
    cnx_dtype dtype;    /* of input: CNX_DT_UINT8 or CNX_DT_FLOAT32 */
    const void *input;  /* boundary map, or raw image with raw_input */
    const uint64_t *gt; /* 0 = unlabelled, ignored by the scores */
} cnx_tune_volume;

/**
 * cnx_tune_search with the kernel as the evaluation: for each candidate,
 * cnx_segment_boundary_u8/_f32 (reused while the CNX_TUNE_FILTER rows and
 * raw_input are unchanged: two maps are cached), cnx_segment_volume, then
 * cnx_seg_scores_u64 against vol->gt.
 * @return as cnx_tune_search; CNX_EINVAL for a bad volume, another type
 *         or a gt without any labelled voxel; CNX_ETOOBIG over the
 *         kernel's limits; kernel errors. Memory: about 20 bytes per voxel
 *         besides the inputs and the kernel's own (docs/tune.md).
 */
int cnx_tune_run(cnx_tune_result **out, const cnx_tune_config *cfg,
                 const cnx_segment_params *base, const cnx_tune_volume *vol);

/* ---- the cube from storage (tune_io.c) ----------------------------------- */

/** What to read: two layers over one box. */
typedef struct cnx_tune_source {
    const char *gt_url;      /* uint64 or uint32 segmentation layer */
    const char *gt_scale;    /* NULL: the gt scale at the input's resolution */
    const char *input_url;   /* uint8 or float32, one channel */
    const char *input_scale; /* NULL: the layer's first scale */
    const cnx_box *roi;      /* NULL: the two scales' common box */
} cnx_tune_source;

/** A cube read: owns its buffers. */
typedef struct cnx_tune_data {
    cnx_tune_volume vol;
    cnx_box box;                          /* in the scales' voxels */
    double resolution[3];                 /* nm per voxel, of both scales */
    char gt_scale[128], input_scale[128]; /* the keys read */
    cnx_volume *input_buf, *gt_buf;       /* the buffers vol points at */
} cnx_tune_data;

/**
 * Read the gt and the input over one box.
 * @param[out] d  dispose with cnx_tune_data_dispose (also after a failure)
 * @return 0; CNX_EINVAL for mismatched layers (type, channels,
 *         resolution), a missing scale, or a roi that is empty or not
 *         inside the common box, with a message naming the layer or roi;
 *         CNX_ETOOBIG over CNX_SEGMENT_MAX_VOXELS; storage errors as the
 *         layer reader reports them (CNX_ENOTFOUND, CNX_EIO retriable...).
 */
int cnx_tune_read(cnx_tune_data *d, const cnx_tune_source *src);

/** Free what cnx_tune_read read. Accepts a zeroed or failed d. */
void cnx_tune_data_dispose(cnx_tune_data *d);

/* ---- the tuned workflow -------------------------------------------------- */

/**
 * The parameters object to write: base_json (a stage's parameters) with
 * every row of the table that the search used set to best's value, and
 * raw_input when best has it. Keys in a stable order: raw_input, mode,
 * the table's rows, then the base's other keys sorted. Numbers keep 15
 * significant digits (the search's values have 6; 17 if a base value
 * needs them), so parsing the text over the defaults and best's
 * resolution gives best back; this is checked.
 * @param[out] out  pretty JSON ({"a": 1, "b": 2}); caller frees with free()
 * @return 0; CNX_ESCHEMA for a base_json that cnx_segment_params_parse
 *         refuses; CNX_ENOMEM.
 */
int cnx_tune_params_json(char **out, const char *base_json,
                         const cnx_segment_params *best,
                         const cnx_tune_config *cfg);

/**
 * The base workflow with params_json as the parameters of every stage
 * whose worker is "segment" or "segment-join", and note appended to its
 * description (an earlier "Parameters tuned by cnx-tune" note is
 * replaced). Everything else, its key order included, is kept; the
 * layout is the one of the files in workflows/ (top level and stages one key a
 * line). The result is checked with cnx_workflow_parse.
 * @param[out] out  caller frees with free(); ends with a newline
 * @return 0; CNX_ESCHEMA for a base that is not a workflow, has no
 *         "segment" stage, or would be refused once rewritten (the
 *         message names the field); CNX_ENOMEM.
 */
int cnx_tune_workflow(char **out, const char *base, size_t len,
                      const char *params_json, const char *note);

#ifdef __cplusplus
}
#endif
#endif
