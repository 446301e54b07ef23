/*
 * bench_segment.c - the segmentation kernel beside scikit-image, one thread.
 *
 * Input: a 128^3 block of cnx-synth boundary data (uint8, high = membrane)
 * with its ground truth: generated in-process (cnx_synth_generate, seed 7)
 * or read from argv[1], a cnx-synth dataset (DIR/boundary, DIR/gt; box
 * edge argv[2], 128 by default). Ours: the whole pipeline with the default
 * parameters (cnx_segment_boundary_u8 + cnx_segment_volume: conversion,
 * seeds, watershed, graph, agglomeration, cleanup, numbering) at the
 * input's resolution (the dataset's scale, as the stage sets it; 8 nm for
 * the generated block), median of RUNS, MVx/s of input voxels (target >=
 * 10). The peer (bench/segment_peer.py: gaussian smoothing,
 * peak_local_max seeds, skimage watershed, its lengths in nm at the same
 * resolution; median of PEER_RUNS) runs on the same bytes, written to a
 * temporary .npy, and hands back its labels; both results are scored
 * against the ground truth (VI split / merge, adapted Rand error). A
 * failing peer is reported, never fatal.
 * usage: bench_segment [SYNTH_DIR [EDGE]] | --help; env CNX_SOURCE:
 * repository root, CNX_PYTHON: python (default /usr/bin/python3). Exit 0
 * unless we fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/metrics.h"
#include "cnx/precomputed.h"
#include "cnx/segment.h"
#include "cnx/synth.h"

#define RUNS 7
#define PEER_RUNS 3
#define EDGE 128
#define MAX_EDGE 512
#define SEED 7
/* The peer's setting: the best of a small grid on this data (see
 * docs/segment.md), there 0.5 and 12 voxels of 8 nm. */
#define PEER_SIGMA_NM "4"
#define PEER_MIN_DISTANCE_NM "96"

static const char usage[] =
    "usage: bench_segment [SYNTH_DIR [EDGE]]\n"
    "The segmentation kernel (default parameters, at the input's\n"
    "resolution) beside scikit-image on a cnx-synth boundary block: a\n"
    "generated 128^3 one (seed 7, 8 nm), or the first EDGE^3 (default 128,\n"
    "at most 512) of SYNTH_DIR/boundary scored against SYNTH_DIR/gt.\n";

typedef struct input {
    int64_t size[3];
    double resolution[3]; /* nm per voxel, x, y, z */
    uint8_t *boundary;
    uint64_t *gt;
} input;

static int generate(input *in)
{
    cnx_synth_params sp;
    cnx_synth *synth = NULL;
    int rc;
    cnx_synth_params_init(&sp);
    for (int i = 0; i < 3; i++)
        sp.shape[i] = in->size[i] = EDGE;
    sp.seed = SEED;
    rc = cnx_synth_generate(&synth, &sp);
    if (rc != 0)
        return rc;
    memcpy(in->resolution, synth->params.resolution, sizeof(in->resolution));
    in->boundary = synth->boundary->data;
    in->gt = synth->gt->data;
    synth->boundary->data = NULL;
    synth->gt->data = NULL;
    cnx_synth_free(synth);
    return 0;
}

/* A box of edge at most `edge` at the start of layer DIR/name; its scale's
 * resolution to `resolution` unless NULL. */
static int read_layer(const char *dir, const char *name, int64_t edge,
                      cnx_dtype dtype, void **data, int64_t size[3],
                      double resolution[3])
{
    char url[4096];
    cnx_layer *layer = NULL;
    cnx_volume *vol = NULL;
    const cnx_layer_info *info;
    cnx_box box;
    int rc;
    snprintf(url, sizeof(url), "%s/%s", dir, name);
    rc = cnx_layer_open(&layer, url);
    if (rc != 0)
        goto done;
    info = cnx_layer_get_info(layer);
    if (info->dtype != dtype || info->channels != 1) {
        rc = cnx_error_set(CNX_EINVAL, 0, "%s: not a one-channel %s layer", url,
                           cnx_dtype_name(dtype));
        goto done;
    }
    if (resolution != NULL)
        memcpy(resolution, info->scales[0].resolution, 3 * sizeof(double));
    for (int i = 0; i < 3; i++) {
        const int64_t s = info->scales[0].size[i];
        box.min[i] = info->scales[0].voxel_offset[i];
        size[i] = s < edge ? s : edge;
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

/* One run of the whole pipeline. @return seconds, or -1 on failure. */
static double run_ours(const input *in, const cnx_segment_params *p, float *b,
                       uint32_t *labels, uint32_t *nlabels)
{
    double t0 = cnx_now();
    if (cnx_segment_boundary_u8(in->boundary, in->size, p, b) != 0 ||
        cnx_segment_volume(b, in->size, p, labels, nlabels) != 0) {
        fprintf(stderr, "bench_segment: %s\n", cnx_error_last()->message);
        return -1.0;
    }
    return cnx_now() - t0;
}

/* Scores of labels against the ground truth; 0 or -1. */
static int score(const input *in, const uint32_t *labels, cnx_seg_scores *sc)
{
    const size_t n = (size_t)(in->size[0] * in->size[1] * in->size[2]);
    uint64_t *seg = malloc(n * sizeof(*seg));
    int rc;
    if (seg == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        seg[i] = labels[i];
    rc = cnx_seg_scores_u64(seg, in->gt, n, sc);
    free(seg);
    return rc == 0 ? 0 : -1;
}

/* Read n uint32 labels from path; 0 or -1. */
static int read_labels(const char *path, uint32_t *labels, size_t n)
{
    FILE *f = fopen(path, "rb");
    int ok = f != NULL && fread(labels, sizeof(*labels), n, f) == n;
    if (f != NULL)
        fclose(f);
    return ok ? 0 : -1;
}

/* Run the peer; 0 when it reported its time and labels. */
static int run_peer(const input *in, double *secs, uint32_t *labels)
{
    char dir[] = "/tmp/bench_segment_XXXXXX";
    char npy[96] = "", out[96] = "", peer[1024], cmd[2048], line[512];
    char res[96];
    const char *py;
    const size_t n = (size_t)(in->size[0] * in->size[1] * in->size[2]);
    FILE *p;
    int rc = -1, st;

    *secs = -1.0;
    if (bench_peer_setup(&py, peer, sizeof(peer), "segment_peer.py", dir) != 0)
        return -1;
    snprintf(npy, sizeof(npy), "%s/boundary.npy", dir);
    snprintf(out, sizeof(out), "%s/labels.raw", dir);
    if (bench_write_npy(npy, in->boundary, 1, "|u1", in->size) != 0) {
        printf("peer   : FAILED (cannot write %s)\n", npy);
        goto done;
    }
    snprintf(res, sizeof(res), "%.17g,%.17g,%.17g", in->resolution[0],
             in->resolution[1], in->resolution[2]);
    snprintf(cmd, sizeof(cmd),
             "'%s' '%s' '%s' --runs %d --resolution %s --sigma-nm %s "
             "--min-distance-nm %s --out '%s' 2>&1",
             py, peer, npy, PEER_RUNS, res, PEER_SIGMA_NM, PEER_MIN_DISTANCE_NM,
             out);
    p = popen(cmd, "r");
    if (p == NULL) {
        printf("peer   : FAILED (cannot start %s)\n", py);
        goto done;
    }
    while (fgets(line, sizeof(line), p) != NULL) {
        double v;
        if (sscanf(line, "seconds %lf", &v) == 1)
            *secs = v;
        else if (strncmp(line, "labels ", 7) != 0)
            printf("peer   | %s", line);
    }
    st = pclose(p);
    if (st != 0 || *secs <= 0.0 || read_labels(out, labels, n) != 0)
        printf("peer   : FAILED (exit status %d)\n", st);
    else
        rc = 0;
done:
    unlink(out);
    unlink(npy);
    rmdir(dir);
    return rc;
}

static const char *mode_name(cnx_segment_mode mode)
{
    switch (mode) {
    case CNX_SEGMENT_MODE_3D:
        return "3d";
    case CNX_SEGMENT_MODE_SECTIONS:
        return "sections";
    case CNX_SEGMENT_MODE_2D:
        return "2d";
    default:
        return "auto";
    }
}

static void print_scores(const char *who, const cnx_seg_scores *sc)
{
    printf("%-7s: VI split %.3f, VI merge %.3f (sum %.3f), adapted Rand "
           "error %.3f\n",
           who, sc->vi_split, sc->vi_merge, sc->vi_split + sc->vi_merge,
           sc->are);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : NULL;
    int64_t edge = EDGE;
    input in = {{0, 0, 0}, {0, 0, 0}, NULL, NULL};
    cnx_segment_params p;
    cnx_seg_scores sc;
    float *b = NULL;
    uint32_t *labels = NULL, nlabels = 0;
    double t[RUNS], med, vox, peer_s;
    size_t n;
    int status = 1;

    if (argc == 2 && (strcmp(dir, "--help") == 0 || strcmp(dir, "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc > 3 || (dir != NULL && dir[0] == '-')) {
        fputs(usage, stderr);
        return 2;
    }
    if (argc > 2) {
        char *end;
        edge = strtoll(argv[2], &end, 10);
        if (*end != '\0' || edge < 1 || edge > MAX_EDGE) {
            fprintf(stderr, "bench_segment: EDGE must be 1..%d\n", MAX_EDGE);
            return 2;
        }
    }
    if (dir != NULL
            ? read_layer(dir, "boundary", edge, CNX_DT_UINT8,
                         (void **)&in.boundary, in.size, in.resolution) != 0 ||
                  read_layer(dir, "gt", edge, CNX_DT_UINT64, (void **)&in.gt,
                             in.size, NULL) != 0
            : generate(&in) != 0) {
        fprintf(stderr, "bench_segment: %s\n", cnx_error_last()->message);
        goto done;
    }
    n = (size_t)(in.size[0] * in.size[1] * in.size[2]);
    vox = (double)n;
    b = malloc(n * sizeof(*b));
    labels = malloc(n * sizeof(*labels));
    if (b == NULL || labels == NULL) {
        fprintf(stderr, "bench_segment: out of memory\n");
        goto done;
    }
    cnx_segment_params_default(&p);
    memcpy(p.resolution, in.resolution, sizeof(p.resolution));
    if (cnx_segment_params_check(&p) != 0) {
        fprintf(stderr, "bench_segment: %s\n", cnx_error_last()->message);
        goto done;
    }
    for (int r = 0; r < RUNS; r++) {
        t[r] = run_ours(&in, &p, b, labels, &nlabels);
        if (t[r] < 0.0)
            goto done;
    }
    med = bench_median(t, RUNS);
    printf("input  : %lldx%lldx%lld uint8 boundary at %gx%gx%g nm (%s), "
           "single thread\n",
           (long long)in.size[0], (long long)in.size[1], (long long)in.size[2],
           in.resolution[0], in.resolution[1], in.resolution[2],
           dir != NULL ? dir : "cnx_synth_generate, seed 7");
    printf("params : kernel version %d, mode %s, seed_distance_nm %g, "
           "merge_threshold %g, min_size_nm3 %g (%lld voxels)\n",
           CNX_SEGMENT_VERSION, mode_name(cnx_segment_mode_of(&p)),
           p.seed_distance_nm, p.merge_threshold, p.min_size_nm3,
           (long long)cnx_segment_min_voxels(&p));
    printf("ours   : default parameters, boundary + seeds + watershed + "
           "graph + agglomeration + cleanup: %.4f s (median of %d), %.1f "
           "MVx/s (target >= 10), %u segments\n",
           med, RUNS, vox / med / 1e6, (unsigned)nlabels);
    if (score(&in, labels, &sc) == 0)
        print_scores("ours", &sc);
    fflush(stdout);

    if (run_peer(&in, &peer_s, labels) == 0) {
        printf("peer   : skimage gaussian(sigma=%s nm) + peak_local_max("
               "min_distance=%s nm) + watershed: %.3f s (median of %d), "
               "%.2f MVx/s\n",
               PEER_SIGMA_NM, PEER_MIN_DISTANCE_NM, peer_s, PEER_RUNS,
               vox / peer_s / 1e6);
        if (score(&in, labels, &sc) == 0)
            print_scores("peer", &sc);
        printf("ratio  : ours/peer speed %.1fx (target >= 5)\n", peer_s / med);
    }
    status = 0;
done:
    free(labels);
    free(b);
    free(in.boundary);
    free(in.gt);
    return status;
}
