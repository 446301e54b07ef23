/*
 * wal_growth.c - reproducer: the controller's ledger WAL grows without
 * bound (found by fuzz_ledger, whose ledger's WAL reached 12 GB in
 * /dev/shm in 7 minutes and set off the OOM killer).
 *
 * controller.c ledger_open() steps "SELECT value FROM meta WHERE key =
 * 'schema'" through the statement cache (ctl_stmt) and never resets it; no
 * later code uses that statement again, so the connection keeps a read
 * transaction for its whole life, and SQLite can never restart the WAL:
 * every commit appends to it (16 KiB pages). A live controller's
 * ledger.db-wal grows until it stops. Resetting the cached statements
 * keeps the WAL at its checkpoint size.
 *
 *   clang -g -fsanitize=address -I libcnx/include -I libcnx/src -I tests/fuzz \
 *     tests/fuzz/crashes/ledger/wal_growth.c build-fuzz/libcnx_fuzz_lib.a \
 *     -fsanitize=fuzzer-no-link $(pkg-config --libs libcrypto jansson \
 *     libzstd libpng libtiff-4 rdkafka sqlite3 libcurl expat libgit2) \
 *     -lpthread -lm -o /tmp/wal_growth
 *   /tmp/wal_growth          # as opened: 17 MB, 34 MB, 50 MB, ...
 *   /tmp/wal_growth reset    # statements reset: 16 MB, 16 MB, 16 MB
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnx/error.h"
#include "controller_int.h"
#include "fuzz_common.h"

int main(int argc, char **argv)
{
    static ctl c;
    cnx_controller_opts o;
    struct stat sb;
    char ledger[4200], wal[4300], *dir = fuzz_tmpdir();
    char *pub = fuzz_write_private(dir, "fuzz.pub", FUZZ_PUB_PEM);
    int reset_all = argc > 1 && strcmp(argv[1], "reset") == 0;

    fuzz_quiet();
    snprintf(ledger, sizeof(ledger), "%s/ledger.db", dir);
    snprintf(wal, sizeof(wal), "%s-wal", ledger);
    memset(&o, 0, sizeof(o));
    o.ledger = ledger;
    o.trust_dir = dir;
    o.batch = 1000;
    if (cnx__ctl_open(&c, &o) != 0)
        fuzz_die("ledger");
    if (reset_all)
        for (int i = 0; i < CTL_MAX_STMTS && c.stmts[i].sql != NULL; i++)
            sqlite3_reset(c.stmts[i].st);
    for (int i = 0; i < 3000; i++) {
        char sql[512];
        snprintf(sql, sizeof(sql), "BEGIN; INSERT OR REPLACE INTO meta(key, "
                 "value) VALUES('k%d', '%0100d'); COMMIT;", i % 50, i);
        if (ctl_exec(&c, sql) != 0)
            fuzz_die("commit");
        if (i % 1000 == 999 && stat(wal, &sb) == 0)
            printf("%s: after %d commits the WAL is %lld bytes\n",
                   reset_all ? "statements reset" : "as opened", i + 1,
                   (long long)sb.st_size);
    }
    cnx__ctl_close(&c);
    unlink(wal);
    snprintf(wal, sizeof(wal), "%s-shm", ledger);
    unlink(wal);
    unlink(ledger);
    unlink(pub);
    rmdir(dir);
    free(pub);
    free(dir);
    return 0;
}
