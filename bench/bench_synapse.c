/*
 * bench_synapse.c - the synapse kernel beside numpy/scipy, one thread.
 *
 * Input: a cnx-synth volume generated in-process (cnx_synth_generate, seed
 * 1, EDGE^3 voxels, 256 by default; argv[1] picks another edge): cleft,
 * psd and the gt segmentation. Ours (default parameters, median of RUNS):
 * cnx_synapse_detect on the whole volume as one block, and the same volume
 * as 128^3 chunks each read with a halo of 16 (the stage's setting; the
 * blocks are copied beforehand, only the kernel is timed). MVx/s counts
 * the volume's voxels (not the halos). The peer (bench/synapse_peer.py:
 * scipy.ndimage.label, distance_transform_edt per component, np.unique
 * votes; median of PEER_RUNS) runs on the same bytes, written to
 * temporary .npy files; the bench reports how many of the peer's synapses
 * have one of ours with the same partners within 12 voxels (on the same
 * cleft: cnx-synth's sites are >= 24 apart; the peer's site is the first
 * distance maximum in raster order, often on the cleft's rim, ours the
 * one nearest the centroid). A failing peer is reported, never fatal.
 * usage: bench_synapse [EDGE]; env CNX_SOURCE: repository root,
 * CNX_PYTHON: python (default /usr/bin/python3). Exit 0 unless we fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/synapse.h"
#include "cnx/synth.h"

#define RUNS 7
#define PEER_RUNS 3
#define EDGE 256
#define CHUNK 128
#define HALO 16
#define SEED 1

typedef struct input {
    int64_t size[3];
    uint8_t *cleft, *psd;
    uint64_t *seg;
    size_t nsynth; /* true synapses */
} input;

static int generate(input *in, int64_t edge)
{
    cnx_synth_params sp;
    cnx_synth *synth = NULL;
    int rc;
    cnx_synth_params_init(&sp);
    for (int i = 0; i < 3; i++)
        sp.shape[i] = in->size[i] = edge;
    sp.seed = SEED;
    rc = cnx_synth_generate(&synth, &sp);
    if (rc != 0)
        return rc;
    in->cleft = synth->cleft->data;
    in->psd = synth->psd->data;
    in->seg = synth->gt->data;
    in->nsynth = synth->nsynapses;
    synth->cleft->data = synth->psd->data = synth->gt->data = NULL;
    cnx_synth_free(synth);
    return 0;
}

/* A block over read (copied from in) owning own. */
static int block_of(const input *in, const cnx_box *own, const cnx_box *read,
                    cnx_synapse_block *b)
{
    int64_t sz[3];
    size_t n, k = 0;
    uint8_t *c, *p;
    uint64_t *s;
    cnx_box_size(read, sz);
    n = (size_t)(sz[0] * sz[1] * sz[2]);
    c = malloc(n);
    p = malloc(n);
    s = malloc(n * sizeof(*s));
    if (c == NULL || p == NULL || s == NULL) {
        free(c);
        free(p);
        free(s);
        return -1;
    }
    for (int64_t z = read->min[2]; z < read->max[2]; z++)
        for (int64_t y = read->min[1]; y < read->max[1]; y++) {
            const size_t i =
                (size_t)(read->min[0] + in->size[0] * (y + in->size[1] * z));
            memcpy(c + k, in->cleft + i, (size_t)sz[0]);
            memcpy(p + k, in->psd + i, (size_t)sz[0]);
            memcpy(s + k, in->seg + i, (size_t)sz[0] * sizeof(*s));
            k += (size_t)sz[0];
        }
    memset(b, 0, sizeof(*b));
    b->cleft = c;
    b->psd = p;
    b->seg = s;
    for (int i = 0; i < 3; i++) {
        b->origin[i] = read->min[i];
        b->size[i] = sz[i];
        b->bounds.max[i] = in->size[i];
        b->resolution[i] = 8.0;
    }
    b->own = *own;
    return 0;
}

static void block_free(cnx_synapse_block *b)
{
    free((void *)b->cleft);
    free((void *)b->psd);
    free((void *)b->seg);
}

/* Run the peer; 0 when it reported its time. Compares its synapses with
 * ours (s, n): *agree = peer synapses with one of ours of the same
 * partners within 12 voxels. */
static int run_peer(const input *in, const cnx_synapse *s, size_t n,
                    double *secs, long *count, long *agree)
{
    char dir[] = "/tmp/bench_synapse_XXXXXX";
    char f[3][96], peer[1024], cmd[2048], line[512];
    const char *py;
    FILE *p;
    int rc = -1, st;

    *secs = -1.0;
    *count = *agree = 0;
    if (bench_peer_setup(&py, peer, sizeof(peer), "synapse_peer.py", dir) != 0)
        return -1;
    snprintf(f[0], sizeof(f[0]), "%s/cleft.npy", dir);
    snprintf(f[1], sizeof(f[1]), "%s/psd.npy", dir);
    snprintf(f[2], sizeof(f[2]), "%s/seg.npy", dir);
    if (bench_write_npy(f[0], in->cleft, 1, "|u1", in->size) != 0 ||
        bench_write_npy(f[1], in->psd, 1, "|u1", in->size) != 0 ||
        bench_write_npy(f[2], in->seg, 8, "<u8", in->size) != 0) {
        printf("peer   : FAILED (cannot write %s)\n", dir);
        goto done;
    }
    snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s' '%s' '%s' --runs %d 2>&1", py,
             peer, f[0], f[1], f[2], PEER_RUNS);
    p = popen(cmd, "r");
    if (p == NULL) {
        printf("peer   : FAILED (cannot start %s)\n", py);
        goto done;
    }
    while (fgets(line, sizeof(line), p) != NULL) {
        double v;
        long long x, y, z, pre, post;
        if (sscanf(line, "seconds %lf", &v) == 1) {
            *secs = v;
        } else if (sscanf(line, "site %lld %lld %lld %lld %lld", &x, &y, &z,
                          &pre, &post) == 5) {
            (*count)++;
            for (size_t k = 0; k < n; k++) {
                const long long dx = s[k].site[0] - x, dy = s[k].site[1] - y,
                                dz = s[k].site[2] - z;
                if (dx * dx + dy * dy + dz * dz <= 144 &&
                    s[k].pre_id == (uint64_t)pre &&
                    s[k].post_id == (uint64_t)post) {
                    (*agree)++;
                    break;
                }
            }
        } else if (strncmp(line, "synapses ", 9) != 0) {
            printf("peer   | %s", line);
        }
    }
    st = pclose(p);
    if (st != 0 || *secs <= 0.0)
        printf("peer   : FAILED (exit status %d)\n", st);
    else
        rc = 0;
done:
    for (int i = 0; i < 3; i++)
        unlink(f[i]);
    rmdir(dir);
    return rc;
}

int main(int argc, char **argv)
{
    int64_t edge = EDGE, counts[3];
    input in = {{0, 0, 0}, NULL, NULL, NULL, 0};
    cnx_synapse_params p;
    cnx_synapse_block whole, *chunks = NULL;
    cnx_synapse *s = NULL;
    size_t n = 0, nchunks = 0, nc_total = 0;
    double t[RUNS], tc[RUNS], med, medc, vox, peer_s;
    long peer_n, agree;
    cnx_box bounds, all;
    int status = 1;

    memset(&whole, 0, sizeof(whole));
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: bench_synapse [EDGE]\n");
        return 2;
    }
    if (argc == 2) {
        char *end;
        edge = strtoll(argv[1], &end, 10);
        if (*end != '\0' || edge < 32 || edge > 1024) {
            fprintf(stderr, "bench_synapse: EDGE must be 32..1024\n");
            return 2;
        }
    }
    if (generate(&in, edge) != 0) {
        fprintf(stderr, "bench_synapse: %s\n", cnx_error_last()->message);
        goto done;
    }
    vox = (double)(in.size[0] * in.size[1] * in.size[2]);
    cnx_synapse_params_default(&p);
    bounds = all = cnx_box_make(0, 0, 0, in.size[0], in.size[1], in.size[2]);
    for (int i = 0; i < 3; i++)
        counts[i] = (in.size[i] + CHUNK - 1) / CHUNK;
    nchunks = (size_t)(counts[0] * counts[1] * counts[2]);
    chunks = calloc(nchunks, sizeof(*chunks));
    if (chunks == NULL || block_of(&in, &all, &all, &whole) != 0) {
        fprintf(stderr, "bench_synapse: out of memory\n");
        goto done;
    }
    for (int64_t gz = 0, k = 0; gz < counts[2]; gz++)
        for (int64_t gy = 0; gy < counts[1]; gy++)
            for (int64_t gx = 0; gx < counts[0]; gx++, k++) {
                const cnx_box own =
                    cnx_box_make(gx * CHUNK, gy * CHUNK, gz * CHUNK,
                                 cnx_imin((gx + 1) * CHUNK, in.size[0]),
                                 cnx_imin((gy + 1) * CHUNK, in.size[1]),
                                 cnx_imin((gz + 1) * CHUNK, in.size[2]));
                const cnx_box read = cnx_box_grow(&own, HALO, &bounds);
                if (block_of(&in, &own, &read, &chunks[k]) != 0) {
                    fprintf(stderr, "bench_synapse: out of memory\n");
                    goto done;
                }
            }

    for (int r = 0; r < RUNS; r++) {
        double t0 = cnx_now();
        free(s);
        s = NULL;
        if (cnx_synapse_detect(&whole, &p, &s, &n, NULL) != 0)
            goto fail;
        t[r] = cnx_now() - t0;
        t0 = cnx_now();
        nc_total = 0;
        for (size_t k = 0; k < nchunks; k++) {
            cnx_synapse *cs = NULL;
            size_t cn = 0;
            if (cnx_synapse_detect(&chunks[k], &p, &cs, &cn, NULL) != 0)
                goto fail;
            nc_total += cn;
            free(cs);
        }
        tc[r] = cnx_now() - t0;
    }
    med = bench_median(t, RUNS);
    medc = bench_median(tc, RUNS);
    printf("input  : %lldx%lldx%lld cnx-synth cleft + psd (uint8) + gt "
           "(uint64), seed %d, %zu true synapses, single thread\n",
           (long long)in.size[0], (long long)in.size[1], (long long)in.size[2],
           SEED, in.nsynth);
    printf("ours   : whole volume as one block: %.4f s (median of %d), %.1f "
           "MVx/s, %zu synapses\n",
           med, RUNS, vox / med / 1e6, n);
    printf("ours   : %zu chunks of %d^3 + halo %d: %.4f s (median of %d), "
           "%.1f MVx/s of volume, %zu synapses\n",
           nchunks, CHUNK, HALO, medc, RUNS, vox / medc / 1e6, nc_total);
    fflush(stdout);
    if (run_peer(&in, s, n, &peer_s, &peer_n, &agree) == 0) {
        printf("peer   : scipy.ndimage label + distance_transform_edt per "
               "component + np.unique votes: %.3f s (median of %d), %.2f "
               "MVx/s, %ld synapses, %ld with ours' partners within 12 "
               "voxels\n",
               peer_s, PEER_RUNS, vox / peer_s / 1e6, peer_n, agree);
        printf("ratio  : ours/peer speed %.1fx (whole volume)\n", peer_s / med);
    }
    status = 0;
    goto done;
fail:
    fprintf(stderr, "bench_synapse: %s\n", cnx_error_last()->message);
done:
    free(s);
    block_free(&whole);
    for (size_t k = 0; chunks != NULL && k < nchunks; k++)
        block_free(&chunks[k]);
    free(chunks);
    free(in.cleft);
    free(in.psd);
    free(in.seg);
    return status;
}
