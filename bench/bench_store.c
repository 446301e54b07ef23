/*
 * bench_store - object storage through cnx_store beside the curl CLI doing
 * the same transfers, and the read cache beside a file:// read.
 *
 *   build/bench/bench_store [--endpoint URL --bucket NAME] [--objects N]
 *                           [--repeats R] [--mib M]
 *
 * Without --endpoint (or AWS_ENDPOINT_URL with CNX_BENCH_BUCKET) it starts
 * s3rver on loopback with tests/support/s3rver.sh (bucket cnx-bench) and
 * stops it at the end.
 * Objects are M MiB (default 2) of pseudo-random bytes, N (16) per run.
 * (a) Transfers: per repeat (R, default 5) and connection count (1, 8):
 * N PUTs then N GETs of fresh keys through one shared s3:// store by 1 or
 * 8 threads; the same N files PUT and GET by one `curl` process
 * (sequential transfers on one connection for 1; --parallel --parallel-max
 * 8 for 8; SigV4-signed with --aws-sigv4 when the server accepts it, else
 * unsigned path-style; "Expect:" off as ours is); and the file:// store
 * (write-once put with fsync, plain get) by the same threads. Figures:
 * MB/s of a run (bytes / wall time), median over repeats; per-transfer
 * latency median and p90 over all repeats (curl's from -w time_total).
 * (b) Cache: a fresh cache directory per repeat; N verified reads of
 * objects in the bucket (misses: fetch, check, store in the cache), the
 * same N again (hits: read and check the entry), and beside them the
 * file:// store's verified read and plain read of the same bytes; per-read
 * latency median over all repeats.
 * Targets printed with their ratios, not asserted: our GET and PUT within
 * 20% of curl's MB/s (ratio >= 0.80) at 1 and 8 connections, and a cache
 * hit within 2x of a file:// read. Exit 0 if every transfer succeeded.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/store.h"

#define MAX_OBJECTS 256
#define MAX_REPEATS 50
#define MAX_CONNS 8
#define TARGET_RATIO 0.80
#define TARGET_CACHE 2.0
/* curl's SigV4: curl 7.88 sends no x-amz-content-sha256 of its own, which
 * S3 requires; it signs the one given (curl does not hash the body, ours
 * reuses the object's digest). */
#define CURL_SIGV4                                                             \
    "--aws-sigv4 'aws:amz:us-east-1:s3' --user "                               \
    "\"$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY\" "                           \
    "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD'"

typedef struct bench {
    const char *endpoint;
    const char *bucket;
    int n, repeats;
    size_t size;
    uint8_t *data[MAX_OBJECTS];
    char digest[MAX_OBJECTS][CNX_DIGEST_LEN];
    char dir[256]; /* temporary directory: object files, file:// store */
    int signed_curl;
    int failures;
} bench;

/* One timed batch: N operations by `conns` threads on one store. */
typedef struct batch {
    bench *b;
    cnx_store *store;
    const char *prefix;
    int put;
    atomic_int next;
    double *lat_ms; /* N entries */
    atomic_int failed;
} batch;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *batch_thread(void *arg)
{
    batch *bt = arg;
    char name[128];
    int i;
    while ((i = atomic_fetch_add(&bt->next, 1)) < bt->b->n) {
        uint8_t *got = NULL;
        size_t len = 0;
        int rc;
        double t0 = now_s();
        snprintf(name, sizeof(name), "%s/obj%03d", bt->prefix, i);
        if (bt->put) {
            rc = cnx_store_put(bt->store, name, bt->b->data[i], bt->b->size,
                               NULL);
        } else {
            rc = cnx_store_get(bt->store, name, 0, &got, &len);
            if (rc == 0 &&
                (len != bt->b->size || memcmp(got, bt->b->data[i], len) != 0))
                rc = CNX_EDIGEST;
        }
        bt->lat_ms[i] = (now_s() - t0) * 1e3;
        if (rc != 0) {
            fprintf(stderr, "bench_store: %s %s: %s\n", bt->put ? "put" : "get",
                    name, cnx_error_last()->message);
            atomic_fetch_add(&bt->failed, 1);
        }
        free(got);
    }
    return NULL;
}

/* Run one batch; the wall time in seconds (latencies into lat_ms). */
static double run_batch(bench *b, cnx_store *store, const char *prefix, int put,
                        int conns, double *lat_ms)
{
    pthread_t th[MAX_CONNS];
    batch bt = {
        .b = b, .store = store, .prefix = prefix, .put = put, .lat_ms = lat_ms};
    double t0 = now_s();
    atomic_init(&bt.next, 0);
    atomic_init(&bt.failed, 0);
    for (int t = 0; t < conns; t++)
        pthread_create(&th[t], NULL, batch_thread, &bt);
    for (int t = 0; t < conns; t++)
        pthread_join(th[t], NULL);
    b->failures += atomic_load(&bt.failed);
    return now_s() - t0;
}

/*
 * The same N transfers by one curl process: sequential (conns 1) or
 * --parallel. Latencies from -w; returns the wall time, or -1 when a
 * transfer failed. Object i is read from (PUT) DIR/obj<i>.
 */
static double run_curl(bench *b, const char *prefix, int put, int conns,
                       int sign, double *lat_ms)
{
    char cfg[512], cmd[1024], line[256];
    FILE *f;
    double t0, wall;
    int k = 0, bad = 0;

    snprintf(cfg, sizeof(cfg), "%s/curl.cfg", b->dir);
    f = fopen(cfg, "w");
    if (f == NULL)
        return -1;
    for (int i = 0; i < b->n; i++) {
        if (put)
            fprintf(f, "upload-file = \"%s/obj%03d\"\n", b->dir, i);
        else
            fprintf(f, "output = \"/dev/null\"\n");
        fprintf(f, "url = \"%s/%s/%s/obj%03d\"\n", b->endpoint, b->bucket,
                prefix, i);
    }
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "curl -s -S --no-progress-meter -H 'Expect:' %s %s "
             "-w '%%{http_code} "
             "%%{time_total} %%{size_download} %%{size_upload}\\n' "
             "-K '%s' %s",
             conns > 1 ? "--parallel --parallel-immediate --parallel-max" : "",
             conns > 1 ? "8" : "", cfg, sign ? CURL_SIGV4 : "");
    t0 = now_s();
    f = popen(cmd, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL && k < b->n) {
        long code = 0;
        double t = 0, down = 0, up = 0;
        if (sscanf(line, "%ld %lf %lf %lf", &code, &t, &down, &up) != 4)
            continue;
        if (code != 200 || (put ? up : down) != (double)b->size)
            bad++;
        lat_ms[k++] = t * 1e3;
    }
    wall = now_s() - t0;
    if (pclose(f) != 0 || k != b->n || bad)
        return -1;
    return wall;
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

typedef struct figure {
    double mbs[MAX_REPEATS];
    double *lat; /* repeats * n */
    int runs;
    int failed;
} figure;

static void figure_add(figure *fg, const bench *b, double wall,
                       const double *lat)
{
    if (wall <= 0) {
        fg->failed = 1;
        return;
    }
    fg->mbs[fg->runs] = (double)b->size * b->n / wall / 1e6;
    memcpy(fg->lat + (size_t)fg->runs * b->n, lat, sizeof(double) * b->n);
    fg->runs++;
}

/* "  123.4  12.3  15.6" (MB/s, p50 ms, p90 ms) or FAILED. */
static void figure_print(figure *fg, const bench *b, double *mbs_out)
{
    if (fg->failed || fg->runs == 0) {
        printf(" %8s %7s %7s", "FAILED", "", "");
        *mbs_out = 0;
        return;
    }
    int nl = fg->runs * b->n;
    *mbs_out = bench_median(fg->mbs, fg->runs);
    printf(" %8.1f %7.2f %7.2f", *mbs_out, pct(fg->lat, nl, 0.5),
           pct(fg->lat, nl, 0.9));
}

static int start_s3rver(bench *b, char *srv_dir, size_t cap, char *endpoint,
                        const char *bucket)
{
    char script[512], cmd[1200], path[600];
    FILE *f;
    bench_peer_path(script, sizeof(script), "../tests/support/s3rver.sh");
    snprintf(srv_dir, cap, "%s/s3rver", b->dir);
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "bench_store: %s not found\n", script);
        return -1;
    }
    snprintf(cmd, sizeof(cmd), "bash '%s' start '%s' '%s' >'%s.log' 2>&1",
             script, srv_dir, bucket, srv_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench_store: s3rver did not start (%s.log)\n",
                srv_dir);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/endpoint", srv_dir);
    f = fopen(path, "r");
    if (f == NULL || fgets(endpoint, 256, f) == NULL) {
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    endpoint[strcspn(endpoint, "\r\n")] = '\0';
    return 0;
}

static void stop_s3rver(const char *srv_dir)
{
    char script[512], cmd[1200];
    bench_peer_path(script, sizeof(script), "../tests/support/s3rver.sh");
    snprintf(cmd, sizeof(cmd), "bash '%s' stop '%s' >/dev/null 2>&1", script,
             srv_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_store: stopping s3rver failed\n");
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_store [--endpoint URL --bucket NAME] "
                    "[--objects N] [--repeats R] [--mib M]\n");
    return 2;
}

int main(int argc, char **argv)
{
    static bench b;
    static char endpoint[256], srv_dir[300];
    const char *bucket = "cnx-bench";
    static figure fig[2][2][3]; /* [conns 1|8][put|get][ours|curl|file] */
    static double lat[MAX_OBJECTS];
    static double c_miss[MAX_OBJECTS * MAX_REPEATS],
        c_hit[MAX_OBJECTS * MAX_REPEATS];
    static double f_ver[MAX_OBJECTS * MAX_REPEATS];
    static double f_plain[MAX_OBJECTS * MAX_REPEATS];
    const int conns[2] = {1, 8};
    cnx_store *s3 = NULL, *fs = NULL;
    char url[600], name[128], prefix[64], path[600];
    int started = 0, nc = 0, mib = 2;
    uint64_t seed = 42;

    b.n = 16;
    b.repeats = 5;
    b.endpoint = getenv("AWS_ENDPOINT_URL");
    b.bucket = getenv("CNX_BENCH_BUCKET");
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--endpoint") == 0 && v) {
            b.endpoint = v;
        } else if (strcmp(argv[i], "--bucket") == 0 && v) {
            b.bucket = v;
        } else if (strcmp(argv[i], "--objects") == 0 && v) {
            b.n = (int)strtol(v, NULL, 10);
        } else if (strcmp(argv[i], "--repeats") == 0 && v) {
            b.repeats = (int)strtol(v, NULL, 10);
        } else if (strcmp(argv[i], "--mib") == 0 && v) {
            mib = (int)strtol(v, NULL, 10);
        } else {
            return usage();
        }
        i++;
    }
    if (b.n < 1 || b.n > MAX_OBJECTS || b.repeats < 1 ||
        b.repeats > MAX_REPEATS || mib < 1 || mib > 64)
        return usage();
    if (b.endpoint != NULL && b.endpoint[0] != '\0' && b.bucket == NULL) {
        fprintf(stderr, "bench_store: --endpoint needs --bucket\n");
        return 2;
    }
    b.size = (size_t)mib << 20;
    cnx_log_set_level(CNX_LOG_WARN);
    snprintf(b.dir, sizeof(b.dir), "/tmp/bench_store-XXXXXX");
    if (mkdtemp(b.dir) == NULL)
        return 1;
    if (b.endpoint == NULL || b.endpoint[0] == '\0') {
        if (start_s3rver(&b, srv_dir, sizeof(srv_dir), endpoint, bucket) != 0)
            return 1;
        started = 1;
        b.endpoint = endpoint;
        b.bucket = bucket;
    }
    /* s3rver's default account; every AWS tool reads these. */
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 0);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 0);
    setenv("AWS_REGION", "us-east-1", 0);
    setenv("AWS_ENDPOINT_URL", b.endpoint, 1);

    /* The objects, in memory and as files for curl. */
    for (int i = 0; i < b.n; i++) {
        b.data[i] = malloc(b.size);
        if (b.data[i] == NULL)
            return 1;
        for (size_t k = 0; k < b.size; k += 8) {
            uint64_t v = splitmix(&seed);
            memcpy(b.data[i] + k, &v, 8);
        }
        cnx_digest(b.data[i], b.size, b.digest[i]);
        snprintf(path, sizeof(path), "%s/obj%03d", b.dir, i);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(b.data[i], 1, b.size, f) != b.size) {
            if (f)
                fclose(f);
            return 1;
        }
        fclose(f);
    }
    snprintf(url, sizeof(url), "s3://%s/bench", b.bucket);
    if (cnx_store_open(&s3, url) != 0) {
        fprintf(stderr, "bench_store: %s: %s\n", url,
                cnx_error_last()->message);
        return 1;
    }
    snprintf(url, sizeof(url), "file://%s/store", b.dir);
    if (cnx_store_open(&fs, url) != 0)
        return 1;
    for (int c = 0; c < 2; c++)
        for (int o = 0; o < 2; o++)
            for (int k = 0; k < 3; k++)
                fig[c][o][k].lat =
                    calloc((size_t)b.repeats * b.n, sizeof(double));

    /* Does the server take curl's SigV4? One small signed PUT says. */
    {
        char cmd[1200];
        snprintf(cmd, sizeof(cmd),
                 "curl -s -o /dev/null -w '%%{http_code}' -H 'Expect:' -T "
                 "'%s/obj000' " CURL_SIGV4 " "
                 "'%s/%s/probe/signed' | grep -q '^200$'",
                 b.dir, b.endpoint, b.bucket);
        b.signed_curl = system(cmd) == 0;
    }

    for (int r = 0; r < b.repeats; r++) {
        for (int c = 0; c < 2; c++) {
            for (int o = 0; o < 2; o++) { /* put, then get of those keys */
                int put = o == 0;
                snprintf(prefix, sizeof(prefix), "r%d/c%d/ours", r, conns[c]);
                figure_add(&fig[c][o][0], &b,
                           run_batch(&b, s3, prefix, put, conns[c], lat), lat);
                snprintf(prefix, sizeof(prefix), "bench/r%d/c%d/curl", r,
                         conns[c]);
                double w =
                    run_curl(&b, prefix, put, conns[c], b.signed_curl, lat);
                if (w < 0)
                    b.failures++;
                figure_add(&fig[c][o][1], &b, w, lat);
                snprintf(prefix, sizeof(prefix), "r%d/c%d/file", r, conns[c]);
                figure_add(&fig[c][o][2], &b,
                           run_batch(&b, fs, prefix, put, conns[c], lat), lat);
            }
        }
        /* (b) the cache: misses into a fresh directory, then hits. */
        char cdir[400];
        cnx_store_stats st0, st1;
        snprintf(cdir, sizeof(cdir), "%s/cache-%d", b.dir, r);
        if (cnx_store_cache_configure(cdir, 0) != 0)
            return 1;
        for (int pass = 0; pass < 4; pass++) {
            cnx_store_stats_get(&st0);
            for (int i = 0; i < b.n; i++) {
                uint8_t *got = NULL;
                size_t len = 0;
                int rc;
                double t0 = now_s();
                snprintf(name, sizeof(name), "r%d/c1/%s/obj%03d", r,
                         pass < 2 ? "ours" : "file", i);
                if (pass == 3)
                    rc = cnx_store_get(fs, name, 0, &got, &len);
                else
                    rc = cnx_store_get_verified(pass < 2 ? s3 : fs, name,
                                                b.digest[i], 0, &got, &len);
                double ms = (now_s() - t0) * 1e3;
                double *into = pass == 0   ? c_miss
                               : pass == 1 ? c_hit
                               : pass == 2 ? f_ver
                                           : f_plain;
                into[r * b.n + i] = ms;
                if (rc != 0 || len != b.size) {
                    fprintf(stderr, "bench_store: cache pass %d %s: %s\n", pass,
                            name, cnx_error_last()->message);
                    b.failures++;
                }
                free(got);
            }
            cnx_store_stats_get(&st1);
            if (pass == 1 && st1.cache_hits - st0.cache_hits != (uint64_t)b.n) {
                fprintf(stderr, "bench_store: %llu cache hits of %d reads\n",
                        (unsigned long long)(st1.cache_hits - st0.cache_hits),
                        b.n);
                b.failures++;
            }
        }
        nc += b.n;
    }

    printf("bench_store: %d objects of %d MiB per run, %d repeats; s3 "
           "endpoint %s (%s); curl %s\n",
           b.n, mib, b.repeats, b.endpoint,
           started ? "s3rver started by this run" : "given",
           b.signed_curl ? "SigV4-signed (--aws-sigv4)"
                         : "unsigned path-style (its SigV4 was refused)");
    {
        char load[128] = "?";
        FILE *f = fopen("/proc/loadavg", "r");
        if (f != NULL) {
            if (fgets(load, sizeof(load), f) == NULL)
                snprintf(load, sizeof(load), "?");
            fclose(f);
        }
        load[strcspn(load, "\n")] = '\0';
        printf("%ld CPUs, load average %s\n", sysconf(_SC_NPROCESSORS_ONLN),
               load);
        /* s3rver ignores If-None-Match: by default our put HEADs first
         * there (one round trip more than curl's PUT; docs/storage.md). */
        const char *chk = getenv("CNX_S3_CHECK_BEFORE_PUT");
        printf("our puts: CNX_S3_CHECK_BEFORE_PUT=%s (auto: a HEAD before "
               "each PUT on endpoints other than AWS and GCS)\n",
               chk != NULL && chk[0] != '\0' ? chk : "auto");
    }
    printf("MB/s: bytes / wall time of a run, median over runs; latency "
           "p50/p90 in ms over all transfers\n\n");
    printf("%-4s %5s | %8s %7s %7s | %8s %7s %7s | %6s | %8s %7s %7s\n", "op",
           "conns", "ours", "p50", "p90", "curl", "p50", "p90", "ratio",
           "file://", "p50", "p90");
    double ratios[2][2];
    for (int o = 0; o < 2; o++) {
        for (int c = 0; c < 2; c++) {
            double ours, curl, file;
            printf("%-4s %5d |", o == 0 ? "PUT" : "GET", conns[c]);
            figure_print(&fig[c][o][0], &b, &ours);
            printf(" |");
            figure_print(&fig[c][o][1], &b, &curl);
            ratios[c][o] = curl > 0 ? ours / curl : 0;
            printf(" | %6.2f |", ratios[c][o]);
            figure_print(&fig[c][o][2], &b, &file);
            printf("\n");
        }
    }
    double miss = bench_median(c_miss, nc), hit = bench_median(c_hit, nc);
    double fver = bench_median(f_ver, nc), fplain = bench_median(f_plain, nc);
    double mb = (double)b.size / 1e6;
    printf("\ncache (one thread, verified reads, median ms per read):\n");
    printf("  miss (GET + check + cache entry)   %7.2f ms  %7.1f MB/s\n", miss,
           mb / miss * 1e3);
    printf("  hit (cache entry + check)          %7.2f ms  %7.1f MB/s\n", hit,
           mb / hit * 1e3);
    printf("  file:// verified read (+ check)    %7.2f ms  %7.1f MB/s\n", fver,
           mb / fver * 1e3);
    printf("  file:// plain read                 %7.2f ms  %7.1f MB/s\n",
           fplain, mb / fplain * 1e3);
    printf("\ntargets (ratios; not asserted):\n");
    for (int o = 0; o < 2; o++)
        for (int c = 0; c < 2; c++)
            printf("  our %s / curl's, %d conn%s: %.2f (target >= %.2f) %s\n",
                   o == 0 ? "PUT" : "GET", conns[c], conns[c] > 1 ? "s" : "",
                   ratios[c][o], TARGET_RATIO,
                   ratios[c][o] >= TARGET_RATIO ? "met" : "MISSED");
    printf("  cache hit / file:// verified read: %.2fx (target <= %.1fx) %s\n",
           hit / fver, TARGET_CACHE,
           hit / fver <= TARGET_CACHE ? "met" : "MISSED");
    printf("  cache hit / file:// plain read:    %.2fx (the hit also checks "
           "the digest)\n",
           hit / fplain);
    printf("failures: %d\n", b.failures);

    cnx_store_free(s3);
    cnx_store_free(fs);
    if (started)
        stop_s3rver(srv_dir);
    {
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", b.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench_store: could not remove %s\n", b.dir);
    }
    for (int i = 0; i < b.n; i++)
        free(b.data[i]);
    for (int c = 0; c < 2; c++)
        for (int o = 0; o < 2; o++)
            for (int k = 0; k < 3; k++)
                free(fig[c][o][k].lat);
    return b.failures ? 1 : 0;
}
