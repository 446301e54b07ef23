/*
 * cnx/replay.h - finishing a request whose tasks were dead-lettered, once
 * the cause is fixed (cnx-replay, docs/replay.md).
 *
 * A replay of request R is R's own cnx.request/1 document (read back from
 * cnx.requests, where it is keyed by R) submitted again under a new id
 * with "reuse": true: the controller marks every task whose key is already
 * done as reused (its verified manifest, bit for bit the same outputs) and
 * releases the rest, which are R's dead tasks and those that never ran
 * because of them. R's dead letters on cnx.dlq (their replay bundles)
 * say which tasks are replayed, and the controller's release decisions for
 * the new request show that each of them ran again.
 */
#ifndef CNX_REPLAY_H
#define CNX_REPLAY_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "cnx/digest.h"
#include "cnx/geom.h"
#include "cnx/kafka.h"
#include "cnx/reprocess.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pure parts ------------------------------------------------------- */

/**
 * The replay request: the original cnx.request/1 document with a new id,
 * "reuse": true, and new submission time, deadline and submitter; the
 * workflow, dataset and region are the original's, unchanged.
 * @param original  the original request message (JSON, len bytes)
 * @param id        the original's id: the document must carry it
 * @param spec      request (the new id), submitted, deadline and submitter
 *                  are taken from it; the rest is ignored
 * @param[out] out  canonical JSON, free() it
 * @return 0; CNX_ESCHEMA naming the bad field of the original (not a
 *         cnx.request/1 document, another id, ...); CNX_EINVAL as
 *         cnx_request_build for the new fields; CNX_ENOMEM.
 */
int cnx_replay_request_build(const char *original, size_t len,
                             const char *id, const cnx_request_spec *spec,
                             char **out);

/** A dead-lettered task of a request, from its replay bundle. */
typedef struct cnx_replay_dead {
    char task_key[CNX_DIGEST_LEN];
    char stage[33];
    cnx_box roi;
    int attempts;           /* runs the worker made */
    size_t inputs;          /* input objects listed with their digests */
    char reason[512];       /* the error, cut to fit */
} cnx_replay_dead;

/**
 * Parse a message of cnx.dlq: a task's dead letter of request.
 * @return 0 (out set); CNX_ENOTFOUND if it is a dead letter of another
 *         request or of a raw (unparsable) message; CNX_ESCHEMA naming the
 *         bad field if it is not a dead letter at all.
 */
int cnx_replay_dead_parse(const char *json, size_t len, const char *request,
                          cnx_replay_dead *out);

/**
 * Parse a message of cnx.events: a controller decision releasing (or
 * reusing) a task of request.
 * @param[out] task_key  its task key
 * @param[out] reused    1 for a reuse, 0 for a release
 * @return 0; CNX_ENOTFOUND for anything else (events, other requests,
 *         other decisions, malformed messages).
 */
int cnx_replay_release_parse(const char *json, size_t len,
                             const char *request,
                             char task_key[CNX_DIGEST_LEN], int *reused);

/* ---- over Kafka ------------------------------------------------------- */

/** Called for each message of a scan; return non-zero to stop it. */
typedef int (*cnx_replay_scan_fn)(void *ctx, const cnx_message *msg);

/**
 * Read topic from its beginning up to the ends it had when the scan
 * started, calling fn on every message in each partition's order.
 * @return 0; CNX_EIO if the broker does not answer or the scan takes
 *         longer than timeout_ms.
 */
int cnx_replay_scan(const cnx_kafka_opts *kafka, const char *topic,
                    int timeout_ms, cnx_replay_scan_fn fn, void *ctx);

/* ---- the command ------------------------------------------------------ */

/** What cnx-replay was asked; the caller owns every field. */
typedef struct cnx_replay_opts {
    cnx_kafka_opts kafka;
    const char *request;        /* R, the request to finish */
    const char *replay_id;      /* the new id; NULL: "<R>.replay-<now>" */
    int64_t now;                /* Unix time of submission */
    int64_t deadline;           /* Unix time, > now */
    const char *submitter;      /* "user@host" */
    const char *controller_key; /* see cnx_reprocess_run; NULL: none */
    int list_only;              /* report R's dead letters, submit nothing */
    int json, quiet, tty;
    int timeout_s, timeout_given; /* as cnx_reprocess_run */
    int scan_timeout_s;         /* for reading a topic to its end */
    volatile sig_atomic_t *interrupted;
} cnx_replay_opts;

/**
 * Replay request R: read its document back from cnx.requests and its dead
 * letters from cnx.dlq, report them, submit the replay and follow it to the
 * end (cnx_reprocess_submit_follow), then check on cnx.events that the
 * controller released every dead-lettered task again under the new id.
 * @return an exit status of cnx-reprocess: 0 done (every dead task ran
 *         again, every repeated one identical); 1 broker or timeout; 2 no
 *         such request, or refused; 3, 4, 5 as cnx-reprocess (4 also when
 *         a dead-lettered task was not released again). Errors are one
 *         line on stderr.
 */
int cnx_replay_run(const cnx_replay_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
