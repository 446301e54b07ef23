/*
 * cnx/reprocess.h - what cnx-reprocess, the scientist's command, is made
 * of: parsing its arguments, building the request message
 * (schemas/request.schema.json), parsing the controller's answers
 * (schemas/request-state.schema.json), drawing progress and writing the
 * summary, and deciding the exit status. Everything here is a pure
 * function of its arguments (no Kafka, no clock, no terminal), so the tool
 * is a thin loop around it and the unit tests cover the rest.
 * docs/reprocess.md describes the protocol and the command.
 */
#ifndef CNX_REPROCESS_H
#define CNX_REPROCESS_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/digest.h"
#include "cnx/geom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CNX_REQUEST_SCHEMA "cnx.request/1"
#define CNX_REQUEST_STATE_SCHEMA "cnx.request-state/1"
/* A request id is 1 to 128 of A-Z a-z 0-9 . _ : - */
#define CNX_REQUEST_ID_MAX 128
/* Limits on what a state message may hold (it comes from the network). */
#define CNX_STATE_MAX_STAGES 256
#define CNX_STATE_MAX_NOTES 1000
#define CNX_STATE_MAX_ISSUES 100000
#define CNX_STATE_MAX_TEXT 4096

/* Exit statuses of cnx-reprocess. Where several of 3, 4 and 5 apply, the
 * lowest wins. */
typedef enum cnx_reprocess_exit {
    CNX_REPROCESS_DONE = 0,      /* done; every repeated task identical */
    CNX_REPROCESS_ERROR = 1,     /* broker unreachable, timeout, ... */
    CNX_REPROCESS_USAGE = 2,     /* bad arguments, or request refused */
    CNX_REPROCESS_VIOLATION = 3, /* reproducibility / immutability */
    CNX_REPROCESS_FAILED = 4,    /* tasks dead-lettered or never run */
    CNX_REPROCESS_MISSED = 5,    /* done, but after the deadline */
} cnx_reprocess_exit;

/* ---- arguments ----------------------------------------------------- */

/**
 * Parse a duration: a whole number of 1 or more followed by s, m, h or d
 * ("90s", "30m", "24h", "2d"), at most 3650 days.
 * @return 0; CNX_EINVAL with a message saying what is wrong.
 */
int cnx_duration_parse(const char *text, int64_t *seconds);

/**
 * Parse a --deadline: a duration after now, or an RFC 3339 UTC time
 * ("2026-11-23T13:00:00Z"; a fraction is dropped). It must be later than
 * now.
 * @return 0; CNX_EINVAL naming what is wrong.
 */
int cnx_reprocess_deadline_parse(const char *text, int64_t now,
                                 int64_t *deadline);

/**
 * Parse a --roi "x0,y0,z0,x1,y1,z1": six integers of magnitude at most
 * 2^40, max > min on every axis.
 * @return 0; CNX_EINVAL naming the bad axis or value.
 */
int cnx_reprocess_roi_parse(const char *text, cnx_box *roi);

/** @return 0 if id is 1 to 128 of A-Z a-z 0-9 . _ : -; else CNX_EINVAL
 *          naming the first bad character. */
int cnx_request_id_check(const char *id);

/**
 * The default request id, "req-YYYYMMDDTHHMMSSZ-<host>-<pid>": characters
 * of host outside the allowed set become '-', and host is cut so that the
 * id fits in CNX_REQUEST_ID_MAX.
 */
void cnx_request_id_default(char out[CNX_REQUEST_ID_MAX + 1], int64_t now,
                            const char *host, long pid);

/**
 * The --dataset argument as a store URL: file:///, s3://, gs://, http://
 * or https:// URLs are checked (no control character, no ".." component,
 * at most 2048 bytes) and kept; anything else is a local directory, which
 * must exist, made absolute as file://<realpath>.
 * @param[out] out  free() it
 * @return 0; CNX_EINVAL naming what is wrong; CNX_ENOTFOUND if a local
 *         directory does not exist; CNX_ENOMEM.
 */
int cnx_reprocess_dataset_url(const char *arg, char **out);

/* ---- the request ----------------------------------------------------- */

/** What a request asks (all borrowed). */
typedef struct cnx_request_spec {
    const char *request;   /* id, see cnx_request_id_check */
    const char *workflow;  /* the workflow document, JSON (an object) */
    const char *dataset;   /* store URL of the input dataset */
    cnx_box roi;           /* voxels of the dataset's first scale */
    int64_t submitted;     /* Unix time */
    int64_t deadline;      /* Unix time, > submitted */
    int reuse;             /* 1: reuse outputs of tasks done before */
    const char *submitter; /* "user@host", 1 to 256 characters */
} cnx_request_spec;

/**
 * Build the cnx.request/1 message (canonical JSON; the workflow is
 * embedded as an object in its canonical form).
 * @param[out] out  free() it
 * @return 0; CNX_EINVAL naming the bad field; CNX_ENOMEM.
 */
int cnx_request_build(const cnx_request_spec *spec, char **out);

/* ---- the controller's answers ----------------------------------------- */

typedef enum cnx_state_type {
    CNX_STATE_ACCEPTED = 1,
    CNX_STATE_REFUSED,
    CNX_STATE_PROGRESS,
    CNX_STATE_SLO,
    CNX_STATE_FINISHED,
} cnx_state_type;

/* Service level: "ok", "at_risk", "missed", "met"; NONE if absent. */
typedef enum cnx_slo {
    CNX_SLO_NONE = 0,
    CNX_SLO_OK,
    CNX_SLO_AT_RISK,
    CNX_SLO_MISSED,
    CNX_SLO_MET,
} cnx_slo;

/** @return "ok", "at_risk", "missed", "met" or "none". */
const char *cnx_slo_name(cnx_slo slo);

/**
 * One stage of a state message. Which fields are set depends on the
 * message: accepted (worker, reduce, tasks, region, scale, output_*),
 * progress (total, done, running, failed, dead, reused), finished (worker,
 * total, done, dead, never_run, reused, attempts and the figures). Numbers
 * that may be null are NAN when null.
 */
typedef struct cnx_state_stage {
    char stage[33];
    char worker[33];
    /* accepted */
    int reduce; /* kind: 0 "map", 1 "reduce" */
    int64_t tasks;
    cnx_box region;
    char scale[129];
    char *output_layer;
    char output_scale[129];
    /* progress and finished */
    int64_t total, done, dead, reused;
    /* progress: running now; failed attempts so far */
    int64_t running, failed;
    /* finished */
    int64_t never_run, attempts, voxels, bytes_read, bytes_written;
    double cpu_s, wall_s, core_hours, mm3;
    double mvx_per_s, gb_per_mm3, usd_per_mm3; /* NAN when null */
} cnx_state_stage;

/** A violation (object, expected, got set) or a failure (error set). */
typedef struct cnx_state_issue {
    char task_key[CNX_DIGEST_LEN];
    char stage[33];
    cnx_box roi;
    char kind[16];                 /* violation: reproducibility or
                                    * immutability */
    char *object;                  /* violation: the object's URL */
    char expected[CNX_DIGEST_LEN]; /* violation */
    char got[CNX_DIGEST_LEN];      /* violation */
    char *error;                   /* failure */
} cnx_state_issue;

/** A parsed cnx.request-state/1 message. Times are RFC 3339 UTC text
 * (at most 30 characters) with their Unix time alongside. */
typedef struct cnx_request_state {
    cnx_state_type type;
    char request[CNX_REQUEST_ID_MAX + 1];
    char time[32];
    int64_t time_unix;
    char deadline[32]; /* accepted, progress, slo, finished */
    int64_t deadline_unix;
    int64_t tasks;      /* accepted */
    char *error;        /* refused */
    char eta[32];       /* progress, slo: "" when null */
    int64_t eta_unix;   /* 0 when null */
    cnx_slo slo;        /* progress, slo, finished */
    int urgent;         /* progress: tasks are on the urgent lane */
    int outcome_failed; /* finished: 0 "done", 1 "failed" */
    char submitted[32]; /* finished */
    int64_t submitted_unix;
    double elapsed_s;  /* finished */
    int64_t repeated;  /* finished: tasks done before, in earlier requests */
    int64_t identical; /* finished: those with bit-identical outputs */
    double price_per_core_hour; /* finished: NAN when null */
    size_t nstages;
    cnx_state_stage *stages;
    size_t nnotes;
    char **notes; /* accepted */
    size_t nviolations;
    cnx_state_issue *violations; /* finished */
    size_t nfailures;
    cnx_state_issue *failures; /* finished */
} cnx_request_state;

/**
 * Parse and check a message read from cnx.requests.
 * @param[out] out  caller frees with cnx_request_state_free()
 * @return 0; CNX_ENOTFOUND (no message set) if it is a JSON object whose
 *         "schema" is a string other than cnx.request-state/1 (the request
 *         itself, say: not an error, skip it); CNX_ESCHEMA naming the
 *         first bad field ("request-state: stages[0].done: must be an
 *         integer >= 0"); CNX_ETOOBIG; CNX_ENOMEM.
 */
int cnx_request_state_parse(cnx_request_state **out, const char *json,
                            size_t len);
/** Free a parsed state message. Accepts NULL. */
void cnx_request_state_free(cnx_request_state *state);

/* ---- results ----------------------------------------------------------- */

/**
 * The exit status a finished message means: 3 if any violation, or fewer
 * identical than repeated tasks; else 4 if the outcome is failed or any
 * task is dead or never ran; else 5 if the SLO was missed; else 0.
 */
int cnx_reprocess_exit_code(const cnx_request_state *finished);

/** @return a one-line meaning of an exit status ("deadline missed"). */
const char *cnx_reprocess_exit_name(int code);

/**
 * The summary of a finished request, as text for a terminal: time taken
 * and SLO ("met" only when no task is dead or never ran: else "MISSED
 * (incomplete: N tasks dead, M never ran)", whatever the message's "slo"
 * says), per stage done/total/dead/never-run, the cost figures, "N of M
 * repeated tasks bit-identical", every violation and failure, and the exit
 * status.
 * @param[out] out  free() it
 * @return 0; CNX_ENOMEM.
 */
int cnx_reprocess_summary_text(const cnx_request_state *finished, char **out);

/**
 * The answer a message means, as one JSON object for --json: the message
 * (without its "schema") plus "exit_code"; with plan (the accepted
 * message, or NULL) also its "tasks" and "notes" where the message has
 * none.
 * @param[out] out  free() it: compact JSON, keys sorted, reals with 15
 *                  significant digits
 * @return 0; CNX_ESCHEMA if msg or plan is not a JSON object; CNX_ENOMEM.
 */
int cnx_reprocess_result_json(const char *msg, size_t len, const char *plan,
                              size_t plan_len, int exit_code, char **out);

/**
 * The --json answer when no message settles it: {"request", "error",
 * "exit_code"}. @param[out] out free() it. @return 0; CNX_ENOMEM.
 */
int cnx_reprocess_error_json(const char *request, const char *error,
                             int exit_code, char **out);

/* ---- progress ---------------------------------------------------------- */

/**
 * What the user sees while waiting. On a terminal, one line per stage
 * (name, bar, done/total, running, failures, dead) and an ETA line, redrawn
 * in place with ANSI escapes; elsewhere, a plain line per stage whose
 * counts changed, at most every 5 s, and a line at every SLO change.
 */
typedef struct cnx_reprocess_view cnx_reprocess_view;

/**
 * @param tty  1 to draw for a terminal
 * @param[out] out  caller frees with cnx_reprocess_view_free()
 * @return 0; CNX_ENOMEM.
 */
int cnx_reprocess_view_new(cnx_reprocess_view **out, int tty);
void cnx_reprocess_view_free(cnx_reprocess_view *view);

/**
 * Take in a progress or slo message (others are ignored) and say what to
 * write to stderr now.
 * @param mono  monotonic seconds (cnx_now()), for the rate limit
 * @param now   Unix time, for the time left until the ETA and deadline
 * @param[out] out  text to write (possibly ""), free() it
 * @return 0; CNX_ENOMEM.
 */
int cnx_reprocess_view_update(cnx_reprocess_view *view,
                              const cnx_request_state *state, double mono,
                              int64_t now, char **out);

/**
 * What to write as time passes with no message: on a terminal the ETA
 * line counts down (redrawn at most once a second); elsewhere counts held
 * back by the 5 s limit are written once it has passed.
 * @param[out] out  free() it
 * @return 0; CNX_ENOMEM.
 */
int cnx_reprocess_view_tick(cnx_reprocess_view *view, double mono, int64_t now,
                            char **out);

/**
 * Forget the lines drawn on the terminal, after something else was written
 * below them, so that the next redraw starts afresh underneath.
 */
void cnx_reprocess_view_detach(cnx_reprocess_view *view);

#ifdef __cplusplus
}
#endif
#endif
