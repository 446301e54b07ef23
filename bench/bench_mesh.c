/*
 * bench_mesh.c - the marching-cubes kernel beside scikit-image, one thread.
 *
 * Meshes every nonzero label of a 128^3 uint64 volume of warped Voronoi
 * cells (~24-voxel spacing, ~30 voxels across, 0 on 1-voxel membranes),
 * or of a box of argv[1] (a segmentation layer, e.g. DIR/gt of
 * cnx-synth; argv[2] = box edge, 128 by default). Two variants of ours:
 * "full", cnx_mesh_label once per label on the whole volume (the kernel
 * sweeps every voxel per call: no cropping), and "cropped", each label's
 * bounding box copied out and meshed (the kernel pads by one voxel of
 * outside itself). Figures: median of RUNS, MVx/s = volume voxels / time
 * for all labels (zmesh's figure; target >= 40) and bounding-box voxels /
 * time. The peer (bench/mesh_peer.py, skimage marching_cubes on each
 * label's padded mask cropped to its box plus one voxel) runs on the same
 * labels, written to a temporary .npy; triangle counts and enclosed
 * volumes of a few labels are compared. A failing peer is reported.
 * usage: bench_mesh [SEG_LAYER [EDGE]]; env CNX_SOURCE: repository root,
 * CNX_PYTHON: python (default /usr/bin/python3). Exit 0 unless we fail.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/mesh.h"
#include "cnx/precomputed.h"

#define RUNS 5
#define EDGE 128
#define MAX_EDGE 512
#define NCHECK 4
#define FULL_BUDGET_S 60.0

#define CELL 24
#define G ((EDGE + CELL - 1) / CELL + 2)

/*
 * Jittered seeds on a CELL grid; a voxel takes the id of the nearest seed
 * in warped coordinates, or 0 within 0.5 of the boundary to the second
 * nearest (membranes), as the downsample bench's neurites.
 */
static void make_labels(uint64_t *lab)
{
    static double seeds[G][G][G][3];
    static uint64_t ids[G][G][G];
    uint64_t s = 20260422;
    for (int k = 0; k < G; k++)
        for (int j = 0; j < G; j++)
            for (int i = 0; i < G; i++) {
                seeds[k][j][i][0] = (i - 1 + unit(&s)) * CELL;
                seeds[k][j][i][1] = (j - 1 + unit(&s)) * CELL;
                seeds[k][j][i][2] = (k - 1 + unit(&s)) * CELL;
                ids[k][j][i] = (splitmix(&s) >> 24) | UINT64_C(1) << 32;
            }
    for (int z = 0; z < EDGE; z++)
        for (int y = 0; y < EDGE; y++)
            for (int x = 0; x < EDGE; x++) {
                const double p[3] = {x + 3.0 * sin(y / 11.0 + z / 17.0),
                                     y + 3.0 * sin(z / 13.0 + x / 9.0),
                                     z + 3.0 * sin(x / 12.0 + y / 14.0)};
                const int ci = x / CELL + 1, cj = y / CELL + 1,
                          ck = z / CELL + 1;
                double d1 = 1e30, d2 = 1e30;
                uint64_t id = 0;
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
                                id = ids[k][j][i];
                            } else if (d < d2) {
                                d2 = d;
                            }
                        }
                lab[(size_t)x + EDGE * ((size_t)y + EDGE * (size_t)z)] =
                    sqrt(d2) - sqrt(d1) < 1.0 ? 0 : id;
            }
}

/* A box of edge at most `edge` at the start of scale 0 of a uint64 layer. */
static int read_layer(const char *url, int64_t edge, uint64_t **data,
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
    if (info->dtype != CNX_DT_UINT64 || info->channels != 1) {
        rc = cnx_error_set(CNX_EINVAL, 0, "%s: not a one-channel uint64 layer",
                           url);
        goto done;
    }
    for (int i = 0; i < 3; i++) {
        box.min[i] = info->scales[0].voxel_offset[i];
        size[i] = info->scales[0].size[i] < edge ? info->scales[0].size[i]
                                                 : edge;
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

/* One label present in the volume: its id, voxel count and bounding box
 * (inclusive). */
typedef struct obj {
    uint64_t id;
    int64_t voxels;
    int64_t lo[3], hi[3];
} obj;

/* Open-addressing table from id to obj index, sized once for the volume. */
typedef struct objset {
    obj *objs;
    int32_t *slot;
    size_t cap, n, max; /* cap >= 2 * max: the table never fills */
} objset;

#define MAX_OBJS ((size_t)1 << 20)

static size_t hash_id(uint64_t id, size_t cap)
{
    uint64_t s = id;
    return (size_t)(splitmix(&s) & (cap - 1));
}

/*
 * Bounding boxes and counts of every nonzero label, in one pass.
 * @return 0; -1 with more than os->max labels.
 */
static int find_objects(objset *os, const uint64_t *lab, const int64_t s[3])
{
    uint64_t prev = 0;
    size_t prev_i = 0;
    os->n = 0;
    for (size_t k = 0; k < os->cap; k++)
        os->slot[k] = -1;
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++)
            for (int64_t x = 0; x < s[0]; x++) {
                const uint64_t id =
                    lab[(size_t)(x + s[0] * (y + s[1] * z))];
                obj *o;
                if (id == 0)
                    continue;
                if (id != prev || os->n == 0) {
                    size_t h = hash_id(id, os->cap);
                    while (os->slot[h] >= 0 && os->objs[os->slot[h]].id != id)
                        h = (h + 1) & (os->cap - 1);
                    if (os->slot[h] < 0) {
                        obj *n;
                        if (os->n == os->max)
                            return -1;
                        n = &os->objs[os->n];
                        n->id = id;
                        n->voxels = 0;
                        for (int a = 0; a < 3; a++) {
                            n->lo[a] = INT64_MAX;
                            n->hi[a] = -1;
                        }
                        os->slot[h] = (int32_t)os->n++;
                    }
                    prev = id;
                    prev_i = (size_t)os->slot[h];
                }
                o = &os->objs[prev_i];
                o->voxels++;
                o->lo[0] = x < o->lo[0] ? x : o->lo[0];
                o->hi[0] = x > o->hi[0] ? x : o->hi[0];
                o->lo[1] = y < o->lo[1] ? y : o->lo[1];
                o->hi[1] = y > o->hi[1] ? y : o->hi[1];
                o->lo[2] = z < o->lo[2] ? z : o->lo[2];
                o->hi[2] = z > o->hi[2] ? z : o->hi[2];
            }
    return 0;
}

static int64_t box_voxels(const obj *o)
{
    return (o->hi[0] - o->lo[0] + 1) * (o->hi[1] - o->lo[1] + 1) *
           (o->hi[2] - o->lo[2] + 1);
}

/* |enclosed volume| of a closed mesh: sum of signed tetrahedra. */
static double mesh_volume(const cnx_mesh *m)
{
    double v = 0.0;
    for (size_t t = 0; t < m->ntris; t++) {
        const float *a = m->verts + 3 * (size_t)m->tris[3 * t];
        const float *b = m->verts + 3 * (size_t)m->tris[3 * t + 1];
        const float *c = m->verts + 3 * (size_t)m->tris[3 * t + 2];
        v += a[0] * ((double)b[1] * c[2] - (double)b[2] * c[1]) +
             a[1] * ((double)b[2] * c[0] - (double)b[0] * c[2]) +
             a[2] * ((double)b[0] * c[1] - (double)b[1] * c[0]);
    }
    return fabs(v / 6.0);
}

/*
 * Mesh every object: whole volume per label (crop == 0) or its bounding
 * box copied into buf. Adds triangles to *tris; keeps the meshes' figures
 * for the objects in check[] (tris_of, vol_of).
 * @return seconds, or -1 on a kernel failure.
 */
static double mesh_all(const objset *os, const uint64_t *lab,
                       const int64_t s[3], int crop, uint64_t *buf,
                       size_t *tris, const size_t check[NCHECK],
                       size_t tris_of[NCHECK], double vol_of[NCHECK])
{
    const double scale[3] = {1.0, 1.0, 1.0}, zero[3] = {0.0, 0.0, 0.0};
    double t0 = cnx_now();
    *tris = 0;
    for (size_t i = 0; i < os->n; i++) {
        const obj *o = &os->objs[i];
        cnx_mesh m;
        int rc;
        if (crop) {
            const int64_t c[3] = {o->hi[0] - o->lo[0] + 1,
                                  o->hi[1] - o->lo[1] + 1,
                                  o->hi[2] - o->lo[2] + 1};
            const double off[3] = {(double)o->lo[0], (double)o->lo[1],
                                   (double)o->lo[2]};
            uint64_t *d = buf;
            for (int64_t z = 0; z < c[2]; z++)
                for (int64_t y = 0; y < c[1]; y++) {
                    memcpy(d,
                           lab + (size_t)(o->lo[0] +
                                          s[0] * (o->lo[1] + y +
                                                  s[1] * (o->lo[2] + z))),
                           (size_t)c[0] * sizeof(*d));
                    d += c[0];
                }
            rc = cnx_mesh_label(buf, c, o->id, scale, off, &m);
        } else {
            rc = cnx_mesh_label(lab, s, o->id, scale, zero, &m);
        }
        if (rc != 0) {
            fprintf(stderr, "bench_mesh: %s\n", cnx_error_last()->message);
            return -1.0;
        }
        *tris += m.ntris;
        for (int k = 0; k < NCHECK; k++)
            if (check[k] == i) {
                tris_of[k] = m.ntris;
                vol_of[k] = mesh_volume(&m);
            }
        cnx_mesh_free(&m);
    }
    return cnx_now() - t0;
}

/* A .npy (format 1.0) of the labels, shape (z, y, x), little-endian u8. */
static int write_npy(const char *path, const uint64_t *lab, const int64_t s[3])
{
    char hdr[128];
    const size_t n = (size_t)(s[0] * s[1] * s[2]);
    int len = snprintf(hdr + 10, sizeof(hdr) - 10,
                       "{'descr': '<u8', 'fortran_order': False, "
                       "'shape': (%lld, %lld, %lld), }",
                       (long long)s[2], (long long)s[1], (long long)s[0]);
    FILE *f;
    int ok;
    if (len < 0 || len > 100)
        return -1;
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    while ((10 + len + 1) % 64 != 0)
        hdr[10 + len++] = ' ';
    hdr[10 + len++] = '\n';
    hdr[8] = (char)(len & 0xff);
    hdr[9] = (char)(len >> 8);
    f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    ok = fwrite(hdr, 1, (size_t)(10 + len), f) == (size_t)(10 + len);
    ok &= fwrite(lab, sizeof(*lab), n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

static void peer_path(char *buf, size_t n)
{
    const char *src = getenv("CNX_SOURCE");
    if (src != NULL && src[0] != '\0') {
        snprintf(buf, n, "%s/bench/mesh_peer.py", src);
    } else {
        const char *f = __FILE__;
        const char *slash = strrchr(f, '/');
        int dlen = slash != NULL ? (int)(slash - f) : 1;
        snprintf(buf, n, "%.*s/mesh_peer.py", dlen, slash != NULL ? f : ".");
    }
}

typedef struct peer_result {
    double mesh_s, bbox_s, labels, tris;
    uint64_t check_id[NCHECK];
    double check_tris[NCHECK], check_vol[NCHECK];
    int nchecks;
} peer_result;

/* Run the peer on lab; 0 when it reported its figures. */
static int run_peer(const uint64_t *lab, const int64_t s[3],
                    const uint64_t ids[NCHECK], peer_result *pr)
{
    char dir[] = "/tmp/bench_mesh_XXXXXX";
    char npy[96] = "", peer[1024], cmd[2048], line[512], list[256] = "";
    const char *py = getenv("CNX_PYTHON");
    FILE *p;
    int rc = -1, st;

    memset(pr, 0, sizeof(*pr));
    pr->mesh_s = -1.0;
    if (py == NULL || py[0] == '\0')
        py = "/usr/bin/python3";
    peer_path(peer, sizeof(peer));
    if (access(peer, R_OK) != 0 || strchr(peer, '\'') != NULL ||
        strchr(py, '\'') != NULL) {
        printf("peer   : FAILED (%s not readable)\n", peer);
        return -1;
    }
    if (mkdtemp(dir) == NULL) {
        printf("peer   : FAILED (no temporary directory)\n");
        return -1;
    }
    snprintf(npy, sizeof(npy), "%s/labels.npy", dir);
    if (write_npy(npy, lab, s) != 0) {
        printf("peer   : FAILED (cannot write %s)\n", npy);
        goto done;
    }
    for (int k = 0; k < NCHECK; k++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof(list) - l, "%s%llu", k ? "," : "",
                 (unsigned long long)ids[k]);
    }
    snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s' --runs %d --check %s 2>&1",
             py, peer, npy, RUNS, list);
    p = popen(cmd, "r");
    if (p == NULL) {
        printf("peer   : FAILED (cannot start %s)\n", py);
        goto done;
    }
    while (fgets(line, sizeof(line), p) != NULL) {
        char key[64];
        unsigned long long id;
        double a, b;
        if (sscanf(line, "check %llu %lf %lf", &id, &a, &b) == 3 &&
            pr->nchecks < NCHECK) {
            pr->check_id[pr->nchecks] = id;
            pr->check_tris[pr->nchecks] = a;
            pr->check_vol[pr->nchecks++] = b;
        } else if (sscanf(line, "%63s %lf", key, &a) == 2 &&
                   strcmp(key, "mesh_s") == 0) {
            pr->mesh_s = a;
        } else if (sscanf(line, "%63s %lf", key, &a) == 2 &&
                   strcmp(key, "bbox_s") == 0) {
            pr->bbox_s = a;
        } else if (sscanf(line, "%63s %lf", key, &a) == 2 &&
                   strcmp(key, "labels") == 0) {
            pr->labels = a;
        } else if (sscanf(line, "%63s %lf", key, &a) == 2 &&
                   strcmp(key, "tris") == 0) {
            pr->tris = a;
        } else if (strncmp(line, "bbox_voxels ", 12) != 0) {
            printf("peer   | %s", line);
        }
    }
    st = pclose(p);
    if (st != 0 || pr->mesh_s <= 0.0)
        printf("peer   : FAILED (exit status %d)\n", st);
    else
        rc = 0;
done:
    unlink(npy);
    rmdir(dir);
    return rc;
}

static int cmp_voxels(const void *a, const void *b)
{
    const obj *x = *(const obj *const *)a, *y = *(const obj *const *)b;
    return (x->voxels > y->voxels) - (x->voxels < y->voxels);
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : NULL;
    int64_t edge = EDGE, s[3] = {EDGE, EDGE, EDGE}, bbox_vox = 0, maxbox = 0;
    uint64_t *lab = NULL, *buf = NULL;
    objset os = {0};
    const obj **order = NULL;
    size_t check[NCHECK], ctris[2][NCHECK], tris[2] = {0, 0};
    double cvol[2][NCHECK], t[2][RUNS], tb[RUNS], med[2], mb, vox;
    uint64_t cid[NCHECK];
    int full_runs = RUNS, status = 1;
    peer_result pr;

    if (argc > 3 || (url != NULL && url[0] == '-')) {
        fprintf(stderr, "usage: bench_mesh [SEG_LAYER [EDGE]]\n");
        return 2;
    }
    if (argc > 2) {
        char *end;
        edge = strtoll(argv[2], &end, 10);
        if (*end != '\0' || edge < 1 || edge > MAX_EDGE) {
            fprintf(stderr, "bench_mesh: EDGE must be 1..%d\n", MAX_EDGE);
            return 2;
        }
    }
    if (url != NULL) {
        if (read_layer(url, edge, &lab, s) != 0) {
            fprintf(stderr, "bench_mesh: %s\n", cnx_error_last()->message);
            goto done;
        }
    } else {
        lab = malloc((size_t)EDGE * EDGE * EDGE * sizeof(*lab));
        if (lab == NULL)
            goto oom;
        make_labels(lab);
    }
    vox = (double)(s[0] * s[1] * s[2]);
    os.max = (size_t)vox < MAX_OBJS ? (size_t)vox : MAX_OBJS;
    for (os.cap = 1024; os.cap < 2 * os.max; os.cap *= 2)
        ;
    os.objs = malloc(os.max * sizeof(*os.objs));
    os.slot = malloc(os.cap * sizeof(*os.slot));
    buf = malloc((size_t)vox * sizeof(*buf));
    if (os.objs == NULL || os.slot == NULL || buf == NULL)
        goto oom;

    for (int r = 0; r < RUNS; r++) {
        double t0 = cnx_now();
        if (find_objects(&os, lab, s) != 0) {
            fprintf(stderr, "bench_mesh: over %zu labels\n", os.max);
            goto done;
        }
        tb[r] = cnx_now() - t0;
    }
    mb = bench_median(tb, RUNS);
    if (os.n == 0) {
        fprintf(stderr, "bench_mesh: no nonzero label in the volume\n");
        goto done;
    }
    order = malloc(os.n * sizeof(*order));
    if (order == NULL)
        goto oom;
    for (size_t i = 0; i < os.n; i++) {
        const int64_t bv = box_voxels(&os.objs[i]);
        order[i] = &os.objs[i];
        bbox_vox += bv;
        maxbox = bv > maxbox ? bv : maxbox;
    }
    /* Labels to compare: the largest, the median, the 10th percentile and
     * the smallest by voxel count. */
    qsort(order, os.n, sizeof(*order), cmp_voxels);
    check[0] = (size_t)(order[os.n - 1] - os.objs);
    check[1] = (size_t)(order[os.n / 2] - os.objs);
    check[2] = (size_t)(order[os.n / 10] - os.objs);
    check[3] = (size_t)(order[0] - os.objs);
    for (int k = 0; k < NCHECK; k++)
        cid[k] = os.objs[check[k]].id;

    printf("labels : %lldx%lldx%lld uint64 (%s), %zu nonzero labels "
           "(label 0 not meshed), single thread, median of %d\n",
           (long long)s[0], (long long)s[1], (long long)s[2],
           url != NULL ? url : "synthetic Voronoi cells, 0-membranes", os.n,
           RUNS);
    printf("labels : bounding boxes sum to %.2f MVx (%.2fx the volume), "
           "largest %lld voxels\n",
           bbox_vox / 1e6, bbox_vox / vox, (long long)maxbox);
    fflush(stdout);

    /* Cropped, then full (which can take long on a big box). */
    for (int v = 1; v >= 0; v--) {
        for (int r = 0; r < (v ? RUNS : full_runs); r++) {
            t[v][r] = mesh_all(&os, lab, s, v, buf, &tris[v], check,
                               ctris[v], cvol[v]);
            if (t[v][r] < 0.0)
                goto done;
            if (!v && r == 0 && t[v][r] * RUNS > FULL_BUDGET_S)
                full_runs = 1;
        }
        med[v] = bench_median(t[v], v ? RUNS : full_runs);
    }

    printf("ours   : full    (cnx_mesh_label on the whole volume per label, "
           "no cropping; %d run%s): %.3f s, %.2f MVx/s of volume, %.1f MVx/s "
           "swept (volume x labels), %zu triangles\n",
           full_runs, full_runs > 1 ? "s" : "", med[0], vox / med[0] / 1e6,
           vox * (double)os.n / med[0] / 1e6, tris[0]);
    printf("ours   : cropped (bbox copied out, then cnx_mesh_label): %.4f s, "
           "%.1f MVx/s of volume, %.1f MVx/s of bboxes, %zu triangles\n",
           med[1], vox / med[1] / 1e6, bbox_vox / med[1] / 1e6, tris[1]);
    printf("ours   : cropped + bbox pass (%.4f s): %.1f MVx/s of volume "
           "(target >= 40)\n",
           mb, vox / (med[1] + mb) / 1e6);
    fflush(stdout);

    if (run_peer(lab, s, cid, &pr) == 0) {
        printf("peer   : skimage marching_cubes per label (bbox + 1, padded "
               "mask): %.0f labels, %.4f s, %.1f MVx/s of volume, %.1f MVx/s "
               "of bboxes, %.0f triangles\n",
               pr.labels, pr.mesh_s, vox / pr.mesh_s / 1e6,
               bbox_vox / pr.mesh_s / 1e6, pr.tris);
        printf("peer   : + bbox pass (np.unique + find_objects, %.4f s): "
               "%.2f MVx/s of volume\n",
               pr.bbox_s, vox / (pr.mesh_s + pr.bbox_s) / 1e6);
        printf("ratio  : ours/peer (meshing only): cropped %.1fx, full "
               "%.2fx; with bbox passes: cropped %.1fx\n",
               pr.mesh_s / med[1], pr.mesh_s / med[0],
               (pr.mesh_s + pr.bbox_s) / (med[1] + mb));
        printf("check  : %-22s %8s %10s %10s %11s %11s\n", "label (voxels)",
               "ours tri", "peer tri", "ours vol", "peer vol", "full=crop");
        for (int k = 0; k < NCHECK; k++) {
            char name[64];
            double ptri = -1.0, pvol = -1.0;
            for (int j = 0; j < pr.nchecks; j++)
                if (pr.check_id[j] == cid[k]) {
                    ptri = pr.check_tris[j];
                    pvol = pr.check_vol[j];
                }
            snprintf(name, sizeof(name), "%llu (%lld)",
                     (unsigned long long)cid[k],
                     (long long)os.objs[check[k]].voxels);
            printf("check  : %-22s %8zu %10.0f %10.1f %11.1f %11s\n", name,
                   ctris[1][k], ptri, cvol[1][k], pvol,
                   ctris[0][k] == ctris[1][k] &&
                           fabs(cvol[0][k] - cvol[1][k]) < 1e-6 * cvol[1][k]
                       ? "same"
                       : "DIFFER");
        }
    }
    status = 0;
    goto done;
oom:
    fprintf(stderr, "bench_mesh: out of memory\n");
done:
    free(order);
    free(os.objs);
    free(os.slot);
    free(buf);
    free(lab);
    return status;
}
