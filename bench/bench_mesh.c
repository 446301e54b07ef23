/*
 * bench_mesh.c - the meshing kernels beside scikit-image, one thread.
 *
 * Labels: warped Voronoi cells (~24-voxel spacing, 0 on 1-voxel membranes)
 * or a box of argv[1] (a segmentation layer, e.g. DIR/gt of cnx-synth),
 * EDGE + 1 voxels a side (argv[2] = EDGE, 128 by default). Figures, median
 * of RUNS (after two untimed runs of the meshing), MVx/s = EDGE^3 chunk
 * voxels / seconds for all labels:
 *  - chunk: cnx_mesh_block_run on the EDGE^3 cells of a chunk with one
 *    voxel of overlap on its high faces, as the mesh worker runs it, then
 *    again followed by cnx_mesh_simplify of every fragment (chunk faces
 *    fixed), and followed by the baseline instead: the previous
 *    simplifier (mesh_simplify_v2.h, the code of a03ae92), in the same
 *    run, interleaved; the split of meshing and simplification, and
 *    whether both simplifiers wrote the same bytes;
 *  - closed: the EDGE^3 volume alone (cells -1..EDGE, outside 0), so every
 *    label's mesh is closed: its enclosed volume against the label's voxel
 *    count, before and after simplification;
 *  - per label: cnx_mesh_label on each label's bounding box copied out,
 *    the form the peer has;
 *  - peer: bench/mesh_peer.py, skimage.measure.marching_cubes on each
 *    label's padded mask cropped to its box plus one voxel, on the same
 *    EDGE^3 labels (a temporary .npy): whole (all labels, MVx/s of volume)
 *    and per label (MVx/s of bounding boxes); triangle counts and volumes
 *    of four labels side by side. A failing peer is reported.
 * usage: bench_mesh [SEG_LAYER [EDGE]]; env CNX_SOURCE: repository root,
 * CNX_PYTHON: python (default /usr/bin/python3). Exit 0 unless we fail.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/mesh.h"
#include "cnx/precomputed.h"
#include "mesh_simplify_v2.h"

#define RUNS 5
#define EDGE 128
#define MAX_EDGE 512
#define NCHECK 4

/* Simplification of the figures: a tenth of the triangles, no collapse
 * costing over SIMP_ERROR_VOX2 squared voxels (of the finest axis). */
#define SIMP_FRACTION 0.1
#define SIMP_ERROR_VOX2 1.0

#define CELL 24
#define G ((MAX_EDGE + CELL) / CELL + 2)

/*
 * Jittered seeds on a CELL grid; a voxel takes the id of the nearest seed
 * in warped coordinates, or 0 within 0.5 of the boundary to the second
 * nearest (membranes), as the downsample bench's neurites. n voxels a side;
 * a voxel's label does not depend on n.
 */
static void make_labels(uint64_t *lab, int64_t n)
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
    for (int64_t z = 0; z < n; z++)
        for (int64_t y = 0; y < n; y++)
            for (int64_t x = 0; x < n; x++) {
                const double p[3] = {x + 3.0 * sin(y / 11.0 + z / 17.0),
                                     y + 3.0 * sin(z / 13.0 + x / 9.0),
                                     z + 3.0 * sin(x / 12.0 + y / 14.0)};
                const int ci = (int)(x / CELL) + 1, cj = (int)(y / CELL) + 1,
                          ck = (int)(z / CELL) + 1;
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
                lab[(size_t)(x + n * (y + n * z))] =
                    sqrt(d2) - sqrt(d1) < 1.0 ? 0 : id;
            }
}

/* A box of edge at most `edge` at the start of scale 0 of a uint64 layer. */
static int read_layer(const char *url, int64_t edge, uint64_t **data,
                      int64_t size[3], double res[3])
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
        size[i] =
            info->scales[0].size[i] < edge ? info->scales[0].size[i] : edge;
        box.max[i] = box.min[i] + size[i];
        res[i] = info->scales[0].resolution[i];
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
                const uint64_t id = lab[(size_t)(x + s[0] * (y + s[1] * z))];
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
    const char *py;
    FILE *p;
    int rc = -1, st;

    memset(pr, 0, sizeof(*pr));
    pr->mesh_s = -1.0;
    if (bench_peer_setup(&py, peer, sizeof(peer), "mesh_peer.py", dir) != 0)
        return -1;
    snprintf(npy, sizeof(npy), "%s/labels.npy", dir);
    if (bench_write_npy(npy, lab, sizeof(*lab), "<u8", s) != 0) {
        printf("peer   : FAILED (cannot write %s)\n", npy);
        goto done;
    }
    for (int k = 0; k < NCHECK; k++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof(list) - l, "%s%llu", k ? "," : "",
                 (unsigned long long)ids[k]);
    }
    snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s' --runs %d --check %s 2>&1", py,
             peer, npy, RUNS, list);
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

static const obj *find_obj(const objset *os, uint64_t id)
{
    size_t h = hash_id(id, os->cap);
    while (os->slot[h] >= 0) {
        if (os->objs[os->slot[h]].id == id)
            return &os->objs[os->slot[h]];
        h = (h + 1) & (os->cap - 1);
    }
    return NULL;
}

static void die_kernel(void)
{
    fprintf(stderr, "bench_mesh: %s\n", cnx_error_last()->message);
    exit(1);
}

typedef int (*simplify_fn)(cnx_mesh *, const cnx_mesh_simplify_opts *);

/* CPU seconds of this thread: on a loaded machine the wall clock also
 * counts the time the thread waited for a core. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Mesh a block; simplify every mesh too with fn when `simp` is set.
 * Seconds; its CPU seconds into *cpu when cpu is not NULL. */
static double run_block(const cnx_mesh_block *b,
                        const cnx_mesh_simplify_opts *simp, simplify_fn fn,
                        cnx_mesh_set *set, double *cpu)
{
    double t0 = cnx_now(), c0 = cpu_now();
    if (cnx_mesh_block_run(b, set) != 0)
        die_kernel();
    for (size_t i = 0; simp != NULL && i < set->n; i++)
        if (fn(&set->meshes[i], simp) != 0)
            die_kernel();
    if (cpu != NULL)
        *cpu = cpu_now() - c0;
    return cnx_now() - t0;
}

/* 1 if the two sets hold the same labels and the same mesh bytes. */
static int sets_equal(const cnx_mesh_set *a, const cnx_mesh_set *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        const cnx_mesh *x = &a->meshes[i], *y = &b->meshes[i];
        if (a->labels[i] != b->labels[i] || x->nverts != y->nverts ||
            x->ntris != y->ntris ||
            memcmp(x->verts, y->verts, 3 * x->nverts * sizeof(float)) != 0 ||
            memcmp(x->tris, y->tris, 3 * x->ntris * sizeof(uint32_t)) != 0)
            return 0;
    }
    return 1;
}

static size_t set_tris(const cnx_mesh_set *set)
{
    size_t n = 0;
    for (size_t i = 0; i < set->n; i++)
        n += set->meshes[i].ntris;
    return n;
}

/* Volume agreement of closed meshes with voxel counts: relative errors
 * of labels of at least min_vox voxels (and their count), the largest. */
typedef struct vol_stats {
    size_t n, over5;
    double median, p95, max, total; /* |relative error|; total: signed */
} vol_stats;

static void volume_stats(const cnx_mesh_set *set, const objset *os,
                         const double res[3], int64_t min_vox, vol_stats *st)
{
    double *err = malloc((set->n + 1) * sizeof(*err));
    double sv = 0, sm = 0;
    memset(st, 0, sizeof(*st));
    if (err == NULL)
        return;
    for (size_t i = 0; i < set->n; i++) {
        const obj *o = find_obj(os, set->labels[i]);
        double v;
        if (o == NULL || o->voxels < min_vox)
            continue;
        v = mesh_volume(&set->meshes[i]) / (res[0] * res[1] * res[2]);
        err[st->n] = fabs(v - (double)o->voxels) / (double)o->voxels;
        st->over5 += err[st->n] > 0.05;
        st->n++;
        sv += (double)o->voxels;
        sm += v;
    }
    if (st->n > 0) {
        st->median = bench_median(err, (int)st->n);
        st->p95 = err[(size_t)(0.95 * (double)(st->n - 1))];
        st->max = err[st->n - 1];
        st->total = (sm - sv) / sv;
    }
    free(err);
}

static void print_volume_stats(const char *what, const vol_stats *st)
{
    printf("volume : %-10s %zu labels >= 1000 voxels: |mesh - voxels| / "
           "voxels median %.2f%%, p95 %.2f%%, max %.2f%% (%zu over 5%%); "
           "sum %+.2f%%\n",
           what, st->n, 100 * st->median, 100 * st->p95, 100 * st->max,
           st->over5, 100 * st->total);
}

/* cnx_mesh_label on each object's bounding box copied into buf. Seconds. */
static double mesh_cropped(const objset *os, const uint64_t *lab,
                           const int64_t s[3], uint64_t *buf, size_t *tris)
{
    const double scale[3] = {1.0, 1.0, 1.0};
    double t0 = cnx_now();
    *tris = 0;
    for (size_t i = 0; i < os->n; i++) {
        const obj *o = &os->objs[i];
        const int64_t c[3] = {o->hi[0] - o->lo[0] + 1, o->hi[1] - o->lo[1] + 1,
                              o->hi[2] - o->lo[2] + 1};
        const double off[3] = {(double)o->lo[0], (double)o->lo[1],
                               (double)o->lo[2]};
        uint64_t *d = buf;
        cnx_mesh m;
        for (int64_t z = 0; z < c[2]; z++)
            for (int64_t y = 0; y < c[1]; y++) {
                memcpy(d,
                       lab +
                           (size_t)(o->lo[0] + s[0] * (o->lo[1] + y +
                                                       s[1] * (o->lo[2] + z))),
                       (size_t)c[0] * sizeof(*d));
                d += c[0];
            }
        if (cnx_mesh_label(buf, c, o->id, scale, off, &m) != 0)
            die_kernel();
        *tris += m.ntris;
        cnx_mesh_free(&m);
    }
    return cnx_now() - t0;
}

static const cnx_mesh *set_find(const cnx_mesh_set *set, uint64_t id)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->labels[i] == id)
            return &set->meshes[i];
    return NULL;
}

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : NULL;
    int64_t edge = EDGE, s[3], c[3], d[3], bbox_vox = 0;
    double res[3] = {8, 8, 8}, t[RUNS], tv[6][RUNS], med[6], best[6], vox;
    double rmin, simp_s[2], med_label, cv[6][RUNS], cmed[6];
    uint64_t *data = NULL, *lab = NULL, *buf = NULL;
    objset os = {0};
    const obj **order = NULL;
    cnx_mesh_block chunk, closed;
    cnx_mesh_simplify_opts so;
    cnx_mesh_set set = {0}, simp = {0}, cset = {0}, csimp = {0};
    cnx_mesh_set bsimp = {0}, bcsimp = {0};
    size_t tris_cropped = 0;
    uint64_t cid[NCHECK];
    vol_stats vs[3];
    int status = 1;
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
    /* data: (EDGE + 1)^3 or what the layer has; the chunk is [0, c). */
    if (url != NULL) {
        if (read_layer(url, edge + 1, &data, d, res) != 0) {
            fprintf(stderr, "bench_mesh: %s\n", cnx_error_last()->message);
            goto done;
        }
    } else {
        data = malloc((size_t)((edge + 1) * (edge + 1) * (edge + 1)) *
                      sizeof(*data));
        if (data == NULL)
            goto oom;
        make_labels(data, edge + 1);
        d[0] = d[1] = d[2] = edge + 1;
    }
    for (int a = 0; a < 3; a++)
        s[a] = c[a] = d[a] < edge ? d[a] : edge;
    vox = (double)(c[0] * c[1] * c[2]);
    rmin = fmin(res[0], fmin(res[1], res[2]));

    /* The chunk as a worker has it: cells [0, c), data [0, d). */
    memset(&chunk, 0, sizeof(chunk));
    chunk.labels = data;
    for (int a = 0; a < 3; a++) {
        chunk.size[a] = d[a];
        chunk.cells.max[a] = c[a];
        chunk.resolution[a] = res[a];
    }
    memset(&so, 0, sizeof(so));
    so.target_fraction = SIMP_FRACTION;
    so.max_error = SIMP_ERROR_VOX2 * rmin * rmin;
    cnx_mesh_block_planes(&chunk, &so);

    /* The c^3 volume alone, closed. */
    lab = malloc((size_t)vox * sizeof(*lab));
    buf = malloc((size_t)vox * sizeof(*buf));
    if (lab == NULL || buf == NULL)
        goto oom;
    for (int64_t z = 0; z < c[2]; z++)
        for (int64_t y = 0; y < c[1]; y++)
            memcpy(lab + (size_t)(c[0] * (y + c[1] * z)),
                   data + (size_t)(d[0] * (y + d[1] * z)),
                   (size_t)c[0] * sizeof(*lab));
    closed = chunk;
    closed.labels = lab;
    for (int a = 0; a < 3; a++) {
        closed.size[a] = c[a];
        closed.cells.min[a] = -1;
    }

    os.max = (size_t)vox < MAX_OBJS ? (size_t)vox : MAX_OBJS;
    for (os.cap = 1024; os.cap < 2 * os.max; os.cap *= 2)
        ;
    os.objs = malloc(os.max * sizeof(*os.objs));
    os.slot = malloc(os.cap * sizeof(*os.slot));
    if (os.objs == NULL || os.slot == NULL)
        goto oom;
    if (find_objects(&os, lab, s) != 0 || os.n == 0) {
        fprintf(stderr, "bench_mesh: no nonzero label, or over %zu\n", os.max);
        goto done;
    }
    order = malloc(os.n * sizeof(*order));
    if (order == NULL)
        goto oom;
    for (size_t i = 0; i < os.n; i++) {
        order[i] = &os.objs[i];
        bbox_vox += box_voxels(&os.objs[i]);
    }
    /* Labels to compare: the largest, the median, the 10th percentile and
     * the smallest by voxel count. */
    qsort(order, os.n, sizeof(*order), cmp_voxels);
    cid[0] = order[os.n - 1]->id;
    cid[1] = order[os.n / 2]->id;
    cid[2] = order[os.n / 10]->id;
    cid[3] = order[0]->id;

    printf("labels : %lldx%lldx%lld chunk of uint64 (%s) + 1 voxel of "
           "overlap, %zu nonzero labels, resolution %g x %g x %g nm; one "
           "thread, median of %d\n",
           (long long)c[0], (long long)c[1], (long long)c[2],
           url != NULL ? url : "synthetic Voronoi cells, 0-membranes", os.n,
           res[0], res[1], res[2], RUNS);
    printf("labels : bounding boxes sum to %.2f MVx (%.2fx the chunk)\n",
           bbox_vox / 1e6, bbox_vox / vox);
    fflush(stdout);

    /* Six variants: the chunk and the closed volume, each meshed alone,
     * + cnx_mesh_simplify (ours), + the baseline (bench/mesh_simplify_v2.h,
     * the simplifier of a03ae92). Two untimed runs of the meshing first: a
     * worker meshes chunk after chunk, with its allocator warm (the first
     * runs of a process pay for fresh pages and mmap/munmap of the big
     * arrays until glibc's thresholds settle). The timed runs interleave
     * the variants, so that a change of the machine's load falls on all. */
    for (int w = 0; w < 2; w++) {
        cnx_mesh_set_free(&set);
        (void)run_block(&chunk, NULL, NULL, &set, NULL);
        cnx_mesh_set_free(&cset);
        (void)run_block(&closed, NULL, NULL, &cset, NULL);
    }
    for (int r = 0; r < RUNS; r++)
        for (int v = 0; v < 6; v++) {
            cnx_mesh_set *out = v == 0   ? &set
                                : v == 1 ? &simp
                                : v == 2 ? &cset
                                : v == 3 ? &csimp
                                : v == 4 ? &bsimp
                                         : &bcsimp;
            const cnx_mesh_block *blk =
                v == 0 || v == 1 || v == 4 ? &chunk : &closed;
            cnx_mesh_set_free(out);
            tv[v][r] = run_block(blk, v == 0 || v == 2 ? NULL : &so,
                                 v < 4 ? cnx_mesh_simplify : v2_mesh_simplify,
                                 out, &cv[v][r]);
        }
    for (int v = 0; v < 6; v++) {
        med[v] = bench_median(tv[v], RUNS);
        best[v] = tv[v][0]; /* sorted by bench_median */
        cmed[v] = bench_median(cv[v], RUNS);
    }
    /* Simplification alone: chunk + simplify less the chunk's meshing. */
    simp_s[0] = med[1] - med[0];
    simp_s[1] = med[4] - med[0];
    printf("ours   : chunk, all labels in one pass (cnx_mesh_block_run): "
           "%.4f s, %.1f MVx/s (target >= 40; best run %.1f), %zu labels, "
           "%zu triangles\n",
           med[0], vox / med[0] / 1e6, vox / best[0] / 1e6, set.n,
           set_tris(&set));
    printf("ours   : chunk + cnx_mesh_simplify of every fragment (fraction "
           "%.2f, max error %.0f nm^2, chunk faces fixed): %.4f s, %.1f "
           "MVx/s (target >= 20), %zu triangles (%.1f%% of the input)\n",
           so.target_fraction, so.max_error, med[1], vox / med[1] / 1e6,
           set_tris(&simp),
           100.0 * (double)set_tris(&simp) / (double)set_tris(&set));
    printf("base   : chunk + the previous simplifier (mesh_simplify_v2.h), "
           "same options: %.4f s, %.1f MVx/s, %zu triangles (%.1f%%)\n",
           med[4], vox / med[4] / 1e6, set_tris(&bsimp),
           100.0 * (double)set_tris(&bsimp) / (double)set_tris(&set));
    printf("split  : chunk + simplify: meshing %.0f%%, simplification %.0f%% "
           "(%.4f s, %.2f us per collapse; baseline %.4f s, %.2f us); "
           "simplification ours / baseline: %.2fx faster\n",
           100 * med[0] / med[1], 100 * simp_s[0] / med[1], simp_s[0],
           1e6 * simp_s[0] / ((double)(set_tris(&set) - set_tris(&simp)) / 2.0),
           simp_s[1],
           1e6 * simp_s[1] /
               ((double)(set_tris(&set) - set_tris(&bsimp)) / 2.0),
           simp_s[1] / simp_s[0]);
    printf("ours   : closed volume (cells -1..%lld, outside 0): %.4f s, "
           "%.1f MVx/s, %zu triangles; simplified: %.4f s, %zu triangles "
           "(%.1f%%); baseline %.4f s, %zu triangles\n",
           (long long)c[0], med[2], vox / med[2] / 1e6, set_tris(&cset), med[3],
           set_tris(&csimp),
           100.0 * (double)set_tris(&csimp) / (double)set_tris(&cset), med[5],
           set_tris(&bcsimp));
    printf("cpu    : CPU seconds (medians): chunk %.4f, + ours %.4f, + "
           "baseline %.4f; closed %.4f, + ours %.4f, + baseline %.4f; "
           "simplification ours / baseline: %.2fx faster (chunk), %.2fx "
           "(closed)\n",
           cmed[0], cmed[1], cmed[4], cmed[2], cmed[3], cmed[5],
           (cmed[4] - cmed[0]) / (cmed[1] - cmed[0]),
           (cmed[5] - cmed[2]) / (cmed[3] - cmed[2]));
    printf("bytes  : ours and the baseline write %s (chunk), %s (closed)\n",
           sets_equal(&simp, &bsimp) ? "the same bytes" : "DIFFERENT bytes",
           sets_equal(&csimp, &bcsimp) ? "the same bytes" : "DIFFERENT bytes");
    volume_stats(&cset, &os, res, 1000, &vs[0]);
    volume_stats(&csimp, &os, res, 1000, &vs[1]);
    volume_stats(&bcsimp, &os, res, 1000, &vs[2]);
    print_volume_stats("closed", &vs[0]);
    print_volume_stats("simplified", &vs[1]);
    print_volume_stats("baseline", &vs[2]);
    for (int r = 0; r < RUNS; r++)
        t[r] = mesh_cropped(&os, lab, s, buf, &tris_cropped);
    med_label = bench_median(t, RUNS);
    printf("ours   : per label (bbox copied out, then cnx_mesh_label): "
           "%.4f s, %.1f MVx/s of chunk, %.1f MVx/s of bboxes, %zu "
           "triangles\n",
           med_label, vox / med_label / 1e6, bbox_vox / med_label / 1e6,
           tris_cropped);
    fflush(stdout);

    if (run_peer(lab, s, cid, &pr) == 0) {
        printf("peer   : skimage marching_cubes per label (bbox + 1, padded "
               "mask): %.0f labels, %.0f triangles\n",
               pr.labels, pr.tris);
        printf("peer   : whole (all labels): %.4f s, %.1f MVx/s of chunk; "
               "+ bbox pass (np.unique + find_objects, %.4f s): %.2f MVx/s\n",
               pr.mesh_s, vox / pr.mesh_s / 1e6, pr.bbox_s,
               vox / (pr.mesh_s + pr.bbox_s) / 1e6);
        printf("peer   : per label: %.1f MVx/s of bboxes, %.2f ms per label\n",
               bbox_vox / pr.mesh_s / 1e6, 1e3 * pr.mesh_s / pr.labels);
        printf("ratio  : peer whole / ours: chunk pass %.1fx, chunk + "
               "simplify %.1fx, closed pass %.1fx; per label %.1fx\n",
               pr.mesh_s / med[0], pr.mesh_s / med[1], pr.mesh_s / med[2],
               pr.mesh_s / med_label);
        printf("check  : %-22s %8s %8s %8s %10s %10s %10s\n", "label (voxels)",
               "ours tri", "simp tri", "peer tri", "ours vol", "simp vol",
               "peer vol");
        for (int k = 0; k < NCHECK; k++) {
            const obj *o = find_obj(&os, cid[k]);
            const cnx_mesh *m = set_find(&cset, cid[k]);
            const cnx_mesh *ms = set_find(&csimp, cid[k]);
            const double rp = res[0] * res[1] * res[2];
            char name[64];
            double ptri = -1.0, pvol = -1.0;
            for (int j = 0; j < pr.nchecks; j++)
                if (pr.check_id[j] == cid[k]) {
                    ptri = pr.check_tris[j];
                    pvol = pr.check_vol[j];
                }
            snprintf(name, sizeof(name), "%llu (%lld)",
                     (unsigned long long)cid[k],
                     (long long)(o != NULL ? o->voxels : -1));
            printf("check  : %-22s %8zu %8zu %8.0f %10.1f %10.1f %10.1f\n",
                   name, m != NULL ? m->ntris : 0, ms != NULL ? ms->ntris : 0,
                   ptri, m != NULL ? mesh_volume(m) / rp : 0.0,
                   ms != NULL ? mesh_volume(ms) / rp : 0.0, pvol);
        }
    }
    status = 0;
    goto done;
oom:
    fprintf(stderr, "bench_mesh: out of memory\n");
done:
    cnx_mesh_set_free(&set);
    cnx_mesh_set_free(&simp);
    cnx_mesh_set_free(&cset);
    cnx_mesh_set_free(&csimp);
    cnx_mesh_set_free(&bsimp);
    cnx_mesh_set_free(&bcsimp);
    free(order);
    free(os.objs);
    free(os.slot);
    free(buf);
    free(lab);
    free(data);
    return status;
}
