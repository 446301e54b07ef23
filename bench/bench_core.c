/*
 * bench_core - the data plane's throughput beside peers on the same data.
 *
 *   bench_core [--synth DIR] [--repeat N]
 *
 * SHA-256 MB/s over a 64 MiB buffer (peer: `openssl speed -evp sha256` on
 * this machine, same run); compressed_segmentation encode/decode MVx/s on a
 * 128^3 uint64 chunk of cnx-synth ground truth (DIR/gt; peer: the numpy
 * codec in bench/cseg_peer.py); layer write and read MB/s for 128^3 uint8
 * chunks through the file:// store (peer: numpy writing the same chunks
 * with the same fsync + rename discipline, bench/layer_peer.py). Figures
 * are medians of N runs (default 5); single-threaded.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/cseg.h"
#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/precomputed.h"

#include "bench_util.h"

/* Run a command and return the last line of its stdout (static buffer). */
static const char *run_last_line(const char *cmd)
{
    static char last[1024];
    char line[1024];
    FILE *p = popen(cmd, "r");
    last[0] = '\0';
    if (p == NULL)
        return last;
    while (fgets(line, sizeof(line), p) != NULL)
        if (line[0] != '\n')
            memcpy(last, line, sizeof(line));
    pclose(p);
    last[strcspn(last, "\n")] = '\0';
    return last;
}

static void bench_sha(int repeat)
{
    const size_t len = (size_t)64 << 20;
    uint8_t *buf = malloc(len);
    double t[32], peer = 0;
    char d[CNX_DIGEST_LEN];
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    for (int r = 0; r < repeat; r++) {
        double t0 = cnx_now();
        cnx_digest(buf, len, d);
        t[r] = (double)len / 1e6 / (cnx_now() - t0);
    }
    peer = bench_openssl_sha256_mbs();
    double ours = bench_median(t, repeat);
    printf("sha256            %9.1f MB/s   openssl speed -evp sha256 %9.1f "
           "MB/s   ratio %.2f (target >= 0.90)\n",
           ours, peer, peer > 0 ? ours / peer : 0.0);
    free(buf);
}

static int bench_cseg(const char *synth, int repeat)
{
    char url[1100], raw[] = "/tmp/cnx-bench-cseg-XXXXXX";
    const int64_t block[3] = {8, 8, 8};
    cnx_layer *gt;
    cnx_volume *v;
    cnx_box box = cnx_box_make(0, 0, 0, 128, 128, 128);
    int64_t size[3] = {128, 128, 128};
    double te[32], td[32];
    uint8_t *enc = NULL;
    size_t len = 0;
    uint64_t *back;
    int fd, rc;

    snprintf(url, sizeof(url), "%s/gt", synth);
    rc = cnx_layer_open(&gt, url);
    if (rc == 0)
        rc = cnx_layer_read(gt, 0, &box, 0, NULL, NULL, NULL, &v);
    if (rc != 0) {
        fprintf(stderr, "bench_core: %s\n", cnx_error_last()->message);
        return 1;
    }
    back = malloc(cnx_volume_bytes(v));
    for (int r = 0; r < repeat; r++) {
        double t0 = cnx_now();
        free(enc);
        cnx_cseg_encode(&enc, &len, v->data, CNX_DT_UINT64, size, 1, block);
        te[r] = 128.0 * 128 * 128 / 1e6 / (cnx_now() - t0);
        t0 = cnx_now();
        cnx_cseg_decode(back, enc, len, CNX_DT_UINT64, size, 1, block);
        td[r] = 128.0 * 128 * 128 / 1e6 / (cnx_now() - t0);
    }
    if (memcmp(back, v->data, cnx_volume_bytes(v)) != 0) {
        fprintf(stderr, "bench_core: cseg round trip differs\n");
        return 1;
    }
    double e = bench_median(te, repeat), d = bench_median(td, repeat);
    /* Peer on the same chunk: the numpy codec (bench/cseg_peer.py), which
     * also says whether its bytes equal ours. */
    char cseg_path[64];
    double pe = 0, pd = 0;
    int equal = -1;
    snprintf(cseg_path, sizeof(cseg_path), "%s.cseg", raw);
    fd = mkstemp(raw);
    if (fd >= 0) {
        FILE *f;
        if (write(fd, v->data, cnx_volume_bytes(v)) < 0)
            pe = -1;
        close(fd);
        snprintf(cseg_path, sizeof(cseg_path), "%s.cseg", raw);
        f = fopen(cseg_path, "wb");
        if (f != NULL) {
            fwrite(enc, 1, len, f);
            fclose(f);
        }
        char cmd[2048], line[256];
        snprintf(cmd, sizeof(cmd),
                 "/usr/bin/python3 %s/bench/cseg_peer.py %s %s 128 128 128 8 "
                 "8 8 %d uint64 2>/dev/null",
                 getenv("CNX_SOURCE") ? getenv("CNX_SOURCE") : ".", raw,
                 cseg_path, repeat);
        FILE *p = popen(cmd, "r");
        while (p != NULL && fgets(line, sizeof(line), p) != NULL) {
            sscanf(line, "encode_mvxs %lf", &pe);
            sscanf(line, "decode_mvxs %lf", &pd);
            sscanf(line, "bytes_equal %d", &equal);
        }
        if (p != NULL)
            pclose(p);
        unlink(raw);
        unlink(cseg_path);
    }
    printf("cseg encode       %9.1f MVx/s  numpy peer %9.2f MVx/s  target >= "
           "150: %s (%zu bytes, %.1fx smaller)\n",
           e, pe, e >= 150 ? "PASS" : "BELOW", len,
           (double)cnx_volume_bytes(v) / (double)len);
    printf("cseg decode       %9.1f MVx/s  numpy peer %9.2f MVx/s  target >= "
           "300: %s\n",
           d, pd, d >= 300 ? "PASS" : "BELOW");
    printf("cseg bytes        %s\n",
           equal == 1   ? "identical to the numpy peer's encoding"
           : equal == 0 ? "DIFFER from the numpy peer's encoding"
                        : "not compared (the peer did not run)");
    free(enc);
    free(back);
    cnx_volume_free(v);
    cnx_layer_free(gt);
    return 0;
}

static int bench_layer(int repeat)
{
    const int64_t size[3] = {256, 256, 256}, chunk[3] = {128, 128, 128};
    const double res[3] = {8, 8, 8};
    cnx_box all = cnx_box_make(0, 0, 0, 256, 256, 256);
    double tw[32], tr[32];
    cnx_volume *v, *back = NULL;
    char dir[] = "/tmp/cnx-bench-layer-XXXXXX", url[256], cmd[1024];
    uint64_t x = 1;

    if (mkdtemp(dir) == NULL || cnx_volume_new(&v, CNX_DT_UINT8, &all, 1))
        return 1;
    for (size_t i = 0; i < cnx_volume_bytes(v); i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ((uint8_t *)v->data)[i] = (uint8_t)(x >> 56);
    }
    for (int r = 0; r < repeat; r++) {
        cnx_layer_info info;
        cnx_layer *layer;
        snprintf(url, sizeof(url), "file://%s/run%d", dir, r);
        cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, res, chunk);
        double t0 = cnx_now();
        if (cnx_layer_create(&layer, url, &info) ||
            cnx_layer_write(layer, 0, v, NULL)) {
            fprintf(stderr, "bench_core: %s\n", cnx_error_last()->message);
            return 1;
        }
        tw[r] = (double)cnx_volume_bytes(v) / 1e6 / (cnx_now() - t0);
        t0 = cnx_now();
        if (cnx_layer_read(layer, 0, &all, 0, NULL, NULL, NULL, &back)) {
            fprintf(stderr, "bench_core: %s\n", cnx_error_last()->message);
            return 1;
        }
        tr[r] = (double)cnx_volume_bytes(v) / 1e6 / (cnx_now() - t0);
        if (memcmp(back->data, v->data, cnx_volume_bytes(v)) != 0)
            return 1;
        cnx_volume_free(back);
        cnx_layer_free(layer);
    }
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 %s/bench/layer_peer.py --dir %s/peer --repeat "
             "%d 2>/dev/null",
             getenv("CNX_SOURCE") ? getenv("CNX_SOURCE") : ".", dir, repeat);
    const char *peer = run_last_line(cmd);
    double pw = 0, pr = 0;
    if (sscanf(peer, "write %lf read %lf", &pw, &pr) != 2)
        pw = pr = 0;
    printf("layer write uint8 %9.1f MB/s   numpy+fsync peer %9.1f MB/s  "
           "(128^3 chunks, atomic write-once)\n",
           bench_median(tw, repeat), pw);
    printf("layer read  uint8 %9.1f MB/s   numpy peer       %9.1f MB/s\n",
           bench_median(tr, repeat), pr);
    cnx_volume_free(v);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *synth = NULL;
    int repeat = 5, rc = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--synth") == 0 && i + 1 < argc) {
            synth = argv[++i];
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = (int)strtol(argv[++i], NULL, 10);
            if (repeat < 1 || repeat > 32)
                repeat = 5;
        } else {
            printf("usage: bench_core [--synth DIR] [--repeat N]\n"
                   "  DIR: a cnx-synth dataset (its gt layer feeds the "
                   "compressed_segmentation figures)\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    printf("bench_core: medians of %d runs, single-threaded\n", repeat);
    bench_sha(repeat);
    if (synth != NULL)
        rc |= bench_cseg(synth, repeat);
    else
        printf("cseg              (skipped: pass --synth DIR)\n");
    rc |= bench_layer(repeat);
    return rc;
}
