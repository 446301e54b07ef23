/*
 * worker_int.h - internals shared by the worker runtime's files: the stage
 * I/O context and the metrics registry.
 */
#ifndef CNX_WORKER_INT_H
#define CNX_WORKER_INT_H

#include <stdatomic.h>
#include <stddef.h>

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

/* Serve, on port until *stop becomes non-zero, from a thread of its own
 * (http_metrics.c; one server per process): GET /metrics: render(ctx) (a
 * malloc'd exposition, freed by the server) followed by cnx_ready,
 * cnx_build_info and the process_* series; GET /healthz: 200 "ok" while
 * the main loop turned less than CNX_HTTP_WEDGED_S ago, else 503; GET
 * /readyz: 200 "ready", or 503 and the reason the main loop last
 * published; 404 for other paths, 405 for other methods. Until the first
 * cnx__http_health_update the process is alive and not ready
 * ("starting").
 * @return 0; CNX_EIO if the port cannot be listened on. */
int cnx__http_metrics_start(int port, char *(*render)(void *ctx), void *ctx,
                            atomic_int *stop);
void cnx__http_metrics_stop(void);

/* /healthz fails once the main loop has not turned for this long: longer
 * than any wait the loops make between two turns (a flush waits 30 s). */
#define CNX_HTTP_WEDGED_S 120.0

/* Called by the main thread at every turn of its loop: records the turn
 * (/healthz) and the readiness: NULL for ready, else the failing
 * condition in one line (copied; /readyz answers it with 503). Any
 * thread; cheap (a lock and a copy). */
void cnx__http_health_update(const char *not_ready);

/* What the server makes of a request head (exposed for tests). */
typedef enum cnx_http_route {
    CNX_HTTP_INCOMPLETE,  /* no complete request line yet */
    CNX_HTTP_BAD_REQUEST, /* 400: the request line does not parse */
    CNX_HTTP_NOT_FOUND,   /* 404: not one of the paths below */
    CNX_HTTP_BAD_METHOD,  /* 405: one of them, not with GET */
    CNX_HTTP_METRICS,     /* GET /metrics */
    CNX_HTTP_HEALTHZ,     /* GET /healthz */
    CNX_HTTP_READYZ       /* GET /readyz */
} cnx_http_route;

/* Route the request head[0..len) (the bytes read so far; need not be
 * NUL-terminated): "METHOD SP /path[?query] SP HTTP/1.x" CRLF or LF. The
 * query string and fragment are ignored. A head of 8 KiB or more
 * without a line end is CNX_HTTP_BAD_REQUEST. Pure. */
cnx_http_route cnx__http_route(const char *head, size_t len);

/* Append the series every process serves (process_metrics.c):
 * cnx_build_info{version,commit,dirty} and the process_* series of the
 * Prometheus client conventions, read from /proc/self, into out[0..cap),
 * NUL-terminated; a series that cannot be read is left out.
 * @return the length written (less than cap). */
size_t cnx__process_metrics_render(char *out, size_t cap);

#endif
