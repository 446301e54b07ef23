/*
 * cnx/worker.h - the worker runtime every stage shares.
 *
 * A worker's main.c fills a cnx_stage (name, kernel version, run function)
 * and calls cnx_worker_main(). The runtime consumes cnx.tasks.<stage>.urgent
 * before cnx.tasks.<stage>, parses and checks each task, runs the stage with
 * a cnx_stage_io through which every read is checked against the task's
 * expected digests and every write is recorded, publishes the events and a
 * signed manifest, waits for the broker's acknowledgement, and only then
 * commits the offset. Retriable failures are retried with backoff up to the
 * task's budget, the last attempt over a retry window (an outage is waited
 * out); the rest, and malformed messages, go to cnx.dlq with a replay
 * bundle. SIGTERM stops intake and finishes or abandons the current
 * task within the grace period. See docs/worker.md.
 */
#ifndef CNX_WORKER_H
#define CNX_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/kafka.h"
#include "cnx/precomputed.h"
#include "cnx/task.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cnx_stage_io cnx_stage_io;

/**
 * A stage: what a worker runs for each task. run() must be deterministic
 * in (task, input bytes) and do all I/O through io. It returns 0 or a CNX_E*
 * code with cnx_error_set() describing the failure; the error's retriable
 * flag decides between retry and dead letter.
 */
typedef struct cnx_stage {
    const char *name;       /* topic suffix: cnx.tasks.<name> */
    int64_t kernel_version; /* must equal the task's kernel_version */
    int (*run)(void *ctx, const cnx_task *task, cnx_stage_io *io);
    void *ctx;
    const char *help;       /* one paragraph for --help */
} cnx_stage;

/**
 * Read box (in the input's scale coordinates) of the input with this role.
 * Every chunk read must be listed in the task with its digest: one that is
 * not, or whose bytes differ, fails (CNX_ESCHEMA / CNX_EDIGEST, fatal).
 * @param[out] out  caller frees with cnx_volume_free()
 */
int cnx_stage_read(cnx_stage_io *io, const char *role, const cnx_box *box,
                   cnx_volume **out);

/**
 * Read one object the task lists under input role (a side object such as
 * a face record, or a chunk as stored), checked against its digest.
 * @param max_len  refuse objects larger than this (0: the store's limit)
 * @param[out] data  caller frees with free()
 * @return 0; CNX_ESCHEMA (not listed); CNX_EDIGEST; store errors.
 */
int cnx_stage_get(cnx_stage_io *io, const char *role, const char *name,
                  size_t max_len, uint8_t **data, size_t *len);

/**
 * Read one object of input role that the task does not list, checked
 * against a digest the stage took from a document it read with
 * cnx_stage_get (a tile named with its sha256 by a tile set), so the chain
 * from the task's digests to every byte read stays unbroken. Recorded for
 * the manifest like any other read.
 * @return as cnx_stage_get; CNX_ESCHEMA if digest is not "sha256:<hex>".
 */
int cnx_stage_get_expect(cnx_stage_io *io, const char *role, const char *name,
                         const char *digest, size_t max_len, uint8_t **data,
                         size_t *len);

/** The input layer of role, opened (borrowed; NULL if no such role, or if
 * the input is a store without info, such as a tile set). */
cnx_layer *cnx_stage_input_layer(cnx_stage_io *io, const char *role);

/** The task's output layer, opened (borrowed), e.g. to add a scale. */
cnx_layer *cnx_stage_output_layer(cnx_stage_io *io);

/** Index of the task's output scale in the output layer's info, or -1. */
int cnx_stage_output_scale(cnx_stage_io *io);

/**
 * Write a volume, chunk-aligned in the task's output scale, to the output
 * layer (write-once); every object is recorded for the manifest.
 */
int cnx_stage_write(cnx_stage_io *io, const cnx_volume *vol);

/** Put a small object into the output layer (recorded for the manifest). */
int cnx_stage_put(cnx_stage_io *io, const char *name, const void *data,
                  size_t len);

/** Count voxels processed (for events and metrics). */
void cnx_stage_add_voxels(cnx_stage_io *io, int64_t voxels);

/* Default --retry-window, seconds: under the default lease of a started
 * task (a stage's lease_s, 600 s), leaving room for the task itself. */
#define CNX_WORKER_RETRY_WINDOW_S 300.0

/** Worker settings (from the common command line). */
typedef struct cnx_worker_opts {
    cnx_kafka_opts kafka;
    const char *instance;         /* group.instance.id; default host-pid */
    const char *group;            /* default "cnx.<stage>" */
    const char *key_path;         /* Ed25519 private key (required) */
    const char *controller_key_path; /* NULL, or the controller's public
                                      * key: tasks must bear its signature */
    const char *container_digest; /* optional "sha256:..." */
    int allow_dirty;              /* run even if built from a dirty tree */
    double grace_s;               /* SIGTERM grace, default 25 */
    int metrics_port;             /* 0: no metrics endpoint */
    double ready_timeout_s;       /* /readyz 503 once no broker answered
                                   * this long (CNX_KAFKA_READY_TIMEOUT_S) */
    int64_t max_tasks;            /* exit 0 after this many (0: no limit) */
    double idle_exit_s;           /* exit 0 after idle this long (0: never) */
    int slow_ms;                  /* test only: sleep in each task */
    int session_timeout_ms;       /* 0: default */
    double retry_window_s;        /* retriable failures of a task's last
                                   * attempt are retried in place until
                                   * this long after its first failure
                                   * (default 300; 0: dead-letter at once) */
    const char *cache_dir;        /* read cache (NULL: $CNX_CACHE_DIR) */
    uint64_t cache_max_bytes;     /* 0: default */
    int prefetch;                 /* while a kernel runs, warm the read
                                   * cache with the next task's inputs
                                   * (the command line's default: 1) */
    int quiet;
} cnx_worker_opts;

/**
 * Parse the common worker command line into opts (defaults filled in).
 * Prints --help (with stage->help) and returns 1; returns 2 after a
 * one-line usage error; 0 to run.
 */
int cnx_worker_parse_args(cnx_worker_opts *opts, const cnx_stage *stage,
                          int argc, char **argv);

/**
 * Run the worker until SIGTERM / SIGINT (or max_tasks / idle_exit_s).
 * @return the process exit code: 0 on an orderly stop, 1 when it cannot
 *         start (bad key, unreachable broker, dirty build), with a one-line
 *         error on stderr.
 */
int cnx_worker_run(const cnx_stage *stage, const cnx_worker_opts *opts);

/** parse_args + run: the whole of a worker's main(). */
int cnx_worker_main(const cnx_stage *stage, int argc, char **argv);

/**
 * The main() of an executable that serves several stages, one per
 * process: "--stage NAME" picks it (default stages[0]) and the rest of the
 * command line is cnx_worker_main's. --help without --stage lists them.
 */
int cnx_worker_main_multi(const char *prog, const cnx_stage *const *stages,
                          size_t n, int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
