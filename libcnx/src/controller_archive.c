/*
 * controller_archive.c - `cnx-controller archive`: moves one finished
 * request out of the live ledger into its own SQLite file (docs/ledger.md,
 * "Archiving a request").
 *
 * The archive is a ledger of the same schema (created through
 * ctl_ledger_open, so controller_ledger.c stays the one owner of the
 * schema) holding that request's rows of every table, the lineage rows
 * whole, and one `archives` row saying what was archived. It is written
 * in two phases:
 *   1. the rows are copied from a read snapshot of the live ledger into
 *      OUT.tmp (rollback journal, synchronous FULL), committed, fsynced and
 *      renamed to OUT, and the directory fsynced;
 *   2. in one write transaction on the live ledger, which first checks
 *      that the request's rows are still those copied, the rows are
 *      deleted and each archived lineage row becomes a stub: its place in
 *      the hash chain (partition, offset, envelope_digest, verified, prev,
 *      row_digest) without the envelope, naming OUT in `archive`.
 * A crash between the two leaves OUT complete and the live ledger
 * untouched: running the command again writes OUT again and finishes.
 * Once done, running it again changes nothing. The running controller may
 * keep using the live ledger (SQLite's locks; phase 2 holds the write lock
 * for as long as its deletes take).
 */
#include "controller_int.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/controller.h"
#include "cnx/error.h"
#include "cnx/log.h"

typedef struct arc_opts {
    const char *ledger, *request, *out;
    int quiet;
} arc_opts;

/* Per-table conditions selecting the request's rows (?1 = request id);
 * `src` is the live ledger attached to the archive's connection. */
static const struct {
    const char *table, *where;
} arc_tables[] = {
    {"requests", "id = ?1"},
    {"stages", "request = ?1"},
    {"tasks", "request = ?1"},
    {"releases", "request = ?1"},
    {"attempts", "request = ?1"},
    {"slo_events", "request = ?1"},
    {"violations", "request = ?1"},
    {"held", "request = ?1"},
    {"namespaces", "first_request = ?1"},
    {"lineage", "request = ?1 AND archive IS NULL"},
    {"manifest_facts", "manifest IN (SELECT envelope_digest FROM src.lineage "
                       "WHERE request = ?1 AND archive IS NULL)"},
    {"outputs", "task_key IN (SELECT task_key FROM src.tasks WHERE request "
                "= ?1)"},
};

static int sql_err(sqlite3 *db, const char *what)
{
    return cnx_error_set(CNX_EIO, 0, "archive: %s: %s", what,
                         sqlite3_errmsg(db));
}

static int exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        int rc = cnx_error_set(CNX_EIO, 0, "archive: %s (in: %.60s)",
                               err ? err : "?", sql);
        sqlite3_free(err);
        return rc;
    }
    return 0;
}

/* Run sql with ?1 = request; *count (if given) gets the first column of
 * the first row, or sqlite3_changes for a statement without rows. */
static int run1(sqlite3 *db, const char *sql, const char *request,
                int64_t *count)
{
    sqlite3_stmt *st = NULL;
    int step;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return sql_err(db, sql);
    if (sqlite3_bind_parameter_count(st) >= 1)
        sqlite3_bind_text(st, 1, request, -1, SQLITE_TRANSIENT);
    step = sqlite3_step(st);
    if (step == SQLITE_ROW && count != NULL)
        *count = sqlite3_column_int64(st, 0);
    else if (step == SQLITE_DONE && count != NULL)
        *count = sqlite3_changes(db);
    while (step == SQLITE_ROW)
        step = sqlite3_step(st);
    sqlite3_finalize(st);
    return step == SQLITE_DONE ? 0 : sql_err(db, sql);
}

/* A text value of the first row (ask: ?1 = request), or "" if none. */
static int text1(sqlite3 *db, const char *sql, const char *request, char *out,
                 size_t cap)
{
    sqlite3_stmt *st = NULL;
    int step;
    out[0] = '\0';
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return sql_err(db, sql);
    if (sqlite3_bind_parameter_count(st) >= 1)
        sqlite3_bind_text(st, 1, request, -1, SQLITE_TRANSIENT);
    step = sqlite3_step(st);
    if (step == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return step == SQLITE_ROW || step == SQLITE_DONE ? 0 : sql_err(db, sql);
}

/* INSERT INTO main.T(cols) SELECT cols FROM src.T WHERE ...: the column
 * list is the archive's own (a migrated live file may order columns
 * differently from a new one). */
static int copy_table(sqlite3 *db, const char *table, const char *where,
                      const char *request, int64_t *rows)
{
    char cols[2048] = "", sql[128], *insert;
    sqlite3_stmt *st = NULL;
    size_t n = 0;
    int rc;
    snprintf(sql, sizeof(sql),
             "SELECT name FROM pragma_table_info('%s') ORDER BY cid", table);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return sql_err(db, table);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int w = snprintf(cols + n, sizeof(cols) - n, "%s\"%s\"", n ? ", " : "",
                         sqlite3_column_text(st, 0));
        if (w < 0 || (size_t)w >= sizeof(cols) - n) {
            sqlite3_finalize(st);
            return cnx_error_set(CNX_EINVAL, 0,
                                 "archive: table %s has too "
                                 "many columns",
                                 table);
        }
        n += (size_t)w;
    }
    sqlite3_finalize(st);
    insert = sqlite3_mprintf("INSERT INTO main.%s(%s) SELECT %s FROM "
                             "src.%s WHERE %s",
                             table, cols, cols, table, where);
    if (insert == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    rc = run1(db, insert, request, rows);
    sqlite3_free(insert);
    return rc;
}

static int fsync_path(const char *path, int dir)
{
    int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    int rc = 0;
    if (fd < 0 || fsync(fd) != 0)
        rc = cnx_error_set(CNX_EIO, 0, "archive: fsync %s: %s", path,
                           strerror(errno));
    if (fd >= 0)
        close(fd);
    return rc;
}

static void ledger_close(ctl *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < CTL_MAX_STMTS && c->stmts[i].sql; i++)
        sqlite3_finalize(c->stmts[i].st);
    sqlite3_close(c->db);
    free(c);
}

static int ledger_open(ctl **out, const cnx_controller_opts *o)
{
    ctl *c = calloc(1, sizeof(*c));
    int rc;
    *out = NULL;
    if (c == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    c->o = o;
    rc = ctl_ledger_open(c);
    if (rc != 0) {
        ledger_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* The request's rows counted in `db` (schema "main" or "src"): what phase 2
 * checks is unchanged since phase 1 copied it. */
static int count_rows(sqlite3 *db, const char *schema, const char *request,
                      int64_t n[4])
{
    static const char *const q[4] = {
        "SELECT count(*) FROM %s.tasks WHERE request = ?1",
        "SELECT count(*) FROM %s.releases WHERE request = ?1",
        "SELECT count(*) FROM %s.attempts WHERE request = ?1",
        ("SELECT count(*) FROM %s.lineage WHERE request = ?1 AND archive "
         "IS NULL")};
    char sql[256];
    int rc = 0;
    for (int i = 0; i < 4 && rc == 0; i++) {
        snprintf(sql, sizeof(sql), q[i], schema);
        rc = run1(db, sql, request, &n[i]);
    }
    return rc;
}

/* The lineage rows that stay whole in the live ledger: manifests another
 * request's task reuses (only a `reused` decision names a manifest of
 * another request). */
#define ARC_SHARED                                                             \
    "SELECT manifest FROM %s.releases WHERE type = 'reused' AND request != "   \
    "?1 AND manifest IS NOT NULL"

/* Phase 1: write OUT. */
static int write_archive(const arc_opts *a, const char *out_abs,
                         const char *tmp, int64_t counts[4], int64_t *nstubs)
{
    cnx_controller_opts o;
    ctl *c = NULL;
    char sql[512], now[32], *attach = NULL;
    int64_t tasks = 0, lineage = 0, ignored;
    int rc;

    memset(&o, 0, sizeof(o));
    o.ledger = tmp;
    unlink(tmp);
    rc = ledger_open(&c, &o);
    if (rc == 0)
        rc = exec(c->db, "PRAGMA journal_mode=DELETE; "
                         "PRAGMA synchronous=FULL;");
    attach = sqlite3_mprintf("ATTACH DATABASE %Q AS src", a->ledger);
    if (rc == 0 && attach == NULL)
        rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    if (rc == 0)
        rc = exec(c->db, attach);
    if (rc == 0)
        rc = exec(c->db, "BEGIN");
    for (size_t i = 0; rc == 0 && i < sizeof(arc_tables) / sizeof(*arc_tables);
         i++) {
        int64_t n = 0;
        rc = copy_table(c->db, arc_tables[i].table, arc_tables[i].where,
                        a->request, &n);
        if (strcmp(arc_tables[i].table, "tasks") == 0)
            tasks = n;
        if (strcmp(arc_tables[i].table, "lineage") == 0)
            lineage = n;
    }
    if (rc == 0)
        rc = count_rows(c->db, "main", a->request, counts);
    if (rc == 0) {
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM main.lineage WHERE envelope_digest "
                 "NOT IN (" ARC_SHARED ")",
                 "src");
        rc = run1(c->db, sql, a->request, nstubs);
    }
    if (rc == 0)
        rc = run1(c->db,
                  "INSERT OR REPLACE INTO main.meta(key, value) SELECT key, "
                  "value FROM src.meta WHERE key = 'cluster_id'",
                  NULL, &ignored);
    if (rc == 0)
        rc = run1(c->db,
                  "INSERT OR REPLACE INTO main.meta(key, value) "
                  "VALUES('archive', ?1)",
                  a->request, &ignored);
    ctl_now_text(now);
    if (rc == 0) {
        char *ins = sqlite3_mprintf(
            "INSERT INTO main.archives(request, file, time, tasks, lineage, "
            "stubs) VALUES(?1, %Q, %Q, %lld, %lld, %lld)",
            out_abs, now, (long long)tasks, (long long)lineage,
            (long long)*nstubs);
        rc = ins ? run1(c->db, ins, a->request, &ignored)
                 : cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        sqlite3_free(ins);
    }
    if (rc == 0)
        rc = exec(c->db, "COMMIT");
    else if (c != NULL)
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
    if (c != NULL)
        sqlite3_exec(c->db, "DETACH DATABASE src", NULL, NULL, NULL);
    sqlite3_free(attach);
    ledger_close(c);
    if (rc == 0)
        rc = fsync_path(tmp, 0);
    if (rc == 0 && rename(tmp, a->out) != 0)
        rc = cnx_error_set(CNX_EIO, 0, "archive: rename %s to %s: %s", tmp,
                           a->out, strerror(errno));
    if (rc == 0) {
        char dir[PATH_MAX + 256];
        const char *slash;
        snprintf(dir, sizeof(dir), "%s", out_abs);
        slash = strrchr(dir, '/');
        if (slash != NULL)
            dir[slash == dir ? 1 : slash - dir] = '\0';
        rc = fsync_path(dir, 1);
    }
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* Phase 2: remove the request from the live ledger, leaving stubs. Runs
 * inside the caller's write transaction. */
static int remove_live(sqlite3 *db, const arc_opts *a, const char *out_abs,
                       const int64_t counts[4], int64_t nstubs)
{
    int64_t now_counts[4], n = 0, ignored;
    char sql[1024], when[32];
    char *q;
    int rc = count_rows(db, "main", a->request, now_counts);
    if (rc == 0 && memcmp(now_counts, counts, sizeof(now_counts)) != 0)
        return cnx_error_set(CNX_ECONFLICT, 0,
                             "request %s changed while it was archived; run "
                             "the archive again",
                             a->request);
    snprintf(sql, sizeof(sql),
             "CREATE TEMP TABLE arc_stub AS SELECT partition, offset, "
             "envelope_digest FROM main.lineage WHERE request = ?1 AND "
             "archive IS NULL AND envelope_digest NOT IN (" ARC_SHARED ")",
             "main");
    if (rc == 0)
        rc = run1(db, "DROP TABLE IF EXISTS temp.arc_stub", NULL, &ignored);
    if (rc == 0)
        rc = run1(db, sql, a->request, &ignored);
    if (rc == 0)
        rc = run1(db, "SELECT count(*) FROM temp.arc_stub", NULL, &n);
    if (rc == 0 && n != nstubs)
        rc = cnx_error_set(CNX_ECONFLICT, 0,
                           "request %s changed while it was archived; run "
                           "the archive again",
                           a->request);
    /* The chain's fields stay; what the envelope said goes. */
    q = sqlite3_mprintf(
        "UPDATE main.lineage SET envelope = '', task_key = NULL, request = "
        "NULL, stage = NULL, invocation = NULL, signer = NULL, error = NULL, "
        "archive = %Q WHERE (partition, offset) IN (SELECT partition, offset "
        "FROM temp.arc_stub)",
        out_abs);
    if (rc == 0)
        rc = q ? run1(db, q, NULL, &ignored)
               : cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    sqlite3_free(q);
    static const char *const del[] = {
        "DELETE FROM main.manifest_facts WHERE manifest IN (SELECT "
        "envelope_digest FROM temp.arc_stub) AND NOT EXISTS (SELECT 1 FROM "
        "main.lineage l WHERE l.envelope_digest = manifest_facts.manifest "
        "AND l.archive IS NULL)",
        "DELETE FROM main.outputs WHERE task_key IN (SELECT task_key FROM "
        "main.tasks WHERE request = ?1) AND NOT EXISTS (SELECT 1 FROM "
        "main.tasks t WHERE t.task_key = outputs.task_key AND t.request != "
        "?1)",
        "DELETE FROM main.attempts WHERE request = ?1",
        "DELETE FROM main.releases WHERE request = ?1",
        "DELETE FROM main.tasks WHERE request = ?1",
        "DELETE FROM main.stages WHERE request = ?1",
        "DELETE FROM main.slo_events WHERE request = ?1",
        "DELETE FROM main.violations WHERE request = ?1",
        "DELETE FROM main.held WHERE request = ?1",
        "DELETE FROM main.requests WHERE id = ?1",
        "DROP TABLE temp.arc_stub",
    };
    for (size_t i = 0; rc == 0 && i < sizeof(del) / sizeof(*del); i++)
        rc = run1(db, del[i], a->request, &ignored);
    ctl_now_text(when);
    q = sqlite3_mprintf("INSERT INTO main.archives(request, file, time, "
                        "tasks, lineage, stubs) VALUES(?1, %Q, %Q, %lld, "
                        "%lld, %lld)",
                        out_abs, when, (long long)counts[0],
                        (long long)counts[3], (long long)nstubs);
    if (rc == 0)
        rc = q ? run1(db, q, a->request, &ignored)
               : cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    sqlite3_free(q);
    return rc;
}

/* 0: archived; 1: already archived (nothing done); <0: error. */
static int archive(const arc_opts *a)
{
    cnx_controller_opts o;
    ctl *live = NULL;
    char state[32], file[PATH_MAX + 64], out_abs[PATH_MAX + 256];
    char tmp[PATH_MAX + 16], cwd[PATH_MAX];
    int64_t n = 0, counts[4] = {0, 0, 0, 0}, nstubs = 0;
    double t0 = 0, t1 = 0;
    int rc, locked = 0;

    if (access(a->ledger, R_OK | W_OK) != 0)
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "ledger %s cannot be "
                             "written: %s",
                             a->ledger, strerror(errno));
    if (a->out[0] == '/')
        snprintf(out_abs, sizeof(out_abs), "%s", a->out);
    else if (getcwd(cwd, sizeof(cwd)) != NULL)
        snprintf(out_abs, sizeof(out_abs), "%s/%s", cwd, a->out);
    else
        return cnx_error_set(CNX_EIO, 0, "archive: getcwd: %s",
                             strerror(errno));
    snprintf(tmp, sizeof(tmp), "%s.tmp", a->out);
    memset(&o, 0, sizeof(o));
    o.ledger = a->ledger;
    rc = ledger_open(&live, &o);
    if (rc != 0)
        return rc;
    /* What the request is now (a read; phase 2 checks again under the
     * write lock that nothing changed). */
    rc = text1(live->db, "SELECT file FROM archives WHERE request = ?1",
               a->request, file, sizeof(file));
    if (rc == 0)
        rc = text1(live->db, "SELECT state FROM requests WHERE id = ?1",
                   a->request, state, sizeof(state));
    if (rc == 0 && state[0] == '\0' && file[0] != '\0') {
        if (!a->quiet)
            printf("request %s is already archived in %s; nothing to do\n",
                   a->request, file);
        ledger_close(live);
        return 1;
    }
    if (rc == 0 && state[0] == '\0')
        rc = cnx_error_set(CNX_ENOTFOUND, 0, "ledger %s has no request %s",
                           a->ledger, a->request);
    if (rc == 0 && strcmp(state, "done") != 0 && strcmp(state, "failed") != 0 &&
        strcmp(state, "refused") != 0)
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "request %s is %s, not finished: only a finished "
                           "request can be archived",
                           a->request, state);
    if (rc == 0)
        rc = run1(live->db,
                  "SELECT count(*) FROM tasks WHERE request = ?1 AND state = "
                  "'released'",
                  a->request, &n);
    if (rc == 0 && n > 0)
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "request %s has %lld task(s) still released: only "
                           "a finished request can be archived",
                           a->request, (long long)n);
    if (rc == 0 && access(a->out, F_OK) == 0) {
        /* Only the archive of this request may be written again (a run
         * that stopped between the two phases). */
        sqlite3 *db = NULL;
        char *uri = sqlite3_mprintf("file:%s?mode=ro", a->out);
        file[0] = '\0';
        if (uri != NULL &&
            sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                            NULL) == SQLITE_OK)
            (void)text1(db, "SELECT value FROM meta WHERE key = 'archive'",
                        NULL, file, sizeof(file));
        cnx_error_clear();
        sqlite3_close(db);
        sqlite3_free(uri);
        if (strcmp(file, a->request) != 0)
            rc = cnx_error_set(CNX_ECONFLICT, 0,
                               "--out %s exists and is not an archive of "
                               "request %s",
                               a->out, a->request);
    }
    t0 = cnx_now();
    if (rc == 0)
        rc = write_archive(a, out_abs, tmp, counts, &nstubs);
    t1 = cnx_now();
    if (rc == 0) {
        rc = exec(live->db, "BEGIN IMMEDIATE");
        locked = rc == 0;
    }
    if (rc == 0)
        rc = remove_live(live->db, a, out_abs, counts, nstubs);
    if (rc == 0)
        rc = exec(live->db, "COMMIT");
    else if (locked)
        sqlite3_exec(live->db, "ROLLBACK", NULL, NULL, NULL);
    if (rc == 0 && !a->quiet)
        printf("request %s archived in %s: %lld tasks, %lld lineage rows "
               "(%lld stubs left in %s); archive written in %.2f s, the "
               "live ledger locked for %.2f s\n",
               a->request, a->out, (long long)counts[0], (long long)counts[3],
               (long long)nstubs, a->ledger, t1 - t0, cnx_now() - t1);
    ledger_close(live);
    return rc;
}

static void archive_help(void)
{
    printf("usage: cnx-controller archive --ledger FILE --request ID --out "
           "FILE [-q]\n\n"
           "Moves a finished request (done, failed or refused; no task still\n"
           "released) out of the live ledger into its own SQLite file of the\n"
           "same schema: its requests, stages, tasks, releases, attempts,\n"
           "slo_events, violations, held, lineage (with envelopes),\n"
           "manifest_facts and outputs rows, and an `archives` row. The\n"
           "archive is written, fsynced and renamed into place before the\n"
           "live ledger changes; there each archived lineage row stays as a\n"
           "stub (its place in the hash chain, without the envelope) naming\n"
           "the archive, so the chain still checks. Running it again after it\n"
           "finished changes nothing; after a crash it finishes the job. The\n"
           "controller may keep running. See docs/ledger.md.\n\n"
           "options:\n"
           "  --ledger FILE    the live ledger\n"
           "  --request ID     the request to archive\n"
           "  --out FILE       the archive (a new file, or this request's\n"
           "                   archive from a run that stopped)\n"
           "  -q, --quiet      print nothing on success\n"
           "  --help           this text\n\n"
           "exit status: 0 archived or already archived; 1 refused or failed;\n"
           "2 bad arguments.\n");
}

int cnx_controller_archive_main(int argc, char **argv)
{
    enum { O_LEDGER = 256, O_REQUEST, O_OUT, O_HELP };
    static const struct option longopts[] = {
        {"ledger", required_argument, NULL, O_LEDGER},
        {"request", required_argument, NULL, O_REQUEST},
        {"out", required_argument, NULL, O_OUT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}};
    arc_opts a;
    int c, rc;

    memset(&a, 0, sizeof(a));
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "q", longopts, NULL)) != -1) {
        switch (c) {
        case O_LEDGER:
            a.ledger = optarg;
            break;
        case O_REQUEST:
            a.request = optarg;
            break;
        case O_OUT:
            a.out = optarg;
            break;
        case 'q':
            a.quiet = 1;
            break;
        case O_HELP:
            archive_help();
            return 0;
        default:
            fprintf(stderr,
                    "cnx-controller archive: unknown option '%s' "
                    "(see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr,
                "cnx-controller archive: unexpected argument '%s' "
                "(see --help)\n",
                argv[optind]);
        return 2;
    }
    if (a.ledger == NULL || a.request == NULL || a.out == NULL) {
        fprintf(stderr, "cnx-controller archive: --ledger, --request and "
                        "--out are required (see --help)\n");
        return 2;
    }
    if (strcmp(a.ledger, a.out) == 0) {
        fprintf(stderr,
                "cnx-controller archive: --out must not be the "
                "ledger '%s'\n",
                a.out);
        return 2;
    }
    rc = archive(&a);
    if (rc < 0) {
        fprintf(stderr, "cnx-controller archive: %s\n",
                cnx_error_last()->message);
        return 1;
    }
    return 0;
}
