/*
 * cnx/controller.h - the controller: the single writer of the ledger.
 *
 * The ledger (SQLite, WAL) is a fold over three topics: cnx.requests
 * (requests, and the controller's own decisions about them), cnx.events
 * (the workers' attempt events, and the controller's release decisions)
 * and cnx.lineage (signed manifests). Every decision the controller makes
 * (accept or refuse a request, release a task, give a lost task up, an SLO
 * change, a request's end) is first published to those topics and
 * acknowledged, then applied; what is applied is only ever what the log
 * says. So the ledger can be rebuilt from the topics alone (--rebuild) and
 * comes out the same, and a controller killed at any moment resumes from
 * the positions stored with the rows it last applied, without losing or
 * repeating anything. docs/ledger.md has the tables; docs/controller.md
 * the rules.
 */
#ifndef CNX_CONTROLLER_H
#define CNX_CONTROLLER_H

#include "cnx/kafka.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CNX_REQUEST_SCHEMA "cnx.request/1"
#define CNX_REQUEST_STATE_SCHEMA "cnx.request-state/1"
#define CNX_CONTROL_SCHEMA "cnx.control/1"

#define CNX_CONTROLLER_MAX_ROOTS 16       /* --dataset-root given at most */
#define CNX_CONTROLLER_MAX_TASKS 1000000  /* --max-tasks-per-request default */
#define CNX_CONTROLLER_RELEASE_LEASE 3600 /* --release-lease default, s */

typedef struct cnx_controller_opts {
    cnx_kafka_opts kafka;
    const char *ledger;     /* SQLite file */
    const char *trust_dir;  /* the workers' public keys (*.pem, *.pub) */
    const char *key_path;   /* the controller's private key: it signs its
                             * decisions and trusts only those it signed */
    int rebuild;            /* apply the topics from the start, then exit */
    double price_per_core_hour; /* < 0: unknown */
    double progress_s;      /* progress message period, default 1 */
    double at_risk_margin;  /* fraction of the request window, default 0.1 */
    int metrics_port;       /* 0: none */
    double ready_timeout_s; /* /readyz 503 once no broker answered this
                             * long (CNX_KAFKA_READY_TIMEOUT_S) */
    double idle_exit_s;     /* exit 0 after idle this long (0: never) */
    int batch;              /* messages applied per transaction, 1000 */
    /* Datasets a request may name: each a URL cnx_url_parse accepts (a
     * plain path too), borrowed. A request whose dataset is not under one
     * of them (component-wise) is refused; none given: any dataset. */
    const char *dataset_roots[CNX_CONTROLLER_MAX_ROOTS];
    size_t ndataset_roots;
    size_t max_tasks;       /* tasks per request (refused above); 0: none */
    double release_lease_s; /* a released task not heard of this long
                             * after its release is lost (0: never) */
    int quiet;
} cnx_controller_opts;

/**
 * Parse the command line (prints --help and returns 1; 2 after a one-line
 * usage error; 0 to run).
 */
int cnx_controller_parse_args(cnx_controller_opts *opts, int argc,
                              char **argv);

/**
 * Run until SIGTERM / SIGINT (or, with rebuild, until every topic is
 * applied to its end).
 * @return process exit code: 0; 1 when it cannot start or the ledger
 *         cannot be written.
 */
int cnx_controller_run(const cnx_controller_opts *opts);

/**
 * `cnx-controller archive ARGS` (argv[0] is "archive"): move one finished
 * request out of a ledger into its own SQLite file (docs/ledger.md).
 * Prints its one-line errors on stderr.
 * @return process exit code: 0 archived, or already archived; 1 refused
 *         (unknown or unfinished request, --out taken) or failed; 2 bad
 *         arguments.
 */
int cnx_controller_archive_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
