/*
 * cnx/reprocess_run.h - submitting a request and following it to the end,
 * over Kafka: the loop cnx-reprocess and cnx-replay share. A reader is
 * opened at the exact current end of cnx.requests, the request is produced
 * (keyed by its id) and acknowledged, and the controller's answers for that
 * id are followed: the plan, the progress view, the summary and the exit
 * status (cnx/reprocess.h holds the pure parts). docs/reprocess.md.
 */
#ifndef CNX_REPROCESS_RUN_H
#define CNX_REPROCESS_RUN_H

#include <signal.h>
#include <stddef.h>

#include "cnx/kafka.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How to submit and follow one request; the caller owns every field. */
typedef struct cnx_reprocess_run {
    cnx_kafka_opts kafka;
    const char *prog;     /* message prefix on stderr ("cnx-reprocess") */
    const char *request;  /* the request id, also the message key */
    /* The controller's public key (a file, cnx/lineage.h): when set, an
     * answer counts only if its signature (cnx/message.h) verifies with
     * it; others are reported once and skipped. NULL: answers are taken
     * unverified. */
    const char *controller_key;
    int wait;             /* follow until finished */
    int json;             /* the result as one JSON object on stdout */
    int quiet;            /* no progress or information on stderr */
    int tty;              /* stderr is a terminal: redraw in place */
    int timeout_s;        /* for the answer; with wait, see timeout_given */
    int timeout_given;    /* with wait: also a limit on finishing */
    /* Set by the caller's SIGINT / SIGTERM handler: stop following. */
    volatile sig_atomic_t *interrupted;
    /* Out: the finished message (JSON, NUL-terminated) once one came;
     * free() it. NULL otherwise. */
    char *finished;
} cnx_reprocess_run;

/**
 * Submit body (a cnx.request/1 document, cnx_request_build) keyed by
 * run->request, then follow the answers as docs/reprocess.md describes
 * (without wait: until accepted or refused).
 * @return the exit status of cnx-reprocess (cnx_reprocess_exit): 0 done
 *         (or accepted), 1 broker, timeout or interruption, 2 refused or a
 *         bad controller key, 3, 4, 5 from the finished message. Every
 *         failure is one line on stderr prefixed by run->prog (and, with
 *         json, an error object on stdout).
 */
int cnx_reprocess_submit_follow(cnx_reprocess_run *run, const char *body);

#ifdef __cplusplus
}
#endif
#endif
