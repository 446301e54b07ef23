/*
 * controller_int.h - internals shared by the controller's files: the
 * state, the prepared-statement cache and the apply / decide halves.
 */
#ifndef CNX_CONTROLLER_INT_H
#define CNX_CONTROLLER_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

#include <jansson.h>

#include "cnx/controller.h"
#include "cnx/digest.h"
#include "cnx/kafka.h"
#include "cnx/lineage.h"
#include "cnx/workflow.h"

#define CTL_MAX_STMTS 96

/* A request's workflow and plan, rebuilt from the ledger on demand. */
typedef struct ctl_plan {
    char request[129];
    cnx_workflow *wf;
    cnx_plan *plan;
} ctl_plan;

/* External input digests already read from storage (object URL ->
 * digest), so that overlapping halos hash each object once. */
typedef struct ctl_digest {
    char *url;
    char digest[CNX_DIGEST_LEN];
    struct ctl_digest *next;
} ctl_digest;

/* Messages read and their signature checks, not yet applied. */
typedef struct ctl_batch {
    cnx_message **msgs;
    struct ctl_verdict *verdicts;
    size_t n;
} ctl_batch;

/* A decision published and waiting for its acknowledgement. */
typedef struct ctl_pending {
    const char *topic; /* a CNX_TOPIC_* constant */
    char *text;
} ctl_pending;

/* Where a partition's log began again (controller.c, check_log): its
 * messages are recorded in the ledger at offset + base, so that a new
 * log's messages do not take the positions of the old one's. */
typedef struct ctl_base {
    char topic[128];
    int32_t partition;
    int64_t base;
} ctl_base;

typedef struct ctl_task_ref {
    char request[129];
    int64_t idx;
} ctl_task_ref;

typedef struct ctl {
    const cnx_controller_opts *o;
    sqlite3 *db;
    struct {
        const char *sql;
        sqlite3_stmt *st;
    } stmts[CTL_MAX_STMTS];
    char **roots; /* --dataset-root, canonical */
    size_t nroots;
    cnx_key **trusted;
    char **trusted_names;
    size_t ntrusted;
    cnx_key *self;     /* --key: signs decisions, the only key they may bear */
    int authentic;     /* the message in hand is known authentic: the
                        * controller's own decision before it is read
                        * back, or a claim checked before it was held */
    cnx_consumer *reader;
    cnx_producer *producer;
    ctl_plan *plans;
    size_t nplans;
    ctl_digest *digests[4096];
    ctl_batch next;    /* read ahead, being checked */
    ctl_task_ref *dirty_tasks; /* touched in this transaction */
    size_t ndirty, cap_dirty;
    ctl_pending *pending; /* decisions sent, to apply once acknowledged */
    size_t npending, cap_pending;
    int live;          /* caught up: decisions allowed */
    int resent;        /* resend_unconfirmed done (once per run) */
    int dirty;         /* applied something since the last decision round */
    int held_again;    /* the claim just applied went (back) to `held` */
    double last_progress;
    int64_t applied;   /* messages applied */
    double log_reset_at; /* when the log was last found reset (a new
                          * cluster id, or ends below the stored
                          * positions); tasks released before it are
                          * released again (check_leases); 0: never */
    unsigned reconnects; /* cnx_consumer_reconnects of the reader, as
                          * last checked */
    double recheck_after; /* cnx_now() before which a failed check of the
                           * log after a reconnect is not tried again */
    ctl_base *bases;      /* meta `offset_base/<topic>/<partition>` rows */
    size_t nbases;
    pthread_mutex_t mlock;
    char *metrics;     /* current Prometheus exposition */
} ctl;

/* ---- the ledger layer (controller_ledger.c): SQLite, no Kafka ---------- */

/* Open (create, migrate) c->o->ledger into c->db; 0 or CNX_E* (message
 * set). */
int ctl_ledger_open(ctl *c);
/* Prepared statement for sql (a string literal: cached by address),
 * reset and with bindings cleared. NULL on error (logged). */
sqlite3_stmt *ctl_stmt(ctl *c, const char *sql);
/* Run sql with no result; 0 or CNX_EIO (message set). */
int ctl_exec(ctl *c, const char *sql);
/* Step a statement to completion; 0 or CNX_EIO. */
int ctl_done(ctl *c, sqlite3_stmt *st);
/* Bind text (NULL binds NULL). */
void ctl_bind_text(sqlite3_stmt *st, int i, const char *text);

/* The plan of an accepted request (cached), or NULL (error set). */
ctl_plan *ctl_plan_get(ctl *c, const char *request);

/* ---- the fold (controller_apply.c): messages into rows ------------------ */

typedef struct ctl_verdict ctl_verdict;
void cnx__ctl_batch_dispose(ctl_batch *b);

/* What a lineage message says once checked: pure (no ledger), so a batch
 * is checked on several threads before it is applied in order. */
struct ctl_verdict {
    int ready;                     /* filled in */
    int verified;                  /* signed by a trusted key, parsed */
    int signer;                    /* index in trusted, or -1 */
    char manifest[CNX_DIGEST_LEN]; /* SHA-256 of the envelope's bytes */
    char error[512];               /* why not verified */
    json_t *stmt;                  /* the statement (verified only) */
    const char *key, *request, *stage, *invocation; /* borrowed from stmt */
    /* What a `succeeded` naming it is checked against (verified only):
     * the stage and box of its task document, its subjects' names. */
    char task_stage[40], task_box[128];
    char *subjects; /* sorted, one per line; owned */
};

/* Check a cnx.lineage message against the trusted keys (thread-safe). */
void ctl_verify(const ctl *c, const cnx_message *msg, ctl_verdict *v);
void ctl_verdict_free(ctl_verdict *v);

/* Apply one message from the log (inside the caller's transaction);
 * verdict: NULL, or ctl_verify's for a lineage message. */
int ctl_apply(ctl *c, const cnx_message *msg);
int ctl_apply_verified(ctl *c, const cnx_message *msg, ctl_verdict *verdict);

/* Recompute a task's derived columns; on its first transition to done,
 * count it off its dependents. */
int ctl_refresh_task(ctl *c, const char *request, int64_t idx);
/* Mark a task for ctl_refresh_task at the end of the transaction (each
 * task once, however many of its messages the transaction applied). */
int ctl_touch_task(ctl *c, const char *request, int64_t idx);
int ctl_flush_touched(ctl *c);
/* Refresh the touched tasks and COMMIT (ROLLBACK on failure); ROLLBACK
 * and forget them. */
int ctl_commit(ctl *c);
void ctl_rollback(ctl *c);

/* ---- decisions (controller_decide.c): rows into signed messages -------- */

/* Publish a JSON document (canonical text) to topic, keyed by key, signed
 * with the controller's key. */
int ctl_publish(ctl *c, const char *topic, const char *key, const char *json,
                const cnx_kafka_header *headers, size_t nheaders);
/* Wait for the broker's acknowledgement of everything published. */
int ctl_flush(ctl *c);

/* ---- the loop (controller.c) ------------------------------------------- */

/* Open the ledger and load the trusted keys (no Kafka); close. For the
 * controller and for tests that replay a log. */
int cnx__ctl_open(ctl *c, const cnx_controller_opts *opts);
void cnx__ctl_close(ctl *c);
/* Apply a consumed message and store its position (inside the caller's
 * transaction). */
int cnx__ctl_apply_logged(ctl *c, const cnx_message *m);

/* One round of decisions (live only). */
int ctl_decide(ctl *c);

/* Render the Prometheus exposition from the ledger (main thread); the
 * metrics server hands out a copy. */
void ctl_metrics_update(ctl *c);
int cnx__ctl_metrics_start(ctl *c, int port);
void cnx__ctl_metrics_stop(void);
/* Whether catch_up is running (the exposition says so; any thread). */
void cnx__ctl_metrics_catching_up(int on);

/* Current wall-clock time, RFC 3339 with milliseconds. */
void ctl_now_text(char out[32]);
double ctl_wall(void);

#endif
