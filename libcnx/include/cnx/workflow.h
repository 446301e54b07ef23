/*
 * cnx/workflow.h - workflow definitions and their plans.
 *
 * A workflow (schemas/workflow.schema.json, docs/workflows.md) is a small
 * DAG of named stages; each stage runs one worker (topic cnx.tasks.<worker>)
 * either once per box ("map") or once over its whole region ("reduce"),
 * reads external layers of a dataset or the outputs of other stages, and
 * writes one scale of a versioned output layer ("pyramid/v1").
 *
 * Parsing checks every field and the graph (names, references, cycles) and
 * keeps the stages in a deterministic topological order. Planning opens the
 * external input layers (or takes their geometry from the caller), derives
 * every stage's input and output grids and its halo (pinned by the
 * workflow, else derived from the worker's footprint), runs each worker's
 * plan-time checks, widens each stage's region so that
 * it produces everything its dependents read, cuts tasks with the box
 * generator and counts, for every task, the tasks it waits for. Task boxes
 * of one stage form a regular lattice, so dependency queries are binary
 * searches per axis, never scans over all tasks.
 */
#ifndef CNX_WORKFLOW_H
#define CNX_WORKFLOW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cnx/digest.h"
#include "cnx/geom.h"
#include "cnx/precomputed.h"
#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CNX_WORKFLOW_SCHEMA "cnx.workflow/1"
#define CNX_WF_MAX_STAGES 64 /* stages per workflow */
#define CNX_WF_MAX_INPUTS 16 /* inputs per stage */
#define CNX_WF_MAX_DEPS 16   /* effective dependencies per stage */
#define CNX_WF_PATH_MAX 1024 /* a layer path relative to the dataset */

typedef enum { CNX_WF_MAP = 0, CNX_WF_REDUCE = 1 } cnx_wf_kind;

typedef struct cnx_wf_input {
    char role[64];
    char *layer; /* path relative to the dataset; NULL if from a stage */
    char *scale; /* scale key; NULL: the layer's first scale */
    int stage;   /* index of the producing stage, or -1 */
    char objects[33]; /* from a stage: "" reads its chunks; "dir" reads
                       * its side objects dir/<chunk box> instead */
    int tileset;      /* 1: layer is a directory holding a recorded tile
                       * set, tiles.json (docs/tiles.md), not a layer */
} cnx_wf_input;

typedef struct cnx_wf_stage {
    char name[33];
    char worker[33];
    cnx_wf_kind kind;
    int64_t kernel_version;
    size_t ninputs;
    cnx_wf_input inputs[CNX_WF_MAX_INPUTS]; /* sorted by role */
    char *output_layer; /* relative path, e.g. "pyramid/v1" */
    char output_part[33]; /* "" (the scale's chunks) or the name of what
                           * else the stage writes into the layer ("mesh",
                           * "segment_properties"): one writer each */
    int out_type, out_dtype, out_encoding; /* -1: as the first input */
    char *parameters;                      /* canonical JSON object */
    int64_t halo;    /* as pinned by the document; -1 when absent: the
                      * planner derives it (cnx_plan_stage.halo) */
    int halo_pinned; /* 1: the document gives "halo" (kept as is) */
    int64_t task_size[3], retry_budget;
    double lease_s;
    size_t ndeps;
    int deps[CNX_WF_MAX_DEPS]; /* effective dependencies, ascending */
    int file_index;            /* position in the document's stages[] */
} cnx_wf_stage;

typedef struct cnx_workflow {
    char name[65];
    size_t nstages;
    cnx_wf_stage *stages;        /* topological order */
    char *json;                  /* canonical JSON of the document as given */
    char digest[CNX_DIGEST_LEN]; /* of json */
} cnx_workflow;

/**
 * Parse and check a workflow document (a file, or the copy embedded in a
 * request).
 *
 * Stages come out in topological order, stable: among the stages whose
 * dependencies are all placed, the one earliest in the file goes first.
 *
 * @param[out] out  caller frees with cnx_workflow_free()
 * @return 0; CNX_ESCHEMA with a one-line message naming the field
 *         ("workflow: stages[1].halo: ...") or the graph problem ("workflow
 *         w: cycle a -> b -> a"); CNX_ETOOBIG; CNX_ENOMEM.
 */
int cnx_workflow_parse(cnx_workflow **out, const char *json, size_t len);

/**
 * Read a workflow file and parse it.
 * @return as cnx_workflow_parse; CNX_ENOTFOUND or CNX_EIO if the file
 *         cannot be read.
 */
int cnx_workflow_load(cnx_workflow **out, const char *path);

/**
 * The file a tool's "--workflow NAME [--workflows DIR]" names, the one rule
 * every tool follows: a NAME with a '/' or ending in ".json" is a path,
 * taken as it is; otherwise <dir>/NAME.json, where dir is the first of
 * these that holds a readable NAME.json: DIR if given, else
 * $CNX_WORKFLOWS if set and not empty, else <bin>/../../workflows (bin:
 * the running executable's directory) then /usr/share/cnx/workflows. If
 * none holds it, the first candidate's path, so that the caller's error
 * names the first place looked.
 *
 * @param name  the workflow name or path
 * @param dir   the --workflows directory, or NULL for the defaults
 * @param[out] out  the path, n bytes at most (PATH_MAX + 64 is enough)
 * @return 0; CNX_EINVAL (fatal) if the path does not fit in n bytes (out
 *         then holds it truncated).
 * Thread-safety: reads the environment; safe where nothing sets it.
 */
int cnx_workflow_path(const char *name, const char *dir, char *out, size_t n);

/** Free a workflow. Accepts NULL. */
void cnx_workflow_free(cnx_workflow *wf);

/** @return the index (topological order) of the stage called name, or -1. */
int cnx_workflow_find_stage(const cnx_workflow *wf, const char *name);

/* ---- planning ---------------------------------------------------------- */

/**
 * The geometry of one external input, as read from its layer's info: what
 * planning needs, and what a controller logs to re-plan without storage.
 */
typedef struct cnx_plan_external {
    cnx_layer_type type;
    cnx_dtype dtype;
    int64_t channels;
    cnx_scale scale; /* the scale the input reads */
} cnx_plan_external;

/** One (stage, input) pair naming an external input. */
typedef struct cnx_plan_ref {
    size_t stage; /* index in wf->stages */
    size_t input; /* index in that stage's inputs */
} cnx_plan_ref;

/**
 * List the external inputs in their canonical order: stages in
 * topological order, inputs by role.
 * @param refs  receives up to cap entries (may be NULL if cap is 0)
 * @return the number of external inputs (which may exceed cap).
 */
size_t cnx_plan_externals(const cnx_workflow *wf, cnx_plan_ref *refs,
                          size_t cap);

/**
 * Open every external input layer under dataset and read its geometry, in
 * cnx_plan_externals order.
 * @param[out] ext  caller frees with free()
 * @return 0; CNX_ESCHEMA for a missing layer or scale (the message names the
 *         stage, the role, the layer and the dataset); CNX_EIO (retriable)
 *         and other storage errors as the store reports them.
 */
int cnx_plan_read_externals(cnx_plan_external **ext, size_t *next,
                            const cnx_workflow *wf, const char *dataset);

/**
 * Serialise external geometry as canonical JSON: an array, one single-scale
 * precomputed info document per external input.
 * @param[out] json  caller frees with free()
 */
int cnx_plan_externals_to_json(const cnx_plan_external *ext, size_t next,
                               char **json);

/**
 * Parse what cnx_plan_externals_to_json wrote.
 * @param[out] ext  caller frees with free()
 * @return 0; CNX_ECORRUPT for a malformed document; CNX_ENOMEM.
 */
int cnx_plan_externals_from_json(cnx_plan_external **ext, size_t *next,
                                 const char *json, size_t len);

/** One input of a planned stage. */
typedef struct cnx_plan_input {
    char role[64];
    char objects[33]; /* "" for chunks, else the side objects' directory */
    int tileset;      /* 1: a tile set directory; the task lists tiles.json */
    char layer[2048]; /* URL */
    cnx_scale scale;  /* the scale read */
    cnx_layer_type type; /* the layer's type, data type and channels */
    cnx_dtype dtype;
    int64_t channels;
} cnx_plan_input;

typedef struct cnx_plan_stage {
    char in_layer[2048];  /* URL of the first input's layer */
    cnx_scale in_scale;   /* geometry of the stage's input scale */
    char out_layer[2048]; /* URL of the output layer */
    cnx_scale out_scale;  /* geometry of what it writes */
    cnx_box region;       /* widened region, input-scale voxels */
    int64_t task_size[3]; /* rounded to whole input chunks */
    size_t first, count;  /* its tasks are plan->tasks[first, first+count) */
    /* additions */
    cnx_box roi;       /* the requested roi in input-scale voxels,
                        * clipped to the input bounds, before widening */
    int64_t factor[3]; /* output voxel = input voxel / factor */
    cnx_layer_type out_type;
    cnx_dtype out_dtype;
    int64_t out_channels;
    size_t ninputs;
    cnx_plan_input inputs[CNX_WF_MAX_INPUTS]; /* as wf's, by role */
    int64_t halo; /* voxels its tasks read around their roi: the
                   * workflow's pinned halo, or the one derived from the
                   * worker's footprint (docs/workflows.md, "Halo") */
} cnx_plan_stage;

typedef struct cnx_plan_task {
    uint32_t stage;
    cnx_box roi;    /* input-scale voxels */
    cnx_box write;  /* output-scale voxels */
    uint32_t ndeps; /* number of tasks it waits for */
} cnx_plan_task;

typedef struct cnx_plan_lattice cnx_plan_lattice; /* private */

typedef struct cnx_plan {
    const cnx_workflow *wf; /* borrowed: must outlive the plan */
    char dataset[2048];     /* without trailing slashes */
    cnx_box roi;            /* as requested, first stage's input-scale voxels */
    size_t nstages;
    cnx_plan_stage *stages;
    size_t ntasks;
    cnx_plan_task *tasks;
    char **notes; /* one sentence per widened stage */
    size_t nnotes;
    cnx_plan_lattice *lattice; /* per-stage axis intervals */
} cnx_plan;

/**
 * Plan a workflow over a region of a dataset: read the external inputs'
 * geometry from storage (cnx_plan_read_externals), then cnx_plan_new_with.
 *
 * @param dataset  store URL of the dataset (a trailing slash is fine)
 * @param roi      voxels of the first stage's input scale; NULL: all of it
 * @param[out] out caller frees with cnx_plan_free()
 * @return 0; CNX_ESCHEMA for a workflow that cannot run on this dataset
 *         (missing layer or scale, mismatched input grids, two stages
 *         writing the same scale, a worker's plan-time check such as
 *         mesh with a halo below 1 or segment on a uint64 input, ...: the
 *         message names the workflow, the stage and the fix);
 *         CNX_EINVAL for an empty roi or one
 *         that misses the data; storage errors; CNX_ENOMEM.
 */
int cnx_plan_new(cnx_plan **out, const cnx_workflow *wf, const char *dataset,
                 const cnx_box *roi);

/**
 * Like cnx_plan_new with the external inputs' geometry given: ext[i]
 * belongs to the i-th pair cnx_plan_externals lists. Touches no storage;
 * the same arguments always give the same plan.
 * @return as cnx_plan_new; CNX_EINVAL if next is not the number of
 *         external inputs.
 */
int cnx_plan_new_with(cnx_plan **out, const cnx_workflow *wf,
                      const char *dataset, const cnx_box *roi,
                      const cnx_plan_external *ext, size_t next);

/**
 * Like cnx_plan_new_with, but refuse a plan of more than max_tasks tasks
 * before cutting any: the number of tasks of every stage follows from its
 * widened region, its chunk grid and its task size, so it is computed
 * first and planning memory never grows past what max_tasks allows.
 * cnx_plan_new_with is this with max_tasks = SIZE_MAX.
 * @return as cnx_plan_new_with; CNX_ETOOBIG with a one-line message giving
 *         the number of tasks (per stage too) and the cap.
 */
int cnx_plan_new_capped(cnx_plan **out, const cnx_workflow *wf,
                        const char *dataset, const cnx_box *roi,
                        const cnx_plan_external *ext, size_t next,
                        size_t max_tasks);

/** Free a plan. Accepts NULL. */
void cnx_plan_free(cnx_plan *plan);

/**
 * The objects task t must write, as its manifest names them ("<output
 * layer URL>/<object>"), in ascending byte order: for a stage that writes
 * its output scale's chunks (no output part), every chunk of that scale its
 * write box meets; for every stage, the side objects that later stages
 * read from it ("<layer URL>/<dir>/<scale>/<chunk>") over the same chunks.
 * What else a stage writes (mesh files, properties) is its kernel's choice
 * and not listed.
 * @param[out] urls  caller frees each string and the array with free()
 *                   (NULL when *n is 0)
 * @return 0; CNX_ETOOBIG past CNX_TASK_MAX_OBJECTS objects; CNX_ENOMEM.
 */
int cnx_plan_task_outputs(const cnx_plan *p, size_t t, char ***urls, size_t *n);

/**
 * The tasks task t waits for, ascending. For an input produced by stage S
 * (t's stage being a map stage): every task of S whose write box meets t's
 * read box (roi grown by the halo, clipped to the input scale's bounds);
 * for a dependency that is not an input, and for reduce stages: every task
 * of that stage.
 * @param[out] ids  caller frees with free() (NULL when *n is 0)
 * @return 0; CNX_ENOMEM.
 */
int cnx_plan_inputs(const cnx_plan *p, size_t t, size_t **ids, size_t *n);

/**
 * The tasks that wait for task t (the reverse of cnx_plan_inputs),
 * ascending.
 * @param[out] ids  caller frees with free() (NULL when *n is 0)
 * @return 0; CNX_ENOMEM.
 */
int cnx_plan_dependents(const cnx_plan *p, size_t t, size_t **ids, size_t *n);

/** @return the index of the task of stage with exactly this roi, or -1. */
ssize_t cnx_plan_find(const cnx_plan *p, size_t stage, const cnx_box *roi);

/**
 * Digest lookup for task messages: write the digest the object must have.
 * @return 0 or a CNX_E* error (with its message set), passed up unchanged.
 */
typedef int (*cnx_plan_lookup_fn)(void *ctx, const char *role,
                                  const char *layer_url, const char *object,
                                  char digest[CNX_DIGEST_LEN]);

/**
 * The task message of task t (canonical JSON, checked with
 * cnx_task_parse): for each input role the layer URL, the scale key and
 * every chunk the read box touches with its digest from lookup; output
 * layer URL and scale key; the stage's parameters, kernel version, retry
 * budget; the plan stage's halo (pinned or derived); "stage" is the
 * worker's name. A reduce stage's task has
 * the stage's region as roi.
 * @param deadline  RFC 3339 UTC
 * @param[out] json caller frees with free()
 * @return 0; whatever lookup returns; CNX_ESCHEMA if the message is not a
 *         valid task (bad request id or deadline, too many objects).
 */
int cnx_plan_task_json(const cnx_plan *p, size_t t, const char *request,
                       const char *deadline, int urgent,
                       cnx_plan_lookup_fn lookup, void *ctx, char **json);

/**
 * The namespace stage s binds within its output layer: its output scale
 * key, or "<key>:<part>" for a stage that writes a part ("8_8_8:mesh").
 * One (layer, namespace) holds the output of one (worker, kernel version,
 * parameters) for ever (docs/ledger.md).
 */
void cnx_plan_namespace(const cnx_plan *p, size_t s, char *buf, size_t n);

/**
 * Make sure every stage's output layer exists with its output scale, in
 * stage order: a layer without info is created (type, data type and
 * channels of the stage, scales = [out_scale]) with a write-once put; an
 * existing one must have the same type, data type and channels, and if it
 * has the scale key, identical geometry; a missing scale is added
 * (compare-and-swap, safe against the workers adding it concurrently).
 * @return 0; CNX_EIMMUTABLE naming the layer and the scale or attribute
 *         that differs; storage errors.
 */
int cnx_plan_prepare_outputs(const cnx_plan *p);

#ifdef __cplusplus
}
#endif
#endif
