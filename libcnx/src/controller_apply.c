/*
 * controller_apply.c - the fold: one message from the log into the ledger.
 *
 * Base rows record what the messages say (requests, releases, attempts,
 * lineage, outputs, violations, SLO events); a task's state and the other
 * derived columns are recomputed from its base rows whenever one of them
 * changes (ctl_refresh_task), so applying a message twice, or messages of
 * different partitions in another interleaving, gives the same rows. A
 * malformed message becomes a row of `rejected` (topic, partition, offset,
 * the one-line error) and changes nothing else.
 */
#include "controller_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/message.h"
#include "cnx/reprocess.h"
#include "cnx/task.h"
#include "cnx/url.h"
#include "json_int.h"

#define GENESIS "sha256:0000000000000000000000000000000000000000000000000000000000000000"

static const char *jstr(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int64_t jint(const json_t *obj, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static double jnum(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static int bad(const char *what, const char *field)
{
    return cnx_error_set(CNX_ESCHEMA, 0, "%s: %s", what, field);
}

static int valid_time(const char *t)
{
    int64_t unused;
    return t != NULL && cnx_rfc3339_parse(t, &unused) == 0;
}

static void col_text(sqlite3_stmt *st, int i, char *out, size_t n)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(out, n, "%s", t ? (const char *)t : "");
}

static int is_digest(const char *d)
{
    return d != NULL && strlen(d) == 71 && strncmp(d, "sha256:", 7) == 0 &&
           strspn(d + 7, "0123456789abcdef") == 64;
}

static int settle_held_by_task(ctl *c, const char *request, const char *key);
static int settle_held_by_request(ctl *c, const char *request);
static int settle_held_by_manifest(ctl *c, const char *manifest);
static void statement_facts(const json_t *stmt, char stage[40], char box[128],
                            char **subjects);
static int store_facts(ctl *c, const char *manifest, const ctl_verdict *v);


/* ---- requests ------------------------------------------------------------- */

static int apply_request(ctl *c, const json_t *m)
{
    static const char *const keys[] = {"schema",   "request", "workflow",
                                       "dataset",  "roi",     "deadline",
                                       "submitted", "reuse",  "submitter",
                                       NULL};
    const char *id = jstr(m, "request"), *ds = jstr(m, "dataset");
    const char *deadline = jstr(m, "deadline"), *sub = jstr(m, "submitted");
    const json_t *wf = json_object_get(m, "workflow");
    const json_t *roi = json_object_get(m, "roi");
    const json_t *reuse = json_object_get(m, "reuse");
    char *wj = NULL, *rj = NULL, digest[CNX_DIGEST_LEN];
    int64_t v[3];
    sqlite3_stmt *st;
    cnx_url url;
    int rc = cnx__json_only_keys(m, keys, CNX_ESCHEMA, "request");

    if (rc != 0)
        return rc;
    if (id == NULL || strlen(id) > 128 ||
        strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                   "0123456789._:-") != strlen(id) || id[0] == '\0')
        return bad("cnx.request/1", "request: must be 1-128 of A-Z a-z 0-9 . _ : -");
    if (!json_is_object(wf) || !json_is_string(json_object_get(wf, "name")))
        return bad("cnx.request/1", "workflow: must be a workflow document");
    if (ds == NULL || ds[0] == '\0')
        return bad("cnx.request/1", "dataset: must be a store URL");
    rc = cnx_url_parse(&url, ds, 0);
    if (rc != 0) {
        char why[512];
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        return bad("cnx.request/1", why);
    }
    if (strcmp(url.canonical, ds) != 0)
        return bad("cnx.request/1", "dataset: not a canonical URL "
                   "(cnx/url.h)");
    if (!json_is_object(roi) ||
        cnx__json_ivec(json_object_get(roi, "min"), 3, -(1LL << 40),
                       1LL << 40, v, CNX_ESCHEMA, "request: roi.min") != 0 ||
        cnx__json_ivec(json_object_get(roi, "max"), 3, -(1LL << 40),
                       1LL << 40, v, CNX_ESCHEMA, "request: roi.max") != 0)
        return bad("cnx.request/1", "roi: must be {min: [3 ints], max: [3 ints]}");
    if (!valid_time(deadline))
        return bad("cnx.request/1", "deadline: must be RFC 3339 UTC");
    if (!valid_time(sub))
        return bad("cnx.request/1", "submitted: must be RFC 3339 UTC");
    if (reuse != NULL && !json_is_boolean(reuse))
        return bad("cnx.request/1", "reuse: must be true or false");
    wj = cnx__json_canonical(wf);
    rj = cnx__json_canonical(roi);
    if (wj == NULL || rj == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        goto done;
    }
    /* An archived request's id stays taken (its row left the ledger). */
    st = ctl_stmt(c, "SELECT file FROM archives WHERE request = ?");
    if (st == NULL) {
        rc = CNX_EIO;
        goto done;
    }
    ctl_bind_text(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        rc = cnx_error_set(CNX_EINVAL, 0, "request %s: the id is taken (a "
                           "request archived in %s)", id,
                           (const char *)sqlite3_column_text(st, 0));
        sqlite3_reset(st);
        goto done;
    }
    sqlite3_reset(st);
    cnx_digest(wj, strlen(wj), digest);
    st = ctl_stmt(c, "INSERT OR IGNORE INTO requests(id, workflow, "
                     "workflow_digest, workflow_json, dataset, roi, submitted, "
                     "deadline, reuse, submitter, state) VALUES(?, ?, ?, ?, ?, "
                     "?, ?, ?, ?, ?, 'submitted')");
    if (st == NULL) {
        rc = CNX_EIO;
        goto done;
    }
    ctl_bind_text(st, 1, id);
    ctl_bind_text(st, 2, jstr(wf, "name"));
    ctl_bind_text(st, 3, digest);
    ctl_bind_text(st, 4, wj);
    ctl_bind_text(st, 5, ds);
    ctl_bind_text(st, 6, rj);
    ctl_bind_text(st, 7, sub);
    ctl_bind_text(st, 8, deadline);
    sqlite3_bind_int(st, 9, json_is_true(reuse));
    ctl_bind_text(st, 10, jstr(m, "submitter"));
    rc = ctl_done(c, st);
    if (rc == 0 && sqlite3_changes(c->db) == 0)
        rc = cnx_error_set(CNX_EINVAL, 0, "request %s: the id is taken (a "
                           "replayed request, or an id used before)", id);

done:
    free(wj);
    free(rj);
    return rc;
}

/* Insert the stages, tasks and namespaces of an accepted request. */
static int plan_rows(ctl *c, const char *request)
{
    ctl_plan *cp = ctl_plan_get(c, request);
    sqlite3_stmt *st;
    int rc = 0;
    if (cp == NULL)
        return cnx_error_last()->code ? cnx_error_last()->code : CNX_EIO;
    const cnx_plan *p = cp->plan;
    for (size_t s = 0; s < p->nstages && rc == 0; s++) {
        const cnx_plan_stage *ps = &p->stages[s];
        const cnx_wf_stage *ws = &cp->wf->stages[s];
        char region[160], ns[CNX_SCALE_KEY_MAX + 40];
        snprintf(region, sizeof(region),
                 "{\"max\":[%lld,%lld,%lld],\"min\":[%lld,%lld,%lld]}",
                 (long long)ps->region.max[0], (long long)ps->region.max[1],
                 (long long)ps->region.max[2], (long long)ps->region.min[0],
                 (long long)ps->region.min[1], (long long)ps->region.min[2]);
        st = ctl_stmt(c, "INSERT OR IGNORE INTO stages(request, stage, seq, "
                         "worker, kind, kernel_version, parameters, tasks, "
                         "region, input_layer, input_scale, res_x, res_y, "
                         "res_z, output_layer, output_scale, retry_budget, "
                         "lease_s) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                         "?, ?, ?, ?, ?, ?)");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, request);
        ctl_bind_text(st, 2, ws->name);
        sqlite3_bind_int64(st, 3, (int64_t)s);
        ctl_bind_text(st, 4, ws->worker);
        ctl_bind_text(st, 5, ws->kind == CNX_WF_MAP ? "map" : "reduce");
        sqlite3_bind_int64(st, 6, ws->kernel_version);
        ctl_bind_text(st, 7, ws->parameters);
        sqlite3_bind_int64(st, 8, (int64_t)ps->count);
        ctl_bind_text(st, 9, region);
        ctl_bind_text(st, 10, ps->in_layer);
        ctl_bind_text(st, 11, ps->in_scale.key);
        sqlite3_bind_double(st, 12, ps->in_scale.resolution[0]);
        sqlite3_bind_double(st, 13, ps->in_scale.resolution[1]);
        sqlite3_bind_double(st, 14, ps->in_scale.resolution[2]);
        ctl_bind_text(st, 15, ps->out_layer);
        ctl_bind_text(st, 16, ps->out_scale.key);
        sqlite3_bind_int64(st, 17, ws->retry_budget);
        sqlite3_bind_double(st, 18, ws->lease_s);
        rc = ctl_done(c, st);
        if (rc != 0)
            return rc;
        /* The first request to write a namespace binds it (the least
         * request id, so that the row does not depend on the order in
         * which partitions were read). */
        st = ctl_stmt(c, "INSERT INTO namespaces(layer, scale, worker, "
                         "kernel_version, parameters, first_request) "
                         "VALUES(?, ?, ?, ?, ?, ?) ON CONFLICT(layer, scale) "
                         "DO UPDATE SET first_request = min(first_request, "
                         "excluded.first_request)");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, ps->out_layer);
        cnx_plan_namespace(p, s, ns, sizeof(ns));
        ctl_bind_text(st, 2, ns);
        ctl_bind_text(st, 3, ws->worker);
        sqlite3_bind_int64(st, 4, ws->kernel_version);
        ctl_bind_text(st, 5, ws->parameters);
        ctl_bind_text(st, 6, request);
        rc = ctl_done(c, st);
    }
    for (size_t t = 0; t < p->ntasks && rc == 0; t++) {
        const cnx_plan_task *pt = &p->tasks[t];
        st = ctl_stmt(c, "INSERT OR IGNORE INTO tasks(request, idx, stage, "
                         "x0, y0, z0, x1, y1, z1, deps_left, state) "
                         "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'planned')");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, request);
        sqlite3_bind_int64(st, 2, (int64_t)t);
        ctl_bind_text(st, 3, cp->wf->stages[pt->stage].name);
        for (int i = 0; i < 3; i++) {
            sqlite3_bind_int64(st, 4 + i, pt->roi.min[i]);
            sqlite3_bind_int64(st, 7 + i, pt->roi.max[i]);
        }
        sqlite3_bind_int64(st, 10, pt->ndeps);
        rc = ctl_done(c, st);
    }
    if (rc != 0)
        return rc;
    /* Releases and attempts applied before the plan (other partitions
     * read first): fold them in now. */
    {
        int64_t *idx = NULL;
        size_t n = 0, cap = 0;
        st = ctl_stmt(c, "SELECT DISTINCT idx FROM releases WHERE request = ? "
                         "ORDER BY idx");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, request);
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                int64_t *g = realloc(idx, cap * sizeof(*idx));
                if (g == NULL) {
                    free(idx);
                    return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
                }
                idx = g;
            }
            idx[n++] = sqlite3_column_int64(st, 0);
        }
        for (size_t i = 0; i < n && rc == 0; i++)
            rc = ctl_touch_task(c, request, idx[i]);
        free(idx);
    }
    /* Successes that waited for the plan to be checked against it. */
    return rc == 0 ? settle_held_by_request(c, request) : rc;
}

/*
 * A request state (the controller's own, signed): parsed and checked by
 * the one parser of the format, cnx_request_state_parse (cnx-reprocess
 * reads it with the same), then folded. text: the canonical JSON, kept as
 * the plan (accepted) or the summary (finished).
 */
static int apply_state(ctl *c, const cnx_message *msg, const json_t *m,
                       const char *text)
{
    cnx_request_state *rs = NULL;
    const char *id;
    sqlite3_stmt *st;
    int rc;

    rc = cnx_request_state_parse(&rs, msg->value, msg->len);
    if (rc != 0)
        return rc;
    id = rs->request;
    switch (rs->type) {
    case CNX_STATE_ACCEPTED:
        if (!json_is_array(json_object_get(m, "externals"))) {
            rc = bad("request-state", "externals: must be an array");
            break;
        }
        st = ctl_stmt(c, "UPDATE requests SET state = 'accepted', "
                         "accepted = ?, plan = ?, tasks = ? WHERE id = ? AND "
                         "state = 'submitted'");
        if (st == NULL) {
            rc = CNX_EIO;
            break;
        }
        ctl_bind_text(st, 1, rs->time);
        ctl_bind_text(st, 2, text);
        sqlite3_bind_int64(st, 3, rs->tasks);
        ctl_bind_text(st, 4, id);
        rc = ctl_done(c, st);
        if (rc == 0 && sqlite3_changes(c->db) == 1)
            rc = plan_rows(c, id);
        break;
    case CNX_STATE_REFUSED:
        st = ctl_stmt(c, "UPDATE requests SET state = 'refused', "
                         "finished = ?, error = ? WHERE id = ? AND state = "
                         "'submitted'");
        if (st == NULL) {
            rc = CNX_EIO;
            break;
        }
        ctl_bind_text(st, 1, rs->time);
        ctl_bind_text(st, 2, rs->error);
        ctl_bind_text(st, 3, id);
        rc = ctl_done(c, st);
        break;
    case CNX_STATE_PROGRESS:
        /* The newest progress wins, by (time, eta), not the last applied:
         * the live controller applies its decisions as they are
         * acknowledged and reads them back later, behind the others, so
         * the order they reach this fold in differs from the log's. */
        st = ctl_stmt(c, "UPDATE requests SET eta = ?1, slo = coalesce(?2, "
                         "slo), urgent = max(urgent, ?3), progress_at = ?4 "
                         "WHERE id = ?5 AND state = 'accepted' AND "
                         "(coalesce(progress_at, ''), coalesce(eta, '')) < "
                         "(?4, coalesce(?1, ''))");
        if (st == NULL) {
            rc = CNX_EIO;
            break;
        }
        ctl_bind_text(st, 1, rs->eta[0] ? rs->eta : NULL);
        ctl_bind_text(st, 2, cnx_slo_name(rs->slo));
        sqlite3_bind_int(st, 3, rs->urgent);
        ctl_bind_text(st, 4, rs->time);
        ctl_bind_text(st, 5, id);
        rc = ctl_done(c, st);
        break;
    case CNX_STATE_SLO:
        if (rs->slo == CNX_SLO_OK) {
            rc = bad("request-state", "slo: must be at_risk, missed or met");
            break;
        }
        st = ctl_stmt(c, "INSERT OR IGNORE INTO slo_events(request, type, "
                         "time, eta, deadline) VALUES(?, ?, ?, ?, ?)");
        if (st == NULL) {
            rc = CNX_EIO;
            break;
        }
        ctl_bind_text(st, 1, id);
        ctl_bind_text(st, 2, cnx_slo_name(rs->slo));
        ctl_bind_text(st, 3, rs->time);
        ctl_bind_text(st, 4, rs->eta[0] ? rs->eta : NULL);
        ctl_bind_text(st, 5, rs->deadline);
        rc = ctl_done(c, st);
        if (rc != 0)
            break;
        st = ctl_stmt(c, "UPDATE requests SET slo = ?, urgent = max(urgent, "
                         "? ) WHERE id = ?");
        if (st == NULL) {
            rc = CNX_EIO;
            break;
        }
        ctl_bind_text(st, 1, cnx_slo_name(rs->slo));
        sqlite3_bind_int(st, 2, rs->slo != CNX_SLO_MET);
        ctl_bind_text(st, 3, id);
        rc = ctl_done(c, st);
        break;
    case CNX_STATE_FINISHED: {
        const char *outcome = rs->outcome_failed ? "failed" : "done";
        st = ctl_stmt(c, "UPDATE requests SET state = ?, outcome = ?, "
                         "finished = ?, summary = ? WHERE id = ? AND state = "
                         "'accepted'");
        if (st == NULL) {
            rc = CNX_EIO;
            break;
        }
        ctl_bind_text(st, 1, outcome);
        ctl_bind_text(st, 2, outcome);
        ctl_bind_text(st, 3, rs->time);
        ctl_bind_text(st, 4, text);
        ctl_bind_text(st, 5, id);
        rc = ctl_done(c, st);
        break;
    }
    }
    cnx_request_state_free(rs);
    return rc;
}

/* ---- releases (the controller's task decisions) ------------------------- */

/* What checking a claim on a manifest (a `succeeded` event, a `reused`
 * decision) against the ledger found; see "claims" below. */
enum { CLAIM_OK = 0, CLAIM_WAIT = 1, CLAIM_BAD = 2 };

static int check_reused(ctl *c, const char *key, const char *manifest,
                        int *verdict, char *why, size_t n);
static int hold(ctl *c, const cnx_message *msg, const char *request,
                const char *key, const char *manifest);

static int apply_control(ctl *c, const cnx_message *msg)
{
    cnx_control d;
    const char *manifest = NULL;
    sqlite3_stmt *st;
    int rc;

    rc = cnx_control_parse(&d, msg->value, msg->len);
    if (rc != 0)
        return rc;
    if (strcmp(d.type, "reused") == 0) {
        /* A reuse names the verified manifest it reuses, of this key. */
        char why[512];
        int verdict;
        manifest = d.manifest[0] ? d.manifest : NULL;
        rc = check_reused(c, d.task_key, manifest, &verdict, why,
                          sizeof(why));
        if (rc != 0)
            return rc;
        if (verdict == CLAIM_WAIT)
            return hold(c, msg, d.request, d.task_key, manifest);
        if (verdict == CLAIM_BAD)
            return cnx_error_set(CNX_EINVAL, 0, "%s", why);
    }
    st = ctl_stmt(c, "INSERT OR IGNORE INTO releases(request, idx, attempt, "
                     "type, task_key, lane, time, reason, manifest) VALUES(?, "
                     "?, ?, ?, ?, ?, ?, ?, ?)");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, d.request);
    sqlite3_bind_int64(st, 2, d.index);
    sqlite3_bind_int64(st, 3, d.attempt);
    ctl_bind_text(st, 4, d.type);
    ctl_bind_text(st, 5, d.task_key);
    ctl_bind_text(st, 6, d.lane);
    ctl_bind_text(st, 7, d.time);
    ctl_bind_text(st, 8, d.reason);
    ctl_bind_text(st, 9, manifest);
    rc = ctl_done(c, st);
    if (rc != 0 || sqlite3_changes(c->db) != 1)
        return rc;
    rc = ctl_touch_task(c, d.request, d.index);
    /* Successes of this task that waited for its release. */
    if (rc == 0 && strcmp(d.type, "released") == 0)
        rc = settle_held_by_task(c, d.request, d.task_key);
    return rc;
}

/* ---- worker events --------------------------------------------------------- */

/* The task of request released under key: its index, or -1. Read from
 * the releases (base rows), so it does not depend on when the task's
 * derived columns were last recomputed. */
static int64_t task_by_key(ctl *c, const char *request, const char *key)
{
    sqlite3_stmt *st = ctl_stmt(c, "SELECT idx FROM releases INDEXED BY "
                                   "releases_by_key WHERE task_key = ? AND "
                                   "request = ? ORDER BY idx LIMIT 1");
    if (st == NULL)
        return -1;
    ctl_bind_text(st, 1, key);
    ctl_bind_text(st, 2, request);
    if (sqlite3_step(st) != SQLITE_ROW)
        return -1;
    return sqlite3_column_int64(st, 0);
}

static int check_succeeded(ctl *c, const char *req, const char *key,
                           const char *manifest, int *verdict, char *why,
                           size_t n);

static int apply_event(ctl *c, const cnx_message *msg, const json_t *m)
{
    const char *type = jstr(m, "type"), *key = jstr(m, "task_key");
    const char *req = jstr(m, "request"), *worker = jstr(m, "worker");
    const char *time = jstr(m, "time"), *stage = jstr(m, "stage");
    const json_t *timings = json_object_get(m, "timings");
    const json_t *err = json_object_get(m, "error");
    const json_t *viol = json_object_get(m, "violation");
    const char *run = jstr(m, "run");
    int64_t attempt = jint(m, "attempt", -1), idx;
    int rank;
    sqlite3_stmt *st;
    int rc;

    if (type == NULL || key == NULL || req == NULL || worker == NULL ||
        stage == NULL || !valid_time(time))
        return bad("cnx.event/1", "type, stage, task_key, request, attempt, "
                                  "worker and time are required");
    if (attempt < 1)
        return bad("cnx.event/1", "attempt: must be an integer >= 1");
    if (run != NULL && strlen(run) != 16)
        return bad("cnx.event/1", "run: must be 16 hex digits");
    rank = strcmp(type, "started") == 0     ? 1
           : strcmp(type, "preempted") == 0 ? 2
           : strcmp(type, "failed") == 0    ? 3
           : strcmp(type, "succeeded") == 0 ? 4
                                            : 0;
    if (rank == 0)
        return bad("event", "type: unknown");
    if (rank == 4) {
        /* Believed only with a verified manifest of this very task. */
        const char *manifest = jstr(m, "manifest");
        char why[1024];
        int verdict;
        rc = check_succeeded(c, req, key, manifest, &verdict, why, sizeof(why));
        if (rc != 0)
            return rc;
        if (verdict == CLAIM_WAIT)
            return hold(c, msg, req, key, manifest);
        if (verdict == CLAIM_BAD)
            return cnx_error_set(CNX_EINVAL, 0, "%s", why);
    }
    /* One row per (task, request, attempt, worker, run): a worker that
     * runs the same attempt twice (a redelivery after a refused commit)
     * reports two runs, each its own row, so both are counted; events
     * before runs existed have run ''. A later state of the attempt
     * overrides an earlier one (started < preempted < failed <
     * succeeded), whatever order duplicates arrive in. Of two successes
     * of one row (events without a run id), the one with
     * the least (finished, manifest) gives the row its figures and
     * manifest: a success may wait in `held` for its manifest, so the
     * order they are applied in is not the log's. */
#define OLD_SUCCESS_WINS                                                       \
    "(?22 = 4 AND state = 'succeeded' AND (excluded.finished, "                \
    "excluded.manifest) >= (finished, manifest))"
#define FIGURE(col)                                                            \
    col " = CASE WHEN " OLD_SUCCESS_WINS " THEN " col                          \
        " ELSE coalesce(excluded." col ", " col ") END, "
    st = ctl_stmt(
        c,
        "INSERT INTO attempts(task_key, request, attempt, worker, stage, "
        "state, started, finished, cpu_s, wall_s, read_s, kernel_s, write_s, "
        "bytes_read, bytes_written, voxels, outputs, manifest, error_code, "
        "error, retriable, run) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
        "?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?23) "
        "ON CONFLICT(task_key, request, attempt, worker, run) DO UPDATE SET "
        "started = coalesce(started, excluded.started), "
        "state = CASE WHEN ?22 > (CASE state WHEN 'started' THEN 1 WHEN "
        "'preempted' THEN 2 WHEN 'failed' THEN 3 ELSE 4 END) THEN "
        /* clang-format off */
        "excluded.state ELSE state END, "
        FIGURE("finished") FIGURE("cpu_s") FIGURE("wall_s") FIGURE("read_s")
        FIGURE("kernel_s") FIGURE("write_s") FIGURE("bytes_read")
        FIGURE("bytes_written") FIGURE("voxels") FIGURE("outputs")
        "manifest = CASE WHEN ?22 = 4 AND state = 'succeeded' THEN (CASE "
        "WHEN " OLD_SUCCESS_WINS " THEN manifest ELSE excluded.manifest END) "
        "ELSE coalesce(manifest, excluded.manifest) END, "
        /* clang-format on */
        "error_code = coalesce(excluded.error_code, error_code), "
        "error = coalesce(excluded.error, error), "
        "retriable = coalesce(excluded.retriable, retriable)");
#undef FIGURE
#undef OLD_SUCCESS_WINS
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, key);
    ctl_bind_text(st, 2, req);
    sqlite3_bind_int64(st, 3, attempt);
    ctl_bind_text(st, 4, worker);
    ctl_bind_text(st, 5, stage);
    ctl_bind_text(st, 6, type);
    ctl_bind_text(st, 7, rank == 1 ? time : NULL);
    ctl_bind_text(st, 8, rank > 1 ? time : NULL);
    if (json_is_object(timings)) {
        sqlite3_bind_double(st, 9, jnum(m, "cpu_s"));
        sqlite3_bind_double(st, 10, jnum(timings, "total_s"));
        sqlite3_bind_double(st, 11, jnum(timings, "read_s"));
        sqlite3_bind_double(st, 12, jnum(timings, "kernel_s"));
        sqlite3_bind_double(st, 13, jnum(timings, "write_s"));
        sqlite3_bind_int64(st, 14, jint(m, "bytes_read", 0));
        sqlite3_bind_int64(st, 15, jint(m, "bytes_written", 0));
        sqlite3_bind_int64(st, 16, jint(m, "voxels", 0));
        sqlite3_bind_int64(st, 17, jint(m, "outputs", 0));
    }
    if (rank == 4)
        ctl_bind_text(st, 18, jstr(m, "manifest"));
    if (json_is_object(err)) {
        ctl_bind_text(st, 19, jstr(err, "code"));
        ctl_bind_text(st, 20, jstr(err, "message"));
        sqlite3_bind_int(st, 21, json_is_true(json_object_get(err,
                                                              "retriable")));
    }
    sqlite3_bind_int(st, 22, rank);
    ctl_bind_text(st, 23, run ? run : "");
    rc = ctl_done(c, st);
    if (rc != 0)
        return rc;
    idx = task_by_key(c, req, key);
    if (json_is_object(viol) && jstr(viol, "object") && jstr(viol, "stored") &&
        jstr(viol, "got")) {
        char evidence[160];
        snprintf(evidence, sizeof(evidence), "event %s attempt %lld",
                 worker, (long long)attempt);
        st = ctl_stmt(c, "INSERT OR IGNORE INTO violations(kind, task_key, "
                         "object, expected, got, request, stage, evidence) "
                         "VALUES('immutability', ?, ?, ?, ?, ?, ?, ?)");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, key);
        ctl_bind_text(st, 2, jstr(viol, "object"));
        ctl_bind_text(st, 3, jstr(viol, "stored"));
        ctl_bind_text(st, 4, jstr(viol, "got"));
        ctl_bind_text(st, 5, req);
        ctl_bind_text(st, 6, stage);
        ctl_bind_text(st, 7, evidence);
        rc = ctl_done(c, st);
        if (rc != 0)
            return rc;
    }
    return idx >= 0 ? ctl_touch_task(c, req, idx) : 0;
}

/* ---- lineage ------------------------------------------------------------- */

/* Outputs of a verified statement, and reproducibility violations. */
static int apply_statement(ctl *c, const json_t *stmt, const char *manifest,
                           const char *key, const char *req)
{
    const json_t *subjects = json_object_get(stmt, "subject");
    const char *stage = jstr(json_object_get(json_object_get(
                                 json_object_get(stmt, "predicate"),
                                 "buildDefinition"),
                             "externalParameters"),
                             "stage");
    size_t i;
    const json_t *s;
    int rc = 0;

    json_array_foreach(subjects, i, s) {
        const char *name = jstr(s, "name");
        const char *hex = jstr(json_object_get(s, "digest"), "sha256");
        char digest[CNX_DIGEST_LEN + 8];
        sqlite3_stmt *st;
        if (name == NULL || hex == NULL || strlen(hex) != 64)
            continue;
        snprintf(digest, sizeof(digest), "sha256:%s", hex);
        st = ctl_stmt(c, "INSERT OR IGNORE INTO outputs(task_key, object, "
                         "digest, manifest) VALUES(?, ?, ?, ?)");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, key);
        ctl_bind_text(st, 2, name);
        ctl_bind_text(st, 3, digest);
        ctl_bind_text(st, 4, manifest);
        rc = ctl_done(c, st);
        if (rc != 0)
            return rc;
        if (sqlite3_changes(c->db) == 1)
            continue;
        st = ctl_stmt(c, "SELECT digest FROM outputs WHERE task_key = ? AND "
                         "object = ?");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, key);
        ctl_bind_text(st, 2, name);
        if (sqlite3_step(st) != SQLITE_ROW)
            continue;
        if (strcmp((const char *)sqlite3_column_text(st, 0), digest) == 0)
            continue;
        {
            char expected[CNX_DIGEST_LEN + 8];
            snprintf(expected, sizeof(expected), "%s",
                     sqlite3_column_text(st, 0));
            st = ctl_stmt(c, "INSERT OR IGNORE INTO violations(kind, "
                             "task_key, object, expected, got, request, "
                             "stage, evidence) VALUES('reproducibility', ?, "
                             "?, ?, ?, ?, ?, ?)");
            if (st == NULL)
                return CNX_EIO;
            ctl_bind_text(st, 1, key);
            ctl_bind_text(st, 2, name);
            ctl_bind_text(st, 3, expected);
            ctl_bind_text(st, 4, digest);
            ctl_bind_text(st, 5, req ? req : "");
            ctl_bind_text(st, 6, stage ? stage : "");
            ctl_bind_text(st, 7, manifest);
            rc = ctl_done(c, st);
            CNX_WARN("controller", "reproducibility violation: task %s "
                     "object %s was %s, now %s", key, name, expected, digest);
            if (rc != 0)
                return rc;
        }
    }
    return rc;
}

void ctl_verdict_free(ctl_verdict *v)
{
    if (v == NULL)
        return;
    json_decref(v->stmt);
    v->stmt = NULL;
    free(v->subjects);
    v->subjects = NULL;
}

void ctl_verify(const ctl *c, const cnx_message *msg, ctl_verdict *v)
{
    uint8_t *payload = NULL;
    size_t plen = 0;
    char *envelope;

    memset(v, 0, sizeof(*v));
    v->signer = -1;
    v->ready = 1;
    cnx_digest(msg->value, msg->len, v->manifest);
    envelope = malloc(msg->len + 1);
    if (envelope == NULL) {
        snprintf(v->error, sizeof(v->error), "out of memory");
        return;
    }
    memcpy(envelope, msg->value, msg->len);
    envelope[msg->len] = '\0';
    if (strlen(envelope) != msg->len) {
        snprintf(v->error, sizeof(v->error), "envelope: holds a NUL byte");
    } else if (cnx_dsse_verify(envelope, msg->len, c->trusted, c->ntrusted,
                               &payload, &plen, &v->signer) != 0) {
        snprintf(v->error, sizeof(v->error), "%s",
                 cnx_error_last()->message);
    } else if (cnx__json_parse(&v->stmt, (const char *)payload, plen,
                               CNX_ESCHEMA, "statement") != 0) {
        snprintf(v->error, sizeof(v->error), "%s",
                 cnx_error_last()->message);
    } else {
        const json_t *pred = json_object_get(v->stmt, "predicate");
        const json_t *ext = json_object_get(
            json_object_get(pred, "buildDefinition"), "externalParameters");
        const json_t *meta = json_object_get(
            json_object_get(pred, "runDetails"), "metadata");
        v->key = jstr(ext, "taskKey");
        v->stage = jstr(ext, "stage");
        v->request = jstr(json_object_get(ext, "task"), "request");
        v->invocation = jstr(meta, "invocationId");
        if (v->key == NULL || v->request == NULL) {
            snprintf(v->error, sizeof(v->error),
                     "statement: no taskKey or task.request");
        } else {
            v->verified = 1;
            statement_facts(v->stmt, v->task_stage, v->task_box, &v->subjects);
        }
    }
    free(payload);
    free(envelope);
}

static int apply_lineage(ctl *c, const cnx_message *msg, ctl_verdict *given)
{
    char prev[CNX_DIGEST_LEN + 8], row[CNX_DIGEST_LEN], chain[256];
    ctl_verdict own;
    ctl_verdict *v = given;
    const char *manifest, *key, *req, *error;
    int verified, signer, rc = 0;
    sqlite3_stmt *st;

    if (v == NULL || !v->ready) {
        ctl_verify(c, msg, &own);
        v = &own;
    }
    manifest = v->manifest;
    verified = v->verified;
    signer = v->signer;
    key = v->key;
    req = v->request;
    error = v->error;
    /* The chain: each row's digest covers the previous row's digest in
     * the same partition, its position, the envelope's digest and the
     * verdict. */
    st = ctl_stmt(c, "SELECT row_digest FROM lineage WHERE partition = ? "
                     "ORDER BY offset DESC LIMIT 1");
    if (st == NULL) {
        rc = CNX_EIO;
        goto done;
    }
    sqlite3_bind_int(st, 1, msg->partition);
    snprintf(prev, sizeof(prev), "%s",
             sqlite3_step(st) == SQLITE_ROW
                 ? (const char *)sqlite3_column_text(st, 0)
                 : GENESIS);
    snprintf(chain, sizeof(chain), "cnx.lineage-row/1\n%s\n%d\n%lld\n%s\n%d\n",
             prev, (int)msg->partition, (long long)msg->offset, manifest,
             verified);
    cnx_digest(chain, strlen(chain), row);
    st = ctl_stmt(c, "INSERT OR IGNORE INTO lineage(partition, offset, "
                     "envelope_digest, task_key, request, stage, invocation, "
                     "signer, verified, error, envelope, prev, row_digest) "
                     "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (st == NULL) {
        rc = CNX_EIO;
        goto done;
    }
    sqlite3_bind_int(st, 1, msg->partition);
    sqlite3_bind_int64(st, 2, msg->offset);
    ctl_bind_text(st, 3, manifest);
    ctl_bind_text(st, 4, key);
    ctl_bind_text(st, 5, req);
    ctl_bind_text(st, 6, v->stage);
    ctl_bind_text(st, 7, v->invocation);
    ctl_bind_text(st, 8, verified && signer >= 0 ? c->trusted_names[signer]
                                                 : NULL);
    sqlite3_bind_int(st, 9, verified);
    ctl_bind_text(st, 10, verified ? NULL : error);
    /* The bytes as they came (a NUL inside is refused by ctl_verify and
     * stored up to it, as TEXT does). */
    sqlite3_bind_text(st, 11, msg->value, (int)strnlen(msg->value, msg->len),
                      SQLITE_TRANSIENT);
    ctl_bind_text(st, 12, prev);
    ctl_bind_text(st, 13, row);
    rc = ctl_done(c, st);
    if (rc != 0 || sqlite3_changes(c->db) != 1)
        goto done;
    if (!verified) {
        CNX_WARN("controller", "manifest %s[%d]@%lld refused: %s",
                 msg->topic, (int)msg->partition, (long long)msg->offset,
                 error);
        /* Claims on it are now known to be false. */
        rc = settle_held_by_manifest(c, manifest);
        goto done;
    }
    rc = apply_statement(c, v->stmt, manifest, key, req);
    if (rc == 0)
        rc = store_facts(c, manifest, v);
    if (rc == 0) {
        int64_t idx = task_by_key(c, req, key);
        if (idx >= 0)
            rc = ctl_touch_task(c, req, idx);
    }
    if (rc == 0)
        rc = settle_held_by_manifest(c, manifest);
done:
    if (v == &own)
        ctl_verdict_free(&own);
    return rc;
}

/* ---- claims on manifests -------------------------------------------------
 *
 * A `succeeded` event and a `reused` decision each claim that a manifest
 * on cnx.lineage completes a task. The ledger believes a claim only once
 * it can check it: the manifest is there, a trusted key verified it, and
 * it is of that very task (a success: the same task key and request, the
 * task's stage and box, every output the task must write named; a reuse:
 * the same task key). Until then the message waits in `held` under its
 * own position, and whichever message completes the picture (the
 * manifest, the task's release, the request's plan) settles it: applied,
 * or a `rejected` row at the claim's position. The outcome is a function
 * of the messages, not of the order the partitions are read in.
 */

typedef struct lineage_row {
    int found, verified;
    char key[CNX_DIGEST_LEN + 8], request[129], error[512];
} lineage_row;

/* The lineage row of an envelope digest (the verified one if several). */
static int lineage_find(ctl *c, const char *manifest, lineage_row *l)
{
    sqlite3_stmt *st = ctl_stmt(c, "SELECT verified, task_key, request, "
                                   "error FROM lineage INDEXED BY "
                                   "lineage_by_digest WHERE envelope_digest "
                                   "= ? ORDER BY verified DESC, partition, "
                                   "offset LIMIT 1");
    memset(l, 0, sizeof(*l));
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, manifest);
    if (sqlite3_step(st) != SQLITE_ROW)
        return 0;
    l->found = 1;
    l->verified = sqlite3_column_int(st, 0);
    col_text(st, 1, l->key, sizeof(l->key));
    col_text(st, 2, l->request, sizeof(l->request));
    col_text(st, 3, l->error, sizeof(l->error));
    return 0;
}

/* The statement of a verified envelope in the ledger (its signature was
 * checked when it was applied; only its payload is read again). */
static int lineage_statement(ctl *c, const char *manifest, json_t **stmt)
{
    sqlite3_stmt *st;
    json_t *env = NULL;
    uint8_t *payload = NULL;
    size_t plen = 0;
    const char *text, *b64;
    int rc;

    *stmt = NULL;
    st = ctl_stmt(c, "SELECT envelope FROM lineage INDEXED BY "
                     "lineage_by_digest WHERE envelope_digest = ? AND "
                     "verified = 1 AND archive IS NULL LIMIT 1");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, manifest);
    if (sqlite3_step(st) != SQLITE_ROW)
        return cnx_error_set(CNX_ENOTFOUND, 0, "no verified envelope %s",
                             manifest);
    text = (const char *)sqlite3_column_text(st, 0);
    rc = cnx__json_parse(&env, text, strlen(text), CNX_ECORRUPT, "envelope");
    b64 = rc == 0 ? jstr(env, "payload") : NULL;
    if (rc == 0 && b64 == NULL)
        rc = cnx_error_set(CNX_ECORRUPT, 0, "envelope: no payload");
    if (rc == 0)
        rc = cnx_base64_decode(b64, strlen(b64), &payload, &plen);
    if (rc == 0)
        rc = cnx__json_parse(stmt, (const char *)payload, plen, CNX_ECORRUPT,
                             "statement");
    free(payload);
    json_decref(env);
    return rc;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* What a success is checked against, from a verified statement (pure, so
 * ctl_verify computes it on the checking thread): the stage and box of
 * its task document ("?" where absent or malformed) and its subjects'
 * names, sorted, one per line (*subjects: malloc'd; NULL when out of
 * memory). */
static void statement_facts(const json_t *stmt, char stage[40], char box[128],
                            char **subjects)
{
    const json_t *task = json_object_get(
        json_object_get(json_object_get(json_object_get(stmt, "predicate"),
                                        "buildDefinition"),
                        "externalParameters"),
        "task");
    const json_t *roi = json_object_get(task, "roi");
    const json_t *list = json_object_get(stmt, "subject"), *sub;
    const char **names = calloc(json_array_size(list) + 1, sizeof(*names));
    size_t n = 0, len = 1, i;
    cnx_box b;
    char *out;

    snprintf(stage, 40, "%s", jstr(task, "stage") ? jstr(task, "stage") : "?");
    snprintf(box, 128, "?");
    for (i = 0; i < 3; i++) {
        const json_t *lo = json_array_get(json_object_get(roi, "min"), i);
        const json_t *hi = json_array_get(json_object_get(roi, "max"), i);
        if (!json_is_integer(lo) || !json_is_integer(hi))
            break;
        b.min[i] = (int64_t)json_integer_value(lo);
        b.max[i] = (int64_t)json_integer_value(hi);
    }
    if (i == 3 && cnx_box_format(&b, box, 128) != 0)
        snprintf(box, 128, "?");
    *subjects = NULL;
    if (names == NULL)
        return;
    json_array_foreach(list, i, sub) {
        const char *name = jstr(sub, "name");
        if (name != NULL && strchr(name, '\n') == NULL) {
            names[n++] = name;
            len += strlen(name) + 1;
        }
    }
    qsort(names, n, sizeof(*names), cmp_name);
    out = malloc(len);
    if (out != NULL) {
        char *p = out;
        for (i = 0; i < n; i++) {
            size_t k = strlen(names[i]);
            memcpy(p, names[i], k);
            p += k;
            *p++ = '\n';
        }
        *p = '\0';
    }
    free(names);
    *subjects = out;
}

/* Record the facts of a verified manifest (ctl_verify computed them). */
static int store_facts(ctl *c, const char *manifest, const ctl_verdict *v)
{
    sqlite3_stmt *st;
    if (v->subjects == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    st = ctl_stmt(c, "INSERT OR IGNORE INTO manifest_facts(manifest, stage, "
                     "box, subjects) VALUES(?, ?, ?, ?)");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, manifest);
    ctl_bind_text(st, 2, v->task_stage);
    ctl_bind_text(st, 3, v->task_box);
    ctl_bind_text(st, 4, v->subjects);
    return ctl_done(c, st);
}

/* The facts of a verified manifest: from manifest_facts, or, for one
 * applied before that table existed, from its statement. */
static int manifest_facts(ctl *c, const char *manifest, char stage[40],
                          char box[128], char **subjects)
{
    sqlite3_stmt *st = ctl_stmt(c, "SELECT stage, box, subjects FROM "
                                   "manifest_facts WHERE manifest = ?");
    json_t *stmt = NULL;
    int rc;

    *subjects = NULL;
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, manifest);
    if (sqlite3_step(st) == SQLITE_ROW) {
        col_text(st, 0, stage, 40);
        col_text(st, 1, box, 128);
        *subjects = strdup((const char *)sqlite3_column_text(st, 2));
    } else {
        rc = lineage_statement(c, manifest, &stmt);
        if (rc != 0)
            return rc;
        statement_facts(stmt, stage, box, subjects);
        json_decref(stmt);
    }
    return *subjects ? 0 : cnx_error_set(CNX_ENOMEM, 0, "out of memory");
}

/* A manifest's facts against task idx of request, run by worker over
 * box: the stage and box of its task document, and a subject for every
 * output the plan says the task writes. Fills why and returns CLAIM_BAD,
 * or CLAIM_OK; < 0 on ledger errors. */
static int check_facts(ctl *c, const char *req, int64_t idx, const char *worker,
                       const cnx_box *box, const char *manifest,
                       const char *stage, const char *sbox, char *subjects,
                       char *why, size_t n)
{
    char tbox[128] = "";
    char **urls = NULL;
    const char **names = NULL;
    size_t nurls = 0, nnames = 0, missing = 0, first = 0, i;
    ctl_plan *cp;
    char *p;
    int rc, verdict = CLAIM_BAD;

    cnx_box_format(box, tbox, sizeof(tbox));
    if (strcmp(stage, worker) != 0 || strcmp(sbox, tbox) != 0) {
        snprintf(why, n,
                 "succeeded: manifest %s is of stage %s box %s; this task "
                 "is stage %s box %s",
                 manifest, stage, sbox, worker, tbox);
        return CLAIM_BAD;
    }
    cp = ctl_plan_get(c, req); /* planned: its tasks are in the ledger */
    if (cp == NULL)
        return cnx_error_last()->code == CNX_ENOMEM ? CNX_ENOMEM : CNX_EIO;
    rc = cnx_plan_task_outputs(cp->plan, (size_t)idx, &urls, &nurls);
    if (rc != 0) {
        snprintf(why, n, "succeeded: %s", cnx_error_last()->message);
        return rc == CNX_ENOMEM ? CNX_ENOMEM : CLAIM_BAD;
    }
    /* subjects: sorted names, one per line, split in place */
    for (i = 0, p = subjects; *p != '\0'; p++)
        i += *p == '\n';
    names = calloc(i + 1, sizeof(*names));
    if (names == NULL) {
        verdict = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        goto done;
    }
    for (p = subjects; *p != '\0';) {
        char *end = strchr(p, '\n');
        assert(end != NULL);
        *end = '\0';
        names[nnames++] = p;
        p = end + 1;
    }
    for (i = 0; i < nurls; i++) {
        const char *u = urls[i];
        if (bsearch(&u, names, nnames, sizeof(*names), cmp_name) == NULL &&
            missing++ == 0)
            first = i;
    }
    if (missing > 0) {
        snprintf(why, n,
                 "succeeded: manifest %s does not name %zu of the %zu "
                 "outputs task %lld (%s box %s) must write, such as %.512s",
                 manifest, missing, nurls, (long long)idx, worker, tbox,
                 urls[first]);
        goto done;
    }
    verdict = CLAIM_OK;
done:
    for (i = 0; i < nurls; i++)
        free(urls[i]);
    free(urls);
    free(names);
    return verdict;
}

/* Check a `succeeded` event's manifest against its task (see above). */
static int check_succeeded(ctl *c, const char *req, const char *key,
                           const char *manifest, int *verdict, char *why,
                           size_t n)
{
    lineage_row l;
    char worker[40], stage[40], sbox[128], *subjects = NULL;
    sqlite3_stmt *st;
    cnx_box box;
    int64_t idx;
    int rc;

    *verdict = CLAIM_BAD;
    if (!is_digest(manifest)) {
        snprintf(why, n,
                 "succeeded: manifest: required, the sha256:<hex> "
                 "of its envelope on cnx.lineage");
        return 0;
    }
    rc = lineage_find(c, manifest, &l);
    if (rc != 0)
        return rc;
    if (!l.found) {
        *verdict = CLAIM_WAIT;
        return 0;
    }
    if (!l.verified) {
        snprintf(why, n, "succeeded: manifest %s was not verified: %.256s",
                 manifest, l.error);
        return 0;
    }
    if (strcmp(l.key, key) != 0 || strcmp(l.request, req) != 0) {
        snprintf(why, n,
                 "succeeded: manifest %s is of task %s in request "
                 "%s, not of this task (%s in request %s)",
                 manifest, l.key, l.request, key, req);
        return 0;
    }
    /* The task must be planned and released to be checked against. */
    idx = task_by_key(c, req, key);
    if (idx < 0) {
        *verdict = CLAIM_WAIT;
        return 0;
    }
    st = ctl_stmt(c, "SELECT s.worker, t.x0, t.y0, t.z0, t.x1, t.y1, t.z1 "
                     "FROM tasks t JOIN stages s ON s.request = t.request "
                     "AND s.stage = t.stage WHERE t.request = ? AND t.idx = "
                     "?");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, req);
    sqlite3_bind_int64(st, 2, idx);
    if (sqlite3_step(st) != SQLITE_ROW) {
        *verdict = CLAIM_WAIT;
        return 0;
    }
    col_text(st, 0, worker, sizeof(worker));
    box =
        cnx_box_make(sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
                     sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4),
                     sqlite3_column_int64(st, 5), sqlite3_column_int64(st, 6));
    rc = manifest_facts(c, manifest, stage, sbox, &subjects);
    if (rc == CNX_EIO || rc == CNX_ENOMEM)
        return rc;
    if (rc != 0) {
        snprintf(why, n, "succeeded: manifest %s: %s", manifest,
                 cnx_error_last()->message);
        return 0;
    }
    rc = check_facts(c, req, idx, worker, &box, manifest, stage, sbox, subjects,
                     why, n);
    free(subjects);
    if (rc < 0)
        return rc;
    *verdict = rc;
    return 0;
}

/* Check a `reused` decision's manifest: verified, of this task key. */
static int check_reused(ctl *c, const char *key, const char *manifest,
                        int *verdict, char *why, size_t n)
{
    lineage_row l;
    int rc;

    *verdict = CLAIM_BAD;
    if (!is_digest(manifest)) {
        snprintf(why, n,
                 "control: reused: manifest: required, the verified "
                 "manifest of this task key that it reuses");
        return 0;
    }
    rc = lineage_find(c, manifest, &l);
    if (rc != 0)
        return rc;
    if (!l.found)
        *verdict = CLAIM_WAIT;
    else if (!l.verified)
        snprintf(why, n,
                 "control: reused: manifest %s was not verified: %.256s",
                 manifest, l.error);
    else if (strcmp(l.key, key) != 0)
        snprintf(why, n,
                 "control: reused: manifest %s is of task %s, not of "
                 "this task (%s)",
                 manifest, l.key, key);
    else
        *verdict = CLAIM_OK;
    return 0;
}

/* Keep a claim that cannot be checked yet. The controller's own decisions
 * (no position) are not kept: they come back from the log. */
static int hold(ctl *c, const cnx_message *msg, const char *request,
                const char *key, const char *manifest)
{
    sqlite3_stmt *st;
    assert(is_digest(manifest)); /* checked before a claim may wait */
    if (msg->partition < 0)
        return 0;
    c->held_again = 1;
    st = ctl_stmt(c, "INSERT OR IGNORE INTO held(topic, partition, offset, "
                     "request, task_key, manifest, message) VALUES(?, ?, ?, "
                     "?, ?, ?, ?)");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, msg->topic);
    sqlite3_bind_int(st, 2, msg->partition);
    sqlite3_bind_int64(st, 3, msg->offset);
    ctl_bind_text(st, 4, request);
    ctl_bind_text(st, 5, key);
    ctl_bind_text(st, 6, manifest);
    sqlite3_bind_text(st, 7, msg->value, (int)strnlen(msg->value, msg->len),
                      SQLITE_TRANSIENT);
    return ctl_done(c, st);
}

typedef struct held_msg {
    char *topic, *text;
    int32_t partition;
    int64_t offset;
} held_msg;

/* Apply again the held claims a statement (one of the three below)
 * selects, in log order; each that is now applied or rejected leaves
 * `held`, one that still cannot be checked stays. */
static int settle(ctl *c, sqlite3_stmt *st)
{
    held_msg *h = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;

    if (st == NULL)
        return CNX_EIO;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n == cap) {
            size_t grown_cap = cap ? 2 * cap : 8;
            held_msg *g = realloc(h, grown_cap * sizeof(*g));
            if (g == NULL) {
                rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
                break;
            }
            h = g;
            cap = grown_cap;
        }
        h[n].topic = strdup((const char *)sqlite3_column_text(st, 0));
        h[n].partition = sqlite3_column_int(st, 1);
        h[n].offset = sqlite3_column_int64(st, 2);
        h[n].text = strdup((const char *)sqlite3_column_text(st, 3));
        n++;
        if (h[n - 1].topic == NULL || h[n - 1].text == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
            break;
        }
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        cnx_message m;
        sqlite3_stmt *del;
        memset(&m, 0, sizeof(m));
        m.topic = h[i].topic;
        m.partition = h[i].partition;
        m.offset = h[i].offset;
        m.value = h[i].text;
        m.len = strlen(h[i].text);
        c->held_again = 0;
        c->authentic = 1; /* authenticated when it was held */
        rc = ctl_apply_verified(c, &m, NULL);
        c->authentic = 0;
        if (rc != 0 || c->held_again)
            continue;
        del = ctl_stmt(c, "DELETE FROM held WHERE topic = ? AND partition = "
                          "? AND offset = ?");
        if (del == NULL) {
            rc = CNX_EIO;
            break;
        }
        ctl_bind_text(del, 1, h[i].topic);
        sqlite3_bind_int(del, 2, h[i].partition);
        sqlite3_bind_int64(del, 3, h[i].offset);
        rc = ctl_done(c, del);
    }
    for (size_t i = 0; i < n; i++) {
        free(h[i].topic);
        free(h[i].text);
    }
    free(h);
    return rc;
}

static int settle_held_by_manifest(ctl *c, const char *manifest)
{
    sqlite3_stmt *st = ctl_stmt(c, "SELECT topic, partition, offset, message "
                                   "FROM held INDEXED BY held_by_manifest "
                                   "WHERE manifest = ? ORDER BY topic, "
                                   "partition, offset");
    if (st != NULL)
        ctl_bind_text(st, 1, manifest);
    return settle(c, st);
}

static int settle_held_by_task(ctl *c, const char *request, const char *key)
{
    sqlite3_stmt *st = ctl_stmt(c, "SELECT topic, partition, offset, message "
                                   "FROM held INDEXED BY held_by_task WHERE "
                                   "request = ? AND task_key = ? ORDER BY "
                                   "topic, partition, offset");
    if (st != NULL) {
        ctl_bind_text(st, 1, request);
        ctl_bind_text(st, 2, key);
    }
    return settle(c, st);
}

static int settle_held_by_request(ctl *c, const char *request)
{
    sqlite3_stmt *st = ctl_stmt(c, "SELECT topic, partition, offset, message "
                                   "FROM held INDEXED BY held_by_task WHERE "
                                   "request = ? ORDER BY topic, partition, "
                                   "offset");
    if (st != NULL)
        ctl_bind_text(st, 1, request);
    return settle(c, st);
}

/* ---- dispatch -------------------------------------------------------------- */

static int reject(ctl *c, const cnx_message *msg, const char *why)
{
    sqlite3_stmt *st;
    CNX_WARN("controller", "rejected %s[%d]@%lld: %s", msg->topic,
             (int)msg->partition, (long long)msg->offset, why);
    if (msg->partition < 0)
        return 0;
    st = ctl_stmt(c, "INSERT OR IGNORE INTO rejected(topic, partition, "
                     "offset, error) VALUES(?, ?, ?, ?)");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, msg->topic);
    sqlite3_bind_int(st, 2, msg->partition);
    sqlite3_bind_int64(st, 3, msg->offset);
    ctl_bind_text(st, 4, why);
    return ctl_done(c, st);
}

int ctl_apply(ctl *c, const cnx_message *msg)
{
    return ctl_apply_verified(c, msg, NULL);
}

/* Whether msg bears the signature its kind needs: decisions and request
 * states the controller's own, events a trusted worker's, requests none
 * (anyone allowed to write cnx.requests may ask; docs/security.md). */
static int authenticate(ctl *c, const cnx_message *msg, cnx_msg_kind kind)
{
    int who = cnx_msg_kind_signer(kind), rc;
    char why[sizeof(cnx_error_last()->message)];
    if (who < 0)
        return 0;
    rc = who == 1 ? cnx_msg_verify(msg, &c->self, 1, NULL)
                  : cnx_msg_verify(msg, c->trusted, c->ntrusted, NULL);
    if (rc == 0 || rc == CNX_ENOMEM)
        return rc;
    snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
    return cnx_error_set(CNX_EDIGEST, 0, "%s: %s", who == 1 ?
                         "not the controller's" : "not a trusted worker's",
                         why);
}

/*
 * A signed message applies once. The same body again on its topic, at
 * another position, is a replay, refused with the first one's position.
 * The controller's own decisions are applied early, before they are read
 * back (no position), and then read back once: that reading takes the
 * position. A held claim applied again keeps its position.
 */
static int check_replay(ctl *c, const cnx_message *msg)
{
    char digest[CNX_DIGEST_LEN];
    sqlite3_stmt *st;

    cnx_digest(msg->value, msg->len, digest);
    st = ctl_stmt(c, "SELECT partition, offset FROM seen WHERE digest = ? "
                     "AND topic = ?");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, digest);
    ctl_bind_text(st, 2, msg->topic);
    if (sqlite3_step(st) == SQLITE_ROW) {
        int known = sqlite3_column_type(st, 0) != SQLITE_NULL;
        int32_t p = sqlite3_column_int(st, 0);
        int64_t o = sqlite3_column_int64(st, 1);
        sqlite3_reset(st);
        if (msg->partition < 0 || (known && p == msg->partition &&
                                   o == msg->offset))
            return 0;
        if (known)
            return cnx_error_set(CNX_EINVAL, 0, "replay: the same signed "
                                 "message was applied at %s[%d]@%lld",
                                 msg->topic, (int)p, (long long)o);
        st = ctl_stmt(c, "UPDATE seen SET partition = ?, offset = ? WHERE "
                         "digest = ? AND topic = ?");
    } else {
        sqlite3_reset(st);
        st = ctl_stmt(c, "INSERT INTO seen(partition, offset, digest, topic) "
                         "VALUES(?, ?, ?, ?)");
    }
    if (st == NULL)
        return CNX_EIO;
    if (msg->partition >= 0) {
        sqlite3_bind_int(st, 1, msg->partition);
        sqlite3_bind_int64(st, 2, msg->offset);
    }
    ctl_bind_text(st, 3, digest);
    ctl_bind_text(st, 4, msg->topic);
    return ctl_done(c, st);
}

int ctl_apply_verified(ctl *c, const cnx_message *msg, ctl_verdict *verdict)
{
    json_t *m = NULL;
    cnx_msg_kind kind = CNX_MSG_REQUEST;
    const char *schema;
    char *text = NULL;
    int rc;

    if (msg->value == NULL)
        return reject(c, msg, "message over the size limit");
    if (strcmp(msg->topic, CNX_TOPIC_LINEAGE) == 0) {
        rc = apply_lineage(c, msg, verdict);
        return rc == CNX_EIO || rc == CNX_ENOMEM
                   ? rc
                   : (rc != 0 ? reject(c, msg, cnx_error_last()->message) : 0);
    }
    cnx_error_clear();
    rc = cnx__json_parse(&m, msg->value, msg->len, CNX_ESCHEMA, msg->topic);
    if (rc != 0 || !json_is_object(m)) {
        json_decref(m);
        return reject(c, msg, rc ? cnx_error_last()->message
                                 : "not a JSON object");
    }
    schema = jstr(m, "schema");
    if (schema == NULL)
        rc = bad(msg->topic, "schema: missing");
    else
        rc = cnx_msg_kind_of(msg->topic, schema, &kind);
    if (rc == 0 && !c->authentic)
        rc = authenticate(c, msg, kind);
    if (rc == 0 && cnx_msg_kind_signer(kind) >= 0)
        rc = check_replay(c, msg);
    if (rc != 0)
        ;
    else if (kind == CNX_MSG_REQUEST)
        rc = apply_request(c, m);
    else if (kind == CNX_MSG_REQUEST_STATE) {
        text = cnx__json_canonical(m);
        rc = text ? apply_state(c, msg, m, text)
                  : cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    } else if (kind == CNX_MSG_EVENT)
        rc = apply_event(c, msg, m);
    else if (kind == CNX_MSG_CONTROL)
        rc = apply_control(c, msg);
    else
        rc = cnx_error_set(CNX_ESCHEMA, 0, "%s: the controller does not "
                           "read %s", msg->topic, schema);
    json_decref(m);
    free(text);
    if (rc == CNX_EIO || rc == CNX_ENOMEM)
        return rc;
    return rc != 0 ? reject(c, msg, cnx_error_last()->message) : 0;
}

/* ---- derived columns ----------------------------------------------------- */

static int count_off_dependents(ctl *c, const char *request, int64_t idx)
{
    ctl_plan *cp = ctl_plan_get(c, request);
    size_t *ids = NULL, n = 0;
    int rc;
    if (cp == NULL)
        return CNX_EIO;
    rc = cnx_plan_dependents(cp->plan, (size_t)idx, &ids, &n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sqlite3_stmt *st = ctl_stmt(c, "UPDATE tasks SET deps_left = "
                                       "deps_left - 1 WHERE request = ? AND "
                                       "idx = ?");
        if (st == NULL) {
            rc = CNX_EIO;
            break;
        }
        ctl_bind_text(st, 1, request);
        sqlite3_bind_int64(st, 2, (int64_t)ids[i]);
        rc = ctl_done(c, st);
    }
    free(ids);
    return rc;
}

int ctl_touch_task(ctl *c, const char *request, int64_t idx)
{
    if (c->ndirty == c->cap_dirty) {
        size_t cap = c->cap_dirty ? 2 * c->cap_dirty : 256;
        ctl_task_ref *g = realloc(c->dirty_tasks, cap * sizeof(*g));
        if (g == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        c->dirty_tasks = g;
        c->cap_dirty = cap;
    }
    snprintf(c->dirty_tasks[c->ndirty].request,
             sizeof(c->dirty_tasks[0].request), "%s", request);
    c->dirty_tasks[c->ndirty].idx = idx;
    c->ndirty++;
    return 0;
}

static int cmp_task_ref(const void *a, const void *b)
{
    const ctl_task_ref *x = a, *y = b;
    int k = strcmp(x->request, y->request);
    return k != 0 ? k : (x->idx > y->idx) - (x->idx < y->idx);
}

int ctl_flush_touched(ctl *c)
{
    int rc = 0;
    if (c->ndirty > 1)
        qsort(c->dirty_tasks, c->ndirty, sizeof(*c->dirty_tasks),
              cmp_task_ref);
    for (size_t i = 0; i < c->ndirty && rc == 0; i++)
        if (i == 0 || cmp_task_ref(&c->dirty_tasks[i],
                                   &c->dirty_tasks[i - 1]) != 0)
            rc = ctl_refresh_task(c, c->dirty_tasks[i].request,
                                  c->dirty_tasks[i].idx);
    c->ndirty = 0;
    return rc;
}

int ctl_commit(ctl *c)
{
    int rc = ctl_flush_touched(c);
    if (rc == 0)
        rc = ctl_exec(c, "COMMIT");
    if (rc != 0)
        ctl_rollback(c);
    return rc;
}

void ctl_rollback(ctl *c)
{
    c->ndirty = 0;
    ctl_exec(c, "ROLLBACK");
}

int ctl_refresh_task(ctl *c, const char *request, int64_t idx)
{
    char old[16], key[CNX_DIGEST_LEN + 8] = "", lane[16] = "";
    char manifest[CNX_DIGEST_LEN + 8] = "", done_at[40] = "";
    char last_seen[40] = "", error[1024] = "", dead_reason[1024] = "";
    const char *state;
    int64_t budget = 0, releases = 0, last_attempt = 0, reused = 0;
    int dead = 0;
    sqlite3_stmt *st;

    st = ctl_stmt(c, "SELECT t.state, s.retry_budget FROM tasks t JOIN "
                     "stages s ON s.request = t.request AND s.stage = "
                     "t.stage WHERE t.request = ? AND t.idx = ?");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, request);
    sqlite3_bind_int64(st, 2, idx);
    if (sqlite3_step(st) != SQLITE_ROW)
        return 0; /* not planned yet: plan_rows refreshes it */
    col_text(st, 0, old, sizeof(old));
    budget = sqlite3_column_int64(st, 1);

    st = ctl_stmt(c, "SELECT task_key, "
                     "sum(type = 'released'), max(attempt), "
                     "sum(type = 'reused'), sum(type = 'dead_lettered'), "
                     "max(time) FROM releases WHERE request = ? AND idx = ?");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, request);
    sqlite3_bind_int64(st, 2, idx);
    if (sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) != SQLITE_NULL) {
        col_text(st, 0, key, sizeof(key));
        releases = sqlite3_column_int64(st, 1);
        last_attempt = sqlite3_column_int64(st, 2);
        reused = sqlite3_column_int64(st, 3);
        dead = sqlite3_column_int64(st, 4) > 0;
        col_text(st, 5, last_seen, sizeof(last_seen));
    }
    if (key[0] == '\0')
        return 0; /* never released */
    st = ctl_stmt(c, "SELECT lane, reason FROM releases WHERE request = ? "
                     "AND idx = ? ORDER BY attempt DESC, type LIMIT 1");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, request);
    sqlite3_bind_int64(st, 2, idx);
    if (sqlite3_step(st) == SQLITE_ROW)
        col_text(st, 0, lane, sizeof(lane));
    if (dead) {
        st = ctl_stmt(c, "SELECT reason FROM releases WHERE request = ? AND "
                         "idx = ? AND type = 'dead_lettered' ORDER BY attempt "
                         "LIMIT 1");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, request);
        sqlite3_bind_int64(st, 2, idx);
        if (sqlite3_step(st) == SQLITE_ROW)
            col_text(st, 0, dead_reason, sizeof(dead_reason));
    }
    /* Attempts: the last one, the last activity, the verified success. */
    st = ctl_stmt(c, "SELECT max(attempt), max(coalesce(finished, started)) "
                     "FROM attempts WHERE task_key = ? AND request = ?");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, key);
    ctl_bind_text(st, 2, request);
    if (sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) != SQLITE_NULL) {
        char seen[40];
        if (sqlite3_column_int64(st, 0) > last_attempt)
            last_attempt = sqlite3_column_int64(st, 0);
        col_text(st, 1, seen, sizeof(seen));
        if (strcmp(seen, last_seen) > 0)
            snprintf(last_seen, sizeof(last_seen), "%s", seen);
    }
    /* A success counts with a verified manifest of this task (the fold
     * applied it only after checking that; the join says it again). */
    st = ctl_stmt(c, "SELECT a.manifest, a.finished FROM attempts a JOIN "
                     "lineage l ON l.envelope_digest = a.manifest AND "
                     "l.verified = 1 AND l.task_key = a.task_key AND "
                     "l.request = a.request WHERE a.task_key = ? AND "
                     "a.request = ? AND a.state = 'succeeded' ORDER BY "
                     "a.finished, a.manifest LIMIT 1");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, key);
    ctl_bind_text(st, 2, request);
    if (sqlite3_step(st) == SQLITE_ROW) {
        col_text(st, 0, manifest, sizeof(manifest));
        col_text(st, 1, done_at, sizeof(done_at));
    }
    st = ctl_stmt(c, "SELECT error_code || ': ' || coalesce(error, ''), "
                     "retriable = 0 OR attempt >= 1 + ? FROM attempts WHERE "
                     "task_key = ? AND request = ? AND state = 'failed' "
                     "ORDER BY attempt DESC, worker LIMIT 1");
    if (st == NULL)
        return CNX_EIO;
    sqlite3_bind_int64(st, 1, budget);
    ctl_bind_text(st, 2, key);
    ctl_bind_text(st, 3, request);
    if (sqlite3_step(st) == SQLITE_ROW) {
        col_text(st, 0, error, sizeof(error));
        if (sqlite3_column_int(st, 1))
            dead = 1;
    }
    if (dead_reason[0] != '\0')
        snprintf(error, sizeof(error), "%s", dead_reason);
    /* A reuse counts with the verified manifest of this key it names. */
    if (reused > 0) {
        reused = 0;
        st = ctl_stmt(c, "SELECT r.manifest FROM releases r JOIN lineage l "
                         "ON l.envelope_digest = r.manifest AND l.verified = "
                         "1 AND l.task_key = r.task_key WHERE r.request = ? "
                         "AND r.idx = ? AND r.type = 'reused' ORDER BY "
                         "r.attempt, r.manifest LIMIT 1");
        if (st == NULL)
            return CNX_EIO;
        ctl_bind_text(st, 1, request);
        sqlite3_bind_int64(st, 2, idx);
        if (sqlite3_step(st) == SQLITE_ROW) {
            reused = 1;
            if (manifest[0] == '\0') { /* done by the reuse alone */
                col_text(st, 0, manifest, sizeof(manifest));
                snprintf(done_at, sizeof(done_at), "%s", last_seen);
            }
        }
    }

    if (manifest[0] != '\0')
        state = "done";
    else if (dead)
        state = "dead";
    else if (releases > 0)
        state = "released";
    else
        state = "planned";
    st = ctl_stmt(c, "UPDATE tasks SET state = ?, task_key = ?, releases = ?, "
                     "last_attempt = ?, lane = ?, last_seen = ?, done_at = ?, "
                     "manifest = ?, reused = ?, error = ? WHERE request = ? "
                     "AND idx = ?");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, state);
    ctl_bind_text(st, 2, key);
    sqlite3_bind_int64(st, 3, releases);
    sqlite3_bind_int64(st, 4, last_attempt);
    ctl_bind_text(st, 5, lane[0] ? lane : NULL);
    ctl_bind_text(st, 6, last_seen[0] ? last_seen : NULL);
    ctl_bind_text(st, 7, strcmp(state, "done") == 0 ? done_at : NULL);
    ctl_bind_text(st, 8, manifest[0] ? manifest : NULL);
    sqlite3_bind_int(st, 9, reused > 0);
    ctl_bind_text(st, 10, strcmp(state, "done") != 0 && error[0] ? error
                                                                 : NULL);
    ctl_bind_text(st, 11, request);
    sqlite3_bind_int64(st, 12, idx);
    if (ctl_done(c, st) != 0)
        return CNX_EIO;
    if (strcmp(old, "done") != 0 && strcmp(state, "done") == 0)
        return count_off_dependents(c, request, idx);
    return 0;
}
