/*
 * test_ledger_wal.c - the controller's ledger keeps its write-ahead log
 * bounded: a statement stepped once at start-up and never reset held a
 * read transaction for the controller's whole life, so SQLite could never
 * restart the WAL and ledger.db-wal grew with every commit (found by
 * fuzzing: 12 GB in 7 minutes; tests/fuzz/crashes/ledger/wal_growth.c).
 * The bound checked is SQLite's automatic checkpoint (1000 pages of the
 * ledger's 16 KiB) with room to spare; the defect gave 50 MB here.
 */
#include "cnx_test.h"

#include <sys/stat.h>

#include "cnx/error.h"
#include "cnx/lineage.h"
#include "controller_int.h"

static void test_ledger__wal_stays_bounded_over_many_commits(void **state)
{
    static ctl c;
    cnx_controller_opts o;
    cnx_key *key = NULL;
    struct stat sb;
    char dir[64], keys[96], trust[96], ledger[96], wal[112], cmd[400];
    char keyfile[112];
    (void)state;

    cnx_test_tmpdir(dir);
    snprintf(keys, sizeof(keys), "%s/keys", dir);
    snprintf(trust, sizeof(trust), "%s/trust", dir);
    snprintf(ledger, sizeof(ledger), "%s/ledger.db", dir);
    snprintf(wal, sizeof(wal), "%s-wal", ledger);
    assert_int_equal(cnx_key_generate(&key), 0);
    assert_int_equal(cnx_key_write(key, keys), 0);
    cnx_key_free(key);
    snprintf(cmd, sizeof(cmd), "mkdir %s && cp %s/cnx.pub %s/worker.pub",
             trust, keys, trust);
    assert_int_equal(system(cmd), 0);

    memset(&o, 0, sizeof(o));
    o.ledger = ledger;
    o.trust_dir = trust;
    snprintf(keyfile, sizeof(keyfile), "%s/cnx.key", keys);
    o.key_path = keyfile;
    o.batch = 1000;
    assert_int_equal(cnx__ctl_open(&c, &o), 0);
    for (int i = 0; i < 3000; i++) {
        char sql[512];
        snprintf(sql, sizeof(sql),
                 "BEGIN; INSERT OR REPLACE INTO meta(key, value) "
                 "VALUES('k%d', '%0100d'); COMMIT;",
                 i % 50, i);
        assert_int_equal(ctl_exec(&c, sql), 0);
    }
    assert_int_equal(stat(wal, &sb), 0);
    if (sb.st_size > 24 * 1024 * 1024)
        fail_msg("ledger.db-wal is %lld bytes after 3000 commits",
                 (long long)sb.st_size);
    cnx__ctl_close(&c);
    cnx_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ledger__wal_stays_bounded_over_many_commits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
