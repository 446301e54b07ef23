/*
 * report.c - the run report of one request: an HTML page with inline SVG
 * made from the ledger alone (docs/report.md says where each figure comes
 * from), and a Neuroglancer state with every layer the request wrote.
 *
 * The ledger is opened read-only (a `mode=ro` URI) and only read: the
 * controller may run on. Every string taken from the ledger reaches the
 * page through cnx_report_html_escape, so a stage name, an error message
 * or a request id cannot add markup. A row the report cannot make sense
 * of (a time that is not a time, a stage no plan named) is drawn as it
 * is, at the start of the axis or in a row of its own, never trusted for
 * a size. The load is one request: tens of thousands of attempts at most,
 * held in memory once. Single-threaded.
 */
#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/report.h"
#include "ledger_sql_int.h"

#define RP_MAX_LANES 12 /* sub-rows of a stage's timeline row */
#define RP_W 1000.0     /* width of every plot */
#define RP_X0 170.0     /* where the plotting area starts (labels left) */
#define RP_X1 980.0

typedef struct rp_bar {
    size_t stage;  /* index into rp.stages */
    long long idx, attempt;
    const char *cls; /* static outcome class */
    double t0, t1;   /* seconds after submission; has_t: both known */
    int has_t;
    int lane;
    double wall_s; /* < 0: none */
    char *title;
} rp_bar;

typedef struct rp_stage {
    char *name, *worker, *kind, *out_layer, *out_scale, *in_layer;
    long long tasks, attempts_ok, voxels, repeated, identical;
    double res[3], cpu_s, wall_s, mvx, core_hours, mm3;
    int nlanes, planned; /* planned: a row of `stages` */
} rp_stage;

typedef struct rp {
    sqlite3 *db;
    const cnx_report_opts *o;
    /* requests row */
    char *id, *workflow, *dataset, *roi, *submitted, *deadline, *state,
        *outcome, *finished, *slo, *eta, *progress_at, *accepted;
    long long ntasks, repeated, identical;
    int has_summary;
    double price;               /* < 0: none */
    double t_finished, t_eta, t_deadline, t_progress; /* NAN: none */
    long long roi_v[6];
    int has_roi;
    rp_stage *stages;
    size_t nstages;
    rp_bar *bars;
    size_t nbars;
    double *done_t; /* completion offsets, sorted */
    size_t ndone;
} rp;

static char *dup_col(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    char *s = strdup(t != NULL ? (const char *)t : "");
    if (s == NULL)
        abort(); /* out of memory in a one-shot tool */
    return s;
}

static double num_col(sqlite3_stmt *st, int i)
{
    int ty = sqlite3_column_type(st, i);
    if (ty != SQLITE_FLOAT && ty != SQLITE_INTEGER)
        return NAN;
    return sqlite3_column_double(st, i);
}

static int db_error(rp *r, const char *what)
{
    return cnx_error_set(CNX_ECORRUPT, 0, "ledger %s: %s: %s", r->o->ledger,
                         what, sqlite3_errmsg(r->db));
}

static int prepare(rp *r, const char *sql, sqlite3_stmt **st)
{
    if (sqlite3_prepare_v2(r->db, sql, -1, st, NULL) != SQLITE_OK)
        return db_error(r, "cannot read it");
    sqlite3_bind_text(*st, 1, r->o->request, -1, SQLITE_STATIC);
    return 0;
}

void cnx_report_html_escape(FILE *f, const char *text)
{
    if (text == NULL)
        return;
    for (const char *p = text; *p != '\0'; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*p, f); break;
        }
    }
}

#define esc(f, s) cnx_report_html_escape((f), (s))

/* ---- reading the ledger ---------------------------------------------- */

static int open_ledger(rp *r)
{
    const char *path = r->o->ledger;
    struct stat sb;
    char *uri;
    sqlite3_stmt *st = NULL;
    int ok;

    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return cnx_error_set(CNX_ENOTFOUND, 0, "ledger %s: %s", path,
                             stat(path, &sb) != 0 ? strerror(errno)
                                                  : "not a file");
    /* The path goes into a URI: keep '?', '#' and '%' literal. */
    {
        size_t n = strlen(path);
        char *enc = malloc(n * 3 + 1), *q = enc;
        if (enc == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        for (const char *p = path; *p != '\0'; p++) {
            if (*p == '?' || *p == '#' || *p == '%') {
                snprintf(q, 4, "%%%02X", (unsigned char)*p);
                q += 3;
            } else {
                *q++ = *p;
            }
        }
        *q = '\0';
        uri = sqlite3_mprintf("file:%s?mode=ro", enc);
        free(enc);
    }
    if (uri == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    ok = sqlite3_open_v2(uri, &r->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                         NULL) == SQLITE_OK;
    sqlite3_free(uri);
    if (!ok)
        return cnx_error_set(CNX_ECORRUPT, 0, "ledger %s cannot be opened: %s",
                             path, r->db ? sqlite3_errmsg(r->db)
                                         : "out of memory");
    sqlite3_busy_timeout(r->db, 5000);
    ok = sqlite3_prepare_v2(r->db,
                            "SELECT value FROM meta WHERE key = 'schema'", -1,
                            &st, NULL) == SQLITE_OK &&
         sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) &&
         strcmp((const char *)sqlite3_column_text(st, 0), "1") == 0;
    sqlite3_finalize(st);
    if (!ok)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "%s is not a cnx ledger of schema version 1",
                             path);
    return 0;
}

static int read_request(rp *r)
{
    sqlite3_stmt *st;
    int rc = prepare(
        r,
        "SELECT id, workflow, dataset, roi, submitted, deadline, state, "
        "coalesce(outcome, ''), coalesce(finished, ''), slo, "
        "coalesce(eta, ''), coalesce(progress_at, ''), "
        "coalesce(accepted, ''), tasks, "
        "(julianday(finished) - julianday(submitted)) * 86400.0, "
        "(julianday(eta) - julianday(submitted)) * 86400.0, "
        "(julianday(deadline) - julianday(submitted)) * 86400.0, "
        "(julianday(progress_at) - julianday(submitted)) * 86400.0, "
        "CASE WHEN json_valid(summary) THEN json_extract(summary, "
        "'$.repeated') END, CASE WHEN json_valid(summary) THEN "
        "json_extract(summary, '$.identical') END, CASE WHEN "
        "json_valid(summary) THEN json_extract(summary, "
        "'$.price_per_core_hour') END, CASE WHEN json_valid(roi) THEN "
        "json_extract(roi, '$.min[0]') END, CASE WHEN json_valid(roi) THEN "
        "json_extract(roi, '$.min[1]') END, CASE WHEN json_valid(roi) THEN "
        "json_extract(roi, '$.min[2]') END, CASE WHEN json_valid(roi) THEN "
        "json_extract(roi, '$.max[0]') END, CASE WHEN json_valid(roi) THEN "
        "json_extract(roi, '$.max[1]') END, CASE WHEN json_valid(roi) THEN "
        "json_extract(roi, '$.max[2]') END "
        "FROM requests WHERE id = ?1",
        &st);
    if (rc != 0)
        return rc;
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return db_error(r, "requests");
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "ledger %s has no request '%s'", r->o->ledger,
                             r->o->request);
    }
    r->id = dup_col(st, 0);
    r->workflow = dup_col(st, 1);
    r->dataset = dup_col(st, 2);
    r->roi = dup_col(st, 3);
    r->submitted = dup_col(st, 4);
    r->deadline = dup_col(st, 5);
    r->state = dup_col(st, 6);
    r->outcome = dup_col(st, 7);
    r->finished = dup_col(st, 8);
    r->slo = dup_col(st, 9);
    r->eta = dup_col(st, 10);
    r->progress_at = dup_col(st, 11);
    r->accepted = dup_col(st, 12);
    r->ntasks = sqlite3_column_int64(st, 13);
    r->t_finished = num_col(st, 14);
    r->t_eta = num_col(st, 15);
    r->t_deadline = num_col(st, 16);
    r->t_progress = num_col(st, 17);
    r->has_summary = sqlite3_column_type(st, 18) == SQLITE_INTEGER;
    r->repeated = sqlite3_column_int64(st, 18);
    r->identical = sqlite3_column_int64(st, 19);
    r->price = r->o->price_per_core_hour >= 0 ? r->o->price_per_core_hour
               : isnan(num_col(st, 20))       ? -1
                                              : num_col(st, 20);
    r->has_roi = 1;
    for (int i = 0; i < 6; i++) {
        if (sqlite3_column_type(st, 21 + i) != SQLITE_INTEGER)
            r->has_roi = 0;
        r->roi_v[i] = sqlite3_column_int64(st, 21 + i);
    }
    sqlite3_finalize(st);
    return 0;
}

/* The index of the stage named name; a stage that the plan did not name
 * (a row the ledger should not hold) gets a row of its own. */
static size_t stage_of(rp *r, const char *name)
{
    rp_stage *s;
    for (size_t i = 0; i < r->nstages; i++)
        if (strcmp(r->stages[i].name, name) == 0)
            return i;
    s = realloc(r->stages, (r->nstages + 1) * sizeof(*s));
    if (s == NULL)
        abort();
    r->stages = s;
    s = &r->stages[r->nstages];
    memset(s, 0, sizeof(*s));
    s->name = strdup(name);
    s->worker = strdup("");
    s->kind = strdup("");
    s->out_layer = strdup("");
    s->out_scale = strdup("");
    s->in_layer = strdup("");
    if (!s->name || !s->worker || !s->kind || !s->out_layer ||
        !s->out_scale || !s->in_layer)
        abort();
    return r->nstages++;
}

static int read_stages(rp *r)
{
    sqlite3_stmt *st;
    int rc = prepare(r,
                     "SELECT stage, worker, kind, tasks, output_layer, "
                     "output_scale, input_layer, res_x, res_y, res_z FROM "
                     "stages WHERE request = ?1 ORDER BY seq, stage",
                     &st);
    if (rc != 0)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char *name = dup_col(st, 0);
        size_t k = stage_of(r, name); /* may move r->stages */
        rp_stage *s = &r->stages[k];
        free(name);
        free(s->worker);
        free(s->kind);
        free(s->out_layer);
        free(s->out_scale);
        free(s->in_layer);
        s->worker = dup_col(st, 1);
        s->kind = dup_col(st, 2);
        s->tasks = sqlite3_column_int64(st, 3);
        s->out_layer = dup_col(st, 4);
        s->out_scale = dup_col(st, 5);
        s->in_layer = dup_col(st, 6);
        for (int i = 0; i < 3; i++)
            s->res[i] = num_col(st, 7 + i);
        s->planned = 1;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_error(r, "stages");
}

/*
 * The bars of the timeline, four kinds (docs/report.md):
 *  0  every `attempts` row of the request (each run of an attempt);
 *  1  a `released` decision of which no attempt row exists (the worker
 *     never reported it: lost if released again or the request ended);
 *  2  a `reused` decision (done before, not run: already done);
 *  3  a `dead_lettered` decision of which no attempt row exists (the
 *     controller gave the task up).
 * Columns: stage, idx, attempt, state, worker, run, t0, t1, start text,
 * end text, error, dead-lettered, later attempt/release, wall_s.
 */
static const char *const bar_sql[4] = {
    "SELECT t.stage, t.idx, a.attempt, a.state, a.worker, a.run, "
    "(julianday(a.started) - julianday(r.submitted)) * 86400.0, "
    "(julianday(coalesce(a.finished, (SELECT min(x.time) FROM releases x "
    "WHERE x.request = t.request AND x.idx = t.idx AND x.attempt > "
    "a.attempt), r.finished, r.progress_at, a.started)) - "
    "julianday(r.submitted)) * 86400.0, "
    "coalesce(a.started, ''), coalesce(a.finished, ''), "
    "coalesce(a.error_code || ': ' || a.error, a.error, ''), "
    "EXISTS (SELECT 1 FROM releases x WHERE x.request = t.request AND "
    "x.idx = t.idx AND x.attempt = a.attempt AND x.type = 'dead_lettered'), "
    "EXISTS (SELECT 1 FROM releases x WHERE x.request = t.request AND "
    "x.idx = t.idx AND x.attempt > a.attempt AND x.type = 'released') OR "
    "EXISTS (SELECT 1 FROM attempts b WHERE b.task_key = a.task_key AND "
    "b.request = a.request AND b.attempt > a.attempt), a.wall_s "
    "FROM attempts a JOIN tasks t ON t.task_key = a.task_key AND "
    "t.request = a.request JOIN requests r ON r.id = a.request "
    "WHERE a.request = ?1 ORDER BY 7, t.idx, a.attempt",

    "SELECT t.stage, t.idx, x.attempt, 'released', '', '', "
    "(julianday(x.time) - julianday(r.submitted)) * 86400.0, "
    "(julianday(coalesce((SELECT min(y.time) FROM releases y WHERE "
    "y.request = x.request AND y.idx = x.idx AND y.attempt > x.attempt), "
    "r.finished, r.progress_at, x.time)) - julianday(r.submitted)) * "
    "86400.0, x.time, '', x.reason, 0, "
    "EXISTS (SELECT 1 FROM releases y WHERE y.request = x.request AND "
    "y.idx = x.idx AND y.attempt > x.attempt) OR r.finished IS NOT NULL, "
    "NULL FROM releases x JOIN tasks t ON t.request = x.request AND "
    "t.idx = x.idx JOIN requests r ON r.id = x.request "
    "WHERE x.request = ?1 AND x.type = 'released' AND NOT EXISTS (SELECT 1 "
    "FROM attempts a WHERE a.task_key = x.task_key AND a.request = "
    "x.request AND a.attempt = x.attempt) ORDER BY 7, t.idx, x.attempt",

    "SELECT t.stage, t.idx, x.attempt, 'reused', '', '', "
    "(julianday(x.time) - julianday(r.submitted)) * 86400.0, "
    "(julianday(x.time) - julianday(r.submitted)) * 86400.0, x.time, "
    "x.time, coalesce('reuses ' || x.manifest, ''), 0, 0, NULL "
    "FROM releases x JOIN tasks t ON t.request = x.request AND "
    "t.idx = x.idx JOIN requests r ON r.id = x.request "
    "WHERE x.request = ?1 AND x.type = 'reused' ORDER BY 7, t.idx",

    "SELECT t.stage, t.idx, x.attempt, 'dead_lettered', '', '', "
    "(julianday(x.time) - julianday(r.submitted)) * 86400.0, "
    "(julianday(x.time) - julianday(r.submitted)) * 86400.0, x.time, "
    "x.time, x.reason, 1, 0, NULL "
    "FROM releases x JOIN tasks t ON t.request = x.request AND "
    "t.idx = x.idx JOIN requests r ON r.id = x.request "
    "WHERE x.request = ?1 AND x.type = 'dead_lettered' AND NOT EXISTS "
    "(SELECT 1 FROM attempts a WHERE a.task_key = x.task_key AND "
    "a.request = x.request AND a.attempt = x.attempt) ORDER BY 7, t.idx",
};

/* The outcome class of a bar, from its kind and the row's state. */
static const char *bar_class(int kind, const char *state, int dead,
                             int later, int finished)
{
    switch (kind) {
    case 1: return later ? "lost" : "queued";
    case 2: return "already-done";
    case 3: return "dead-lettered";
    default: break;
    }
    if (strcmp(state, "succeeded") == 0)
        return "succeeded";
    if (strcmp(state, "preempted") == 0)
        return "preempted";
    if (strcmp(state, "failed") == 0)
        return dead ? "dead-lettered" : later ? "failed-retried" : "failed";
    if (strcmp(state, "started") == 0)
        return later || finished ? "lost" : "running";
    return "unknown";
}

static int read_bars(rp *r)
{
    for (int kind = 0; kind < 4; kind++) {
        sqlite3_stmt *st;
        int rc = prepare(r, bar_sql[kind], &st);
        if (rc != 0)
            return rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            rp_bar *b = realloc(r->bars, (r->nbars + 1) * sizeof(*b));
            char *stage = dup_col(st, 0), *state = dup_col(st, 3);
            char *worker = dup_col(st, 4), *run = dup_col(st, 5);
            char *t0 = dup_col(st, 8), *t1 = dup_col(st, 9);
            char *err = dup_col(st, 10);
            size_t n;
            if (b == NULL)
                abort();
            r->bars = b;
            b = &r->bars[r->nbars++];
            memset(b, 0, sizeof(*b));
            b->stage = stage_of(r, stage);
            b->idx = sqlite3_column_int64(st, 1);
            b->attempt = sqlite3_column_int64(st, 2);
            b->cls = bar_class(kind, state, sqlite3_column_int(st, 11),
                               sqlite3_column_int(st, 12),
                               r->finished[0] != '\0');
            b->t0 = num_col(st, 6);
            b->t1 = num_col(st, 7);
            b->has_t = !isnan(b->t0) && !isnan(b->t1) && b->t1 >= b->t0;
            b->wall_s = num_col(st, 13);
            if (isnan(b->wall_s))
                b->wall_s = -1;
            n = strlen(stage) + strlen(worker) + strlen(run) + strlen(t0) +
                strlen(t1) + strlen(err) + strlen(state) + 200;
            b->title = malloc(n);
            if (b->title == NULL)
                abort();
            snprintf(b->title, n,
                     "%s: task %lld, attempt %lld%s%s%s%s: %s (%s) %s -> "
                     "%s%s%s",
                     stage, b->idx, b->attempt, worker[0] ? ", worker " : "",
                     worker, run[0] ? ", run " : "", run, b->cls,
                     kind == 0 ? state : kind == 1 ? "released, no attempt"
                     : kind == 2 ? "reused" : "dead-lettered",
                     t0, t1, err[0] ? "; " : "", err);
            free(stage);
            free(state);
            free(worker);
            free(run);
            free(t0);
            free(t1);
            free(err);
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return db_error(r, "attempts and releases");
    }
    return 0;
}

static int read_costs(rp *r)
{
    sqlite3_stmt *st;
    int rc = prepare(r,
                     "SELECT stage, attempts_succeeded, voxels, cpu_s, "
                     "wall_s, mvx_per_s, core_hours, mm3 FROM stage_costs "
                     "WHERE request = ?1",
                     &st);
    if (rc != 0)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char *name = dup_col(st, 0);
        size_t k = stage_of(r, name); /* may move r->stages */
        rp_stage *s = &r->stages[k];
        free(name);
        s->attempts_ok = sqlite3_column_int64(st, 1);
        s->voxels = sqlite3_column_int64(st, 2);
        s->cpu_s = sqlite3_column_double(st, 3);
        s->wall_s = sqlite3_column_double(st, 4);
        s->mvx = sqlite3_column_double(st, 5);
        s->core_hours = sqlite3_column_double(st, 6);
        s->mm3 = sqlite3_column_double(st, 7);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return db_error(r, "stage_costs");
    /* Repeated tasks (a task whose key another request had done by the
     * time this one was accepted) and which gave the same bytes: the
     * controller's own count in its `finished` summary, per stage here. */
    rc = prepare(r,
                 "SELECT t.stage, count(*), coalesce(sum("
                 CNX_LEDGER_SQL_IDENTICAL "), 0) FROM tasks t WHERE "
                 "t.request = ?1 AND " CNX_LEDGER_SQL_REPEATED
                 " GROUP BY t.stage",
                 &st);
    if (rc != 0)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char *name = dup_col(st, 0);
        size_t k = stage_of(r, name); /* may move r->stages */
        rp_stage *s = &r->stages[k];
        free(name);
        s->repeated = sqlite3_column_int64(st, 1);
        s->identical = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return db_error(r, "tasks");
    rc = prepare(r,
                 "SELECT (julianday(t.done_at) - julianday(r.submitted)) * "
                 "86400.0 AS s FROM tasks t JOIN requests r ON r.id = "
                 "t.request WHERE t.request = ?1 AND t.state = 'done' AND "
                 "s IS NOT NULL ORDER BY s",
                 &st);
    if (rc != 0)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        double *d = realloc(r->done_t, (r->ndone + 1) * sizeof(*d));
        if (d == NULL)
            abort();
        r->done_t = d;
        d[r->ndone++] = sqlite3_column_double(st, 0);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_error(r, "tasks");
}

/* ---- drawing ------------------------------------------------------------ */

static const char *const classes[] = {
    "succeeded", "failed-retried", "preempted", "lost", "dead-lettered",
    "already-done", "failed", "running", "queued", "unknown"};

static double xmap(double t, double tmax)
{
    if (isnan(t) || t < 0)
        t = 0;
    if (t > tmax)
        t = tmax;
    return RP_X0 + (RP_X1 - RP_X0) * t / tmax;
}

static void fmt_dur(char *out, size_t n, double s)
{
    if (isnan(s))
        snprintf(out, n, "?");
    else if (fabs(s) < 120)
        snprintf(out, n, "%.3g s", s);
    else if (fabs(s) < 7200)
        snprintf(out, n, "%.3g min", s / 60);
    else
        snprintf(out, n, "%.3g h", s / 3600);
}

static void axis(FILE *f, double y, double tmax, const char *what)
{
    char lab[32];
    fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
               "y2=\"%.1f\"/>\n", RP_X0, y, RP_X1, y);
    for (int i = 0; i <= 5; i++) {
        double t = tmax * i / 5, x = xmap(t, tmax);
        fmt_dur(lab, sizeof(lab), t);
        fprintf(f, "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" "
                   "x2=\"%.1f\" y2=\"%.1f\"/><text class=\"tl\" "
                   "x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                x, y, x, y + 4, x, y + 16, lab);
    }
    fprintf(f, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\">%s</text>\n",
            RP_X0 - 22, y + 16, what);
}

/* Pack each stage's bars into at most RP_MAX_LANES sub-rows, greedily by
 * start time, so that bars of concurrent attempts do not hide each other
 * (past that many they share the least busy sub-row). */
static void pack_lanes(rp *r)
{
    for (size_t s = 0; s < r->nstages; s++) {
        double end[RP_MAX_LANES];
        int nl = 0;
        for (size_t i = 0; i < r->nbars; i++) {
            rp_bar *b = &r->bars[i];
            double t0 = b->has_t ? b->t0 : 0, t1 = b->has_t ? b->t1 : 0;
            int lane = -1;
            if (b->stage != s)
                continue;
            for (int k = 0; k < nl && lane < 0; k++)
                if (end[k] < t0 || (end[k] == t0 && t1 > t0))
                    lane = k;
            if (lane < 0 && nl < RP_MAX_LANES)
                lane = nl++;
            if (lane < 0) {
                lane = 0;
                for (int k = 1; k < nl; k++)
                    if (end[k] < end[lane])
                        lane = k;
            }
            end[lane] = t1;
            b->lane = lane;
        }
        r->stages[s].nlanes = nl > 0 ? nl : 1;
    }
}

static double time_max(const rp *r)
{
    double tmax = 0;
    for (size_t i = 0; i < r->nbars; i++)
        if (r->bars[i].has_t && r->bars[i].t1 > tmax)
            tmax = r->bars[i].t1;
    if (!isnan(r->t_finished) && r->t_finished > tmax)
        tmax = r->t_finished;
    if (r->ndone > 0 && r->done_t[r->ndone - 1] > tmax)
        tmax = r->done_t[r->ndone - 1];
    return tmax > 0 ? tmax * 1.02 : 1;
}

static void timeline(FILE *f, const rp *r)
{
    double tmax = time_max(r), y = 10;
    size_t counts[sizeof(classes) / sizeof(classes[0])] = {0};
    double h = 40;

    for (size_t s = 0; s < r->nstages; s++)
        h += r->stages[s].nlanes * 10 + 10;
    fputs("<h2 id=\"timeline\">Timeline of every attempt</h2>\n"
          "<p>One row per stage, in the plan's order; each attempt (each "
          "run of it) is a bar from its start to its end, placed in "
          "sub-rows where attempts overlap. A thick outline marks a retry "
          "(attempt 2 or later). Hover a bar for its task, attempt, "
          "worker, times and error.</p>\n", f);
    fprintf(f, "<svg class=\"plot\" id=\"timeline-svg\" "
               "viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" "
               "xmlns=\"http://www.w3.org/2000/svg\">\n",
            RP_W, h, RP_W, h);
    for (size_t s = 0; s < r->nstages; s++) {
        const rp_stage *st = &r->stages[s];
        double rh = st->nlanes * 10 + 10;
        fprintf(f, "<g class=\"stage-row\" data-stage=\"");
        esc(f, st->name);
        fprintf(f, "\"><rect class=\"row%s\" x=\"0\" y=\"%.1f\" "
                   "width=\"%.0f\" height=\"%.1f\"/>"
                   "<text class=\"label\" x=\"%.1f\" y=\"%.1f\">",
                s % 2 ? " odd" : "", y, RP_W, rh, RP_X0 - 8, y + rh / 2 + 4);
        esc(f, st->name);
        fputs("</text>\n", f);
        for (size_t i = 0; i < r->nbars; i++) {
            const rp_bar *b = &r->bars[i];
            double x0, x1;
            if (b->stage != s)
                continue;
            x0 = xmap(b->has_t ? b->t0 : 0, tmax);
            x1 = xmap(b->has_t ? b->t1 : 0, tmax);
            if (x1 - x0 < 2)
                x1 = x0 + 2;
            fprintf(f, "<rect class=\"bar o-%s%s\" data-outcome=\"%s\" "
                       "data-attempt=\"%lld\" x=\"%.2f\" y=\"%.1f\" "
                       "width=\"%.2f\" height=\"8\"><title>",
                    b->cls, b->attempt > 1 ? " retry" : "", b->cls,
                    b->attempt, x0, y + 5 + b->lane * 10, x1 - x0);
            esc(f, b->title);
            fputs("</title></rect>\n", f);
            for (size_t k = 0; k < sizeof(classes) / sizeof(classes[0]); k++)
                if (strcmp(classes[k], b->cls) == 0)
                    counts[k]++;
        }
        fputs("</g>\n", f);
        y += rh;
    }
    if (!isnan(r->t_finished))
        fprintf(f, "<line class=\"finish\" x1=\"%.1f\" y1=\"0\" x2=\"%.1f\" "
                   "y2=\"%.1f\"><title>finished</title></line>\n",
                xmap(r->t_finished, tmax), xmap(r->t_finished, tmax), y);
    axis(f, y + 5, tmax, "since submission");
    fputs("</svg>\n<p class=\"legend\">", f);
    for (size_t k = 0; k < sizeof(classes) / sizeof(classes[0]); k++)
        if (counts[k] > 0 || k < 6)
            fprintf(f, "<span class=\"key\"><svg width=\"14\" height=\"10\">"
                       "<rect class=\"bar o-%s\" x=\"1\" y=\"1\" width=\"12\""
                       " height=\"8\"/></svg> %s: %zu</span> ",
                    classes[k], classes[k], counts[k]);
    fprintf(f, "<span class=\"key\">%zu bars in all</span></p>\n", r->nbars);
}

/* One horizontal bar chart: value[s] per stage, labelled. */
static void stage_bars(FILE *f, const rp *r, const char *title,
                       const double *v, const char *unit)
{
    double vmax = 0, h = r->nstages * 18 + 24;
    for (size_t s = 0; s < r->nstages; s++)
        if (!isnan(v[s]) && v[s] > vmax)
            vmax = v[s];
    fprintf(f, "<figure><figcaption>%s</figcaption><svg class=\"plot small\""
               " viewBox=\"0 0 480 %.0f\" width=\"480\" height=\"%.0f\" "
               "xmlns=\"http://www.w3.org/2000/svg\">\n", title, h, h);
    for (size_t s = 0; s < r->nstages; s++) {
        double y = 6 + s * 18;
        double w = vmax > 0 && !isnan(v[s]) ? 230.0 * v[s] / vmax : 0;
        fprintf(f, "<text class=\"label\" x=\"130\" y=\"%.1f\">", y + 11);
        esc(f, r->stages[s].name);
        fprintf(f, "</text><rect class=\"metric\" x=\"136\" y=\"%.1f\" "
                   "width=\"%.2f\" height=\"13\"/>", y, w);
        if (isnan(v[s]))
            fprintf(f, "<text class=\"tl0\" x=\"%.1f\" y=\"%.1f\">n/a</text>\n",
                    140 + w, y + 11);
        else
            fprintf(f, "<text class=\"tl0\" x=\"%.1f\" y=\"%.1f\">%.4g %s"
                       "</text>\n", 140 + w, y + 11, v[s], unit);
    }
    fputs("</svg></figure>\n", f);
}

static double usd_mm3(const rp *r, const rp_stage *s)
{
    return r->price >= 0 && s->mm3 > 0 ? s->core_hours * r->price / s->mm3
                                       : NAN;
}

static void costs(FILE *f, const rp *r)
{
    double *v = calloc(r->nstages + 1, sizeof(*v));
    if (v == NULL)
        abort();
    fputs("<h2 id=\"costs\">Throughput and cost per stage</h2>\n"
          "<p>From the ledger's <code>stage_costs</code> view: succeeded "
          "attempts only, duplicates included (they were paid for).", f);
    if (r->price >= 0)
        fprintf(f, " $/mm³ at $%.4g per core-hour.", r->price);
    else
        fputs(" No price per core-hour was given (<code>cnx-controller "
              "--price-per-core-hour</code> or <code>cnx-report "
              "--price-per-core-hour</code>): no $/mm³.", f);
    fputs("</p>\n<table><tr><th>stage</th><th>worker</th><th>tasks</th>"
          "<th>succeeded attempts</th><th>voxels</th><th>MVx/s</th>"
          "<th>core-hours</th><th>mm³</th><th>$/mm³</th></tr>\n", f);
    for (size_t s = 0; s < r->nstages; s++) {
        const rp_stage *st = &r->stages[s];
        double u = usd_mm3(r, st);
        fputs("<tr><td>", f);
        esc(f, st->name);
        fputs("</td><td>", f);
        esc(f, st->worker);
        fprintf(f, "</td><td>%lld</td><td>%lld</td><td>%lld</td>"
                   "<td>%.4g</td><td>%.4g</td><td>%.4g</td>",
                st->tasks, st->attempts_ok, st->voxels, st->mvx,
                st->core_hours, st->mm3);
        if (isnan(u))
            fputs("<td>n/a</td></tr>\n", f);
        else
            fprintf(f, "<td>%.4g</td></tr>\n", u);
    }
    fputs("</table>\n<div class=\"charts\">\n", f);
    for (size_t s = 0; s < r->nstages; s++)
        v[s] = (double)r->stages[s].tasks;
    stage_bars(f, r, "tasks", v, "");
    for (size_t s = 0; s < r->nstages; s++)
        v[s] = r->stages[s].voxels / 1e6;
    stage_bars(f, r, "voxels (millions)", v, "MVx");
    for (size_t s = 0; s < r->nstages; s++)
        v[s] = r->stages[s].mvx;
    stage_bars(f, r, "throughput (MVx per wall second of a task)", v, "MVx/s");
    for (size_t s = 0; s < r->nstages; s++)
        v[s] = r->stages[s].core_hours;
    stage_bars(f, r, "core-hours", v, "h");
    if (r->price >= 0) {
        for (size_t s = 0; s < r->nstages; s++)
            v[s] = usd_mm3(r, &r->stages[s]);
        stage_bars(f, r, "$ per mm³", v, "$/mm³");
    }
    fputs("</div>\n", f);
    free(v);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void durations(FILE *f, const rp *r)
{
    double dmax = 0, h = r->nstages * 22 + 34, y;
    double *d = malloc((r->nbars + 1) * sizeof(*d));
    char lab[32];
    if (d == NULL)
        abort();
    for (size_t i = 0; i < r->nbars; i++)
        if (strcmp(r->bars[i].cls, "succeeded") == 0 &&
            r->bars[i].wall_s > dmax)
            dmax = r->bars[i].wall_s;
    if (dmax <= 0)
        dmax = 1;
    fputs("<h2 id=\"durations\">Task durations</h2>\n<p>Wall seconds of "
          "every succeeded attempt (<code>attempts.wall_s</code>), one dot "
          "each; the bar marks the median.</p>\n", f);
    fprintf(f, "<svg class=\"plot\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\""
               " height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n",
            RP_W, h, RP_W, h);
    y = 6;
    for (size_t s = 0; s < r->nstages; s++, y += 22) {
        size_t n = 0;
        for (size_t i = 0; i < r->nbars; i++)
            if (r->bars[i].stage == s &&
                strcmp(r->bars[i].cls, "succeeded") == 0 &&
                r->bars[i].wall_s >= 0)
                d[n++] = r->bars[i].wall_s;
        qsort(d, n, sizeof(*d), cmp_double);
        fprintf(f, "<g class=\"dur-row\"><text class=\"label\" x=\"%.1f\" "
                   "y=\"%.1f\">", RP_X0 - 8, y + 12);
        esc(f, r->stages[s].name);
        fputs("</text>", f);
        for (size_t i = 0; i < n; i++)
            fprintf(f, "<circle class=\"dot\" cx=\"%.2f\" cy=\"%.1f\" "
                       "r=\"2.5\"/>", xmap(d[i], dmax), y + 8);
        if (n > 0) {
            fmt_dur(lab, sizeof(lab), d[n / 2]);
            fprintf(f, "<line class=\"median\" x1=\"%.2f\" y1=\"%.1f\" "
                       "x2=\"%.2f\" y2=\"%.1f\"><title>median %s</title>"
                       "</line>",
                    xmap(d[n / 2], dmax), y, xmap(d[n / 2], dmax), y + 16,
                    lab);
        }
        fputs("</g>\n", f);
    }
    axis(f, y, dmax, "task wall time");
    fputs("</svg>\n<table><tr><th>stage</th><th>succeeded attempts</th>"
          "<th>median</th><th>5th percentile</th><th>95th percentile</th>"
          "<th>longest</th></tr>\n", f);
    for (size_t s = 0; s < r->nstages; s++) {
        size_t n = 0;
        char q[4][32];
        for (size_t i = 0; i < r->nbars; i++)
            if (r->bars[i].stage == s &&
                strcmp(r->bars[i].cls, "succeeded") == 0 &&
                r->bars[i].wall_s >= 0)
                d[n++] = r->bars[i].wall_s;
        qsort(d, n, sizeof(*d), cmp_double);
        fputs("<tr><td>", f);
        esc(f, r->stages[s].name);
        if (n == 0) {
            fputs("</td><td>0</td><td></td><td></td><td></td><td></td></tr>\n",
                  f);
            continue;
        }
        fmt_dur(q[0], sizeof(q[0]), d[n / 2]);
        fmt_dur(q[1], sizeof(q[1]), d[(size_t)(0.05 * (double)(n - 1))]);
        fmt_dur(q[2], sizeof(q[2]), d[(size_t)(0.95 * (double)(n - 1) + 0.5)]);
        fmt_dur(q[3], sizeof(q[3]), d[n - 1]);
        fprintf(f, "</td><td>%zu</td><td>%s</td><td>%s</td><td>%s</td>"
                   "<td>%s</td></tr>\n", n, q[0], q[1], q[2], q[3]);
    }
    fputs("</table>\n", f);
    free(d);
}

static void slo(FILE *f, rp *r)
{
    double tmax = time_max(r), h = 214, top = 24, bot = 174;
    sqlite3_stmt *st;
    int nev = 0;
    fputs("<h2 id=\"slo\">SLO and completion</h2>\n<p>The ledger keeps the "
          "newest estimate of completion only (<code>requests.eta</code>), "
          "not its history, and one row per SLO state change "
          "(<code>slo_events</code>: at_risk, missed, met). Drawn here: "
          "tasks done over time (<code>tasks.done_at</code>, one step per "
          "task), the SLO changes, the last ETA and the finish; the "
          "deadline where it falls on the axis.</p>\n", f);
    if (!isnan(r->t_eta) && r->t_eta > tmax)
        tmax = r->t_eta * 1.02;
    fprintf(f, "<svg class=\"plot\" id=\"slo-svg\" viewBox=\"0 0 %.0f %.0f\""
               " width=\"%.0f\" height=\"%.0f\" "
               "xmlns=\"http://www.w3.org/2000/svg\">\n",
            RP_W, h, RP_W, h);
    fprintf(f, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\">%lld tasks</text>"
               "<text class=\"label\" x=\"%.1f\" y=\"%.1f\">0</text>\n",
            RP_X0 - 8, top + 4, r->ntasks, RP_X0 - 8, bot);
    if (r->ntasks > 0 && r->ndone > 0) {
        double ny = (double)(r->ntasks > (long long)r->ndone
                                 ? r->ntasks : (long long)r->ndone);
        fprintf(f, "<polyline class=\"done\" points=\"%.1f,%.1f", RP_X0,
                bot);
        for (size_t i = 0; i < r->ndone; i++) {
            double x = xmap(r->done_t[i], tmax);
            fprintf(f, " %.2f,%.2f %.2f,%.2f", x,
                    bot - (bot - top) * i / ny, x,
                    bot - (bot - top) * (i + 1) / ny);
        }
        fputs("\"><title>tasks done</title></polyline>\n", f);
    }
    if (!isnan(r->t_deadline)) {
        if (r->t_deadline <= tmax) {
            double x = xmap(r->t_deadline, tmax);
            fprintf(f, "<line class=\"deadline\" x1=\"%.1f\" y1=\"%.1f\" "
                       "x2=\"%.1f\" y2=\"%.1f\"/><text class=\"tl\" "
                       "x=\"%.1f\" y=\"%.1f\">deadline</text>\n",
                    x, top, x, bot, x, top - 1);
        } else {
            char lab[32];
            fmt_dur(lab, sizeof(lab), r->t_deadline);
            fprintf(f, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\">"
                       "deadline at %s, off the axis &#8594;</text>\n",
                    RP_X1, top - 10, lab);
        }
    }
    if (!isnan(r->t_eta)) {
        double x = xmap(r->t_eta, tmax);
        fprintf(f, "<line class=\"eta\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                   "y2=\"%.1f\"><title>last ETA ", x, top, x, bot);
        esc(f, r->eta);
        fputs("</title></line>\n", f);
    }
    if (!isnan(r->t_finished)) {
        double x = xmap(r->t_finished, tmax);
        fprintf(f, "<line class=\"finish\" x1=\"%.1f\" y1=\"%.1f\" "
                   "x2=\"%.1f\" y2=\"%.1f\"><title>finished</title></line>\n",
                x, top, x, bot);
    }
    if (prepare(r,
                "SELECT type, time, coalesce(eta, ''), deadline, "
                "(julianday(time) - julianday((SELECT submitted FROM "
                "requests WHERE id = ?1))) * 86400.0 FROM slo_events WHERE "
                "request = ?1 ORDER BY time, type",
                &st) == 0) {
        fputs("<g class=\"slo-events\">", f);
        while (sqlite3_step(st) == SQLITE_ROW) {
            double t = num_col(st, 4), x = xmap(t, tmax);
            fputs("<circle class=\"slo-", f);
            esc(f, (const char *)sqlite3_column_text(st, 0));
            fprintf(f, "\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\"><title>SLO ", x,
                    bot - 10 - 12 * (nev % 3));
            esc(f, (const char *)sqlite3_column_text(st, 0));
            fputs(" at ", f);
            esc(f, (const char *)sqlite3_column_text(st, 1));
            fputs(", ETA ", f);
            esc(f, (const char *)sqlite3_column_text(st, 2));
            fputs("</title></circle>", f);
            nev++;
        }
        fputs("</g>\n", f);
        sqlite3_finalize(st);
    }
    axis(f, bot + 5, tmax, "since submission");
    fputs("</svg>\n<p class=\"legend\"><span class=\"key\"><span "
          "class=\"sw done\"></span> tasks done</span> <span class=\"key\">"
          "<span class=\"sw eta\"></span> last ETA</span> <span class=\"key\">"
          "<span class=\"sw finish\"></span> finished</span> <span "
          "class=\"key\"><span class=\"sw deadline\"></span> deadline</span>"
          "</p>\n", f);
    fprintf(f, "<p>SLO now: <b>");
    esc(f, r->slo);
    fputs("</b>; last ETA: ", f);
    esc(f, r->eta[0] ? r->eta : "none");
    fputs(" (at ", f);
    esc(f, r->progress_at[0] ? r->progress_at : "-");
    fprintf(f, "); %d SLO event(s); %zu of %lld tasks done.</p>\n", nev,
            r->ndone, r->ntasks);
}

static void identity(FILE *f, rp *r)
{
    sqlite3_stmt *st;
    long long rep = 0, ident = 0;
    int nv = 0;
    for (size_t s = 0; s < r->nstages; s++) {
        rep += r->stages[s].repeated;
        ident += r->stages[s].identical;
    }
    fputs("<h2 id=\"identity\">Bit-identity of repeated tasks</h2>\n<p>A "
          "task is repeated when another request had done the same task "
          "key before this one was accepted; it is identical when it is "
          "done and no <code>violations</code> row names it (its outputs "
          "had the same digests). The controller's count, in the request's "
          "<code>finished</code> summary: ", f);
    if (r->has_summary)
        fprintf(f, "<b>%lld of %lld</b> identical.", r->identical,
                r->repeated);
    else
        fputs("none yet (the request has not finished).", f);
    fprintf(f, " Counted again from the tasks: <b>%lld of %lld</b>.</p>\n",
            ident, rep);
    fputs("<table><tr><th>stage</th><th>repeated</th><th>identical</th>"
          "</tr>\n", f);
    for (size_t s = 0; s < r->nstages; s++) {
        fputs("<tr><td>", f);
        esc(f, r->stages[s].name);
        fprintf(f, "</td><td>%lld</td><td>%lld</td></tr>\n",
                r->stages[s].repeated, r->stages[s].identical);
    }
    fputs("</table>\n", f);
    if (prepare(r,
                "SELECT kind, stage, object, expected, got FROM violations "
                "WHERE request = ?1 ORDER BY stage, object, kind LIMIT 200",
                &st) != 0)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (nv++ == 0)
            fputs("<table class=\"violations\"><tr><th>kind</th><th>stage"
                  "</th><th>object</th><th>expected</th><th>got</th></tr>\n",
                  f);
        fputs("<tr>", f);
        for (int i = 0; i < 5; i++) {
            fputs("<td>", f);
            esc(f, (const char *)sqlite3_column_text(st, i));
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    sqlite3_finalize(st);
    if (nv > 0)
        fputs("</table>\n", f);
    else
        fputs("<p>No violation recorded for this request.</p>\n", f);
}

/* ---- Neuroglancer ----------------------------------------------------- */

/* url's path under the dataset ("segmentation/v1" of
 * "<dataset>/segmentation/v1"), or NULL when it is elsewhere. */
static const char *under_dataset(const rp *r, const char *url)
{
    size_t n = strlen(r->dataset);
    while (n > 0 && r->dataset[n - 1] == '/')
        n--;
    if (n == 0 || strncmp(url, r->dataset, n) != 0 || url[n] != '/')
        return NULL;
    return url + n + 1;
}

/* A layer's Neuroglancer source: the layer's path under the dataset
 * appended to the base, or its own URL when it is not under the dataset.
 * malloc'ed. */
static char *layer_source(const rp *r, const char *base, const char *url)
{
    const char *rel = under_dataset(r, url);
    size_t n = strlen(base) + strlen(url) + 20;
    char *src = malloc(n);
    if (src == NULL)
        abort();
    if (rel != NULL)
        snprintf(src, n, "precomputed://%s/%s", base, rel);
    else
        snprintf(src, n, "precomputed://%s", url);
    return src;
}

/* The layer type a Neuroglancer state gives a layer: from its info file
 * when the dataset is a local directory, else from the worker that wrote
 * it: a stage that writes a part of a layer (its output scale names the
 * part, "8_8_8:mesh") adds meshes, properties or synapse tables to a
 * segmentation. NULL: not a volume Neuroglancer shows (the alignment's
 * matches and transforms). */
static const char *layer_type(const rp *r, const rp_stage *st)
{
    const char *w = st->worker;
    if (strcmp(w, "align-match") == 0 || strcmp(w, "align-solve") == 0)
        return NULL;
    if (strncmp(r->dataset, "file://", 7) == 0) {
        size_t n = strlen(st->out_layer) + strlen(r->dataset) + 16;
        char *path = malloc(n);
        json_t *info;
        const char *type = NULL;
        if (path == NULL)
            abort();
        /* output layers are URLs: the stage's own, or under the dataset */
        if (strncmp(st->out_layer, "file://", 7) == 0)
            snprintf(path, n, "%s/info", st->out_layer + 7);
        else
            snprintf(path, n, "%s/%s/info", r->dataset + 7, st->out_layer);
        info = json_load_file(path, 0, NULL);
        free(path);
        if (info != NULL) {
            const char *t = json_string_value(json_object_get(info, "type"));
            if (t != NULL && strcmp(t, "segmentation") == 0)
                type = "segmentation";
            else if (t != NULL && strcmp(t, "image") == 0)
                type = "image";
            json_decref(info);
            if (type != NULL)
                return type;
        }
    }
    if (strchr(st->out_scale, ':') != NULL || strncmp(w, "segment", 7) == 0 ||
        strncmp(w, "mesh", 4) == 0 || strncmp(w, "synapse", 7) == 0)
        return "segmentation";
    return "image";
}

static json_t *find_layer(json_t *layers, const char *name)
{
    json_t *l;
    size_t i;
    json_array_foreach(layers, i, l)
    {
        const char *n = json_string_value(json_object_get(l, "name"));
        if (n != NULL && strcmp(n, name) == 0)
            return l;
    }
    return NULL;
}

/* The layers' URL base: --layer-url-base, else the dataset's URL as it is
 * (Neuroglancer reads http(s)://, gs:// and s3:// itself; file:// it
 * cannot, which the page says). No trailing '/'. */
static char *layer_base(const rp *r)
{
    const char *b = r->o->layer_url_base ? r->o->layer_url_base : r->dataset;
    char *s = strdup(b);
    size_t n;
    if (s == NULL)
        abort();
    n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
    return s;
}

/* The synapse annotation collections the request wrote: each is a
 * directory <layer>/synapse_annotations/<scale>/<region>/ whose info is
 * one of the outputs of a synapse-edges task (docs/synapses.md); each
 * becomes an annotation layer linked to its segmentation layer. */
static void annotation_layers(const rp *r, json_t *layers, const char *base)
{
    sqlite3_stmt *st;
    int k = 0;
    if (sqlite3_prepare_v2(
            r->db,
            "SELECT DISTINCT s.output_layer, o.object FROM outputs o JOIN "
            "tasks t ON t.task_key = o.task_key JOIN stages s ON s.request "
            "= t.request AND s.stage = t.stage WHERE t.request = ?1 AND "
            "s.worker = 'synapse-edges' AND o.object LIKE "
            "'%/synapse_annotations/%/info' ORDER BY 1, 2",
            -1, &st, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(st, 1, r->o->request, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *layer = (const char *)sqlite3_column_text(st, 0);
        const char *obj = (const char *)sqlite3_column_text(st, 1);
        const char *seg;
        char *dir, *src, name[32];
        size_t n;
        if (layer == NULL || obj == NULL)
            continue;
        n = strlen(obj);
        if (n < 5 || strcmp(obj + n - 5, "/info") != 0 ||
            strncmp(obj, layer, strlen(layer)) != 0)
            continue;
        dir = strndup(obj, n - 5); /* the collection's directory */
        if (dir == NULL)
            abort();
        src = layer_source(r, base, dir);
        free(dir);
        seg = under_dataset(r, layer);
        snprintf(name, sizeof(name), k == 0 ? "synapses" : "synapses %d",
                 k + 1);
        json_array_append_new(
            layers,
            json_pack("{s:s,s:s,s:s,s:{s:s,s:s},s:[s,s]}", "type",
                      "annotation", "name", name, "source", src,
                      "linkedSegmentationLayer", "pre_synaptic_cell",
                      seg ? seg : layer, "post_synaptic_cell",
                      seg ? seg : layer, "filterBySegmentation",
                      "pre_synaptic_cell", "post_synaptic_cell"));
        free(src);
        k++;
    }
    sqlite3_finalize(st);
}

static json_t *ng_state(const rp *r)
{
    json_t *doc = json_object(), *layers = json_array();
    json_t *dims = json_object();
    const rp_stage *first = r->nstages > 0 ? &r->stages[0] : NULL;
    char *base = layer_base(r);
    double res[3] = {1, 1, 1};
    const char *axes[3] = {"x", "y", "z"};

    if (first != NULL)
        for (int i = 0; i < 3; i++)
            if (!isnan(first->res[i]) && first->res[i] > 0)
                res[i] = first->res[i];
    for (int i = 0; i < 3; i++)
        json_object_set_new(dims, axes[i],
                            json_pack("[f,s]", res[i] * 1e-9, "m"));
    json_object_set_new(doc, "dimensions", dims);
    if (r->has_roi)
        json_object_set_new(
            doc, "position",
            json_pack("[f,f,f]", (r->roi_v[0] + r->roi_v[3]) / 2.0,
                      (r->roi_v[1] + r->roi_v[4]) / 2.0,
                      (r->roi_v[2] + r->roi_v[5]) / 2.0));
    json_object_set_new(doc, "crossSectionScale", json_real(1));
    /* Each layer once, in plan order; a segmentation if any stage that
     * writes the whole layer makes it one. */
    for (size_t s = 0; s < r->nstages; s++) {
        const rp_stage *st = &r->stages[s];
        const char *type;
        json_t *l;
        char *src;
        const char *name;
        if (!st->planned || st->out_layer[0] == '\0')
            continue;
        type = layer_type(r, st);
        if (type == NULL)
            continue;
        name = under_dataset(r, st->out_layer);
        if (name == NULL)
            name = st->out_layer;
        l = find_layer(layers, name);
        if (l != NULL) {
            if (strchr(st->out_scale, ':') == NULL &&
                strcmp(type, "segmentation") == 0)
                json_object_set_new(l, "type", json_string(type));
            continue;
        }
        src = layer_source(r, base, st->out_layer);
        json_array_append_new(layers,
                              json_pack("{s:s,s:s,s:s}", "type", type, "name",
                                        name, "source", src));
        free(src);
    }
    annotation_layers(r, layers, base);
    json_object_set_new(doc, "layers", layers);
    json_object_set_new(doc, "layout", json_string("4panel"));
    free(base);
    return doc;
}

static void put_url_encoded(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
            (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
            *p == '.' || *p == '~')
            fputc(*p, f);
        else
            fprintf(f, "%%%02X", *p);
    }
}

static void viewer(FILE *f, const rp *r, const json_t *state)
{
    char *compact = json_dumps(state, JSON_COMPACT | JSON_REAL_PRECISION(12));
    const json_t *layers = json_object_get(state, "layers");
    const json_t *l;
    size_t i;
    const char *app = r->o->viewer ? r->o->viewer : CNX_REPORT_VIEWER;
    if (compact == NULL)
        abort();
    fputs("<h2 id=\"viewer\">Neuroglancer</h2>\n<p><a id=\"ng-link\" "
          "href=\"", f);
    /* The href: the app's URL, "#!" and the state, percent-encoded, then
     * escaped for the attribute. */
    esc(f, app);
    fputs("#!", f);
    put_url_encoded(f, compact);
    fprintf(f, "\">Open the request's %zu layer(s) in Neuroglancer</a>; "
               "the same state is in <a href=\"neuroglancer.json\">"
               "neuroglancer.json</a>.", json_array_size(layers));
    if (r->o->layer_url_base == NULL &&
        strncmp(r->dataset, "file://", 7) == 0)
        fputs(" The dataset is a local directory: a browser cannot read "
              "file:// sources. Serve the directory over HTTP (with CORS) "
              "and write the report again with <code>--layer-url-base "
              "http://host:port</code>.", f);
    fputs("</p>\n<table><tr><th>layer</th><th>type</th><th>source</th></tr>"
          "\n", f);
    json_array_foreach(layers, i, l)
    {
        fputs("<tr class=\"ng-layer\"><td>", f);
        esc(f, json_string_value(json_object_get(l, "name")));
        fputs("</td><td>", f);
        esc(f, json_string_value(json_object_get(l, "type")));
        fputs("</td><td><code>", f);
        esc(f, json_string_value(json_object_get(l, "source")));
        fputs("</code></td></tr>\n", f);
    }
    fputs("</table>\n", f);
    free(compact);
}

/* ---- the page ------------------------------------------------------------ */

static const char css[] =
    "body{font:14px/1.4 sans-serif;margin:24px;color:#222;background:#fff;"
    "max-width:1040px}h1{font-size:22px}h2{font-size:17px;margin-top:28px;"
    "border-bottom:1px solid #ccc}table{border-collapse:collapse;margin:8px 0}"
    "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}"
    "th{background:#f0f0f0}code{font-size:12px}.plot{display:block;"
    "background:#fcfcfc;border:1px solid #ddd}.charts{display:flex;"
    "flex-wrap:wrap;gap:8px}figure{margin:0}figcaption{font-size:12px}"
    ".row{fill:#fff}.row.odd{fill:#f1f4f8}.label{font-size:12px;"
    "text-anchor:end}.tl{font-size:10px;text-anchor:middle}.tl0{font-size:"
    "10px}.axis,.tick{stroke:#888}.bar{stroke:#fff;stroke-width:.6}.bar.retry{stroke:#000;"
    "stroke-width:1.5}.o-succeeded{fill:#2e9d4a}.o-failed-retried{fill:"
    "#e15759}.o-failed{fill:#9c0d22}.o-preempted{fill:#f28e2b;stroke:#7a4100;"
    "stroke-dasharray:3 2}.o-lost{fill:#aaa;stroke:#444;stroke-dasharray:2 2}"
    ".o-dead-lettered{fill:#111}.o-already-done{fill:#8cc5ef}.o-running{fill:"
    "#4e79a7}.o-queued{fill:#ddd}.o-unknown{fill:#c0f}.metric{fill:#4e79a7}"
    ".dot{fill:#2e9d4a;fill-opacity:.6}.median{stroke:#000;stroke-width:2}"
    ".done{fill:none;stroke:#2e9d4a;stroke-width:2}.deadline{stroke:#c00;"
    "stroke-width:2;stroke-dasharray:6 3}.eta{stroke:#4e79a7;stroke-width:2;"
    "stroke-dasharray:2 2}.finish{stroke:#000;stroke-width:1}"
    ".slo-at_risk{fill:#f28e2b}.slo-missed{fill:#c00}.slo-met{fill:#2e9d4a}"
    ".legend .key{margin-right:12px;white-space:nowrap}.sw{display:"
    "inline-block;width:14px;height:3px;vertical-align:middle}.sw.done{"
    "background:#2e9d4a}.sw.eta{background:#4e79a7}.sw.finish{background:"
    "#000}.sw.deadline{background:#c00}.meta td:first-child{font-weight:"
    "bold}";

static void header(FILE *f, const rp *r)
{
    const char *rows[][2] = {
        {"request", r->id},        {"workflow", r->workflow},
        {"dataset", r->dataset},   {"ROI (voxels)", r->roi},
        {"submitted", r->submitted}, {"accepted", r->accepted},
        {"deadline", r->deadline}, {"finished", r->finished},
        {"state", r->state},       {"outcome", r->outcome},
        {"SLO", r->slo},
    };
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<title>cnx run report: ", f);
    esc(f, r->id);
    fprintf(f, "</title>\n<style>%s</style></head>\n<body>\n"
               "<h1>Run report: <span id=\"request-id\">", css);
    esc(f, r->id);
    fputs("</span></h1>\n<table class=\"meta\">\n", f);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        fprintf(f, "<tr><td>%s</td><td>", rows[i][0]);
        esc(f, rows[i][1][0] ? rows[i][1] : "-");
        fputs("</td></tr>\n", f);
    }
    fprintf(f, "<tr><td>tasks</td><td>%lld planned in %zu stage(s)</td>"
               "</tr>\n</table>\n", r->ntasks, r->nstages);
}

static int write_file(const char *dir, const char *name, rp *r,
                      const json_t *state, int html)
{
    size_t n = strlen(dir) + strlen(name) + 8;
    char *path = malloc(n), *tmp = malloc(n + 4);
    FILE *f;
    int rc = 0;
    if (path == NULL || tmp == NULL)
        abort();
    snprintf(path, n, "%s/%s", dir, name);
    snprintf(tmp, n + 4, "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        rc = cnx_error_set(CNX_EIO, 0, "cannot write %s: %s", tmp,
                           strerror(errno));
        goto done;
    }
    if (html) {
        header(f, r);
        timeline(f, r);
        costs(f, r);
        durations(f, r);
        slo(f, r);
        identity(f, r);
        viewer(f, r, state);
        fputs("<p class=\"foot\">Made by cnx-report from the ledger ", f);
        esc(f, r->o->ledger);
        fputs(" (docs/report.md).</p>\n</body></html>\n", f);
    } else if (json_dumpf(state, f, JSON_INDENT(2) | JSON_REAL_PRECISION(12)) != 0 ||
               fputc('\n', f) == EOF) {
        errno = EIO;
    }
    if (ferror(f)) {
        fclose(f);
        rc = cnx_error_set(CNX_EIO, 0, "cannot write %s", tmp);
    } else if (fclose(f) != 0) {
        rc = cnx_error_set(CNX_EIO, 0, "cannot write %s: %s", tmp,
                           strerror(errno));
    } else if (rename(tmp, path) != 0) {
        rc = cnx_error_set(CNX_EIO, 0, "cannot rename %s to %s: %s", tmp,
                           path, strerror(errno));
    }
    if (rc != 0)
        unlink(tmp);
done:
    free(path);
    free(tmp);
    return rc;
}

/* mkdir -p: the directory and any missing parents. */
static int make_dir(const char *dir)
{
    struct stat sb;
    char *p = strdup(dir);
    if (p == NULL)
        abort();
    for (char *q = p + 1; *q != '\0'; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            free(p);
            return cnx_error_set(CNX_EIO, 0, "cannot create %s: %s", dir,
                                 strerror(e));
        }
        *q = '/';
    }
    free(p);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return cnx_error_set(CNX_EIO, 0, "cannot create %s: %s", dir,
                             strerror(errno));
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cnx_error_set(CNX_EIO, 0, "%s is not a directory", dir);
    return 0;
}

static void rp_dispose(rp *r)
{
    char **strs[] = {&r->id, &r->workflow, &r->dataset, &r->roi,
                     &r->submitted, &r->deadline, &r->state, &r->outcome,
                     &r->finished, &r->slo, &r->eta, &r->progress_at,
                     &r->accepted};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        free(*strs[i]);
    for (size_t s = 0; s < r->nstages; s++) {
        rp_stage *st = &r->stages[s];
        free(st->name);
        free(st->worker);
        free(st->kind);
        free(st->out_layer);
        free(st->out_scale);
        free(st->in_layer);
    }
    free(r->stages);
    for (size_t i = 0; i < r->nbars; i++)
        free(r->bars[i].title);
    free(r->bars);
    free(r->done_t);
    sqlite3_close(r->db);
}

int cnx_report_write(const cnx_report_opts *o)
{
    rp r;
    json_t *state = NULL;
    int rc;

    assert(o != NULL && o->ledger != NULL && o->request != NULL &&
           o->out_dir != NULL);
    memset(&r, 0, sizeof(r));
    r.o = o;
    rc = open_ledger(&r);
    if (rc == 0)
        rc = read_request(&r);
    if (rc == 0)
        rc = read_stages(&r);
    if (rc == 0)
        rc = read_bars(&r);
    if (rc == 0)
        rc = read_costs(&r);
    if (rc != 0)
        goto done;
    pack_lanes(&r);
    state = ng_state(&r);
    rc = make_dir(o->out_dir);
    if (rc == 0)
        rc = write_file(o->out_dir, "neuroglancer.json", &r, state, 0);
    if (rc == 0)
        rc = write_file(o->out_dir, "index.html", &r, state, 1);
done:
    json_decref(state);
    rp_dispose(&r);
    return rc;
}
