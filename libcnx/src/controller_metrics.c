/*
 * controller_metrics.c - the controller's Prometheus metrics: per request
 * and stage, tasks by state; per request, ETA, deadline and SLO state;
 * messages applied. Rendered from the ledger by the main thread once per
 * progress period; the HTTP thread (http_metrics.c) serves a copy.
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
                     "tasks t JOIN requests r ON r.id = t.request WHERE "
                     "r.state = 'accepted' GROUP BY t.request, t.stage, "
                     "t.state ORDER BY 1, 2, 3");
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
    pthread_mutex_lock(&c->mlock);
    free(c->metrics);
    c->metrics = b.p;
    pthread_mutex_unlock(&c->mlock);
}

static char *render(void *ctx)
{
    ctl *c = ctx;
    char *copy;
    pthread_mutex_lock(&c->mlock);
    copy = strdup(c->metrics ? c->metrics : "");
    pthread_mutex_unlock(&c->mlock);
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
