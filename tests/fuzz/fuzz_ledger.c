/*
 * fuzz_ledger.c - ledger rows as cnx-verify reads them (verify_ledger.c
 * and verify_stmt.c): the lineage hash chain, the columns derived from
 * each envelope (its JSON, base64 payload and statement), and locating an
 * envelope's output layer and task key without its signature
 * (vf_envelope_locate), through the read-only ledger view cnx-verify
 * opens (vf_ledger_open).
 *
 * At start the harness makes a ledger file with the controller's own
 * schema (cnx__ctl_open) in a private temporary directory ($TMPDIR). Each input is
 * up to 8 lineage rows separated by 0x1e; a row is fields separated by
 * 0x1f: envelope, task_key, request, stage, flags. The harness writes the
 * rows (partition = row number % 2, offset = row number) with the
 * envelope digest and the chain computed as the controller does, unless
 * flags holds 'x' (then a wrong prev, to break the chain) or 'd' (a wrong
 * envelope digest); 'v' marks a row verified. Then cnx-verify's view
 * reads them back: the chain check, every row, each row's envelope and
 * the first row's request.
 */
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cnx/controller.h"
#include "cnx/digest.h"
#include "controller_int.h"
#include "fuzz_common.h"
#include "verify_int.h"

#define MAX_ROWS 8
#define GENESIS \
    "sha256:0000000000000000000000000000000000000000000000000000000000000000"

static ctl c;
static cnx_controller_opts opts;
static vf_ledger *view;
static char *dir, *ledger_path, *pub_path, *key_path;
static sqlite3_stmt *insert;
static unsigned long inputs;

static void cleanup(void)
{
    char path[4200];
    sqlite3_finalize(insert);
    vf_ledger_close(view);
    cnx__ctl_close(&c);
    snprintf(path, sizeof(path), "%s-wal", ledger_path);
    unlink(path);
    snprintf(path, sizeof(path), "%s-shm", ledger_path);
    unlink(path);
    unlink(ledger_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    size_t n;
    (void)argc;
    (void)argv;
    fuzz_quiet();
    dir = fuzz_tmpdir();
    pub_path = fuzz_write_private(dir, "fuzz.pub", FUZZ_PUB_PEM);
    key_path = fuzz_write_private(dir, "fuzz.key", FUZZ_KEY_PEM);
    n = strlen(dir) + 16;
    ledger_path = malloc(n);
    if (ledger_path == NULL)
        abort();
    snprintf(ledger_path, n, "%s/ledger.db", dir);
    memset(&opts, 0, sizeof(opts));
    opts.ledger = ledger_path;
    opts.trust_dir = dir;
    opts.key_path = key_path;
    opts.batch = 1000;
    if (cnx__ctl_open(&c, &opts) != 0)
        fuzz_die("ledger");
    unlink(key_path);
    free(key_path);
    /* cnx__ctl_open leaves its schema check (SELECT ... FROM meta) stepped
     * and never reset: the connection keeps a read transaction, and the
     * WAL never restarts, growing by every commit (12 GB in 7 minutes
     * here; tests/fuzz/crashes/ledger/wal_growth.c). Reset the cached
     * statements, as the controller's next use of each would, so that
     * this harness fuzzes the rows and not the disk. */
    for (int i = 0; i < CTL_MAX_STMTS && c.stmts[i].sql != NULL; i++)
        sqlite3_reset(c.stmts[i].st);
    unlink(pub_path);
    if (sqlite3_prepare_v2(c.db,
                           "INSERT OR REPLACE INTO lineage(partition, offset, "
                           "envelope_digest, task_key, request, stage, "
                           "verified, envelope, prev, row_digest) VALUES(?, "
                           "?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           -1, &insert, NULL) != SQLITE_OK)
        fuzz_die("insert");
    if (vf_ledger_open(&view, ledger_path) != 0)
        fuzz_die("cnx-verify's view");
    atexit(cleanup);
    return 0;
}

static int row_cb(void *ctx, int partition, int64_t offset,
                  const char *digest, int verified, const char *text,
                  size_t len)
{
    char *layer = NULL, key[CNX_DIGEST_LEN];
    (void)ctx;
    (void)partition;
    (void)offset;
    (void)digest;
    (void)verified;
    if (vf_envelope_locate(text, len, &layer, key) == 0 &&
        (layer == NULL || !cnx_digest_valid(key)))
        abort(); /* located, but without what it promises */
    free(layer);
    return 0;
}

/* The WAL must stay bounded (it is reused once checkpointed): abort the
 * run rather than fill the disk. */
static void check_wal(void)
{
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof(path), "%s-wal", ledger_path);
    if (stat(path, &sb) == 0 && sb.st_size > ((off_t)256 << 20)) {
        fprintf(stderr, "fuzz: the ledger's WAL grew to %lld bytes\n",
                (long long)sb.st_size);
        abort();
    }
}

static void bind_field(int i, const char *s)
{
    sqlite3_bind_text(insert, i, s, -1, SQLITE_TRANSIENT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *rows[MAX_ROWS], *buf = NULL, prev[2][CNX_DIGEST_LEN];
    char first_request[256] = "";
    size_t lens[MAX_ROWS], n, nrows = 0;
    vf_findings findings;
    int64_t o = 0;
    char why[256];
    char *json = NULL;

    if (ctl_exec(&c, "DELETE FROM lineage") != 0)
        fuzz_die("DELETE");
    snprintf(prev[0], sizeof(prev[0]), "%s", GENESIS);
    snprintf(prev[1], sizeof(prev[1]), "%s", GENESIS);
    n = fuzz_split(data, size, 0x1e, rows, lens, MAX_ROWS, &buf);
    if (ctl_exec(&c, "BEGIN") != 0)
        fuzz_die("BEGIN");
    for (size_t i = 0; i < n; i++) {
        char *f[5] = {rows[i], NULL, NULL, NULL, ""};
        char env_digest[CNX_DIGEST_LEN], row[CNX_DIGEST_LEN], chain[512];
        const char *prev_used;
        int part = (int)(i % 2), verified;
        size_t nf = 1;
        for (char *s = rows[i]; *s != '\0' && nf < 5; s++)
            if (*s == 0x1f) {
                *s = '\0';
                f[nf++] = s + 1;
            }
        verified = strchr(f[4], 'v') != NULL;
        cnx_digest(f[0], strlen(f[0]), env_digest);
        if (strchr(f[4], 'd') != NULL)
            env_digest[7] = env_digest[7] == '0' ? '1' : '0';
        prev_used = strchr(f[4], 'x') != NULL ? GENESIS : prev[part];
        snprintf(chain, sizeof(chain),
                 "cnx.lineage-row/1\n%s\n%d\n%lld\n%s\n%d\n", prev_used, part,
                 (long long)i, env_digest, verified);
        cnx_digest(chain, strlen(chain), row);
        sqlite3_reset(insert);
        sqlite3_clear_bindings(insert);
        sqlite3_bind_int(insert, 1, part);
        sqlite3_bind_int64(insert, 2, (int64_t)i);
        bind_field(3, env_digest);
        bind_field(4, f[1]);
        bind_field(5, f[2]);
        bind_field(6, f[3]);
        sqlite3_bind_int(insert, 7, verified);
        bind_field(8, f[0]);
        bind_field(9, prev_used);
        bind_field(10, row);
        if (sqlite3_step(insert) != SQLITE_DONE)
            fuzz_die("INSERT");
        snprintf(prev[part], sizeof(prev[part]), "%s", row);
        if (i == 0 && f[2] != NULL)
            snprintf(first_request, sizeof(first_request), "%s", f[2]);
        nrows++;
    }
    if (ctl_exec(&c, "COMMIT") != 0)
        fuzz_die("COMMIT");
    if (++inputs % 1000 == 0)
        check_wal();

    memset(&findings, 0, sizeof(findings));
    {
        size_t checked = 0;
        if (vf_ledger_check_chain(view, &findings, &checked) == 0 &&
            checked != nrows)
            abort(); /* rows written but not read back */
    }
    vf_findings_dispose(&findings);
    (void)vf_ledger_rows(view, NULL, row_cb, NULL);
    if (first_request[0] != '\0') {
        (void)vf_ledger_rows(view, first_request, row_cb, NULL);
        (void)vf_ledger_has_request(view, first_request);
        if (vf_ledger_workflow(view, first_request, &json) == 0)
            free(json);
    }
    {
        char d[CNX_DIGEST_LEN];
        int part;
        cnx_digest(rows[0], strlen(rows[0]), d);
        (void)vf_ledger_find_envelope(view, d, &part, &o, why, sizeof(why));
    }
    free(buf);
    return 0;
}
