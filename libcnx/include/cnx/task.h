/*
 * cnx/task.h - the task message: parse, check, serialise, key.
 *
 * A task asks one stage to process one box: its schema is
 * schemas/task.schema.json and docs/messages.md explains every field. The
 * parser checks every field and names the first bad one
 * ("task: roi.max[2]: must be greater than roi.min[2]"); unknown keys are
 * refused, never ignored. The task key is the SHA-256 of the canonical JSON
 * of {halo, inputs (role -> object name -> digest), kernel_version,
 * parameters, roi, stage}: the same work always has the same key, wherever
 * its inputs are stored and whoever asks for it.
 */
#ifndef CNX_TASK_H
#define CNX_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/digest.h"
#include "cnx/geom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CNX_TASK_SCHEMA "cnx.task/1"
#define CNX_TASK_MAX_INPUTS 16
#define CNX_TASK_MAX_OBJECTS 100000

/** The largest halo a task may carry, voxels. */
#define CNX_TASK_HALO_MAX 256

typedef struct cnx_task_object {
    char *name; /* object name within the input layer */
    char digest[CNX_DIGEST_LEN];
} cnx_task_object;

typedef struct cnx_task_input {
    char role[64];  /* e.g. "boundary", "image" */
    char *layer;    /* store URL of the layer */
    char *scale;    /* scale key within the layer */
    size_t nobjects;
    cnx_task_object *objects; /* sorted by name */
} cnx_task_input;

typedef struct cnx_task {
    char request[129];      /* request id */
    char stage[33];         /* stage name */
    int64_t kernel_version; /* >= 1 */
    cnx_box roi;            /* the box this task writes */
    int64_t halo;           /* extra voxels read around roi, 0 ..
                               CNX_TASK_HALO_MAX */
    size_t ninputs;
    cnx_task_input inputs[CNX_TASK_MAX_INPUTS]; /* sorted by role */
    char *output_layer;
    char *output_scale;
    char *parameters;       /* canonical JSON object */
    char deadline[32];      /* RFC 3339 UTC, "YYYY-MM-DDTHH:MM:SSZ" */
    int64_t deadline_unix;
    int64_t retry_budget;   /* retries allowed after the first attempt */
    int urgent;             /* 1 for the deadline lane */
    char key[CNX_DIGEST_LEN];
} cnx_task;

/**
 * Parse and check a task message and compute its key.
 * @param[out] out  caller frees with cnx_task_free()
 * @return 0; CNX_ESCHEMA naming the bad field; CNX_ETOOBIG; CNX_ENOMEM.
 */
int cnx_task_parse(cnx_task **out, const char *json, size_t len);

/** Free a task. Accepts NULL. */
void cnx_task_free(cnx_task *task);

/** Canonical JSON of the whole task. @param[out] out free() it. */
int cnx_task_to_json(const cnx_task *task, char **out);

/** Canonical JSON of the keyed content (what the key hashes). */
int cnx_task_key_material(const cnx_task *task, char **out);

/**
 * @return the digest the task expects for object name of input role, or
 * NULL if the task names no such object.
 */
const char *cnx_task_expected(const cnx_task *task, const char *role,
                              const char *name);

/** @return the input with that role, or NULL. */
const cnx_task_input *cnx_task_input_get(const cnx_task *task,
                                         const char *role);

/** Parse "YYYY-MM-DDTHH:MM:SSZ" (optionally with .fraction) to Unix time. */
int cnx_rfc3339_parse(const char *text, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
