/*
 * bench_verify - how fast cnx-verify's library checks lineage.
 *
 *   build/bench/bench_verify [N] [MIB]     (defaults 20000 manifests, 256)
 *
 * (a) Manifests: N realistic manifests are signed in memory before any
 * clock starts (in-toto statement, SLSA provenance with the embedded
 * cnx.task/1, DSSE, Ed25519; 1 to 3 outputs and 1 to 3 inputs each). They
 * form four stages: the first reads raw objects, each later one reads
 * outputs of the stage before, so the input check walks real lineage.
 * Timed: cnx_verify_new, cnx_verify_add_envelope of every envelope and
 * cnx_verify_run with storage reads off (signature, statement, input),
 * exactly the path cnx-verify takes after reading its files; 3 runs per
 * thread count (1, 2), median; manifests/s (target >= 5000), and per
 * manifest the CPU time of all threads (steadier than the wall clock on a
 * shared machine) and the wall time of adding, of the signature and
 * statement rounds, and of the rest of the run. Beside it,
 * cnx_dsse_verify alone on one thread, to show where the time goes.
 * (b) Subjects: MIB objects of 1 MiB of pseudo-random bytes are written
 * to a temporary layer (and so are in the page cache), covered by 16
 * manifests of 16 subjects each; timed: the run's hashing phase
 * (cnx_verify_stats.hash_s) with the subject check alone, 5 runs per
 * thread count, median MB/s, beside `openssl speed -evp sha256` (one
 * thread, 16 KiB blocks) run now; target: ratio >= 0.80 on one thread.
 * Exit 0 if every run found no finding (whatever the rates), 1 otherwise.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/cli.h"
#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/log.h"
#include "cnx/store.h"
#include "cnx/task.h"
#include "cnx/verify.h"

#define RUNS 3
#define HASH_RUNS 5
#define TARGET_MPS 5000.0
#define TARGET_RATIO 0.80
#define LEVELS 4
#define MAX_OUT 3
#define MAX_IN 3
#define COMMIT "85d6289e1c31b101b786246c5921ab9750ca10d8"

typedef struct art {
    char name[160];
    char digest[CNX_DIGEST_LEN];
} art;

typedef struct signed_set {
    char **env;
    size_t *len;
    size_t n;
} signed_set;

static int fail(const char *what)
{
    fprintf(stderr, "bench_verify: %s: %s\n", what,
            cnx_error_last()->message);
    return 1;
}

static int cmp_art(const void *a, const void *b)
{
    return strcmp(((const art *)a)->name, ((const art *)b)->name);
}

/* One task's envelope: reads in[0..nin) (all in layer in_layer), writes
 * out[0..nout) in out_layer. */
static char *sign_one(const cnx_key *key, int64_t i, const char *in_layer,
                      const art *in, size_t nin, const char *out_layer,
                      const art *out, size_t nout, const char *params)
{
    char task_text[8192], objects[4096] = "", *task_json = NULL;
    if (nout > 16 || nin > MAX_IN)
        return NULL;
    char *stmt = NULL, *env = NULL;
    cnx_artifact outs[16], ins[MAX_IN];
    cnx_provenance p;
    cnx_task *task = NULL;
    size_t used = 0, plen = strlen(in_layer);

    for (size_t k = 0; k < nin; k++)
        used += (size_t)snprintf(objects + used, sizeof(objects) - used,
                                 "%s\"%s\":\"%s\"", k ? "," : "",
                                 in[k].name + plen + 1, in[k].digest);
    snprintf(task_text, sizeof(task_text),
             "{\"schema\":\"cnx.task/1\",\"request\":\"bench-verify\","
             "\"stage\":\"segment\",\"kernel_version\":3,"
             "\"roi\":{\"min\":[%" PRId64 ",0,0],\"max\":[%" PRId64
             ",64,64]},\"halo\":2,\"inputs\":{%s%s%s%s%s},"
             "\"output\":{\"layer\":\"%s\",\"scale\":\"8_8_8\"},"
             "\"parameters\":%s,\"deadline\":\"2026-11-23T10:00:00Z\"}",
             i * 64, i * 64 + 64, nin ? "\"boundary\":{\"layer\":\"" : "",
             nin ? in_layer : "",
             nin ? "\",\"scale\":\"8_8_8\",\"objects\":{" : "", objects,
             nin ? "}}" : "", out_layer, params);
    if (cnx_task_parse(&task, task_text, strlen(task_text)) != 0 ||
        cnx_task_to_json(task, &task_json) != 0) {
        fail("task");
        goto done;
    }
    for (size_t k = 0; k < nout; k++) {
        outs[k].name = out[k].name;
        outs[k].digest = out[k].digest;
    }
    for (size_t k = 0; k < nin; k++) {
        ins[k].name = in[k].name;
        ins[k].digest = in[k].digest;
    }
    memset(&p, 0, sizeof(p));
    p.task_json = task_json;
    p.task_key = task->key;
    p.stage = "segment";
    p.kernel_version = 3;
    p.outputs = outs;
    p.noutputs = nout;
    p.inputs = ins;
    p.ninputs = nin;
    p.git_commit = COMMIT;
    p.container_digest =
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    p.worker = "bench-7f9c";
    p.attempt = 1 + (int)(i % 2);
    p.started = 1790000000.25 + (double)i;
    p.finished = p.started + 12.25;
    if (cnx_provenance_statement(&p, &stmt) != 0 ||
        cnx_dsse_sign(key, CNX_DSSE_PAYLOAD_TYPE, stmt, strlen(stmt), &env) !=
            0) {
        fail("statement");
        env = NULL;
    }
done:
    free(stmt);
    free(task_json);
    cnx_task_free(task);
    return env;
}

/* (a)'s manifests: LEVELS stages, each reading the one before. */
static int make_manifests(const cnx_key *key, size_t n, signed_set *set)
{
    art *outs = calloc(n * MAX_OUT, sizeof(*outs));
    size_t *nouts = calloc(n, sizeof(*nouts));
    uint64_t seed = 42;
    int rc = 0;
    set->env = calloc(n, sizeof(*set->env));
    set->len = calloc(n, sizeof(*set->len));
    set->n = n;
    if (outs == NULL || nouts == NULL || set->env == NULL ||
        set->len == NULL) {
        free(outs);
        free(nouts);
        return 1;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t level = i * LEVELS / n, first = level * n / LEVELS;
        size_t prev_first = level > 0 ? (level - 1) * n / LEVELS : 0;
        size_t nin = 1 + (size_t)(splitmix(&seed) % MAX_IN);
        char in_layer[64], out_layer[64];
        art in[MAX_IN];
        snprintf(out_layer, sizeof(out_layer), "file:///bench/s%zu/v1",
                 level);
        if (level == 0)
            snprintf(in_layer, sizeof(in_layer), "file:///bench/raw");
        else
            snprintf(in_layer, sizeof(in_layer), "file:///bench/s%zu/v1",
                     level - 1);
        for (size_t k = 0; k < nin; k++) {
            if (level == 0) {
                char blob[64];
                snprintf(in[k].name, sizeof(in[k].name),
                         "%s/8_8_8/%zu-%zu_0-64_0-64", in_layer, i * 64 + k,
                         i * 64 + k + 64);
                snprintf(blob, sizeof(blob), "raw %zu %zu", i, k);
                cnx_digest(blob, strlen(blob), in[k].digest);
            } else {
                /* an output of a random task of the stage before */
                size_t src = prev_first +
                             (size_t)(splitmix(&seed) % (first - prev_first));
                size_t o = (size_t)(splitmix(&seed) % nouts[src]);
                in[k] = outs[src * MAX_OUT + o];
            }
        }
        qsort(in, nin, sizeof(*in), cmp_art);
        for (size_t k = 1; k < nin; k++) /* no duplicate input */
            if (strcmp(in[k].name, in[k - 1].name) == 0) {
                memmove(&in[k], &in[k + 1], (nin - k - 1) * sizeof(*in));
                nin--;
                k--;
            }
        nouts[i] = 1 + (size_t)(splitmix(&seed) % MAX_OUT);
        for (size_t k = 0; k < nouts[i]; k++) {
            art *a = &outs[i * MAX_OUT + k];
            char blob[64];
            snprintf(a->name, sizeof(a->name), "%s/8_8_8/%zu-%zu_%zu-%zu_0-64",
                     out_layer, i * 64, i * 64 + 64, k * 64, k * 64 + 64);
            snprintf(blob, sizeof(blob), "out %zu %zu", i, k);
            cnx_digest(blob, strlen(blob), a->digest);
        }
        set->env[i] = sign_one(key, (int64_t)i, in_layer, in, nin, out_layer,
                               &outs[i * MAX_OUT], nouts[i],
                               "{\"seed_distance\":6,\"threshold\":0.5}");
        if (set->env[i] == NULL)
            rc = 1;
        else
            set->len[i] = strlen(set->env[i]);
    }
    free(outs);
    free(nouts);
    return rc;
}

static void free_set(signed_set *set)
{
    for (size_t i = 0; i < set->n; i++)
        free(set->env[i]);
    free(set->env);
    free(set->len);
}

/* CPU seconds of the process (every thread). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One verification of every envelope of set; seconds, or -1 (add_s: the
 * adding part; cpu_s: CPU seconds of all threads). */
static double verify_set(const char *trust, const signed_set *set,
                         unsigned checks, int storage, int threads,
                         cnx_verify_stats *stats, double *add_s,
                         double *cpu_s)
{
    cnx_verify_config cfg;
    cnx_verify *v = NULL;
    size_t nf = 0;
    double c0 = cpu_now(), t0 = cnx_now(), dt;
    cnx_verify_config_init(&cfg);
    cfg.trust_dir = trust;
    cfg.checks = checks;
    cfg.storage = storage;
    cfg.threads = threads;
    if (cnx_verify_new(&v, &cfg) != 0)
        return fail("cnx_verify_new"), -1;
    for (size_t i = 0; i < set->n; i++) {
        char origin[32];
        snprintf(origin, sizeof(origin), "manifest-%zu", i);
        if (cnx_verify_add_envelope(v, origin, set->env[i], set->len[i]) !=
            0) {
            cnx_verify_free(v);
            return fail("add"), -1;
        }
    }
    if (add_s != NULL)
        *add_s = cnx_now() - t0;
    if (cnx_verify_run(v) != 0) {
        cnx_verify_free(v);
        return fail("run"), -1;
    }
    dt = cnx_now() - t0;
    if (cpu_s != NULL)
        *cpu_s = cpu_now() - c0;
    const cnx_verify_finding *f = cnx_verify_findings(v, &nf);
    if (nf > 0) {
        fprintf(stderr, "bench_verify: %zu findings, first: %s: %s: %s\n", nf,
                f[0].object, f[0].check, f[0].reason);
        dt = -1;
    }
    cnx_verify_get_stats(v, stats);
    cnx_verify_free(v);
    return dt;
}

static int bench_manifests(const char *trust, const cnx_key *pub, size_t n)
{
    signed_set set;
    cnx_verify_stats stats;
    double t0, alone, rate[2] = {0, 0};
    cnx_key *trusted[1] = {(cnx_key *)pub};
    int rc = 0;

    t0 = cnx_now();
    if (make_manifests(pub, n, &set) != 0)
        return 1;
    printf("manifests: %zu signed in %.1f s (%d stages, 1-%d outputs, "
           "1-%d inputs each)\n",
           n, cnx_now() - t0, LEVELS, MAX_OUT, MAX_IN);
    t0 = cnx_now();
    for (size_t i = 0; i < n; i++)
        if (cnx_dsse_verify(set.env[i], set.len[i], trusted, 1, NULL, NULL,
                            NULL) != 0)
            rc = 1;
    alone = cnx_now() - t0;
    printf("  cnx_dsse_verify alone, 1 thread: %.0f /s (%.0f us each)\n",
           (double)n / alone, alone / (double)n * 1e6);
    for (int t = 1; t <= 2; t++) {
        double secs[RUNS], add[RUNS], rounds[RUNS], rest[RUNS], cpu[RUNS];
        for (int r = 0; r < RUNS; r++) {
            secs[r] = verify_set(trust, &set,
                                 CNX_VERIFY_SIGNATURE | CNX_VERIFY_STATEMENT |
                                     CNX_VERIFY_INPUT,
                                 0, t, &stats, &add[r], &cpu[r]);
            if (secs[r] < 0)
                rc = 1;
            rounds[r] = stats.verify_s;
            rest[r] = stats.total_s - stats.verify_s;
        }
        double med = bench_median(secs, RUNS);
        rate[t - 1] = (double)n / med;
        printf("  verify (signature+statement+input), %d thread%s: "
               "%.0f manifests/s (median of %d: %.3f s; %zu inputs traced)"
               "\n",
               t, t > 1 ? "s" : "", rate[t - 1], RUNS, med, stats.inputs);
        printf("    per manifest (medians): %.0f us CPU; wall: adding %.0f "
               "us, signatures and statements %.0f us, the rest %.0f us\n",
               bench_median(cpu, RUNS) / (double)n * 1e6,
               bench_median(add, RUNS) / (double)n * 1e6,
               bench_median(rounds, RUNS) / (double)n * 1e6,
               bench_median(rest, RUNS) / (double)n * 1e6);
    }
    printf("  target >= %.0f manifests/s: %s (best %.0f)\n", TARGET_MPS,
           (rate[0] > rate[1] ? rate[0] : rate[1]) >= TARGET_MPS ? "met"
                                                                 : "NOT met",
           rate[0] > rate[1] ? rate[0] : rate[1]);
    free_set(&set);
    return rc;
}

static int bench_subjects(const char *trust, const cnx_key *key, size_t mib)
{
    char dir[] = "/tmp/bench-verify-XXXXXX", layer[64];
    const size_t per = 16, size = (size_t)1 << 20;
    size_t nman = (mib + per - 1) / per;
    uint8_t *buf = malloc(size);
    art *outs = calloc(mib, sizeof(*outs));
    signed_set set = {0};
    cnx_store *store = NULL;
    cnx_verify_stats stats;
    uint64_t seed = 9;
    double openssl, mbs[2] = {0, 0};
    int rc = 0;

    if (buf == NULL || outs == NULL || mkdtemp(dir) == NULL) {
        free(buf);
        free(outs);
        return 1;
    }
    snprintf(layer, sizeof(layer), "file://%s/layer", dir);
    if (cnx_store_open(&store, layer) != 0) {
        rc = fail("store");
        goto done;
    }
    for (size_t i = 0; i < mib; i++) {
        char name[64];
        for (size_t k = 0; k < size / 8; k++)
            ((uint64_t *)buf)[k] = splitmix(&seed);
        snprintf(name, sizeof(name), "8_8_8/%zu-%zu_0-64_0-64", i * 64,
                 i * 64 + 64);
        snprintf(outs[i].name, sizeof(outs[i].name), "%s/%s", layer, name);
        if (cnx_store_put(store, name, buf, size, outs[i].digest) != 0) {
            rc = fail("put");
            goto done;
        }
    }
    set.env = calloc(nman, sizeof(*set.env));
    set.len = calloc(nman, sizeof(*set.len));
    set.n = nman;
    for (size_t m = 0; m < nman && set.env != NULL && set.len != NULL; m++) {
        size_t k = m * per, cnt = mib - k < per ? mib - k : per;
        set.env[m] = sign_one(key, (int64_t)m, "", NULL, 0, layer, &outs[k],
                              cnt, "{}");
        if (set.env[m] == NULL) {
            rc = 1;
            goto done;
        }
        set.len[m] = strlen(set.env[m]);
    }
    openssl = bench_openssl_sha256_mbs();
    printf("subjects: %zu objects of 1 MiB in %s, %zu manifests\n", mib, dir,
           nman);
    for (int t = 1; t <= 2; t++) {
        double v[HASH_RUNS];
        for (int r = 0; r < HASH_RUNS; r++) {
            if (verify_set(trust, &set, CNX_VERIFY_SUBJECT, 1, t, &stats,
                           NULL, NULL) < 0) {
                rc = 1;
                v[r] = 0;
                continue;
            }
            v[r] = (double)stats.bytes / 1e6 / stats.hash_s;
        }
        mbs[t - 1] = bench_median(v, HASH_RUNS);
        printf("  subject digests, %d thread%s: %.0f MB/s (median of %d; "
               "%" PRIu64 " bytes)  ratio to openssl: %.2f\n",
               t, t > 1 ? "s" : "", mbs[t - 1], HASH_RUNS, stats.bytes,
               openssl > 0 ? mbs[t - 1] / openssl : 0.0);
    }
    printf("  openssl speed -evp sha256 (1 thread, 16 KiB): %.0f MB/s\n",
           openssl);
    printf("  target ratio >= %.2f on 1 thread: %s\n", TARGET_RATIO,
           openssl > 0 && mbs[0] / openssl >= TARGET_RATIO ? "met"
                                                           : "NOT met");
done:
    if (set.env != NULL)
        free_set(&set);
    cnx_store_free(store);
    free(outs);
    free(buf);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            rc = 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    int64_t n = 20000, mib = 256;
    char keydir[] = "/tmp/bench-verify-keys-XXXXXX", sub[128], cmd[160];
    cnx_key *key = NULL;
    int rc = 0;

    if ((argc > 1 && cnx_cli_int(argv[1], 100, 10000000, &n) != 0) ||
        (argc > 2 && cnx_cli_int(argv[2], 16, 65536, &mib) != 0)) {
        fprintf(stderr, "usage: bench_verify [N manifests] [MiB]\n");
        return 2;
    }
    cnx_log_set_level(CNX_LOG_WARN);
    if (mkdtemp(keydir) == NULL || cnx_key_generate(&key) != 0)
        return fail("key");
    snprintf(sub, sizeof(sub), "%s/trust", keydir);
    if (cnx_key_write(key, sub) != 0)
        return fail("key");
    printf("bench_verify: %" PRId64 " manifests, %" PRId64 " MiB, "
           "%ld online cores\n",
           n, mib, sysconf(_SC_NPROCESSORS_ONLN));
    rc |= bench_manifests(sub, key, (size_t)n);
    rc |= bench_subjects(sub, key, (size_t)mib);
    cnx_key_free(key);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", keydir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
