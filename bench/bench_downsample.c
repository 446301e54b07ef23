/*
 * bench_downsample.c - the downsample kernel beside Python, single thread.
 *
 * 2x2x2 average of a 512x512x128 uint8 EM-like volume (or of argv[1], an
 * image layer's scale 0) and of one 128^3 chunk; 2x2x2 mode of 512x512x128
 * uint64 neurite labels (or of argv[2], a segmentation layer). Figures:
 * median of RUNS runs of cnx_downsample_into, MVx/s of input voxels. The
 * peer (bench/downsample_peer.py: skimage downscale_local_mean, numpy
 * sort-and-count mode) is timed on the same bytes and its result compared
 * with ours voxel by voxel; a failing peer is reported, never fatal.
 * usage: bench_downsample [IMAGE_LAYER [SEG_LAYER]] (e.g. DIR/image DIR/gt
 * of cnx-synth); env CNX_SOURCE: repository root. Exit 0 unless we fail.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/downsample.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/precomputed.h"

#define RUNS 5
#define SX 512
#define SY 512
#define SZ 128
#define CHUNK 128

#define CELL 24
#define GX ((SX + CELL - 1) / CELL + 2)
#define GY ((SY + CELL - 1) / CELL + 2)
#define GZ ((SZ + CELL - 1) / CELL + 2)

/*
 * Jittered seeds on a CELL grid. For each voxel, the nearest and second
 * nearest seed in warped coordinates give the cell (label) and the
 * distance to its boundary (membrane darkness for the image).
 */
static double seeds[GZ][GY][GX][3];
static uint64_t seed_ids[GZ][GY][GX];

static void make_seeds(void)
{
    uint64_t s = 20260422;
    for (int k = 0; k < GZ; k++)
        for (int j = 0; j < GY; j++)
            for (int i = 0; i < GX; i++) {
                seeds[k][j][i][0] = (i - 1 + unit(&s)) * CELL;
                seeds[k][j][i][1] = (j - 1 + unit(&s)) * CELL;
                seeds[k][j][i][2] = (k - 1 + unit(&s)) * CELL;
                seed_ids[k][j][i] = (splitmix(&s) >> 16) | UINT64_C(1) << 40;
            }
}

static void nearest(int x, int y, int z, uint64_t *id, double *gap)
{
    const double p[3] = {x + 3.0 * sin(y / 11.0 + z / 17.0),
                         y + 3.0 * sin(z / 13.0 + x / 9.0),
                         z + 3.0 * sin(x / 12.0 + y / 14.0)};
    const int ci = x / CELL + 1, cj = y / CELL + 1, ck = z / CELL + 1;
    double d1 = 1e30, d2 = 1e30;
    for (int k = ck - 1; k <= ck + 1; k++)
        for (int j = cj - 1; j <= cj + 1; j++)
            for (int i = ci - 1; i <= ci + 1; i++) {
                const double dx = p[0] - seeds[k][j][i][0];
                const double dy = p[1] - seeds[k][j][i][1];
                const double dz = p[2] - seeds[k][j][i][2];
                const double d = dx * dx + dy * dy + dz * dz;
                if (d < d1) {
                    d2 = d1;
                    d1 = d;
                    *id = seed_ids[k][j][i];
                } else if (d < d2) {
                    d2 = d;
                }
            }
    *gap = sqrt(d2) - sqrt(d1);
}

/* EM-like image and its segmentation, in one pass. */
static void make_volumes(uint8_t *img, uint64_t *lab)
{
    uint64_t s = 7;
    make_seeds();
    for (int z = 0; z < SZ; z++)
        for (int y = 0; y < SY; y++)
            for (int x = 0; x < SX; x++) {
                const size_t i = (size_t)x + SX * ((size_t)y + SY * (size_t)z);
                uint64_t id = 0;
                double gap, v;
                nearest(x, y, z, &id, &gap);
                /* Bright cytoplasm, dark membranes, shot noise. */
                v = 170.0 + 25.0 * sin(x / 5.0) * sin(y / 7.0 + z / 3.0);
                if (gap < 2.0)
                    v -= 110.0 * (1.0 - gap / 2.0);
                v += 24.0 * (unit(&s) - 0.5);
                img[i] = (uint8_t)(v < 0.0 ? 0.0 : v > 255.0 ? 255.0 : v);
                lab[i] = gap < 1.0 ? 0 : id;
            }
}

/* The first SX x SY x SZ (at most) of scale 0 of a one-channel layer. */
static int read_layer(const char *url, cnx_dtype dtype, void **data,
                      int64_t size[3])
{
    cnx_layer *layer = NULL;
    cnx_volume *vol = NULL;
    const cnx_layer_info *info;
    cnx_box box;
    int rc = cnx_layer_open(&layer, url);
    if (rc != 0)
        goto done;
    info = cnx_layer_get_info(layer);
    if (info->dtype != dtype || info->channels != 1) {
        rc = cnx_error_set(CNX_EINVAL, 0, "%s: not a one-channel %s layer", url,
                           cnx_dtype_name(dtype));
        goto done;
    }
    for (int i = 0; i < 3; i++) {
        const int64_t cap = i == 2 ? SZ : SX;
        box.min[i] = info->scales[0].voxel_offset[i];
        size[i] = info->scales[0].size[i] < cap ? info->scales[0].size[i] : cap;
        box.max[i] = box.min[i] + size[i];
    }
    rc = cnx_layer_read(layer, 0, &box, 0, NULL, NULL, NULL, &vol);
    if (rc == 0) {
        *data = vol->data;
        vol->data = NULL;
    }
done:
    cnx_volume_free(vol);
    cnx_layer_free(layer);
    return rc;
}

/*
 * Median MVx/s of RUNS runs downsampling in (data borrowed) into out.
 * @return -1 on a kernel failure.
 */
static double time_kernel(cnx_volume *out, const cnx_volume *in,
                          cnx_downsample_mode mode)
{
    const int64_t f[3] = {2, 2, 2};
    double t[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = cnx_now();
        if (cnx_downsample_into(out, in, f, mode) != 0) {
            fprintf(stderr, "bench_downsample: %s\n",
                    cnx_error_last()->message);
            return -1.0;
        }
        t[r] = cnx_now() - t0;
    }
    qsort(t, RUNS, sizeof(t[0]), bench_cmp_double);
    return (double)cnx_volume_voxels(in) / t[RUNS / 2] / 1e6;
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok;
    if (f == NULL)
        return -1;
    ok = fwrite(data, 1, len, f) == len;
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

/*
 * Run the peer on in (and our output, for the comparison). It prints
 * "key value" lines: mvxs, differ, voxels.
 */
static void run_peer(const char *what, const cnx_volume *in,
                     const cnx_volume *ours, const char *mode, double mvxs)
{
    char dir[] = "/tmp/bench_downsample_XXXXXX";
    char raw[96] = "", out[96] = "", peer[1024], cmd[2048], line[256];
    const char *dtype = cnx_dtype_name(in->dtype);
    double pm = -1.0, differ = -1.0, voxels = -1.0;
    int64_t s[3];
    FILE *p;
    int rc;

    cnx_box_size(&in->box, s);
    bench_peer_path(peer, sizeof(peer), "downsample_peer.py");
    if (access(peer, R_OK) != 0 || strchr(peer, '\'') != NULL) {
        printf("%s: peer FAILED (%s not readable)\n", what, peer);
        return;
    }
    if (mkdtemp(dir) == NULL) {
        printf("%s: peer FAILED (no temporary directory)\n", what);
        return;
    }
    snprintf(raw, sizeof(raw), "%s/in.raw", dir);
    snprintf(out, sizeof(out), "%s/ours.raw", dir);
    if (write_file(raw, in->data, cnx_volume_bytes(in)) != 0 ||
        write_file(out, ours->data, cnx_volume_bytes(ours)) != 0) {
        printf("%s: peer FAILED (cannot write %s)\n", what, dir);
        goto done;
    }
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 '%s' '%s' %lld %lld %lld --ours '%s' "
             "--dtype %s --mode %s --runs %d 2>&1",
             peer, raw, (long long)s[0], (long long)s[1], (long long)s[2], out,
             dtype, mode, RUNS);
    p = popen(cmd, "r");
    if (p == NULL) {
        printf("%s: peer FAILED (cannot start python3)\n", what);
        goto done;
    }
    while (fgets(line, sizeof(line), p) != NULL) {
        char key[64];
        double v;
        if (sscanf(line, "%63s %lf", key, &v) != 2) {
            printf("peer   | %s", line);
            continue;
        }
        if (strcmp(key, "mvxs") == 0)
            pm = v;
        else if (strcmp(key, "differ") == 0)
            differ = v;
        else if (strcmp(key, "voxels") == 0)
            voxels = v;
        else
            printf("peer   | %s", line);
    }
    rc = pclose(p);
    if (rc != 0 || pm <= 0.0) {
        printf("%s: peer FAILED (exit status %d)\n", what, rc);
        goto done;
    }
    printf("%s: ours %.1f MVx/s, peer %.1f MVx/s, ours/peer %.1fx\n", what,
           mvxs, pm, mvxs / pm);
    printf("%s: peer result differs from ours at %.0f of %.0f output "
           "voxels\n",
           what, differ, voxels);
done:
    unlink(raw);
    unlink(out);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    const int64_t f[3] = {2, 2, 2};
    const char *img_url = argc > 1 ? argv[1] : NULL;
    const char *lab_url = argc > 2 ? argv[2] : NULL;
    int64_t isize[3] = {SX, SY, SZ}, lsize[3] = {SX, SY, SZ};
    void *img = NULL, *lab = NULL;
    cnx_volume in_img = {0}, in_lab = {0};
    cnx_volume *out_img = NULL, *out_lab = NULL, *out_chunk = NULL;
    cnx_volume *chunk = NULL;
    const cnx_box cbox = cnx_box_make(0, 0, 0, CHUNK, CHUNK, CHUNK);
    double m_img, m_chunk, m_lab;
    int status = 1;

    if (argc > 3 || (img_url != NULL && img_url[0] == '-')) {
        fprintf(stderr, "usage: bench_downsample [IMAGE_LAYER [SEG_LAYER]]"
                        "\n");
        return 2;
    }
    if ((img_url != NULL &&
         read_layer(img_url, CNX_DT_UINT8, &img, isize) != 0) ||
        (lab_url != NULL &&
         read_layer(lab_url, CNX_DT_UINT64, &lab, lsize) != 0)) {
        fprintf(stderr, "bench_downsample: %s\n", cnx_error_last()->message);
        goto done;
    }
    if (img == NULL || lab == NULL) {
        /* Synthesise what was not given (both come from one pass). */
        uint8_t *si = malloc((size_t)SX * SY * SZ);
        uint64_t *sl = malloc((size_t)SX * SY * SZ * sizeof(uint64_t));
        if (si == NULL || sl == NULL) {
            fprintf(stderr, "bench_downsample: out of memory\n");
            free(si);
            free(sl);
            goto done;
        }
        make_volumes(si, sl);
        if (img == NULL)
            img = si;
        else
            free(si);
        if (lab == NULL)
            lab = sl;
        else
            free(sl);
    }

    in_img.dtype = CNX_DT_UINT8;
    in_img.box = cnx_box_make(0, 0, 0, isize[0], isize[1], isize[2]);
    in_img.channels = 1;
    in_img.data = img;
    in_lab.dtype = CNX_DT_UINT64;
    in_lab.box = cnx_box_make(0, 0, 0, lsize[0], lsize[1], lsize[2]);
    in_lab.channels = 1;
    in_lab.data = lab;
    if (cnx_downsample_volume(&out_img, &in_img, f, CNX_DOWNSAMPLE_AVERAGE) !=
            0 ||
        cnx_downsample_volume(&out_lab, &in_lab, f, CNX_DOWNSAMPLE_MODE) != 0) {
        fprintf(stderr, "bench_downsample: %s\n", cnx_error_last()->message);
        goto done;
    }

    printf("image  : %lldx%lldx%lld uint8 (%s), 2x2x2 average, single "
           "thread, median of %d\n",
           (long long)isize[0], (long long)isize[1], (long long)isize[2],
           img_url != NULL ? img_url : "synthetic EM", RUNS);
    m_img = time_kernel(out_img, &in_img, CNX_DOWNSAMPLE_AVERAGE);
    if (m_img < 0.0)
        goto done;
    printf("image  : ours %.1f MVx/s\n", m_img);

    /* One 128^3 chunk, as a task sees it. */
    if (cnx_box_contains(&in_img.box, &cbox)) {
        if (cnx_volume_crop(&chunk, &in_img, &cbox) != 0 ||
            cnx_downsample_volume(&out_chunk, chunk, f,
                                  CNX_DOWNSAMPLE_AVERAGE) != 0) {
            fprintf(stderr, "bench_downsample: %s\n",
                    cnx_error_last()->message);
            goto done;
        }
        m_chunk = time_kernel(out_chunk, chunk, CNX_DOWNSAMPLE_AVERAGE);
        if (m_chunk < 0.0)
            goto done;
        printf("chunk  : 128^3 uint8 2x2x2 average: ours %.1f MVx/s\n",
               m_chunk);
    }

    printf("labels : %lldx%lldx%lld uint64 (%s), 2x2x2 mode, single "
           "thread, median of %d\n",
           (long long)lsize[0], (long long)lsize[1], (long long)lsize[2],
           lab_url != NULL ? lab_url : "synthetic neurites, 0-membranes", RUNS);
    m_lab = time_kernel(out_lab, &in_lab, CNX_DOWNSAMPLE_MODE);
    if (m_lab < 0.0)
        goto done;
    printf("labels : ours %.1f MVx/s\n", m_lab);
    fflush(stdout);

    run_peer("average", &in_img, out_img, "average", m_img);
    fflush(stdout);
    run_peer("mode   ", &in_lab, out_lab, "mode", m_lab);
    status = 0;

done:
    cnx_volume_free(out_img);
    cnx_volume_free(out_lab);
    cnx_volume_free(out_chunk);
    cnx_volume_free(chunk);
    free(img);
    free(lab);
    return status;
}
