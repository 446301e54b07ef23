/*
 * controller_ledger.c - the ledger layer of the controller: the SQLite
 * file (opened, created at this controller's schema revision, migrated
 * from older ones), the prepared-statement cache and the plan cache (a
 * request's workflow and plan, rebuilt from its ledger rows). It knows
 * nothing of Kafka or of messages. The layers above it, each calling only
 * downwards: controller_apply.c (the fold: a message into rows),
 * controller_decide.c (decisions from rows, published signed, then
 * applied through the fold), controller_metrics.c (rows into Prometheus
 * text), and controller.c (the loop: Kafka in, apply, decide).
 */
#include "controller_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "json_int.h"
#include "ledger_schema.sql.h"

double ctl_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ctl_now_text(char out[32])
{
    cnx_rfc3339_format(ctl_wall(), out);
}

/* ---- SQLite helpers ------------------------------------------------- */

sqlite3_stmt *ctl_stmt(ctl *c, const char *sql)
{
    int i;
    for (i = 0; i < CTL_MAX_STMTS && c->stmts[i].sql != NULL; i++) {
        if (c->stmts[i].sql == sql) {
            sqlite3_reset(c->stmts[i].st);
            sqlite3_clear_bindings(c->stmts[i].st);
            return c->stmts[i].st;
        }
    }
    if (i == CTL_MAX_STMTS) {
        cnx_error_set(CNX_ENOMEM, 0, "ledger: statement cache full");
        return NULL;
    }
    if (sqlite3_prepare_v2(c->db, sql, -1, &c->stmts[i].st, NULL) !=
        SQLITE_OK) {
        cnx_error_set(CNX_EIO, 0, "ledger: %s (in: %.80s)",
                      sqlite3_errmsg(c->db), sql);
        CNX_ERROR("controller", "%s", cnx_error_last()->message);
        return NULL;
    }
    c->stmts[i].sql = sql;
    return c->stmts[i].st;
}

int ctl_exec(ctl *c, const char *sql)
{
    char *err = NULL;
    /* A cached statement left on a row holds a read transaction open.
     * At BEGIN: if another process (cnx-controller archive) committed
     * since, taking the write lock from that stale snapshot fails at once
     * with SQLITE_BUSY instead of waiting. At COMMIT: the automatic
     * checkpoint that follows cannot run, so the WAL never restarts and
     * grows with every transaction (630 MB for a 63 MB ledger of 10^4
     * tasks, ledger.db untouched until the controller stopped). Release
     * them all at both. */
    if (strncmp(sql, "BEGIN", 5) == 0 || strcmp(sql, "COMMIT") == 0)
        for (int i = 0; i < CTL_MAX_STMTS && c->stmts[i].sql != NULL; i++)
            sqlite3_reset(c->stmts[i].st);
    if (sqlite3_exec(c->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        int rc = cnx_error_set(CNX_EIO, 0, "ledger: %s", err ? err : "?");
        sqlite3_free(err);
        return rc;
    }
    return 0;
}

int ctl_done(ctl *c, sqlite3_stmt *st)
{
    int rc;
    if (st == NULL)
        return CNX_EIO;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc != SQLITE_DONE)
        return cnx_error_set(CNX_EIO, 0, "ledger: %s", sqlite3_errmsg(c->db));
    return 0;
}

void ctl_bind_text(sqlite3_stmt *st, int i, const char *text)
{
    if (text == NULL)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_text(st, i, text, -1, SQLITE_TRANSIENT);
}

/*
 * Bring the ledger up to this controller's revision (ledger_schema.sql.h):
 * a new file is created at it; an older one gets each missing step, in one
 * transaction; a newer one is refused. A file of revision 1 has no
 * `revision` row (its releases table has no manifest column).
 */
static int ledger_migrate(ctl *c)
{
    int64_t rev = CNX_LEDGER_SCHEMA_REVISION;
    char text[16];
    sqlite3_stmt *st;
    int rc, have_row = 0;

    st = ctl_stmt(c, "SELECT value FROM meta WHERE key = 'revision'");
    if (st == NULL)
        return CNX_EIO;
    if (sqlite3_step(st) == SQLITE_ROW) {
        rev = sqlite3_column_int64(st, 0);
        have_row = 1;
        sqlite3_reset(st); /* a stepped statement holds a read transaction */
    } else {
        sqlite3_reset(st);
        st = ctl_stmt(c, "SELECT count(*) FROM pragma_table_info('releases') "
                         "WHERE name = 'manifest'");
        if (st == NULL)
            return CNX_EIO;
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 0)
            rev = 1;
        sqlite3_reset(st);
    }
    if (rev > CNX_LEDGER_SCHEMA_REVISION)
        return cnx_error_set(CNX_EINVAL, 0,
                             "ledger %s has revision %lld of schema %d; "
                             "this controller knows revision %d (use a newer "
                             "controller)",
                             c->o->ledger, (long long)rev,
                             CNX_LEDGER_SCHEMA_VERSION,
                             CNX_LEDGER_SCHEMA_REVISION);
    if (have_row && rev == CNX_LEDGER_SCHEMA_REVISION)
        return 0; /* nothing to write */
    rc = ctl_exec(c, "BEGIN IMMEDIATE");
    for (int64_t r = rev < 1 ? 1 : rev;
         rc == 0 && r < CNX_LEDGER_SCHEMA_REVISION; r++) {
        CNX_INFO("controller", "ledger %s: revision %lld -> %lld", c->o->ledger,
                 (long long)r, (long long)r + 1);
        rc = ctl_exec(c, ledger_migrate_sql[r]);
    }
    snprintf(text, sizeof(text), "%d", CNX_LEDGER_SCHEMA_REVISION);
    st = rc == 0 ? ctl_stmt(c, "INSERT OR REPLACE INTO meta(key, value) "
                               "VALUES('revision', ?)")
                 : NULL;
    if (rc == 0 && st == NULL)
        rc = CNX_EIO;
    if (rc == 0) {
        ctl_bind_text(st, 1, text);
        rc = ctl_done(c, st);
    }
    if (rc == 0)
        rc = ctl_exec(c, "COMMIT");
    else
        ctl_exec(c, "ROLLBACK");
    return rc;
}

int ctl_ledger_open(ctl *c)
{
    char version[16];
    int rc;
    if (sqlite3_open_v2(c->o->ledger, &c->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                            SQLITE_OPEN_FULLMUTEX,
                        NULL) != SQLITE_OK)
        return cnx_error_set(CNX_EIO, 0, "ledger %s: %s", c->o->ledger,
                             c->db ? sqlite3_errmsg(c->db) : "cannot open");
    sqlite3_busy_timeout(c->db, 10000);
    /* WAL: readers (sqlite3, cnx-reprocess, auditors) never block the
     * writer. NORMAL sync is safe against a killed process; a power cut
     * can lose the last transactions, which are simply read again from
     * the log (their positions are lost with them). */
    /* 16 KiB pages hold a lineage row (an envelope of a few KiB) without
     * overflow pages; the page size only applies to a new file. 64 MiB
     * of page cache keeps the indexes the fold touches in memory. */
    rc = ctl_exec(c, "PRAGMA page_size=16384; PRAGMA journal_mode=WAL;"
                     "PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;"
                     "PRAGMA foreign_keys=OFF;");
    if (rc == 0)
        rc = ctl_exec(c, ledger_schema_sql);
    if (rc != 0)
        return rc;
    snprintf(version, sizeof(version), "%d", CNX_LEDGER_SCHEMA_VERSION);
    sqlite3_stmt *st = ctl_stmt(
        c, "INSERT OR IGNORE INTO meta(key, value) VALUES('schema', ?)");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, version);
    rc = ctl_done(c, st);
    if (rc != 0)
        return rc;
    st = ctl_stmt(c, "SELECT value FROM meta WHERE key = 'schema'");
    if (st != NULL && sqlite3_step(st) == SQLITE_ROW &&
        strcmp((const char *)sqlite3_column_text(st, 0), version) != 0) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "ledger %s has schema %s; this controller "
                           "writes schema %s (rebuild it with --rebuild "
                           "into a new file)",
                           c->o->ledger, sqlite3_column_text(st, 0), version);
        sqlite3_reset(st);
        return rc;
    }
    /* Reset, or the connection keeps a read transaction open for its
     * whole life and SQLite can never restart the WAL: ledger.db-wal
     * would grow with every commit until the controller stops. */
    if (st != NULL)
        sqlite3_reset(st);
    return ledger_migrate(c);
}

/* ---- trusted keys ---------------------------------------------------- */


/* ---- the plan of a request ------------------------------------------------ */

ctl_plan *ctl_plan_get(ctl *c, const char *request)
{
    sqlite3_stmt *st;
    cnx_plan_external *ext = NULL;
    size_t next = 0;
    json_t *plan = NULL, *roi = NULL;
    cnx_workflow *wf = NULL;
    cnx_plan *p = NULL;
    cnx_box box;
    ctl_plan *grown, *out = NULL;
    char *ext_text = NULL;
    int rc;

    for (size_t i = 0; i < c->nplans; i++)
        if (strcmp(c->plans[i].request, request) == 0)
            return &c->plans[i];
    st = ctl_stmt(c, "SELECT workflow_json, dataset, roi, plan FROM requests "
                     "WHERE id = ? AND plan IS NOT NULL");
    if (st == NULL)
        return NULL;
    ctl_bind_text(st, 1, request);
    if (sqlite3_step(st) != SQLITE_ROW) {
        cnx_error_set(CNX_ENOTFOUND, 0, "request %s has no plan", request);
        return NULL;
    }
    {
        const char *wj = (const char *)sqlite3_column_text(st, 0);
        const char *ds = (const char *)sqlite3_column_text(st, 1);
        const char *rj = (const char *)sqlite3_column_text(st, 2);
        const char *pj = (const char *)sqlite3_column_text(st, 3);
        int64_t lo[3], hi[3];
        rc = cnx_workflow_parse(&wf, wj, strlen(wj));
        if (rc == 0)
            rc = cnx__json_parse(&roi, rj, strlen(rj), CNX_ECORRUPT, "roi");
        if (rc == 0)
            rc = cnx__json_ivec(json_object_get(roi, "min"), 3, INT64_MIN / 4,
                                INT64_MAX / 4, lo, CNX_ECORRUPT, "roi.min");
        if (rc == 0)
            rc = cnx__json_ivec(json_object_get(roi, "max"), 3, INT64_MIN / 4,
                                INT64_MAX / 4, hi, CNX_ECORRUPT, "roi.max");
        if (rc == 0)
            rc = cnx__json_parse(&plan, pj, strlen(pj), CNX_ECORRUPT, "plan");
        if (rc == 0) {
            ext_text = json_dumps(json_object_get(plan, "externals"),
                                  JSON_COMPACT | JSON_SORT_KEYS);
            rc = ext_text ? cnx_plan_externals_from_json(&ext, &next, ext_text,
                                                         strlen(ext_text))
                          : cnx_error_set(CNX_ECORRUPT, 0,
                                          "plan: no externals");
        }
        if (rc == 0) {
            box = cnx_box_make(lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]);
            rc = cnx_plan_new_with(&p, wf, ds, &box, ext, next);
        }
    }
    if (rc != 0)
        goto done;
    grown = realloc(c->plans, (c->nplans + 1) * sizeof(*c->plans));
    if (grown == NULL) {
        cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        goto done;
    }
    c->plans = grown;
    out = &c->plans[c->nplans++];
    snprintf(out->request, sizeof(out->request), "%s", request);
    out->wf = wf;
    out->plan = p;
    /* The plan points at wf: both now belong to the cache. */
    wf = NULL;
    p = NULL;
done:
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    free(ext);
    free(ext_text);
    json_decref(plan);
    json_decref(roi);
    return out;
}
