/*
 * segment_tool - run the segmentation kernel (cnx/segment.h) from the
 * command line, for tests, bench/isbi_eval.py and tuning.
 *
 *   segment_tool raw IN DTYPE X,Y,Z PARAMS OUT [RX,RY,RZ]
 *     IN: raw little-endian volume (x fastest, then y, z), DTYPE uint8 or
 *     float32; PARAMS: the parameters JSON ("{}" for the defaults); OUT:
 *     uint32 labels, same layout; RX,RY,RZ: nm per voxel (default the
 *     kernel's, 8,8,8). Prints "nlabels N".
 *   segment_tool synth DIR PARAMS [X0,Y0,Z0,X1,Y1,Z1] [OUT]
 *     DIR: a cnx-synth dataset; segments the box (default: all; at the
 *     layer's resolution) of
 *     DIR/boundary, or of DIR/image when PARAMS has raw_input, and scores
 *     it against DIR/gt (cnx_seg_scores_u64). Prints "nlabels N",
 *     "vi_split S", "vi_merge M", "are A", "seconds T" (the kernel only).
 *
 * Exit status 0, 1 on a failure (one line on stderr), 2 on bad arguments.
 * Single-threaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/metrics.h"
#include "cnx/precomputed.h"
#include "cnx/segment_io.h"

static const char usage[] =
    "usage: segment_tool raw IN uint8|float32 X,Y,Z PARAMS OUT [RX,RY,RZ]\n"
    "       segment_tool synth DIR PARAMS [X0,Y0,Z0,X1,Y1,Z1] [OUT]\n"
    "Segment a raw volume (writes uint32 labels to OUT), or a box of a\n"
    "cnx-synth dataset's boundary (or image, with raw_input) layer scored\n"
    "against its gt. PARAMS is the parameters JSON of cnx/segment.h.\n";

static int fail(const char *what)
{
    fprintf(stderr, "segment_tool: %s: %s\n", what, cnx_error_last()->message);
    return 1;
}

/* Parse n comma-separated integers. @return 0 or -1. */
static int parse_ints(const char *s, int64_t *out, int n)
{
    for (int i = 0; i < n; i++) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || (i < n - 1 ? *end != ',' : *end != '\0'))
            return -1;
        out[i] = v;
        s = end + 1;
    }
    return 0;
}

/* Three positive comma-separated numbers (nm per voxel). */
static int parse_res(const char *s, double out[3])
{
    for (int i = 0; i < 3; i++) {
        char *end;
        out[i] = strtod(s, &end);
        if (end == s || !(out[i] > 0) ||
            (i < 2 ? *end != ',' : *end != '\0'))
            return -1;
        s = end + 1;
    }
    return 0;
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok = f != NULL && fwrite(data, 1, len, f) == len;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "segment_tool: cannot write %s\n", path);
    return ok ? 0 : 1;
}

/* Boundary conversion and segmentation of in (uint8 or float32). */
static int run_kernel(const void *in, int is_float, const int64_t size[3],
                      const cnx_segment_params *p, uint32_t *labels,
                      uint32_t *nlabels)
{
    size_t n = (size_t)(size[0] * size[1] * size[2]);
    float *b = malloc(n * sizeof(*b));
    int rc;
    if (b == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    rc = is_float ? cnx_segment_boundary_f32(in, size, p, b)
                  : cnx_segment_boundary_u8(in, size, p, b);
    if (rc == 0)
        rc = cnx_segment_volume(b, size, p, labels, nlabels);
    free(b);
    return rc;
}

static int cmd_raw(char **argv)
{
    cnx_segment_params p;
    int64_t size[3];
    int is_float = strcmp(argv[1], "float32") == 0;
    size_t n, esize, len;
    void *in = NULL;
    uint32_t *labels = NULL, nlabels = 0;
    FILE *f;
    int status = 1;

    if ((!is_float && strcmp(argv[1], "uint8") != 0) ||
        parse_ints(argv[2], size, 3) != 0 || size[0] < 1 || size[1] < 1 ||
        size[2] < 1 || size[0] * size[1] > (1 << 30) / size[2]) {
        fputs(usage, stderr);
        return 2;
    }
    if (cnx_segment_params_parse(&p, argv[3]) != 0)
        return fail("PARAMS");
    if (argv[5] != NULL && parse_res(argv[5], p.resolution) != 0) {
        fputs(usage, stderr);
        return 2;
    }
    n = (size_t)(size[0] * size[1] * size[2]);
    esize = is_float ? 4 : 1;
    in = malloc(n * esize);
    labels = malloc(n * sizeof(*labels));
    f = fopen(argv[0], "rb");
    if (in == NULL || labels == NULL || f == NULL) {
        fprintf(stderr, "segment_tool: cannot read %s\n", argv[0]);
        goto done;
    }
    len = fread(in, 1, n * esize, f);
    if (len != n * esize || fgetc(f) != EOF) {
        fprintf(stderr, "segment_tool: %s: not %zu bytes\n", argv[0],
                n * esize);
        goto done;
    }
    if (run_kernel(in, is_float, size, &p, labels, &nlabels) != 0) {
        status = fail("segment");
        goto done;
    }
    status = write_file(argv[4], labels, n * sizeof(*labels));
    if (status == 0)
        printf("nlabels %u\n", (unsigned)nlabels);
done:
    if (f != NULL)
        fclose(f);
    free(labels);
    free(in);
    return status;
}

/* Read box of the layer DIR/name (scale 0); the whole scale if box is
 * empty (max[0] == 0). */
static int read_box(const char *dir, const char *name, cnx_box *box,
                    cnx_volume **out, double resolution[3])
{
    char url[4096];
    cnx_layer *layer = NULL;
    int rc;
    snprintf(url, sizeof(url), "%s/%s", dir, name);
    rc = cnx_layer_open(&layer, url);
    if (rc == 0 && resolution != NULL)
        memcpy(resolution, cnx_layer_get_info(layer)->scales[0].resolution,
               3 * sizeof(double));
    if (rc == 0 && box->max[0] == 0) {
        const cnx_scale *sc = &cnx_layer_get_info(layer)->scales[0];
        for (int i = 0; i < 3; i++) {
            box->min[i] = sc->voxel_offset[i];
            box->max[i] = sc->voxel_offset[i] + sc->size[i];
        }
    }
    if (rc == 0)
        rc = cnx_layer_read(layer, 0, box, 0, NULL, NULL, NULL, out);
    cnx_layer_free(layer);
    return rc;
}

static int cmd_synth(int argc, char **argv)
{
    cnx_segment_params p;
    cnx_box box = {{0, 0, 0}, {0, 0, 0}};
    cnx_volume *in = NULL, *gt = NULL;
    uint32_t *labels = NULL, nlabels = 0;
    uint64_t *seg = NULL;
    int64_t size[3], c[6];
    cnx_seg_scores sc;
    size_t n;
    double t0, secs;
    int status = 1;

    if (argc > 2 && parse_ints(argv[2], c, 6) == 0) {
        memcpy(box.min, c, sizeof(box.min));
        memcpy(box.max, c + 3, sizeof(box.max));
    } else if (argc > 2) {
        fputs(usage, stderr);
        return 2;
    }
    if (cnx_segment_params_parse(&p, argv[1]) != 0)
        return fail("PARAMS");
    if (read_box(argv[0], p.raw_input ? "image" : "boundary", &box, &in,
                 p.resolution) != 0 ||
        read_box(argv[0], "gt", &box, &gt, NULL) != 0)
        return fail(argv[0]);
    for (int i = 0; i < 3; i++)
        size[i] = box.max[i] - box.min[i];
    n = (size_t)cnx_volume_voxels(in);
    labels = malloc(n * sizeof(*labels));
    seg = malloc(n * sizeof(*seg));
    if (labels == NULL || seg == NULL || in->dtype != CNX_DT_UINT8) {
        fprintf(stderr, "segment_tool: out of memory or not uint8\n");
        goto done;
    }
    t0 = cnx_now();
    if (run_kernel(in->data, 0, size, &p, labels, &nlabels) != 0) {
        status = fail("segment");
        goto done;
    }
    secs = cnx_now() - t0;
    for (size_t i = 0; i < n; i++)
        seg[i] = labels[i];
    if (cnx_seg_scores_u64(seg, gt->data, n, &sc) != 0) {
        status = fail("score");
        goto done;
    }
    printf("nlabels %u\nvi_split %.4f\nvi_merge %.4f\nare %.4f\n"
           "seconds %.3f\n",
           (unsigned)nlabels, sc.vi_split, sc.vi_merge, sc.are, secs);
    status = argc > 3 ? write_file(argv[3], labels, n * sizeof(*labels)) : 0;
done:
    free(seg);
    free(labels);
    cnx_volume_free(gt);
    cnx_volume_free(in);
    return status;
}

int main(int argc, char **argv)
{
    if (argc >= 2 &&
        (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if ((argc == 7 || argc == 8) && strcmp(argv[1], "raw") == 0)
        return cmd_raw(argv + 2);
    if (argc >= 4 && argc <= 6 && strcmp(argv[1], "synth") == 0)
        return cmd_synth(argc - 2, argv + 2);
    fputs(usage, stderr);
    return 2;
}
