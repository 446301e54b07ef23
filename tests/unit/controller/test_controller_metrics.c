/*
 * test_controller_metrics.c - the controller's ledger-derived series
 * (queued tasks per stage and lane, retried tasks, CPU time, mm³, $/mm³,
 * violations) against a ledger written here by hand.
 *
 * Three requests: two open (req-a, req-b) sharing the stage `seg`, one
 * finished (req-c) whose stale rows must not count. Each value is checked
 * twice: against the figure worked out by hand below, and against the
 * sqlite3 shell run on the ledger file with queries written for this test
 * (an independent reader of the same rows). When promtool is installed,
 * `promtool check metrics` must accept the exposition.
 */
#include "cnx_test.h"

#include <math.h>

#include "cnx/error.h"
#include "cnx/lineage.h"
#include "controller_int.h"

static const char ledger_rows[] =
    "BEGIN;"
    "INSERT INTO requests(id, workflow, workflow_digest, workflow_json, "
    " dataset, roi, submitted, deadline, reuse, state) VALUES"
    " ('req-a', 'w', 'sha256:0', '{}', 'file:///d', '[]', "
    "  '2026-01-01T00:00:00Z', '2099-01-01T00:00:00Z', 0, 'accepted'),"
    " ('req-b', 'w', 'sha256:0', '{}', 'file:///d', '[]', "
    "  '2026-01-01T00:00:00Z', '2099-01-01T00:00:00Z', 0, 'accepted'),"
    " ('req-c', 'w', 'sha256:0', '{}', 'file:///d', '[]', "
    "  '2026-01-01T00:00:00Z', '2099-01-01T00:00:00Z', 0, 'done');"
    "INSERT INTO stages(request, stage, seq, worker, kind, kernel_version, "
    " parameters, tasks, region, input_layer, input_scale, res_x, res_y, "
    " res_z, output_layer, output_scale, retry_budget, lease_s) VALUES"
    " ('req-a', 'seg', 0, 'segment', 'map', 1, '{}', 7, '[]', 'i', 's', "
    "  4, 4, 40, 'o', 's', 3, 60),"
    " ('req-a', 'ds', 1, 'downsample', 'map', 1, '{}', 1, '[]', 'i', 's', "
    "  8, 8, 40, 'o', 's', 3, 60),"
    " ('req-b', 'seg', 0, 'segment', 'map', 1, '{}', 2, '[]', 'i', 's', "
    "  4, 4, 40, 'o', 's', 3, 60),"
    " ('req-c', 'old', 0, 'mesh', 'map', 1, '{}', 1, '[]', 'i', 's', "
    "  4, 4, 40, 'o', 's', 3, 60);"
    "INSERT INTO tasks(request, idx, stage, x0, y0, z0, x1, y1, z1, "
    " deps_left, state, task_key, last_attempt, lane) VALUES"
    /* done at once; done on its 3rd attempt */
    " ('req-a', 0, 'seg', 0,0,0,1,1,1, 0, 'done', 'ka0', 1, 'bulk'),"
    " ('req-a', 1, 'seg', 0,0,0,1,1,1, 0, 'done', 'ka1', 3, 'bulk'),"
    /* queued: no event; running: started; queued: attempt 2 released
     * after attempt 1 failed; queued: its run was preempted */
    " ('req-a', 2, 'seg', 0,0,0,1,1,1, 0, 'released', 'ka2', 1, 'bulk'),"
    " ('req-a', 3, 'seg', 0,0,0,1,1,1, 0, 'released', 'ka3', 1, 'urgent'),"
    " ('req-a', 4, 'seg', 0,0,0,1,1,1, 0, 'released', 'ka4', 2, 'urgent'),"
    " ('req-a', 5, 'seg', 0,0,0,1,1,1, 0, 'released', 'ka5', 1, 'bulk'),"
    " ('req-a', 6, 'seg', 0,0,0,1,1,1, 1, 'planned', NULL, 0, NULL),"
    " ('req-a', 7, 'ds', 0,0,0,1,1,1, 0, 'released', 'kd0', 1, 'bulk'),"
    " ('req-b', 0, 'seg', 0,0,0,1,1,1, 0, 'released', 'kb0', 1, 'bulk'),"
    " ('req-b', 1, 'seg', 0,0,0,1,1,1, 0, 'dead', 'kb1', 4, 'bulk'),"
    " ('req-c', 0, 'old', 0,0,0,1,1,1, 0, 'released', 'kc0', 1, 'bulk');"
    "INSERT INTO attempts(task_key, request, attempt, worker, run, stage, "
    " state, cpu_s, wall_s, voxels) VALUES"
    " ('ka0', 'req-a', 1, 'w1', 'r1', 'segment', 'succeeded', 3600, 10, "
    "  1000000),"
    " ('ka1', 'req-a', 1, 'w1', 'r2', 'segment', 'failed', 5, 5, NULL),"
    " ('ka1', 'req-a', 2, 'w1', 'r3', 'segment', 'failed', 5, 5, NULL),"
    " ('ka1', 'req-a', 3, 'w2', 'r4', 'segment', 'succeeded', 1800, 10, "
    "  1000000),"
    " ('ka3', 'req-a', 1, 'w2', 'r5', 'segment', 'started', NULL, NULL, "
    "  NULL),"
    " ('ka4', 'req-a', 1, 'w2', 'r6', 'segment', 'failed', 1, 1, NULL),"
    " ('ka5', 'req-a', 1, 'w2', 'r7', 'segment', 'preempted', NULL, NULL, "
    "  NULL),"
    " ('kc0', 'req-c', 1, 'w2', 'r8', 'segment', 'succeeded', 7200, 1, 5);"
    "INSERT INTO violations(kind, task_key, object, expected, got, request, "
    " stage, evidence) VALUES"
    " ('reproducibility', 'ka0', 'o/1', 'sha256:1', 'sha256:2', 'req-a', "
    "  'segment', 'm'),"
    " ('reproducibility', 'kc0', 'o/2', 'sha256:1', 'sha256:2', 'req-c', "
    "  'segment', 'm'),"
    " ('immutability', 'ka1', 'o/3', 'sha256:1', 'sha256:2', 'req-a', "
    "  'segment', 'm');"
    "COMMIT;";

/* The value of the series named exactly `series` in `text`; NAN if absent. */
static double series_value(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n')) {
        if (*p == '\n')
            p++;
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return NAN;
}

/* One number from the sqlite3 shell on the ledger file. */
static double shell_value(const char *ledger, const char *sql)
{
    char cmd[2048], out[64] = "";
    FILE *f;
    snprintf(cmd, sizeof(cmd), "sqlite3 -readonly '%s' \"%s\"", ledger, sql);
    f = popen(cmd, "r");
    assert_non_null(f);
    if (fgets(out, sizeof(out), f) == NULL)
        out[0] = '\0';
    assert_int_equal(pclose(f), 0);
    if (out[0] == '\0' || out[0] == '\n')
        fail_msg("no value from: %s", sql);
    return strtod(out, NULL);
}

static void expect(const char *text, const char *ledger, const char *series,
                   double by_hand, const char *sql)
{
    double got = series_value(text, series);
    if (isnan(got))
        fail_msg("%s missing from:\n%s", series, text);
    if (fabs(got - by_hand) > 1e-6 * fmax(1, fabs(by_hand)))
        fail_msg("%s = %.9g, by hand %.9g", series, got, by_hand);
    if (sql != NULL) {
        double truth = shell_value(ledger, sql);
        if (fabs(got - truth) > 1e-6 * fmax(1, fabs(truth)))
            fail_msg("%s = %.9g, sqlite3 says %.9g", series, got, truth);
    }
}

/* Queued, written as the sqlite3 shell's own query: released tasks of
 * accepted requests without a non-preempted row at their last attempt. */
#define QUEUED(worker, lane)                                                   \
    "SELECT count(*) FROM tasks t, requests r, stages s WHERE r.id = "         \
    "t.request AND s.request = t.request AND s.stage = t.stage AND r.state "   \
    "= 'accepted' AND t.state = 'released' AND s.worker = '" worker            \
    "' AND t.lane = '" lane "' AND (SELECT count(*) FROM attempts a WHERE "    \
    "a.task_key = t.task_key AND a.request = t.request AND a.attempt = "       \
    "t.last_attempt AND a.state IN ('started', 'failed', 'succeeded')) = 0"

static void test_controller_metrics__series_match_the_ledger(void **state)
{
    static ctl c;
    cnx_controller_opts o;
    cnx_key *key = NULL;
    char dir[64], keys[96], trust[96], ledger[96], cmd[400], keyfile[112];
    char prom[112];
    FILE *f;
    (void)state;

    cnx_test_tmpdir(dir);
    snprintf(keys, sizeof(keys), "%s/keys", dir);
    snprintf(trust, sizeof(trust), "%s/trust", dir);
    snprintf(ledger, sizeof(ledger), "%s/ledger.db", dir);
    assert_int_equal(cnx_key_generate(&key), 0);
    assert_int_equal(cnx_key_write(key, keys), 0);
    cnx_key_free(key);
    snprintf(cmd, sizeof(cmd), "mkdir %s && cp %s/cnx.pub %s/worker.pub", trust,
             keys, trust);
    assert_int_equal(system(cmd), 0);

    memset(&o, 0, sizeof(o));
    o.ledger = ledger;
    o.trust_dir = trust;
    snprintf(keyfile, sizeof(keyfile), "%s/cnx.key", keys);
    o.key_path = keyfile;
    o.batch = 100;
    o.price_per_core_hour = 0.05;
    assert_int_equal(cnx__ctl_open(&c, &o), 0);
    assert_int_equal(ctl_exec(&c, ledger_rows), 0);
    ctl_metrics_update(&c);
    assert_non_null(c.metrics);
    const char *m = c.metrics;

    /* Queued per worker stage and lane: segment/bulk = req-a #2, #5 and
     * req-b #0 (both requests' `seg` runs on cnx-segment). */
    expect(m, ledger, "cnx_stage_queued_tasks{stage=\"segment\",lane=\"bulk\"}",
           3, QUEUED("segment", "bulk"));
    expect(m, ledger,
           "cnx_stage_queued_tasks{stage=\"segment\",lane=\"urgent\"}", 1,
           QUEUED("segment", "urgent"));
    expect(m, ledger,
           "cnx_stage_queued_tasks{stage=\"downsample\",lane=\"bulk\"}", 1,
           QUEUED("downsample", "bulk"));
    expect(m, ledger,
           "cnx_stage_queued_tasks{stage=\"downsample\",lane=\"urgent\"}", 0,
           QUEUED("downsample", "urgent"));
    /* req-c is done: its stale released task is nobody's lag */
    assert_true(strstr(m, "stage=\"mesh\"") == NULL);
    assert_true(strstr(m, "stage=\"old\"") == NULL);

    /* Retried: more than one attempt. */
    expect(m, ledger,
           "cnx_request_retried_tasks{request=\"req-a\",stage=\"seg\"}", 2,
           "SELECT count(*) FROM tasks WHERE request = 'req-a' AND stage = "
           "'seg' AND last_attempt >= 2");
    expect(m, ledger,
           "cnx_request_retried_tasks{request=\"req-b\",stage=\"seg\"}", 1,
           "SELECT count(*) FROM tasks WHERE request = 'req-b' AND stage = "
           "'seg' AND last_attempt >= 2");

    /* Costs of succeeded attempts: 3600 + 1800 CPU s = 1.5 core-hours over
     * 2e6 voxels of 4*4*40 nm³ = 1.28e-9 mm³. */
    expect(m, ledger,
           "cnx_request_cpu_seconds{request=\"req-a\",stage=\"seg\"}", 5400,
           "SELECT sum(cpu_s) FROM attempts WHERE request = "
           "'req-a' AND stage = 'segment' AND state = 'succeeded'");
    expect(m, ledger,
           "cnx_request_processed_mm3{request=\"req-a\",stage=\"seg\"}",
           1.28e-9,
           "SELECT sum(voxels) * 640 * 1e-18 FROM attempts WHERE request = "
           "'req-a' AND stage = 'segment' AND state = 'succeeded'");
    expect(m, ledger,
           "cnx_request_cost_per_mm3_dollars{request=\"req-a\",stage=\"seg\"}",
           1.5 * 0.05 / 1.28e-9,
           "SELECT sum(cpu_s) / 3600.0 * 0.05 / (sum(voxels) * 640 * 1e-18) "
           "FROM attempts WHERE request = 'req-a' AND stage = 'segment' AND "
           "state = 'succeeded'");
    expect(m, ledger, "cnx_request_cpu_seconds{request=\"req-a\",stage=\"ds\"}",
           0, NULL);
    /* Nothing processed: no $/mm³ (not a division by zero). */
    assert_true(strstr(m, "cnx_request_cost_per_mm3_dollars{request=\"req-a"
                          "\",stage=\"ds\"}") == NULL);
    assert_true(strstr(m, "request=\"req-c\"") == NULL);

    /* Violations, every request's. */
    expect(m, ledger, "cnx_ledger_violations_total{kind=\"reproducibility\"}",
           2, "SELECT count(*) FROM violations WHERE kind = 'reproducibility'");
    expect(m, ledger, "cnx_ledger_violations_total{kind=\"immutability\"}", 1,
           "SELECT count(*) FROM violations WHERE kind = 'immutability'");
    assert_false(
        isnan(series_value(m, "cnx_controller_last_update_timestamp_seconds")));

    /* The exposition is valid Prometheus text (promtool, when present). */
    snprintf(prom, sizeof(prom), "%s/metrics.txt", dir);
    f = fopen(prom, "w");
    assert_non_null(f);
    fputs(m, f);
    fclose(f);
    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", prom);
        assert_int_equal(system(cmd), 0);
    }
    cnx__ctl_close(&c);
    cnx_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_controller_metrics__series_match_the_ledger),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
