/*
 * segjoin_tool - run the segmentation of a whole layer in one process, for
 * the acceptance and integration tests: the kernel on the whole volume at
 * once (--whole, uint32 labels) or the chunked three-step method the
 * workers run (--chunked, uint64 segment ids), written raw (x fastest) and
 * their sha256 printed.
 *
 *   segjoin_tool --layer URL (--whole FILE | --chunked FILE)
 *                [--params JSON] [--chunk N | --chunk X,Y,Z] [--halo N]
 *                [--threads N] [--reverse]
 *
 * As the segment stage does (libcnx/src/segment_stage.c), the parameters
 * are parsed over the defaults and then take the layer's resolution
 * (p.resolution: the kernel's lengths are in nm). --chunk defaults to the
 * layer's chunk size and --halo to cnx_segment_halo(&p), the halo the
 * planner derives for a workflow that pins none; the halo used is printed
 * on stderr.
 *
 * The boundary: a boundary map (raw_input off) is converted voxel by voxel
 * (b = v / 255), so it is converted once for the whole volume and the
 * chunks go through cnx_segjoin_chunked. A raw image (raw_input) is not:
 * the membrane filter looks at its neighbourhood and stretches by
 * percentiles of what it is given, and the stage filters each chunk grown
 * by the halo on its own. So with raw_input each chunk's block is cropped
 * from the image and filtered here, as the stage does, then
 * cnx_segjoin_fragments, cnx_segjoin_run and each chunk's mapping through
 * cnx_segjoin_relabel: the workers' bytes either way.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cli.h"
#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/segjoin.h"
#include "cnx/segment_io.h"

static int fail(const char *what)
{
    fprintf(stderr, "segjoin_tool: %s: %s\n", what, cnx_error_last()->message);
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

/* ---- the chunked method on a raw image: each chunk filtered alone ------ */

typedef struct raw_job {
    const cnx_volume *vol; /* the whole layer, box from 0 */
    const int64_t *size, *chunk, *n;
    int64_t halo, nc;
    const cnx_segment_params *p;
    int reverse;
    cnx_segjoin_input *in; /* face records, in chunk (or reverse) order */
    uint64_t *labels;      /* the whole volume's fragment ids */
    atomic_llong next;
    atomic_int rc;
} raw_job;

static cnx_box raw_chunk_box(const raw_job *j, int64_t k)
{
    int64_t c[3] = {k % j->n[0], (k / j->n[0]) % j->n[1],
                    k / (j->n[0] * j->n[1])};
    cnx_box roi;
    for (int i = 0; i < 3; i++) {
        roi.min[i] = c[i] * j->chunk[i];
        roi.max[i] = cnx_imin(roi.min[i] + j->chunk[i], j->size[i]);
    }
    return roi;
}

/* Copy box b of the chunk's fragment ids into the whole volume. */
static void put_box(uint64_t *whole, const int64_t size[3], const cnx_box *b,
                    const uint64_t *block)
{
    size_t row = (size_t)(b->max[0] - b->min[0]), at = 0;
    for (int64_t z = b->min[2]; z < b->max[2]; z++)
        for (int64_t y = b->min[1]; y < b->max[1]; y++, at += row)
            memcpy(whole + b->min[0] + size[0] * (y + size[1] * z), block + at,
                   row * sizeof(*block));
}

/* Chunk k: the block (chunk grown by the halo, clipped) cropped from the
 * image, then what the segment stage runs on it (cnx_segjoin_chunk). */
static int raw_one(raw_job *j, int64_t k, int64_t slot)
{
    cnx_box bounds = {{0, 0, 0}, {j->size[0], j->size[1], j->size[2]}};
    cnx_box roi = raw_chunk_box(j, k),
            bb = cnx_box_grow(&roi, j->halo, &bounds);
    cnx_volume *part = NULL;
    uint64_t *lab = NULL;
    uint8_t *face = NULL;
    int rc = cnx_volume_crop(&part, j->vol, &bb);

    if (rc == 0) {
        lab = malloc((size_t)cnx_box_voxels(&roi) * sizeof(*lab));
        if (lab == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    }
    if (rc == 0)
        rc = cnx_segjoin_chunk(part->data, part->dtype, &bb, &roi, j->p, lab,
                               &face, &j->in[slot].len);
    if (rc == 0) {
        j->in[slot].data = face;
        put_box(j->labels, j->size, &roi, lab);
    }
    free(lab);
    cnx_volume_free(part);
    return rc;
}

static void *raw_worker(void *arg)
{
    raw_job *j = arg;
    for (;;) {
        int64_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->nc || atomic_load(&j->rc) != 0)
            break;
        int64_t k = j->reverse ? j->nc - 1 - i : i;
        int rc = raw_one(j, k, i);
        if (rc != 0) {
            int zero = 0;
            atomic_compare_exchange_strong(&j->rc, &zero, rc);
        }
    }
    return NULL;
}

/* Each chunk's fragments through its own mapping, as segment-relabel. */
static int raw_relabel(const cnx_segjoin *sj, const int64_t size[3],
                       uint64_t *labels)
{
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < sj->nchunks; k++) {
        const cnx_box *roi = &sj->chunks[k];
        size_t nv = (size_t)cnx_box_voxels(roi), row, at = 0;
        uint64_t *lab = malloc(nv * sizeof(*lab));
        uint8_t *map = NULL;
        size_t mlen = 0;
        if (lab == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        row = (size_t)(roi->max[0] - roi->min[0]);
        for (int64_t z = roi->min[2]; z < roi->max[2]; z++)
            for (int64_t y = roi->min[1]; y < roi->max[1]; y++, at += row)
                memcpy(lab + at,
                       labels + roi->min[0] + size[0] * (y + size[1] * z),
                       row * sizeof(*lab));
        rc = cnx_segjoin_mapping_encode(sj, k, &map, &mlen);
        if (rc == 0)
            rc = cnx_segjoin_relabel(lab, nv, map, mlen);
        if (rc == 0)
            put_box(labels, size, roi, lab);
        free(map);
        free(lab);
    }
    return rc;
}

static int chunked_raw(const cnx_volume *vol, const int64_t size[3],
                       const int64_t chunk[3], int64_t halo,
                       const cnx_segment_params *p,
                       const cnx_segjoin_schedule *sched, uint64_t *labels)
{
    int64_t n[3];
    pthread_t tid[64];
    int started = 0, rc;
    raw_job job;
    cnx_segjoin sj;

    memset(&job, 0, sizeof(job));
    memset(&sj, 0, sizeof(sj));
    for (int i = 0; i < 3; i++)
        n[i] = (size[i] + chunk[i] - 1) / chunk[i];
    job.vol = vol;
    job.size = size;
    job.chunk = chunk;
    job.n = n;
    job.halo = halo;
    job.nc = n[0] * n[1] * n[2];
    job.p = p;
    job.reverse = sched->reverse;
    job.labels = labels;
    atomic_init(&job.next, 0);
    atomic_init(&job.rc, 0);
    job.in = calloc((size_t)job.nc, sizeof(*job.in));
    if (job.in == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    for (int t = 1; t < sched->threads && t < 64; t++)
        if (pthread_create(&tid[started], NULL, raw_worker, &job) == 0)
            started++;
    raw_worker(&job);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    rc = atomic_load(&job.rc);
    if (rc == 0)
        rc = cnx_segjoin_run(job.in, (size_t)job.nc, p, &sj);
    if (rc == 0)
        rc = raw_relabel(&sj, size, labels);
    cnx_segjoin_free(&sj);
    for (int64_t k = 0; k < job.nc; k++)
        free((void *)job.in[k].data);
    free(job.in);
    return rc;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: segjoin_tool --layer URL (--whole FILE | --chunked "
               "FILE) [--params JSON] [--chunk N | --chunk X,Y,Z] "
               "[--halo N] [--threads N] [--reverse]\n"
               "  --chunk  default: the layer's chunk size\n"
               "  --halo   default: cnx_segment_halo at the layer's "
               "resolution (what the planner derives)\n");
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
    int64_t chunk[3] = {0, 0, 0}, halo = -1, size[3], nv, threads = 1;
    cnx_segjoin_schedule sched = {1, 0};
    cnx_segment_params p;
    cnx_layer *layer = NULL;
    cnx_volume *vol = NULL;
    int c, rc;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            layer_url = optarg;
            break;
        case 'w':
            whole = optarg;
            break;
        case 'c':
            chunked = optarg;
            break;
        case 'p':
            params = optarg;
            break;
        case 'k':
            if (cnx_cli_ints_in(optarg, 1, CNX_SEGJOIN_COORD_MAX, chunk, 3) ==
                0)
                break;
            if (cnx_cli_ints_in(optarg, 1, CNX_SEGJOIN_COORD_MAX, chunk, 1) ==
                0) {
                chunk[1] = chunk[2] = chunk[0];
                break;
            }
            fprintf(stderr, "segjoin_tool: --chunk: expected N or X,Y,Z\n");
            return 2;
        case 'h':
            if (cnx_cli_ints_in(optarg, 0, 4096, &halo, 1) != 0) {
                fprintf(stderr, "segjoin_tool: --halo: expected 0..4096\n");
                return 2;
            }
            break;
        case 't':
            if (cnx_cli_ints_in(optarg, 1, 64, &threads, 1) != 0) {
                fprintf(stderr, "segjoin_tool: --threads: expected 1..64\n");
                return 2;
            }
            sched.threads = (int)threads;
            break;
        case 'r':
            sched.reverse = 1;
            break;
        case 'H':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
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
        /* The stage's rule: the kernel's lengths are nm at the layer's
         * resolution. */
        memcpy(p.resolution, info->scales[0].resolution, sizeof(p.resolution));
        for (int i = 0; i < 3; i++) {
            box.min[i] = g.offset[i];
            box.max[i] = g.offset[i] + g.size[i];
            size[i] = g.size[i];
            if (chunk[i] == 0)
                chunk[i] = g.chunk[i];
        }
        rc = cnx_layer_read(layer, 0, &box, 0, NULL, NULL, NULL, &vol);
        /* From here on the volume's frame starts at 0 (ids are packed
         * from it; the layers the tests make have offset 0). */
        if (rc == 0)
            for (int i = 0; i < 3; i++) {
                vol->box.min[i] = 0;
                vol->box.max[i] = size[i];
            }
    }
    cnx_layer_free(layer);
    if (rc != 0)
        return fail("reading the layer");
    if (cnx_segment_params_check(&p) != 0)
        return fail("--params at the layer's resolution");
    if (halo < 0)
        halo = cnx_segment_halo(&p);
    fprintf(stderr,
            "segjoin_tool: resolution %g,%g,%g, chunk %lld,%lld,%lld, "
            "halo %lld\n",
            p.resolution[0], p.resolution[1], p.resolution[2],
            (long long)chunk[0], (long long)chunk[1], (long long)chunk[2],
            (long long)halo);
    nv = cnx_volume_voxels(vol);

    if (chunked != NULL && p.raw_input) {
        uint64_t *lab = malloc((size_t)nv * sizeof(*lab));
        if (lab == NULL)
            return 1;
        rc = chunked_raw(vol, size, chunk, halo, &p, &sched, lab);
        cnx_volume_free(vol);
        if (rc != 0)
            return fail("segmenting in chunks");
        rc = write_out(chunked, lab, (size_t)nv * sizeof(*lab));
        free(lab);
        return rc;
    }

    float *b = malloc((size_t)nv * sizeof(*b));
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
        uint64_t *lab = malloc((size_t)nv * sizeof(*lab));
        if (lab == NULL ||
            cnx_segjoin_chunked(b, size, chunk, halo, &p, &sched, lab) != 0)
            return fail("segmenting in chunks");
        rc = write_out(chunked, lab, (size_t)nv * sizeof(*lab));
        free(lab);
    }
    free(b);
    return rc;
}
