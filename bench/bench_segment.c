/*
 * bench_segment.c - the segmentation kernel beside scikit-image, one thread.
 *
 * Input: a 128^3 block of cnx-synth data (uint8 boundary map, high =
 * membrane, and the EM-like image, dark membranes) with its ground truth:
 * generated in-process (cnx_synth_generate, seed 7) or read from argv[1],
 * a cnx-synth dataset (DIR/boundary, DIR/image, DIR/gt; box edge argv[2],
 * 128 by default). Two paths, each at the input's resolution (the
 * dataset's scale, as the stage sets it; 8 nm for the generated block):
 *  - boundary: the default parameters on the boundary map;
 *  - raw image: the parameters of workflows/pipeline.json's "fragments"
 *    stage (RAW_* below: raw_input with the membrane filter, nodata_zero)
 *    on the image.
 * Ours: the whole kernel (cnx_segment_boundary_u8 + cnx_segment_volume:
 * conversion or filter, seeds, watershed, graph, agglomeration, cleanup,
 * numbering), median of RUNS, MVx per CPU second of input voxels (the
 * process's CPU time, as the ledger counts a stage: on a loaded machine
 * wall time measures the others; target >= 30), and
 * the stages' split (minimum over the runs of the boundary conversion and
 * of the rest). The peer (bench/segment_peer.py: gaussian smoothing,
 * peak_local_max seeds, skimage watershed, its lengths in nm at the same
 * resolution; on the raw image the inverted image, --invert; its CPU
 * time too, median of PEER_RUNS) runs on the same bytes, written to a temporary .npy, and
 * hands back its labels; both results are scored against the ground
 * truth (VI split / merge, adapted Rand error). A failing peer is
 * reported, never fatal. The previous kernel's figures on this machine
 * are in bench/README.md; the peer's ratio is the figure to compare.
 * usage: bench_segment [SYNTH_DIR [EDGE]] | --help; env CNX_SOURCE:
 * repository root, CNX_PYTHON: python (default /usr/bin/python3). Exit 0
 * unless we fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

/* The raw-image path: workflows/pipeline.json's "fragments" parameters. */
#define RAW_MERGE 0.725
#define RAW_SEED_THRESHOLD 0.6
#define RAW_SEED_DISTANCE_NM 8.0
#define RAW_MIN_SIZE_NM3 125000.0
#define RAW_SIGMA_NM 4.0
#define RAW_RIDGE 0.3
#define RAW_BACKGROUND_NM 200.0

static const char usage[] =
    "usage: bench_segment [SYNTH_DIR [EDGE]]\n"
    "The segmentation kernel (at the input's resolution) beside\n"
    "scikit-image on a cnx-synth block, one thread: the boundary path\n"
    "(default parameters, the boundary map) and the raw-image path (the\n"
    "pipeline's fragments parameters, membrane filter, the image). The\n"
    "block: a generated 128^3 one (seed 7, 8 nm), or the first EDGE^3\n"
    "(default 128, at most 512) of SYNTH_DIR/boundary and SYNTH_DIR/image,\n"
    "scored against SYNTH_DIR/gt.\n";

typedef struct input {
    int64_t size[3];
    double resolution[3]; /* nm per voxel, x, y, z */
    uint8_t *boundary;
    uint8_t *image;
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
    in->image = synth->image->data;
    in->gt = synth->gt->data;
    synth->boundary->data = NULL;
    synth->image->data = NULL;
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

/* This process's CPU time, seconds. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One run of the whole kernel on data; split[0], split[1]: seconds of the
 * boundary conversion (or filter) and of the rest. @return seconds, or -1
 * on failure. */
static double run_ours(const input *in, const uint8_t *data,
                       const cnx_segment_params *p, float *b, uint32_t *labels,
                       uint32_t *nlabels, double split[2])
{
    double t0 = cpu_now(), t1, t2;
    if (cnx_segment_boundary_u8(data, in->size, p, b) != 0)
        goto fail;
    t1 = cpu_now();
    if (cnx_segment_volume(b, in->size, p, labels, nlabels) != 0)
        goto fail;
    t2 = cpu_now();
    split[0] = t1 - t0;
    split[1] = t2 - t1;
    return t2 - t0;
fail:
    fprintf(stderr, "bench_segment: %s\n", cnx_error_last()->message);
    return -1.0;
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

/* Run the peer on data (invert: the raw image); 0 when it reported its
 * time and labels. */
static int run_peer(const input *in, const uint8_t *data, int invert,
                    double *secs, uint32_t *labels)
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
    if (bench_write_npy(npy, data, 1, "|u1", in->size) != 0) {
        printf("peer   : FAILED (cannot write %s)\n", npy);
        goto done;
    }
    snprintf(res, sizeof(res), "%.17g,%.17g,%.17g", in->resolution[0],
             in->resolution[1], in->resolution[2]);
    snprintf(cmd, sizeof(cmd),
             "'%s' '%s' '%s' --runs %d --resolution %s --sigma-nm %s "
             "--min-distance-nm %s%s --out '%s' 2>&1",
             py, peer, npy, PEER_RUNS, res, PEER_SIGMA_NM, PEER_MIN_DISTANCE_NM,
             invert ? " --invert" : "", out);
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

/* One path (raw: the image through the membrane filter with the RAW_*
 * parameters; else the boundary map with the defaults), ours then the
 * peer. @return 0, or -1 when ours failed. */
static int bench_path(const input *in, int raw, double vox, float *b,
                      uint32_t *labels)
{
    const char *name = raw ? "raw" : "bnd";
    const uint8_t *data = raw ? in->image : in->boundary;
    cnx_segment_params p;
    cnx_seg_scores sc;
    uint32_t nlabels = 0;
    double t[RUNS], split[2], best[2] = {-1.0, -1.0}, med, peer_s;

    cnx_segment_params_default(&p);
    memcpy(p.resolution, in->resolution, sizeof(p.resolution));
    if (raw) {
        p.raw_input = 1;
        p.nodata_zero = 1;
        p.merge_threshold = RAW_MERGE;
        p.seed_threshold = RAW_SEED_THRESHOLD;
        p.seed_distance_nm = RAW_SEED_DISTANCE_NM;
        p.min_size_nm3 = RAW_MIN_SIZE_NM3;
        p.filter_sigma_nm = RAW_SIGMA_NM;
        p.filter_ridge = RAW_RIDGE;
        p.filter_background_nm = RAW_BACKGROUND_NM;
    }
    if (cnx_segment_params_check(&p) != 0) {
        fprintf(stderr, "bench_segment: %s\n", cnx_error_last()->message);
        return -1;
    }
    for (int r = 0; r < RUNS; r++) {
        t[r] = run_ours(in, data, &p, b, labels, &nlabels, split);
        if (t[r] < 0.0)
            return -1;
        for (int i = 0; i < 2; i++)
            if (best[i] < 0.0 || split[i] < best[i])
                best[i] = split[i];
    }
    med = bench_median(t, RUNS);
    printf("%s    : %s, mode %s, seed_distance_nm %g, merge_threshold %g, "
           "min_size_nm3 %g (%lld voxels)",
           name, raw ? "raw image, the pipeline's fragments parameters"
                     : "boundary map, default parameters",
           mode_name(cnx_segment_mode_of(&p)), p.seed_distance_nm,
           p.merge_threshold, p.min_size_nm3,
           (long long)cnx_segment_min_voxels(&p));
    if (raw)
        printf(", filter_sigma_nm %g, filter_ridge %g, filter_background_nm "
               "%g, halo %lld",
               p.filter_sigma_nm, p.filter_ridge, p.filter_background_nm,
               (long long)cnx_segment_halo(&p));
    printf("\nours   : %s: %.4f CPU s (median of %d), %.1f MVx/s (target >= 30), "
           "%u segments; minimum: %s %.4f s, seeds to numbering %.4f s\n",
           name, med, RUNS, vox / med / 1e6, (unsigned)nlabels,
           raw ? "filter" : "conversion", best[0], best[1]);
    if (score(in, labels, &sc) == 0)
        print_scores("ours", &sc);
    fflush(stdout);

    if (run_peer(in, data, raw, &peer_s, labels) == 0) {
        printf("peer   : %s: skimage %sgaussian(sigma=%s nm) + "
               "peak_local_max(min_distance=%s nm) + watershed: %.3f CPU s "
               "(median of %d), %.2f MVx/s\n",
               name, raw ? "inverted image, " : "", PEER_SIGMA_NM,
               PEER_MIN_DISTANCE_NM, peer_s, PEER_RUNS, vox / peer_s / 1e6);
        if (score(in, labels, &sc) == 0)
            print_scores("peer", &sc);
        printf("ratio  : %s: ours/peer speed %.1fx\n", name, peer_s / med);
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : NULL;
    int64_t edge = EDGE;
    input in = {{0, 0, 0}, {0, 0, 0}, NULL, NULL, NULL};
    float *b = NULL;
    uint32_t *labels = NULL;
    double vox;
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
                  read_layer(dir, "image", edge, CNX_DT_UINT8,
                             (void **)&in.image, in.size, NULL) != 0 ||
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
    printf("input  : %lldx%lldx%lld uint8 at %gx%gx%g nm (%s), single "
           "thread, kernel version %d\n",
           (long long)in.size[0], (long long)in.size[1], (long long)in.size[2],
           in.resolution[0], in.resolution[1], in.resolution[2],
           dir != NULL ? dir : "cnx_synth_generate, seed 7",
           CNX_SEGMENT_VERSION);
    for (int raw = 0; raw < 2; raw++)
        if (bench_path(&in, raw, vox, b, labels) != 0)
            goto done;
    status = 0;
done:
    free(labels);
    free(b);
    free(in.boundary);
    free(in.image);
    free(in.gt);
    return status;
}
