/*
 * segjoin_tool - run the segmentation of a whole layer in one process, for
 * the acceptance tests: the kernel on the whole volume at once
 * (--whole, uint32 labels) or the chunked three-step method the workers
 * run (--chunked, uint64 segment ids), written raw (x fastest) and their
 * sha256 printed.
 *
 *   segjoin_tool --layer URL (--whole FILE | --chunked FILE)
 *                [--params JSON] [--chunk N] [--halo N] [--threads N]
 *                [--reverse]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/segjoin.h"

static int fail(const char *what)
{
    fprintf(stderr, "segjoin_tool: %s: %s\n", what,
            cnx_error_last()->message);
    return 1;
}

static int write_out(const char *path, const void *data, size_t len)
{
    char digest[CNX_DIGEST_LEN];
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "segjoin_tool: cannot write %s\n", path);
        return 1;
    }
    cnx_digest(data, len, digest);
    printf("%s %s\n", digest, path);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"layer", required_argument, NULL, 'l'},
        {"whole", required_argument, NULL, 'w'},
        {"chunked", required_argument, NULL, 'c'},
        {"params", required_argument, NULL, 'p'},
        {"chunk", required_argument, NULL, 'k'},
        {"halo", required_argument, NULL, 'h'},
        {"threads", required_argument, NULL, 't'},
        {"reverse", no_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'H'},
        {NULL, 0, NULL, 0}};
    const char *layer_url = NULL, *whole = NULL, *chunked = NULL;
    const char *params = NULL;
    int64_t chunk = 128, halo = 8, size[3], nv;
    cnx_segjoin_schedule sched = {1, 0};
    cnx_segment_params p;
    cnx_layer *layer = NULL;
    cnx_volume *vol = NULL;
    float *b;
    int c, rc;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': layer_url = optarg; break;
        case 'w': whole = optarg; break;
        case 'c': chunked = optarg; break;
        case 'p': params = optarg; break;
        case 'k': chunk = atoll(optarg); break;
        case 'h': halo = atoll(optarg); break;
        case 't': sched.threads = atoi(optarg); break;
        case 'r': sched.reverse = 1; break;
        case 'H':
            printf("usage: segjoin_tool --layer URL (--whole FILE | "
                   "--chunked FILE) [--params JSON] [--chunk N] [--halo N] "
                   "[--threads N] [--reverse]\n");
            return 0;
        default: return 2;
        }
    }
    if (layer_url == NULL || (whole == NULL) == (chunked == NULL)) {
        fprintf(stderr, "segjoin_tool: --layer and one of --whole, "
                        "--chunked (see --help)\n");
        return 2;
    }
    cnx_segment_params_default(&p);
    if (cnx_segment_params_parse(&p, params) != 0)
        return fail("--params");
    if (cnx_layer_open(&layer, layer_url) != 0)
        return fail(layer_url);
    {
        const cnx_layer_info *info = cnx_layer_get_info(layer);
        cnx_grid g = cnx_info_grid(info, 0);
        cnx_box box;
        for (int i = 0; i < 3; i++) {
            box.min[i] = g.offset[i];
            box.max[i] = g.offset[i] + g.size[i];
            size[i] = g.size[i];
        }
        rc = cnx_layer_read(layer, 0, &box, 0, NULL, NULL, NULL, &vol);
    }
    cnx_layer_free(layer);
    if (rc != 0)
        return fail("reading the layer");
    nv = cnx_volume_voxels(vol);
    b = malloc((size_t)nv * sizeof(*b));
    if (b == NULL)
        return 1;
    rc = vol->dtype == CNX_DT_UINT8
             ? cnx_segment_boundary_u8(vol->data, size, &p, b)
             : cnx_segment_boundary_f32(vol->data, size, &p, b);
    cnx_volume_free(vol);
    if (rc != 0)
        return fail("boundary");
    if (whole != NULL) {
        uint32_t *lab = malloc((size_t)nv * sizeof(*lab)), n = 0;
        if (lab == NULL || cnx_segment_volume(b, size, &p, lab, &n) != 0)
            return fail("segmenting");
        rc = write_out(whole, lab, (size_t)nv * sizeof(*lab));
        fprintf(stderr, "segjoin_tool: %u segments\n", n);
        free(lab);
    } else {
        int64_t ch[3] = {chunk, chunk, chunk};
        uint64_t *lab = malloc((size_t)nv * sizeof(*lab));
        if (lab == NULL ||
            cnx_segjoin_chunked(b, size, ch, halo, &p, &sched, lab) != 0)
            return fail("segmenting in chunks");
        rc = write_out(chunked, lab, (size_t)nv * sizeof(*lab));
        free(lab);
    }
    free(b);
    return rc;
}
