/*
 * verify_ledger.c - cnx-verify's read-only view of a controller ledger
 * (docs/ledger.md): lineage rows and their hash chain, outputs, tasks and
 * the request's workflow. The database is opened read-only (mode=ro URI),
 * never written; every SQLite failure becomes CNX_EIO with the statement's
 * error here, in one place. The chain formula is the controller's
 * (controller_apply.c): row_digest = SHA-256 of
 * "cnx.lineage-row/1\n<prev>\n<partition>\n<offset>\n<envelope digest>\n
 * <verified>\n", prev the row before's digest in the partition (genesis:
 * sha256 and 64 zeros). Single-threaded.
 *
 * Archiving (controller_archive.c, docs/ledger.md): in a live ledger a row
 * whose `archive` names a file and whose envelope is empty is a stub of a
 * row moved there; its chain fields are checked, its envelope is not. An
 * archive file (meta `archive`) holds its request's rows only, so each
 * row's digest and envelope are checked but not its link to the row
 * before (that row is in the live ledger; acceptance/ledger_check.py
 * checks the archive against the live ledger's stubs).
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/lineage.h"
#include "json_int.h"
#include "verify_int.h"

#define GENESIS \
    "sha256:0000000000000000000000000000000000000000000000000000000000000000"

struct vf_ledger {
    sqlite3 *db;
    char *path;
    int has_archive; /* lineage.archive exists (revision 4) */
    int is_archive;  /* the file is an archive of one request */
    sqlite3_stmt *find, *output, *stage, *workflow;
};

static int sql_fail(vf_ledger *l, const char *what)
{
    return cnx_error_set(CNX_EIO, 0, "ledger %s: %s: %s", l->path, what,
                         sqlite3_errmsg(l->db));
}

int vf_ledger_open(vf_ledger **out, const char *path)
{
    vf_ledger *l = calloc(1, sizeof(*l));
    char *uri = NULL;
    sqlite3_stmt *st = NULL;
    int rc = 0;
    FILE *f;

    *out = NULL;
    if (l == NULL || (l->path = strdup(path)) == NULL) {
        free(l);
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        rc = cnx_error_set(CNX_ENOTFOUND, 0, "ledger %s cannot be read",
                           path);
        goto fail;
    }
    fclose(f);
    uri = sqlite3_mprintf("file:%s?mode=ro", path);
    if (uri == NULL ||
        sqlite3_open_v2(uri, &l->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                        NULL) != SQLITE_OK) {
        rc = cnx_error_set(CNX_EIO, 0, "ledger %s cannot be opened: %s", path,
                           l->db ? sqlite3_errmsg(l->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(l->db, 5000);
    if (sqlite3_prepare_v2(l->db,
                           "SELECT value FROM meta WHERE key = 'schema'", -1,
                           &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW ||
        strcmp((const char *)sqlite3_column_text(st, 0), "1") != 0) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "%s is not a cnx ledger of schema version 1",
                           path);
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(l->db,
                           "SELECT (SELECT count(*) FROM pragma_table_info("
                           "'lineage') WHERE name = 'archive'), (SELECT "
                           "count(*) FROM meta WHERE key = 'archive')",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        l->has_archive = sqlite3_column_int(st, 0) > 0;
        l->is_archive = sqlite3_column_int(st, 1) > 0;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(l->db,
                           "SELECT partition, offset, verified, error FROM "
                           "lineage WHERE envelope_digest = ? ORDER BY "
                           "verified DESC, partition, offset LIMIT 1",
                           -1, &l->find, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(l->db,
                           "SELECT digest FROM outputs WHERE task_key = ? "
                           "AND object = ?",
                           -1, &l->output, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(l->db,
                           "SELECT stage FROM tasks WHERE request = ? AND "
                           "task_key = ? ORDER BY idx LIMIT 1",
                           -1, &l->stage, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(l->db,
                           "SELECT workflow_json FROM requests WHERE id = ?",
                           -1, &l->workflow, NULL) != SQLITE_OK) {
        rc = cnx_error_set(CNX_ECORRUPT, 0, "ledger %s: unexpected schema: %s",
                           path, sqlite3_errmsg(l->db));
        goto fail;
    }
    sqlite3_free(uri);
    *out = l;
    return 0;
fail:
    sqlite3_finalize(st);
    sqlite3_free(uri);
    vf_ledger_close(l);
    return rc;
}

void vf_ledger_close(vf_ledger *l)
{
    if (l == NULL)
        return;
    sqlite3_finalize(l->find);
    sqlite3_finalize(l->output);
    sqlite3_finalize(l->stage);
    sqlite3_finalize(l->workflow);
    sqlite3_close(l->db);
    free(l->path);
    free(l);
}

const char *vf_ledger_path(const vf_ledger *l)
{
    return l->path;
}

static const char *text_or(sqlite3_stmt *st, int col, const char *dflt)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    return s != NULL ? s : dflt;
}

int vf_ledger_rows(vf_ledger *l, const char *request, vf_row_fn fn, void *ctx)
{
    sqlite3_stmt *st = NULL;
    int rc = 0, step;
    const char *sql =
        request != NULL
            ? "SELECT partition, offset, envelope_digest, verified, envelope "
              "FROM lineage WHERE request = ? ORDER BY partition, offset"
            : "SELECT partition, offset, envelope_digest, verified, envelope "
              "FROM lineage WHERE verified = 1 AND length(envelope) > 0 "
              "ORDER BY partition, offset";
    if (sqlite3_prepare_v2(l->db, sql, -1, &st, NULL) != SQLITE_OK)
        return sql_fail(l, "lineage");
    if (request != NULL)
        sqlite3_bind_text(st, 1, request, -1, SQLITE_TRANSIENT);
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *text = text_or(st, 4, "");
        rc = fn(ctx, sqlite3_column_int(st, 0), sqlite3_column_int64(st, 1),
                text_or(st, 2, ""), sqlite3_column_int(st, 3), text,
                (size_t)sqlite3_column_bytes(st, 4));
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = sql_fail(l, "lineage");
    sqlite3_finalize(st);
    return rc;
}

int vf_ledger_has_request(vf_ledger *l, const char *request)
{
    int rc;
    sqlite3_reset(l->workflow);
    sqlite3_bind_text(l->workflow, 1, request, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(l->workflow);
    sqlite3_reset(l->workflow);
    if (rc == SQLITE_ROW)
        return 1;
    return rc == SQLITE_DONE ? 0 : sql_fail(l, "requests");
}

static int check_derived(vf_findings *out, const char *object,
                         const char *env, size_t len, const char *task_key,
                         const char *request, const char *stage);

int vf_ledger_archived(vf_ledger *l, const char *request, char *file,
                       size_t cap)
{
    sqlite3_stmt *st = NULL;
    int step, rc = 0;
    file[0] = '\0';
    if (!l->has_archive)
        return 0;
    if (sqlite3_prepare_v2(l->db,
                           "SELECT file FROM archives WHERE request = ?", -1,
                           &st, NULL) != SQLITE_OK)
        return sql_fail(l, "archives");
    sqlite3_bind_text(st, 1, request, -1, SQLITE_TRANSIENT);
    step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        snprintf(file, cap, "%s", text_or(st, 0, "?"));
        rc = 1;
    } else if (step != SQLITE_DONE) {
        rc = sql_fail(l, "archives");
    }
    sqlite3_finalize(st);
    return rc;
}

int vf_ledger_check_chain(vf_ledger *l, vf_findings *out, size_t *rows)
{
    sqlite3_stmt *st = NULL;
    char prev[CNX_DIGEST_LEN], digest[CNX_DIGEST_LEN], object[512];
    int have = 0, cur = 0, step, rc = 0;
    int64_t last = -1;

    *rows = 0;
    if (sqlite3_prepare_v2(l->db,
                           l->has_archive
                               ? "SELECT partition, offset, envelope_digest, "
                                 "verified, prev, row_digest, envelope, "
                                 "task_key, request, stage, archive FROM "
                                 "lineage ORDER BY partition, offset"
                               : "SELECT partition, offset, envelope_digest, "
                                 "verified, prev, row_digest, envelope, "
                                 "task_key, request, stage, NULL FROM "
                                 "lineage ORDER BY partition, offset",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(l, "lineage");
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        int part = sqlite3_column_int(st, 0);
        int64_t off = sqlite3_column_int64(st, 1);
        const char *env_digest = text_or(st, 2, "");
        int verified = sqlite3_column_int(st, 3);
        const char *p = text_or(st, 4, ""), *row = text_or(st, 5, "");
        const char *env = text_or(st, 6, "");
        /* A stub: the envelope is in the archive file it names. */
        int stub = sqlite3_column_type(st, 10) != SQLITE_NULL &&
                   sqlite3_column_bytes(st, 6) == 0;
        char chain[512], got[CNX_DIGEST_LEN];
        (*rows)++;
        if (!have || part != cur) {
            snprintf(prev, sizeof(prev), "%s", GENESIS);
            cur = part;
            have = 1;
            last = -1;
        }
        snprintf(object, sizeof(object), "%s: lineage partition %d offset "
                 "%lld", l->path, part, (long long)off);
        if (!l->is_archive && strcmp(p, prev) != 0) {
            if (last < 0)
                rc = vf_add(out, object, "ledger",
                            "chain broken: prev is %s but the first row of "
                            "partition %d must follow %s (a row before it "
                            "was deleted, or it was edited)",
                            p, part, prev);
            else
                rc = vf_add(out, object, "ledger",
                            "chain broken: prev is %s but the row before "
                            "(offset %lld) has digest %s (a row between "
                            "them was deleted, or one was edited)",
                            p, (long long)last, prev);
        }
        snprintf(chain, sizeof(chain),
                 "cnx.lineage-row/1\n%s\n%d\n%lld\n%s\n%d\n", p, part,
                 (long long)off, env_digest, verified);
        cnx_digest(chain, strlen(chain), got);
        if (rc == 0 && strcmp(got, row) != 0)
            rc = vf_add(out, object, "ledger",
                        "row digest is %s but the row's content hashes to %s "
                        "(the row was edited)", row, got);
        if (stub)
            snprintf(digest, sizeof(digest), "%s", env_digest);
        else
            cnx_digest(env, (size_t)sqlite3_column_bytes(st, 6), digest);
        if (rc == 0 && strcmp(digest, env_digest) != 0)
            rc = vf_add(out, object, "ledger",
                        "envelope hashes to %s, not its envelope_digest %s "
                        "(the envelope was edited)", digest, env_digest);
        if (rc == 0 && !stub && strcmp(digest, env_digest) == 0)
            rc = check_derived(out, object, env,
                               (size_t)sqlite3_column_bytes(st, 6),
                               text_or(st, 7, NULL), text_or(st, 8, NULL),
                               text_or(st, 9, NULL));
        /* Go on from the stored digest, so one edit is one finding. */
        snprintf(prev, sizeof(prev), "%s", row);
        last = off;
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = sql_fail(l, "lineage");
    sqlite3_finalize(st);
    return rc;
}

/*
 * The row's columns derived from its envelope (task key, request, stage)
 * are outside the hash chain, so they are checked against the envelope
 * itself: an edit there is as visible as one in the chained fields. An
 * envelope that does not parse says nothing here (the chain and the
 * envelope's own checks speak for it). @return 0, or an error from vf_add.
 */
static int check_derived(vf_findings *out, const char *object,
                         const char *env, size_t len, const char *task_key,
                         const char *request, const char *stage)
{
    json_t *e = NULL, *st = NULL;
    uint8_t *body = NULL;
    size_t blen = 0;
    const char *want[3] = {NULL, NULL, NULL};
    static const char *const col[3] = {"task_key", "request", "stage"};
    const char *have[3] = {task_key, request, stage};
    int rc = 0;

    if (cnx__json_parse(&e, env, len, CNX_ECORRUPT, "envelope") != 0) {
        cnx_error_clear();
        return 0;
    }
    {
        const json_t *pl = json_object_get(e, "payload");
        if (json_is_string(pl) &&
            cnx_base64_decode(json_string_value(pl), json_string_length(pl),
                              &body, &blen) == 0 &&
            cnx__json_parse(&st, (const char *)body, blen, CNX_ECORRUPT,
                            "statement") == 0) {
            const json_t *ext = json_object_get(
                json_object_get(json_object_get(st, "predicate"),
                                "buildDefinition"),
                "externalParameters");
            want[0] = json_string_value(json_object_get(ext, "taskKey"));
            want[1] = json_string_value(
                json_object_get(json_object_get(ext, "task"), "request"));
            want[2] = json_string_value(json_object_get(ext, "stage"));
        }
        cnx_error_clear();
    }
    for (int i = 0; i < 3 && rc == 0; i++)
        if (want[i] != NULL && have[i] != NULL && strcmp(want[i], have[i]) != 0)
            rc = vf_add(out, object, "ledger",
                        "the row's %s is '%.128s' but its envelope says "
                        "'%.128s' (the row was edited)",
                        col[i], have[i], want[i]);
    json_decref(st);
    json_decref(e);
    free(body);
    return rc;
}

int vf_ledger_find_envelope(vf_ledger *l, const char *digest, int *p,
                            int64_t *o, char *why, size_t cap)
{
    int step, rc = 0;
    sqlite3_reset(l->find);
    sqlite3_bind_text(l->find, 1, digest, -1, SQLITE_TRANSIENT);
    step = sqlite3_step(l->find);
    if (step == SQLITE_ROW) {
        *p = sqlite3_column_int(l->find, 0);
        *o = sqlite3_column_int64(l->find, 1);
        rc = sqlite3_column_int(l->find, 2) == 1 ? 1 : 2;
        snprintf(why, cap, "%s", text_or(l->find, 3, "no reason given"));
    } else if (step != SQLITE_DONE) {
        rc = sql_fail(l, "lineage");
    }
    sqlite3_reset(l->find);
    return rc;
}

int vf_ledger_output(vf_ledger *l, const char *task_key, const char *object,
                     char digest[CNX_DIGEST_LEN])
{
    int step, rc = 0;
    digest[0] = '\0';
    sqlite3_reset(l->output);
    sqlite3_bind_text(l->output, 1, task_key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(l->output, 2, object, -1, SQLITE_TRANSIENT);
    step = sqlite3_step(l->output);
    if (step == SQLITE_ROW)
        snprintf(digest, CNX_DIGEST_LEN, "%s", text_or(l->output, 0, "?"));
    else if (step != SQLITE_DONE)
        rc = sql_fail(l, "outputs");
    sqlite3_reset(l->output);
    return rc;
}

int vf_ledger_task_stage(vf_ledger *l, const char *request,
                         const char *task_key, char *stage, size_t cap)
{
    int step, rc = 0;
    stage[0] = '\0';
    sqlite3_reset(l->stage);
    sqlite3_bind_text(l->stage, 1, request, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(l->stage, 2, task_key, -1, SQLITE_TRANSIENT);
    step = sqlite3_step(l->stage);
    if (step == SQLITE_ROW)
        snprintf(stage, cap, "%s", text_or(l->stage, 0, ""));
    else if (step != SQLITE_DONE)
        rc = sql_fail(l, "tasks");
    sqlite3_reset(l->stage);
    return rc;
}

int vf_ledger_workflow(vf_ledger *l, const char *request, char **json)
{
    int step, rc = 0;
    *json = NULL;
    sqlite3_reset(l->workflow);
    sqlite3_bind_text(l->workflow, 1, request, -1, SQLITE_TRANSIENT);
    step = sqlite3_step(l->workflow);
    if (step == SQLITE_ROW) {
        *json = strdup(text_or(l->workflow, 0, ""));
        if (*json == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    } else if (step != SQLITE_DONE) {
        rc = sql_fail(l, "requests");
    }
    sqlite3_reset(l->workflow);
    return rc;
}
