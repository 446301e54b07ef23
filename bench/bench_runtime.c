/*
 * bench_runtime - what the worker runtime costs per task, beside the disk
 * and openssl, and how many no-op tasks two workers finish per second.
 *
 *   bench_runtime [--tasks N] [--workers N] [--repeat N]
 *                 [--prefetch-tasks N] [--rounds N] [--kernel-ms MS]
 *                 [--parts MASK]
 *
 * Part 1, per-task overhead of the runtime, each step timed alone (medians):
 * a Kafka round trip (produce + broker acknowledgement) as the runtime does
 * it three times per task (manifest, event, dead-letter-free path), the
 * provenance statement, its Ed25519 signature, and an offset commit.
 * Target: their sum <= 5 ms. Then the per-task data costs on one 128^3
 * uint8 chunk: input and output SHA-256 (beside `openssl speed -evp
 * sha256`) and a durable write-once put and a read (beside `dd` with
 * fdatasync to the same disk).
 * Part 2, end to end: an in-process cnx-broker, N workers (this program
 * with --worker, a no-op stage that copies its chunk), tasks on 128^3 uint8
 * chunks published at once; tasks/s from the first start to the last
 * success (target >= 60 with 2 workers on 2 cores).
 * Part 3, prefetch (worker --prefetch): one worker, its source layer on an
 * S3 server (s3rver on loopback, tests/support/s3rver.sh; skipped when it
 * cannot start), a fresh read cache per run, a kernel that takes
 * --kernel-ms (the worker's --slow-ms) before it copies its chunk; runs
 * with --prefetch 0 and 1 alternate, --rounds times each. Per mode, the
 * medians over rounds of tasks/s and of the fraction of the wall time
 * (first `started` event to last `succeeded`, as this program receives
 * them) the worker spent reading inputs (the sum of the events' read_s),
 * and the on/off ratio.
 */
#define _GNU_SOURCE /* memmem */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cnx/broker.h"
#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/kafka.h"
#include "cnx/lineage.h"
#include "cnx/log.h"
#include "cnx/precomputed.h"
#include "cnx/submit.h"
#include "cnx/worker.h"

#include "bench_util.h"

/* ---- the no-op stage ------------------------------------------------- */

static int noop_run(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    cnx_volume *v = NULL;
    int rc;
    (void)ctx;
    rc = cnx_stage_read(io, "source", &task->roi, &v);
    if (rc == 0)
        rc = cnx_stage_write(io, v);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_volume_voxels(v));
    cnx_volume_free(v);
    return rc;
}

static const cnx_stage noop_stage = {
    "noop", 1, noop_run, NULL,
    "No-op stage for benchmarks: copies each chunk of its source to its "
    "output."};

/* ---- helpers ---------------------------------------------------------- */

static void die(const char *what)
{
    fprintf(stderr, "bench_runtime: %s: %s\n", what,
            cnx_error_last()->message);
    exit(1);
}

static double dd_mbs(const char *dir)
{
    char cmd[512], line[512];
    double mbs = 0;
    snprintf(cmd, sizeof(cmd),
             "dd if=/dev/zero of=%s/dd.bin bs=2M count=64 conv=fdatasync "
             "2>&1 | tail -1; rm -f %s/dd.bin",
             dir, dir);
    FILE *p = popen(cmd, "r");
    while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
        /* "... copied, 0.5 s, 268 MB/s" */
        char *comma = strrchr(line, ',');
        if (comma != NULL) {
            double v = strtod(comma + 1, NULL);
            if (strstr(comma, "GB/s"))
                v *= 1000;
            if (strstr(comma, "kB/s"))
                v /= 1000;
            mbs = v;
        }
    }
    if (p != NULL)
        pclose(p);
    return mbs;
}

/* ---- part 1 ------------------------------------------------------------ */

/* Create the image layer at url and fill it with the bench's pattern. */
static void write_source_layer(const char *url, const cnx_layer_info *info,
                               const int64_t size[3], const char *what)
{
    cnx_box all = cnx_box_make(0, 0, 0, size[0], size[1], size[2]);
    cnx_layer *layer;
    cnx_volume *v;
    if (cnx_layer_create(&layer, url, info) != 0 ||
        cnx_volume_new(&v, CNX_DT_UINT8, &all, 1) != 0)
        die(what);
    for (size_t i = 0; i < cnx_volume_bytes(v); i++)
        ((uint8_t *)v->data)[i] = (uint8_t)(i * 2654435761u >> 24);
    if (cnx_layer_write(layer, 0, v, NULL) != 0)
        die(what);
    cnx_volume_free(v);
    cnx_layer_free(layer);
}

static void part1(const char *boot, const char *dir, int repeat)
{
    cnx_kafka_opts k = {boot, NULL, "bench", 0};
    cnx_producer *prod;
    cnx_consumer *cons;
    cnx_key *key;
    double rt[256], st[256], sg[256], cm[256], dg[64], pw[64], gr[64];
    const char *topics[] = {"cnx.events"};
    char payload[1024], *statement = NULL, *envelope = NULL;
    char digest[CNX_DIGEST_LEN];
    const size_t chunk = 128 * 128 * 128;
    uint8_t *buf = malloc(chunk);
    cnx_store *store;

    memset(payload, 'x', sizeof(payload) - 1);
    payload[sizeof(payload) - 1] = '\0';
    if (cnx_producer_new(&prod, &k) != 0 || cnx_key_generate(&key) != 0)
        die("setup");
    for (int i = 0; i < repeat; i++) {
        double t0 = cnx_now();
        if (cnx_producer_send(prod, "cnx.events", NULL, payload,
                              strlen(payload), NULL, 0) != 0 ||
            cnx_producer_flush(prod, 10000) != 0)
            die("produce");
        rt[i] = (cnx_now() - t0) * 1e3;
    }
    /* A statement the size of a downsample task's. */
    cnx_artifact out = {"file:///data/layer/16_16_16/0-64_0-64_0-64",
                        "sha256:2aba1672ef8c9a7cbc6cdff7ec18e617fbb6a06557807"
                        "cccd4a1678d07380418"};
    cnx_artifact in = {"file:///data/layer/8_8_8/0-128_0-128_0-128",
                       "sha256:3b598333494007eea71310a5a9c78367d8c2e836787284"
                       "d7e21042f467cb8874"};
    const char *task = "{\"schema\":\"cnx.task/1\",\"stage\":\"noop\","
                       "\"kernel_version\":1}";
    cnx_provenance prov = {task, in.digest, "noop", 1, &out, 1, &in, 1,
                           cnx_build_commit(), 0, NULL, "bench", 1,
                           1795000000.0, 1795000000.5};
    for (int i = 0; i < repeat; i++) {
        double t0 = cnx_now();
        free(statement);
        if (cnx_provenance_statement(&prov, &statement) != 0)
            die("statement");
        st[i] = (cnx_now() - t0) * 1e3;
        t0 = cnx_now();
        free(envelope);
        if (cnx_dsse_sign(key, CNX_DSSE_PAYLOAD_TYPE, statement,
                          strlen(statement), &envelope) != 0)
            die("sign");
        sg[i] = (cnx_now() - t0) * 1e3;
    }
    if (cnx_consumer_new(&cons, &k, "bench", "bench-1", topics, 1, 0) != 0)
        die("consumer");
    int n = 0;
    double until = cnx_now() + 20;
    while (n < repeat && cnx_now() < until) {
        cnx_message *m = NULL;
        cnx_consumer_poll(cons, 100, &m);
        if (m == NULL)
            continue;
        double t0 = cnx_now();
        if (cnx_consumer_commit(cons, m) == 0)
            cm[n++] = (cnx_now() - t0) * 1e3;
        cnx_message_free(m);
    }
    double mrt = bench_median(rt, repeat), mst = bench_median(st, repeat),
           msg = bench_median(sg, repeat), mcm = n ? bench_median(cm, n) : 0;
    double total = 2 * mrt + mst + msg + mcm;
    printf("runtime overhead per task (medians of %d):\n", repeat);
    printf("  kafka round trip (produce + ack)  %7.3f ms  x2 (manifest, "
           "then event)\n", mrt);
    printf("  provenance statement              %7.3f ms\n", mst);
    printf("  Ed25519 signature                 %7.3f ms\n", msg);
    printf("  offset commit (sync)              %7.3f ms\n", mcm);
    printf("  total                             %7.3f ms  target <= 5 ms: "
           "%s\n", total, total <= 5.0 ? "PASS" : "ABOVE");
    cnx_consumer_free(cons);

    /* Data costs on one 128^3 uint8 chunk. */
    for (size_t i = 0; i < chunk; i++)
        buf[i] = (uint8_t)(i * 2654435761u >> 24);
    if (cnx_store_open(&store, dir) != 0)
        die("store");
    int r2 = repeat < 32 ? repeat : 32;
    for (int i = 0; i < r2; i++) {
        char name[64];
        uint8_t *back;
        size_t len;
        double t0 = cnx_now();
        cnx_digest(buf, chunk, digest);
        dg[i] = (cnx_now() - t0) * 1e3;
        snprintf(name, sizeof(name), "p/%d", i);
        buf[0] = (uint8_t)i;
        t0 = cnx_now();
        if (cnx_store_put(store, name, buf, chunk, NULL) != 0)
            die("put");
        pw[i] = (cnx_now() - t0) * 1e3;
        t0 = cnx_now();
        if (cnx_store_get(store, name, 0, &back, &len) != 0)
            die("get");
        gr[i] = (cnx_now() - t0) * 1e3;
        free(back);
    }
    double md = bench_median(dg, r2), mp = bench_median(pw, r2);
    double mg = bench_median(gr, r2);
    double mb = (double)chunk / 1e6;
    printf("data costs per 128^3 uint8 chunk (2.1 MB, medians of %d):\n",
           r2);
    printf("  sha256                            %7.3f ms  %7.1f MB/s  "
           "openssl speed %7.1f MB/s\n",
           md, mb / (md / 1e3), bench_openssl_sha256_mbs());
    printf("  durable put (write, fsync, link)  %7.3f ms  %7.1f MB/s  dd "
           "conv=fdatasync %7.1f MB/s\n",
           mp, mb / (mp / 1e3), dd_mbs(dir));
    printf("  read                              %7.3f ms  %7.1f MB/s\n", mg,
           mb / (mg / 1e3));
    cnx_store_free(store);
    cnx_producer_free(prod);
    cnx_key_free(key);
    free(statement);
    free(envelope);
    free(buf);
}

/* ---- part 2 ------------------------------------------------------------ */

/* Plan the noop stage from src to dst (both made) as request: *o filled,
 * its task documents in *tasks (n of them). */
static void plan_noop(cnx_submit_opts *o, const char *src, const char *dst,
                      const cnx_layer_info *info, const char *request,
                      char ***tasks, size_t *n)
{
    memset(o, 0, sizeof(*o));
    o->stage = "noop";
    o->kernel_version = 1;
    o->input_role = "source";
    o->layer = src;
    o->output_layer = dst;
    o->output_scale = info->scales[0].key;
    o->request = request;
    o->deadline = "2030-01-01T00:00:00Z";
    o->retry_budget = 3;
    if (cnx_submit_plan(o, tasks, n) != 0)
        die("plan");
}

static void part2(const char *self, const char *boot, const char *dir,
                  int ntasks, int nworkers)
{
    const int64_t chunk[3] = {128, 128, 128};
    int64_t size[3] = {128 * (int64_t)ntasks, 128, 128};
    const double res[3] = {8, 8, 8};
    char src[600], dst[600], keydir[600], keypath[700];
    cnx_layer_info info;
    cnx_layer *layer;
    cnx_key *key;
    cnx_submit_opts o;
    char **tasks;
    size_t n;
    pid_t pids[16];
    cnx_kafka_opts k = {boot, NULL, "bench", 0};
    cnx_producer *prod;

    if (size[0] > 128 * 4096)
        size[0] = 128 * 4096;
    snprintf(src, sizeof(src), "file://%s/src", dir);
    snprintf(dst, sizeof(dst), "file://%s/dst", dir);
    snprintf(keydir, sizeof(keydir), "%s/keys", dir);
    snprintf(keypath, sizeof(keypath), "%s/cnx.key", keydir);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, res, chunk);
    write_source_layer(src, &info, size, "source layer");
    if (cnx_layer_create(&layer, dst, &info) != 0)
        die("output layer");
    cnx_layer_free(layer);
    if (cnx_key_generate(&key) != 0 || cnx_key_write(key, keydir) != 0)
        die("key");
    cnx_key_free(key);

    plan_noop(&o, src, dst, &info, "bench", &tasks, &n);
    for (int w = 0; w < nworkers; w++) {
        char inst[32];
        snprintf(inst, sizeof(inst), "bench-%d", w);
        pids[w] = fork();
        if (pids[w] == 0) {
            execl(self, self, "--worker", "--brokers", boot, "--key", keypath,
                  "--instance", inst, "--allow-dirty", "--quiet",
                  (char *)NULL);
            _exit(127);
        }
    }
    sleep(3); /* let the group form before the clock starts */
    if (cnx_producer_new(&prod, &k) != 0)
        die("producer");
    double t0 = cnx_now();
    for (size_t i = 0; i < n; i++)
        if (cnx_producer_send(prod, "cnx.tasks.noop", NULL, tasks[i],
                              strlen(tasks[i]), NULL, 0) != 0)
            die("send");
    cnx_producer_flush(prod, 30000);
    /* Count succeeded events until all are in. */
    const char *topics[] = {"cnx.events"};
    cnx_consumer *cons;
    if (cnx_consumer_new(&cons, &k, "bench-events", NULL, topics, 1, 0) != 0)
        die("events consumer");
    size_t done = 0;
    static double task_total[4096], task_write[4096];
    double last = t0, until = cnx_now() + 300;
    while (done < n && cnx_now() < until) {
        cnx_message *m = NULL;
        cnx_consumer_poll(cons, 200, &m);
        if (m == NULL)
            continue;
        if (memmem(m->value, m->len, "\"type\":\"succeeded\"", 18) != NULL &&
            memmem(m->value, m->len, "\"stage\":\"noop\"", 14) != NULL) {
            const char *tt = memmem(m->value, m->len, "\"total_s\":", 10);
            const char *tw = memmem(m->value, m->len, "\"write_s\":", 10);
            if (tt != NULL && tw != NULL && done < 4096) {
                task_total[done] = strtod(tt + 10, NULL) * 1e3;
                task_write[done] = strtod(tw + 10, NULL) * 1e3;
            }
            done++;
            last = cnx_now();
        }
        cnx_message_free(m);
    }
    double secs = last - t0;
    size_t nt = done < 4096 ? done : 4096;
    if (nt > 0)
        printf("in the workers, per task (medians): %.2f ms from take to "
               "outputs durable, of which %.2f ms writing\n",
               bench_median(task_total, (int)nt),
               bench_median(task_write, (int)nt));
    printf("end to end: %zu no-op tasks on 128^3 uint8 chunks, %d workers: "
           "%.2f s, %.1f tasks/s  target >= 60: %s\n",
           done, nworkers, secs, secs > 0 ? (double)done / secs : 0.0,
           done == n && (double)done / secs >= 60 ? "PASS" : "BELOW");
    for (int w = 0; w < nworkers; w++) {
        kill(pids[w], SIGTERM);
        waitpid(pids[w], NULL, 0);
    }
    /* The event reader is left to the process exit: librdkafka 2.0.2 can
     * assert while destroying a cooperative-sticky consumer whose group
     * is being torn down (librdkafka #4312, fixed in 2.3). */
    (void)cons;
    cnx_producer_free(prod);
    for (size_t i = 0; i < n; i++)
        free(tasks[i]);
    free(tasks);
}

/* ---- part 3 ------------------------------------------------------------ */

/* The workers' key (part 2 writes it too), DIR/keys/cnx.key. */
static void make_key(const char *dir)
{
    char keydir[600];
    cnx_key *key;
    snprintf(keydir, sizeof(keydir), "%s/keys", dir);
    if (cnx_key_generate(&key) != 0 || cnx_key_write(key, keydir) != 0)
        die("key");
    cnx_key_free(key);
}

static int run_cmd(const char *cmd)
{
    int rc = system(cmd);
    return rc == 0 ? 0 : -1;
}

/* One run of part 3: a fresh output layer, request and cache; one worker
 * with --prefetch mode. Sets tasks/s and the storage-wait fraction. */
static int prefetch_run(const char *self, const char *boot, const char *dir,
                        const char *src, const cnx_layer_info *info,
                        const char *keypath, cnx_consumer *cons, int round,
                        int mode, int kernel_ms, double *tps, double *wait)
{
    char dst[600], cache[600], request[64], kms[16], pmode[4];
    char inst[32], want_req[96];
    cnx_layer *layer;
    cnx_submit_opts o;
    cnx_kafka_opts k = {boot, NULL, "bench", 0};
    cnx_producer *prod;
    char **tasks;
    size_t n, done = 0;
    double read_sum = 0, t0, last, until;
    pid_t pid;

    snprintf(dst, sizeof(dst), "file://%s/pf-%d-%d", dir, round, mode);
    snprintf(cache, sizeof(cache), "%s/cache-%d-%d", dir, round, mode);
    snprintf(request, sizeof(request), "bench-pf-%d-%d", round, mode);
    snprintf(want_req, sizeof(want_req), "\"request\":\"%s\"", request);
    snprintf(kms, sizeof(kms), "%d", kernel_ms);
    snprintf(pmode, sizeof(pmode), "%d", mode);
    /* One static member id for every run: each run's worker takes the
     * place of the last at once, without a session timeout's wait. */
    snprintf(inst, sizeof(inst), "bench-pf");
    if (cnx_layer_create(&layer, dst, info) != 0)
        die("prefetch output layer");
    cnx_layer_free(layer);
    plan_noop(&o, src, dst, info, request, &tasks, &n);
    pid = fork();
    if (pid == 0) {
        execl(self, self, "--worker", "--brokers", boot, "--key", keypath,
              "--instance", inst, "--group", "bench-pf", "--allow-dirty",
              "--session-timeout-ms", "6000",
              "--quiet", "--cache", cache, "--slow-ms", kms, "--prefetch",
              pmode, (char *)NULL);
        _exit(127);
    }
    sleep(3); /* let the group form before the clock starts */
    if (cnx_producer_new(&prod, &k) != 0)
        die("producer");
    for (size_t i = 0; i < n; i++)
        if (cnx_producer_send(prod, "cnx.tasks.noop", NULL, tasks[i],
                              strlen(tasks[i]), NULL, 0) != 0)
            die("send");
    cnx_producer_flush(prod, 30000);
    /* The clock runs from the first `started` event of this run (the
     * worker's group join, which varies, is left out) to the last
     * `succeeded`. */
    t0 = 0;
    last = 0;
    until = cnx_now() + 300;
    while (done < n && cnx_now() < until) {
        cnx_message *m = NULL;
        cnx_consumer_poll(cons, 200, &m);
        if (m == NULL)
            continue;
        if (m->value == NULL ||
            memmem(m->value, m->len, want_req, strlen(want_req)) == NULL) {
            cnx_message_free(m);
            continue;
        }
        if (t0 == 0 &&
            memmem(m->value, m->len, "\"type\":\"started\"", 16) != NULL)
            t0 = cnx_now();
        if (memmem(m->value, m->len, "\"type\":\"succeeded\"", 18) != NULL) {
            const char *tr = memmem(m->value, m->len, "\"read_s\":", 9);
            if (tr != NULL)
                read_sum += strtod(tr + 9, NULL);
            done++;
            last = cnx_now();
        }
        cnx_message_free(m);
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    cnx_producer_free(prod);
    for (size_t i = 0; i < n; i++)
        free(tasks[i]);
    free(tasks);
    if (done < n) {
        fprintf(stderr, "bench_runtime: prefetch %d: %zu of %zu tasks done\n",
                mode, done, n);
        return -1;
    }
    *tps = t0 > 0 && last > t0 ? (double)done / (last - t0) : 0;
    *wait = t0 > 0 && last > t0 ? read_sum / (last - t0) : 0;
    return 0;
}

static void part3(const char *self, const char *boot, const char *dir,
                  int ntasks, int rounds, int kernel_ms)
{
    const int64_t chunk[3] = {128, 128, 128};
    int64_t size[3] = {128 * (int64_t)ntasks, 128, 128};
    const double res[3] = {8, 8, 8};
    char script[512], srv[600], cmd[2048], endpoint[256] = "", src[600];
    char keypath[700];
    double tps[2][16], wait[2][16];
    cnx_layer_info info;
    cnx_consumer *cons = NULL; /* left to the process exit, as in part 2 */
    FILE *f;
    int ok = 1;

    printf("prefetch: 1 worker, %d tasks of one 128^3 uint8 chunk read from "
           "s3rver, kernel %d ms, fresh cache per run, %d rounds\n",
           ntasks, kernel_ms, rounds);
    bench_peer_path(script, sizeof(script), "../tests/support/s3rver.sh");
    snprintf(srv, sizeof(srv), "%s/s3rver", dir);
    snprintf(cmd, sizeof(cmd), "bash '%s' start '%s' cnx-bench >'%s.log' 2>&1",
             script, srv, srv);
    if (access(script, R_OK) != 0 || run_cmd(cmd) != 0) {
        printf("  skipped: s3rver did not start (%s.log)\n", srv);
        return;
    }
    snprintf(cmd, sizeof(cmd), "%s/endpoint", srv);
    f = fopen(cmd, "r");
    if (f == NULL || fgets(endpoint, sizeof(endpoint), f) == NULL)
        ok = 0;
    if (f != NULL)
        fclose(f);
    endpoint[strcspn(endpoint, "\r\n")] = '\0';
    /* s3rver's account; the forked workers inherit these. */
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    setenv("AWS_ENDPOINT_URL", endpoint, 1);
    setenv("AWS_CONFIG_FILE", "/dev/null", 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null", 1);
    unsetenv("CNX_CACHE_DIR");
    snprintf(src, sizeof(src), "s3://cnx-bench/src");
    snprintf(keypath, sizeof(keypath), "%s/keys/cnx.key", dir);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, res, chunk);
    if (ok)
        write_source_layer(src, &info, size, "s3 source layer");
    /* The event reader joins once, before any run, so that it sees each
     * event as it comes. */
    if (ok) {
        cnx_kafka_opts k = {boot, NULL, "bench", 0};
        const char *topics[] = {"cnx.events"};
        double until = cnx_now() + 60;
        if (cnx_consumer_new(&cons, &k, "bench-pf-events", NULL, topics, 1,
                             0) != 0)
            die("events consumer");
        while (cnx_consumer_assignment_count(cons) <= 0 &&
               cnx_now() < until) {
            cnx_message *m = NULL;
            cnx_consumer_poll(cons, 200, &m);
            cnx_message_free(m);
        }
    }
    for (int r = 0; ok && r < rounds; r++)
        for (int m = 0; ok && m < 2; m++) {
            /* Alternate which mode goes first, so that drift on a shared
             * machine falls on both. */
            int mode = (r % 2 == 0) ? m : 1 - m;
            if (prefetch_run(self, boot, dir, src, &info, keypath, cons, r,
                             mode, kernel_ms, &tps[mode][r],
                             &wait[mode][r]) != 0)
                ok = 0;
            else
                printf("  round %d --prefetch %d: %6.1f tasks/s, waiting "
                       "on storage %5.1f %% of the wall time\n",
                       r, mode, tps[mode][r], 100 * wait[mode][r]);
        }
    if (ok) {
        double t0 = bench_median(tps[0], rounds);
        double t1 = bench_median(tps[1], rounds);
        double w0 = bench_median(wait[0], rounds);
        double w1 = bench_median(wait[1], rounds);
        printf("  medians: --prefetch 0 %6.1f tasks/s, waiting %5.1f %%; "
               "--prefetch 1 %6.1f tasks/s, waiting %5.1f %%; "
               "on/off tasks/s x%.2f\n",
               t0, 100 * w0, t1, 100 * w1, t0 > 0 ? t1 / t0 : 0.0);
    }
    snprintf(cmd, sizeof(cmd), "bash '%s' stop '%s' >/dev/null 2>&1", script,
             srv);
    if (run_cmd(cmd) != 0)
        fprintf(stderr, "bench_runtime: stopping s3rver failed\n");
}

int main(int argc, char **argv)
{
    int ntasks = 240, nworkers = 2, repeat = 101;
    int pf_tasks = 40, pf_rounds = 3, kernel_ms = 40, parts = 7;
    char dir[] = "/tmp/cnx-bench-runtime-XXXXXX", cmd[128];
    cnx_broker *broker;

    if (argc > 1 && strcmp(argv[1], "--worker") == 0) {
        argv[1] = argv[0];
        return cnx_worker_main(&noop_stage, argc - 1, argv + 1);
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tasks") == 0 && i + 1 < argc)
            ntasks = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
            nworkers = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--prefetch-tasks") == 0 && i + 1 < argc)
            pf_tasks = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            pf_rounds = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--kernel-ms") == 0 && i + 1 < argc)
            kernel_ms = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--parts") == 0 && i + 1 < argc)
            parts = (int)strtol(argv[++i], NULL, 10);
        else {
            printf("usage: bench_runtime [--tasks N] [--workers N] "
                   "[--repeat N]\n"
                   "                     [--prefetch-tasks N] [--rounds N] "
                   "[--kernel-ms MS] [--parts MASK]\n"
                   "  --tasks, --workers   part 2 (default 240 tasks, 2 "
                   "workers)\n"
                   "  --repeat N           part 1 samples (default 101)\n"
                   "  --prefetch-tasks N   part 3: tasks per run (default "
                   "40)\n"
                   "  --rounds N           part 3: runs per mode (default "
                   "3)\n"
                   "  --kernel-ms MS       part 3: kernel time per task "
                   "(default 40)\n"
                   "  --parts MASK         1: part 1, 2: part 2, 4: part 3 "
                   "(default 7)\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (ntasks < 1 || ntasks > 4096 || nworkers < 1 || nworkers > 16 ||
        repeat < 3 || repeat > 256 || pf_tasks < 2 || pf_tasks > 1024 ||
        pf_rounds < 1 || pf_rounds > 16 || kernel_ms < 0 ||
        kernel_ms > 60000 || parts < 1 || parts > 7) {
        fprintf(stderr, "bench_runtime: bad --tasks/--workers/--repeat/"
                "--prefetch-tasks/--rounds/--kernel-ms/--parts\n");
        return 2;
    }
    cnx_log_set_level(CNX_LOG_WARN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (mkdtemp(dir) == NULL ||
        cnx_broker_new(&broker, 1, 4, "noop,downsample") != 0)
        die("broker");
    printf("bench_runtime: %s\n", cnx_build_describe());
    if (parts & 1)
        part1(cnx_broker_bootstraps(broker), dir, repeat);
    if (parts & 2)
        part2(argv[0], cnx_broker_bootstraps(broker), dir, ntasks, nworkers);
    if (parts & 4) {
        if (!(parts & 2))
            make_key(dir);
        part3(argv[0], cnx_broker_bootstraps(broker), dir, pf_tasks,
              pf_rounds, kernel_ms);
    }
    /* The broker goes with the process, after the event reader above. */
    (void)broker;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}
