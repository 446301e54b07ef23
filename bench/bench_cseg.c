/*
 * bench_cseg.c - throughput of the compressed_segmentation codec.
 *
 * Builds a 128^3 uint64 chunk of neurite-like labels (warped Voronoi cells
 * with thin label-0 membranes, crossed by thick random tubes), or reads one
 * from argv[1] (raw little-endian uint64, 128^3), then times encode and
 * decode single-threaded (median of CSEG_RUNS runs) and prints MVx/s
 * against the targets, the compression ratio, and the figures of the numpy
 * peer (bench/cseg_peer.py) on the same data. A failing peer is reported,
 * never fatal. Exit status: 0 when our round trip is exact, else 1.
 *
 * usage: bench_cseg [chunk.raw]   (env CNX_SOURCE: repository root)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/cseg.h"
#include "cnx/error.h"
#include "cnx/log.h"

#define N 128
#define NVOX ((size_t)N * N * N)
#define CSEG_RUNS 15
#define TARGET_ENCODE 150.0
#define TARGET_DECODE 300.0

/* A segment id as large as real ones: high word non-zero. */
static uint64_t label_id(uint64_t *s)
{
    return (splitmix(s) & ((UINT64_C(1) << 48) - 1)) | (UINT64_C(1) << 40);
}

#define CELL 32
#define GC ((N + CELL - 1) / CELL)

/*
 * Voronoi cells on a jittered grid of seeds, distances taken in warped
 * coordinates so that boundaries curve; voxels nearly equidistant from two
 * seeds become membrane (label 0). Then tubes of radius 2..7 voxels along
 * random lines, each its own label, cross the cells.
 */
static void make_neurites(uint64_t *vol)
{
    static double seed[GC][GC][GC][3];
    static uint64_t seed_label[GC][GC][GC];
    uint64_t s = 20240601;
    int i, j, k, x, y, z, t;

    for (i = 0; i < GC; i++) {
        for (j = 0; j < GC; j++) {
            for (k = 0; k < GC; k++) {
                seed[i][j][k][0] = (i + unit(&s)) * CELL;
                seed[i][j][k][1] = (j + unit(&s)) * CELL;
                seed[i][j][k][2] = (k + unit(&s)) * CELL;
                seed_label[i][j][k] = label_id(&s);
            }
        }
    }
    for (z = 0; z < N; z++) {
        for (y = 0; y < N; y++) {
            for (x = 0; x < N; x++) {
                double p[3];
                double d1 = 1e30, d2 = 1e30;
                uint64_t best = 0;
                int ci, cj, ck;
                p[0] = x + 4.0 * sin(y / 9.0 + z / 13.0);
                p[1] = y + 4.0 * sin(z / 11.0 + x / 7.0);
                p[2] = z + 4.0 * sin(x / 10.0 + y / 12.0);
                ci = x / CELL;
                cj = y / CELL;
                ck = z / CELL;
                for (i = ci - 1; i <= ci + 1; i++) {
                    for (j = cj - 1; j <= cj + 1; j++) {
                        for (k = ck - 1; k <= ck + 1; k++) {
                            double dx, dy, dz, d;
                            if (i < 0 || j < 0 || k < 0 || i >= GC || j >= GC ||
                                k >= GC) {
                                continue;
                            }
                            dx = p[0] - seed[i][j][k][0];
                            dy = p[1] - seed[i][j][k][1];
                            dz = p[2] - seed[i][j][k][2];
                            d = sqrt(dx * dx + dy * dy + dz * dz);
                            if (d < d1) {
                                d2 = d1;
                                d1 = d;
                                best = seed_label[i][j][k];
                            } else if (d < d2) {
                                d2 = d;
                            }
                        }
                    }
                }
                vol[(size_t)x + N * ((size_t)y + N * (size_t)z)] =
                    d2 - d1 < 1.0 ? 0 : best;
            }
        }
    }
    for (t = 0; t < 48; t++) {
        double a[3], dir[3], len, r;
        uint64_t id = label_id(&s);
        for (i = 0; i < 3; i++) {
            a[i] = unit(&s) * N;
            dir[i] = unit(&s) * 2.0 - 1.0;
        }
        len = sqrt(dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2]);
        if (len < 1e-6) {
            continue;
        }
        for (i = 0; i < 3; i++) {
            dir[i] /= len;
        }
        r = 2.0 + 5.0 * unit(&s);
        for (z = 0; z < N; z++) {
            for (y = 0; y < N; y++) {
                for (x = 0; x < N; x++) {
                    double v[3] = {x - a[0], y - a[1], z - a[2]};
                    double along =
                        v[0] * dir[0] + v[1] * dir[1] + v[2] * dir[2];
                    double d2 =
                        v[0] * v[0] + v[1] * v[1] + v[2] * v[2] - along * along;
                    if (d2 < r * r) {
                        vol[(size_t)x + N * ((size_t)y + N * (size_t)z)] = id;
                    }
                }
            }
        }
    }
}

static int read_chunk(const char *path, uint64_t *vol)
{
    FILE *f = fopen(path, "rb");
    size_t got;
    size_t i;

    if (f == NULL) {
        fprintf(stderr, "bench_cseg: cannot open %s\n", path);
        return -1;
    }
    got = fread(vol, sizeof(uint64_t), NVOX, f);
    fclose(f);
    if (got != NVOX) {
        fprintf(stderr, "bench_cseg: %s: %zu labels, want %zu\n", path, got,
                NVOX);
        return -1;
    }
    for (i = 0; i < NVOX; i++) {
        const uint8_t *b = (const uint8_t *)&vol[i];
        uint64_t v = 0;
        int k;
        for (k = 7; k >= 0; k--) {
            v = v << 8 | b[k];
        }
        vol[i] = v;
    }
    return 0;
}

/* Distinct labels per 8^3 block, averaged; and the most in one block. */
static void block_stats(const uint64_t *vol, double *mean, int *most)
{
    uint64_t seen[512] = {0};
    long total = 0;
    int bx, by, bz, x, y, z, i;

    *most = 0;
    for (bz = 0; bz < N / 8; bz++) {
        for (by = 0; by < N / 8; by++) {
            for (bx = 0; bx < N / 8; bx++) {
                int n = 0;
                for (z = 0; z < 8; z++) {
                    for (y = 0; y < 8; y++) {
                        for (x = 0; x < 8; x++) {
                            uint64_t v = vol[(size_t)(bx * 8 + x) +
                                             N * ((size_t)(by * 8 + y) +
                                                  N * (size_t)(bz * 8 + z))];
                            for (i = 0; i < n && seen[i] != v; i++) {
                            }
                            if (i == n) {
                                seen[n++] = v;
                            }
                        }
                    }
                }
                total += n;
                if (n > *most) {
                    *most = n;
                }
            }
        }
    }
    *mean = (double)total / (double)((N / 8) * (N / 8) * (N / 8));
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok;

    if (f == NULL) {
        return -1;
    }
    ok = fwrite(data, 1, len, f) == len;
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

/*
 * Run the numpy peer on the same chunk. It prints "key value" lines; we
 * pick encode_mvxs, decode_mvxs, bytes_equal and decode_equal.
 */
static void run_peer(const uint64_t *vol, const uint8_t *enc, size_t enc_len,
                     double ours_enc, double ours_dec)
{
    char dir[] = "/tmp/bench_cseg_XXXXXX";
    char raw_path[96], enc_path[96], peer[1024], cmd[2048], line[256];
    const char *src = getenv("CNX_SOURCE");
    double pe = -1.0, pd = -1.0;
    int bytes_equal = -1, decode_equal = -1;
    FILE *p;
    int rc;

    if (src != NULL && src[0] != '\0') {
        snprintf(peer, sizeof(peer), "%s/bench/cseg_peer.py", src);
    } else {
        /* Beside this source file (CMake passes absolute paths). */
        const char *f = __FILE__;
        const char *slash = strrchr(f, '/');
        int dlen = slash != NULL ? (int)(slash - f) : 1;
        snprintf(peer, sizeof(peer), "%.*s/cseg_peer.py", dlen,
                 slash != NULL ? f : ".");
    }
    if (access(peer, R_OK) != 0 || strchr(peer, '\'') != NULL) {
        printf("peer  : FAILED (%s not readable)\n", peer);
        return;
    }
    if (mkdtemp(dir) == NULL) {
        printf("peer  : FAILED (no temporary directory)\n");
        return;
    }
    snprintf(raw_path, sizeof(raw_path), "%s/chunk.raw", dir);
    snprintf(enc_path, sizeof(enc_path), "%s/chunk.cseg", dir);
    if (write_file(raw_path, vol, NVOX * sizeof(uint64_t)) != 0 ||
        write_file(enc_path, enc, enc_len) != 0) {
        printf("peer  : FAILED (cannot write %s)\n", dir);
        goto done;
    }
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 '%s' '%s' '%s' %d %d %d 8 8 8 %d 2>&1", peer,
             raw_path, enc_path, N, N, N, 5);
    p = popen(cmd, "r");
    if (p == NULL) {
        printf("peer  : FAILED (cannot start python3)\n");
        goto done;
    }
    while (fgets(line, sizeof(line), p) != NULL) {
        char key[64];
        double v;
        if (sscanf(line, "%63s %lf", key, &v) != 2) {
            printf("peer  | %s", line);
            continue;
        }
        if (strcmp(key, "encode_mvxs") == 0) {
            pe = v;
        } else if (strcmp(key, "decode_mvxs") == 0) {
            pd = v;
        } else if (strcmp(key, "bytes_equal") == 0) {
            bytes_equal = (int)v;
        } else if (strcmp(key, "decode_equal") == 0) {
            decode_equal = (int)v;
        } else {
            printf("peer  | %s", line);
        }
    }
    rc = pclose(p);
    if (rc != 0 || pe <= 0.0 || pd <= 0.0) {
        printf("peer  : FAILED (exit status %d)\n", rc);
        goto done;
    }
    printf("peer  : numpy encode %8.1f MVx/s   ours/peer %6.1fx\n", pe,
           ours_enc / pe);
    printf("peer  : numpy decode %8.1f MVx/s   ours/peer %6.1fx\n", pd,
           ours_dec / pd);
    printf("peer  : peer encoding byte-identical to ours: %s; peer decode of "
           "ours exact: %s\n",
           bytes_equal == 1 ? "yes" : "NO", decode_equal == 1 ? "yes" : "NO");

done:
    unlink(raw_path);
    unlink(enc_path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    const int64_t size[3] = {N, N, N};
    const int64_t block[3] = {8, 8, 8};
    double te[CSEG_RUNS], td[CSEG_RUNS];
    double enc_mvxs, dec_mvxs, mean;
    uint64_t *vol = malloc(NVOX * sizeof(uint64_t));
    uint64_t *back = malloc(NVOX * sizeof(uint64_t));
    uint8_t *enc = NULL;
    size_t enc_len = 0;
    int most;
    int status = 1;
    int r;

    if (vol == NULL || back == NULL) {
        fprintf(stderr, "bench_cseg: out of memory\n");
        goto done;
    }
    if (argc > 1) {
        if (read_chunk(argv[1], vol) != 0) {
            goto done;
        }
    } else {
        make_neurites(vol);
    }
    block_stats(vol, &mean, &most);
    printf("chunk : %dx%dx%d uint64 (%s), block 8x8x8, distinct labels per "
           "block: mean %.2f, max %d\n",
           N, N, N, argc > 1 ? argv[1] : "synthetic neurites", mean, most);

    for (r = 0; r < CSEG_RUNS; r++) {
        double t0;
        free(enc);
        enc = NULL;
        t0 = cnx_now();
        if (cnx_cseg_encode(&enc, &enc_len, vol, CNX_DT_UINT64, size, 1,
                            block) != 0) {
            fprintf(stderr, "bench_cseg: encode: %s\n",
                    cnx_error_last()->message);
            goto done;
        }
        te[r] = cnx_now() - t0;
    }
    for (r = 0; r < CSEG_RUNS; r++) {
        double t0 = cnx_now();
        if (cnx_cseg_decode(back, enc, enc_len, CNX_DT_UINT64, size, 1,
                            block) != 0) {
            fprintf(stderr, "bench_cseg: decode: %s\n",
                    cnx_error_last()->message);
            goto done;
        }
        td[r] = cnx_now() - t0;
    }
    if (memcmp(vol, back, NVOX * sizeof(uint64_t)) != 0) {
        fprintf(stderr, "bench_cseg: round trip MISMATCH\n");
        goto done;
    }
    /* bench_median() sorts, so the fastest run is then the first. */
    enc_mvxs = (double)NVOX / bench_median(te, CSEG_RUNS) / 1e6;
    dec_mvxs = (double)NVOX / bench_median(td, CSEG_RUNS) / 1e6;
    printf("encode: ours %8.1f MVx/s (median of %d, best %.1f)   target >= "
           "%.0f  %s\n",
           enc_mvxs, CSEG_RUNS, (double)NVOX / te[0] / 1e6, TARGET_ENCODE,
           enc_mvxs >= TARGET_ENCODE ? "PASS" : "BELOW");
    printf("decode: ours %8.1f MVx/s (median of %d, best %.1f)   target >= "
           "%.0f  %s\n",
           dec_mvxs, CSEG_RUNS, (double)NVOX / td[0] / 1e6, TARGET_DECODE,
           dec_mvxs >= TARGET_DECODE ? "PASS" : "BELOW");
    printf("size  : %zu bytes from %zu, ratio %.1f:1 (%.4f of raw)\n", enc_len,
           NVOX * sizeof(uint64_t),
           (double)(NVOX * sizeof(uint64_t)) / (double)enc_len,
           (double)enc_len / (double)(NVOX * sizeof(uint64_t)));
    fflush(stdout);
    run_peer(vol, enc, enc_len, enc_mvxs, dec_mvxs);
    status = 0;

done:
    free(vol);
    free(back);
    free(enc);
    return status;
}
