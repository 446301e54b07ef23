/*
 * worker_int.h - internals shared by the worker runtime's files: the stage
 * I/O context and the metrics registry.
 */
#ifndef CNX_WORKER_INT_H
#define CNX_WORKER_INT_H

#include <stdatomic.h>

#include "cnx/worker.h"

struct cnx_stage_io {
    const cnx_task *task;
    cnx_layer *inputs[CNX_TASK_MAX_INPUTS]; /* by task input index; NULL
                                             * for a store without info
                                             * (a tile set) */
    cnx_store *stores[CNX_TASK_MAX_INPUTS]; /* by task input index */
    cnx_layer *output;
    int output_scale;
    cnx_object_list read;    /* "<input layer url>/<object>" + digest */
    cnx_object_list written; /* output layer object names + digest */
    int64_t voxels;
    uint64_t bytes_read;
    uint64_t bytes_written;
    double read_s;
    double write_s;
};

/* Open the task's layers. */
int cnx__stage_io_init(cnx_stage_io *io, const cnx_task *task);
void cnx__stage_io_dispose(cnx_stage_io *io);

/* Metrics registry (one per process). */
typedef struct cnx_metrics {
    const char *stage;
    atomic_llong succeeded;
    atomic_llong failed_attempts;
    atomic_llong dead_lettered;
    atomic_llong preempted;
    atomic_llong already_done; /* redelivered, outputs durable: announced */
    atomic_llong voxels;
    atomic_llong in_flight;
    _Atomic double last_voxels_per_s;
    atomic_llong buckets[16]; /* task duration histogram */
    _Atomic double duration_sum;
    atomic_llong duration_count;
} cnx_metrics;

/* Count one computed, durable task of `voxels` voxels that took `seconds`. */
void cnx__metrics_succeeded(cnx_metrics *m, long long voxels, double seconds);
/* Render the Prometheus text exposition. free() the result. */
char *cnx__metrics_render(cnx_metrics *m);
/* Serve /metrics on port until *stop becomes non-zero (own thread). */
int cnx__metrics_start(cnx_metrics *m, int port, atomic_int *stop);
void cnx__metrics_stop(void);

/* Serve render(ctx) (a malloc'd exposition) on port until *stop becomes
 * non-zero, from a thread of its own; one server per process. */
int cnx__http_metrics_start(int port, char *(*render)(void *ctx), void *ctx,
                            atomic_int *stop);
void cnx__http_metrics_stop(void);

#endif
