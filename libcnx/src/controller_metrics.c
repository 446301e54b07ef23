/*
 * controller_metrics.c - the controller's Prometheus metrics: per request
 * and stage, tasks by state, retried tasks, CPU time, mm³ and $/mm³; per
 * request, ETA, deadline and SLO state; per stage and lane, released tasks
 * no worker has started; violations recorded; messages applied. Rendered
 * from the ledger by the main thread once per progress period; each query
 * reads only open requests' rows (CROSS JOIN keeps `requests` outer: a
 * finished request's rows are never visited); the HTTP thread
 * (http_metrics.c) serves a copy, behind whether the controller is
 * catching up (an atomic the main thread sets; no ledger read then).
 */
#include "controller_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/task.h"
#include "worker_int.h"

static atomic_int stop_server;
static atomic_int catching_up;

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void emit(buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void emit(buf *b, const char *fmt, ...)
{
    va_list ap;
    int w;
    if (b->p == NULL)
        return;
    for (;;) {
        va_start(ap, fmt);
        w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (w < 0)
            return;
        if ((size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        char *g = realloc(b->p, 2 * b->cap + (size_t)w);
        if (g == NULL)
            return;
        b->p = g;
        b->cap = 2 * b->cap + (size_t)w;
    }
}

static double seconds_until(const char *text, double now)
{
    int64_t t;
    return text && cnx_rfc3339_parse(text, &t) == 0 ? (double)t - now : NAN;
}

/* Per request and stage of open requests: tasks retried (more than one
 * attempt), CPU seconds, mm³ processed and, with --price-per-core-hour,
 * dollars per mm³ (the stage_costs view: succeeded attempts only,
 * duplicates counted). */
static void emit_costs(ctl *c, buf *b)
{
    double price = c->o->price_per_core_hour;
    sqlite3_stmt *st;

    emit(b, "# HELP cnx_request_retried_tasks Tasks of an open request "
            "that needed more than one attempt, by stage.\n"
            "# TYPE cnx_request_retried_tasks gauge\n");
    st = ctl_stmt(c, "SELECT t.request, t.stage, sum(t.last_attempt > 1) "
                     "FROM requests r CROSS JOIN tasks t ON t.request = "
                     "r.id WHERE r.state = 'accepted' GROUP BY t.request, "
                     "t.stage ORDER BY 1, 2");
    while (st != NULL && sqlite3_step(st) == SQLITE_ROW)
        emit(b,
             "cnx_request_retried_tasks{request=\"%s\",stage=\"%s\"} "
             "%lld\n",
             sqlite3_column_text(st, 0), sqlite3_column_text(st, 1),
             (long long)sqlite3_column_int64(st, 2));
    emit(b, "# HELP cnx_request_cpu_seconds CPU time of the succeeded "
            "attempts of an open request, by stage (/ 3600: core-hours).\n"
            "# TYPE cnx_request_cpu_seconds gauge\n"
            "# HELP cnx_request_processed_mm3 Cubic millimetres processed "
            "by the succeeded attempts of an open request, by stage.\n"
            "# TYPE cnx_request_processed_mm3 gauge\n");
    if (price >= 0)
        emit(b, "# HELP cnx_request_cost_per_mm3_dollars Core-hours times "
                "--price-per-core-hour per cubic millimetre processed, by "
                "stage of an open request.\n"
                "# TYPE cnx_request_cost_per_mm3_dollars gauge\n");
    /* The sums of the stage_costs view (docs/ledger.md), written out:
     * joined to the view, SQLite materializes it for every request of
     * the ledger. */
    st = ctl_stmt(c, "SELECT s.request, s.stage, coalesce(sum(a.cpu_s), 0), "
                     "coalesce(sum(a.voxels), 0) * s.res_x * s.res_y * "
                     "s.res_z * 1e-18 FROM requests r CROSS JOIN stages s ON "
                     "s.request = r.id LEFT JOIN tasks t ON t.request = "
                     "s.request AND t.stage = s.stage LEFT JOIN attempts a "
                     "ON a.task_key = t.task_key AND a.request = t.request "
                     "AND a.state = 'succeeded' WHERE r.state = 'accepted' "
                     "GROUP BY s.request, s.stage ORDER BY 1, 2");
    while (st != NULL && sqlite3_step(st) == SQLITE_ROW) {
        const char *req = (const char *)sqlite3_column_text(st, 0);
        const char *stage = (const char *)sqlite3_column_text(st, 1);
        double cpu_s = sqlite3_column_double(st, 2);
        double mm3 = sqlite3_column_double(st, 3);
        emit(b, "cnx_request_cpu_seconds{request=\"%s\",stage=\"%s\"} %.9g\n",
             req, stage, cpu_s);
        emit(b,
             "cnx_request_processed_mm3{request=\"%s\",stage=\"%s\"} "
             "%.9g\n",
             req, stage, mm3);
        if (price >= 0 && mm3 > 0)
            emit(b,
                 "cnx_request_cost_per_mm3_dollars{request=\"%s\","
                 "stage=\"%s\"} %.9g\n",
                 req, stage, cpu_s / 3600.0 * price / mm3);
    }
}

/* Per worker stage (the `stage` label the workers use; its consumer group
 * is cnx.<stage>) and lane: tasks of open requests released to it that no
 * worker has started (no event of their latest attempt, or only a
 * preemption): the ledger's view of the group's lag. Both lanes of every
 * stage of an open request, 0 included, so that a rule has a series. */
static void emit_queued(ctl *c, buf *b)
{
    sqlite3_stmt *st;
    emit(b, "# HELP cnx_stage_queued_tasks Tasks of open requests released "
            "to a worker stage's lane that no worker has started yet.\n"
            "# TYPE cnx_stage_queued_tasks gauge\n");
    st = ctl_stmt(
        c, "SELECT w.worker, l.lane, (SELECT count(*) FROM requests q CROSS "
           "JOIN tasks t INDEXED BY tasks_by_state ON t.request = q.id "
           "CROSS JOIN stages g ON g.request = t.request AND g.stage = "
           "t.stage WHERE q.state = 'accepted' AND "
           "t.state = 'released' AND g.worker = w.worker AND "
           "coalesce(t.lane, 'bulk') = l.lane AND NOT EXISTS (SELECT 1 FROM "
           "attempts a WHERE a.task_key = t.task_key AND a.request = "
           "t.request AND a.attempt = t.last_attempt AND a.state != "
           "'preempted')) FROM (SELECT DISTINCT g.worker FROM requests r "
           "CROSS JOIN stages g ON g.request = r.id WHERE r.state = "
           "'accepted') w, "
           "(SELECT 'bulk' AS lane UNION ALL SELECT 'urgent') l "
           "ORDER BY 1, 2");
    while (st != NULL && sqlite3_step(st) == SQLITE_ROW)
        emit(b, "cnx_stage_queued_tasks{stage=\"%s\",lane=\"%s\"} %lld\n",
             sqlite3_column_text(st, 0), sqlite3_column_text(st, 1),
             (long long)sqlite3_column_int64(st, 2));
}

void cnx__ctl_metrics_catching_up(int on)
{
    atomic_store(&catching_up, on);
}

void ctl_metrics_update(ctl *c)
{
    buf b = {malloc(8192), 0, 8192};
    double now = ctl_wall();
    sqlite3_stmt *st;

    emit(&b, "# HELP cnx_controller_messages_applied_total Messages applied "
             "to the ledger since start.\n"
             "# TYPE cnx_controller_messages_applied_total counter\n"
             "cnx_controller_messages_applied_total %lld\n",
         (long long)c->applied);
    emit(&b, "# HELP cnx_request_tasks Tasks of a running request by stage "
             "and state.\n# TYPE cnx_request_tasks gauge\n");
    st = ctl_stmt(c, "SELECT t.request, t.stage, t.state, count(*) FROM "
                     "requests r CROSS JOIN tasks t ON t.request = r.id "
                     "WHERE r.state = 'accepted' GROUP BY t.request, "
                     "t.stage, t.state ORDER BY 1, 2, 3");
    while (st != NULL && sqlite3_step(st) == SQLITE_ROW)
        emit(&b, "cnx_request_tasks{request=\"%s\",stage=\"%s\",state=\"%s\"}"
                 " %lld\n",
             sqlite3_column_text(st, 0), sqlite3_column_text(st, 1),
             sqlite3_column_text(st, 2),
             (long long)sqlite3_column_int64(st, 3));
    emit(&b, "# HELP cnx_request_eta_seconds Seconds from now to the "
             "request's estimated completion (NaN: no estimate yet).\n"
             "# TYPE cnx_request_eta_seconds gauge\n"
             "# HELP cnx_request_deadline_seconds Seconds from now to the "
             "request's deadline.\n"
             "# TYPE cnx_request_deadline_seconds gauge\n"
             "# HELP cnx_request_slo The request's SLO state (1 for the "
             "current one).\n# TYPE cnx_request_slo gauge\n");
    st = ctl_stmt(c, "SELECT id, eta, deadline, slo FROM requests WHERE "
                     "state = 'accepted' ORDER BY id");
    while (st != NULL && sqlite3_step(st) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        emit(&b, "cnx_request_eta_seconds{request=\"%s\"} %.1f\n", id,
             seconds_until((const char *)sqlite3_column_text(st, 1), now));
        emit(&b, "cnx_request_deadline_seconds{request=\"%s\"} %.1f\n", id,
             seconds_until((const char *)sqlite3_column_text(st, 2), now));
        emit(&b, "cnx_request_slo{request=\"%s\",state=\"%s\"} 1\n", id,
             sqlite3_column_text(st, 3));
    }
    emit_costs(c, &b);
    emit_queued(c, &b);
    emit(&b, "# HELP cnx_ledger_violations_total Violations recorded in the "
             "ledger, by kind (reproducibility: a task's outputs differ "
             "from an earlier run's; immutability: a write-once object "
             "refused other bytes).\n"
             "# TYPE cnx_ledger_violations_total counter\n");
    st = ctl_stmt(c, "SELECT k.kind, (SELECT count(*) FROM violations v "
                     "WHERE v.kind = k.kind) FROM (SELECT 'immutability' AS "
                     "kind UNION ALL SELECT 'reproducibility') k ORDER BY 1");
    while (st != NULL && sqlite3_step(st) == SQLITE_ROW)
        emit(&b, "cnx_ledger_violations_total{kind=\"%s\"} %lld\n",
             sqlite3_column_text(st, 0),
             (long long)sqlite3_column_int64(st, 1));
    emit(&b,
         "# HELP cnx_controller_last_update_timestamp_seconds When "
         "these metrics were last read from the ledger (Unix time; "
         "once per progress period while the controller runs).\n"
         "# TYPE cnx_controller_last_update_timestamp_seconds gauge\n"
         "cnx_controller_last_update_timestamp_seconds %.3f\n",
         now);
    pthread_mutex_lock(&c->mlock);
    free(c->metrics);
    c->metrics = b.p;
    pthread_mutex_unlock(&c->mlock);
}

static char *render(void *ctx)
{
    ctl *c = ctx;
    char *copy;
    buf b = {malloc(4096), 0, 4096};
    emit(&b,
         "# HELP cnx_controller_catching_up 1 while the controller "
         "applies the log up to its end before deciding anything (at "
         "start, and after the log was reset).\n"
         "# TYPE cnx_controller_catching_up gauge\n"
         "cnx_controller_catching_up %d\n",
         atomic_load(&catching_up));
    pthread_mutex_lock(&c->mlock);
    if (c->metrics != NULL)
        emit(&b, "%s", c->metrics);
    pthread_mutex_unlock(&c->mlock);
    copy = b.p;
    return copy;
}

int cnx__ctl_metrics_start(ctl *c, int port)
{
    atomic_store(&stop_server, 0);
    return cnx__http_metrics_start(port, render, c, &stop_server);
}

void cnx__ctl_metrics_stop(void)
{
    atomic_store(&stop_server, 1);
    cnx__http_metrics_stop();
}
