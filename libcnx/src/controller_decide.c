/*
 * controller_decide.c - the controller's decisions, made only once the
 * ledger has caught up with the log: accept or refuse requests, release
 * ready tasks (with their input digests), re-release lost ones, give up on
 * tasks past their budget, keep each request's ETA and SLO, and finish
 * requests with an honest summary. Each decision is published and
 * acknowledged, then applied locally through ctl_apply, exactly as it will
 * be when it comes back from the log.
 */
#include "controller_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/message.h"
#include "cnx/store.h"
#include "cnx/task.h"
#include "cnx/url.h"
#include "json_int.h"
#include "ledger_sql_int.h"

#define RELEASES_PER_ROUND 256

static const char *col(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : "";
}

static double parse_time(const char *text)
{
    int64_t t;
    return text && cnx_rfc3339_parse(text, &t) == 0 ? (double)t : NAN;
}

/* Queue a published decision (topic, canonical text) for commit_pending. */
static int queue_decision(ctl *c, const char *topic, const char *text)
{
    if (c->npending == c->cap_pending) {
        size_t cap = c->cap_pending ? 2 * c->cap_pending : 64;
        ctl_pending *g = realloc(c->pending, cap * sizeof(*g));
        if (g == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        c->pending = g;
        c->cap_pending = cap;
    }
    c->pending[c->npending].topic = topic;
    c->pending[c->npending].text = strdup(text);
    if (c->pending[c->npending].text == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    c->npending++;
    return 0;
}

/* ---- publishing (the controller's key signs every decision) ------------- */

int ctl_publish(ctl *c, const char *topic, const char *key, const char *json,
                const cnx_kafka_header *headers, size_t nheaders)
{
    return cnx_msg_send(c->producer, c->self, topic, key, json, strlen(json),
                        headers, nheaders);
}

int ctl_flush(ctl *c)
{
    for (int i = 0; i < 3; i++) {
        if (cnx_producer_flush(c->producer, 30000) == 0)
            return 0;
        if (!cnx_error_last()->retriable)
            return CNX_EIO; /* broker gone past --broker-timeout, or a
                             * fatal producer: say that */
        CNX_WARN("controller", "waiting for acknowledgements: %s",
                 cnx_error_last()->message);
    }
    return cnx_error_set(CNX_EIO, 0, "no acknowledgement from the broker");
}

/* Wait for the broker to acknowledge every decision published so far,
 * then apply the queued ones, in order, in one transaction, through the
 * same code as consumed messages. */
static int commit_pending(ctl *c)
{
    int rc = 0;
    if (c->npending == 0)
        return 0;
    rc = ctl_flush(c);
    if (rc == 0)
        rc = ctl_exec(c, "BEGIN IMMEDIATE");
    for (size_t i = 0; rc == 0 && i < c->npending; i++) {
        cnx_message m;
        memset(&m, 0, sizeof(m));
        m.topic = c->pending[i].topic;
        m.partition = -1;
        m.offset = -1;
        m.value = c->pending[i].text;
        m.len = strlen(c->pending[i].text);
        c->authentic = 1; /* our own, as published */
        rc = ctl_apply(c, &m);
        c->authentic = 0;
        if (rc != 0)
            ctl_rollback(c);
    }
    if (rc == 0)
        rc = ctl_commit(c);
    for (size_t i = 0; i < c->npending; i++)
        free(c->pending[i].text);
    c->npending = 0;
    return rc;
}

/* Publish doc (consumed) to topic, wait for the acknowledgement, then
 * apply it (with any decision still queued before it). */
static int decide_text(ctl *c, const char *topic, const char *key,
                       char *text);

static int decide(ctl *c, const char *topic, const char *key, json_t *doc)
{
    char *text = cnx__json_canonical(doc);
    json_decref(doc);
    return decide_text(c, topic, key, text);
}

/* The same for a decision already in text (owned, freed; NULL: out of
 * memory). */
static int decide_text(ctl *c, const char *topic, const char *key,
                       char *text)
{
    int rc;
    if (text == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    rc = ctl_publish(c, topic, key, text, NULL, 0);
    if (rc == 0)
        rc = queue_decision(c, topic, text);
    free(text);
    return rc == 0 ? commit_pending(c) : rc;
}

static json_t *state_doc(const char *request, const char *type)
{
    char now[32];
    ctl_now_text(now);
    return json_pack("{s:s,s:s,s:s,s:s}", "schema", CNX_REQUEST_STATE_SCHEMA,
                     "request", request, "type", type, "time", now);
}

static json_t *box_json(const cnx_box *b)
{
    return json_pack("{s:[III],s:[III]}", "min", (json_int_t)b->min[0],
                     (json_int_t)b->min[1], (json_int_t)b->min[2], "max",
                     (json_int_t)b->max[0], (json_int_t)b->max[1],
                     (json_int_t)b->max[2]);
}

/* ---- accepting a request --------------------------------------------------- */

/* Is (layer, scale) already bound to other work? Fills why. */
static int namespace_conflict(ctl *c, const cnx_plan *p, size_t s, char *why,
                              size_t n)
{
    const cnx_plan_stage *ps = &p->stages[s];
    const cnx_wf_stage *ws = &p->wf->stages[s];
    char ns[CNX_SCALE_KEY_MAX + 40];
    sqlite3_stmt *st = ctl_stmt(c, "SELECT worker, kernel_version, "
                                   "parameters, first_request FROM "
                                   "namespaces WHERE layer = ? AND scale = ?");
    if (st == NULL)
        return -1;
    cnx_plan_namespace(p, s, ns, sizeof(ns));
    ctl_bind_text(st, 1, ps->out_layer);
    ctl_bind_text(st, 2, ns);
    if (sqlite3_step(st) != SQLITE_ROW)
        return 0;
    if (strcmp(col(st, 0), ws->worker) == 0 &&
        sqlite3_column_int64(st, 1) == ws->kernel_version &&
        strcmp(col(st, 2), ws->parameters) == 0)
        return 0;
    snprintf(why, n,
             "stage %s: %.512s namespace %.64s holds the output of %s kernel v%lld "
             "with parameters %.256s (request %s); this stage runs %s kernel "
             "v%lld with parameters %.256s, which gives new task keys and must "
             "write a new version of the namespace",
             ws->name, ps->out_layer, ns, col(st, 0),
             (long long)sqlite3_column_int64(st, 1), col(st, 2), col(st, 3),
             ws->worker, (long long)ws->kernel_version, ws->parameters);
    return 1;
}

static int refuse(ctl *c, const char *request, const char *why)
{
    json_t *doc = state_doc(request, "refused");
    CNX_WARN("controller", "request %s refused: %s", request, why);
    json_object_set_new(doc, "error", json_string(why));
    return decide(c, CNX_TOPIC_REQUESTS, request, doc);
}

/* Can the controller write into dataset, and is it under a root? (The
 * fold already refused non-canonical URLs, ".." and relative paths.)
 * 1 with why filled in if not. */
static int dataset_refused(ctl *c, const char *dataset, char *why, size_t n)
{
    cnx_url *url = malloc(sizeof(*url));
    int refused = 0;
    if (url == NULL) {
        snprintf(why, n, "out of memory");
        return 1;
    }
    if (cnx_url_parse(url, dataset, 0) != 0) {
        snprintf(why, n, "%s", cnx_error_last()->message);
        refused = 1;
    } else if (!cnx_url_writable(url->scheme)) {
        snprintf(why, n,
                 "dataset %.1024s: the controller cannot write "
                 "%s:// stores (it writes the outputs' info into the "
                 "dataset); use file://, s3:// or gs://",
                 dataset, cnx_url_scheme_name(url->scheme));
        refused = 1;
    } else if (c->nroots > 0) {
        size_t i, len;
        for (i = 0; i < c->nroots; i++)
            if (cnx_url_under(c->roots[i], url->canonical, NULL))
                break;
        if (i == c->nroots) {
            snprintf(why, n,
                     "dataset %.1024s is not under a dataset root "
                     "of this controller (--dataset-root:",
                     dataset);
            for (i = 0; i < c->nroots; i++) {
                len = strlen(why);
                snprintf(why + len, n - len, " %.512s", c->roots[i]);
            }
            len = strlen(why);
            snprintf(why + len, n - len, ")");
            refused = 1;
        }
    }
    free(url);
    return refused;
}

static int accept_request(ctl *c, const char *request, const char *wjson,
                          const char *dataset, const char *roi_json,
                          const char *deadline)
{
    cnx_workflow *wf = NULL;
    cnx_plan *plan = NULL;
    cnx_plan_external *ext = NULL;
    size_t next = 0;
    json_t *roi = NULL, *doc = NULL, *stages, *notes, *externals = NULL;
    char *ext_text = NULL, why[2048];
    int64_t lo[3], hi[3];
    double t0 = cnx_now();
    cnx_box box;
    int rc;

    /* Before anything is read or written under it. */
    if (dataset_refused(c, dataset, why, sizeof(why)))
        return refuse(c, request, why);
    rc = cnx_workflow_parse(&wf, wjson, strlen(wjson));
    if (rc == 0)
        rc = cnx__json_parse(&roi, roi_json, strlen(roi_json), CNX_ESCHEMA,
                             "roi");
    if (rc == 0)
        rc = cnx__json_ivec(json_object_get(roi, "min"), 3, -(1LL << 40),
                            1LL << 40, lo, CNX_ESCHEMA, "roi.min");
    if (rc == 0)
        rc = cnx__json_ivec(json_object_get(roi, "max"), 3, -(1LL << 40),
                            1LL << 40, hi, CNX_ESCHEMA, "roi.max");
    if (rc == 0)
        rc = cnx_plan_read_externals(&ext, &next, wf, dataset);
    if (rc == 0) {
        box = cnx_box_make(lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]);
        /* Counted before cut: a request over the cap costs no memory. */
        rc = cnx_plan_new_capped(&plan, wf, dataset, &box, ext, next,
                                 c->o->max_tasks > 0 ? c->o->max_tasks
                                                     : SIZE_MAX);
    }
    if (rc == CNX_ETOOBIG) {
        snprintf(why, sizeof(why), "%s (--max-tasks-per-request)",
                 cnx_error_last()->message);
        rc = refuse(c, request, why);
        goto done;
    }
    if (rc != 0) {
        if (cnx_error_last()->retriable) {
            CNX_WARN("controller", "request %s: %s (will retry)", request,
                     cnx_error_last()->message);
            rc = 0;
        } else {
            rc = refuse(c, request, cnx_error_last()->message);
        }
        goto done;
    }
    for (size_t s = 0; s < plan->nstages; s++) {
        int k = namespace_conflict(c, plan, s, why, sizeof(why));
        if (k < 0) {
            rc = CNX_EIO;
            goto done;
        }
        if (k > 0) {
            rc = refuse(c, request, why);
            goto done;
        }
    }
    rc = cnx_plan_prepare_outputs(plan);
    if (rc != 0) {
        rc = cnx_error_last()->retriable ? 0
                                         : refuse(c, request,
                                                  cnx_error_last()->message);
        goto done;
    }
    rc = cnx_plan_externals_to_json(ext, next, &ext_text);
    if (rc != 0)
        goto done;
    externals = json_loads(ext_text, 0, NULL);
    doc = state_doc(request, "accepted");
    stages = json_array();
    notes = json_array();
    for (size_t s = 0; s < plan->nstages; s++) {
        const cnx_plan_stage *ps = &plan->stages[s];
        const cnx_wf_stage *ws = &wf->stages[s];
        json_array_append_new(
            stages,
            json_pack("{s:s,s:s,s:s,s:I,s:o,s:s,s:{s:s,s:s}}", "stage",
                      ws->name, "worker", ws->worker, "kind",
                      ws->kind == CNX_WF_MAP ? "map" : "reduce", "tasks",
                      (json_int_t)ps->count, "region", box_json(&ps->region),
                      "scale", ps->in_scale.key, "output", "layer",
                      ps->out_layer, "scale", ps->out_scale.key));
    }
    for (size_t i = 0; i < plan->nnotes; i++)
        json_array_append_new(notes, json_string(plan->notes[i]));
    json_object_set_new(doc, "deadline", json_string(deadline));
    json_object_set_new(doc, "tasks", json_integer((json_int_t)plan->ntasks));
    json_object_set_new(doc, "stages", stages);
    json_object_set_new(doc, "notes", notes);
    json_object_set_new(doc, "externals", externals ? externals
                                                    : json_array());
    {
        double t1 = cnx_now();
        rc = decide(c, CNX_TOPIC_REQUESTS, request, doc);
        CNX_INFO("controller", "request %s accepted: %zu task(s) in %zu "
                 "stage(s); planned in %.3f s, in the ledger %.3f s later",
                 request, plan->ntasks, plan->nstages, t1 - t0,
                 cnx_now() - t1);
    }
done:
    free(ext_text);
    free(ext);
    json_decref(roi);
    cnx_plan_free(plan);
    cnx_workflow_free(wf);
    return rc;
}

static int accept_submitted(ctl *c)
{
    sqlite3_stmt *st = ctl_stmt(c, "SELECT id, workflow_json, dataset, roi, "
                                   "deadline FROM requests WHERE state = "
                                   "'submitted' ORDER BY id LIMIT 1");
    char *row[5] = {0};
    int rc = 0;
    if (st == NULL)
        return CNX_EIO;
    if (sqlite3_step(st) != SQLITE_ROW)
        return 0;
    for (int i = 0; i < 5; i++)
        row[i] = strdup(col(st, i));
    if (row[0] && row[1] && row[2] && row[3] && row[4])
        rc = accept_request(c, row[0], row[1], row[2], row[3], row[4]);
    for (int i = 0; i < 5; i++)
        free(row[i]);
    return rc;
}

/* ---- releasing tasks ------------------------------------------------------ */

typedef struct lookup_ctx {
    ctl *c;
    const char *request;
    const cnx_plan *plan;
} lookup_ctx;

static unsigned hash_url(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The digest of an external object, hashed from storage once. */
static int external_digest(ctl *c, const char *layer, const char *object,
                           char digest[CNX_DIGEST_LEN])
{
    size_t n = strlen(layer) + strlen(object) + 2;
    char *url = malloc(n);
    unsigned h;
    cnx_store *store = NULL;
    ctl_digest *d;
    int rc;
    if (url == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    snprintf(url, n, "%s/%s", layer, object);
    h = hash_url(url) % (sizeof(c->digests) / sizeof(c->digests[0]));
    for (d = c->digests[h]; d != NULL; d = d->next)
        if (strcmp(d->url, url) == 0) {
            memcpy(digest, d->digest, CNX_DIGEST_LEN);
            free(url);
            return 0;
        }
    /* A chunk of a sharded input is read from its shard (its bytes there). */
    rc = cnx_store_open(&store, layer);
    if (rc == 0)
        rc = cnx_layer_object_digest(store, object, digest, NULL);
    cnx_store_free(store);
    if (rc != 0) {
        free(url);
        return rc;
    }
    d = malloc(sizeof(*d));
    if (d == NULL) {
        free(url);
        return 0;
    }
    d->url = url;
    memcpy(d->digest, digest, CNX_DIGEST_LEN);
    d->next = c->digests[h];
    c->digests[h] = d;
    return 0;
}

/* Digests for a task message: an object written by a stage of this
 * request comes from the verified manifest of the task that wrote it (the
 * ledger's outputs); any other object from storage. */
static int lookup(void *arg, const char *role, const char *layer,
                  const char *object, char digest[CNX_DIGEST_LEN])
{
    lookup_ctx *lc = arg;
    (void)role;
    for (size_t s = 0; s < lc->plan->nstages; s++) {
        /* Any object of a layer a stage writes (chunks or side objects)
         * is this request's output: workflows never read a layer they
         * write as an external input. */
        if (strcmp(layer, lc->plan->stages[s].out_layer) == 0) {
            size_t n = strlen(layer) + strlen(object) + 2;
            char *url = malloc(n);
            sqlite3_stmt *st;
            int found;
            if (url == NULL)
                return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
            snprintf(url, n, "%s/%s", layer, object);
            /* outputs by object first (CROSS JOIN fixes the order), then
             * the task of this request that wrote it. */
            st = ctl_stmt(lc->c, "SELECT o.digest FROM outputs o INDEXED BY "
                                 "outputs_by_object CROSS JOIN tasks t "
                                 "INDEXED BY tasks_by_key ON t.task_key = "
                                 "o.task_key AND t.request = ? AND t.state "
                                 "= 'done' WHERE o.object = ? ORDER BY "
                                 "o.digest LIMIT 1");
            if (st == NULL) {
                free(url);
                return CNX_EIO;
            }
            ctl_bind_text(st, 1, lc->request);
            ctl_bind_text(st, 2, url);
            found = sqlite3_step(st) == SQLITE_ROW;
            if (found)
                snprintf(digest, CNX_DIGEST_LEN, "%s", col(st, 0));
            free(url);
            if (!found)
                return cnx_error_set(CNX_ENOTFOUND, 0,
                                     "input %s/%s: no verified manifest of "
                                     "this request names it",
                                     layer, object);
            return 0;
        }
    }
    return external_digest(lc->c, layer, object, digest);
}

/* A decision on task idx of request (cnx/message.h owns the format), as
 * canonical JSON; NULL when out of memory. manifest: NULL or reused's. */
static char *control_text(const char *type, const char *request,
                          const char *stage, int64_t idx, const char *key,
                          int64_t attempt, const char *lane,
                          const char *reason, const char *manifest)
{
    cnx_control d;
    char *out = NULL;
    memset(&d, 0, sizeof(d));
    snprintf(d.type, sizeof(d.type), "%s", type);
    snprintf(d.request, sizeof(d.request), "%s", request);
    snprintf(d.stage, sizeof(d.stage), "%s", stage);
    d.index = idx;
    snprintf(d.task_key, sizeof(d.task_key), "%s", key);
    d.attempt = attempt;
    snprintf(d.lane, sizeof(d.lane), "%s", lane);
    ctl_now_text(d.time);
    snprintf(d.reason, sizeof(d.reason), "%s", reason);
    if (manifest != NULL)
        snprintf(d.manifest, sizeof(d.manifest), "%s", manifest);
    return cnx_control_build(&d, &out) == 0 ? out : NULL;
}

/* The task message of task idx of request (*json, and parsed, *task);
 * *ws its stage. */
static int make_task(ctl *c, const char *request, const char *deadline,
                     int urgent, int64_t idx, char **json, cnx_task **task,
                     const cnx_wf_stage **ws)
{
    ctl_plan *cp = ctl_plan_get(c, request);
    lookup_ctx lc;
    int rc;

    *json = NULL;
    *task = NULL;
    if (cp == NULL)
        return CNX_EIO;
    lc.c = c;
    lc.request = request;
    lc.plan = cp->plan;
    *ws = &cp->wf->stages[cp->plan->tasks[idx].stage];
    rc = cnx_plan_task_json(cp->plan, (size_t)idx, request, deadline, urgent,
                            lookup, &lc, json);
    if (rc == 0)
        rc = cnx_task_parse(task, *json, strlen(*json));
    return rc;
}

/* Publish the task message of a release to its worker's topic. */
static int send_task(ctl *c, const char *request, const cnx_wf_stage *ws,
                     int urgent, const cnx_task *task, const char *json,
                     int64_t attempt)
{
    char topic[128], att[24];
    int rc = cnx_topic_tasks(topic, sizeof(topic), ws->worker, urgent);
    cnx_kafka_header h[] = {{"cnx-attempt", att}, {"cnx-request", request}};

    if (rc != 0)
        return rc;
    snprintf(att, sizeof(att), "%lld", (long long)attempt);
    return ctl_publish(c, topic, task->key, json, h, 2);
}

/* Release (or reuse) task idx of request as attempt. */
static int release(ctl *c, const char *request, const char *deadline,
                   int urgent, int reuse, int64_t idx, int64_t attempt,
                   const char *reason)
{
    cnx_task *task = NULL;
    char *json = NULL;
    const cnx_wf_stage *ws = NULL;
    int rc = make_task(c, request, deadline, urgent, idx, &json, &task, &ws);

    if (rc != 0 && ws == NULL)
        return rc;
    if (rc != 0) {
        char why[1200];
        snprintf(why, sizeof(why), "cannot make the task: %s",
                 cnx_error_last()->message);
        free(json);
        if (cnx_error_last()->retriable)
            return 0; /* storage hiccup: next round */
        /* Without a key the task cannot be named on the events topic;
         * the request's key stands in for it. */
        return decide_text(c, CNX_TOPIC_EVENTS, request,
                           control_text("dead_lettered", request, ws->name,
                                        idx,
                                        "sha256:0000000000000000000000000000"
                                        "000000000000000000000000000000000000",
                                        attempt, "bulk", why, NULL));
    }
    if (reuse) {
        /* The decision names the verified manifest it reuses: the fold
         * accepts a `reused` only with one of this task key. The key does
         * not name where outputs are stored, so only a task that wrote to
         * this task's output layer is reused: the same work on another
         * dataset's copy of the bytes left its outputs elsewhere. */
        sqlite3_stmt *st = ctl_stmt(c, "SELECT t.manifest FROM tasks t JOIN "
                                       "stages s ON s.request = t.request "
                                       "AND s.stage = t.stage WHERE "
                                       "t.task_key = ? AND t.request != ? "
                                       "AND t.state = 'done' AND t.manifest "
                                       "IS NOT NULL AND s.output_layer = ? "
                                       "ORDER BY t.done_at, t.request "
                                       "LIMIT 1");
        if (st == NULL) {
            rc = CNX_EIO;
            goto done;
        }
        ctl_bind_text(st, 1, task->key);
        ctl_bind_text(st, 2, request);
        ctl_bind_text(st, 3, task->output_layer);
        if (sqlite3_step(st) == SQLITE_ROW) {
            char *text = control_text("reused", request, ws->name, idx,
                                      task->key, 0, "bulk",
                                      "--reuse: task key done before",
                                      col(st, 0));
            sqlite3_reset(st);
            rc = decide_text(c, CNX_TOPIC_EVENTS, task->key, text);
            goto done;
        }
    }
    {
        /* The release decision first, then the task: when the task's
         * first event reaches the events partition of its key, the
         * release is already there. (A controller killed between the
         * two leaves a release without its message: resend_unconfirmed
         * sends it again after a restart.) */
        char *text = control_text("released", request, ws->name, idx,
                                  task->key, attempt,
                                  urgent ? "urgent" : "bulk", reason, NULL);
        if (text == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
            goto done;
        }
        rc = ctl_publish(c, CNX_TOPIC_EVENTS, task->key, text, NULL, 0);
        if (rc == 0)
            rc = send_task(c, request, ws, urgent, task, json, attempt);
        if (rc == 0)
            rc = queue_decision(c, CNX_TOPIC_EVENTS, text);
        free(text);
    }
done:
    cnx_task_free(task);
    free(json);
    return rc;
}

/*
 * A release the controller made in a previous run may have lost its task
 * message: the `released` event and the task message go to two topics,
 * and a controller killed between their acknowledgements leaves the event
 * in the log (so the ledger says released) with no message behind it.
 * Only the last batch before the kill can be split, so at the first
 * decision round after a start the task messages of the releases made in
 * the RESEND_WINDOW_S before the newest one in the ledger, of tasks still
 * `released` and with no event of that attempt, are sent again: the same
 * task and attempt, no new release. A worker that gets the message twice
 * runs it once (or announces outputs already durable); the lease
 * (--release-lease) stays the remedy for a message lost any other way.
 */
#define RESEND_WINDOW_S 120.0

static int resend_unconfirmed(ctl *c)
{
    typedef struct {
        char request[129], deadline[40];
        int64_t idx, attempt;
        int urgent;
    } unconfirmed;
    unconfirmed *u = NULL;
    size_t n = 0, cap = 0;
    char cutoff[32];
    double newest;
    int rc = 0;
    sqlite3_stmt *st = ctl_stmt(c, "SELECT max(r.time) FROM releases r JOIN "
                                   "requests q ON q.id = r.request WHERE "
                                   "q.state = 'accepted' AND r.type = "
                                   "'released'");
    if (st == NULL)
        return CNX_EIO;
    newest = sqlite3_step(st) == SQLITE_ROW ? parse_time(col(st, 0)) : NAN;
    sqlite3_reset(st);
    if (isnan(newest))
        return 0;
    cnx_rfc3339_format(newest - RESEND_WINDOW_S, cutoff);
    st = ctl_stmt(c, "SELECT t.request, q.deadline, q.urgent, t.idx, "
                     "t.last_attempt FROM releases r JOIN tasks t ON "
                     "t.request = r.request AND t.idx = r.idx AND "
                     "t.last_attempt = r.attempt JOIN requests q ON q.id = "
                     "t.request WHERE r.type = 'released' AND r.time >= ? "
                     "AND q.state = 'accepted' AND t.state = 'released' AND "
                     "NOT EXISTS (SELECT 1 FROM attempts a WHERE a.task_key "
                     "= t.task_key AND a.request = t.request AND a.attempt "
                     "= t.last_attempt) ORDER BY t.request, t.idx");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, cutoff);
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            unconfirmed *g = realloc(u, ncap * sizeof(*g));
            if (g == NULL) {
                sqlite3_reset(st);
                free(u);
                return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
            }
            u = g;
            cap = ncap;
        }
        snprintf(u[n].request, sizeof(u[n].request), "%s", col(st, 0));
        snprintf(u[n].deadline, sizeof(u[n].deadline), "%s", col(st, 1));
        u[n].urgent = sqlite3_column_int(st, 2);
        u[n].idx = sqlite3_column_int64(st, 3);
        u[n].attempt = sqlite3_column_int64(st, 4);
        n++;
    }
    sqlite3_reset(st);
    if (n > 0)
        CNX_INFO("controller", "sending again the task messages of %zu "
                 "release(s) of the previous run not yet started (a release "
                 "split by a stop between its event and its message)", n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        cnx_task *task = NULL;
        char *json = NULL;
        const cnx_wf_stage *ws = NULL;
        rc = make_task(c, u[i].request, u[i].deadline, u[i].urgent,
                       u[i].idx, &json, &task, &ws);
        if (rc == 0)
            rc = send_task(c, u[i].request, ws, u[i].urgent, task, json,
                           u[i].attempt);
        else {
            /* The lease covers it. */
            CNX_WARN("controller", "task %lld of %s: cannot send its task "
                     "message again: %s", (long long)u[i].idx, u[i].request,
                     cnx_error_last()->message);
            rc = 0;
        }
        cnx_task_free(task);
        free(json);
    }
    free(u);
    return rc == 0 && n > 0 ? ctl_flush(c) : rc;
}

static int release_ready(ctl *c, const char *request, const char *deadline,
                         int urgent, int reuse)
{
    int64_t idx[RELEASES_PER_ROUND];
    int n = 0, rc = 0;
    sqlite3_stmt *st = ctl_stmt(c, "SELECT idx FROM tasks WHERE request = ? "
                                   "AND state = 'planned' AND deps_left <= 0 "
                                   "ORDER BY idx LIMIT 256");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, request);
    while (n < RELEASES_PER_ROUND && sqlite3_step(st) == SQLITE_ROW)
        idx[n++] = sqlite3_column_int64(st, 0);
    for (int i = 0; i < n && rc == 0; i++)
        rc = release(c, request, deadline, urgent, reuse, idx[i], 1,
                     "ready");
    /* One acknowledgement and one transaction for the whole batch. */
    return rc == 0 ? commit_pending(c) : rc;
}

/* Has a task of worker started since `since` (a queue that moves)? */
static int worker_started_since(ctl *c, const char *worker, double since)
{
    char text[32];
    sqlite3_stmt *st = ctl_stmt(c, "SELECT 1 FROM attempts INDEXED BY "
                                   "attempts_by_stage WHERE stage = ? AND "
                                   "started >= ? LIMIT 1");
    if (st == NULL)
        return -1;
    cnx_rfc3339_format(since, text);
    ctl_bind_text(st, 1, worker);
    ctl_bind_text(st, 2, text);
    return sqlite3_step(st) == SQLITE_ROW;
}

/*
 * Lost tasks. Every released task has a lease, measured from the last
 * thing heard of it (its release, or its last attempt event):
 *   - an attempt that started and went silent past the stage's lease_s;
 *   - a release never started (its message lost: a broker that came back
 *     empty) past --release-lease, provided no task of the same worker
 *     started meanwhile either: while the queue moves, a task still
 *     waiting in it is queued behind others, not lost.
 * Each waits a backoff that doubles with every release on top. A lost
 * task is released again as the next attempt, or, past its budget, given
 * up (dead_lettered).
 */
static int check_leases(ctl *c, const char *request, const char *deadline,
                        int urgent)
{
    typedef struct {
        int64_t idx, last_attempt, releases, budget;
        char key[CNX_DIGEST_LEN + 8], stage[40];
        double silent;
        int started, reset;
    } lost_t;
    lost_t lost[64];
    int n = 0, rc = 0;
    double now = ctl_wall(), shortest = c->o->release_lease_s;
    char cutoff[32];
    sqlite3_stmt *st;

    /* Only tasks silent longer than the shortest lease are looked at
     * (RFC 3339 times compare as text, to within a second). */
    st = ctl_stmt(c, "SELECT min(lease_s) FROM stages WHERE request = ?");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, request);
    if (sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) != SQLITE_NULL &&
        (shortest <= 0 || sqlite3_column_double(st, 0) < shortest))
        shortest = sqlite3_column_double(st, 0);
    cnx_rfc3339_format(now - shortest + 1, cutoff);
    /* Once the log was found reset (controller.c, check_log), a task
     * released before that is lost at once: its task message may have
     * gone with the old log. */
    if (c->log_reset_at > 0) {
        char reset[32];
        cnx_rfc3339_format(c->log_reset_at, reset);
        if (strcmp(reset, cutoff) > 0)
            memcpy(cutoff, reset, sizeof(cutoff));
    }
    st = ctl_stmt(
        c, "SELECT t.idx, t.last_seen, t.last_attempt, t.releases, "
           "s.lease_s, s.retry_budget, t.task_key, t.stage, s.worker, "
           "EXISTS (SELECT 1 FROM attempts a WHERE a.task_key = t.task_key "
           "AND a.request = t.request AND a.state = 'started') FROM tasks t "
           "JOIN stages s ON s.request = t.request AND s.stage = t.stage "
           "WHERE t.request = ? AND t.state = 'released' AND t.last_seen < ? "
           "ORDER BY t.idx");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, request);
    ctl_bind_text(st, 2, cutoff);
    while (n < 64 && sqlite3_step(st) == SQLITE_ROW) {
        double seen = parse_time(col(st, 1));
        int started = sqlite3_column_int(st, 9);
        double lease =
            started ? sqlite3_column_double(st, 4) : c->o->release_lease_s;
        int64_t releases = sqlite3_column_int64(st, 3);
        /* Backoff: each re-release waits twice as long again. */
        double backoff = ldexp(1.0, (int)(releases < 10 ? releases : 10) - 1);
        int reset = c->log_reset_at > 0 && seen < c->log_reset_at;
        if (isnan(seen) ||
            (!reset && ((!started && lease <= 0) ||
                        now - seen <= lease + backoff)))
            continue;
        lost[n].reset = reset;
        lost[n].idx = sqlite3_column_int64(st, 0);
        lost[n].last_attempt = sqlite3_column_int64(st, 2);
        lost[n].releases = releases;
        lost[n].budget = sqlite3_column_int64(st, 5);
        lost[n].silent = now - seen;
        lost[n].started = started;
        snprintf(lost[n].key, sizeof(lost[n].key), "%s", col(st, 6));
        snprintf(lost[n].stage, sizeof(lost[n].stage), "%s", col(st, 7));
        if (!started && !reset) {
            int moving = worker_started_since(c, col(st, 8),
                                              now - c->o->release_lease_s);
            if (moving < 0)
                return CNX_EIO;
            if (moving)
                continue; /* queued behind tasks that do run */
        }
        n++;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        char why[256];
        if (lost[i].reset)
            snprintf(why, sizeof(why),
                     "lost: the broker's log was reset after the release "
                     "of attempt %lld",
                     (long long)lost[i].last_attempt);
        else if (lost[i].started)
            snprintf(why, sizeof(why),
                     "lost: no event for %.0f s after "
                     "attempt %lld",
                     lost[i].silent, (long long)lost[i].last_attempt);
        else
            snprintf(why, sizeof(why),
                     "lost: not started %.0f s after "
                     "the release of attempt %lld",
                     lost[i].silent, (long long)lost[i].last_attempt);
        if (lost[i].last_attempt < 1 + lost[i].budget) {
            CNX_WARN("controller", "task %s of %s: %s; releasing it again",
                     lost[i].key, request, why);
            rc = release(c, request, deadline, urgent, 0, lost[i].idx,
                         lost[i].last_attempt + 1, why);
            if (rc == 0)
                rc = commit_pending(c);
        } else {
            char final[320];
            snprintf(final, sizeof(final), "%s; retry budget (%lld) spent",
                     why, (long long)lost[i].budget);
            CNX_WARN("controller", "task %s of %s: %s", lost[i].key, request,
                     final);
            rc = decide_text(c, CNX_TOPIC_EVENTS, lost[i].key,
                             control_text("dead_lettered", request,
                                          lost[i].stage, lost[i].idx,
                                          lost[i].key, lost[i].last_attempt,
                                          urgent ? "urgent" : "bulk", final,
                                          NULL));
        }
    }
    return rc;
}

/* ---- progress, SLO and the end ---------------------------------------------- */

typedef struct req_row {
    char id[129];
    char deadline[40];
    char submitted[40];
    char accepted[40];
    char slo[16];
    int urgent, reuse;
} req_row;

/* Per-stage counts as JSON; *remaining, *done_run, *active set. */
static json_t *stage_counts(ctl *c, const char *request, int64_t *remaining,
                            int64_t *done_run, int64_t *active,
                            int64_t *never_run, int64_t *dead)
{
    json_t *arr = json_array();
    sqlite3_stmt *st = ctl_stmt(
        c, "SELECT s.stage, s.tasks, "
           "(SELECT count(*) FROM tasks t WHERE t.request = s.request AND "
           "t.stage = s.stage AND t.state = 'done'), "
           "(SELECT count(*) FROM tasks t WHERE t.request = s.request AND "
           "t.stage = s.stage AND t.state = 'released'), "
           "(SELECT count(*) FROM tasks t WHERE t.request = s.request AND "
           "t.stage = s.stage AND t.state = 'dead'), "
           "(SELECT count(*) FROM tasks t WHERE t.request = s.request AND "
           "t.stage = s.stage AND t.reused = 1), "
           "(SELECT count(*) FROM attempts a JOIN tasks t ON t.task_key = "
           "a.task_key AND t.request = a.request WHERE t.request = s.request "
           "AND t.stage = s.stage AND a.state = 'failed'), "
           "(SELECT count(*) FROM tasks t WHERE t.request = s.request AND "
           "t.stage = s.stage AND t.state = 'planned' AND t.deps_left > 0), "
           "(SELECT count(*) FROM tasks t WHERE t.request = s.request AND "
           "t.stage = s.stage AND t.state = 'released' AND EXISTS (SELECT 1 "
           "FROM attempts a WHERE a.task_key = t.task_key AND a.request = "
           "t.request AND a.state = 'started')) "
           "FROM stages s WHERE s.request = ? ORDER BY s.seq");
    *remaining = *done_run = *active = *never_run = *dead = 0;
    if (st == NULL)
        return arr;
    ctl_bind_text(st, 1, request);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t total = sqlite3_column_int64(st, 1);
        int64_t done = sqlite3_column_int64(st, 2);
        int64_t running = sqlite3_column_int64(st, 3);
        int64_t dd = sqlite3_column_int64(st, 4);
        int64_t reused = sqlite3_column_int64(st, 5);
        int64_t failed = sqlite3_column_int64(st, 6);
        int64_t blocked = sqlite3_column_int64(st, 7);
        /* running: a worker has started it (released alone may still sit
         * on the topic); the released ones keep the request active */
        int64_t started = sqlite3_column_int64(st, 8);
        *remaining += total - done - dd;
        *done_run += done - reused;
        *active += running;
        *never_run += blocked;
        *dead += dd;
        json_array_append_new(
            arr, json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "stage",
                           col(st, 0), "total", (json_int_t)total, "done",
                           (json_int_t)done, "running", (json_int_t)started,
                           "failed", (json_int_t)failed, "dead",
                           (json_int_t)dd, "reused", (json_int_t)reused));
    }
    return arr;
}

static int slo_event(ctl *c, const req_row *r, const char *slo,
                     const char *eta)
{
    json_t *doc = state_doc(r->id, "slo");
    CNX_INFO("controller", "request %s: SLO %s (deadline %s, ETA %s)", r->id,
             slo, r->deadline, eta ? eta : "unknown");
    json_object_set_new(doc, "slo", json_string(slo));
    json_object_set_new(doc, "eta", eta ? json_string(eta) : json_null());
    json_object_set_new(doc, "deadline", json_string(r->deadline));
    return decide(c, CNX_TOPIC_REQUESTS, r->id, doc);
}

static json_t *summary_stages(ctl *c, const char *request)
{
    json_t *arr = json_array();
    double price = c->o->price_per_core_hour;
    sqlite3_stmt *st = ctl_stmt(
        c, "SELECT sc.stage, sc.worker, sc.tasks, "
           "(SELECT count(*) FROM tasks t WHERE t.request = sc.request AND "
           "t.stage = sc.stage AND t.state = 'done'), "
           "(SELECT count(*) FROM tasks t WHERE t.request = sc.request AND "
           "t.stage = sc.stage AND t.state = 'dead'), "
           "(SELECT count(*) FROM tasks t WHERE t.request = sc.request AND "
           "t.stage = sc.stage AND t.state = 'planned'), "
           "(SELECT count(*) FROM tasks t WHERE t.request = sc.request AND "
           "t.stage = sc.stage AND t.reused = 1), "
           "(SELECT count(*) FROM attempts a JOIN tasks t ON t.task_key = "
           "a.task_key AND t.request = a.request WHERE t.request = "
           "sc.request AND t.stage = sc.stage), "
           "sc.voxels, sc.cpu_s, sc.wall_s, sc.bytes_read, sc.bytes_written, "
           "coalesce(sc.mvx_per_s, 0), sc.core_hours, sc.mm3, "
           "coalesce(sc.gb_per_mm3, 0) FROM stage_costs sc JOIN stages s ON "
           "s.request = sc.request AND s.stage = sc.stage WHERE sc.request = "
           "? ORDER BY s.seq");
    if (st == NULL)
        return arr;
    ctl_bind_text(st, 1, request);
    while (sqlite3_step(st) == SQLITE_ROW) {
        double core_hours = sqlite3_column_double(st, 14);
        double mm3 = sqlite3_column_double(st, 15);
        json_t *o = json_pack(
            "{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:I,s:I,s:f,s:f,"
            "s:f,s:f}",
            "stage", col(st, 0), "worker", col(st, 1), "total",
            (json_int_t)sqlite3_column_int64(st, 2), "done",
            (json_int_t)sqlite3_column_int64(st, 3), "dead",
            (json_int_t)sqlite3_column_int64(st, 4), "never_run",
            (json_int_t)sqlite3_column_int64(st, 5), "reused",
            (json_int_t)sqlite3_column_int64(st, 6), "attempts",
            (json_int_t)sqlite3_column_int64(st, 7), "voxels",
            (json_int_t)sqlite3_column_int64(st, 8), "cpu_s",
            sqlite3_column_double(st, 9), "wall_s",
            sqlite3_column_double(st, 10), "bytes_read",
            (json_int_t)sqlite3_column_int64(st, 11), "bytes_written",
            (json_int_t)sqlite3_column_int64(st, 12), "mvx_per_s",
            sqlite3_column_double(st, 13), "core_hours", core_hours, "mm3",
            mm3, "gb_per_mm3", sqlite3_column_double(st, 16));
        json_object_set_new(o, "usd_per_mm3",
                            price >= 0 && mm3 > 0
                                ? json_real(core_hours * price / mm3)
                                : json_null());
        json_array_append_new(arr, o);
    }
    return arr;
}

static json_t *roi_of(sqlite3_stmt *st, int first)
{
    return json_pack("{s:[III],s:[III]}", "min",
                     (json_int_t)sqlite3_column_int64(st, first),
                     (json_int_t)sqlite3_column_int64(st, first + 1),
                     (json_int_t)sqlite3_column_int64(st, first + 2), "max",
                     (json_int_t)sqlite3_column_int64(st, first + 3),
                     (json_int_t)sqlite3_column_int64(st, first + 4),
                     (json_int_t)sqlite3_column_int64(st, first + 5));
}

static int finish(ctl *c, const req_row *r, int64_t dead, int64_t never_run)
{
    json_t *doc = state_doc(r->id, "finished"), *viol = json_array();
    json_t *fails = json_array();
    double now = ctl_wall(), deadline = parse_time(r->deadline);
    /* Met only when every task is done in time: a dead-lettered or
     * never-run task means the region was not processed. */
    const char *slo =
        now <= deadline && dead + never_run == 0 ? "met" : "missed";
    int64_t repeated = 0, identical = 0;
    sqlite3_stmt *st;
    int rc;

    /* Tasks whose key some other request had done by the time this one
     * was accepted, and which of them gave the same bytes again. */
    st = ctl_stmt(c, "SELECT count(*), sum(" CNX_LEDGER_SQL_IDENTICAL
                     ") FROM tasks t WHERE t.request = ?1 AND "
                     CNX_LEDGER_SQL_REPEATED);
    if (st != NULL) {
        ctl_bind_text(st, 1, r->id);
        if (sqlite3_step(st) == SQLITE_ROW) {
            repeated = sqlite3_column_int64(st, 0);
            identical = sqlite3_column_int64(st, 1);
        }
    }
    st = ctl_stmt(c, "SELECT v.kind, v.task_key, t.stage, v.object, "
                     "v.expected, v.got, t.x0, t.y0, t.z0, t.x1, t.y1, t.z1 "
                     "FROM violations v JOIN tasks t ON t.task_key = "
                     "v.task_key AND t.request = v.request WHERE v.request = "
                     "? ORDER BY t.stage, v.object, v.kind");
    if (st != NULL) {
        ctl_bind_text(st, 1, r->id);
        while (sqlite3_step(st) == SQLITE_ROW)
            json_array_append_new(
                viol, json_pack("{s:s,s:s,s:s,s:o,s:s,s:s,s:s}", "kind",
                                col(st, 0), "task_key", col(st, 1), "stage",
                                col(st, 2), "roi", roi_of(st, 6), "object",
                                col(st, 3), "expected", col(st, 4), "got",
                                col(st, 5)));
    }
    st = ctl_stmt(c, "SELECT coalesce(task_key, ''), stage, x0, y0, z0, x1, "
                     "y1, z1, coalesce(error, 'unknown') FROM tasks WHERE "
                     "request = ? AND state = 'dead' ORDER BY idx");
    if (st != NULL) {
        ctl_bind_text(st, 1, r->id);
        while (sqlite3_step(st) == SQLITE_ROW)
            json_array_append_new(
                fails, json_pack("{s:s,s:s,s:o,s:s}", "task_key", col(st, 0),
                                 "stage", col(st, 1), "roi", roi_of(st, 2),
                                 "error", col(st, 8)));
    }
    json_object_set_new(doc, "outcome", json_string(dead + never_run == 0
                                                        ? "done"
                                                        : "failed"));
    json_object_set_new(doc, "submitted", json_string(r->submitted));
    json_object_set_new(doc, "deadline", json_string(r->deadline));
    json_object_set_new(doc, "elapsed_s",
                        json_real(now - parse_time(r->submitted)));
    json_object_set_new(doc, "slo", json_string(slo));
    json_object_set_new(doc, "repeated", json_integer(repeated));
    json_object_set_new(doc, "identical", json_integer(identical));
    json_object_set_new(doc, "stages", summary_stages(c, r->id));
    json_object_set_new(doc, "violations", viol);
    json_object_set_new(doc, "failures", fails);
    json_object_set_new(doc, "price_per_core_hour",
                        c->o->price_per_core_hour >= 0
                            ? json_real(c->o->price_per_core_hour)
                            : json_null());
    if (strcmp(slo, "missed") == 0 && strcmp(r->slo, "missed") != 0) {
        if (strcmp(r->slo, "at_risk") != 0 &&
            (rc = slo_event(c, r, "at_risk", NULL)) != 0) {
            json_decref(doc);
            return rc;
        }
        rc = slo_event(c, r, "missed", NULL);
    } else if (strcmp(slo, "met") == 0) {
        rc = slo_event(c, r, "met", NULL);
    } else {
        rc = 0;
    }
    if (rc != 0) {
        json_decref(doc);
        return rc;
    }
    CNX_INFO("controller", "request %s finished: %s, SLO %s%s, %lld of %lld "
             "repeated task(s) identical",
             r->id, dead + never_run == 0 ? "done" : "failed", slo,
             dead + never_run == 0 ? "" : " (incomplete)",
             (long long)identical, (long long)repeated);
    return decide(c, CNX_TOPIC_REQUESTS, r->id, doc);
}

/* Progress, ETA and SLO of one running request; finish it when nothing
 * can move any more. */
static int follow(ctl *c, const req_row *r, int tick)
{
    int64_t remaining, done_run, active = 0, never_run, dead;
    json_t *stages;
    double now = ctl_wall(), deadline = parse_time(r->deadline);
    double submitted = parse_time(r->submitted), first = NAN, eta = NAN;
    double margin = c->o->at_risk_margin * (deadline - submitted);
    char eta_text[32] = "";
    int64_t ready = 0;
    const char *slo = r->slo;
    sqlite3_stmt *st;
    int rc = 0;

    /* Cheap checks every round (both use the tasks_by_state index, and
     * stop at the first row: a count would walk every ready or released
     * task, 10^6 of them at the start of a large request, every round);
     * the per-stage counts only on a progress tick or at the end. */
    st = ctl_stmt(c, "SELECT EXISTS (SELECT 1 FROM tasks WHERE request = ?1 "
                     "AND state = 'planned' AND deps_left <= 0), "
                     "EXISTS (SELECT 1 FROM tasks WHERE request = ?1 AND "
                     "state = 'released')");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, r->id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        ready = sqlite3_column_int64(st, 0);
        active = sqlite3_column_int64(st, 1);
    }
    if (active > 0 || ready > 0) {
        if (!tick)
            return 0;
    }
    stages = stage_counts(c, r->id, &remaining, &done_run, &active,
                          &never_run, &dead);
    if (active == 0 && ready == 0) {
        json_decref(stages);
        return finish(c, r, dead, never_run);
    }
    /* ETA from measured throughput: tasks run by this request so far over
     * the time since its first release. */
    st = ctl_stmt(c, "SELECT min(time) FROM releases WHERE request = ? AND "
                     "type = 'released'");
    if (st != NULL) {
        ctl_bind_text(st, 1, r->id);
        if (sqlite3_step(st) == SQLITE_ROW)
            first = parse_time(col(st, 0));
    }
    if (done_run > 0 && !isnan(first) && now > first) {
        double rate = (double)done_run / (now - first);
        eta = now + (double)remaining / rate;
        cnx_rfc3339_format(eta, eta_text);
    }
    if (strcmp(slo, "ok") == 0 &&
        ((!isnan(eta) && eta > deadline - margin) ||
         (isnan(eta) && now > deadline - margin) || now > deadline)) {
        rc = slo_event(c, r, "at_risk", eta_text[0] ? eta_text : NULL);
        slo = "at_risk";
    }
    if (rc == 0 && strcmp(slo, "missed") != 0 && now > deadline) {
        rc = slo_event(c, r, "missed", eta_text[0] ? eta_text : NULL);
        slo = "missed";
    }
    if (rc == 0) {
        json_t *doc = state_doc(r->id, "progress");
        json_object_set_new(doc, "deadline", json_string(r->deadline));
        json_object_set_new(doc, "eta", eta_text[0] ? json_string(eta_text)
                                                    : json_null());
        json_object_set_new(doc, "slo", json_string(slo));
        json_object_set_new(doc, "urgent",
                            json_boolean(strcmp(slo, "ok") != 0));
        json_object_set_new(doc, "stages", stages);
        stages = NULL;
        rc = decide(c, CNX_TOPIC_REQUESTS, r->id, doc);
    }
    json_decref(stages);
    return rc;
}

int ctl_decide(ctl *c)
{
    req_row rows[32];
    int n = 0, rc;
    int tick = ctl_wall() - c->last_progress >= c->o->progress_s;
    sqlite3_stmt *st;

    if (!c->live)
        return 0;
    if (!c->resent) {
        c->resent = 1;
        rc = resend_unconfirmed(c);
        if (rc != 0)
            return rc;
    }
    rc = accept_submitted(c);
    if (rc != 0)
        return rc;
    st = ctl_stmt(c, "SELECT id, deadline, submitted, accepted, slo, urgent, "
                     "reuse FROM requests WHERE state = 'accepted' ORDER BY "
                     "deadline, id LIMIT 32");
    if (st == NULL)
        return CNX_EIO;
    while (n < 32 && sqlite3_step(st) == SQLITE_ROW) {
        snprintf(rows[n].id, sizeof(rows[n].id), "%s", col(st, 0));
        snprintf(rows[n].deadline, sizeof(rows[n].deadline), "%s",
                 col(st, 1));
        snprintf(rows[n].submitted, sizeof(rows[n].submitted), "%s",
                 col(st, 2));
        snprintf(rows[n].accepted, sizeof(rows[n].accepted), "%s",
                 col(st, 3));
        snprintf(rows[n].slo, sizeof(rows[n].slo), "%s", col(st, 4));
        rows[n].urgent = sqlite3_column_int(st, 5);
        rows[n].reuse = sqlite3_column_int(st, 6);
        n++;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        req_row *r = &rows[i];
        rc = release_ready(c, r->id, r->deadline, r->urgent, r->reuse);
        if (rc == 0 && tick)
            rc = check_leases(c, r->id, r->deadline, r->urgent);
        if (rc == 0)
            rc = follow(c, r, tick);
    }
    if (tick) {
        c->last_progress = ctl_wall();
        if (c->o->metrics_port > 0)
            ctl_metrics_update(c);
    }
    return rc;
}
